//! The ClusterD-compatible fault view (`--clusterd-view`, issue #7) on an
//! Ascend-shaped embedded cluster: what the Volcano plugin would read from
//! `mindx-dl` (`cluster-info-device-<m>`, `cluster-info-node-cm`) and
//! `cluster-system` (`fault-job-info`), read back through the API server.

use super::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::PostParams;
use rebound_sim::cluster::Accelerator;
use serde_json::Value;
use std::collections::BTreeMap;

pub(super) const VIEW_NS: &str = "mindx-dl";
pub(super) const JOB_NS: &str = "cluster-system";
pub(super) const RES: &str = "huawei.com/Ascend910";
/// ClusterD's bound of one ConfigMap's data.
pub(super) const BOUND: usize = 800 * 1024;

/// rebound's own levels for two codes; the plugin reports both as
/// SeparateNPU, so the view shows whose level it publishes.
pub(super) const NPU: &str = r#"
apiVersion: rebound.dev/v1alpha1
kind: FaultClassification
metadata: {name: npu}
spec:
  source: AscendNpu
  rules:
  - {name: hbm, codes: ["80E18402"], level: Separate}
  - {name: heartbeat, codes: ["8C084E00"], level: PreSeparate}
  defaultLevel: Ignore
"#;

pub(super) async fn ascend_bed(server: Server, nodes: usize) -> (Testbed, ControllerHandle) {
    let bed = ascend_cluster(server, nodes).await;
    let ctl = start_view(&bed).await;
    (bed, ctl)
}

/// An Ascend cluster with the view's namespaces and the classifications.
pub(super) async fn ascend_cluster(server: Server, nodes: usize) -> Testbed {
    let bed = bed(
        server,
        SimConfig {
            nodes,
            accelerator: Accelerator::Ascend,
            gpus_per_pod: 8,
            ..SimConfig::default()
        },
    )
    .await;
    for ns in ["ml", VIEW_NS, JOB_NS] {
        bed.ensure_namespace(ns).await.expect("namespace");
    }
    bed.apply_yaml(BASE).await.expect("base objects");
    bed.apply_yaml(NPU).await.expect("npu classification");
    bed
}

/// A leading controller publishing the view (in the run's namespaces).
pub(super) async fn start_view(bed: &Testbed) -> ControllerHandle {
    bed.start_controller(args(bed, |a| {
        a.clusterd_view = true;
        a.clusterd_namespace = bed.ns(VIEW_NS);
        a.clusterd_job_namespace = bed.ns(JOB_NS);
    }))
    .await
    .expect("controller")
}

/// The view's ConfigMaps in the namespace the test calls `ns`, by name.
pub(super) async fn view_cms(bed: &Testbed, ns: &str) -> BTreeMap<String, ConfigMap> {
    Api::<ConfigMap>::namespaced(bed.client(), &bed.ns(ns))
        .list(&ListParams::default())
        .await
        .map(|l| {
            l.items
                .into_iter()
                .map(|c| (c.metadata.name.clone().unwrap_or_default(), c))
                .collect()
        })
        .unwrap_or_default()
}

/// The single data value of a view ConfigMap (its key is its name), parsed.
pub(super) fn value_of(cm: &ConfigMap) -> Value {
    let name = cm.metadata.name.clone().unwrap_or_default();
    cm.data
        .as_ref()
        .and_then(|d| d.get(&name))
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or(Value::Null)
}

/// A node's device entry and the shard holding it.
pub(super) fn device_entry(
    cms: &BTreeMap<String, ConfigMap>,
    node: &str,
) -> Option<(String, Value)> {
    let key = format!("mindx-dl-deviceinfo-{node}");
    cms.iter()
        .filter(|(n, _)| n.starts_with("cluster-info-device-"))
        .find_map(|(n, cm)| {
            let v = value_of(cm);
            v.get(&key).cloned().map(|e| (n.clone(), e))
        })
}

pub(super) fn node_entry(cms: &BTreeMap<String, ConfigMap>, node: &str) -> Option<Value> {
    cms.get("cluster-info-node-cm")
        .map(value_of)
        .and_then(|v| v.get(format!("mindx-dl-nodeinfo-{node}")).cloned())
}

/// The `-Fault` list of a device entry (a JSON array inside a string).
pub(super) fn faults(entry: &Value) -> Vec<Value> {
    entry["DeviceList"][format!("{RES}-Fault")]
        .as_str()
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default()
}

/// The controller's writes to ConfigMaps in the namespace the test calls `ns`.
pub(super) fn view_writes(bed: &Testbed, ns: &str) -> Vec<RequestRecord> {
    let ns = bed.ns(ns);
    bed.requests()
        .into_iter()
        .filter(|r| {
            r.resource == "configmaps"
                && matches!(r.verb, "create" | "update" | "patch" | "delete")
                && r.path.contains(&format!("/namespaces/{ns}/"))
                && r.user_agent
                    .as_deref()
                    .is_some_and(|u| u.starts_with("rebound-controller"))
        })
        .collect()
}

/// Every request the controller made in the view namespaces is granted by
/// `config/rbac/controller_clusterd_role.yaml`.
pub(super) fn assert_granted(bed: &Testbed) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("config/rbac/controller_clusterd_role.yaml");
    let text = std::fs::read_to_string(path).expect("rbac file");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("yaml");
    let mut grants = Vec::new();
    for d in docs.iter().filter(|d| d["kind"] == "Role") {
        let ns = bed.ns(d["metadata"]["namespace"].as_str().unwrap_or_default());
        for r in d["rules"].as_array().into_iter().flatten() {
            for res in r["resources"].as_array().into_iter().flatten() {
                for v in r["verbs"].as_array().into_iter().flatten() {
                    grants.push(format!(
                        "{ns} {} {}",
                        res.as_str().unwrap(),
                        v.as_str().unwrap()
                    ));
                }
            }
        }
    }
    for r in bed.requests() {
        let ours = r
            .user_agent
            .as_deref()
            .is_some_and(|u| u.starts_with("rebound-controller"));
        for ns in [VIEW_NS, JOB_NS].map(|n| bed.ns(n)) {
            if ours && r.path.contains(&format!("/namespaces/{ns}/")) {
                let g = format!("{ns} {} {}", r.resource, r.verb);
                assert!(grants.contains(&g), "not granted: {g} ({})", r.path);
            }
        }
    }
}

async fn a_chip_fault_appears_in_its_shard_with_rebounds_level_and_clears(server: Server) {
    let (bed, ctl) = ascend_bed(server, 4).await;
    let nodes = bed.cluster.node_names();
    // The healthy cluster is published first: every node, Healthy.
    let cms = wait("the healthy view", T, || async {
        let cms = view_cms(&bed, VIEW_NS).await;
        nodes
            .iter()
            .all(|n| {
                device_entry(&cms, n).is_some()
                    && node_entry(&cms, n).is_some_and(|e| e["NodeStatus"] == "Healthy")
            })
            .then_some(cms)
    })
    .await;
    for name in ["cluster-info-device-0", "cluster-info-node-cm"] {
        let labels = cms[name].metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get("mx-consumer-volcano").map(String::as_str),
            Some("true")
        );
    }
    let (_, e) = device_entry(&cms, &nodes[0]).unwrap();
    assert_eq!(e["CmName"], format!("mindx-dl-deviceinfo-{}", nodes[0]));
    assert!(
        e["DeviceList"][RES]
            .as_str()
            .unwrap()
            .contains("Ascend910-7")
    );

    // A job on one node, so the fault has a job to recover.
    let ml = bed.ns("ml");
    let sel = running_pytorchjob(&bed, &ml, "pt", 0).await;
    let hit = node_of(&bed, &ml, &sel).await;
    let other = nodes.iter().find(|n| **n != hit).unwrap().clone();
    bed.cluster
        .set_ascend_fault(&hit, 3, &["80E18402"])
        .await
        .unwrap();
    bed.cluster
        .set_ascend_fault(&other, 1, &["8C084E00"])
        .await
        .unwrap();
    let cms = wait("both faults in the view", T, || async {
        let cms = view_cms(&bed, VIEW_NS).await;
        let a = node_entry(&cms, &hit)?;
        let b = node_entry(&cms, &other)?;
        (a["NodeStatus"] == "UnHealthy" && b["NodeStatus"] == "PreSeparate").then_some(cms)
    })
    .await;
    // The Separate chip: its shard lists it unhealthy with SeparateNPU.
    let (shard, e) = device_entry(&cms, &hit).unwrap();
    assert!(shard.starts_with("cluster-info-device-"));
    let f = faults(&e);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0]["npu_name"], "Ascend910-3");
    assert_eq!(f[0]["fault_code"], "80E18402");
    assert_eq!(f[0]["fault_handling"], "SeparateNPU");
    assert_eq!(e["DeviceList"][format!("{RES}-Unhealthy")], "Ascend910-3");
    assert!(
        !e["DeviceList"][RES]
            .as_str()
            .unwrap()
            .contains("Ascend910-3")
    );
    assert_eq!(
        node_entry(&cms, &hit).unwrap()["FaultDevList"],
        serde_json::json!([{"DeviceType": "NPU", "DeviceId": 3, "FaultCode": ["80E18402"], "FaultLevel": "SeparateFault"}])
    );
    // The plugin said SeparateNPU for 8C084E00; rebound's classification
    // (PreSeparate) is what the view publishes.
    let (_, e) = device_entry(&cms, &other).unwrap();
    assert_eq!(faults(&e)[0]["fault_handling"], "PreSeparateNPU");
    assert_eq!(
        faults(&e)[0]["fault_time_and_level_map"]["8C084E00"]["fault_level"],
        "PreSeparateNPU"
    );
    assert_eq!(
        node_entry(&cms, &other).unwrap()["FaultDevList"][0]["FaultLevel"],
        "PreSeparateFault"
    );

    // The job restarted for the fault is listed in fault-job-info.
    let uid = pytorchjob(&bed, &ml, "pt").await.metadata.uid.unwrap();
    let rec = wait("fault-job-info lists the job", T, || async {
        let cms = view_cms(&bed, JOB_NS).await;
        let data = cms.get("fault-job-info")?.data.clone()?;
        data.get(&uid)
            .and_then(|s| serde_json::from_str::<Value>(s).ok())
    })
    .await;
    let (_, r) = rec.as_object().unwrap().iter().next().unwrap();
    assert_eq!(r["JobId"], uid.as_str());
    assert_eq!(r["NodeNames"], serde_json::json!([hit]));

    // The fault clears: the node is Healthy again, the chip available.
    bed.cluster.clear_ascend_fault(&hit, None).await.unwrap();
    wait("the fault cleared from the view", T, || async {
        let cms = view_cms(&bed, VIEW_NS).await;
        let (_, e) = device_entry(&cms, &hit)?;
        (node_entry(&cms, &hit)?["NodeStatus"] == "Healthy"
            && faults(&e).is_empty()
            && e["DeviceList"][RES].as_str()?.contains("Ascend910-3"))
        .then_some(())
    })
    .await;
    // After its restart finished the job leaves fault-job-info.
    wait(
        "fault-job-info emptied",
        Duration::from_secs(20),
        || async {
            let cms = view_cms(&bed, JOB_NS).await;
            cms.get("fault-job-info")?
                .data
                .clone()
                .unwrap_or_default()
                .is_empty()
                .then_some(())
        },
    )
    .await;
    assert_granted(&bed);
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
}

async fn a_burst_of_faults_is_written_in_few_rate_limited_batches(server: Server) {
    let (bed, ctl) = ascend_bed(server, 8).await;
    let nodes = bed.cluster.node_names();
    wait("the healthy view", T, || async {
        let cms = view_cms(&bed, VIEW_NS).await;
        nodes
            .iter()
            .all(|n| node_entry(&cms, n).is_some())
            .then_some(())
    })
    .await;
    let before = view_writes(&bed, VIEW_NS).len();
    // Eight nodes report a fault at once: eight device-plugin writes.
    futures::future::join_all(
        nodes
            .iter()
            .map(|n| bed.cluster.set_ascend_fault(n, 0, &["8C084E00"])),
    )
    .await
    .into_iter()
    .collect::<Result<Vec<_>, _>>()
    .unwrap();
    wait("all eight in the view", T, || async {
        let cms = view_cms(&bed, VIEW_NS).await;
        nodes
            .iter()
            .all(|n| node_entry(&cms, n).is_some_and(|e| e["NodeStatus"] == "PreSeparate"))
            .then_some(())
    })
    .await;
    // The node view can show all eight before the device shard's write of
    // the same batch, 200 ms behind it, has gone out: wait until the writes
    // stop (1 s without one; the limiter spaces them 200 ms apart).
    let mut writes = view_writes(&bed, VIEW_NS);
    let mut quiet = std::time::Instant::now();
    let settled = std::time::Instant::now();
    while quiet.elapsed() < Duration::from_secs(1) && settled.elapsed() < T {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = view_writes(&bed, VIEW_NS);
        if now.len() != writes.len() {
            writes = now;
            quiet = std::time::Instant::now();
        }
    }
    let burst = writes.len() - before;
    // One write per fault per ConfigMap would be 16 (a device shard and the
    // node view for each of 8 faults); batching makes it a few.
    assert!((2..8).contains(&burst), "{burst} writes for 8 faults");
    // At most 5 writes a second: writes are spaced by 200 ms (the log's
    // arrival times; a little slack for scheduling).
    for w in writes.windows(2) {
        let gap = w[1].at.duration_since(w[0].at);
        assert!(gap >= Duration::from_millis(150), "writes {gap:?} apart");
    }
    ctl.shutdown().await;
}

/// What a previous writer (ClusterD, or an earlier leader) left is
/// reconciled when the controller leads: the existing shard is updated in
/// place, a surplus shard deleted, ConfigMaps that are not the view's are
/// left alone.
async fn on_takeover_what_exists_is_reconciled(server: Server) {
    let bed = ascend_cluster(server, 2).await;
    let api: Api<ConfigMap> = Api::namespaced(bed.client(), &bed.ns(VIEW_NS));
    for (name, data) in [
        (
            "cluster-info-device-0",
            r#"{"mindx-dl-deviceinfo-gone":{}}"#,
        ),
        ("cluster-info-device-5", r#"{"mindx-dl-deviceinfo-old":{}}"#),
        ("cluster-info-node-cm", "{}"),
        ("cluster-info-switch-0", "{}"),
    ] {
        let cm = ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                labels: Some(BTreeMap::from([(
                    "mx-consumer-volcano".to_string(),
                    "true".to_string(),
                )])),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(name.to_string(), data.to_string())])),
            ..Default::default()
        };
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
    let ctl = start_view(&bed).await;
    let nodes = bed.cluster.node_names();
    let cms = wait("the view reconciled", T, || async {
        let cms = view_cms(&bed, VIEW_NS).await;
        (!cms.contains_key("cluster-info-device-5")
            && nodes.iter().all(|n| {
                device_entry(&cms, n).is_some_and(|(s, _)| s == "cluster-info-device-0")
                    && node_entry(&cms, n).is_some()
            }))
        .then_some(cms)
    })
    .await;
    assert!(device_entry(&cms, "gone").is_none(), "stale entry removed");
    assert_eq!(
        cms["cluster-info-switch-0"].data.as_ref().unwrap()["cluster-info-switch-0"],
        "{}",
        "not the view's: untouched"
    );
    // The request log is written as answers pass back through it: the
    // server may show the delete done a moment before its record is in.
    let writes = wait("the delete in the request log", T, || async {
        let w = view_writes(&bed, VIEW_NS);
        w.iter()
            .any(|r| r.verb == "delete" && r.path.ends_with("/configmaps/cluster-info-device-5"))
            .then_some(w)
    })
    .await;
    let verbs_on = |name: &str| -> Vec<&str> {
        writes
            .iter()
            .filter(|r| r.path.ends_with(&format!("/configmaps/{name}")))
            .map(|r| r.verb)
            .collect()
    };
    assert_eq!(verbs_on("cluster-info-device-0"), ["update"]);
    assert_eq!(verbs_on("cluster-info-node-cm"), ["update"]);
    assert_eq!(verbs_on("cluster-info-device-5"), ["delete"]);
    assert!(verbs_on("cluster-info-switch-0").is_empty());
    assert!(
        !writes.iter().any(|r| r.verb == "create"),
        "nothing recreated in {VIEW_NS}"
    );
    assert_granted(&bed);
    ctl.shutdown().await;
}

/// A request that fails (here: `cluster-system` does not exist yet) is
/// counted and retried; the rest of the view is published meanwhile.
async fn a_failing_write_is_counted_and_retried(server: Server) {
    let bed = bed(
        server,
        SimConfig {
            nodes: 2,
            accelerator: Accelerator::Ascend,
            ..SimConfig::default()
        },
    )
    .await;
    bed.ensure_namespace(VIEW_NS).await.expect("namespace");
    bed.apply_yaml(BASE).await.expect("base objects");
    let ctl = start_view(&bed).await;
    let nodes = bed.cluster.node_names();
    wait("the view published and the failure counted", T, || async {
        let cms = view_cms(&bed, VIEW_NS).await;
        // The series exists from start-up at 0: the failure is a count.
        let errors = ctl
            .metrics
            .encode()
            .lines()
            .find(|l| l.starts_with("rebound_clusterd_view_errors_total{verb=\"create\"}"))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .is_some_and(|n| n > 0.0);
        (errors && nodes.iter().all(|n| node_entry(&cms, n).is_some())).then_some(())
    })
    .await;
    bed.ensure_namespace(JOB_NS).await.expect("namespace");
    wait(
        "fault-job-info created once possible",
        Duration::from_secs(40),
        || async {
            view_cms(&bed, JOB_NS)
                .await
                .contains_key("fault-job-info")
                .then_some(())
        },
    )
    .await;
    ctl.shutdown().await;
}

e2e!(a_chip_fault_appears_in_its_shard_with_rebounds_level_and_clears);
e2e!(a_burst_of_faults_is_written_in_few_rate_limited_batches);
e2e!(on_takeover_what_exists_is_reconciled);
e2e!(a_failing_write_is_counted_and_retried);
