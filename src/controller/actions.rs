//! Action tasks: each decision that acts becomes one spawned task, rate
//! limited, checked against leadership right before its request, timed for
//! the reaction-time histogram, and reported back to the reactor.

use super::http::Health;
use super::inputs::{ActionKind, ActionResult, Input};
use super::leader::Leadership;
use super::metrics::Metrics;
use super::state::NodeInfo;
use super::throttle::Throttle;
use crate::fault::{Fault, Level};
use crate::policy::{JobAction, RestartRecord, Skip};
use crate::recover::{self, Events, Notice, reasons};
use crate::workload::JobRef;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// What every action task needs.
#[derive(Clone)]
pub struct ActionCtx {
    pub client: kube::Client,
    pub throttle: Arc<Throttle>,
    pub leader: Leadership,
    pub metrics: Metrics,
    pub events: Events,
    pub tx: mpsc::Sender<Input>,
    pub health: Arc<Health>,
    /// Every decision, for in-process observers (demo, tests); cheap when
    /// nobody listens.
    pub decisions: tokio::sync::broadcast::Sender<Arc<crate::policy::Decision>>,
    /// The ClusterD fault view, when `--clusterd-view` publishes it.
    pub clusterd: Option<crate::ascend::clusterd::ClusterdView>,
}

impl ActionCtx {
    /// Write an Event about a job once the rate limit lets records
    /// through (after actions, see [`Throttle::acquire_record`]).
    pub async fn job_event(&self, job: &JobRef, n: &Notice) {
        self.throttle.acquire_record().await;
        self.events.job(job, n).await;
    }

    /// Write an Event about a node, as [`ActionCtx::job_event`].
    pub async fn node_event(&self, node: &str, n: &Notice) {
        self.throttle.acquire_record().await;
        self.events.node(node, n).await;
    }
}

/// A job restart to carry out.
#[derive(Debug, Clone)]
pub struct JobPlan {
    pub job: JobRef,
    pub action: Option<JobAction>,
    pub policy: Option<String>,
    pub fault: Fault,
    pub level: Level,
    pub root_cause: Option<String>,
    /// The job's pods and their containers (for saving logs).
    pub pods: Vec<recover::PodLogTarget>,
    /// The job's metadata as last seen (precondition of the record patch).
    pub job_meta: Option<kube::api::ObjectMeta>,
    /// UID of the failing pod (precondition of a single-pod restart).
    pub pod_uid: Option<String>,
    pub record: RestartRecord,
    pub reasons: String,
    /// When the watch event carrying the fault arrived.
    pub received: Instant,
}

fn describe(f: &Fault) -> String {
    let mut s = format!("{} {}", f.source, f.code);
    if let Some(r) = &f.reason {
        s.push_str(&format!(" ({r})"));
    }
    for (k, v) in [
        ("node", &f.node),
        ("device", &f.device),
        ("pod", &f.pod),
        ("container", &f.container),
    ] {
        if let Some(v) = v {
            s.push_str(&format!(" {k}={v}"));
        }
    }
    s
}

async fn report(
    tx: &mpsc::Sender<Input>,
    kind: ActionKind,
    ok: bool,
    message: String,
    policy: Option<String>,
) {
    let _ = tx
        .send(Input::Done(ActionResult {
            kind,
            ok,
            message,
            policy,
        }))
        .await;
}

/// Restart a job or a pod (saving logs first when asked), then record it
/// on the job and in an Event.
pub fn restart(ctx: &ActionCtx, plan: JobPlan) {
    let ctx = ctx.clone();
    tokio::spawn(async move {
        ctx.throttle.acquire().await;
        if !ctx.leader.is_leader() {
            tracing::warn!(job = %plan.job.name, "lost leadership before acting; the new leader decides");
            return;
        }
        let (kind, preserve) = match &plan.action {
            Some(JobAction::RestartJob { preserve_logs }) => {
                (ActionKind::RestartJob(plan.job.clone()), *preserve_logs)
            }
            Some(JobAction::RestartPod { pod, preserve_logs }) => (
                ActionKind::RestartPod(plan.job.clone(), pod.clone()),
                *preserve_logs,
            ),
            None => return,
        };
        let mut logs_note = String::new();
        if let Some((tail, max_bytes)) = preserve {
            let targets: Vec<recover::PodLogTarget> = plan
                .pods
                .iter()
                .filter(|p| match &kind {
                    ActionKind::RestartPod(_, only) => &p.name == only,
                    _ => true,
                })
                .cloned()
                .collect();
            match recover::save_logs(
                &ctx.client,
                &plan.job,
                &targets,
                tail,
                max_bytes,
                chrono::Utc::now(),
            )
            .await
            {
                Ok(out) => {
                    let cm = out.config_map;
                    logs_note = format!("; logs saved in ConfigMap {cm}");
                    let n = Notice::normal(
                        reasons::LOGS_PRESERVED,
                        "PreserveLogs",
                        format!(
                            "Saved the last {tail} log lines of {} pod(s) in ConfigMap {cm}",
                            targets.len()
                        ),
                    );
                    ctx.job_event(&plan.job, &n).await;
                }
                Err(e) => logs_note = format!("; saving logs failed: {e}"),
            }
        }
        ctx.metrics
            .reaction
            .observe(plan.received.elapsed().as_secs_f64());
        let result = match &kind {
            ActionKind::RestartPod(_, pod) => recover::restart_pod(
                &ctx.client,
                &plan.job.namespace,
                pod,
                plan.pod_uid.as_deref(),
            )
            .await
            .map(|o| {
                if o.deleted {
                    format!("pod {pod} deleted")
                } else {
                    format!("pod {pod} was already gone or replaced")
                }
            }),
            _ => recover::restart_job(&ctx.client, &plan.job)
                .await
                .map(|o| match o.path {
                    recover::RestartPath::DeletedPods => {
                        format!("{} pod(s) deleted in one request", o.pods_deleted)
                    }
                    recover::RestartPath::VolcanoCommand { command } => {
                        format!("Volcano Command {command} (RestartJob) created")
                    }
                    recover::RestartPath::VolcanoFallbackDeletedPods => format!(
                        "Volcano Command kind not installed: {} pod(s) deleted",
                        o.pods_deleted
                    ),
                    recover::RestartPath::DeletedPod => "pod deleted".to_string(),
                }),
        };
        ctx.metrics.request("delete", result.is_ok());
        match result {
            Ok(how) => {
                let rc = plan.root_cause.clone().unwrap_or_else(|| "unknown".into());
                let note = format!(
                    "Restarted after {} (level {}, policy {}): {how}; root cause: {rc}{logs_note}",
                    describe(&plan.fault),
                    plan.level,
                    plan.policy.as_deref().unwrap_or("-"),
                );
                let reason = if matches!(kind, ActionKind::RestartPod(..)) {
                    reasons::POD_RESTARTED
                } else {
                    reasons::JOB_RESTARTED
                };
                // A bare pod is gone after its restart: nothing to record it on.
                if plan.job.kind == crate::api::WorkloadKind::Pod {
                } else if let Err(e) = recover::record_restart(
                    &ctx.client,
                    &plan.job,
                    &plan.record,
                    plan.root_cause.as_deref(),
                    plan.job_meta.as_ref(),
                )
                .await
                {
                    tracing::warn!(job = %plan.job.name, error = %e, "could not record the restart on the job");
                }
                tracing::info!(job = %plan.job.name, namespace = %plan.job.namespace, "{note}");
                report(&ctx.tx, kind, true, note.clone(), plan.policy).await;
                ctx.job_event(&plan.job, &Notice::normal(reason, "Restart", note))
                    .await;
            }
            Err(e) => {
                let msg = format!("restart of {} failed: {e}", plan.job.name);
                report(&ctx.tx, kind, false, msg.clone(), plan.policy).await;
                ctx.job_event(
                    &plan.job,
                    &Notice::warning(reasons::RESTART_SKIPPED, "Restart", msg),
                )
                .await;
            }
        }
    });
}

/// Cordon (and taint) a node.
pub fn cordon(
    ctx: &ActionCtx,
    snapshot: NodeInfo,
    level: Level,
    taint: Option<String>,
    fault: Fault,
    why: String,
    received: Instant,
) {
    let ctx = ctx.clone();
    tokio::spawn(async move {
        ctx.throttle.acquire().await;
        if !ctx.leader.is_leader() {
            return;
        }
        ctx.metrics
            .reaction
            .observe(received.elapsed().as_secs_f64());
        let r = recover::cordon(
            &ctx.client,
            &snapshot.name,
            level,
            taint.as_deref(),
            &snapshot.snap,
        )
        .await;
        ctx.metrics.request("patch", r.is_ok());
        let kind = ActionKind::Cordon(snapshot.name.clone());
        match r {
            Ok(_) => {
                let what = if taint.is_some() {
                    reasons::NODE_TAINTED
                } else {
                    reasons::NODE_CORDONED
                };
                let note = format!(
                    "Cordoned{} at level {level} after {}: {why}",
                    if taint.is_some() { " and tainted" } else { "" },
                    describe(&fault)
                );
                report(&ctx.tx, kind, true, note.clone(), None).await;
                ctx.node_event(&snapshot.name, &Notice::warning(what, "Cordon", note))
                    .await;
            }
            Err(e) => {
                report(
                    &ctx.tx,
                    kind,
                    false,
                    format!("cordon of {} failed: {e}", snapshot.name),
                    None,
                )
                .await
            }
        }
    });
}

/// Uncordon a node rebound cordoned, once its fault cleared.
pub fn uncordon(ctx: &ActionCtx, snapshot: NodeInfo, taint_key: String) {
    let ctx = ctx.clone();
    tokio::spawn(async move {
        ctx.throttle.acquire().await;
        if !ctx.leader.is_leader() {
            return;
        }
        let r = recover::uncordon(
            &ctx.client,
            &snapshot.name,
            Some(&taint_key),
            &snapshot.snap,
        )
        .await;
        ctx.metrics.request("patch", r.is_ok());
        let kind = ActionKind::Uncordon(snapshot.name.clone());
        match r {
            Ok(_) => {
                report(&ctx.tx, kind, true, "uncordoned".into(), None).await;
                ctx.node_event(
                    &snapshot.name,
                    &Notice::normal(
                        reasons::NODE_UNCORDONED,
                        "Uncordon",
                        "Fault cleared: uncordoned (rebound had cordoned it)",
                    ),
                )
                .await;
            }
            Err(e) => {
                report(
                    &ctx.tx,
                    kind,
                    false,
                    format!("uncordon of {} failed: {e}", snapshot.name),
                    None,
                )
                .await
            }
        }
    });
}

/// Say loudly that the breaker holds a separation back.
pub fn breaker_event(ctx: &ActionCtx, node: &str, used: u32, allowed: u32) {
    let ctx = ctx.clone();
    let node = node.to_string();
    tokio::spawn(async move {
        tracing::warn!(%node, used, allowed, "circuit breaker open: cordon held back");
        let n = Notice::warning(
            reasons::BREAKER_OPEN,
            "Cordon",
            format!(
                "Circuit breaker open: {used} of {allowed} nodes already separated in the window; cordon of this node is held and retried when the window allows"
            ),
        );
        ctx.node_event(&node, &n).await;
    });
}

/// Record a node decision that did not act (dry run).
pub fn note_node(ctx: &ActionCtx, node: &str, what: &str, reasons: &[String]) {
    let ctx = ctx.clone();
    let node = node.to_string();
    let note = format!("{what}: {}", reasons.join("; "));
    tokio::spawn(async move {
        ctx.node_event(
            &node,
            &Notice::normal(reasons::RESTART_SKIPPED, "Cordon", note),
        )
        .await;
    });
}

/// Record a job decision that did not act (budget, dry run, CEL error, Never).
pub fn note_job(ctx: &ActionCtx, job: &JobRef, skip: &Skip, reasons: &str) {
    let ctx = ctx.clone();
    let job = job.clone();
    let (reason, warn) = match skip {
        Skip::BudgetExhausted { .. } => (reasons::RESTART_BUDGET_EXHAUSTED, true),
        Skip::GateError { .. } | Skip::CooldownError { .. } => (reasons::CEL_ERROR, true),
        _ => (reasons::RESTART_SKIPPED, false),
    };
    let note = format!("{}: {reasons}", skip.name());
    let budget = matches!(skip, Skip::BudgetExhausted { .. });
    tokio::spawn(async move {
        if budget && let Err(e) = mark_budget_exhausted(&ctx.client, &job).await {
            tracing::warn!(job = %job.name, error = %e, "could not mark the job");
        }
        let n = if warn {
            Notice::warning(reason, "Restart", note)
        } else {
            Notice::normal(reason, "Restart", note)
        };
        ctx.job_event(&job, &n).await;
    });
}

/// Re-decide a fault after `after` (graded escalation: is the job running
/// again?).
pub fn recheck_later(ctx: &ActionCtx, fault: Fault, job: JobRef, after: Duration) {
    let tx = ctx.tx.clone();
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        let _ = tx.send(Input::Recheck(Box::new(fault), job)).await;
    });
}

/// Annotation marking a job whose restart budget is exhausted (value: when).
pub const BUDGET_EXHAUSTED_ANNOTATION: &str = "rebound.dev/budget-exhausted";

/// Mark the job (one merge patch of an annotation), so people and tools see
/// that rebound stopped restarting it.
async fn mark_budget_exhausted(client: &kube::Client, job: &JobRef) -> Result<(), kube::Error> {
    use kube::api::{Api, DynamicObject, Patch, PatchParams};
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &job.namespace, &job.api_resource());
    let patch = serde_json::json!({"metadata": {"annotations": {BUDGET_EXHAUSTED_ANNOTATION: chrono::Utc::now().to_rfc3339()}}});
    api.patch(&job.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}
