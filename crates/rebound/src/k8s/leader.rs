//! Lease-based leader election (ECOSYSTEM.md: no published crate is both on
//! kube 5 and safe). Every replica watches (hot standby); only the holder
//! acts. Rules:
//! - acquire only a vacant Lease or one whose holder has not renewed for a
//!   whole lease duration *as observed locally* (no clock comparison across
//!   machines), always with a resourceVersion precondition: a 409 means
//!   another replica won;
//! - renew with a resourceVersion precondition and a timeout;
//! - keep a local deadline (last successful renew start + duration − grace)
//!   and check it right before every disruptive action ([`Leadership::is_leader`]),
//!   so a leader that cannot renew stops acting before its Lease can be taken;
//! - on shutdown, release the Lease so a standby takes over at once.

use chrono::Utc;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{Mutex, watch};

/// Lease timing.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    /// How long a Lease is valid after a renew (also the takeover delay).
    pub duration: Duration,
    /// How often to renew or retry.
    pub retry: Duration,
    /// Safety margin: stop acting this long before the Lease could expire.
    pub grace: Duration,
}

/// Shared view of whether this replica may act now.
#[derive(Clone, Debug)]
pub struct Leadership {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    deadline: Mutex<Option<Instant>>,
    fast: AtomicBool,
    tx: watch::Sender<bool>,
    always: bool,
    revoked: AtomicBool,
    /// The leadership term: raised each time this replica starts leading
    /// (a first acquire, or a renew after its deadline had lapsed), so an
    /// action decided in one term is never carried out in another.
    term: AtomicU64,
}

impl Leadership {
    /// Leadership that is always held (leader election disabled, one replica).
    pub fn always() -> Leadership {
        let (tx, _) = watch::channel(true);
        Leadership {
            inner: Arc::new(Inner {
                deadline: Mutex::new(None),
                fast: AtomicBool::new(true),
                tx,
                always: true,
                revoked: AtomicBool::new(false),
                term: AtomicU64::new(1),
            }),
        }
    }

    fn new() -> Leadership {
        let (tx, _) = watch::channel(false);
        Leadership {
            inner: Arc::new(Inner {
                deadline: Mutex::new(None),
                fast: AtomicBool::new(false),
                tx,
                always: false,
                revoked: AtomicBool::new(false),
                term: AtomicU64::new(0),
            }),
        }
    }

    /// Whether this replica holds the Lease with time to spare: checked
    /// right before every disruptive action.
    pub fn is_leader(&self) -> bool {
        if self.inner.revoked.load(Ordering::Acquire) {
            return false;
        }
        if self.inner.always {
            return true;
        }
        if !self.inner.fast.load(Ordering::Acquire) {
            return false;
        }
        match self.inner.deadline.try_lock() {
            Ok(d) => d.is_some_and(|d| Instant::now() < d),
            // Being updated by the renew loop right now: the fast flag says
            // the previous deadline held.
            Err(_) => true,
        }
    }

    /// Stop acting at once (the controller is failing): every later
    /// [`Self::is_leader`] is false; the Lease loop stops renewing.
    pub fn revoke(&self) {
        self.inner.fast.store(false, Ordering::Release);
        self.inner.revoked.store(true, Ordering::Release);
        self.inner.tx.send_if_modified(|v| {
            let changed = *v;
            *v = false;
            changed
        });
    }

    /// Whether [`Self::revoke`] was called.
    pub fn is_revoked(&self) -> bool {
        self.inner.revoked.load(Ordering::Acquire)
    }

    /// Changes of leadership (true = became leader).
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.inner.tx.subscribe()
    }

    /// The current leadership term (see [`Inner::term`]): the core tags
    /// its effects with the term it decided them in, and the executor
    /// carries one out only while that term lasts.
    pub fn term(&self) -> u64 {
        self.inner.term.load(Ordering::Acquire)
    }

    /// Whether this replica leads in `term`: leads now and has not lost
    /// and regained leadership since `term` began.
    pub fn leads_in(&self, term: u64) -> bool {
        self.is_leader() && self.term() == term
    }

    /// Resolves once this replica no longer leads in `term` (its local
    /// deadline passed without a renew, it was revoked, or a new term
    /// began): a request of `term` still under way then is dropped, so it
    /// cannot land after a standby may have taken the Lease over (the
    /// deadline keeps `grace` before that moment).
    pub async fn lost(&self, term: u64) {
        let mut changes = self.subscribe();
        loop {
            if !self.leads_in(term) {
                return;
            }
            if self.inner.always {
                // Held for good: only a revoke (a change) ends it.
                let _ = changes.changed().await;
                continue;
            }
            let deadline = *self.inner.deadline.lock().await;
            let Some(d) = deadline else {
                return;
            };
            tokio::select! {
                _ = tokio::time::sleep_until(tokio::time::Instant::from_std(d)) => {}
                _ = changes.changed() => {}
            }
        }
    }

    /// Leadership held until `deadline` in term 1, renewed by nothing
    /// (tests of what happens when a Lease lapses).
    #[cfg(test)]
    pub async fn leading_until(deadline: Instant) -> Leadership {
        let l = Leadership::new();
        l.set(Some(deadline)).await;
        l
    }

    async fn set(&self, deadline: Option<Instant>) {
        let deadline = deadline.filter(|_| !self.is_revoked());
        let mut held = self.inner.deadline.lock().await;
        // A lapse (the deadline passed without a renew) ends a term even
        // when no one was told: a renew after it starts a new one.
        let was_leading =
            self.inner.fast.load(Ordering::Acquire) && held.is_some_and(|d| Instant::now() < d);
        let leading = deadline.is_some();
        let new_term = leading && !was_leading;
        if new_term {
            self.inner.term.fetch_add(1, Ordering::AcqRel);
        }
        *held = deadline;
        drop(held);
        self.inner.fast.store(leading, Ordering::Release);
        self.inner.tx.send_if_modified(|v| {
            let changed = *v != leading || new_term;
            *v = leading;
            changed
        });
    }
}

/// Errors of the Lease loop.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("lease {ns}/{name}: {source}")]
    Api {
        ns: String,
        name: String,
        source: kube::Error,
    },
}

fn micro_now() -> MicroTime {
    // Lease times need microseconds (six fractional digits).
    let now = Utc::now();
    let ts = jiff::Timestamp::from_microsecond(now.timestamp_micros())
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    MicroTime(ts)
}

/// What we last saw of another holder's Lease, and when (local clock).
struct Observed {
    holder: Option<String>,
    renew: Option<String>,
    at: Instant,
}

/// Whether the replica may renew its Lease now (false while a step of the
/// recovery core is stuck: holding leadership then acts on nothing).
pub type RenewGate = Arc<dyn Fn() -> bool + Send + Sync>;

/// Start the Lease loop. Returns the shared [`Leadership`] and the task; if
/// the task ends (shutdown, or an unexpected error), leadership is dropped.
/// `may_renew` is asked before every renew or acquire: while it says no,
/// the replica stops acting, releases a Lease it holds so a standby takes
/// over at once, and does not try to lead.
pub fn start(
    client: kube::Client,
    cfg: LeaseConfig,
    mut shutdown: watch::Receiver<bool>,
    may_renew: RenewGate,
) -> (Leadership, tokio::task::JoinHandle<()>) {
    let lead = Leadership::new();
    let l2 = lead.clone();
    let task = tokio::spawn(async move {
        let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
        let mut observed: Option<Observed> = None;
        // The Lease was given up for a stuck step (released once).
        let mut gave_up = false;
        loop {
            if l2.is_revoked() {
                // The controller is failing: let a standby take over now
                // rather than after the lease duration.
                release(&api, &cfg).await;
                return;
            }
            if !may_renew() {
                if !gave_up {
                    tracing::error!(
                        "the recovery core is stuck: not renewing the Lease; releasing it for a standby"
                    );
                    l2.set(None).await;
                    release(&api, &cfg).await;
                    gave_up = true;
                }
                tokio::select! {
                    _ = tokio::time::sleep(cfg.retry) => continue,
                    _ = shutdown.changed() => return,
                }
            }
            gave_up = false;
            let started = Instant::now();
            let r = tokio::time::timeout(
                cfg.retry.max(Duration::from_secs(1)) * 2,
                try_once(&api, &cfg, &mut observed),
            )
            .await;
            match r {
                Ok(Ok(true)) => {
                    let d = started + cfg.duration.saturating_sub(cfg.grace);
                    l2.set(Some(d)).await;
                }
                Ok(Ok(false)) => l2.set(None).await,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "lease renew failed");
                    // Keep the existing deadline: it expires by itself.
                }
                Err(_) => tracing::warn!("lease request timed out"),
            }
            if !l2.is_leader() {
                l2.set(None).await;
            }
            tokio::select! {
                _ = tokio::time::sleep(cfg.retry) => {}
                _ = shutdown.changed() => {
                    // Leadership cleared first: nothing acts once the
                    // Lease is free for another replica.
                    let held = l2.is_leader();
                    l2.set(None).await;
                    if held {
                        release(&api, &cfg).await;
                    }
                    return;
                }
            }
        }
    });
    (lead, task)
}

async fn try_once(
    api: &Api<Lease>,
    cfg: &LeaseConfig,
    observed: &mut Option<Observed>,
) -> Result<bool, LeaseError> {
    let err = |source| LeaseError::Api {
        ns: cfg.namespace.clone(),
        name: cfg.name.clone(),
        source,
    };
    let secs = cfg.duration.as_secs().max(1) as i32;
    let current = api.get_opt(&cfg.name).await.map_err(err)?;
    let Some(mut lease) = current else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(cfg.name.clone()),
                namespace: Some(cfg.namespace.clone()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(cfg.identity.clone()),
                lease_duration_seconds: Some(secs),
                acquire_time: Some(micro_now()),
                renew_time: Some(micro_now()),
                lease_transitions: Some(0),
                ..Default::default()
            }),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => {
                tracing::info!(identity = %cfg.identity, "acquired lease (created)");
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(err(e)),
        };
    };
    let spec = lease.spec.get_or_insert_with(Default::default);
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
    let mine = holder.as_deref() == Some(cfg.identity.as_str());
    if !mine {
        let renew = spec.renew_time.as_ref().map(|t| format!("{:?}", t.0));
        let dur = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(secs).max(1) as u64);
        let seen_at = match observed {
            Some(o) if o.holder == holder && o.renew == renew => o.at,
            _ => {
                *observed = Some(Observed {
                    holder: holder.clone(),
                    renew,
                    at: Instant::now(),
                });
                Instant::now()
            }
        };
        let vacant = holder.is_none();
        if !vacant && seen_at.elapsed() < dur {
            return Ok(false);
        }
        spec.acquire_time = Some(micro_now());
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    spec.holder_identity = Some(cfg.identity.clone());
    spec.lease_duration_seconds = Some(secs);
    spec.renew_time = Some(micro_now());
    // replace() sends the resourceVersion we read: a 409 means we lost.
    match api.replace(&cfg.name, &PostParams::default(), &lease).await {
        Ok(_) => {
            if !mine {
                tracing::info!(identity = %cfg.identity, "acquired lease (took over)");
            }
            Ok(true)
        }
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(err(e)),
    }
}

async fn release(api: &Api<Lease>, cfg: &LeaseConfig) {
    if let Ok(Some(mut lease)) = api.get_opt(&cfg.name).await {
        let spec = lease.spec.get_or_insert_with(Default::default);
        if spec.holder_identity.as_deref() == Some(cfg.identity.as_str()) {
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(micro_now());
            if let Err(e) = api.replace(&cfg.name, &PostParams::default(), &lease).await {
                tracing::warn!(error = %e, "releasing the lease failed; a standby takes over when it expires");
            } else {
                tracing::info!("released lease");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::client::Body;
    use serde_json::{Value, json};

    /// A scripted API server holding one Lease; records, for every write
    /// that frees it (no holder), whether this replica still led then.
    async fn serve(
        mut handle: tower_test::mock::Handle<http::Request<Body>, http::Response<Body>>,
        lead: Leadership,
        frees: std::sync::Arc<std::sync::Mutex<Vec<bool>>>,
    ) {
        let mut lease: Option<Value> = None;
        let mut rv = 0u64;
        while let Some((req, send)) = handle.next_request().await {
            let method = req.method().clone();
            let body = req.into_body().collect_bytes().await.unwrap_or_default();
            let answer = |code: u16, v: &Value| {
                http::Response::builder()
                    .status(code)
                    .body(Body::from(serde_json::to_vec(v).unwrap_or_default()))
                    .expect("response")
            };
            let not_found = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                   "code": 404, "reason": "NotFound", "message": "not found"});
            let response = match method {
                http::Method::GET => match &lease {
                    Some(l) => answer(200, l),
                    None => answer(404, &not_found),
                },
                _ => {
                    let mut l: Value = serde_json::from_slice(&body).unwrap_or_default();
                    if l["spec"]["holderIdentity"].is_null()
                        && let Ok(mut f) = frees.lock()
                    {
                        f.push(lead.is_leader());
                    }
                    rv += 1;
                    l["metadata"]["resourceVersion"] = json!(rv.to_string());
                    lease = Some(l.clone());
                    answer(
                        if method == http::Method::POST {
                            201
                        } else {
                            200
                        },
                        &l,
                    )
                }
            };
            send.send_response(response);
        }
    }

    #[tokio::test]
    async fn leadership_is_cleared_before_the_lease_is_released() {
        let (svc, handle) = tower_test::mock::pair::<http::Request<Body>, http::Response<Body>>();
        let client = kube::Client::new(svc, "ns");
        let (stop_tx, stop_rx) = watch::channel(false);
        let cfg = LeaseConfig {
            namespace: "ns".into(),
            name: "rebound".into(),
            identity: "me".into(),
            duration: Duration::from_secs(10),
            retry: Duration::from_millis(100),
            grace: Duration::from_secs(1),
        };
        let (lead, task) = start(client, cfg, stop_rx, std::sync::Arc::new(|| true));
        let frees = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let server = tokio::spawn(serve(handle, lead.clone(), frees.clone()));
        let deadline = Instant::now() + Duration::from_secs(5);
        while !lead.is_leader() {
            assert!(Instant::now() < deadline, "never led");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let _ = stop_tx.send(true);
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the Lease loop ends")
            .expect("no panic");
        server.abort();
        let frees = frees.lock().map(|f| f.clone()).unwrap_or_default();
        assert_eq!(frees, vec![false], "released once, after leading ended");
        assert!(!lead.is_leader());
    }
}
