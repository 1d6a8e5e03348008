//! Property tests: random interleavings of faults, watch deliveries
//! (delayed, duplicated, relisted after a 410), failed and lost action
//! outcomes, leadership loss and take-over, and controller restarts. After
//! every step the invariants are checked:
//!
//! - no action without leadership;
//! - no destructive request on an object other than the one decided for
//!   (a restart deletes only pods of the job incarnation it was decided
//!   for; records land only on that incarnation);
//! - at most one restart per job and cooldown (a restart is one record on
//!   the job's incarnation), except right after a controller died between
//!   a restart's delete and its record (the window is a request);
//! - the breaker is never exceeded;
//! - at the end, with the controller leading and every watch delivered,
//!   every fault occurrence present is acted on, deliberately skipped with
//!   a reason, absorbed by a recovery, or pending (a cooldown).

use super::super::Core;
use super::super::effect::{Effect, EffectKind, Outcome};
use super::super::input::Input;
use super::model::{self, Applied, KINDS, Kind, Model};
use proptest::prelude::*;

/// One step of a scenario.
#[derive(Clone, Debug)]
enum Op {
    Deliver {
        kind: u8,
        n: u8,
    },
    Duplicate {
        kind: u8,
    },
    Relist {
        kind: u8,
    },
    FailPod {
        i: u8,
    },
    NodeFault {
        node: u8,
        code: u8,
    },
    NodeRewrite {
        node: u8,
    },
    NodeClear {
        node: u8,
    },
    Operator,
    Complete {
        i: u8,
        ok: bool,
    },
    /// The outcome of an effect is lost (the request was made).
    Lose {
        i: u8,
    },
    Leader(bool),
    /// The controller dies; each effect in flight was sent or not.
    Restart {
        sent: u8,
    },
    Tick {
        secs: u8,
    },
    RecreateJob {
        j: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..3, 1u8..6).prop_map(|(kind, n)| Op::Deliver { kind, n }),
        1 => (0u8..3).prop_map(|kind| Op::Duplicate { kind }),
        1 => (0u8..3).prop_map(|kind| Op::Relist { kind }),
        3 => any::<u8>().prop_map(|i| Op::FailPod { i }),
        2 => (0u8..4, 0u8..3).prop_map(|(node, code)| Op::NodeFault { node, code }),
        1 => (0u8..4).prop_map(|node| Op::NodeRewrite { node }),
        1 => (0u8..4).prop_map(|node| Op::NodeClear { node }),
        3 => Just(Op::Operator),
        5 => (any::<u8>(), prop::bool::weighted(0.8)).prop_map(|(i, ok)| Op::Complete { i, ok }),
        1 => any::<u8>().prop_map(|i| Op::Lose { i }),
        1 => any::<bool>().prop_map(Op::Leader),
        1 => any::<u8>().prop_map(|sent| Op::Restart { sent }),
        3 => (1u8..40).prop_map(|secs| Op::Tick { secs }),
        1 => (0u8..2).prop_map(|j| Op::RecreateJob { j }),
    ]
}

/// The controller under test and what it has in flight.
struct Run {
    m: Model,
    core: Core,
    leading: bool,
    inflight: Vec<Effect>,
    /// Model times at which a controller died with part of its requests
    /// sent (a restart's record may be lost then).
    partial_deaths: Vec<i64>,
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

impl Run {
    fn new() -> Run {
        let mut m = Model::new(4, 2, 2);
        let mut core = model::core();
        let mut run_inputs = m.startup();
        run_inputs.push(Input::Leader(true));
        let mut r = Run {
            m,
            core: model::core(),
            leading: true,
            inflight: Vec::new(),
            partial_deaths: Vec::new(),
        };
        std::mem::swap(&mut r.core, &mut core);
        r.feed(run_inputs);
        r
    }

    /// Step the core with each input; check that it acts only while leading.
    fn feed(&mut self, inputs: Vec<Input>) {
        for i in inputs {
            let now = self.m.now();
            let out = self.core.step(i, now);
            for e in out {
                assert!(
                    self.core.leading() || !destructive(&e),
                    "an action without leadership: {e:?}"
                );
                if matches!(e.kind, EffectKind::Decision(_)) {
                    continue;
                }
                self.inflight.push(e);
            }
        }
    }

    fn complete(&mut self, i: usize, ok: bool) {
        if self.inflight.is_empty() {
            return;
        }
        let e = self.inflight.remove(i % self.inflight.len());
        let outcome = if ok {
            self.m.apply(&e)
        } else {
            Outcome::Failed("500".into())
        };
        self.feed(vec![Input::Done(e.id, outcome)]);
    }

    fn op(&mut self, op: &Op) {
        let kind = |k: u8| KINDS[k as usize % KINDS.len()];
        match op {
            Op::Deliver { kind: k, n } => {
                let ins = self.m.deliver(kind(*k), *n as usize);
                self.feed(ins);
            }
            Op::Duplicate { kind: k } => {
                let ins = self.m.duplicate(kind(*k));
                self.feed(ins);
            }
            Op::Relist { kind: k } => {
                let ins = self.m.relist(kind(*k));
                self.feed(ins);
            }
            Op::FailPod { i } => self.m.fail_pod(*i as usize),
            Op::NodeFault { node, code } => {
                let code = ["79", "13", "48"][*code as usize % 3];
                self.m.node_fault(&format!("n{node}"), code);
            }
            Op::NodeRewrite { node } => self.m.write_node(&format!("n{node}")),
            Op::NodeClear { node } => self.m.node_clear(&format!("n{node}")),
            Op::Operator => self.m.operator(),
            Op::Complete { i, ok } => self.complete(*i as usize, *ok),
            Op::Lose { i } => {
                if !self.inflight.is_empty() {
                    let e = self.inflight.remove(*i as usize % self.inflight.len());
                    let _ = self.m.apply(&e);
                }
            }
            Op::Leader(l) => {
                self.leading = *l;
                self.feed(vec![Input::Leader(*l)]);
            }
            Op::Restart { sent } => {
                // Each request in flight was sent (applied, outcome lost)
                // or not, by the bits of `sent`.
                let mut partial = false;
                for (k, e) in std::mem::take(&mut self.inflight).into_iter().enumerate() {
                    if sent >> (k % 8) & 1 == 1 {
                        let _ = self.m.apply(&e);
                    } else {
                        partial |= destructive(&e);
                    }
                }
                if partial {
                    self.partial_deaths.push(self.m.t);
                }
                self.core = model::core();
                let mut ins = self.m.startup();
                ins.push(Input::Leader(self.leading));
                self.feed(ins);
            }
            Op::Tick { secs } => {
                self.m.t += i64::from(*secs);
                self.feed(vec![Input::Tick]);
            }
            Op::RecreateJob { j } => self.m.recreate_job(&format!("j{j}")),
        }
        self.check();
    }

    fn check(&self) {
        assert!(
            self.m.separations_in_window() <= model::MAX_SEPARATED,
            "breaker exceeded: {:?}",
            self.m.applied
        );
        for a in &self.m.applied {
            if let Applied::Restart {
                job,
                uid: Some(u),
                owners,
                ..
            } = a
            {
                assert!(
                    owners.iter().all(|o| o == u),
                    "restart of {job} (uid {u}) deleted pods of another incarnation: {owners:?}"
                );
            }
        }
        // Restarts (records appended) of one incarnation are a cooldown
        // apart, unless a controller died mid-restart in between.
        let mut by_uid: std::collections::BTreeMap<&str, Vec<i64>> = Default::default();
        for a in &self.m.applied {
            if let Applied::Record {
                uid,
                at,
                pod_only: false,
            } = a
            {
                by_uid.entry(uid).or_default().push(*at);
            }
        }
        for (uid, times) in by_uid {
            for w in times.windows(2) {
                let excused = self
                    .partial_deaths
                    .iter()
                    .any(|d| *d >= w[0] - 1 && *d <= w[1]);
                assert!(
                    w[1] - w[0] >= model::COOLDOWN || excused,
                    "job {uid} restarted at {} and {} within its {}s cooldown",
                    w[0],
                    w[1],
                    model::COOLDOWN
                );
            }
        }
    }

    /// Lead, deliver everything, let every effect succeed and time pass,
    /// until nothing moves.
    fn settle(&mut self) {
        if !self.leading {
            self.leading = true;
            self.feed(vec![Input::Leader(true)]);
        }
        for round in 0..60 {
            for k in KINDS {
                let ins = self.m.deliver(k, 10_000);
                self.feed(ins);
            }
            while !self.inflight.is_empty() {
                self.complete(0, true);
            }
            self.m.operator();
            let queued = self.m.queues.values().any(|q| !q.is_empty());
            if round > 20 && !queued && self.inflight.is_empty() {
                break;
            }
            self.m.t += 5;
            self.feed(vec![Input::Tick]);
            self.check();
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn the_core_keeps_its_invariants_under_any_interleaving(ops in prop::collection::vec(op(), 1..120)) {
        let mut r = Run::new();
        for o in &ops {
            r.op(o);
        }
        r.settle();
        assert!(r.core.ready(), "not ready after settling");
        // Every occurrence present has a fate: nothing is lost.
        for id in r.core.current.keys() {
            let fate = r.core.ledger().get(*id).map(|e| e.fate.clone());
            assert!(fate.is_some(), "occurrence {id} has no fate");
        }
        // Nothing stays in flight or half-done.
        assert_eq!(r.core.in_flight(), 0, "{:?} run: {:?}", r.core.inflight, r.inflight);
        let _ = Kind::Pods;
    }
}
