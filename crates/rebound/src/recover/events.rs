//! Kubernetes Events (`events.k8s.io/v1`) about jobs, pods and nodes, with
//! rebound's stable reasons. Best-effort: a failed Event is logged, never
//! an error of the action it reports.

use super::event_series::{Draft, Series};
use crate::workload::JobRef;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;

/// The Event reasons rebound uses. Stable: users filter and alert on them,
/// and the docs list them (a test checks the list).
///
/// There is no `FaultDetected`: an Event per fault would cost a request on
/// the reaction path (or a fold that hides which faults came), and the
/// fault, its level and root-cause pod are already in the note of the
/// Event about the action taken (or skipped), and in the metrics.
pub mod reasons {
    /// All pods of a job were deleted (or a Volcano RestartJob issued).
    pub const JOB_RESTARTED: &str = "JobRestarted";
    /// One pod was deleted (graded escalation's first step).
    pub const POD_RESTARTED: &str = "PodRestarted";
    /// A decision held a restart back (cooldown, restart policy, dry run...).
    pub const RESTART_SKIPPED: &str = "RestartSkipped";
    /// The job used its restart budget; it is left alone.
    pub const RESTART_BUDGET_EXHAUSTED: &str = "RestartBudgetExhausted";
    /// A node was cordoned.
    pub const NODE_CORDONED: &str = "NodeCordoned";
    /// A node was tainted.
    pub const NODE_TAINTED: &str = "NodeTainted";
    /// A node rebound cordoned was returned to scheduling.
    pub const NODE_UNCORDONED: &str = "NodeUncordoned";
    /// The circuit breaker held a cordon back.
    pub const BREAKER_OPEN: &str = "BreakerOpen";
    /// Logs were saved to a ConfigMap before a restart.
    pub const LOGS_PRESERVED: &str = "LogsPreserved";
    /// A RecoveryPolicy or FaultClassification is invalid (once per
    /// generation, on the object).
    pub const INVALID_POLICY: &str = "InvalidPolicy";
    /// A CEL expression failed to evaluate.
    pub const CEL_ERROR: &str = "CelError";
    /// A restarted job's rank table (`hccl.json`) is complete again.
    pub const RECOVERY_COMPLETE: &str = "RecoveryComplete";
    /// Pods of a restarting job stuck Terminating on a NotReady node were
    /// force-deleted (grace period 0).
    pub const POD_FORCE_DELETED: &str = "PodForceDeleted";

    /// A restarted job runs again: every pod of its new generation runs
    /// and is Ready (the note gives the time from the fault).
    pub const JOB_RESUMED: &str = "JobResumed";
    /// A restarted job did not run again: its operator gave up on it, or
    /// its pods were not back within the bound (the note says which).
    pub const JOB_NOT_RESUMED: &str = "JobNotResumed";
    /// rebound could not let the restart agents of a namespace read their
    /// jobs (their RoleBinding was refused): in-place restarts of the job
    /// will fall back to recreating its pods.
    pub const AGENT_ACCESS_FAILED: &str = "AgentAccessFailed";

    /// One device of a node was taken out of scheduling (a DRA
    /// DeviceTaintRule) instead of the node (`isolation: Device`).
    pub const DEVICE_ISOLATED: &str = "DeviceIsolated";
    /// A device rebound isolated was returned to scheduling (its rule
    /// deleted) once its fault cleared.
    pub const DEVICE_RETURNED: &str = "DeviceReturned";

    /// The validation run before returning an isolated device failed (or
    /// timed out): the device stays out of scheduling.
    pub const VALIDATION_FAILED: &str = "ValidationFailed";

    /// Every reason, for docs and tests.
    pub const ALL: [&str; 19] = [
        JOB_RESTARTED,
        POD_RESTARTED,
        RESTART_SKIPPED,
        RESTART_BUDGET_EXHAUSTED,
        NODE_CORDONED,
        NODE_TAINTED,
        NODE_UNCORDONED,
        BREAKER_OPEN,
        LOGS_PRESERVED,
        INVALID_POLICY,
        CEL_ERROR,
        RECOVERY_COMPLETE,
        POD_FORCE_DELETED,
        JOB_RESUMED,
        JOB_NOT_RESUMED,
        AGENT_ACCESS_FAILED,
        DEVICE_ISOLATED,
        DEVICE_RETURNED,
        VALIDATION_FAILED,
    ];
}

/// The Event a job decision that skipped writes on the job (docs/events.md,
/// "Skipped restarts"): the reason and whether it is a Warning. `None` for
/// skips that concern no restart the job could have had (its level, no
/// policy, another tenant's fault) and for the node's own skips (the
/// breaker writes `BreakerOpen` on the node).
pub fn skip_event(skip: &crate::policy::Skip) -> Option<(&'static str, bool)> {
    use crate::policy::Skip;
    match skip {
        Skip::GateFalse
        | Skip::ActionNone
        | Skip::RestartPolicyNever
        | Skip::Cooldown { .. }
        | Skip::WaitingForPodRestart { .. }
        | Skip::CordonHeld { .. }
        | Skip::DryRun => Some((reasons::RESTART_SKIPPED, false)),
        Skip::RetryLimit { .. } | Skip::FinalExit { .. } => Some((reasons::RESTART_SKIPPED, true)),
        Skip::GateError { .. } | Skip::CooldownError { .. } => Some((reasons::CEL_ERROR, true)),
        Skip::BudgetExhausted { .. } => Some((reasons::RESTART_BUDGET_EXHAUSTED, true)),
        Skip::LevelIgnore
        | Skip::NoPolicy
        | Skip::Untrusted
        | Skip::BreakerOpen { .. }
        | Skip::NodeActionsDisabled
        | Skip::AlreadyApplied => None,
    }
}

/// The API server rejects an Event note over 1 KiB.
const MAX_NOTE: usize = 1024;

/// One Event to publish: its type, stable reason (from `reasons`), the
/// action taken (`Restart`, `Cordon`, ...; the API requires one) and a
/// human note (cut to the API's 1 KiB).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    pub warning: bool,
    pub reason: &'static str,
    pub action: String,
    pub note: String,
}

impl Notice {
    /// A `Normal` Event.
    pub fn normal(reason: &'static str, action: &str, note: impl Into<String>) -> Notice {
        Notice {
            warning: false,
            reason,
            action: action.into(),
            note: note.into(),
        }
    }

    /// A `Warning` Event.
    pub fn warning(reason: &'static str, action: &str, note: impl Into<String>) -> Notice {
        Notice {
            warning: true,
            ..Notice::normal(reason, action, note)
        }
    }
}

/// The `reportingController` of the controller's Events (what
/// `--field-selector reportingComponent=rebound-controller` matches).
pub const REPORTING_CONTROLLER: &str = "rebound-controller";

/// Publishes Events as the rebound controller. Cheap to clone; repeats of
/// the same Event (the same note too) within six minutes become one Event
/// with a series count (a patch instead of a create).
#[derive(Clone)]
pub struct Events {
    recorder: Series,
}

impl Events {
    /// `instance` tells the replicas apart (the pod name).
    pub fn new(client: Client, instance: Option<String>) -> Events {
        Events {
            recorder: Series::new(client, REPORTING_CONTROLLER, instance),
        }
    }

    /// An Event about a job. Returns the API requests made (1).
    pub async fn job(&self, job: &JobRef, notice: &Notice) -> u32 {
        self.publish(job.object_reference(), notice).await
    }

    /// An Event about a pod. Returns the API requests made (1).
    pub async fn pod(&self, namespace: &str, pod: &str, uid: Option<&str>, notice: &Notice) -> u32 {
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(namespace.into()),
            name: Some(pod.into()),
            uid: uid.map(str::to_string),
            ..ObjectReference::default()
        };
        self.publish(reference, notice).await
    }

    /// An Event about a node (written in `default`, where `kubectl describe
    /// node` looks; the uid is the node name, as the kubelet sets it, which
    /// is what `describe` matches). Returns the API requests made (1).
    pub async fn node(&self, node: &str, notice: &Notice) -> u32 {
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.into()),
            uid: Some(node.into()),
            ..ObjectReference::default()
        };
        self.publish(reference, notice).await
    }

    /// An Event about any other object, e.g. a RecoveryPolicy (in its
    /// namespace) or a FaultClassification (cluster-scoped: written in
    /// `default`, where a real API server accepts it). Returns the API
    /// requests made (1).
    pub async fn object(&self, reference: ObjectReference, notice: &Notice) -> u32 {
        self.publish(reference, notice).await
    }

    async fn publish(&self, reference: ObjectReference, notice: &Notice) -> u32 {
        let draft = Draft {
            warning: notice.warning,
            reason: notice.reason,
            action: &notice.action,
            note: truncate(&notice.note, MAX_NOTE),
        };
        if let Err(e) = self.recorder.publish(draft, &reference).await {
            tracing::warn!(
                reason = notice.reason,
                object = ?reference.name,
                kind = ?reference.kind,
                error = %e,
                "could not publish Event"
            );
        }
        1
    }
}

/// At most `max` bytes of `s`, cut at a character boundary.
fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_unique_camel_case() {
        let mut seen = std::collections::BTreeSet::new();
        for r in reasons::ALL {
            assert!(seen.insert(r), "duplicate {r}");
            assert!(
                r.chars().next().is_some_and(|c| c.is_ascii_uppercase()),
                "{r}"
            );
            assert!(r.chars().all(|c| c.is_ascii_alphanumeric()), "{r}");
        }
    }

    #[test]
    fn notes_fit_the_api_limit() {
        assert_eq!(truncate("short", 1024), "short");
        let long = "é".repeat(1000);
        let t = truncate(&long, MAX_NOTE);
        assert!(t.len() <= MAX_NOTE && t.len() >= MAX_NOTE - 1);
    }
}
