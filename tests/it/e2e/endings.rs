//! No barrier stays closed and no removed job kind stops recovery
//! (issue #22), end to end on both servers: a controller killed between
//! the generation patch and the release, back after `fallbackAfter` with
//! no tier left to fall back to, releases the barrier; a job-kind CRD
//! deleted while the controller runs leaves recovery working for the
//! other kinds. (The defect behind the second, a relist of the removed
//! kind left open for good, needs the kind's watch to relist before
//! discovery drops the kind: a race these servers rarely lose, and no
//! injected fault forces a real server to relist. The core's tests
//! `a_removed_job_kind_leaves_the_core_ready` and
//! `an_events_relist_does_not_hold_a_recovery` drive it exactly.)

use super::tiers::{Kind, job_annotations, ready, running_job, starting_in, uid};
use super::*;
use rebound::inplace::{GENERATION_ANNOTATION, RELEASED_ANNOTATION};

/// In place only: when the job is not running again in time there is no
/// further tier, so the recovery ends and only a release lets it go on.
const ONLY_IN_PLACE: &str = r#"
apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: tiers, namespace: ml}
spec:
  selector:
    matchLabels: {kcover.io/cascading-recovery: "true"}
  # The fault stays present: once the recovery ends it is decided again,
  # and waits for the cooldown (with none, a new restart would follow).
  cooldown: 5m
  restart:
    tiers: [InPlace]
    fallbackAfter: 2s
"#;

async fn a_controller_killed_before_the_release_releases_when_it_returns(server: Server) {
    // Containers take 6 s to start: the agents are not back at the barrier
    // when the fallback time has passed (the recovery then ends with no
    // tier left; it used to end without a release, and the workers waited
    // behind their startup probe for a day).
    let (bed, ctl) = bed_with(server, 4, ONLY_IN_PLACE, Some(starting_in("6s"))).await;
    let ml = bed.ns("ml");
    let pods = running_job(&bed, &ml, Kind::JobSet, 2, true).await;
    let node = node_name(&pods[0]);
    xid_condition(&bed, &node, "13").await;
    wait("generation 1 raised", T, || async {
        let a = job_annotations(&bed, &ml, Kind::JobSet).await;
        (a.get(GENERATION_ANNOTATION).map(String::as_str) == Some("1")).then_some(())
    })
    .await;
    // Killed between the generation patch and the release.
    ctl.kill();
    let a = job_annotations(&bed, &ml, Kind::JobSet).await;
    assert_ne!(
        a.get(RELEASED_ANNOTATION).map(String::as_str),
        Some("1"),
        "killed before the release"
    );
    // Back after more than fallbackAfter (and the 3 s Lease).
    tokio::time::sleep(Duration::from_secs(4)).await;
    let ctl = bed
        .start_controller(args(&bed, |_| {}))
        .await
        .expect("controller");
    wait("the barrier released", Duration::from_secs(40), || async {
        let a = job_annotations(&bed, &ml, Kind::JobSet).await;
        (a.get(RELEASED_ANNOTATION).map(String::as_str) == Some("1")).then_some(())
    })
    .await;
    // The same pods run again, restarted in place: nothing was recreated,
    // and it was one restart.
    let after = wait("the job running again", Duration::from_secs(40), || async {
        let p = running(&bed, &ml, Kind::JobSet.selector()).await;
        (p.len() == 2 && p.iter().all(ready)).then_some(p)
    })
    .await;
    let mut was: Vec<String> = pods.iter().map(uid).collect();
    let mut now: Vec<String> = after.iter().map(uid).collect();
    was.sort();
    now.sort();
    assert_eq!(now, was, "the same pods");
    let a = job_annotations(&bed, &ml, Kind::JobSet).await;
    assert_eq!(
        a.get("rebound.dev/restart-count").map(String::as_str),
        Some("1")
    );
    assert_eq!(a.get(GENERATION_ANNOTATION).map(String::as_str), Some("1"));
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
}

async fn a_job_kind_removed_while_running_leaves_recovery_working(server: Server) {
    let (bed, ctl) = bed_with(server, 4, "", None).await;
    let ml = bed.ns("ml");
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(bed.client());
    // The MPIJob CRD goes away (an operator uninstalled) while its watch
    // runs.
    crds.delete("mpijobs.kubeflow.org", &Default::default())
        .await
        .expect("delete the MPIJob CRD");
    wait("the MPIJob CRD gone", T, || async {
        crds.get_opt("mpijobs.kubeflow.org")
            .await
            .ok()
            .and_then(|c| c.is_none().then_some(()))
    })
    .await;
    // Give discovery and the kind's watch time to notice.
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Recovery goes on for the other kinds.
    let sel = running_pytorchjob(&bed, &ml, "pt", 2).await;
    let before = running(&bed, &ml, &sel).await;
    let victim = before[0].metadata.name.clone().unwrap_or_default();
    bed.cluster
        .fail_container(&ml, &victim, "pytorch", 1, "Error")
        .await
        .expect("fail the container");
    wait("the PyTorchJob restarted", T, || async {
        (restart_count(&bed, &ml, "pt").await >= 1).then_some(())
    })
    .await;
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
    // Later beds on a shared control plane find the CRD again: the real
    // operator's, or the simulated one's.
    if bed.runs_real_operators() {
        tokio::task::spawn_blocking(|| {
            rebound_sim::envtest::operators::shared()
                .expect("real operators")
                .restore_crds()
                .expect("the real operators' CRDs again")
        })
        .await
        .expect("restore the CRDs");
    } else if let Some(yaml) = rebound_sim::cluster::JOB_CRDS
        .iter()
        .find(|y| y.contains("mpijobs.kubeflow.org"))
    {
        let _ = rebound_sim::cluster::install_crds(&bed.client(), yaml).await;
    }
}

e2e!(a_controller_killed_before_the_release_releases_when_it_returns);
e2e!(a_job_kind_removed_while_running_leaves_recovery_working);
