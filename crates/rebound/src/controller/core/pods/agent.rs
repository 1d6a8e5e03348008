//! The in-place agent of a pod as the core reads it: whether it is wired
//! (template or admission), its phase, and the exit code that asks for a
//! restart (docs/in-place.md).

use crate::inplace;

/// The in-place agent container of a pod (docs/in-place.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AgentStatus {
    /// The exit code its `RestartAllContainers` rule matches.
    pub exit_code: i32,
    /// What its container status says.
    pub phase: AgentPhase,
    /// Who put the agent into the pod.
    pub wiring: Wiring,
}

/// How a pod got its restart agent: what decisions and Events say about a
/// job's wiring (docs/in-place.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Wiring {
    /// From the job's pod template (`rebound inject`, or written by hand).
    Template,
    /// Added when the pod was created, by rebound's MutatingAdmissionPolicy
    /// (its agent carries [`inplace::admission::WIRED_BY_ENV`]).
    Admission,
}

impl Wiring {
    /// How the agent of `spec` came there (call on a wired pod).
    pub fn of(spec: &k8s_openapi::api::core::v1::PodSpec) -> Wiring {
        let admission = spec
            .init_containers
            .iter()
            .flatten()
            .filter(|c| c.name == inplace::AGENT_CONTAINER)
            .flat_map(|c| c.env.iter().flatten())
            .any(|e| {
                e.name == inplace::admission::WIRED_BY_ENV
                    && e.value.as_deref() == Some(inplace::admission::WIRED_BY_ADMISSION)
            });
        if admission {
            Wiring::Admission
        } else {
            Wiring::Template
        }
    }
}

/// Where a pod's agent stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentPhase {
    /// Running, startup probe passed: the barrier is open, workers run.
    Past,
    /// Running, startup probe not passed: waiting at the barrier.
    Waiting,
    /// Not running (terminated, waiting to start, no status yet).
    Down,
}

impl AgentPhase {
    pub(super) fn of(status: Option<&k8s_openapi::api::core::v1::ContainerStatus>) -> AgentPhase {
        match status {
            Some(s) if s.state.as_ref().is_some_and(|st| st.running.is_some()) => {
                if s.started == Some(true) {
                    AgentPhase::Past
                } else {
                    AgentPhase::Waiting
                }
            }
            _ => AgentPhase::Down,
        }
    }
}

/// The in-place wiring of a pod spec: the agent init container with
/// `restartPolicy: Always` and a `RestartAllContainers` rule on an exit
/// code (`In` with one value, as `rebound inject` writes it). The code is
/// read from the rule, never assumed.
pub fn agent_exit_code(spec: &k8s_openapi::api::core::v1::PodSpec) -> Option<i32> {
    let c = spec
        .init_containers
        .iter()
        .flatten()
        .find(|c| c.name == inplace::AGENT_CONTAINER)?;
    if c.restart_policy.as_deref() != Some("Always") {
        return None;
    }
    c.restart_policy_rules.iter().flatten().find_map(|r| {
        let codes = r.exit_codes.as_ref()?;
        (r.action == "RestartAllContainers" && codes.operator == "In")
            .then(|| codes.values.iter().flatten().next().copied())
            .flatten()
    })
}
