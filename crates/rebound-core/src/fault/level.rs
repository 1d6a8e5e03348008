//! The level vocabulary of DESIGN.md §2 and the fault sources of §4.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;

/// How bad a fault is. Ordered: a node keeps the highest level it has seen
/// until its fault clears, so comparisons (`max`) must follow severity.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub enum Level {
    /// Informational: recorded, nothing done (ClusterD `NotHandleFault`).
    Ignore,
    /// The job's processes are broken, hardware is fine: restart the job.
    RestartJob,
    /// Hardware degrading: cordon the node, let running work finish.
    PreSeparate,
    /// A device needs a reset: restart jobs on the node, cordon until clear.
    ResetDevice,
    /// Hardware unusable: restart jobs elsewhere, cordon and taint the node.
    Separate,
}

impl Level {
    /// Every level, in severity order (for docs, metrics and parsing).
    pub const ALL: [Level; 5] = [
        Level::Ignore,
        Level::RestartJob,
        Level::PreSeparate,
        Level::ResetDevice,
        Level::Separate,
    ];

    /// The name used in YAML, CEL (`fault.level`) and metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Ignore => "Ignore",
            Level::RestartJob => "RestartJob",
            Level::PreSeparate => "PreSeparate",
            Level::ResetDevice => "ResetDevice",
            Level::Separate => "Separate",
        }
    }

    /// Whether the level points at the hardware (node or device) rather than
    /// the job's own processes: such restarts are free of the restart budget
    /// by default, and only trusted sources may raise them.
    pub fn is_infrastructure(self) -> bool {
        matches!(
            self,
            Level::PreSeparate | Level::ResetDevice | Level::Separate
        )
    }

    /// Whether jobs running on the faulty node (or using the pod) restart.
    pub fn restarts_jobs(self) -> bool {
        matches!(
            self,
            Level::RestartJob | Level::ResetDevice | Level::Separate
        )
    }

    /// Whether the node is taken out of scheduling.
    pub fn cordons_node(self) -> bool {
        self.is_infrastructure()
    }

    /// The ClusterD / Ascend name of the level, for the Ascend fault view.
    pub fn clusterd_name(self) -> &'static str {
        match self {
            Level::Ignore => "NotHandleFault",
            Level::RestartJob => "RestartRequest",
            Level::PreSeparate => "PreSeparateNPU",
            Level::ResetDevice => "RestartNPU",
            Level::Separate => "SeparateNPU",
        }
    }

    /// Map an Ascend/ClusterD level name (as found in `faultCode.json` and the
    /// device-plugin ConfigMaps) to a level; `None` for an unknown name.
    pub fn from_clusterd(name: &str) -> Option<Level> {
        Some(match name {
            "NotHandleFault" | "NotHandleFaultCodes" => Level::Ignore,
            "RestartRequest"
            | "RestartRequestCodes"
            | "RestartBusiness"
            | "RestartBusinessCodes" => Level::RestartJob,
            "PreSeparateFault" | "PreSeparateNPU" | "PreSeparateNPUCodes" => Level::PreSeparate,
            "RestartNPU" | "RestartNPUCodes" | "FreeRestartNPU" | "FreeRestartNPUCodes" => {
                Level::ResetDevice
            }
            // A chip an operator separated by hand (`ManuallySeparateNPU`)
            // is treated by ClusterD as SeparateNPU.
            "SeparateFault" | "SeparateNPU" | "SeparateNPUCodes" | "ManuallySeparateNPU" => {
                Level::Separate
            }
            _ => return None,
        })
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Level {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Level::ALL
            .into_iter()
            .find(|l| l.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                format!("unknown level {s:?}; expected one of Ignore, RestartJob, PreSeparate, ResetDevice, Separate")
            })
    }
}

/// Where a fault comes from (DESIGN.md §4). Classifications are per source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum FaultSource {
    /// NVIDIA XID (and SXid) codes from the agent or a structured Event.
    NvidiaXid,
    /// Ascend NPU hex fault codes (device-plugin ConfigMaps or the agent).
    AscendNpu,
    /// A container that terminated with a non-zero exit code or a reason.
    PodExit,
    /// A Node condition (node-problem-detector, DCGM health, NotReady).
    NodeCondition,
    /// An Event annotated for recovery (kcover) without a structured source.
    KubeEvent,
    /// A job whose progress signal stopped for longer than its policy allows.
    Hang,
}

impl FaultSource {
    /// Every source, for docs and parsing.
    pub const ALL: [FaultSource; 6] = [
        FaultSource::NvidiaXid,
        FaultSource::AscendNpu,
        FaultSource::PodExit,
        FaultSource::NodeCondition,
        FaultSource::KubeEvent,
        FaultSource::Hang,
    ];

    /// The name used in YAML, CEL (`fault.source`) and metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            FaultSource::NvidiaXid => "NvidiaXid",
            FaultSource::AscendNpu => "AscendNpu",
            FaultSource::PodExit => "PodExit",
            FaultSource::NodeCondition => "NodeCondition",
            FaultSource::KubeEvent => "KubeEvent",
            FaultSource::Hang => "Hang",
        }
    }

    /// Whether numeric codes of this source are hexadecimal (Ascend writes
    /// `80E18402`), which decides how code ranges are compared.
    pub fn hex_codes(self) -> bool {
        matches!(self, FaultSource::AscendNpu)
    }
}

impl fmt::Display for FaultSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for FaultSource {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FaultSource::ALL
            .into_iter()
            .find(|l| l.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                format!("unknown fault source {s:?}; expected one of NvidiaXid, AscendNpu, PodExit, NodeCondition, KubeEvent, Hang")
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_ordered_by_severity() {
        assert!(Level::Ignore < Level::RestartJob);
        assert!(Level::RestartJob < Level::PreSeparate);
        assert!(Level::PreSeparate < Level::ResetDevice);
        assert!(Level::ResetDevice < Level::Separate);
        assert_eq!("separate".parse::<Level>(), Ok(Level::Separate));
        assert!("Broken".parse::<Level>().is_err());
    }

    #[test]
    fn clusterd_names_map_to_levels() {
        assert_eq!(Level::from_clusterd("SeparateNPU"), Some(Level::Separate));
        assert_eq!(
            Level::from_clusterd("RestartBusiness"),
            Some(Level::RestartJob)
        );
        assert_eq!(
            Level::from_clusterd("FreeRestartNPU"),
            Some(Level::ResetDevice)
        );
        assert_eq!(
            Level::from_clusterd("PreSeparateNPU"),
            Some(Level::PreSeparate)
        );
        assert_eq!(Level::from_clusterd("NotHandleFault"), Some(Level::Ignore));
        assert_eq!(Level::from_clusterd("Whatever"), None);
    }

    #[test]
    fn only_hardware_levels_touch_nodes() {
        assert!(!Level::RestartJob.cordons_node());
        assert!(Level::PreSeparate.cordons_node());
        assert!(!Level::PreSeparate.restarts_jobs());
        assert!(Level::Separate.restarts_jobs());
    }
}
