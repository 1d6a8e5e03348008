//! Differences between a recorded (real) answer and the embedded server's,
//! as JSON pointers with both values, and the list of accepted ones
//! (`tests/conformance/known-differences.yaml`).

use serde::Deserialize;
use serde_json::Value;

/// One place where two answers differ.
#[derive(Debug, Clone, PartialEq)]
pub struct Difference {
    /// Scenario name.
    pub scenario: String,
    /// Step name.
    pub step: String,
    /// JSON pointer into the step's record (`/answer/body/metadata/labels`).
    pub path: String,
    /// What the real server answered (`None`: nothing there).
    pub real: Option<Value>,
    /// What the embedded server answered.
    pub embedded: Option<Value>,
}

fn short(v: &Option<Value>) -> String {
    match v {
        None => "(absent)".into(),
        Some(v) => {
            let s = v.to_string();
            if s.len() > 400 {
                format!(
                    "{}…",
                    &s[..s.char_indices().nth(400).map_or(s.len(), |(i, _)| i)]
                )
            } else {
                s
            }
        }
    }
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} / {} at {}\n    real:     {}\n    embedded: {}",
            self.scenario,
            self.step,
            self.path,
            short(&self.real),
            short(&self.embedded)
        )
    }
}

fn esc(k: &str) -> String {
    k.replace('~', "~0").replace('/', "~1")
}

/// Every difference between `real` and `embedded` below `path`.
pub fn diff(
    real: &Value,
    embedded: &Value,
    path: &str,
    out: &mut Vec<(String, Option<Value>, Option<Value>)>,
) {
    match (real, embedded) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, av) in a {
                let p = format!("{path}/{}", esc(k));
                match b.get(k) {
                    Some(bv) => diff(av, bv, &p, out),
                    None => out.push((p, Some(av.clone()), None)),
                }
            }
            for (k, bv) in b {
                if !a.contains_key(k) {
                    out.push((format!("{path}/{}", esc(k)), None, Some(bv.clone())));
                }
            }
        }
        (Value::Array(a), Value::Array(b))
            if a.len() == b.len() && path.ends_with("/managedFields") =>
        {
            let (a, b) = (by_manager(a), by_manager(b));
            for (i, (av, bv)) in a.iter().zip(&b).enumerate() {
                diff(av, bv, &format!("{path}/{i}"), out);
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (av, bv)) in a.iter().zip(b).enumerate() {
                diff(av, bv, &format!("{path}/{i}"), out);
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.push((path.to_string(), Some(a.clone()), Some(b.clone()))),
    }
}

/// `managedFields` entries in a canonical order. The real server sorts
/// them by operation, then time in whole seconds, then manager: two
/// entries written within a scenario swap places when the requests
/// straddle a second, and times are normalised away, so the order carries
/// no contract beyond the entries themselves.
fn by_manager(list: &[Value]) -> Vec<&Value> {
    let key = |v: &Value| {
        ["operation", "manager", "subresource", "apiVersion"]
            .map(|k| v.get(k).and_then(Value::as_str).unwrap_or("").to_string())
    };
    let mut out: Vec<&Value> = list.iter().collect();
    out.sort_by_key(|v| key(v));
    out
}

/// One accepted difference: where (scenario, step, path prefix; `*` in
/// any of them matches any text) and why.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Known {
    /// Scenario name pattern.
    pub scenario: String,
    /// Step name pattern.
    #[serde(default = "any")]
    pub step: String,
    /// Pointer pattern: the difference's path starts with it.
    #[serde(default = "root")]
    pub path: String,
    /// What differs.
    pub what: String,
    /// Why it is accepted.
    pub why: String,
}

fn any() -> String {
    "*".into()
}

fn root() -> String {
    String::new()
}

/// `*` matches any run of characters (including none).
pub fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let mut rest = text;
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            match rest.strip_prefix(part) {
                Some(r) => rest = r,
                None => return false,
            }
        } else if i == parts.len() - 1 {
            return rest.ends_with(part);
        } else {
            match rest.find(part) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
    }
    true
}

impl Known {
    /// Whether this entry accepts the difference.
    pub fn covers(&self, d: &Difference) -> bool {
        glob(&self.scenario, &d.scenario)
            && glob(&self.step, &d.step)
            && (glob(&self.path, &d.path)
                || glob(&format!("{}/*", self.path.trim_end_matches('/')), &d.path)
                || self.path.is_empty())
    }
}

/// Parses the known-differences YAML (a list of entries).
pub fn parse_known(yaml: &str) -> Result<Vec<Known>, String> {
    serde_saphyr::from_str::<Vec<Known>>(yaml).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn diffs_and_globs() {
        let mut out = vec![];
        diff(
            &json!({"a": 1, "b": [1, 2], "c": {"d": 1}}),
            &json!({"a": 2, "b": [1], "e": 0, "c": {"d": 1}}),
            "",
            &mut out,
        );
        let paths: Vec<&str> = out.iter().map(|(p, _, _)| p.as_str()).collect();
        assert_eq!(paths, vec!["/a", "/b", "/e"]);
        assert!(glob("watch-*", "watch-bookmarks"));
        assert!(glob("*", ""));
        assert!(glob("/answer/*/status", "/answer/body/status"));
        assert!(!glob("a*b", "ac"));
        let k = Known {
            scenario: "s".into(),
            step: "*".into(),
            path: "/answer/body/spec".into(),
            what: String::new(),
            why: String::new(),
        };
        let d = |p: &str| Difference {
            scenario: "s".into(),
            step: "x".into(),
            path: p.into(),
            real: None,
            embedded: None,
        };
        assert!(k.covers(&d("/answer/body/spec/x")));
        assert!(k.covers(&d("/answer/body/spec")));
        assert!(!k.covers(&d("/answer/body/specs")));
    }

    #[test]
    fn managed_fields_compare_in_any_order_but_not_with_other_entries() {
        let a = json!({"operation": "Apply", "manager": "a", "time": "<time>"});
        let u = json!({"operation": "Update", "manager": "u", "time": "<time>"});
        let x = json!({"operation": "Update", "manager": "x", "time": "<time>"});
        let real = json!({"metadata": {"managedFields": [a.clone(), u.clone()]}});
        let mut out = vec![];
        diff(
            &real,
            &json!({"metadata": {"managedFields": [u.clone(), a.clone()]}}),
            "",
            &mut out,
        );
        assert!(out.is_empty(), "{out:?}");
        diff(
            &real,
            &json!({"metadata": {"managedFields": [x, a]}}),
            "",
            &mut out,
        );
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].0, "/metadata/managedFields/1/manager");
        // Other lists keep their order.
        let mut out = vec![];
        diff(&json!({"l": [1, 2]}), &json!({"l": [2, 1]}), "", &mut out);
        assert_eq!(out.len(), 2);
    }
}
