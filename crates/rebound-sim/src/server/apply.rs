//! Server-side apply, a subset: field ownership per manager recorded in
//! `metadata.managedFields` (FieldsV1 format), merge of the applied
//! configuration (maps recursively, lists by the strategic merge keys of
//! `patch::list_strategy`, other lists atomic), conflicts when a field
//! applied with a different value is owned by another manager (`force`
//! takes it over), and removal of fields a manager stopped applying and no
//! one else owns. Non-apply writes to an object that already has
//! managedFields move ownership of the fields they change to their manager.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

mod fields;
mod managed;
mod merge;

pub use fields::{Lists, Section, field_set, value_at};
use fields::{Rule, SYSTEM_META, item_key, map_paths, remove_at, strategy};
use managed::path_string;
pub use managed::{read_entries, write_entries};
pub use merge::merge_config;

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

/// What an apply request asks for.
#[derive(Debug, Clone)]
pub struct ApplyRequest<'a> {
    /// The applied configuration.
    pub config: &'a Value,
    /// Field manager.
    pub manager: &'a str,
    /// Take over conflicting fields.
    pub force: bool,
    /// How lists merge (built-in keys, or the custom resource's schema).
    pub lists: Lists<'a>,
    /// Which part of the object may be touched.
    pub section: Section,
    /// apiVersion of the request.
    pub api_version: String,
    /// `status` for the status subresource, else empty.
    pub subresource: &'a str,
}

/// Applies a configuration to `base` (the current object, or a fresh
/// skeleton for a create), returning the merged object with updated
/// managedFields, or the list of conflicts `(manager, field)`.
pub fn apply(base: &Value, req: &ApplyRequest<'_>) -> Result<Value, Vec<(String, String)>> {
    let mut entries = read_entries(base);
    let cfg_set = field_set(req.config, req.lists, req.section);
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
    merge_config(&mut out, &config, req.lists);
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
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("managedFields");
        }
        v
    };
    let existing = entries
        .iter()
        .find(|e| mine(e))
        .map(|e| (e.time.clone(), e.set == cfg_set));
    let unchanged = strip(&out) == strip(base);
    let time = match existing {
        // an apply that changed nothing keeps the time (a new manager: none)
        Some((t, _)) if unchanged => t,
        None if unchanged => String::new(),
        _ => super::validate::now_rfc3339(),
    };
    // shared fields: other managers keep co-ownership of equal values;
    // a manager keeps its place in the list
    let entry = Entry {
        manager: req.manager.to_string(),
        operation: "Apply".into(),
        api_version: req.api_version.clone(),
        time,
        subresource: req.subresource.to_string(),
        set: cfg_set,
    };
    match entries.iter().position(mine) {
        Some(i) => {
            entries[i] = entry;
        }
        None => entries.push(entry),
    }
    write_entries(&mut out, &entries);
    Ok(out)
}

/// After a non-apply write to an object that has managedFields, gives the
/// fields it changed to `manager` (operation `Update`).
pub fn record_update(
    old: &Value,
    new: &mut Value,
    manager: &str,
    lists: Lists<'_>,
    api_version: &str,
    subresource: &str,
) {
    let mut entries = read_entries(old);
    let section = if subresource == "status" {
        Section::Status
    } else {
        Section::All
    };
    let mut changed: FieldSet = field_set(new, lists, section)
        .into_iter()
        .filter(|p| value_at(old, p) != value_at(new, p))
        .collect();
    // a map the write created is owned itself too (`".": {}`)
    for p in map_paths(new, lists, section) {
        if value_at(old, &p).is_none() {
            let mut d = p.clone();
            d.push(Pe::Dot);
            changed.insert(d);
        }
    }
    if changed.is_empty() {
        write_entries(new, &entries);
        return;
    }
    for e in entries.iter_mut() {
        // fields changed by this write change hands; removed ones go
        e.set
            .retain(|p| !changed.contains(p) && value_at(new, p).is_some());
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
    use serde_json::json;

    fn req<'a>(config: &'a Value, manager: &'a str, force: bool) -> ApplyRequest<'a> {
        ApplyRequest {
            config,
            manager,
            force,
            lists: Lists::builtin(),
            section: Section::All,
            api_version: "v1".into(),
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
    fn custom_resource_lists_follow_the_schema() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "replicatedJobs": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "properties": {"name": {"type": "string"}, "replicas": {"type": "integer"}}}},
            "args": {"type": "array", "items": {"type": "string"}}}}}});
        let base = json!({"spec": {"replicatedJobs": [{"name": "a", "replicas": 1}, {"name": "b", "replicas": 1}], "args": ["x"]}});
        let cfg =
            json!({"spec": {"replicatedJobs": [{"name": "b", "replicas": 3}], "args": ["y"]}});
        let r = ApplyRequest {
            config: &cfg,
            manager: "m",
            force: false,
            lists: Lists::custom(Some(&schema)),
            section: Section::All,
            api_version: "x/v1".into(),
            subresource: "",
        };
        let out = apply(&base, &r).unwrap_or_default();
        assert_eq!(
            out["spec"]["replicatedJobs"],
            json!([{"name": "a", "replicas": 1}, {"name": "b", "replicas": 3}])
        );
        assert_eq!(
            out["spec"]["args"],
            json!(["y"]),
            "lists without a list type are atomic"
        );
        assert!(
            owners(&out).contains_key(".spec.replicatedJobs[{\"name\":\"b\"}].replicas"),
            "{:?}",
            owners(&out)
        );
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
