//! Admission checks shared by all kinds: object names, micro-time fields,
//! and the generated system fields (uid, timestamps, generateName suffix).

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

use super::errors::Cause;

/// DNS-1123 subdomain: most object names.
pub fn dns1123_subdomain(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character".into());
    }
    if name.len() > 253 {
        return Some("must be no more than 253 characters".into());
    }
    let ok = name.split('.').all(|p| label_ok(p, usize::MAX));
    (!ok).then(|| "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into())
}

fn label_ok(p: &str, max: usize) -> bool {
    let b = p.as_bytes();
    !b.is_empty()
        && b.len() <= max
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// DNS-1123 label: namespace names.
pub fn dns1123_label(name: &str) -> Option<String> {
    if name.len() > 63 {
        return Some("must be no more than 63 characters".into());
    }
    (!label_ok(name, 63)).then(|| "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".into())
}

/// Name check for a resource, as a 422 cause.
pub fn check_name(plural: &str, name: &str) -> Option<Cause> {
    let msg = if plural == "namespaces" {
        dns1123_label(name)
    } else {
        dns1123_subdomain(name)
    }?;
    Some(Cause {
        reason: "FieldValueInvalid",
        field: "metadata.name".into(),
        message: format!("Invalid value: \"{name}\": {msg}"),
    })
}

fn qualified_name_ok(n: &str) -> bool {
    let b = n.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// Label keys (`[prefix/]name`) and values, as the real server checks them.
pub fn check_labels(obj: &Value) -> Vec<Cause> {
    let Some(labels) = obj.pointer("/metadata/labels").and_then(Value::as_object) else {
        return vec![];
    };
    let mut causes = Vec::new();
    for (k, v) in labels {
        let (prefix, name) = match k.split_once('/') {
            Some((p, n)) => (Some(p), n),
            None => (None, k.as_str()),
        };
        if !qualified_name_ok(name) || prefix.is_some_and(|p| dns1123_subdomain(p).is_some()) {
            causes.push(Cause {
                reason: "FieldValueInvalid",
                field: "metadata.labels".into(),
                message: format!("Invalid value: \"{k}\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"),
            });
        }
        let value = v.as_str().unwrap_or("\u{0}");
        if !value.is_empty() && !qualified_name_ok(value) {
            causes.push(Cause {
                reason: "FieldValueInvalid",
                field: "metadata.labels".into(),
                message: format!("Invalid value: \"{value}\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"),
            });
        }
    }
    causes
}

/// Keys of ConfigMap and Secret data (`IsConfigMapKey`).
pub fn check_data_keys(obj: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    for field in ["data", "binaryData", "stringData"] {
        let Some(m) = obj.get(field).and_then(Value::as_object) else {
            continue;
        };
        for k in m.keys() {
            let ok = !k.is_empty()
                && k.len() <= 253
                && k.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
                && k != "."
                && k != ".."
                && !k.starts_with("..");
            if !ok {
                out.push(Cause {
                    reason: "FieldValueInvalid",
                    field: format!("{field}[{k}]"),
                    message: format!("Invalid value: \"{k}\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"),
                });
            }
        }
    }
    out
}

/// The keys a typed Secret must have (`ValidateSecret`).
pub fn check_secret_type(obj: &Value) -> Vec<Cause> {
    let ty = obj.get("type").and_then(Value::as_str).unwrap_or("");
    let need: &[&str] = match ty {
        "kubernetes.io/tls" => &["tls.crt", "tls.key"],
        "kubernetes.io/basic-auth"
        | "kubernetes.io/ssh-auth"
        | "kubernetes.io/dockerconfigjson"
        | "kubernetes.io/dockercfg" => &[],
        _ => &[],
    };
    need.iter()
        .filter(|k| obj.pointer(&format!("/data/{k}")).is_none())
        .map(|k| Cause {
            reason: "FieldValueRequired",
            field: format!("data[{k}]"),
            message: "Required value".into(),
        })
        .collect()
}

/// What the `events.k8s.io` strategy checks beyond the core rules.
pub fn check_v1_event(obj: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    if obj.get("eventTime").is_none_or(Value::is_null) {
        out.push(Cause {
            reason: "FieldValueRequired",
            field: "eventTime".into(),
            message: "Required value".into(),
        });
    }
    let ty = obj.get("type").and_then(Value::as_str).unwrap_or("");
    if ty != "Normal" && ty != "Warning" {
        out.push(Cause {
            reason: "FieldValueInvalid",
            field: "type".into(),
            message: format!("Invalid value: \"{ty}\": has invalid value: {ty}"),
        });
    }
    out
}

/// Lease spec rules (`ValidateLeaseSpec`).
pub fn check_lease(obj: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    if let Some(d) = obj
        .pointer("/spec/leaseDurationSeconds")
        .and_then(Value::as_i64)
        && d <= 0
    {
        out.push(Cause {
            reason: "FieldValueInvalid",
            field: "spec.leaseDurationSeconds".into(),
            message: format!("Invalid value: {d}: must be greater than 0"),
        });
    }
    if let Some(t) = obj
        .pointer("/spec/leaseTransitions")
        .and_then(Value::as_i64)
        && t < 0
    {
        out.push(Cause {
            reason: "FieldValueInvalid",
            field: "spec.leaseTransitions".into(),
            message: format!("Invalid value: {t}: must be greater than or equal to 0"),
        });
    }
    out
}

/// Whether a micro-time string has exactly six fractional digits
/// (`2026-01-01T00:00:01.000000Z`), as the real server's decoder demands.
pub fn micro_time_ok(s: &str) -> bool {
    if chrono::DateTime::parse_from_rfc3339(s).is_err() {
        return false;
    }
    s.split_once('.')
        .is_some_and(|(_, rest)| rest.chars().take_while(char::is_ascii_digit).count() == 6)
}

/// Micro-time fields of a kind, as JSON pointers.
pub fn micro_time_fields(group: &str, plural: &str) -> &'static [&'static str] {
    match (group, plural) {
        ("coordination.k8s.io", "leases") => &["/spec/renewTime", "/spec/acquireTime"],
        ("events.k8s.io", "events") => &["/eventTime", "/series/lastObservedTime"],
        ("", "events") => &["/eventTime", "/series/lastObservedTime"],
        _ => &[],
    }
}

/// The first badly formatted micro-time field, as the 400 message.
pub fn check_micro_times(group: &str, plural: &str, obj: &Value) -> Option<String> {
    for ptr in micro_time_fields(group, plural) {
        if let Some(Value::String(s)) = obj.pointer(ptr)
            && !micro_time_ok(s)
        {
            return Some(format!(
                "parsing time \"{s}\" as \"2006-01-02T15:04:05.000000Z07:00\": cannot parse \"{}\" as \".000000\"",
                s.get(19..).unwrap_or(""),
            ));
        }
    }
    None
}

static SEQ: AtomicU64 = AtomicU64::new(0x9e37_79b9_7f4a_7c15);

/// The namespace rule of a real server's Event validation
/// (`legacyValidateEvent` in `pkg/apis/core/validation/events.go`), checked
/// on the stored core form of both Event APIs: an Event about a namespaced
/// object lives in that object's namespace; one about a cluster-scoped
/// object (a Node) lives in `default` (or no namespace) without `eventTime`,
/// and in `default` or `kube-system` with it.
pub fn check_event_namespace(obj: &Value, ns: Option<&str>) -> Option<Cause> {
    let ns = ns
        .or_else(|| obj.pointer("/metadata/namespace").and_then(Value::as_str))
        .unwrap_or("");
    let involved = obj
        .pointer("/involvedObject/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let has_event_time = obj
        .get("eventTime")
        .is_some_and(|t| t.as_str().is_some_and(|s| !s.is_empty()));
    let ok = match (has_event_time, involved.is_empty()) {
        (false, true) => ns.is_empty() || ns == "default",
        (false, false) => ns == involved,
        (true, true) => ns == "default" || ns == "kube-system",
        (true, false) => true,
    };
    (!ok).then(|| Cause {
        reason: "FieldValueInvalid",
        field: "involvedObject.namespace".into(),
        message: format!("Invalid value: {involved:?}: does not match event.namespace"),
    })
}

/// A pseudo-random 64-bit value (no `rand` dependency needed for uids).
pub fn random_u64() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut x = SEQ.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed) ^ nanos.rotate_left(17);
    // splitmix64 finaliser
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A version-4-shaped UUID string.
pub fn new_uid() -> String {
    let a = random_u64();
    let b = random_u64();
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        ((b >> 48) & 0x3fff) | 0x8000,
        b & 0xffff_ffff_ffff
    )
}

/// Five characters for `generateName`, from the alphabet the real server uses.
pub fn name_suffix() -> String {
    const ALPHA: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut x = random_u64();
    (0..5)
        .map(|_| {
            let c = ALPHA[(x % ALPHA.len() as u64) as usize] as char;
            x /= ALPHA.len() as u64;
            c
        })
        .collect()
}

/// Now, RFC 3339 with seconds (metadata timestamps).
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Now, RFC 3339 with microseconds (micro-time fields).
pub fn now_micro() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(dns1123_subdomain("a.b-c").is_none());
        assert!(dns1123_subdomain("A").is_some());
        assert!(dns1123_subdomain("-a").is_some());
        assert!(dns1123_label("a.b").is_some());
        assert!(dns1123_label("ns-1").is_none());
    }

    #[test]
    fn labels() {
        let ok = serde_json::json!({"metadata": {"labels": {"app.kubernetes.io/name": "x", "a": "", "b": "A_b.c-1"}}});
        assert!(check_labels(&ok).is_empty());
        let bad = serde_json::json!({"metadata": {"labels": {"a": "-x", "bad key": "v", "c": "y".repeat(64)}}});
        assert_eq!(check_labels(&bad).len(), 3);
    }

    #[test]
    fn node_events_live_where_a_real_server_keeps_them() {
        let ev = |involved_ns: Option<&str>, event_time: bool| {
            let mut v = serde_json::json!({"involvedObject": {"kind": "Node", "name": "n"}});
            if let Some(ns) = involved_ns {
                v["involvedObject"]["namespace"] = ns.into();
            }
            if event_time {
                v["eventTime"] = "2026-01-01T00:00:01.000000Z".into();
            }
            v
        };
        let ok = |v: &Value, ns: &str| check_event_namespace(v, Some(ns)).is_none();
        assert!(ok(&ev(None, false), "default"));
        assert!(!ok(&ev(None, false), "kube-system"));
        assert!(!ok(&ev(None, false), "rebound-system"));
        assert!(ok(&ev(None, true), "kube-system"));
        assert!(ok(&ev(None, true), "default"));
        assert!(!ok(&ev(None, true), "rebound-system"));
        // A namespaced object's Event lives in its namespace.
        assert!(ok(&ev(Some("team-a"), false), "team-a"));
        assert!(!ok(&ev(Some("team-a"), false), "team-b"));
        let c = check_event_namespace(&ev(None, true), Some("team-a")).unwrap();
        assert_eq!(c.field, "involvedObject.namespace");
    }

    #[test]
    fn micro_times() {
        assert!(micro_time_ok("2026-01-01T00:00:01.000000Z"));
        assert!(!micro_time_ok("2026-01-01T00:00:01Z"));
        assert!(!micro_time_ok("2026-01-01T00:00:01.000Z"));
        assert!(micro_time_ok("2026-01-01T00:00:01.123456+00:00"));
    }

    #[test]
    fn uid_shape() {
        let u = new_uid();
        assert_eq!(u.len(), 36);
        assert_ne!(u, new_uid());
        assert_eq!(name_suffix().len(), 5);
    }
}
