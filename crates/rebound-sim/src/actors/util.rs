//! Small helpers shared by the actors: time stamps, random name suffixes,
//! owner references, error classification, and creating a namespace
//! (which the cluster set-up uses too, so the actors need not import it).

use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::{Value, json};

/// Creates a namespace unless it exists (409 is success): for the actors
/// that write into a namespace they may be the first to use
/// (`kube-node-lease`), and behind [`crate::cluster::ensure_namespace`].
pub async fn ensure_namespace(client: &kube::Client, ns: &str) -> Result<(), kube::Error> {
    use k8s_openapi::api::core::v1::Namespace;
    let api: kube::Api<Namespace> = kube::Api::all(client.clone());
    let obj = Namespace {
        metadata: ObjectMeta {
            name: Some(ns.to_owned()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    match api.create(&kube::api::PostParams::default(), &obj).await {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 409) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Now as an RFC 3339 time with second precision, as `metav1.Time` encodes.
pub(crate) fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

static RNG: AtomicU64 = AtomicU64::new(0);

/// A cheap pseudo-random number (splitmix64 over a shared counter seeded by
/// the clock); names only need to be unlikely to collide, not secret.
pub(crate) fn rand_u64() -> u64 {
    if RNG.load(Ordering::Relaxed) == 0 {
        let seed = chrono::Utc::now()
            .timestamp_nanos_opt()
            .unwrap_or(0x1234_5678) as u64;
        let _ = RNG.compare_exchange(0, seed | 1, Ordering::Relaxed, Ordering::Relaxed);
    }
    let mut z = RNG
        .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A suffix like the API server's `generateName` one: 5 characters from the
/// alphabet Kubernetes uses (no vowels, no look-alikes).
pub(crate) fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut n = rand_u64();
    (0..5)
        .map(|_| {
            let c = ALPHABET[(n % ALPHABET.len() as u64) as usize] as char;
            n /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

/// A container ID in the form a containerd kubelet reports.
pub(crate) fn container_id() -> String {
    format!(
        "containerd://{:016x}{:016x}{:016x}{:016x}",
        rand_u64(),
        rand_u64(),
        rand_u64(),
        rand_u64()
    )
}

/// `namespace/name`.
pub(crate) fn key(ns: &str, name: &str) -> String {
    format!("{ns}/{name}")
}

/// The controller owner reference a controller puts on what it creates.
pub(crate) fn controller_ref(api_version: &str, kind: &str, name: &str, uid: &str) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// The controller owner reference of an object, if any.
pub(crate) fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))
}

/// Whether a request failed with this HTTP status.
pub(crate) fn is_status(err: &kube::Error, code: u16) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == code)
}

/// A 404: the object is already gone (fine for deletes).
pub(crate) fn is_not_found(err: &kube::Error) -> bool {
    is_status(err, 404)
}

/// A 409: already exists (fine for creates of fixed names) or a conflict.
pub(crate) fn is_conflict(err: &kube::Error) -> bool {
    is_status(err, 409)
}

/// A string field of a JSON object.
pub(crate) fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut cur = v;
    for p in path {
        cur = cur.get(*p)?;
    }
    cur.as_str()
}

/// Sets (or replaces, by `type`) a condition in a JSON list of conditions,
/// moving `lastTransitionTime` only when the status changes, as Kubernetes
/// controllers do. Returns whether anything changed.
pub(crate) fn set_condition(
    conds: &mut Vec<Value>,
    ctype: &str,
    status: &str,
    reason: &str,
    message: &str,
) -> bool {
    let now = now_rfc3339();
    if let Some(c) = conds
        .iter_mut()
        .find(|c| str_at(c, &["type"]) == Some(ctype))
    {
        let same = str_at(c, &["status"]) == Some(status)
            && str_at(c, &["reason"]) == Some(reason)
            && str_at(c, &["message"]) == Some(message);
        if same {
            return false;
        }
        if str_at(c, &["status"]) != Some(status) {
            c["lastTransitionTime"] = json!(now);
        }
        c["status"] = json!(status);
        c["reason"] = json!(reason);
        c["message"] = json!(message);
        c["lastUpdateTime"] = json!(now);
        return true;
    }
    conds.push(json!({
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "lastUpdateTime": now,
        "lastTransitionTime": now,
    }));
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_use_the_kubernetes_alphabet_and_differ() {
        let a = name_suffix();
        let b = name_suffix();
        assert_eq!(a.len(), 5);
        assert!(a.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));
        assert_ne!(a, b);
    }

    #[test]
    fn set_condition_replaces_by_type_and_reports_changes() {
        let mut c = Vec::new();
        assert!(set_condition(&mut c, "Running", "True", "R", "m"));
        assert!(!set_condition(&mut c, "Running", "True", "R", "m"));
        assert!(set_condition(&mut c, "Running", "False", "R", "m"));
        assert_eq!(c.len(), 1);
        assert_eq!(str_at(&c[0], &["status"]), Some("False"));
    }
}
