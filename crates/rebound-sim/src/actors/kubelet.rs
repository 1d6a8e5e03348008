//! The kubelets of all simulated nodes, as one task (so 2,000 nodes cost one
//! watch, not 2,000), modelled on the real kubelet: pods bound to a Ready
//! node go through device allocation, sandbox, init containers in order
//! (native sidecars gating the next container on their startup probe),
//! then their containers, each step paying the modelled [`PodCosts`];
//! statuses, restart counts and the conditions `PodReadyToStartContainers`,
//! `Initialized`, `ContainersReady`, `Ready` are reported as the kubelet
//! does. A container's exit goes through its `restartPolicyRules`
//! (KEP-5307): `RestartAllContainers` (KEP-5532) restarts every container
//! of the pod in place (`AllContainersRestarting`, init containers again,
//! every `restartCount` + 1, same uid, node and IP); `Restart` or the
//! restart policies restart that container. A container running `rebound
//! restart-agent` is run in-process with the real agent's runner (its own
//! GET and watch of its job); its verdicts drive its startup probe (the
//! barrier) and its exit. Graceful deletions are confirmed after `stop`;
//! the pods of a node that goes NotReady are marked not ready, as the node
//! lifecycle controller does. On Ascend nodes the kubelets also play the
//! device plugin's Allocate: a pod asking for `huawei.com/Ascend910` gets
//! free chips and the `ascend.kubectl.kubernetes.io/ascend-910-configuration`
//! annotation (one patch) before its containers start.
//!
//! Faults are injected through [`Kubelet`]: a container terminates with an
//! exit code and reason, a node gets a condition or goes NotReady.
//!
//! Parts: [`costs`] (what starting and stopping costs), `spec` (what is read
//! of a pod's spec, restart rule matching), `pod` (one pod's state machine,
//! pure), `status` (its API status), `agents` (in-process restart agents),
//! `inject` (status edits from outside), `sync` (the task's loop).

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use super::runtime::ActorError;
use super::util::{is_conflict, now_rfc3339, set_condition, str_at};

mod agents;
pub mod costs;
mod inject;
mod pod;
mod spec;
mod status;
mod sync;

pub use costs::{CostsError, PodCosts};
use inject::edit_pod_status;

/// How the kubelets behave.
#[derive(Debug, Clone)]
pub struct KubeletConfig {
    /// Time between a single container's failure and its restart (the
    /// real kubelet's CrashLoopBackOff starts at 10 s, after an immediate
    /// first restart; tests want it short).
    pub restart_delay: Duration,
    /// Extra time between a pod being bound and its containers starting,
    /// on top of [`Self::costs`].
    pub start_delay: Duration,
    /// `Some`: run only the nodes whose names start with this (the fake
    /// nodes on a shared cluster), leaving real nodes to their kubelets.
    pub node_prefix: Option<String>,
    /// What starting and stopping pods costs (zero by default: tests and
    /// `rebound demo`; `rebound sim` models a real node). The scheduling
    /// rate in it applies to the simulated scheduler.
    pub costs: PodCosts,
}

impl Default for KubeletConfig {
    fn default() -> Self {
        Self {
            restart_delay: Duration::from_millis(200),
            start_delay: Duration::ZERO,
            node_prefix: None,
            costs: PodCosts::default(),
        }
    }
}

/// Fault injection on pods and nodes, and the handle of the kubelet task.
#[derive(Clone)]
pub struct Kubelet {
    client: Client,
}

impl Kubelet {
    /// A handle that writes through `client`.
    pub fn new(client: Client) -> Self {
        Self { client }
    }

    /// Terminates one running container (or init container) of a pod with
    /// `exit_code` and `reason` (`Error`, `OOMKilled`, `Completed`, ...), as
    /// its runtime would report the exit. The kubelet task then applies the
    /// container's restart rules and the restart policies: a matching
    /// `RestartAllContainers` rule restarts the whole pod in place, a
    /// `Restart` rule or the policy (`Always`, `OnFailure` on a failure)
    /// restarts the container after `restart_delay`; otherwise it stays
    /// terminated and, once every container ended, the pod is `Failed` (or
    /// `Succeeded`).
    pub async fn fail_container(
        &self,
        ns: &str,
        pod: &str,
        container: &str,
        exit_code: i32,
        reason: &str,
    ) -> Result<(), ActorError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        edit_pod_status(&api, pod, |_, status| {
            inject::terminate_in(status, container, exit_code, reason)?;
            Ok(true)
        })
        .await
        .map(|_| ())
    }

    /// Sets (adds or replaces by type) a node condition, as
    /// node-problem-detector or rebound's agent would.
    pub async fn set_node_condition(
        &self,
        node: &str,
        ctype: &str,
        status: &str,
        reason: &str,
        message: &str,
    ) -> Result<(), ActorError> {
        let api: Api<Node> = Api::all(self.client.clone());
        for _ in 0..8 {
            let Some(n) = api.get_opt(node).await? else {
                return Err(ActorError::NotFound {
                    kind: "Node",
                    name: node.to_owned(),
                });
            };
            let mut conds: Vec<Value> = n
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .map(serde_json::to_value)
                .transpose()?
                .and_then(|v| v.as_array().cloned())
                .unwrap_or_default();
            set_condition(&mut conds, ctype, status, reason, message);
            let now = now_rfc3339();
            for c in conds.iter_mut() {
                if let Some(o) = c.as_object_mut() {
                    o.remove("lastUpdateTime");
                    if str_at(&Value::Object(o.clone()), &["type"]) == Some(ctype) {
                        o.insert("lastHeartbeatTime".into(), json!(now));
                    }
                }
            }
            let patch = json!({
                "metadata": {"resourceVersion": n.resource_version()},
                "status": {"conditions": conds},
            });
            match api
                .patch_status(node, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if is_conflict(&e) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(ActorError::Timeout(format!(
            "node {node}: status kept conflicting"
        )))
    }

    /// Makes a node Ready or NotReady (its kubelet stopped posting status).
    /// A NotReady node gets no new pods; its pods are marked not ready.
    pub async fn set_node_ready(&self, node: &str, ready: bool) -> Result<(), ActorError> {
        if ready {
            self.set_node_condition(
                node,
                "Ready",
                "True",
                "KubeletReady",
                "kubelet is posting ready status",
            )
            .await
        } else {
            self.set_node_condition(
                node,
                "Ready",
                "Unknown",
                "NodeStatusUnknown",
                "Kubelet stopped posting node status.",
            )
            .await
        }
    }
}

/// How long a node Lease is valid, as the kubelet's default
/// (`nodeLeaseDurationSeconds`).
const LEASE_SECONDS: i32 = 40;

/// Renews the node Leases (`kube-node-lease/<node>`) of `nodes` every 10 s
/// until the task is aborted, as each real kubelet does: without them a
/// real cluster's node lifecycle controller marks the nodes `Unknown` after
/// its grace period, taints them `unreachable:NoExecute` and evicts their
/// pods. Only the Lease is renewed, never the `Ready` condition, so a test
/// that marks a node NotReady keeps it so.
pub async fn renew_leases(client: Client, nodes: Vec<String>) {
    use k8s_openapi::api::coordination::v1::Lease;
    let api: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    if let Err(e) = super::util::ensure_namespace(&client, "kube-node-lease").await {
        tracing::warn!(error = %e, "node lease namespace");
    }
    let mut tick = tokio::time::interval(Duration::from_secs(10));
    loop {
        tick.tick().await;
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        for node in &nodes {
            let lease = json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": node, "namespace": "kube-node-lease"},
                "spec": {"holderIdentity": node, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": now},
            });
            let pp = PatchParams::apply("rebound-sim-kubelet").force();
            if let Err(e) = api.patch(node, &pp, &Patch::Apply(&lease)).await {
                tracing::debug!(node = %node, error = %e, "renew node lease");
            }
        }
    }
}

/// Runs the kubelets of all nodes until the task is aborted.
pub async fn run(client: Client, cfg: KubeletConfig) {
    sync::run(client, cfg).await;
}
