//! The restart agent's RBAC in a namespace, as the chart grants it: a Role
//! with the chart's rules (get and watch the job kinds) bound to the
//! namespace's `default` ServiceAccount, which the test jobs' pods run as.
//! Shared by `rebound sim --real-node` and the real-node tests, whose
//! agents talk to a real API server that checks them.

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use super::TestbedError;

/// The chart's rules for the restart agent.
const AGENT_RULES: &str =
    include_str!("../../../../chart/rebound/files/rbac/restart-agent-rules.yaml");

/// Grants the restart agent of pods running as `default` in `ns` what the
/// chart grants it, applied server-side as `manager`.
pub async fn grant_restart_agent(
    client: &kube::Client,
    ns: &str,
    manager: &str,
) -> Result<(), TestbedError> {
    let rules: Value = serde_saphyr::from_str(AGENT_RULES)
        .map_err(|e| TestbedError::Other(format!("the chart's agent rules: {e}")))?;
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "rebound-restart-agent", "namespace": ns},
        "rules": rules,
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "rebound-restart-agent", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "rebound-restart-agent"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}],
    });
    let pp = PatchParams::apply(manager).force();
    for (plural, obj) in [("roles", role), ("rolebindings", binding)] {
        let ar = ApiResource {
            group: "rbac.authorization.k8s.io".into(),
            version: "v1".into(),
            api_version: "rbac.authorization.k8s.io/v1".into(),
            kind: obj["kind"].as_str().unwrap_or_default().into(),
            plural: plural.into(),
        };
        let obj: DynamicObject = serde_json::from_value(obj)
            .map_err(|e| TestbedError::Other(format!("the agent's {plural}: {e}")))?;
        Api::<DynamicObject>::namespaced_with(client.clone(), ns, &ar)
            .patch("rebound-restart-agent", &pp, &Patch::Apply(&obj))
            .await?;
    }
    Ok(())
}

/// The restart agent's ClusterRole `name` with the chart's rules (the
/// chart's is aggregated; this one carries the rules itself, so that it
/// works on a control plane without kube-controller-manager): what the
/// controller binds in each namespace with wired pods. Applied
/// server-side as `manager` (idempotent on a shared server).
pub async fn install_restart_agent_role(
    client: &kube::Client,
    name: &str,
    manager: &str,
) -> Result<(), TestbedError> {
    let rules: Value = serde_saphyr::from_str(AGENT_RULES)
        .map_err(|e| TestbedError::Other(format!("the chart's agent rules: {e}")))?;
    let role: k8s_openapi::api::rbac::v1::ClusterRole = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": rules,
    }))
    .map_err(|e| TestbedError::Other(format!("the agent's ClusterRole: {e}")))?;
    Api::<k8s_openapi::api::rbac::v1::ClusterRole>::all(client.clone())
        .patch(
            name,
            &PatchParams::apply(manager).force(),
            &Patch::Apply(&role),
        )
        .await?;
    Ok(())
}
