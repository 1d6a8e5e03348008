//! The Volcano job controller (`batch.volcano.sh/v1alpha1` Job and
//! `bus.volcano.sh/v1alpha1` Command), for what rebound relies on: pods
//! `<job>-<task>-<index>` with Volcano's labels (`volcano.sh/job-name`,
//! `volcano.sh/job-namespace`, `volcano.sh/task-spec`,
//! `volcano.sh/queue-name`, `volcano.sh/task-index`) and annotations
//! (`volcano.sh/job-version`, `volcano.sh/task-index`, `volcano.sh/task-spec`,
//! `scheduling.k8s.io/group-name`, ...), missing pods recreated, and the
//! actions of lifecycle policies (`events`/`exitCode` → `RestartJob`,
//! `RestartTask`, `RestartPod`, `AbortJob`, `TerminateJob`, `CompleteJob`).
//!
//! A Command whose `target` is a Job is deleted first and then executed, as
//! the real controller does. `RestartJob` deletes every pod, bumps
//! `status.version` and `status.retryCount`, goes through `Restarting` and
//! recreates the pods; once `retryCount` reaches `maxRetry` (default 3) the
//! job fails instead.
//!
//! Not simulated: PodGroups and the Volcano scheduler (the plain simulated
//! scheduler places the pods), plugins (svc, ssh, env), `minSuccess`,
//! task-level `minAvailable`, `dependsOn`, timeouts of policies.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::runtime::watcher::Event;
use kube::{Api, Client, ResourceExt};
use serde_json::{Map, Value, json};

use super::children::{ChildPod, InFlight, PodIndex, observe};
use super::create::{CreateBackoff, Created, spawn_create};
use super::jobstore::JobStore;
use super::ratelimit::ClientLimit;
use super::runtime::{Writer, next_batch, ticks, watch_stream};
use super::util::{controller_ref, is_not_found, key, now_rfc3339, str_at};

/// Label and annotation: the Volcano job's name.
pub const JOB_NAME: &str = "volcano.sh/job-name";
/// Label: the Volcano job's namespace.
pub const JOB_NAMESPACE: &str = "volcano.sh/job-namespace";
/// Label and annotation: the task (template) name.
pub const TASK_SPEC: &str = "volcano.sh/task-spec";
/// Label and annotation: the queue.
pub const QUEUE_NAME: &str = "volcano.sh/queue-name";
/// Annotation: the job version the pod was made for.
pub const JOB_VERSION: &str = "volcano.sh/job-version";
/// Label and annotation: the pod's index within its task.
pub const TASK_INDEX: &str = "volcano.sh/task-index";

/// The Volcano Job resource.
pub fn job_resource() -> ApiResource {
    ApiResource {
        group: "batch.volcano.sh".into(),
        version: "v1alpha1".into(),
        api_version: "batch.volcano.sh/v1alpha1".into(),
        kind: "Job".into(),
        plural: "jobs".into(),
    }
}

/// The Volcano Command resource.
pub fn command_resource() -> ApiResource {
    ApiResource {
        group: "bus.volcano.sh".into(),
        version: "v1alpha1".into(),
        api_version: "bus.volcano.sh/v1alpha1".into(),
        kind: "Command".into(),
        plural: "commands".into(),
    }
}

/// An action requested for a job, by a Command or a lifecycle policy.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Request {
    action: String,
    /// The pod whose event triggered it (RestartPod, RestartTask).
    pod: Option<String>,
}

#[derive(Debug, Default)]
struct Plan {
    creates: Vec<Value>,
    deletes: Vec<String>,
    status: Option<Value>,
}

fn is_terminal(phase: &str) -> bool {
    matches!(phase, "Completed" | "Failed" | "Aborted" | "Terminated")
}

fn pod_version(p: &ChildPod) -> i64 {
    p.annotations
        .get(JOB_VERSION)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The action a pod event maps to through the job's (then the task's)
/// lifecycle policies; `None` is the default `SyncJob`.
fn policy_action(job: &Value, task: &str, event: &str, exit_code: Option<i32>) -> Option<String> {
    let task_policies = job["spec"]["tasks"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| str_at(t, &["name"]) == Some(task))
        .and_then(|t| t["policies"].as_array().cloned())
        .unwrap_or_default();
    let job_policies = job["spec"]["policies"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for p in task_policies.iter().chain(job_policies.iter()) {
        let mut events: Vec<&str> = p["events"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if let Some(e) = str_at(p, &["event"]) {
            events.push(e);
        }
        if events.iter().any(|e| *e == event || *e == "*") {
            return str_at(p, &["action"]).map(str::to_owned);
        }
        if let (Some(want), Some(got)) = (p["exitCode"].as_i64(), exit_code)
            && want == i64::from(got)
        {
            return str_at(p, &["action"]).map(str::to_owned);
        }
    }
    None
}

fn make_pod(job: &DynamicObject, task: &Value, index: i64, version: i64) -> Value {
    let name = job.name_any();
    let ns = job.namespace().unwrap_or_default();
    let tname = str_at(task, &["name"]).unwrap_or("default");
    let queue = str_at(&job.data, &["spec", "queue"])
        .unwrap_or("default")
        .to_owned();
    let template = &task["template"];
    let mut labels: Map<String, Value> = template["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut ann: Map<String, Value> = template["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let idx = index.to_string();
    ann.insert(TASK_SPEC.into(), json!(tname));
    ann.insert(
        "scheduling.k8s.io/group-name".into(),
        json!(format!("{name}-{}", job.uid().unwrap_or_default())),
    );
    ann.insert(JOB_NAME.into(), json!(name));
    ann.insert(QUEUE_NAME.into(), json!(queue));
    ann.insert(JOB_VERSION.into(), json!(version.to_string()));
    ann.insert(
        "volcano.sh/template-uid".into(),
        json!(format!("{name}-{tname}")),
    );
    ann.insert(TASK_INDEX.into(), json!(idx));
    labels.insert(JOB_NAME.into(), json!(name));
    labels.insert(TASK_SPEC.into(), json!(tname));
    labels.insert(JOB_NAMESPACE.into(), json!(ns));
    labels.insert(QUEUE_NAME.into(), json!(queue));
    labels.insert(TASK_INDEX.into(), json!(idx));
    let mut spec = template["spec"].clone();
    if !spec.is_object() {
        spec = json!({});
    }
    if spec.get("schedulerName").is_none() {
        spec["schedulerName"] =
            json!(str_at(&job.data, &["spec", "schedulerName"]).unwrap_or("volcano"));
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("{name}-{tname}-{index}"),
            "namespace": ns,
            "labels": labels,
            "annotations": ann,
            "ownerReferences": [controller_ref("batch.volcano.sh/v1alpha1", "Job", &name, &job.uid().unwrap_or_default())],
        },
        "spec": spec,
    })
}

fn set_phase(status: &mut Value, phase: &str, reason: &str, message: &str) {
    if str_at(status, &["state", "phase"]) == Some(phase) {
        return;
    }
    let now = now_rfc3339();
    status["state"] =
        json!({"phase": phase, "reason": reason, "message": message, "lastTransitionTime": now});
    let mut conds = status["conditions"].as_array().cloned().unwrap_or_default();
    conds.push(json!({"status": phase, "lastTransitionTime": now}));
    status["conditions"] = json!(conds);
}

/// One reconcile: applies pending requests, then syncs pods and status.
fn plan(
    job: &DynamicObject,
    status_in: &Value,
    pods: &[&ChildPod],
    requests: &[Request],
    in_flight: &InFlight,
) -> Plan {
    let mut plan = Plan::default();
    let ns = job.namespace().unwrap_or_default();
    let spec = &job.data["spec"];
    let mut status = if status_in.is_object() {
        status_in.clone()
    } else {
        json!({})
    };
    let mut phase = str_at(&status, &["state", "phase"])
        .unwrap_or("Pending")
        .to_owned();
    let mut version = status["version"].as_i64().unwrap_or(0);
    let mut retry = status["retryCount"].as_i64().unwrap_or(0);
    let max_retry = spec["maxRetry"].as_i64().unwrap_or(3);
    let min_available = spec["minAvailable"].as_i64();
    let tasks: &[Value] = spec["tasks"].as_array().map_or(&[], Vec::as_slice);
    let total: i64 = tasks
        .iter()
        .map(|t| t["replicas"].as_i64().unwrap_or(1))
        .sum();
    let min_available = min_available.unwrap_or(total);
    let mut kill_all = false;
    let mut kill: HashSet<String> = HashSet::new();
    if status.get("state").is_none() {
        set_phase(&mut status, "Pending", "", "");
    }
    for r in requests {
        if is_terminal(&phase) {
            break;
        }
        match r.action.as_str() {
            "RestartJob" => {
                kill_all = true;
                version += 1;
                retry += 1;
                phase = "Restarting".into();
                set_phase(&mut status, "Restarting", "RestartJob", "job is restarting");
            }
            "AbortJob" => {
                kill_all = true;
                phase = "Aborted".into();
                set_phase(&mut status, "Aborted", "AbortJob", "job is aborted");
            }
            "TerminateJob" => {
                kill_all = true;
                phase = "Terminated".into();
                set_phase(
                    &mut status,
                    "Terminated",
                    "TerminateJob",
                    "job is terminated",
                );
            }
            "CompleteJob" => {
                kill_all = true;
                phase = "Completed".into();
                set_phase(&mut status, "Completed", "CompleteJob", "job is completed");
            }
            "RestartPod" => kill.extend(r.pod.clone()),
            "RestartTask" => {
                if let Some(p) = r
                    .pod
                    .as_ref()
                    .and_then(|n| pods.iter().find(|p| &p.name == n))
                    && let Some(t) = p.labels.get(TASK_SPEC)
                {
                    kill.extend(
                        pods.iter()
                            .filter(|q| q.labels.get(TASK_SPEC) == Some(t))
                            .map(|q| q.name.clone()),
                    );
                }
            }
            _ => {}
        }
    }
    for p in pods {
        let doomed = kill_all && (phase != "Completed" || p.active());
        if (doomed || kill.contains(&p.name))
            && !p.deleting
            && !in_flight.contains(&key(&ns, &p.name))
        {
            plan.deletes.push(p.name.clone());
        }
    }
    // by name: a job of 1,024 pods is planned on every batch of its pods'
    // changes, so no scan of the pods per replica
    let deleting: HashSet<&str> = plan.deletes.iter().map(String::as_str).collect();
    let remaining: HashMap<&str, &ChildPod> = pods
        .iter()
        .filter(|p| !deleting.contains(p.name.as_str()))
        .map(|p| (p.name.as_str(), *p))
        .collect();
    if phase == "Restarting"
        && !kill_all
        && remaining
            .values()
            .all(|p| pod_version(p) >= version || p.deleting)
    {
        let old_alive = remaining.values().any(|p| pod_version(p) < version);
        if !old_alive {
            if retry >= max_retry {
                phase = "Failed".into();
                set_phase(
                    &mut status,
                    "Failed",
                    "MaxRetryReached",
                    "job failed: it reached maxRetry",
                );
            } else {
                phase = "Pending".into();
                set_phase(&mut status, "Pending", "", "");
            }
        }
    }
    let (mut pending, mut running, mut succeeded, mut failed, mut terminating) = (0, 0, 0, 0, 0);
    let mut task_counts = Map::new();
    for t in tasks {
        let tname = str_at(t, &["name"]).unwrap_or("default");
        let replicas = t["replicas"].as_i64().unwrap_or(1);
        let mut counts: HashMap<&str, i64> = HashMap::new();
        for i in 0..replicas {
            let pname = format!("{}-{tname}-{i}", job.name_any());
            match remaining.get(pname.as_str()) {
                Some(p) if p.deleting => terminating += 1,
                Some(p) => {
                    let ph = p.phase();
                    *counts
                        .entry(match ph {
                            "Running" => "Running",
                            "Succeeded" => "Succeeded",
                            "Failed" => "Failed",
                            _ => "Pending",
                        })
                        .or_default() += 1;
                    match ph {
                        "Running" => running += 1,
                        "Succeeded" => succeeded += 1,
                        "Failed" => failed += 1,
                        _ => pending += 1,
                    }
                }
                None => {
                    if matches!(phase.as_str(), "Pending" | "Running")
                        && !deleting.contains(pname.as_str())
                        && !in_flight.contains(&key(&ns, &pname))
                    {
                        plan.creates.push(make_pod(job, t, i, version));
                    }
                }
            }
        }
        if !counts.is_empty() {
            task_counts.insert(tname.into(), json!({"phase": counts}));
        }
    }
    if phase == "Pending" && running + succeeded >= min_available && min_available > 0 {
        phase = "Running".into();
        set_phase(&mut status, "Running", "", "");
    }
    if phase == "Running" && total > 0 && succeeded + failed == total {
        if succeeded >= min_available {
            set_phase(&mut status, "Completed", "", "");
        } else {
            set_phase(&mut status, "Failed", "", "");
        }
    }
    status["minAvailable"] = json!(min_available);
    status["pending"] = json!(pending);
    status["running"] = json!(running);
    status["succeeded"] = json!(succeeded);
    status["failed"] = json!(failed);
    status["terminating"] = json!(terminating + plan.deletes.len() as i64);
    status["version"] = json!(version);
    status["retryCount"] = json!(retry);
    status["taskStatusCount"] = Value::Object(task_counts);
    if &status != status_in {
        plan.status = Some(status);
    }
    plan
}

// One value per watch event, moved once into the loop: boxing the large
// variants would only add an allocation per event.
#[allow(clippy::large_enum_variant)]
enum Input {
    Job(Event<DynamicObject>),
    Command(Event<DynamicObject>),
    Pod(Event<Pod>),
    CommandDeleted(String, String, bool),
    Done(String, Option<String>),
    /// A pod create returned: (pod key, job key, outcome).
    Created(String, String, Created),
    /// A job's kill (every patch and delete) ended.
    KillDone(String),
    /// A job's status write returned: (job key, job uid).
    StatusDone(String, String),
    Tick,
}

/// Runs the Volcano job controller until aborted.
pub async fn run(client: Client) {
    run_limited(client, ClientLimit::NONE).await;
}

/// Runs the Volcano job controller until aborted, every request of its client waiting on
/// `limit` as the real component's client does (see [`super::ratelimit`]).
pub async fn run_limited(client: Client, limit: ClientLimit) {
    let jobs_api: Api<DynamicObject> = Api::all_with(client.clone(), &job_resource());
    let cmds_api: Api<DynamicObject> = Api::all_with(client.clone(), &command_resource());
    let pods: Api<Pod> = Api::all(client.clone());
    let (writer, results) = Writer::new(32);
    let writer = writer.limited(limit);
    let mut input = futures::stream::select_all(vec![
        watch_stream(jobs_api, None, "volcano jobs")
            .map(Input::Job)
            .boxed(),
        watch_stream(cmds_api, None, "volcano commands")
            .map(Input::Command)
            .boxed(),
        watch_stream(pods, Some(JOB_NAMESPACE), "volcano pods")
            .map(Input::Pod)
            .boxed(),
        results.boxed(),
        ticks(Duration::from_secs(1)).map(|_| Input::Tick).boxed(),
    ]);
    let mut store = JobStore::default();
    let mut index = PodIndex::default();
    let mut in_flight = if limit.is_limited() {
        InFlight::with_ttl(InFlight::LIMITED_TTL)
    } else {
        InFlight::default()
    };
    let mut backoff = CreateBackoff::default();
    // The status this controller last wrote, by job uid: the controller is
    // its only writer, so it is newer than what the watch may still show.
    let mut status_cache: HashMap<String, Value> = HashMap::new();
    // Jobs whose kill is running, and jobs (by uid) whose newest status
    // waits for the end of their kill to be written.
    let mut killing: HashSet<String> = HashSet::new();
    let mut unwritten: HashSet<String> = HashSet::new();
    let mut status_busy: HashSet<String> = HashSet::new();
    let mut requests: HashMap<String, Vec<Request>> = HashMap::new();
    // Pod failures already turned into policy events, by pod uid.
    let mut handled: HashSet<String> = HashSet::new();
    // Pods this controller deleted, until the watch confirms it, so that
    // they are not mistaken for evictions.
    let mut own_deletes: HashSet<String> = HashSet::new();
    while let Some(batch) = next_batch(&mut input, 2048).await {
        let mut dirty: HashSet<String> = HashSet::new();
        for ev in batch {
            match ev {
                Input::Job(e) => {
                    let ch = store.on_event("Job", e);
                    dirty.extend(ch.dirty);
                    for (k, uid) in ch.deleted {
                        backoff.forget(&k);
                        status_cache.remove(&uid);
                        requests.remove(&k);
                        let ns = k
                            .split_once('/')
                            .map(|(n, _)| n.to_owned())
                            .unwrap_or_default();
                        for p in index.of(&uid) {
                            let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
                            let name = p.name.clone();
                            writer.spawn(async move {
                                let _ = api.delete(&name, &DeleteParams::background()).await;
                                Input::Done(String::new(), None)
                            });
                        }
                    }
                }
                Input::Command(Event::Apply(c)) | Input::Command(Event::InitApply(c)) => {
                    let target = &c.data["target"];
                    let is_job = str_at(target, &["kind"]) == Some("Job")
                        && str_at(target, &["apiVersion"])
                            .is_none_or(|a| a.starts_with("batch.volcano.sh/"));
                    let ns = c.namespace().unwrap_or_default();
                    let ck = key(&ns, &c.name_any());
                    if !is_job || in_flight.contains(&ck) {
                        continue;
                    }
                    let Some(jname) = str_at(target, &["name"]).map(str::to_owned) else {
                        continue;
                    };
                    let action = str_at(&c.data, &["action"]).unwrap_or("").to_owned();
                    in_flight.insert(ck.clone());
                    let api: Api<DynamicObject> =
                        Api::namespaced_with(client.clone(), &ns, &command_resource());
                    let name = c.name_any();
                    let jk = key(&ns, &jname);
                    writer.spawn(async move {
                        // Deleted first, so it runs at most once.
                        let ok = match api.delete(&name, &DeleteParams::default()).await {
                            Ok(_) => true,
                            Err(e) => {
                                tracing::debug!(command = %name, error = %e, "delete command");
                                false
                            }
                        };
                        Input::CommandDeleted(jk, action, ok)
                    });
                }
                Input::Command(_) => {}
                Input::CommandDeleted(jk, action, ok) => {
                    if ok {
                        requests
                            .entry(jk.clone())
                            .or_default()
                            .push(Request { action, pod: None });
                        dirty.insert(jk);
                    }
                }
                Input::Pod(e) => {
                    observe(&mut in_flight, &e);
                    let deleted = match &e {
                        Event::Delete(p) => Some(p.clone()),
                        _ => None,
                    };
                    for owner in index.on_event(e) {
                        let Some(jk) = store.key_of_uid(&owner).cloned() else {
                            continue;
                        };
                        if let Some(p) = &deleted {
                            // An eviction: a pod of the current version went
                            // away without this controller deleting it.
                            let pk = key(&p.namespace().unwrap_or_default(), &p.name_any());
                            let version: i64 = p
                                .annotations()
                                .get(JOB_VERSION)
                                .and_then(|v| v.parse().ok())
                                .unwrap_or(0);
                            let cur = status_cache
                                .get(&owner)
                                .and_then(|s| s["version"].as_i64())
                                .unwrap_or(0);
                            if !own_deletes.remove(&pk)
                                && version == cur
                                && let Some(job) = store.jobs.get(&jk)
                            {
                                let task = p.labels().get(TASK_SPEC).cloned().unwrap_or_default();
                                if let Some(a) = policy_action(&job.data, &task, "PodEvicted", None)
                                {
                                    requests.entry(jk.clone()).or_default().push(Request {
                                        action: a,
                                        pod: Some(p.name_any()),
                                    });
                                }
                            }
                        }
                        dirty.insert(jk);
                    }
                }
                Input::Done(item, job) => {
                    in_flight.returned(&item, false);
                    if let Some(j) = job {
                        dirty.insert(j);
                    }
                }
                Input::KillDone(jk) => {
                    killing.remove(&jk);
                    dirty.insert(jk);
                }
                Input::StatusDone(jk, uid) => {
                    status_busy.remove(&uid);
                    if unwritten.contains(&uid) {
                        dirty.insert(jk);
                    }
                }
                Input::Created(k, jk, c) => {
                    in_flight.returned(&k, !c.exists());
                    if backoff.record(&jk, &c, Instant::now()) {
                        dirty.insert(jk);
                    }
                }
                Input::Tick => {
                    in_flight.expire();
                    dirty.extend(backoff.due(Instant::now()));
                }
            }
        }
        for jk in dirty {
            let Some(job) = store.jobs.get(&jk) else {
                continue;
            };
            if job.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let uid = job.uid().unwrap_or_default();
            let ns = job.namespace().unwrap_or_default();
            let pods: Vec<&ChildPod> = index.of(&uid).collect();
            let mut reqs = requests.remove(&jk).unwrap_or_default();
            // Pod failures become PodFailed events through the policies.
            for p in &pods {
                if p.phase() == "Failed" && handled.insert(p.uid.clone()) {
                    let task = p.labels.get(TASK_SPEC).cloned().unwrap_or_default();
                    let code = p.exit_codes.first().map(|(_, c)| *c);
                    if let Some(a) = policy_action(&job.data, &task, "PodFailed", code) {
                        reqs.push(Request {
                            action: a,
                            pod: Some(p.name.clone()),
                        });
                    }
                }
            }
            let status_in = status_cache
                .get(&uid)
                .cloned()
                .or_else(|| job.data.get("status").cloned())
                .unwrap_or(json!({}));
            let p = plan(job, &status_in, &pods, &reqs, &in_flight);
            let creates = if backoff.waiting(&jk, Instant::now()) {
                Vec::new()
            } else {
                p.creates
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
            if !p.deletes.is_empty() {
                killing.insert(jk.clone());
                let mut keys = Vec::with_capacity(p.deletes.len());
                for name in &p.deletes {
                    let k = key(&ns, name);
                    in_flight.insert_delete(k.clone());
                    own_deletes.insert(k.clone());
                    keys.push(k);
                }
                spawn_kill(
                    &writer,
                    Api::namespaced(client.clone(), &ns),
                    p.deletes,
                    keys,
                    jk.clone(),
                );
            }
            // While its kill runs, the job's worker is busy in killPods:
            // no status write for it until the kill ends (the real one
            // writes the status once, after the kills).
            let fresh = p.status.is_some();
            if let Some(status) = p.status {
                status_cache.insert(uid.clone(), status);
            }
            // Nor while its previous status write is under way: the real
            // controller syncs a job in one worker at a time, one status
            // write per sync, so writes never queue up behind its rate limit.
            let status = if killing.contains(&jk) || status_busy.contains(&uid) {
                if fresh {
                    unwritten.insert(uid.clone());
                }
                None
            } else if fresh || unwritten.contains(&uid) {
                unwritten.remove(&uid);
                status_cache.get(&uid).cloned()
            } else {
                None
            };
            if let Some(status) = status {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(client.clone(), &ns, &job_resource());
                let name = job.name_any();
                let (jk2, uid2) = (jk.clone(), uid.clone());
                status_busy.insert(uid.clone());
                writer.spawn(async move {
                    let patch = json!({"status": status});
                    if let Err(e) = api
                        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                    {
                        tracing::debug!(job = %name, error = %e, "volcano job status");
                    }
                    Input::StatusDone(jk2, uid2)
                });
            }
        }
    }
}

/// Annotation the simulated controller writes on a pod before it deletes
/// it, standing for the real `killPods`' out-of-sync JSON patch
/// (`jobhelpers.OutOfSyncJSONPatch`), whose exact content this simulation
/// does not copy: what is modelled is the request.
pub const OUT_OF_SYNC: &str = "rebound.dev/sim-volcano-out-of-sync";

/// Kills pods as volcano-controller-manager's `killPods` does (since
/// v1.14, `pkg/controllers/job/job_controller_actions.go`): one loop that
/// patches every pod out of sync, one request after another, then one
/// loop that deletes them, one after another, all through the controller's
/// rate-limited client, within one sync of the job (one worker holds the
/// job meanwhile). Each pod's end is reported as [`Input::Done`].
fn spawn_kill(
    writer: &Writer<Input>,
    api: Api<Pod>,
    names: Vec<String>,
    keys: Vec<String>,
    jk: String,
) {
    let bucket = writer.bucket();
    let tx = writer.sender();
    tokio::spawn(async move {
        let patch = json!({"metadata": {"annotations": {OUT_OF_SYNC: "true"}}});
        for name in &names {
            if let Some(b) = &bucket {
                b.wait().await;
            }
            if let Err(e) = api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                && !is_not_found(&e)
            {
                tracing::debug!(pod = %name, error = %e, "mark volcano pod out of sync");
            }
        }
        for (name, k) in names.iter().zip(keys) {
            if let Some(b) = &bucket {
                b.wait().await;
            }
            if let Err(e) = api.delete(name, &DeleteParams::default()).await
                && !is_not_found(&e)
            {
                tracing::debug!(pod = %name, error = %e, "delete volcano pod");
            }
            let _ = tx.send(Input::Done(k, Some(jk.clone())));
        }
        let _ = tx.send(Input::KillDone(jk));
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn job(policies: Value) -> DynamicObject {
        let mut o = DynamicObject::new("vj", &job_resource()).within("ns");
        o.metadata.uid = Some("u".into());
        o.data = json!({"spec": {"minAvailable": 2, "queue": "q", "maxRetry": 2, "policies": policies,
            "tasks": [{"name": "worker", "replicas": 2, "template": {
                "metadata": {"labels": {"kcover.io/cascading-recovery": "true"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}]}});
        o
    }

    fn pod(i: usize, phase: &str, version: i64) -> ChildPod {
        ChildPod {
            name: format!("vj-worker-{i}"),
            labels: BTreeMap::from([(TASK_SPEC.to_owned(), "worker".to_owned())]),
            annotations: BTreeMap::from([(JOB_VERSION.to_owned(), version.to_string())]),
            phase: Some(phase.into()),
            ..Default::default()
        }
    }

    #[test]
    fn pods_carry_volcano_labels_and_annotations() {
        let j = job(json!([]));
        let p = plan(&j, &json!({}), &[], &[], &InFlight::default());
        assert_eq!(p.creates.len(), 2);
        let m = &p.creates[1]["metadata"];
        assert_eq!(m["name"], "vj-worker-1");
        assert_eq!(m["labels"][JOB_NAME], "vj");
        assert_eq!(m["labels"][QUEUE_NAME], "q");
        assert_eq!(m["labels"]["kcover.io/cascading-recovery"], "true");
        assert_eq!(m["annotations"][TASK_INDEX], "1");
        assert_eq!(m["annotations"][JOB_VERSION], "0");
    }

    #[test]
    fn restart_job_kills_bumps_and_recreates_until_max_retry() {
        let j = job(json!([]));
        let (a, b) = (pod(0, "Running", 0), pod(1, "Running", 0));
        let st = json!({"state": {"phase": "Running"}, "version": 0, "retryCount": 0});
        let req = [Request {
            action: "RestartJob".into(),
            pod: None,
        }];
        let p = plan(&j, &st, &[&a, &b], &req, &InFlight::default());
        assert_eq!(p.deletes.len(), 2);
        let st = p.status.expect("status");
        assert_eq!(st["version"], 1);
        assert_eq!(st["retryCount"], 1);
        assert_eq!(str_at(&st, &["state", "phase"]), Some("Restarting"));
        // Pods gone: back to Pending and recreated with the new version.
        let p = plan(&j, &st, &[], &[], &InFlight::default());
        assert_eq!(p.creates.len(), 2);
        assert_eq!(p.creates[0]["metadata"]["annotations"][JOB_VERSION], "1");
        let st = p.status.expect("status");
        assert_eq!(str_at(&st, &["state", "phase"]), Some("Pending"));
        // The second restart reaches maxRetry = 2: the job fails.
        let (a, b) = (pod(0, "Running", 1), pod(1, "Running", 1));
        let p = plan(&j, &st, &[&a, &b], &req, &InFlight::default());
        let st = p.status.expect("status");
        let p = plan(&j, &st, &[], &[], &InFlight::default());
        assert!(p.creates.is_empty());
        assert_eq!(
            p.status
                .and_then(|s| str_at(&s, &["state", "phase"]).map(str::to_owned))
                .as_deref(),
            Some("Failed")
        );
    }

    #[test]
    fn policies_map_events_and_exit_codes() {
        let j = job(
            json!([{"event": "PodEvicted", "action": "RestartJob"}, {"exitCode": 3, "action": "AbortJob"}]),
        );
        assert_eq!(
            policy_action(&j.data, "worker", "PodEvicted", None).as_deref(),
            Some("RestartJob")
        );
        assert_eq!(
            policy_action(&j.data, "worker", "PodFailed", Some(3)).as_deref(),
            Some("AbortJob")
        );
        assert_eq!(policy_action(&j.data, "worker", "PodFailed", Some(1)), None);
    }
}
