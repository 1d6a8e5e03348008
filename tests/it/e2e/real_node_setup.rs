//! Set-up shared by the real-node tests (real_node.rs): the node reset
//! before each test, the agent's RBAC, waits that show the kubelet's log.

use super::*;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams, PostParams};
use rebound_sim::envtest::node::RealNode;
use serde_json::json;

/// The shared node as a test expects it, whatever an earlier test left:
/// no GPU fault, schedulable.
pub(super) async fn reset(node: &RealNode) {
    let cfg = Testbed::real_upstream().await.expect("the control plane");
    let api: Api<Node> = Api::all(kube::Client::try_from(cfg).expect("client"));
    for _ in 0..8 {
        let mut n = api.get_status(node.name()).await.expect("the real node");
        for c in n
            .status
            .iter_mut()
            .flat_map(|s| s.conditions.iter_mut().flatten())
        {
            if c.type_ == rebound::fault::wire::GPU_CONDITION {
                c.status = "False".into();
                c.message = None;
            }
        }
        if api
            .replace_status(node.name(), &PostParams::default(), &n)
            .await
            .is_ok()
        {
            break;
        }
    }
    api.patch(
        node.name(),
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"unschedulable": null}})),
    )
    .await
    .expect("uncordon the real node");
}

/// The agent's RBAC for the namespace's `default` ServiceAccount: the
/// chart's rules (get and watch the job kinds).
pub(super) async fn agent_rbac(bed: &Testbed, ns: &str) {
    rebound_sim::testbed::grant_restart_agent(&bed.client(), ns, "rebound-e2e")
        .await
        .expect("the agent's RBAC");
}

/// The restart agent's ClusterRoles as `config/default` installs them,
/// which the controller binds in each namespace with wired pods.
pub(super) async fn agent_role(bed: &Testbed) {
    rebound_sim::testbed::install_restart_agent_role(&bed.client(), "rebound-e2e")
        .await
        .expect("the agent's ClusterRole");
}

/// [`wait`] that adds the kubelet's last log lines to the panic.
pub(super) async fn wait_long<T, F, Fut>(
    what: &str,
    within: Duration,
    node: &RealNode,
    mut check: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if start.elapsed() > within {
            panic!(
                "timed out after {within:?} waiting for: {what}; kubelet:\n{}",
                node.log_tail("kubelet", 40)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
