//! Watch streams with reflector semantics, forwarded to a consumer. Each
//! runs `kube::runtime::watcher` with the default exponential backoff, so
//! API errors, dropped streams and 410 Gone relists are absorbed here. A
//! (re)list is delivered as `Relist`, then every current object, then
//! `Synced`: the consumer replaces what it held of the kind, so an object
//! deleted while the watch was down is dropped (what kube's `reflector`
//! store does), and nothing depends on having seen the delete.

use futures::{Stream, StreamExt};
use kube::Resource;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// When an input arrived and what reading it cost before it was queued:
/// the first two stages of the critical path (docs/critical-path.md).
#[derive(Clone, Copy, Debug)]
pub struct Stamp {
    /// The watcher yielded the (decoded) event, or the input was made.
    pub arrived: Instant,
    /// Turning the event into the consumer's input (for pods: the fault
    /// carriers read, the pod's facts interned), before it was queued.
    pub read: Duration,
}

impl Stamp {
    /// An input made now, with nothing to read.
    pub fn now() -> Stamp {
        Stamp {
            arrived: Instant::now(),
            read: Duration::ZERO,
        }
    }
}

/// A watch change, as forwarded.
#[derive(Debug)]
pub enum Change<K> {
    Apply(K),
    Delete(K),
    /// A (re)list starts.
    Relist,
    /// The (re)list is complete.
    Synced,
    /// The stream failed and is restarted with backoff (for metrics).
    Error(String),
}

/// Forward one watcher stream with `wrap` (which may drop a change by
/// returning `None`); each item is stamped with the instant it arrived and
/// the time `wrap` took.
pub fn spawn<K, S, F, T>(
    name: &'static str,
    stream: S,
    tx: mpsc::Sender<(T, Stamp)>,
    mut wrap: F,
) -> tokio::task::JoinHandle<()>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    S: Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
    F: FnMut(Change<K>) -> Option<T> + Send + 'static,
    T: Send + 'static,
{
    tokio::spawn(async move {
        let stream = stream.default_backoff();
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            let now = Instant::now();
            let change = match ev {
                Ok(Event::Apply(o) | Event::InitApply(o)) => Change::Apply(o),
                Ok(Event::Delete(o)) => Change::Delete(o),
                Ok(Event::Init) => Change::Relist,
                Ok(Event::InitDone) => Change::Synced,
                Err(e) => {
                    tracing::warn!(watch = name, error = %e, "watch failed; retrying with backoff");
                    Change::Error(e.to_string())
                }
            };
            let Some(item) = wrap(change) else {
                continue;
            };
            let stamp = Stamp {
                arrived: now,
                read: now.elapsed(),
            };
            if tx.send((item, stamp)).await.is_err() {
                return;
            }
        }
    })
}

/// The watcher configuration rebound uses: bookmarks on, initial lists in
/// pages of 100. A page is held whole while it is read; with 500 (kube's
/// and client-go's default) the pages of the concurrent initial lists
/// raised the controller's peak memory at 20,000 pods from 55 to 68-73
/// MiB (`rebound sim`), for 4× fewer list requests at start-up only.
pub fn config() -> watcher::Config {
    watcher::Config::default().page_size(100)
}
