//! Hang detection: a job whose progress annotation (on the job or on a pod)
//! stops advancing for longer than its policy's `hang.noProgressFor` is
//! restarted; a job that keeps advancing is not, and a job that never
//! reports is restarted only under `requireProgress`. Assertions read the
//! jobs' restart records.

use super::*;
use kube::api::{Patch, PatchParams};
use serde_json::json;

const PROGRESS: &str = "rebound.dev/progress";

/// A namespace policy with hang detection (3 s) and no cooldown, so a job
/// that stays hung after its restart is restarted again.
const HANG_POLICY: &str = r#"
apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: hang, namespace: ml}
spec:
  selector: {matchLabels: {kcover.io/cascading-recovery: "true"}}
  cooldown: 0s
  restartBudget: {maxRestarts: 10, window: 1h}
  hang: {noProgressFor: 3s}
"#;

async fn set_progress(bed: &Testbed, ns: &str, job: &str, value: &str) {
    let api = Api::<DynamicObject>::namespaced_with(bed.client(), ns, &pytorchjob_resource());
    let patch = json!({"metadata": {"annotations": {PROGRESS: value}}});
    api.patch(job, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("progress annotation");
}

/// The notes of the `JobRestarted` Events about a job.
async fn restart_notes(bed: &Testbed, ns: &str, job: &str) -> Vec<String> {
    use k8s_openapi::api::events::v1::Event;
    Api::<Event>::namespaced(bed.client(), ns)
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("JobRestarted"))
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(job))
        .filter_map(|e| e.note)
        .collect()
}

async fn a_job_without_progress_is_restarted_and_a_progressing_one_is_not(server: Server) {
    let (bed, ctl) = bed_with(server, 2, HANG_POLICY, None).await;
    let ml = bed.ns("ml");
    running_pytorchjob(&bed, &ml, "stuck", 1).await;
    running_pytorchjob(&bed, &ml, "alive", 1).await;
    set_progress(&bed, &ml, "stuck", "step-1").await;
    set_progress(&bed, &ml, "alive", "step-1").await;
    // The training code of `alive` reports a new step twice a second.
    let ticker = {
        let client = bed.client();
        let ml = ml.clone();
        tokio::spawn(async move {
            let api = Api::<DynamicObject>::namespaced_with(client, &ml, &pytorchjob_resource());
            for step in 2.. {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let patch =
                    json!({"metadata": {"annotations": {PROGRESS: format!("step-{step}")}}});
                let _ = api
                    .patch("alive", &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
            }
        })
    };
    // Limit 3 s, scans every 5 s: the restart comes within about 10 s.
    let long = Duration::from_secs(30);
    wait("stuck restarted for its hang", long, || async {
        (restart_count(&bed, &ml, "stuck").await >= 1).then_some(())
    })
    .await;
    // The scan that found `stuck` idle looked at `alive` too.
    assert_eq!(
        restart_count(&bed, &ml, "alive").await,
        0,
        "a job whose progress advances is not hung"
    );
    // The record and the restart go out together; the Event follows the
    // restart's answer.
    let notes = wait("the restart Event", T, || async {
        let n = restart_notes(&bed, &ml, "stuck").await;
        (!n.is_empty()).then_some(n)
    })
    .await;
    assert!(
        notes.iter().any(|n| n.contains("Hang NoProgress")),
        "the restart Event names the hang: {notes:?}"
    );
    // Still no progress after the restart: the hang clock starts again at
    // the restart, so the job is restarted a second time.
    wait("stuck restarted again, still hung", long, || async {
        (restart_count(&bed, &ml, "stuck").await >= 2).then_some(())
    })
    .await;
    assert_eq!(restart_count(&bed, &ml, "alive").await, 0);
    ticker.abort();
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
    bed.cleanup().await;
}

/// Three policies in one namespace, told apart by the jobs' `app` label:
/// `step` reads a custom annotation, `strict` requires progress, `lenient`
/// does not. The job's selected policy decides which annotation is read.
const PER_JOB_POLICIES: &str = r#"
apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: lenient, namespace: ml}
spec:
  selector: {matchLabels: {kcover.io/cascading-recovery: "true", app: lenient}}
  cooldown: 0s
  hang: {noProgressFor: 3s}
---
apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: step, namespace: ml}
spec:
  selector: {matchLabels: {kcover.io/cascading-recovery: "true", app: step}}
  cooldown: 0s
  restartBudget: {maxRestarts: 10, window: 1h}
  hang: {noProgressFor: 3s, annotation: example.com/step}
---
apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: strict, namespace: ml}
spec:
  selector: {matchLabels: {kcover.io/cascading-recovery: "true", app: strict}}
  cooldown: 0s
  restartBudget: {maxRestarts: 10, window: 1h}
  hang: {noProgressFor: 3s, requireProgress: true}
"#;

const STEP: &str = "example.com/step";

async fn set_pod_progress(bed: &Testbed, ns: &str, pod: &str, value: &str) -> kube::Result<Pod> {
    let patch = json!({"metadata": {"annotations": {STEP: value}}});
    Api::<Pod>::namespaced(bed.client(), ns)
        .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
        .await
}

async fn running_job_labelled(bed: &Testbed, ns: &str, name: &str, app: &str) {
    bed.cluster
        .create_pytorchjob(ns, name, 0, &[OPT_IN, ("app", app)])
        .await
        .expect("create PyTorchJob");
    let sel = format!("{PT}={name}");
    wait(&format!("{ns}/{name} running"), T, || async {
        (!running(bed, ns, &sel).await.is_empty()).then_some(())
    })
    .await;
}

async fn progress_on_pods_counts_and_silence_is_a_hang_only_when_required(server: Server) {
    let (bed, ctl) = bed_with(server, 4, PER_JOB_POLICIES, None).await;
    let ml = bed.ns("ml");
    for (job, app) in [
        ("pod-stuck", "step"),
        ("pod-alive", "step"),
        ("silent-strict", "strict"),
        ("silent", "lenient"),
    ] {
        running_job_labelled(&bed, &ml, job, app).await;
    }
    // Progress under the `step` policy's own annotation, on the pods only.
    set_pod_progress(&bed, &ml, "pod-stuck-master-0", "1")
        .await
        .expect("pod progress");
    let ticker = {
        let bed_client = bed.client();
        let ml = ml.clone();
        tokio::spawn(async move {
            let pods = Api::<Pod>::namespaced(bed_client, &ml);
            for step in 1.. {
                let patch = json!({"metadata": {"annotations": {STEP: format!("{step}")}}});
                let _ = pods
                    .patch(
                        "pod-alive-master-0",
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    let long = Duration::from_secs(30);
    wait(
        "pod-stuck restarted: its pod's progress stopped",
        long,
        || async { (restart_count(&bed, &ml, "pod-stuck").await >= 1).then_some(()) },
    )
    .await;
    wait(
        "silent-strict restarted: it never reported under requireProgress",
        long,
        || async { (restart_count(&bed, &ml, "silent-strict").await >= 1).then_some(()) },
    )
    .await;
    // Both were found by scans that looked at the other two as well.
    assert_eq!(
        restart_count(&bed, &ml, "pod-alive").await,
        0,
        "progress on a pod keeps its job alive"
    );
    assert_eq!(
        restart_count(&bed, &ml, "silent").await,
        0,
        "a job that never reports is not hung without requireProgress"
    );
    ticker.abort();
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
    bed.cleanup().await;
}

e2e!(a_job_without_progress_is_restarted_and_a_progressing_one_is_not);
e2e!(progress_on_pods_counts_and_silence_is_a_hang_only_when_required);
