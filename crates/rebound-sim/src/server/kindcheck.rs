//! Validations of built-in kinds that a real kube-apiserver applies and
//! that a user or a controller easily trips over: owner references, node
//! taints and pod tolerations, quantities of nodes and pods, the
//! `events.k8s.io` required fields, immutable ConfigMaps and Secrets.
//! Each failure is a 422 cause with the real field and message (recorded
//! in the conformance scenario `validation-extras`).

use serde_json::{Map, Value, json};

use super::errors::Cause;
use super::quantity;

fn cause(reason: &'static str, field: impl Into<String>, message: impl Into<String>) -> Cause {
    Cause {
        reason,
        field: field.into(),
        message: message.into(),
    }
}

/// An owner reference as Go marshals it (the struct's field order; a
/// serde_json map would sort the keys), for the value in a message.
fn go_owner_ref(r: &Value) -> String {
    let mut fields = Vec::new();
    for k in [
        "apiVersion",
        "kind",
        "name",
        "uid",
        "controller",
        "blockOwnerDeletion",
    ] {
        match r.get(k) {
            Some(v) if !v.is_null() => fields.push(format!("{}:{v}", json!(k))),
            _ if matches!(k, "apiVersion" | "kind" | "name" | "uid") => {
                fields.push(format!("{}:\"\"", json!(k)));
            }
            _ => {}
        }
    }
    format!("{{{}}}", fields.join(","))
}

/// `ValidateOwnerReferences`: every reference needs a uid (the field has
/// no index, as in the real message), and at most one may be the
/// controller.
pub fn owner_references(obj: &Value) -> Vec<Cause> {
    let Some(refs) = obj
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
    else {
        return vec![];
    };
    let mut out = Vec::new();
    let mut controller: Option<String> = None;
    for r in refs {
        let uid = r.get("uid").and_then(Value::as_str).unwrap_or("");
        if uid.is_empty() {
            out.push(cause(
                "FieldValueInvalid",
                "metadata.ownerReferences.uid",
                "Invalid value: \"\": must not be empty",
            ));
        }
        if r.get("controller").and_then(Value::as_bool) == Some(true) {
            let this = format!(
                "{}/{}",
                r.get("kind").and_then(Value::as_str).unwrap_or(""),
                r.get("name").and_then(Value::as_str).unwrap_or("")
            );
            match &controller {
                Some(first) => {
                    let list: Vec<String> = refs.iter().map(go_owner_ref).collect();
                    out.push(cause(
                        "FieldValueInvalid",
                        "metadata.ownerReferences",
                        format!(
                            "Invalid value: [{}]: Only one reference can have Controller set to true. Found \"true\" in references for {first} and {this}",
                            list.join(",")
                        ),
                    ));
                }
                None => controller = Some(this),
            }
        }
    }
    out
}

const EFFECTS: &str = "\"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\"";

fn effect_ok(e: &str) -> bool {
    matches!(e, "NoSchedule" | "PreferNoSchedule" | "NoExecute")
}

/// Node taints: an effect is required and must be one of the three (the
/// real field path says `metadata.taints`, not `spec.taints`).
pub fn node_taints(node: &Value) -> Vec<Cause> {
    let Some(taints) = node.pointer("/spec/taints").and_then(Value::as_array) else {
        return vec![];
    };
    let mut out = Vec::new();
    for (i, t) in taints.iter().enumerate() {
        let field = format!("metadata.taints[{i}].effect");
        match t.get("effect").and_then(Value::as_str).unwrap_or("") {
            "" => out.push(cause("FieldValueRequired", field, "Required value")),
            e if !effect_ok(e) => out.push(cause(
                "FieldValueNotSupported",
                field,
                format!("Unsupported value: \"{e}\": supported values: {EFFECTS}"),
            )),
            _ => {}
        }
    }
    out
}

/// Pod tolerations: an effect, when given, must be one of the three.
pub fn toleration_effects(pod: &Value) -> Vec<Cause> {
    let Some(tols) = pod.pointer("/spec/tolerations").and_then(Value::as_array) else {
        return vec![];
    };
    tols.iter()
        .enumerate()
        .filter_map(|(i, t)| {
            let e = t.get("effect").and_then(Value::as_str).unwrap_or("");
            (!e.is_empty() && !effect_ok(e)).then(|| {
                cause(
                    "FieldValueNotSupported",
                    format!("spec.tolerations[{i}].effect"),
                    format!("Unsupported value: \"{e}\": supported values: {EFFECTS}"),
                )
            })
        })
        .collect()
}

fn negative(q: &str) -> bool {
    quantity::value(q).is_some_and(|v| v < 0.0)
}

fn negative_in(map: Option<&Value>, field: &dyn Fn(&str) -> String) -> Vec<Cause> {
    map.and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| {
            let q = v.as_str()?;
            negative(q).then(|| {
                cause(
                    "FieldValueInvalid",
                    field(k),
                    format!("Invalid value: \"{q}\": must be greater than or equal to 0"),
                )
            })
        })
        .collect()
}

/// A node capacity or allocatable quantity that does not parse (the
/// request is a 400, as the real decoder refuses it).
pub fn node_bad_quantity(node: &Value) -> bool {
    ["capacity", "allocatable"].iter().any(|part| {
        node.pointer(&format!("/status/{part}"))
            .and_then(Value::as_object)
            .is_some_and(|m| {
                m.values()
                    .any(|q| q.as_str().is_none_or(|q| quantity::canonical(q).is_none()))
            })
    })
}

/// Negative node capacity and allocatable (`status.capacity.cpu`).
pub fn node_quantities(node: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    for part in ["capacity", "allocatable"] {
        out.extend(negative_in(
            node.pointer(&format!("/status/{part}")),
            &|k| format!("status.{part}.{k}"),
        ));
    }
    out
}

/// Negative container requests and limits
/// (`spec.containers[0].resources.requests[cpu]`).
pub fn pod_quantities(pod: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    for list in ["initContainers", "containers"] {
        let Some(cs) = pod
            .pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array)
        else {
            continue;
        };
        for (i, c) in cs.iter().enumerate() {
            for part in ["limits", "requests"] {
                out.extend(negative_in(
                    c.pointer(&format!("/resources/{part}")),
                    &|k| format!("spec.{list}[{i}].resources.{part}[{k}]"),
                ));
            }
        }
    }
    out
}

/// What an Event with an `eventTime` (a "new" Event, as `events.k8s.io/v1`
/// writes them) needs, through either API: reporting controller (a
/// qualified name), instance, action and reason. Read by their core names
/// (the object is stored as a core Event); the controller's field is
/// named as the request's API names it (`reportingController` on
/// `events.k8s.io`, `reportingComponent` on core `v1`).
pub fn v1_event_required(ev: &Value, events_api: bool) -> Vec<Cause> {
    let s = |k: &str| ev.get(k).and_then(Value::as_str).unwrap_or("");
    let mut out = Vec::new();
    let field = if events_api {
        "reportingController"
    } else {
        "reportingComponent"
    };
    let ctl = s("reportingComponent");
    if ctl.is_empty() {
        out.push(cause("FieldValueRequired", field, "Required value"));
    }
    let name = ctl.rsplit_once('/').map_or(ctl, |(_, n)| n);
    if name.is_empty() {
        out.push(cause(
            "FieldValueInvalid",
            field,
            format!("Invalid value: \"{ctl}\": name part must be non-empty"),
        ));
    }
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric();
    if !ok {
        out.push(cause(
            "FieldValueInvalid",
            field,
            format!("Invalid value: \"{ctl}\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"),
        ));
    }
    for (core, v1) in [
        ("reportingInstance", "reportingInstance"),
        ("action", "action"),
        ("reason", "reason"),
    ] {
        if s(core).is_empty() {
            out.push(cause("FieldValueRequired", v1, "Required value"));
        }
    }
    out
}

/// An update of an immutable ConfigMap or Secret (`immutable: true`): the
/// flag, `data` and (ConfigMaps) `binaryData` may not change.
pub fn immutable_update(old: &Value, new: &Value, configmap: bool) -> Vec<Cause> {
    if old.get("immutable").and_then(Value::as_bool) != Some(true) {
        return vec![];
    }
    const MSG: &str = "Forbidden: field is immutable when `immutable` is set";
    let mut out = Vec::new();
    if new.get("immutable").and_then(Value::as_bool) != Some(true) {
        out.push(cause("FieldValueForbidden", "immutable", MSG));
    }
    let fields: &[&str] = if configmap {
        &["data", "binaryData"]
    } else {
        &["data"]
    };
    for f in fields {
        let empty = |v: Option<&Value>| {
            v.is_none_or(|v| v.is_null() || v.as_object().is_some_and(Map::is_empty))
        };
        let (a, b) = (old.get(*f), new.get(*f));
        if !(empty(a) && empty(b)) && a != b {
            out.push(cause("FieldValueForbidden", *f, MSG));
        }
    }
    out
}

const OBJECT_META: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// The top-level fields of the built-in kinds checked for unknown fields
/// (others: not checked).
fn top_level(group: &str, plural: &str) -> Option<&'static [&'static str]> {
    const SPEC_STATUS: &[&str] = &["apiVersion", "kind", "metadata", "spec", "status"];
    Some(match (group, plural) {
        ("", "configmaps") => &[
            "apiVersion",
            "kind",
            "metadata",
            "data",
            "binaryData",
            "immutable",
        ],
        ("", "secrets") => &[
            "apiVersion",
            "kind",
            "metadata",
            "data",
            "stringData",
            "type",
            "immutable",
        ],
        ("", "serviceaccounts") => &[
            "apiVersion",
            "kind",
            "metadata",
            "secrets",
            "imagePullSecrets",
            "automountServiceAccountToken",
        ],
        ("", "pods" | "nodes" | "namespaces" | "services")
        | ("batch", "jobs")
        | ("apps", _)
        | ("apiextensions.k8s.io", "customresourcedefinitions") => SPEC_STATUS,
        ("coordination.k8s.io", "leases") => &["apiVersion", "kind", "metadata", "spec"],
        _ => return None,
    })
}

/// Unknown top-level and `metadata` fields of a built-in object, as the
/// real decoder names them (`metadata.bogus`, `bogus`); what
/// `fieldValidation=Strict` refuses and the default (`Warn`) warns
/// about and drops. Nested fields are not checked.
pub fn unknown_fields(group: &str, plural: &str, obj: &Value) -> Vec<String> {
    let Some(known) = top_level(group, plural) else {
        return vec![];
    };
    let mut out = Vec::new();
    if let Some(m) = obj.get("metadata").and_then(Value::as_object) {
        out.extend(
            m.keys()
                .filter(|k| !OBJECT_META.contains(&k.as_str()))
                .map(|k| format!("metadata.{k}")),
        );
    }
    if let Some(m) = obj.as_object() {
        out.extend(m.keys().filter(|k| !known.contains(&k.as_str())).cloned());
    }
    out
}

/// Drops the fields [`unknown_fields`] named.
pub fn drop_fields(obj: &mut Value, fields: &[String]) {
    for f in fields {
        match f.strip_prefix("metadata.") {
            Some(k) => {
                if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.remove(k);
                }
            }
            None => {
                if let Some(m) = obj.as_object_mut() {
                    m.remove(f);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_references_need_a_uid_and_one_controller() {
        let obj = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "a", "uid": "1", "controller": true},
            {"kind": "ConfigMap", "name": "b", "apiVersion": "v1", "controller": true}]}});
        let c = owner_references(&obj);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].field, "metadata.ownerReferences.uid");
        assert!(c[1].message.starts_with(
            "Invalid value: [{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"name\":\"a\",\"uid\":\"1\",\"controller\":true},"
        ));
        assert!(
            c[1].message
                .ends_with("Found \"true\" in references for ConfigMap/a and ConfigMap/b")
        );
    }

    #[test]
    fn immutable_data_may_not_change() {
        let old = json!({"immutable": true, "data": {"k": "v"}});
        assert!(immutable_update(&old, &old, true).is_empty());
        let new = json!({"immutable": true, "data": {"k": "w"}});
        let fields: Vec<String> = immutable_update(&old, &new, true)
            .into_iter()
            .map(|c| c.field)
            .collect();
        assert_eq!(fields, vec!["data"]);
        let unset = json!({"data": {"k": "v"}});
        assert_eq!(immutable_update(&old, &unset, false)[0].field, "immutable");
    }

    #[test]
    fn taints_tolerations_and_quantities() {
        let node = json!({"spec": {"taints": [{"key": "a", "effect": "Bogus"}, {"key": "b"}]},
            "status": {"capacity": {"cpu": "-1"}, "allocatable": {"cpu": "1"}}});
        let f: Vec<String> = node_taints(&node).into_iter().map(|c| c.field).collect();
        assert_eq!(
            f,
            vec!["metadata.taints[0].effect", "metadata.taints[1].effect"]
        );
        assert_eq!(node_quantities(&node)[0].field, "status.capacity.cpu");
        assert!(!node_bad_quantity(&node));
        assert!(node_bad_quantity(
            &json!({"status": {"capacity": {"memory": "abc"}}})
        ));
        let pod = json!({"spec": {"tolerations": [{"effect": "NoExecute"}, {"effect": "Later"}],
            "containers": [{"resources": {"requests": {"cpu": "-1"}}}]}});
        assert_eq!(
            toleration_effects(&pod)[0].field,
            "spec.tolerations[1].effect"
        );
        assert_eq!(
            pod_quantities(&pod)[0].field,
            "spec.containers[0].resources.requests[cpu]"
        );
    }

    #[test]
    fn unknown_fields_of_built_ins() {
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "bogus2": 1}, "bogus": 1, "data": {}});
        let u = unknown_fields("", "configmaps", &cm);
        assert_eq!(u, vec!["metadata.bogus2", "bogus"]);
        drop_fields(&mut cm, &u);
        assert!(unknown_fields("", "configmaps", &cm).is_empty());
        assert!(unknown_fields("example.com", "widgets", &json!({"x": 1})).is_empty());
    }

    #[test]
    fn v1_events_need_their_reporting_fields() {
        let full = json!({"reportingComponent": "x.io/c", "reportingInstance": "i", "action": "A", "reason": "R"});
        assert!(v1_event_required(&full, true).is_empty());
        let f: Vec<String> = v1_event_required(&json!({"reason": "R"}), true)
            .into_iter()
            .map(|c| c.field)
            .collect();
        assert_eq!(
            f,
            vec![
                "reportingController",
                "reportingController",
                "reportingController",
                "reportingInstance",
                "action"
            ]
        );
    }
}
