//! `rebound sim`: the embedded cluster at scale with the controller as a
//! separate process (so its memory is its own), a fault scenario, and the
//! figures: reaction-time percentiles measured at the API server (fault
//! written → first action request arriving), restarts, cordons, API
//! requests by verb, and the controller's peak resident memory.

use super::RequestRecord;
use super::cluster::{SimConfig, pod_running};
use super::testbed::{ROOT, Testbed};
use crate::fault::wire::{self, WireFault};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const SIM_POLICY: &str = r#"
apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: sim, namespace: sim}
spec:
  selector: {matchLabels: {kcover.io/cascading-recovery: "true"}}
  cooldown: 1m
"#;

/// `rebound sim` flags.
#[derive(clap::Args, Debug, Clone)]
pub struct SimArgs {
    /// Simulated nodes.
    #[arg(long, default_value_t = 200)]
    pub nodes: usize,
    /// Pods per node (in PyTorchJobs of --job-size pods).
    #[arg(long, default_value_t = 10)]
    pub pods_per_node: usize,
    /// Pods per job (one master and workers).
    #[arg(long, default_value_t = 8)]
    pub job_size: usize,
    /// pod-exit | node-xid | storm | flapping
    #[arg(long, default_value = "pod-exit", value_parser = ["pod-exit", "node-xid", "storm", "flapping"])]
    pub scenario: String,
    /// Faults to inject (storm: nodes failing at once; default: a quarter
    /// of the nodes for storm, else 100).
    #[arg(long)]
    pub faults: Option<usize>,
    /// The controller's write QPS limit (shown against the storm's rate).
    #[arg(long, default_value_t = 50.0)]
    pub qps: f64,
    /// Run the controller in this process (no memory figure) instead of as
    /// a child process.
    #[arg(long)]
    pub in_process: bool,
    /// Output format.
    #[arg(short = 'o', long, default_value = "text", value_parser = ["text", "json"])]
    pub output: String,
}

/// Reaction-time percentiles in milliseconds.
#[derive(Debug, Serialize, Default)]
pub struct Percentiles {
    pub count: usize,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

fn percentiles(mut v: Vec<f64>) -> Percentiles {
    if v.is_empty() {
        return Percentiles::default();
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1];
    Percentiles {
        count: v.len(),
        p50: at(0.50),
        p90: at(0.90),
        p99: at(0.99),
        max: v[v.len() - 1],
    }
}

/// Quantiles read off a Prometheus histogram: the upper bound of the
/// bucket holding each quantile (so "p99 ≤ 5 ms").
#[derive(Debug, Serialize, Default, Clone)]
pub struct BucketQuantiles {
    pub count: u64,
    pub p50_le: f64,
    pub p90_le: f64,
    pub p99_le: f64,
}

/// Read `name`'s buckets from a Prometheus text exposition and return the
/// bucket bounds (ms) under which 50/90/99 % of the observations fall.
pub fn histogram_quantiles(text: &str, name: &str) -> Option<BucketQuantiles> {
    let prefix = format!("{name}_bucket{{le=\"");
    let mut buckets: Vec<(f64, u64)> = text
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|rest| {
            let (le, count) = rest.split_once("\"}")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, count.trim().parse().ok()?))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last()?.1;
    if total == 0 {
        return None;
    }
    let at = |q: f64| {
        let want = (total as f64 * q).ceil() as u64;
        buckets
            .iter()
            .find(|(_, c)| *c >= want)
            .map_or(f64::INFINITY, |(le, _)| le * 1000.0)
    };
    Some(BucketQuantiles {
        count: total,
        p50_le: at(0.50),
        p90_le: at(0.90),
        p99_le: at(0.99),
    })
}

/// What `rebound sim` prints.
#[derive(Debug, Serialize)]
pub struct Report {
    pub scenario: String,
    pub nodes: usize,
    pub pods: usize,
    pub jobs: usize,
    pub setup_seconds: f64,
    pub faults_injected: usize,
    /// From the fault's write being committed at the API server (the
    /// answer to the kubelet's or agent's status patch) to the first
    /// action request arriving there: what the controller adds.
    pub reaction_ms: Percentiles,
    /// From the start of the injection (the injector's GET, then its
    /// status patch) to the first action request: includes the
    /// injector's own round trips on the loaded server.
    pub reaction_from_injection_ms: Percentiles,
    /// The controller's own histogram (`rebound_reaction_seconds`: watch
    /// event received → action request sent), as bucket upper bounds.
    pub controller_reaction_ms: Option<BucketQuantiles>,
    pub jobs_restarted: usize,
    pub max_restarts_of_one_job: usize,
    pub nodes_cordoned: usize,
    pub breaker_limit: usize,
    pub actions_per_fault_max: usize,
    pub controller_requests_by_verb: BTreeMap<String, usize>,
    pub peak_write_rate_per_second: usize,
    pub qps_limit: f64,
    pub controller_peak_rss_mib: Option<f64>,
    pub notes: Vec<String>,
}

enum Ctl {
    /// The process, its pid, and the port of its `/metrics`.
    Child(tokio::process::Child, u32, u16),
    InProcess(crate::controller::ControllerHandle),
}

/// Run a scenario and print the report.
pub async fn run(args: SimArgs) -> anyhow::Result<ExitCode> {
    let setup = Instant::now();
    let pods_total = args.nodes * args.pods_per_node;
    let jobs = pods_total.div_ceil(args.job_size.max(1));
    let workers = args.job_size.saturating_sub(1) as u32;
    eprintln!(
        "sim: {} nodes, {} PyTorchJobs of {} pods ({} pods)...",
        args.nodes,
        jobs,
        args.job_size,
        jobs * args.job_size
    );
    let bed = Testbed::start(SimConfig {
        nodes: args.nodes,
        gpus_per_node: 8,
        gpus_per_pod: 0,
        server_threads: 2,
        ..SimConfig::default()
    })
    .await?;
    bed.apply_samples().await?;
    // Jobs run in namespace `sim` under a plain policy (no saved logs, no
    // graded step), so the figures measure the restart path itself.
    bed.cluster.api().ensure_namespace("sim")?;
    bed.apply_yaml(SIM_POLICY).await?;
    let opt = [("kcover.io/cascading-recovery", "true")];
    let c = &bed.cluster;
    // The bulk path: jobs and their pods written in-process, already bound,
    // exactly as the operator would make them; the kubelets then run them.
    c.bulk_pytorchjobs(
        "sim",
        "job",
        jobs,
        workers,
        &super::cluster::JobOptions::labels(&opt),
    )?;
    let pods: Api<Pod> = Api::namespaced(bed.client(), "sim");
    let want = jobs * args.job_size;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let running = pods
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|p| pod_running(p))
            .count();
        if running >= want {
            break;
        }
        if Instant::now() > deadline {
            anyhow::bail!("only {running} of {want} pods running after 10 minutes");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!(
        "sim: {want} pods running after {:.1}s; starting the controller",
        setup.elapsed().as_secs_f64()
    );

    let ctl = start_controller(&bed, &args).await?;
    let setup_seconds = setup.elapsed().as_secs_f64();
    bed.cluster.api().clear_requests();
    let t_start = Instant::now();

    let mut notes = Vec::new();
    let node_names = bed.cluster.node_names();
    let faults = args.faults.unwrap_or(if args.scenario == "storm" {
        (args.nodes / 4).max(1)
    } else {
        100
    });
    let mut injected: Vec<Injected> = Vec::new();
    match args.scenario.as_str() {
        "pod-exit" => {
            for i in 0..faults.min(jobs) {
                let job = format!("job-{}", (i * 7919) % jobs);
                let pod = if workers > 0 {
                    format!("{job}-worker-0")
                } else {
                    format!("{job}-master-0")
                };
                let t = Instant::now();
                bed.cluster
                    .fail_container("sim", &pod, "pytorch", 1, "Error")
                    .await?;
                injected.push(Injected::new(t, Target::Job(job), "pods", &pod));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        "node-xid" => {
            for node in node_names.iter().take(faults) {
                let t = Instant::now();
                set_xid(&bed, node, "79").await?;
                injected.push(Injected::new(t, Target::Node(node.clone()), "nodes", node));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        "storm" => {
            let targets: Vec<String> = node_names.iter().take(faults).cloned().collect();
            let t = Instant::now();
            futures::stream::iter(targets.iter())
                .map(|n| set_xid(&bed, n, "79"))
                .buffer_unordered(64)
                .for_each(|r| async {
                    if let Err(e) = r {
                        eprintln!("sim: {e}");
                    }
                })
                .await;
            for n in targets {
                injected.push(Injected::new(t, Target::Node(n.clone()), "nodes", &n));
            }
        }
        _ => {
            // flapping: one node's XID 48 (ResetDevice) comes and goes.
            let node = node_names.first().cloned().unwrap_or_default();
            for _ in 0..faults.min(20) {
                let t = Instant::now();
                set_xid(&bed, &node, "48").await?;
                injected.push(Injected::new(t, Target::Node(node.clone()), "nodes", &node));
                tokio::time::sleep(Duration::from_millis(300)).await;
                bed.cluster
                    .set_node_condition(&node, wire::GPU_CONDITION, "False", "Healthy", "")
                    .await?;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            notes.push("flapping: a node's XID 48 set and cleared repeatedly; cooldowns bound the restarts of its jobs, cordon/uncordon follow the fault".into());
        }
    }
    // Let the controller finish (restarts, records, Events).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let reqs = bed.cluster.api().requests();
    let report = analyse(
        &args,
        &reqs,
        &injected,
        t_start,
        setup_seconds,
        jobs,
        want,
        &bed,
        notes,
    )
    .await;
    let (rss, own) = match ctl {
        Ctl::Child(mut child, pid, port) => {
            let rss = peak_rss_mib(pid);
            let own = http_get(port, "/metrics")
                .await
                .and_then(|t| histogram_quantiles(&t, "rebound_reaction_seconds"));
            let _ = child.kill().await;
            (rss, own)
        }
        Ctl::InProcess(h) => {
            h.shutdown().await;
            (None, None)
        }
    };
    let report = Report {
        controller_peak_rss_mib: rss,
        controller_reaction_ms: own,
        ..report
    };
    if args.output == "json" {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_text(&report);
    }
    bed.cluster.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Clone)]
enum Target {
    Job(String),
    Node(String),
}

/// One injected fault: when the injection started, what should react, and
/// the object whose status write carries the fault (to find its commit in
/// the request log).
#[derive(Debug, Clone)]
struct Injected {
    at: Instant,
    target: Target,
    resource: &'static str,
    name: String,
}

impl Injected {
    fn new(at: Instant, target: Target, resource: &'static str, name: &str) -> Injected {
        Injected {
            at,
            target,
            resource,
            name: name.to_string(),
        }
    }

    /// When the server answered the status write that carries the fault
    /// (the first successful one after the injection started).
    fn committed(&self, reqs: &[RequestRecord]) -> Option<Instant> {
        let suffix = format!("/{}/{}", self.resource, self.name);
        reqs.iter()
            .filter(|r| r.at >= self.at && r.status < 300)
            .filter(|r| matches!(r.verb, "patch" | "update") && r.subresource == "status")
            .find(|r| {
                r.resource == self.resource && r.path.trim_end_matches("/status").ends_with(&suffix)
            })
            .map(|r| r.at + r.elapsed)
    }
}

async fn set_xid(bed: &Testbed, node: &str, code: &str) -> anyhow::Result<()> {
    let msg = wire::format_condition_message(&[WireFault {
        source: "NvidiaXid".into(),
        code: code.into(),
        device: Some("0".into()),
        ..Default::default()
    }]);
    bed.cluster
        .set_node_condition(node, wire::GPU_CONDITION, "True", "NvidiaXid", &msg)
        .await?;
    Ok(())
}

async fn start_controller(bed: &Testbed, args: &SimArgs) -> anyhow::Result<Ctl> {
    let mut cargs = bed.controller_args();
    cargs.qps = args.qps;
    cargs.burst = (args.qps as u32).max(1) * 2;
    cargs.leader_election = false;
    if args.in_process {
        return Ok(Ctl::InProcess(bed.start_controller(cargs).await?));
    }
    let dir = std::env::temp_dir().join(format!("rebound-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let kubeconfig = dir.join("kubeconfig");
    bed.cluster.api().write_kubeconfig(&kubeconfig)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let exe = std::env::current_exe()?;
    let child = tokio::process::Command::new(exe)
        .args([
            "controller",
            "--root-namespace",
            ROOT,
            "--leader-election",
            "false",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--qps",
            &args.qps.to_string(),
            "--burst",
            &cargs.burst.to_string(),
        ])
        .env("KUBECONFIG", &kubeconfig)
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().unwrap_or(0);
    let deadline = Instant::now() + Duration::from_secs(120);
    while !readyz(port).await {
        if Instant::now() > deadline {
            anyhow::bail!("the controller process did not become ready within 120s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(Ctl::Child(child, pid, port))
}

async fn readyz(port: u16) -> bool {
    http_get(port, "/readyz").await.is_some()
}

/// The body of a plain HTTP/1.0 GET to the controller's listener, if it
/// answered 200.
async fn http_get(port: u16, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf).await;
    let text = String::from_utf8_lossy(&buf);
    if !(text.starts_with("HTTP/1.1 200") || text.starts_with("HTTP/1.0 200")) {
        return None;
    }
    text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
}

fn peak_rss_mib(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = s
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

/// An action of the controller, recognised in the request log.
fn action_target(r: &RequestRecord) -> Option<Target> {
    match (r.verb, r.resource.as_str(), r.subresource.as_str()) {
        ("deletecollection", "pods", "") => {
            let q = decode_query(&r.query);
            let sel = q
                .split('&')
                .find_map(|kv| kv.strip_prefix("labelSelector="))?;
            let job = sel.split(',').find_map(|kv| {
                kv.split_once('=')
                    .filter(|(k, _)| k.ends_with("job-name"))
                    .map(|(_, v)| v.to_string())
            })?;
            Some(Target::Job(job))
        }
        ("create", "commands", "") => None,
        ("patch", "nodes", "") => Some(Target::Node(r.path.rsplit('/').next()?.to_string())),
        _ => None,
    }
}

/// Percent-decode a query string as the request log records it (for
/// matching label selectors in it).
pub fn decode_query(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[allow(clippy::too_many_arguments)]
async fn analyse(
    args: &SimArgs,
    reqs: &[RequestRecord],
    injected: &[Injected],
    t_start: Instant,
    setup_seconds: f64,
    jobs: usize,
    pods: usize,
    bed: &Testbed,
    notes: Vec<String>,
) -> Report {
    let actions: Vec<(Instant, Target)> = reqs
        .iter()
        .filter(|r| r.at >= t_start && r.status < 300)
        .filter_map(|r| action_target(r).map(|t| (r.at, t)))
        .collect();
    let mut reactions = Vec::new();
    let mut from_injection = Vec::new();
    for inj in injected {
        let first = actions
            .iter()
            .filter(|(at, _)| *at >= inj.at)
            .find(|(_, a)| match (a, &inj.target) {
                (Target::Job(a), Target::Job(b)) => a == b,
                (Target::Node(a), Target::Node(b)) => a == b,
                _ => false,
            });
        if let Some((at, _)) = first {
            from_injection.push(at.duration_since(inj.at).as_secs_f64() * 1000.0);
            if let Some(c) = inj.committed(reqs) {
                reactions.push(at.saturating_duration_since(c).as_secs_f64() * 1000.0);
            }
        }
    }
    let mut restarts: HashMap<String, usize> = HashMap::new();
    let mut cordoned: HashMap<String, usize> = HashMap::new();
    for (_, a) in &actions {
        match a {
            Target::Job(j) => *restarts.entry(j.clone()).or_default() += 1,
            Target::Node(n) => *cordoned.entry(n.clone()).or_default() += 1,
        }
    }
    let nodes_api: Api<k8s_openapi::api::core::v1::Node> = Api::all(bed.client());
    let nodes_cordoned = nodes_api
        .list(&ListParams::default())
        .await
        .map(|l| {
            l.items
                .iter()
                .filter(|n| {
                    n.metadata
                        .annotations
                        .as_ref()
                        .is_some_and(|a| a.contains_key("rebound.dev/cordoned"))
                })
                .count()
        })
        .unwrap_or(0);
    let mut by_verb: BTreeMap<String, usize> = BTreeMap::new();
    let mut per_sec: HashMap<u64, usize> = HashMap::new();
    for r in reqs.iter().filter(|r| r.at >= t_start) {
        let controller_write = matches!(
            r.verb,
            "deletecollection" | "create" | "patch" | "update" | "delete"
        ) && r
            .user_agent
            .as_deref()
            .is_some_and(|u| u.starts_with("rebound-controller/"));
        if controller_write {
            *by_verb
                .entry(format!(
                    "{} {}{}",
                    r.verb,
                    r.resource,
                    if r.subresource.is_empty() {
                        String::new()
                    } else {
                        format!("/{}", r.subresource)
                    }
                ))
                .or_default() += 1;
            *per_sec
                .entry(r.at.duration_since(t_start).as_secs())
                .or_default() += 1;
        }
    }
    Report {
        scenario: args.scenario.clone(),
        nodes: args.nodes,
        pods,
        jobs,
        setup_seconds,
        faults_injected: injected.len(),
        reaction_ms: percentiles(reactions),
        reaction_from_injection_ms: percentiles(from_injection),
        controller_reaction_ms: None,
        jobs_restarted: restarts.len(),
        max_restarts_of_one_job: restarts.values().copied().max().unwrap_or(0),
        nodes_cordoned,
        breaker_limit: crate::policy::Limit::Percent(10).of(args.nodes as u32) as usize,
        actions_per_fault_max: 0,
        controller_requests_by_verb: by_verb,
        peak_write_rate_per_second: per_sec.values().copied().max().unwrap_or(0),
        qps_limit: args.qps,
        controller_peak_rss_mib: None,
        notes,
    }
}

fn print_text(r: &Report) {
    println!(
        "rebound sim: scenario {} on {} nodes, {} pods in {} jobs (setup {:.1}s)",
        r.scenario, r.nodes, r.pods, r.jobs, r.setup_seconds
    );
    println!("  faults injected:          {}", r.faults_injected);
    let p = &r.reaction_ms;
    println!(
        "  reaction (fault's write committed → first action request at the API server), {} measured:",
        p.count
    );
    println!(
        "    p50 {:.2} ms   p90 {:.2} ms   p99 {:.2} ms   max {:.2} ms",
        p.p50, p.p90, p.p99, p.max
    );
    let p = &r.reaction_from_injection_ms;
    println!("  from the injection's start (injector's GET + patch included):");
    println!(
        "    p50 {:.2} ms   p90 {:.2} ms   p99 {:.2} ms   max {:.2} ms",
        p.p50, p.p90, p.p99, p.max
    );
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
    println!(
        "  jobs restarted:           {} (most restarts of one job: {})",
        r.jobs_restarted, r.max_restarts_of_one_job
    );
    println!(
        "  nodes cordoned:           {} (breaker limit {} per window)",
        r.nodes_cordoned, r.breaker_limit
    );
    println!(
        "  peak write rate:          {} requests/s (QPS limit {}; restart annotations follow unthrottled)",
        r.peak_write_rate_per_second, r.qps_limit
    );
    println!("  controller writes by verb:");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles_read_the_bucket_that_holds_each_quantile() {
        let text = "# HELP x\n\
            rebound_reaction_seconds_sum 0.5\n\
            rebound_reaction_seconds_count 100\n\
            rebound_reaction_seconds_bucket{le=\"0.0005\"} 40\n\
            rebound_reaction_seconds_bucket{le=\"0.001\"} 89\n\
            rebound_reaction_seconds_bucket{le=\"0.005\"} 98\n\
            rebound_reaction_seconds_bucket{le=\"0.05\"} 100\n\
            rebound_reaction_seconds_bucket{le=\"+Inf\"} 100\n";
        let q = histogram_quantiles(text, "rebound_reaction_seconds").expect("buckets");
        assert_eq!(q.count, 100);
        assert_eq!(q.p50_le, 1.0);
        assert_eq!(q.p90_le, 5.0);
        assert_eq!(q.p99_le, 50.0);
        assert!(histogram_quantiles(text, "other").is_none());
    }

    #[test]
    fn a_fault_is_committed_when_its_status_write_is_answered() {
        let t0 = Instant::now();
        let rec = |verb: &'static str, path: &str, sub: &str, after_ms: u64, took_ms: u64| {
            RequestRecord {
                at: t0 + Duration::from_millis(after_ms),
                wall: std::time::SystemTime::now(),
                verb,
                method: "PATCH".into(),
                path: path.into(),
                query: String::new(),
                content_type: None,
                status: 200,
                elapsed: Duration::from_millis(took_ms),
                user_agent: None,
                resource: "pods".into(),
                subresource: sub.into(),
                namespace: Some("sim".into()),
                name: None,
            }
        };
        let reqs = vec![
            rec(
                "get",
                "/api/v1/namespaces/sim/pods/job-1-worker-0",
                "",
                1,
                1,
            ),
            rec(
                "patch",
                "/api/v1/namespaces/sim/pods/job-11-worker-0/status",
                "status",
                2,
                1,
            ),
            rec(
                "patch",
                "/api/v1/namespaces/sim/pods/job-1-worker-0/status",
                "status",
                3,
                2,
            ),
        ];
        let inj = Injected::new(t0, Target::Job("job-1".into()), "pods", "job-1-worker-0");
        assert_eq!(inj.committed(&reqs), Some(t0 + Duration::from_millis(5)));
        let none = Injected::new(t0, Target::Job("job-2".into()), "pods", "job-2-worker-0");
        assert_eq!(none.committed(&reqs), None);
    }
}
