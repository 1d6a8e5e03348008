//! The recovery core's reproduced defects (issue #13), end to end on both
//! servers: a graded recovery that succeeds leaves its healthy replacement
//! alone; a rewritten node condition is not a repeat of its faults; a
//! fault present at start-up waits for the jobs and their recorded
//! cooldown; a fault that arrives before its job's object waits for it.

use super::*;
use rebound::fault::wire::{self, WireFault};

/// A GpuFault condition as the agent writes it: one line per fault with
/// its occurrence (`at=`, `n=`).
fn gpu_lines(lines: &[(&str, &str, chrono::DateTime<chrono::Utc>, u64)]) -> String {
    let faults: Vec<WireFault> = lines
        .iter()
        .map(|(code, device, at, n)| WireFault {
            source: "NvidiaXid".into(),
            code: (*code).into(),
            device: Some((*device).into()),
            at: Some(wire::format_at(*at)),
            count: Some(*n),
            ..Default::default()
        })
        .collect();
    wire::format_condition_message(&faults)
}

async fn graded_recovery_that_succeeds_never_deletes_the_replacement(server: Server) {
    let policy = r#"
apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: graded, namespace: team-a}
spec:
  selector: {matchLabels: {kcover.io/cascading-recovery: "true"}}
  cooldown: 0s
  escalation: {restartPodFirst: true, jobAfter: 3s}
"#;
    let (bed, ctl) = bed_with(server, 4, policy, None).await;
    let team_a = bed.ns("team-a");
    let sel = running_pytorchjob(&bed, &team_a, "pt", 1).await;
    let before = running(&bed, &team_a, &sel)
        .await
        .into_iter()
        .find(|p| p.metadata.name.as_deref() == Some("pt-worker-0"))
        .and_then(|p| p.metadata.uid)
        .expect("worker uid");
    bed.cluster
        .fail_container(&team_a, "pt-worker-0", "pytorch", 1, "Error")
        .await
        .expect("fail");
    let replacement = wait("the worker replaced and running", T, || async {
        running(&bed, &team_a, &sel)
            .await
            .into_iter()
            .find(|p| {
                p.metadata.name.as_deref() == Some("pt-worker-0")
                    && p.metadata.uid.as_deref() != Some(before.as_str())
            })
            .and_then(|p| p.metadata.uid)
    })
    .await;
    // Well past jobAfter (and past where the old reactor deleted the
    // healthy replacement again): nothing more happens.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        requests(&bed, "delete", "pods", "").len(),
        1,
        "one pod deleted: the failed one"
    );
    assert_eq!(job_restarts(&bed, &team_a, "pt").await, 0, "no job restart");
    let now = running(&bed, &team_a, &sel)
        .await
        .into_iter()
        .find(|p| p.metadata.name.as_deref() == Some("pt-worker-0"))
        .and_then(|p| p.metadata.uid);
    assert_eq!(
        now.as_deref(),
        Some(replacement.as_str()),
        "the replacement stands"
    );
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
}

async fn a_rewritten_node_condition_is_not_a_repeat(server: Server) {
    let (bed, ctl) = bed_with(server, 4, "", None).await;
    let ml = bed.ns("ml");
    let sel = running_pytorchjob(&bed, &ml, "pt", 1).await;
    let n = node_of(&bed, &ml, &sel).await;
    let t13 = chrono::Utc::now();
    // XID 13 on GPU 0 restarts the job (level RestartJob).
    bed.cluster
        .set_node_condition(
            &n,
            wire::GPU_CONDITION,
            "True",
            "Xid",
            &gpu_lines(&[("13", "0", t13, 1)]),
        )
        .await
        .expect("condition");
    wait("the job restarted for XID 13", T, || async {
        (job_restarts(&bed, &ml, "pt").await == 1).then_some(())
    })
    .await;
    // The agent adds XID 31 on GPU 1 (the whole condition is rewritten),
    // then posts two heartbeats: none of that repeats XID 13.
    let t31 = chrono::Utc::now();
    let both = gpu_lines(&[("13", "0", t13, 1), ("31", "1", t31, 1)]);
    for _ in 0..3 {
        bed.cluster
            .set_node_condition(&n, wire::GPU_CONDITION, "True", "MultipleFaults", &both)
            .await
            .expect("condition");
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    assert!(
        !cordoned(&node(&bed, &n).await),
        "XID 13 must not escalate to ResetDevice on a rewrite"
    );
    // A real repeat of XID 13 on GPU 0 (n=2) escalates and cordons.
    let again = gpu_lines(&[("13", "0", t13, 2), ("31", "1", t31, 1)]);
    bed.cluster
        .set_node_condition(&n, wire::GPU_CONDITION, "True", "MultipleFaults", &again)
        .await
        .expect("condition");
    wait("the repeat cordons", T, || async {
        cordoned(&node(&bed, &n).await).then_some(())
    })
    .await;
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
}

async fn a_fault_present_at_start_up_waits_for_the_recorded_cooldown(server: Server) {
    let policy = r#"
apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: slow, namespace: ml}
spec:
  selector: {matchLabels: {kcover.io/cascading-recovery: "true"}}
  cooldown: 5m
"#;
    let bed = bed(server, SimConfig::default()).await;
    for ns in ["ml", "team-a", "team-b"] {
        bed.ensure_namespace(ns).await.expect("namespace");
    }
    bed.apply_yaml(BASE).await.expect("base");
    bed.apply_yaml(policy).await.expect("policy");
    let ml = bed.ns("ml");
    running_pytorchjob(&bed, &ml, "pt", 1).await;
    // A previous leader restarted the job 5 s ago (its record on the job).
    let at = chrono::Utc::now() - chrono::Duration::seconds(5);
    let history = serde_json::json!([{"at": at.to_rfc3339(), "generation": 1, "tier": "Recreate"}]);
    let patch = serde_json::json!({"metadata": {"annotations": {
        "rebound.dev/restart-history": history.to_string(),
        "rebound.dev/restart-count": "1",
        "rebound.dev/last-restart": at.to_rfc3339(),
        "rebound.dev/restart-generation": "1",
        "rebound.dev/restart-released": "1",
    }}});
    Api::<DynamicObject>::namespaced_with(bed.client(), &ml, &pytorchjob_resource())
        .patch(
            "pt",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .expect("record");
    // Since then a worker failed; then controllers start, one after another.
    bed.cluster
        .fail_container(&ml, "pt-worker-0", "pytorch", 1, "Error")
        .await
        .expect("fail");
    for round in 0..3 {
        let ctl = bed
            .start_controller(args(&bed, |_| {}))
            .await
            .expect("controller");
        // The positive control first: this controller decided the fault
        // (held for the recorded cooldown); then nothing was restarted.
        wait("the fault decided and held", T, || async {
            (decisions(&ctl, "Cooldown") >= 1.0).then_some(())
        })
        .await;
        assert_eq!(
            job_restarts(&bed, &ml, "pt").await,
            0,
            "start-up {round}: the recorded cooldown holds"
        );
        ctl.kill();
    }
}

/// The controller's watch of the job kind reconnects late while the other
/// watches deliver (the proxy, or the embedded server, holds it back): a
/// job created meanwhile gets its pods and a node fault before the
/// controller sees the job's object. The decision waits for the object
/// and restarts the job once the watch is back; it used to be skipped as
/// `NoPolicy` (no labels to select a policy by), for good. Found as the
/// admission tests' flake on the real server.
async fn a_fault_before_its_jobs_object_restarts_the_job_when_the_watch_catches_up(server: Server) {
    let (bed, ctl) = bed_with(server, 4, "", None).await;
    let ml = bed.ns("ml");
    let hold = Duration::from_secs(12);
    let held_at = std::time::Instant::now();
    bed.inject()
        .hold_watches("rebound-controller/", "pytorchjobs", hold);
    let sel = running_pytorchjob(&bed, &ml, "late", 1).await;
    let n = node_of(&bed, &ml, &sel).await;
    // An app-level XID (RestartJob) on the node of the job's pods.
    xid_condition(&bed, &n, "13").await;
    assert!(
        held_at.elapsed() < hold - Duration::from_secs(2),
        "the fault was written after the hold ended ({:?}): the race is not tested",
        held_at.elapsed()
    );
    assert_eq!(restarts_in(&bed, &ml, PT, "late"), 0, "nothing yet");
    wait(
        "the job restarted once its watch is back",
        hold + T,
        || async { (restarts_in(&bed, &ml, PT, "late") >= 1).then_some(()) },
    )
    .await;
    assert!(
        held_at.elapsed() >= hold,
        "restarted before the controller could see the job's object"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        restarts_in(&bed, &ml, PT, "late"),
        1,
        "one fault, one restart"
    );
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
}

e2e!(graded_recovery_that_succeeds_never_deletes_the_replacement);
e2e!(a_fault_before_its_jobs_object_restarts_the_job_when_the_watch_catches_up);
e2e!(a_rewritten_node_condition_is_not_a_repeat);
e2e!(a_fault_present_at_start_up_waits_for_the_recorded_cooldown);
