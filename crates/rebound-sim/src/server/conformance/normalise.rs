//! Normalising answers so that two servers' answers compare: what a server
//! makes up (uids, resourceVersions, timestamps, generated names, continue
//! tokens, addresses) is replaced by stable placeholders, numbered in order
//! of appearance within a scenario, so relations survive (the uid in an
//! ownerReference is the owner's; an unchanged resourceVersion stays the
//! same ordinal) while the values themselves do not matter.

use std::collections::HashMap;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value};

/// RFC 3339 timestamps; the fraction's length is kept in the placeholder
/// (`<time>`, `<time.6>`), since precision is part of the contract.
static TIME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.(\d+))?(?:Z|[+-]\d\d:\d\d)$")
        .unwrap_or_else(|e| unreachable!("static regex: {e}"))
});

static UID: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
        .unwrap_or_else(|e| unreachable!("static regex: {e}"))
});

/// Numbers in messages that are resourceVersions (`in record (353)`,
/// `too old resource version: 1 (243)`, `current: 505`).
static RV_IN_TEXT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(in record \(|resource ?version: |current: |resource ?version: <n> \(|precondition \()(\d+)(\)|,|\s|$)")
        .unwrap_or_else(|e| unreachable!("static regex: {e}"))
});

/// An age as the Table printers render it (`0s`, `5m`, `3h12m`).
static AGE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(\d+d)?(\d+h)?(\d+m)?(\d+s)?$")
        .unwrap_or_else(|e| unreachable!("static regex: {e}"))
});

/// The alphabet of generated name suffixes (`utilrand.String`).
const SUFFIX: &str = "[bcdfghjklmnpqrstvwxz2456789]{5}";

/// Placeholder state of one scenario run.
#[derive(Debug, Default)]
pub struct Normaliser {
    uids: HashMap<String, usize>,
    rvs: HashMap<String, usize>,
    names: HashMap<String, usize>,
    prefixes: Vec<String>,
    prefix_re: Option<Regex>,
}

impl Normaliser {
    /// A fresh state; `prefixes` are generateName prefixes known up front
    /// (`kube-api-access-` of ServiceAccount token volumes).
    pub fn new() -> Self {
        let mut n = Self::default();
        n.learn_prefix("kube-api-access-");
        n
    }

    fn learn_prefix(&mut self, p: &str) {
        if p.is_empty() || self.prefixes.iter().any(|x| x == p) {
            return;
        }
        self.prefixes.push(p.to_string());
        let alt: Vec<String> = self.prefixes.iter().map(|p| regex::escape(p)).collect();
        self.prefix_re = Regex::new(&format!("({})({SUFFIX})\\b", alt.join("|"))).ok();
    }

    /// Learns the generateName prefixes of a value (request or answer).
    pub fn learn(&mut self, v: &Value) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(p)) = m.get("generateName") {
                    let p = p.clone();
                    self.learn_prefix(&p);
                }
                for c in m.values() {
                    self.learn(c);
                }
            }
            Value::Array(a) => a.iter().for_each(|c| self.learn(c)),
            _ => {}
        }
    }

    fn ordinal(map: &mut HashMap<String, usize>, k: &str) -> usize {
        let n = map.len() + 1;
        *map.entry(k.to_string()).or_insert(n)
    }

    /// A resourceVersion of an object as its ordinal.
    fn rv(&mut self, s: &str) -> String {
        format!("<rv#{}>", Self::ordinal(&mut self.rvs, s))
    }

    /// Normalises a string outside any special field.
    pub fn text(&mut self, s: &str) -> String {
        if let Some(c) = TIME.captures(s) {
            return match c.get(1) {
                Some(f) => format!("<time.{}>", f.as_str().len()),
                None => "<time>".into(),
            };
        }
        let mut out = s.to_string();
        if UID.is_match(&out) {
            let found: Vec<String> = UID
                .find_iter(&out)
                .map(|m| m.as_str().to_string())
                .collect();
            for u in found {
                let n = Self::ordinal(&mut self.uids, &u);
                out = out.replace(&u, &format!("<uid#{n}>"));
            }
        }
        while RV_IN_TEXT.is_match(&out) {
            out = RV_IN_TEXT.replace_all(&out, "${1}<n>${3}").into_owned();
        }
        if let Some(re) = self.prefix_re.clone() {
            let found: Vec<(String, String)> = re
                .captures_iter(&out)
                .filter_map(|c| {
                    Some((
                        c.get(0)?.as_str().to_string(),
                        c.get(1)?.as_str().to_string(),
                    ))
                })
                .collect();
            for (whole, prefix) in found {
                let n = Self::ordinal(&mut self.names, &whole);
                out = out.replace(&whole, &format!("{prefix}<#{n}>"));
            }
        }
        out
    }

    /// Normalises an answer body (or a watch event's object). `list_rv`
    /// says the top-level `metadata.resourceVersion` is a list's or a
    /// bookmark's (a point in time, not an object's version: `<rv>`).
    pub fn body(&mut self, v: &Value) -> Value {
        self.learn(v);
        let is_list = v.get("items").is_some_and(Value::is_array)
            || v.get("kind")
                .and_then(Value::as_str)
                .is_some_and(|k| k.ends_with("List") || k == "Table");
        let mut out = self.walk(v, if is_list { Ctx::ListTop } else { Ctx::Plain });
        if out.get("kind").and_then(Value::as_str) == Some("Table")
            && let Some(rows) = out.get_mut("rows").and_then(Value::as_array_mut)
        {
            for cell in rows
                .iter_mut()
                .filter_map(|r| r.get_mut("cells").and_then(Value::as_array_mut))
                .flatten()
            {
                if cell
                    .as_str()
                    .is_some_and(|c| !c.is_empty() && AGE.is_match(c))
                {
                    *cell = Value::String("<age>".into());
                }
            }
        }
        sort_causes(&mut out);
        out
    }

    /// Normalises a watch event `{type, object}`.
    pub fn event(&mut self, ev: &Value) -> Value {
        let ty = ev.get("type").and_then(Value::as_str).unwrap_or("");
        let obj = ev.get("object").cloned().unwrap_or(Value::Null);
        self.learn(&obj);
        let object = if ty == "BOOKMARK" {
            self.walk(&obj, Ctx::ListTop)
        } else {
            self.walk(&obj, Ctx::Plain)
        };
        serde_json::json!({"type": ty, "object": object})
    }

    fn walk(&mut self, v: &Value, ctx: Ctx) -> Value {
        match v {
            Value::Object(m) => {
                let mut out = Map::new();
                for (k, c) in m {
                    let nv = match (k.as_str(), c) {
                        ("metadata", Value::Object(md)) if ctx == Ctx::ListTop => {
                            let mut md2 = Map::new();
                            for (mk, mv) in md {
                                let x = match (mk.as_str(), mv) {
                                    ("resourceVersion", Value::String(_)) => {
                                        Value::String("<rv>".into())
                                    }
                                    ("continue", Value::String(s)) if !s.is_empty() => {
                                        Value::String("<continue>".into())
                                    }
                                    _ => self.walk(mv, Ctx::Plain),
                                };
                                md2.insert(mk.clone(), x);
                            }
                            Value::Object(md2)
                        }
                        ("resourceVersion", Value::String(s)) if !s.is_empty() => {
                            Value::String(self.rv(s))
                        }
                        ("serverAddress", Value::String(_)) => Value::String("<addr>".into()),
                        ("continue", Value::String(s)) if !s.is_empty() => {
                            Value::String("<continue>".into())
                        }
                        _ => self.walk(c, Ctx::Plain),
                    };
                    out.insert(k.clone(), nv);
                }
                Value::Object(out)
            }
            Value::Array(a) => Value::Array(a.iter().map(|c| self.walk(c, Ctx::Plain)).collect()),
            Value::String(s) => Value::String(self.text(s)),
            other => other.clone(),
        }
    }
}

/// Causes come in no fixed order from a real server (map iteration):
/// sorted by field, reason and message, and a message that lists them
/// (`... is invalid: [a, b]`) rebuilt in the same order.
fn sort_causes(status: &mut Value) {
    let Some(causes) = status
        .pointer_mut("/details/causes")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    let key = |c: &Value| {
        ["field", "reason", "message"]
            .map(|k| c.get(k).and_then(Value::as_str).unwrap_or("").to_string())
    };
    causes.sort_by_key(key);
    let parts: Vec<String> = causes
        .iter()
        .map(|c| {
            format!(
                "{}: {}",
                c.get("field").and_then(Value::as_str).unwrap_or(""),
                c.get("message").and_then(Value::as_str).unwrap_or("")
            )
        })
        .collect();
    let Some(msg) = status.get("message").and_then(Value::as_str) else {
        return;
    };
    let Some(at) = msg.find(" is invalid: [") else {
        return;
    };
    let (head, list) = msg.split_at(at + " is invalid: ".len());
    let inner = list.trim_start_matches('[').trim_end_matches(']');
    let same = inner.len()
        == parts.iter().map(String::len).sum::<usize>() + 2 * parts.len().saturating_sub(1)
        && parts.iter().all(|p| inner.contains(p.as_str()));
    if same {
        status["message"] = Value::String(format!("{head}[{}]", parts.join(", ")));
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ctx {
    Plain,
    ListTop,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn placeholders_keep_relations() {
        let mut n = Normaliser::new();
        let owner = n.body(&json!({"metadata": {"uid": "0a1b2c3d-0000-4000-8000-000000000001", "resourceVersion": "17",
            "creationTimestamp": "2026-01-01T00:00:00Z", "generateName": "w-", "name": "w-bcd2f"}}));
        assert_eq!(owner["metadata"]["uid"], json!("<uid#1>"));
        assert_eq!(owner["metadata"]["resourceVersion"], json!("<rv#1>"));
        assert_eq!(owner["metadata"]["creationTimestamp"], json!("<time>"));
        assert_eq!(owner["metadata"]["name"], json!("w-<#1>"));
        let dep = n.body(&json!({"kind": "PodList", "metadata": {"resourceVersion": "99", "continue": "abc"},
            "items": [{"metadata": {"resourceVersion": "17", "ownerReferences": [{"uid": "0a1b2c3d-0000-4000-8000-000000000001"}]},
            "message": "pods \"w-bcd2f\" not found", "t": "2026-01-01T00:00:00.123456Z"}]}));
        assert_eq!(dep["metadata"]["resourceVersion"], json!("<rv>"));
        assert_eq!(dep["metadata"]["continue"], json!("<continue>"));
        assert_eq!(
            dep["items"][0]["metadata"]["resourceVersion"],
            json!("<rv#1>")
        );
        assert_eq!(
            dep["items"][0]["metadata"]["ownerReferences"][0]["uid"],
            json!("<uid#1>")
        );
        assert_eq!(
            dep["items"][0]["message"],
            json!("pods \"w-<#1>\" not found")
        );
        assert_eq!(dep["items"][0]["t"], json!("<time.6>"));
    }
}
