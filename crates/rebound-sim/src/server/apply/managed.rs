//! `metadata.managedFields` in the FieldsV1 format: reading and writing
//! the entries, field sets to and from their tree form.

use serde_json::{Map, Value, json};

use super::{Entry, FieldSet, Path, Pe};

pub(super) fn to_tree(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut cur = &mut root;
        for pe in path {
            let key = match pe {
                Pe::F(f) => format!("f:{f}"),
                Pe::K(k) => format!("k:{k}"),
                Pe::V(v) => format!("v:{v}"),
                Pe::Dot => ".".to_string(),
            };
            let next = cur.entry(key).or_insert_with(|| Value::Object(Map::new()));
            match next {
                Value::Object(m) => cur = m,
                _ => break,
            }
        }
    }
    Value::Object(root)
}

pub(super) fn from_tree(v: &Value, prefix: &mut Path, out: &mut FieldSet) {
    let Some(m) = v.as_object() else { return };
    for (k, c) in m {
        let pe = if k == "." {
            Pe::Dot
        } else if let Some(f) = k.strip_prefix("f:") {
            Pe::F(f.to_string())
        } else if let Some(x) = k.strip_prefix("k:") {
            Pe::K(x.to_string())
        } else if let Some(x) = k.strip_prefix("v:") {
            Pe::V(x.to_string())
        } else {
            continue;
        };
        prefix.push(pe);
        if c.as_object().is_none_or(Map::is_empty) {
            out.insert(prefix.clone());
        } else {
            from_tree(c, prefix, out);
        }
        prefix.pop();
    }
}

/// Reads `metadata.managedFields`.
pub fn read_entries(obj: &Value) -> Vec<Entry> {
    let Some(list) = obj
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
    else {
        return vec![];
    };
    list.iter()
        .map(|e| {
            let mut set = FieldSet::new();
            if let Some(t) = e.get("fieldsV1") {
                from_tree(t, &mut Vec::new(), &mut set);
            }
            let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            Entry {
                manager: s("manager"),
                operation: s("operation"),
                api_version: s("apiVersion"),
                time: s("time"),
                subresource: s("subresource"),
                set,
            }
        })
        .collect()
}

/// Writes entries back to `metadata.managedFields` (empty ones dropped).
pub fn write_entries(obj: &mut Value, entries: &[Entry]) {
    // the real server's order: operation, time, manager, apiVersion
    let mut sorted: Vec<&Entry> = entries.iter().filter(|e| !e.set.is_empty()).collect();
    sorted.sort_by(|a, b| {
        (&a.operation, &a.time, &a.manager, &a.api_version).cmp(&(
            &b.operation,
            &b.time,
            &b.manager,
            &b.api_version,
        ))
    });
    let list: Vec<Value> = sorted
        .into_iter()
        .map(|e| {
            let mut v = json!({
                "manager": e.manager, "operation": e.operation, "apiVersion": e.api_version,
                "time": e.time, "fieldsType": "FieldsV1", "fieldsV1": to_tree(&e.set),
            });
            if e.time.is_empty()
                && let Some(m) = v.as_object_mut()
            {
                m.remove("time");
            }
            if !e.subresource.is_empty() {
                v["subresource"] = json!(e.subresource);
            }
            v
        })
        .collect();
    if !list.is_empty() && obj.is_object() && !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if list.is_empty() {
            m.remove("managedFields");
        } else {
            m.insert("managedFields".into(), Value::Array(list));
        }
    }
}

pub(super) fn path_string(p: &Path) -> String {
    let mut s = String::new();
    for pe in p {
        match pe {
            Pe::F(f) => {
                s.push('.');
                s.push_str(f);
            }
            Pe::K(k) => s.push_str(&format!("[{k}]")),
            Pe::V(v) => s.push_str(&format!("[={v}]")),
            Pe::Dot => {}
        }
    }
    s
}
