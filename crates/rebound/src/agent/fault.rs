//! The agent's own fault record: what one source observed on this node, before
//! folding, and how it maps onto the wire contract ([`crate::fault::wire`]).

use crate::fault::wire::{GPU_CONDITION, NPU_CONDITION, WireFault};

/// Fault `source` for NVIDIA XIDs, NVSwitch SXids and "fallen off the bus".
///
/// SXids share the source because the controller classifies by number
/// ranges and SXid numbers (11000-28999) never overlap XIDs (1-~200).
pub const SOURCE_NVIDIA_XID: &str = "NvidiaXid";
/// Fault `source` for Ascend NPU hex fault codes.
pub const SOURCE_ASCEND_NPU: &str = "AscendNpu";
/// Fault `source` for health checks that are not a numbered driver code
/// (DCGM diagnostics, NVML health states): they behave like a node condition.
pub const SOURCE_NODE_CONDITION: &str = "NodeCondition";

/// Event reason for a GPU Xid (including fallen off the bus). Defined here,
/// not in `xid`, because [`AgentFault::counts_repeats`] reads it and the
/// kernel-log parsers (`kmsg`, `xid`) build on this module, not it on them.
pub const REASON_XID: &str = "GpuXid";
/// Event reason for an NVSwitch SXid.
pub const REASON_SXID: &str = "NvSwitchSXid";

/// Which accelerator family a fault belongs to; picks the Node condition type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Accelerator {
    /// NVIDIA GPUs and NVSwitches: condition `GpuFault`.
    Gpu,
    /// Ascend NPUs: condition `NpuFault`.
    Npu,
}

impl Accelerator {
    /// The Node condition type the controller watches for this family.
    pub fn condition_type(self) -> &'static str {
        match self {
            Accelerator::Gpu => GPU_CONDITION,
            Accelerator::Npu => NPU_CONDITION,
        }
    }

    /// Every family, in the order conditions are written.
    pub const ALL: [Accelerator; 2] = [Accelerator::Gpu, Accelerator::Npu];
}

/// One observation of a fault by one source.
///
/// `(family, source, code, device)` identifies a fault for folding: a repeat
/// with the same identity increments a count instead of making a new Event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentFault {
    /// Which condition the fault raises.
    pub family: Accelerator,
    /// A `FaultSource` name: [`SOURCE_NVIDIA_XID`], [`SOURCE_ASCEND_NPU`] or
    /// [`SOURCE_NODE_CONDITION`].
    pub source: &'static str,
    /// The code the controller's FaultClassification rules match on.
    pub code: String,
    /// GPU/NPU index when the node told us, else a PCI address or switch name.
    pub device: Option<String>,
    /// Event reason (CamelCase, stable): `GpuXid`, `NvSwitchSXid`, ...
    pub reason: &'static str,
    /// Human text, bounded in length; never used for matching.
    pub message: String,
}

/// Longest message kept from a source, so a hostile line cannot grow
/// conditions or Events beyond what the API server accepts.
pub const MAX_MESSAGE_CHARS: usize = 240;

impl AgentFault {
    /// Whether each observation is an occurrence of its own: a kernel-log
    /// or NVML XID is an event; a polled health state (NVML health, DCGM,
    /// npu-smi) seen again on the next poll is the same state, not a repeat.
    pub fn counts_repeats(&self) -> bool {
        self.reason == REASON_XID || self.reason == REASON_SXID
    }

    /// The wire form the controller parses, stamped with this node's name.
    pub fn to_wire(&self, node: &str) -> WireFault {
        WireFault {
            source: self.source.to_string(),
            code: self.code.clone(),
            node: Some(node.to_string()),
            device: self.device.clone(),
            message: if self.message.is_empty() {
                None
            } else {
                Some(self.message.clone())
            },
            at: None,
            count: None,
            last: None,
            pods: None,
        }
    }
}

/// Cut `s` to at most `max` characters (on a char boundary) and flatten
/// control characters, so messages are one line of printable text.
pub fn bounded_text(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max * 4));
    for (n, c) in s.chars().enumerate() {
        if n >= max {
            out.push('…');
            break;
        }
        out.push(if c.is_control() { ' ' } else { c });
    }
    out.trim().to_string()
}

/// What a source sends to the agent's loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceEvent {
    /// A fault, with the time it happened (the kernel record's time when
    /// known, else when it was read).
    Fault {
        /// The fault.
        fault: AgentFault,
        /// When it happened.
        at: std::time::SystemTime,
        /// `at` is the record's own time (a `/dev/kmsg` record), so a
        /// record read again is told from a new one: only then does a
        /// repeat count as an occurrence (a polled state or a file line
        /// read again is not one).
        timed: bool,
    },
    /// A source works (again): `rebound_agent_source_up` 1.
    Up {
        /// `kmsg`, `nvml`, `dcgm`, `dcgm_exporter`, `npusmi`.
        source: &'static str,
    },
    /// A source is not there on this node (its tool or library is
    /// missing, or it is switched off): down, but not failing, so no alert;
    /// the supervisor looks for it again now and then.
    Unavailable {
        /// The source.
        source: &'static str,
        /// Why, for people (`/healthz`, the log).
        why: String,
    },
    /// A source is down because of an error (it ended, or a poll failed):
    /// failing until it says `Up` again; the error is counted.
    Failed {
        /// The source.
        source: &'static str,
        /// What went wrong.
        error: String,
    },
    /// An error a source survived and works on through (an NVML event wait
    /// that failed): counted, the source's state is unchanged.
    Error {
        /// The source.
        source: &'static str,
        /// What went wrong.
        error: String,
    },
    /// The supervisor starts a failed source again (counted).
    Restarted {
        /// The source.
        source: &'static str,
    },
    /// What a source found on the node (the driver, each GPU's model and
    /// UUID), for people: logged, and listed by a dry run.
    Found {
        /// The source.
        source: &'static str,
        /// One line, e.g. `GPU 0: NVIDIA H100 80GB HBM3 (GPU-…)`.
        detail: String,
    },
    /// Input a source could not parse.
    ParseErrors {
        /// The source.
        source: &'static str,
        /// How many.
        n: u64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_text_cuts_and_flattens() {
        assert_eq!(bounded_text("a\nb\tc", 10), "a b c");
        assert_eq!(bounded_text("ééééé", 3), "ééé…");
    }

    #[test]
    fn wire_form_carries_node_and_device() {
        let f = AgentFault {
            family: Accelerator::Gpu,
            source: SOURCE_NVIDIA_XID,
            code: "79".into(),
            device: Some("3".into()),
            reason: "GpuXid",
            message: String::new(),
        };
        let w = f.to_wire("gpu-7");
        assert_eq!(w.node.as_deref(), Some("gpu-7"));
        assert_eq!(w.device.as_deref(), Some("3"));
        assert_eq!(w.message, None);
    }
}
