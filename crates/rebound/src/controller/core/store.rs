//! The core's observed state: compact copies of what the watches deliver,
//! with the indices the decisions need (pods by job and by node), so that
//! the hot path reads memory only. A relist replaces what it covers: an
//! object not seen again by the end of a relist is gone ([`Relists`]).

use super::pods::PodInfo;
use crate::api::WorkloadKind;
use crate::controller::core::hashing::{HashMap, HashSet};
use crate::fault::{Fault, Level};
use crate::inplace::Generation;
use crate::policy::RestartRecord;
use crate::recover::NodeSnapshot;
use crate::workload::JobRef;
use k8s_openapi::api::core::v1::Node;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

pub mod dra;
mod relists;

pub use relists::{Relists, Watched};

/// Key of a job in the store: (namespace, kind, name).
pub type JobKey = (String, String, String);

/// The key of a job reference.
pub fn job_key(j: &JobRef) -> JobKey {
    (
        j.namespace.clone(),
        j.kind.as_str().to_string(),
        j.name.clone(),
    )
}

/// A pod's (namespace, name), sharing the store's strings.
pub type PodKey = (Arc<str>, Arc<str>);

pub use crate::recover::{CORDON_STICKY_ANNOTATION, SEPARATED_AT_ANNOTATION};

/// What the core keeps of a node.
#[derive(Clone, Debug, Default)]
pub struct NodeInfo {
    pub name: String,
    pub uid: Option<String>,
    pub labels: BTreeMap<String, String>,
    /// What the cordon patch is computed from.
    pub snap: NodeSnapshot,
    /// The level at which rebound cordoned it (from its annotation).
    pub cordoned_by: Option<Level>,
    /// When rebound last separated it (from its annotation).
    pub separated_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Cordoned for a fault without a clear signal.
    pub sticky: bool,
    /// `Ready` is `True`.
    pub ready: bool,
    /// The faults its conditions carry now.
    pub faults: Vec<Fault>,
}

impl NodeInfo {
    /// Compact a node; `faults` are its conditions' faults as read now.
    pub fn from_node(n: &Node, faults: Vec<Fault>) -> NodeInfo {
        let snap = NodeSnapshot::from_node(n);
        let ready = n
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        NodeInfo {
            name: n.metadata.name.clone().unwrap_or_default(),
            uid: n.metadata.uid.clone(),
            labels: n.metadata.labels.clone().unwrap_or_default(),
            cordoned_by: crate::recover::cordoned_level(&snap.annotations),
            separated_at: crate::recover::separated_at(&snap.annotations),
            sticky: snap
                .annotations
                .get(CORDON_STICKY_ANNOTATION)
                .is_some_and(|v| v == "true"),
            ready,
            faults,
            snap,
        }
    }
}

pub use crate::workload::operator::{RetryCost, RetryLimit};

/// What the core keeps of a job object.
#[derive(Clone, Debug, Default)]
pub struct JobInfo {
    pub resource_version: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub uid: Option<String>,
    /// Restart policy says never restart (per kind, see workload).
    pub never: bool,
    /// The restart history in its annotations, oldest first.
    pub history: Vec<RestartRecord>,
    /// Its in-place restart generation.
    pub generation: Generation,
    /// The job operator's own retry limit, where the kind has one.
    pub retry_limit: Option<RetryLimit>,
    /// Its Jobs' `podFailurePolicy` ignores pods marked `DisruptionTarget`:
    /// rebound marks the pods it deletes, which then cost no retry.
    pub ignores_disruption: bool,
    /// What of its spec says which exits its operator treats as final
    /// (`workload::operator::exit_rules`), when anything does.
    pub exit_rules: Option<Arc<serde_json::Value>>,
    /// Why its operator gave up on it (a `Failed` condition or phase).
    pub operator_failed: Option<String>,
    /// Its Jobs that count container restarts against their
    /// `backoffLimit` (what an in-place restart costs them).
    pub counted_restarts: Vec<super::restart_counts::CountedRestarts>,
    /// A JobSet using JobSet's own in-place restart protocol.
    pub native_in_place: bool,
    /// The TrainJob a JobSet runs for (its controller owner): the JobSet's
    /// pods are the TrainJob's.
    pub trainjob: Option<Arc<JobRef>>,
}

/// A fault an Event carries, kept while the Event exists.
#[derive(Clone, Debug)]
pub struct EventFault {
    pub fault: Fault,
    /// The Event's uid and count: an occurrence per count.
    pub uid: String,
    pub count: u32,
}

/// Everything observed, with indices.
#[derive(Debug, Default)]
pub struct Store {
    /// Pods by namespace, then name (looked up by `&str`, no key copies).
    pub pods: HashMap<Arc<str>, HashMap<Arc<str>, PodInfo>>,
    /// Pod names of each job, in order.
    pub pods_by_job: HashMap<JobKey, BTreeSet<Arc<str>>>,
    /// (namespace, name) of the pods on each node.
    pub pods_by_node: HashMap<Arc<str>, BTreeSet<PodKey>>,
    pub nodes: HashMap<String, NodeInfo>,
    pub jobs: HashMap<JobKey, JobInfo>,
    /// Faults of the Ascend device plugin's ConfigMaps, by node, and
    /// whether the plugin calls the node healthy.
    pub device_faults: HashMap<String, (Vec<Fault>, bool)>,
    /// Fault-carrying Events by `namespace/name`.
    pub event_faults: HashMap<String, EventFault>,
    /// The trusted node-scope fault Events of each node (their keys in
    /// `event_faults`): what node reconcile reads, never a tenant's.
    pub node_events: HashMap<String, BTreeSet<String>>,
    /// Fault Events tracked per tenant namespace (capped).
    pub tenant_events: HashMap<String, usize>,
    pub relists: Relists,
    /// The `resourceVersion` of the last pod event the watch delivered (in
    /// the watch's own order, never compared: resource versions are
    /// opaque). The server's watch cache has seen at least that much, and
    /// every pod this store knows, so a `deletecollection` listed from
    /// that cache no older than it misses none of them.
    pub pods_rv: Option<Arc<str>>,
    /// The ServiceAccounts of wired pods, for the agents' RoleBindings.
    pub access: super::agent_access::AgentAccess,
    /// Which pod holds which device (DRA), and rebound's device isolations.
    pub dra: dra::DraIndex,
}

impl Store {
    /// Note the resource version of a pod event just applied.
    pub fn saw_pods_at(&mut self, rv: Option<Arc<str>>) {
        if rv.is_some() {
            self.pods_rv = rv;
        }
    }

    /// A pod by namespace and name.
    pub fn pod(&self, ns: &str, name: &str) -> Option<&PodInfo> {
        self.pods.get(ns)?.get(name)
    }

    /// Every pod.
    pub fn all_pods(&self) -> impl Iterator<Item = &PodInfo> {
        self.pods.values().flat_map(|m| m.values())
    }

    /// Number of pods.
    pub fn pod_count(&self) -> usize {
        self.pods.values().map(HashMap::len).sum()
    }

    /// The TrainJob whose JobSet `job` is, if the JobSet is known to run
    /// for one.
    fn trainjob_of(&self, job: &JobRef) -> Option<Arc<JobRef>> {
        if job.kind != WorkloadKind::JobSet {
            return None;
        }
        self.jobs.get(&job_key(job))?.trainjob.clone()
    }

    /// The job a pod scoped to `job` belongs to now: the TrainJob when
    /// `job` is its JobSet, else `job` (a fault seen before the JobSet's
    /// owner was known is decided for the TrainJob all the same).
    pub fn resolve(&self, job: &Arc<JobRef>) -> Arc<JobRef> {
        self.trainjob_of(job).unwrap_or_else(|| job.clone())
    }

    /// File a pod seen on the watch under its job as known now (see
    /// [`Store::resolve`]), keeping its own JobSet beside.
    pub fn resolve_pod(&self, p: &mut PodInfo) {
        let set = p.jobset.take().unwrap_or_else(|| p.job.clone());
        match self.trainjob_of(&set) {
            Some(t) => {
                p.job = t;
                p.jobset = Some(set);
            }
            None => p.job = set,
        }
    }

    /// The object whose spec governs how a job is restarted: a TrainJob's
    /// JobSet (same name: Trainer names it so), else the job itself.
    pub fn restart_info(&self, key: &JobKey) -> Option<&JobInfo> {
        if key.1 == WorkloadKind::TrainJob.as_str() {
            return self.jobs.get(&(
                key.0.clone(),
                WorkloadKind::JobSet.as_str().to_string(),
                key.2.clone(),
            ));
        }
        self.jobs.get(key)
    }

    /// What a restart of `job` deletes pods through: a TrainJob's JobSet,
    /// with the JobSet's uid when known (a TrainJob recreated under its
    /// name gets a new JobSet); any other job itself.
    pub fn restart_target(&self, job: &JobRef) -> JobRef {
        if job.kind != WorkloadKind::TrainJob {
            return job.clone();
        }
        let uid = self
            .jobs
            .get(&(
                job.namespace.clone(),
                WorkloadKind::JobSet.as_str().to_string(),
                job.name.clone(),
            ))
            .filter(|j| {
                j.trainjob
                    .as_ref()
                    .is_some_and(|t| job.uid.is_none() || t.uid == job.uid)
            })
            .and_then(|j| j.uid.clone());
        JobRef::new(
            WorkloadKind::JobSet,
            job.namespace.clone(),
            job.name.clone(),
            uid,
        )
    }

    /// File the pods of a JobSet again after its object changed or went:
    /// they are their TrainJob's while the JobSet names one as its owner,
    /// the JobSet's otherwise. Pods seen before their JobSet are moved
    /// here, so the order of the watches does not matter.
    pub fn rehome_jobset(&mut self, key: &JobKey, before: Option<&Arc<JobRef>>) {
        let mut keys = vec![key.clone()];
        let after = self.jobs.get(key).and_then(|j| j.trainjob.clone());
        keys.extend(before.iter().map(|t| job_key(t)));
        keys.extend(after.iter().map(|t| job_key(t)));
        let names: Vec<Arc<str>> = keys
            .iter()
            .filter_map(|k| self.pods_by_job.get(k))
            .flatten()
            .cloned()
            .collect();
        for n in names {
            let own = self.pod(&key.0, &n).is_some_and(|p| {
                let set = p.jobset.as_ref().unwrap_or(&p.job);
                job_key(set) == *key
            });
            if own && let Some(p) = self.remove_pod(&key.0, &n) {
                self.upsert_pod(p);
            }
        }
    }

    /// Insert or replace a pod, keeping indices right.
    pub fn upsert_pod(&mut self, mut p: PodInfo) {
        self.remove_pod(&p.namespace, &p.name);
        self.resolve_pod(&mut p);
        self.pods_by_job
            .entry(job_key(&p.job))
            .or_default()
            .insert(p.name.clone());
        if let Some(n) = &p.node {
            self.pods_by_node
                .entry(n.clone())
                .or_default()
                .insert((p.namespace.clone(), p.name.clone()));
        }
        if let Some(sa) = &p.agent_account {
            self.access.count(&p.namespace, sa, p.job.kind, 1);
        }
        self.pods
            .entry(p.namespace.clone())
            .or_default()
            .insert(p.name.clone(), p);
    }

    /// Remove a pod and its index entries; the pod, if it was there.
    pub fn remove_pod(&mut self, ns: &str, name: &str) -> Option<PodInfo> {
        let in_ns = self.pods.get_mut(ns)?;
        let old = in_ns.remove(name)?;
        if in_ns.is_empty() {
            self.pods.remove(ns);
        }
        if let Some(sa) = &old.agent_account {
            self.access.count(&old.namespace, sa, old.job.kind, -1);
        }
        let jk = job_key(&old.job);
        if let Some(s) = self.pods_by_job.get_mut(&jk) {
            s.remove(name);
            if s.is_empty() {
                self.pods_by_job.remove(&jk);
            }
        }
        if let Some(n) = &old.node
            && let Some(s) = self.pods_by_node.get_mut(n)
        {
            s.remove(&(old.namespace.clone(), old.name.clone()));
            if s.is_empty() {
                self.pods_by_node.remove(n);
            }
        }
        Some(old)
    }

    /// Pods of a job.
    pub fn job_pods(&self, j: &JobKey) -> Vec<&PodInfo> {
        self.pods_by_job
            .get(j)
            .map(|names| names.iter().filter_map(|n| self.pod(&j.0, n)).collect())
            .unwrap_or_default()
    }

    /// Pods on a node.
    pub fn node_pods(&self, node: &str) -> Vec<&PodInfo> {
        self.pods_by_node
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|(ns, n)| self.pod(ns, n))
            .collect()
    }

    /// Distinct jobs with a live pod on a node that existed at `since`
    /// (seconds; `None`: any): a fault there concerns only pods that were
    /// there when it happened.
    pub fn jobs_on_node(&self, node: &str, since: Option<i64>) -> Vec<JobRef> {
        let mut seen = HashSet::default();
        let mut out = Vec::new();
        for p in self.node_pods(node) {
            if !p.deleting && since.is_none_or(|t| p.created <= t) && seen.insert(job_key(&p.job)) {
                out.push((*p.job).clone());
            }
        }
        out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        out
    }

    /// Whether every known pod of the job runs (and there is at least one).
    pub fn job_running(&self, j: &JobKey) -> bool {
        let pods = self.job_pods(j);
        !pods.is_empty() && pods.iter().all(|p| p.running && !p.deleting)
    }

    /// The faults a node carries now: its conditions' and its device
    /// plugin's.
    pub fn node_faults(&self, node: &str) -> impl Iterator<Item = &Fault> {
        self.nodes
            .get(node)
            .map(|n| n.faults.as_slice())
            .unwrap_or(&[])
            .iter()
            .chain(
                self.device_faults
                    .get(node)
                    .map(|(f, _)| f.as_slice())
                    .unwrap_or(&[])
                    .iter(),
            )
            .filter(|f| f.trusted)
    }

    /// File a fault Event under its node's trusted Events, if it is a
    /// trusted node-scope fault; unfile what it was filed as before.
    pub fn index_node_event(&mut self, key: &str, before: Option<&Fault>, now: Option<&Fault>) {
        let node_of = |f: Option<&Fault>| {
            f.filter(|f| f.trusted && f.pod.is_none())
                .and_then(|f| f.node.clone())
        };
        if let Some(n) = node_of(before)
            && let Some(keys) = self.node_events.get_mut(&n)
        {
            keys.remove(key);
            if keys.is_empty() {
                self.node_events.remove(&n);
            }
        }
        if let Some(n) = node_of(now) {
            self.node_events
                .entry(n)
                .or_default()
                .insert(key.to_string());
        }
    }

    /// Count a tenant's fault Event in (`now`) or out (`before`).
    pub fn count_tenant_event(&mut self, before: Option<&Fault>, now: Option<&Fault>) {
        if let Some(ns) = before.and_then(|f| f.domain().tenant().map(str::to_string))
            && let Some(n) = self.tenant_events.get_mut(&ns)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.tenant_events.remove(&ns);
            }
        }
        if let Some(ns) = now.and_then(|f| f.domain().tenant().map(str::to_string)) {
            *self.tenant_events.entry(ns).or_default() += 1;
        }
    }

    /// Fault Events tracked for one tenant namespace.
    pub fn tenant_events(&self, ns: &str) -> usize {
        self.tenant_events.get(ns).copied().unwrap_or(0)
    }

    /// The keys of a node's trusted node-scope fault Events.
    pub fn trusted_node_events(&self, node: &str) -> impl Iterator<Item = &str> {
        self.node_events
            .get(node)
            .into_iter()
            .flatten()
            .map(String::as_str)
    }

    /// Whether a node carries any fault (conditions or device plugin).
    pub fn node_has_faults(&self, node: &str) -> bool {
        self.node_faults(node).next().is_some()
    }
}

#[cfg(test)]
mod tests;
