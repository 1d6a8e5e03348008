//! A real identity for the controller on a shared cluster: a ServiceAccount
//! of the run bound to the ClusterRoles and Roles of given RBAC YAML (the
//! project's `config/rbac`), so the real API server's authorization judges
//! every request the controller makes.
//!
//! Names are made the run's own: cluster-scoped objects and objects in
//! namespaces the run does not own (kube-system) get the run's suffix and
//! are removed by the clean-up; `rebound-system` becomes the run's root
//! namespace and other namespaces the run's `<ns>-<run>`.

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding, Subject};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::Value;

use super::{ROOT, Testbed, TestbedError, lock};

/// Namespaces that exist on every cluster and belong to no run.
const SYSTEM_NAMESPACES: [&str; 4] = ["kube-system", "kube-public", "kube-node-lease", "default"];

fn create_error(kind: &str, name: &str, e: kube::Error) -> TestbedError {
    TestbedError::Other(format!("creating {kind} {name}: {e}"))
}

impl Testbed {
    /// Where an object of namespace `ns` in the RBAC YAML goes, and whether
    /// its name must carry the run's suffix there.
    async fn rbac_namespace(&self, ns: &str) -> Result<(String, bool), TestbedError> {
        if SYSTEM_NAMESPACES.contains(&ns) {
            return Ok((ns.to_string(), true));
        }
        let base = if ns == ROOT { ROOT } else { ns };
        Ok((self.ensure_namespace(base).await?, false))
    }

    /// Creates ServiceAccount `name` in the run's root namespace, the RBAC
    /// objects of `yaml` (multi-document; its ServiceAccount subjects
    /// become this one) and returns a client through the bed's proxy that
    /// authenticates as it (a bound token) and identifies as the
    /// controller. Shared clusters only: the embedded server authorizes
    /// nothing.
    pub async fn controller_client_with_rbac(
        &self,
        name: &str,
        yaml: &[String],
    ) -> Result<kube::Client, TestbedError> {
        let Some(run) = &self.shared else {
            return Err(TestbedError::Other(
                "a ServiceAccount identity needs a shared cluster".into(),
            ));
        };
        let id = run.id.clone();
        let root = self.root();
        let client = self.client();
        let suffixed = |n: &str| format!("{n}-{id}");
        let subjects = || {
            Some(vec![Subject {
                kind: "ServiceAccount".into(),
                name: name.to_string(),
                namespace: Some(root.clone()),
                ..Default::default()
            }])
        };
        let record = |kind: &str, ns: &str, n: &str| {
            lock(&run.rbac).push((kind.to_string(), ns.to_string(), n.to_string()));
        };
        let pp = PostParams::default();
        let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &root);
        let sa: ServiceAccount = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": root}
        }))
        .map_err(|e| TestbedError::Other(e.to_string()))?;
        sas.create(&pp, &sa)
            .await
            .map_err(|e| create_error("ServiceAccount", name, e))?;
        for text in yaml {
            let docs: Vec<Value> = serde_saphyr::from_multiple(text)
                .map_err(|e| TestbedError::Other(format!("RBAC YAML: {e}")))?;
            for doc in docs.into_iter().filter(|d| !d.is_null()) {
                let kind = doc["kind"].as_str().unwrap_or_default().to_string();
                let bad = |e: serde_json::Error| TestbedError::Other(format!("{kind}: {e}"));
                match kind.as_str() {
                    "ClusterRole" => {
                        let mut o: ClusterRole = serde_json::from_value(doc).map_err(bad)?;
                        let n = suffixed(&o.metadata.name.clone().unwrap_or_default());
                        o.metadata.name = Some(n.clone());
                        Api::<ClusterRole>::all(client.clone())
                            .create(&pp, &o)
                            .await
                            .map_err(|e| create_error("ClusterRole", &n, e))?;
                        record("ClusterRole", "", &n);
                    }
                    "ClusterRoleBinding" => {
                        let mut o: ClusterRoleBinding = serde_json::from_value(doc).map_err(bad)?;
                        let n = suffixed(&o.metadata.name.clone().unwrap_or_default());
                        o.metadata.name = Some(n.clone());
                        o.role_ref.name = suffixed(&o.role_ref.name);
                        o.subjects = subjects();
                        Api::<ClusterRoleBinding>::all(client.clone())
                            .create(&pp, &o)
                            .await
                            .map_err(|e| create_error("ClusterRoleBinding", &n, e))?;
                        record("ClusterRoleBinding", "", &n);
                    }
                    "Role" => {
                        let mut o: Role = serde_json::from_value(doc).map_err(bad)?;
                        let (ns, suffix) = self
                            .rbac_namespace(o.metadata.namespace.as_deref().unwrap_or(ROOT))
                            .await?;
                        let mut n = o.metadata.name.clone().unwrap_or_default();
                        if suffix {
                            n = suffixed(&n);
                            record("Role", &ns, &n);
                        }
                        o.metadata.name = Some(n.clone());
                        o.metadata.namespace = Some(ns.clone());
                        Api::<Role>::namespaced(client.clone(), &ns)
                            .create(&pp, &o)
                            .await
                            .map_err(|e| create_error("Role", &n, e))?;
                    }
                    "RoleBinding" => {
                        let mut o: RoleBinding = serde_json::from_value(doc).map_err(bad)?;
                        let (ns, suffix) = self
                            .rbac_namespace(o.metadata.namespace.as_deref().unwrap_or(ROOT))
                            .await?;
                        let mut n = o.metadata.name.clone().unwrap_or_default();
                        if suffix {
                            n = suffixed(&n);
                            record("RoleBinding", &ns, &n);
                        }
                        if o.role_ref.kind == "ClusterRole" || suffix {
                            o.role_ref.name = suffixed(&o.role_ref.name);
                        }
                        o.metadata.name = Some(n.clone());
                        o.metadata.namespace = Some(ns.clone());
                        o.subjects = subjects();
                        Api::<RoleBinding>::namespaced(client.clone(), &ns)
                            .create(&pp, &o)
                            .await
                            .map_err(|e| create_error("RoleBinding", &n, e))?;
                    }
                    _ => {}
                }
            }
        }
        let tr = TokenRequest {
            spec: Some(TokenRequestSpec {
                audiences: None,
                expiration_seconds: Some(3600),
                ..Default::default()
            }),
            ..Default::default()
        };
        let token = sas
            .create_token_request(name, &pp, &tr)
            .await
            .map_err(|e| create_error("TokenRequest for", name, e))?
            .status
            .and_then(|s| s.token)
            .ok_or_else(|| TestbedError::Other("TokenRequest answered no token".into()))?;
        let mut cfg = self.config.clone();
        cfg.auth_info.token = Some(token.into());
        rebound::controller::identify(&mut cfg);
        Ok(kube::Client::try_from(cfg)?)
    }
}

/// Deletes the RBAC objects a run made outside its namespaces.
pub(super) async fn remove(client: &kube::Client, made: &[(String, String, String)]) {
    let dp = DeleteParams::default();
    for (kind, ns, name) in made {
        let r = match kind.as_str() {
            "ClusterRole" => Api::<ClusterRole>::all(client.clone())
                .delete(name, &dp)
                .await
                .map(|_| ()),
            "ClusterRoleBinding" => Api::<ClusterRoleBinding>::all(client.clone())
                .delete(name, &dp)
                .await
                .map(|_| ()),
            "Role" => Api::<Role>::namespaced(client.clone(), ns)
                .delete(name, &dp)
                .await
                .map(|_| ()),
            "RoleBinding" => Api::<RoleBinding>::namespaced(client.clone(), ns)
                .delete(name, &dp)
                .await
                .map(|_| ()),
            _ => Ok(()),
        };
        if let Err(e) = r {
            tracing::debug!(%kind, %ns, %name, error = %e, "test bed clean-up: RBAC");
        }
    }
}
