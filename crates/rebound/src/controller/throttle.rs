//! Client-side rate limit for writes (`--qps`, `--burst`): a token bucket,
//! so that a storm of 500 failing nodes cannot flood the API server.
//!
//! The bucket is shared, its order is not first come, first served:
//! - node actions (cordons, uncordons) go first: no tenant's jobs can
//!   hold a cordon back;
//! - job actions take turns by namespace (start-time fair queueing: each
//!   namespace's next action is queued one turn after its previous one,
//!   and never before the turn being served), so one tenant's hundreds of
//!   crash-looping jobs delay another namespace's restart by at most one
//!   action each, not by their whole queue;
//! - records (Events) take tokens only while no action waits and half the
//!   burst is left for actions, so a storm's restarts and cordons are never
//!   queued behind its Events, which follow as the bucket refills.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::Notify;
// Tokio's clock (the system's, unless a test pauses it).
use tokio::time::Instant;

/// Whose action waits for a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane<'a> {
    /// A node's cordon or uncordon: before any job's action.
    Nodes,
    /// An action on a job (or its pods) of this namespace.
    Namespace(&'a str),
}

/// A token's worth lost to floating point still counts as a token.
const EPSILON: f64 = 1e-9;

/// The shortest wait for a refill: a wait the clock cannot resolve would
/// spin.
const MIN_WAIT: Duration = Duration::from_millis(1);

/// Namespaces whose last turn is remembered beyond the turn being served
/// are forgotten past this many (a forgotten one is simply not behind).
const TURNS_KEPT: usize = 1024;

#[derive(Debug)]
struct State {
    tokens: f64,
    at: Instant,
    /// Actions waiting, by (turn, arrival): the first is served next. A
    /// granted action leaves the line at once; its waker wakes it (and
    /// wakes the first in line, which watches the bucket refill).
    waiting: BTreeMap<(u64, u64), Arc<Notify>>,
    /// Each namespace's last queued turn.
    turns: HashMap<String, u64>,
    /// The turn of the last namespace action granted.
    serving: u64,
    arrivals: u64,
}

impl State {
    fn refill(&mut self, qps: f64, burst: f64) {
        let now = Instant::now();
        self.tokens = (self.tokens + now.duration_since(self.at).as_secs_f64() * qps).min(burst);
        self.at = now;
    }

    /// Grants waiting actions, first in line first, while tokens last;
    /// wakes each granted one and the new first in line (it watches the
    /// bucket now).
    fn grant(&mut self) {
        let mut moved = false;
        while self.tokens >= 1.0 - EPSILON {
            let Some(((turn, _), wake)) = self.waiting.pop_first() else {
                break;
            };
            self.tokens -= 1.0;
            self.serving = self.serving.max(turn);
            wake.notify_one();
            moved = true;
        }
        if moved {
            self.wake_first();
        }
    }

    /// Wakes the first in line: it watches the bucket from now on.
    fn wake_first(&self) {
        if let Some(w) = self.waiting.values().next() {
            w.notify_one();
        }
    }
}

/// A token bucket shared by every action task.
#[derive(Debug)]
pub struct Throttle {
    qps: f64,
    burst: f64,
    state: Mutex<State>,
}

impl Throttle {
    /// `qps` tokens per second, at most `burst` saved up. `qps <= 0` means
    /// unlimited.
    pub fn new(qps: f64, burst: u32) -> Throttle {
        let burst = f64::from(burst.max(1));
        Throttle {
            qps,
            burst,
            state: Mutex::new(State {
                tokens: burst,
                at: Instant::now(),
                waiting: BTreeMap::new(),
                turns: HashMap::new(),
                serving: 0,
                arrivals: 0,
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Nothing in a critical section can leave the state half-made.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wait for one token for an action of `lane`.
    pub async fn acquire(&self, lane: Lane<'_>) {
        if self.qps <= 0.0 {
            return;
        }
        let wake = Arc::new(Notify::new());
        let key = {
            let mut s = self.state();
            s.refill(self.qps, self.burst);
            if s.waiting.is_empty() && s.tokens >= 1.0 - EPSILON {
                s.tokens -= 1.0;
                if let Lane::Namespace(ns) = lane {
                    // Not behind anyone: its turn is the one served.
                    let turn = s.serving.max(s.turns.get(ns).copied().unwrap_or(0));
                    s.turns.insert(ns.to_owned(), turn);
                }
                return;
            }
            let turn = match lane {
                Lane::Nodes => 0,
                Lane::Namespace(ns) => {
                    let turn = s.serving.max(s.turns.get(ns).copied().unwrap_or(0)) + 1;
                    if s.turns.len() >= TURNS_KEPT {
                        let serving = s.serving;
                        s.turns.retain(|_, t| *t > serving);
                    }
                    s.turns.insert(ns.to_owned(), turn);
                    turn
                }
            };
            s.arrivals += 1;
            let key = (turn, s.arrivals);
            s.waiting.insert(key, wake.clone());
            key
        };
        let mut line = Line {
            throttle: self,
            key: Some(key),
        };
        loop {
            let notified = wake.notified();
            let wait = {
                let mut s = self.state();
                s.refill(self.qps, self.burst);
                s.grant();
                match s.waiting.get(&key) {
                    // Granted (and out of the line): go.
                    None => {
                        line.key = None;
                        return;
                    }
                    Some(_) if s.waiting.keys().next() == Some(&key) => {
                        Duration::from_secs_f64((1.0 - s.tokens).max(0.0) / self.qps).max(MIN_WAIT)
                    }
                    // Someone ahead watches the bucket; a second is a
                    // safety net should it be gone.
                    Some(_) => Duration::from_secs(1),
                }
            };
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Wait for one token for a record (an Event): it is taken only while
    /// no action waits and half the burst stays for actions.
    pub async fn acquire_record(&self) {
        if self.qps <= 0.0 {
            return;
        }
        let need = 1.0 + (self.burst / 2.0).floor();
        loop {
            let wait = {
                let mut s = self.state();
                s.refill(self.qps, self.burst);
                s.grant();
                if s.waiting.is_empty() && s.tokens >= need - EPSILON {
                    s.tokens -= 1.0;
                    return;
                }
                Duration::from_secs_f64((need - s.tokens).max(0.0) / self.qps).max(MIN_WAIT)
            };
            tokio::time::sleep(wait).await;
        }
    }
}

/// An action's place in line, given up if its task is dropped (a timed-out
/// effect) before it was granted.
struct Line<'a> {
    throttle: &'a Throttle,
    key: Option<(u64, u64)>,
}

impl Drop for Line<'_> {
    fn drop(&mut self) {
        let Some(key) = self.key else { return };
        let mut s = self.throttle.state();
        let was_first = s.waiting.keys().next() == Some(&key);
        // Out of the line already: granted, and the token not used.
        if s.waiting.remove(&key).is_none() {
            s.tokens = (s.tokens + 1.0).min(self.throttle.burst);
        }
        s.grant();
        if was_first {
            s.wake_first();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn burst_then_qps() {
        let t = Throttle::new(10.0, 5);
        let start = tokio::time::Instant::now();
        for _ in 0..5 {
            t.acquire(Lane::Nodes).await;
        }
        assert!(
            start.elapsed() < Duration::from_millis(5),
            "burst is immediate"
        );
        for _ in 0..10 {
            t.acquire(Lane::Nodes).await;
        }
        // Ten more at 10/s take about a second of (paused, virtual) time.
        assert!(
            start.elapsed() >= Duration::from_millis(900),
            "{:?}",
            start.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn records_leave_half_the_burst_to_actions() {
        let t = Throttle::new(10.0, 10);
        let start = tokio::time::Instant::now();
        // Records pass while more than half the burst is saved up.
        for _ in 0..5 {
            t.acquire_record().await;
        }
        assert!(start.elapsed() < Duration::from_millis(5));
        // The other half is the actions': they pass at once, a record
        // would have to wait.
        for _ in 0..5 {
            t.acquire(Lane::Nodes).await;
        }
        assert!(start.elapsed() < Duration::from_millis(5));
        let before = tokio::time::Instant::now();
        t.acquire_record().await;
        // Six tokens must be back (0.6 s at 10/s) before a record passes.
        assert!(
            before.elapsed() >= Duration::from_millis(550),
            "{:?}",
            before.elapsed()
        );
    }

    /// Starts `n` actions of `lane` waiting on `t`; each sends its index
    /// when granted.
    fn queue(
        t: &Arc<Throttle>,
        lane: &'static str,
        n: usize,
        done: &tokio::sync::mpsc::UnboundedSender<&'static str>,
    ) {
        for _ in 0..n {
            let (t, done) = (t.clone(), done.clone());
            tokio::spawn(async move {
                let l = if lane == "nodes" {
                    Lane::Nodes
                } else {
                    Lane::Namespace(lane)
                };
                t.acquire(l).await;
                let _ = done.send(lane);
            });
        }
    }

    /// The order in which the first `n` grants went.
    async fn order(
        rx: &mut tokio::sync::mpsc::UnboundedReceiver<&'static str>,
        n: usize,
    ) -> Vec<&'static str> {
        let mut v = Vec::new();
        while v.len() < n {
            match rx.recv().await {
                Some(l) => v.push(l),
                None => break,
            }
        }
        v
    }

    #[tokio::test(start_paused = true)]
    async fn a_tenants_queue_holds_another_namespace_back_by_one_action_and_a_cordon_by_none() {
        let t = Arc::new(Throttle::new(10.0, 1));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        // Team a's crash-looping jobs: 100 actions, 10 s of tokens.
        queue(&t, "a", 100, &tx);
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(250)).await;
        let start = tokio::time::Instant::now();
        queue(&t, "b", 1, &tx);
        queue(&t, "nodes", 1, &tx);
        tokio::task::yield_now().await;
        let first = order(&mut rx, 6).await;
        // a's first three went before b and the cordon queued (burst 1 at
        // 10/s); then the cordon, then the one turn of a's already due
        // when b came, then b: not behind a's 96 others.
        assert_eq!(first, ["a", "a", "a", "nodes", "a", "b"]);
        assert!(
            start.elapsed() < Duration::from_millis(400),
            "b waited {:?}, not a's 10 s",
            start.elapsed()
        );
        // And a is not starved: every one of its actions is granted.
        let rest = order(&mut rx, 100 + 2 - 6).await;
        assert_eq!(rest.len(), 96);
        assert!(rest.iter().all(|l| *l == "a"));
    }

    #[tokio::test(start_paused = true)]
    async fn an_action_given_up_while_waiting_takes_no_token_from_the_rest() {
        let t = Arc::new(Throttle::new(10.0, 1));
        t.acquire(Lane::Namespace("a")).await;
        // Waits behind an empty bucket, then is dropped (its effect timed
        // out).
        let gone =
            tokio::time::timeout(Duration::from_millis(10), t.acquire(Lane::Namespace("a"))).await;
        assert!(gone.is_err(), "no token yet: it waited");
        let start = tokio::time::Instant::now();
        t.acquire(Lane::Namespace("b")).await;
        assert!(
            start.elapsed() <= Duration::from_millis(100),
            "the next token is b's: {:?}",
            start.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn unlimited_never_waits() {
        let t = Throttle::new(0.0, 1);
        let start = tokio::time::Instant::now();
        for _ in 0..1000 {
            t.acquire_record().await;
            t.acquire(Lane::Nodes).await;
        }
        assert!(start.elapsed() < Duration::from_millis(1));
    }
}
