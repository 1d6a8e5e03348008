//! Watch streams: newline-delimited JSON events, one chunk per event,
//! fed by the store's broadcast (no polling). Supports resuming from a
//! resourceVersion through the history window (410 Expired as an ERROR
//! event when too old), `sendInitialEvents` with the initial-events-end
//! BOOKMARK, periodic bookmarks, `timeoutSeconds`, selector transitions
//! (leaving the selection is DELETED, entering is ADDED) and forced drops.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use futures::Stream;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use super::errors::ApiError;
use super::ops::Loc;
use super::render;
use super::selectors::{FieldSelector, LabelSelector};
use super::state::Shared;
use super::store::{Change, ChangeKind, EncodingKey};

/// Watch parameters.
#[derive(Debug, Clone, Default)]
pub struct WatchQuery {
    /// `labelSelector`.
    pub labels: LabelSelector,
    /// `fieldSelector`.
    pub fields: FieldSelector,
    /// `resourceVersion` (None, `""` and `"0"`: start with the current state).
    pub rv: Option<String>,
    /// `sendInitialEvents=true`.
    pub send_initial: bool,
    /// `allowWatchBookmarks=true`.
    pub bookmarks: bool,
    /// `timeoutSeconds`.
    pub timeout: Option<Duration>,
    /// Send `PartialObjectMetadata` objects (metadata-only watch).
    pub meta_only: bool,
}

struct Filter {
    loc: Loc,
    q: WatchQuery,
}

impl Filter {
    fn matches(&self, obj: &Value) -> bool {
        self.q.labels.matches(obj) && self.q.fields.matches(obj)
    }

    fn in_scope(&self, c: &Change) -> bool {
        *c.res == *self.loc.key
            && (!self.loc.res.namespaced || self.loc.ns.as_deref().is_none_or(|n| n == c.ns))
    }

    /// The event a change produces for this watcher, if any.
    fn event(&self, shared: &Shared, c: &Change) -> Option<Bytes> {
        if !self.in_scope(c) {
            return None;
        }
        let now = self.matches(&c.obj);
        let before = c.old.as_deref().is_some_and(|o| self.matches(o));
        // `left`: the object left this watch's selection, DELETED with its
        // state before the write (the only event not made of `c.obj`).
        let (ty, left) = match c.kind {
            ChangeKind::Added if now => ("ADDED", false),
            ChangeKind::Modified if now && before => ("MODIFIED", false),
            ChangeKind::Modified if now => ("ADDED", false),
            ChangeKind::Modified if before => ("DELETED", true),
            ChangeKind::Deleted if before || now => ("DELETED", false),
            _ => return None,
        };
        if left {
            let mut old = c.old.as_deref().cloned().unwrap_or(Value::Null);
            old["metadata"]["resourceVersion"] = json!(c.rv.to_string());
            return Some(encode(ty, &self.render(shared, &old)));
        }
        let key = EncodingKey {
            ty,
            served: format!("{}/{}", self.loc.res.group, self.loc.res.plural),
            version: self.loc.version.clone(),
            meta_only: self.q.meta_only,
        };
        Some(c.encoded_as(key, || encode(ty, &self.render(shared, &c.obj))))
    }

    fn render(&self, shared: &Shared, obj: &Value) -> Value {
        let v = shared.view(&self.loc, obj);
        if self.q.meta_only {
            render::partial(&v)
        } else {
            v
        }
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut md = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            md["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        encode(
            "BOOKMARK",
            &json!({"kind": self.loc.res.kind, "apiVersion": self.loc.res.api_version(&self.loc.version), "metadata": md}),
        )
    }
}

fn encode(ty: &str, obj: &Value) -> Bytes {
    let mut v = serde_json::to_vec(&json!({"type": ty, "object": obj})).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

/// The body of a watch answer.
pub type WatchBody = std::pin::Pin<Box<dyn Stream<Item = Result<Bytes, Infallible>> + Send>>;

/// Starts a watch; the stream ends on timeout, drop, restart, a lagging
/// reader or client disconnect.
pub fn start(shared: Arc<Shared>, loc: Loc, q: WatchQuery) -> Result<WatchBody, ApiError> {
    let from: Option<u64> = match q.rv.as_deref() {
        None | Some("") | Some("0") => None,
        Some(s) => Some(
            s.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {s}")))?,
        ),
    };
    let filter = Filter { loc, q };
    let mut first: Vec<Bytes> = Vec::new();
    let (sub, start_rv) = {
        let r = shared.store.read();
        let cur = r.rv();
        let initial = from.is_none() || filter.q.send_initial;
        if initial {
            let ns = if filter.loc.res.namespaced {
                filter.loc.ns.as_deref()
            } else {
                None
            };
            for (_, o) in r.iter(&filter.loc.key, ns) {
                if filter.matches(o) {
                    first.push(encode("ADDED", &filter.render(&shared, o)));
                }
            }
            if filter.q.send_initial {
                first.push(filter.bookmark(cur, true));
            }
        } else if let Some(f) = from {
            let floor = r.floor_of(&filter.loc.key);
            if f < floor {
                let err = ApiError::expired(format!("too old resource version: {f} ({floor})"));
                let body = encode("ERROR", &err.to_status());
                return Ok(Box::pin(futures::stream::iter([Ok(body)])));
            }
            for c in r.history_since(f) {
                if let Some(b) = filter.event(&shared, &c) {
                    first.push(b);
                }
            }
        }
        // a resourceVersion from the future: only what comes after it
        // (the real watch cache waits for it, then sends later events)
        (r.subscribe(&filter.loc.key), cur.max(from.unwrap_or(0)))
    };
    let Some(sub) = sub else {
        return Err(ApiError::internal("watch broadcast closed"));
    };
    let (tx, rx) = mpsc::channel::<Bytes>(1024);
    tokio::spawn(pump(shared, filter, sub, tx, first, start_rv));
    Ok(Box::pin(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok(b), rx))
    })))
}

async fn pump(
    shared: Arc<Shared>,
    filter: Filter,
    mut sub: broadcast::Receiver<Arc<Change>>,
    tx: mpsc::Sender<Bytes>,
    first: Vec<Bytes>,
    start_rv: u64,
) {
    let mut drop_rx = shared.inject.drop_tx.subscribe();
    drop_rx.mark_unchanged();
    let sent = shared.watch_events.counter(&filter.loc.key);
    // The initial events of a streaming list end with a bookmark.
    let initial = first.len() - usize::from(filter.q.send_initial && !first.is_empty());
    for b in first {
        if tx.send(b).await.is_err() {
            return;
        }
    }
    sent.fetch_add(initial as u64, std::sync::atomic::Ordering::Relaxed);
    let deadline = filter.q.timeout.map(|t| tokio::time::Instant::now() + t);
    let sleep = async {
        match deadline {
            Some(d) => tokio::time::sleep_until(d).await,
            None => futures::future::pending().await,
        }
    };
    tokio::pin!(sleep);
    // with a timeout, bookmarks come two seconds before it and as it ends
    // (a real watch cache's heartbeat); else every bookmark interval
    let period = match filter.q.timeout {
        Some(t) if t > std::time::Duration::from_secs(2) => {
            (t - std::time::Duration::from_secs(2)).min(shared.opts.bookmark_interval)
        }
        _ => shared.opts.bookmark_interval,
    };
    let mut tick = tokio::time::interval(period);
    tick.tick().await;
    let mut seen = start_rv;
    loop {
        tokio::select! {
            biased;
            _ = drop_rx.changed() => return,
            _ = &mut sleep => {
                if filter.q.bookmarks {
                    let rv = shared.store.read().rv();
                    let _ = tx.send(filter.bookmark(rv, false)).await;
                }
                return;
            }
            _ = tx.closed() => return,
            msg = sub.recv() => match msg {
                Ok(c) => {
                    if c.rv <= seen {
                        continue;
                    }
                    seen = c.rv;
                    if let Some(b) = filter.event(&shared, &c) {
                        if tx.send(b).await.is_err() {
                            return;
                        }
                        sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
                // a reader that fell behind is cut off; it resumes from history
                Err(_) => return,
            },
            _ = tick.tick(), if filter.q.bookmarks => {
                // nothing of this resource pending under the read lock: every
                // change up to the global resourceVersion has been seen
                let rv = {
                    let r = shared.store.read();
                    if sub.is_empty() { r.rv() } else { seen }
                };
                if tx.send(filter.bookmark(rv, false)).await.is_err() {
                    return;
                }
            }
        }
    }
}
