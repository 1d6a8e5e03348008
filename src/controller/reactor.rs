//! The reactor: one task that owns the decision engine and the caches,
//! turns every watch event into faults, decides, and starts actions. One
//! owner, no locks: the hot path is a hash lookup, a pure decision and one
//! spawned request.

use super::actions::{self, ActionCtx, JobPlan};
use super::config::ControllerArgs;
use super::inputs::{ActionKind, ActionResult, Change, Input, PodSeen};
use super::state::{Cache, JobInfo, JobKey, NodeInfo, PodKey, ProgressKeys, job_key};
use super::status::StatusBook;
use crate::api::WorkloadKind;
use crate::expr::{JobView, NodeView};
use crate::fault::{Fault, FaultSource, Level};
use crate::policy::{Engine, JobInput, NodeInput, Skip};
use crate::workload::JobRef;
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node};
use kube::ResourceExt;
use kube::api::DynamicObject;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The watches whose initial list must be in before faults are decided
/// (so that a fault seen at start-up is judged with the jobs' restart
/// history, never replayed into a second restart).
pub const REQUIRED_SYNCS: &[&str] = &["pods", "nodes", "policies", "classifications"];

/// Bounded map of fault identities already handled, with the level they
/// were handled at. Identities are 128-bit fingerprints ([`fault_key`]),
/// so the full map stays a few MiB where the keys themselves were ~40 MiB.
#[derive(Debug, Default)]
struct Handled {
    set: HashMap<FaultId, Level>,
    order: VecDeque<FaultId>,
}

impl Handled {
    const MAX: usize = 200_000;
    /// Whether the fault is new, or is now at a higher level than when it
    /// was handled.
    fn insert(&mut self, k: FaultId, level: Level) -> bool {
        match self.set.get_mut(&k) {
            Some(l) if *l >= level => return false,
            Some(l) => {
                *l = level;
                return true;
            }
            None => {}
        }
        self.set.insert(k, level);
        self.order.push_back(k);
        if self.order.len() > Self::MAX
            && let Some(old) = self.order.pop_front()
        {
            self.set.remove(&old);
        }
        true
    }
}

/// Where a fault came from, for the job lookup.
#[derive(Debug, Clone)]
enum Affected {
    /// The pod's own job.
    Pod(JobRef),
    /// Every job with a pod on the node.
    Node,
    /// Every job with a pod on the node; the fault came from an Event,
    /// which never clears, so a cordon it causes is not undone by itself.
    NodeFromEvent,
}

/// The reactor state.
pub struct Reactor {
    pub engine: Engine,
    pub cache: Cache,
    args: ControllerArgs,
    root: String,
    ctx: ActionCtx,
    handled: Handled,
    synced: HashSet<&'static str>,
    deferred: Vec<(Fault, Instant, Affected)>,
    node_faults: HashMap<String, Vec<Fault>>,
    ascend_faults: HashMap<String, Vec<Fault>>,
    held: BTreeMap<String, Fault>,
    /// Nodes cordoned for an Event-borne fault: no clear signal will come,
    /// so they are not uncordoned automatically.
    sticky: HashSet<String>,
    /// Current faults of failed pods (for re-evaluation after fail-over).
    pod_faults: HashMap<PodKey, (Vec<Fault>, JobRef)>,
    /// Jobs that reported progress: when it last changed.
    progress: HashMap<JobKey, Progress>,
    /// Jobs under a `requireProgress` policy: since when all their pods
    /// run, as seen by the hang scan.
    running_since: HashMap<JobKey, DateTime<Utc>>,
    /// The progress annotation keys the pods' watch keeps.
    progress_keys: ProgressKeys,
    /// The policy selected for each job (`policy_of`): the periodic scans
    /// ask for every job, and selection matches labels against every
    /// policy. Cleared when policies change; a job's entry goes when its
    /// object, or the set or labels of its pods, change.
    chosen: RefCell<HashMap<JobKey, Option<Arc<crate::policy::CompiledPolicy>>>>,
    status: StatusBook,
    last_status: Instant,
    last_hang: Instant,
}

fn occurred_at(f: &Fault) -> DateTime<Utc> {
    match f.source {
        FaultSource::PodExit | FaultSource::KubeEvent | FaultSource::Hang => f.last_seen,
        _ => f.first_seen,
    }
}

/// Kubernetes writes termination and transition times to the second: a
/// restart made in the same second as a fault's (truncated) time may have
/// come before it. Only a restart a whole second later surely handled it.
fn handled_before(fault_time: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(fault_time.timestamp() + 1, 0).unwrap_or(fault_time)
}

/// A job's progress signal as last seen.
#[derive(Debug, Clone)]
struct Progress {
    /// The annotation's value on the job itself (pods keep theirs in the
    /// pod cache).
    job_value: Option<String>,
    /// When the value on the job or on any of its pods last changed.
    changed: DateTime<Utc>,
}

/// When a job's hang clock started, if it runs at all. A job that reported
/// progress: at its last progress change (or restart, see `hang_clock`).
/// A job that never did: only under `requireProgress`, from when all its
/// pods were seen Running; otherwise never, so that a job that does not
/// report progress is not restarted every `noProgressFor`.
fn hang_since(
    progress: Option<DateTime<Utc>>,
    running_since: Option<DateTime<Utc>>,
    require_progress: bool,
    history: &[crate::policy::RestartRecord],
) -> Option<DateTime<Utc>> {
    let start = match (progress, running_since) {
        (Some(p), _) => p,
        (None, Some(r)) if require_progress => r,
        _ => return None,
    };
    Some(hang_clock(start, history))
}

/// When a job's hang clock started: at its last progress change, or at its
/// last whole-job restart if that came later. A restart starts the training
/// afresh, so a job still silent `noProgressFor` after it is hung again (a
/// new fault), not the old one already handled.
fn hang_clock(
    progress_changed: DateTime<Utc>,
    history: &[crate::policy::RestartRecord],
) -> DateTime<Utc> {
    history
        .iter()
        .filter(|r| !r.pod_only)
        .map(|r| r.at)
        .fold(progress_changed, DateTime::max)
}

/// The fault of a job hung since `since`. It carries the job's identity
/// (its uid, else kind/name) like a pod fault carries the pod's: two jobs
/// of one namespace whose clocks started in the same millisecond (listed
/// together at start-up, or one restarted as another began to run) are two
/// faults, not one handled and the other dropped as its replay.
fn hang_fault(
    key: &JobKey,
    uid: Option<&str>,
    since: DateTime<Utc>,
    idle: Duration,
    now: DateTime<Utc>,
) -> Fault {
    let mut f = Fault::new(FaultSource::Hang, "NoProgress", now);
    f.first_seen = since;
    f.last_seen = since;
    f.namespace = Some(key.0.clone());
    f.uid = Some(uid.map_or_else(|| format!("{}/{}", key.1, key.2), str::to_string));
    f.trusted = true;
    f.message = Some(format!(
        "no progress for {}",
        crate::api::duration::format(Duration::from_secs(idle.as_secs()))
    ));
    f
}

/// A fault's identity: 128 bits of two keyed hashes of what makes it this
/// fault (object, source, code, place, time). Two different faults share
/// one with a chance near 2^-128 × (entries)², so nothing is missed for it.
type FaultId = u128;

fn fault_key(f: &Fault) -> FaultId {
    use std::hash::{Hash, Hasher};
    let fields = (
        f.uid.as_deref().unwrap_or(""),
        f.source,
        f.code.as_str(),
        f.node.as_deref().unwrap_or(""),
        f.device.as_deref().unwrap_or(""),
        f.namespace.as_deref().unwrap_or(""),
        f.pod.as_deref().unwrap_or(""),
        f.container.as_deref().unwrap_or(""),
        occurred_at(f).timestamp_millis(),
    );
    let half = |salt: u64| {
        let mut h = std::hash::DefaultHasher::new();
        salt.hash(&mut h);
        fields.hash(&mut h);
        h.finish()
    };
    (u128::from(half(0)) << 64) | u128::from(half(0x9e37_79b9_7f4a_7c15))
}

impl Reactor {
    /// A reactor over an engine built from the flags.
    /// `progress_keys` is shared with the pods' watch, which keeps only the
    /// annotations named there.
    pub fn new(args: ControllerArgs, ctx: ActionCtx, progress_keys: ProgressKeys) -> Reactor {
        let root = args.root_namespace();
        let mut engine = Engine::new(&root, args.node_config(), 0);
        engine.global_dry_run = args.dry_run;
        Reactor {
            engine,
            cache: Cache::default(),
            root,
            args,
            ctx,
            handled: Handled::default(),
            synced: HashSet::new(),
            deferred: Vec::new(),
            node_faults: HashMap::new(),
            ascend_faults: HashMap::new(),
            held: BTreeMap::new(),
            pod_faults: HashMap::new(),
            sticky: HashSet::new(),
            progress: HashMap::new(),
            running_since: HashMap::new(),
            progress_keys,
            chosen: RefCell::default(),
            status: StatusBook::default(),
            last_status: Instant::now(),
            last_hang: Instant::now(),
        }
    }

    /// Whether every required initial list is in.
    pub fn ready(&self) -> bool {
        REQUIRED_SYNCS.iter().all(|s| self.synced.contains(s))
    }

    /// Handle one input.
    pub fn handle(&mut self, input: Input) {
        match input {
            Input::Pod(c, at) => self.on_pod(c, at),
            Input::Node(c, at) => self.on_node(c, at),
            Input::Event(c, at) => self.on_event(c, at),
            Input::ConfigMap(c, at) => self.on_configmap(c, at),
            Input::Policy(c) => self.on_policy(c),
            Input::Classification(c) => self.on_classification(c),
            Input::Job(kind, c) => self.on_job(&kind, c),
            Input::WatchError(name, _) => {
                self.ctx
                    .metrics
                    .watch_restarts
                    .get_or_create(&super::metrics::KindLabels {
                        kind: name.to_string(),
                    })
                    .inc();
            }
            Input::Done(r) => self.on_done(r),
            Input::Recheck(f, job) => {
                let key = fault_key(&f);
                self.handled.set.remove(&key);
                self.on_fault(*f, Instant::now(), Affected::Pod(job));
            }
            Input::Tick => self.on_tick(),
            Input::BecameLeader => self.resync(),
        }
    }

    fn mark_synced(&mut self, name: &'static str) {
        let was = self.ready();
        self.synced.insert(name);
        if !was && self.ready() {
            tracing::info!(
                deferred = self.deferred.len(),
                "initial lists complete; deciding faults seen at start-up"
            );
            self.ctx
                .health
                .ready
                .store(true, std::sync::atomic::Ordering::Relaxed);
            for (f, at, aff) in std::mem::take(&mut self.deferred) {
                self.on_fault(f, at, aff);
            }
            self.engine.breaker.total_nodes = self.cache.nodes.len() as u32;
        }
    }

    fn on_pod(&mut self, c: Change<PodSeen>, at: Instant) {
        match c {
            Change::Apply(PodSeen { info, faults }) => {
                let job = info.job.clone();
                let key = (info.namespace.clone(), info.name.clone());
                // A job's policy follows its pods' set and labels: forget
                // the choice of every job this change touches.
                match self.cache.pod(&key.0, &key.1) {
                    Some(old) if old.labels == info.labels && old.job == info.job => {}
                    Some(old) => {
                        self.chosen.get_mut().remove(&job_key(&old.job));
                        self.chosen.get_mut().remove(&job_key(&job));
                    }
                    None => {
                        self.chosen.get_mut().remove(&job_key(&job));
                    }
                }
                let old_progress = if info.progress.is_empty() {
                    None
                } else {
                    self.cache.pod(&key.0, &key.1).map(|p| p.progress.clone())
                };
                let reports = !info.progress.is_empty();
                self.cache.upsert_pod(info);
                if reports {
                    self.pod_progress(&key, old_progress.unwrap_or_default());
                }
                if faults.is_empty() {
                    self.pod_faults.remove(&key);
                    return;
                }
                let job: JobRef = (*job).clone();
                self.pod_faults.insert(key, (faults.clone(), job.clone()));
                for f in faults {
                    self.on_fault(f, at, Affected::Pod(job.clone()));
                }
            }
            Change::Delete(PodSeen { info, .. }) => {
                self.chosen.get_mut().remove(&job_key(&info.job));
                let key = (info.namespace, info.name);
                self.pod_faults.remove(&key);
                self.cache.remove_pod(&key.0, &key.1);
            }
            Change::Synced => self.mark_synced("pods"),
        }
    }

    fn on_node(&mut self, c: Change<Node>, at: Instant) {
        match c {
            Change::Apply(n) => {
                let name = n.name_any();
                let info = NodeInfo::from_node(&n);
                self.cache.nodes.insert(name.clone(), info);
                self.engine.breaker.total_nodes = self.cache.nodes.len() as u32;
                let faults =
                    crate::fault::node::node_faults(&n, &self.args.condition_types, Utc::now());
                let healthy = crate::fault::node::node_healthy(&n, &self.args.condition_types);
                let was_faulty = self.node_faults.get(&name).is_some_and(|v| !v.is_empty());
                self.node_faults.insert(name.clone(), faults.clone());
                if let Some(v) = &self.ctx.clusterd {
                    v.set_node_faults(&name, &faults);
                }
                for f in faults {
                    self.on_fault(f, at, Affected::Node);
                }
                // Uncordon on the transition to healthy only: a node cordoned
                // for an Event-borne fault has no such transition.
                if healthy && was_faulty {
                    self.maybe_uncordon(&name);
                }
            }
            Change::Delete(n) => {
                let name = n.name_any();
                self.cache.nodes.remove(&name);
                self.node_faults.remove(&name);
                if let Some(v) = &self.ctx.clusterd {
                    v.remove_node(&name);
                }
                self.held.remove(&name);
            }
            Change::Synced => self.mark_synced("nodes"),
        }
    }

    fn on_event(&mut self, c: Change<Event>, at: Instant) {
        let Change::Apply(ev) = c else { return };
        let now = Utc::now();
        match crate::fault::event::event_fault(&ev, &self.root, now) {
            None => {}
            Some(Err(e)) => {
                tracing::warn!(event = %ev.name_any(), error = %e, "unreadable fault Event");
                self.ctx
                    .metrics
                    .parse_errors
                    .get_or_create(&super::metrics::KindLabels {
                        kind: "Event".into(),
                    })
                    .inc();
            }
            Some(Ok(f)) => {
                let age = (now - f.last_seen).to_std().unwrap_or(Duration::ZERO);
                if age > self.args.fault_max_age {
                    return;
                }
                let affected = match (&f.pod, &f.namespace) {
                    (Some(pod), Some(ns)) => match self.cache.pod(ns, pod) {
                        Some(p) => Affected::Pod((*p.job).clone()),
                        None if f.node.is_some() => Affected::NodeFromEvent,
                        None => return,
                    },
                    _ if f.node.is_some() => Affected::NodeFromEvent,
                    _ => return,
                };
                self.on_fault(f, at, affected);
            }
        }
    }

    fn on_configmap(&mut self, c: Change<ConfigMap>, at: Instant) {
        let (cm, deleted) = match c {
            Change::Apply(cm) => (cm, false),
            Change::Delete(cm) => (cm, true),
            Change::Synced => return,
        };
        let Some(node) = crate::fault::ascend::deviceinfo_node(&cm) else {
            return;
        };
        if deleted {
            self.ascend_faults.remove(&node);
            if let Some(v) = &self.ctx.clusterd {
                v.set_device_info(&node, None);
            }
            return;
        }
        match crate::fault::ascend::deviceinfo_faults(&cm, Utc::now()) {
            Ok(faults) => {
                let was_faulty = self.ascend_faults.get(&node).is_some_and(|v| !v.is_empty());
                // NotHandleFault codes stay listed on healthy chips: health
                // is the device plugin's own verdict, not an empty list.
                let now_clear = faults.is_empty()
                    || crate::fault::ascend::parse_deviceinfo(&cm).is_ok_and(|d| d.healthy());
                self.ascend_faults.insert(node.clone(), faults.clone());
                if let Some(v) = &self.ctx.clusterd {
                    v.set_device_info(&node, crate::fault::ascend::parse_deviceinfo(&cm).ok());
                }
                for f in faults {
                    self.on_fault(f, at, Affected::Node);
                }
                if was_faulty && now_clear {
                    self.maybe_uncordon(&node);
                }
            }
            Err(e) => {
                tracing::warn!(configmap = %cm.name_any(), error = %e, "unreadable device-plugin ConfigMap");
                self.ctx
                    .metrics
                    .parse_errors
                    .get_or_create(&super::metrics::KindLabels {
                        kind: "ConfigMap".into(),
                    })
                    .inc();
            }
        }
    }

    fn on_policy(&mut self, c: Change<crate::api::RecoveryPolicy>) {
        self.chosen.get_mut().clear();
        match c {
            Change::Apply(p) => {
                let r = self.engine.policies.upsert(&p);
                self.status.policy_changed(&p, r);
            }
            Change::Delete(p) => {
                let ns = p.namespace().unwrap_or_default();
                self.engine.policies.remove(&ns, &p.name_any());
                self.status.policy_deleted(&ns, &p.name_any());
            }
            Change::Synced => self.mark_synced("policies"),
        }
        self.progress_keys.set(
            self.engine
                .policies
                .iter()
                .filter_map(|p| p.hang.as_ref().map(|h| h.annotation.clone()))
                .collect(),
        );
    }

    /// A pod reporting progress was seen: a changed value (or a new pod's
    /// first one) is progress of its job, under the annotation the job's
    /// selected policy reads.
    fn pod_progress(&mut self, key: &PodKey, old: Vec<(String, String)>) {
        let Some(pod) = self.cache.pod(&key.0, &key.1) else {
            return;
        };
        let job = job_key(&pod.job);
        let Some(hang) = self.hang_of(&job) else {
            return;
        };
        let Some(value) = pod.progress_value(&hang.annotation) else {
            return;
        };
        let before = old
            .iter()
            .find(|(k, _)| *k == hang.annotation)
            .map(|(_, v)| v.as_str());
        if before == Some(value) {
            return;
        }
        let now = Utc::now();
        self.progress
            .entry(job)
            .and_modify(|p| p.changed = now)
            .or_insert(Progress {
                job_value: None,
                changed: now,
            });
    }

    fn on_classification(&mut self, c: Change<crate::api::FaultClassification>) {
        match c {
            Change::Apply(o) => {
                let r = self.engine.classifier.upsert(&o);
                self.status.classification_changed(&o, r);
            }
            Change::Delete(o) => {
                self.engine.classifier.remove(&o.name_any());
                self.status.classification_deleted(&o.name_any());
            }
            Change::Synced => self.mark_synced("classifications"),
        }
    }

    fn on_job(&mut self, kind: &str, c: Change<DynamicObject>) {
        let Ok(wk) = kind.parse::<WorkloadKind>() else {
            return;
        };
        match c {
            Change::Apply(o) => {
                let ns = o.namespace().unwrap_or_default();
                let key = (ns, wk.as_str().to_string(), o.name_any());
                let annotations: BTreeMap<String, String> = o.annotations().clone();
                let history = crate::recover::read_history(&annotations);
                if let Some(latest) = history.last().map(|r| r.at)
                    && let Some(p) = self.cache.pending.get_mut(&key)
                {
                    p.retain(|r| r.at > latest);
                }
                self.chosen.get_mut().remove(&key);
                let info = JobInfo {
                    resource_version: o.resource_version(),
                    labels: o.labels().clone(),
                    never: crate::workload::restart_policy_never(wk, &o.data, None),
                    uid: o.uid(),
                    annotations,
                    history,
                };
                self.cache.jobs.insert(key.clone(), info);
                // After the insert: the policy is selected by the job's labels.
                if let Some(hang) = self.hang_of(&key)
                    && let Some(v) = self
                        .cache
                        .jobs
                        .get(&key)
                        .and_then(|j| j.annotations.get(&hang.annotation))
                        .cloned()
                {
                    let now = Utc::now();
                    let e = self.progress.entry(key).or_insert(Progress {
                        job_value: None,
                        changed: now,
                    });
                    if e.job_value.as_ref() != Some(&v) {
                        e.job_value = Some(v);
                        e.changed = now;
                    }
                }
            }
            Change::Delete(o) => {
                let key = (
                    o.namespace().unwrap_or_default(),
                    wk.as_str().to_string(),
                    o.name_any(),
                );
                self.chosen.get_mut().remove(&key);
                self.cache.jobs.remove(&key);
                self.cache.pending.remove(&key);
                self.progress.remove(&key);
                self.running_since.remove(&key);
            }
            Change::Synced => {}
        }
    }

    /// The hang detection of the policy selected for the job (the same
    /// selection as for its faults), if it has one.
    fn hang_of(&self, key: &JobKey) -> Option<crate::policy::Hang> {
        self.policy_of(key).and_then(|p| p.hang.clone())
    }

    fn job_input(&self, job: &JobRef, fault: &Fault) -> JobInput {
        let key = job_key(job);
        let info = self.cache.jobs.get(&key);
        let pods = self.cache.job_pods(&key);
        let pod = fault
            .pod
            .as_ref()
            .and_then(|p| self.cache.pod(&job.namespace, p));
        let labels = match info {
            Some(i) => i.labels.clone(),
            None => pod.map(|p| p.labels.to_map()).unwrap_or_default(),
        };
        let never = match job.kind {
            WorkloadKind::Pod => pod.is_none_or(|p| p.restart_never || !p.has_controller),
            _ => info.is_some_and(|i| i.never),
        };
        JobInput {
            kind: Some(job.kind),
            view: JobView {
                kind: job.kind.as_str().to_string(),
                name: job.name.clone(),
                namespace: job.namespace.clone(),
                labels,
                annotations: info.map(|i| i.annotations.clone()).unwrap_or_default(),
                restarts: 0,
                last_restart: None,
                replicas: pods.len() as i64,
            },
            pod_labels: pod.map(|p| p.labels.to_map()).unwrap_or_default(),
            history: self.cache.history(&key),
            restart_policy_never: never,
            running: self.cache.job_running(&key),
        }
    }

    fn on_fault(&mut self, fault: Fault, at: Instant, affected: Affected) {
        if !self.ready() {
            self.deferred.push((fault, at, affected));
            return;
        }
        let node_view = fault
            .node
            .as_ref()
            .and_then(|n| self.cache.nodes.get(n))
            .map(|n| NodeView {
                name: n.name.clone(),
                labels: n.labels.clone(),
                level: n.cordoned_by,
                faults: self
                    .node_faults
                    .get(&n.name)
                    .map(|v| v.iter().map(|f| f.code.clone()).collect())
                    .unwrap_or_default(),
            });
        // Classify first (idempotent for a replayed occurrence): a replay
        // at the same level is dropped, an escalation (a lasting fault, a
        // repeat) is decided again at its new level.
        let c = self
            .engine
            .classifier
            .classify(fault, node_view.as_ref(), Utc::now());
        if let Some(v) = &self.ctx.clusterd {
            v.note_level(&c.fault, c.level);
        }
        if !self.ctx.leader.is_leader() {
            // Hot standby: the history stays warm, nothing is acted on.
            return;
        }
        if !self.handled.insert(fault_key(&c.fault), c.level) {
            return;
        }
        let fault = c.fault.clone();
        let now = Utc::now();
        let when = occurred_at(&fault);
        let refs: Vec<JobRef> = match &affected {
            Affected::Pod(j) => vec![j.clone()],
            Affected::Node | Affected::NodeFromEvent => fault
                .node
                .as_deref()
                .map(|n| self.cache.jobs_on_node(n))
                .unwrap_or_default(),
        };
        // A job restarted after this fault happened has been handled
        // already (by us before a restart, or by the previous leader).
        let jobs: Vec<JobInput> = refs
            .iter()
            .map(|j| self.job_input(j, &fault))
            .filter(|j| {
                j.history
                    .iter()
                    .rfind(|r| !r.pod_only)
                    .is_none_or(|r| r.at < handled_before(when))
            })
            .collect();
        let taint_key = self.taint_key();
        let node_input = fault
            .node
            .as_ref()
            .and_then(|n| self.cache.nodes.get(n))
            .map(|n| NodeInput {
                name: n.name.clone(),
                unschedulable: n.snap.unschedulable,
                cordoned_by_rebound: n.cordoned_by,
                tainted: n.snap.taints.iter().any(|t| t.key == taint_key),
            });
        let decision = self
            .engine
            .decide_classified(c, node_input.as_ref(), &jobs, now);
        self.ctx
            .metrics
            .faults
            .get_or_create(&super::metrics::FaultLabels {
                source: decision.fault.source.to_string(),
                level: decision.level.to_string(),
            })
            .inc();
        self.ctx.metrics.cel_errors.inc_by(
            self.engine
                .classifier
                .stats()
                .cel_errors
                .saturating_sub(self.ctx.metrics.cel_errors.get()),
        );
        tracing::debug!(fault = %decision.fault.code, level = %decision.level, rule = %decision.rule, "fault classified");
        if self.ctx.decisions.receiver_count() > 0 {
            let _ = self
                .ctx
                .decisions
                .send(std::sync::Arc::new(decision.clone()));
        }
        if let Some(nd) = &decision.node {
            if nd.acts() && matches!(affected, Affected::NodeFromEvent) {
                self.sticky.insert(nd.node.clone());
            }
            self.apply_node_decision(nd, &decision.fault, decision.level, at);
        }
        for (jd, job) in decision.jobs.iter().zip(refs.iter().filter(|r| {
            jobs.iter().any(|j| {
                j.view.name == r.name && j.view.namespace == r.namespace && j.kind == Some(r.kind)
            })
        })) {
            self.apply_job_decision(jd, job, &decision.fault, decision.level, at);
        }
    }

    fn taint_key(&self) -> String {
        self.engine
            .policies
            .node_config(&self.engine.node_default)
            .0
            .taint_key
    }

    fn apply_node_decision(
        &mut self,
        nd: &crate::policy::NodeDecision,
        fault: &Fault,
        level: Level,
        at: Instant,
    ) {
        let m = &self.ctx.metrics;
        match &nd.skip {
            None if nd.acts() => {
                let taint = nd.actions.iter().find_map(|a| match a {
                    crate::policy::NodeAction::Taint { key } => Some(key.clone()),
                    _ => None,
                });
                let Some(node) = self.cache.nodes.get_mut(&nd.node) else {
                    return;
                };
                let snapshot = node.clone();
                node.snap.unschedulable = true;
                node.cordoned_by = Some(node.cordoned_by.map_or(level, |l| l.max(level)));
                if let Some(k) = &taint {
                    node.snap.taints.push(k8s_openapi::api::core::v1::Taint {
                        key: k.clone(),
                        effect: "NoSchedule".into(),
                        ..Default::default()
                    });
                }
                self.held.remove(&nd.node);
                m.decision("cordon", "acted");
                actions::cordon(
                    &self.ctx,
                    snapshot,
                    level,
                    taint,
                    fault.clone(),
                    nd.reasons.join("; "),
                    at,
                );
            }
            Some(Skip::BreakerOpen { used, allowed }) => {
                m.decision("cordon", "BreakerOpen");
                if self.held.insert(nd.node.clone(), fault.clone()).is_none() {
                    actions::breaker_event(&self.ctx, &nd.node, *used, *allowed);
                }
            }
            Some(Skip::DryRun) => {
                m.decision("cordon", "dry_run");
                actions::note_node(&self.ctx, &nd.node, "dry run: would cordon", &nd.reasons);
            }
            Some(s) => m.decision("cordon", s.name()),
            None => {}
        }
        m.breaker_held.set(self.held.len() as i64);
        m.breaker_open.set(i64::from(!self.held.is_empty()));
    }

    fn apply_job_decision(
        &mut self,
        jd: &crate::policy::JobDecision,
        job: &JobRef,
        fault: &Fault,
        level: Level,
        at: Instant,
    ) {
        let m = self.ctx.metrics.clone();
        let action_name = match &jd.action {
            Some(crate::policy::JobAction::RestartPod { .. }) => "restart_pod",
            Some(crate::policy::JobAction::RestartJob { .. }) => "restart_job",
            None => "none",
        };
        let key = job_key(job);
        if jd.acts() {
            let pod_only = matches!(jd.action, Some(crate::policy::JobAction::RestartPod { .. }));
            let now = Utc::now();
            self.cache
                .pending
                .entry(key.clone())
                .or_default()
                .push(crate::policy::RestartRecord {
                    at: now,
                    infrastructure: jd.infrastructure,
                    pod_only,
                });
            let root_cause = self.root_cause(&key, fault);
            let pods: Vec<crate::recover::PodLogTarget> = self
                .cache
                .job_pods(&key)
                .iter()
                .map(|p| crate::recover::PodLogTarget {
                    name: p.name.to_string(),
                    containers: p.containers.iter().map(|c| c.to_string()).collect(),
                    previous: p.restarted.iter().map(|c| c.to_string()).collect(),
                    node: p.node.as_deref().map(str::to_string),
                })
                .collect();
            let job_meta = self.cache.jobs.get(&key).map(|i| kube::api::ObjectMeta {
                name: Some(job.name.clone()),
                namespace: Some(job.namespace.clone()),
                resource_version: i.resource_version.clone(),
                annotations: Some(i.annotations.clone()),
                ..Default::default()
            });
            let uid = self.cache.jobs.get(&key).and_then(|i| i.uid.clone());
            let mut jref = job.clone();
            if jref.uid.is_none() {
                jref.uid = uid;
            }
            if pod_only
                && let Some(p) = jd
                    .policy
                    .as_ref()
                    .and_then(|id| id.split_once('/'))
                    .and_then(|(ns, n)| self.engine.policies.get(ns, n))
            {
                actions::recheck_later(&self.ctx, fault.clone(), job.clone(), p.job_after);
            }
            let pod_uid = fault
                .pod
                .as_ref()
                .and_then(|p| self.cache.pod(&job.namespace, p))
                .map(|p| p.uid.to_string());
            m.decision(action_name, "acted");
            if let Some(v) = &self.ctx.clusterd {
                v.set_recovering_job(&jref, fault.node.as_deref(), occurred_at(fault));
            }
            actions::restart(
                &self.ctx,
                JobPlan {
                    job: jref,
                    action: jd.action.clone(),
                    policy: jd.policy.clone(),
                    fault: fault.clone(),
                    level,
                    root_cause,
                    pods,
                    job_meta,
                    pod_uid,
                    record: crate::policy::RestartRecord {
                        at: now,
                        infrastructure: jd.infrastructure,
                        pod_only,
                    },
                    reasons: jd.reasons.join("; "),
                    received: at,
                },
            );
            return;
        }
        let Some(skip) = &jd.skip else { return };
        m.decision(
            action_name,
            if matches!(skip, Skip::DryRun) {
                "dry_run"
            } else {
                skip.name()
            },
        );
        match skip {
            Skip::WaitingForPodRestart { remaining_secs } => {
                actions::recheck_later(
                    &self.ctx,
                    fault.clone(),
                    job.clone(),
                    Duration::from_secs(*remaining_secs),
                );
            }
            Skip::BudgetExhausted { .. }
            | Skip::DryRun
            | Skip::GateError { .. }
            | Skip::CooldownError { .. }
            | Skip::RestartPolicyNever => {
                actions::note_job(&self.ctx, job, skip, &jd.reasons.join("; "));
            }
            _ => {}
        }
    }

    /// The pod to look at first: the earliest failure among the job's pods,
    /// preferring one on a node that carries a fault.
    fn root_cause(&self, key: &super::state::JobKey, fault: &Fault) -> Option<String> {
        let pods = self.cache.job_pods(key);
        let on_faulty = pods.iter().find(|p| {
            p.node.as_ref().is_some_and(|n| {
                self.node_faults.get(&**n).is_some_and(|v| !v.is_empty())
                    || self.ascend_faults.get(&**n).is_some_and(|v| !v.is_empty())
            })
        });
        if let Some(p) = on_faulty {
            return Some(format!(
                "{} (on faulty node {})",
                p.name,
                p.node.clone().unwrap_or_default()
            ));
        }
        pods.iter()
            .filter_map(|p| p.first_failure.map(|t| (t, &p.name)))
            .min()
            .map(|(t, n)| format!("{n} (first failure at {})", t.to_rfc3339()))
            .or_else(|| fault.pod.clone())
    }

    fn maybe_uncordon(&mut self, node: &str) {
        let healthy_everywhere = self.node_faults.get(node).is_none_or(|v| v.is_empty())
            && self.ascend_faults.get(node).is_none_or(|v| v.is_empty());
        if !healthy_everywhere || !self.ctx.leader.is_leader() || self.sticky.contains(node) {
            return;
        }
        let (cfg, _) = self.engine.policies.node_config(&self.engine.node_default);
        if !cfg.auto_uncordon || self.engine.global_dry_run {
            return;
        }
        let Some(n) = self.cache.nodes.get_mut(node) else {
            return;
        };
        if n.cordoned_by.is_none() {
            return;
        }
        let snapshot = n.clone();
        n.cordoned_by = None;
        n.snap.unschedulable = false;
        n.snap.taints.retain(|t| t.key != cfg.taint_key);
        self.held.remove(node);
        self.ctx.metrics.decision("uncordon", "acted");
        actions::uncordon(&self.ctx, snapshot, cfg.taint_key);
    }

    fn on_done(&mut self, r: ActionResult) {
        self.ctx.metrics.request("action", r.ok);
        if let (Some(v), ActionKind::RestartJob(j) | ActionKind::RestartPod(j, _)) =
            (&self.ctx.clusterd, &r.kind)
        {
            v.job_done(j);
        }
        if r.ok {
            if let (Some(p), ActionKind::RestartJob(_) | ActionKind::RestartPod(..)) =
                (&r.policy, &r.kind)
            {
                self.status.recovered(p, Utc::now());
            }
        } else {
            tracing::warn!(action = ?r.kind, message = %r.message, "action failed");
            // Let the fault be decided again if it shows up again.
            if let ActionKind::Cordon(n) = &r.kind
                && let Some(node) = self.cache.nodes.get_mut(n)
            {
                node.cordoned_by = None;
            }
        }
        self.ctx.metrics.cordoned_nodes.set(
            self.cache
                .nodes
                .values()
                .filter(|n| n.cordoned_by.is_some())
                .count() as i64,
        );
    }

    fn on_tick(&mut self) {
        let now = Utc::now();
        // Held separations: retry when the breaker lets them through.
        if !self.held.is_empty() && self.engine.breaker.allows(now) {
            let held = std::mem::take(&mut self.held);
            for (_, f) in held {
                self.handled.set.remove(&fault_key(&f));
                self.on_fault(f, Instant::now(), Affected::Node);
            }
        }
        self.ctx
            .metrics
            .breaker_open
            .set(i64::from(!self.held.is_empty()));
        self.ctx.metrics.breaker_held.set(self.held.len() as i64);
        if self.last_hang.elapsed() >= Duration::from_secs(5) {
            self.last_hang = Instant::now();
            self.scan_hangs(now);
            // Lasting faults escalate with time (`lastsFor`): re-classify
            // the faults nodes still carry; same-level replays are dropped.
            let lasting: Vec<Fault> = self
                .node_faults
                .values()
                .chain(self.ascend_faults.values())
                .flatten()
                .cloned()
                .collect();
            for f in lasting {
                self.on_fault(f, Instant::now(), Affected::Node);
            }
        }
        if self.last_status.elapsed() >= self.args.status_interval && self.ctx.leader.is_leader() {
            self.last_status = Instant::now();
            let counts = self.workload_counts();
            self.status.flush(&self.ctx, &self.engine, counts);
        }
        self.ctx
            .metrics
            .leader
            .set(i64::from(self.ctx.leader.is_leader()));
    }

    /// The policy covering a known job (by its own labels).
    fn policy_of(&self, key: &JobKey) -> Option<Arc<crate::policy::CompiledPolicy>> {
        if let Some(p) = self.chosen.borrow().get(key) {
            return p.clone();
        }
        let kind = key.1.parse::<WorkloadKind>().ok()?;
        let empty = BTreeMap::new();
        let labels = self.cache.jobs.get(key).map_or(&empty, |j| &j.labels);
        // Like a fault's decision, which sees the failed pod's labels too
        // (a bare pod's only labels).
        let pod_labels = self
            .cache
            .pods_by_job
            .get(key)
            .and_then(|names| names.first())
            .and_then(|n| self.cache.pod(&key.0, n))
            .map(|p| p.labels.to_map());
        let chosen = self
            .engine
            .policies
            .select(crate::policy::WorkloadRef {
                kind,
                namespace: &key.0,
                labels,
                pod_labels: pod_labels.as_ref(),
            })
            .chosen;
        self.chosen.borrow_mut().insert(key.clone(), chosen.clone());
        chosen
    }

    fn workload_counts(&self) -> HashMap<String, u32> {
        let mut counts: HashMap<String, u32> = HashMap::new();
        for key in self.cache.pods_by_job.keys() {
            if let Some(p) = self.policy_of(key) {
                *counts.entry(p.id()).or_default() += 1;
            }
        }
        counts
    }

    fn scan_hangs(&mut self, now: DateTime<Utc>) {
        // Forget jobs that are gone (bare pods have no job object).
        let cache = &self.cache;
        self.progress
            .retain(|k, _| cache.jobs.contains_key(k) || cache.pods_by_job.contains_key(k));
        if !self.engine.policies.iter().any(|p| p.hang.is_some()) {
            self.running_since.clear();
            return;
        }
        // Only a job with pods can be running, hence hung.
        let watched: Vec<(JobKey, crate::policy::Hang, bool)> = self
            .cache
            .pods_by_job
            .keys()
            .filter_map(|k| {
                let h = self.hang_of(k)?;
                Some((k.clone(), h, self.cache.job_running(k)))
            })
            .collect();
        // A job that stopped running starts its clock afresh when it runs.
        let waiting: HashSet<&JobKey> = watched
            .iter()
            .filter(|(_, h, running)| h.require_progress && *running)
            .map(|(k, _, _)| k)
            .collect();
        self.running_since.retain(|k, _| waiting.contains(k));
        let mut stalled = Vec::new();
        for (key, hang, running) in watched {
            if !running {
                continue;
            }
            let Ok(kind) = key.1.parse::<WorkloadKind>() else {
                continue;
            };
            let started = hang
                .require_progress
                .then(|| *self.running_since.entry(key.clone()).or_insert(now));
            let progress = self.progress.get(&key).map(|p| p.changed);
            let history = self.cache.history(&key);
            let Some(since) = hang_since(progress, started, hang.require_progress, &history) else {
                continue;
            };
            let idle = (now - since).to_std().unwrap_or(Duration::ZERO);
            if idle > hang.limit {
                stalled.push((key, kind, since, idle));
            }
        }
        for (key, kind, changed, idle) in stalled {
            let uid = self.cache.jobs.get(&key).and_then(|j| j.uid.as_deref());
            let f = hang_fault(&key, uid, changed, idle, now);
            let job = JobRef {
                kind,
                api_version: String::new(),
                plural: String::new(),
                namespace: key.0.clone(),
                name: key.2.clone(),
                uid: None,
            };
            let job = self
                .cache
                .job_pods(&key)
                .first()
                .map(|p| (*p.job).clone())
                .unwrap_or(job);
            self.on_fault(f, Instant::now(), Affected::Pod(job));
        }
    }

    /// Re-evaluate every current fault (after becoming leader): faults the
    /// previous leader handled are recognised by the jobs' restart history
    /// and the nodes' annotations, so nothing is done twice.
    fn resync(&mut self) {
        let mut faults: Vec<(Fault, Affected)> = Vec::new();
        for fs in self.node_faults.values().chain(self.ascend_faults.values()) {
            faults.extend(fs.iter().cloned().map(|f| (f, Affected::Node)));
        }
        for f in self.held.values() {
            faults.push((f.clone(), Affected::Node));
        }
        for (fs, job) in self.pod_faults.values() {
            faults.extend(fs.iter().cloned().map(|f| (f, Affected::Pod(job.clone()))));
        }
        self.held.clear();
        for (f, a) in faults {
            self.on_fault(f, Instant::now(), a);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::RestartRecord;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap_or_default()
    }

    fn restart(secs: i64, pod_only: bool) -> RestartRecord {
        RestartRecord {
            at: at(secs),
            infrastructure: false,
            pod_only,
        }
    }

    #[test]
    fn hang_clock_restarts_with_the_job_not_with_a_pod() {
        // Never restarted: the last progress.
        assert_eq!(hang_clock(at(10), &[]), at(10));
        // Restarted before the last progress: still the progress.
        assert_eq!(hang_clock(at(10), &[restart(5, false)]), at(10));
        // Restarted (for the hang) after it: the restart, so a job that is
        // still silent afterwards is hung anew.
        assert_eq!(
            hang_clock(at(10), &[restart(5, false), restart(20, false)]),
            at(20)
        );
        // A single pod's restart leaves the other pods hung.
        assert_eq!(hang_clock(at(10), &[restart(30, true)]), at(10));
    }

    #[test]
    fn hangs_of_two_jobs_since_the_same_instant_are_two_faults() {
        let job = |name: &str| ("ml".to_string(), "PyTorchJob".to_string(), name.to_string());
        let idle = Duration::from_secs(5);
        let a = hang_fault(&job("a"), None, at(1), idle, at(6));
        let b = hang_fault(&job("b"), None, at(1), idle, at(6));
        assert_ne!(fault_key(&a), fault_key(&b));
        let by_uid = hang_fault(&job("a"), Some("u-1"), at(1), idle, at(6));
        assert_eq!(by_uid.uid.as_deref(), Some("u-1"));
        // The same job, same clock: a replay, handled once.
        let again = hang_fault(&job("a"), None, at(1), idle * 2, at(11));
        assert_eq!(fault_key(&a), fault_key(&again));
        assert_eq!(a.first_seen, at(1));
    }

    #[test]
    fn a_job_that_never_reported_progress_is_hung_only_when_the_policy_requires_progress() {
        // Reported progress: its clock runs, opt-in or not.
        assert_eq!(hang_since(Some(at(10)), None, false, &[]), Some(at(10)));
        assert_eq!(
            hang_since(Some(at(10)), Some(at(2)), true, &[]),
            Some(at(10)),
            "reported progress wins over the start"
        );
        // Never reported, no opt-in: never hung (progress reporting unused).
        assert_eq!(hang_since(None, Some(at(2)), false, &[]), None);
        // Never reported, opt-in: hung counting from when it ran...
        assert_eq!(hang_since(None, Some(at(2)), true, &[]), Some(at(2)));
        // ...or from its last whole-job restart.
        assert_eq!(
            hang_since(None, Some(at(2)), true, &[restart(7, false)]),
            Some(at(7))
        );
        // Not running (yet): no clock.
        assert_eq!(hang_since(None, None, true, &[]), None);
    }
}
