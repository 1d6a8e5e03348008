//! Everything the reactor reacts to, as one enum: watch events (stamped
//! with the instant they arrived, for reaction-time metrics), action
//! results and timers.

use super::state::PodInfo;
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
    Node(Change<NodeSeen>, Instant),
    Event(Change<Event>, Instant),
    ConfigMap(Change<ConfigMap>, Instant),
    Policy(Change<RecoveryPolicy>),
    Classification(Change<FaultClassification>),
    Job(Change<JobSeen>),
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
    pub fn read(p: &Pod, max_age: Duration, progress_keys: &BTreeSet<String>) -> PodSeen {
        let info = PodInfo::from_pod(p, progress_keys);
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
    ) -> Input {
        let c = match c {
            Change::Apply(p) => Change::Apply(PodSeen::read(&p, max_age, &progress_keys.get())),
            Change::Delete(p) => Change::Delete(PodSeen {
                info: PodInfo::from_pod(&p, &BTreeSet::new()),
                faults: Vec::new(),
            }),
            Change::Synced => Change::Synced,
        };
        Input::Pod(c, at)
    }
}

/// A node as the reactor needs it, read in its watch task (full Node objects,
/// with their images and conditions, never wait in the reactor's queue).
#[derive(Debug)]
pub struct NodeSeen {
    pub info: super::state::NodeInfo,
    /// Faults its conditions carry now.
    pub faults: Vec<Fault>,
    /// Whether its conditions say it is healthy (for auto-uncordon).
    pub healthy: bool,
}

impl NodeSeen {
    /// Wrap a watch event of the nodes' watch; `condition_types` are the
    /// condition types read as faults (`--condition-types`).
    pub fn input(c: Change<Node>, at: Instant, condition_types: &[String]) -> Input {
        let c = match c {
            Change::Apply(n) => Change::Apply(NodeSeen {
                info: super::state::NodeInfo::from_node(&n),
                faults: crate::fault::node::node_faults(&n, condition_types, chrono::Utc::now()),
                healthy: crate::fault::node::node_healthy(&n, condition_types),
            }),
            Change::Delete(n) => Change::Delete(NodeSeen {
                info: super::state::NodeInfo::from_node(&n),
                faults: Vec::new(),
                healthy: true,
            }),
            Change::Synced => Change::Synced,
        };
        Input::Node(c, at)
    }
}

/// A job object as the reactor needs it, read in its watch task: the full
/// object (pod templates, status) is dropped there.
#[derive(Debug)]
pub struct JobSeen {
    pub key: super::state::JobKey,
    pub info: super::state::JobInfo,
}

impl JobSeen {
    /// Compact a job object of `kind`.
    pub fn read(kind: crate::api::WorkloadKind, o: &DynamicObject) -> JobSeen {
        use kube::ResourceExt;
        let annotations = o.annotations().clone();
        JobSeen {
            key: (
                o.namespace().unwrap_or_default(),
                kind.as_str().to_string(),
                o.name_any(),
            ),
            info: super::state::JobInfo {
                resource_version: o.resource_version(),
                labels: o.labels().clone(),
                never: crate::workload::restart_policy_never(kind, &o.data, None),
                uid: o.uid(),
                history: crate::recover::read_history(&annotations),
                annotations,
            },
        }
    }

    /// Wrap a watch event of a job kind's watch.
    pub fn input(kind: crate::api::WorkloadKind, c: Change<DynamicObject>) -> Input {
        Input::Job(match c {
            Change::Apply(o) => Change::Apply(JobSeen::read(kind, &o)),
            Change::Delete(o) => Change::Delete(JobSeen::read(kind, &o)),
            Change::Synced => Change::Synced,
        })
    }
}
