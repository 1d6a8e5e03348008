//! The proxy's fault injection: the embedded server's `FaultInjector` API
//! (`drop_watches`, `fail_next`, `fail_next_matching`, `set_latency`,
//! `expire_all_versions`) for any API server behind the proxy, plus
//! `refuse_connections`, which stands in for a server restart, and
//! `hold_watches`, which holds back one client's watch of one resource (a
//! watch that reconnects late while the others deliver).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::server::ApiError;
use crate::server::inject::{FailRule, WatchHold, take_rule};

/// Where `expire_all_versions` stands: asked `asked` times, of which the
/// first `done` found the upstream's current resourceVersion; every
/// resourceVersion below `below` is too old.
#[derive(Debug, Clone, Copy, Default)]
struct Expiry {
    asked: u64,
    done: u64,
    below: u64,
}

/// Controls for misbehaviour of a [`super::Proxy`].
pub struct ProxyInjector {
    drop_tx: watch::Sender<u64>,
    kill_tx: watch::Sender<u64>,
    refuse_tx: watch::Sender<Option<Instant>>,
    fail: Mutex<Option<FailRule>>,
    /// Requests carried out whose answer is replaced (a lost answer).
    lose: Mutex<Option<FailRule>>,
    latency_us: AtomicU64,
    pub(super) hold: WatchHold,
    expiry: Arc<watch::Sender<Expiry>>,
    /// Reads the upstream's current resourceVersion.
    upstream: kube::Client,
    runtime: tokio::runtime::Handle,
}

impl std::fmt::Debug for ProxyInjector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyInjector")
            .field("fail", &self.fail)
            .field("latency_us", &self.latency_us)
            .field("expiry", &*self.expiry.borrow())
            .finish()
    }
}

impl ProxyInjector {
    pub(super) fn new(upstream: kube::Client, runtime: tokio::runtime::Handle) -> Self {
        Self {
            drop_tx: watch::channel(0).0,
            kill_tx: watch::channel(0).0,
            refuse_tx: watch::channel(None).0,
            fail: Mutex::new(None),
            lose: Mutex::new(None),
            latency_us: AtomicU64::new(0),
            hold: WatchHold::default(),
            expiry: Arc::new(watch::channel(Expiry::default()).0),
            upstream,
            runtime,
        }
    }

    /// Ends every open watch stream now (the client sees the stream end
    /// cleanly and re-watches from its last resourceVersion).
    pub fn drop_watches(&self) {
        self.drop_tx.send_modify(|g| *g += 1);
    }

    /// Answers the next `n` requests with `status` (e.g. 500, or 429 which
    /// carries `Retry-After: 1`) without forwarding them.
    pub fn fail_next(&self, n: u32, status: u16) {
        self.fail_next_matching(n, status, None, None);
    }

    /// Like `fail_next`, but only requests with this verb and/or on this
    /// resource plural count and fail; others pass. Replaces any pending
    /// rule.
    pub fn fail_next_matching(
        &self,
        n: u32,
        status: u16,
        verb: Option<&str>,
        resource: Option<&str>,
    ) {
        if let Ok(mut g) = self.fail.lock() {
            *g = (n > 0).then(|| FailRule {
                remaining: n,
                status,
                verb: verb.map(str::to_string),
                resource: resource.map(str::to_string),
            });
        }
    }

    /// Carries out the next `n` requests of this verb and/or resource
    /// plural, then answers each with `status` (504: the answer was lost)
    /// instead of what the server answered: the change is made, and the
    /// client cannot know it. Replaces any pending rule of this kind; the
    /// `fail_next` rule is separate, both may be pending.
    pub fn lose_next_answers(
        &self,
        n: u32,
        status: u16,
        verb: Option<&str>,
        resource: Option<&str>,
    ) {
        if let Ok(mut g) = self.lose.lock() {
            *g = (n > 0).then(|| FailRule {
                remaining: n,
                status,
                verb: verb.map(str::to_string),
                resource: resource.map(str::to_string),
            });
        }
    }

    /// Takes one lost answer for a request, if a pending rule matches: the
    /// error to answer once the request is carried out.
    pub(super) fn take_lost_answer(&self, verb: &str, resource: &str) -> Option<ApiError> {
        take_rule(&self.lose, verb, resource)
    }

    /// Sets a delay added before every request is forwarded.
    pub fn set_latency(&self, d: Duration) {
        self.latency_us.store(
            d.as_micros().min(u64::MAX as u128) as u64,
            Ordering::Relaxed,
        );
    }

    /// Makes every resourceVersion issued so far too old, as a compaction
    /// does: the next watch resuming from one gets what a real server
    /// answers then (HTTP 200, one `ERROR` event with a `410 Expired`
    /// Status, end of stream). Open streams stay open (call
    /// `drop_watches` too to force resumes).
    ///
    /// The upstream's current resourceVersion is read in the background;
    /// watches arriving meanwhile wait for it.
    pub fn expire_all_versions(&self) {
        let mut asked = 0;
        self.expiry.send_modify(|e| {
            e.asked += 1;
            asked = e.asked;
        });
        let client = self.upstream.clone();
        let expiry = self.expiry.clone();
        self.runtime.spawn(async move {
            let rv = current_resource_version(&client).await;
            if let Err(e) = &rv {
                tracing::warn!(error = %e, "proxy: reading the current resourceVersion to expire");
            }
            expiry.send_modify(|x| {
                if let Ok(rv) = rv {
                    x.below = x.below.max(rv);
                }
                x.done = x.done.max(asked);
            });
        });
    }

    /// Closes every connection now and refuses new ones for `d`, as an API
    /// server that restarts: clients see their watches and in-flight
    /// requests cut and their reconnects refused until it is back.
    pub fn refuse_connections(&self, d: Duration) {
        self.refuse_tx.send_replace(Some(Instant::now() + d));
        self.kill_tx.send_modify(|g| *g += 1);
    }

    /// Holds every watch of `resource` (plural) by a client whose
    /// user agent starts with `agent` for `d` before it is forwarded, and
    /// ends the open ones (`drop_watches`) so that they reconnect into the
    /// hold: that client sees the resource's changes late, every other
    /// watch on time, as when one of a controller's watches reconnects.
    pub fn hold_watches(&self, agent: &str, resource: &str, d: Duration) {
        self.hold.set(agent, resource, d);
        self.drop_watches();
    }

    pub(super) fn latency(&self) -> Option<Duration> {
        match self.latency_us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }

    pub(super) fn drops(&self) -> watch::Receiver<u64> {
        self.drop_tx.subscribe()
    }

    pub(super) fn kills(&self) -> watch::Receiver<u64> {
        self.kill_tx.subscribe()
    }

    pub(super) fn refusals(&self) -> watch::Receiver<Option<Instant>> {
        self.refuse_tx.subscribe()
    }

    /// Whether a watch from resourceVersion `rv` is to be answered as too
    /// old: `rv` is a number (not `0`, "any") below the expiry mark.
    pub(super) async fn is_expired(&self, rv: Option<&str>) -> bool {
        let Some(v) = rv.and_then(|r| r.parse::<u64>().ok()).filter(|v| *v > 0) else {
            return false;
        };
        let mut rx = self.expiry.subscribe();
        let waited =
            tokio::time::timeout(Duration::from_secs(10), rx.wait_for(|e| e.done >= e.asked)).await;
        let e = match waited {
            Ok(Ok(e)) => *e,
            _ => *self.expiry.borrow(),
        };
        v < e.below
    }

    /// Takes one injected failure for a request, if a pending rule matches.
    pub(super) fn take_failure(&self, verb: &str, resource: &str) -> Option<ApiError> {
        take_rule(&self.fail, verb, resource)
    }
}

/// The upstream's current resourceVersion: a consistent list reads it
/// from etcd, so every resourceVersion handed out before is at most this.
async fn current_resource_version(client: &kube::Client) -> Result<u64, String> {
    use k8s_openapi::api::core::v1::Namespace;
    let api: kube::Api<Namespace> = kube::Api::all(client.clone());
    let list = api
        .list_metadata(&kube::api::ListParams::default().limit(1))
        .await
        .map_err(|e| e.to_string())?;
    list.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("not a number: {:?}", list.metadata.resource_version))
}
