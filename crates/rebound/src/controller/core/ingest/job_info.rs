//! What the core keeps of a job object: its restart history, the
//! TrainJob it runs for, and its own operator's retry limit. Pure
//! functions of the object, apart from the watch handling.

use super::super::store::JobInfo;
use crate::api::WorkloadKind;
use crate::workload::operator;
use kube::ResourceExt;
use kube::api::DynamicObject;
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
        retry_limit: operator::retry_limit(kind, &o.data),
        ignores_disruption: operator::ignores_disruption(kind, &o.data),
        exit_rules: operator::exit_rules(kind, &o.data).map(Arc::new),
        operator_failed: operator::operator_failed(kind, &o.data),
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
