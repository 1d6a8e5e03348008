//! The agent against the embedded API server (`rebound_sim::server`):
//! the strategic merge keeps the kubelet's conditions, Events are stored
//! with their annotation, a restart writes nothing new.

use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use rebound::agent::report::KubeReporter;
use rebound::agent::state::DesiredCondition;
use rebound::fault::wire::{FAULT_ANNOTATION, parse_annotation, parse_condition_message};
use rebound_sim::server::ApiServer;
use serde_json::json;

fn args(log: &std::path::Path) -> rebound::agent::AgentArgs {
    rebound::agent::AgentArgs::from_args([
        "--node-name",
        "gpu-node-1",
        "--kmsg-file",
        log.to_str().expect("utf-8 path"),
        "--once",
        "--dcgm",
        "false",
        "--nvml",
        "false",
        "--nvidia-proc-dir",
        "/nonexistent",
        "--pci-map",
        "0000:91:00.0=3",
        "--event-namespace",
        "kube-system",
    ])
    .expect("flags")
}

fn condition<'a>(
    node: &'a Node,
    type_: &str,
) -> Option<&'a k8s_openapi::api::core::v1::NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

#[tokio::test]
async fn conditions_and_events_on_the_embedded_server() {
    let _watchdog = crate::watchdog::start();
    let server = ApiServer::builder().start().await.expect("server");
    let client = server.client();
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "gpu-node-1"}})).expect("node"),
        )
        .await
        .expect("node created");
    nodes
        .patch_status(
            "gpu-node-1",
            &PatchParams::default(),
            &Patch::Strategic(json!({"status": {"conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}
            ]}})),
        )
        .await
        .expect("kubelet condition");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces
        .get_opt("kube-system")
        .await
        .expect("get ns")
        .is_none()
    {
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "kube-system"}})).expect("ns"),
            )
            .await
            .expect("namespace");
    }

    let dir = std::env::temp_dir().join(format!("rebound-agent-embedded-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let log = dir.join("kmsg.txt");
    std::fs::write(
        &log,
        "[6781741.548779] NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n\
         [6781741.548783] NVRM: GPU 0000:91:00.0: GPU has fallen off the bus.\n\
         [6781753.400584] nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up\n",
    )
    .expect("log");
    rebound::agent::run_with_client(args(&log), Some(client.clone()))
        .await
        .expect("first run");

    let node = nodes.get("gpu-node-1").await.expect("node");
    let ready = condition(&node, "Ready").expect("the kubelet's condition is kept");
    assert_eq!(ready.status, "True");
    let gpu = condition(&node, "GpuFault").expect("GpuFault");
    assert_eq!(gpu.status, "True");
    assert_eq!(gpu.reason.as_deref(), Some("MultipleFaults"));
    let listed: Vec<_> = parse_condition_message(gpu.message.as_deref().unwrap_or(""))
        .into_iter()
        .map(|r| r.expect("parses"))
        .map(|w| (w.source, w.code, w.device))
        .collect();
    assert_eq!(
        listed,
        [
            (
                "NvidiaXid".to_string(),
                "79".to_string(),
                Some("3".to_string())
            ),
            (
                "NvidiaXid".to_string(),
                "20034".to_string(),
                Some("nvswitch1".to_string())
            ),
        ]
    );
    assert!(gpu.last_transition_time.is_some());

    let events: Api<Event> = Api::namespaced(client.clone(), "kube-system");
    let mut evs = events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items;
    evs.sort_by_key(|e| e.reason.clone());
    let got: Vec<_> = evs
        .iter()
        .map(|e| {
            let ann = e
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(FAULT_ANNOTATION))
                .expect("annotation");
            let w = parse_annotation(ann).expect("wire fault");
            (
                e.reason.clone().unwrap_or_default(),
                w.code,
                w.node.unwrap_or_default(),
                e.regarding
                    .as_ref()
                    .and_then(|r| r.name.clone())
                    .unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                "GpuXid".into(),
                "79".into(),
                "gpu-node-1".into(),
                "gpu-node-1".into()
            ),
            (
                "NvSwitchSXid".into(),
                "20034".into(),
                "gpu-node-1".into(),
                "gpu-node-1".into()
            ),
        ]
    );

    // A restart in the same boot: the faults are restored from the
    // condition; the sticky Xid 79 is read again from the log but makes
    // no new Event.
    rebound::agent::run_with_client(args(&log), Some(client.clone()))
        .await
        .expect("second run");
    assert_eq!(
        events
            .list(&ListParams::default())
            .await
            .expect("events")
            .items
            .len(),
        2
    );
    let again = nodes.get("gpu-node-1").await.expect("node");
    assert_eq!(
        condition(&again, "GpuFault").map(|c| c.message.clone()),
        Some(gpu.message.clone())
    );

    // Clearing keeps the other conditions.
    let mut reporter = KubeReporter::new(client.clone(), "gpu-node-1", "kube-system");
    reporter.load_node().await.expect("load");
    let healthy = DesiredCondition {
        type_: "GpuFault",
        status: false,
        reason: "GpuHealthy".into(),
        message: String::new(),
    };
    assert!(
        reporter
            .write_condition(&healthy, std::time::SystemTime::now())
            .await
            .expect("cleared")
    );
    let cleared = nodes.get("gpu-node-1").await.expect("node");
    assert_eq!(
        condition(&cleared, "GpuFault").map(|c| c.status.as_str()),
        Some("False")
    );
    assert_eq!(
        condition(&cleared, "Ready").map(|c| c.status.as_str()),
        Some("True")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The long-running loop: a fault appended to the followed log raises
/// the condition at once; after the quiet period it clears by itself.
#[tokio::test]
async fn follow_loop_raises_then_clears_after_the_quiet_period() {
    let _watchdog = crate::watchdog::start();
    let server = ApiServer::builder().start().await.expect("server");
    let client = server.client();
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "gpu-node-2"}})).expect("node"),
        )
        .await
        .expect("node created");
    let dir = std::env::temp_dir().join(format!("rebound-agent-loop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let log = dir.join("kmsg.txt");
    std::fs::write(&log, "").expect("log");
    let args = rebound::agent::AgentArgs::from_args([
        "--node-name",
        "gpu-node-2",
        "--kmsg-file",
        log.to_str().expect("utf-8 path"),
        "--dcgm",
        "false",
        "--nvml",
        "false",
        "--nvidia-proc-dir",
        "/nonexistent",
        "--quiet-period",
        "1s",
        "--flush-interval",
        "100ms",
        "--metrics-addr",
        "",
        "--event-namespace",
        "default",
    ])
    .expect("flags");
    let agent = tokio::spawn(rebound::agent::run_with_client(args, Some(client.clone())));

    async fn wait_for(nodes: &Api<Node>, status: &str) -> std::time::Duration {
        let start = std::time::Instant::now();
        loop {
            let n = nodes.get("gpu-node-2").await.expect("node");
            if condition(&n, "GpuFault").map(|c| c.status.as_str()) == Some(status) {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < std::time::Duration::from_secs(10),
                "GpuFault never {status}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
    std::fs::write(&log, "NVRM: Xid (PCI:0000:3b:00): 31, pid=7, name=python, Ch 00000010, intr 10000000. MMU Fault\n")
        .expect("append");
    wait_for(&nodes, "True").await;
    let cleared_after = wait_for(&nodes, "False").await;
    assert!(
        cleared_after >= std::time::Duration::from_millis(500),
        "cleared too early: {cleared_after:?}"
    );
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    assert_eq!(
        events
            .list(&ListParams::default())
            .await
            .expect("events")
            .items
            .len(),
        1
    );
    agent.abort();
    let _ = std::fs::remove_dir_all(&dir);
}
