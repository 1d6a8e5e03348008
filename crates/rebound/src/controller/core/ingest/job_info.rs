//! What the core keeps of a job object: its restart history, the
//! TrainJob it runs for, and its own operator's retry limit. Pure
//! functions of the object, apart from the watch handling.

use super::super::store::{JobInfo, RetryLimit};
use crate::api::WorkloadKind;
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
/// What the core keeps of a job object.
pub fn job_info(kind: WorkloadKind, o: &DynamicObject) -> JobInfo {
    let annotations: BTreeMap<String, String> = o.annotations().clone();
    JobInfo {
        resource_version: o.resource_version(),
        labels: o.labels().clone(),
        // For the kinds with a retry limit of their own (batch Job,
        // Volcano, JobSet), the limit decides (`spec.restart.onRetryLimit`);
        // `Never` is the training operators' and bare pods' word.
        never: !matches!(
            kind,
            WorkloadKind::Job
                | WorkloadKind::VolcanoJob
                | WorkloadKind::JobSet
                | WorkloadKind::TrainJob
        ) && crate::workload::restart_policy_never(kind, &o.data, None),
        uid: o.uid(),
        history: crate::recover::read_history(&annotations),
        generation: crate::inplace::Generation::from_annotations(&annotations),
        retry_limit: retry_limit(kind, &o.data),
        counted_restarts: super::super::restart_counts::counted_restarts(kind, &o.data),
        native_in_place: kind == WorkloadKind::JobSet
            && o.data["spec"]["failurePolicy"]["restartStrategy"].as_str()
                == Some("InPlaceRestart"),
        trainjob: (kind == WorkloadKind::JobSet)
            .then(|| trainjob_owner(o))
            .flatten(),
        annotations,
    }
}

/// The TrainJob a JobSet runs for: its controller owner of group
/// `trainer.kubeflow.org` (Trainer v2 names the JobSet after it).
fn trainjob_owner(o: &DynamicObject) -> Option<Arc<crate::workload::JobRef>> {
    let owner = o
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))?;
    let group = owner.api_version.split('/').next().unwrap_or_default();
    if group != "trainer.kubeflow.org" || owner.kind != "TrainJob" {
        return None;
    }
    Some(Arc::new(crate::workload::JobRef {
        kind: WorkloadKind::TrainJob,
        api_version: owner.api_version.clone(),
        plural: "trainjobs".into(),
        namespace: o.namespace().unwrap_or_default(),
        name: owner.name.clone(),
        uid: Some(owner.uid.clone()).filter(|u| !u.is_empty()),
    }))
}

/// The retry limit of a job's own operator, as its spec and status stand.
///
/// - batch Job: `spec.backoffLimit` (default 6) minus `status.failed`:
///   the Job controller counts every deleted, unfinished pod as failed.
/// - Volcano Job: `spec.maxRetry` (default 3) minus `status.retryCount`:
///   a restart counts one retry.
/// - JobSet: `spec.failurePolicy.maxRestarts` (default 0) minus
///   `status.restarts`: a restart that fails a child Job (one whose
///   `backoffLimit` is 0) restarts the JobSet once.
/// - Kubeflow: none (the training operator recreates deleted pods without
///   counting them against `runPolicy.backoffLimit`, which counts container
///   restarts).
pub fn retry_limit(kind: WorkloadKind, data: &Value) -> Option<RetryLimit> {
    let int = |v: &Value, d: i64| v.as_i64().unwrap_or(d);
    match kind {
        WorkloadKind::Job => Some(RetryLimit {
            field: "spec.backoffLimit",
            remaining: int(&data["spec"]["backoffLimit"], 6) - int(&data["status"]["failed"], 0),
            per_restart: None,
        }),
        WorkloadKind::VolcanoJob => Some(RetryLimit {
            field: "spec.maxRetry",
            remaining: int(&data["spec"]["maxRetry"], 3) - int(&data["status"]["retryCount"], 0),
            per_restart: Some(1),
        }),
        WorkloadKind::JobSet => {
            // A deleted pod fails its child Job only when that Job allows
            // no failure; then the JobSet restarts once.
            let fails_child = data["spec"]["replicatedJobs"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|rj| {
                    let s = &rj["template"]["spec"];
                    s["backoffLimit"].as_i64() == Some(0)
                        || s["backoffLimitPerIndex"].as_i64() == Some(0)
                });
            Some(RetryLimit {
                field: "spec.failurePolicy.maxRestarts",
                remaining: int(&data["spec"]["failurePolicy"]["maxRestarts"], 0)
                    - int(&data["status"]["restarts"], 0),
                per_restart: Some(i64::from(fails_child)),
            })
        }
        _ => None,
    }
}
