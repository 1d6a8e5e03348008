//! A reference to the job that owns a pod, enough to address it in the API.

use crate::api::policy::WorkloadKind;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::core::ApiResource;

/// The job a pod belongs to. `api_version` and `plural` are kept because a
/// kind may be served in more than one version (MPIJob `kubeflow.org/v1` and
/// `v2beta1`): the version is the one the pod's owner reference names.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct JobRef {
    pub kind: WorkloadKind,
    pub api_version: String,
    pub plural: String,
    pub namespace: String,
    pub name: String,
    /// Known from the pod's owner reference or a uid label; needed for owner
    /// references (log ConfigMaps, Volcano Commands).
    pub uid: Option<String>,
}

impl JobRef {
    /// A reference in the kind's usual API version (`kubeflow.org/v1`,
    /// `batch.volcano.sh/v1alpha1`, `jobset.x-k8s.io/v1alpha2`, `batch/v1`,
    /// `v1`).
    pub fn new(
        kind: WorkloadKind,
        namespace: impl Into<String>,
        name: impl Into<String>,
        uid: Option<String>,
    ) -> JobRef {
        let (api_version, plural) = default_resource(kind);
        JobRef {
            kind,
            api_version: api_version.to_string(),
            plural: plural.to_string(),
            namespace: namespace.into(),
            name: name.into(),
            uid,
        }
    }

    /// A stable identity for logs, metrics and maps: `Kind/namespace/name`.
    pub fn id(&self) -> String {
        format!("{}/{}/{}", self.kind.as_str(), self.namespace, self.name)
    }

    /// The Kubernetes `kind` of the object (a Volcano job's kind is `Job`,
    /// like a batch Job's; the API group tells them apart).
    pub fn k8s_kind(&self) -> &'static str {
        match self.kind {
            WorkloadKind::VolcanoJob | WorkloadKind::Job => "Job",
            k => k.as_str(),
        }
    }

    /// The resource for the dynamic API (custom kinds and core ones alike).
    pub fn api_resource(&self) -> ApiResource {
        let (group, version) = match self.api_version.split_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (String::new(), self.api_version.clone()),
        };
        ApiResource {
            group,
            version,
            api_version: self.api_version.clone(),
            kind: self.k8s_kind().to_string(),
            plural: self.plural.clone(),
        }
    }

    /// The job as an Event's `regarding` object.
    pub fn object_reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some(self.api_version.clone()),
            kind: Some(self.k8s_kind().to_string()),
            namespace: Some(self.namespace.clone()),
            name: Some(self.name.clone()),
            uid: self.uid.clone(),
            ..Default::default()
        }
    }

    /// An owner reference to the job, so that what rebound creates for it
    /// (log ConfigMaps, Volcano Commands) is garbage-collected with it.
    /// `None` without a uid: the API server rejects an owner without one.
    /// Not a controller reference and no `blockOwnerDeletion`, which would
    /// need delete rights on the job's finalizers.
    pub fn owner_reference(&self) -> Option<OwnerReference> {
        Some(OwnerReference {
            api_version: self.api_version.clone(),
            kind: self.k8s_kind().to_string(),
            name: self.name.clone(),
            uid: self.uid.clone()?,
            ..Default::default()
        })
    }
}

/// `(apiVersion, plural)` of a kind in its usual version.
fn default_resource(kind: WorkloadKind) -> (&'static str, &'static str) {
    use WorkloadKind::*;
    match kind {
        PyTorchJob => ("kubeflow.org/v1", "pytorchjobs"),
        TFJob => ("kubeflow.org/v1", "tfjobs"),
        MPIJob => ("kubeflow.org/v1", "mpijobs"),
        XGBoostJob => ("kubeflow.org/v1", "xgboostjobs"),
        PaddleJob => ("kubeflow.org/v1", "paddlejobs"),
        JAXJob => ("kubeflow.org/v1", "jaxjobs"),
        VolcanoJob => ("batch.volcano.sh/v1alpha1", "jobs"),
        JobSet => ("jobset.x-k8s.io/v1alpha2", "jobsets"),
        TrainJob => ("trainer.kubeflow.org/v1alpha1", "trainjobs"),
        Job => ("batch/v1", "jobs"),
        Pod => ("v1", "pods"),
    }
}

/// The Kubeflow training-operator kinds, by their Kubernetes kind name.
pub(super) fn kubeflow_kind(kind: &str) -> Option<WorkloadKind> {
    use WorkloadKind::*;
    Some(match kind {
        "PyTorchJob" => PyTorchJob,
        "TFJob" => TFJob,
        "MPIJob" => MPIJob,
        "XGBoostJob" => XGBoostJob,
        "PaddleJob" => PaddleJob,
        "JAXJob" => JAXJob,
        _ => return None,
    })
}

/// Whether the kind is one of the Kubeflow training-operator kinds.
pub(super) fn is_kubeflow(kind: WorkloadKind) -> bool {
    kubeflow_kind(kind.as_str()).is_some()
}
