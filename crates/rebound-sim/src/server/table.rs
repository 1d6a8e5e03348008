//! Server-side `Table` rendering for `kubectl get` (which asks for
//! `as=Table`): Name, a few kind-specific columns, a CRD's
//! `additionalPrinterColumns` (simple `.a.b[0].c` paths), and Age.

use serde_json::{Value, json};

use super::ops::Loc;

fn col(name: &str, ty: &str, format: &str) -> Value {
    json!({"name": name, "type": ty, "format": format, "description": "", "priority": 0})
}

/// A column as the real printers declare it (description, priority).
fn dcol(name: &str, format: &str, description: &str, priority: u8) -> Value {
    json!({"name": name, "type": "string", "format": format, "description": description, "priority": priority})
}

const NAME_DESC: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const AGE_DESC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// The JSONPath subset of printer columns: `.a.b`, `[n]`, `[-1:]` (the
/// last element) and `[?(@.k=="v")]` (the first element whose field
/// equals). None when nothing is there.
pub fn jsonpath(obj: &Value, path: &str) -> Option<Value> {
    let mut cur = obj.clone();
    let mut rest = path.trim();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let field = &r[..end];
            if !field.is_empty() {
                cur = cur.get(field)?.clone();
            }
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let inner = &r[..end];
            rest = &r[end + 1..];
            let arr = cur.as_array()?.clone();
            cur = if let Some(f) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let (k, v) = f.split_once("==")?;
                let v = v.trim().trim_matches('"').trim_matches('\'');
                arr.into_iter()
                    .find(|e| e.get(k.trim()).and_then(Value::as_str) == Some(v))?
            } else if let Some(n) = inner.strip_suffix(':').and_then(|n| n.parse::<i64>().ok()) {
                let i = if n < 0 { arr.len() as i64 + n } else { n };
                arr.get(usize::try_from(i).ok()?)?.clone()
            } else {
                let n: i64 = inner.trim().parse().ok()?;
                let i = if n < 0 { arr.len() as i64 + n } else { n };
                arr.get(usize::try_from(i).ok()?)?.clone()
            };
        } else {
            return None;
        }
    }
    Some(cur)
}

/// A column definition and how to compute its cell.
type Column = (Value, Box<dyn Fn(&Value) -> Value>);

fn age_col() -> Column {
    (
        dcol("Age", "", AGE_DESC, 0),
        Box::new(|o: &Value| json!(age(o.pointer("/metadata/creationTimestamp")))),
    )
}

fn none_or(v: Option<&Value>) -> Value {
    match v.and_then(Value::as_str).filter(|s| !s.is_empty()) {
        Some(s) => json!(s),
        None => json!("<none>"),
    }
}

/// The pod printer's STATUS: the phase, or what its containers wait or
/// terminated for, `Terminating` once deleted.
fn pod_status(o: &Value) -> Value {
    if o.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
    {
        return json!("Terminating");
    }
    let mut reason = o
        .pointer("/status/reason")
        .or_else(|| o.pointer("/status/phase"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if let Some(cs) = o
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
    {
        for c in cs.iter().rev() {
            if let Some(r) = c.pointer("/state/waiting/reason").and_then(Value::as_str) {
                reason = r.to_string();
            } else if let Some(r) = c
                .pointer("/state/terminated/reason")
                .and_then(Value::as_str)
            {
                reason = r.to_string();
            }
        }
    }
    json!(reason)
}

fn columns(loc: &Loc) -> Vec<Column> {
    let mut cols: Vec<Column> = vec![(
        dcol("Name", "name", NAME_DESC, 0),
        Box::new(|o: &Value| o.pointer("/metadata/name").cloned().unwrap_or(Value::Null)),
    )];
    let mut age_done = false;
    match (loc.res.group.as_str(), loc.res.plural.as_str()) {
        ("", "pods") => {
            cols.push((
                dcol(
                    "Ready",
                    "",
                    "The aggregate readiness state of this pod for accepting traffic.",
                    0,
                ),
                Box::new(|o: &Value| {
                    let statuses = o
                        .pointer("/status/containerStatuses")
                        .and_then(Value::as_array);
                    let ready = statuses.map_or(0, |a| {
                        a.iter()
                            .filter(|c| c.get("ready") == Some(&json!(true)))
                            .count()
                    });
                    let total = o
                        .pointer("/spec/containers")
                        .and_then(Value::as_array)
                        .map_or(0, Vec::len);
                    json!(format!("{ready}/{total}"))
                }),
            ));
            cols.push((
                dcol(
                    "Status",
                    "",
                    "The aggregate status of the containers in this pod.",
                    0,
                ),
                Box::new(pod_status),
            ));
            cols.push((
                dcol("Restarts", "", "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.", 0),
                Box::new(|o: &Value| {
                    let n: i64 = o
                        .pointer("/status/containerStatuses")
                        .and_then(Value::as_array)
                        .map_or(0, |a| {
                            a.iter()
                                .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
                                .sum()
                        });
                    json!(n.to_string())
                }),
            ));
            cols.push(age_col());
            age_done = true;
            cols.push((
                dcol("IP", "", "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.", 1),
                Box::new(|o: &Value| none_or(o.pointer("/status/podIP"))),
            ));
            cols.push((
                dcol("Node", "", "NodeName indicates in which node this pod is scheduled. If empty, this pod is a candidate for scheduling by the scheduler defined in schedulerName. Once this field is set, the kubelet for this node becomes responsible for the lifecycle of this pod. This field should not be used to express a desire for the pod to be scheduled on a specific node. https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#nodename", 1),
                Box::new(|o: &Value| none_or(o.pointer("/spec/nodeName"))),
            ));
            cols.push((
                dcol("Nominated Node", "", "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods. This field does not guarantee that the pod will be scheduled on this node. Scheduler may decide to place the pod elsewhere if other nodes become available sooner. Scheduler may also decide to give the resources on this node to a higher priority pod that is created after preemption. As a result, this field may be different than PodSpec.nodeName when the pod is scheduled.", 1),
                Box::new(|o: &Value| none_or(o.pointer("/status/nominatedNodeName"))),
            ));
            cols.push((
                dcol("Readiness Gates", "", "If specified, all readiness gates will be evaluated for pod readiness. A pod is ready when all its containers are ready AND all conditions specified in the readiness gates have status equal to \"True\" More info: https://git.k8s.io/enhancements/keps/sig-network/580-pod-readiness-gates", 1),
                Box::new(|o: &Value| {
                    let gates = o.pointer("/spec/readinessGates").and_then(Value::as_array).map_or(0, Vec::len);
                    if gates == 0 {
                        return json!("<none>");
                    }
                    let conds = o.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
                    let ready = o
                        .pointer("/spec/readinessGates")
                        .and_then(Value::as_array)
                        .map_or(0, |g| {
                            g.iter()
                                .filter(|g| conds.iter().any(|c| c.get("type") == g.get("conditionType") && c.get("status") == Some(&json!("True"))))
                                .count()
                        });
                    json!(format!("{ready}/{gates}"))
                }),
            ));
        }
        ("", "configmaps") | ("", "secrets") => {
            if loc.res.plural == "secrets" {
                cols.push((
                    dcol("Type", "", "Used to facilitate programmatic handling of secret data. More info: https://kubernetes.io/docs/concepts/configuration/secret/#secret-types", 0),
                    Box::new(|o: &Value| o.get("type").cloned().unwrap_or(json!(""))),
                ));
            }
            let desc = if loc.res.plural == "secrets" {
                "Data contains the secret data. Each key must consist of alphanumeric characters, '-', '_' or '.'. The serialized form of the secret data is a base64 encoded string, representing the arbitrary (possibly non-string) data value here. Described in https://tools.ietf.org/html/rfc4648#section-4"
            } else {
                "Data contains the configuration data. Each key must consist of alphanumeric characters, '-', '_' or '.'. Values with non-UTF-8 byte sequences must use the BinaryData field. The keys stored in Data must not overlap with the keys in the BinaryData field, this is enforced during validation process."
            };
            cols.push((
                json!({"name": "Data", "type": "string", "format": "", "description": desc, "priority": 0}),
                Box::new(|o: &Value| {
                    let n = ["data", "binaryData"]
                        .iter()
                        .filter_map(|k| o.get(*k).and_then(Value::as_object))
                        .map(|m| m.len())
                        .sum::<usize>();
                    json!(n)
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
        ("", "events") | ("events.k8s.io", "events") => {
            let last_seen = |o: &Value| {
                let t = [
                    "/series/lastObservedTime",
                    "/lastTimestamp",
                    "/deprecatedLastTimestamp",
                    "/eventTime",
                ]
                .iter()
                .find_map(|p| o.pointer(p).filter(|v| v.is_string()));
                json!(age(t))
            };
            cols.clear();
            cols.push((
                dcol(
                    "Last Seen",
                    "",
                    "The time at which the most recent occurrence of this event was recorded.",
                    0,
                ),
                Box::new(last_seen),
            ));
            cols.push((
                dcol(
                    "Type",
                    "",
                    "Type of this event (Normal, Warning), new types could be added in the future",
                    0,
                ),
                Box::new(|o: &Value| o.get("type").cloned().unwrap_or(json!(""))),
            ));
            cols.push((
                dcol("Reason", "", "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.", 0),
                Box::new(|o: &Value| o.get("reason").cloned().unwrap_or(json!(""))),
            ));
            cols.push((
                dcol("Object", "", "The object that this event is about.", 0),
                Box::new(|o: &Value| {
                    let r = o.get("involvedObject").or_else(|| o.get("regarding"));
                    let kind = r
                        .and_then(|r| r.get("kind"))
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_ascii_lowercase();
                    let name = r
                        .and_then(|r| r.get("name"))
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    json!(format!("{kind}/{name}"))
                }),
            ));
            cols.push((
                dcol("Subobject", "", "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement, such as desiredState.manifest.containers[2]. For example, if the object reference is to a container within a pod, this would take on a value like: \"spec.containers{name}\" (where \"name\" refers to the name of the container that triggered the event) or if no container name is specified \"spec.containers[2]\" (container with index 2 in this pod). This syntax is chosen only to have some well-defined way of referencing a part of an object.", 1),
                Box::new(|o: &Value| {
                    o.get("involvedObject").or_else(|| o.get("regarding")).and_then(|r| r.get("fieldPath")).cloned().unwrap_or(json!(""))
                }),
            ));
            cols.push((
                dcol("Source", "", "The component reporting this event. Should be a short machine understandable string.", 1),
                Box::new(|o: &Value| {
                    let c = o.pointer("/source/component").or_else(|| o.get("reportingComponent")).or_else(|| o.get("reportingController"));
                    let h = o.pointer("/source/host").and_then(Value::as_str).unwrap_or("");
                    let c = c.and_then(Value::as_str).unwrap_or("");
                    json!(if h.is_empty() { c.to_string() } else { format!("{c}, {h}") })
                }),
            ));
            cols.push((
                dcol(
                    "Message",
                    "",
                    "A human-readable description of the status of this operation.",
                    0,
                ),
                Box::new(|o: &Value| {
                    o.get("message")
                        .or_else(|| o.get("note"))
                        .cloned()
                        .unwrap_or(json!(""))
                }),
            ));
            cols.push((
                dcol("First Seen", "", "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)", 1),
                Box::new(|o: &Value| {
                    let t = ["/firstTimestamp", "/deprecatedFirstTimestamp", "/eventTime"]
                        .iter()
                        .find_map(|p| o.pointer(p).filter(|v| v.is_string()));
                    json!(age(t))
                }),
            ));
            cols.push((
                dcol(
                    "Count",
                    "",
                    "The number of times this event has occurred.",
                    1,
                ),
                Box::new(|o: &Value| {
                    let n = o
                        .pointer("/series/count")
                        .or_else(|| o.get("count"))
                        .and_then(Value::as_i64)
                        .unwrap_or(1);
                    json!(n.to_string())
                }),
            ));
            cols.push((
                dcol("Name", "name", NAME_DESC, 1),
                Box::new(|o: &Value| o.pointer("/metadata/name").cloned().unwrap_or(Value::Null)),
            ));
            age_done = true;
        }
        ("", "namespaces") => cols.push((
            dcol("Status", "", "The status of the namespace", 0),
            Box::new(|o: &Value| o.pointer("/status/phase").cloned().unwrap_or(json!(""))),
        )),
        _ => {}
    }
    if loc.res.custom {
        // a CRD's table is its printer columns (Age by default), as declared
        let default_cols =
            vec![json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"})];
        let pcs = loc
            .res
            .printer_columns
            .get(&loc.version)
            .filter(|p| !p.is_empty())
            .cloned()
            .unwrap_or(default_cols);
        for pc in pcs {
            let path = pc
                .get("jsonPath")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let s = |k: &str| pc.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            let desc = match s("description") {
                d if d.is_empty() => {
                    format!("Custom resource definition column (in JSONPath format): {path}")
                }
                d => d,
            };
            let ty = match s("type") {
                t if t.is_empty() => "string".to_string(),
                t => t,
            };
            let ty_is_date = ty == "date";
            cols.push((
                json!({"name": s("name"), "type": ty, "format": s("format"), "description": desc,
                    "priority": pc.get("priority").and_then(Value::as_i64).unwrap_or(0)}),
                Box::new(move |o: &Value| {
                    let v = jsonpath(o, &path);
                    match (ty_is_date, v) {
                        (true, Some(v)) if v.is_string() => json!(age(Some(&v))),
                        (_, v) => v.unwrap_or(Value::Null),
                    }
                }),
            ));
        }
        return cols;
    }
    if !age_done {
        cols.push(age_col());
    }
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

#[cfg(test)]
mod jsonpath_tests {
    use super::*;

    #[test]
    fn printer_column_paths() {
        let o = json!({"status": {"conditions": [{"type": "Created", "status": "True"}, {"type": "Ready", "status": "False"}]}});
        assert_eq!(
            jsonpath(&o, ".status.conditions[?(@.type==\"Ready\")].status"),
            Some(json!("False"))
        );
        assert_eq!(
            jsonpath(&o, ".status.conditions[-1:].type"),
            Some(json!("Ready"))
        );
        assert_eq!(
            jsonpath(&o, ".status.conditions[0].type"),
            Some(json!("Created"))
        );
        assert_eq!(jsonpath(&o, ".status.missing"), None);
    }
}
