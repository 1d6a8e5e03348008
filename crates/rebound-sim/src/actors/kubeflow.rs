//! Kubeflow training-operator v1 (`kubeflow.org/v1` PyTorchJob, TFJob,
//! MPIJob), for what rebound relies on: one pod per replica named
//! `<job>-<replica type lower>-<index>` with the operator's labels
//! (`training.kubeflow.org/job-name`, `operator-name`, `replica-type`,
//! `replica-index`, `job-role: master`) on top of the template's own labels,
//! a controller owner reference to the job, missing pods recreated, the
//! per-replica `restartPolicy` honoured (`ExitCode` becomes pod policy
//! `Never` and only exit codes >= 128 are retried, by deleting the pod), and
//! job conditions `Created`, `Running`, `Restarting`, `Succeeded`, `Failed`.
//! A finished job is left alone (its pods are not recreated), and its pods
//! are cleaned as `runPolicy.cleanPodPolicy` says.
//!
//! Not simulated: the headless Services, the cluster-spec environment
//! (`MASTER_ADDR`, `TF_CONFIG`, hostfiles), gang scheduling, suspend.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::children::{ChildPod, InFlight, PodIndex, observe};
use super::create::{CreateBackoff, Created, spawn_create};
use super::jobstore::{JobStore, kind_of};
use super::ratelimit::ClientLimit;
use super::runtime::{Writer, next_batch, ticks, watch_stream};
use super::util::{is_not_found, key};

mod plan;

pub(crate) use plan::make_pod;
use plan::plan;

/// Label: the job a pod belongs to.
pub const JOB_NAME_LABEL: &str = "training.kubeflow.org/job-name";
/// Label: the operator that made the pod.
pub const OPERATOR_NAME_LABEL: &str = "training.kubeflow.org/operator-name";
/// Label: the replica type, lower case (`master`, `worker`, ...).
pub const REPLICA_TYPE_LABEL: &str = "training.kubeflow.org/replica-type";
/// Label: the replica index.
pub const REPLICA_INDEX_LABEL: &str = "training.kubeflow.org/replica-index";
/// Label: `master` on the master-role pod.
pub const JOB_ROLE_LABEL: &str = "training.kubeflow.org/job-role";

/// Least time between two status writes of one job.
const STATUS_INTERVAL: Duration = Duration::from_millis(250);

/// One of the training-operator v1 kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KubeflowKind {
    /// `PyTorchJob`
    PyTorchJob,
    /// `TFJob`
    TFJob,
    /// `MPIJob`
    MPIJob,
}

impl KubeflowKind {
    /// All kinds the simulated operator serves.
    pub const ALL: [KubeflowKind; 3] = [Self::PyTorchJob, Self::TFJob, Self::MPIJob];

    /// The kind name.
    pub fn kind(self) -> &'static str {
        match self {
            Self::PyTorchJob => "PyTorchJob",
            Self::TFJob => "TFJob",
            Self::MPIJob => "MPIJob",
        }
    }

    fn from_kind(k: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|x| x.kind() == k)
    }

    /// The resource, for `Api<DynamicObject>`.
    pub fn api_resource(self) -> ApiResource {
        let plural = match self {
            Self::PyTorchJob => "pytorchjobs",
            Self::TFJob => "tfjobs",
            Self::MPIJob => "mpijobs",
        };
        ApiResource {
            group: "kubeflow.org".into(),
            version: "v1".into(),
            api_version: "kubeflow.org/v1".into(),
            kind: self.kind().into(),
            plural: plural.into(),
        }
    }

    /// The spec field that holds the replica specs.
    pub fn replica_specs_field(self) -> &'static str {
        match self {
            Self::PyTorchJob => "pytorchReplicaSpecs",
            Self::TFJob => "tfReplicaSpecs",
            Self::MPIJob => "mpiReplicaSpecs",
        }
    }

    /// The container whose exit code decides (`ExitCode` policy).
    pub fn default_container(self) -> &'static str {
        match self {
            Self::PyTorchJob => "pytorch",
            Self::TFJob => "tensorflow",
            Self::MPIJob => "mpi",
        }
    }

    fn operator_name(self) -> &'static str {
        match self {
            Self::PyTorchJob => "pytorchjob-controller",
            Self::TFJob => "tfjob-controller",
            Self::MPIJob => "mpijob-controller",
        }
    }

    fn default_restart_policy(self) -> &'static str {
        match self {
            Self::PyTorchJob => "OnFailure",
            Self::TFJob | Self::MPIJob => "Never",
        }
    }

    fn default_clean_pod_policy(self) -> &'static str {
        match self {
            Self::TFJob => "Running",
            Self::PyTorchJob | Self::MPIJob => "None",
        }
    }

    /// The replica type whose pod carries `job-role: master` and decides
    /// success, if the job has one.
    fn master_type(self, types: &[String]) -> Option<String> {
        let wanted: &[&str] = match self {
            Self::PyTorchJob => &["Master"],
            Self::TFJob => &["Chief", "Master"],
            Self::MPIJob => &["Launcher"],
        };
        types.iter().find(|t| wanted.contains(&t.as_str())).cloned()
    }
}

// One value per watch event, moved once into the loop: boxing the large
// variants would only add an allocation per event.
#[allow(clippy::large_enum_variant)]
enum Input {
    Job(&'static str, kube::runtime::watcher::Event<DynamicObject>),
    Pod(kube::runtime::watcher::Event<Pod>),
    Done(String, Option<String>, bool),
    /// A pod create returned: (pod key, job key, outcome).
    Created(String, String, Created),
    Tick,
}

/// Runs the training operator for all three kinds until aborted.
pub async fn run(client: Client) {
    run_limited(client, ClientLimit::NONE).await;
}

/// Runs the Kubeflow operator until aborted, every request of its client waiting on
/// `limit` as the real component's client does (see [`super::ratelimit`]).
pub async fn run_limited(client: Client, limit: ClientLimit) {
    let mut streams = Vec::new();
    for k in KubeflowKind::ALL {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &k.api_resource());
        let kind = k.kind();
        streams.push(
            watch_stream(api, None, kind)
                .map(move |e| Input::Job(kind, e))
                .boxed(),
        );
    }
    let pods: Api<Pod> = Api::all(client.clone());
    streams.push(
        watch_stream(pods, Some(OPERATOR_NAME_LABEL), "kubeflow pods")
            .map(Input::Pod)
            .boxed(),
    );
    let (writer, results) = Writer::new(32);
    let writer = writer.limited(limit);
    streams.push(results.boxed());
    streams.push(ticks(STATUS_INTERVAL).map(|_| Input::Tick).boxed());
    let mut input = futures::stream::select_all(streams);
    let mut jobs = JobStore::default();
    let mut index = PodIndex::default();
    let mut in_flight = if limit.is_limited() {
        InFlight::with_ttl(InFlight::LIMITED_TTL)
    } else {
        InFlight::default()
    };
    let mut backoff = CreateBackoff::default();
    // Status writes per job are spaced by STATUS_INTERVAL (a burst of pod
    // events makes one write, not one per event); the rest wait for a tick.
    let mut last_status: HashMap<String, Instant> = HashMap::new();
    let mut deferred: HashSet<String> = HashSet::new();
    while let Some(batch) = next_batch(&mut input, 2048).await {
        let mut dirty: HashSet<String> = HashSet::new();
        for ev in batch {
            match ev {
                Input::Job(kind, e) => {
                    let ch = jobs.on_event(kind, e);
                    dirty.extend(ch.dirty);
                    for (k, uid) in ch.deleted {
                        backoff.forget(&k);
                        // The garbage collector's part: the job's pods go.
                        let ns = k
                            .split_once('/')
                            .map(|(n, _)| n.to_owned())
                            .unwrap_or_default();
                        for p in index.of(&uid) {
                            let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
                            let name = p.name.clone();
                            writer.spawn(async move {
                                let _ = api.delete(&name, &DeleteParams::background()).await;
                                Input::Done(String::new(), None, false)
                            });
                        }
                    }
                }
                Input::Pod(e) => {
                    observe(&mut in_flight, &e);
                    for owner in index.on_event(e) {
                        if let Some(k) = jobs.key_of_uid(&owner) {
                            dirty.insert(k.clone());
                        }
                    }
                }
                Input::Done(item, job, failed) => {
                    in_flight.returned(&item, failed);
                    if let Some(j) = job {
                        dirty.insert(j);
                    }
                }
                Input::Created(k, jk, c) => {
                    // A made or found pod stays expected until the watch
                    // shows it; a failed one is forgotten (and re-planned
                    // once the job's backoff ends).
                    in_flight.returned(&k, !c.exists());
                    if backoff.record(&jk, &c, Instant::now()) {
                        dirty.insert(jk);
                    }
                }
                Input::Tick => {
                    in_flight.expire();
                    dirty.extend(deferred.drain());
                    dirty.extend(backoff.due(Instant::now()));
                }
            }
        }
        for jk in dirty {
            let Some(job) = jobs.jobs.get(&jk) else {
                continue;
            };
            let Some(kind) = KubeflowKind::from_kind(kind_of(job)) else {
                continue;
            };
            if job.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let uid = job.uid().unwrap_or_default();
            let pods: Vec<&ChildPod> = index.of(&uid).collect();
            let plan = plan(kind, job, &pods, &in_flight);
            let ns = job.namespace().unwrap_or_default();
            // A job whose creates failed waits out its backoff (the tick
            // brings it back); its status and deletes go on meanwhile.
            let creates = if backoff.waiting(&jk, Instant::now()) {
                Vec::new()
            } else {
                plan.creates
            };
            for pod in creates {
                let name = pod["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let k = key(&ns, &name);
                in_flight.insert_create(k.clone());
                let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
                let jk2 = jk.clone();
                spawn_create(&writer, api, pod, move |c| Input::Created(k, jk2, c));
            }
            for name in plan.deletes {
                let k = key(&ns, &name);
                in_flight.insert_delete(k.clone());
                let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
                let jk2 = jk.clone();
                writer.spawn(async move {
                    let failed = match api.delete(&name, &DeleteParams::default()).await {
                        Ok(_) => false,
                        Err(e) if is_not_found(&e) => true,
                        Err(e) => {
                            tracing::debug!(pod = %name, error = %e, "delete pod");
                            true
                        }
                    };
                    Input::Done(k, Some(jk2), failed)
                });
            }
            if let Some(status) = plan.status {
                let sk = format!("{jk}#status");
                if in_flight.contains(&sk) {
                    continue;
                }
                if last_status
                    .get(&jk)
                    .is_some_and(|t| t.elapsed() < STATUS_INTERVAL)
                {
                    deferred.insert(jk.clone());
                    continue;
                }
                last_status.insert(jk.clone(), Instant::now());
                in_flight.insert(sk.clone());
                let api: Api<DynamicObject> =
                    Api::namespaced_with(client.clone(), &ns, &kind.api_resource());
                let name = job.name_any();
                let jk2 = jk.clone();
                writer.spawn(async move {
                    let patch = json!({"status": status});
                    if let Err(e) = api
                        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                    {
                        tracing::debug!(job = %name, error = %e, "job status");
                    }
                    Input::Done(sk, Some(jk2), false)
                });
            }
        }
    }
}

#[cfg(test)]
mod tests;
