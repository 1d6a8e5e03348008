//! What a job's own operator does with a restart, read from its object:
//! how far its retry limit reaches, which exit codes it treats as final,
//! whether it ignores pods deleted as a disruption, and whether it has
//! given up on the job. Each rule cites the operator's code it follows;
//! the e2e suite checks them on the real operators (docs/testing.md).

use crate::api::WorkloadKind;
use serde_json::{Value, json};

/// A job's own retry limit, as its spec and status stand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryLimit {
    /// The field that limits, for the Event (`spec.maxRetry`).
    pub field: &'static str,
    /// How much of it a restart may still use without its operator
    /// failing the job: a restart that costs more than this fails it.
    pub remaining: i64,
    /// What one restart that deletes pods costs of it.
    pub cost: RetryCost,
}

/// What one restart that deletes pods costs a retry limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryCost {
    /// One per deleted pod (a batch Job counts each as failed).
    PerPod,
    /// A fixed amount, whatever the number of pods (one Volcano retry).
    Fixed(i64),
}

fn int(v: &Value, default: i64) -> i64 {
    v.as_i64().unwrap_or(default)
}

/// The retry limit of a job's own operator, or `None` for operators that
/// recreate deleted pods without counting them.
///
/// - batch Job: `spec.backoffLimit` (default 6) minus `status.failed`,
///   one per deleted pod: the Job controller counts a deleted, unfinished
///   pod as failed and fails the Job once `failed > backoffLimit`
///   (k8s.io/kubernetes pkg/controller/job: `isPodFailed`,
///   `exceedsBackoffLimit`).
/// - Volcano Job: `spec.maxRetry` (default 3) minus `status.retryCount`,
///   minus one, one per restart: `RestartJob` raises `retryCount`, and a
///   job restarting with `retryCount >= maxRetry` is failed
///   (volcano pkg/controllers/job/state: running.go, restarting.go), so
///   the last retry fails it.
/// - JobSet: `spec.failurePolicy.maxRestarts` (default 0) minus
///   `status.restartsCountTowardsMax` (`status.restarts` before that field
///   existed), one per restart that fails a child Job (one that allows no
///   failure): JobSet restarts while that count is below `maxRestarts`
///   and fails the set at it (jobset pkg/controllers/failure_policy.go).
///   A whole-set restart through its child Jobs costs nothing (see
///   [`restarts_through_child_jobs`]).
/// - Kubeflow: none (the training-operator recreates deleted pods without
///   counting them; `runPolicy.backoffLimit` counts container restarts).
/// - TrainJob: none of its own; it is restarted through its JobSet's child
///   Jobs.
pub fn retry_limit(kind: WorkloadKind, data: &Value) -> Option<RetryLimit> {
    let spec = &data["spec"];
    let status = &data["status"];
    match kind {
        WorkloadKind::Job => Some(RetryLimit {
            field: "spec.backoffLimit",
            remaining: int(&spec["backoffLimit"], 6) - int(&status["failed"], 0),
            cost: RetryCost::PerPod,
        }),
        WorkloadKind::VolcanoJob => Some(RetryLimit {
            field: "spec.maxRetry",
            remaining: int(&spec["maxRetry"], 3) - int(&status["retryCount"], 0) - 1,
            cost: RetryCost::Fixed(1),
        }),
        WorkloadKind::JobSet => {
            // A deleted pod fails its child Job only when that Job allows
            // no failure; then the JobSet restarts once.
            let fails_child = spec["replicatedJobs"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|rj| {
                    let s = &rj["template"]["spec"];
                    s["backoffLimit"].as_i64() == Some(0)
                        || s["backoffLimitPerIndex"].as_i64() == Some(0)
                });
            let used = status["restartsCountTowardsMax"]
                .as_i64()
                .unwrap_or_else(|| int(&status["restarts"], 0));
            Some(RetryLimit {
                field: "spec.failurePolicy.maxRestarts",
                remaining: int(&spec["failurePolicy"]["maxRestarts"], 0) - used,
                cost: RetryCost::Fixed(i64::from(fails_child)),
            })
        }
        _ => None,
    }
}

/// Whether a whole-job restart goes through the job's child Jobs (a
/// JobSet, a TrainJob's JobSet): deleting them makes JobSet create them
/// anew, with fresh failure counts, as its own restart does, without
/// spending its `maxRestarts` or any child's `backoffLimit`.
pub fn restarts_through_child_jobs(kind: WorkloadKind) -> bool {
    matches!(kind, WorkloadKind::JobSet | WorkloadKind::TrainJob)
}

/// Whether the Job's `podFailurePolicy` ignores pods with the
/// `DisruptionTarget` condition (a rule `action: Ignore` on
/// `onPodConditions: [{type: DisruptionTarget}]`), as Kubernetes'
/// documentation recommends for jobs that must survive disruptions: pods
/// rebound marks so before deleting them cost nothing of `backoffLimit`.
/// For a JobSet: every replicated Job's template has such a rule.
pub fn ignores_disruption(kind: WorkloadKind, data: &Value) -> bool {
    let job_ignores = |job_spec: &Value| {
        job_spec["podFailurePolicy"]["rules"]
            .as_array()
            .into_iter()
            .flatten()
            .take_while(|r| r["onExitCodes"].is_null() || r["action"] != "FailJob")
            .any(|r| {
                r["action"] == "Ignore"
                    && r["onPodConditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|c| {
                            c["type"] == "DisruptionTarget"
                                && c["status"].as_str().is_none_or(|s| s == "True")
                        })
            })
    };
    match kind {
        WorkloadKind::Job => job_ignores(&data["spec"]),
        WorkloadKind::JobSet => {
            let rjs: Vec<&Value> = data["spec"]["replicatedJobs"]
                .as_array()
                .into_iter()
                .flatten()
                .collect();
            !rjs.is_empty() && rjs.iter().all(|rj| job_ignores(&rj["template"]["spec"]))
        }
        _ => false,
    }
}

/// The part of a job object that [`final_exit`] reads, in the object's
/// own shape (so it is what `final_exit` takes), or `None` when nothing of
/// the job makes an exit final: a Kubeflow job's replicas' restart
/// policies, a batch Job's `podFailurePolicy`, a Volcano Job's policies.
pub fn exit_rules(kind: WorkloadKind, data: &Value) -> Option<Value> {
    let spec = &data["spec"];
    match kind {
        k if super::job_ref::is_kubeflow(k) => {
            let (key, replicas) = spec
                .as_object()?
                .iter()
                .find(|(k, _)| k.ends_with("ReplicaSpecs"))?;
            let policies: serde_json::Map<String, Value> = replicas
                .as_object()?
                .iter()
                .filter(|(_, r)| r["restartPolicy"] == "ExitCode")
                .map(|(name, r)| (name.clone(), json!({"restartPolicy": r["restartPolicy"]})))
                .collect();
            (!policies.is_empty()).then(|| json!({"spec": {key: policies}}))
        }
        WorkloadKind::Job => {
            let p = &spec["podFailurePolicy"];
            (!p.is_null()).then(|| json!({"spec": {"podFailurePolicy": p}}))
        }
        WorkloadKind::VolcanoJob => {
            let own = spec["policies"].clone();
            let tasks: Vec<Value> = spec["tasks"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| json!({"policies": t["policies"]}))
                .collect();
            let any = |v: &Value| {
                v.as_array()
                    .is_some_and(|a| a.iter().any(|p| !p["exitCode"].is_null()))
            };
            (any(&own) || tasks.iter().any(|t| any(&t["policies"])))
                .then(|| json!({"spec": {"policies": own, "tasks": tasks}}))
        }
        _ => None,
    }
}

/// A pod's exit as the fault saw it.
#[derive(Clone, Copy, Debug)]
pub struct Exit<'a> {
    /// The container that exited.
    pub container: Option<&'a str>,
    /// Its exit code.
    pub code: i32,
    /// The pod's Kubeflow replica type (`worker`, `master`), from its
    /// `training.kubeflow.org/replica-type` label.
    pub replica_type: Option<&'a str>,
}

/// Why the job's operator ends the job on this exit itself (so a restart
/// by rebound cannot bring it back), or `None`.
///
/// - Kubeflow, a replica with `restartPolicy: ExitCode`: exit codes 1–127
///   are permanent errors and fail the job; 128–255 are retried
///   (training-operator pkg/controller.v1/common: `isRetryableExitCode`).
/// - batch Job: a `podFailurePolicy` rule with `action: FailJob` whose
///   `onExitCodes` match (operator `In` / `NotIn`, optional
///   `containerName`), the first matching rule deciding.
/// - Volcano: a lifecycle policy on `exitCode` with `action` `AbortJob`,
///   `TerminateJob` or `CompleteJob` (the job's own, or its task's).
pub fn final_exit(kind: WorkloadKind, data: &Value, exit: Exit<'_>) -> Option<String> {
    let spec = &data["spec"];
    if exit.code == 0 {
        return None;
    }
    match kind {
        k if super::job_ref::is_kubeflow(k) => {
            let replicas = spec.as_object()?.iter().find(|(k, _)| k.ends_with("ReplicaSpecs"))?.1;
            let (name, replica) = replicas.as_object()?.iter().find(|(name, _)| {
                exit.replica_type
                    .is_none_or(|t| name.eq_ignore_ascii_case(t))
            })?;
            (replica["restartPolicy"] == "ExitCode" && (1..=127).contains(&exit.code)).then(|| {
                format!(
                    "its operator fails the job on exit code {} of {name} (restartPolicy ExitCode: 1-127 are permanent errors)",
                    exit.code
                )
            })
        }
        WorkloadKind::Job => pod_failure_fails(&spec["podFailurePolicy"], exit).map(|rule| {
            format!(
                "its Job controller fails the Job on exit code {} (podFailurePolicy rule {rule}: FailJob)",
                exit.code
            )
        }),
        WorkloadKind::VolcanoJob => {
            let policies = spec["policies"].as_array().into_iter().flatten().chain(
                spec["tasks"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .flat_map(|t| t["policies"].as_array().into_iter().flatten()),
            );
            policies
                .filter(|p| p["exitCode"].as_i64() == Some(i64::from(exit.code)))
                .find_map(|p| {
                    let action = p["action"].as_str()?;
                    matches!(action, "AbortJob" | "TerminateJob" | "CompleteJob").then(|| {
                        format!(
                            "its Volcano policy ends the job on exit code {} (action {action})",
                            exit.code
                        )
                    })
                })
        }
        _ => None,
    }
}

/// The index of the first `podFailurePolicy` rule matching the exit, when
/// its action is `FailJob`.
fn pod_failure_fails(policy: &Value, exit: Exit<'_>) -> Option<usize> {
    let rules = policy["rules"].as_array()?;
    for (i, r) in rules.iter().enumerate() {
        let on = &r["onExitCodes"];
        if on.is_null() {
            continue; // a rule on pod conditions: not this exit's
        }
        if let Some(c) = on["containerName"].as_str()
            && exit.container != Some(c)
        {
            continue;
        }
        let values: Vec<i64> = on["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_i64)
            .collect();
        let code = i64::from(exit.code);
        let matches = match on["operator"].as_str() {
            Some("In") => values.contains(&code),
            Some("NotIn") => !values.contains(&code),
            _ => false,
        };
        if matches {
            return (r["action"] == "FailJob").then_some(i);
        }
    }
    None
}

/// Why the job's operator has given up on the job (its `Failed`
/// condition, or Volcano's terminal phase), or `None` while it has not.
pub fn operator_failed(kind: WorkloadKind, data: &Value) -> Option<String> {
    let status = &data["status"];
    if kind == WorkloadKind::VolcanoJob {
        let phase = status["state"]["phase"].as_str()?;
        return matches!(phase, "Failed" | "Aborted" | "Terminated").then(|| {
            let why = status["state"]["message"]
                .as_str()
                .or_else(|| status["state"]["reason"].as_str())
                .unwrap_or("");
            format!("Volcano: phase {phase} {why}")
                .trim_end()
                .to_owned()
        });
    }
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Failed" && c["status"] == "True")
        .map(|c| {
            let reason = c["reason"].as_str().unwrap_or("Failed");
            match c["message"].as_str() {
                Some(m) if !m.is_empty() => format!("{reason}: {m}"),
                _ => reason.to_owned(),
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_limit_says_how_much_a_restart_may_still_use() {
        // A batch Job fails once failed > backoffLimit: 6 deleted pods of
        // a fresh Job are allowed, a 7th is not.
        let job = json!({"spec": {"backoffLimit": 6}, "status": {"failed": 0}});
        let l = retry_limit(WorkloadKind::Job, &job).unwrap();
        assert_eq!((l.remaining, l.cost), (6, RetryCost::PerPod));
        // Volcano fails the restart that brings retryCount to maxRetry:
        // of maxRetry 3, two restarts.
        let vc = json!({"spec": {"maxRetry": 3}, "status": {"retryCount": 1}});
        assert_eq!(
            retry_limit(WorkloadKind::VolcanoJob, &vc)
                .unwrap()
                .remaining,
            1
        );
        // JobSet restarts while restarts < maxRestarts: at 2 of 3, one
        // more (the off-by-one of issue 32: this used to be refused).
        let js = json!({"spec": {"failurePolicy": {"maxRestarts": 3},
            "replicatedJobs": [{"template": {"spec": {"backoffLimit": 0}}}]},
            "status": {"restarts": 2}});
        let l = retry_limit(WorkloadKind::JobSet, &js).unwrap();
        assert_eq!((l.remaining, l.cost), (1, RetryCost::Fixed(1)));
        // restartsCountTowardsMax wins where JobSet writes it.
        let js2 = json!({"spec": {"failurePolicy": {"maxRestarts": 3}},
            "status": {"restarts": 5, "restartsCountTowardsMax": 1}});
        assert_eq!(
            retry_limit(WorkloadKind::JobSet, &js2).unwrap().remaining,
            2
        );
        assert!(retry_limit(WorkloadKind::PyTorchJob, &json!({})).is_none());
        assert!(retry_limit(WorkloadKind::TrainJob, &json!({})).is_none());
    }

    #[test]
    fn exit_codes_the_operators_treat_as_final() {
        let pt = |policy: &str| {
            json!({"spec": {"pytorchReplicaSpecs": {
                "Master": {"restartPolicy": "OnFailure"},
                "Worker": {"restartPolicy": policy}}}})
        };
        let exit = |code, rt| Exit {
            container: Some("pytorch"),
            code,
            replica_type: rt,
        };
        let f = |d: &Value, e| final_exit(WorkloadKind::PyTorchJob, d, e);
        assert!(f(&pt("ExitCode"), exit(1, Some("worker"))).is_some());
        assert!(f(&pt("ExitCode"), exit(127, Some("worker"))).is_some());
        assert!(
            f(&pt("ExitCode"), exit(137, Some("worker"))).is_none(),
            "128-255 retried"
        );
        assert!(
            f(&pt("ExitCode"), exit(1, Some("master"))).is_none(),
            "the master's policy"
        );
        assert!(f(&pt("OnFailure"), exit(1, Some("worker"))).is_none());
        let batch = json!({"spec": {"podFailurePolicy": {"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            {"action": "Count", "onExitCodes": {"operator": "In", "values": [42]}},
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "NotIn", "values": [0, 42]}},
        ]}}});
        let bexit = |c, code| Exit {
            container: Some(c),
            code,
            replica_type: None,
        };
        assert!(final_exit(WorkloadKind::Job, &batch, bexit("main", 1)).is_some());
        assert!(
            final_exit(WorkloadKind::Job, &batch, bexit("main", 42)).is_none(),
            "first rule counts"
        );
        assert!(
            final_exit(WorkloadKind::Job, &batch, bexit("side", 1)).is_none(),
            "other container"
        );
        let vc = json!({"spec": {"tasks": [{"policies": [{"exitCode": 3, "action": "AbortJob"}]}],
            "policies": [{"event": "PodFailed", "action": "RestartJob"}]}});
        assert!(final_exit(WorkloadKind::VolcanoJob, &vc, bexit("c", 3)).is_some());
        assert!(final_exit(WorkloadKind::VolcanoJob, &vc, bexit("c", 1)).is_none());
        // What the core keeps of each job decides the same.
        for (kind, data, e) in [
            (
                WorkloadKind::PyTorchJob,
                pt("ExitCode"),
                exit(1, Some("worker")),
            ),
            (WorkloadKind::Job, batch.clone(), bexit("main", 1)),
            (WorkloadKind::VolcanoJob, vc.clone(), bexit("c", 3)),
        ] {
            let kept = exit_rules(kind, &data).expect("rules kept");
            assert_eq!(
                final_exit(kind, &kept, e),
                final_exit(kind, &data, e),
                "{kind:?}"
            );
        }
        assert!(exit_rules(WorkloadKind::PyTorchJob, &pt("OnFailure")).is_none());
        assert!(
            exit_rules(
                WorkloadKind::VolcanoJob,
                &json!({"spec": {"policies": [{"event": "PodFailed", "action": "RestartJob"}]}})
            )
            .is_none()
        );
    }

    #[test]
    fn a_disruption_rule_before_any_fail_rule_spares_the_limit() {
        let rules = |r: Value| json!({"spec": {"podFailurePolicy": {"rules": r}}});
        let ignore = json!({"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]});
        assert!(ignores_disruption(
            WorkloadKind::Job,
            &rules(json!([ignore]))
        ));
        assert!(!ignores_disruption(
            WorkloadKind::Job,
            &rules(json!([{"action": "Count", "onPodConditions": [{"type": "DisruptionTarget"}]}]))
        ));
        assert!(!ignores_disruption(WorkloadKind::Job, &json!({"spec": {}})));
        let js = |t: Value| json!({"spec": {"replicatedJobs": [{"template": {"spec": t}}]}});
        assert!(ignores_disruption(
            WorkloadKind::JobSet,
            &js(json!({"podFailurePolicy": {"rules": [ignore]}}))
        ));
        assert!(!ignores_disruption(WorkloadKind::JobSet, &js(json!({}))));
    }

    #[test]
    fn an_operator_that_gave_up_says_why() {
        let failed = json!({"status": {"conditions": [
            {"type": "Created", "status": "True"},
            {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]}});
        assert_eq!(
            operator_failed(WorkloadKind::Job, &failed).as_deref(),
            Some("BackoffLimitExceeded: Job has reached the specified backoff limit")
        );
        assert!(operator_failed(WorkloadKind::Job, &json!({"status": {}})).is_none());
        let vc = json!({"status": {"state": {"phase": "Failed"}}});
        assert_eq!(
            operator_failed(WorkloadKind::VolcanoJob, &vc).as_deref(),
            Some("Volcano: phase Failed")
        );
        let running = json!({"status": {"state": {"phase": "Running"}}});
        assert!(operator_failed(WorkloadKind::VolcanoJob, &running).is_none());
    }
}
