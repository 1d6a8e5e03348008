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
];

/// Struct fields of the built-in kinds that are owned as a whole.
const ATOMIC_STRUCTS: &[&str] = &["involvedObject", "regarding", "related"];

/// How lists merge at a point of an object: by the built-in strategic
/// merge keys, or for custom resources by the schema's
/// `x-kubernetes-list-type` (`map` with `x-kubernetes-list-map-keys`,
/// `set`, `atomic`), `conditions` by `type` when the schema says nothing.
#[derive(Debug, Clone, Copy)]
pub struct Lists<'a> {
    /// A custom resource (no strategic merge keys).
    pub custom: bool,
    /// The schema node at this point (custom resources), if known.
    pub schema: Option<&'a Value>,
}

impl<'a> Lists<'a> {
    /// Built-in kinds.
    pub fn builtin() -> Self {
        Self {
            custom: false,
            schema: None,
        }
    }

    /// A custom resource with its version's `openAPIV3Schema`.
    pub fn custom(schema: Option<&'a Value>) -> Self {
        Self {
            custom: true,
            schema,
        }
    }

    fn field(self, k: &str) -> Self {
        let schema = self.schema.and_then(|s| {
            s.pointer(&format!(
                "/properties/{}",
                k.replace('~', "~0").replace('/', "~1")
            ))
            .or_else(|| s.get("additionalProperties").filter(|a| a.is_object()))
        });
        Self { schema, ..self }
    }

    fn items(self) -> Self {
        Self {
            schema: self.schema.and_then(|s| s.get("items")),
            ..self
        }
    }
}

/// Merge rule of one list.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Rule {
    Atomic,
    Set,
    Keys(Vec<String>),
}

fn strategy(field: &str, items: &[Value], lists: Lists<'_>) -> Rule {
    if lists.custom {
        if let Some(s) = lists.schema {
            match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
                Some("map") => {
                    let keys: Vec<String> = s
                        .get("x-kubernetes-list-map-keys")
                        .and_then(Value::as_array)
                        .map(|a| {
                            a.iter()
                                .filter_map(Value::as_str)
                                .map(str::to_string)
                                .collect()
                        })
                        .unwrap_or_default();
                    if !keys.is_empty() {
                        return Rule::Keys(keys);
                    }
                }
                Some("set") => return Rule::Set,
                Some("atomic") => return Rule::Atomic,
                _ => {}
            }
        }
        if field == "conditions" && items.iter().all(|i| i.get("type").is_some()) {
            return Rule::Keys(vec!["type".into()]);
        }
        if field == "finalizers" {
            return Rule::Set;
        }
        return Rule::Atomic;
    }
    // container ports are keyed by port and protocol (`+listMapKey`)
    if field == "ports" && items.iter().all(|i| i.get("containerPort").is_some()) {
        return Rule::Keys(vec!["containerPort".into(), "protocol".into()]);
    }
    match list_strategy(field, items) {
        ListStrategy::Replace => Rule::Atomic,
        ListStrategy::PrimitiveSet => Rule::Set,
        ListStrategy::Key(k) => Rule::Keys(vec![k.to_string()]),
    }
}

/// The key fields of a list item as JSON (`{"type":"Ready"}`), if it has them all.
fn item_key(item: &Value, keys: &[String]) -> Option<String> {
    let mut m = Map::new();
    for k in keys {
        m.insert(k.clone(), item.get(k)?.clone());
    }
    Some(Value::Object(m).to_string())
}

/// The leaf paths set in an object (system metadata, kind and apiVersion
/// excluded; `status` only or not at all depending on the section).
pub fn field_set(obj: &Value, lists: Lists<'_>, section: Section) -> FieldSet {
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
                        collect(
                            mk,
                            mv,
                            &mut p,
                            &mut out,
                            Lists {
                                schema: None,
                                ..lists
                            },
                        );
                    }
                }
            }
            continue;
        }
        let mut p = vec![Pe::F(k.clone())];
        collect(k, v, &mut p, &mut out, lists.field(k));
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

fn collect(name: &str, v: &Value, prefix: &mut Path, out: &mut FieldSet, lists: Lists<'_>) {
    match v {
        // object references are atomic structs (`+structType=atomic`)
        Value::Object(m) if !m.is_empty() && (lists.custom || !ATOMIC_STRUCTS.contains(&name)) => {
            for (k, c) in m {
                prefix.push(Pe::F(k.clone()));
                collect(k, c, prefix, out, lists.field(k));
                prefix.pop();
            }
        }
        Value::Array(items) => match strategy(name, items, lists) {
            Rule::Atomic => {
                out.insert(prefix.clone());
            }
            Rule::Set => {
                for i in items {
                    prefix.push(Pe::V(i.to_string()));
                    out.insert(prefix.clone());
                    prefix.pop();
                }
            }
            Rule::Keys(keys) => {
                let item_lists = lists.items();
                for i in items {
                    let Some(kj) = item_key(i, &keys) else {
                        continue;
                    };
                    prefix.push(Pe::K(kj));
                    prefix.push(Pe::Dot);
                    out.insert(prefix.clone());
                    prefix.pop();
                    if let Some(m) = i.as_object() {
                        for (k, c) in m {
                            prefix.push(Pe::F(k.clone()));
                            collect(k, c, prefix, out, item_lists.field(k));
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
pub fn merge_config(target: &mut Value, config: &Value, lists: Lists<'_>) {
    match (target, config) {
        (Value::Object(t), Value::Object(c)) => merge_map(t, c, lists),
        (t, c) => *t = c.clone(),
    }
}

fn merge_map(t: &mut Map<String, Value>, c: &Map<String, Value>, lists: Lists<'_>) {
    for (k, cv) in c {
        let child = lists.field(k);
        match cv {
            Value::Object(cm) => {
                let e = t
                    .entry(k.clone())
                    .or_insert_with(|| Value::Object(Map::new()));
                if !e.is_object() {
                    *e = Value::Object(Map::new());
                }
                if let Value::Object(tm) = e {
                    merge_map(tm, cm, child);
                }
            }
            Value::Array(ca) => {
                let mut cur = t
                    .get(k)
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                match strategy(k, ca, child) {
                    Rule::Atomic => cur = ca.clone(),
                    Rule::Set => {
                        for i in ca {
                            if !cur.contains(i) {
                                cur.push(i.clone());
                            }
                        }
                    }
                    Rule::Keys(keys) => {
                        let item_lists = child.items();
                        for i in ca {
                            let key = item_key(i, &keys);
                            match cur
                                .iter_mut()
                                .find(|x| key.is_some() && item_key(x, &keys) == key)
                            {
                                Some(x) => merge_config(x, i, item_lists),
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

/// Built-in fields a write does not own as a whole when it creates them
/// (observed on a real server: `f:spec` and `f:containers` carry no
/// `"."`, while `f:resources`, `f:env` or `f:series` do).
const NOT_OWNED_ITSELF: &[&str] = &[
    "spec",
    "status",
    "containers",
    "initContainers",
    "ephemeralContainers",
    "template",
    "source",
    "involvedObject",
    "regarding",
    "related",
];

/// Paths of the map-typed values in an object (see `BUILTIN_MAPS`; for
/// custom resources, schema nodes with `additionalProperties`).
fn map_paths(obj: &Value, lists: Lists<'_>, section: Section) -> Vec<Path> {
    fn walk(name: &str, v: &Value, prefix: &mut Path, out: &mut Vec<Path>, lists: Lists<'_>) {
        match v {
            Value::Object(m) => {
                // custom resources own every object they create; built-ins
                // every one but the top-level structs and container lists
                let is_map = if lists.custom {
                    true
                } else {
                    !m.is_empty() && !NOT_OWNED_ITSELF.contains(&name)
                };
                if is_map {
                    out.push(prefix.clone());
                }
                for (k, c) in m {
                    prefix.push(Pe::F(k.clone()));
                    walk(k, c, prefix, out, lists.field(k));
                    prefix.pop();
                }
            }
            Value::Array(items) => {
                let rule = strategy(name, items, lists);
                let keyed = matches!(rule, Rule::Keys(_));
                if rule == Rule::Set
                    || (keyed && (lists.custom || !NOT_OWNED_ITSELF.contains(&name)))
                {
                    // a set the write created is owned itself too
                    out.push(prefix.clone());
                }
                if let Rule::Keys(keys) = rule {
                    let item_lists = lists.items();
                    for i in items {
                        let (Some(kj), Some(m)) = (item_key(i, &keys), i.as_object()) else {
                            continue;
                        };
                        prefix.push(Pe::K(kj));
                        for (k, c) in m {
                            prefix.push(Pe::F(k.clone()));
                            walk(k, c, prefix, out, item_lists.field(k));
                            prefix.pop();
                        }
                        prefix.pop();
                    }
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
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
            for mk in ["labels", "annotations", "finalizers"] {
                if v.get(mk).is_some_and(|x| x.is_object() || x.is_array()) {
                    out.push(vec![Pe::F("metadata".into()), Pe::F(mk.into())]);
                }
            }
            continue;
        }
        let mut p = vec![Pe::F(k.clone())];
        walk(k, v, &mut p, &mut out, lists.field(k));
    }
    out
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
