//! One tier of the resume scenario: a fresh job, its pods running, the
//! fault, the wait for the job to resume, the figures from the server's
//! log and the watch, the job removed.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant, SystemTime};

use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};

use super::super::analyse::{Injected, Subject, ms_between};
use super::super::env::SimEnv;
use super::super::scenario_faults::set_xid;
use super::super::serverlog::ServerRequest;
use super::real::{RealPod, RealSide, RealTier, last_back};
use super::writes::{self, RecoveryWrites};
use super::{Floor, JobKind, PodTracker, PodView, TIER_LABEL, TierResult};

/// The longest wait for a job's pods to run, or to be gone.
const SETUP_MAX: Duration = Duration::from_secs(1800);
/// The longest wait for a job to resume after its fault.
const RESUME_MAX: Duration = Duration::from_secs(900);
/// The longest wait for rebound's writes to stop after the resume.
const SETTLE_MAX: Duration = Duration::from_secs(60);

fn is_write(r: &ServerRequest) -> bool {
    matches!(
        r.verb.as_str(),
        "create" | "update" | "patch" | "delete" | "deletecollection"
    )
}

/// Creates the tier's job, waits for it to run, injects the fault,
/// measures until the job resumed and rebound settled, removes the job.
pub(super) async fn run_tier(
    env: &SimEnv,
    kind: JobKind,
    tier: &str,
    size: usize,
    floor: Floor,
    real: Option<&RealSide>,
    notes: &mut Vec<String>,
) -> anyhow::Result<TierResult> {
    let sim_size = size;
    let size = size + real.map_or(0, |r| r.pods);
    let name = format!("resume-{}", tier.to_lowercase());
    let jobs: Api<DynamicObject> =
        Api::namespaced_with(env.bed.client(), &env.ns, &kind.resource());
    let selector = kind.selector(&name);
    let tracker = PodTracker::start(&env.kubeconfig, &env.ns, &selector).await?;
    let t0 = Instant::now();
    let setup_log = env.server_log_from_now()?;
    for (res, mut doc) in kind.manifests(env, &name, tier, sim_size)? {
        if let Some(r) = real
            && res.kind == kind.resource().kind
        {
            r.add_tasks(&mut doc, &serde_json::json!({TIER_LABEL: tier}))?;
        }
        let api: Api<DynamicObject> = Api::namespaced_with(env.bed.client(), &env.ns, &res);
        let obj: DynamicObject = serde_json::from_value(doc)?;
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => {}
            // A runtime left by an earlier run of the same name.
            Err(kube::Error::Api(e)) if e.code == 409 && res.kind != kind.resource().kind => {}
            Err(e) => return Err(e.into()),
        }
    }
    wait_until(
        &tracker,
        SETUP_MAX,
        &format!("{size} pods of {name} running"),
        |p| p.iter().filter(|p| p.serving()).count() >= size,
    )
    .await?;
    eprintln!(
        "sim resume: {tier}: {size} pods of {name} running and ready after {:.1}s",
        t0.elapsed().as_secs_f64()
    );
    // Let the controller's caches take in the last pods.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut bound_by = BTreeMap::new();
    if let Some((reqs, _)) = setup_log.read(env)? {
        count_binds(&reqs, &mut bound_by);
    }
    let before = tracker.pods();
    let gen_before = generation(&jobs, &name).await?;
    let log = env.server_log_from_now()?;
    let job_key = kind.storage_key();
    let job_events_before = env.watch_events_sent(&job_key);
    tracker.arm(size, tier == "Recreate");
    // The fault strikes a pod of the simulated nodes (the real node's are
    // measured, not faulted).
    let first = before
        .iter()
        .filter(|p| !real.is_some_and(|r| r.runs(p)))
        .map(|p| p.name.clone())
        .min()
        .ok_or_else(|| anyhow::anyhow!("{name} has no pods"))?;
    let (inj, fault, faulty_node) = if tier == "ReplaceFaulty" {
        let node = before
            .iter()
            .find(|p| p.name == first)
            .and_then(|p| p.node.clone())
            .ok_or_else(|| anyhow::anyhow!("pod {first} is not on a node"))?;
        let mut inj = Injected::new(
            SystemTime::now(),
            Subject::Node(node.clone()),
            "nodes",
            &node,
        );
        set_xid(&env.bed, &node, "79").await?;
        inj.answered = Some(SystemTime::now());
        (
            inj,
            format!("XID 79 on node {node} (pod {first})"),
            Some(node),
        )
    } else {
        let mut inj = Injected::new(
            SystemTime::now(),
            Subject::Job(name.clone()),
            "pods",
            &first,
        );
        env.bed
            .cluster
            .fail_container(&env.ns, &first, kind.worker(), 1, "Error")
            .await?;
        inj.answered = Some(SystemTime::now());
        (
            inj,
            format!("container {} of {first} exited with code 1", kind.worker()),
            None,
        )
    };
    let t_fault = Instant::now();
    let mut said = Instant::now();
    let resumed = loop {
        if let Some(r) = tracker.resumed() {
            break Some(r);
        }
        if t_fault.elapsed() > RESUME_MAX || said.elapsed() > Duration::from_secs(15) {
            let (live, serving, back) = tracker.progress();
            let g = jobs
                .get(&name)
                .await
                .map(|j| rebound::inplace::Generation::from_annotations(j.annotations()));
            let state = format!(
                "{live} pods, {serving} running and ready, {back} back in the new generation; job generation {}",
                g.map_or_else(
                    |e| e.to_string(),
                    |g| format!("{} (released {})", g.current, g.released)
                )
            );
            if t_fault.elapsed() > RESUME_MAX {
                notes.push(format!(
                    "{tier}: the job had not resumed {}s after the fault: {state}",
                    RESUME_MAX.as_secs()
                ));
                break None;
            }
            eprintln!(
                "sim resume: {tier}: {:.0}s after the fault: {state}",
                t_fault.elapsed().as_secs_f64()
            );
            said = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!(
        "sim resume: {tier}: {} after {:.1}s; waiting for rebound to settle",
        if resumed.is_some() {
            "resumed"
        } else {
            "NOT resumed"
        },
        t_fault.elapsed().as_secs_f64()
    );
    settle(env, &log).await?;
    let job_watch_events = env
        .watch_events_sent(&job_key)
        .zip(job_events_before)
        .map(|(after, before)| after.saturating_sub(before));
    let reqs = log.read(env)?.map(|(r, _)| r);
    let after = tracker.pods();
    let gen_after = generation(&jobs, &name).await?;
    let tier_recorded = recorded_tier(&jobs, &name).await?;

    let now_uids: HashSet<&str> = after.iter().map(|p| p.uid.as_str()).collect();
    let mut replaced_pods: Vec<String> = before
        .iter()
        .filter(|p| !now_uids.contains(p.uid.as_str()))
        .map(|p| p.name.clone())
        .collect();
    replaced_pods.sort();
    let mut faulty_node_pods: Vec<String> = before
        .iter()
        .filter(|p| faulty_node.is_some() && p.node == faulty_node)
        .map(|p| p.name.clone())
        .collect();
    faulty_node_pods.sort();

    let client_ttr = match (&resumed, inj.answered) {
        (Some(r), Some(a)) => Some(ms_between(a, r.at) / 1000.0),
        _ => None,
    };
    let plural = kind.resource().plural;
    let mut rebound_by_verb: BTreeMap<String, usize> = BTreeMap::new();
    let mut total_by_verb: BTreeMap<String, usize> = BTreeMap::new();
    let (mut rebound_writes, mut recovery_writes, mut total, mut ttr) = (0, 0, None, None);
    let mut released = None;
    let mut last_bound = None;
    let mut writes = RecoveryWrites::default();
    if let Some(reqs) = &reqs {
        count_binds(reqs, &mut bound_by);
        if let Some(c) = inj.committed(reqs) {
            writes = writes::recovery_writes(reqs, c);
        }
        // The control plane's part: the last pod of the new generation
        // bound (recreated pods; in place, none is).
        let names: HashSet<&str> = after.iter().map(|p| p.name.as_str()).collect();
        if let Some(c) = inj.committed(reqs) {
            last_bound = reqs
                .iter()
                .filter(|r| r.resource == "pods" && r.subresource == "binding" && r.status < 300)
                .filter(|r| r.received >= c && r.name.as_deref().is_some_and(|n| names.contains(n)))
                .map(|r| ms_between(c, r.completed) / 1000.0)
                .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
        }
        for r in reqs.iter().filter(|r| is_write(r)) {
            if r.by_controller() {
                rebound_writes += 1;
                *rebound_by_verb.entry(r.verb_key()).or_default() += 1;
                if r.resource == plural || matches!(r.resource.as_str(), "pods" | "commands") {
                    recovery_writes += 1;
                }
            }
        }
        for r in reqs
            .iter()
            .filter(|r| is_write(r) && r.resource != "leases")
        {
            *total_by_verb.entry(r.verb_key()).or_default() += 1;
        }
        total = Some(total_by_verb.values().sum());
        ttr = match (&resumed, inj.committed(reqs)) {
            (Some(r), Some(c)) => {
                last_write_of(reqs, &r.last_pod, r.at).map(|end| ms_between(c, end) / 1000.0)
            }
            _ => None,
        };
        // In place: the second write to the job lifts the barrier (the
        // first raised the generation).
        if tier != "Recreate"
            && let Some(c) = inj.committed(reqs)
        {
            released = reqs
                .iter()
                .filter(|r| r.by_controller() && r.status < 300 && r.verb == "patch")
                .filter(|r| r.resource == plural && r.name.as_deref() == Some(name.as_str()))
                .nth(1)
                .map(|r| ms_between(c, r.completed) / 1000.0);
        }
        if resumed.is_some() && ttr.is_none() {
            notes.push(format!("{tier}: the fault's commit or the last pod's status write was not found in the server's log; only the client clock measured it"));
        }
    }
    let real_kubelet = real.map(|r| {
        let backs = tracker.back_times();
        let commit = reqs.as_ref().and_then(|q| inj.committed(q));
        let span = |on_real: bool| {
            let last = last_back(backs.iter().filter(|(p, _)| r.runs(p) == on_real));
            let client = match (last, inj.answered) {
                (Some((_, at)), Some(a)) if resumed.is_some() => Some(ms_between(a, at) / 1000.0),
                _ => None,
            };
            let server = match (last, &reqs, commit) {
                (Some((p, at)), Some(q), Some(c)) if resumed.is_some() => {
                    last_write_of(q, &p.name, at).map(|end| ms_between(c, end) / 1000.0)
                }
                _ => None,
            };
            (server, client)
        };
        let (server, client) = span(true);
        let (sim_server, sim_client) = span(false);
        let mut pods: Vec<RealPod> = before
            .iter()
            .filter(|p| r.runs(p))
            .map(|b| {
                let now = after.iter().find(|a| a.name == b.name && !a.deleting);
                RealPod {
                    name: b.name.clone(),
                    same_pod: now.is_some_and(|a| a.uid == b.uid),
                    agent_restarts: (b.agent_restarts, now.map_or(-1, |a| a.agent_restarts)),
                    worker_restarts: (b.worker_restarts, now.map_or(-1, |a| a.worker_restarts)),
                }
            })
            .collect();
        pods.sort_by(|a, b| a.name.cmp(&b.name));
        RealTier {
            node: r.name().to_owned(),
            time_to_resume_s: server,
            client_time_to_resume_s: client,
            simulated_time_to_resume_s: sim_server,
            simulated_client_time_to_resume_s: sim_client,
            pods,
        }
    });
    let result = TierResult {
        tier: tier.into(),
        tier_recorded,
        job: name.clone(),
        fault,
        resumed: resumed.is_some(),
        time_to_resume_s: ttr,
        barrier_released_s: released,
        client_time_to_resume_s: client_ttr,
        last_pod: resumed.map(|r| r.last_pod),
        rebound_writes,
        rebound_recovery_writes: recovery_writes,
        rebound_writes_by_verb: rebound_by_verb,
        total_writes: total,
        total_writes_by_verb: total_by_verb,
        pods_replaced: replaced_pods.len(),
        replaced_pods,
        faulty_node,
        faulty_node_pods,
        generation: (gen_before, gen_after),
        job_watch_events,
        floor,
        last_bound_s: last_bound,
        bound_by,
        writes,
        real_kubelet,
    };
    eprintln!(
        "sim resume: {tier}: time-to-resume {:?} s (client {:?} s), rebound writes {}, pods replaced {}; removing {name}",
        result.time_to_resume_s,
        result.client_time_to_resume_s,
        result.rebound_writes,
        result.pods_replaced
    );
    remove_job(env, &jobs, &name, &selector, &tracker).await?;
    Ok(result)
}

/// Adds the successful `pods/binding` creates of `reqs` to `by`, by the
/// binder's user agent up to its first `/` (`kube-scheduler`, the
/// simulated scheduler's client): which scheduler placed the pods.
fn count_binds(reqs: &[ServerRequest], by: &mut BTreeMap<String, usize>) {
    for r in reqs
        .iter()
        .filter(|r| r.resource == "pods" && r.subresource == "binding" && r.status < 300)
    {
        let ua = r.user_agent.as_deref().unwrap_or("(no user agent)");
        let who = ua.split('/').next().unwrap_or(ua).to_owned();
        *by.entry(who).or_default() += 1;
    }
}

/// When the server completed the status write of `pod` that made it
/// serve: the last one it received before this process saw the job
/// resumed (a watch event follows its write's commit; the answer's
/// completion may trail the event by a moment).
fn last_write_of(reqs: &[ServerRequest], pod: &str, seen: SystemTime) -> Option<SystemTime> {
    reqs.iter()
        .filter(|r| r.resource == "pods" && r.subresource == "status" && r.status < 300)
        .filter(|r| matches!(r.verb.as_str(), "patch" | "update"))
        .filter(|r| r.name.as_deref() == Some(pod) && r.received <= seen)
        .map(|r| r.completed)
        .max()
}

/// Waits until rebound's writes in the server's log stop moving for 3 s
/// (at most [`SETTLE_MAX`]); without a log, 3 s.
async fn settle(env: &SimEnv, log: &super::super::env::ServerLog) -> anyhow::Result<()> {
    let start = Instant::now();
    let mut last = usize::MAX;
    let mut quiet = Instant::now();
    while start.elapsed() < SETTLE_MAX {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let Some((reqs, _)) = log.read(env)? else {
            tokio::time::sleep(Duration::from_secs(3)).await;
            return Ok(());
        };
        let n = reqs.iter().filter(|r| r.by_controller()).count();
        if n != last {
            last = n;
            quiet = Instant::now();
        } else if quiet.elapsed() >= Duration::from_secs(3) {
            break;
        }
    }
    Ok(())
}

async fn wait_until(
    tracker: &PodTracker,
    limit: Duration,
    what: &str,
    done: impl Fn(&[PodView]) -> bool,
) -> anyhow::Result<()> {
    let start = Instant::now();
    let mut said = Instant::now();
    loop {
        let pods = tracker.pods();
        if done(&pods) {
            return Ok(());
        }
        if start.elapsed() > limit {
            anyhow::bail!(
                "not {what} after {}s ({} pods seen, {} running and ready)",
                limit.as_secs(),
                pods.len(),
                pods.iter().filter(|p| p.serving()).count()
            );
        }
        if said.elapsed() > Duration::from_secs(15) {
            eprintln!(
                "sim resume: waiting for {what}: {} of {} seen running and ready after {:.0}s",
                pods.iter().filter(|p| p.serving()).count(),
                pods.len(),
                start.elapsed().as_secs_f64()
            );
            said = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The job's `restart-generation` annotation (0 when absent).
async fn generation(jobs: &Api<DynamicObject>, name: &str) -> anyhow::Result<u64> {
    let j = jobs.get(name).await?;
    Ok(rebound::inplace::Generation::from_annotations(j.annotations()).current)
}

/// The tier of the newest restart the controller recorded on the job.
async fn recorded_tier(jobs: &Api<DynamicObject>, name: &str) -> anyhow::Result<Option<String>> {
    let j = jobs.get(name).await?;
    Ok(rebound::recover::read_history(j.annotations())
        .last()
        .and_then(|r| r.tier.clone()))
}

/// Deletes the job, then its pods, and waits until the pods are gone. The
/// simulated operator may recreate a pod it had not yet seen the job's
/// deletion for, so the pods are deleted again until none is left.
async fn remove_job(
    env: &SimEnv,
    jobs: &Api<DynamicObject>,
    name: &str,
    selector: &str,
    tracker: &PodTracker,
) -> anyhow::Result<()> {
    jobs.delete(name, &DeleteParams::background()).await?;
    let start = Instant::now();
    while jobs.get_opt(name).await?.is_some() && start.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(env.bed.client(), &env.ns);
    let sel = ListParams::default().labels(selector);
    loop {
        pods.delete_collection(&DeleteParams::default(), &sel)
            .await?;
        let gone = wait_until(
            tracker,
            Duration::from_secs(30),
            &format!("the pods of {name} gone"),
            |p| p.is_empty(),
        )
        .await;
        match gone {
            Ok(()) => return Ok(()),
            Err(e) if start.elapsed() > SETUP_MAX => return Err(e),
            Err(_) => {}
        }
    }
}
