//! Everything the core reacts to, as one enum: watch changes (relists
//! included), action outcomes, leadership changes and ticks. Inputs carry
//! no client and no clock: the time of a step is passed beside it.

use super::effect::{EffectId, Outcome};
use super::pods::{Interner, PodInfo};
use crate::api::{FaultClassification, RecoveryPolicy, WorkloadKind};
use crate::fault::Fault;
use crate::inplace;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod};
use kube::api::DynamicObject;
use kube::discovery::ApiResource;
use std::sync::Arc;
use std::time::Duration;

/// A watch change of one kind, with reflector semantics: a relist
/// (`Relist`, then `Apply` for every current object, then `Synced`)
/// replaces what the core holds of that kind.
#[derive(Clone, Debug)]
pub enum Change<K> {
    Apply(K),
    Delete(K),
    /// A (re)list starts: objects not applied again before `Synced` are gone.
    Relist,
    /// The (re)list is complete.
    Synced,
}

impl<K> Change<K> {
    /// The same change with its object boxed.
    pub fn boxed(self) -> Change<Box<K>> {
        match self {
            Change::Apply(o) => Change::Apply(Box::new(o)),
            Change::Delete(o) => Change::Delete(Box::new(o)),
            Change::Relist => Change::Relist,
            Change::Synced => Change::Synced,
        }
    }
}

/// One input of the core.
///
/// The larger objects are boxed: every slot of the channel to the core is
/// as large as its largest input, and during the initial list of 20,000
/// pods thousands of slots wait (a `Node` is 1.5 KiB, a `PodSeen` a sixth
/// of it).
#[derive(Clone, Debug)]
pub enum Input {
    Pod(Change<PodSeen>),
    Node(Change<Box<Node>>),
    Event(Change<Box<Event>>),
    DeviceInfo(Change<Box<ConfigMap>>),
    /// Dynamic Resource Allocation objects (where the cluster serves them).
    Dra(DraChange),
    Policy(Change<Box<RecoveryPolicy>>),
    Classification(Change<Box<FaultClassification>>),
    Job(WorkloadKind, Change<DynamicObject>),
    /// The job kinds installed now (discovery), with their resources; a
    /// kind missing from the list is not installed (its objects are gone).
    JobKinds(Vec<(WorkloadKind, ApiResource)>),
    /// A watch stream failed and restarts (for metrics).
    WatchError(&'static str),
    /// An effect finished.
    Done(EffectId, Outcome),
    /// This replica's leadership changed: whether it leads, and its term
    /// ([`crate::k8s::leader::Leadership::term`]). A new term while leading
    /// (leadership lapsed and came back, perhaps unnoticed) is a new
    /// leadership: what was decided in the old one is dropped.
    Leader(bool, u64),
    /// Periodic work: timers, resyncs, status flushes.
    Tick,
    /// The jobs of one kind read afresh for the take-over of `term`
    /// ([`super::effect::EffectKind::ReadRecords`]): their metadata.
    Records {
        term: u64,
        kind: WorkloadKind,
        jobs: Vec<kube::api::ObjectMeta>,
    },
    /// The nodes read afresh for the take-over of `term`
    /// ([`super::effect::EffectKind::ReadNodes`]): their metadata.
    Nodes {
        term: u64,
        nodes: Vec<kube::api::ObjectMeta>,
    },
}

/// A pod as the core needs it, read in its watch task: the full object
/// never waits in the core's queue (memory during the initial list of
/// 20,000 pods), and parsing runs beside the core, not in it.
#[derive(Clone, Debug)]
pub struct PodSeen {
    pub info: PodInfo,
    /// Its faults (none for a pod being deleted), younger than the
    /// controller's `--fault-max-age`, without the terminations its last
    /// in-place restart caused or superseded.
    pub faults: Vec<Fault>,
    /// The pod's `resourceVersion` as this watch event carried it: the
    /// core keeps the last one, so that a job's `deletecollection` can be
    /// listed from the API server's watch cache once that cache is at
    /// least this new (`resourceVersionMatch=NotOlderThan`) instead of by a
    /// consistent read (see [`crate::recover::restart_job`]).
    pub resource_version: Option<Arc<str>>,
}

impl PodSeen {
    /// A pod the watch saw deleted: no faults, only what the core needs
    /// to forget it.
    pub fn gone(p: &Pod, pool: &mut Interner) -> PodSeen {
        PodSeen {
            info: PodInfo::from_pod(p, &super::pods::KeySet::default(), pool),
            faults: Vec::new(),
            resource_version: p.metadata.resource_version.as_deref().map(Arc::from),
        }
    }

    /// Compact `p` and read its faults as of `now`.
    pub fn read(
        p: &Pod,
        max_age: Duration,
        progress_keys: &super::pods::KeySet,
        pool: &mut Interner,
        now: chrono::DateTime<chrono::Utc>,
    ) -> PodSeen {
        let info = PodInfo::from_pod(p, progress_keys, pool);
        let faults = if info.deleting {
            Vec::new()
        } else {
            let restarted = info.restarted_in_place;
            crate::fault::pod::pod_faults(p, now)
                .into_iter()
                .filter(|f| (now - f.last_seen).to_std().unwrap_or(Duration::ZERO) <= max_age)
                // The agent exits to restart the pod: that is rebound's
                // doing, never a fault.
                .filter(|f| f.container.as_deref() != Some(inplace::AGENT_CONTAINER))
                // A termination before (or during) the pod's last in-place
                // restart was handled by that restart or caused by it (the
                // kubelet kills every container).
                .filter(|f| restarted.is_none_or(|t| f.last_seen.timestamp() > t))
                .map(|mut f| {
                    f.uid = p.metadata.uid.clone();
                    f
                })
                .collect()
        };
        PodSeen {
            info,
            faults,
            resource_version: p.metadata.resource_version.as_deref().map(Arc::from),
        }
    }
}

/// A change of one of the DRA objects rebound reads
/// ([`super::store::dra::DraIndex`]).
#[derive(Clone, Debug)]
pub enum DraChange {
    Slice(Change<Box<k8s_openapi::api::resource::v1::ResourceSlice>>),
    Claim(Change<Box<k8s_openapi::api::resource::v1::ResourceClaim>>),
    /// One of rebound's own DeviceTaintRules.
    Rule(Change<Box<k8s_openapi::api::resource::v1beta2::DeviceTaintRule>>),
    /// What the server serves, asked once at start: ResourceSlices and
    /// ResourceClaims (`resource.k8s.io/v1`), DeviceTaintRules (`v1beta2`).
    Served {
        claims: bool,
        rules: bool,
    },
}
