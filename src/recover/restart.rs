//! Restart a job (all its pods at once) or one pod.

use super::MANAGED_BY;
use super::error::{RecoverError, api_code, api_error};
use crate::api::policy::WorkloadKind;
use crate::workload::{JobRef, pod_selector};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, PostParams, Preconditions, PropagationPolicy,
};
use kube::core::TypeMeta;
use kube::discovery::ApiResource;
use kube::{Client, ResourceExt};
use serde_json::json;

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
/// (generateName `<job>-rebound-`, owned by the job so it is
/// garbage-collected with it), plus a `GET` of the job when its uid is not
/// known (the Command's target needs it), plus the `deletecollection` when
/// the Command kind is not installed. A job with no pods left (already
/// being restarted) is not an error: `pods_deleted` is 0. A single-pod job
/// is deleted by name with its uid as precondition.
pub async fn restart_job(client: &Client, job: &JobRef) -> Result<RestartOutcome, RecoverError> {
    let mut requests = 0;
    if job.kind == WorkloadKind::VolcanoJob {
        if let Some(command) = create_volcano_command(client, job, &mut requests).await? {
            return Ok(RestartOutcome {
                path: RestartPath::VolcanoCommand { command },
                pods_deleted: 0,
                requests,
            });
        }
        tracing::info!(job = %job.id(), "bus.volcano.sh Command is not installed; deleting the job's pods instead");
        let pods_deleted = delete_pods_of(client, job, &mut requests).await?;
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
    let pods_deleted = delete_pods_of(client, job, &mut requests).await?;
    Ok(RestartOutcome {
        path: RestartPath::DeletedPods,
        pods_deleted,
        requests,
    })
}

/// The `bus.volcano.sh/v1alpha1` Command resource.
fn command_resource() -> ApiResource {
    ApiResource {
        group: "bus.volcano.sh".into(),
        version: "v1alpha1".into(),
        api_version: "bus.volcano.sh/v1alpha1".into(),
        kind: "Command".into(),
        plural: "commands".into(),
    }
}

/// Create the Command `vcctl job restart` creates and return its name;
/// `None` when the Command kind is not installed (404 on the create).
async fn create_volcano_command(
    client: &Client,
    job: &JobRef,
    requests: &mut u32,
) -> Result<Option<String>, RecoverError> {
    let id = job.id();
    let uid = match &job.uid {
        Some(uid) => uid.clone(),
        None => {
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &job.namespace, &job.api_resource());
            *requests += 1;
            let obj = api.get(&job.name).await.map_err(api_error(
                &id,
                "get the Volcano job for its uid",
                *requests,
            ))?;
            obj.uid().unwrap_or_default()
        }
    };
    let owner = JobRef {
        uid: Some(uid.clone()),
        ..job.clone()
    }
    .owner_reference();
    let command = DynamicObject {
        types: Some(TypeMeta {
            api_version: "bus.volcano.sh/v1alpha1".into(),
            kind: "Command".into(),
        }),
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-rebound-", job.name)),
            namespace: Some(job.namespace.clone()),
            labels: Some(
                [(
                    "app.kubernetes.io/managed-by".to_string(),
                    MANAGED_BY.to_string(),
                )]
                .into(),
            ),
            owner_references: owner.map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        data: json!({
            "action": "RestartJob",
            "target": {"apiVersion": job.api_version, "kind": "Job", "name": job.name, "uid": uid},
            "reason": "Rebound",
            "message": "restarted by rebound after a fault",
        }),
    };
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &job.namespace, &command_resource());
    *requests += 1;
    match api.create(&PostParams::default(), &command).await {
        Ok(created) => Ok(Some(created.name_any())),
        Err(e) if api_code(&e) == Some(404) => Ok(None),
        Err(e) => Err(api_error(
            &id,
            format!("create commands.bus.volcano.sh in {}", job.namespace),
            *requests,
        )(e)),
    }
}

/// One `deletecollection` of the job's pods; the number deleted.
async fn delete_pods_of(
    client: &Client,
    job: &JobRef,
    requests: &mut u32,
) -> Result<usize, RecoverError> {
    let selector = pod_selector(job).unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &job.namespace);
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    *requests += 1;
    let deleted = pods
        .delete_collection(&dp, &ListParams::default().labels(&selector))
        .await
        .map_err(api_error(
            &job.id(),
            format!(
                "deletecollection pods in {} labelSelector={selector}",
                job.namespace
            ),
            *requests,
        ))?;
    Ok(deleted.left().map_or(0, |list| list.items.len()))
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
