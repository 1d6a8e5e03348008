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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Map, Value, json};

use super::children::{ChildPod, InFlight, PodIndex, observe};
use super::create::{CreateBackoff, Created, spawn_create};
use super::jobstore::{JobStore, kind_of};
use super::ratelimit::ClientLimit;
use super::runtime::{Writer, next_batch, ticks, watch_stream};
use super::util::{controller_ref, is_not_found, key, now_rfc3339, str_at};

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

/// The replica specs of a job in a stable order (master-like types first).
fn replica_specs(kind: KubeflowKind, job: &Value) -> Vec<(&String, &Value)> {
    let mut v: Vec<(&String, &Value)> = job["spec"][kind.replica_specs_field()]
        .as_object()
        .map(|m| m.iter().collect())
        .unwrap_or_default();
    v.sort_by_key(|(t, _)| (!matches!(t.as_str(), "Master" | "Chief" | "Launcher"), *t));
    v
}

/// What one reconcile of a job wants done.
#[derive(Debug, Default)]
struct Plan {
    creates: Vec<Value>,
    deletes: Vec<String>,
    status: Option<Value>,
}

fn is_finished(status: &Value) -> bool {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| {
            matches!(str_at(c, &["type"]), Some("Succeeded") | Some("Failed"))
                && str_at(c, &["status"]) == Some("True")
        })
}

/// Sets a job condition the way the training operator does: the changed
/// condition moves to the end of the list, and Running/Restarting/finished
/// conditions switch the others off.
fn kf_condition(conds: &mut Vec<Value>, ctype: &str, reason: &str, message: &str) {
    let exists = conds
        .iter()
        .any(|c| str_at(c, &["type"]) == Some(ctype) && str_at(c, &["status"]) == Some("True"));
    if exists {
        return;
    }
    let now = now_rfc3339();
    let off: &[&str] = match ctype {
        "Running" => &["Restarting"],
        "Restarting" => &["Running"],
        "Succeeded" | "Failed" => &["Running", "Restarting"],
        _ => &[],
    };
    for c in conds.iter_mut() {
        if let Some(t) = str_at(c, &["type"])
            && off.contains(&t)
            && str_at(c, &["status"]) == Some("True")
        {
            c["status"] = json!("False");
            c["lastTransitionTime"] = json!(now);
            c["lastUpdateTime"] = json!(now);
        }
    }
    conds.retain(|c| str_at(c, &["type"]) != Some(ctype));
    conds.push(json!({
        "type": ctype,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastUpdateTime": now,
        "lastTransitionTime": now,
    }));
}

/// The pod the operator makes for one replica.
pub(crate) fn make_pod(
    kind: KubeflowKind,
    job: &DynamicObject,
    rtype: &str,
    index: usize,
    spec: &Value,
    master: bool,
    policy: &str,
) -> Value {
    let name = job.name_any();
    let rt = rtype.to_lowercase();
    let template = &spec["template"];
    let mut labels: Map<String, Value> = template["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    labels.insert(OPERATOR_NAME_LABEL.into(), json!(kind.operator_name()));
    labels.insert(JOB_NAME_LABEL.into(), json!(name.replace('/', "-")));
    labels.insert(REPLICA_TYPE_LABEL.into(), json!(rt));
    labels.insert(REPLICA_INDEX_LABEL.into(), json!(index.to_string()));
    if master {
        labels.insert(JOB_ROLE_LABEL.into(), json!("master"));
    }
    let mut pod_spec = template["spec"].clone();
    if !pod_spec.is_object() {
        pod_spec = json!({});
    }
    pod_spec["restartPolicy"] = json!(if policy == "ExitCode" {
        "Never"
    } else {
        policy
    });
    let mut meta = json!({
        "name": format!("{name}-{rt}-{index}"),
        "namespace": job.namespace(),
        "labels": labels,
        "ownerReferences": [controller_ref(
            "kubeflow.org/v1",
            kind.kind(),
            &name,
            &job.uid().unwrap_or_default(),
        )],
    });
    if let Some(a) = template["metadata"]["annotations"].as_object() {
        meta["annotations"] = json!(a);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec})
}

/// Decides creates, deletes and the new status of one job from its pods.
fn plan(kind: KubeflowKind, job: &DynamicObject, pods: &[&ChildPod], in_flight: &InFlight) -> Plan {
    let mut plan = Plan::default();
    let name = job.name_any();
    let ns = job.namespace().unwrap_or_default();
    let old_status = job.data.get("status").cloned().unwrap_or_else(|| json!({}));
    let run_policy = &job.data["spec"]["runPolicy"];
    let clean = str_at(run_policy, &["cleanPodPolicy"]).unwrap_or(kind.default_clean_pod_policy());
    if is_finished(&old_status) {
        for p in pods {
            let remove = match clean {
                "All" => !p.deleting,
                "Running" => p.active(),
                _ => false,
            };
            if remove && !in_flight.contains(&key(&ns, &p.name)) {
                plan.deletes.push(p.name.clone());
            }
        }
        return plan;
    }
    let specs = replica_specs(kind, &job.data);
    let types: Vec<String> = specs.iter().map(|(t, _)| (*t).clone()).collect();
    let master_type = kind.master_type(&types);
    let mut status = old_status.clone();
    if !status.is_object() {
        status = json!({});
    }
    let mut conds: Vec<Value> = status["conditions"].as_array().cloned().unwrap_or_default();
    let kname = kind.kind();
    kf_condition(
        &mut conds,
        "Created",
        &format!("{kname}Created"),
        &format!("{kname} {name} is created."),
    );
    let mut replica_statuses = Map::new();
    let mut expected = 0usize;
    let mut running = 0usize;
    let mut restarting = false;
    let mut failed_msg: Option<String> = None;
    let mut master_succeeded = None::<bool>;
    let mut workers_all_succeeded = true;
    let mut restarts_counted = 0i64;
    for &(rtype, spec) in &specs {
        let rt = rtype.to_lowercase();
        let replicas = spec["replicas"].as_u64().unwrap_or(1) as usize;
        let policy = str_at(spec, &["restartPolicy"]).unwrap_or(kind.default_restart_policy());
        // by replica index (the first pod seen of each), so a job of 1,024
        // workers is not scanned once per replica
        let mine: Vec<&&ChildPod> = pods
            .iter()
            .filter(|p| p.labels.get(REPLICA_TYPE_LABEL).map(String::as_str) == Some(rt.as_str()))
            .collect();
        let mut by_index: HashMap<&str, &ChildPod> = HashMap::new();
        for p in &mine {
            if let Some(i) = p.labels.get(REPLICA_INDEX_LABEL) {
                by_index.entry(i.as_str()).or_insert(**p);
            }
        }
        let (mut active, mut succeeded, mut failed) = (0, 0, 0);
        let mut all_succeeded = replicas > 0;
        for index in 0..replicas {
            expected += 1;
            let pod_name = format!("{name}-{rt}-{index}");
            let k = key(&ns, &pod_name);
            let Some(pod) = by_index.get(index.to_string().as_str()) else {
                all_succeeded = false;
                if !in_flight.contains(&k) {
                    let master = master_type.as_deref() == Some(rtype.as_str())
                        || (master_type.is_none()
                            && kind == KubeflowKind::TFJob
                            && rtype == "Worker"
                            && index == 0);
                    plan.creates
                        .push(make_pod(kind, job, rtype, index, spec, master, policy));
                }
                continue;
            };
            if matches!(policy, "OnFailure" | "Always") {
                restarts_counted += i64::from(pod.restarts);
            }
            match pod.phase() {
                "Running" if !pod.deleting => {
                    active += 1;
                    running += 1;
                    all_succeeded = false;
                }
                "Succeeded" => succeeded += 1,
                "Failed" => {
                    failed += 1;
                    all_succeeded = false;
                    let code = pod.exit_code(kind.default_container()).unwrap_or(1);
                    let retry = match policy {
                        "ExitCode" => code >= 128,
                        "OnFailure" | "Always" => true,
                        _ => false,
                    };
                    if retry {
                        restarting = true;
                        if !pod.deleting && !in_flight.contains(&k) {
                            plan.deletes.push(pod.name.clone());
                        }
                    } else {
                        failed_msg = Some(format!(
                            "{kname} {name} is failed because {failed} {rtype} replica(s) failed."
                        ));
                    }
                }
                _ => {
                    active += 1;
                    all_succeeded = false;
                }
            }
        }
        for p in &mine {
            let idx: Option<usize> = p
                .labels
                .get(REPLICA_INDEX_LABEL)
                .and_then(|i| i.parse().ok());
            if idx.is_none_or(|i| i >= replicas)
                && !p.deleting
                && !in_flight.contains(&key(&ns, &p.name))
            {
                plan.deletes.push(p.name.clone());
            }
        }
        if master_type.as_deref() == Some(rtype.as_str()) {
            master_succeeded = Some(all_succeeded);
        } else if rtype == "Worker" {
            workers_all_succeeded = all_succeeded;
        }
        let mut selector = BTreeMap::new();
        selector.insert(OPERATOR_NAME_LABEL, kind.operator_name().to_owned());
        selector.insert(JOB_NAME_LABEL, name.clone());
        selector.insert(REPLICA_TYPE_LABEL, rt.clone());
        let sel_str = selector
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        replica_statuses.insert(
            rtype.to_owned(),
            json!({
                "active": active,
                "succeeded": succeeded,
                "failed": failed,
                "labelSelector": {"matchLabels": selector},
                "selector": sel_str,
            }),
        );
    }
    let backoff_limit = run_policy["backoffLimit"].as_i64();
    let succeeded = match master_succeeded {
        Some(m) => m,
        None => workers_all_succeeded && !specs.is_empty(),
    };
    if succeeded {
        kf_condition(
            &mut conds,
            "Succeeded",
            &format!("{kname}Succeeded"),
            &format!("{kname} {name} is successfully completed."),
        );
    } else if let Some(msg) = failed_msg {
        kf_condition(&mut conds, "Failed", &format!("{kname}Failed"), &msg);
    } else if backoff_limit.is_some_and(|b| restarts_counted > b) {
        kf_condition(
            &mut conds,
            "Failed",
            "BackoffLimitExceeded",
            &format!(
                "{kname} {name} has failed because it has reached the specified backoff limit"
            ),
        );
    } else if restarting {
        kf_condition(
            &mut conds,
            "Restarting",
            &format!("{kname}Restarting"),
            &format!("{kname} {name} is restarting because some replica(s) failed."),
        );
    } else if expected > 0 && running == expected {
        kf_condition(
            &mut conds,
            "Running",
            &format!("{kname}Running"),
            &format!("{kname} {name} is running."),
        );
    }
    status["conditions"] = json!(conds);
    status["replicaStatuses"] = Value::Object(replica_statuses);
    if status.get("startTime").is_none_or(Value::is_null) {
        status["startTime"] = json!(now_rfc3339());
    }
    if is_finished(&status) && status.get("completionTime").is_none_or(Value::is_null) {
        status["completionTime"] = json!(now_rfc3339());
    }
    if status != old_status {
        status["lastReconcileTime"] = json!(now_rfc3339());
        plan.status = Some(status);
    }
    plan
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
mod tests {
    use super::*;

    fn job(policy: &str, workers: u64) -> DynamicObject {
        let mut o =
            DynamicObject::new("train", &KubeflowKind::PyTorchJob.api_resource()).within("ns");
        o.metadata.uid = Some("u1".into());
        o.data = json!({"spec": {"pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "restartPolicy": policy, "template": {
                "metadata": {"labels": {"kcover.io/cascading-recovery": "true"}},
                "spec": {"containers": [{"name": "pytorch", "image": "x"}]}}},
            "Worker": {"replicas": workers, "restartPolicy": policy, "template": {
                "spec": {"containers": [{"name": "pytorch", "image": "x"}]}}},
        }}});
        o
    }

    fn pod(name: &str, rt: &str, idx: usize, phase: &str, exit: Option<i32>) -> ChildPod {
        ChildPod {
            name: name.into(),
            labels: BTreeMap::from([
                (REPLICA_TYPE_LABEL.to_owned(), rt.to_owned()),
                (REPLICA_INDEX_LABEL.to_owned(), idx.to_string()),
            ]),
            phase: Some(phase.into()),
            exit_codes: exit
                .map(|c| vec![("pytorch".to_owned(), c)])
                .unwrap_or_default(),
            ..Default::default()
        }
    }

    #[test]
    fn creates_named_labelled_pods_with_the_replica_policy() {
        let j = job("ExitCode", 2);
        let p = plan(KubeflowKind::PyTorchJob, &j, &[], &InFlight::default());
        let names: Vec<&str> = p
            .creates
            .iter()
            .filter_map(|c| c["metadata"]["name"].as_str())
            .collect();
        assert_eq!(
            names,
            ["train-master-0", "train-worker-0", "train-worker-1"]
        );
        let master = &p.creates[0];
        assert_eq!(master["metadata"]["labels"][JOB_ROLE_LABEL], "master");
        assert_eq!(
            master["metadata"]["labels"]["kcover.io/cascading-recovery"],
            "true"
        );
        assert_eq!(master["metadata"]["labels"][REPLICA_TYPE_LABEL], "master");
        assert_eq!(master["spec"]["restartPolicy"], "Never");
        assert_eq!(master["metadata"]["ownerReferences"][0]["controller"], true);
        assert!(
            p.creates[1]["metadata"]["labels"]
                .get(JOB_ROLE_LABEL)
                .is_none()
        );
        let conds = p
            .status
            .as_ref()
            .and_then(|s| s["conditions"].as_array().cloned())
            .unwrap_or_default();
        assert_eq!(str_at(&conds[0], &["type"]), Some("Created"));
    }

    #[test]
    fn exit_code_policy_retries_only_signals() {
        let j = job("ExitCode", 1);
        let a = pod("train-master-0", "master", 0, "Running", None);
        let b = pod("train-worker-0", "worker", 0, "Failed", Some(137));
        let p = plan(
            KubeflowKind::PyTorchJob,
            &j,
            &[&a, &b],
            &InFlight::default(),
        );
        assert_eq!(p.deletes, ["train-worker-0"]);
        let s = p.status.expect("status");
        assert!(
            s["conditions"]
                .as_array()
                .expect("conds")
                .iter()
                .any(|c| c["type"] == "Restarting")
        );
        let b = pod("train-worker-0", "worker", 0, "Failed", Some(1));
        let p = plan(
            KubeflowKind::PyTorchJob,
            &j,
            &[&a, &b],
            &InFlight::default(),
        );
        assert!(p.deletes.is_empty());
        assert!(is_finished(&p.status.expect("status")));
    }

    #[test]
    fn never_policy_fails_the_job_and_a_finished_job_is_left_alone() {
        let mut j = job("Never", 1);
        let a = pod("train-master-0", "master", 0, "Running", None);
        let b = pod("train-worker-0", "worker", 0, "Failed", Some(1));
        let p = plan(
            KubeflowKind::PyTorchJob,
            &j,
            &[&a, &b],
            &InFlight::default(),
        );
        assert!(p.deletes.is_empty() && p.creates.is_empty());
        let status = p.status.expect("status");
        assert!(is_finished(&status));
        j.data["status"] = status;
        let p = plan(KubeflowKind::PyTorchJob, &j, &[&a], &InFlight::default());
        assert!(p.creates.is_empty(), "no pod recreated for a failed job");
    }
}
