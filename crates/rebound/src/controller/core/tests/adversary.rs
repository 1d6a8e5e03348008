//! An adversarial, deterministic simulation of the recovery core (issue
//! 27): the pure state machine driven, not a cluster. Each schedule is
//! drawn from a seed and replays exactly from it. Actors: two replicas
//! with lease lapses and take-overs; API answers that fail (409, 429,
//! 5xx), time out or get lost after being applied; watch relists and
//! 410s; carriers rewritten; and tenants that copy trusted faults into
//! Events, flood Events with huge counts and messages, name ghost pods and
//! crash-loop jobs. The invariants ([`invariants`]) are checked after
//! every step.
//!
//! `cargo test -p rebound --lib adversary` runs [`SCHEDULES`] schedules
//! (`REBOUND_SIM_SCHEDULES` to change, `REBOUND_SIM_SEED` to replay one)
//! and prints their count and time past the test's output capture. A
//! failing seed is printed; keep it in [`REGRESSIONS`].

use super::super::Core;
use super::super::effect::{Effect, EffectKind, Outcome};
use super::super::input::Input;
use super::model::{self, FaultEvent, KINDS, Model};
use proptest::prelude::Rng;
use proptest::test_runner::{RngAlgorithm, TestRng};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

mod actors;
mod invariants;
mod restarts;

/// Schedules per CI run (a debug build runs about 10 a second per core).
pub const SCHEDULES: u64 = 1000;
/// Steps per schedule.
pub const STEPS: usize = 80;
/// Seeds that once failed, replayed first, without the added draws (they
/// were found before those existed, and replay their schedule without).
pub const REGRESSIONS: &[u64] = &[
    // A cordon applied 304 s after it was sent, its answer lost (an
    // actor the product cannot meet), and the breaker counting a cordon
    // of unknown fate from when it left rather than when it may land.
    1592590747,
    // A job restarted for an app XID, then restarted again 6 s later by a
    // new leader for a repeat of it that had happened before the first
    // restart: the repeat was dated by when the leader first read the
    // line (a watch behind), so the job's new pods looked hit by it.
    1592590341,
    // Found by the first draft of the lagging take-over (its schedules
    // drew differently): a new leader whose nodes' watch was behind the
    // old leader's cordons let a third node be cordoned (the breaker was
    // read from the nodes' watch alone; a new term now reads the nodes
    // afresh before it cordons, fresh.rs).
    1592590494,
    // Same draft: the fresh read never answered, the jobs' watch minutes
    // behind when the read's bound passed, so the new leader restarted an
    // occurrence the old one had restarted. Past the bound the product
    // decides from the watch; the simulation now has the watch catch up
    // by then (Sim::catch_up_by).
    200067,
    // Found with the nodes' watch lagging too (and the core's hash maps
    // keyed alike on every run, so that a seed replays): a leader whose
    // term lapsed and came back right after it wrote an in-place record
    // its jobs' watch had not shown yet did not follow the generation it
    // had raised (resumed from the watch's records only; now from the
    // records it wrote too).
    1592590909,
];

/// Seeds that once failed with the added draws (the outages and the ten
/// minute cooldown), replayed with them after [`REGRESSIONS`].
pub const REGRESSIONS_WITH_OUTAGES: &[u64] = &[
    // A restart whose delete kept failing through an outage went back to
    // waiting, but its record (written at once with the delete) stayed on
    // the job: a second record for the same occurrence when it was decided
    // again, and a later leader would have read the fault as handled. The
    // record is now taken back.
    1592590338,
    // A ReplaceFaulty restart whose record had restarted the healthy pods
    // in place, then whose deletes kept failing, counted as never made:
    // decided again within its cooldown.
    1592590370,
    // The taking back of such a record failed too: the next record on the
    // job now takes it back in the same patch.
    1592590976,
    // A restart whose delete's answer was lost (it landed, late) was
    // taken for never made and its record taken back: the job restarted
    // again within its cooldown. A requeued restart is now judged from
    // the cluster once its last request can no longer land.
    1592591109,
    // A term that lapsed dropped its recovery but kept "acted on" for an
    // occurrence whose tenant Event was deleted at the time; listed again,
    // it came back as acted on and was never decided (a fault lost).
    7000415,
];

/// The tenant namespace with no jobs of its own: anything it makes rebound
/// do to `ml`'s jobs or to a node is a violation.
pub const EVIL: &str = "evil";

/// The state of one schedule: the model cluster, two replicas, what is
/// in flight, the tenants' Events, and what the invariants remember.
pub(super) struct Sim {
    pub m: Model,
    pub cores: Vec<Core>,
    pub leader: Option<usize>,
    pub term: u64,
    /// Effects sent and not answered: (replica, effect, model time sent).
    pub inflight: Vec<(usize, Effect, i64)>,
    pub wired: bool,
    /// Fault Events present, by namespace/name.
    pub events: BTreeMap<String, FaultEvent>,
    /// Nodes that carried a trusted fault at some time (a cordon or a
    /// pod moved off one is justified only there).
    pub ever_faulty: BTreeSet<String>,
    /// Nodes whose trusted faults, in one episode, were at a cordoning
    /// level at some time (XID 79 or 48, or XID 13 repeated on one GPU
    /// before the node's faults cleared): only these may be cordoned.
    pub cordonable: BTreeSet<String>,
    /// Pods that failed (a pod-first delete of one is its own job's).
    pub failed_pods: BTreeSet<String>,
    /// Model times at which a controller died with part of its requests
    /// sent.
    pub partial_deaths: Vec<i64>,
    rng: TestRng,
    /// An API brownout: answers to this kind of request fail until then.
    pub brownout: Option<(&'static str, i64)>,
    /// What happened, for the report of a failing seed.
    pub trace: Vec<String>,
    /// The restarts made, for the cooldown invariant.
    pub restarts: restarts::Restarts,
    /// The answer of the last fresh read applied ([`EffectKind::ReadRecords`]):
    /// fed to its replica when the answer arrives, dropped when it is lost.
    pub read: Vec<Input>,
    /// A take-over left the jobs' or nodes' watch behind what the old term wrote:
    /// by this model time (the take-over's [`super::super::fresh::FRESH_BOUND`])
    /// it has caught up. Past the bound a kind that could not be read is
    /// decided from its watch, so a watch behind by more than that is
    /// beyond what the product promises.
    pub catch_up_by: Option<i64>,
    /// Each replica's process, counted up when it restarts.
    pub processes: [u64; 2],
    /// The policy's cooldown (model seconds): [`model::COOLDOWN`], or ten
    /// minutes in a third of the schedules (longer than a recovery's
    /// retries, so that a restart whose record never lands is still
    /// within its cooldown when the recovery gives up).
    pub cooldown: i64,
    /// Draws of what schedules after [`REGRESSIONS`] add (the cooldown,
    /// outages): a stream of its own, so that a kept seed replays the
    /// schedule it failed with. `None` for a kept seed.
    extra: Option<TestRng>,
}

fn destructive(e: &Effect) -> bool {
    matches!(
        e.kind,
        EffectKind::RestartJob { .. }
            | EffectKind::DeletePods { .. }
            | EffectKind::Record { .. }
            | EffectKind::Release { .. }
            | EffectKind::Cordon { .. }
            | EffectKind::Uncordon { .. }
            | EffectKind::MarkBudgetExhausted { .. }
    )
}

impl Sim {
    /// The schedule of `seed`; `outages`: with the added draws (all but
    /// the seeds of [`REGRESSIONS`]).
    pub fn new(seed: u64, outages: bool) -> Sim {
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&seed.to_le_bytes());
        let mut rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
        let wired = rng.next_u64().is_multiple_of(2);
        let mut extra = outages.then(|| {
            let mut b = bytes;
            b[8] = 0xe7;
            TestRng::from_seed(RngAlgorithm::ChaCha, &b)
        });
        let long = extra
            .as_mut()
            .is_some_and(|x| x.next_u64().is_multiple_of(3));
        let cooldown = if long { 600 } else { model::COOLDOWN };
        let mut m = Model::new(4, 2, 2);
        m.policy["cooldown"] = serde_json::json!(format!("{cooldown}s"));
        if wired {
            m.policy["restart"] = serde_json::json!({"tiers": ["InPlace", "ReplaceFaulty", "Recreate"], "fallbackAfter": "30s"});
            m.wire_all();
            for q in m.queues.values_mut() {
                q.clear();
            }
        }
        let mut s = Sim {
            m,
            cores: vec![model::core(), model::core()],
            leader: Some(0),
            term: 1,
            inflight: Vec::new(),
            wired,
            events: BTreeMap::new(),
            ever_faulty: BTreeSet::new(),
            cordonable: BTreeSet::new(),
            failed_pods: BTreeSet::new(),
            partial_deaths: Vec::new(),
            rng,
            brownout: None,
            trace: Vec::new(),
            restarts: Default::default(),
            read: Vec::new(),
            catch_up_by: None,
            processes: [0, 0],
            cooldown,
            extra,
        };
        let ins = s.m.startup();
        s.feed(ins);
        s.tell_leadership();
        s
    }

    /// A number below `n`.
    pub fn pick(&mut self, n: u64) -> u64 {
        self.rng.next_u64() % n.max(1)
    }

    /// A number below `n` from the added draws (`None` for a kept seed).
    pub fn pick_extra(&mut self, n: u64) -> Option<u64> {
        self.extra.as_mut().map(|x| x.next_u64() % n.max(1))
    }

    pub fn tell_leadership(&mut self) {
        for i in 0..self.cores.len() {
            let l = self.leader == Some(i);
            self.feed_to(i, vec![Input::Leader(l, self.term)]);
        }
    }

    pub fn feed(&mut self, inputs: Vec<Input>) {
        for i in 0..self.cores.len() {
            self.feed_to(i, inputs.clone());
        }
    }

    pub fn feed_to(&mut self, r: usize, inputs: Vec<Input>) {
        for i in inputs {
            let now = self.m.now();
            let tick = matches!(i, Input::Tick);
            let (acting, redecided) = (
                self.cores[r].acting(),
                self.cores[r].probe.redecided_untrusted,
            );
            let out = self.cores[r].step(i, now);
            // A tick decides again only what waits (and the trusted
            // faults that last): a tenant's occurrences never enter the
            // rescan (each costs a classification; a tenant holds up to
            // thousands). A take-over decides everything once.
            assert!(
                !(tick && acting && self.cores[r].acting())
                    || self.cores[r].probe.redecided_untrusted == redecided,
                "a tick of replica {r} decided {} tenant occurrence(s) again that waited for nothing\n{}",
                self.cores[r].probe.redecided_untrusted - redecided,
                self.tail()
            );
            for e in out {
                assert!(
                    !destructive(&e) || (self.leader == Some(r) && e.term == self.term),
                    "an action without current leadership (replica {r}): {e:?}"
                );
                if matches!(e.kind, EffectKind::Decision(_)) {
                    continue;
                }
                self.judge_effect(r, &e);
                self.note_owner(r, &e);
                let t = self.m.t;
                self.inflight.push((r, e, t));
            }
        }
    }

    /// Carry out an effect as the executor does (fenced by its term).
    pub fn apply(&mut self, r: usize, e: &Effect) -> Outcome {
        if destructive(e) && (self.leader != Some(r) || e.term != self.term) {
            return Outcome::NotLeader;
        }
        let disrupts = self.disrupts(e);
        let o = self.m.apply(e);
        self.read = std::mem::take(&mut self.m.answers).into();
        if destructive(e) || e.kind.is_fresh_read() {
            let what = match &e.kind {
                EffectKind::Record { job, write, .. } => format!(
                    "Record {} occurrence {:?} at {}",
                    job.name, write.record.occurrence, write.record.at
                ),
                EffectKind::RestartJob { job, .. } => format!("RestartJob {}", job.name),
                EffectKind::Cordon { node, .. } => format!("Cordon {node}"),
                EffectKind::Uncordon { node, .. } => format!("Uncordon {node}"),
                other => {
                    let mut w = format!("{other:?}");
                    w.truncate(100);
                    w
                }
            };
            self.trace
                .push(format!("  r{r} term {} applied: {what} -> {o:?}", e.term));
        }
        self.note_records();
        if let (Outcome::Ok(_), Some(what)) = (&o, disrupts) {
            self.landed(r, e, what);
        }
        o
    }

    /// Requests older than [`LANDING_BOUND`] never land: the executor gave
    /// them up, and the API server applies what it took within its own
    /// request timeout. (Applying one later would be a world the product
    /// does not live in: seed 1592590747 applied cordons 304 s late.)
    pub fn expire(&mut self) {
        let bound = super::super::LANDING_BOUND.as_secs() as i64;
        let now = self.m.t;
        self.inflight.retain(|(_, _, at)| now - at <= bound);
    }

    /// Carry out an effect and answer it: a fresh read's records arrive,
    /// then its outcome.
    pub fn answer(&mut self, r: usize, e: &Effect) -> Outcome {
        let o = self.apply(r, e);
        let read = std::mem::take(&mut self.read);
        self.feed_to(r, read);
        o
    }

    /// Time passes: `secs` later, a tick. Watches left behind by a
    /// take-over catch up by [`Sim::catch_up_by`].
    pub fn advance(&mut self, secs: i64) {
        self.m.t += secs;
        if self.catch_up_by.is_some_and(|t| self.m.t >= t) {
            self.catch_up_by = None;
            for k in [model::Kind::Jobs, model::Kind::Nodes] {
                let ins = self.m.deliver(k, 10_000);
                self.feed(ins);
            }
            self.trace.push(format!("t={} watches caught up", self.m.t));
        }
        self.feed(vec![Input::Tick]);
    }

    /// Deliver every queued watch change to every replica.
    pub fn deliver_all(&mut self) {
        for k in KINDS {
            let ins = self.m.deliver(k, 10_000);
            self.feed(ins);
        }
    }
}

/// Run one schedule; `Err` names the invariant broken and the trace.
pub(super) fn run(seed: u64, outages: bool) -> Result<(), String> {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut s = Sim::new(seed, outages);
        for _ in 0..STEPS {
            s.act();
            s.check();
        }
        s.settle();
        s.check_settled();
    }));
    outcome.map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    })
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

#[test]
fn the_core_keeps_its_invariants_against_an_adversary() {
    // Quiet the panics of the schedules (each is caught and reported).
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let started = std::time::Instant::now();
    // (seed, with the added draws)
    let seeds: Vec<(u64, bool)> = match env_u64("REBOUND_SIM_SEED") {
        Some(s) => vec![(s, !REGRESSIONS.contains(&s))],
        None => {
            let n = env_u64("REBOUND_SIM_SCHEDULES").unwrap_or(SCHEDULES);
            let base = env_u64("REBOUND_SIM_BASE").unwrap_or(0x5eed_0000);
            let old = REGRESSIONS.iter().map(|s| (*s, false));
            let kept = REGRESSIONS_WITH_OUTAGES.iter().map(|s| (*s, true));
            old.chain(kept)
                .chain((0..n).map(|i| (base + i, true)))
                .collect()
        }
    };
    // Schedules are independent: spread over the cores, each thread
    // stopping at the first failure any thread found. The failing seed
    // reported is the lowest one found, and replays alone.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
    let stop = std::sync::atomic::AtomicBool::new(false);
    let ran = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..threads {
            let (seeds, stop, ran, failures) = (&seeds, &stop, &ran, &failures);
            s.spawn(move || {
                for (seed, outages) in seeds.iter().skip(t).step_by(threads) {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        return;
                    }
                    ran.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if let Err(why) = run(*seed, *outages) {
                        stop.store(true, std::sync::atomic::Ordering::Relaxed);
                        if let Ok(mut f) = failures.lock() {
                            f.push((*seed, why));
                        }
                    }
                }
            });
        }
    });
    let ran = ran.into_inner();
    let failed = failures
        .into_inner()
        .unwrap_or_default()
        .into_iter()
        .min_by_key(|(seed, _)| *seed);
    std::panic::set_hook(hook);
    let took = started.elapsed();
    let _ = writeln!(
        std::io::stderr(),
        "adversary: {ran} schedules of {STEPS} steps in {:.1} s{}",
        took.as_secs_f64(),
        match &failed {
            Some((seed, _)) => format!(", seed {seed} FAILED"),
            None => String::new(),
        }
    );
    if let Some((seed, why)) = failed {
        panic!(
            "seed {seed} breaks an invariant: {why}\nreplay: REBOUND_SIM_SEED={seed} cargo test -p rebound --lib adversary -- --nocapture\nkeep it in adversary::REGRESSIONS"
        );
    }
}
