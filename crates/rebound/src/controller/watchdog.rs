//! A watchdog on the recovery core's step.
//!
//! The core is a pure state machine stepped by one loop ([`super::start`]);
//! whatever makes a step slow (a CEL evaluation, a bug) blocks that loop
//! and nothing recovers anywhere, while the Lease kept renewing and
//! `/healthz` stayed green. So the loop records when each step starts
//! ([`StepWatch::begin`], an atomic timestamp, 0 when idle) and what it is
//! stepping, and:
//! - a thread of its own ([`spawn`], not a task: a stuck step may hold a
//!   runtime worker) logs a step past the bound once, with its input's kind
//!   and object key, and counts it (`rebound_core_steps_stuck_total`);
//! - the Lease loop asks [`StepWatch::may_renew`] before every renew, and
//!   gives the Lease up while a step is stuck, so a standby takes over;
//! - `/healthz` fails while a step is stuck, so the kubelet restarts the pod.
//!
//! The core itself keeps no clock and no thread: all of this is around it.

use super::core::input::{Change, Input};
use crate::metrics::Metrics;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// The default bound of one step: far above any real step (milliseconds,
/// a relist of 20,000 pods included) and far below a Lease duration's
/// worth of doing nothing.
pub const DEFAULT_STEP_TIMEOUT: Duration = Duration::from_secs(5);

/// When the step in progress started, and what it steps.
#[derive(Debug)]
pub struct StepWatch {
    epoch: Instant,
    /// Nanoseconds from `epoch` to the start of the step in progress, plus
    /// one; 0 while no step runs.
    started: AtomicU64,
    /// Steps begun, so that one stuck step is reported once.
    steps: AtomicU64,
    /// The input of the step in progress, as `kind key`.
    what: Mutex<String>,
    bound: Duration,
}

/// Ends the step when dropped (a panicking step ends too).
pub struct StepGuard<'a>(&'a StepWatch);

impl Drop for StepGuard<'_> {
    fn drop(&mut self) {
        self.0.started.store(0, Ordering::Release);
    }
}

impl Default for StepWatch {
    fn default() -> Self {
        StepWatch::new(DEFAULT_STEP_TIMEOUT)
    }
}

impl StepWatch {
    /// A watch that calls a step stuck after `bound`.
    pub fn new(bound: Duration) -> StepWatch {
        StepWatch {
            epoch: Instant::now(),
            started: AtomicU64::new(0),
            steps: AtomicU64::new(0),
            what: Mutex::new(String::new()),
            bound,
        }
    }

    /// The bound a step is held to.
    pub fn bound(&self) -> Duration {
        self.bound
    }

    /// A step starts; `describe` writes what it steps (kind and object key,
    /// never the whole object). It ends when the guard is dropped.
    pub fn begin(&self, describe: impl FnOnce(&mut String)) -> StepGuard<'_> {
        if let Ok(mut w) = self.what.lock() {
            w.clear();
            describe(&mut w);
        }
        self.steps.fetch_add(1, Ordering::AcqRel);
        let at = self.epoch.elapsed().as_nanos().min(u64::MAX as u128 - 1) as u64 + 1;
        self.started.store(at, Ordering::Release);
        StepGuard(self)
    }

    /// How long the step in progress has run, if one is.
    pub fn running_for(&self) -> Option<Duration> {
        match self.started.load(Ordering::Acquire) {
            0 => None,
            at => Some(
                self.epoch
                    .elapsed()
                    .saturating_sub(Duration::from_nanos(at - 1)),
            ),
        }
    }

    /// How long the step in progress has run, if longer than the bound.
    pub fn stuck_for(&self) -> Option<Duration> {
        self.running_for().filter(|d| *d > self.bound)
    }

    /// Whether the Lease may be renewed: no step is stuck.
    pub fn may_renew(&self) -> bool {
        self.stuck_for().is_none()
    }

    /// Whether the loop is healthy as far as steps go (`/healthz`).
    pub fn healthy(&self) -> bool {
        self.stuck_for().is_none()
    }

    /// What the step in progress steps.
    pub fn input(&self) -> String {
        self.what.lock().map(|w| w.clone()).unwrap_or_default()
    }

    /// One look of the watchdog: a step stuck that was not reported yet
    /// (`reported` holds the last step reported) is logged and counted.
    /// Returns whether it reported one.
    pub fn check(&self, reported: &mut u64, metrics: &Metrics) -> bool {
        let Some(running) = self.stuck_for() else {
            return false;
        };
        let step = self.steps.load(Ordering::Acquire);
        if step == *reported {
            return false;
        }
        *reported = step;
        metrics.steps_stuck.inc();
        tracing::error!(
            input = %self.input(),
            running_s = running.as_secs_f64(),
            bound_s = self.bound.as_secs_f64(),
            "a step of the recovery core is stuck: not renewing the Lease (a standby takes over) and failing /healthz until it ends"
        );
        true
    }
}

/// Watch `watch` from a thread of its own until it is dropped everywhere
/// else, looking four times per bound.
pub fn spawn(
    watch: &Arc<StepWatch>,
    metrics: Metrics,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let weak: Weak<StepWatch> = Arc::downgrade(watch);
    let every = (watch.bound / 4).clamp(Duration::from_millis(5), Duration::from_secs(1));
    std::thread::Builder::new()
        .name("rebound-step-watchdog".into())
        .spawn(move || {
            let mut reported = 0;
            loop {
                std::thread::sleep(every);
                let Some(w) = weak.upgrade() else { return };
                w.check(&mut reported, &metrics);
            }
        })
}

/// Write `input`'s kind and object key into `out` (`Pod team-a/pt-worker-0`,
/// `Tick`): what a stuck step is logged with.
pub fn describe(input: &Input, out: &mut String) {
    fn change<K>(
        out: &mut String,
        kind: &str,
        c: &Change<K>,
        key: impl Fn(&K) -> (Option<&str>, Option<&str>),
    ) {
        let (verb, obj) = match c {
            Change::Apply(o) => ("apply", Some(o)),
            Change::Delete(o) => ("delete", Some(o)),
            Change::Relist => ("relist", None),
            Change::Synced => ("synced", None),
        };
        let _ = write!(out, "{kind} {verb}");
        if let Some(o) = obj {
            match key(o) {
                (Some(ns), Some(n)) => {
                    let _ = write!(out, " {ns}/{n}");
                }
                (None, Some(n)) => {
                    let _ = write!(out, " {n}");
                }
                _ => {}
            }
        }
    }
    fn meta(m: &kube::api::ObjectMeta) -> (Option<&str>, Option<&str>) {
        (m.namespace.as_deref(), m.name.as_deref())
    }
    match input {
        Input::Pod(c) => change(out, "Pod", c, |p| {
            (Some(&*p.info.namespace), Some(&*p.info.name))
        }),
        Input::Node(c) => change(out, "Node", c, |o| meta(&o.metadata)),
        Input::Event(c) => change(out, "Event", c, |o| meta(&o.metadata)),
        Input::DeviceInfo(c) => change(out, "ConfigMap", c, |o| meta(&o.metadata)),
        Input::Dra(super::core::input::DraChange::Slice(c)) => {
            change(out, "ResourceSlice", c, |o| meta(&o.metadata))
        }
        Input::Dra(super::core::input::DraChange::Claim(c)) => {
            change(out, "ResourceClaim", c, |o| meta(&o.metadata))
        }
        Input::Dra(super::core::input::DraChange::Rule(c)) => {
            change(out, "DeviceTaintRule", c, |o| meta(&o.metadata))
        }
        Input::Dra(super::core::input::DraChange::Served { claims, rules }) => {
            let _ = write!(out, "DRA served (claims {claims}, rules {rules})");
        }
        Input::Policy(c) => change(out, "RecoveryPolicy", c, |o| meta(&o.metadata)),
        Input::Classification(c) => change(out, "FaultClassification", c, |o| meta(&o.metadata)),
        Input::Job(kind, c) => change(out, kind.as_str(), c, |o| meta(&o.metadata)),
        Input::JobKinds(k) => {
            let _ = write!(out, "JobKinds ({} kinds)", k.len());
        }
        Input::Records { term, kind, jobs } => {
            let _ = write!(
                out,
                "Records {} ({} jobs, term {term})",
                kind.as_str(),
                jobs.len()
            );
        }
        Input::Nodes { term, nodes } => {
            let _ = write!(out, "Nodes ({} nodes, term {term})", nodes.len());
        }
        Input::WatchError(kind) => {
            let _ = write!(out, "WatchError {kind}");
        }
        Input::Done(id, _) => {
            let _ = write!(out, "Done {id:?}");
        }
        Input::Leader(l, term) => {
            let _ = write!(out, "Leader {l} (term {term})");
        }
        Input::Tick => out.push_str("Tick"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stuck_step_is_counted_once_refuses_renewal_and_fails_health_until_it_ends() {
        let metrics = Metrics::new();
        let watch = Arc::new(StepWatch::new(Duration::from_millis(50)));
        let thread = spawn(&watch, metrics.clone()).expect("thread");
        assert!(watch.may_renew() && watch.healthy(), "idle");
        // A quick step: nothing reported.
        {
            let _g = watch.begin(|w| w.push_str("Tick"));
            assert!(watch.running_for().is_some());
            assert!(watch.may_renew());
        }
        assert_eq!(watch.running_for(), None, "ended");
        // A fake step that sleeps past the bound, watched from this thread.
        let w2 = watch.clone();
        let step = std::thread::spawn(move || {
            let input = Input::Policy(Change::Apply(Box::new(rebound_policy("team-a", "costly"))));
            let _g = w2.begin(|out| describe(&input, out));
            std::thread::sleep(Duration::from_millis(400));
        });
        let deadline = Instant::now() + Duration::from_secs(5);
        while metrics.steps_stuck.get() == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(metrics.steps_stuck.get(), 1, "the stuck step is counted");
        assert!(!watch.may_renew(), "no renewal while stuck");
        assert!(!watch.healthy(), "/healthz fails while stuck");
        assert_eq!(watch.input(), "RecoveryPolicy apply team-a/costly");
        step.join().expect("step");
        assert!(watch.may_renew() && watch.healthy(), "allowed again after");
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(metrics.steps_stuck.get(), 1, "counted once per stuck step");
        // The watchdog ends with the watch.
        drop(watch);
        let deadline = Instant::now() + Duration::from_secs(2);
        while !thread.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            thread.is_finished(),
            "the watchdog thread ends with its watch"
        );
    }

    #[test]
    fn a_panicking_step_ends_too() {
        let watch = StepWatch::new(Duration::from_millis(1));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _g = watch.begin(|w| w.push_str("Tick"));
            panic!("a bug");
        }));
        assert!(r.is_err());
        assert_eq!(watch.running_for(), None);
        assert!(watch.may_renew());
    }

    #[test]
    fn inputs_are_described_by_kind_and_key() {
        let mut s = String::new();
        describe(&Input::Tick, &mut s);
        assert_eq!(s, "Tick");
        s.clear();
        describe(
            &Input::Policy(Change::Delete(Box::new(rebound_policy("ns", "p")))),
            &mut s,
        );
        assert_eq!(s, "RecoveryPolicy delete ns/p");
        s.clear();
        describe(&Input::Node(Change::Relist), &mut s);
        assert_eq!(s, "Node relist");
    }

    fn rebound_policy(ns: &str, name: &str) -> crate::api::RecoveryPolicy {
        let mut p = crate::api::RecoveryPolicy::new(name, Default::default());
        p.metadata.namespace = Some(ns.into());
        p
    }
}
