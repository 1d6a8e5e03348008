//! NVML health (feature `nvml`, off by default): critical XID events, GPU
//! lost, uncorrected ECC errors and pages pending retirement.
//!
//! libnvidia-ml is loaded at run time (dlopen through `nvml-wrapper`), so
//! the agent runs on a node without a driver: it logs that once and goes on
//! with its other sources. Faults use the kernel log's codes where one
//! exists, so the same incident seen by both folds into one: an XID event is
//! `NvidiaXid`/`<xid>`, a lost GPU is `NvidiaXid`/`79`; ECC and retired
//! pages are `NodeCondition`/`nvml-ecc-uncorrected` and
//! `nvml-retired-pages-pending`. Row-remap pending is not read (no safe
//! wrapper in nvml-wrapper 0.13); it shows in the kernel log as Xid 63/64.

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

#[cfg(feature = "nvml")]
mod imp {
    use std::time::{Duration, SystemTime};

    use nvml_wrapper::Nvml;
    use nvml_wrapper::bitmasks::event::EventTypes;
    use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
    use nvml_wrapper::enums::event::XidError;
    use nvml_wrapper::error::NvmlError;
    use tokio::sync::mpsc::Sender;

    use super::{NvmlSample, faults_from_sample};
    use crate::agent::fault::SourceEvent;

    /// Poll NVML every `interval` (waiting on XID events in between) until
    /// the receiver is gone. Blocking: run it on a blocking thread.
    pub fn watch_blocking(tx: Sender<SourceEvent>, interval: Duration) {
        let nvml = match Nvml::init() {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "NVML not available on this node; NVML source off");
                let _ = tx.blocking_send(SourceEvent::Up {
                    source: "nvml",
                    up: false,
                });
                return;
            }
        };
        if tx
            .blocking_send(SourceEvent::Up {
                source: "nvml",
                up: true,
            })
            .is_err()
        {
            return;
        }
        let count = nvml.device_count().unwrap_or(0);
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
                let mut sample = NvmlSample {
                    index: i,
                    ..NvmlSample::default()
                };
                match nvml.device_by_index(i) {
                    Err(NvmlError::GpuLost) => sample.lost = true,
                    Err(_) => continue,
                    Ok(dev) => {
                        match dev.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile) {
                            Err(NvmlError::GpuLost) => sample.lost = true,
                            r => sample.ecc_uncorrected = r.ok(),
                        }
                        sample.pages_pending = dev.are_pages_pending_retired().ok();
                    }
                }
                if !send(&tx, &sample) {
                    return;
                }
            }
            match set.as_ref().map(|s| s.wait(wait_ms)) {
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

/// Watch NVML until the receiver is gone (blocking; run on a blocking
/// thread). Without the `nvml` feature, says so once and returns.
pub fn watch_blocking(
    tx: tokio::sync::mpsc::Sender<super::fault::SourceEvent>,
    interval: std::time::Duration,
) {
    #[cfg(feature = "nvml")]
    imp::watch_blocking(tx, interval);
    #[cfg(not(feature = "nvml"))]
    {
        let _ = interval;
        tracing::info!("built without the `nvml` feature; NVML source off");
        let _ = tx.blocking_send(super::fault::SourceEvent::Up {
            source: "nvml",
            up: false,
        });
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
                ("NodeCondition", "nvml-retired-pages-pending"),
            ]
        );
        assert!(f.iter().all(|f| f.device.as_deref() == Some("2")));
        let healthy = NvmlSample {
            index: 0,
            ecc_uncorrected: Some(0),
            pages_pending: Some(false),
            ..NvmlSample::default()
        };
        assert!(faults_from_sample(&healthy).is_empty());
    }
}
