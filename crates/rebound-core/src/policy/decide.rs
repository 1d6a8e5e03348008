//! The decision: from a classified fault, the covering policy, the job's
//! restart history, the node and the breaker, what to do — or why not.

use super::compile::{CompiledPolicy, Cooldown};
use super::select::{PolicySet, WorkloadRef};
use crate::api::PolicyAction;
use crate::expr::{NodeView, Scope};
use crate::fault::Classified;
use chrono::{DateTime, Utc};
use std::cell::OnceCell;
use std::time::Duration;

mod inputs;
mod node;
mod outcome;
mod scope;

pub use inputs::{JobInput, NodeInput, RestartRecord};
pub use node::decide_node;
pub use outcome::{JobAction, JobDecision, NodeAction, NodeDecision, Skip};
pub use scope::node_after;

/// Decide for one job affected by the fault. `node` is the fault's node as
/// known before this fault (labels, level, fault codes; `None` when
/// unknown): CEL's `node` is that node with this fault added
/// ([`node_after`]).
pub fn decide_job(
    c: &Classified,
    node: Option<&NodeView>,
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
    // Built on first use, and whenever an expression is evaluated, even
    // one that reads no variable.
    let views = scope::Views::new(&p, c, job, node);
    let cell = OnceCell::new();
    let scope = || cell.get_or_init(|| views.scope(c, now));
    if let Some(w) = &p.when {
        let r = p
            .cel_meter
            .run(|| w.eval_bool_in(scope()))
            .map_err(|e| e.to_string())
            .and_then(|r| r.map_err(|e| e.to_string()));
        match r {
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
        let cooldown = match cooldown_of(&p, scope) {
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

fn cooldown_of<'a, 'v: 'a>(
    p: &CompiledPolicy,
    scope: impl FnOnce() -> &'a Scope<'v>,
) -> Result<Duration, String> {
    match &p.cooldown {
        Cooldown::Fixed(d) => Ok(*d),
        Cooldown::Cel(e) => p
            .cel_meter
            .run(|| e.eval_duration_in(scope()))
            .map_err(|e| e.to_string())?
            .map(crate::api::duration::clamp)
            .map_err(|e| e.to_string()),
    }
}
