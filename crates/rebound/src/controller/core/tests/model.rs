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
            queues: BTreeMap::new(),
            last: BTreeMap::new(),
            size,
            applied: Vec::new(),
            pool: Interner::default(),
            keys: ProgressKeys::default(),
            policy: default_policy_spec(),
            not_ready: Default::default(),
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
    pub fn kill_node(&mut self, name: &str) {
        self.not_ready.insert(name.to_string());
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
                            "batch.kubernetes.io/job-name": format!("{name}-w-0")},
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
            .map(|(code, device, at, n)| WireFault {
                source: "NvidiaXid".into(),
                code: code.clone(),
                device: Some(device.clone()),
                at: DateTime::from_timestamp_millis(*at).map(wire::format_at),
                count: Some(u64::from(*n)),
                ..Default::default()
            })
            .collect();
        let ready = if self.not_ready.contains(name) {
            "Unknown"
        } else {
            "True"
        };
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
            {"type": "Ready", "status": ready, "lastHeartbeatTime": now, "lastTransitionTime": "2030-01-01T00:00:00Z"},
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
        match lines
            .iter_mut()
            .find(|(c, d, _, _)| c == code && d == device)
        {
            Some(l) => l.3 += 1,
            None => lines.push((code.to_string(), device.to_string(), at, 1)),
        }
        self.write_node(name);
    }

    /// A node's faults clear.
    pub fn node_clear(&mut self, name: &str) {
        self.lines.remove(name);
        self.write_node(name);
    }

    /// The typed objects of a kind, as a relist delivers them.
    fn current(&self, k: Kind) -> Vec<Value> {
        match k {
            Kind::Pods => self.pods.values().cloned().collect(),
            Kind::Nodes => self.nodes.values().cloned().collect(),
            Kind::Jobs => self.jobs.values().cloned().collect(),
        }
    }

    /// The input of one queued change.
    pub fn input(&mut self, k: Kind, p: &Pending) -> Input {
        let now = self.wall();
        match (k, p) {
            (Kind::Pods, Pending::Apply(v)) => {
                let pod: Pod = serde_json::from_value(v.clone()).unwrap_or_default();
                Input::Pod(Change::Apply(PodSeen::read(
                    &pod,
                    Duration::from_secs(600),
                    &self.keys.get(),
                    &mut self.pool,
                    now,
                )))
            }
            (Kind::Pods, Pending::Delete(v)) => {
                let pod: Pod = serde_json::from_value(v.clone()).unwrap_or_default();
                Input::Pod(Change::Delete(PodSeen::gone(&pod, &mut self.pool)))
            }
            (Kind::Nodes, Pending::Apply(v)) => Input::Node(Change::Apply(Box::new(node(v)))),
            (Kind::Nodes, Pending::Delete(v)) => Input::Node(Change::Delete(Box::new(node(v)))),
            (Kind::Jobs, Pending::Apply(v)) => {
                Input::Job(WorkloadKind::JobSet, Change::Apply(dynamic(v)))
            }
            (Kind::Jobs, Pending::Delete(v)) => {
                Input::Job(WorkloadKind::JobSet, Change::Delete(dynamic(v)))
            }
        }
    }

    /// Deliver up to `n` queued changes of a kind.
    pub fn deliver(&mut self, k: Kind, n: usize) -> Vec<Input> {
        let mut out = Vec::new();
        for _ in 0..n {
            let Some(p) = self.queues.entry(k).or_default().pop_front() else {
                break;
            };
            out.push(self.input(k, &p));
            self.last.insert(k, p);
        }
        out
    }

    /// Deliver the last change of a kind again (a duplicate).
    pub fn duplicate(&mut self, k: Kind) -> Vec<Input> {
        match self.last.get(&k).cloned() {
            Some(p) => vec![self.input(k, &p)],
            None => Vec::new(),
        }
    }

    /// A relist of a kind (after a 410 or a dropped watch): what was queued
    /// is lost, the current objects are listed.
    pub fn relist(&mut self, k: Kind) -> Vec<Input> {
        self.queues.entry(k).or_default().clear();
        // A watch never replays what came before its list.
        self.last.remove(&k);
        let mut out = vec![relist_input(k, Change::Relist)];
        for v in self.current(k) {
            out.push(self.input(k, &Pending::Apply(v)));
        }
        out.push(relist_input(k, Change::Synced));
        out
    }

    /// Everything a starting controller lists.
    pub fn startup(&mut self) -> Vec<Input> {
        let mut out = vec![
            Input::Policy(Change::Relist),
            Input::Policy(Change::Apply(Box::new(policy(&self.policy)))),
            Input::Policy(Change::Synced),
            Input::Classification(Change::Relist),
        ];
        for c in classifications() {
            out.push(Input::Classification(Change::Apply(Box::new(c))));
        }
        out.push(Input::Classification(Change::Synced));
        out.push(Input::Event(Change::Relist));
        out.push(Input::Event(Change::Synced));
        out.push(Input::DeviceInfo(Change::Relist));
        out.push(Input::DeviceInfo(Change::Synced));
        out.push(Input::JobKinds(vec![(
            WorkloadKind::JobSet,
            jobset_resource(),
        )]));
        for k in KINDS {
            out.extend(self.relist(k));
        }
        out
    }

    /// Carry out an effect as the API server would, queueing the changes
    /// it makes; the outcome the executor would report.
    pub fn apply(&mut self, e: &Effect) -> Outcome {
        match &e.kind {
            EffectKind::RestartJob { job, how, .. } => {
                let DeleteAll::Selector(sel) = how else {
                    return Outcome::Failed("no Volcano here".into());
                };
                let want: Vec<(&str, &str)> =
                    sel.split(',').filter_map(|kv| kv.split_once('=')).collect();
                let doomed: Vec<(String, String)> = self
                    .pods
                    .iter()
                    .filter(|(_, p)| {
                        want.iter()
                            .all(|(k, v)| p["metadata"]["labels"][*k].as_str() == Some(*v))
                    })
                    .map(|(n, p)| {
                        (
                            n.clone(),
                            p["metadata"]["labels"][JOBSET_UID]
                                .as_str()
                                .unwrap_or("")
                                .to_string(),
                        )
                    })
                    .collect();
                for (n, _) in &doomed {
                    self.delete_pod(n);
                }
                self.applied.push(Applied::Restart {
                    job: job.name.clone(),
                    uid: job.uid.clone(),
                    owners: doomed.into_iter().map(|(_, u)| u).collect(),
                });
                Outcome::Ok("deleted".into())
            }
            EffectKind::DeletePods { pods, .. } => {
                for p in pods {
                    let same = self
                        .pods
                        .get(&p.name)
                        .is_some_and(|x| x["metadata"]["uid"] == p.uid.as_str());
                    if same {
                        self.delete_pod_with(&p.name, p.grace_seconds);
                    }
                }
                Outcome::Ok("deleted".into())
            }
            EffectKind::Record { job, write, .. } => {
                let Some(obj) = self.jobs.get(&job.name).cloned() else {
                    return Outcome::Gone("404".into());
                };
                let uid = obj["metadata"]["uid"].as_str().unwrap_or("").to_string();
                if job.uid.as_deref().is_some_and(|u| u != uid) {
                    return Outcome::Gone("uid is immutable".into());
                }
                // The executor re-reads on a conflict: the patch is made
                // from the object as it is.
                let meta: ObjectMeta =
                    serde_json::from_value(obj["metadata"].clone()).unwrap_or_default();
                let (mut patch, _) = crate::recover::record_write_patch(&meta, write, Some(&uid));
                patch["metadata"]
                    .as_object_mut()
                    .map(|m| m.remove("resourceVersion"));
                let before = history_len(&obj);
                self.patch_job(&job.name, &patch);
                let grew = self
                    .jobs
                    .get(&job.name)
                    .is_some_and(|o| history_len(o) > before);
                if grew {
                    // When the restart was decided (what cooldowns count).
                    let at = (write.record.at - self.t0).num_seconds();
                    self.applied.push(Applied::Record {
                        uid,
                        at,
                        pod_only: write.record.pod_only,
                    });
                }
                Outcome::Ok("recorded".into())
            }
            EffectKind::Release { job, generation } => {
                let Some(obj) = self.jobs.get(&job.name) else {
                    return Outcome::Gone("404".into());
                };
                if job
                    .uid
                    .as_deref()
                    .is_some_and(|u| obj["metadata"]["uid"] != u)
                {
                    return Outcome::Gone("uid is immutable".into());
                }
                let patch = json!({
                    "metadata": crate::inplace::Generation::release_patch(*generation),
                });
                self.patch_job(&job.name, &patch);
                Outcome::Ok("released".into())
            }
            EffectKind::Cordon {
                node: name,
                level,
                taint,
                reason,
                sticky,
                ..
            } => {
                let Some(v) = self.nodes.get(name).cloned() else {
                    return Outcome::Gone("404".into());
                };
                let snap = crate::recover::NodeSnapshot::from_node(&node(&v));
                let why = crate::recover::Why {
                    reason: reason.clone(),
                    sticky: *sticky,
                    at: None,
                };
                let at = wire::format_at(self.wall());
                if let Some(p) =
                    crate::recover::cordon_patch(&snap, *level, taint.as_deref(), &why, &at)
                {
                    if !snap.unschedulable {
                        self.applied.push(Applied::Cordon {
                            node: name.clone(),
                            at: self.t,
                        });
                    }
                    self.patch_node(name, &p);
                }
                Outcome::Ok("cordoned".into())
            }
            EffectKind::Uncordon {
                node: name,
                taint_key,
                ..
            } => {
                let Some(v) = self.nodes.get(name).cloned() else {
                    return Outcome::Gone("404".into());
                };
                let snap = crate::recover::NodeSnapshot::from_node(&node(&v));
                if let Some(p) = crate::recover::uncordon_patch(&snap, Some(taint_key)) {
                    self.patch_node(name, &p);
                }
                Outcome::Ok("uncordoned".into())
            }
            _ => Outcome::Ok(String::new()),
        }
    }

    fn patch_job(&mut self, name: &str, patch: &Value) {
        let rv = self.bump();
        if let Some(obj) = self.jobs.get_mut(name) {
            json_patch::merge(obj, patch);
            obj["metadata"]["resourceVersion"] = json!(rv);
            let o = obj.clone();
            self.queue(Kind::Jobs, Pending::Apply(o));
        }
    }

    fn patch_node(&mut self, name: &str, patch: &Value) {
        let rv = self.bump();
        if let Some(obj) = self.nodes.get_mut(name) {
            let mut p = patch.clone();
            p["metadata"]
                .as_object_mut()
                .map(|m| m.remove("resourceVersion"));
            json_patch::merge(obj, &p);
            obj["metadata"]["resourceVersion"] = json!(rv);
            let o = obj.clone();
            self.queue(Kind::Nodes, Pending::Apply(o));
        }
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

fn history_len(job: &Value) -> usize {
    let a: std::collections::BTreeMap<String, String> =
        serde_json::from_value(job["metadata"]["annotations"].clone()).unwrap_or_default();
    crate::recover::read_history(&a).len()
}

fn relist_input(k: Kind, c: Change<()>) -> Input {
    let relist = matches!(c, Change::Relist);
    match (k, relist) {
        (Kind::Pods, true) => Input::Pod(Change::Relist),
        (Kind::Pods, false) => Input::Pod(Change::Synced),
        (Kind::Nodes, true) => Input::Node(Change::Relist),
        (Kind::Nodes, false) => Input::Node(Change::Synced),
        (Kind::Jobs, true) => Input::Job(WorkloadKind::JobSet, Change::Relist),
        (Kind::Jobs, false) => Input::Job(WorkloadKind::JobSet, Change::Synced),
    }
}

fn node(v: &Value) -> Node {
    serde_json::from_value(v.clone()).unwrap_or_default()
}

fn dynamic(v: &Value) -> DynamicObject {
    serde_json::from_value(v.clone())
        .unwrap_or_else(|_| DynamicObject::new("x", &jobset_resource()))
}

pub fn jobset_resource() -> ApiResource {
    ApiResource {
        group: "jobset.x-k8s.io".into(),
        version: "v1alpha2".into(),
        api_version: "jobset.x-k8s.io/v1alpha2".into(),
        kind: "JobSet".into(),
        plural: "jobsets".into(),
    }
}

/// The root policy of the model: opted-in jobs, the cooldown, the breaker.
pub fn default_policy_spec() -> Value {
    json!({"selector": {"matchLabels": {OPT_IN: "true"}}, "cooldown": format!("{COOLDOWN}s"),
        "nodeActions": {"maxSeparated": MAX_SEPARATED.to_string(), "breakerWindow": format!("{WINDOW}s")}})
}

/// The root policy with `spec`.
pub fn policy(spec: &Value) -> crate::api::RecoveryPolicy {
    serde_json::from_value(
        json!({"apiVersion": "rebound.dev/v1alpha1", "kind": "RecoveryPolicy",
        "metadata": {"name": "default", "namespace": ROOT, "generation": 1},
        "spec": spec}),
    )
    .expect("the model's policy parses")
}

fn classifications() -> Vec<crate::api::FaultClassification> {
    let docs = [
        json!({"apiVersion": "rebound.dev/v1alpha1", "kind": "FaultClassification",
            "metadata": {"name": "xid", "generation": 1},
            "spec": {"source": "NvidiaXid", "rules": [
                {"name": "bus", "codes": ["79"], "level": "Separate"},
                {"name": "ecc", "codes": ["48"], "level": "ResetDevice"},
                {"name": "app", "codes": ["13"], "level": "RestartJob"}],
              "escalations": [{"codes": ["13"], "times": 2, "within": "24h", "level": "ResetDevice"}],
              "defaultLevel": "RestartJob"}}),
        json!({"apiVersion": "rebound.dev/v1alpha1", "kind": "FaultClassification",
            "metadata": {"name": "exits", "generation": 1},
            "spec": {"source": "PodExit", "defaultLevel": "RestartJob"}}),
    ];
    docs.into_iter()
        .filter_map(|d| serde_json::from_value(d).ok())
        .collect()
}

/// A core as the controller builds it, with the model's policy.
pub fn core() -> Core {
    Core::new(
        CoreConfig {
            root: ROOT.into(),
            condition_types: Vec::new(),
            fault_max_age: Duration::from_secs(600),
            dry_run: false,
            node_default: NodeConfig {
                max_separated: Limit::Count(MAX_SEPARATED as u32),
                ..NodeConfig::default()
            },
            status_interval: Duration::from_secs(5),
            resync_interval: Duration::from_secs(30),
        },
        crate::metrics::Metrics::new(),
        None,
        ProgressKeys::default(),
    )
}
