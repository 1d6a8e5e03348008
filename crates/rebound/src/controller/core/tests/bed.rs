//! The test bed the scenario tests share: a core against a model cluster,
//! pumped until quiet, with every effect it emitted kept for assertions.

use super::super::Core;
use super::super::effect::{Effect, EffectKind};
use super::super::input::Input;
use super::model::{self, KINDS, Model};
use serde_json::Value;

/// A core against a model cluster, with every effect it emitted.
pub(super) struct Bed {
    pub(super) m: Model,
    pub(super) core: Core,
    pub(super) queue: Vec<Effect>,
    pub(super) log: Vec<Effect>,
    /// Effects the API server refuses (answered 503) while this says so.
    pub(super) refuse: fn(&EffectKind) -> bool,
}

impl Bed {
    /// A cluster of 4 nodes and 2 JobSets of 2 pods, the root policy
    /// `spec` (the model's default when `None`), a leading core.
    pub(super) fn new(spec: Option<Value>) -> Bed {
        Bed::on(Model::new(4, 2, 2), spec)
    }

    /// [`Bed::new`] on the model cluster `m`.
    pub(super) fn on(mut m: Model, spec: Option<Value>) -> Bed {
        if let Some(s) = spec {
            m.policy = s;
        }
        let mut b = Bed {
            m,
            core: model::core(),
            queue: Vec::new(),
            log: Vec::new(),
            refuse: |_| false,
        };
        let mut ins = b.m.startup();
        ins.push(Input::Leader(true, 1));
        b.feed(ins);
        b.answer_reads();
        b
    }

    /// Answer the take-over's fresh reads at once (a bed starts led).
    pub(super) fn answer_reads(&mut self) {
        let (reads, rest): (Vec<Effect>, Vec<Effect>) = std::mem::take(&mut self.queue)
            .into_iter()
            .partition(|e| e.kind.is_fresh_read());
        self.queue = rest;
        for e in reads {
            let _ = self.m.apply(&e);
        }
        let answers: Vec<Input> = self.m.answers.drain(..).collect();
        self.feed(answers);
    }

    pub(super) fn feed(&mut self, inputs: Vec<Input>) {
        for i in inputs {
            let now = self.m.now();
            for e in self.core.step(i, now) {
                if matches!(e.kind, EffectKind::Decision(_)) {
                    continue;
                }
                self.log.push(e.clone());
                self.queue.push(e);
            }
        }
    }

    /// Deliver every watch change, carry out every effect, until nothing
    /// moves (time stands still).
    pub(super) fn pump(&mut self) {
        for _ in 0..50 {
            let mut moved = false;
            for k in KINDS {
                let ins = self.m.deliver(k, 10_000);
                moved |= !ins.is_empty();
                self.feed(ins);
            }
            let effects = std::mem::take(&mut self.queue);
            moved |= !effects.is_empty();
            for e in effects {
                let o = if (self.refuse)(&e.kind) {
                    super::super::effect::Outcome::Failed("503".into())
                } else {
                    self.m.apply(&e)
                };
                self.feed(vec![Input::Done(e.id, o)]);
            }
            if !moved {
                return;
            }
        }
    }

    /// Let `secs` pass (ticking every second), pumping along.
    pub(super) fn pass(&mut self, secs: i64) {
        for _ in 0..secs {
            self.m.t += 1;
            self.feed(vec![Input::Tick]);
            self.pump();
        }
    }

    /// Effects emitted so far matching `f`.
    pub(super) fn count(&self, f: impl Fn(&EffectKind) -> bool) -> usize {
        self.log.iter().filter(|e| f(&e.kind)).count()
    }

    /// The notes of the Events with `reason` written about job `job`.
    pub(super) fn job_notes(&self, job: &str, reason: &str) -> Vec<String> {
        self.log
            .iter()
            .filter_map(|e| match &e.kind {
                EffectKind::Event {
                    about: super::super::effect::About::Job(j),
                    notice,
                } if j.name == job && notice.reason == reason => Some(notice.note.clone()),
                _ => None,
            })
            .collect()
    }

    pub(super) fn restarts(&self) -> usize {
        self.count(|k| matches!(k, EffectKind::RestartJob { .. }))
    }

    pub(super) fn cordons(&self) -> usize {
        self.count(|k| matches!(k, EffectKind::Cordon { .. }))
    }

    /// The pods of job `j`, by name.
    pub(super) fn pods_of(&self, j: &str) -> Vec<(String, String)> {
        self.m
            .pods
            .values()
            .filter(|p| p["metadata"]["labels"][model::JOBSET_NAME] == j)
            .map(|p| {
                (
                    p["metadata"]["name"].as_str().unwrap_or("").to_string(),
                    p["metadata"]["uid"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    }

    /// Index of the first running pod of job `j` in the model's order.
    pub(super) fn pod_index(&self, j: &str) -> usize {
        self.m
            .pods
            .iter()
            .filter(|(_, p)| p["status"]["phase"] == "Running")
            .position(|(_, p)| p["metadata"]["labels"][model::JOBSET_NAME] == j)
            .unwrap_or(0)
    }
}
