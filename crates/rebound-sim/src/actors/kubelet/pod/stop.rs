//! How a pod's containers end: exits under the restart rules and
//! policies, kills, in-place restarts on the agent's verdicts, the pod's
//! terminal phase and its deletion.

use std::time::Instant;

use k8s_openapi::jiff::Timestamp;

use crate::actors::kubelet::spec::{Kind, OnExit};
use rebound::inplace::Verdict;

use super::{CState, Effect, KILLED, PodRun, Slot, Stage, Term, Timing};

impl PodRun {
    /// A container's running instance exited with `code` (observed from
    /// the runtime, or the agent's own exit): applies the restart rules and
    /// policies. Returns whether anything changed.
    pub(crate) fn exited(
        &mut self,
        name: &str,
        code: i32,
        reason: &str,
        now: Instant,
        t: Timing<'_>,
        out: &mut Vec<Effect>,
    ) -> bool {
        let Some(s) = self.slot(name) else {
            return false;
        };
        if !matches!(self.run_of(s).state, CState::Running { .. }) || self.stage == Stage::Done {
            return false;
        }
        self.terminate(s, code, reason, now, t, out);
        self.advance(now, t, out);
        true
    }

    pub(super) fn terminate(
        &mut self,
        s: Slot,
        code: i32,
        reason: &str,
        now: Instant,
        t: Timing<'_>,
        out: &mut Vec<Effect>,
    ) {
        let spec = self.spec_of(s).clone();
        let run = self.run_of(s);
        let CState::Running { since, .. } = &run.state else {
            return;
        };
        let term = Term {
            code,
            reason: reason.to_owned(),
            started: *since,
            finished: Timestamp::now(),
            id: run.id.clone(),
        };
        run.state = CState::Terminated {
            term,
            restart_at: None,
        };
        if spec.agent.is_some() {
            out.push(Effect::StopAgent);
        }
        if matches!(self.stage, Stage::Killing { .. } | Stage::Stopping { .. }) {
            return;
        }
        match spec.on_exit(&self.spec.restart_policy, code) {
            OnExit::RestartAll => self.begin_in_place(now, t, out),
            OnExit::Restart => {
                if let CState::Terminated { restart_at, .. } = &mut self.run_of(s).state {
                    *restart_at = Some(now + t.restart_delay);
                }
            }
            OnExit::Stay => {
                if spec.kind == Kind::Init && code != 0 {
                    // An init container failed under restartPolicy Never.
                    self.finish(now, "Failed", out);
                }
            }
        }
    }

    /// `RestartAllContainers`: kill every container, keeping the sandbox.
    fn begin_in_place(&mut self, now: Instant, t: Timing<'_>, out: &mut Vec<Effect>) {
        self.restarting = true;
        // The kubelet's restart backoff applies to repeated in-place
        // restarts (KEP-5532): the first at once, then `backoff` doubling
        // to `backoff_max`, forgotten after twice `backoff_max` without one.
        let window = t.costs.backoff_max * 2;
        if self
            .last_in_place
            .is_some_and(|l| now.saturating_duration_since(l) >= window)
        {
            self.in_place_restarts = 0;
        }
        let wait = t.costs.restart_backoff(self.in_place_restarts);
        self.in_place_restarts = self.in_place_restarts.saturating_add(1);
        self.last_in_place = Some(now);
        self.stage = Stage::Killing {
            until: now + t.costs.kill + wait,
        };
        for c in self.init.iter_mut().chain(self.main.iter_mut()) {
            if let CState::Running { ready, .. } = &mut c.state {
                *ready = false;
            }
        }
        if self.spec.init.iter().any(|c| c.agent.is_some()) {
            out.push(Effect::StopAgent);
        }
    }

    /// Every container is dead and removed; the pod starts again from its
    /// first init container, its previous run kept as `lastState`.
    pub(super) fn finish_kill(&mut self) {
        let now = Timestamp::now();
        for c in self.init.iter_mut().chain(self.main.iter_mut()) {
            let prev = match std::mem::replace(&mut c.state, CState::Waiting) {
                CState::Running { since, .. } => Some(Term {
                    code: KILLED,
                    reason: "Error".into(),
                    started: since,
                    finished: now,
                    id: c.id.clone(),
                }),
                CState::Terminated { term, .. } => Some(term),
                CState::Waiting | CState::Creating { .. } => None,
            };
            if prev.is_some() {
                c.last = prev;
            }
        }
        self.restarting = false;
        self.in_place = true;
        self.stage = self.first_stage();
    }

    /// The containers of a deleted pod stopped within its grace period
    /// (SIGTERM: 143), and the pod is terminal: Failed, unless it had
    /// finished already.
    pub(super) fn stop_deleted(&mut self) {
        let ts = Timestamp::now();
        for c in self.init.iter_mut().chain(self.main.iter_mut()) {
            if let CState::Running { since, .. } = &c.state {
                c.state = CState::Terminated {
                    term: Term {
                        code: 143,
                        reason: "Error".into(),
                        started: *since,
                        finished: ts,
                        id: c.id.clone(),
                    },
                    restart_at: None,
                };
            } else if let CState::Terminated { restart_at, .. } = &mut c.state {
                *restart_at = None;
            }
        }
        if self.terminal.is_none() {
            self.terminal = Some("Failed");
        }
    }

    /// Every regular container ended and none restarts: the pod is
    /// terminal; its sidecars are stopped.
    pub(super) fn check_terminal(&mut self, now: Instant, out: &mut Vec<Effect>) -> bool {
        if self.main.is_empty() {
            return false;
        }
        let mut all_ok = true;
        for c in &self.main {
            match &c.state {
                CState::Terminated {
                    term,
                    restart_at: None,
                } => all_ok &= term.code == 0,
                _ => return false,
            }
        }
        self.finish(now, if all_ok { "Succeeded" } else { "Failed" }, out);
        true
    }

    fn finish(&mut self, _now: Instant, phase: &'static str, out: &mut Vec<Effect>) {
        let ts = Timestamp::now();
        let mut agent = false;
        for (c, spec) in self
            .init
            .iter_mut()
            .zip(&self.spec.init)
            .chain(self.main.iter_mut().zip(&self.spec.main))
        {
            if let CState::Running { since, .. } = &c.state {
                agent |= spec.agent.is_some();
                c.state = CState::Terminated {
                    term: Term {
                        code: 0,
                        reason: "Completed".into(),
                        started: *since,
                        finished: ts,
                        id: c.id.clone(),
                    },
                    restart_at: None,
                };
            } else if let CState::Terminated { restart_at, .. } = &mut c.state {
                *restart_at = None;
            }
        }
        if agent {
            out.push(Effect::StopAgent);
        }
        self.terminal = Some(phase);
        self.stage = Stage::Done;
    }

    /// The agent of run `run` decided: its startup probe follows, and an
    /// exit terminates the container with its code.
    pub(crate) fn agent_verdict(
        &mut self,
        run: u64,
        verdict: Verdict,
        now: Instant,
        t: Timing<'_>,
        out: &mut Vec<Effect>,
    ) -> bool {
        if run != self.agent_run {
            return false;
        }
        let Some(i) = self.spec.init.iter().position(|c| c.agent.is_some()) else {
            return false;
        };
        let code = match &self.spec.init[i].agent {
            Some(Ok(w)) => w.args.exit_code,
            _ => return false,
        };
        let name = self.spec.init[i].name.clone();
        let changed = match (&mut self.init[i].state, verdict) {
            (CState::Running { .. }, Verdict::Exit) => {
                return self.exited(&name, code, "Error", now, t, out);
            }
            (CState::Running { started, ready, .. }, v) => {
                let open = v == Verdict::Open;
                let changed = *started != open || *ready != open;
                *started = open;
                *ready = open;
                changed
            }
            _ => false,
        };
        if changed {
            self.advance(now, t, out);
        }
        changed
    }

    /// The pod was deleted: stop its containers, then confirm.
    pub(crate) fn delete(&mut self, now: Instant, t: Timing<'_>, out: &mut Vec<Effect>) {
        if self.delete_sent || matches!(self.stage, Stage::Stopping { .. }) {
            return;
        }
        if self.stage == Stage::Done {
            self.delete_sent = true;
            out.push(Effect::Delete);
            return;
        }
        if self.spec.init.iter().any(|c| c.agent.is_some()) {
            out.push(Effect::StopAgent);
        }
        self.stage = Stage::Stopping {
            until: now + t.costs.stop.min(self.spec.grace),
        };
        self.advance(now, t, out);
    }
}
