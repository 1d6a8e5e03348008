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

/// config/rbac's restart agent ClusterRoles, as `kubectl apply -k
/// config/default` installs them: `rebound-restart-agent`, aggregated (the
/// control plane's kube-controller-manager fills its rules), and
/// `rebound-restart-agent-jobs` with the rules. The controller binds the
/// first in each namespace with wired pods. Applied server-side as
/// `manager`; the aggregated role carries no `rules` of its own, so that
/// applying it again never empties them (tests share the server).
pub async fn install_restart_agent_role(
    client: &kube::Client,
    manager: &str,
) -> Result<(), TestbedError> {
    install_cluster_roles(client, RESTART_AGENT_ROLES, manager).await
}

/// config/rbac/restart_agent_role.yaml.
const RESTART_AGENT_ROLES: &str = include_str!("../../../../config/rbac/restart_agent_role.yaml");

/// Every ClusterRole of the YAML stream `yaml`, applied server-side as
/// `manager`.
pub async fn install_cluster_roles(
    client: &kube::Client,
    yaml: &str,
    manager: &str,
) -> Result<(), TestbedError> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml)
        .map_err(|e| TestbedError::Other(format!("ClusterRole YAML: {e}")))?;
    for d in docs.into_iter().filter(|d| d["kind"] == "ClusterRole") {
        let role: k8s_openapi::api::rbac::v1::ClusterRole = serde_json::from_value(d)
            .map_err(|e| TestbedError::Other(format!("a ClusterRole: {e}")))?;
        let name = role.metadata.name.clone().unwrap_or_default();
        Api::<k8s_openapi::api::rbac::v1::ClusterRole>::all(client.clone())
            .patch(
                &name,
                &PatchParams::apply(manager).force(),
                &Patch::Apply(&role),
            )
            .await?;
    }
    Ok(())
}
