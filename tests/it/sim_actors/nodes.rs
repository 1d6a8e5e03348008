//! Simulated nodes and kubelets: cordoned and not-ready nodes get no new
//! pods, a not-ready node marks its pods, graceful deletions finish, and
//! the Ascend device ConfigMap carries a fault code.

use super::*;

#[tokio::test]
async fn cordoned_and_not_ready_nodes_receive_no_new_pods() {
    let _watchdog = crate::watchdog::start();
    let c = cluster(3).await;
    c.set_node_unschedulable("node-0000", true)
        .await
        .expect("cordon");
    c.set_node_ready("node-0001", false)
        .await
        .expect("not ready");
    c.set_node_condition(
        "node-0002",
        "GpuXid",
        "True",
        "Xid79",
        "GPU has fallen off the bus",
    )
    .await
    .expect("condition");
    tokio::time::sleep(Duration::from_millis(200)).await;
    c.create_pytorchjob(NS, "cx", 5, &[]).await.expect("create");
    let sel = format!("{}=cx", kf::JOB_NAME_LABEL);
    let pods = c
        .wait_for_pods_running(NS, &sel, 6, T)
        .await
        .expect("running");
    for p in &pods {
        assert_eq!(
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            Some("node-0002")
        );
    }
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(c.client());
    let n = nodes.get("node-0002").await.expect("node");
    let conds = n.status.and_then(|s| s.conditions).unwrap_or_default();
    let x = conds
        .iter()
        .find(|c| c.type_ == "GpuXid")
        .expect("condition set");
    assert_eq!(
        (x.status.as_str(), x.reason.as_deref()),
        ("True", Some("Xid79"))
    );
    assert!(
        conds
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True"),
        "other conditions kept"
    );
    c.shutdown().await;
}

#[tokio::test]
async fn ascend_configmap_carries_the_fault_code() {
    let _watchdog = crate::watchdog::start();
    let c = SimCluster::start(SimConfig {
        nodes: 2,
        accelerator: Accelerator::Ascend,
        namespaces: vec![NS.into()],
        ..SimConfig::default()
    })
    .await
    .expect("start");
    let cms: Api<ConfigMap> = Api::namespaced(c.client(), ascend::NAMESPACE);
    let healthy = cms
        .get("mindx-dl-deviceinfo-node-0001")
        .await
        .expect("configmap per node");
    let cfg: serde_json::Value =
        serde_json::from_str(&healthy.data.unwrap_or_default()[ascend::DATA_KEY])
            .expect("DeviceInfoCfg json");
    assert_eq!(
        cfg["DeviceInfo"]["DeviceList"]["huawei.com/Ascend910-Fault"],
        "[]"
    );
    c.set_ascend_fault("node-0001", 3, &["80E18402", "A8028801"])
        .await
        .expect("fault");
    let cm = cms
        .get("mindx-dl-deviceinfo-node-0001")
        .await
        .expect("configmap");
    assert_eq!(
        cm.labels().get("mx-consumer-cim").map(String::as_str),
        Some("true")
    );
    let cfg: serde_json::Value =
        serde_json::from_str(&cm.data.unwrap_or_default()[ascend::DATA_KEY])
            .expect("DeviceInfoCfg json");
    let list = &cfg["DeviceInfo"]["DeviceList"];
    let faults: serde_json::Value =
        serde_json::from_str(list["huawei.com/Ascend910-Fault"].as_str().unwrap_or(""))
            .expect("fault list");
    assert_eq!(faults[0]["npu_name"], "Ascend910-3");
    assert_eq!(faults[0]["fault_code"], "80E18402,A8028801");
    assert_eq!(list["huawei.com/Ascend910-Unhealthy"], "Ascend910-3");
    assert_eq!(cfg["CheckCode"].as_str().map(str::len), Some(64));
    c.clear_ascend_fault("node-0001", None)
        .await
        .expect("clear");
    let cm = cms
        .get("mindx-dl-deviceinfo-node-0001")
        .await
        .expect("configmap");
    let cfg: serde_json::Value =
        serde_json::from_str(&cm.data.unwrap_or_default()[ascend::DATA_KEY]).expect("json");
    assert_eq!(
        cfg["DeviceInfo"]["DeviceList"]["huawei.com/Ascend910-Fault"],
        "[]"
    );
    // NPU nodes carry the resource, and pods asking for it are placed.
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(c.client());
    let n = nodes.get("node-0000").await.expect("node");
    let cap = n.status.and_then(|s| s.capacity).unwrap_or_default();
    assert_eq!(cap.get(ascend::RESOURCE).map(|q| q.0.as_str()), Some("8"));
    c.shutdown().await;
}

fn ready_condition(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

#[tokio::test]
async fn a_node_going_not_ready_marks_its_pods_not_ready() {
    let _watchdog = crate::watchdog::start();
    let c = cluster(1).await;
    c.create_pytorchjob(NS, "nr", 1, &[]).await.expect("create");
    let sel = format!("{}=nr", kf::JOB_NAME_LABEL);
    c.wait_for_pods_running(NS, &sel, 2, T)
        .await
        .expect("running");
    c.set_node_ready("node-0000", false)
        .await
        .expect("not ready");
    let api: Api<Pod> = Api::namespaced(c.client(), NS);
    let pods = wait_for(T, "pods not ready", || {
        let api = api.clone();
        let sel = sel.clone();
        async move {
            let pods = api.list(&ListParams::default().labels(&sel)).await?.items;
            let all = pods.len() == 2
                && pods
                    .iter()
                    .all(|p| ready_condition(p).as_deref() == Some("False"));
            Ok(all.then_some(pods))
        }
    })
    .await
    .expect("marked not ready");
    assert!(
        pods.iter()
            .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
    );
    c.shutdown().await;
}

#[tokio::test]
async fn kubelets_finish_graceful_deletions() {
    let _watchdog = crate::watchdog::start();
    let c = SimCluster::start(SimConfig {
        nodes: 2,
        namespaces: vec![NS.into()],
        hold_pod_deletion: true,
        ..SimConfig::default()
    })
    .await
    .expect("start");
    c.create_pytorchjob(NS, "gd", 1, &[]).await.expect("create");
    let sel = format!("{}=gd", kf::JOB_NAME_LABEL);
    let pods = c
        .wait_for_pods_running(NS, &sel, 2, T)
        .await
        .expect("running");
    let old = pods
        .iter()
        .find(|p| p.name_any() == "gd-worker-0")
        .and_then(|p| p.uid())
        .expect("uid");
    let api: Api<Pod> = Api::namespaced(c.client(), NS);
    api.delete("gd-worker-0", &DeleteParams::default())
        .await
        .expect("delete");
    let fresh = wait_for(T, "pod replaced", || async {
        Ok(pod(&c, "gd-worker-0")
            .await
            .filter(|p| p.uid().as_deref() != Some(old.as_str()) && pod_running(p)))
    })
    .await
    .expect("the kubelet finished the deletion and the operator recreated the pod");
    assert!(fresh.metadata.deletion_timestamp.is_none());
    c.shutdown().await;
}
