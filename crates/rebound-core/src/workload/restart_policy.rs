//! Whether a job's own spec says it must not be restarted.

use super::job_ref::is_kubeflow;
use crate::api::policy::WorkloadKind;
use serde_json::Value;

/// Whether the job (or, with `replica_type`, that replica of it) must not
/// be restarted by deleting its pods: rebound then skips it
/// (`Skip::RestartPolicyNever`). `job_object` is the job as JSON (for
/// `WorkloadKind::Pod`, the pod itself). The rule per kind, from the real
/// CRDs and controllers:
///
/// - **Kubeflow** (PyTorchJob, TFJob, MPIJob, XGBoostJob, PaddleJob, JAXJob):
///   `spec.<x>ReplicaSpecs.<Type>.restartPolicy: Never` written in the job.
///   With a replica type (the pod's `training.kubeflow.org/replica-type`
///   label, lower case; spec keys are CamelCase, so compared without case),
///   that replica's policy; without, any replica that says `Never` (a job
///   restart restarts every replica). An absent policy is not `Never`: the
///   operators default it in memory only (`OnFailure` for PyTorchJob,
///   `Never` for the others) and never write it back, so reading absence as
///   `Never` would switch rebound off for every job that left it out; only
///   a written `Never` is the user's refusal.
/// - **VolcanoJob**: `spec.maxRetry: 0`. Volcano fails a job whose retry
///   count reaches `maxRetry` when it restarts, so a restart would end it
///   (the CRD defaults `maxRetry` to 3).
/// - **JobSet**: deleting a pod fails its child Job when that Job's
///   `backoffLimit` is 0, and a failed child fails the JobSet unless
///   `spec.failurePolicy.maxRestarts` > 0. So `Never` when some replicated
///   Job (with `replica_type`, the one of the pod's
///   `jobset.sigs.k8s.io/replicatedjob-name`) has `backoffLimit: 0` (or
///   `backoffLimitPerIndex: 0`) and the JobSet allows no restart.
/// - **batch Job**: `spec.backoffLimit: 0` or `spec.backoffLimitPerIndex: 0`:
///   the Job controller counts a deleted pod as failed, so the Job would
///   fail. (The pod template's `restartPolicy: Never` is the normal Job
///   setting and means new pods replace failed ones, not "no restart".)
/// - **Pod**: a pod without a controller owner is never restarted: deleting
///   it would lose it, nothing recreates it. A pod with a controller
///   (ReplicaSet, StatefulSet, ...) is recreated by it.
///
/// Missing or malformed fields count as "restart allowed", except for a
/// bare pod, where a missing owner means "never".
pub fn restart_policy_never(
    kind: WorkloadKind,
    job_object: &Value,
    replica_type: Option<&str>,
) -> bool {
    let spec = &job_object["spec"];
    match kind {
        k if is_kubeflow(k) => kubeflow_never(spec, replica_type),
        WorkloadKind::VolcanoJob => spec["maxRetry"].as_i64() == Some(0),
        WorkloadKind::JobSet => jobset_never(spec, replica_type),
        // Its JobSet's failure policy decides (the retry limit).
        WorkloadKind::TrainJob => false,
        WorkloadKind::Job => batch_job_never(spec),
        _ => !job_object["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|o| o["controller"].as_bool() == Some(true)),
    }
}

/// The `*ReplicaSpecs` map of a Kubeflow job (`pytorchReplicaSpecs`,
/// `tfReplicaSpecs`, `mpiReplicaSpecs`, `xgbReplicaSpecs`, ...).
fn kubeflow_never(spec: &Value, replica_type: Option<&str>) -> bool {
    let Some(spec) = spec.as_object() else {
        return false;
    };
    let replicas = spec
        .iter()
        .filter(|(k, _)| k.ends_with("ReplicaSpecs"))
        .filter_map(|(_, v)| v.as_object())
        .flatten();
    replicas
        .filter(|(name, _)| replica_type.is_none_or(|t| name.eq_ignore_ascii_case(t)))
        .any(|(_, r)| r["restartPolicy"].as_str() == Some("Never"))
}

fn batch_job_never(spec: &Value) -> bool {
    spec["backoffLimit"].as_i64() == Some(0) || spec["backoffLimitPerIndex"].as_i64() == Some(0)
}

fn jobset_never(spec: &Value, replica_type: Option<&str>) -> bool {
    let restarts_allowed = spec["failurePolicy"]["maxRestarts"].as_i64().unwrap_or(0) > 0;
    if restarts_allowed {
        return false;
    }
    spec["replicatedJobs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|rj| replica_type.is_none_or(|t| rj["name"].as_str() == Some(t)))
        .any(|rj| batch_job_never(&rj["template"]["spec"]))
}
