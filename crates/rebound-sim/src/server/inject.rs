//! Fault injection: the ways a real API server misbehaves that an operator
//! must survive (dropped watches, 5xx, throttling, compaction, restarts,
//! latency), triggered from tests through the handle.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::errors::ApiError;
use super::store::Store;

/// A pending "fail the next N requests" rule (the embedded server's and
/// the test bed proxy's injectors share it).
#[derive(Debug, Clone)]
pub(crate) struct FailRule {
    pub(crate) remaining: u32,
    pub(crate) status: u16,
    pub(crate) verb: Option<String>,
    pub(crate) resource: Option<String>,
}

/// Watches of one resource by one client held back for a while (the
/// embedded server's and the test bed proxy's injectors share it): that
/// client sees the resource's changes late, every other watch on time, as
/// when one of a controller's watches reconnects while the others deliver.
#[derive(Debug, Default)]
pub(crate) struct WatchHold(Mutex<Option<(String, String, Instant)>>);

impl WatchHold {
    /// Holds watches of `resource` (plural) by user agents starting with
    /// `agent` for `d` from now.
    pub(crate) fn set(&self, agent: &str, resource: &str, d: Duration) {
        if let Ok(mut g) = self.0.lock() {
            *g = Some((agent.to_string(), resource.to_string(), Instant::now() + d));
        }
    }

    /// How long a watch of `resource` by `agent` is still held.
    pub(crate) fn held(&self, agent: Option<&str>, resource: &str) -> Option<Duration> {
        let g = self.0.lock().ok()?;
        let (a, r, until) = g.as_ref()?;
        (r == resource && agent.is_some_and(|u| u.starts_with(a.as_str())))
            .then(|| until.saturating_duration_since(Instant::now()))
            .filter(|d| !d.is_zero())
    }
}

/// Controls for misbehaviour; reached through `ApiServerHandle::inject()`.
#[derive(Debug)]
pub struct FaultInjector {
    /// Bumped to close every open watch stream.
    pub(crate) drop_tx: watch::Sender<u64>,
    fail: Mutex<Option<FailRule>>,
    /// Requests carried out whose answer is replaced (a lost answer).
    lose: Mutex<Option<FailRule>>,
    latency_us: AtomicU64,
    pub(crate) hold: WatchHold,
    store: Arc<Store>,
}

impl FaultInjector {
    pub(crate) fn new(store: Arc<Store>) -> Self {
        Self {
            drop_tx: watch::channel(0).0,
            fail: Mutex::new(None),
            lose: Mutex::new(None),
            latency_us: AtomicU64::new(0),
            hold: WatchHold::default(),
            store,
        }
    }

    /// Closes every open watch stream now (clients see the stream end and
    /// re-watch from their last resourceVersion).
    pub fn drop_watches(&self) {
        self.drop_tx.send_modify(|g| *g += 1);
    }

    /// Holds every watch of `resource` (plural) by a client whose user
    /// agent starts with `agent` for `d` before it is served, and ends the
    /// open ones so that they reconnect into the hold.
    pub fn hold_watches(&self, agent: &str, resource: &str, d: Duration) {
        self.hold.set(agent, resource, d);
        self.drop_watches();
    }

    /// Answers the next `n` requests with `status` (e.g. 500, or 429 which
    /// carries `Retry-After: 1`), before they reach the store.
    pub fn fail_next(&self, n: u32, status: u16) {
        self.fail_next_matching(n, status, None, None);
    }

    /// Like `fail_next`, but only requests with this verb (`delete`,
    /// `patch`, `watch`...) and/or on this resource plural (`pods`) count and
    /// fail; others pass. Replaces any pending rule.
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
    pub(crate) fn take_lost_answer(&self, verb: &str, resource: &str) -> Option<ApiError> {
        take_rule(&self.lose, verb, resource)
    }

    /// Sets an artificial delay added before every request is handled.
    pub fn set_latency(&self, d: Duration) {
        self.latency_us.store(
            d.as_micros().min(u64::MAX as u128) as u64,
            Ordering::Relaxed,
        );
    }

    /// Compacts the history: every resourceVersion issued so far becomes too
    /// old, so the next watch resuming from one gets `410 Expired` (open
    /// streams are not closed; call `drop_watches` too to force resumes).
    pub fn expire_all_versions(&self) {
        self.store.expire_all();
    }

    pub(crate) fn latency(&self) -> Option<Duration> {
        match self.latency_us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }

    /// Takes one injected failure for a request, if a pending rule matches.
    pub(crate) fn take_failure(&self, verb: &str, resource: &str) -> Option<ApiError> {
        take_rule(&self.fail, verb, resource)
    }
}

/// Takes one use of the rule in `slot` for a request of `verb` on
/// `resource`, if it matches: the error to answer.
pub(crate) fn take_rule(
    slot: &Mutex<Option<FailRule>>,
    verb: &str,
    resource: &str,
) -> Option<ApiError> {
    let mut g = slot.lock().ok()?;
    let rule = g.as_mut()?;
    if rule.verb.as_deref().is_some_and(|v| v != verb)
        || rule.resource.as_deref().is_some_and(|r| r != resource)
    {
        return None;
    }
    let status = rule.status;
    rule.remaining -= 1;
    if rule.remaining == 0 {
        *g = None;
    }
    Some(match status {
        429 => ApiError::too_many_requests(1),
        500 => ApiError::internal("injected failure"),
        other => ApiError::other(other, "injected failure"),
    })
}
