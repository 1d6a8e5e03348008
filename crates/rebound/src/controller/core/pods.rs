//! What the controller keeps of a pod: compact copies with shared strings,
//! so that 20,000 pods fit in a few MiB, plus what the recovery core reads
//! of each (its job, its node, whether it runs, its in-place agent).

use crate::inplace;
use crate::workload::JobRef;
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Pod;
use std::collections::{BTreeMap, BTreeSet, HashSet};
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
    /// When the pod's last in-place restart (`AllContainersRestarting`
    /// back to `False`) ended, in seconds; `Some(i64::MAX)` while one runs.
    pub restarted_in_place: Option<i64>,
}

/// The in-place agent container of a pod (docs/in-place.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AgentStatus {
    /// The exit code its `RestartAllContainers` rule matches.
    pub exit_code: i32,
    /// What its container status says.
    pub phase: AgentPhase,
    /// Who put the agent into the pod.
    pub wiring: Wiring,
}

/// How a pod got its restart agent: what decisions and Events say about a
/// job's wiring (docs/in-place.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Wiring {
    /// From the job's pod template (`rebound inject`, or written by hand).
    Template,
    /// Added when the pod was created, by rebound's MutatingAdmissionPolicy
    /// (its agent carries [`inplace::admission::WIRED_BY_ENV`]).
    Admission,
}

impl Wiring {
    /// How the agent of `spec` came there (call on a wired pod).
    pub fn of(spec: &k8s_openapi::api::core::v1::PodSpec) -> Wiring {
        let admission = spec
            .init_containers
            .iter()
            .flatten()
            .filter(|c| c.name == inplace::AGENT_CONTAINER)
            .flat_map(|c| c.env.iter().flatten())
            .any(|e| {
                e.name == inplace::admission::WIRED_BY_ENV
                    && e.value.as_deref() == Some(inplace::admission::WIRED_BY_ADMISSION)
            });
        if admission {
            Wiring::Admission
        } else {
            Wiring::Template
        }
    }
}

/// Where a pod's agent stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentPhase {
    /// Running, startup probe passed: the barrier is open, workers run.
    Past,
    /// Running, startup probe not passed: waiting at the barrier.
    Waiting,
    /// Not running (terminated, waiting to start, no status yet).
    Down,
}

impl AgentPhase {
    fn of(status: Option<&k8s_openapi::api::core::v1::ContainerStatus>) -> AgentPhase {
        match status {
            Some(s) if s.state.as_ref().is_some_and(|st| st.running.is_some()) => {
                if s.started == Some(true) {
                    AgentPhase::Past
                } else {
                    AgentPhase::Waiting
                }
            }
            _ => AgentPhase::Down,
        }
    }
}

/// The in-place wiring of a pod spec: the agent init container with
/// `restartPolicy: Always` and a `RestartAllContainers` rule on an exit
/// code (`In` with one value, as `rebound inject` writes it). The code is
/// read from the rule, never assumed.
pub fn agent_exit_code(spec: &k8s_openapi::api::core::v1::PodSpec) -> Option<i32> {
    let c = spec
        .init_containers
        .iter()
        .flatten()
        .find(|c| c.name == inplace::AGENT_CONTAINER)?;
    if c.restart_policy.as_deref() != Some("Always") {
        return None;
    }
    c.restart_policy_rules.iter().flatten().find_map(|r| {
        let codes = r.exit_codes.as_ref()?;
        (r.action == "RestartAllContainers" && codes.operator == "In")
            .then(|| codes.values.iter().flatten().next().copied())
            .flatten()
    })
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
                .filter(|(k, _)| progress_keys.contains(*k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            labels,
        }
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
    fn a_pod_says_whether_its_agent_came_from_its_template_or_from_admission() {
        use crate::inplace::inject::{InjectOptions, inject_document};
        let mut job = serde_json::json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j"},
            "spec": {"template": {"spec": {"containers": [{"name": "w", "image": "i"}]}}}});
        inject_document(&mut job, &InjectOptions::default(), "job").expect("inject");
        let mut spec: k8s_openapi::api::core::v1::PodSpec =
            serde_json::from_value(job["spec"]["template"]["spec"].clone()).expect("spec");
        assert_eq!(agent_exit_code(&spec), Some(87));
        assert_eq!(Wiring::of(&spec), Wiring::Template);
        let agent = spec
            .init_containers
            .iter_mut()
            .flatten()
            .find(|c| c.name == inplace::AGENT_CONTAINER)
            .expect("agent");
        agent
            .env
            .get_or_insert_with(Vec::new)
            .push(k8s_openapi::api::core::v1::EnvVar {
                name: inplace::admission::WIRED_BY_ENV.into(),
                value: Some(inplace::admission::WIRED_BY_ADMISSION.into()),
                ..Default::default()
            });
        assert_eq!(Wiring::of(&spec), Wiring::Admission);
    }
}
