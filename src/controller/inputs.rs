//! Everything the reactor reacts to, as one enum: watch events (stamped
//! with the instant they arrived, for reaction-time metrics), action
//! results and timers.

use crate::api::{FaultClassification, RecoveryPolicy};
use crate::fault::Fault;
use crate::workload::JobRef;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod};
use kube::api::DynamicObject;
use std::time::Instant;

/// A watch event of one kind.
#[derive(Debug)]
pub enum Change<K> {
    Apply(K),
    Delete(K),
    /// The initial list (or a re-list after a 410) is complete.
    Synced,
}

/// One input of the reactor.
///
/// Watch events carry the objects unboxed: they are moved through the
/// channel once and compacted at once; boxing would add an allocation per
/// event on the hot path for no gain.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Input {
    Pod(Change<Pod>, Instant),
    Node(Change<Node>, Instant),
    Event(Change<Event>, Instant),
    ConfigMap(Change<ConfigMap>, Instant),
    Policy(Change<RecoveryPolicy>),
    Classification(Change<FaultClassification>),
    Job(String, Change<DynamicObject>),
    /// A watch stream failed and restarts (for metrics).
    WatchError(&'static str, String),
    /// An action finished.
    Done(ActionResult),
    /// Re-decide a fault later (graded escalation).
    Recheck(Box<Fault>, JobRef),
    /// Periodic work: breaker retries, hang scan, status flush.
    Tick,
    /// This replica became leader: re-evaluate current faults.
    BecameLeader,
}

/// What an action task reports back.
#[derive(Debug)]
pub struct ActionResult {
    pub kind: ActionKind,
    pub ok: bool,
    pub message: String,
    /// Policy that decided, for its counters.
    pub policy: Option<String>,
}

/// What was attempted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionKind {
    RestartJob(JobRef),
    RestartPod(JobRef, String),
    Cordon(String),
    Uncordon(String),
}
