//! What the model runs the core with: the JobSet resource, the root
//! policy and classifications, and a core built as the controller builds it.

use super::*;

pub fn jobset_resource() -> ApiResource {
    ApiResource {
        group: "jobset.x-k8s.io".into(),
        version: "v1alpha2".into(),
        api_version: "jobset.x-k8s.io/v1alpha2".into(),
        kind: "JobSet".into(),
        plural: "jobsets".into(),
    }
}

/// The root policy of the model: opted-in jobs, the cooldown, the breaker.
pub fn default_policy_spec() -> Value {
    json!({"selector": {"matchLabels": {OPT_IN: "true"}}, "cooldown": format!("{COOLDOWN}s"),
        "nodeActions": {"maxSeparated": MAX_SEPARATED.to_string(), "breakerWindow": format!("{WINDOW}s")}})
}

/// The root policy with `spec`.
pub fn policy(spec: &Value) -> crate::api::RecoveryPolicy {
    serde_json::from_value(
        json!({"apiVersion": "rebound.dev/v1alpha1", "kind": "RecoveryPolicy",
        "metadata": {"name": "default", "namespace": ROOT, "generation": 1},
        "spec": spec}),
    )
    .expect("the model's policy parses")
}

pub(super) fn classifications() -> Vec<crate::api::FaultClassification> {
    let docs = [
        json!({"apiVersion": "rebound.dev/v1alpha1", "kind": "FaultClassification",
            "metadata": {"name": "xid", "generation": 1},
            "spec": {"source": "NvidiaXid", "rules": [
                {"name": "bus", "codes": ["79"], "level": "Separate"},
                {"name": "ecc", "codes": ["48"], "level": "ResetDevice"},
                {"name": "app", "codes": ["13"], "level": "RestartJob"}],
              "escalations": [{"codes": ["13"], "times": 2, "within": "24h", "level": "ResetDevice"}],
              "defaultLevel": "RestartJob"}}),
        json!({"apiVersion": "rebound.dev/v1alpha1", "kind": "FaultClassification",
            "metadata": {"name": "exits", "generation": 1},
            "spec": {"source": "PodExit", "defaultLevel": "RestartJob"}}),
    ];
    docs.into_iter()
        .filter_map(|d| serde_json::from_value(d).ok())
        .collect()
}

/// A core as the controller builds it, with the model's policy.
pub fn core() -> Core {
    Core::new(
        CoreConfig {
            restart_agent_role: None,
            root: ROOT.into(),
            condition_types: Vec::new(),
            fault_max_age: Duration::from_secs(600),
            dry_run: false,
            node_default: NodeConfig {
                max_separated: Limit::Count(MAX_SEPARATED as u32),
                ..NodeConfig::default()
            },
            status_interval: Duration::from_secs(5),
            resync_interval: Duration::from_secs(30),
        },
        crate::metrics::Metrics::new(),
        None,
        ProgressKeys::default(),
    )
}
