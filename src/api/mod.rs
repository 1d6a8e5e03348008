//! The two CRDs of `rebound.dev/v1alpha1`.

pub mod classification;
pub mod conditions;
pub mod duration;
pub mod policy;

pub use classification::{
    ClassificationRule, EscalationRule, FaultClassification, FaultClassificationSpec,
    FaultClassificationStatus,
};
pub use conditions::Condition;
pub use policy::{
    GradedEscalation, HangDetection, NodeActions, PolicyAction, PreserveLogs, RecoveryPolicy,
    RecoveryPolicySpec, RecoveryPolicyStatus, RestartBudget, WorkloadKind, WorkloadSelector,
};

use kube::CustomResourceExt;

/// The CRDs as one multi-document YAML, as `rebound crds` prints and
/// `crds/` holds.
pub fn crds_yaml() -> Result<String, serde_saphyr::ser::Error> {
    let mut out = String::new();
    for crd in [FaultClassification::crd(), RecoveryPolicy::crd()] {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd)?);
    }
    Ok(out)
}
