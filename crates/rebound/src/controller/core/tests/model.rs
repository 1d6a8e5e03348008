//! A model cluster for the core: objects as the API server would store
//! them (JSON), answering effects with the server's preconditions, and a
//! watch queue per kind that the tests deliver, duplicate, drop or relist.

use super::super::effect::{DeleteAll, Effect, EffectKind, Outcome};
use super::super::input::{Change, Input, PodSeen};
use super::super::pods::{Interner, ProgressKeys};
use super::super::{Core, CoreConfig, Now};
use crate::api::WorkloadKind;
use crate::fault::wire::{self, WireFault};
use crate::policy::{Limit, NodeConfig};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DynamicObject, ObjectMeta};
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

mod apply;
mod events;
mod fixtures;
mod watch;

pub use events::FaultEvent;

use fixtures::classifications;
pub use fixtures::{core, default_policy_spec, jobset_resource, policy};

pub const NS: &str = "ml";
pub const ROOT: &str = "rebound-system";
pub const OPT_IN: &str = "kcover.io/cascading-recovery";
pub const JOBSET_NAME: &str = "jobset.sigs.k8s.io/jobset-name";
pub const JOBSET_UID: &str = "jobset.sigs.k8s.io/jobset-uid";
/// The policy's cooldown, in seconds.
pub const COOLDOWN: i64 = 60;
/// The breaker: 2 of 4 nodes in 5 minutes.
pub const MAX_SEPARATED: usize = 2;
pub const WINDOW: i64 = 300;

/// The watched kinds the model queues changes for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Pods,
    Nodes,
    Jobs,
}

pub const KINDS: [Kind; 3] = [Kind::Pods, Kind::Nodes, Kind::Jobs];

/// A queued watch change.
#[derive(Clone, Debug)]
pub enum Pending {
    Apply(Value),
    Delete(Value),
}

/// A destructive request the model carried out, for the invariants.
#[derive(Clone, Debug)]
pub enum Applied {
    /// Pods deleted by a job restart (job name, the uid it was decided
    /// for, the uids of the jobs the deleted pods belonged to).
    Restart {
        job: String,
        uid: Option<String>,
        owners: Vec<String>,
    },
    /// A restart record appended on a job incarnation.
    Record {
        uid: String,
        at: i64,
        pod_only: bool,
        /// The occurrence the restart was for.
        occurrence: Option<String>,
    },
    /// A restart record taken back (its restart was never made).
    Retract {
        uid: String,
        occurrence: Option<String>,
    },
    /// A node taken out of scheduling.
    Cordon { node: String, at: i64 },
}

/// The model cluster.
pub struct Model {
    pub t: i64,
    t0: DateTime<Utc>,
    rv: u64,
    uids: u64,
    pub pods: BTreeMap<String, Value>,
    pub nodes: BTreeMap<String, Value>,
    pub jobs: BTreeMap<String, Value>,
    /// Fault lines per node: (code, device, first seen ms, count).
    pub lines: BTreeMap<String, Vec<(String, String, i64, u32)>>,
    /// When each occurrence of a line truly happened (model seconds, the
    /// `k`-th at index `k - 1`), by (node, code, device, first seen ms):
    /// the ground truth a line's count only bounds.
    pub line_times: BTreeMap<(String, String, String, i64), Vec<i64>>,
    /// Answers of fresh reads ([`EffectKind::ReadRecords`]) not delivered
    /// yet: they come with the next delivery of the jobs' watch.
    pub answers: VecDeque<Input>,
    /// The agent writes its newest repeat's time (`last=`) on each line
    /// (an older reporter does not).
    pub write_last: bool,
    pub queues: BTreeMap<Kind, VecDeque<Pending>>,
    /// Last change delivered per kind (to deliver it again).
    pub last: BTreeMap<Kind, Pending>,
    /// Pods each job should have.
    pub size: usize,
    pub applied: Vec<Applied>,
    pool: Interner,
    keys: ProgressKeys,
    /// The root policy's spec (the default one unless a test sets it).
    pub policy: Value,
    /// Nodes whose kubelet is gone: deleted pods there stay Terminating.
    pub not_ready: std::collections::BTreeSet<String>,
    /// When each node's Ready condition last changed.
    pub ready_changed: BTreeMap<String, String>,
    /// The pods the agent reports holding a node's GPU (by node, device).
    pub holders: BTreeMap<(String, String), Vec<String>>,
    /// What a validation Job's read answers (`Running`, `Succeeded`,
    /// `Failed: …`; empty: the Job is gone).
    pub validation: String,
}

fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

impl Model {
    /// `nodes` nodes, `jobs` JobSets of `size` pods, all running.
    pub fn new(nodes: usize, jobs: usize, size: usize) -> Model {
        let mut m = Model {
            t: 0,
            t0: DateTime::from_timestamp(1_900_000_000, 0).unwrap_or_default(),
            rv: 1,
            uids: 0,
            pods: BTreeMap::new(),
            nodes: BTreeMap::new(),
            jobs: BTreeMap::new(),
            lines: BTreeMap::new(),
            line_times: BTreeMap::new(),
            write_last: true,
            answers: VecDeque::new(),
            queues: BTreeMap::new(),
            last: BTreeMap::new(),
            size,
            applied: Vec::new(),
            pool: Interner::default(),
            keys: ProgressKeys::default(),
            policy: default_policy_spec(),
            not_ready: Default::default(),
            ready_changed: BTreeMap::new(),
            validation: "Running".into(),
            holders: BTreeMap::new(),
        };
        for i in 0..nodes {
            let name = format!("n{i}");
            let uid = m.uid();
            m.nodes.insert(
                name.clone(),
                json!({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "uid": uid, "annotations": {}},
                    "spec": {}, "status": {}}),
            );
            m.write_node(&name);
        }
        for j in 0..jobs {
            m.create_job(&format!("j{j}"));
        }
        m.operator();
        for q in m.queues.values_mut() {
            q.clear();
        }
        m
    }

    fn uid(&mut self) -> String {
        self.uids += 1;
        format!("00000000-0000-0000-0000-{:012}", self.uids)
    }

    /// A new resourceVersion (the wiring module's changes).
    pub fn bump_rv(&mut self) -> String {
        self.bump()
    }

    /// Queue a watch change (the wiring module's changes).
    pub fn queue_change(&mut self, k: Kind, p: Pending) {
        self.queue(k, p)
    }

    fn bump(&mut self) -> String {
        self.rv += 1;
        self.rv.to_string()
    }

    /// The model's wall time now.
    pub fn wall(&self) -> DateTime<Utc> {
        self.t0 + chrono::Duration::seconds(self.t)
    }

    /// The step time for the core.
    pub fn now(&self) -> Now {
        Now {
            wall: self.wall(),
            mono: Instant::now(),
        }
    }

    fn queue(&mut self, k: Kind, p: Pending) {
        self.queues.entry(k).or_default().push_back(p);
    }

    /// Create (or recreate, under a new uid) a JobSet and queue it.
    pub fn create_job(&mut self, name: &str) {
        let uid = self.uid();
        let rv = self.bump();
        let obj = json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": NS, "uid": uid, "resourceVersion": rv,
                "labels": {OPT_IN: "true"}, "annotations": {}},
            "spec": {"failurePolicy": {"maxRestarts": 1000},
                "replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {"backoffLimit": 0}}}]},
            "status": {"restarts": 0}});
        self.jobs.insert(name.to_string(), obj.clone());
        self.queue(Kind::Jobs, Pending::Apply(obj));
    }

    /// Delete a JobSet and its pods (garbage collection), then create a
    /// new one of the same name.
    pub fn recreate_job(&mut self, name: &str) {
        if let Some(old) = self.jobs.remove(name) {
            self.queue(Kind::Jobs, Pending::Delete(old));
        }
        let doomed: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, p)| p["metadata"]["labels"][JOBSET_NAME] == name)
            .map(|(n, _)| n.clone())
            .collect();
        for p in doomed {
            self.delete_pod(&p);
        }
        self.create_job(name);
    }

    fn delete_pod(&mut self, name: &str) {
        self.delete_pod_with(name, None);
    }

    /// Delete a pod; on a NotReady node (no kubelet to confirm) it stays
    /// Terminating unless the grace period is 0.
    fn delete_pod_with(&mut self, name: &str, grace: Option<i64>) {
        let on_dead = self.pods.get(name).is_some_and(|p| {
            p["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| self.not_ready.contains(n))
        });
        if on_dead && grace != Some(0) {
            let now = time(self.wall());
            let rv = self.bump();
            if let Some(p) = self.pods.get_mut(name) {
                if p["metadata"]["deletionTimestamp"].is_null() {
                    p["metadata"]["deletionTimestamp"] = json!(now);
                }
                p["metadata"]["resourceVersion"] = json!(rv);
                let p = p.clone();
                self.queue(Kind::Pods, Pending::Apply(p));
            }
            return;
        }
        if let Some(p) = self.pods.remove(name) {
            self.queue(Kind::Pods, Pending::Delete(p));
        }
    }

    /// A node's kubelet stops: the node goes NotReady.
    /// (Its Ready condition keeps the model's old transition time, long
    /// ago, unless [`Model::revive_node`] or [`Model::node_goes_down`]
    /// moved it.)
    pub fn kill_node(&mut self, name: &str) {
        self.not_ready.insert(name.to_string());
        self.write_node(name);
    }

    /// A node's kubelet stops now: NotReady since now.
    pub fn node_goes_down(&mut self, name: &str) {
        if self.not_ready.insert(name.to_string()) {
            self.ready_changed
                .insert(name.to_string(), time(self.wall()));
        }
        self.write_node(name);
    }

    /// A node's kubelet is back: the node is Ready again.
    pub fn revive_node(&mut self, name: &str) {
        if self.not_ready.remove(name) {
            self.ready_changed
                .insert(name.to_string(), time(self.wall()));
        }
        self.write_node(name);
    }

    /// The job operator: every job gets back to `size` running pods, on
    /// the nodes in turn (cordoned nodes skipped while others are free).
    pub fn operator(&mut self) {
        let jobs: Vec<(String, String)> = self
            .jobs
            .iter()
            .map(|(n, j)| {
                (
                    n.clone(),
                    j["metadata"]["uid"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        for (name, juid) in jobs {
            let have = self
                .pods
                .values()
                .filter(|p| p["metadata"]["labels"][JOBSET_UID] == juid.as_str())
                .count();
            for _ in have..self.size {
                let pname = format!("{name}-{}", self.uids + 1);
                let uid = self.uid();
                let free: Vec<String> = self
                    .nodes
                    .iter()
                    .filter(|(_, n)| n["spec"]["unschedulable"] != json!(true))
                    .map(|(k, _)| k.clone())
                    .collect();
                let all: Vec<String> = self.nodes.keys().cloned().collect();
                let pool = if free.is_empty() { &all } else { &free };
                let node = pool[(self.uids as usize) % pool.len()].clone();
                let rv = self.bump();
                let now = time(self.wall());
                let pod = json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": pname, "namespace": NS, "uid": uid, "resourceVersion": rv,
                        "creationTimestamp": now,
                        "labels": {JOBSET_NAME: name, JOBSET_UID: juid, OPT_IN: "true",
                            "jobset.sigs.k8s.io/replicatedjob-name": "w",
                            "batch.kubernetes.io/job-name": format!("{name}-w-0"),
                            "batch.kubernetes.io/controller-uid": format!("{juid}-w")},
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": format!("{name}-w-0"),
                            "uid": format!("{juid}-w"), "controller": true}]},
                    "spec": {"nodeName": node, "restartPolicy": "Never",
                        "containers": [{"name": "trainer", "image": "train"}]},
                    "status": {"phase": "Running", "startTime": now,
                        "conditions": [{"type": "Ready", "status": "True"}],
                        "containerStatuses": [{"name": "trainer", "ready": true, "restartCount": 0,
                            "image": "train", "imageID": "", "started": true,
                            "state": {"running": {"startedAt": now}}}]}});
                self.pods.insert(pname, pod.clone());
                self.queue(Kind::Pods, Pending::Apply(pod));
            }
        }
    }

    /// The `i`-th running pod's container exits 1.
    pub fn fail_pod(&mut self, i: usize) {
        let running: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, p)| p["status"]["phase"] == "Running")
            .map(|(n, _)| n.clone())
            .collect();
        if running.is_empty() {
            return;
        }
        let name = running[i % running.len()].clone();
        let now = time(self.wall());
        let rv = self.bump();
        let Some(p) = self.pods.get_mut(&name) else {
            return;
        };
        p["metadata"]["resourceVersion"] = json!(rv);
        p["status"]["phase"] = json!("Failed");
        p["status"]["conditions"] = json!([{"type": "Ready", "status": "False"}]);
        p["status"]["containerStatuses"][0]["ready"] = json!(false);
        p["status"]["containerStatuses"][0]["state"] = json!({"terminated": {
            "exitCode": 1, "reason": "Error", "startedAt": now, "finishedAt": now}});
        let p = p.clone();
        self.queue(Kind::Pods, Pending::Apply(p));
    }

    /// Write a node's conditions from its fault lines, with a fresh
    /// heartbeat (what the agent does on any change).
    pub fn write_node(&mut self, name: &str) {
        let lines = self.lines.get(name).cloned().unwrap_or_default();
        let now = time(self.wall());
        let rv = self.bump();
        let wire: Vec<WireFault> = lines
            .iter()
            .map(|(code, device, at, n)| {
                // The agent's time of the newest repeat.
                let key = (name.to_string(), code.clone(), device.clone(), *at);
                let last = self
                    .line_times
                    .get(&key)
                    .and_then(|ts| ts.last())
                    .filter(|_| *n > 1 && self.write_last)
                    .map(|t| wire::format_at(self.t0 + chrono::Duration::seconds(*t)));
                WireFault {
                    source: "NvidiaXid".into(),
                    code: code.clone(),
                    device: Some(device.clone()),
                    at: DateTime::from_timestamp_millis(*at).map(wire::format_at),
                    count: Some(u64::from(*n)),
                    last,
                    pods: self
                        .holders
                        .get(&(name.to_string(), device.clone()))
                        .cloned(),
                    ..Default::default()
                }
            })
            .collect();
        let ready = if self.not_ready.contains(name) {
            "Unknown"
        } else {
            "True"
        };
        let ready_since = self
            .ready_changed
            .get(name)
            .cloned()
            .unwrap_or_else(|| "2030-01-01T00:00:00Z".into());
        let Some(n) = self.nodes.get_mut(name) else {
            return;
        };
        let transition = if lines.is_empty() {
            now.clone()
        } else {
            n["status"]["conditions"][1]["lastTransitionTime"]
                .as_str()
                .map(str::to_string)
                .unwrap_or(now.clone())
        };
        n["metadata"]["resourceVersion"] = json!(rv);
        n["status"]["conditions"] = json!([
            {"type": "Ready", "status": ready, "lastHeartbeatTime": now, "lastTransitionTime": ready_since},
            {"type": wire::GPU_CONDITION, "status": if lines.is_empty() { "False" } else { "True" },
             "reason": "Xid", "message": wire::format_condition_message(&wire),
             "lastHeartbeatTime": now, "lastTransitionTime": transition}
        ]);
        let n = n.clone();
        self.queue(Kind::Nodes, Pending::Apply(n));
    }

    /// A new fault on a node (or a repeat of one it carries), on GPU 0.
    pub fn node_fault(&mut self, name: &str, code: &str) {
        self.node_fault_on(name, code, "0");
    }

    /// A new fault on a node's GPU `device` (or a repeat of one there).
    pub fn node_fault_on(&mut self, name: &str, code: &str, device: &str) {
        let at = self.wall().timestamp_millis();
        let lines = self.lines.entry(name.to_string()).or_default();
        let first = match lines
            .iter_mut()
            .find(|(c, d, _, _)| c == code && d == device)
        {
            Some(l) => {
                l.3 += 1;
                l.2
            }
            None => {
                lines.push((code.to_string(), device.to_string(), at, 1));
                at
            }
        };
        let key = (
            name.to_string(),
            code.to_string(),
            device.to_string(),
            first,
        );
        self.line_times.entry(key).or_default().push(self.t);
        self.write_node(name);
    }

    /// A node's faults clear.
    pub fn node_clear(&mut self, name: &str) {
        self.lines.remove(name);
        self.write_node(name);
    }

    /// Distinct nodes rebound took out of scheduling within the breaker's
    /// window ending now (a node cordoned twice in it is one node).
    pub fn separations_in_window(&self) -> usize {
        self.applied
            .iter()
            .filter_map(|a| match a {
                Applied::Cordon { node, at } if self.t - at < WINDOW => Some(node.as_str()),
                _ => None,
            })
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    }
}

fn node(v: &Value) -> Node {
    serde_json::from_value(v.clone()).unwrap_or_default()
}

fn dynamic(v: &Value) -> DynamicObject {
    serde_json::from_value(v.clone())
        .unwrap_or_else(|_| DynamicObject::new("x", &jobset_resource()))
}
