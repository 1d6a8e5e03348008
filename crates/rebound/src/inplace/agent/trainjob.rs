//! Which job a JobSet pod's agent follows: the TrainJob that controls the
//! JobSet, if any, else the JobSet; one look at start, apart from the
//! runner's watch loop.

use kube::api::{Api, DynamicObject};
use kube::core::ObjectMeta;

use super::super::job_ref::JobRef;
use super::RunnerConfig;
use super::backoff::Backoff;

/// Tries of [`follow_trainjob`]'s read before it settles for the JobSet.
const OWNER_READS: u32 = 3;

/// The job whose generation the agent of a JobSet's pod follows: the
/// TrainJob that controls the JobSet, if one does (Kubeflow Trainer v2
/// makes a JobSet of each TrainJob's name, and rebound keeps the generation
/// on the TrainJob), else the JobSet itself. A pod cannot tell the two
/// apart by its labels, so the admission policy wires every JobSet pod to
/// its JobSet, and the agent looks once. Any other job kind is returned
/// as is, without a request. A JobSet that cannot be read after a few
/// tries is followed itself (the runner then reads it again, and fails
/// open if it never can).
pub async fn follow_trainjob(client: &kube::Client, job: &JobRef, cfg: &RunnerConfig) -> JobRef {
    resolve(client, job, cfg).await.0
}

/// [`follow_trainjob`], with the JobSet's metadata when the JobSet itself
/// is followed: the runner's first read, so a JobSet's agent still makes
/// one `GET` per run.
pub(super) async fn resolve(
    client: &kube::Client,
    job: &JobRef,
    cfg: &RunnerConfig,
) -> (JobRef, Option<ObjectMeta>) {
    if job.group != "jobset.x-k8s.io" || job.plural != "jobsets" {
        return (job.clone(), None);
    }
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &job.namespace, &job.api_resource());
    let mut backoff = Backoff::new(cfg);
    for attempt in 1..=OWNER_READS {
        match tokio::time::timeout(cfg.request_timeout, api.get_metadata_opt(&job.name)).await {
            Ok(Ok(Some(m))) => {
                return match trainjob_owner(&m.metadata, &job.namespace) {
                    Some(owner) => (owner, None),
                    None => (job.clone(), Some(m.metadata)),
                };
            }
            Ok(Ok(None)) => return (job.clone(), None),
            Ok(Err(e)) => {
                tracing::debug!(job = %job, error = %e, attempt, "restart agent: cannot read the JobSet's owner");
            }
            Err(_) => {
                tracing::debug!(job = %job, attempt, "restart agent: reading the JobSet's owner timed out");
            }
        }
        if attempt < OWNER_READS {
            tokio::time::sleep(backoff.next_delay()).await;
        }
    }
    (job.clone(), None)
}

/// The TrainJob that controls a JobSet (its controller owner reference of
/// kind `TrainJob` in `trainer.kubeflow.org`).
fn trainjob_owner(meta: &ObjectMeta, namespace: &str) -> Option<JobRef> {
    let o = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))?;
    let (group, version) = o.api_version.split_once('/')?;
    (group == "trainer.kubeflow.org" && o.kind == "TrainJob" && !o.name.is_empty()).then(|| {
        JobRef {
            group: group.to_owned(),
            version: version.to_owned(),
            plural: "trainjobs".to_owned(),
            namespace: namespace.to_owned(),
            name: o.name.clone(),
        }
    })
}
