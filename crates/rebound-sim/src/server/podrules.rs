//! Pod rules of the real pod strategy used on create and update: the QoS
//! class and which parts of a pod's spec an update may change.

use serde_json::Value;

/// The pod QoS class from its containers' requests and limits (cpu and
/// memory), as the real server computes it on create.
pub(super) fn qos_class(pod: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|k| pod.pointer(&format!("/spec/{k}")).and_then(Value::as_array))
        .flatten()
        .collect();
    let mut any = false;
    let mut guaranteed = !containers.is_empty();
    for c in containers {
        for r in ["cpu", "memory"] {
            let req = c.pointer(&format!("/resources/requests/{r}"));
            let lim = c.pointer(&format!("/resources/limits/{r}"));
            any |= req.is_some() || lim.is_some();
            // requests default to limits when only limits are given
            if lim.is_none() || req.is_some_and(|q| Some(q) != lim) {
                guaranteed = false;
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

/// Whether a pod update changes only the mutable parts of the spec:
/// container images, `activeDeadlineSeconds`, tolerations (additions),
/// `terminationGracePeriodSeconds` and `schedulingGates` (removals).
pub(super) fn pod_spec_update_allowed(old: &Value, new: &Value) -> bool {
    let (Some(o), Some(n)) = (old.get("spec"), new.get("spec")) else {
        return old.get("spec") == new.get("spec");
    };
    let mut n = n.clone();
    for list in ["containers", "initContainers"] {
        if let (Some(oc), Some(nc)) = (
            o.get(list).and_then(Value::as_array),
            n.get_mut(list).and_then(Value::as_array_mut),
        ) && oc.len() == nc.len()
        {
            for (a, b) in oc.iter().zip(nc.iter_mut()) {
                match a.get("image") {
                    Some(img) => b["image"] = img.clone(),
                    None => {
                        if let Some(m) = b.as_object_mut() {
                            m.remove("image");
                        }
                    }
                }
            }
        }
    }
    let old_tol = o
        .get("tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let new_tol = n
        .get("tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if !old_tol.iter().all(|t| new_tol.contains(t)) {
        return false;
    }
    let old_gates = o
        .get("schedulingGates")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let new_gates = n
        .get("schedulingGates")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if !new_gates.iter().all(|g| old_gates.contains(g)) {
        return false;
    }
    if let Some(m) = n.as_object_mut() {
        for k in [
            "activeDeadlineSeconds",
            "terminationGracePeriodSeconds",
            "tolerations",
            "schedulingGates",
        ] {
            match o.get(k) {
                Some(v) => {
                    m.insert(k.into(), v.clone());
                }
                None => {
                    m.remove(k);
                }
            }
        }
    }
    n == *o
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pod_spec_mutability() {
        let old = json!({"spec": {"nodeName": "", "containers": [{"name": "c", "image": "a"}], "tolerations": [{"key": "x"}]}});
        let image = json!({"spec": {"nodeName": "", "containers": [{"name": "c", "image": "b"}], "tolerations": [{"key": "x"}, {"key": "y"}]}});
        assert!(pod_spec_update_allowed(&old, &image));
        let node = json!({"spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "a"}], "tolerations": [{"key": "x"}]}});
        assert!(!pod_spec_update_allowed(&old, &node));
        let fewer = json!({"spec": {"nodeName": "", "containers": [{"name": "c", "image": "a"}]}});
        assert!(!pod_spec_update_allowed(&old, &fewer));
    }

    #[test]
    fn qos_classes() {
        let pod = |res: Value| json!({"spec": {"containers": [{"name": "c", "image": "i", "resources": res}]}});
        assert_eq!(qos_class(&pod(json!({}))), "BestEffort");
        assert_eq!(
            qos_class(&pod(json!({"requests": {"cpu": "1"}}))),
            "Burstable"
        );
        assert_eq!(
            qos_class(&pod(json!({"limits": {"cpu": "1", "memory": "1Gi"}}))),
            "Guaranteed"
        );
        assert_eq!(
            qos_class(&pod(
                json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}})
            )),
            "Burstable"
        );
    }
}
