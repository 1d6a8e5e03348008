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

#[cfg(feature = "nvml")]
mod imp {
    use std::path::Path;
    use std::time::{Duration, SystemTime};

    use nvml_wrapper::Nvml;
    use nvml_wrapper::bitmasks::event::EventTypes;
    use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
    use nvml_wrapper::enums::event::XidError;
    use nvml_wrapper::error::NvmlError;
    use tokio::sync::mpsc::Sender;

    use super::{NvmlSample, describe_gpu, faults_from_sample};
    use crate::agent::fault::SourceEvent;

    /// Load the driver's library and say what it found: `Up` (and the
    /// driver and each GPU as `Found`), or one warning and `Up false`.
    /// `None` when NVML is not there or the receiver is gone.
    fn open(tx: &Sender<SourceEvent>, library: Option<&Path>) -> Option<(Nvml, u32)> {
        let loaded = match library {
            Some(path) => Nvml::builder().lib_path(path.as_os_str()).init(),
            None => Nvml::init(),
        };
        let nvml = match loaded {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    library = %library.map_or("libnvidia-ml.so.1".into(), |p| p.display().to_string()),
                    "NVML not available (no NVIDIA driver library in the container, or the \
                     driver's /dev/nvidia* devices not accessible); NVML source off, other \
                     sources go on"
                );
                let _ = tx.blocking_send(SourceEvent::Up {
                    source: "nvml",
                    up: false,
                });
                return None;
            }
        };
        let count = match nvml.device_count() {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "NVML loaded but cannot count GPUs; NVML source off");
                let _ = tx.blocking_send(SourceEvent::Up {
                    source: "nvml",
                    up: false,
                });
                return None;
            }
        };
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
            tracing::info!(source = "nvml", "{detail}");
        }
        let sent = tx
            .blocking_send(SourceEvent::Up {
                source: "nvml",
                up: true,
            })
            .is_ok()
            && found.into_iter().all(|detail| {
                tx.blocking_send(SourceEvent::Found {
                    source: "nvml",
                    detail,
                })
                .is_ok()
            });
        sent.then_some((nvml, count))
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

    /// Load NVML, read every GPU once, send what was found; no XID events
    /// (they need a wait). For `--once` and the dry run.
    pub fn poll_once(tx: &Sender<SourceEvent>, library: Option<&Path>) {
        let Some((nvml, count)) = open(tx, library) else {
            return;
        };
        for i in 0..count {
            if let Some(s) = sample(&nvml, i)
                && !send(tx, &s)
            {
                return;
            }
        }
    }

    /// Poll NVML every `interval` (waiting on XID events in between) until
    /// the receiver is gone. Blocking: run it on a blocking thread.
    pub fn watch_blocking(tx: Sender<SourceEvent>, interval: Duration, library: Option<&Path>) {
        let Some((nvml, count)) = open(&tx, library) else {
            return;
        };
        let mut set = nvml.create_event_set().ok();
        for i in 0..count {
            if let (Ok(dev), Some(s)) = (nvml.device_by_index(i), set.take()) {
                set = match dev.register_events(EventTypes::CRITICAL_XID_ERROR, s) {
                    Ok(s) => Some(s),
                    Err(e) => {
                        tracing::info!(gpu = i, error = %e.error, "NVML XID events not supported");
                        None
                    }
                };
            }
        }
        let wait_ms = u32::try_from(interval.as_millis()).unwrap_or(u32::MAX);
        loop {
            for i in 0..count {
                if let Some(s) = sample(&nvml, i)
                    && !send(&tx, &s)
                {
                    return;
                }
            }
            // No GPU registered for events (none, or none supports them):
            // sleep instead, a wait on an empty set may return at once.
            match set.as_ref().filter(|_| count > 0).map(|s| s.wait(wait_ms)) {
                Some(Ok(ev)) => {
                    if let (Some(XidError::Value(xid)), Ok(index)) =
                        (ev.event_data, ev.device.index())
                    {
                        let sample = NvmlSample {
                            index,
                            xid: Some(xid),
                            ..NvmlSample::default()
                        };
                        if !send(&tx, &sample) {
                            return;
                        }
                    }
                }
                Some(Err(_)) => {}
                None => std::thread::sleep(interval),
            }
            if tx.is_closed() {
                return;
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

/// Say once that this build has no NVML.
#[cfg(not(feature = "nvml"))]
fn without_nvml(tx: &tokio::sync::mpsc::Sender<super::fault::SourceEvent>) {
    tracing::warn!("built without the `nvml` feature; NVML source off");
    let _ = tx.blocking_send(super::fault::SourceEvent::Up {
        source: "nvml",
        up: false,
    });
}

/// Watch NVML until the receiver is gone (blocking; run it on a blocking
/// thread). Without a driver, or without the `nvml` feature, says so once
/// (a log line and `Up false`, which sets `rebound_agent_source_up{source="nvml"} 0`)
/// and returns: never an error that would restart the agent.
/// `library`: the driver's library by path (`--nvml-library`), else
/// `libnvidia-ml.so.1` from the loader's search path.
pub fn watch_blocking(
    tx: tokio::sync::mpsc::Sender<super::fault::SourceEvent>,
    interval: std::time::Duration,
    library: Option<&std::path::Path>,
) {
    #[cfg(feature = "nvml")]
    imp::watch_blocking(tx, interval, library);
    #[cfg(not(feature = "nvml"))]
    {
        let _ = (interval, library);
        without_nvml(&tx);
    }
}

/// Read NVML once (`--once`, the dry run): the driver and GPUs it finds as
/// `Found`, then one health reading per GPU. Blocking.
pub fn poll_once(
    tx: &tokio::sync::mpsc::Sender<super::fault::SourceEvent>,
    library: Option<&std::path::Path>,
) {
    #[cfg(feature = "nvml")]
    imp::poll_once(tx, library);
    #[cfg(not(feature = "nvml"))]
    {
        let _ = library;
        without_nvml(tx);
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
