//! Choosing the compared parts of an answer: JSON pointers with `*`
//! segments (every element of an array), kept or dropped, and filters
//! that keep only named elements of an array.

use serde_json::{Map, Value};

use super::scenario::{Filter, Keep};

fn segments(ptr: &str) -> Vec<String> {
    ptr.split('/')
        .skip(1)
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect()
}

/// Copies the parts of `v` named by `ptr` into `out`.
fn copy(v: &Value, segs: &[String], out: &mut Value) {
    let Some((first, rest)) = segs.split_first() else {
        *out = v.clone();
        return;
    };
    match v {
        Value::Array(a) if first == "*" => {
            if !out.is_array() {
                *out = Value::Array(vec![Value::Null; a.len()]);
            }
            if let Value::Array(o) = out {
                o.resize(a.len(), Value::Null);
                for (src, dst) in a.iter().zip(o.iter_mut()) {
                    copy(src, rest, dst);
                }
            }
        }
        Value::Array(a) => {
            if let (Ok(i), true) = (first.parse::<usize>(), true)
                && let Some(src) = a.get(i)
            {
                if !out.is_array() {
                    *out = Value::Array(vec![Value::Null; a.len()]);
                }
                if let Some(dst) = out.as_array_mut().and_then(|o| o.get_mut(i)) {
                    copy(src, rest, dst);
                }
            }
        }
        Value::Object(m) => {
            if let Some(src) = m.get(first.as_str()) {
                if !out.is_object() {
                    *out = Value::Object(Map::new());
                }
                if let Some(o) = out.as_object_mut() {
                    let dst = o.entry(first.clone()).or_insert(Value::Null);
                    copy(src, rest, dst);
                }
            }
        }
        _ => {}
    }
}

/// Removes the parts named by `segs`.
fn remove(v: &mut Value, segs: &[String]) {
    let Some((first, rest)) = segs.split_first() else {
        return;
    };
    match v {
        Value::Array(a) if first == "*" => {
            for e in a {
                if rest.is_empty() {
                    continue;
                }
                remove(e, rest);
            }
        }
        Value::Object(m) => {
            if rest.is_empty() {
                m.remove(first.as_str());
            } else if let Some(c) = m.get_mut(first.as_str()) {
                remove(c, rest);
            }
        }
        Value::Array(a) => {
            if let Ok(i) = first.parse::<usize>()
                && let Some(c) = a.get_mut(i)
            {
                remove(c, rest);
            }
        }
        _ => {}
    }
}

fn filter_at(v: &mut Value, segs: &[String], f: &Filter) {
    match segs.split_first() {
        None => {
            if let Value::Array(a) = v {
                a.retain(|e| {
                    e.pointer(f.key).and_then(Value::as_str).is_some_and(|k| {
                        f.values.iter().any(|x| {
                            x == k
                                || k.strip_prefix(x.as_str())
                                    .is_some_and(|r| r.starts_with('/'))
                        })
                    })
                });
            }
        }
        Some((first, rest)) => match v {
            Value::Array(a) if first == "*" => a.iter_mut().for_each(|e| filter_at(e, rest, f)),
            Value::Object(m) => {
                if let Some(c) = m.get_mut(first.as_str()) {
                    filter_at(c, rest, f);
                }
            }
            _ => {}
        },
    }
}

/// Applies filters, then `keep`, to an answer `{status, headers, body}`
/// (or an event `{type, object}`). Top-level fields other than `body` and
/// `object` are always kept.
pub fn select(answer: &Value, filters: &[Filter], keep: &Keep) -> Value {
    let mut v = answer.clone();
    for f in filters {
        filter_at(&mut v, &segments(f.array), f);
    }
    match keep {
        Keep::All => v,
        Keep::StatusCode => {
            let mut out = Map::new();
            for k in ["status", "type", "waitTimedOut"] {
                if let Some(x) = v.get(k) {
                    out.insert(k.into(), x.clone());
                }
            }
            Value::Object(out)
        }
        Keep::Drop(ptrs) => {
            for p in ptrs {
                remove(&mut v, &segments(p));
            }
            v
        }
        Keep::Only(ptrs) => {
            let mut out = Value::Object(Map::new());
            if let Value::Object(m) = &v {
                for (k, x) in m {
                    if k != "body" && k != "object" {
                        out[k.as_str()] = x.clone();
                    }
                }
            }
            for p in ptrs {
                copy(&v, &segments(p), &mut out);
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_drop_and_filter() {
        let a = json!({"status": 200, "body": {"items": [{"name": "a", "x": 1, "y": 2}, {"name": "b", "x": 3, "y": 4}]}});
        let only = select(&a, &[], &Keep::Only(vec!["/body/items/*/x"]));
        assert_eq!(
            only,
            json!({"status": 200, "body": {"items": [{"x": 1}, {"x": 3}]}})
        );
        let drop = select(&a, &[], &Keep::Drop(vec!["/body/items/*/y"]));
        assert_eq!(drop["body"]["items"][1], json!({"name": "b", "x": 3}));
        let f = Filter {
            array: "/body/items",
            key: "/name",
            values: vec!["b".into()],
        };
        let filtered = select(&a, &[f], &Keep::All);
        assert_eq!(
            filtered["body"]["items"],
            json!([{"name": "b", "x": 3, "y": 4}])
        );
    }
}
