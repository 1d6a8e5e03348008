//! Compile a RecoveryPolicy once per generation.

use crate::api::{
    PolicyAction, RecoveryPolicy, RecoveryTier, RetryLimitAction, WorkloadKind, duration,
};
use crate::classify::InvalidObject;
use crate::expr::{Expr, POLICY_VARS};
use kube::ResourceExt;
use std::collections::BTreeMap;
use std::time::Duration;

/// Default least time between two restarts of one job.
pub const DEFAULT_COOLDOWN: Duration = Duration::from_secs(30);
/// Default graded escalation delay (pod restart → job restart).
pub const DEFAULT_JOB_AFTER: Duration = Duration::from_secs(120);
/// Default restart budget window.
pub const DEFAULT_BUDGET_WINDOW: Duration = Duration::from_secs(3600);
/// Default time an in-place tier has before the next tier takes over.
pub const DEFAULT_FALLBACK_AFTER: Duration = Duration::from_secs(120);
/// Default time a pod of a restarting job may sit Terminating on a NotReady
/// node before it is force-deleted.
pub const DEFAULT_FORCE_DELETE_AFTER: Duration = Duration::from_secs(60);
/// Default annotation carrying a job's progress signal.
pub const DEFAULT_PROGRESS_ANNOTATION: &str = "rebound.dev/progress";
/// Default upper bound of saved logs per job.
pub const DEFAULT_LOG_BYTES: u32 = 512 * 1024;

/// How long to wait between restarts.
#[derive(Clone, Debug, PartialEq)]
pub enum Cooldown {
    Fixed(Duration),
    Cel(Expr),
}

/// A restart budget, compiled.
#[derive(Clone, Debug, PartialEq)]
pub struct Budget {
    pub max_restarts: u32,
    pub window: Duration,
    pub count_infrastructure: bool,
}

/// Node-level behaviour, compiled (root policy or operator flags).
#[derive(Clone, Debug, PartialEq)]
pub struct NodeConfig {
    pub cordon: bool,
    pub taint_key: String,
    pub max_separated: Limit,
    pub breaker_window: Duration,
    pub auto_uncordon: bool,
    pub isolation: crate::api::Isolation,
    pub max_isolated_devices: u32,
    /// The check run before a device returns to service, if any.
    pub validation: Option<ValidationConfig>,
}

/// A compiled `nodeActions.validation`.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidationConfig {
    /// The Job's spec, checked to be a batch/v1 JobSpec.
    pub job: serde_json::Value,
    pub timeout: Duration,
    /// Nodes rebound cordoned are validated too.
    pub nodes: bool,
}

/// The default `validation.timeout`.
pub const VALIDATION_TIMEOUT: Duration = Duration::from_secs(15 * 60);

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            cordon: true,
            taint_key: "rebound.dev/separated".into(),
            max_separated: Limit::Percent(10),
            breaker_window: Duration::from_secs(300),
            auto_uncordon: true,
            isolation: crate::api::Isolation::Node,
            max_isolated_devices: 2,
            validation: None,
        }
    }
}

/// The breaker's limit: an absolute count or a percentage of the nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    Count(u32),
    Percent(u32),
}

impl Limit {
    /// Parse `5` or `10%`.
    pub fn parse(s: &str) -> Result<Limit, String> {
        let s = s.trim();
        if let Some(p) = s.strip_suffix('%') {
            let n: u32 = p
                .trim()
                .parse()
                .map_err(|_| format!("{s:?} is not a percentage"))?;
            if n > 100 {
                return Err(format!("{s:?} is above 100%"));
            }
            Ok(Limit::Percent(n))
        } else {
            s.parse()
                .map(Limit::Count)
                .map_err(|_| format!("{s:?} is neither a count (5) nor a percentage (10%)"))
        }
    }

    /// The number of nodes allowed out of `total` (at least one when the
    /// limit is not zero, so small clusters can still separate a node).
    pub fn of(self, total: u32) -> u32 {
        match self {
            Limit::Count(n) => n,
            Limit::Percent(0) => 0,
            Limit::Percent(p) => ((total as u64 * p as u64) / 100).max(1) as u32,
        }
    }
}

/// Compiled `spec.hang`: kept as one value so that the reactor reads the
/// limit, the annotation and the opt-in from the policy selected for a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hang {
    /// `noProgressFor`.
    pub limit: Duration,
    /// The progress annotation read on the job and its pods.
    pub annotation: String,
    /// `requireProgress`: a job that never reported progress is hung too.
    pub require_progress: bool,
}

/// How a policy's restarts are carried out (`spec.restart`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestartConfig {
    /// Tiers to try, cheapest first; never empty.
    pub tiers: Vec<RecoveryTier>,
    pub fallback_after: Duration,
    pub force_delete_after: Duration,
    pub on_retry_limit: RetryLimitAction,
    pub on_final_exit: RetryLimitAction,
}

impl Default for RestartConfig {
    fn default() -> Self {
        RestartConfig {
            tiers: vec![RecoveryTier::Recreate],
            fallback_after: DEFAULT_FALLBACK_AFTER,
            force_delete_after: DEFAULT_FORCE_DELETE_AFTER,
            on_retry_limit: RetryLimitAction::Skip,
            on_final_exit: RetryLimitAction::Skip,
        }
    }
}

/// A RecoveryPolicy ready to use.
#[derive(Clone, Debug, PartialEq)]
pub struct CompiledPolicy {
    pub namespace: String,
    pub name: String,
    pub generation: Option<i64>,
    pub kinds: Vec<WorkloadKind>,
    pub match_labels: BTreeMap<String, String>,
    pub when: Option<Expr>,
    pub action: PolicyAction,
    pub restart_pod_first: bool,
    pub job_after: Duration,
    pub cooldown: Cooldown,
    pub budget: Option<Budget>,
    pub hang: Option<Hang>,
    pub preserve_logs: Option<(u32, u32)>,
    pub dry_run: bool,
    /// Node behaviour this policy asks for (used only for the root policy).
    pub node: Option<NodeConfig>,
    /// `spec.restart`, compiled.
    pub restart: RestartConfig,
    /// `spec.deviceScope`.
    pub device_scope: crate::api::DeviceScope,
    /// The measured CEL time of the policy's namespace (set by the
    /// [`super::PolicySet`] it is in; none for the root namespace).
    pub cel_meter: super::cel_meter::MeterRef,
    /// `namespace/name`, formatted once: records name the policy per decision.
    id: String,
}

impl CompiledPolicy {
    /// `namespace/name`, the policy's identity in records.
    pub fn id(&self) -> String {
        self.id.clone()
    }

    /// Compile; every error names the field.
    pub fn compile(p: &RecoveryPolicy) -> Result<CompiledPolicy, InvalidObject> {
        let s = &p.spec;
        let dur = |field: &str, v: &str| {
            duration::parse(v).map_err(|m| InvalidObject::duration(field.to_string(), m))
        };
        let when = s
            .when
            .as_deref()
            .map(|w| {
                Expr::compile(w, POLICY_VARS)
                    .map_err(|e| InvalidObject::expr("spec.when".into(), e))
            })
            .transpose()?;
        let cooldown = match s.cooldown.as_deref() {
            None => Cooldown::Fixed(DEFAULT_COOLDOWN),
            Some(c) => match duration::parse(c) {
                Ok(d) => Cooldown::Fixed(d),
                Err(_) => {
                    Cooldown::Cel(Expr::compile(c, POLICY_VARS).map_err(|e| InvalidObject {
                        field: "spec.cooldown".into(),
                        reason: e.reason(),
                        message: format!(
                            "neither a duration (30s, 5m) nor a valid CEL expression: {e}"
                        ),
                    })?)
                }
            },
        };
        let (restart_pod_first, job_after) = match &s.escalation {
            Some(e) => (
                e.restart_pod_first,
                e.job_after
                    .as_deref()
                    .map(|v| dur("spec.escalation.jobAfter", v))
                    .transpose()?
                    .unwrap_or(DEFAULT_JOB_AFTER),
            ),
            None => (false, DEFAULT_JOB_AFTER),
        };
        let budget = s
            .restart_budget
            .as_ref()
            .map(|b| -> Result<Budget, InvalidObject> {
                // The budget counts the restarts kept on the job: one above
                // what is kept could never be used up.
                if b.max_restarts > super::MAX_BUDGET {
                    return Err(InvalidObject {
                        field: "spec.restartBudget.maxRestarts".into(),
                        reason: "InvalidBudget",
                        message: format!(
                            "{} is more than the {} restarts rebound keeps on a job (its restart-history and restart-tally annotations): such a budget could never be used up",
                            b.max_restarts,
                            super::MAX_BUDGET
                        ),
                    });
                }
                Ok(Budget {
                    max_restarts: b.max_restarts,
                    window: b
                        .window
                        .as_deref()
                        .map(|v| dur("spec.restartBudget.window", v))
                        .transpose()?
                        .unwrap_or(DEFAULT_BUDGET_WINDOW),
                    count_infrastructure: b.count_infrastructure,
                })
            })
            .transpose()?;
        let hang = s
            .hang
            .as_ref()
            .map(|h| -> Result<Hang, InvalidObject> {
                Ok(Hang {
                    limit: dur("spec.hang.noProgressFor", &h.no_progress_for)?,
                    annotation: h
                        .annotation
                        .clone()
                        .unwrap_or_else(|| DEFAULT_PROGRESS_ANNOTATION.into()),
                    require_progress: h.require_progress,
                })
            })
            .transpose()?;
        let node = s
            .node_actions
            .as_ref()
            .map(|n| -> Result<NodeConfig, InvalidObject> {
                let d = NodeConfig::default();
                Ok(NodeConfig {
                    cordon: n.cordon.unwrap_or(d.cordon),
                    taint_key: n.taint_key.clone().unwrap_or(d.taint_key),
                    max_separated: n
                        .max_separated
                        .as_deref()
                        .map(Limit::parse)
                        .transpose()
                        .map_err(|m| InvalidObject {
                            field: "spec.nodeActions.maxSeparated".into(),
                            reason: "InvalidValue",
                            message: m,
                        })?
                        .unwrap_or(d.max_separated),
                    breaker_window: n
                        .breaker_window
                        .as_deref()
                        .map(|v| dur("spec.nodeActions.breakerWindow", v))
                        .transpose()?
                        .unwrap_or(d.breaker_window),
                    auto_uncordon: n.auto_uncordon.unwrap_or(d.auto_uncordon),
                    isolation: n.isolation.unwrap_or(d.isolation),
                    max_isolated_devices: n.max_isolated_devices.unwrap_or(d.max_isolated_devices),
                    validation: n
                        .validation
                        .as_ref()
                        .map(|v| -> Result<ValidationConfig, InvalidObject> {
                            serde_json::from_value::<k8s_openapi::api::batch::v1::JobSpec>(
                                v.job.clone(),
                            )
                            .map_err(|e| InvalidObject {
                                field: "spec.nodeActions.validation.job".into(),
                                reason: "InvalidValue",
                                message: format!("not a batch/v1 JobSpec: {e}"),
                            })?;
                            Ok(ValidationConfig {
                                job: v.job.clone(),
                                timeout: v
                                    .timeout
                                    .as_deref()
                                    .map(|t| dur("spec.nodeActions.validation.timeout", t))
                                    .transpose()?
                                    .unwrap_or(VALIDATION_TIMEOUT),
                                nodes: v.nodes,
                            })
                        })
                        .transpose()?,
                })
            })
            .transpose()?;
        let restart = match &s.restart {
            None => RestartConfig::default(),
            Some(r) => {
                let mut tiers: Vec<RecoveryTier> = Vec::new();
                for t in &r.tiers {
                    if tiers.contains(t) {
                        return Err(InvalidObject {
                            field: "spec.restart.tiers".into(),
                            reason: "InvalidValue",
                            message: format!("{} is listed twice", t.as_str()),
                        });
                    }
                    tiers.push(*t);
                }
                if tiers.is_empty() {
                    tiers.push(RecoveryTier::Recreate);
                }
                RestartConfig {
                    tiers,
                    fallback_after: r
                        .fallback_after
                        .as_deref()
                        .map(|v| dur("spec.restart.fallbackAfter", v))
                        .transpose()?
                        .unwrap_or(DEFAULT_FALLBACK_AFTER),
                    force_delete_after: r
                        .force_delete_after
                        .as_deref()
                        .map(|v| dur("spec.restart.forceDeleteAfter", v))
                        .transpose()?
                        .unwrap_or(DEFAULT_FORCE_DELETE_AFTER),
                    on_retry_limit: r.on_retry_limit,
                    on_final_exit: r.on_final_exit,
                }
            }
        };
        Ok(CompiledPolicy {
            restart,
            device_scope: s.device_scope.unwrap_or_default(),
            namespace: p.namespace().unwrap_or_default(),
            name: p.name_any(),
            generation: p.metadata.generation,
            kinds: s.selector.kinds.clone(),
            match_labels: s.selector.match_labels.clone(),
            when,
            action: s.action,
            restart_pod_first,
            job_after,
            cooldown,
            budget,
            hang,
            preserve_logs: s
                .preserve_logs
                .as_ref()
                .map(|l| (l.tail_lines, l.max_bytes.unwrap_or(DEFAULT_LOG_BYTES))),
            dry_run: s.dry_run,
            node,
            cel_meter: Default::default(),
            id: format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()),
        })
    }
}
