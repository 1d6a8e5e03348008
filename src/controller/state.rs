//! The controller's caches: compact copies of what the watches deliver, so
//! that the hot path needs no GET (the job's pods, the node, the history
//! are all here) and memory stays small at 20,000 pods.

use crate::fault::Level;
use crate::policy::RestartRecord;
use crate::recover::NodeSnapshot;
use crate::workload::JobRef;
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Node, Pod};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, RwLock};

/// The annotation keys that policies read as a progress signal
/// (`spec.hang.annotation`, plus the default `rebound.dev/progress`).
/// Shared between the reactor, which knows the policies, and the pods'
/// watch task, which compacts pods: a pod keeps only these annotations, so
/// the cache stays small at 20,000 pods.
#[derive(Clone, Debug)]
pub struct ProgressKeys(Arc<RwLock<Arc<BTreeSet<String>>>>);

impl Default for ProgressKeys {
    fn default() -> Self {
        let keys =
            BTreeSet::from([crate::policy::compile::DEFAULT_PROGRESS_ANNOTATION.to_string()]);
        ProgressKeys(Arc::new(RwLock::new(Arc::new(keys))))
    }
}

impl ProgressKeys {
    /// The current keys (a cheap snapshot).
    pub fn get(&self) -> Arc<BTreeSet<String>> {
        match self.0.read() {
            Ok(k) => k.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Replace the keys; the default key is always kept.
    pub fn set(&self, mut keys: BTreeSet<String>) {
        keys.insert(crate::policy::compile::DEFAULT_PROGRESS_ANNOTATION.to_string());
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
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub node: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub job: JobRef,
    pub running: bool,
    pub deleting: bool,
    pub containers: Vec<String>,
    /// Containers restarted in place (their previous log is worth saving).
    pub restarted: Vec<String>,
    /// Earliest termination among its containers (root-cause candidate).
    pub first_failure: Option<DateTime<Utc>>,
    /// Restart policy Never on the pod (bare pods, ExitCode replicas).
    pub restart_never: bool,
    pub replica_type: Option<String>,
    pub has_controller: bool,
    /// The pod's progress annotations (key, value): only those whose key a
    /// policy reads (`ProgressKeys`), usually none or one.
    pub progress: Vec<(String, String)>,
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
    /// `progress_keys` (the hang detection's progress signal).
    pub fn from_pod(p: &Pod, progress_keys: &BTreeSet<String>) -> PodInfo {
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
                    let ts = crate::controller::time::to_chrono(&f.0);
                    first_failure = Some(first_failure.map_or(ts, |x| x.min(ts)));
                }
            }
        }
        let labels = m.labels.clone().unwrap_or_default();
        PodInfo {
            uid: m.uid.clone().unwrap_or_default(),
            namespace: m.namespace.clone().unwrap_or_default(),
            name: m.name.clone().unwrap_or_default(),
            node: spec.and_then(|s| s.node_name.clone()),
            replica_type: labels.get("training.kubeflow.org/replica-type").cloned(),
            job: crate::workload::job_of_pod(m),
            running: status.and_then(|s| s.phase.as_deref()) == Some("Running"),
            deleting: m.deletion_timestamp.is_some(),
            containers: spec
                .map(|s| s.containers.iter().map(|c| c.name.clone()).collect())
                .unwrap_or_default(),
            restarted: status
                .and_then(|s| s.container_statuses.as_ref())
                .into_iter()
                .flatten()
                .filter(|c| c.restart_count > 0)
                .map(|c| c.name.clone())
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
                .filter(|(k, _)| progress_keys.contains(*k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            labels,
        }
    }
}

/// What the controller keeps of a node.
#[derive(Clone, Debug, Default)]
pub struct NodeInfo {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// What the cordon patch is computed from.
    pub snap: NodeSnapshot,
    /// The level at which rebound cordoned it (from its annotation).
    pub cordoned_by: Option<Level>,
}

impl NodeInfo {
    /// Compact a node from a watch event.
    pub fn from_node(n: &Node) -> NodeInfo {
        let snap = NodeSnapshot::from_node(n);
        NodeInfo {
            name: n.metadata.name.clone().unwrap_or_default(),
            labels: n.metadata.labels.clone().unwrap_or_default(),
            cordoned_by: crate::recover::cordoned_level(&snap.annotations),
            snap,
        }
    }
}

/// What the controller keeps of a job object.
#[derive(Clone, Debug, Default)]
pub struct JobInfo {
    pub resource_version: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub uid: Option<String>,
    /// Restart policy says never restart (per kind, see workload).
    pub never: bool,
    pub history: Vec<RestartRecord>,
}

/// Key of a job in the caches: (namespace, kind, name).
pub type JobKey = (String, String, String);

/// The key of a job reference.
pub fn job_key(j: &JobRef) -> JobKey {
    (
        j.namespace.clone(),
        j.kind.as_str().to_string(),
        j.name.clone(),
    )
}

/// All caches with their indices.
#[derive(Debug, Default)]
pub struct Cache {
    pub pods: HashMap<(String, String), PodInfo>,
    pub pods_by_job: HashMap<JobKey, HashSet<String>>,
    pub pods_by_node: HashMap<String, HashSet<(String, String)>>,
    pub nodes: HashMap<String, NodeInfo>,
    pub jobs: HashMap<JobKey, JobInfo>,
    /// Restarts made by this process not yet seen back in annotations.
    pub pending: HashMap<JobKey, Vec<RestartRecord>>,
}

impl Cache {
    /// Insert or replace a pod, keeping indices right.
    pub fn upsert_pod(&mut self, p: PodInfo) {
        let key = (p.namespace.clone(), p.name.clone());
        self.remove_pod(&key.0, &key.1);
        self.pods_by_job
            .entry(job_key(&p.job))
            .or_default()
            .insert(p.name.clone());
        if let Some(n) = &p.node {
            self.pods_by_node
                .entry(n.clone())
                .or_default()
                .insert(key.clone());
        }
        self.pods.insert(key, p);
    }

    /// Remove a pod and its index entries.
    pub fn remove_pod(&mut self, ns: &str, name: &str) {
        if let Some(old) = self.pods.remove(&(ns.to_string(), name.to_string())) {
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
                s.remove(&(ns.to_string(), name.to_string()));
                if s.is_empty() {
                    self.pods_by_node.remove(n);
                }
            }
        }
    }

    /// Pods of a job.
    pub fn job_pods(&self, j: &JobKey) -> Vec<&PodInfo> {
        self.pods_by_job
            .get(j)
            .map(|names| {
                names
                    .iter()
                    .filter_map(|n| self.pods.get(&(j.0.clone(), n.clone())))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Distinct jobs with a live pod on a node.
    pub fn jobs_on_node(&self, node: &str) -> Vec<JobRef> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for k in self.pods_by_node.get(node).into_iter().flatten() {
            if let Some(p) = self.pods.get(k)
                && !p.deleting
                && seen.insert(job_key(&p.job))
            {
                out.push(p.job.clone());
            }
        }
        out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        out
    }

    /// Restart history: annotations on the job merged with restarts this
    /// process made that the annotations do not show yet.
    pub fn history(&self, j: &JobKey) -> Vec<RestartRecord> {
        let mut h = self
            .jobs
            .get(j)
            .map(|i| i.history.clone())
            .unwrap_or_default();
        if let Some(p) = self.pending.get(j) {
            for r in p {
                if !h.iter().any(|x| x.at == r.at) {
                    h.push(r.clone());
                }
            }
        }
        h.sort_by_key(|r| r.at);
        h
    }

    /// Whether every known pod of the job runs (and there is at least one).
    pub fn job_running(&self, j: &JobKey) -> bool {
        let pods = self.job_pods(j);
        !pods.is_empty() && pods.iter().all(|p| p.running && !p.deleting)
    }
}
