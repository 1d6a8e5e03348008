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

/// Strings that thousands of pods share (namespaces, node names, label
/// keys and values, container names) and the pods' job references, each
/// held once. At 20,000 pods the copies were most of the controller's
/// memory. Owned by the pods' watch task, which compacts the pods.
#[derive(Debug, Default)]
pub struct Interner {
    strings: HashSet<Arc<str>>,
    jobs: HashSet<Arc<JobRef>>,
    since_sweep: usize,
}

impl Interner {
    /// Pool entries added between sweeps; a sweep costs one pass over the
    /// pool, so this keeps it rare and the pool at most twice its live size.
    const SWEEP_EVERY: usize = 50_000;

    /// The shared copy of `s`.
    pub fn str(&mut self, s: &str) -> Arc<str> {
        if let Some(a) = self.strings.get(s) {
            return a.clone();
        }
        let a: Arc<str> = Arc::from(s);
        self.strings.insert(a.clone());
        self.added();
        a
    }

    /// The shared copy of a job reference.
    pub fn job(&mut self, j: JobRef) -> Arc<JobRef> {
        if let Some(a) = self.jobs.get(&j) {
            return a.clone();
        }
        let a = Arc::new(j);
        self.jobs.insert(a.clone());
        self.added();
        a
    }

    fn added(&mut self) {
        self.since_sweep += 1;
        if self.since_sweep >= Self::SWEEP_EVERY.max(self.strings.len() + self.jobs.len()) {
            self.sweep();
        }
    }

    /// Forget what only the pool still holds (jobs and nodes that are gone).
    pub fn sweep(&mut self) {
        self.strings.retain(|a| Arc::strong_count(a) > 1);
        self.jobs.retain(|a| Arc::strong_count(a) > 1);
        self.since_sweep = 0;
    }

    /// Entries in the pool (strings and job references).
    pub fn len(&self) -> usize {
        self.strings.len() + self.jobs.len()
    }

    /// Whether the pool is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A pod's labels, sorted by key, with shared strings: a few hundred bytes
/// where a `BTreeMap<String, String>` took a kilobyte.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Labels(Box<[(Arc<str>, Arc<str>)]>);

impl Labels {
    /// Labels from an object's map, through the interner.
    pub fn new(map: Option<&BTreeMap<String, String>>, pool: &mut Interner) -> Labels {
        Labels(
            map.into_iter()
                .flatten()
                .map(|(k, v)| (pool.str(k), pool.str(v)))
                .collect(),
        )
    }

    /// The value of a label.
    pub fn get(&self, key: &str) -> Option<&Arc<str>> {
        self.0
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &self.0[i].1)
    }

    /// As the map the policy engine and CEL read (made per decision, not
    /// kept).
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.0
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
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
    pub fn from_pod(p: &Pod, progress_keys: &BTreeSet<String>, pool: &mut Interner) -> PodInfo {
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
        let labels = Labels::new(m.labels.as_ref(), pool);
        PodInfo {
            uid: m.uid.as_deref().unwrap_or_default().into(),
            namespace: pool.str(m.namespace.as_deref().unwrap_or_default()),
            name: Arc::from(m.name.as_deref().unwrap_or_default()),
            node: spec
                .and_then(|s| s.node_name.as_deref())
                .map(|n| pool.str(n)),
            replica_type: labels.get("training.kubeflow.org/replica-type").cloned(),
            job: pool.job(crate::workload::job_of_pod(m)),
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

/// A pod's (namespace, name), sharing the cache's strings.
pub type PodKey = (Arc<str>, Arc<str>);

/// All caches with their indices.
#[derive(Debug, Default)]
pub struct Cache {
    /// Pods by namespace, then name (looked up by `&str`, no key copies).
    pub pods: HashMap<Arc<str>, HashMap<Arc<str>, PodInfo>>,
    /// Pod names of each job, in order (the first one's labels stand for a
    /// job without an object).
    pub pods_by_job: HashMap<JobKey, BTreeSet<Arc<str>>>,
    /// (namespace, name) of the pods on each node.
    pub pods_by_node: HashMap<Arc<str>, BTreeSet<PodKey>>,
    pub nodes: HashMap<String, NodeInfo>,
    pub jobs: HashMap<JobKey, JobInfo>,
    /// Restarts made by this process not yet seen back in annotations.
    pub pending: HashMap<JobKey, Vec<RestartRecord>>,
}

impl Cache {
    /// A pod by namespace and name.
    pub fn pod(&self, ns: &str, name: &str) -> Option<&PodInfo> {
        self.pods.get(ns)?.get(name)
    }

    /// Every cached pod.
    pub fn all_pods(&self) -> impl Iterator<Item = &PodInfo> {
        self.pods.values().flat_map(|m| m.values())
    }

    /// Number of cached pods.
    pub fn pod_count(&self) -> usize {
        self.pods.values().map(HashMap::len).sum()
    }

    /// Insert or replace a pod, keeping indices right.
    pub fn upsert_pod(&mut self, p: PodInfo) {
        self.remove_pod(&p.namespace, &p.name);
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
        self.pods
            .entry(p.namespace.clone())
            .or_default()
            .insert(p.name.clone(), p);
    }

    /// Remove a pod and its index entries.
    pub fn remove_pod(&mut self, ns: &str, name: &str) {
        let Some(in_ns) = self.pods.get_mut(ns) else {
            return;
        };
        let Some(old) = in_ns.remove(name) else {
            return;
        };
        if in_ns.is_empty() {
            self.pods.remove(ns);
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
    }

    /// Pods of a job.
    pub fn job_pods(&self, j: &JobKey) -> Vec<&PodInfo> {
        self.pods_by_job
            .get(j)
            .map(|names| names.iter().filter_map(|n| self.pod(&j.0, n)).collect())
            .unwrap_or_default()
    }

    /// Distinct jobs with a live pod on a node.
    pub fn jobs_on_node(&self, node: &str) -> Vec<JobRef> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for (ns, name) in self.pods_by_node.get(node).into_iter().flatten() {
            if let Some(p) = self.pod(ns, name)
                && !p.deleting
                && seen.insert(job_key(&p.job))
            {
                out.push((*p.job).clone());
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(name: &str, node: &str, job: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some(format!("uid-{name}")),
                labels: Some(BTreeMap::from([
                    ("training.kubeflow.org/job-name".into(), job.into()),
                    ("training.kubeflow.org/replica-type".into(), "worker".into()),
                    (
                        "training.kubeflow.org/operator-name".into(),
                        "pytorchjob-controller".into(),
                    ),
                ])),
                ..Default::default()
            },
            spec: Some(k8s_openapi::api::core::v1::PodSpec {
                node_name: Some(node.into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn pods_share_their_common_strings_and_the_pool_forgets_what_is_gone() {
        let mut pool = Interner::default();
        let keys = BTreeSet::new();
        let a = PodInfo::from_pod(&pod("a", "n1", "j"), &keys, &mut pool);
        let b = PodInfo::from_pod(&pod("b", "n1", "j"), &keys, &mut pool);
        assert!(Arc::ptr_eq(&a.namespace, &b.namespace));
        assert!(Arc::ptr_eq(
            a.node.as_ref().unwrap(),
            b.node.as_ref().unwrap()
        ));
        assert_eq!(a.labels, b.labels);
        assert_eq!(
            a.labels
                .get("training.kubeflow.org/replica-type")
                .map(|v| &**v),
            Some("worker")
        );
        assert_eq!(a.replica_type.as_deref(), Some("worker"));
        assert!(a.labels.get("missing").is_none());
        assert_eq!(a.labels.to_map().len(), 3);
        assert!(
            Arc::ptr_eq(&a.job, &b.job),
            "one job reference for the job's pods"
        );
        let before = pool.len();
        drop((a, b));
        pool.sweep();
        assert!(pool.len() < before);
        assert!(pool.is_empty(), "nothing holds the strings any more");
    }

    #[test]
    fn the_indices_follow_upserts_moves_and_removals() {
        let mut pool = Interner::default();
        let keys = BTreeSet::new();
        let mut c = Cache::default();
        c.upsert_pod(PodInfo::from_pod(&pod("a", "n1", "j"), &keys, &mut pool));
        c.upsert_pod(PodInfo::from_pod(&pod("b", "n1", "j"), &keys, &mut pool));
        assert_eq!(c.pod_count(), 2);
        assert_eq!(c.jobs_on_node("n1").len(), 1);
        let jk = job_key(&c.pod("ns", "a").unwrap().job);
        assert_eq!(c.job_pods(&jk).len(), 2);
        // a moves to another node (a new pod of the same name)
        c.upsert_pod(PodInfo::from_pod(&pod("a", "n2", "j"), &keys, &mut pool));
        assert_eq!(c.pods_by_node.get("n1").map(BTreeSet::len), Some(1));
        assert_eq!(c.pods_by_node.get("n2").map(BTreeSet::len), Some(1));
        c.remove_pod("ns", "a");
        c.remove_pod("ns", "b");
        assert_eq!(c.pod_count(), 0);
        assert!(c.pods.is_empty() && c.pods_by_job.is_empty() && c.pods_by_node.is_empty());
        assert!(c.pod("ns", "a").is_none());
    }
}
