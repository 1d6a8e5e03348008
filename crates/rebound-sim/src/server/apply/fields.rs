//! Which fields an object sets: leaf field paths per list strategy
//! (built-in merge keys or a custom resource's schema), reading and
//! removing the value at a path, the paths of map-typed values.

use serde_json::{Map, Value};

use crate::server::patch::{ListStrategy, list_strategy};

use super::{FieldSet, Path, Pe};

pub(super) const SYSTEM_META: &[&str] = &[
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
pub(super) const ATOMIC_STRUCTS: &[&str] = &["involvedObject", "regarding", "related"];

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

    pub(super) fn field(self, k: &str) -> Self {
        let schema = self.schema.and_then(|s| {
            s.pointer(&format!(
                "/properties/{}",
                k.replace('~', "~0").replace('/', "~1")
            ))
            .or_else(|| s.get("additionalProperties").filter(|a| a.is_object()))
        });
        Self { schema, ..self }
    }

    pub(super) fn items(self) -> Self {
        Self {
            schema: self.schema.and_then(|s| s.get("items")),
            ..self
        }
    }
}

/// Merge rule of one list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Rule {
    Atomic,
    Set,
    Keys(Vec<String>),
}

pub(super) fn strategy(field: &str, items: &[Value], lists: Lists<'_>) -> Rule {
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
pub(super) fn item_key(item: &Value, keys: &[String]) -> Option<String> {
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

pub(super) fn key_matches(item: &Value, key_json: &str) -> bool {
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
pub(super) fn remove_at(obj: &mut Value, path: &[Pe]) {
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

/// Built-in fields a write does not own as a whole when it creates them
/// (observed on a real server: `f:spec` and `f:containers` carry no
/// `"."`, while `f:resources`, `f:env` or `f:series` do).
pub(super) const NOT_OWNED_ITSELF: &[&str] = &[
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
pub(super) fn map_paths(obj: &Value, lists: Lists<'_>, section: Section) -> Vec<Path> {
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
