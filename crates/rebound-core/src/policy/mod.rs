//! RecoveryPolicy: compile, select, decide; plus the node breaker.

pub mod breaker;
pub mod compile;
pub mod decide;
pub mod engine;
pub mod select;

pub use breaker::Breaker;

/// How many restarts a job's restart history keeps: enough for any budget
/// in practice, small enough for the 256 KiB annotation limit. A restart
/// budget above it is refused (it could never be used up).
pub const KEPT_RESTARTS: usize = 20;
pub use compile::{CompiledPolicy, Cooldown, Hang, Limit, NodeConfig, RestartConfig};
pub use decide::{
    JobAction, JobDecision, JobInput, NodeAction, NodeDecision, NodeInput, RestartRecord, Skip,
    decide_job, decide_node,
};
pub use engine::{Decision, Engine};
pub use select::{PolicySet, PolicyWarning, Selection, WorkloadRef};

#[cfg(test)]
mod tests;
