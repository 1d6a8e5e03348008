//! Recovery actions against the Kubernetes API (DESIGN.md §5): restart a job
//! or a pod, save logs, record restarts on the job, cordon and taint nodes,
//! publish Events.
//!
//! The controller decides (`crate::policy`); these functions act. Each one
//! is idempotent (a replayed decision changes nothing or fails harmlessly),
//! makes as few requests as the real API server allows (a job restart is
//! one `deletecollection`), and reports how many requests it made, in its
//! outcome or in its error, for the API-call metrics.

pub mod device;
mod error;
mod event_series;
pub mod events;
mod history;
mod logs;
mod node;
mod restart;
mod tally;

pub use error::RecoverError;
pub use events::{Events, Notice, reasons, skip_event};
pub use history::{
    HISTORY_LEN, LAST_RESTART_ANNOTATION, RESTART_COUNT_ANNOTATION, RESTART_ENDED_ANNOTATION,
    RESTART_HISTORY_ANNOTATION, ROOT_CAUSE_ANNOTATION, RecordOutcome, RecordWrite, read_history,
    record_restart, record_write_patch, release, write_record,
};
pub use logs::{
    CONFIG_MAP_HEADROOM, CONFIG_MAP_LIMIT, LOG_READ_TIMEOUT, LOG_SAVES_AT_ONCE, LOGS_TOTAL_TIMEOUT,
    LogsOutcome, PodLogTarget, save_logs,
};
pub use node::{
    CORDON_HELD_ANNOTATION, CORDON_REASON_ANNOTATION, CORDON_STICKY_ANNOTATION,
    CORDONED_ANNOTATION, NodeOutcome, NodeSnapshot, SEPARATED_AT_ANNOTATION,
    WAS_UNSCHEDULABLE_ANNOTATION, Why, cordon, cordon_for, cordon_patch, cordoned_level,
    separated_at, uncordon, uncordon_patch,
};
pub use restart::{
    ChildJob, JOB_NAME_LABEL, JOB_UID_LABEL, PodRestartOutcome, RestartOutcome, RestartPath,
    delete_pod, restart_job, restart_pod, restart_through_child_jobs,
};
pub use tally::RESTART_TALLY_ANNOTATION;

/// The `app.kubernetes.io/managed-by` value on what rebound creates.
pub const MANAGED_BY: &str = "rebound";
