//! The machinery every actor shares: its error type, the task set that keeps
//! the actors alive, watch streams, event batching and a bounded writer.

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{FutureExt, Stream, StreamExt};
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, watcher};
use serde::de::DeserializeOwned;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;

use super::ratelimit::{ClientLimit, TokenBucket};

/// Why a simulated-cluster operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ActorError {
    /// The API server refused or failed a request.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// An object the caller named does not exist.
    #[error("{kind} {name} not found")]
    NotFound {
        /// Kind of the missing object.
        kind: &'static str,
        /// `namespace/name` or `name`.
        name: String,
    },
    /// An object exists but cannot be used as asked (no such container, ...).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// An object could not be (de)serialized.
    #[error("serialization: {0}")]
    Json(#[from] serde_json::Error),
    /// A wait did not finish in time.
    #[error("timed out: {0}")]
    Timeout(String),
}

/// The running actor tasks. Dropping it stops them, so a simulated cluster
/// never outlives its owner (tests start many clusters in one process).
#[derive(Debug, Default)]
pub struct ActorTasks {
    handles: Vec<JoinHandle<()>>,
}

impl ActorTasks {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Keeps a task so that it is stopped with the others.
    pub fn push(&mut self, handle: JoinHandle<()>) {
        self.handles.push(handle);
    }

    /// Stops every task now.
    pub fn abort_all(&mut self) {
        for h in self.handles.drain(..) {
            h.abort();
        }
    }

    /// Number of tasks kept.
    pub fn len(&self) -> usize {
        self.handles.len()
    }

    /// Whether no task is kept.
    pub fn is_empty(&self) -> bool {
        self.handles.is_empty()
    }
}

impl Drop for ActorTasks {
    fn drop(&mut self) {
        self.abort_all();
    }
}

/// A watch (list, then watch, re-listing after errors with backoff) as a
/// stream of events that never ends; errors are logged and retried, as a
/// controller's informer does.
pub(crate) fn watch_stream<K>(
    api: Api<K>,
    labels: Option<&str>,
    what: &'static str,
) -> BoxStream<'static, watcher::Event<K>>
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let mut cfg = watcher::Config::default();
    if let Some(l) = labels {
        cfg = cfg.labels(l);
    }
    watcher(api, cfg)
        .default_backoff()
        .filter_map(move |r| async move {
            match r {
                Ok(e) => Some(e),
                Err(e) => {
                    tracing::debug!(watch = what, error = %e, "sim actor watch error");
                    None
                }
            }
        })
        .boxed()
}

/// A stream that yields `()` every `period`, for retries and expiries.
pub(crate) fn ticks(period: Duration) -> BoxStream<'static, ()> {
    let mut iv = tokio::time::interval(period);
    iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    futures::stream::unfold(iv, |mut iv| async move {
        iv.tick().await;
        Some(((), iv))
    })
    .boxed()
}

/// Waits for one item, then takes whatever else is ready (up to `max`), so
/// that a burst of watch events costs one reconcile pass instead of many.
pub(crate) async fn next_batch<S, T>(stream: &mut S, max: usize) -> Option<Vec<T>>
where
    S: Stream<Item = T> + Unpin,
{
    let first = stream.next().await?;
    let mut out = vec![first];
    while out.len() < max {
        match stream.next().now_or_never() {
            Some(Some(x)) => out.push(x),
            _ => break,
        }
    }
    Some(out)
}

/// Runs an actor's API writes concurrently (at most `limit` at once) and
/// hands every result back to the actor's loop through a channel, so the
/// loop never waits on the network and can track what is in flight.
pub(crate) struct Writer<R> {
    sem: Arc<Semaphore>,
    tx: mpsc::UnboundedSender<R>,
    /// The client's rate limit, as a real operator's client-go client has
    /// one (see [`super::ratelimit`]); every request waits on it.
    bucket: Option<Arc<TokenBucket>>,
}

impl<R: Send + 'static> Writer<R> {
    /// A writer and the stream of its results.
    pub(crate) fn new(limit: usize) -> (Self, BoxStream<'static, R>) {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let stream = futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed();
        (
            Self {
                sem: Arc::new(Semaphore::new(limit.max(1))),
                tx,
                bucket: None,
            },
            stream,
        )
    }

    /// The same writer whose requests wait on `limit` (none if unlimited).
    pub(crate) fn limited(mut self, limit: ClientLimit) -> Self {
        self.bucket = limit
            .is_limited()
            .then(|| Arc::new(TokenBucket::new(limit)));
        self
    }

    /// The client's bucket, for code that sends requests of its own (one
    /// token per request).
    pub(crate) fn bucket(&self) -> Option<Arc<TokenBucket>> {
        self.bucket.clone()
    }

    /// A sender into the actor's loop, for a task that reports several
    /// results (a slow-start batch of creates).
    pub(crate) fn sender(&self) -> mpsc::UnboundedSender<R> {
        self.tx.clone()
    }

    /// Starts one write.
    pub(crate) fn spawn<F>(&self, fut: F)
    where
        F: Future<Output = R> + Send + 'static,
    {
        let sem = self.sem.clone();
        let tx = self.tx.clone();
        let bucket = self.bucket.clone();
        tokio::spawn(async move {
            let _permit = sem.acquire_owned().await;
            if let Some(b) = bucket {
                b.wait().await;
            }
            let r = fut.await;
            let _ = tx.send(r);
        });
    }
}
