//! One change of the store, as a watch event carries it, with the
//! encodings of it already rendered for watchers (so a change fanned out
//! to many watches is serialised once per rendering).

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use serde_json::Value;

/// Kind of a change, as in a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// Object created.
    Added,
    /// Object changed.
    Modified,
    /// Object removed (the object is its last state, with the new RV).
    Deleted,
}

/// One committed write, kept in the history and sent to watchers.
#[derive(Debug)]
pub struct Change {
    /// resourceVersion of the write.
    pub rv: u64,
    /// Storage key of the resource (`group/plural`).
    pub res: Arc<str>,
    /// Namespace (`""` for cluster-scoped).
    pub ns: String,
    /// What happened.
    pub kind: ChangeKind,
    /// The object after the write (for Deleted: its last state).
    pub obj: Arc<Value>,
    /// The object before the write (None for Added), for selector watches.
    pub old: Option<Arc<Value>>,
    /// Watch events already encoded from this change, by how they were
    /// rendered: every watcher of the same rendering shares one
    /// serialisation, as kube-apiserver's watch cache does (a job watched
    /// by each of its 1,024 pods' agents is encoded once per change, not
    /// 1,024 times).
    pub encoded: Mutex<Vec<(EncodingKey, Bytes)>>,
}

/// How many of the newest changes keep their encodings (a watcher further
/// behind, or resuming from older history, encodes again).
pub(super) const ENCODINGS_KEPT: usize = 4096;

/// How a watch event was rendered from a change: its type, the version and
/// resource it is served as, and whether only metadata is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodingKey {
    /// `ADDED`, `MODIFIED`, `DELETED`.
    pub ty: &'static str,
    /// `group/plural` as served (the core and events.k8s.io Events share
    /// storage).
    pub served: String,
    /// The version served.
    pub version: String,
    /// A metadata-only watch.
    pub meta_only: bool,
}

impl Change {
    /// The encoded event for `key`, from the cache or made by `encode`
    /// (and kept).
    pub fn encoded_as(&self, key: EncodingKey, encode: impl FnOnce() -> Bytes) -> Bytes {
        if let Ok(cache) = self.encoded.lock()
            && let Some((_, b)) = cache.iter().find(|(k, _)| *k == key)
        {
            return b.clone();
        }
        let b = encode();
        if let Ok(mut cache) = self.encoded.lock()
            && !cache.iter().any(|(k, _)| *k == key)
        {
            cache.push((key, b.clone()));
        }
        b
    }
}
