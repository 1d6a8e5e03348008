//! What the core asks the executor to do. Every destructive effect names
//! the identity it was decided for (a uid, a resourceVersion, a label of
//! the job's uid), so that carrying out a stale decision on an object
//! recreated meanwhile fails instead of acting on the wrong one.

use crate::fault::{Fault, Level};
use crate::recover::{NodeSnapshot, Notice, PodLogTarget};
use crate::workload::JobRef;
use chrono::{DateTime, Utc};
use std::sync::Arc;
use std::time::Instant;

/// Identity of one effect; its outcome comes back with it.
pub type EffectId = u64;

/// One effect, with the instant its cause was received (for the
/// reaction-time histogram; `None` for effects with no watch event behind
/// them, such as retries).
#[derive(Clone, Debug)]
pub struct Effect {
    pub id: EffectId,
    pub kind: EffectKind,
    pub received: Option<Instant>,
    /// The leadership term it was decided in: the executor carries out a
    /// destructive effect only while that term lasts, so a replica that
    /// lost and regained leadership never acts on a decision of the
    /// earlier term (another replica may have acted in between).
    pub term: u64,
    /// The critical path that led to it, when a watch event's step
    /// produced it (set by the controller's loop, not by the core).
    pub trace: Option<PathTrace>,
}

/// The stages of an effect's critical path before the executor took it
/// (docs/critical-path.md): the executor adds the dispatch and the
/// request's round trip, and reports all of them.
#[derive(Clone, Copy, Debug)]
pub struct PathTrace {
    /// The watch event turned into the core's input.
    pub read: std::time::Duration,
    /// Waiting in the channel for the core.
    pub queued: std::time::Duration,
    /// The core's step.
    pub decided: std::time::Duration,
    /// When the step ended.
    pub at: Instant,
}

/// How a job's pods are deleted all at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeleteAll {
    /// One `deletecollection` by this label selector (it names the job's
    /// uid where the operator labels pods with it).
    Selector(String),
    /// A Volcano `RestartJob` Command targeting the job's uid (the pods are
    /// deleted by selector when the Command kind is not installed), named
    /// after the uid and the restart `generation` so that a retry of the
    /// same restart finds it (409) rather than restarting twice.
    VolcanoCommand { generation: u64 },
    /// A JobSet (a TrainJob's JobSet) restarted as JobSet restarts itself:
    /// its child Jobs that hold the job's pods are deleted (by name, uid
    /// as precondition), so that JobSet makes them anew with fresh failure
    /// counts, and their pods go in one `deletecollection` by this
    /// selector and the Jobs' uids. Nothing of `maxRestarts` or any
    /// `backoffLimit` is spent.
    ChildJobs {
        selector: String,
        jobs: Vec<crate::recover::ChildJob>,
    },
}

/// One pod to delete, with its uid as precondition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodTarget {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// `Some(0)`: force-delete (the node cannot confirm).
    pub grace_seconds: Option<i64>,
}

impl PodTarget {
    /// The pod as the core knows it, deleted gracefully (with its uid as
    /// precondition, so a pod recreated under its name is never hit).
    pub fn of(p: &super::pods::PodInfo) -> PodTarget {
        PodTarget {
            namespace: p.namespace.to_string(),
            name: p.name.to_string(),
            uid: p.uid.to_string(),
            grace_seconds: None,
        }
    }
}

/// The restart record written on the job (see [`crate::recover::RecordWrite`]).
pub type JobRecord = crate::recover::RecordWrite;

/// What the executor does.
#[derive(Clone, Debug)]
#[allow(clippy::large_enum_variant)]
pub enum EffectKind {
    /// Delete every pod of the job (or a Volcano Command).
    RestartJob {
        job: JobRef,
        how: DeleteAll,
        /// The core's [`super::store::Store::pods_rv`] when it decided:
        /// the `deletecollection` lists from the server's watch cache at
        /// least this new rather than by a consistent read.
        pods_rv: Option<Arc<str>>,
    },
    /// Delete these pods (uid preconditions).
    DeletePods { job: JobRef, pods: Vec<PodTarget> },
    /// Append a restart record to the job and set its generation; for an
    /// in-place restart this write is what restarts the pods.
    Record {
        job: JobRef,
        /// The job's metadata as last seen (resourceVersion and
        /// annotations): the history is appended to it; a conflict is read
        /// again. `None`: read the job first.
        current: Option<kube::api::ObjectMeta>,
        write: JobRecord,
    },
    /// Lift the barrier of a generation (`restart-released`).
    Release { job: JobRef, generation: u64 },
    /// Mark a job whose restart budget is exhausted.
    MarkBudgetExhausted { job: JobRef },
    /// Mark on the job that the ending of its restart recorded at `at`
    /// was told (`JobResumed` or `JobNotResumed`): a leader that takes
    /// over follows a restart the old one had not seen to its end, and
    /// only such a one ([`crate::recover::RESTART_ENDED_ANNOTATION`]).
    MarkEnded { job: JobRef, at: DateTime<Utc> },
    /// Save the tail of the job's pods' logs in a ConfigMap (after the
    /// restart started: a pod being deleted or restarted in place still
    /// serves its logs). The root-cause pod comes first.
    SaveLogs {
        job: JobRef,
        pods: Vec<PodLogTarget>,
        tail_lines: u32,
        max_bytes: u32,
    },
    /// Cordon (and taint) a node, recording why in its annotations.
    Cordon {
        node: String,
        snapshot: NodeSnapshot,
        level: Level,
        taint: Option<String>,
        reason: String,
        sticky: bool,
        /// The breaker held this cordon back (recorded on the node).
        held: bool,
    },
    /// Return a node rebound cordoned to scheduling.
    Uncordon {
        node: String,
        snapshot: NodeSnapshot,
        taint_key: String,
    },
    /// An Event (best effort; no outcome is awaited).
    Event { about: About, notice: Notice },
    /// A status write of a RecoveryPolicy or FaultClassification.
    Status {
        target: StatusTarget,
        body: serde_json::Value,
    },
    /// A decision for in-process observers (demo, tests); no request.
    Decision(std::sync::Arc<crate::policy::Decision>),
    /// Let the restart agents of `namespace`'s wired pods read their jobs:
    /// server-side apply of rebound's RoleBinding of the ClusterRole
    /// `role` to these ServiceAccounts (agent_access.rs), then a check with
    /// the API server's authorizer that each may `get` and `watch` each of
    /// `reads` (`group`, `plural`) there.
    AgentAccess {
        namespace: String,
        role: String,
        accounts: Vec<String>,
        reads: Vec<(String, String)>,
    },
    /// Delete rebound's agent RoleBindings outside these namespaces.
    AgentAccessSweep { keep: Vec<String> },
    /// Read the restart records of every job of these kinds afresh (a
    /// consistent list of their metadata, not the watch cache), for the
    /// take-over of `term`: answered by [`super::input::Input::Records`]
    /// per kind; a kind whose list fails sends nothing (asked again).
    ReadRecords {
        term: u64,
        kinds: Vec<(crate::api::WorkloadKind, kube::discovery::ApiResource)>,
    },
    /// Take one device out of scheduling: create rebound's DeviceTaintRule
    /// `rule` for it (NoSchedule; NoExecute with `no_execute`). Creating
    /// one that exists is done.
    IsolateDevice {
        node: String,
        rule: String,
        device: super::store::dra::DeviceRef,
        /// The taint's value (the fault's code).
        value: String,
        no_execute: bool,
    },
    /// Return a device to scheduling: delete rebound's DeviceTaintRule
    /// `rule` (one already gone is done).
    LiftDevice { node: String, rule: String },
    /// Run the validation of an isolated device: create the batch Job
    /// `job` in `namespace` from `spec` on `node` (one that exists is
    /// kept), then answer its state as [`EffectKind::ReadValidation`].
    Validate {
        namespace: String,
        job: String,
        node: String,
        /// `device` or `node` (the Job's `rebound.dev/validation` label).
        what: String,
        spec: serde_json::Value,
        /// Given to every container.
        env: Vec<(String, String)>,
        timeout: std::time::Duration,
    },
    /// Read a validation Job: `Ok("Running" | "Succeeded" | "Failed: …")`,
    /// `Gone` when it does not exist.
    ReadValidation { namespace: String, job: String },
    /// Read the nodes' metadata afresh (a consistent list), for the
    /// take-over of `term`: the breaker's window is in the nodes'
    /// `separated-at` annotations, and a new leader's nodes watch may be
    /// behind the cordons the old leader made. Answered by
    /// [`super::input::Input::Nodes`]; a failed list sends nothing.
    ReadNodes { term: u64 },
}

impl EffectKind {
    /// One of a take-over's fresh reads (of records or of nodes).
    pub fn is_fresh_read(&self) -> bool {
        matches!(self, Self::ReadRecords { .. } | Self::ReadNodes { .. })
    }
}

/// What an Event is about.
#[derive(Clone, Debug)]
pub enum About {
    Job(JobRef),
    Node(String),
    /// A rebound object (RecoveryPolicy, FaultClassification).
    Object(k8s_openapi::api::core::v1::ObjectReference),
}

/// Whose status is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatusTarget {
    Policy { namespace: String, name: String },
    Classification { name: String },
}

/// How an effect ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Done; the text says what happened (for Events and logs).
    Ok(String),
    /// The object it was decided for is gone or another one now (a uid or
    /// resourceVersion precondition failed, 404): the decision is stale.
    Gone(String),
    /// Not done because this replica does not lead (checked right before
    /// the request).
    NotLeader,
    /// Failed; retried later.
    Failed(String),
}

impl Outcome {
    /// Whether it succeeded.
    pub fn is_ok(&self) -> bool {
        matches!(self, Outcome::Ok(_))
    }
}

/// A short description of a fault for notes.
pub fn describe(f: &Fault) -> String {
    let mut s = format!("{} {}", f.source, f.code);
    if let Some(r) = &f.reason {
        s.push_str(&format!(" ({r})"));
    }
    for (k, v) in [
        ("node", &f.node),
        ("device", &f.device),
        ("pod", &f.pod),
        ("container", &f.container),
    ] {
        if let Some(v) = v {
            s.push_str(&format!(" {k}={v}"));
        }
    }
    s
}
