//! From a pod's labels and owner references to the job that owns it.

use super::job_ref::{JobRef, kubeflow_kind};
use super::labels::*;
use crate::api::policy::WorkloadKind;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

/// The job a pod belongs to.
///
/// The controller owner reference decides first, because labels are shared
/// (gang-scheduled batch Jobs carry `volcano.sh/job-name` too): a
/// `kubeflow.org` training kind, a `batch.volcano.sh` Job, or a batch Job
/// (which is a JobSet's child when the pod carries the JobSet label: the
/// JobSet is the job, since restarting one child Job alone breaks the set).
/// Without a controller owner (e.g. a metadata view that dropped owners),
/// the operators' labels decide: Kubeflow's `operator-name` names the kind
/// (`pytorchjob-controller`), then JobSet, Volcano, batch Job labels.
/// Anything else, including pods of Deployments or StatefulSets, is its own
/// job: `WorkloadKind::Pod`, with the pod's name and uid.
pub fn job_of_pod(meta: &ObjectMeta) -> JobRef {
    let namespace = meta.namespace.clone().unwrap_or_default();
    let label = |k: &str| {
        meta.labels
            .as_ref()
            .and_then(|l| l.get(k))
            .filter(|v| !v.is_empty())
            .cloned()
    };
    if let Some(owner) = controller_of(meta) {
        let group = owner.api_version.split('/').next().unwrap_or_default();
        let from_owner = |kind: WorkloadKind, plural: String| JobRef {
            kind,
            api_version: owner.api_version.clone(),
            plural,
            namespace: namespace.clone(),
            name: owner.name.clone(),
            uid: Some(owner.uid.clone()).filter(|u| !u.is_empty()),
        };
        if let Some(kind) = kubeflow_kind(&owner.kind).filter(|_| group == "kubeflow.org") {
            return from_owner(kind, format!("{}s", owner.kind.to_ascii_lowercase()));
        }
        match (group, owner.kind.as_str()) {
            ("batch.volcano.sh", "Job") => {
                return from_owner(WorkloadKind::VolcanoJob, "jobs".into());
            }
            ("batch", "Job") => {
                if let Some(js) = label(JOBSET_NAME) {
                    return JobRef::new(WorkloadKind::JobSet, namespace, js, label(JOBSET_UID));
                }
                return from_owner(WorkloadKind::Job, "jobs".into());
            }
            _ => {}
        }
        return bare_pod(meta, namespace);
    }

    if let (Some(name), Some(kind)) = (
        label(KUBEFLOW_JOB_NAME),
        label(KUBEFLOW_OPERATOR_NAME).and_then(|op| kind_of_operator(&op)),
    ) {
        return JobRef::new(kind, namespace, name, None);
    }
    if let Some(name) = label(JOBSET_NAME) {
        return JobRef::new(WorkloadKind::JobSet, namespace, name, label(JOBSET_UID));
    }
    if let Some(name) = label(VOLCANO_JOB_NAME) {
        return JobRef::new(WorkloadKind::VolcanoJob, namespace, name, None);
    }
    if let Some(name) = label(BATCH_JOB_NAME).or_else(|| label(LEGACY_JOB_NAME)) {
        let uid = label(BATCH_CONTROLLER_UID).or_else(|| label(LEGACY_CONTROLLER_UID));
        return JobRef::new(WorkloadKind::Job, namespace, name, uid);
    }
    bare_pod(meta, namespace)
}

fn bare_pod(meta: &ObjectMeta, namespace: String) -> JobRef {
    JobRef::new(
        WorkloadKind::Pod,
        namespace,
        meta.name.clone().unwrap_or_default(),
        meta.uid.clone(),
    )
}

/// `pytorchjob-controller` → PyTorchJob (training-operator v1 sets
/// `<lowercase kind>-controller`).
fn kind_of_operator(operator: &str) -> Option<WorkloadKind> {
    let base = operator.strip_suffix("-controller")?;
    use WorkloadKind::*;
    [PyTorchJob, TFJob, MPIJob, XGBoostJob, PaddleJob, JAXJob]
        .into_iter()
        .find(|k| k.as_str().eq_ignore_ascii_case(base))
}

/// The controller owner reference of an object, if any.
pub(crate) fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
}
