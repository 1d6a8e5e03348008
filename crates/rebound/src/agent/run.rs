//! Wiring: supervised sources → fold state → conditions and Events, with
//! each source's state on `/metrics` and `/healthz`. The one-shot dry run
//! (`dry_run`), the restore after a restart (`restore`) and where reports
//! go (`sink`) are submodules.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use tokio::sync::mpsc;

use super::args::AgentArgs;
use super::fault::SourceEvent;
use super::health::Health;
use super::metrics::Metrics;
use super::pci::DeviceMap;
use super::pod_resources::PodResolver;
use super::report::KubeReporter;
use super::sources::{DcgmExporterSource, DcgmSource, KmsgSource, NpuSmiSource, boot_time};
use super::state::{FoldState, Observed};
use super::supervise::{on_thread, supervise};

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

/// Who asks the kubelet which pods hold a faulty GPU; `None` when
/// `--pod-resources-socket` is empty.
fn pod_resolver(args: &AgentArgs) -> Option<PodResolver> {
    if args.pod_resources_socket.as_os_str().is_empty() {
        return None;
    }
    // The kernel-log source fails on a bad map itself; here a GPU without
    // a mapped index is matched by its proc order.
    let map = device_map(args).unwrap_or_default();
    Some(PodResolver::new(
        args.pod_resources_socket.clone(),
        args.nvidia_proc_dir.clone(),
        map,
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

/// Where the loop records what sources say about themselves.
struct Observers {
    metrics: Metrics,
    health: Health,
}

fn handle(ev: SourceEvent, state: &mut FoldState, obs: &Observers) {
    let metrics = &obs.metrics;
    if let Some((source, s)) = obs.health.apply(&ev, SystemTime::now()) {
        metrics.source_state(source, s);
    }
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
        SourceEvent::Failed { source, .. } | SourceEvent::Error { source, .. } => {
            metrics.source_error(source)
        }
        SourceEvent::Restarted { source } => metrics.source_restart(source),
        SourceEvent::ParseErrors { source, n } => metrics.parse_errors(source, n),
        // States are recorded above; what a source found it logged itself.
        SourceEvent::Up { .. } | SourceEvent::Unavailable { .. } | SourceEvent::Found { .. } => {}
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
    let obs = Observers {
        metrics: Metrics::new(),
        health: Health::default(),
    };
    let metrics = &obs.metrics;
    if !args.once
        && let Some(addr) = args.metrics_socket()?
    {
        let (m, h) = (obs.metrics.clone(), obs.health.clone());
        tokio::spawn(async move {
            if let Err(e) = super::metrics::serve(addr, m, h).await {
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

    let mut pods = pod_resolver(&args);
    if args.once {
        for ev in collect_once(&args).await? {
            handle(ev, &mut state, &obs);
        }
        flush(&mut state, &mut sink, &args, &node, metrics, pods.as_mut()).await;
        return Ok(());
    }

    let (tx, mut rx) = mpsc::channel(CHANNEL_CAPACITY);
    start_sources(&args, &tx, &mut state, &obs)?;
    drop(tx);

    let mut ticker = tokio::time::interval(args.flush_interval.max(Duration::from_millis(100)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sources_open = true;
    loop {
        tokio::select! {
            ev = rx.recv(), if sources_open => match ev {
                Some(ev) => {
                    let new = matches!(ev, SourceEvent::Fault { .. });
                    handle(ev, &mut state, &obs);
                    // Drain what is queued, then report new faults at once.
                    while let Ok(more) = rx.try_recv() {
                        handle(more, &mut state, &obs);
                    }
                    if new {
                        flush(&mut state, &mut sink, &args, &node, metrics, pods.as_mut()).await;
                    }
                }
                None => sources_open = false,
            },
            _ = ticker.tick() => flush(&mut state, &mut sink, &args, &node, metrics, pods.as_mut()).await,
            _ = shutdown() => {
                tracing::info!("stopping");
                return Ok(());
            }
        }
    }
}

/// Start every enabled source under a supervisor, which restarts it with
/// backoff when it ends (see `supervise`); a source switched off by its
/// flag is recorded as unavailable where the agent always reported it
/// (`kmsg`).
fn start_sources(
    args: &AgentArgs,
    tx: &mpsc::Sender<SourceEvent>,
    state: &mut FoldState,
    obs: &Observers,
) -> anyhow::Result<()> {
    let policy = args.restart_policy();
    if args.kmsg {
        let src = KmsgSource {
            file: args.kmsg_file.clone(),
            once: false,
            map: device_map(args)?,
            poll: Duration::from_secs(1),
        };
        tokio::spawn(supervise("kmsg", tx.clone(), policy, move |tx| {
            let src = src.clone();
            on_thread("kmsg", move || src.run_blocking(&tx))
        }));
    } else {
        let why = "switched off (--kmsg false)".to_string();
        handle(
            SourceEvent::Unavailable {
                source: "kmsg",
                why,
            },
            state,
            obs,
        );
    }
    if args.dcgm {
        let src = dcgm_source(args);
        tokio::spawn(supervise("dcgm", tx.clone(), policy, move |tx| {
            src.clone().run(tx)
        }));
    }
    if args.npu_smi {
        let src = npu_source(args);
        tokio::spawn(supervise("npusmi", tx.clone(), policy, move |tx| {
            src.clone().run(tx)
        }));
    }
    if let Some(src) = exporter_source(args) {
        tokio::spawn(supervise("dcgm_exporter", tx.clone(), policy, move |tx| {
            src.clone().run(tx)
        }));
    }
    if args.nvml {
        let (interval, library) = (args.nvml_interval, args.nvml_library.clone());
        tokio::spawn(supervise("nvml", tx.clone(), policy, move |tx| {
            let library = library.clone();
            on_thread("nvml", move || {
                super::nvml::watch_blocking(tx, interval, library.as_deref())
            })
        }));
    }
    Ok(())
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
