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
use serde_json::{Map, Value, json};

use super::children::{InFlight, observe};
use super::create::{CreateBackoff, Created, spawn_create};
use super::jobstore::JobStore;
use super::ratelimit::ClientLimit;
use super::runtime::{Writer, next_batch, ticks, watch_stream};
use super::util::{controller_of, controller_ref, is_not_found, key, now_rfc3339, str_at};

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

fn child_view(j: &Job) -> ChildJob {
    let labels = j.labels();
    let conds = j
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let is = |t: &str| conds.iter().any(|c| c.type_ == t && c.status == "True");
    let parallelism = j.spec.as_ref().and_then(|s| s.parallelism).unwrap_or(1);
    ChildJob {
        name: j.name_any(),
        attempt: labels
            .get(RESTART_ATTEMPT)
            .and_then(|a| a.parse().ok())
            .unwrap_or(0),
        failed: is("Failed"),
        complete: is("Complete"),
        ready: j.status.as_ref().and_then(|s| s.ready).unwrap_or(0) >= parallelism,
        deleting: j.metadata.deletion_timestamp.is_some(),
    }
}

#[derive(Debug, Default)]
struct Plan {
    creates: Vec<Value>,
    deletes: Vec<String>,
    status: Option<Value>,
}

fn finished(status: &Value) -> bool {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| {
            matches!(str_at(c, &["type"]), Some("Completed") | Some("Failed"))
                && str_at(c, &["status"]) == Some("True")
        })
}

fn make_job(js: &DynamicObject, rjob: &Value, idx: i64, global: i64, attempt: i64) -> Value {
    let name = js.name_any();
    let uid = js.uid().unwrap_or_default();
    let rname = str_at(rjob, &["name"]).unwrap_or("job");
    let replicas = rjob["replicas"].as_i64().unwrap_or(1);
    let mut tags = Map::new();
    tags.insert(JOBSET_NAME.into(), json!(name));
    tags.insert(REPLICATED_JOB_NAME.into(), json!(rname));
    tags.insert(REPLICATED_JOB_REPLICAS.into(), json!(replicas.to_string()));
    tags.insert(JOB_INDEX.into(), json!(idx.to_string()));
    tags.insert(JOB_GLOBAL_INDEX.into(), json!(global.to_string()));
    tags.insert(RESTART_ATTEMPT.into(), json!(attempt.to_string()));
    tags.insert(JOBSET_UID.into(), json!(uid));
    let template = &rjob["template"];
    let merge = |base: &Value| {
        let mut m = base.as_object().cloned().unwrap_or_default();
        m.extend(tags.clone());
        Value::Object(m)
    };
    let mut spec = template["spec"].clone();
    if !spec.is_object() {
        spec = json!({});
    }
    let pod_meta = &spec["template"]["metadata"];
    let (pl, pa) = (merge(&pod_meta["labels"]), merge(&pod_meta["annotations"]));
    spec["template"]["metadata"]["labels"] = pl;
    spec["template"]["metadata"]["annotations"] = pa;
    let dns = js.data["spec"]["network"]["enableDNSHostnames"]
        .as_bool()
        .unwrap_or(true);
    if dns && spec["template"]["spec"].is_object() {
        let sub = str_at(&js.data, &["spec", "network", "subdomain"])
            .unwrap_or(&name)
            .to_owned();
        spec["template"]["spec"]["subdomain"] = json!(sub);
    }
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": format!("{name}-{rname}-{idx}"),
            "namespace": js.namespace(),
            "labels": merge(&template["metadata"]["labels"]),
            "annotations": merge(&template["metadata"]["annotations"]),
            "ownerReferences": [controller_ref("jobset.x-k8s.io/v1alpha2", "JobSet", &name, &uid)],
        },
        "spec": spec,
    })
}

fn js_condition(conds: &mut Vec<Value>, t: &str, reason: &str, message: &str) {
    if conds.iter().any(|c| str_at(c, &["type"]) == Some(t)) {
        return;
    }
    conds.push(json!({
        "type": t, "status": "True", "reason": reason, "message": message,
        "lastTransitionTime": now_rfc3339(),
    }));
}

fn plan(js: &DynamicObject, children: &[&ChildJob], in_flight: &InFlight) -> Plan {
    let mut plan = Plan::default();
    let ns = js.namespace().unwrap_or_default();
    let name = js.name_any();
    let old = js.data.get("status").cloned().unwrap_or(json!({}));
    let mut status = if old.is_object() {
        old.clone()
    } else {
        json!({})
    };
    if finished(&old) {
        return plan;
    }
    let mut restarts = old["restarts"].as_i64().unwrap_or(0);
    let max_restarts = js.data["spec"]["failurePolicy"]["maxRestarts"]
        .as_i64()
        .unwrap_or(0);
    let mut conds: Vec<Value> = status["conditions"].as_array().cloned().unwrap_or_default();
    let current: Vec<&&ChildJob> = children.iter().filter(|c| c.attempt >= restarts).collect();
    if current.iter().any(|c| c.failed) {
        if restarts < max_restarts {
            restarts += 1;
        } else {
            js_condition(
                &mut conds,
                "Failed",
                "FailedJobs",
                "jobset failed due to reaching max number of restarts",
            );
            status["terminalState"] = json!("Failed");
        }
    }
    let rjobs: Vec<Value> = js.data["spec"]["replicatedJobs"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut rstatus = Vec::new();
    let mut all_complete = !rjobs.is_empty();
    let failing = str_at(&status, &["terminalState"]) == Some("Failed");
    for c in children {
        if (c.attempt < restarts || failing && !c.complete)
            && !c.deleting
            && !in_flight.contains(&key(&ns, &c.name))
        {
            plan.deletes.push(c.name.clone());
        }
    }
    let mut global = 0i64;
    for rj in &rjobs {
        let rname = str_at(rj, &["name"]).unwrap_or("job");
        let replicas = rj["replicas"].as_i64().unwrap_or(1);
        let mut counts = (0, 0, 0, 0);
        for idx in 0..replicas {
            let jname = format!("{name}-{rname}-{idx}");
            match children.iter().find(|c| c.name == jname) {
                Some(c) if c.attempt >= restarts => {
                    if c.complete {
                        counts.1 += 1;
                    } else {
                        all_complete = false;
                        if c.failed {
                            counts.2 += 1;
                        } else {
                            counts.3 += 1;
                            if c.ready {
                                counts.0 += 1;
                            }
                        }
                    }
                }
                Some(_) => all_complete = false,
                None => {
                    all_complete = false;
                    if !failing && !in_flight.contains(&key(&ns, &jname)) {
                        plan.creates.push(make_job(js, rj, idx, global, restarts));
                    }
                }
            }
            global += 1;
        }
        rstatus.push(json!({
            "name": rname, "ready": counts.0, "succeeded": counts.1,
            "failed": counts.2, "active": counts.3, "suspended": 0,
        }));
    }
    if all_complete && !failing {
        js_condition(
            &mut conds,
            "Completed",
            "AllJobsCompleted",
            "jobset completed successfully",
        );
        status["terminalState"] = json!("Completed");
    }
    status["restarts"] = json!(restarts);
    status["conditions"] = json!(conds);
    status["replicatedJobsStatus"] = json!(rstatus);
    if status != old {
        plan.status = Some(status);
    }
    plan
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
mod tests {
    use super::*;

    fn js(max_restarts: i64, restarts: i64) -> DynamicObject {
        let mut o = DynamicObject::new("js", &api_resource()).within("ns");
        o.metadata.uid = Some("u".into());
        o.data = json!({
            "spec": {"failurePolicy": {"maxRestarts": max_restarts}, "replicatedJobs": [{
                "name": "workers", "replicas": 2,
                "template": {"spec": {"parallelism": 2, "completions": 2, "completionMode": "Indexed",
                    "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}}}]},
            "status": {"restarts": restarts},
        });
        o
    }

    fn child(name: &str, attempt: i64, failed: bool) -> ChildJob {
        ChildJob {
            name: name.into(),
            attempt,
            failed,
            ..Default::default()
        }
    }

    #[test]
    fn creates_labelled_child_jobs() {
        let p = plan(&js(1, 0), &[], &InFlight::default());
        assert_eq!(p.creates.len(), 2);
        let j = &p.creates[1];
        assert_eq!(j["metadata"]["name"], "js-workers-1");
        assert_eq!(j["metadata"]["labels"][JOB_INDEX], "1");
        assert_eq!(
            j["spec"]["template"]["metadata"]["labels"][RESTART_ATTEMPT],
            "0"
        );
        assert_eq!(
            j["spec"]["template"]["metadata"]["labels"][JOBSET_NAME],
            "js"
        );
        assert_eq!(j["spec"]["template"]["spec"]["subdomain"], "js");
    }

    #[test]
    fn a_failed_child_restarts_the_set_until_max_restarts() {
        let a = child("js-workers-0", 0, true);
        let b = child("js-workers-1", 0, false);
        let p = plan(&js(1, 0), &[&a, &b], &InFlight::default());
        assert_eq!(
            p.status.as_ref().map(|s| s["restarts"].clone()),
            Some(json!(1))
        );
        assert_eq!(p.deletes.len(), 2, "all jobs of the old attempt go");
        let a = child("js-workers-0", 1, true);
        let p = plan(&js(1, 1), &[&a], &InFlight::default());
        assert!(finished(&p.status.expect("status")));
    }
}
