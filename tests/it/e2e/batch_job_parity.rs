//! The embedded batch Job controller against kube-controller-manager's
//! (issue 32 item 8): a pod deleted before it finished counts as failed,
//! and its replacement waits the Job controller's pod failure backoff
//! (10 s for the first failure, kubernetes `pkg/controller/job/
//! backoff_utils.go`). The same test on both servers: on the embedded one
//! the simulated controller with the published limits, on the real one
//! kube-controller-manager itself; what rebound's restart of a Job-backed
//! kind must not spend, and the resume model counts, is what both do.

use super::*;
use k8s_openapi::api::batch::v1::Job;
use kube::api::DeleteParams;
use rebound_sim::actors::ratelimit::OperatorLimits;
use rebound_sim::cluster::SimConfig;

const SEL: &str = "batch.kubernetes.io/job-name=bj";

async fn a_deleted_pod_counts_as_failed_and_its_replacement_waits_the_backoff(server: Server) {
    let cfg = SimConfig {
        nodes: 2,
        operator_limits: OperatorLimits::published(),
        ..SimConfig::default()
    };
    // No opt-in label: rebound leaves the job alone.
    let (bed, ctl) = bed_with(server, 2, "", Some(cfg)).await;
    let ns = bed.ns("team-a");
    bed.cluster
        .create_batch_job(&ns, "bj", 2, &[])
        .await
        .expect("the Job");
    let pods = wait("bj running", 3 * T, || async {
        let p = running(&bed, &ns, SEL).await;
        (p.len() >= 2).then_some(p)
    })
    .await;
    let victim = pods[0].metadata.name.clone().expect("name");
    let originals: Vec<String> = pods
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    let deleted_at = chrono::Utc::now();
    Api::<Pod>::namespaced(bed.client(), &ns)
        .delete(&victim, &DeleteParams::default())
        .await
        .expect("delete");
    let jobs: Api<Job> = Api::namespaced(bed.client(), &ns);
    wait("the deleted pod counted as failed", 3 * T, || async {
        let j = jobs.get("bj").await.ok()?;
        (j.status.as_ref()?.failed? == 1).then_some(())
    })
    .await;
    let replacement = wait("its replacement", 3 * T, || async {
        let pods: Api<Pod> = Api::namespaced(bed.client(), &ns);
        pods.list(&kube::api::ListParams::default().labels(SEL))
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|p| {
                p.metadata
                    .name
                    .as_ref()
                    .is_some_and(|n| !originals.contains(n))
            })
            .find_map(|p| {
                Some(rebound::controller::time::to_chrono(
                    &p.metadata.creation_timestamp?.0,
                ))
            })
    })
    .await;
    let waited = (replacement - deleted_at).num_milliseconds() as f64 / 1000.0;
    assert!(
        (8.0..40.0).contains(&waited),
        "the replacement was made {waited:.1}s after the delete; the Job controller waits 10 s after a first failure"
    );
    let j = jobs.get("bj").await.expect("the Job");
    let failed = j
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .any(|c| c.type_ == "Failed" && c.status == "True");
    assert!(
        !failed,
        "one failure of backoffLimit 6 does not fail the Job"
    );
    ctl.shutdown().await;
}

e2e!(a_deleted_pod_counts_as_failed_and_its_replacement_waits_the_backoff);
