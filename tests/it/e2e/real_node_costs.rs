//! The real node's per-pod costs, measured (`rebound_sim::envtest::node::measure`):
//! an ignored test, run by hand, that prints the durations
//! docs/simulated-kubelet.md compares with the modelled `PodCosts`.
//!
//! `REBOUND_REAL_NODE_PODS=8 cargo test --locked --test it e2e::real_node_costs -- --ignored --nocapture`

use super::real_node::real_node_or_skip;
use super::*;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Patch, PatchParams, PostParams};
use rebound_sim::envtest::node::measure::{measure, report};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, run by hand (docs/simulated-kubelet.md)"]
async fn real_node_pod_costs() {
    let Some(node) = real_node_or_skip("real_node_pod_costs").await else {
        return;
    };
    let pods: usize = std::env::var("REBOUND_REAL_NODE_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let cfg = Testbed::real_upstream().await.expect("the control plane");
    let client = kube::Client::try_from(cfg).expect("client");
    let ns = format!("measure-{}", std::process::id());
    let nsobj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).expect("ns");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &nsobj)
        .await
        .expect("namespace");
    wait("the default ServiceAccount", T, || async {
        Api::<ServiceAccount>::namespaced(client.clone(), &ns)
            .get_opt("default")
            .await
            .ok()
            .flatten()
    })
    .await;
    let pp = PatchParams::apply("rebound-measure").force();
    let role: k8s_openapi::api::rbac::v1::Role = serde_json::from_value(json!({
        "metadata": {"name": "pods", "namespace": ns},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "watch"]}],
    }))
    .expect("role");
    Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(client.clone(), &ns)
        .patch("pods", &pp, &Patch::Apply(&role))
        .await
        .expect("role");
    let rb: k8s_openapi::api::rbac::v1::RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "pods", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pods"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}],
    }))
    .expect("binding");
    Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(client.clone(), &ns)
        .patch("pods", &pp, &Patch::Apply(&rb))
        .await
        .expect("binding");
    let port: u16 = super::real_node::api_port().parse().expect("the API port");
    let m = measure(client.clone(), &ns, node, pods, port)
        .await
        .unwrap_or_else(|e| panic!("{e}; kubelet:\n{}", node.log_tail("kubelet", 40)));
    println!("{pods} pods on the real node (median / max):");
    for r in report(&m) {
        println!("  {:<36} {:>8.2?} {:>8.2?}", r.what, r.median, r.max);
    }
    let _ = Api::<Namespace>::all(client)
        .delete(&ns, &Default::default())
        .await;
}
