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
use super::spec::{AgentWiring, ContainerSpec, PodSpecView};

mod start;
mod stop;

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
}

#[cfg(test)]
mod tests;
