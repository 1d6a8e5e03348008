//! Pod validation as the real server's `ValidatePod` does it for what
//! rebound, its in-place agent and the simulated operators write:
//! containers and their names, restart policies, sidecars (init
//! containers with `restartPolicy: Always`) and container restart rules
//! (`restartPolicyRules`, KEP-5307/5532), probes, resources, ports, env,
//! tolerations. Each failure is a 422 cause with the real field and
//! message.

use serde_json::Value;

use super::errors::Cause;
use super::quantity;
use super::validate;

fn cause(reason: &'static str, field: String, message: String) -> Cause {
    Cause {
        reason,
        field,
        message,
    }
}

/// Whether a quantity string parses (else the request is a 400).
pub fn bad_quantity(pod: &Value) -> bool {
    ["containers", "initContainers"].iter().any(|list| {
        pod.pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| {
                ["requests", "limits"].iter().any(|part| {
                    c.pointer(&format!("/resources/{part}"))
                        .and_then(Value::as_object)
                        .is_some_and(|m| {
                            m.values().any(|q| {
                                q.as_str().is_none_or(|q| quantity::canonical(q).is_none())
                            })
                        })
                })
            })
    })
}

/// Resources whose requests must equal their limits and need a limit:
/// extended resources (a domain other than kubernetes.io) and hugepages.
fn not_overcommittable(name: &str) -> bool {
    name.starts_with("hugepages-")
        || name
            .split_once('/')
            .is_some_and(|(d, _)| d != "kubernetes.io" && !d.ends_with(".kubernetes.io"))
}

fn resources(c: &Value, at: &str, out: &mut Vec<Cause>) {
    let get = |part: &str| {
        c.pointer(&format!("/resources/{part}"))
            .and_then(Value::as_object)
    };
    let (req, lim) = (get("requests"), get("limits"));
    if let Some(req) = req {
        for (name, q) in req {
            let q = q.as_str().unwrap_or("");
            let limit = lim.and_then(|l| l.get(name)).and_then(Value::as_str);
            if not_overcommittable(name) {
                match limit {
                    None => out.push(cause(
                        "FieldValueRequired",
                        format!("{at}.resources.limits"),
                        "Required value: Limit must be set for non overcommitable resources".into(),
                    )),
                    Some(l) if quantity::value(l) != quantity::value(q) => out.push(cause(
                        "FieldValueInvalid",
                        format!("{at}.resources.requests"),
                        format!("Invalid value: \"{q}\": must be equal to {name} limit of {l}"),
                    )),
                    Some(_) => {}
                }
                continue;
            }
            if let Some(l) = limit
                && quantity::value(q)
                    .zip(quantity::value(l))
                    .is_some_and(|(a, b)| a > b)
            {
                out.push(cause(
                    "FieldValueInvalid",
                    format!("{at}.resources.requests"),
                    format!(
                        "Invalid value: \"{q}\": must be less than or equal to {name} limit of {l}"
                    ),
                ));
            }
        }
    }
}

fn restart_rules(c: &Value, at: &str, out: &mut Vec<Cause>) {
    let Some(rules) = c.get("restartPolicyRules").and_then(Value::as_array) else {
        return;
    };
    if rules.is_empty() {
        return;
    }
    if c.get("restartPolicy").is_none_or(Value::is_null) {
        out.push(cause(
            "FieldValueRequired",
            format!("{at}.restartPolicy"),
            "Required value: must specify restartPolicy when restart rules are used".into(),
        ));
    }
    for (j, r) in rules.iter().enumerate() {
        let rat = format!("{at}.restartPolicyRules[{j}]");
        let action = r.get("action").and_then(Value::as_str).unwrap_or("");
        if !matches!(action, "Restart" | "RestartAllContainers") {
            out.push(cause(
                "FieldValueNotSupported",
                format!("{rat}.action"),
                format!("Unsupported value: \"{action}\": supported values: \"Restart\", \"RestartAllContainers\""),
            ));
        }
        match r.get("exitCodes") {
            None | Some(Value::Null) => out.push(cause(
                "FieldValueRequired",
                format!("{rat}.exitCodes"),
                "Required value: must be specified".into(),
            )),
            Some(ec) => {
                let op = ec.get("operator").and_then(Value::as_str).unwrap_or("");
                if !matches!(op, "In" | "NotIn") {
                    out.push(cause(
                        "FieldValueNotSupported",
                        format!("{rat}.exitCodes.operator"),
                        format!("Unsupported value: \"{op}\": supported values: \"In\", \"NotIn\""),
                    ));
                }
            }
        }
    }
}

fn container(c: &Value, at: &str, init: bool, out: &mut Vec<Cause>) {
    let name = c.get("name").and_then(Value::as_str).unwrap_or("");
    if !name.is_empty()
        && let Some(msg) = validate::dns1123_label(name)
    {
        out.push(cause(
            "FieldValueInvalid",
            format!("{at}.name"),
            format!("Invalid value: \"{name}\": {msg}"),
        ));
    }
    if init && c.get("restartPolicy").and_then(Value::as_str) != Some("Always") {
        for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
            if c.get(probe).is_some_and(|p| !p.is_null()) {
                out.push(cause(
                    "FieldValueForbidden",
                    format!("{at}.{probe}"),
                    "Forbidden: may not be set for init containers without restartPolicy=Always"
                        .into(),
                ));
            }
        }
    }
    restart_rules(c, at, out);
    resources(c, at, out);
    if let Some(env) = c.get("env").and_then(Value::as_array) {
        for (j, e) in env.iter().enumerate() {
            if e.get("name")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                out.push(cause(
                    "FieldValueRequired",
                    format!("{at}.env[{j}].name"),
                    "Required value".into(),
                ));
            }
        }
    }
    if let Some(ports) = c.get("ports").and_then(Value::as_array) {
        for (j, p) in ports.iter().enumerate() {
            if let Some(n) = p.get("containerPort").and_then(Value::as_i64)
                && !(1..=65535).contains(&n)
            {
                out.push(cause(
                    "FieldValueInvalid",
                    format!("{at}.ports[{j}].containerPort"),
                    format!("Invalid value: {n}: must be between 1 and 65535, inclusive"),
                ));
            }
        }
    }
}

/// Every cause a real server finds in a pod's spec.
pub fn check(pod: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    let spec = pod.get("spec").cloned().unwrap_or(Value::Null);
    match spec.get("containers").and_then(Value::as_array) {
        Some(cs) if !cs.is_empty() => {}
        _ => out.push(cause(
            "FieldValueRequired",
            "spec.containers".into(),
            "Required value".into(),
        )),
    }
    let mut seen: Vec<String> = Vec::new();
    for (list, init) in [("initContainers", true), ("containers", false)] {
        for (i, c) in spec
            .get(list)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let at = format!("spec.{list}[{i}]");
            for f in ["name", "image"] {
                if c.get(f).and_then(Value::as_str).is_none_or(str::is_empty) {
                    out.push(cause(
                        "FieldValueRequired",
                        format!("{at}.{f}"),
                        "Required value".into(),
                    ));
                }
            }
            if let Some(n) = c
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
            {
                if seen.iter().any(|s| s == n) {
                    out.push(cause(
                        "FieldValueDuplicate",
                        format!("{at}.name"),
                        format!("Duplicate value: \"{n}\""),
                    ));
                }
                seen.push(n.to_string());
            }
            container(c, &at, init, &mut out);
        }
    }
    if let Some(rp) = spec.get("restartPolicy").and_then(Value::as_str)
        && !matches!(rp, "Always" | "OnFailure" | "Never")
    {
        out.push(cause(
            "FieldValueNotSupported",
            "spec.restartPolicy".into(),
            format!("Unsupported value: \"{rp}\": supported values: \"Always\", \"OnFailure\", \"Never\""),
        ));
    }
    if let Some(tols) = spec.get("tolerations").and_then(Value::as_array) {
        for (i, t) in tols.iter().enumerate() {
            let value = t.get("value").and_then(Value::as_str).unwrap_or("");
            if t.get("operator").and_then(Value::as_str) == Some("Exists") && !value.is_empty() {
                out.push(cause(
                    "FieldValueInvalid",
                    format!("spec.tolerations[{i}].operator"),
                    format!("Invalid value: \"{value}\": value must be empty when `operator` is 'Exists'"),
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sidecars_and_restart_rules() {
        let agent = |rules: Value, policy: Option<&str>| {
            let mut a = json!({"name": "agent", "image": "i", "startupProbe": {"httpGet": {"port": 1}}, "restartPolicyRules": rules});
            if let Some(p) = policy {
                a["restartPolicy"] = json!(p);
            }
            json!({"spec": {"initContainers": [a], "containers": [{"name": "main", "image": "i"}]}})
        };
        let ok = json!([{"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [87]}}]);
        assert!(check(&agent(ok.clone(), Some("Always"))).is_empty());
        let fields = |p: &Value| check(p).into_iter().map(|c| c.field).collect::<Vec<_>>();
        assert_eq!(
            fields(&agent(ok, None)),
            vec![
                "spec.initContainers[0].startupProbe",
                "spec.initContainers[0].restartPolicy"
            ]
        );
        let bad = json!([{"action": "Explode", "exitCodes": {"operator": "Maybe", "values": []}}]);
        assert_eq!(
            fields(&agent(bad, Some("Always"))),
            vec![
                "spec.initContainers[0].restartPolicyRules[0].action",
                "spec.initContainers[0].restartPolicyRules[0].exitCodes.operator"
            ]
        );
        let gpu = json!({"spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}});
        assert_eq!(fields(&gpu), vec!["spec.containers[0].resources.limits"]);
    }
}
