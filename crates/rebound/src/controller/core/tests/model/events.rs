//! Fault Events as the model's tenants and agents write them: the
//! `rebound.dev/fault` annotation, in any namespace, naming a node (and a
//! device, a code, the reporter's `at` and a count) or a pod.

use super::*;
use k8s_openapi::api::core::v1::Event;

/// What a fault Event says.
#[derive(Clone, Debug)]
pub struct FaultEvent {
    pub namespace: String,
    pub name: String,
    pub node: Option<String>,
    pub pod: Option<String>,
    pub code: String,
    pub device: Option<String>,
    /// The reporter's occurrence time (ms), copied from a line or made up.
    pub at_ms: Option<i64>,
    pub count: i32,
    pub message_bytes: usize,
}

impl FaultEvent {
    /// An XID Event about `node` in `namespace`.
    pub fn xid(namespace: &str, name: &str, node: &str, code: &str) -> FaultEvent {
        FaultEvent {
            namespace: namespace.into(),
            name: name.into(),
            node: Some(node.into()),
            pod: None,
            code: code.into(),
            device: Some("0".into()),
            at_ms: None,
            count: 1,
            message_bytes: 0,
        }
    }
}

impl Model {
    /// The Event object, last observed now.
    pub fn fault_event(&self, e: &FaultEvent) -> Event {
        let now = time(self.wall());
        let wf = WireFault {
            source: "NvidiaXid".into(),
            code: e.code.clone(),
            node: e.node.clone(),
            device: e.device.clone(),
            at: e
                .at_ms
                .and_then(DateTime::from_timestamp_millis)
                .map(wire::format_at),
            message: (e.message_bytes > 0).then(|| "x".repeat(e.message_bytes)),
            ..Default::default()
        };
        let involved = match (&e.pod, &e.node) {
            (Some(p), _) => json!({"kind": "Pod", "name": p, "namespace": e.namespace}),
            (None, Some(n)) => json!({"kind": "Node", "name": n}),
            _ => json!({}),
        };
        serde_json::from_value(json!({
            "metadata": {"name": e.name, "namespace": e.namespace,
                "uid": format!("uid-{}-{}", e.namespace, e.name),
                "annotations": {wire::FAULT_ANNOTATION: serde_json::to_string(&wf).unwrap_or_default()}},
            "involvedObject": involved,
            "reason": "Forged",
            "count": e.count,
            "firstTimestamp": now, "lastTimestamp": now,
        }))
        .unwrap_or_default()
    }

    /// The watch change of a fault Event written now.
    pub fn event_written(&self, e: &FaultEvent) -> Input {
        Input::Event(Change::Apply(Box::new(self.fault_event(e))))
    }

    /// The watch change of a fault Event deleted.
    pub fn event_deleted(&self, e: &FaultEvent) -> Input {
        Input::Event(Change::Delete(Box::new(self.fault_event(e))))
    }

    /// The fault line `code` on GPU `device` of `node`: its `at` (ms).
    pub fn line_at(&self, node: &str, code: &str) -> Option<i64> {
        self.lines
            .get(node)?
            .iter()
            .find(|(c, _, _, _)| c == code)
            .map(|(_, _, at, _)| *at)
    }
}
