//! Server-side apply, a subset: field ownership per manager recorded in
//! `metadata.managedFields` (FieldsV1 format), merge of the applied
//! configuration (maps recursively, lists by the strategic merge keys of
//! `patch::list_strategy`, other lists atomic), conflicts when a field
//! applied with a different value is owned by another manager (`force`
//! takes it over), and removal of fields a manager stopped applying and no
//! one else owns. Non-apply writes to an object that already has
//! managedFields move ownership of the fields they change to their manager.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::patch::{ListStrategy, list_strategy};

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Pe {
    /// Map field `f:name`.
    F(String),
    /// List item by key `k:{"type":"Ready"}` (JSON of the key fields).
    K(String),
    /// Set item `v:"x"` (JSON of the value).
    V(String),
    /// The list item itself `.`.
    Dot,
}

/// A leaf field path.
pub type Path = Vec<Pe>;
/// A set of owned leaf paths.
pub type FieldSet = BTreeSet<Path>;

/// One `managedFields` entry.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Field manager.
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// apiVersion the fields were written through.
    pub api_version: String,
    /// Time of the last change.
    pub time: String,
    /// Subresource (`status`) or empty.
    pub subresource: String,
    /// Owned fields.
    pub set: FieldSet,
}

const SYSTEM_META: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
    "generateName",
];

fn strategy(field: &str, items: &[Value], custom: bool) -> ListStrategy {
    if custom {
        // custom resources: only condition lists are keyed (no schema list-type support)
        if field == "conditions" && items.iter().all(|i| i.get("type").is_some()) {
            return ListStrategy::Key("type");
        }
        if field == "finalizers" {
            return ListStrategy::PrimitiveSet;
        }
        return ListStrategy::Replace;
    }
    list_strategy(field, items)
}

/// The leaf paths set in an object (system metadata, kind and apiVersion
/// excluded; `status` excluded unless `status_only`, then only status).
pub fn field_set(obj: &Value, custom: bool, section: Section) -> FieldSet {
    let mut out = FieldSet::new();
    let Some(map) = obj.as_object() else {
        return out;
    };
    for (k, v) in map {
        let keep = match (section, k.as_str()) {
            (_, "apiVersion" | "kind") => false,
            (Section::Status, "status") => true,
            (Section::Status, _) => false,
            (Section::Main, "status") => false,
            _ => true,
        };
        if !keep {
            continue;
        }
        if k == "metadata" {
            if let Some(m) = v.as_object() {
                for (mk, mv) in m {
                    if !SYSTEM_META.contains(&mk.as_str()) {
                        let mut p = vec![Pe::F("metadata".into()), Pe::F(mk.clone())];
                        collect(mk, mv, &mut p, &mut out, custom);
                    }
                }
            }
            continue;
        }
        let mut p = vec![Pe::F(k.clone())];
        collect(k, v, &mut p, &mut out, custom);
    }
    out
}

/// Which part of an object a write may touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// The main resource: everything but status (when there is `/status`).
    Main,
    /// The `/status` subresource.
    Status,
    /// Everything (kinds without a status subresource).
    All,
}

fn collect(name: &str, v: &Value, prefix: &mut Path, out: &mut FieldSet, custom: bool) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, c) in m {
                prefix.push(Pe::F(k.clone()));
                collect(k, c, prefix, out, custom);
                prefix.pop();
            }
        }
        Value::Array(items) => match strategy(name, items, custom) {
            ListStrategy::Replace => {
                out.insert(prefix.clone());
            }
            ListStrategy::PrimitiveSet => {
                for i in items {
                    prefix.push(Pe::V(i.to_string()));
                    out.insert(prefix.clone());
                    prefix.pop();
                }
            }
            ListStrategy::Key(key) => {
                for i in items {
                    let Some(kv) = i.get(key) else { continue };
                    prefix.push(Pe::K(json!({ key: kv }).to_string()));
                    prefix.push(Pe::Dot);
                    out.insert(prefix.clone());
                    prefix.pop();
                    if let Some(m) = i.as_object() {
                        for (k, c) in m {
                            prefix.push(Pe::F(k.clone()));
                            collect(k, c, prefix, out, custom);
                            prefix.pop();
                        }
                    }
                    prefix.pop();
                }
            }
        },
        _ => {
            out.insert(prefix.clone());
        }
    }
}

fn key_matches(item: &Value, key_json: &str) -> bool {
    let Ok(Value::Object(k)) = serde_json::from_str::<Value>(key_json) else {
        return false;
    };
    k.iter().all(|(f, v)| item.get(f) == Some(v))
}

/// The value at a path, if present.
pub fn value_at<'a>(obj: &'a Value, path: &[Pe]) -> Option<&'a Value> {
    let mut cur = obj;
    for pe in path {
        cur = match pe {
            Pe::F(f) => cur.get(f)?,
            Pe::K(k) => cur.as_array()?.iter().find(|i| key_matches(i, k))?,
            Pe::V(v) => {
                let want: Value = serde_json::from_str(v).ok()?;
                cur.as_array()?.iter().find(|i| **i == want)?
            }
            Pe::Dot => cur,
        };
    }
    Some(cur)
}

/// Removes the value at a path (a field, a keyed item, a set item).
fn remove_at(obj: &mut Value, path: &[Pe]) {
    let path: Vec<&Pe> = path.iter().filter(|p| **p != Pe::Dot).collect();
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = obj;
    for pe in parents {
        let next = match pe {
            Pe::F(f) => cur.get_mut(f.as_str()),
            Pe::K(k) => cur
                .as_array_mut()
                .and_then(|a| a.iter_mut().find(|i| key_matches(i, k))),
            _ => None,
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    match last {
        Pe::F(f) => {
            if let Some(m) = cur.as_object_mut() {
                m.remove(f);
            }
        }
        Pe::K(k) => {
            if let Some(a) = cur.as_array_mut() {
                a.retain(|i| !key_matches(i, k));
            }
        }
        Pe::V(v) => {
            if let (Some(a), Ok(want)) = (cur.as_array_mut(), serde_json::from_str::<Value>(v)) {
                a.retain(|i| *i != want);
            }
        }
        Pe::Dot => {}
    }
}

/// Merges an applied configuration into an object.
pub fn merge_config(target: &mut Value, config: &Value, custom: bool) {
    match (target, config) {
        (Value::Object(t), Value::Object(c)) => merge_map(t, c, custom),
        (t, c) => *t = c.clone(),
    }
}

fn merge_map(t: &mut Map<String, Value>, c: &Map<String, Value>, custom: bool) {
    for (k, cv) in c {
        match cv {
            Value::Object(cm) => {
                let e = t
                    .entry(k.clone())
                    .or_insert_with(|| Value::Object(Map::new()));
                if !e.is_object() {
                    *e = Value::Object(Map::new());
                }
                if let Value::Object(tm) = e {
                    merge_map(tm, cm, custom);
                }
            }
            Value::Array(ca) => {
                let mut cur = t
                    .get(k)
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                match strategy(k, ca, custom) {
                    ListStrategy::Replace => cur = ca.clone(),
                    ListStrategy::PrimitiveSet => {
                        for i in ca {
                            if !cur.contains(i) {
                                cur.push(i.clone());
                            }
                        }
                    }
                    ListStrategy::Key(key) => {
                        for i in ca {
                            match cur
                                .iter_mut()
                                .find(|x| x.get(key).is_some() && x.get(key) == i.get(key))
                            {
                                Some(x) => merge_config(x, i, custom),
                                None => cur.push(i.clone()),
                            }
                        }
                    }
                }
                t.insert(k.clone(), Value::Array(cur));
            }
            other => {
                t.insert(k.clone(), other.clone());
            }
        }
    }
}

fn to_tree(set: &FieldSet) -> Value {
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

fn from_tree(v: &Value, prefix: &mut Path, out: &mut FieldSet) {
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
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.set.is_empty())
        .map(|e| {
            let mut v = json!({
                "manager": e.manager, "operation": e.operation, "apiVersion": e.api_version,
                "time": e.time, "fieldsType": "FieldsV1", "fieldsV1": to_tree(&e.set),
            });
            if !e.subresource.is_empty() {
                v["subresource"] = json!(e.subresource);
            }
            v
        })
        .collect();
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if list.is_empty() {
            m.remove("managedFields");
        } else {
            m.insert("managedFields".into(), Value::Array(list));
        }
    }
}

fn path_string(p: &Path) -> String {
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

/// What an apply request asks for.
#[derive(Debug, Clone)]
pub struct ApplyRequest<'a> {
    /// The applied configuration.
    pub config: &'a Value,
    /// Field manager.
    pub manager: &'a str,
    /// Take over conflicting fields.
    pub force: bool,
    /// Custom resource (lists atomic except `conditions`).
    pub custom: bool,
    /// Which part of the object may be touched.
    pub section: Section,
    /// apiVersion of the request.
    pub api_version: &'a str,
    /// `status` for the status subresource, else empty.
    pub subresource: &'a str,
}

/// Applies a configuration to `base` (the current object, or a fresh
/// skeleton for a create), returning the merged object with updated
/// managedFields, or the list of conflicts `(manager, field)`.
pub fn apply(base: &Value, req: &ApplyRequest<'_>) -> Result<Value, Vec<(String, String)>> {
    let mut entries = read_entries(base);
    let cfg_set = field_set(req.config, req.custom, req.section);
    let mine = |e: &Entry| {
        e.manager == req.manager && e.operation == "Apply" && e.subresource == req.subresource
    };
    let mut conflicts = Vec::new();
    for p in &cfg_set {
        let differs = value_at(base, p).is_some_and(|cur| Some(cur) != value_at(req.config, p));
        if !differs {
            continue;
        }
        for e in entries.iter_mut().filter(|e| !mine(e)) {
            if e.set.contains(p) {
                if req.force {
                    e.set.remove(p);
                } else {
                    conflicts.push((e.manager.clone(), path_string(p)));
                }
            }
        }
    }
    if !conflicts.is_empty() {
        return Err(conflicts);
    }
    let mut out = base.clone();
    let mut config = req.config.clone();
    if let Some(m) = config.as_object_mut() {
        match req.section {
            Section::Main => {
                m.remove("status");
            }
            Section::Status => m.retain(|k, _| k == "status"),
            Section::All => {}
        }
        if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.retain(|k, _| !SYSTEM_META.contains(&k.as_str()));
        }
        m.remove("apiVersion");
        m.remove("kind");
    }
    merge_config(&mut out, &config, req.custom);
    let prev: FieldSet = entries
        .iter()
        .filter(|e| mine(e))
        .flat_map(|e| e.set.iter().cloned())
        .collect();
    for p in prev.difference(&cfg_set) {
        let owned_by_other = entries
            .iter()
            .filter(|e| !mine(e))
            .any(|e| e.set.contains(p));
        if !owned_by_other {
            remove_at(&mut out, p);
        }
    }
    let time = entries
        .iter()
        .find(|e| mine(e) && e.set == cfg_set)
        .map(|e| e.time.clone())
        .unwrap_or_else(super::validate::now_rfc3339);
    // shared fields: other managers keep co-ownership of equal values
    entries.retain(|e| !mine(e));
    entries.push(Entry {
        manager: req.manager.to_string(),
        operation: "Apply".into(),
        api_version: req.api_version.to_string(),
        time,
        subresource: req.subresource.to_string(),
        set: cfg_set,
    });
    write_entries(&mut out, &entries);
    Ok(out)
}

/// After a non-apply write to an object that has managedFields, gives the
/// fields it changed to `manager` (operation `Update`).
pub fn record_update(
    old: &Value,
    new: &mut Value,
    manager: &str,
    custom: bool,
    api_version: &str,
    subresource: &str,
) {
    let mut entries = read_entries(old);
    if entries.is_empty() {
        return;
    }
    let section = if subresource == "status" {
        Section::Status
    } else {
        Section::All
    };
    let changed: FieldSet = field_set(new, custom, section)
        .into_iter()
        .filter(|p| value_at(old, p) != value_at(new, p))
        .collect();
    if changed.is_empty() {
        write_entries(new, &entries);
        return;
    }
    for e in entries.iter_mut() {
        e.set.retain(|p| !changed.contains(p));
    }
    let now = super::validate::now_rfc3339();
    match entries
        .iter_mut()
        .find(|e| e.manager == manager && e.operation == "Update" && e.subresource == subresource)
    {
        Some(e) => {
            e.set.extend(changed);
            e.time = now;
        }
        None => entries.push(Entry {
            manager: manager.to_string(),
            operation: "Update".into(),
            api_version: api_version.to_string(),
            time: now,
            subresource: subresource.to_string(),
            set: changed,
        }),
    }
    write_entries(new, &entries);
}

/// Managers per field (for debugging output and tests).
pub fn owners(obj: &Value) -> BTreeMap<String, Vec<String>> {
    let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in read_entries(obj) {
        for p in &e.set {
            m.entry(path_string(p)).or_default().push(e.manager.clone());
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(config: &'a Value, manager: &'a str, force: bool) -> ApplyRequest<'a> {
        ApplyRequest {
            config,
            manager,
            force,
            custom: false,
            section: Section::All,
            api_version: "v1",
            subresource: "",
        }
    }

    #[test]
    fn apply_conflict_force_and_removal() {
        let base = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        let a = json!({"metadata": {"name": "c", "labels": {"x": "1"}}, "data": {"k": "a", "only-a": "1"}});
        let o1 = apply(&base, &req(&a, "alice", false)).unwrap_or_default();
        assert_eq!(o1["data"]["k"], json!("a"));
        let b = json!({"data": {"k": "b"}});
        let err = apply(&o1, &req(&b, "bob", false)).err().unwrap_or_default();
        assert_eq!(err, vec![("alice".to_string(), ".data.k".to_string())]);
        let same = json!({"data": {"k": "a"}});
        assert!(
            apply(&o1, &req(&same, "bob", false)).is_ok(),
            "equal values are shared, no conflict"
        );
        let o2 = apply(&o1, &req(&b, "bob", true)).unwrap_or_default();
        assert_eq!(o2["data"]["k"], json!("b"));
        // alice stops applying only-a: removed; k now belongs to bob, kept
        let a2 = json!({"metadata": {"labels": {"x": "1"}}});
        let o3 = apply(&o2, &req(&a2, "alice", false)).unwrap_or_default();
        assert_eq!(o3["data"], json!({"k": "b"}));
        assert_eq!(owners(&o3).get(".data.k"), Some(&vec!["bob".to_string()]));
    }

    #[test]
    fn keyed_lists_merge() {
        let base = json!({"status": {"conditions": [{"type": "A", "status": "True"}]}});
        let cfg = json!({"status": {"conditions": [{"type": "B", "status": "False"}]}});
        let out = apply(&base, &req(&cfg, "m", false)).unwrap_or_default();
        assert_eq!(
            out["status"]["conditions"].as_array().map(Vec::len),
            Some(2)
        );
    }
}
