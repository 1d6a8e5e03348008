//! Restoring the agent's state after a restart from the conditions it
//! wrote on the Node, so that a restart neither forgets nor repeats faults.

use std::time::SystemTime;

use super::super::dcgm::{REASON_DIAG, REASON_HEALTH};
use super::super::fault::{
    Accelerator, AgentFault, SOURCE_ASCEND_NPU, SOURCE_NODE_CONDITION, SOURCE_NVIDIA_XID,
};
use super::super::npusmi::REASON_NPU;
use super::super::nvml::REASON_NVML;
use super::super::report::{ExistingCondition, timestamp};
use super::super::state::{FaultKey, FoldState};
use super::super::xid::{REASON_SXID, REASON_XID};
use crate::fault::wire::WireFault;

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
                let repeat = w.last_time().map(SystemTime::from);
                let key = FaultKey::of(&f);
                state.restore(f, first, w.count.unwrap_or(1), repeat, written, now);
                // The holders the line named stay its holders.
                state.restore_pods(&key, w.pods.clone());
            }
        }
    }
}
