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
use kube::core::{ObjectList, TypeMeta};
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
/// (named by [`volcano_command_name`] from the job's uid and the restart
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

/// The name of the Command of restart `generation` of the Volcano job
/// `job` (uid `uid`): `<job>-rebound-<uid>-<generation>`, the job's name
/// shortened so the whole stays a valid object name. One restart, one
/// name: a retry cannot make a second Command.
pub fn volcano_command_name(job: &str, uid: &str, generation: u64) -> String {
    let suffix = format!("-rebound-{uid}-{generation}");
    let room = 253usize.saturating_sub(suffix.len());
    let job: String = job.chars().take(room).collect();
    format!("{}{suffix}", job.trim_end_matches(['-', '.']))
}

/// Create the Command `vcctl job restart` creates and return its name;
/// `None` when the Command kind is not installed (404 on the create).
async fn create_volcano_command(
    client: &Client,
    job: &JobRef,
    generation: u64,
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
    let name = volcano_command_name(&job.name, &uid, generation);
    let command = DynamicObject {
        types: Some(TypeMeta {
            api_version: "bus.volcano.sh/v1alpha1".into(),
            kind: "Command".into(),
        }),
        metadata: ObjectMeta {
            name: Some(name.clone()),
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
    let request = format!("create commands.bus.volcano.sh {name} in {}", job.namespace);
    match api.create(&PostParams::default(), &command).await {
        Ok(created) => Ok(Some(created.name_any())),
        Err(e) if api_code(&e) == Some(404) => Ok(None),
        Err(e) if api_code(&e) == Some(409) => {
            // This restart's Command exists: an earlier try of it was
            // created and its answer lost. Ours if it targets this job.
            *requests += 1;
            match api.get_opt(&name).await {
                Ok(Some(found)) => {
                    let target = found.data["target"]["uid"].as_str().unwrap_or_default();
                    if target == uid {
                        Ok(Some(name))
                    } else {
                        Err(RecoverError::NotOurs {
                            target: id,
                            request,
                            name,
                            why: format!("it targets job uid {target:?}, not {uid:?}"),
                            requests: *requests,
                        })
                    }
                }
                // Gone since the 409: Volcano took it (it deletes a
                // Command before it runs it). Its name names this job's
                // uid and this restart, so it was this restart's.
                Ok(None) => Ok(Some(name)),
                Err(e) => Err(api_error(
                    &id,
                    format!("get commands.bus.volcano.sh {name} after a 409"),
                    *requests,
                )(e)),
            }
        }
        Err(e) => Err(api_error(&id, request, *requests)(e)),
    }
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
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    let lp = ListParams::default().labels(&selector);
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
mod tests {
    use super::*;
    use kube::client::Body;
    use serde_json::Value;

    type Handle = tower_test::mock::Handle<http::Request<Body>, http::Response<Body>>;

    fn answer(code: u16, body: &Value) -> http::Response<Body> {
        http::Response::builder()
            .status(code)
            .body(Body::from(serde_json::to_vec(body).expect("json")))
            .expect("response")
    }

    fn status(code: u16, reason: &str) -> Value {
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
               "reason": reason, "message": reason})
    }

    /// The Volcano restart of `vc` (uid `u-1`, generation 3) against a
    /// server that answers the create with `create` and a later GET with
    /// `get`; the outcome and the Command that was POSTed.
    async fn restart_volcano(
        create: (u16, Value),
        get: Option<(u16, Value)>,
    ) -> (Result<RestartOutcome, RecoverError>, Value) {
        let (svc, mut handle): (_, Handle) = tower_test::mock::pair();
        let client = Client::new(svc, "ml");
        let server = tokio::spawn(async move {
            let (req, send) = handle.next_request().await.expect("the create");
            assert_eq!(req.method(), http::Method::POST);
            assert_eq!(
                req.uri().path(),
                "/apis/bus.volcano.sh/v1alpha1/namespaces/ml/commands"
            );
            let body = req.into_body().collect_bytes().await.expect("body");
            let sent: Value = serde_json::from_slice(&body).expect("json");
            let (code, mut v) = create;
            if code == 201 {
                v = sent.clone();
            }
            send.send_response(answer(code, &v));
            if let Some((code, v)) = get {
                let (req, send) = handle.next_request().await.expect("the get");
                assert_eq!(req.method(), http::Method::GET);
                assert!(req.uri().path().ends_with("/commands/vc-rebound-u-1-3"));
                send.send_response(answer(code, &v));
            }
            sent
        });
        let job = JobRef::new(WorkloadKind::VolcanoJob, "ml", "vc", Some("u-1".into()));
        let out = restart_job(&client, &job, Some(3), None).await;
        (out, server.await.expect("server"))
    }

    fn command(target_uid: &str) -> Value {
        json!({"apiVersion": "bus.volcano.sh/v1alpha1", "kind": "Command",
               "metadata": {"name": "vc-rebound-u-1-3", "namespace": "ml"},
               "action": "RestartJob",
               "target": {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                          "name": "vc", "uid": target_uid}})
    }

    #[tokio::test]
    async fn the_command_is_named_by_the_job_uid_and_the_generation() {
        let (out, sent) = restart_volcano((201, Value::Null), None).await;
        assert_eq!(sent["metadata"]["name"], "vc-rebound-u-1-3");
        assert!(sent["metadata"].get("generateName").is_none());
        assert_eq!(sent["target"]["uid"], "u-1");
        let out = out.expect("restarted");
        assert_eq!(
            out.path,
            RestartPath::VolcanoCommand {
                command: "vc-rebound-u-1-3".into()
            }
        );
    }

    #[tokio::test]
    async fn a_retry_that_meets_its_own_command_is_success() {
        let (out, _) = restart_volcano(
            (409, status(409, "AlreadyExists")),
            Some((200, command("u-1"))),
        )
        .await;
        let out = out.expect("the lost answer's Command is this restart");
        assert_eq!(
            out.path,
            RestartPath::VolcanoCommand {
                command: "vc-rebound-u-1-3".into()
            }
        );
        assert_eq!(out.requests, 2);
        // Taken by Volcano between the 409 and the read: still ours.
        let (out, _) = restart_volcano(
            (409, status(409, "AlreadyExists")),
            Some((404, status(404, "NotFound"))),
        )
        .await;
        assert!(out.is_ok(), "{out:?}");
    }

    #[tokio::test]
    async fn a_command_of_that_name_for_another_job_is_an_error() {
        let (out, _) = restart_volcano(
            (409, status(409, "AlreadyExists")),
            Some((200, command("someone-else"))),
        )
        .await;
        let err = out.expect_err("not ours");
        assert!(matches!(err, RecoverError::NotOurs { .. }), "{err}");
        assert!(err.to_string().contains("someone-else"), "{err}");
    }

    /// A PyTorchJob restart with `pods_rv`, against a server that answers
    /// its `deletecollection`s with `answers` in turn; the outcome and the
    /// query of each request.
    async fn restart_pytorchjob(
        pods_rv: Option<&str>,
        answers: Vec<(u16, Value)>,
    ) -> (Result<RestartOutcome, RecoverError>, Vec<String>) {
        let (svc, mut handle) =
            tower_test::mock::pair::<http::Request<Body>, http::Response<Body>>();
        let client = Client::new(svc, "ml");
        let server = tokio::spawn(async move {
            let mut queries = Vec::new();
            for (code, body) in answers {
                let (req, send) = handle.next_request().await.expect("a deletecollection");
                assert_eq!(req.method(), http::Method::DELETE);
                assert_eq!(req.uri().path(), "/api/v1/namespaces/ml/pods");
                queries.push(req.uri().query().unwrap_or("").to_string());
                send.send_response(answer(code, &body));
            }
            queries
        });
        let job = JobRef::new(WorkloadKind::PyTorchJob, "ml", "pt", Some("u-2".into()));
        let out = restart_job(&client, &job, Some(1), pods_rv).await;
        (out, server.await.expect("server"))
    }

    fn pod_list(n: usize) -> Value {
        let items: Vec<Value> = (0..n)
            .map(|i| json!({"metadata": {"name": format!("pt-worker-{i}"), "namespace": "ml"}}))
            .collect();
        json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
    }

    #[tokio::test]
    async fn the_pods_are_listed_from_the_cache_no_older_than_the_watch() {
        let (out, queries) = restart_pytorchjob(Some("4711"), vec![(200, pod_list(4))]).await;
        let out = out.expect("restarted");
        assert_eq!((out.pods_deleted, out.requests), (4, 1));
        assert!(queries[0].contains("resourceVersion=4711"), "{queries:?}");
        assert!(
            queries[0].contains("resourceVersionMatch=NotOlderThan"),
            "{queries:?}"
        );
        assert!(queries[0].contains("labelSelector="), "{queries:?}");
    }

    #[tokio::test]
    async fn a_cache_that_cannot_catch_up_gets_a_consistent_read() {
        let (out, queries) = restart_pytorchjob(
            Some("4711"),
            vec![(504, status(504, "Timeout")), (200, pod_list(3))],
        )
        .await;
        let out = out.expect("restarted on the second request");
        assert_eq!((out.pods_deleted, out.requests), (3, 2));
        assert!(!queries[1].contains("resourceVersion"), "{queries:?}");
        assert!(queries[1].contains("labelSelector="), "{queries:?}");
    }

    #[tokio::test]
    async fn without_a_version_the_read_is_consistent_and_other_errors_are_not_retried() {
        let (out, queries) = restart_pytorchjob(None, vec![(504, status(504, "Timeout"))]).await;
        assert!(out.is_err(), "{out:?}");
        assert_eq!(queries.len(), 1);
        assert!(!queries[0].contains("resourceVersion"), "{queries:?}");
        let (out, queries) =
            restart_pytorchjob(Some("9"), vec![(500, status(500, "InternalError"))]).await;
        assert!(out.is_err(), "{out:?}");
        assert_eq!(queries.len(), 1, "only a 504 is asked again: {queries:?}");
    }

    #[test]
    fn command_names_stay_valid() {
        let uid = "0f0e6c3a-4b7e-4a5e-9a57-2f4a1d1c7b10";
        assert_eq!(
            volcano_command_name("vc", uid, 7),
            format!("vc-rebound-{uid}-7")
        );
        let long = "a".repeat(253);
        assert!(volcano_command_name(&long, uid, u64::MAX).len() <= 253);
    }
}
