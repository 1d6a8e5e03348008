//! What `rebound sim` prints (text, or `-o json`), with every figure named
//! by the clock it was measured on.

use serde::Serialize;
use std::collections::BTreeMap;

use super::stats::{BucketQuantiles, Percentiles};

/// Where the figures come from.
#[derive(Debug, Serialize, Clone)]
pub struct Sources {
    /// The API server: `embedded`, `kube-apiserver <version> (started from
    /// --assets)`, or `<version> at <url> (--kubeconfig)`.
    pub server: String,
    /// The server-side clock: `embedded request log`, `kube-apiserver
    /// audit log`, or `null` where none could be read.
    pub server_timing: Option<String>,
    /// Where restarts were counted: the server's log (requests) or the
    /// jobs' `rebound.dev/restart-count` annotations.
    pub restarts: String,
    /// Where the controller's writes were counted: the server's log, or the
    /// controller's own `rebound_api_requests_total`.
    pub requests: String,
}

/// Time spent before the measurement.
#[derive(Debug, Serialize, Clone, Default)]
pub struct SetupTimes {
    /// Server, CRDs, namespaces and nodes ready.
    pub cluster_seconds: f64,
    /// Every pod running.
    pub pods_running_seconds: f64,
    /// The controller ready (its caches filled).
    pub controller_ready_seconds: f64,
}

/// The report.
#[derive(Debug, Serialize)]
pub struct Report {
    /// pod-exit, node-xid, storm or flapping.
    pub scenario: String,
    /// Simulated nodes.
    pub nodes: usize,
    /// Pods running at the start.
    pub pods: usize,
    /// PyTorchJobs.
    pub jobs: usize,
    /// What the figures come from.
    pub sources: Sources,
    /// Total set-up time (all of [`Self::setup`]).
    pub setup_seconds: f64,
    /// Set-up time by phase (cumulative, from the start).
    pub setup: SetupTimes,
    /// Faults injected.
    pub faults_injected: usize,
    /// `--interval`: the pause between two faults (pod-exit, node-xid).
    pub interval_ms: f64,
    /// Server clock: from the fault's write being committed (the answer to
    /// the kubelet's or agent's status patch) to the first action request
    /// arriving: what the controller adds. `null` without a server log.
    pub reaction_ms: Option<Percentiles>,
    /// Server clock: from the start of the injection (the injector's GET,
    /// then its status patch) to the first action request arriving.
    pub reaction_from_injection_ms: Option<Percentiles>,
    /// Server clock: from the fault's write committed to the first action
    /// committed (its answer: a `deletecollection` with every pod marked
    /// deleted, a node patch stored), the figure issue #19 sets a goal on.
    pub reaction_to_committed_ms: Option<Percentiles>,
    /// Client clock (this process): from the injector's status patch being
    /// answered to the action's effect (a pod deleting, a node cordoned)
    /// arriving through a watch; includes the answer's and the watch's
    /// delivery, and can be negative when the watch outruns the answer.
    pub client_reaction_ms: Percentiles,
    /// Client clock: from the start of the injection to the effect seen.
    pub client_reaction_from_injection_ms: Percentiles,
    /// The controller's own histogram (`rebound_reaction_seconds`: watch
    /// event received → action request sent), as bucket upper bounds.
    pub controller_reaction_ms: Option<BucketQuantiles>,
    /// The controller's `rebound_core_step_seconds`: how long each step of
    /// the core took (every input), as bucket upper bounds.
    pub core_step_ms: Option<BucketQuantiles>,
    /// Steps of the core that took over 100 ms.
    pub core_steps_over_100ms: Option<u64>,
    /// Jobs restarted at least once.
    pub jobs_restarted: usize,
    /// The most restarts of one job.
    pub max_restarts_of_one_job: usize,
    /// Simulated nodes cordoned by rebound at the end.
    pub nodes_cordoned: usize,
    /// The breaker's limit (10 % of the nodes).
    pub breaker_limit: usize,
    /// The controller's writes by verb and resource (see
    /// [`Sources::requests`]).
    pub controller_requests_by_verb: BTreeMap<String, u64>,
    /// Most controller writes in one second; `null` without a server log.
    pub peak_write_rate_per_second: Option<usize>,
    /// `--qps`.
    pub qps_limit: f64,
    /// The controller process's peak resident memory.
    pub controller_peak_rss_mib: Option<f64>,
    /// Remarks on the run.
    pub notes: Vec<String>,
}

fn line(p: &Percentiles) -> String {
    format!(
        "p50 {:.2} ms   p90 {:.2} ms   p99 {:.2} ms   max {:.2} ms",
        p.p50, p.p90, p.p99, p.max
    )
}

/// The text form.
pub fn print_text(r: &Report) {
    println!(
        "rebound sim: scenario {} on {} nodes, {} pods in {} jobs (setup {:.1}s: cluster {:.1}s, pods running {:.1}s, controller ready {:.1}s)",
        r.scenario,
        r.nodes,
        r.pods,
        r.jobs,
        r.setup_seconds,
        r.setup.cluster_seconds,
        r.setup.pods_running_seconds,
        r.setup.controller_ready_seconds
    );
    println!("  API server:               {}", r.sources.server);
    println!(
        "  faults injected:          {} ({} ms apart for pod-exit and node-xid)",
        r.faults_injected, r.interval_ms
    );
    match (&r.reaction_ms, &r.sources.server_timing) {
        (Some(p), Some(src)) => {
            println!(
                "  server clock ({src}): fault's write committed → first action request arrives, {} measured:",
                p.count
            );
            println!("    {}", line(p));
            if let Some(p) = r.reaction_to_committed_ms.as_ref().filter(|p| p.count > 0) {
                println!(
                    "  server clock: fault's write committed → that action committed (its answer), {} measured:",
                    p.count
                );
                println!("    {}", line(p));
            }
            if let Some(p) = &r.reaction_from_injection_ms {
                println!(
                    "  server clock: from the injection's start (injector's GET + patch included):"
                );
                println!("    {}", line(p));
            }
        }
        _ => println!("  server clock: not available (no request or audit log of this server)"),
    }
    let p = &r.client_reaction_ms;
    println!(
        "  client clock (watch): injector's patch answered → action's effect seen, {} measured:",
        p.count
    );
    println!("    {}", line(p));
    println!("  client clock: from the injection's start:");
    println!("    {}", line(&r.client_reaction_from_injection_ms));
    if let Some(q) = &r.controller_reaction_ms {
        println!(
            "  controller's own histogram (watch event → action request sent), {} observed:",
            q.count
        );
        println!(
            "    p50 ≤ {} ms   p90 ≤ {} ms   p99 ≤ {} ms",
            q.p50_le, q.p90_le, q.p99_le
        );
    }
    if let Some(q) = &r.core_step_ms {
        println!(
            "  the core's steps (rebound_core_step_seconds), {} observed, {} over 100 ms:",
            q.count,
            r.core_steps_over_100ms.unwrap_or(0)
        );
        println!(
            "    p50 ≤ {} ms   p90 ≤ {} ms   p99 ≤ {} ms",
            q.p50_le, q.p90_le, q.p99_le
        );
    }
    println!(
        "  jobs restarted:           {} (most restarts of one job: {}; from {})",
        r.jobs_restarted, r.max_restarts_of_one_job, r.sources.restarts
    );
    println!(
        "  nodes cordoned:           {} (breaker limit {} per window)",
        r.nodes_cordoned, r.breaker_limit
    );
    match r.peak_write_rate_per_second {
        Some(w) => println!(
            "  peak write rate:          {w} requests/s (QPS limit {}; restart annotations follow unthrottled)",
            r.qps_limit
        ),
        None => println!(
            "  peak write rate:          not measured without a server log (QPS limit {})",
            r.qps_limit
        ),
    }
    println!("  controller writes by verb ({}):", r.sources.requests);
    for (k, v) in &r.controller_requests_by_verb {
        println!("    {k:<36} {v}");
    }
    match r.controller_peak_rss_mib {
        Some(m) => println!("  controller peak RSS:      {m:.1} MiB"),
        None => println!("  controller peak RSS:      (in-process: not measured)"),
    }
    for n in &r.notes {
        println!("  note: {n}");
    }
}
