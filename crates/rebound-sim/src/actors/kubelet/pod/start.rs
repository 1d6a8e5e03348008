//! A pod's start sequence: the transitions due by a given time, from
//! sandbox and init containers to the main containers running and ready.

use std::time::Instant;

use k8s_openapi::jiff::Timestamp;

use crate::actors::kubelet::spec::Kind;
use crate::actors::util::container_id;

use super::{CState, Effect, PodRun, Slot, Stage, Timing, next_pod_ip};

impl PodRun {
    /// Makes every transition due by `now`, each at its own time (a pod
    /// looked at late still starts its next step when the previous one
    /// ended, so the modelled costs add up exactly).
    pub(crate) fn advance(&mut self, now: Instant, t: Timing<'_>, out: &mut Vec<Effect>) {
        // Bounded: a pod has few containers and each instant few steps.
        for _ in 0..1024 {
            let at = match self.next_due() {
                Some(d) if d < now => d,
                _ => now,
            };
            let mut progressed = false;
            for _ in 0..256 {
                if !self.step(at, t, out) {
                    break;
                }
                progressed = true;
            }
            if at >= now || !progressed {
                break;
            }
        }
    }

    fn step(&mut self, now: Instant, t: Timing<'_>, out: &mut Vec<Effect>) -> bool {
        match self.stage {
            Stage::Done => false,
            Stage::Admitting { until } => {
                if now < until {
                    return false;
                }
                self.pod_ip = Some(next_pod_ip());
                self.stage = self.first_stage();
                true
            }
            Stage::Stopping { until } => {
                if now < until {
                    return false;
                }
                // As the kubelet does since 1.27: a deleted pod's stopped
                // containers and its terminal phase are written before the
                // object goes (the Job controller frees its tracking
                // finalizer only from a terminal phase).
                self.stop_deleted();
                self.stage = Stage::Done;
                if !self.delete_sent {
                    self.delete_sent = true;
                    out.push(Effect::Delete);
                }
                true
            }
            Stage::Killing { until } => {
                if now < until {
                    return false;
                }
                self.finish_kill();
                true
            }
            Stage::Init(i) => {
                if i >= self.init.len() {
                    self.stage = Stage::Main;
                    self.initialized = true;
                    return true;
                }
                let mut changed = false;
                for j in 0..=i {
                    changed |= self.drive(Slot::Init(j), now, t, out);
                }
                if self.init_done(i) {
                    self.stage = Stage::Init(i + 1);
                    changed = true;
                }
                changed
            }
            Stage::Main => {
                let mut changed = false;
                for j in 0..self.init.len() {
                    changed |= self.drive(Slot::Init(j), now, t, out);
                }
                for j in 0..self.main.len() {
                    changed |= self.drive(Slot::Main(j), now, t, out);
                }
                if self.in_place
                    && self
                        .main
                        .iter()
                        .all(|c| matches!(c.state, CState::Running { .. }))
                {
                    self.in_place = false;
                    changed = true;
                }
                changed | self.check_terminal(now, out)
            }
        }
    }

    pub(super) fn first_stage(&self) -> Stage {
        if self.init.is_empty() {
            Stage::Main
        } else {
            Stage::Init(0)
        }
    }

    fn init_done(&self, i: usize) -> bool {
        match (self.spec.init[i].kind, &self.init[i].state) {
            (Kind::Sidecar, CState::Running { started, .. }) => *started,
            (Kind::Sidecar, _) => false,
            (_, CState::Terminated { term, restart_at }) => term.code == 0 && restart_at.is_none(),
            _ => false,
        }
    }

    /// Moves one container on: creation, start, probes, completion, a due
    /// restart.
    fn drive(&mut self, s: Slot, now: Instant, t: Timing<'_>, out: &mut Vec<Effect>) -> bool {
        let c = t.costs;
        let spec = self.spec_of(s).clone();
        let mut agent_started = false;
        let mut bad_agent: Option<String> = None;
        let mut completed = false;
        let run = self.run_of(s);
        let changed = match &mut run.state {
            CState::Waiting => {
                run.state = CState::Creating {
                    until: now + c.image + c.start,
                };
                true
            }
            CState::Creating { until } if now >= *until => {
                run.instances += 1;
                if run.instances > 1 {
                    run.restarts += 1;
                }
                run.id = container_id();
                let probe_gated = spec.startup_probe && spec.agent.is_none();
                let started = !spec.startup_probe;
                let ready = started && !spec.readiness_probe;
                run.state = CState::Running {
                    since: Timestamp::now(),
                    started,
                    ready,
                    started_due: probe_gated.then_some(now + c.ready),
                    ready_due: (started && spec.readiness_probe).then_some(now + c.ready),
                    done_due: (spec.kind == Kind::Init).then_some(now + c.init),
                };
                match &spec.agent {
                    Some(Ok(_)) => agent_started = true,
                    Some(Err(e)) => bad_agent = Some(e.clone()),
                    None => {}
                }
                true
            }
            CState::Running {
                started,
                ready,
                started_due,
                ready_due,
                done_due,
                ..
            } => {
                let mut ch = false;
                if started_due.is_some_and(|d| now >= d) {
                    *started_due = None;
                    *started = true;
                    if spec.readiness_probe {
                        *ready_due = Some(now + c.ready);
                    } else {
                        *ready = true;
                    }
                    ch = true;
                }
                if ready_due.is_some_and(|d| now >= d) {
                    *ready_due = None;
                    *ready = true;
                    ch = true;
                }
                if done_due.is_some_and(|d| now >= d) {
                    completed = true;
                }
                ch
            }
            CState::Terminated {
                term,
                restart_at: Some(at),
            } if now >= *at => {
                run.last = Some(term.clone());
                run.state = CState::Creating {
                    until: now + c.image + c.start,
                };
                true
            }
            _ => false,
        };
        if agent_started && let Some(Ok(w)) = &spec.agent {
            self.agent_run += 1;
            out.push(Effect::StartAgent {
                run: self.agent_run,
                wiring: Box::new(w.clone()),
            });
        }
        if completed {
            self.terminate(s, 0, "Completed", now, t, out);
            return true;
        }
        if let Some(why) = bad_agent {
            // The real binary refuses its flags and exits with clap's 2.
            tracing::debug!(container = %spec.name, error = %why, "sim kubelet: restart agent cannot start");
            self.terminate(s, 2, "Error", now, t, out);
            return true;
        }
        changed
    }
}
