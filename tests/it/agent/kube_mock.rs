//! The reporter's requests against a scripted API server (tower-test).

use std::time::{Duration, SystemTime};

use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use rebound::agent::fault::{Accelerator, AgentFault};
use rebound::agent::report::KubeReporter;
use rebound::agent::state::DesiredCondition;
use rebound::fault::wire::{FAULT_ANNOTATION, parse_annotation};
use serde_json::{Value, json};
use tower_test::mock::{self, Handle};

type ApiHandle = Handle<Request<Body>, Response<Body>>;

async fn expect(
    handle: &mut ApiHandle,
    method: &str,
    path: &str,
    reply: Value,
) -> (Option<String>, Value) {
    let (req, send) = handle.next_request().await.expect("a request");
    assert_eq!(req.method().as_str(), method);
    assert_eq!(req.uri().path(), path);
    let ctype = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let bytes = req.into_body().collect_bytes().await.expect("body");
    let body: Value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).expect("json body")
    };
    send.send_response(
        Response::builder()
            .body(Body::from(serde_json::to_vec(&reply).expect("reply")))
            .expect("response"),
    );
    (ctype, body)
}

fn node(conditions: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "gpu-node-1", "uid": "node-uid-1"},
        "status": {"conditions": conditions}
    })
}

#[tokio::test]
async fn conditions_and_events_are_written_as_the_controller_reads_them() {
    let _watchdog = crate::watchdog::start();
    let (svc, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(svc, "default");
    let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let server = tokio::spawn(async move {
        // load_node: a kubelet condition and no GpuFault yet.
        expect(
            &mut handle,
            "GET",
            "/api/v1/nodes/gpu-node-1",
            node(json!([{"type": "Ready", "status": "True"}])),
        )
        .await;
        // The condition: strategic merge on nodes/status, merging by type.
        let (ctype, body) = expect(
            &mut handle,
            "PATCH",
            "/api/v1/nodes/gpu-node-1/status",
            node(json!([])),
        )
        .await;
        assert_eq!(
            ctype.as_deref(),
            Some("application/strategic-merge-patch+json")
        );
        let conds = body["status"]["conditions"].as_array().expect("conditions");
        assert_eq!(conds.len(), 1);
        assert_eq!(conds[0]["type"], "GpuFault");
        assert_eq!(conds[0]["status"], "True");
        assert_eq!(conds[0]["reason"], "GpuXid79");
        assert_eq!(
            conds[0]["message"],
            "source=NvidiaXid code=79 device=3 | Xid 79 on GPU 0000:91:00.0: GPU has fallen off the bus"
        );
        assert_eq!(conds[0]["lastTransitionTime"], "2027-01-15T08:00:00Z");
        // The Event, in kube-system, regarding the Node.
        let (_, ev) = expect(
            &mut handle,
            "POST",
            "/apis/events.k8s.io/v1/namespaces/kube-system/events",
            json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "x"}, "eventTime": "2027-01-15T08:00:00.000000Z"}),
        )
        .await;
        assert_eq!(ev["reason"], "GpuXid");
        assert_eq!(ev["type"], "Warning");
        assert_eq!(ev["regarding"]["kind"], "Node");
        assert_eq!(ev["regarding"]["uid"], "node-uid-1");
        assert_eq!(ev["reportingController"], "rebound.dev/agent");
        let ann = ev["metadata"]["annotations"][FAULT_ANNOTATION]
            .as_str()
            .expect("annotation");
        let wire = parse_annotation(ann).expect("wire fault");
        assert_eq!(
            (
                wire.source.as_str(),
                wire.code.as_str(),
                wire.node.as_deref(),
                wire.device.as_deref()
            ),
            ("NvidiaXid", "79", Some("gpu-node-1"), Some("3"))
        );
        let name = ev["metadata"]["name"].as_str().expect("name").to_string();
        // A folded repeat: a merge patch of the series count.
        let (ctype, series) = expect(
            &mut handle,
            "PATCH",
            &format!("/apis/events.k8s.io/v1/namespaces/kube-system/events/{name}"),
            json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": name}, "eventTime": "2027-01-15T08:00:00.000000Z"}),
        )
        .await;
        assert_eq!(ctype.as_deref(), Some("application/merge-patch+json"));
        assert_eq!(
            series,
            json!({"series": {"count": 7, "lastObservedTime": "2027-01-15T08:01:00.000000Z"}})
        );
        // Clearing: status False, a transition again.
        let (_, body) = expect(
            &mut handle,
            "PATCH",
            "/api/v1/nodes/gpu-node-1/status",
            node(json!([])),
        )
        .await;
        let c = &body["status"]["conditions"][0];
        assert_eq!(
            (
                c["status"].as_str(),
                c["reason"].as_str(),
                c["message"].as_str()
            ),
            (Some("False"), Some("GpuHealthy"), Some(""))
        );
        assert!(c.get("lastTransitionTime").is_some());
    });

    let mut r = KubeReporter::new(client, "gpu-node-1", "kube-system");
    let existing = r.load_node().await.expect("node read");
    assert!(existing.is_empty());
    let fault = AgentFault {
        family: Accelerator::Gpu,
        source: "NvidiaXid",
        code: "79".into(),
        device: Some("3".into()),
        reason: "GpuXid",
        message: "Xid 79 on GPU 0000:91:00.0: GPU has fallen off the bus".into(),
    };
    let faulty = DesiredCondition {
        type_: "GpuFault",
        status: true,
        reason: "GpuXid79".into(),
        message: rebound::fault::wire::format_condition_message(&[fault.to_wire("gpu-node-1")]),
    };
    assert!(r.write_condition(&faulty, t).await.expect("written"));
    // Unchanged: no request.
    assert!(!r.write_condition(&faulty, t).await.expect("skipped"));
    let name = r.create_event(&fault, 1, t, t).await.expect("event");
    assert!(name.starts_with("gpu-node-1."));
    r.update_series(&name, 7, t + Duration::from_secs(60))
        .await
        .expect("series");
    let healthy = DesiredCondition {
        type_: "GpuFault",
        status: false,
        reason: "GpuHealthy".into(),
        message: String::new(),
    };
    assert!(
        r.write_condition(&healthy, t + Duration::from_secs(700))
            .await
            .expect("cleared")
    );
    server.await.expect("server script");
}

#[tokio::test]
async fn existing_condition_is_read_back_and_healthy_absent_condition_is_not_written() {
    let _watchdog = crate::watchdog::start();
    let (svc, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(svc, "default");
    let server = tokio::spawn(async move {
        expect(
            &mut handle,
            "GET",
            "/api/v1/nodes/gpu-node-1",
            node(json!([{
                "type": "NpuFault", "status": "True", "reason": "NpuFaultA4025021",
                "message": "source=AscendNpu code=A4025021 device=0 | NPU 0 health Alarm",
                "lastHeartbeatTime": "2027-01-15T08:00:00Z"
            }])),
        )
        .await;
    });
    let mut r = KubeReporter::new(client, "gpu-node-1", "default");
    let existing = r.load_node().await.expect("read");
    server.await.expect("server");
    assert_eq!(existing.len(), 1);
    assert_eq!(existing[0].family, Accelerator::Npu);
    assert_eq!(existing[0].faults[0].code, "A4025021");
    let healthy_gpu = DesiredCondition {
        type_: "GpuFault",
        status: false,
        reason: "GpuHealthy".into(),
        message: String::new(),
    };
    // Never written, healthy: nothing to do (no request is scripted).
    assert!(
        !r.write_condition(&healthy_gpu, SystemTime::now())
            .await
            .expect("no write")
    );
}

fn once_args(log: &std::path::Path) -> rebound::agent::AgentArgs {
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
        "0000:3b:00.0=0,0000:5e:00.0=1",
        "--event-namespace",
        "kube-system",
    ])
    .expect("flags")
}

fn temp_log(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("rebound-agent-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let log = dir.join("kmsg.txt");
    std::fs::write(&log, text).expect("write");
    log
}

/// `rebound agent --once` end to end: read the node, write the
/// condition, one Event per distinct fault with its count.
#[tokio::test]
async fn once_run_writes_condition_then_one_event_per_fault() {
    let _watchdog = crate::watchdog::start();
    let log = temp_log(
        "once",
        "[ 1.0] NVRM: Xid (PCI:0000:3b:00): 48, DBE\n[ 1.1] NVRM: Xid (PCI:0000:3b:00): 48, DBE\n\
         [ 2.0] NVRM: Xid (PCI:0000:5e:00): 13, Graphics Exception\n",
    );
    let (svc, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(svc, "default");
    let server = tokio::spawn(async move {
        expect(
            &mut handle,
            "GET",
            "/api/v1/nodes/gpu-node-1",
            node(json!([{"type": "Ready", "status": "True"}])),
        )
        .await;
        let (_, body) = expect(
            &mut handle,
            "PATCH",
            "/api/v1/nodes/gpu-node-1/status",
            node(json!([])),
        )
        .await;
        let c = &body["status"]["conditions"][0];
        assert_eq!(
            (
                c["type"].as_str(),
                c["status"].as_str(),
                c["reason"].as_str()
            ),
            (Some("GpuFault"), Some("True"), Some("GpuXid"))
        );
        let message = c["message"].as_str().unwrap_or_default();
        assert_eq!(
            message
                .lines()
                .map(super::without_occurrence)
                .collect::<Vec<_>>(),
            [
                "source=NvidiaXid code=48 device=0 | Xid 48 on GPU 0000:3b:00.0: DBE",
                "source=NvidiaXid code=13 device=1 | Xid 13 on GPU 0000:5e:00.0: Graphics Exception"
            ]
        );
        assert!(
            message.lines().next().is_some_and(|l| l.contains(" n=2 ")),
            "{message}"
        );
        let reply = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "x"}, "eventTime": "2027-01-15T08:00:00.000000Z"});
        let (_, e13) = expect(
            &mut handle,
            "POST",
            "/apis/events.k8s.io/v1/namespaces/kube-system/events",
            reply.clone(),
        )
        .await;
        let (_, e48) = expect(
            &mut handle,
            "POST",
            "/apis/events.k8s.io/v1/namespaces/kube-system/events",
            reply,
        )
        .await;
        let code = |e: &Value| {
            parse_annotation(
                e["metadata"]["annotations"][FAULT_ANNOTATION]
                    .as_str()
                    .expect("annotation"),
            )
            .expect("wire")
            .code
        };
        assert_eq!(
            (code(&e13), code(&e48)),
            ("13".to_string(), "48".to_string())
        );
        assert!(e13.get("series").is_none());
        assert_eq!(e48["series"]["count"], 2);
        assert!(handle.next_request().await.is_none(), "no other request");
    });
    rebound::agent::run_with_client(once_args(&log), Some(client))
        .await
        .expect("run");
    server.await.expect("server script");
    let _ = std::fs::remove_dir_all(log.parent().expect("dir"));
}

/// After a restart in the same boot, the faults of our condition are
/// restored: no Event again, no write when nothing changed.
#[tokio::test]
async fn restart_restores_the_condition_without_writes() {
    let _watchdog = crate::watchdog::start();
    let log = temp_log("restart", "nothing here\n");
    let (svc, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(svc, "default");
    let server = tokio::spawn(async move {
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        expect(
            &mut handle,
            "GET",
            "/api/v1/nodes/gpu-node-1",
            node(json!([{
                "type": "GpuFault", "status": "True", "reason": "GpuXid79",
                "message": "source=NvidiaXid code=79 device=0 at=2026-12-01T10:00:00.000Z n=1 | Xid 79 on GPU 0000:3b:00.0: GPU has fallen off the bus",
                "lastHeartbeatTime": now, "lastTransitionTime": now
            }])),
        )
        .await;
        assert!(handle.next_request().await.is_none(), "nothing to write");
    });
    rebound::agent::run_with_client(once_args(&log), Some(client))
        .await
        .expect("run");
    server.await.expect("server script");
    let _ = std::fs::remove_dir_all(log.parent().expect("dir"));
}
