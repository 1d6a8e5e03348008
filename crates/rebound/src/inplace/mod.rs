//! In-place restarts (docs/in-place.md): a job's restart generation lives
//! in two annotations on the job object (and a label derived from them,
//! [`STATE_LABEL`], that the agents' watches select on, so that the job's
//! other writes do not reach them); a small agent in every pod of the
//! job (`rebound restart-agent`, a native sidecar) follows them, exits with
//! a code that the pod's `RestartAllContainers` rule matches when its pod
//! is behind, and holds the worker containers back through its startup
//! probe until rebound releases the generation (a barrier, so that all
//! ranks start together).
//!
//! This module is the contract between the controller, the agent, `rebound
//! inject` and the simulated kubelet: names, annotation keys and the
//! agent's pure decision ([`AgentCore`]). [`agent`] runs that decision
//! against the API server; [`restart_agent`] is the `rebound
//! restart-agent` command around it.

pub mod agent;
pub mod agent_binding;
pub mod restart_agent;

pub mod admission;
pub mod inject;
pub mod inject_cli;
pub mod inject_pod;
pub mod job_ref;

/// Annotation on the job: the generation every pod of the job must run.
/// Absent means 0. Written by the controller with the restart record.
pub const GENERATION_ANNOTATION: &str = "rebound.dev/restart-generation";
/// Annotation on the job: the newest generation whose barrier is lifted.
/// Absent means 0. A generation is released once every pod of the job
/// waits at the barrier (or at once, for a restart that recreates pods).
pub const RELEASED_ANNOTATION: &str = "rebound.dev/restart-released";
/// Label on the job: `<generation>-<released>`, written with the two
/// annotations in the same patch. It exists so the agents can watch for a
/// change of the generation only: a watch cannot select on annotations, and
/// without it every status write of the job's operator (about a thousand
/// during one restart of a 1,024-pod Volcano Job) reached every agent of the
/// job. Each agent watches with a selector that excludes the state it has
/// seen ([`watch_selector`]), so the job matches again, and an event is
/// sent, only when rebound moves the generation. The annotations stay the
/// truth the agent decides on; the label only filters.
pub const STATE_LABEL: &str = "rebound.dev/restart-state";
/// The name of the agent's container (an init container with
/// `restartPolicy: Always`). The controller recognises wired pods by it and
/// by its `RestartAllContainers` rule.
pub const AGENT_CONTAINER: &str = "rebound-restart-agent";
/// The agent's exit code that the pod's restart rule matches, unless
/// `rebound inject --exit-code` chose another one (the controller reads the
/// code from the rule, never assumes it).
///
/// 87 is none of the codes the agent's container can end with when it
/// fails ([`exit_code_conflict`]): a failing agent must never be read as
/// "restart every container of the pod".
pub const DEFAULT_EXIT_CODE: i32 = 87;

/// Why `code` cannot be the agent's restart exit code, if it cannot: the
/// `RestartAllContainers` rule matches the code alone, so a code the agent
/// also ends with when it fails would turn a crash, a kill or a bad flag
/// into a restart of the whole pod (and of its job's ranks). Refused: 0
/// and out of 1-255 (never seen), 1 (an error returned from `main`), 2
/// (a command-line error), 101 (a Rust panic), 126-127 (the shell's "not
/// executable" and "not found"), 128-192 (killed by a signal, 128 + its
/// number: 137 SIGKILL, 143 SIGTERM, 139 SIGSEGV, real-time signals up to
/// 64) and 255 (`exit(-1)`).
pub fn exit_code_conflict(code: i32) -> Option<&'static str> {
    match code {
        i32::MIN..=0 | 256..=i32::MAX => {
            Some("not a process exit status that restarts (1-255; 0 is a clean exit)")
        }
        1 => Some("the agent's own error exit"),
        2 => Some("the agent's command-line error exit"),
        101 => Some("a Rust panic's exit"),
        126 | 127 => Some("the shell's exit for a command not executable or not found"),
        128..=192 => Some("the exit of a process killed by a signal (128 + the signal)"),
        255 => Some("the exit of exit(-1)"),
        _ => None,
    }
}

/// Parse an exit code for the agent's rule, refusing [`exit_code_conflict`]s.
pub fn parse_exit_code(s: &str) -> Result<i32, String> {
    let code: i32 = s
        .trim()
        .parse()
        .map_err(|e| format!("{s:?} is not an exit code: {e}"))?;
    match exit_code_conflict(code) {
        Some(why) => Err(format!("{code} cannot be the restart exit code: {why}")),
        None => Ok(code),
    }
}
/// The port of the agent's startup probe (`GET /barrier`).
pub const DEFAULT_PROBE_PORT: u16 = 9079;
/// The path of the agent's startup probe: 200 once the barrier is lifted,
/// 503 while it holds.
pub const PROBE_PATH: &str = "/barrier";

/// A job's restart generation as its annotations show it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Generation {
    /// [`GENERATION_ANNOTATION`].
    pub current: u64,
    /// [`RELEASED_ANNOTATION`].
    pub released: u64,
}

impl Generation {
    /// Read from a job's annotations; absent or unreadable values are 0,
    /// so a job that was never restarted has no barrier.
    pub fn from_annotations(a: &std::collections::BTreeMap<String, String>) -> Generation {
        let read = |k: &str| {
            a.get(k)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        Generation {
            current: read(GENERATION_ANNOTATION),
            released: read(RELEASED_ANNOTATION),
        }
    }
}

impl Generation {
    /// The value of [`STATE_LABEL`] for this generation.
    pub fn label_value(&self) -> String {
        format!("{}-{}", self.current, self.released)
    }

    /// The job's metadata as rebound writes it for this generation: both
    /// annotations and [`STATE_LABEL`], for one merge patch. Every writer
    /// of the generation (the controller, tests, the simulated cluster)
    /// uses it, so the label never lags the annotations.
    pub fn metadata_patch(&self) -> serde_json::Value {
        serde_json::json!({
            "annotations": {
                GENERATION_ANNOTATION: self.current.to_string(),
                RELEASED_ANNOTATION: self.released.to_string(),
            },
            "labels": { STATE_LABEL: self.label_value() },
        })
    }

    /// The metadata of the merge patch that lifts the barrier of
    /// `generation`, the job's current one: [`RELEASED_ANNOTATION`] and the
    /// label of the state it leaves (`<generation>-<generation>`).
    pub fn release_patch(generation: u64) -> serde_json::Value {
        serde_json::json!({
            "annotations": { RELEASED_ANNOTATION: generation.to_string() },
            "labels": { STATE_LABEL: format!("{generation}-{generation}") },
        })
    }
}

/// The label selector of an agent's watch once it has seen its job with
/// [`STATE_LABEL`] `seen` (`None`: absent) and generation `g`: the job
/// matches, and an event arrives, only when the label differs from what
/// was seen. A job rebound never restarted has no label and matches once
/// it gets one. A job with a generation but no label (written by something
/// other than this version of rebound) is watched unfiltered, which is
/// costly but never misses a change.
pub fn watch_selector(seen: Option<&str>, g: Generation) -> Option<String> {
    match seen {
        Some(v) => Some(format!("{STATE_LABEL}!={v}")),
        None if g == Generation::default() => Some(STATE_LABEL.to_owned()),
        None => None,
    }
}

/// What the agent does after an observation of its job's generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Keep the barrier closed: the worker containers wait.
    Hold,
    /// The barrier is (or stays) open: the worker containers run.
    Open,
    /// Exit with the restart code: the kubelet restarts every container of
    /// the pod in place (the pod is behind the job's generation).
    Exit,
}

/// The agent's decision, pure. One instance lives as long as one run of
/// the agent container; an in-place restart starts a fresh one.
///
/// - The first observation fixes the generation this run belongs to; the
///   barrier is open if that generation is released already (a job never
///   restarted, a pod created by a recreate) and holds otherwise (a pod
///   restarted in place, or a replacement created during a recovery).
/// - While the barrier holds, a newer generation is adopted without a
///   restart (the workers have not started yet), and the barrier opens
///   once the adopted generation is released.
/// - Once open, a newer generation means this pod is behind: exit.
#[derive(Clone, Debug, Default)]
pub struct AgentCore {
    generation: Option<u64>,
    open: bool,
}

impl AgentCore {
    /// A run that has observed nothing yet (its barrier holds).
    pub fn new() -> AgentCore {
        AgentCore::default()
    }

    /// The generation this run belongs to, once observed.
    pub fn generation(&self) -> Option<u64> {
        self.generation
    }

    /// Whether the barrier is open.
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Open the barrier without an observation: the agent could not read
    /// its job at all (no RBAC, no object) and must not keep the training
    /// from running forever. Until it reads its job, in-place restarts do
    /// not reach this pod and the controller's fallback recreates it.
    pub fn fail_open(&mut self) {
        self.open = true;
    }

    /// Decide after observing the job's generation.
    pub fn observe(&mut self, g: Generation) -> Verdict {
        let Some(mine) = self.generation else {
            self.generation = Some(g.current);
            // A run that failed open has its workers running already.
            self.open = self.open || g.released >= g.current;
            return if self.open {
                Verdict::Open
            } else {
                Verdict::Hold
            };
        };
        if self.open {
            return if g.current > mine {
                Verdict::Exit
            } else {
                Verdict::Open
            };
        }
        let mine = mine.max(g.current);
        self.generation = Some(mine);
        if g.released >= mine {
            self.open = true;
            Verdict::Open
        } else {
            Verdict::Hold
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(current: u64, released: u64) -> Generation {
        Generation { current, released }
    }

    #[test]
    fn a_job_never_restarted_has_no_barrier() {
        let mut a = AgentCore::new();
        assert!(!a.is_open());
        assert_eq!(a.observe(g(0, 0)), Verdict::Open);
        assert_eq!(a.observe(g(0, 0)), Verdict::Open);
        assert_eq!(a.generation(), Some(0));
    }

    #[test]
    fn a_running_pod_behind_the_generation_exits_and_its_next_run_waits_for_the_release() {
        let mut a = AgentCore::new();
        assert_eq!(a.observe(g(3, 3)), Verdict::Open);
        assert_eq!(
            a.observe(g(4, 3)),
            Verdict::Exit,
            "behind: restart in place"
        );
        // The restarted container is a new run.
        let mut b = AgentCore::new();
        assert_eq!(b.observe(g(4, 3)), Verdict::Hold, "barrier");
        assert_eq!(b.observe(g(4, 3)), Verdict::Hold);
        assert_eq!(b.observe(g(4, 4)), Verdict::Open, "released");
        assert_eq!(b.observe(g(4, 4)), Verdict::Open);
    }

    #[test]
    fn a_newer_generation_while_waiting_is_adopted_not_restarted() {
        let mut a = AgentCore::new();
        assert_eq!(a.observe(g(4, 3)), Verdict::Hold);
        // A second fault during the recovery: generation 5.
        assert_eq!(a.observe(g(5, 3)), Verdict::Hold);
        assert_eq!(a.generation(), Some(5));
        // Releasing 4 is not enough for a run that adopted 5.
        assert_eq!(a.observe(g(5, 4)), Verdict::Hold);
        assert_eq!(a.observe(g(5, 5)), Verdict::Open);
    }

    #[test]
    fn a_pod_created_by_a_recreate_starts_at_once() {
        // A recreate writes the generation released.
        let mut a = AgentCore::new();
        assert_eq!(a.observe(g(6, 6)), Verdict::Open);
    }

    #[test]
    fn an_old_observation_after_the_first_changes_nothing() {
        // A watch that replays an older state (relist from a cache).
        let mut a = AgentCore::new();
        assert_eq!(a.observe(g(4, 4)), Verdict::Open);
        assert_eq!(a.observe(g(3, 3)), Verdict::Open);
        let mut b = AgentCore::new();
        assert_eq!(b.observe(g(4, 3)), Verdict::Hold);
        assert_eq!(
            b.observe(g(2, 2)),
            Verdict::Hold,
            "older state keeps holding"
        );
        assert_eq!(b.generation(), Some(4));
    }

    #[test]
    fn failing_open_lets_the_workers_run() {
        let mut a = AgentCore::new();
        a.fail_open();
        assert!(a.is_open());
        // Its workers run: the first observation fixes the run's
        // generation without closing the barrier again...
        assert_eq!(a.observe(g(1, 0)), Verdict::Open);
        // ...and a newer one restarts it as usual.
        assert_eq!(a.observe(g(2, 1)), Verdict::Exit);
    }

    #[test]
    fn annotations_are_read_leniently() {
        let a: std::collections::BTreeMap<String, String> = [
            (GENERATION_ANNOTATION.to_string(), " 7 ".to_string()),
            (RELEASED_ANNOTATION.to_string(), "x".to_string()),
        ]
        .into();
        assert_eq!(Generation::from_annotations(&a), g(7, 0));
        assert_eq!(Generation::from_annotations(&Default::default()), g(0, 0));
    }
}
