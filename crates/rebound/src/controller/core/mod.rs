//! The recovery core: a state machine with no client inside. Inputs in
//! (watch changes with relists, ticks, effect outcomes, leadership), effects
//! out (restart, delete pods, record, release, cordon, uncordon, Events,
//! status); the executor carries effects out and feeds outcomes back.
//!
//! What rebound wants of nodes and jobs is recomputed from what it observes
//! (level-triggered): a failed action is retried, a fault that cleared
//! while the controller was down is uncordoned, and nothing depends on
//! having seen an edge. State that must outlive a process lives in the
//! cluster: restart history and generation on the job, who cordoned what and
//! why on the node, the breaker's window in the nodes' separation times.
//!
//! Split by concern: [`ingest`] (watch changes into the store and
//! occurrences), [`occurrence`] (identity and the ledger), [`decide`]
//! (occurrence → recovery or a reason), [`jobs`] (a recovery's tiers and
//! phases), [`nodes`] (desired node state and the breaker), [`hang`],
//! [`status`]; the step's leadership changes and periodic tick in
//! `leadership` and `tick`.

mod agent_access;
pub mod decide;
mod devices;
pub mod effect;
mod fresh;
pub mod hang;
pub mod hashing;
pub mod ingest;
mod ingest_objects;
pub mod input;
pub mod jobs;
mod leadership;
pub mod nodes;
pub mod occurrence;
pub mod plan;
pub mod pods;
pub mod restart_counts;
mod skip_notices;
pub mod status;
pub mod store;
mod tick;
mod unseen_jobs;
pub mod validation;

use crate::ascend::clusterd::ClusterdView;
use crate::controller::core::hashing::{HashMap, HashSet};
use crate::metrics::Metrics;
use crate::policy::{Engine, NodeConfig};
use chrono::{DateTime, Utc};
use effect::{Effect, EffectId, EffectKind, Outcome};
use input::Input;
use occurrence::{Ledger, OccurrenceId};
use pods::ProgressKeys;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use store::{JobKey, Store, Watched};

/// The time of one step: wall time for decisions and records, the
/// monotonic instant for reaction-time metrics.
#[derive(Clone, Copy, Debug)]
pub struct Now {
    pub wall: DateTime<Utc>,
    pub mono: Instant,
}

impl Now {
    /// The current time.
    pub fn current() -> Now {
        Now {
            wall: Utc::now(),
            mono: Instant::now(),
        }
    }
}

/// What the core is configured with (from the controller's flags).
#[derive(Clone, Debug)]
pub struct CoreConfig {
    /// The root namespace (cluster-default policies, trusted Events).
    pub root: String,
    /// Node condition types read as faults besides the agent's and Ready.
    pub condition_types: Vec<String>,
    /// Faults older than this when first seen are not acted on.
    pub fault_max_age: Duration,
    /// `--dry-run`.
    pub dry_run: bool,
    /// Node behaviour from the flags.
    pub node_default: NodeConfig,
    /// How often policy and classification status is written.
    pub status_interval: Duration,
    /// How often every node and job is reconciled even without a change.
    pub resync_interval: Duration,
    /// The restart agent's ClusterRole, bound in each namespace with wired
    /// pods to their ServiceAccounts; `None`: bindings are made by hand.
    pub restart_agent_role: Option<String>,
}

/// A fault occurrence whose carrier is present now.
#[derive(Clone, Debug)]
pub struct Occurrence {
    pub id: OccurrenceId,
    pub fault: crate::fault::Fault,
    pub scope: Scope,
    /// When the watch event that carried it arrived.
    pub received: Option<Instant>,
}

/// Which jobs an occurrence concerns.
#[derive(Clone, Debug)]
pub enum Scope {
    /// The pod's own job.
    Pod(Arc<crate::workload::JobRef>),
    /// Every job with a pod on the fault's node at the time it happened.
    Node,
    /// The same, for a fault an Event carries: no clear signal follows, so
    /// a cordon it causes stays until a person lifts it.
    NodeEvent,
}

/// What an effect in flight was for, to route its outcome.
#[derive(Clone, Debug)]
enum Waiting {
    Job(JobKey),
    /// A release no recovery follows ([`jobs::Releasing`]).
    Release(JobKey),
    /// Pods a recovery deletes beside its steps ([`jobs::SideDeletes`]).
    SideDelete(JobKey, Vec<effect::PodTarget>),
    Node(String),
    Status(effect::StatusTarget, String),
    AgentAccess(Arc<str>),
    AgentAccessSweep,
    /// A validation Job made or read (validation.rs).
    Validation(String),
}

/// The core.
pub struct Core {
    cfg: CoreConfig,
    pub engine: Engine,
    pub store: Store,
    ledger: Ledger,
    /// Occurrences whose carrier is present, and the carriers' occurrences.
    current: HashMap<OccurrenceId, Occurrence>,
    carriers: HashMap<String, Vec<OccurrenceId>>,
    /// Decisions waiting for a job object the watch has not shown yet.
    unseen: unseen_jobs::UnseenJobs,
    synced: HashSet<Watched>,
    /// Installed job kinds; `None` until discovery answered once.
    kinds: Option<BTreeSet<crate::api::WorkloadKind>>,
    leading: bool,
    /// The leadership term of `leading` (see [`Input::Leader`]).
    term: u64,
    recoveries: HashMap<JobKey, jobs::Recovery>,
    /// The take-over's fresh read of the jobs' restart records.
    fresh: fresh::FreshRead,
    /// Validations before a device returns to service.
    validations: validation::ValidationBook,
    /// Releases of a generation no recovery follows any more (the
    /// recovery ended by a fallback, a give-up or an error): each job's
    /// generation, the release in flight and when to retry a failed one.
    releasing: HashMap<JobKey, jobs::Releasing>,
    /// Restart records this process wrote that the jobs' annotations do
    /// not show yet (and bare pods', which keep none), for cooldowns.
    recorded: HashMap<JobKey, Vec<crate::policy::RestartRecord>>,
    /// Restarts recorded on a job (with their delete, at once) whose
    /// delete never went through: by their `at`, not counted as restarts.
    unmade: HashMap<JobKey, Vec<DateTime<Utc>>>,
    /// Restarts whose requests kept failing, some perhaps landed all the
    /// same (an answer lost): judged made or not from the cluster once
    /// their last request can no longer land ([`jobs::Requeued`]).
    requeued: HashMap<JobKey, Vec<jobs::Requeued>>,
    /// Generations this process wrote that the jobs do not show yet.
    written_gen: HashMap<JobKey, crate::inplace::Generation>,
    nodes: nodes::NodeBook,
    /// Which jobs heard of which skip reason lately.
    skip_notices: skip_notices::SkipNotices,
    hang: hang::HangBook,
    status: status::StatusBook,
    next_id: EffectId,
    /// Effects in flight, with when they were sent: an outcome that never
    /// comes (a request that hangs, a lost answer) counts as a failure
    /// after [`OUTCOME_TIMEOUT`], and the step is retried (every step is
    /// idempotent against what the cluster shows).
    inflight: HashMap<EffectId, (Waiting, DateTime<Utc>)>,
    /// Jobs and nodes to reconcile at the end of the step.
    dirty_jobs: BTreeSet<JobKey>,
    dirty_nodes: BTreeSet<String>,
    metrics: Metrics,
    clusterd: Option<ClusterdView>,
    progress_keys: ProgressKeys,
    decisions: Option<tokio::sync::broadcast::Sender<Arc<crate::policy::Decision>>>,
    last_status: Option<DateTime<Utc>>,
    last_resync: Option<DateTime<Utc>>,
    last_scan: Option<DateTime<Utc>>,
    /// The wall time of the step under way.
    clock: DateTime<Utc>,
    out: Vec<Effect>,
    /// What the adversarial simulation counts of the core's work.
    #[cfg(test)]
    pub(super) probe: Probe,
}

/// Work of the core that its promises bound, counted for the adversarial
/// simulation (tests/adversary).
#[cfg(test)]
#[derive(Debug, Default)]
pub(super) struct Probe {
    /// Decisions taken again of a tenant's occurrence that was not
    /// waiting for one (a tenant's fault entering a rescan: each costs a
    /// classification, and a tenant has up to thousands of them).
    pub redecided_untrusted: u64,
}

/// How long an effect may stay without an outcome before it counts as
/// failed (the executor bounds each request well below this).
pub const OUTCOME_TIMEOUT: Duration = Duration::from_secs(60);

/// The latest an effect may still land on the API server after the core
/// emitted it, its answer unknown: the executor gives a request up by
/// [`OUTCOME_TIMEOUT`] (45 s in fact), and a server that took it before
/// may still apply it within its own request timeout (kube-apiserver's
/// `--request-timeout`, 60 s by default). The breaker counts a cordon it
/// has no answer for at this bound, not at the moment it left.
pub const LANDING_BOUND: Duration = Duration::from_secs(120);

impl Core {
    /// A core with nothing observed yet.
    pub fn new(
        cfg: CoreConfig,
        metrics: Metrics,
        clusterd: Option<ClusterdView>,
        progress_keys: ProgressKeys,
    ) -> Core {
        let mut engine = Engine::new(&cfg.root, cfg.node_default.clone(), 0);
        engine.global_dry_run = cfg.dry_run;
        Core {
            cfg,
            engine,
            store: Store::default(),
            ledger: Ledger::default(),
            current: HashMap::default(),
            carriers: HashMap::default(),
            unseen: unseen_jobs::UnseenJobs::default(),
            synced: HashSet::default(),
            kinds: None,
            leading: false,
            term: 0,
            recoveries: HashMap::default(),
            fresh: fresh::FreshRead::default(),
            validations: validation::ValidationBook::default(),
            releasing: HashMap::default(),
            recorded: HashMap::default(),
            written_gen: HashMap::default(),
            unmade: HashMap::default(),
            requeued: HashMap::default(),
            nodes: nodes::NodeBook::default(),
            skip_notices: skip_notices::SkipNotices::default(),
            hang: hang::HangBook::default(),
            status: status::StatusBook::default(),
            next_id: 1,
            inflight: HashMap::default(),
            dirty_jobs: BTreeSet::new(),
            dirty_nodes: BTreeSet::new(),
            metrics,
            clusterd,
            progress_keys,
            decisions: None,
            last_status: None,
            last_resync: None,
            last_scan: None,
            clock: DateTime::<Utc>::UNIX_EPOCH,
            out: Vec::new(),
            #[cfg(test)]
            probe: Probe::default(),
        }
    }

    /// Send every decision to `tx` (in-process observers: the demo's
    /// timeline, tests). Cheap when nobody listens.
    pub fn observe_decisions(
        &mut self,
        tx: tokio::sync::broadcast::Sender<Arc<crate::policy::Decision>>,
    ) {
        self.decisions = Some(tx);
    }

    /// Whether every watch the decisions read has delivered its first list
    /// (job kinds included). A later relist (after a 410, a restarted
    /// watch) pauses only what reads its kind ([`Self::relisting_for`]):
    /// a cluster-wide Events relist must not hold every recovery.
    pub fn ready(&self) -> bool {
        const BASE: [Watched; 7] = [
            Watched::Pods,
            Watched::Nodes,
            Watched::Events,
            Watched::DeviceInfo,
            Watched::Policies,
            Watched::Classifications,
            Watched::Kinds,
        ];
        let Some(kinds) = &self.kinds else {
            return false;
        };
        BASE.iter().all(|w| self.synced.contains(w))
            && kinds
                .iter()
                .all(|k| self.synced.contains(&Watched::Jobs(*k)))
    }

    /// Whether a relist is under way of a kind that a decision about a job
    /// of `kind` (any kind: `None`) reads: its pods, the nodes, the
    /// policies and classifications, and the job objects. Events and
    /// device-plugin ConfigMaps only carry faults: their relists pause
    /// nothing.
    pub(super) fn relisting_for(&self, kind: Option<crate::api::WorkloadKind>) -> bool {
        let r = &self.store.relists;
        [
            Watched::Pods,
            Watched::Nodes,
            Watched::Policies,
            Watched::Classifications,
        ]
        .iter()
        .any(|w| r.is_open(*w))
            || match kind {
                Some(k) => r.is_open(Watched::Jobs(k)),
                None => r.any_jobs_open(),
            }
    }

    /// Whether this replica leads (as last told).
    pub fn leading(&self) -> bool {
        self.leading
    }

    /// Whether the core may act now: ready and leading.
    fn acting(&self) -> bool {
        self.leading && self.ready()
    }

    /// Recoveries under way (tests, metrics).
    pub fn recoveries(&self) -> usize {
        self.recoveries.len()
    }

    /// The ledger (property tests check invariants over it).
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Effects in flight (tests).
    pub fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    /// Handle one input; returns the effects to carry out.
    pub fn step(&mut self, input: Input, now: Now) -> Vec<Effect> {
        self.clock = now.wall;
        let was_ready = self.ready();
        let was_acting = self.acting();
        let mut retake = false;
        match input {
            Input::Pod(c) => self.on_pod(c, now),
            Input::Node(c) => self.on_node(c, now),
            Input::Event(c) => self.on_event(c, now),
            Input::DeviceInfo(c) => self.on_device_info(c, now),
            Input::Dra(c) => self.on_dra(c, now),
            Input::Policy(c) => self.on_policy(c, now),
            Input::Classification(c) => self.on_classification(c, now),
            Input::Job(kind, c) => self.on_job(kind, c, now),
            Input::JobKinds(kinds) => self.on_job_kinds(kinds, now),
            Input::WatchError(name) => {
                self.metrics
                    .watch_restarts
                    .get_or_create(&crate::metrics::KindLabels {
                        kind: name.to_string(),
                    })
                    .inc();
            }
            Input::Done(id, outcome) => self.on_done(id, outcome, now),
            Input::Leader(l, term) => {
                let new_term = l && term != self.term;
                if self.leading && (!l || new_term) {
                    self.end_term(now);
                }
                self.leading = l;
                self.term = term;
                self.metrics.leader.set(i64::from(l));
                // Leading still, in a new term: take over afresh below.
                retake = new_term && was_acting;
            }
            Input::Tick => {
                self.on_tick(now);
                self.fresh_tick(now);
                self.dra_tick(now);
            }
            Input::Records { term, kind, jobs } => self.on_records(term, kind, jobs, now),
            Input::Nodes { term, nodes } => self.on_nodes(term, nodes, now),
        }
        if !was_ready && self.ready() {
            tracing::info!(
                occurrences = self.current.len(),
                "initial lists complete; deciding faults seen at start-up"
            );
            self.engine.breaker.total_nodes = self.store.nodes.len() as u32;
        }
        if (!was_acting || retake) && self.acting() {
            self.take_over(now);
        }
        self.reconcile_dirty(now);
        std::mem::take(&mut self.out)
    }

    fn effect(&mut self, kind: EffectKind, received: Option<Instant>) -> EffectId {
        let id = self.next_id;
        self.next_id += 1;
        self.out.push(Effect {
            id,
            kind,
            received,
            trace: None,
            term: self.term,
        });
        id
    }

    /// An effect whose outcome is routed back to `w`.
    fn effect_for(&mut self, w: Waiting, kind: EffectKind, received: Option<Instant>) -> EffectId {
        let id = self.effect(kind, received);
        self.inflight.insert(id, (w, self.clock));
        id
    }

    fn on_done(&mut self, id: EffectId, outcome: Outcome, now: Now) {
        let Some((w, _)) = self.inflight.remove(&id) else {
            return;
        };
        self.metrics.request("action", outcome.is_ok());
        match w {
            Waiting::Job(key) => self.job_done(&key, id, outcome, now),
            Waiting::Release(key) => self.release_done(&key, id, outcome, now),
            Waiting::SideDelete(key, pods) => self.side_delete_done(&key, pods, id, outcome, now),
            Waiting::Node(name) => self.node_done(&name, id, outcome, now),
            Waiting::Status(target, text) => self.status.written(&target, text, outcome.is_ok()),
            Waiting::AgentAccess(ns) => self.agent_access_done(ns, outcome, now),
            Waiting::AgentAccessSweep => self.agent_access_swept(),
            Waiting::Validation(job) => self.validation_done(&job, outcome, now),
        }
    }
}

#[cfg(test)]
mod tests;
