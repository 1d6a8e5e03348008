//! Structural-schema handling for custom resources, as the real server does
//! on every write: apply `default`s, drop unknown fields (unless
//! `x-kubernetes-preserve-unknown-fields`), then check types, `required`,
//! `enum`, bounds and patterns. Not covered: CEL `x-kubernetes-validations`,
//! `format`, `oneOf`/`anyOf`/`allOf`/`not` (see docs/embedded-cluster.md).

use std::cell::RefCell;
use std::collections::HashMap;

use serde_json::{Map, Value};

use super::errors::Cause;

/// What a schema pass found.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Validation failures (422 when non-empty).
    pub causes: Vec<Cause>,
    /// Paths of dropped unknown fields (a `Warning` each, 400 when strict).
    pub pruned: Vec<String>,
}

/// Defaults, prunes and validates `obj` in place against `schema` (the
/// CRD version's `openAPIV3Schema`).
pub fn apply(schema: &Value, obj: &mut Value) -> Outcome {
    let mut out = Outcome::default();
    walk(schema, obj, "", &mut out, true);
    out
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn short(v: &Value) -> String {
    match v {
        Value::String(s) => format!("\"{s}\""),
        Value::Object(_) => "\"object\"".into(),
        Value::Array(_) => "\"array\"".into(),
        other => other.to_string(),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn flag(schema: &Value, name: &str) -> bool {
    schema.get(name).and_then(Value::as_bool).unwrap_or(false)
}

thread_local! {
    static REGEXES: RefCell<HashMap<String, Option<regex::Regex>>> = RefCell::new(HashMap::new());
}

fn pattern_matches(pattern: &str, s: &str) -> bool {
    REGEXES.with(|c| {
        let mut c = c.borrow_mut();
        let re = c
            .entry(pattern.to_string())
            .or_insert_with(|| regex::Regex::new(pattern).ok());
        re.as_ref().is_none_or(|re| re.is_match(s))
    })
}

fn walk(schema: &Value, v: &mut Value, path: &str, out: &mut Outcome, root: bool) {
    let int_or_string = flag(schema, "x-kubernetes-int-or-string");
    let ty = schema.get("type").and_then(Value::as_str);
    if int_or_string {
        if !matches!(type_name(v), "integer" | "string") {
            out.causes.push(Cause {
                reason: "FieldValueTypeInvalid",
                field: path.to_string(),
                message: format!(
                    "Invalid value: {}: {path} in body must be of type integer-or-string",
                    short(v)
                ),
            });
        }
        return;
    }
    if let Some(ty) = ty {
        let actual = type_name(v);
        let ok = actual == ty || (ty == "number" && actual == "integer");
        if !ok {
            out.causes.push(Cause {
                reason: "FieldValueTypeInvalid",
                field: path.to_string(),
                message: format!(
                    "Invalid value: \"{actual}\": {path} in body must be of type {ty}: \"{actual}\""
                ),
            });
            return;
        }
    }
    if let Some(Value::Array(allowed)) = schema.get("enum")
        && !allowed.contains(v)
    {
        let list = allowed.iter().map(short).collect::<Vec<_>>().join(", ");
        out.causes.push(Cause {
            reason: "FieldValueNotSupported",
            field: path.to_string(),
            message: format!("Unsupported value: {}: supported values: {list}", short(v)),
        });
    }
    match v {
        Value::Object(map) => walk_object(schema, map, path, out, root),
        Value::Array(items) => {
            let n = items.len() as u64;
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
                && n < min
            {
                out.causes.push(Cause {
                    reason: "FieldValueInvalid",
                    field: path.to_string(),
                    message: format!(
                        "Invalid value: {n}: {path} in body should have at least {min} items"
                    ),
                });
            }
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && n > max
            {
                out.causes.push(Cause {
                    reason: "FieldValueTooMany",
                    field: path.to_string(),
                    message: format!("Too many: {n}: must have at most {max} items"),
                });
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    walk(item_schema, item, &format!("{path}[{i}]"), out, false);
                }
            }
        }
        Value::String(s) => {
            let n = s.chars().count() as u64;
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
                && n > max
            {
                out.causes.push(Cause {
                    reason: "FieldValueTooLong",
                    field: path.to_string(),
                    message: format!("Too long: may not be more than {max} bytes"),
                });
            }
            if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
                && n < min
            {
                out.causes.push(Cause {
                    reason: "FieldValueInvalid",
                    field: path.to_string(),
                    message: format!(
                        "Invalid value: \"{s}\": {path} in body should be at least {min} chars long"
                    ),
                });
            }
            if let Some(p) = schema.get("pattern").and_then(Value::as_str)
                && !pattern_matches(p, s)
            {
                out.causes.push(Cause {
                    reason: "FieldValueInvalid",
                    field: path.to_string(),
                    message: format!("Invalid value: \"{s}\": {path} in body should match '{p}'"),
                });
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(0.0);
            if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
                let excl = flag(schema, "exclusiveMinimum");
                if x < min || (excl && x == min) {
                    out.causes.push(Cause { reason: "FieldValueInvalid", field: path.to_string(), message: format!("Invalid value: {n}: {path} in body should be greater than or equal to {min}") });
                }
            }
            if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
                let excl = flag(schema, "exclusiveMaximum");
                if x > max || (excl && x == max) {
                    out.causes.push(Cause { reason: "FieldValueInvalid", field: path.to_string(), message: format!("Invalid value: {n}: {path} in body should be less than or equal to {max}") });
                }
            }
        }
        _ => {}
    }
}

fn walk_object(
    schema: &Value,
    map: &mut Map<String, Value>,
    path: &str,
    out: &mut Outcome,
    root: bool,
) {
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties");
    let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
    let embedded = flag(schema, "x-kubernetes-embedded-resource");
    // defaults first, as the real server defaults before validating
    if let Some(props) = props {
        for (k, ps) in props {
            if !map.contains_key(k)
                && let Some(d) = ps.get("default")
            {
                map.insert(k.clone(), d.clone());
            }
        }
    }
    let keys: Vec<String> = map.keys().cloned().collect();
    for k in keys {
        let p = join(path, &k);
        let child_schema = props.and_then(|ps| ps.get(&k));
        let meta_like =
            (root || embedded) && matches!(k.as_str(), "apiVersion" | "kind" | "metadata");
        if meta_like && (k == "metadata" || child_schema.is_none()) {
            continue;
        }
        let nullable = child_schema.is_some_and(|s| flag(s, "nullable"));
        if map.get(&k).is_some_and(Value::is_null) {
            if !nullable {
                map.remove(&k);
            }
            continue;
        }
        match (child_schema, additional) {
            (Some(s), _) => {
                if let Some(child) = map.get_mut(&k) {
                    walk(s, child, &p, out, false);
                }
            }
            (None, Some(Value::Object(s))) => {
                if let Some(child) = map.get_mut(&k) {
                    walk(&Value::Object(s.clone()), child, &p, out, false);
                }
            }
            (None, Some(Value::Bool(true))) => {}
            (None, _) if preserve => {}
            (None, _) => {
                map.remove(&k);
                out.pruned.push(p);
            }
        }
    }
    if let Some(Value::Array(req)) = schema.get("required") {
        for r in req.iter().filter_map(Value::as_str) {
            if !map.contains_key(r) {
                out.causes.push(Cause {
                    reason: "FieldValueRequired",
                    field: join(path, r),
                    message: "Required value".into(),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_prune_and_validate() {
        let schema = json!({"type": "object", "properties": {
        "spec": {"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string"},
            "maxRetry": {"type": "integer", "default": 3},
            "policy": {"type": "string", "enum": ["A", "B"]},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "size": {"x-kubernetes-int-or-string": true}
        }}}});
        let mut o = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n"},
            "spec": {"name": "a", "bogus": 1, "free": {"any": 1}, "size": "1Gi"}});
        let out = apply(&schema, &mut o);
        assert!(out.causes.is_empty(), "{:?}", out.causes);
        assert_eq!(out.pruned, vec!["spec.bogus".to_string()]);
        assert_eq!(o["spec"]["maxRetry"], json!(3));
        assert_eq!(o["spec"]["free"]["any"], json!(1));

        let mut bad = json!({"spec": {"policy": "C", "maxRetry": "x"}});
        let out = apply(&schema, &mut bad);
        let reasons: Vec<_> = out
            .causes
            .iter()
            .map(|c| (c.reason, c.field.as_str()))
            .collect();
        assert!(reasons.contains(&("FieldValueRequired", "spec.name")));
        assert!(reasons.contains(&("FieldValueNotSupported", "spec.policy")));
        assert!(reasons.contains(&("FieldValueTypeInvalid", "spec.maxRetry")));
    }
}
