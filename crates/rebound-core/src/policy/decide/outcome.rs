//! What a decision says: the actions on a job or a node, or the [`Skip`]
//! that explains why nothing is done. Stable names (they appear in Events
//! and metrics), kept apart from how they are reached.

use serde::Serialize;

/// What to do to a job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "action")]
pub enum JobAction {
    /// Delete all pods of the job (Volcano: a RestartJob Command).
    RestartJob { preserve_logs: Option<(u32, u32)> },
    /// Delete one pod (graded escalation's first step).
    RestartPod {
        pod: String,
        preserve_logs: Option<(u32, u32)>,
    },
}

/// What to do to a node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "action")]
pub enum NodeAction {
    Cordon,
    Taint { key: String },
}

/// Why nothing (more) is done. Stable names: they appear in Events and
/// metrics.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "skip")]
pub enum Skip {
    LevelIgnore,
    NoPolicy,
    GateFalse,
    GateError {
        error: String,
    },
    ActionNone,
    RestartPolicyNever,
    Cooldown {
        remaining_secs: u64,
    },
    CooldownError {
        error: String,
    },
    BudgetExhausted {
        used: u32,
        max: u32,
    },
    WaitingForPodRestart {
        remaining_secs: u64,
    },
    DryRun,
    BreakerOpen {
        used: u32,
        allowed: u32,
    },
    Untrusted,
    NodeActionsDisabled,
    AlreadyApplied,
    /// The restart would exhaust the job's own retry limit (batch Job
    /// `backoffLimit`, Volcano `maxRetry`, JobSet `maxRestarts`) and the
    /// policy says to leave the job then.
    RetryLimit {
        field: String,
        remaining: i64,
    },
    /// The pod exited with a code its job's operator treats as final (it
    /// ends the job itself), and the policy says to leave the job then.
    FinalExit {
        why: String,
    },
}

impl Skip {
    /// Every [`Skip::name`], in declaration order (metric label values
    /// known in advance; a test checks it against `name`).
    pub const NAMES: [&'static str; 17] = [
        "LevelIgnore",
        "NoPolicy",
        "GateFalse",
        "GateError",
        "ActionNone",
        "RestartPolicyNever",
        "Cooldown",
        "CooldownError",
        "BudgetExhausted",
        "WaitingForPodRestart",
        "DryRun",
        "BreakerOpen",
        "Untrusted",
        "NodeActionsDisabled",
        "AlreadyApplied",
        "RetryLimit",
        "FinalExit",
    ];

    /// Skips of a node's decision only, never of a job's.
    pub const NODE_ONLY: [&'static str; 3] =
        ["BreakerOpen", "NodeActionsDisabled", "AlreadyApplied"];

    /// The stable CamelCase name (Event reasons, metric labels).
    pub fn name(&self) -> &'static str {
        match self {
            Skip::LevelIgnore => "LevelIgnore",
            Skip::NoPolicy => "NoPolicy",
            Skip::GateFalse => "GateFalse",
            Skip::GateError { .. } => "GateError",
            Skip::ActionNone => "ActionNone",
            Skip::RestartPolicyNever => "RestartPolicyNever",
            Skip::Cooldown { .. } => "Cooldown",
            Skip::CooldownError { .. } => "CooldownError",
            Skip::BudgetExhausted { .. } => "BudgetExhausted",
            Skip::WaitingForPodRestart { .. } => "WaitingForPodRestart",
            Skip::DryRun => "DryRun",
            Skip::BreakerOpen { .. } => "BreakerOpen",
            Skip::Untrusted => "Untrusted",
            Skip::NodeActionsDisabled => "NodeActionsDisabled",
            Skip::AlreadyApplied => "AlreadyApplied",
            Skip::RetryLimit { .. } => "RetryLimit",
            Skip::FinalExit { .. } => "FinalExit",
        }
    }
}

/// The decision for one job.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobDecision {
    pub job: String,
    pub policy: Option<String>,
    pub shadowed: Vec<(String, String)>,
    /// The action taken, or that would have been taken in dry run.
    pub action: Option<JobAction>,
    pub skip: Option<Skip>,
    /// The restart counts as infrastructure (free of the budget by default).
    pub infrastructure: bool,
    pub reasons: Vec<String>,
}

impl JobDecision {
    /// Whether the controller should act.
    pub fn acts(&self) -> bool {
        self.action.is_some() && self.skip.is_none()
    }
}

/// The decision for the fault's node.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeDecision {
    pub node: String,
    pub actions: Vec<NodeAction>,
    pub skip: Option<Skip>,
    pub config_from: String,
    pub reasons: Vec<String>,
}

impl NodeDecision {
    /// Whether the controller should act.
    pub fn acts(&self) -> bool {
        !self.actions.is_empty() && self.skip.is_none()
    }
}
