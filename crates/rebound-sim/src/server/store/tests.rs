//! Tests of the store's change encodings.

use super::*;
use axum::body::Bytes;
use serde_json::json;

fn key(ty: &'static str, meta_only: bool) -> EncodingKey {
    EncodingKey {
        ty,
        served: "batch.volcano.sh/jobs".into(),
        version: "v1alpha1".into(),
        meta_only,
    }
}

#[test]
fn a_change_is_encoded_once_per_rendering() {
    let c = Change {
        rv: 7,
        res: Arc::from("batch.volcano.sh/jobs"),
        ns: "ns".into(),
        kind: ChangeKind::Modified,
        obj: Arc::new(json!({"metadata": {"name": "j"}})),
        old: None,
        encoded: Mutex::default(),
    };
    let mut made = 0;
    let mut enc = |text: &'static str| {
        made += 1;
        Bytes::from_static(text.as_bytes())
    };
    let a = c.encoded_as(key("MODIFIED", false), || enc("full"));
    let b = c.encoded_as(key("MODIFIED", false), || enc("again"));
    let m = c.encoded_as(key("MODIFIED", true), || enc("meta"));
    let d = c.encoded_as(key("ADDED", false), || enc("added"));
    assert_eq!(made, 3, "the second full watcher reused the first encoding");
    assert_eq!((&a[..], &b[..]), (&b"full"[..], &b"full"[..]));
    assert_eq!((&m[..], &d[..]), (&b"meta"[..], &b"added"[..]));
}

#[test]
fn only_the_newest_changes_keep_their_encodings() {
    let store = Store::new(10_000, 16);
    let res: Arc<str> = Arc::from("batch.volcano.sh/jobs");
    let mut w = store.write();
    let mut changes = Vec::new();
    for i in 0..ENCODINGS_KEPT {
        let c = w.put(
            &res,
            json!({"metadata": {"name": format!("j{i}"), "namespace": "ns"}}),
        );
        c.encoded_as(key("ADDED", false), || Bytes::from_static(b"x"));
        changes.push(c);
    }
    let len = |c: &Arc<Change>| c.encoded.lock().map(|e| e.len()).unwrap_or(99);
    assert_eq!(len(&changes[0]), 1, "within the newest {ENCODINGS_KEPT}");
    w.put(
        &res,
        json!({"metadata": {"name": "last", "namespace": "ns"}}),
    );
    assert_eq!(len(&changes[0]), 0, "fell out of the newest: cleared");
    assert_eq!(len(&changes[1]), 1);
}
