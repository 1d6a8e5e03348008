//! The one-shot dry run (`--dry-run`): every source read once, folded,
//! and printed as what would be reported; apart from the long-running loop.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use serde::Serialize;
use tokio::sync::mpsc;

use super::super::args::AgentArgs;
use super::super::fault::{Accelerator, SourceEvent};
use super::super::sources::KmsgSource;
use super::super::state::{DesiredCondition, FoldConfig, FoldState};
use super::super::supervise::SourceExit;
use super::{CHANNEL_CAPACITY, dcgm_source, device_map, exporter_source, npu_source};
use crate::fault::wire::WireFault;

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
            SourceEvent::Up { source } => {
                sources.insert(*source, true);
            }
            SourceEvent::Unavailable { source, .. } | SourceEvent::Failed { source, .. } => {
                sources.insert(*source, false);
            }
            SourceEvent::Found { detail, .. } => found.push(detail.clone()),
            SourceEvent::Error { .. } | SourceEvent::Restarted { .. } => {}
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
        let sender = tx.clone();
        let exit = tokio::task::spawn_blocking(move || src.run_blocking(&sender))
            .await
            .context("kernel-log reader")?;
        report_end(&tx, "kmsg", exit).await;
    }
    if args.dcgm
        && let Some(exit) = dcgm_source(args).poll(&tx).await
    {
        report_end(&tx, "dcgm", exit).await;
    }
    if args.npu_smi
        && let Some(exit) = npu_source(args).poll(&tx).await
    {
        report_end(&tx, "npusmi", exit).await;
    }
    if let Some(src) = exporter_source(args) {
        // One scrape: no earlier XID to compare with, so only the standing
        // state (row-remap failure, ECC, pending pages) shows.
        let _ = src.poll(&mut Default::default(), &mut None, &tx).await;
    }
    if args.nvml {
        let sender = tx.clone();
        let library = args.nvml_library.clone();
        let exit = tokio::task::spawn_blocking(move || {
            super::super::nvml::poll_once(&sender, library.as_deref())
        })
        .await
        .context("NVML reader")?;
        report_end(&tx, "nvml", exit).await;
    }
    drop(tx);
    collector.await.context("collecting source events")
}

/// Say how a source's one read ended: a warning and its state (the
/// supervisor's job in the long-running agent).
async fn report_end(tx: &mpsc::Sender<SourceEvent>, source: &'static str, exit: SourceExit) {
    match &exit {
        SourceExit::Unavailable(why) => tracing::warn!(source, why = %why, "source not available"),
        SourceExit::Failed(error) => tracing::warn!(source, error = %error, "source failed"),
        SourceExit::Done | SourceExit::ReceiverGone => {}
    }
    if let Some(ev) = exit.event(source) {
        // The collector outlives every sender; nothing to do if it did not.
        let _ = tx.send(ev).await;
    }
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
