//! RecoveryPolicy: compile, select, decide; plus the node breaker.

pub mod breaker;
pub mod cel_meter;
pub mod compile;
pub mod decide;
pub mod engine;
pub mod select;

pub use breaker::Breaker;

/// How many restarts a job's restart history keeps in full (cooldowns,
/// escalation, the occurrence each restart was for): the last ones only.
pub const KEPT_RESTARTS: usize = 20;

/// Bytes the compact tally of older restarts may take on the job (its
/// `rebound.dev/restart-tally` annotation): an eighth of the 256 KiB the
/// API server allows for all of an object's annotations, which are shared
/// with whatever else the job carries (`kubectl apply`'s copy of the job,
/// other tools).
pub const TALLY_BYTES: usize = 32 * 1024;

/// Bytes of one tally entry at most: seconds since 1970 in base 36 (6
/// digits until the year 2038 + 3,000), a flag, a separator.
pub const TALLY_ENTRY_BYTES: usize = 8;

/// The largest restart budget: the tally keeps the last `MAX_BUDGET`
/// restarts of each kind that a budget counts (all of them, and those not
/// caused by hardware), so at most twice as many entries: 2 × 2,000 × 8
/// bytes = 32,000 bytes, within [`TALLY_BYTES`]. A larger budget could
/// never be used up, so it is refused rather than silently never reached.
pub const MAX_BUDGET: u32 = 2000;
const _: () = assert!(2 * MAX_BUDGET as usize * TALLY_ENTRY_BYTES <= TALLY_BYTES);
pub use compile::{
    CompiledPolicy, Cooldown, Hang, Limit, NodeConfig, RestartConfig, ValidationConfig,
};
pub use decide::{
    JobAction, JobDecision, JobInput, NodeAction, NodeDecision, NodeInput, RestartRecord, Skip,
    decide_job, decide_node,
};
pub use engine::{Decision, Engine};
pub use select::{PolicySet, PolicyWarning, Selection, WorkloadRef};

#[cfg(test)]
mod tests;
