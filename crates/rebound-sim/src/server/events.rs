//! `events.k8s.io/v1` and core `v1` Events share one storage, as on a real
//! server: objects are stored in the core form and converted field by field
//! on the way in and out, so `kubectl get events` shows what a
//! `kube::runtime::events::Recorder` wrote and the reverse.

use serde_json::{Map, Value, json};

/// (core field, events.k8s.io field) pairs that only differ by name.
const RENAMES: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

fn rename(obj: &Value, from_core: bool) -> Value {
    let Some(m) = obj.as_object() else {
        return obj.clone();
    };
    let mut out = Map::new();
    for (k, v) in m {
        let renamed = RENAMES.iter().find_map(|(core, v1)| {
            if from_core && k == core {
                Some(*v1)
            } else if !from_core && k == v1 {
                Some(*core)
            } else {
                None
            }
        });
        out.insert(renamed.unwrap_or(k).to_string(), v.clone());
    }
    Value::Object(out)
}

/// Stored core Event → `events.k8s.io/v1` Event.
pub fn core_to_v1(obj: &Value) -> Value {
    let mut v = rename(obj, true);
    v["apiVersion"] = json!("events.k8s.io/v1");
    if v.get("reportingInstance").and_then(Value::as_str) == Some("")
        && let Some(m) = v.as_object_mut()
    {
        m.remove("reportingInstance");
    }
    v
}

/// `events.k8s.io/v1` Event → core form for storage.
pub fn v1_to_core(obj: &Value) -> Value {
    let mut v = rename(obj, false);
    v["apiVersion"] = json!("v1");
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let v1 = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
            "regarding": {"kind": "Node", "name": "n"}, "note": "hello", "reportingController": "rebound",
            "reportingInstance": "r-0", "eventTime": "2026-01-01T00:00:00.000000Z", "action": "A", "reason": "R", "type": "Warning"});
        let core = v1_to_core(&v1);
        assert_eq!(core["involvedObject"]["name"], json!("n"));
        assert_eq!(core["message"], json!("hello"));
        assert_eq!(core["reportingComponent"], json!("rebound"));
        assert_eq!(core["apiVersion"], json!("v1"));
        assert_eq!(core_to_v1(&core), v1);
    }
}
