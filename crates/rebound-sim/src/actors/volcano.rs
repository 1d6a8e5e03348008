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
use serde_json::{Value, json};

use super::children::{ChildPod, InFlight, PodIndex, observe};
use super::create::{CreateBackoff, Created, spawn_create};
use super::jobstore::JobStore;
use super::ratelimit::ClientLimit;
use super::runtime::{Writer, next_batch, ticks, watch_stream};
use super::util::{is_not_found, key, str_at};

mod plan;

use plan::{Request, plan, policy_action};

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
mod tests;
