//! In-place restarts on the real kubelet that do not go smoothly: an agent
//! that never comes back (the recovery falls back to the next tier and the
//! barrier is released), and a repeat within ten minutes (the kubelet's
//! restart backoff). See real_node.rs for the node and the wiring.

use super::real_node::{RT, agent_rbac, create_job, running_on, wait_long};
use super::tiers::{Kind, TIERS, agent_restarts, destructive, job_annotations, ready, uid};
use super::*;
use rebound::inplace::{GENERATION_ANNOTATION, RELEASED_ANNOTATION};
use rebound_sim::envtest::node::{REBOUND_IMAGE, RealNode};

/// In place, then Recreate after 8 s; the fault stays present, so a long
/// cooldown keeps it from being decided again once the recovery ends.
const FALLBACK: &str = r#"
apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: tiers, namespace: ml}
spec:
  selector:
    matchLabels: {kcover.io/cascading-recovery: "true"}
  cooldown: 5m
  restart:
    tiers: [InPlace, Recreate]
    fallbackAfter: 8s
"#;

/// A tag of the rebound image that a test removes while its pods run, so
/// that an agent from it cannot start again (nothing can be pulled here).
const GONE: &str = "docker.io/library/rebound-e2e:gone";

/// Recoveries the controller saw end with the job running again.
fn resumed(ctl: &rebound::controller::ControllerHandle) -> f64 {
    ctl.metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with("rebound_time_to_resume_seconds_count"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Leave the shared node as found: no fault for the next test's controller.
pub(super) async fn clear_fault(bed: &Testbed, node: &RealNode) {
    bed.cluster
        .set_node_condition(
            node.name(),
            rebound::fault::wire::GPU_CONDITION,
            "False",
            "NoFault",
            "",
        )
        .await
        .expect("clear the fault");
}

async fn an_agent_that_never_comes_back_falls_back_with_the_barrier_released(
    node: &'static RealNode,
) {
    let kind = Kind::Volcano;
    node.ctr(&[
        "-n",
        "k8s.io",
        "images",
        "tag",
        "--force",
        &format!("docker.io/library/{REBOUND_IMAGE}"),
        GONE,
    ])
    .expect("tag the image");
    let (bed, ctl) = bed_with(Server::Real, 1, FALLBACK, None).await;
    let ml = bed.ns("ml");
    agent_rbac(&bed, &ml).await;
    create_job(&bed, &ml, kind, 2, node.name(), |i| {
        if i == 1 {
            GONE.into()
        } else {
            REBOUND_IMAGE.into()
        }
    })
    .await;
    let pods = running_on(&bed, &ml, kind, 2, node).await;
    node.ctr(&["-n", "k8s.io", "images", "rm", GONE])
        .expect("remove the tag");
    xid_condition(&bed, node.name(), "45").await;
    wait("generation 1 raised", T, || async {
        let a = job_annotations(&bed, &ml, kind).await;
        (a.get(GENERATION_ANNOTATION).map(String::as_str) == Some("1")).then_some(())
    })
    .await;
    let raised = Instant::now();
    // The agent of the pod whose image is gone cannot start again.
    let stuck = wait_long("an agent unable to start again", RT, node, || async {
        Api::<k8s_openapi::api::core::v1::Pod>::namespaced(bed.client(), &ml)
            .list(&kube::api::ListParams::default().labels(kind.selector()))
            .await
            .map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .find(|p| {
                p.status
                    .iter()
                    .flat_map(|s| s.init_container_statuses.iter().flatten())
                    .any(|c| {
                        c.state
                            .as_ref()
                            .and_then(|s| s.waiting.as_ref())
                            .and_then(|w| w.reason.as_deref())
                            .is_some_and(|r| r.contains("Image"))
                    })
            })
    })
    .await;
    assert!(pods.iter().any(|p| uid(p) == uid(&stuck)));
    // After fallbackAfter: Recreate (a Volcano Command), and the generation
    // released in the same write, so the recreated pods start at once.
    wait_long("the fallback to Recreate, released", RT, node, || async {
        let a = job_annotations(&bed, &ml, kind).await;
        let d = destructive(&bed);
        (a.get(RELEASED_ANNOTATION).map(String::as_str) == Some("1") && !d.is_empty()).then_some(())
    })
    .await;
    assert!(
        raised.elapsed() >= Duration::from_secs(7),
        "fell back after {:?}, before fallbackAfter (8 s)",
        raised.elapsed()
    );
    let d = destructive(&bed);
    assert!(
        d.iter()
            .all(|r| r.starts_with("create ") && r.contains("/commands")),
        "Recreate of a Volcano Job is one Command: {d:?}"
    );
    clear_fault(&bed, node).await;
    ctl.shutdown().await;
}

async fn a_repeat_within_ten_minutes_restarts_in_place_again(node: &'static RealNode) {
    let kind = Kind::Batch;
    let (bed, ctl) = bed_with(Server::Real, 1, TIERS, None).await;
    let ml = bed.ns("ml");
    agent_rbac(&bed, &ml).await;
    create_job(&bed, &ml, kind, 1, node.name(), |_| REBOUND_IMAGE.into()).await;
    let before = running_on(&bed, &ml, kind, 1, node).await;
    let mut took = Vec::new();
    for (round, code) in [(1, "63"), (2, "64")] {
        let t = Instant::now();
        xid_condition(&bed, node.name(), code).await;
        let after = wait_long(&format!("in-place restart {round}"), RT, node, || async {
            let a = job_annotations(&bed, &ml, kind).await;
            let p = running(&bed, &ml, kind.selector()).await;
            let r = round.to_string();
            (a.get(RELEASED_ANNOTATION) == Some(&r)
                && p.len() == 1
                && p.iter().all(|p| ready(p) && agent_restarts(p) == round))
            .then_some(p)
        })
        .await;
        took.push(t.elapsed());
        assert_eq!(uid(&after[0]), uid(&before[0]), "the same pod");
        // The next fault only once the controller has seen this recovery
        // end: one during it would be covered by it (real_node.rs).
        wait("the controller saw the job running again", T, || async {
            (resumed(&ctl) >= round as f64).then_some(())
        })
        .await;
    }
    // Measured, not asserted beyond RT: how the kubelet paces repeats
    // is what docs/simulated-kubelet.md records.
    eprintln!("in place on the real kubelet, twice within a minute: {took:?}");
    assert_eq!(destructive(&bed), Vec::<String>::new());
    clear_fault(&bed, node).await;
    ctl.shutdown().await;
}

real_node!(an_agent_that_never_comes_back_falls_back_with_the_barrier_released);
real_node!(a_repeat_within_ten_minutes_restarts_in_place_again);
