//! Kubeflow Trainer v2 (`trainer.kubeflow.org/v1alpha1`), for what rebound
//! relies on: a `TrainJob` becomes a JobSet of the same name and namespace,
//! built from the `TrainingRuntime` or `ClusterTrainingRuntime` its
//! `spec.runtimeRef` names, and controlled by the TrainJob (a controller
//! owner reference, `blockOwnerDeletion`); the simulated JobSet operator
//! runs it. As the real Trainer does:
//!
//! - the JobSet's labels and annotations are the runtime template's
//!   (`spec.template.metadata`) merged with the TrainJob's `spec.labels`
//!   and `spec.annotations`, which also go on every replicated job's Job
//!   template; the TrainJob's own `metadata.labels` are not copied. Pods
//!   carry the runtime's pod-template labels plus JobSet's own
//!   (`jobset.sigs.k8s.io/jobset-name` = the TrainJob's name, ...): there
//!   is no TrainJob label on pods, a pod's TrainJob is its JobSet's owner;
//! - the replicated jobs labelled `trainer.kubeflow.org/trainjob-ancestor-step:
//!   trainer` get one replica of `numNodes` pods (`spec.trainer.numNodes`,
//!   else the runtime's `mlPolicy.numNodes`, else 1), and their `node`
//!   container the TrainJob's `spec.trainer` image, command, args and env;
//! - an existing JobSet is never rewritten (restarts are the JobSet's);
//! - status: condition `Created` (`JobsCreationSucceeded`, or
//!   `JobsBuildFailed` while the runtime is missing), `Complete` / `Failed`
//!   from the JobSet's `Completed` / `Failed`, `jobsStatus` from its
//!   `replicatedJobsStatus`.
//!
//! Not simulated: the validating webhook (a TrainJob whose runtime is
//! missing is accepted and retried), ML policies beyond `numNodes` (the
//! torchrun/MPI environment), initializers' dataset and model settings,
//! `podSpecOverrides`, suspend (a suspended TrainJob gets no JobSet until
//! resumed), PodGroups.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::watcher::Event;
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::children::{InFlight, observe};
use super::jobset;
use super::jobstore::JobStore;
use super::ratelimit::ClientLimit;
use super::runtime::{Writer, next_batch, ticks, watch_stream};
use super::util::{controller_of, is_conflict, is_not_found, key};

mod plan;
pub use plan::build_jobset;
use plan::{plan_status, runtime_ref};

/// The API version of the Trainer v2 kinds.
pub const API_VERSION: &str = "trainer.kubeflow.org/v1alpha1";
/// Label of a runtime's replicated jobs: the TrainJob step they run.
pub const ANCESTOR_LABEL: &str = "trainer.kubeflow.org/trainjob-ancestor-step";
/// [`ANCESTOR_LABEL`] value of the training nodes.
pub const ANCESTOR_TRAINER: &str = "trainer";
/// The container of a training node that `spec.trainer` configures.
pub const NODE_CONTAINER: &str = "node";
/// The runtime kind when `spec.runtimeRef.kind` is not given.
pub const DEFAULT_RUNTIME_KIND: &str = "ClusterTrainingRuntime";

/// The TrainJob resource, for `Api<DynamicObject>`.
pub fn trainjob_resource() -> ApiResource {
    resource("TrainJob", "trainjobs")
}

/// The `TrainingRuntime` (`cluster: false`) or `ClusterTrainingRuntime`
/// resource.
pub fn runtime_resource(cluster: bool) -> ApiResource {
    if cluster {
        resource("ClusterTrainingRuntime", "clustertrainingruntimes")
    } else {
        resource("TrainingRuntime", "trainingruntimes")
    }
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "trainer.kubeflow.org".into(),
        version: "v1alpha1".into(),
        api_version: API_VERSION.into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// Fetch the runtime and create the JobSet; the error says why not.
async fn create_jobset(client: Client, tj: DynamicObject) -> Result<(), String> {
    let ns = tj.namespace().unwrap_or_default();
    let (cluster, rname) = runtime_ref(&tj);
    let res = runtime_resource(cluster);
    let api: Api<DynamicObject> = if cluster {
        Api::all_with(client.clone(), &res)
    } else {
        Api::namespaced_with(client.clone(), &ns, &res)
    };
    let runtime = match api.get_opt(&rname).await {
        Ok(Some(r)) => r,
        Ok(None) => return Err(format!("{} {rname} not found", res.kind)),
        Err(e) => return Err(format!("{} {rname}: {e}", res.kind)),
    };
    let js = build_jobset(&tj, &serde_json::to_value(&runtime).unwrap_or_default());
    let obj: DynamicObject = serde_json::from_value(js).map_err(|e| e.to_string())?;
    let sets: Api<DynamicObject> = Api::namespaced_with(client, &ns, &jobset::api_resource());
    match sets.create(&PostParams::default(), &obj).await {
        Ok(_) => Ok(()),
        Err(e) if is_conflict(&e) => Ok(()),
        Err(e) => Err(format!("create JobSet: {e}")),
    }
}

// One value per watch event, moved once into the loop (see jobset.rs).
#[allow(clippy::large_enum_variant)]
enum Input {
    TrainJob(Event<DynamicObject>),
    JobSet(Event<DynamicObject>),
    /// A JobSet create returned: its in-flight key, the TrainJob's key,
    /// why it failed.
    Created(String, String, Option<String>),
    /// Another write returned: its in-flight key.
    Written(String),
    Tick,
}

/// Runs the Trainer v2 controller until aborted.
pub async fn run(client: Client) {
    run_limited(client, ClientLimit::NONE).await;
}

/// Runs the Trainer controller until aborted, every request of its client waiting on
/// `limit` as the real component's client does (see [`super::ratelimit`]).
pub async fn run_limited(client: Client, limit: ClientLimit) {
    let tjs: Api<DynamicObject> = Api::all_with(client.clone(), &trainjob_resource());
    let sets: Api<DynamicObject> = Api::all_with(client.clone(), &jobset::api_resource());
    let (writer, results) = Writer::new(16);
    let writer = writer.limited(limit);
    let mut input = futures::stream::select_all(vec![
        watch_stream(tjs, None, "trainjobs")
            .map(Input::TrainJob)
            .boxed(),
        watch_stream(sets, None, "trainjob jobsets")
            .map(Input::JobSet)
            .boxed(),
        results.boxed(),
        ticks(Duration::from_secs(1)).map(|_| Input::Tick).boxed(),
    ]);
    let mut store = JobStore::default();
    // The JobSet of each TrainJob, by the TrainJob's uid.
    let mut children: HashMap<String, DynamicObject> = HashMap::new();
    let mut errors: HashMap<String, String> = HashMap::new();
    let mut in_flight = if limit.is_limited() {
        InFlight::with_ttl(InFlight::LIMITED_TTL)
    } else {
        InFlight::default()
    };
    while let Some(batch) = next_batch(&mut input, 1024).await {
        let mut dirty: HashSet<String> = HashSet::new();
        for ev in batch {
            match ev {
                Input::TrainJob(e) => {
                    let ch = store.on_event("TrainJob", e);
                    dirty.extend(ch.dirty);
                    for (k, uid) in ch.deleted {
                        errors.remove(&k);
                        if let Some(js) = children.remove(&uid) {
                            let api: Api<DynamicObject> = Api::namespaced_with(
                                client.clone(),
                                &js.namespace().unwrap_or_default(),
                                &jobset::api_resource(),
                            );
                            let name = js.name_any();
                            writer.spawn(async move {
                                if let Err(e) = api.delete(&name, &DeleteParams::background()).await
                                    && !is_not_found(&e)
                                {
                                    tracing::debug!(jobset = %name, error = %e, "delete trainjob jobset");
                                }
                                Input::Written(String::new())
                            });
                        }
                    }
                }
                Input::JobSet(e) => {
                    observe(&mut in_flight, &e);
                    let (apply, js) = match e {
                        Event::Apply(j) | Event::InitApply(j) => (true, j),
                        Event::Delete(j) => (false, j),
                        Event::Init | Event::InitDone => continue,
                    };
                    let Some(owner) = controller_of(&js.metadata)
                        .filter(|o| o.kind == "TrainJob")
                        .map(|o| o.uid.clone())
                    else {
                        continue;
                    };
                    if apply {
                        children.insert(owner.clone(), js);
                    } else {
                        children.remove(&owner);
                    }
                    if let Some(k) = store.key_of_uid(&owner) {
                        dirty.insert(k.clone());
                    }
                }
                Input::Created(item, tj, err) => {
                    in_flight.returned(&item, err.is_some());
                    match err {
                        Some(e) => errors.insert(tj.clone(), e),
                        None => errors.remove(&tj),
                    };
                    dirty.insert(tj);
                }
                Input::Written(item) => in_flight.returned(&item, false),
                Input::Tick => {
                    in_flight.expire();
                    // Retry TrainJobs still without a JobSet (a runtime
                    // created after the TrainJob).
                    for (k, tj) in &store.jobs {
                        if !children.contains_key(&tj.uid().unwrap_or_default()) {
                            dirty.insert(k.clone());
                        }
                    }
                }
            }
        }
        for k in dirty {
            let Some(tj) = store.jobs.get(&k) else {
                continue;
            };
            if tj.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let ns = tj.namespace().unwrap_or_default();
            let js = children.get(&tj.uid().unwrap_or_default());
            let create_key = key(&ns, &tj.name_any());
            let suspended = tj.data["spec"]["suspend"].as_bool() == Some(true);
            if js.is_none() && !suspended && !in_flight.contains(&create_key) {
                in_flight.insert_create(create_key.clone());
                let (client, tj2, k2) = (client.clone(), tj.clone(), k.clone());
                writer.spawn(async move {
                    let r = create_jobset(client, tj2).await;
                    Input::Created(create_key, k2, r.err())
                });
            }
            let error = if js.is_none() {
                errors.get(&k).map(String::as_str)
            } else {
                None
            };
            let Some(status) = plan_status(tj, js, error) else {
                continue;
            };
            let stk = format!("{k}#status");
            if in_flight.contains(&stk) {
                continue;
            }
            in_flight.insert(stk.clone());
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &ns, &trainjob_resource());
            let name = tj.name_any();
            writer.spawn(async move {
                let patch = json!({"status": status});
                if let Err(e) = api
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    tracing::debug!(trainjob = %name, error = %e, "trainjob status");
                }
                Input::Written(stk)
            });
        }
    }
}

#[cfg(test)]
mod tests;
