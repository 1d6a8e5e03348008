//! The batch `Job` controller (`batch/v1`), for what rebound relies on: pods
//! named like the API server's `generateName` (`<job>-<suffix>`, or
//! `<job>-<index>-<suffix>` for Indexed jobs) carrying the labels the API
//! server and controller put there (`batch.kubernetes.io/controller-uid`,
//! `batch.kubernetes.io/job-name`, `controller-uid`, `job-name`, the
//! completion index for Indexed jobs), a controller owner reference, pods
//! replaced while the job is active (deleted ones too), `backoffLimit`, and
//! the `Complete`/`Failed` conditions (with `SuccessCriteriaMet` and
//! `FailureTarget` first, as since Kubernetes 1.31).
//!
//! With the published limits it also waits its pod failure backoff
//! (`failures`): a pod deleted before it finished counts as failed, as on
//! the real controller, and no pod is created until 10 s × 2^(n−1) (at
//! most 10 min) passed since the last failure.
//!
//! Not simulated: pod failure policies, success policies,
//! `activeDeadlineSeconds`, tracking finalizers; the Job's own selector
//! defaulting is left to the API server.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::watcher::Event;
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use super::children::{ChildPod, InFlight, PodIndex, observe};
use super::create::{CreateBackoff, Created, spawn_create};
use super::ratelimit::{ClientLimit, slow_start_batches};
use super::runtime::{Writer, next_batch, ticks, watch_stream};
use super::util::{is_not_found, key};

mod failures;
mod plan;
use failures::FailureBackoff;
use plan::plan;

/// Label: uid of the Job that owns the pod.
pub const CONTROLLER_UID_LABEL: &str = "batch.kubernetes.io/controller-uid";
/// Label: name of the Job that owns the pod.
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";
/// Label and annotation: completion index of an Indexed job's pod.
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";

/// Pods being created, by owner uid, until the watch shows them.
#[derive(Debug, Default)]
struct Creating {
    by_job: HashMap<String, HashMap<String, (Option<i32>, Instant)>>,
    /// `None`: [`Self::TTL`].
    ttl: Option<Duration>,
}

impl Creating {
    const TTL: Duration = Duration::from_secs(30);

    fn prune(&mut self, uid: &str, seen: &HashSet<&str>) {
        let ttl = self.ttl.unwrap_or(Self::TTL);
        if let Some(m) = self.by_job.get_mut(uid) {
            m.retain(|n, (_, t)| !seen.contains(n.as_str()) && t.elapsed() < ttl);
        }
    }

    fn of(&self, uid: &str) -> Vec<Option<i32>> {
        self.by_job
            .get(uid)
            .map(|m| m.values().map(|(i, _)| *i).collect())
            .unwrap_or_default()
    }
}

// One value per watch event, moved once into the loop: boxing the large
// variants would only add an allocation per event.
#[allow(clippy::large_enum_variant)]
enum Input {
    Job(Event<Job>),
    Pod(Event<Pod>),
    /// A pod create returned: (job uid, pod name, outcome).
    Created(String, String, Created),
    Done(String, Option<String>),
    Tick,
}

/// Runs the Job controller until aborted.
pub async fn run(client: Client) {
    run_limited(
        client,
        ClientLimit::NONE,
        0,
        (Duration::ZERO, Duration::ZERO),
    )
    .await;
}

/// Runs the Job controller until aborted, every request of its client waiting on
/// `limit` as the real component's client does (see [`super::ratelimit`]).
/// With a limit it also creates as kube-controller-manager's Job
/// controller does: at most `max_per_sync` pods per sync (0: no cap,
/// `MaxPodCreateDeletePerSync` = 500 there), in slow-start batches of 1, 2,
/// 4, … (each waits for the previous one's answers), and no new creates
/// while the job's earlier ones are not yet seen (its expectations).
/// `failure_backoff` is the pod failure backoff's base and cap
/// (`failures`; zero for none).
pub async fn run_limited(
    client: Client,
    limit: ClientLimit,
    max_per_sync: usize,
    failure_backoff: (Duration, Duration),
) {
    let jobs_api: Api<Job> = Api::all(client.clone());
    let pods: Api<Pod> = Api::all(client.clone());
    let (writer, results) = Writer::new(32);
    let writer = writer.limited(limit);
    let mut input = futures::stream::select_all(vec![
        watch_stream(jobs_api, None, "job controller jobs")
            .map(Input::Job)
            .boxed(),
        watch_stream(pods, Some(CONTROLLER_UID_LABEL), "job controller pods")
            .map(Input::Pod)
            .boxed(),
        results.boxed(),
        ticks(Duration::from_secs(1)).map(|_| Input::Tick).boxed(),
    ]);
    let mut jobs: HashMap<String, Job> = HashMap::new();
    let mut uid_key: HashMap<String, String> = HashMap::new();
    let mut index = PodIndex::default();
    let mut creating = Creating {
        ttl: limit.is_limited().then_some(InFlight::LIMITED_TTL),
        ..Creating::default()
    };
    let mut failed_seen: HashMap<String, HashSet<String>> = HashMap::new();
    let mut in_flight = if limit.is_limited() {
        InFlight::with_ttl(InFlight::LIMITED_TTL)
    } else {
        InFlight::default()
    };
    let mut backoff = CreateBackoff::default();
    let mut failures = FailureBackoff::new(failure_backoff.0, failure_backoff.1);
    let mut snapshot: Option<HashSet<String>> = None;
    while let Some(batch) = next_batch(&mut input, 2048).await {
        let mut dirty: HashSet<String> = HashSet::new();
        let mut gone: Vec<(String, String)> = Vec::new();
        for ev in batch {
            match ev {
                Input::Job(Event::Init) => snapshot = Some(HashSet::new()),
                Input::Job(Event::InitDone) => {
                    if let Some(seen) = snapshot.take() {
                        let old: Vec<String> = jobs
                            .keys()
                            .filter(|k| !seen.contains(*k))
                            .cloned()
                            .collect();
                        for k in old {
                            if let Some(j) = jobs.remove(&k) {
                                gone.push((k, j.uid().unwrap_or_default()));
                            }
                        }
                    }
                }
                Input::Job(Event::Apply(mut j)) | Input::Job(Event::InitApply(mut j)) => {
                    let k = key(&j.namespace().unwrap_or_default(), &j.name_any());
                    if let Some(s) = snapshot.as_mut() {
                        s.insert(k.clone());
                    }
                    j.metadata.managed_fields = None;
                    uid_key.insert(j.uid().unwrap_or_default(), k.clone());
                    jobs.insert(k.clone(), j);
                    dirty.insert(k);
                }
                Input::Job(Event::Delete(j)) => {
                    let k = key(&j.namespace().unwrap_or_default(), &j.name_any());
                    jobs.remove(&k);
                    gone.push((k, j.uid().unwrap_or_default()));
                }
                Input::Pod(e) => {
                    observe(&mut in_flight, &e);
                    for owner in index.on_event(e) {
                        if let Some(k) = uid_key.get(&owner) {
                            dirty.insert(k.clone());
                        }
                    }
                }
                Input::Created(uid, name, c) => {
                    // A made or found pod counts as being created until the
                    // watch shows it (or its entry expires); a failed one
                    // frees its index for the retry after the backoff.
                    if !c.exists()
                        && let Some(m) = creating.by_job.get_mut(&uid)
                    {
                        m.remove(&name);
                    }
                    if let Some(k) = uid_key.get(&uid)
                        && backoff.record(k, &c, Instant::now())
                    {
                        dirty.insert(k.clone());
                    }
                }
                Input::Done(item, job) => {
                    in_flight.returned(&item, false);
                    if let Some(j) = job {
                        dirty.insert(j);
                    }
                }
                Input::Tick => {
                    in_flight.expire();
                    dirty.extend(backoff.due(Instant::now()));
                    dirty.extend(failures.due(Instant::now()));
                    // Retries creations that were lost.
                    dirty.extend(
                        creating
                            .by_job
                            .iter()
                            .filter(|(_, m)| !m.is_empty())
                            .filter_map(|(u, _)| uid_key.get(u).cloned()),
                    );
                }
            }
        }
        for (k, uid) in gone {
            backoff.forget(&k);
            failures.forget(&k);
            uid_key.remove(&uid);
            creating.by_job.remove(&uid);
            failed_seen.remove(&uid);
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
        for jk in dirty {
            let Some(job) = jobs.get(&jk) else { continue };
            if job.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let uid = job.uid().unwrap_or_default();
            let ns = job.namespace().unwrap_or_default();
            let pods: Vec<&ChildPod> = index.of(&uid).collect();
            let seen: HashSet<&str> = pods.iter().map(|p| p.name.as_str()).collect();
            creating.prune(&uid, &seen);
            let p = plan(
                job,
                &pods,
                &creating.of(&uid),
                failed_seen.entry(uid.clone()).or_default(),
                &in_flight,
            );
            let held = failures.holds(&jk, &pods, Instant::now());
            let creates = if held || backoff.waiting(&jk, Instant::now()) {
                Vec::new()
            } else {
                p.creates
            };
            let mut creates = creates;
            if limit.is_limited() && !creating.of(&uid).is_empty() {
                creates.clear();
            }
            if max_per_sync > 0 {
                creates.truncate(max_per_sync);
            }
            let mut batch = Vec::with_capacity(creates.len());
            for (pod, idx) in creates {
                let name = pod["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                creating
                    .by_job
                    .entry(uid.clone())
                    .or_default()
                    .insert(name.clone(), (idx, Instant::now()));
                batch.push((name, pod));
            }
            if limit.is_limited() {
                spawn_slow_start(
                    &writer,
                    Api::namespaced(client.clone(), &ns),
                    batch,
                    uid.clone(),
                );
            } else {
                for (name, pod) in batch {
                    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
                    let uid2 = uid.clone();
                    spawn_create(&writer, api, pod, move |c| Input::Created(uid2, name, c));
                }
            }
            for name in p.deletes {
                let k = key(&ns, &name);
                in_flight.insert_delete(k.clone());
                let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
                let jk2 = jk.clone();
                writer.spawn(async move {
                    if let Err(e) = api.delete(&name, &DeleteParams::background()).await
                        && !is_not_found(&e)
                    {
                        tracing::debug!(pod = %name, error = %e, "delete job pod");
                    }
                    Input::Done(k, Some(jk2))
                });
            }
            if let Some(status) = p.status {
                let sk = format!("{jk}#status");
                if in_flight.contains(&sk) {
                    continue;
                }
                in_flight.insert(sk.clone());
                let api: Api<Job> = Api::namespaced(client.clone(), &ns);
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
                    Input::Done(sk, Some(jk2))
                });
            }
        }
    }
}

/// Creates `pods` in slow-start batches ([`slow_start_batches`] from 1, as
/// `slowStartBatch` in kubernetes `pkg/controller/job/job_controller.go`):
/// the creates of a batch go out together, each through the client's rate
/// limit, and the next batch starts once all of them answered; after a
/// failed batch the rest is skipped (reported failed, so the next sync
/// retries them). Each pod's outcome goes back as [`Input::Created`].
fn spawn_slow_start(
    writer: &Writer<Input>,
    api: Api<Pod>,
    pods: Vec<(String, Value)>,
    uid: String,
) {
    if pods.is_empty() {
        return;
    }
    let bucket = writer.bucket();
    let tx = writer.sender();
    tokio::spawn(async move {
        let sizes = slow_start_batches(pods.len(), 1);
        let mut rest = pods.into_iter();
        let mut failed = false;
        for size in sizes {
            let batch: Vec<(String, Value)> = rest.by_ref().take(size).collect();
            if failed {
                for (name, _) in batch {
                    let _ = tx.send(Input::Created(
                        uid.clone(),
                        name,
                        Created::Failed("skipped after a failed slow-start batch".into()),
                    ));
                }
                continue;
            }
            let outcomes = futures::future::join_all(batch.into_iter().map(|(name, pod)| {
                let (api, bucket) = (api.clone(), bucket.clone());
                async move {
                    if let Some(b) = bucket {
                        b.wait().await;
                    }
                    (name, super::create::create(&api, pod).await)
                }
            }))
            .await;
            for (name, c) in outcomes {
                failed |= !c.exists();
                let _ = tx.send(Input::Created(uid.clone(), name, c));
            }
        }
    });
}

#[cfg(test)]
mod tests;
