//! One pod on its simulated node: the kubelet's view of its containers
//! (what a real kubelet learns from its container runtime), advanced
//! through the start sequence with the modelled costs, and changed by
//! container exits, the restart agent's verdicts and deletion. Pure: time
//! comes in as an argument, effects (start or stop an in-process agent,
//! confirm a deletion) go out as values; [`super::status`] renders the API
//! status from it.
//!
//! The sequence follows the real kubelet:
//! - a fresh pod: device allocation and sandbox (the pod gets its IP and
//!   `PodReadyToStartContainers`), then init containers in order — a
//!   regular one runs to completion before the next starts, a sidecar
//!   (`restartPolicy: Always`) starts and the next container waits for its
//!   startup probe (the restart agent's probe is its barrier) — then every
//!   regular container; each container start pays image + start, and
//!   `ready` until its probe succeeds;
//! - `RestartAllContainers` (KEP-5532): the pod's containers are killed
//!   without grace (`AllContainersRestarting` is True meanwhile), then run
//!   again from the first init container in the same sandbox, every
//!   `restartCount` + 1, the previous run kept as `lastState`;
//!   `Initialized` stays True, the phase is Pending until the regular
//!   containers run again (KEP-5532, "Pod Phase");
//! - a single container's restart (its rule `Restart`, or the restart
//!   policy) waits `restart_delay`, then pays image + start;
//! - a deleted pod stops its containers (`stop`, at most the grace
//!   period), then the kubelet confirms the deletion.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;

use super::costs::PodCosts;
use super::spec::{AgentWiring, ContainerSpec, Kind, OnExit, PodSpecView};
use crate::actors::util::container_id;
use rebound::inplace::Verdict;

/// Exit code of a container killed by the kubelet (SIGKILL).
pub(crate) const KILLED: i32 = 137;

/// The timings a pod is advanced with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing<'a> {
    /// Start and stop costs.
    pub costs: &'a PodCosts,
    /// Delay before a single container's restart.
    pub restart_delay: Duration,
}

/// What the kubelet loop must do for a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Effect {
    /// The agent container started: run a fresh in-process agent; its
    /// verdicts come back tagged with `run`.
    StartAgent {
        /// This run of the agent container.
        run: u64,
        /// What it follows (boxed: an effect is mostly small).
        wiring: Box<AgentWiring>,
    },
    /// The agent container stopped: stop its in-process agent.
    StopAgent,
    /// The containers of a deleted pod stopped: confirm the deletion.
    Delete,
}

/// A terminated container instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Term {
    pub code: i32,
    pub reason: String,
    pub started: Timestamp,
    pub finished: Timestamp,
    pub id: String,
}

/// A container's current state in the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CState {
    /// Not created yet.
    Waiting,
    /// Image being checked, container being created and started.
    Creating { until: Instant },
    /// Running; `started`/`ready` follow its probes.
    Running {
        since: Timestamp,
        started: bool,
        ready: bool,
        started_due: Option<Instant>,
        ready_due: Option<Instant>,
        /// A regular init container completes then.
        done_due: Option<Instant>,
    },
    /// Exited; restarted at `restart_at` if set.
    Terminated {
        term: Term,
        restart_at: Option<Instant>,
    },
}

/// A container of the pod in the runtime.
#[derive(Debug, Clone)]
pub(crate) struct CRun {
    pub state: CState,
    pub last: Option<Term>,
    pub restarts: i32,
    instances: u32,
    pub id: String,
}

impl CRun {
    fn new() -> CRun {
        CRun {
            state: CState::Waiting,
            last: None,
            restarts: 0,
            instances: 0,
            id: String::new(),
        }
    }
}

/// Where the pod is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Devices and sandbox being set up.
    Admitting { until: Instant },
    /// Bringing up init container `i`.
    Init(usize),
    /// Regular containers started (or starting).
    Main,
    /// Killing every container for an in-place restart.
    Killing { until: Instant },
    /// Stopping the containers of a deleted pod.
    Stopping { until: Instant },
    /// Finished (terminal phase, or deletion confirmed).
    Done,
}

static POD_IP: AtomicU32 = AtomicU32::new(0);

/// A pod IP from 10.244.0.0/14, unique within the process.
fn next_pod_ip() -> String {
    let n = POD_IP.fetch_add(1, Ordering::Relaxed);
    std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(10, 244, 0, 2)) + n).to_string()
}

/// Which container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Init(usize),
    Main(usize),
}

/// One pod on its node.
#[derive(Debug, Clone)]
pub(crate) struct PodRun {
    pub spec: PodSpecView,
    pub stage: Stage,
    pub init: Vec<CRun>,
    pub main: Vec<CRun>,
    pub pod_ip: Option<String>,
    pub host_ip: String,
    pub start_time: Timestamp,
    /// Initialized once; stays so through in-place restarts.
    pub initialized: bool,
    /// Re-initialising after an in-place restart.
    pub in_place: bool,
    /// `AllContainersRestarting` is True.
    pub restarting: bool,
    /// `Succeeded` or `Failed` once terminal.
    pub terminal: Option<&'static str>,
    /// The current run of the agent container (verdicts of older runs are
    /// stale).
    pub agent_run: u64,
    /// In-place restarts of this pod within the backoff window, and when
    /// the last one began (KEP-5532 restart backoff).
    in_place_restarts: u32,
    last_in_place: Option<Instant>,
    delete_sent: bool,
}

impl PodRun {
    /// A pod just admitted on its node: devices, sandbox and the extra
    /// `start_delay` come first.
    pub(crate) fn new(
        spec: PodSpecView,
        host_ip: String,
        now: Instant,
        costs: &PodCosts,
        start_delay: Duration,
    ) -> PodRun {
        let init = spec.init.iter().map(|_| CRun::new()).collect();
        let main = spec.main.iter().map(|_| CRun::new()).collect();
        PodRun {
            spec,
            stage: Stage::Admitting {
                until: now + costs.devices + costs.sandbox + start_delay,
            },
            init,
            main,
            pod_ip: None,
            host_ip,
            start_time: Timestamp::now(),
            initialized: false,
            in_place: false,
            restarting: false,
            terminal: None,
            agent_run: 0,
            in_place_restarts: 0,
            last_in_place: None,
            delete_sent: false,
        }
    }

    fn spec_of(&self, s: Slot) -> &ContainerSpec {
        match s {
            Slot::Init(i) => &self.spec.init[i],
            Slot::Main(i) => &self.spec.main[i],
        }
    }

    fn run_of(&mut self, s: Slot) -> &mut CRun {
        match s {
            Slot::Init(i) => &mut self.init[i],
            Slot::Main(i) => &mut self.main[i],
        }
    }

    fn slot(&self, name: &str) -> Option<Slot> {
        if let Some(i) = self.spec.init.iter().position(|c| c.name == name) {
            return Some(Slot::Init(i));
        }
        self.spec
            .main
            .iter()
            .position(|c| c.name == name)
            .map(Slot::Main)
    }

    /// The container ID of `name`'s running instance, if it runs: an
    /// observed status that shows this instance terminated is an exit.
    pub(crate) fn running_id(&self, name: &str) -> Option<&str> {
        let run = match self.slot(name)? {
            Slot::Init(i) => &self.init[i],
            Slot::Main(i) => &self.main[i],
        };
        matches!(run.state, CState::Running { .. }).then_some(run.id.as_str())
    }

    /// The earliest time something is due.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        let mut due: Option<Instant> = None;
        let mut at = |t: Option<Instant>| {
            if let Some(t) = t {
                due = Some(due.map_or(t, |d| d.min(t)));
            }
        };
        match self.stage {
            // Containers wait while the stage's own step runs.
            Stage::Admitting { until } | Stage::Killing { until } | Stage::Stopping { until } => {
                return Some(until);
            }
            Stage::Done => return None,
            Stage::Init(_) | Stage::Main => {}
        }
        for c in self.init.iter().chain(&self.main) {
            match &c.state {
                CState::Creating { until } => at(Some(*until)),
                CState::Running {
                    started_due,
                    ready_due,
                    done_due,
                    ..
                } => {
                    at(*started_due);
                    at(*ready_due);
                    at(*done_due);
                }
                CState::Terminated { restart_at, .. } => at(*restart_at),
                CState::Waiting => {}
            }
        }
        due
    }

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

    fn first_stage(&self) -> Stage {
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

    fn terminate(
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
    fn finish_kill(&mut self) {
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

    /// Every regular container ended and none restarts: the pod is
    /// terminal; its sidecars are stopped.
    fn check_terminal(&mut self, now: Instant, out: &mut Vec<Effect>) -> bool {
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

#[cfg(test)]
mod tests;
