//! The decision: from a classified fault, the covering policy, the job's
//! restart history, the node and the breaker, what to do — or why not.

use super::breaker::Breaker;
use super::compile::{CompiledPolicy, Cooldown, NodeConfig};
use super::select::{PolicySet, WorkloadRef};
use crate::api::{PolicyAction, WorkloadKind};
use crate::expr::JobView;
use crate::fault::{Classified, Level};
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// One restart in a job's history (kept in annotations on the job).
///
/// The optional fields came with the recovery core's level-triggered
/// restarts; records written without them (older versions) still read.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RestartRecord {
    pub at: DateTime<Utc>,
    /// The restart was caused by a hardware level (free of the budget by
    /// default).
    #[serde(default)]
    pub infrastructure: bool,
    /// `true` for a single-pod restart of a graded escalation.
    #[serde(default)]
    pub pod_only: bool,
    /// The job's restart generation this restart started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
    /// How it was carried out (`InPlace`, `ReplaceFaulty`, `Recreate`,
    /// `Pod`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// A pod-only restart: the pod (`name/uid`), so that its recheck acts
    /// on that pod only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// Pods of the job when it was restarted: an in-place barrier waits
    /// for as many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<u32>,
}

/// A job as the decision sees it.
#[derive(Clone, Debug, Default)]
pub struct JobInput {
    pub kind: Option<WorkloadKind>,
    pub view: JobView,
    /// Labels of the failing pod, if the fault names one.
    pub pod_labels: BTreeMap<String, String>,
    /// Restart history, oldest first.
    pub history: Vec<RestartRecord>,
    /// The job (or the failing replica) has restart policy `Never`.
    pub restart_policy_never: bool,
    /// The job is Running again (graded escalation waits for this).
    pub running: bool,
}

/// A node as the decision sees it.
#[derive(Clone, Debug, Default)]
pub struct NodeInput {
    pub name: String,
    pub unschedulable: bool,
    /// The level at which rebound cordoned it, if rebound did.
    pub cordoned_by_rebound: Option<Level>,
    pub tainted: bool,
}

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
}

impl Skip {
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

/// Decide for the fault's node (cordon, taint), behind trust and breaker.
pub fn decide_node(
    c: &Classified,
    node: &NodeInput,
    cfg: &NodeConfig,
    config_from: String,
    breaker: &Breaker,
    dry_run: bool,
    now: DateTime<Utc>,
) -> NodeDecision {
    let mut d = NodeDecision {
        node: node.name.clone(),
        actions: Vec::new(),
        skip: None,
        config_from,
        reasons: Vec::new(),
    };
    if !c.level.cordons_node() {
        d.reasons
            .push(format!("level {} does not touch the node", c.level));
        return d;
    }
    let skip = |d: &mut NodeDecision, s: Skip, why: String| {
        d.reasons.push(why);
        d.skip = Some(s);
    };
    if !c.fault.trusted {
        skip(&mut d, Skip::Untrusted, "the fault came through a channel a tenant can write (an Event outside the root namespace); only Node conditions, device-plugin ConfigMaps and root-namespace Events may act on nodes".into());
        return d;
    }
    if !cfg.cordon {
        let why = format!("node actions are disabled by {}", d.config_from);
        skip(&mut d, Skip::NodeActionsDisabled, why);
        return d;
    }
    let want_taint = c.level == Level::Separate;
    let cordon_done = node.unschedulable;
    let taint_done = !want_taint || node.tainted;
    if cordon_done && taint_done {
        skip(
            &mut d,
            Skip::AlreadyApplied,
            format!(
                "node {} is already cordoned{}",
                node.name,
                if want_taint { " and tainted" } else { "" }
            ),
        );
        return d;
    }
    // A node already out of scheduling does not count against the breaker
    // again when only its taint is missing.
    if !cordon_done && !breaker.allows(now) {
        let used = breaker.used(now);
        let allowed = breaker.allowed();
        skip(
            &mut d,
            Skip::BreakerOpen { used, allowed },
            format!(
                "circuit breaker open: {used} of {allowed} nodes already separated within {}; the cordon is held",
                crate::api::duration::format(breaker.window)
            ),
        );
        d.actions.push(NodeAction::Cordon);
        return d;
    }
    if !cordon_done {
        d.actions.push(NodeAction::Cordon);
        d.reasons
            .push(format!("level {} cordons the node", c.level));
    }
    if want_taint && !node.tainted {
        d.actions.push(NodeAction::Taint {
            key: cfg.taint_key.clone(),
        });
        d.reasons.push(format!(
            "level Separate taints the node with {}:NoSchedule",
            cfg.taint_key
        ));
    }
    if dry_run {
        skip(
            &mut d,
            Skip::DryRun,
            "dry run: node actions recorded, not made".into(),
        );
    }
    d
}

/// Decide for one job affected by the fault.
pub fn decide_job(
    c: &Classified,
    job: &JobInput,
    policies: &PolicySet,
    global_dry_run: bool,
    now: DateTime<Utc>,
) -> JobDecision {
    let v = &job.view;
    let mut job_id = String::with_capacity(v.kind.len() + v.namespace.len() + v.name.len() + 2);
    for (i, part) in [&v.kind, &v.namespace, &v.name].into_iter().enumerate() {
        if i > 0 {
            job_id.push('/');
        }
        job_id.push_str(part);
    }
    let mut d = JobDecision {
        job: job_id,
        policy: None,
        shadowed: Vec::new(),
        action: None,
        skip: None,
        infrastructure: c.level.is_infrastructure(),
        reasons: Vec::new(),
    };
    fn skip(d: &mut JobDecision, s: Skip, why: String) -> JobDecision {
        d.reasons.push(why);
        d.skip = Some(s);
        std::mem::take(d)
    }
    if !c.level.restarts_jobs() {
        let why = format!("level {} does not restart jobs", c.level);
        return skip(&mut d, Skip::LevelIgnore, why);
    }
    if !c.fault.trusted
        && c.fault
            .namespace
            .as_deref()
            .is_some_and(|ns| ns != job.view.namespace)
    {
        return skip(
            &mut d,
            Skip::Untrusted,
            "an Event from another tenant's namespace cannot restart this job".into(),
        );
    }
    let Some(kind) = job.kind else {
        return skip(
            &mut d,
            Skip::NoPolicy,
            format!("unsupported workload kind {:?}", job.view.kind),
        );
    };
    let sel = policies.select(WorkloadRef {
        kind,
        namespace: &job.view.namespace,
        labels: &job.view.labels,
        pod_labels: Some(&job.pod_labels),
    });
    d.shadowed = sel.shadowed;
    let Some(p) = sel.chosen else {
        return skip(
            &mut d,
            Skip::NoPolicy,
            format!(
                "no RecoveryPolicy in {:?} or the root namespace covers this {}",
                job.view.namespace,
                kind.as_str()
            ),
        );
    };
    d.policy = Some(p.id());
    d.reasons.push(format!("policy {} covers it", p.id()));
    // CEL variables are bound only when the policy has CEL to evaluate, and
    // only those its expressions read.
    let needed = p
        .when
        .as_ref()
        .map(|w| w.vars())
        .unwrap_or_default()
        .union(match &p.cooldown {
            Cooldown::Cel(e) => e.vars(),
            Cooldown::Fixed(_) => Default::default(),
        });
    let view = needed.job.then(|| {
        let mut view = job.view.clone();
        view.restarts = job.history.iter().filter(|r| !r.pod_only).count() as i64;
        view.last_restart = job.history.last().map(|r| r.at);
        view
    });
    let scope = (needed != Default::default()).then(|| {
        crate::expr::Scope::build(needed, &c.fault, Some(c.level), view.as_ref(), None, now)
    });
    if let (Some(w), Some(scope)) = (&p.when, &scope) {
        match w.eval_bool_in(scope) {
            Ok(true) => d.reasons.push(format!("when `{}` is true", w.source())),
            Ok(false) => {
                let why = format!("when `{}` is false", w.source());
                return skip(&mut d, Skip::GateFalse, why);
            }
            Err(e) => {
                let why = format!("when `{}` failed ({e}); treated as false", w.source());
                return skip(
                    &mut d,
                    Skip::GateError {
                        error: e.to_string(),
                    },
                    why,
                );
            }
        }
    }
    if p.action == PolicyAction::None {
        return skip(
            &mut d,
            Skip::ActionNone,
            "the policy's action is None: recorded only".into(),
        );
    }
    if job.restart_policy_never {
        return skip(
            &mut d,
            Skip::RestartPolicyNever,
            "the job's restart policy is Never".into(),
        );
    }
    if let Some(last) = job.history.last() {
        let cooldown = match cooldown_of(&p, scope.as_ref()) {
            Ok(cd) => cd,
            Err(e) => {
                let why = format!("cooldown failed to evaluate ({e}); not restarting");
                return skip(&mut d, Skip::CooldownError { error: e }, why);
            }
        };
        let since = (now - last.at).to_std().unwrap_or(Duration::ZERO);
        if since < cooldown {
            let rem = cooldown - since;
            let why = format!(
                "in cooldown: last restart {} ago, cooldown {}",
                crate::api::duration::format(Duration::from_secs(since.as_secs())),
                crate::api::duration::format(cooldown)
            );
            return skip(
                &mut d,
                Skip::Cooldown {
                    remaining_secs: rem.as_secs().max(1),
                },
                why,
            );
        }
    }
    if let Some(b) = &p.budget
        && (b.count_infrastructure || !d.infrastructure)
    {
        // Windows are bounded when the policy is compiled; checked anyway so
        // that no input can stop the controller.
        let horizon = chrono::Duration::from_std(b.window)
            .ok()
            .and_then(|w| now.checked_sub_signed(w))
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        let used = job
            .history
            .iter()
            .filter(|r| {
                r.at > horizon && !r.pod_only && (b.count_infrastructure || !r.infrastructure)
            })
            .count() as u32;
        if used >= b.max_restarts {
            let why = format!(
                "restart budget exhausted: {used} of {} restarts within {}",
                b.max_restarts,
                crate::api::duration::format(b.window)
            );
            return skip(
                &mut d,
                Skip::BudgetExhausted {
                    used,
                    max: b.max_restarts,
                },
                why,
            );
        }
        d.reasons
            .push(format!("budget: {used} of {} used", b.max_restarts));
    } else if p.budget.is_some() {
        d.reasons
            .push("hardware fault: not counted against the restart budget".into());
    }
    let logs = p.preserve_logs;
    let pod_first = p.action == PolicyAction::RestartPod
        || (p.restart_pod_first && c.fault.pod.is_some() && !d.infrastructure);
    let last_pod = job.history.last().filter(|r| r.pod_only);
    d.action = Some(match (pod_first, &c.fault.pod, last_pod) {
        (true, Some(pod), Some(lp)) if p.restart_pod_first => {
            let since = (now - lp.at).to_std().unwrap_or(Duration::ZERO);
            if job.running {
                d.reasons.push(
                    "graded: the job ran again after the pod restart; restarting the pod again"
                        .into(),
                );
                JobAction::RestartPod {
                    pod: pod.clone(),
                    preserve_logs: logs,
                }
            } else if since < p.job_after {
                let rem = p.job_after - since;
                return skip(
                    &mut d,
                    Skip::WaitingForPodRestart {
                        remaining_secs: rem.as_secs().max(1),
                    },
                    format!(
                        "graded: waiting up to {} for the restarted pod",
                        crate::api::duration::format(p.job_after)
                    ),
                );
            } else {
                d.reasons.push(format!("graded: the job is not running {} after the pod restart; restarting the whole job", crate::api::duration::format(p.job_after)));
                JobAction::RestartJob {
                    preserve_logs: logs,
                }
            }
        }
        (true, Some(pod), _) => {
            d.reasons.push(format!("restart pod {pod} first"));
            JobAction::RestartPod {
                pod: pod.clone(),
                preserve_logs: logs,
            }
        }
        _ => {
            d.reasons.push("restart the whole job".into());
            JobAction::RestartJob {
                preserve_logs: logs,
            }
        }
    });
    if global_dry_run || p.dry_run {
        let by = if p.dry_run {
            "the policy"
        } else {
            "the operator"
        };
        return skip(
            &mut d,
            Skip::DryRun,
            format!("dry run by {by}: recorded, not made"),
        );
    }
    d
}

fn cooldown_of(p: &CompiledPolicy, scope: Option<&crate::expr::Scope>) -> Result<Duration, String> {
    match (&p.cooldown, scope) {
        (Cooldown::Fixed(d), _) => Ok(*d),
        (Cooldown::Cel(e), Some(scope)) => e
            .eval_duration_in(scope)
            .map(crate::api::duration::clamp)
            .map_err(|e| e.to_string()),
        (Cooldown::Cel(_), None) => Err("no CEL scope".into()),
    }
}
