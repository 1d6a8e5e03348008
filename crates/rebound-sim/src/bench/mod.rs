//! `rebound sim`: a simulated cluster at scale with the controller as a
//! separate process (so its memory is its own), a fault scenario, and the
//! figures: reaction-time percentiles (fault written → first action),
//! restarts, cordons, API requests by verb, and the controller's peak
//! resident memory.
//!
//! It runs on the embedded server (default), on a real control plane it
//! starts (`--assets DIR`: kube-apiserver, kube-controller-manager, etcd),
//! or on any cluster (`--kubeconfig FILE`), with the same scenarios and
//! report. Reaction is measured on the server's clock where its log can be
//! read (the embedded request log; the real server's audit log) and on
//! this process's clock through watches everywhere; the report says which
//! figure is which.

mod analyse;
mod args;
mod controller_proc;
mod effects;
mod env;
mod report;
pub mod resume;
mod scenario_faults;
mod serverlog;
mod stats;
mod tenant_flood;

pub use crate::proxy::route::decode_query;
pub use args::SimArgs;
pub use report::{Report, SetupTimes, Sources};
pub use serverlog::{SIM_AUDIT_POLICY, ServerRequest, parse_audit_line};
pub use stats::{
    BucketQuantiles, Percentiles, counter_by_label, histogram_count_above, histogram_quantiles,
    percentiles,
};

use std::collections::HashMap;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams};

use self::analyse::{Injected, Subject};
use self::controller_proc::{http_get, load_average, peak_rss_mib, start_controller};
use self::env::SimEnv;
use self::scenario_faults::inject;
use super::cluster::SimConfig;
use super::testbed::Testbed;
use rebound_core::fault::wire::{self, WireFault};

const SIM_POLICY: &str = r#"
apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: sim, namespace: sim}
spec:
  selector: {matchLabels: {kcover.io/cascading-recovery: "true"}}
  cooldown: 1m
"#;

enum Ctl {
    /// The process, its pid, and the port of its `/metrics`.
    Child(tokio::process::Child, u32, u16),
    InProcess(Box<rebound::controller::ControllerHandle>),
}

/// Run a scenario and print the report.
pub async fn run(args: SimArgs) -> anyhow::Result<ExitCode> {
    args.check()?;
    if args.scenario == "resume" {
        let report = resume::measure(&args).await?;
        if args.output == "json" {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            resume::print_text(&report);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let report = measure(&args).await?;
    if args.output == "json" {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        report::print_text(&report);
    }
    Ok(ExitCode::SUCCESS)
}

/// Run a scenario and return its report (what [`run`] prints). Progress
/// goes to stderr.
pub async fn measure(args: &SimArgs) -> anyhow::Result<Report> {
    anyhow::ensure!(
        args.scenario != "resume",
        "the resume scenario has a report of its own: rebound_sim::bench::resume::measure"
    );
    let setup = Instant::now();
    let pods_total = args.nodes() * args.pods_per_node;
    let jobs = pods_total.div_ceil(args.job_size().max(1));
    let workers = args.job_size().saturating_sub(1) as u32;
    let want = jobs * args.job_size();
    eprintln!(
        "sim: {} nodes, {jobs} PyTorchJobs of {} pods ({want} pods)...",
        args.nodes(),
        args.job_size(),
    );
    let env = SimEnv::start(
        args,
        SimConfig {
            nodes: args.nodes(),
            gpus_per_node: 8,
            gpus_per_pod: 0,
            server_threads: 2,
            kubelet: super::actors::kubelet::KubeletConfig {
                costs: args.pod_costs.clone(),
                ..Default::default()
            },
            ..SimConfig::default()
        },
    )
    .await?;
    let mut times = SetupTimes {
        cluster_seconds: setup.elapsed().as_secs_f64(),
        ..SetupTimes::default()
    };
    eprintln!(
        "sim: {} ready after {:.1}s; creating the jobs",
        env.description, times.cluster_seconds
    );
    env.create_jobs(jobs, workers).await?;
    env.wait_running(jobs, want).await?;
    times.pods_running_seconds = setup.elapsed().as_secs_f64();
    eprintln!(
        "sim: {want} pods running after {:.1}s; starting the controller",
        times.pods_running_seconds
    );
    let ctl = start_controller(&env, args).await?;
    times.controller_ready_seconds = setup.elapsed().as_secs_f64();
    let setup_seconds = times.controller_ready_seconds;

    let log = env.server_log_from_now()?;
    let watch = effects::EffectWatch::start(&env.kubeconfig, &env.ns, &env.node_prefix()).await?;
    let t_start = SystemTime::now();
    let mut notes = env.notes.clone();
    notes.push(format!("pod costs: {}", args.pod_costs));
    if let Some(load) = load_average() {
        notes.push(format!(
            "machine load (1-minute average) when the faults began: {load} on {} CPUs",
            std::thread::available_parallelism().map_or(0, |n| n.get())
        ));
    }
    let injected = inject(&env, args, jobs, workers, &mut notes).await?;
    // Let the controller finish (restarts, records, Events): until nothing
    // new has happened for 3 s. A loaded real server can take many seconds
    // to answer what the controller sent.
    let port = match &ctl {
        Ctl::Child(_, _, port) => *port,
        Ctl::InProcess(h) => h.listen.port(),
    };
    let settle = Instant::now();
    let mut last = None;
    let mut quiet_since = Instant::now();
    while settle.elapsed() < SETTLE_MAX {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (now, unseen) = progress(&env, &log, &watch, port).await?;
        if last.as_ref() != Some(&now) {
            last = Some(now);
            quiet_since = Instant::now();
        } else if quiet_since.elapsed() >= SETTLE_QUIET && unseen == 0
            || quiet_since.elapsed() >= SETTLE_UNSEEN_MAX
        {
            break;
        }
    }
    if settle.elapsed() >= SETTLE_MAX {
        notes.push(format!(
            "the controller's activity had not settled {}s after the last fault; figures are those seen until then",
            SETTLE_MAX.as_secs()
        ));
    }

    let server = log.read(&env)?;
    let effects = watch.effects();
    let (pod_watch, node_watch) = watch.health();
    drop(watch);
    let client = analyse::client_reactions(&injected, &effects);
    if client.from_injection.count < injected.len() {
        notes.push(format!(
            "client clock: the effects of {} of {} faults were seen ({} effects in all); pod watch: {pod_watch}; node watch: {node_watch}",
            client.from_injection.count,
            injected.len(),
            effects.len()
        ));
    }
    let (rss, metrics) = match ctl {
        Ctl::Child(mut child, pid, port) => {
            let rss = peak_rss_mib(pid);
            let metrics = http_get(port, "/metrics").await;
            let _ = child.kill().await;
            (rss, metrics)
        }
        Ctl::InProcess(h) => {
            let metrics = http_get(h.listen.port(), "/metrics").await;
            h.shutdown().await;
            (None, metrics)
        }
    };
    let own = metrics
        .as_deref()
        .and_then(|t| histogram_quantiles(t, "rebound_reaction_seconds"));
    let steps = metrics
        .as_deref()
        .and_then(|t| histogram_quantiles(t, "rebound_core_step_seconds"));
    let steps_over_100ms = metrics
        .as_deref()
        .and_then(|t| histogram_count_above(t, "rebound_core_step_seconds", "0.1"));
    if let (Some(t), "tenant-flood") = (metrics.as_deref(), args.scenario.as_str()) {
        let by_kind = counter_by_label(t, "rebound_fault_parse_errors_total", "kind");
        notes.push(format!(
            "tenant-flood: the controller saw the flood: {} of the tenant's Events past its cap of {} tracked Events (rebound_fault_parse_errors_total{{kind=\"TenantEventOverCap\"}})",
            by_kind.get("TenantEventOverCap").copied().unwrap_or(0),
            rebound_core::fault::event::MAX_TENANT_EVENTS
        ));
    }
    if let Some(t) = metrics.as_deref() {
        for (action, (n, means)) in stats::path_means(t) {
            let stages: Vec<String> = rebound::metrics::PATH_STAGES
                .iter()
                .zip(&means)
                .map(|(s, m)| format!("{s} {m:.3}"))
                .collect();
            notes.push(format!(
                "controller's critical path of {action} (mean ms per stage over {n}; docs/critical-path.md): {}",
                stages.join(", ")
            ));
        }
    }
    let annotations = restarts_from_annotations(&env).await?;
    let mut to_committed = None;
    let (server_timing, reaction, from_injection, restarts, by_verb, peak, restarts_src, req_src) =
        match &server {
            Some((reqs, clock)) => {
                let r = analyse::server_reactions(&injected, reqs);
                let w = analyse::controller_writes(reqs, t_start);
                to_committed = Some(r.to_committed);
                (
                    Some(clock.clone()),
                    Some(r.from_write),
                    Some(r.from_injection),
                    w.restarts,
                    w.by_verb,
                    Some(w.peak_per_second),
                    format!("restart requests in the {clock}"),
                    format!("the {clock}"),
                )
            }
            None => (
                None,
                None,
                None,
                annotations.clone(),
                metrics
                    .as_deref()
                    .map(|t| counter_by_label(t, "rebound_api_requests_total", "verb"))
                    .unwrap_or_default(),
                None,
                "the jobs' rebound.dev/restart-count annotations".to_owned(),
                "the controller's own rebound_api_requests_total".to_owned(),
            ),
        };
    if server.is_some() {
        let recorded: usize = annotations.values().sum();
        let requested: usize = restarts.values().sum();
        if recorded != requested {
            notes.push(format!(
                "the jobs' restart-count annotations add up to {recorded}, the restart requests to {requested}"
            ));
        }
    }
    if !env.embedded() {
        notes.push("client clock: the first pod of the job seen deleting (or a node seen unschedulable) through this process's watch; in these scenarios only rebound deletes pods or cordons".into());
    }
    notes.extend(scenario_note(args));
    let report = Report {
        scenario: args.scenario.clone(),
        nodes: args.nodes(),
        pods: want,
        jobs,
        sources: Sources {
            server: env.description.clone(),
            server_timing,
            restarts: restarts_src,
            requests: req_src,
        },
        setup_seconds,
        setup: times,
        faults_injected: injected.len(),
        interval_ms: args.interval.as_secs_f64() * 1000.0,
        reaction_ms: reaction,
        reaction_from_injection_ms: from_injection,
        reaction_to_committed_ms: to_committed,
        client_reaction_ms: client.from_write,
        client_reaction_from_injection_ms: client.from_injection,
        controller_reaction_ms: own,
        core_step_ms: steps,
        core_steps_over_100ms: steps_over_100ms,
        jobs_restarted: restarts.len(),
        max_restarts_of_one_job: restarts.values().copied().max().unwrap_or(0),
        nodes_cordoned: nodes_cordoned(&env).await?,
        breaker_limit: rebound_core::policy::Limit::Percent(10).of(args.nodes() as u32) as usize,
        controller_requests_by_verb: by_verb,
        peak_write_rate_per_second: peak,
        qps_limit: args.qps,
        controller_peak_rss_mib: rss,
        notes,
    };
    env.finish_run(args.keep_audit_log.as_deref()).await;
    Ok(report)
}

/// The longest wait for the controller to finish after the last fault.
const SETTLE_MAX: Duration = Duration::from_secs(180);

/// How long nothing must move for the run to be over.
const SETTLE_QUIET: Duration = Duration::from_secs(3);

/// How long nothing may move while an action in the server's log has not
/// yet reached the effect watch: a loaded machine can deliver a watch
/// event seconds late, and a report without it would lose that sample.
const SETTLE_UNSEEN_MAX: Duration = Duration::from_secs(30);

/// What has happened so far: controller writes in the server's log,
/// effects seen, and the controller's own request counter (the run is
/// over when none of them moves); and how many subjects the server's log
/// shows acted on that the effect watch has not seen yet.
async fn progress(
    env: &SimEnv,
    log: &env::ServerLog,
    watch: &effects::EffectWatch,
    port: u16,
) -> anyhow::Result<((usize, usize, u64), usize)> {
    let effects = watch.effects();
    let (writes, unseen) = log
        .read(env)?
        .map(|(reqs, _)| {
            let writes = reqs.iter().filter(|r| r.by_controller()).count();
            (writes, analyse::unseen_subjects(&reqs, &effects))
        })
        .unwrap_or((0, 0));
    let own = http_get(port, "/metrics")
        .await
        .map(|t| {
            counter_by_label(&t, "rebound_api_requests_total", "verb")
                .values()
                .sum()
        })
        .unwrap_or(0);
    Ok(((writes, effects.len(), own), unseen))
}

fn scenario_note(args: &SimArgs) -> Option<String> {
    match args.scenario.as_str() {
        "flapping" => Some("flapping: a node's XID 48 set and cleared repeatedly; cooldowns bound the restarts of its jobs, cordon/uncordon follow the fault".to_owned()),
        "tenant-flood" => Some("tenant-flood: the flood may restart nothing outside the tenant's namespace and cordon no node (nodes cordoned must be 0); the jobs restarted are the other namespace's, one per pod fault".to_owned()),
        _ => None,
    }
}

/// Restarts per job, as the controller recorded them on the jobs.
async fn restarts_from_annotations(env: &SimEnv) -> anyhow::Result<HashMap<String, usize>> {
    let res = crate::actors::kubeflow::KubeflowKind::PyTorchJob.api_resource();
    let api: Api<DynamicObject> = Api::namespaced_with(env.bed.client(), &env.ns, &res);
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter_map(|j| {
            let n: usize = j
                .annotations()
                .get(rebound::recover::RESTART_COUNT_ANNOTATION)?
                .parse()
                .ok()?;
            (n > 0).then(|| (j.name_any(), n))
        })
        .collect())
}

/// Simulated nodes that carry rebound's cordon record.
async fn nodes_cordoned(env: &SimEnv) -> anyhow::Result<usize> {
    let prefix = env.node_prefix();
    let api: Api<k8s_openapi::api::core::v1::Node> = Api::all(env.bed.client());
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|n| n.name_any().starts_with(&prefix))
        .filter(|n| {
            n.annotations()
                .contains_key(rebound::recover::CORDONED_ANNOTATION)
        })
        .count())
}
