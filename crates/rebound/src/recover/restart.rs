//! Restart a job (all its pods at once) or one pod.

use super::error::{RecoverError, api_code, api_error};
use crate::api::policy::WorkloadKind;
use crate::workload::{JobRef, pod_selector};
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Preconditions, PropagationPolicy};
use kube::core::ObjectList;

mod volcano;

use volcano::create_volcano_command;

/// How a job restart was carried out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestartPath {
    /// One `deletecollection` of the job's pods; the job's operator
    /// recreates them.
    DeletedPods,
    /// A Volcano `bus.volcano.sh/v1alpha1` Command `RestartJob` was created
    /// (Volcano kills and recreates the pods itself, counting the retry).
    VolcanoCommand { command: String },
    /// Volcano's Command kind is not installed (404): the pods were deleted
    /// instead.
    VolcanoFallbackDeletedPods,
    /// A job that is a single pod: that pod was deleted.
    DeletedPod,
    /// A JobSet's child Jobs were deleted (JobSet makes them anew) and
    /// their pods with them.
    DeletedChildJobs { jobs: usize },
}

/// A child Job of a JobSet, as its pods name it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ChildJob {
    pub name: String,
    pub uid: String,
}

/// The label the Job controller puts on its pods: their Job's uid.
pub const JOB_UID_LABEL: &str = "batch.kubernetes.io/controller-uid";
/// The label the Job controller puts on its pods: their Job's name.
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";

/// Restart a JobSet as JobSet's own restart does: delete its child Jobs
/// `jobs` (each by name, its uid as precondition, so a Job JobSet has
/// already made anew is left alone), then their pods in one
/// `deletecollection` selected by `selector` and the Jobs' uids (never a
/// pod of a new Job). Deleting a Job before its pods keeps the Job
/// controller from counting the pods as failed, and JobSet, finding a
/// child missing, makes it again: nothing of `maxRestarts` or any
/// `backoffLimit` is spent, and there is no failure backoff.
/// Idempotent: a retry deletes only what is left of the old Jobs and
/// pods. `1 + jobs` requests.
pub async fn restart_through_child_jobs(
    client: &Client,
    job: &JobRef,
    selector: &str,
    jobs: &[ChildJob],
    pods_rv: Option<&str>,
) -> Result<RestartOutcome, RecoverError> {
    use k8s_openapi::api::batch::v1::Job;
    let api: Api<Job> = Api::namespaced(client.clone(), &job.namespace);
    let mut requests = 0;
    for j in jobs {
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            preconditions: Some(Preconditions {
                uid: Some(j.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        requests += 1;
        match api.delete(&j.name, &dp).await {
            Ok(_) => {}
            // Gone already, or a new Job of that name (JobSet made it
            // anew after an earlier attempt): nothing to delete.
            Err(e) if matches!(api_code(&e), Some(404 | 409)) => {}
            Err(e) => {
                return Err(api_error(
                    &job.id(),
                    format!("delete job {}/{}", job.namespace, j.name),
                    requests,
                )(e));
            }
        }
    }
    let uids: Vec<&str> = jobs.iter().map(|j| j.uid.as_str()).collect();
    let pods_selector = format!("{selector},{JOB_UID_LABEL} in ({})", uids.join(","));
    let pods_deleted = delete_pods_by(client, job, &pods_selector, pods_rv, &mut requests).await?;
    Ok(RestartOutcome {
        path: RestartPath::DeletedChildJobs { jobs: jobs.len() },
        pods_deleted,
        requests,
    })
}

/// What `restart_job` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestartOutcome {
    pub path: RestartPath,
    /// Pods the API server reported deleted; 0 when the job was already
    /// being restarted (no pods left), or for a Volcano Command.
    pub pods_deleted: usize,
    pub requests: u32,
}

/// Restart a job: delete all its pods in one request so its operator
/// recreates them together (from the last checkpoint), or, for Volcano, ask
/// Volcano to restart it with a `RestartJob` Command.
///
/// One request in the common case: `DELETE
/// /api/v1/namespaces/<ns>/pods?labelSelector=<pod_selector>` with
/// `propagationPolicy: Background`. Volcano: one `POST` of the Command
/// (named by `volcano::volcano_command_name` from the job's uid and the restart
/// `generation`, owned by the job so it is garbage-collected with it), plus
/// a `GET` of the job when its uid is not known (the Command's target needs
/// it), plus the `deletecollection` when the Command kind is not installed.
/// A retry of the same restart whose first answer was lost meets its own
/// Command (409): that is success, after a `GET` shows it targets the same
/// job uid. A job with no pods left (already being restarted) is not an
/// error: `pods_deleted` is 0. A single-pod job is deleted by name with its
/// uid as precondition.
///
/// `pods_rv` (the resource version of the last pod event the caller's
/// watch delivered) lets the server list the pods to delete from its watch
/// cache once that cache is at least that new, instead of by a consistent
/// read: a real kube-apiserver otherwise reads every pod of the namespace
/// from etcd (or waits for the cache to prove itself fresh) before the
/// first delete. No pod the caller knows of can be missed: the cache has
/// seen all of them; a pod created since is a new incarnation already.
pub async fn restart_job(
    client: &Client,
    job: &JobRef,
    generation: Option<u64>,
    pods_rv: Option<&str>,
) -> Result<RestartOutcome, RecoverError> {
    let mut requests = 0;
    if job.kind == WorkloadKind::VolcanoJob {
        let generation = generation.unwrap_or(0);
        if let Some(command) =
            create_volcano_command(client, job, generation, &mut requests).await?
        {
            return Ok(RestartOutcome {
                path: RestartPath::VolcanoCommand { command },
                pods_deleted: 0,
                requests,
            });
        }
        tracing::info!(job = %job.id(), "bus.volcano.sh Command is not installed; deleting the job's pods instead");
        let pods_deleted = delete_pods_of(client, job, pods_rv, &mut requests).await?;
        return Ok(RestartOutcome {
            path: RestartPath::VolcanoFallbackDeletedPods,
            pods_deleted,
            requests,
        });
    }
    if pod_selector(job).is_none() {
        let pod = restart_pod(client, &job.namespace, &job.name, job.uid.as_deref()).await?;
        return Ok(RestartOutcome {
            path: RestartPath::DeletedPod,
            pods_deleted: usize::from(pod.deleted),
            requests: pod.requests,
        });
    }
    let pods_deleted = delete_pods_of(client, job, pods_rv, &mut requests).await?;
    Ok(RestartOutcome {
        path: RestartPath::DeletedPods,
        pods_deleted,
        requests,
    })
}

/// One `deletecollection` of the job's pods; the number deleted. With
/// `pods_rv`, listed from the server's cache no older than it; a server
/// whose cache cannot reach it in time (504, another replica of an HA
/// control plane lagging) gets the request again as a consistent read.
async fn delete_pods_of(
    client: &Client,
    job: &JobRef,
    pods_rv: Option<&str>,
    requests: &mut u32,
) -> Result<usize, RecoverError> {
    let selector = pod_selector(job).unwrap_or_default();
    delete_pods_by(client, job, &selector, pods_rv, requests).await
}

/// One `deletecollection` of the pods `selector` names (see
/// [`delete_pods_of`]).
async fn delete_pods_by(
    client: &Client,
    job: &JobRef,
    selector: &str,
    pods_rv: Option<&str>,
    requests: &mut u32,
) -> Result<usize, RecoverError> {
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    let lp = ListParams::default().labels(selector);
    let request = || {
        format!(
            "deletecollection pods in {} labelSelector={selector}",
            job.namespace
        )
    };
    *requests += 1;
    let deleted = match deletecollection_pods(client, &job.namespace, &dp, &lp, pods_rv).await {
        Err(e) if pods_rv.is_some() && api_code(&e) == Some(504) => {
            tracing::debug!(job = %job.id(), "the watch cache did not reach the pods' resource version in time; deleting by a consistent read");
            *requests += 1;
            deletecollection_pods(client, &job.namespace, &dp, &lp, None).await
        }
        r => r,
    }
    .map_err(api_error(&job.id(), request(), *requests))?;
    Ok(deleted)
}

/// `DELETE .../pods?labelSelector=...` (the number of pods deleted), with `resourceVersion` and
/// `resourceVersionMatch=NotOlderThan` when `rv` is given (kube's
/// `Api::delete_collection` sends the selectors only).
async fn deletecollection_pods(
    client: &Client,
    namespace: &str,
    dp: &DeleteParams,
    lp: &ListParams,
    rv: Option<&str>,
) -> kube::Result<usize> {
    let path = <Pod as kube::Resource>::url_path(&(), Some(namespace));
    let mut req = kube::core::Request::new(path)
        .delete_collection(dp, lp)
        .map_err(kube::Error::BuildRequest)?;
    // Resource versions are opaque: one that is not plain URL-safe text
    // is not sent, and the read stays consistent.
    if let Some(rv) =
        rv.filter(|rv| !rv.is_empty() && rv.bytes().all(|b| b.is_ascii_alphanumeric()))
    {
        let uri = format!(
            "{}&resourceVersion={rv}&resourceVersionMatch=NotOlderThan",
            req.uri()
        );
        // Alphanumeric values keep the URI valid; were it not, the
        // request would go out as a consistent read.
        if let Ok(with_rv) = uri.parse() {
            *req.uri_mut() = with_rv;
        }
    }
    req.extensions_mut().insert("delete_collection");
    let answer = client.request_status::<ObjectList<Pod>>(req).await?;
    Ok(answer.left().map_or(0, |list| list.items.len()))
}

/// What `restart_pod` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRestartOutcome {
    /// False when the pod was already gone, or is another pod now (the uid
    /// precondition failed): a stale decision, nothing to do.
    pub deleted: bool,
    pub requests: u32,
}

/// Delete one pod so its controller recreates it (graded escalation's first
/// step). With `uid`, the delete carries a uid precondition: a pod recreated
/// under the same name since the decision is not deleted (the API server
/// answers 409, reported as `deleted: false`). One request.
pub async fn restart_pod(
    client: &Client,
    namespace: &str,
    pod: &str,
    uid: Option<&str>,
) -> Result<PodRestartOutcome, RecoverError> {
    delete_pod(client, namespace, pod, uid, None).await
}

/// [`restart_pod`] with a grace period: `Some(0)` force-deletes a pod whose
/// node cannot confirm (NotReady, unreachable).
pub async fn delete_pod(
    client: &Client,
    namespace: &str,
    pod: &str,
    uid: Option<&str>,
    grace_seconds: Option<i64>,
) -> Result<PodRestartOutcome, RecoverError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let dp = DeleteParams {
        grace_period_seconds: grace_seconds.and_then(|g| u32::try_from(g).ok()),
        propagation_policy: Some(PropagationPolicy::Background),
        preconditions: uid.map(|uid| Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match pods.delete(pod, &dp).await {
        Ok(_) => Ok(PodRestartOutcome {
            deleted: true,
            requests: 1,
        }),
        Err(e) if matches!(api_code(&e), Some(404 | 409)) => Ok(PodRestartOutcome {
            deleted: false,
            requests: 1,
        }),
        Err(e) => Err(api_error(
            &format!("pod/{namespace}/{pod}"),
            "delete pod",
            1,
        )(e)),
    }
}

#[cfg(test)]
mod tests;
