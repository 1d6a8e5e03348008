//! Server-side `Table` rendering for `kubectl get` (which asks for
//! `as=Table`): Name, a few kind-specific columns, a CRD's
//! `additionalPrinterColumns` (simple `.a.b[0].c` paths), and Age.

use serde_json::{Value, json};

use super::ops::Loc;

fn col(name: &str, ty: &str, format: &str) -> Value {
    json!({"name": name, "type": ty, "format": format, "description": "", "priority": 0})
}

/// Evaluates a simple JSONPath such as `.status.conditions[0].type`.
fn simple_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = obj;
    for part in path
        .trim_start_matches('.')
        .split('.')
        .filter(|p| !p.is_empty())
    {
        let (field, idx) = match part.split_once('[') {
            Some((f, rest)) => (f, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        if !field.is_empty() {
            cur = cur.get(field)?;
        }
        if let Some(i) = idx {
            cur = cur.get(i)?;
        }
    }
    Some(cur)
}

/// A column definition and how to compute its cell.
type Column = (Value, Box<dyn Fn(&Value) -> Value>);

fn columns(loc: &Loc) -> Vec<Column> {
    let mut cols: Vec<Column> = vec![(
        col("Name", "string", "name"),
        Box::new(|o: &Value| o.pointer("/metadata/name").cloned().unwrap_or(Value::Null)),
    )];
    match (loc.res.group.as_str(), loc.res.plural.as_str()) {
        ("", "pods") => {
            cols.push((
                col("Status", "string", ""),
                Box::new(|o: &Value| o.pointer("/status/phase").cloned().unwrap_or(json!(""))),
            ));
            cols.push((
                col("Node", "string", ""),
                Box::new(|o: &Value| {
                    o.pointer("/spec/nodeName")
                        .cloned()
                        .unwrap_or(json!("<none>"))
                }),
            ));
        }
        ("", "nodes") => cols.push((
            col("Status", "string", ""),
            Box::new(|o: &Value| {
                let ready = o
                    .pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .and_then(|cs| cs.iter().find(|c| c.get("type") == Some(&json!("Ready"))))
                    .and_then(|c| c.get("status").and_then(Value::as_str))
                    == Some("True");
                let mut s = if ready {
                    "Ready".to_string()
                } else {
                    "NotReady".to_string()
                };
                if o.pointer("/spec/unschedulable") == Some(&json!(true)) {
                    s.push_str(",SchedulingDisabled");
                }
                json!(s)
            }),
        )),
        ("", "namespaces") => cols.push((
            col("Status", "string", ""),
            Box::new(|o: &Value| o.pointer("/status/phase").cloned().unwrap_or(json!(""))),
        )),
        _ => {}
    }
    if let Some(pcs) = loc.res.printer_columns.get(&loc.version) {
        for pc in pcs {
            let path = pc
                .get("jsonPath")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            if path == ".metadata.creationTimestamp" {
                continue;
            }
            let name = pc.get("name").and_then(Value::as_str).unwrap_or("");
            let ty = pc.get("type").and_then(Value::as_str).unwrap_or("string");
            if ty == "date" {
                cols.push((
                    col(name, "string", ""),
                    Box::new(move |o: &Value| json!(age(simple_path(o, &path)))),
                ));
                continue;
            }
            cols.push((
                col(name, ty, ""),
                Box::new(move |o: &Value| simple_path(o, &path).cloned().unwrap_or(Value::Null)),
            ));
        }
    }
    cols.push((
        col("Age", "string", ""),
        Box::new(|o: &Value| json!(age(o.pointer("/metadata/creationTimestamp")))),
    ));
    cols
}

/// `kubectl`-style age of a timestamp (`42s`, `5m`, `3h`, `12d`), as the
/// real server's printers render it.
fn age(ts: Option<&Value>) -> String {
    let Some(t) = ts
        .and_then(Value::as_str)
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
    else {
        return "<unknown>".into();
    };
    let secs = (chrono::Utc::now() - t.with_timezone(&chrono::Utc))
        .num_seconds()
        .max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 3600 * 2 => format!("{}m", s / 60),
        s if s < 86_400 * 2 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

fn table(loc: &Loc, items: &[Value], rv: Value, cont: Option<Value>) -> Value {
    let cols = columns(loc);
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            let mut full = o.clone();
            full["kind"] = json!(loc.res.kind);
            full["apiVersion"] = json!(loc.res.api_version(&loc.version));
            json!({"cells": cols.iter().map(|(_, f)| f(o)).collect::<Vec<_>>(), "object": full})
        })
        .collect();
    let mut md = json!({"resourceVersion": rv});
    if let Some(c) = cont {
        md["continue"] = c;
    }
    json!({
        "kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": md,
        "columnDefinitions": cols.iter().map(|(c, _)| c.clone()).collect::<Vec<_>>(),
        "rows": rows,
    })
}

/// A list answer as a Table.
pub fn list(loc: &Loc, list: &Value) -> Value {
    let items = list
        .get("items")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    table(
        loc,
        &items,
        list.pointer("/metadata/resourceVersion")
            .cloned()
            .unwrap_or(json!("")),
        list.pointer("/metadata/continue").cloned(),
    )
}

/// A single object as a one-row Table.
pub fn single(loc: &Loc, obj: &Value) -> Value {
    table(
        loc,
        std::slice::from_ref(obj),
        obj.pointer("/metadata/resourceVersion")
            .cloned()
            .unwrap_or(json!("")),
        None,
    )
}
