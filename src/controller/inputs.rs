//! Everything the reactor reacts to, as one enum: watch events (stamped
//! with the instant they arrived, for reaction-time metrics), action
//! results and timers.

use super::state::{Interner, PodInfo};
use crate::api::{FaultClassification, RecoveryPolicy};
use crate::fault::Fault;
use crate::workload::JobRef;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod};
use kube::api::DynamicObject;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

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
    Pod(Change<PodSeen>, Instant),
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

/// A pod as the reactor needs it, read in its watch task: the full object
/// never waits in the reactor's queue (memory during the initial list of
/// 20,000 pods), and parsing runs beside the reactor, not in it.
#[derive(Debug)]
pub struct PodSeen {
    pub info: PodInfo,
    /// Its faults (none for a pod being deleted), younger than the
    /// controller's `--fault-max-age`.
    pub faults: Vec<Fault>,
}

impl PodSeen {
    /// Compact `p` and read its faults as of now.
    pub fn read(
        p: &Pod,
        max_age: Duration,
        progress_keys: &BTreeSet<String>,
        pool: &mut Interner,
    ) -> PodSeen {
        let info = PodInfo::from_pod(p, progress_keys, pool);
        let now = chrono::Utc::now();
        let faults = if info.deleting {
            Vec::new()
        } else {
            crate::fault::pod::pod_faults(p, now)
                .into_iter()
                .filter(|f| (now - f.last_seen).to_std().unwrap_or(Duration::ZERO) <= max_age)
                .map(|mut f| {
                    f.uid = p.metadata.uid.clone();
                    f
                })
                .collect()
        };
        PodSeen { info, faults }
    }

    /// Wrap a watch event of the pods' watch.
    pub fn input(
        c: Change<Pod>,
        at: Instant,
        max_age: Duration,
        progress_keys: &super::state::ProgressKeys,
        pool: &mut Interner,
    ) -> Input {
        let c = match c {
            Change::Apply(p) => {
                Change::Apply(PodSeen::read(&p, max_age, &progress_keys.get(), pool))
            }
            Change::Delete(p) => Change::Delete(PodSeen {
                info: PodInfo::from_pod(&p, &BTreeSet::new(), pool),
                faults: Vec::new(),
            }),
            Change::Synced => Change::Synced,
        };
        Input::Pod(c, at)
    }
}
