//! Label and field selectors, parsed once per request and matched against
//! stored JSON objects.

use serde_json::Value;

use super::errors::ApiError;

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq)]
enum LabelReq {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector (`a=b,c!=d,e in (f,g),!h`). Empty matches all.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<LabelReq>);

fn split_top_level(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => {
                depth += 1;
                cur.push(c)
            }
            ')' => {
                depth -= 1;
                cur.push(c)
            }
            ',' if depth == 0 => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out.into_iter()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

fn parse_set(s: &str) -> Result<Vec<String>, ApiError> {
    let s = s.trim();
    let inner = s
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "unable to parse requirement: expected (values), got {s:?}"
            ))
        })?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

fn check_key(k: &str) -> Result<String, ApiError> {
    let k = k.trim();
    let ok = !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if ok {
        Ok(k.to_string())
    } else {
        Err(ApiError::bad_request(format!(
            "unable to parse requirement: invalid label key {k:?}"
        )))
    }
}

/// A value that starts with an operator character is the real lexer's
/// `found '=', expected: identifier`.
fn check_value(v: &str) -> Result<String, ApiError> {
    let v = v.trim();
    match v.chars().next() {
        Some(c @ ('=' | '!' | '(' | ')' | ',')) => Err(ApiError::bad_request(format!(
            "unable to parse requirement: found '{c}', expected: identifier"
        ))),
        _ => Ok(v.to_string()),
    }
}

impl LabelSelector {
    /// Parses the `labelSelector` query parameter; a syntax error is a 400.
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for part in split_top_level(s) {
            if let Some(k) = part.strip_prefix('!') {
                reqs.push(LabelReq::NotExists(check_key(k)?));
            } else if let Some((k, v)) = part.split_once("!=") {
                reqs.push(LabelReq::NotEq(check_key(k)?, check_value(v)?));
            } else if let Some((k, v)) = part.split_once("==") {
                reqs.push(LabelReq::Eq(check_key(k)?, check_value(v)?));
            } else if let Some((k, v)) = part.split_once('=') {
                reqs.push(LabelReq::Eq(check_key(k)?, check_value(v)?));
            } else if let Some(idx) = part.find(" notin ") {
                reqs.push(LabelReq::NotIn(
                    check_key(&part[..idx])?,
                    parse_set(&part[idx + 7..])?,
                ));
            } else if let Some(idx) = part.find(" in ") {
                reqs.push(LabelReq::In(
                    check_key(&part[..idx])?,
                    parse_set(&part[idx + 4..])?,
                ));
            } else if let Some(idx) = part.find(" notin(") {
                reqs.push(LabelReq::NotIn(
                    check_key(&part[..idx])?,
                    parse_set(&part[idx + 6..])?,
                ));
            } else if let Some(idx) = part.find(" in(") {
                reqs.push(LabelReq::In(
                    check_key(&part[..idx])?,
                    parse_set(&part[idx + 3..])?,
                ));
            } else {
                reqs.push(LabelReq::Exists(check_key(&part)?));
            }
        }
        Ok(Self(reqs))
    }

    /// Whether the selector is empty (matches everything).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether an object (its `metadata.labels`) matches.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels");
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
        })
    }
}

/// A parsed field selector (`metadata.name=x,status.phase!=Running`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

/// Fields a selector may use on a resource, as on a real server.
fn supported_fields(group: &str, plural: &str) -> &'static [&'static str] {
    match (group, plural) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "nodes") => &["spec.unschedulable"],
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("events.k8s.io", "events") => &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "reportingController",
            "type",
        ],
        ("", "namespaces") => &["status.phase"],
        ("", "secrets") => &["type"],
        ("batch", "jobs") => &["status.successful"],
        _ => &[],
    }
}

impl FieldSelector {
    /// Parses `fieldSelector`; unknown fields for the resource are a 400 as on
    /// a real server.
    pub fn parse(s: &str, group: &str, plural: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for part in split_top_level(s) {
            let (k, eq, v) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{part}'; can't understand '{part}'"
                )));
            };
            let k = k.trim();
            // events.k8s.io events are stored in the core form
            let stored = match (group, k) {
                ("events.k8s.io", "reportingController") => "reportingComponent".to_string(),
                ("events.k8s.io", k) if k.starts_with("regarding.") => {
                    k.replacen("regarding.", "involvedObject.", 1)
                }
                (_, k) => k.to_string(),
            };
            if !(k == "metadata.name"
                || k == "metadata.namespace"
                || supported_fields(group, plural).contains(&k))
            {
                // kinds with only the generic fields say which they have
                return Err(ApiError::bad_request(
                    if supported_fields(group, plural).is_empty() {
                        format!(
                            "\"{k}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
                        )
                    } else {
                        format!("field label not supported: {k}")
                    },
                ));
            }
            reqs.push((stored, eq, v.trim().to_string()));
        }
        Ok(Self(reqs))
    }

    /// Whether the selector is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value a field selector `metadata.name=x` pins, to serve it from
    /// one key rather than a scan.
    pub fn pinned_name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, eq, _)| k == "metadata.name" && *eq)
            .map(|(_, _, v)| v.as_str())
    }

    /// Whether an object matches.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0
            .iter()
            .all(|(k, eq, v)| (field_value(obj, k) == *v) == *eq)
    }
}

/// The string value of a field as field selectors see it (missing → `""`,
/// booleans as `true`/`false`, a missing `spec.unschedulable` is `false`).
fn field_value(obj: &Value, path: &str) -> String {
    let mut cur = obj;
    for seg in path.split('.') {
        match cur.get(seg) {
            Some(v) => cur = v,
            None => {
                return if path == "spec.unschedulable" || path == "spec.hostNetwork" {
                    "false".into()
                } else if path == "source" {
                    obj.pointer("/source/component")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string()
                } else {
                    String::new()
                };
            }
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Object(_) if path == "source" => cur
            .get("component")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selector_operators() {
        let o = json!({"metadata": {"labels": {"app": "web", "tier": "front"}}});
        for (sel, want) in [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app in (web, db)", true),
            ("app notin (web)", false),
            ("tier", true),
            ("!tier", false),
            ("!missing,app=web", true),
            ("missing notin (x)", true),
            ("app in (db),tier", false),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).map(|s| s.matches(&o)).ok(),
                Some(want),
                "{sel}"
            );
        }
        assert!(LabelSelector::parse("app in web").is_err());
    }

    #[test]
    fn field_selector_values() {
        let p = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        let s = FieldSelector::parse("spec.nodeName=n1,status.phase!=Pending", "", "pods").ok();
        assert_eq!(s.map(|s| s.matches(&p)), Some(true));
        let n = json!({"metadata": {"name": "n"}, "spec": {}});
        let s = FieldSelector::parse("spec.unschedulable=false", "", "nodes").ok();
        assert_eq!(s.map(|s| s.matches(&n)), Some(true));
        assert!(FieldSelector::parse("spec.bogus=1", "", "pods").is_err());
    }
}
