//! Wiring: sources → fold state → conditions and Events, and the one-shot
//! dry run that prints what would be reported.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use serde::Serialize;
use tokio::sync::mpsc;

use super::args::AgentArgs;
use super::dcgm::{REASON_DIAG, REASON_HEALTH};
use super::fault::{
    Accelerator, AgentFault, SOURCE_ASCEND_NPU, SOURCE_NODE_CONDITION, SOURCE_NVIDIA_XID,
    SourceEvent,
};
use super::metrics::Metrics;
use super::npusmi::REASON_NPU;
use super::nvml::REASON_NVML;
use super::pci::DeviceMap;
use super::report::{ExistingCondition, KubeReporter, build_event, timestamp};
use super::sources::{DcgmExporterSource, DcgmSource, KmsgSource, NpuSmiSource, boot_time};
use super::state::{DesiredCondition, EventDue, FoldConfig, FoldState, Observed};
use super::xid::{REASON_SXID, REASON_XID};
use crate::fault::wire::WireFault;

/// Capacity of the source → loop channel; a full channel slows the
/// sources down instead of growing memory.
const CHANNEL_CAPACITY: usize = 1024;

/// One folded fault as a dry run reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReportedFault {
    /// Condition it raises.
    pub condition: &'static str,
    /// Event reason.
    pub reason: &'static str,
    /// Times seen.
    pub count: u64,
    /// The wire form (Event annotation).
    pub fault: WireFault,
}

/// What `--once --dry-run` found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DryRunReport {
    /// Distinct faults, oldest first, with counts.
    pub faults: Vec<ReportedFault>,
    /// Conditions that would be set.
    pub conditions: Vec<ConditionView>,
    /// Input that had a fault marker but did not parse.
    pub parse_errors: u64,
    /// Whether each source that ran worked (`nvml: false`: no driver
    /// library), as `rebound_agent_source_up` would say.
    pub sources: BTreeMap<&'static str, bool>,
    /// What the sources found: the NVML driver and each GPU's identity.
    pub found: Vec<String>,
}

/// A condition as printed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConditionView {
    /// `GpuFault` / `NpuFault`.
    #[serde(rename = "type")]
    pub type_: &'static str,
    /// `True` / `False`.
    pub status: &'static str,
    /// Reason.
    pub reason: String,
    /// Message.
    pub message: String,
}

impl From<&DesiredCondition> for ConditionView {
    fn from(c: &DesiredCondition) -> Self {
        ConditionView {
            type_: c.type_,
            status: if c.status { "True" } else { "False" },
            reason: c.reason.clone(),
            message: c.message.clone(),
        }
    }
}

/// Fold source events into the report a dry run prints (pure: `now` given).
pub fn fold_report(
    events: &[SourceEvent],
    node: &str,
    cfg: FoldConfig,
    now: SystemTime,
) -> DryRunReport {
    let mut state = FoldState::new(cfg);
    let mut parse_errors = 0;
    let mut sources = BTreeMap::new();
    let mut found = Vec::new();
    for ev in events {
        match ev {
            SourceEvent::Fault { fault, at, timed } => {
                state.observe_as(fault.clone(), *at, now, *timed);
            }
            SourceEvent::ParseErrors { n, .. } => parse_errors += n,
            SourceEvent::Up { source, up } => {
                sources.insert(*source, *up);
            }
            SourceEvent::Found { detail, .. } => found.push(detail.clone()),
        }
    }
    let mut faults = Vec::new();
    let mut conditions = Vec::new();
    for family in Accelerator::ALL {
        for e in state.active(family) {
            faults.push(ReportedFault {
                condition: family.condition_type(),
                reason: e.fault.reason,
                count: e.count,
                fault: e.fault.to_wire(node),
            });
        }
        conditions.push(ConditionView::from(&state.condition(family, node)));
    }
    DryRunReport {
        faults,
        conditions,
        parse_errors,
        sources,
        found,
    }
}

/// The device map the flags ask for: `--pci-map` over what the driver's
/// proc directory says.
pub fn device_map(args: &AgentArgs) -> anyhow::Result<DeviceMap> {
    let mut map = DeviceMap::from_proc_dir(&args.nvidia_proc_dir)
        .with_context(|| format!("reading {}", args.nvidia_proc_dir.display()))?;
    if let Some(flag) = &args.pci_map {
        let over = DeviceMap::parse_flag(flag).context("--pci-map")?;
        if !over.is_empty() {
            map = over;
        }
    }
    Ok(map)
}

/// Read every enabled source once (the kernel log to its end, one `dcgmi`
/// and `npu-smi` run, one NVML reading of each GPU; no waiting for NVML XID
/// events) and return the events.
pub async fn collect_once(args: &AgentArgs) -> anyhow::Result<Vec<SourceEvent>> {
    let map = device_map(args)?;
    let (tx, mut rx) = mpsc::channel(CHANNEL_CAPACITY);
    let collector = tokio::spawn(async move {
        let mut out = Vec::new();
        while let Some(ev) = rx.recv().await {
            out.push(ev);
        }
        out
    });
    if args.kmsg {
        let src = KmsgSource {
            file: args.kmsg_file.clone(),
            once: true,
            map,
            poll: Duration::from_secs(1),
        };
        let tx = tx.clone();
        tokio::task::spawn_blocking(move || src.run_blocking(&tx))
            .await
            .context("kernel-log reader")?;
    }
    if args.dcgm {
        let _ = dcgm_source(args).poll(&tx).await;
    }
    if args.npu_smi {
        let _ = npu_source(args).poll(&tx).await;
    }
    if let Some(src) = exporter_source(args) {
        // One scrape: no earlier XID to compare with, so only the standing
        // state (row-remap failure, ECC, pending pages) shows.
        let _ = src.poll(&mut Default::default(), &mut None, &tx).await;
    }
    if args.nvml {
        let tx = tx.clone();
        let library = args.nvml_library.clone();
        tokio::task::spawn_blocking(move || super::nvml::poll_once(&tx, library.as_deref()))
            .await
            .context("NVML reader")?;
    }
    drop(tx);
    collector.await.context("collecting source events")
}

/// `--once --dry-run`: the faults and conditions that would be reported.
pub async fn dry_run(args: &AgentArgs) -> anyhow::Result<DryRunReport> {
    let events = collect_once(args).await?;
    let node = args.node_name.as_deref().unwrap_or("dry-run");
    Ok(fold_report(
        &events,
        node,
        args.fold_config(),
        SystemTime::now(),
    ))
}

fn dcgm_source(args: &AgentArgs) -> DcgmSource {
    DcgmSource {
        binary: args.dcgmi_path.clone(),
        level: args.dcgm_level,
        interval: args.dcgm_interval,
        timeout: args.dcgm_timeout,
        health: args.dcgm_health,
        diag_while_busy: args.dcgm_diag_while_busy,
        busy: super::nvml::gpus_busy,
        nvml_library: args.nvml_library.clone(),
    }
}

fn exporter_source(args: &AgentArgs) -> Option<DcgmExporterSource> {
    let url = args.dcgm_exporter_url.trim();
    (!url.is_empty()).then(|| DcgmExporterSource {
        url: url.to_string(),
        interval: args.dcgm_exporter_interval,
        timeout: Duration::from_secs(10),
    })
}

fn npu_source(args: &AgentArgs) -> NpuSmiSource {
    NpuSmiSource {
        binary: args.npu_smi_path.clone(),
        interval: args.npu_smi_interval,
        timeout: Duration::from_secs(60),
    }
}

/// The agent fault a condition line stands for (to restore it after a
/// restart); `None` for a source the agent does not write.
pub fn restored_fault(w: &WireFault) -> Option<AgentFault> {
    let (family, source, reason) = match w.source.as_str() {
        SOURCE_NVIDIA_XID => {
            let sxid = w.code.parse::<u32>().is_ok_and(|c| c >= 10_000);
            (
                Accelerator::Gpu,
                SOURCE_NVIDIA_XID,
                if sxid { REASON_SXID } else { REASON_XID },
            )
        }
        SOURCE_ASCEND_NPU => (Accelerator::Npu, SOURCE_ASCEND_NPU, REASON_NPU),
        SOURCE_NODE_CONDITION => {
            let reason = if w.code.starts_with("dcgm-health") {
                REASON_HEALTH
            } else if w.code.starts_with("dcgm-") {
                REASON_DIAG
            } else {
                REASON_NVML
            };
            (Accelerator::Gpu, SOURCE_NODE_CONDITION, reason)
        }
        _ => return None,
    };
    Some(AgentFault {
        family,
        source,
        code: w.code.clone(),
        device: w.device.clone(),
        reason,
        message: w.message.clone().unwrap_or_default(),
    })
}

/// Put the faults of our conditions back into the state after a restart,
/// unless the condition was last written before the node booted (a reboot
/// resolves what the previous boot saw).
pub fn restore(
    state: &mut FoldState,
    existing: &[ExistingCondition],
    boot: Option<SystemTime>,
    now: SystemTime,
) {
    for c in existing.iter().filter(|c| c.status) {
        let before_boot = match (c.last_heartbeat, boot) {
            (Some(hb), Some(b)) => hb < timestamp(b),
            _ => false,
        };
        if before_boot {
            continue;
        }
        for w in &c.faults {
            let Some(f) = restored_fault(w) else {
                continue;
            };
            if f.family == c.family {
                let transition = c.last_transition.map(SystemTime::from);
                let first = w
                    .at_time()
                    .map(SystemTime::from)
                    .or(transition)
                    .unwrap_or(now);
                // Heartbeats are written to the second: a record read again
                // within that second of our last write is in the count.
                let written = c
                    .last_heartbeat
                    .map(SystemTime::from)
                    .map(|t| t + std::time::Duration::from_secs(1));
                state.restore(f, first, w.count.unwrap_or(1), written, now);
            }
        }
    }
}

/// Where reports go: the cluster, or stdout (`--dry-run`).
enum Sink {
    Kube(Box<KubeReporter>),
    Print {
        last: HashMap<&'static str, DesiredCondition>,
        seq: u64,
    },
}

impl Sink {
    async fn condition(&mut self, c: &DesiredCondition, now: SystemTime, metrics: &Metrics) {
        match self {
            Sink::Kube(r) => match r.write_condition(c, now).await {
                Ok(true) => {
                    tracing::info!(condition = c.type_, status = c.status, reason = %c.reason, "condition written")
                }
                Ok(false) => {}
                Err(e) => {
                    metrics.api_error();
                    tracing::warn!(error = %e, "condition not written");
                }
            },
            Sink::Print { last, .. } => {
                let changed = last.get(c.type_) != Some(c);
                if changed && (c.status || last.contains_key(c.type_)) {
                    println!(
                        "{}",
                        serde_json::json!({ "condition": ConditionView::from(c) })
                    );
                    last.insert(c.type_, c.clone());
                }
            }
        }
    }

    async fn event(
        &mut self,
        due: &EventDue,
        node: &str,
        namespace: &str,
        now: SystemTime,
        metrics: &Metrics,
    ) -> Option<(String, u64)> {
        match (self, due) {
            (
                Sink::Kube(r),
                EventDue::Create {
                    fault,
                    count,
                    first_seen,
                    ..
                },
            ) => match r.create_event(fault, *count, *first_seen, now).await {
                Ok(name) => {
                    metrics.event();
                    Some((name, *count))
                }
                Err(e) => {
                    metrics.api_error();
                    tracing::warn!(error = %e, "event not created");
                    None
                }
            },
            (Sink::Kube(r), EventDue::Series { name, count, .. }) => {
                match r.update_series(name, *count, now).await {
                    Ok(()) => {
                        metrics.event();
                        Some((name.clone(), *count))
                    }
                    Err(e) => {
                        metrics.api_error();
                        tracing::warn!(error = %e, "event series not updated");
                        None
                    }
                }
            }
            (
                Sink::Print { seq, .. },
                EventDue::Create {
                    fault,
                    count,
                    first_seen,
                    ..
                },
            ) => {
                *seq += 1;
                let name = format!("{node}.dry-run-{seq}");
                let ev = build_event(
                    fault,
                    node,
                    None,
                    namespace,
                    name.clone(),
                    *count,
                    *first_seen,
                    now,
                );
                println!("{}", serde_json::json!({ "event": ev }));
                Some((name, *count))
            }
            (Sink::Print { .. }, EventDue::Series { name, count, .. }) => {
                println!(
                    "{}",
                    serde_json::json!({ "eventSeries": { "name": name, "count": count } })
                );
                Some((name.clone(), *count))
            }
        }
    }
}

async fn flush(
    state: &mut FoldState,
    sink: &mut Sink,
    args: &AgentArgs,
    node: &str,
    metrics: &Metrics,
) {
    let now = SystemTime::now();
    for gone in state.expire(now) {
        tracing::info!(source = gone.fault.source, code = %gone.fault.code, device = ?gone.fault.device, "fault cleared after quiet period");
    }
    for family in Accelerator::ALL {
        let c = state.condition(family, node);
        metrics.active(c.type_, state.active(family).len());
        sink.condition(&c, now, metrics).await;
    }
    for due in state.events_due(now, args.event_fold_interval) {
        let key = match &due {
            EventDue::Create { key, .. } | EventDue::Series { key, .. } => key.clone(),
        };
        if let Some((name, count)) = sink
            .event(&due, node, &args.event_namespace, now, metrics)
            .await
        {
            state.mark_event(&key, name, count, now);
        }
    }
}

fn handle(ev: SourceEvent, state: &mut FoldState, metrics: &Metrics) {
    match ev {
        SourceEvent::Fault { fault, at, timed } => {
            metrics.fault(fault.source, &fault.code);
            let (source, code, device) = (fault.source, fault.code.clone(), fault.device.clone());
            match state.observe_as(fault, at, SystemTime::now(), timed) {
                Observed::New => tracing::warn!(source, %code, ?device, "new fault"),
                Observed::Repeat { count } => {
                    tracing::debug!(source, %code, ?device, count, "repeated fault")
                }
                Observed::Stale => {
                    tracing::debug!(source, %code, ?device, "fault older than the quiet period ignored")
                }
            }
        }
        SourceEvent::Up { source, up } => metrics.source_up(source, up),
        SourceEvent::ParseErrors { source, n } => metrics.parse_errors(source, n),
        // Logged by the source when found.
        SourceEvent::Found { .. } => {}
    }
}

/// `rebound agent`: watch this node's accelerators and report faults as
/// Node conditions and Events until stopped. With `--once`, read each
/// source once, report, and exit; with `--once --dry-run`, print the
/// [`DryRunReport`] as JSON and exit without a cluster.
pub async fn run(args: AgentArgs) -> anyhow::Result<()> {
    if args.once && args.dry_run {
        let report = dry_run(&args).await?;
        println!(
            "{}",
            serde_json::to_string_pretty(&report).context("printing the report")?
        );
        return Ok(());
    }
    let client = if args.dry_run {
        None
    } else {
        Some(
            kube::Client::try_default()
                .await
                .context("connecting to the Kubernetes API")?,
        )
    };
    run_with_client(args, client).await
}

/// [`run`] with a given client (`None`: print instead of writing, as
/// `--dry-run`), so the whole loop can be tested against a mock API server.
pub async fn run_with_client(args: AgentArgs, client: Option<kube::Client>) -> anyhow::Result<()> {
    let node = match (&args.node_name, &client) {
        (Some(n), _) => n.clone(),
        (None, None) => "dry-run".to_string(),
        (None, Some(_)) => {
            anyhow::bail!("--node-name (env NODE_NAME, from the downward API) is required")
        }
    };
    let metrics = Metrics::new();
    if !args.once
        && let Some(addr) = args.metrics_socket()?
    {
        let m = metrics.clone();
        tokio::spawn(async move {
            if let Err(e) = super::metrics::serve(addr, m).await {
                tracing::error!(error = %e, "metrics server stopped");
            }
        });
    }
    let mut state = FoldState::new(args.fold_config());
    let mut sink = if let Some(client) = client {
        let mut reporter = KubeReporter::new(client, &node, &args.event_namespace);
        match reporter.load_node().await {
            Ok(existing) => {
                let now = SystemTime::now();
                restore(&mut state, &existing, boot_time(now), now);
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the node; starting with no known faults")
            }
        }
        Sink::Kube(Box::new(reporter))
    } else {
        Sink::Print {
            last: HashMap::new(),
            seq: 0,
        }
    };

    if args.once {
        for ev in collect_once(&args).await? {
            handle(ev, &mut state, &metrics);
        }
        flush(&mut state, &mut sink, &args, &node, &metrics).await;
        return Ok(());
    }

    let (tx, mut rx) = mpsc::channel(CHANNEL_CAPACITY);
    if args.kmsg {
        KmsgSource {
            file: args.kmsg_file.clone(),
            once: false,
            map: device_map(&args)?,
            poll: Duration::from_secs(1),
        }
        .spawn(tx.clone())
        .context("starting the kernel-log thread")?;
    } else {
        metrics.source_up("kmsg", false);
    }
    if args.dcgm {
        tokio::spawn(dcgm_source(&args).run(tx.clone()));
    }
    if args.npu_smi {
        tokio::spawn(npu_source(&args).run(tx.clone()));
    }
    if let Some(src) = exporter_source(&args) {
        tokio::spawn(src.run(tx.clone()));
    }
    if args.nvml {
        let tx = tx.clone();
        let interval = args.nvml_interval;
        let library = args.nvml_library.clone();
        std::thread::Builder::new()
            .name("rebound-nvml".into())
            .spawn(move || super::nvml::watch_blocking(tx, interval, library.as_deref()))
            .context("starting the NVML thread")?;
    }
    drop(tx);

    let mut ticker = tokio::time::interval(args.flush_interval.max(Duration::from_millis(100)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sources_open = true;
    loop {
        tokio::select! {
            ev = rx.recv(), if sources_open => match ev {
                Some(ev) => {
                    let new = matches!(ev, SourceEvent::Fault { .. });
                    handle(ev, &mut state, &metrics);
                    // Drain what is queued, then report new faults at once.
                    while let Ok(more) = rx.try_recv() {
                        handle(more, &mut state, &metrics);
                    }
                    if new {
                        flush(&mut state, &mut sink, &args, &node, &metrics).await;
                    }
                }
                None => sources_open = false,
            },
            _ = ticker.tick() => flush(&mut state, &mut sink, &args, &node, &metrics).await,
            _ = shutdown() => {
                tracing::info!("stopping");
                return Ok(());
            }
        }
    }
}

async fn shutdown() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests;
