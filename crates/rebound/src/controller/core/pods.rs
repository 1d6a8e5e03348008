//! What the controller keeps of a pod: compact copies with shared strings,
//! so that 20,000 pods fit in a few MiB, plus what the recovery core reads
//! of each (its job, its node, whether it runs, its in-place agent).

use crate::inplace;
use crate::workload::JobRef;
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Pod;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};

mod agent;
mod interner;

pub use agent::{AgentPhase, AgentStatus, Wiring, agent_exit_code};
pub use interner::{Interner, Labels};

/// The annotation keys that policies read as a progress signal
/// (`spec.hang.annotation`, plus the default `rebound.dev/progress`), each
/// with the namespaces whose pods it is read on: a tenant policy's key on
/// that tenant's pods only (its policy covers no other namespace's jobs),
/// a root-namespace policy's and the default on every pod. Shared between
/// the reactor, which knows the policies, and the pods' watch task, which
/// compacts pods: a pod keeps only the annotations read on it, so the
/// cache stays small at 20,000 pods and no tenant's policy makes every pod
/// of the cluster keep an annotation of its choosing.
#[derive(Clone, Debug)]
pub struct ProgressKeys(Arc<RwLock<Arc<KeySet>>>);

/// Progress annotation keys and where each is read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeySet {
    /// Key → the namespaces it is read in; `None`: every namespace.
    keys: BTreeMap<String, Option<BTreeSet<String>>>,
}

impl KeySet {
    /// Only the default key, on every pod.
    pub fn default_only() -> KeySet {
        let mut k = KeySet::default();
        k.read_everywhere(crate::policy::compile::DEFAULT_PROGRESS_ANNOTATION);
        k
    }

    /// `key` is read on every pod.
    pub fn read_everywhere(&mut self, key: &str) {
        self.keys.insert(key.to_owned(), None);
    }

    /// `key` is read on the pods of `namespace`.
    pub fn read_in(&mut self, key: &str, namespace: &str) {
        let entry = self
            .keys
            .entry(key.to_owned())
            .or_insert_with(|| Some(BTreeSet::new()));
        // `None`: read everywhere already.
        if let Some(nss) = entry {
            nss.insert(namespace.to_owned());
        }
    }

    /// Whether a pod of `namespace` keeps annotation `key`.
    pub fn reads(&self, key: &str, namespace: &str) -> bool {
        match self.keys.get(key) {
            Some(None) => true,
            Some(Some(nss)) => nss.contains(namespace),
            None => false,
        }
    }
}

impl Default for ProgressKeys {
    fn default() -> Self {
        ProgressKeys(Arc::new(RwLock::new(Arc::new(KeySet::default_only()))))
    }
}

impl ProgressKeys {
    /// The current keys (a cheap snapshot).
    pub fn get(&self) -> Arc<KeySet> {
        match self.0.read() {
            Ok(k) => k.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Replace the keys; the default key is always read everywhere.
    pub fn set(&self, mut keys: KeySet) {
        keys.read_everywhere(crate::policy::compile::DEFAULT_PROGRESS_ANNOTATION);
        let keys = Arc::new(keys);
        match self.0.write() {
            Ok(mut k) => *k = keys,
            Err(poisoned) => *poisoned.into_inner() = keys,
        }
    }
}

/// What the controller keeps of a pod.
#[derive(Clone, Debug)]
pub struct PodInfo {
    pub uid: Box<str>,
    pub namespace: Arc<str>,
    pub name: Arc<str>,
    pub node: Option<Arc<str>>,
    pub labels: Labels,
    pub job: Arc<JobRef>,
    /// The pod's own JobSet when `job` is the TrainJob it runs for (the
    /// store files such pods under the TrainJob).
    pub jobset: Option<Arc<JobRef>>,
    pub running: bool,
    pub deleting: bool,
    pub containers: Box<[Arc<str>]>,
    /// Containers restarted in place (their previous log is worth saving).
    pub restarted: Box<[Arc<str>]>,
    /// Earliest termination among its containers (root-cause candidate).
    pub first_failure: Option<DateTime<Utc>>,
    /// Restart policy Never on the pod (bare pods, ExitCode replicas).
    pub restart_never: bool,
    pub replica_type: Option<Arc<str>>,
    pub has_controller: bool,
    /// The pod's progress annotations (key, value): only those whose key a
    /// policy reads (`ProgressKeys`), usually none or one.
    pub progress: Vec<(String, String)>,
    /// `creationTimestamp` in seconds: a fault that happened before a pod
    /// existed does not concern it (a restart recreated it since).
    pub created: i64,
    /// `deletionTimestamp` in seconds, while the pod is being deleted.
    pub deleting_since: Option<i64>,
    /// The pod's `Ready` condition is `True`.
    pub ready: bool,
    /// Restarts of all its containers (init containers included), as the
    /// Job controller adds them up against `backoffLimit`.
    pub restarts: u32,
    /// Its containers, init containers included: what one in-place
    /// restart adds to `restarts`.
    pub container_count: u16,
    /// The in-place restart agent of the pod, if it is wired for it.
    pub agent: Option<AgentStatus>,
    /// The ServiceAccount a wired pod runs as (its agent reads the job as
    /// it): `None` for pods not wired.
    pub agent_account: Option<Arc<str>>,
    /// When the pod's last in-place restart (`AllContainersRestarting`
    /// back to `False`) ended, in seconds; `Some(i64::MAX)` while one runs.
    pub restarted_in_place: Option<i64>,
}

fn secs(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> i64 {
    t.0.as_second()
}

impl PodInfo {
    /// The value of the progress annotation `key` on this pod.
    pub fn progress_value(&self, key: &str) -> Option<&str> {
        self.progress
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Compact a pod from a watch event, keeping the annotations named in
    /// `progress_keys` (the hang detection's progress signal), with the
    /// strings it shares with other pods taken from `pool`.
    pub fn from_pod(p: &Pod, progress_keys: &KeySet, pool: &mut Interner) -> PodInfo {
        let m = &p.metadata;
        let spec = p.spec.as_ref();
        let status = p.status.as_ref();
        let mut first_failure: Option<DateTime<Utc>> = None;
        for cs in status
            .and_then(|s| s.container_statuses.as_ref())
            .into_iter()
            .flatten()
        {
            for st in [cs.state.as_ref(), cs.last_state.as_ref()]
                .into_iter()
                .flatten()
            {
                if let Some(t) = st.terminated.as_ref()
                    && t.exit_code != 0
                    && let Some(f) = t.finished_at.as_ref()
                {
                    let ts = crate::k8s::time::to_chrono(&f.0);
                    first_failure = Some(first_failure.map_or(ts, |x| x.min(ts)));
                }
            }
        }
        let labels = Labels::new(m.labels.as_ref(), pool);
        let conditions = status.and_then(|s| s.conditions.as_ref());
        let condition = |t: &str| conditions.into_iter().flatten().find(|c| c.type_ == t);
        let agent =
            spec.and_then(|sp| agent_exit_code(sp).map(|exit_code| (exit_code, Wiring::of(sp))));
        let agent = agent.map(|(exit_code, wiring)| AgentStatus {
            exit_code,
            wiring,
            phase: AgentPhase::of(
                status
                    .and_then(|s| s.init_container_statuses.as_ref())
                    .into_iter()
                    .flatten()
                    .find(|c| c.name == inplace::AGENT_CONTAINER),
            ),
        });
        let by_condition = condition("AllContainersRestarting").and_then(|c| {
            if c.status == "True" {
                Some(i64::MAX)
            } else {
                c.last_transition_time.as_ref().map(secs)
            }
        });
        // The agent's own record of an in-place restart, for a kubelet
        // that never wrote the condition `True` (a restart between two
        // status syncs): its last run ended with its rule's code, so every
        // termination before its current run began was that restart's.
        let by_agent = agent.and_then(|a| {
            let st = status
                .and_then(|s| s.init_container_statuses.as_ref())
                .into_iter()
                .flatten()
                .find(|c| c.name == inplace::AGENT_CONTAINER)?;
            let exited = st
                .last_state
                .as_ref()
                .and_then(|l| l.terminated.as_ref())
                .is_some_and(|t| t.exit_code == a.exit_code);
            let now = st.state.as_ref();
            if now
                .and_then(|n| n.terminated.as_ref())
                .is_some_and(|t| t.exit_code == a.exit_code)
            {
                return Some(i64::MAX);
            }
            if !exited {
                return None;
            }
            Some(
                now.and_then(|n| n.running.as_ref())
                    .and_then(|r| r.started_at.as_ref())
                    .map(secs)
                    .unwrap_or(i64::MAX),
            )
        });
        let restarted_in_place = by_condition.max(by_agent);
        PodInfo {
            created: m.creation_timestamp.as_ref().map(secs).unwrap_or(0),
            deleting_since: m.deletion_timestamp.as_ref().map(secs),
            ready: condition("Ready").is_some_and(|c| c.status == "True"),
            restarts: status
                .into_iter()
                .flat_map(|s| {
                    s.container_statuses
                        .iter()
                        .flatten()
                        .chain(s.init_container_statuses.iter().flatten())
                })
                .map(|c| u32::try_from(c.restart_count).unwrap_or(0))
                .fold(0u32, u32::saturating_add),
            container_count: spec
                .map(|s| s.containers.len() + s.init_containers.as_ref().map_or(0, Vec::len))
                .and_then(|n| u16::try_from(n).ok())
                .unwrap_or(u16::MAX),
            agent_account: agent.map(|_| {
                pool.str(
                    spec.and_then(|s| s.service_account_name.as_deref())
                        .filter(|s| !s.is_empty())
                        .unwrap_or("default"),
                )
            }),
            agent,
            restarted_in_place,
            uid: m.uid.as_deref().unwrap_or_default().into(),
            namespace: pool.str(m.namespace.as_deref().unwrap_or_default()),
            name: Arc::from(m.name.as_deref().unwrap_or_default()),
            node: spec
                .and_then(|s| s.node_name.as_deref())
                .map(|n| pool.str(n)),
            replica_type: labels.get("training.kubeflow.org/replica-type").cloned(),
            job: pool.job(crate::workload::job_of_pod(m)),
            jobset: None,
            running: status.and_then(|s| s.phase.as_deref()) == Some("Running"),
            deleting: m.deletion_timestamp.is_some(),
            containers: spec
                .map(|s| s.containers.iter().map(|c| pool.str(&c.name)).collect())
                .unwrap_or_default(),
            restarted: status
                .and_then(|s| s.container_statuses.as_ref())
                .into_iter()
                .flatten()
                .filter(|c| c.restart_count > 0)
                .map(|c| pool.str(&c.name))
                .collect(),
            first_failure,
            restart_never: spec.and_then(|s| s.restart_policy.as_deref()) == Some("Never"),
            has_controller: m
                .owner_references
                .as_ref()
                .is_some_and(|o| o.iter().any(|r| r.controller == Some(true))),
            progress: m
                .annotations
                .iter()
                .flatten()
                .filter(|(k, _)| progress_keys.reads(k, m.namespace.as_deref().unwrap_or_default()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            labels,
        }
    }
}

#[cfg(test)]
mod tests;
