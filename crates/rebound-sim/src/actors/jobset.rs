//! The JobSet controller (`jobset.x-k8s.io/v1alpha2`): one `batch/v1` Job per
//! replicated job and replica, named `<jobset>-<replicatedJob>-<index>`, with
//! JobSet's labels and annotations on the Job and its pod template
//! (`jobset.sigs.k8s.io/jobset-name`, `replicatedjob-name`,
//! `replicatedjob-replicas`, `job-index`, `job-global-index`,
//! `restart-attempt`, `jobset-uid`); pods come from the Job controller. A
//! failed child Job restarts the whole JobSet (all Jobs recreated with
//! `restart-attempt + 1`, `status.restarts + 1`) until
//! `failurePolicy.maxRestarts`, then the JobSet fails; when every Job
//! completed, the JobSet completes.
//!
//! Not simulated: the headless Service, `job-key` (a SHA-1 of the Job's
//! name), startup and success policies beyond "all", failure policy rules,
//! exclusive placement, suspend.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::runtime::watcher::Event;
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::children::{InFlight, observe};
use super::create::{CreateBackoff, Created, spawn_create};
use super::jobstore::JobStore;
use super::ratelimit::ClientLimit;
use super::runtime::{Writer, next_batch, ticks, watch_stream};
use super::util::{controller_of, is_not_found, key};

mod plan;
use plan::{child_view, plan};

/// Label and annotation: the JobSet's name.
pub const JOBSET_NAME: &str = "jobset.sigs.k8s.io/jobset-name";
/// Label and annotation: the replicated job's name.
pub const REPLICATED_JOB_NAME: &str = "jobset.sigs.k8s.io/replicatedjob-name";
/// Label and annotation: the replicated job's replica count.
pub const REPLICATED_JOB_REPLICAS: &str = "jobset.sigs.k8s.io/replicatedjob-replicas";
/// Label and annotation: the Job's index within its replicated job.
pub const JOB_INDEX: &str = "jobset.sigs.k8s.io/job-index";
/// Label and annotation: the Job's index across the JobSet.
pub const JOB_GLOBAL_INDEX: &str = "jobset.sigs.k8s.io/job-global-index";
/// Label and annotation: how many times the JobSet restarted when the Job
/// was made.
pub const RESTART_ATTEMPT: &str = "jobset.sigs.k8s.io/restart-attempt";
/// Label and annotation: the JobSet's uid.
pub const JOBSET_UID: &str = "jobset.sigs.k8s.io/jobset-uid";

/// The JobSet resource, for `Api<DynamicObject>`.
pub fn api_resource() -> ApiResource {
    ApiResource {
        group: "jobset.x-k8s.io".into(),
        version: "v1alpha2".into(),
        api_version: "jobset.x-k8s.io/v1alpha2".into(),
        kind: "JobSet".into(),
        plural: "jobsets".into(),
    }
}

/// What the controller keeps of a child Job.
#[derive(Debug, Clone, Default)]
struct ChildJob {
    name: String,
    attempt: i64,
    failed: bool,
    complete: bool,
    ready: bool,
    deleting: bool,
}

// One value per watch event, moved once into the loop: boxing the large
// variants would only add an allocation per event.
#[allow(clippy::large_enum_variant)]
enum Input {
    Set(Event<DynamicObject>),
    Job(Event<Job>),
    Done(String, Option<String>),
    /// A child Job create returned: (Job key, JobSet key, outcome).
    Created(String, String, Created),
    Tick,
}

/// Runs the JobSet controller until aborted.
pub async fn run(client: Client) {
    run_limited(client, ClientLimit::NONE).await;
}

/// Runs the JobSet controller until aborted, every request of its client waiting on
/// `limit` as the real component's client does (see [`super::ratelimit`]).
pub async fn run_limited(client: Client, limit: ClientLimit) {
    let sets: Api<DynamicObject> = Api::all_with(client.clone(), &api_resource());
    let jobs: Api<Job> = Api::all(client.clone());
    let (writer, results) = Writer::new(16);
    let writer = writer.limited(limit);
    let mut input = futures::stream::select_all(vec![
        watch_stream(sets, None, "jobsets").map(Input::Set).boxed(),
        watch_stream(jobs, Some(JOBSET_NAME), "jobset child jobs")
            .map(Input::Job)
            .boxed(),
        results.boxed(),
        ticks(Duration::from_secs(1)).map(|_| Input::Tick).boxed(),
    ]);
    let mut store = JobStore::default();
    // Child Jobs by owner uid, then by name.
    let mut children: HashMap<String, HashMap<String, ChildJob>> = HashMap::new();
    let mut in_flight = if limit.is_limited() {
        InFlight::with_ttl(InFlight::LIMITED_TTL)
    } else {
        InFlight::default()
    };
    let mut backoff = CreateBackoff::default();
    while let Some(batch) = next_batch(&mut input, 1024).await {
        let mut dirty: HashSet<String> = HashSet::new();
        for ev in batch {
            match ev {
                Input::Set(e) => {
                    let ch = store.on_event("JobSet", e);
                    dirty.extend(ch.dirty);
                    for (k, uid) in ch.deleted {
                        backoff.forget(&k);
                        let ns = k
                            .split_once('/')
                            .map(|(n, _)| n.to_owned())
                            .unwrap_or_default();
                        for c in children.get(&uid).into_iter().flat_map(|m| m.values()) {
                            let api: Api<Job> = Api::namespaced(client.clone(), &ns);
                            let name = c.name.clone();
                            writer.spawn(async move {
                                let _ = api.delete(&name, &DeleteParams::background()).await;
                                Input::Done(String::new(), None)
                            });
                        }
                    }
                }
                Input::Job(e) => {
                    observe(&mut in_flight, &e);
                    let (apply, job) = match e {
                        Event::Apply(j) | Event::InitApply(j) => (true, j),
                        Event::Delete(j) => (false, j),
                        Event::Init | Event::InitDone => continue,
                    };
                    let Some(owner) = controller_of(&job.metadata).map(|o| o.uid.clone()) else {
                        continue;
                    };
                    if apply {
                        children
                            .entry(owner.clone())
                            .or_default()
                            .insert(job.name_any(), child_view(&job));
                    } else if let Some(m) = children.get_mut(&owner) {
                        m.remove(&job.name_any());
                    }
                    if let Some(sk) = store.key_of_uid(&owner) {
                        dirty.insert(sk.clone());
                    }
                }
                Input::Done(item, set) => {
                    in_flight.returned(&item, false);
                    if let Some(s) = set {
                        dirty.insert(s);
                    }
                }
                Input::Created(k, sk, c) => {
                    in_flight.returned(&k, !c.exists());
                    if backoff.record(&sk, &c, Instant::now()) {
                        dirty.insert(sk);
                    }
                }
                Input::Tick => {
                    in_flight.expire();
                    dirty.extend(backoff.due(Instant::now()));
                }
            }
        }
        for sk in dirty {
            let Some(js) = store.jobs.get(&sk) else {
                continue;
            };
            if js.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let uid = js.uid().unwrap_or_default();
            let ns = js.namespace().unwrap_or_default();
            let kids: Vec<&ChildJob> = children
                .get(&uid)
                .into_iter()
                .flat_map(|m| m.values())
                .collect();
            let p = plan(js, &kids, &in_flight);
            let creates = if backoff.waiting(&sk, Instant::now()) {
                Vec::new()
            } else {
                p.creates
            };
            for job in creates {
                let name = job["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let k = key(&ns, &name);
                in_flight.insert_create(k.clone());
                let api: Api<Job> = Api::namespaced(client.clone(), &ns);
                let sk2 = sk.clone();
                spawn_create(&writer, api, job, move |c| Input::Created(k, sk2, c));
            }
            for name in p.deletes {
                let k = key(&ns, &name);
                in_flight.insert_delete(k.clone());
                let api: Api<Job> = Api::namespaced(client.clone(), &ns);
                let sk2 = sk.clone();
                writer.spawn(async move {
                    if let Err(e) = api.delete(&name, &DeleteParams::foreground()).await
                        && !is_not_found(&e)
                    {
                        tracing::debug!(job = %name, error = %e, "delete child job");
                    }
                    Input::Done(k, Some(sk2))
                });
            }
            if let Some(status) = p.status {
                let stk = format!("{sk}#status");
                if in_flight.contains(&stk) {
                    continue;
                }
                in_flight.insert(stk.clone());
                let api: Api<DynamicObject> =
                    Api::namespaced_with(client.clone(), &ns, &api_resource());
                let name = js.name_any();
                let sk2 = sk.clone();
                writer.spawn(async move {
                    let patch = json!({"status": status});
                    if let Err(e) = api
                        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                    {
                        tracing::debug!(jobset = %name, error = %e, "jobset status");
                    }
                    Input::Done(stk, Some(sk2))
                });
            }
        }
    }
}

#[cfg(test)]
mod tests;
