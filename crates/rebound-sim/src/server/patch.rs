//! The three non-apply patch types: RFC 7386 JSON merge patch, RFC 6902
//! JSON patch and a strategic merge patch covering what nodes, pods,
//! workloads and metadata need (lists merged by a key chosen from the field
//! name, `$patch: delete|replace`, `$deleteFromPrimitiveList`,
//! `$setElementOrder` accepted and ignored).

use serde_json::{Map, Value};

use super::errors::ApiError;

/// Patch content types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/merge-patch+json`
    Merge,
    /// `application/json-patch+json`
    Json,
    /// `application/strategic-merge-patch+json`
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply)
    Apply,
}

impl PatchType {
    /// From a `Content-Type` header (parameters ignored).
    pub fn from_content_type(ct: &str) -> Option<Self> {
        match ct.split(';').next().unwrap_or("").trim() {
            "application/merge-patch+json" => Some(Self::Merge),
            "application/json-patch+json" => Some(Self::Json),
            "application/strategic-merge-patch+json" => Some(Self::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => Some(Self::Apply),
            _ => None,
        }
    }
}

/// Applies a JSON merge patch.
pub fn merge(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

/// Applies a JSON patch; failures are 422 like on the real server.
pub fn json(target: &mut Value, patch: &Value) -> Result<(), ApiError> {
    let ops: json_patch::Patch = serde_json::from_value(patch.clone())
        .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
    json_patch::patch(target, &ops).map_err(|_| ApiError::patch_rejected())
}

/// How a list field merges in a strategic merge patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListStrategy {
    /// The patch list replaces the whole list.
    Replace,
    /// Items are merged by this key.
    Key(&'static str),
    /// A list of scalars merged as a set (finalizers).
    PrimitiveSet,
}

/// The merge strategy of a list field, by field name, as declared in the
/// Kubernetes Go types of pods, nodes, workloads and metadata. Other lists
/// (e.g. `tolerations`, node `taints`, `containerStatuses`) are replaced,
/// as on the real server.
pub fn list_strategy(field: &str, items: &[Value]) -> ListStrategy {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets" => ListStrategy::Key("name"),
        "volumeMounts" => ListStrategy::Key("mountPath"),
        "volumeDevices" => ListStrategy::Key("devicePath"),
        "ports" => {
            if items.iter().any(|i| i.get("containerPort").is_some()) {
                ListStrategy::Key("containerPort")
            } else {
                ListStrategy::Key("port")
            }
        }
        "conditions" | "addresses" => ListStrategy::Key("type"),
        "ownerReferences" => ListStrategy::Key("uid"),
        "podIPs" | "hostIPs" | "hostAliases" => ListStrategy::Key("ip"),
        "resizePolicy" => ListStrategy::Key("resourceName"),
        "finalizers" => ListStrategy::PrimitiveSet,
        _ => ListStrategy::Replace,
    }
}

/// Applies a strategic merge patch (built-in kinds only: custom resources
/// answer 415 before reaching here).
pub fn strategic(target: &mut Value, patch: &Value) -> Result<(), ApiError> {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => smp_map(t, p),
        (t, p) => {
            *t = strip_directives(p);
            Ok(())
        }
    }
}

fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

fn smp_map(t: &mut Map<String, Value>, p: &Map<String, Value>) -> Result<(), ApiError> {
    match p.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            *t = match strip_directives(&Value::Object(p.clone())) {
                Value::Object(m) => m,
                _ => Map::new(),
            };
            return Ok(());
        }
        Some("delete") => {
            t.clear();
            return Ok(());
        }
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "unknown patch directive {other:?}"
            )));
        }
        None => {}
    }
    for (k, pv) in p {
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(cur)), Value::Array(del)) = (t.get_mut(field), pv) {
                cur.retain(|x| !del.contains(x));
            }
            continue;
        }
        if k.starts_with('$') {
            continue; // $setElementOrder/..., $retainKeys: order and retention not enforced
        }
        match pv {
            Value::Null => {
                t.remove(k);
            }
            Value::Object(pm) => {
                let entry = t
                    .entry(k.clone())
                    .or_insert_with(|| Value::Object(Map::new()));
                if !entry.is_object() {
                    *entry = Value::Object(Map::new());
                }
                if let Value::Object(tm) = entry {
                    smp_map(tm, pm)?;
                }
            }
            Value::Array(pa) => {
                let cur = t
                    .get(k)
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let strategy = list_strategy(k, if cur.is_empty() { pa } else { &cur });
                let merged = smp_list(cur, pa, strategy)?;
                t.insert(k.clone(), Value::Array(merged));
            }
            other => {
                t.insert(k.clone(), other.clone());
            }
        }
    }
    Ok(())
}

fn smp_list(
    mut cur: Vec<Value>,
    patch: &[Value],
    strategy: ListStrategy,
) -> Result<Vec<Value>, ApiError> {
    if patch
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        return Ok(patch
            .iter()
            .filter(|i| i.get("$patch").is_none())
            .map(strip_directives)
            .collect());
    }
    match strategy {
        ListStrategy::Replace => Ok(patch.iter().map(strip_directives).collect()),
        ListStrategy::PrimitiveSet => {
            for item in patch {
                if !cur.contains(item) {
                    cur.push(item.clone());
                }
            }
            Ok(cur)
        }
        ListStrategy::Key(key) => {
            for item in patch {
                let Some(kv) = item.get(key) else {
                    return Err(ApiError::bad_request(format!(
                        "map: {item} does not contain declared merge key: {key}"
                    )));
                };
                let pos = cur.iter().position(|c| c.get(key) == Some(kv));
                let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
                match (pos, delete) {
                    (Some(i), true) => {
                        cur.remove(i);
                    }
                    (None, true) => {}
                    (Some(i), false) => strategic(&mut cur[i], item)?,
                    (None, false) => cur.push(strip_directives(item)),
                }
            }
            Ok(cur)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn smp_merges_conditions_and_containers() {
        let mut pod = json!({"metadata": {"finalizers": ["a"], "labels": {"x": "1"}},
            "spec": {"containers": [{"name": "c1", "image": "i1"}, {"name": "c2", "image": "i2"}]},
            "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]}});
        let patch = json!({"metadata": {"finalizers": ["b"], "labels": {"x": null}},
            "spec": {"containers": [{"name": "c2", "image": "i3"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "$patch": "delete"}]}});
        assert!(strategic(&mut pod, &patch).is_ok());
        assert_eq!(pod["metadata"]["finalizers"], json!(["a", "b"]));
        assert_eq!(pod["metadata"]["labels"], json!({}));
        assert_eq!(pod["spec"]["containers"][0]["image"], json!("i1"));
        assert_eq!(pod["spec"]["containers"][1]["image"], json!("i3"));
        assert_eq!(
            pod["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}])
        );
    }

    #[test]
    fn smp_replaces_taints_and_deletes_from_primitive_list() {
        let mut node = json!({"metadata": {"finalizers": ["a", "b"]}, "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}});
        let patch = json!({"$deleteFromPrimitiveList/finalizers": ["a"], "spec": {"taints": [{"key": "z", "effect": "NoExecute"}]}});
        let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": patch["$deleteFromPrimitiveList/finalizers"].clone()}, "spec": patch["spec"].clone()});
        assert!(strategic(&mut node, &patch).is_ok());
        assert_eq!(node["metadata"]["finalizers"], json!(["b"]));
        assert_eq!(
            node["spec"]["taints"],
            json!([{"key": "z", "effect": "NoExecute"}])
        );
    }
}
