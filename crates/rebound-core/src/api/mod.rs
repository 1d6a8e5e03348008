//! The two CRDs of `rebound.dev/v1alpha1`.

pub mod classification;
pub mod conditions;
pub mod duration;
pub mod policy;
pub mod schema;

pub use classification::{
    ClassificationRule, EscalationRule, FaultClassification, FaultClassificationSpec,
    FaultClassificationStatus,
};
pub use conditions::Condition;
pub use policy::{
    DeviceScope, GradedEscalation, HangDetection, Isolation, NodeActions, PolicyAction,
    PreserveLogs, RecoveryPolicy, RecoveryPolicySpec, RecoveryPolicyStatus, RecoveryTier,
    RestartBudget, RestartSpec, RetryLimitAction, Validation, WorkloadKind, WorkloadSelector,
};

use kube::CustomResourceExt;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// The CRDs this crate defines.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![FaultClassification::crd(), RecoveryPolicy::crd()]
}

/// Each CRD as `(file name under crds/, YAML)`: the committed `crds/` must
/// equal this (a test checks it).
pub fn crd_files() -> Result<Vec<(String, String)>, serde_saphyr::ser::Error> {
    crds()
        .into_iter()
        .map(|crd| {
            let name = format!("{}.yaml", crd.metadata.name.clone().unwrap_or_default());
            Ok((name, serde_saphyr::to_string(&crd)?))
        })
        .collect()
}

/// The CRDs as one multi-document YAML, as `rebound crds` prints.
pub fn crds_yaml() -> Result<String, serde_saphyr::ser::Error> {
    let mut out = String::new();
    for (_, y) in crd_files()? {
        out.push_str("---\n");
        out.push_str(&y);
    }
    Ok(out)
}
