//! Wiring: sources → fold state → conditions and Events. The one-shot dry
//! run (`dry_run`), the restore after a restart (`restore`) and where
//! reports go (`sink`) are submodules.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use tokio::sync::mpsc;

use super::args::AgentArgs;
use super::fault::SourceEvent;
use super::metrics::Metrics;
use super::pci::DeviceMap;
use super::report::KubeReporter;
use super::sources::{DcgmExporterSource, DcgmSource, KmsgSource, NpuSmiSource, boot_time};
use super::state::{FoldState, Observed};

mod dry_run;
mod restore;
mod sink;

pub use dry_run::{ConditionView, DryRunReport, ReportedFault, collect_once, dry_run, fold_report};
pub use restore::{restore, restored_fault};
use sink::{Sink, flush};

/// Capacity of the source → loop channel; a full channel slows the
/// sources down instead of growing memory.
const CHANNEL_CAPACITY: usize = 1024;

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
