//! NVML health (feature `nvml`, on by default): critical XID events, GPU
//! lost, uncorrected ECC errors and pages pending retirement.
//!
//! libnvidia-ml is loaded at run time (dlopen through `nvml-wrapper`), so
//! the agent runs on a node without a driver: it logs that once and goes on
//! with its other sources. Faults use the kernel log's codes where one
//! exists, so the same incident seen by both folds into one: an XID event is
//! `NvidiaXid`/`<xid>`, a lost GPU is `NvidiaXid`/`79`; ECC, retired
//! pages and row remapping are `NodeCondition`/`nvml-ecc-uncorrected`,
//! `nvml-retired-pages-pending`, `nvml-row-remap-pending` and
//! `nvml-row-remap-failure` (samples/classifications/gpu-health.yaml).

use super::fault::{Accelerator, AgentFault, SOURCE_NODE_CONDITION, SOURCE_NVIDIA_XID};

/// Event reason for a fault seen through NVML.
pub const REASON_NVML: &str = "GpuNvmlHealth";
/// Event reason for an XID delivered by NVML.
pub const REASON_XID: &str = super::xid::REASON_XID;

/// One poll of one GPU.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NvmlSample {
    /// NVML index (as `nvidia-smi -i`).
    pub index: u32,
    /// NVML answered "GPU is lost".
    pub lost: bool,
    /// Volatile uncorrected ECC error count, when supported.
    pub ecc_uncorrected: Option<u64>,
    /// Pages pending retirement (pre-Ampere), when supported.
    pub pages_pending: Option<bool>,
    /// Rows waiting to be remapped at the next reset (Ampere+), when supported.
    pub remap_pending: Option<bool>,
    /// Row remapping failed (no spare rows), when supported.
    pub remap_failed: Option<bool>,
    /// A critical XID event delivered for this GPU.
    pub xid: Option<u64>,
}

/// The faults one sample shows.
pub fn faults_from_sample(s: &NvmlSample) -> Vec<AgentFault> {
    let device = Some(s.index.to_string());
    let mut out = Vec::new();
    let nc = |code: &str, message: String| AgentFault {
        family: Accelerator::Gpu,
        source: SOURCE_NODE_CONDITION,
        code: code.to_string(),
        device: device.clone(),
        reason: REASON_NVML,
        message,
    };
    if s.lost {
        out.push(AgentFault {
            family: Accelerator::Gpu,
            source: SOURCE_NVIDIA_XID,
            code: "79".into(),
            device: device.clone(),
            reason: REASON_NVML,
            message: format!("NVML: GPU {} is lost", s.index),
        });
    }
    if let Some(xid) = s.xid {
        out.push(AgentFault {
            family: Accelerator::Gpu,
            source: SOURCE_NVIDIA_XID,
            code: xid.to_string(),
            device: device.clone(),
            reason: REASON_XID,
            message: format!("NVML critical Xid {xid} on GPU {}", s.index),
        });
    }
    if let Some(n) = s.ecc_uncorrected.filter(|n| *n > 0) {
        out.push(nc(
            "nvml-ecc-uncorrected",
            format!(
                "NVML: {n} uncorrected ECC errors since driver load on GPU {}",
                s.index
            ),
        ));
    }
    if s.remap_failed == Some(true) {
        out.push(nc(
            "nvml-row-remap-failure",
            format!(
                "NVML: row remapping failed on GPU {} (no spare rows)",
                s.index
            ),
        ));
    }
    if s.remap_pending == Some(true) {
        out.push(nc(
            "nvml-row-remap-pending",
            format!(
                "NVML: GPU {} has rows pending remapping (reset needed)",
                s.index
            ),
        ));
    }
    if s.pages_pending == Some(true) {
        out.push(nc(
            "nvml-retired-pages-pending",
            format!(
                "NVML: GPU {} has pages pending retirement (reset needed)",
                s.index
            ),
        ));
    }
    out
}

/// What NVML says about one GPU, for people: printed by a dry run and
/// logged once at start, so a maintainer can check the agent sees the GPUs
/// the node has (tests/gpu/run.sh compares it with `nvidia-smi -L`).
pub fn describe_gpu(index: u32, name: Option<&str>, uuid: Option<&str>) -> String {
    format!(
        "GPU {index}: {} ({})",
        name.unwrap_or("unknown model"),
        uuid.unwrap_or("no UUID")
    )
}

/// First delay after an NVML event wait that failed at once; the delays
/// double up to the poll interval (health is still read once per
/// interval while events cannot be waited for).
pub const WAIT_RETRY_MIN: std::time::Duration = std::time::Duration::from_millis(250);

/// Event waits failing in a row before the source gives up and the
/// supervisor opens NVML anew (registering the events again, without the
/// GPUs that no longer accept them).
pub const WAIT_FAILURES_BEFORE_REOPEN: u32 = 10;

/// The backoff of the event wait for a poll `interval`.
pub fn wait_backoff(interval: std::time::Duration) -> super::backoff::ErrorBackoff {
    super::backoff::ErrorBackoff::new(
        super::backoff::RestartPolicy {
            min: WAIT_RETRY_MIN,
            max: interval.max(WAIT_RETRY_MIN),
        },
        WAIT_FAILURES_BEFORE_REOPEN,
    )
}

#[cfg(feature = "nvml")]
mod imp {
    use std::path::Path;
    use std::time::{Duration, SystemTime};

    use nvml_wrapper::bitmasks::event::EventTypes;
    use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
    use nvml_wrapper::enums::event::XidError;
    use nvml_wrapper::error::NvmlError;
    use nvml_wrapper::{EventSet, Nvml};
    use tokio::sync::mpsc::Sender;

    use super::{NvmlSample, describe_gpu, faults_from_sample, wait_backoff};
    use crate::agent::fault::SourceEvent;
    use crate::agent::supervise::SourceExit;

    const SOURCE: &str = "nvml";

    /// Load the driver's library and say what it found: `Up` and the
    /// driver and each GPU as `Found`. The error is how the source ends:
    /// `Unavailable` without the library, `Failed` when it cannot count
    /// the GPUs, `ReceiverGone`.
    fn open(tx: &Sender<SourceEvent>, library: Option<&Path>) -> Result<(Nvml, u32), SourceExit> {
        let loaded = match library {
            Some(path) => Nvml::builder().lib_path(path.as_os_str()).init(),
            None => Nvml::init(),
        };
        let nvml = loaded.map_err(|e| {
            SourceExit::Unavailable(format!(
                "NVML not available (no NVIDIA driver library {} in the container, or the \
                 driver's /dev/nvidia* devices not accessible; other sources go on): {e}",
                library.map_or("libnvidia-ml.so.1".into(), |p| p.display().to_string()),
            ))
        })?;
        let count = nvml.device_count().map_err(|e| {
            SourceExit::Failed(format!("NVML loaded but cannot count the GPUs: {e}"))
        })?;
        let driver = nvml
            .sys_driver_version()
            .unwrap_or_else(|_| "unknown".into());
        let version = nvml.sys_nvml_version().unwrap_or_else(|_| "unknown".into());
        let mut found = vec![format!("NVML {version}, driver {driver}: {count} GPU(s)")];
        for i in 0..count {
            let dev = nvml.device_by_index(i).ok();
            let name = dev.as_ref().and_then(|d| d.name().ok());
            let uuid = dev.as_ref().and_then(|d| d.uuid().ok());
            found.push(describe_gpu(i, name.as_deref(), uuid.as_deref()));
        }
        for detail in &found {
            tracing::info!(source = SOURCE, "{detail}");
        }
        let sent = tx.blocking_send(SourceEvent::Up { source: SOURCE }).is_ok()
            && found.into_iter().all(|detail| {
                tx.blocking_send(SourceEvent::Found {
                    source: SOURCE,
                    detail,
                })
                .is_ok()
            });
        if sent {
            Ok((nvml, count))
        } else {
            Err(SourceExit::ReceiverGone)
        }
    }

    /// One health reading of GPU `i`.
    fn sample(nvml: &Nvml, i: u32) -> Option<NvmlSample> {
        let mut sample = NvmlSample {
            index: i,
            ..NvmlSample::default()
        };
        match nvml.device_by_index(i) {
            Err(NvmlError::GpuLost) => sample.lost = true,
            Err(_) => return None,
            Ok(dev) => {
                match dev.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile) {
                    Err(NvmlError::GpuLost) => sample.lost = true,
                    r => sample.ecc_uncorrected = r.ok(),
                }
                sample.pages_pending = dev.are_pages_pending_retired().ok();
                if let Some((pending, failed)) = remapped_rows(nvml, &dev) {
                    sample.remap_pending = Some(pending);
                    sample.remap_failed = Some(failed);
                }
            }
        }
        Some(sample)
    }

    /// `nvmlDeviceGetRemappedRows` (Ampere+): (pending, failure occurred).
    /// nvml-wrapper 0.13 has no safe call for it, so the raw symbol;
    /// `None` where the driver lacks it or the GPU does not remap rows.
    fn remapped_rows(nvml: &Nvml, dev: &nvml_wrapper::Device<'_>) -> Option<(bool, bool)> {
        let f = nvml.lib().nvmlDeviceGetRemappedRows.as_ref().ok()?;
        let (mut corr, mut unc, mut pending, mut failed) = (0, 0, 0, 0);
        // SAFETY: the handle belongs to this live NVML instance (`dev`
        // borrows it), and the four out-pointers are valid for the call.
        let rc = unsafe { f(dev.handle(), &mut corr, &mut unc, &mut pending, &mut failed) };
        (rc == 0).then_some((pending != 0, failed != 0))
    }

    /// Read every GPU once and send what the readings show; `false` when
    /// the receiver is gone.
    fn sample_all(nvml: &Nvml, count: u32, tx: &Sender<SourceEvent>) -> bool {
        (0..count).all(|i| sample(nvml, i).is_none_or(|s| send(tx, &s)))
    }

    /// Load NVML, read every GPU once, send what was found; no XID events
    /// (they need a wait). For `--once` and the dry run.
    pub fn poll_once(tx: &Sender<SourceEvent>, library: Option<&Path>) -> SourceExit {
        match open(tx, library) {
            Ok((nvml, count)) if sample_all(&nvml, count, tx) => SourceExit::Done,
            Ok(_) => SourceExit::ReceiverGone,
            Err(exit) => exit,
        }
    }

    /// An event set with every GPU that accepts critical XID events.
    /// Registering consumes the set on failure, so a GPU that refuses (one
    /// off the bus, one without event support) is left out and the set
    /// built again: at most one attempt per GPU, and the others still
    /// deliver their events. `None` when no GPU accepts them.
    fn event_set(nvml: &Nvml, count: u32) -> Option<EventSet<'_>> {
        let mut refused: Vec<u32> = Vec::new();
        'attempt: loop {
            let mut set = nvml.create_event_set().ok()?;
            let mut registered = 0;
            let candidates: Vec<u32> = (0..count).filter(|i| !refused.contains(i)).collect();
            for i in candidates {
                let Ok(dev) = nvml.device_by_index(i) else {
                    refused.push(i);
                    continue;
                };
                match dev.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
                    Ok(s) => {
                        set = s;
                        registered += 1;
                    }
                    Err(e) => {
                        tracing::info!(gpu = i, error = %e.error, "NVML XID events not supported");
                        refused.push(i);
                        continue 'attempt;
                    }
                }
            }
            return (registered > 0).then_some(set);
        }
    }

    /// Poll NVML every `interval`, waiting on XID events in between, until
    /// the receiver is gone or the wait fails [`super::WAIT_FAILURES_BEFORE_REOPEN`]
    /// times in a row. A wait that fails at once (a GPU off the bus) is
    /// counted and followed by a delay that doubles up to `interval`
    /// instead of the next wait: it must not spin a core. Blocking: run it
    /// on its own thread.
    pub fn watch_blocking(
        tx: Sender<SourceEvent>,
        interval: Duration,
        library: Option<&Path>,
    ) -> SourceExit {
        let (nvml, count) = match open(&tx, library) {
            Ok(opened) => opened,
            Err(exit) => return exit,
        };
        // No GPU registered for events (none, or none supports them):
        // sleep instead, a wait on an empty set may return at once.
        let set = event_set(&nvml, count);
        let wait_ms = u32::try_from(interval.as_millis()).unwrap_or(u32::MAX);
        let mut backoff = wait_backoff(interval);
        loop {
            if !sample_all(&nvml, count, &tx) {
                return SourceExit::ReceiverGone;
            }
            match set.as_ref().map(|s| s.wait(wait_ms)) {
                None => std::thread::sleep(interval),
                Some(Ok(ev)) => {
                    backoff.succeeded();
                    if let (Some(XidError::Value(xid)), Ok(index)) =
                        (ev.event_data, ev.device.index())
                    {
                        let sample = NvmlSample {
                            index,
                            xid: Some(xid),
                            ..NvmlSample::default()
                        };
                        if !send(&tx, &sample) {
                            return SourceExit::ReceiverGone;
                        }
                    }
                }
                // Nothing happened within the interval: the wait works.
                Some(Err(NvmlError::Timeout)) => backoff.succeeded(),
                Some(Err(e)) => {
                    let error = format!("waiting for NVML events: {e}");
                    if tx
                        .blocking_send(SourceEvent::Error {
                            source: SOURCE,
                            error: error.clone(),
                        })
                        .is_err()
                    {
                        return SourceExit::ReceiverGone;
                    }
                    match backoff.failed() {
                        Some(delay) => {
                            tracing::debug!(%error, ?delay, "NVML event wait failed; waiting before the next");
                            std::thread::sleep(delay);
                        }
                        None => {
                            return SourceExit::Failed(format!(
                                "{error} ({} times in a row); opening NVML again",
                                backoff.failures()
                            ));
                        }
                    }
                }
            }
            if tx.is_closed() {
                return SourceExit::ReceiverGone;
            }
        }
    }

    fn send(tx: &Sender<SourceEvent>, s: &NvmlSample) -> bool {
        let at = SystemTime::now();
        faults_from_sample(s).into_iter().all(|fault| {
            tx.blocking_send(SourceEvent::Fault {
                fault,
                at,
                timed: false,
            })
            .is_ok()
        })
    }
}

/// Whether any GPU runs a compute process now (a job training), for the
/// DCGM source to keep its diagnostic off busy GPUs. `None` when NVML cannot
/// tell (no driver library, no `nvml` feature, a query failed). `library`
/// as for [`watch_blocking`]. Blocking and quick (one NVML call per GPU).
pub fn gpus_busy(library: Option<&std::path::Path>) -> Option<bool> {
    #[cfg(feature = "nvml")]
    {
        let nvml = match library {
            Some(p) => nvml_wrapper::Nvml::builder().lib_path(p.as_os_str()).init(),
            None => nvml_wrapper::Nvml::init(),
        }
        .ok()?;
        let mut busy = false;
        for i in 0..nvml.device_count().ok()? {
            busy |= nvml
                .device_by_index(i)
                .ok()?
                .running_compute_processes_count()
                .ok()?
                > 0;
        }
        Some(busy)
    }
    #[cfg(not(feature = "nvml"))]
    {
        let _ = library;
        None
    }
}

/// How the source ends in a build without NVML.
#[cfg(not(feature = "nvml"))]
fn without_nvml() -> super::supervise::SourceExit {
    super::supervise::SourceExit::Unavailable(
        "built without the `nvml` feature; NVML source off".into(),
    )
}

/// Watch NVML until the receiver is gone (blocking; run it on its own
/// thread) or the source ends: without a driver, or without the `nvml`
/// feature, `Unavailable` (the supervisor logs it once, sets
/// `rebound_agent_source_up{source="nvml"} 0` and looks again now and
/// then: a driver installed after the agent started is found), never an
/// error that would restart the agent; after event waits failing in a row,
/// `Failed` (the supervisor opens NVML again).
/// `library`: the driver's library by path (`--nvml-library`), else
/// `libnvidia-ml.so.1` from the loader's search path.
pub fn watch_blocking(
    tx: tokio::sync::mpsc::Sender<super::fault::SourceEvent>,
    interval: std::time::Duration,
    library: Option<&std::path::Path>,
) -> super::supervise::SourceExit {
    #[cfg(feature = "nvml")]
    {
        imp::watch_blocking(tx, interval, library)
    }
    #[cfg(not(feature = "nvml"))]
    {
        let _ = (tx, interval, library);
        without_nvml()
    }
}

/// Read NVML once (`--once`, the dry run): the driver and GPUs it finds as
/// `Found`, then one health reading per GPU. Blocking.
pub fn poll_once(
    tx: &tokio::sync::mpsc::Sender<super::fault::SourceEvent>,
    library: Option<&std::path::Path>,
) -> super::supervise::SourceExit {
    #[cfg(feature = "nvml")]
    {
        imp::poll_once(tx, library)
    }
    #[cfg(not(feature = "nvml"))]
    {
        let _ = (tx, library);
        without_nvml()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_to_faults() {
        let s = NvmlSample {
            index: 2,
            lost: true,
            ecc_uncorrected: Some(3),
            pages_pending: Some(true),
            remap_pending: Some(true),
            remap_failed: Some(true),
            xid: Some(48),
        };
        let f = faults_from_sample(&s);
        let got: Vec<_> = f.iter().map(|f| (f.source, f.code.as_str())).collect();
        assert_eq!(
            got,
            [
                ("NvidiaXid", "79"),
                ("NvidiaXid", "48"),
                ("NodeCondition", "nvml-ecc-uncorrected"),
                ("NodeCondition", "nvml-row-remap-failure"),
                ("NodeCondition", "nvml-row-remap-pending"),
                ("NodeCondition", "nvml-retired-pages-pending"),
            ]
        );
        assert!(f.iter().all(|f| f.device.as_deref() == Some("2")));
        let healthy = NvmlSample {
            index: 0,
            ecc_uncorrected: Some(0),
            pages_pending: Some(false),
            remap_pending: Some(false),
            remap_failed: Some(false),
            ..NvmlSample::default()
        };
        assert!(faults_from_sample(&healthy).is_empty());
    }
}
