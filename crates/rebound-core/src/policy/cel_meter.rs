//! The measured CEL time of one tenant namespace's policies.
//!
//! The static cost estimate bounds what an expression may do, not what it
//! costs: a pattern compiled on first use, a large list, a machine under
//! load. Every tenant's recovery goes through the core's one loop, so a
//! namespace whose expressions cost more than [`BUDGET`] of CEL time in a
//! [`WINDOW`] has its policies' expressions suspended for [`SUSPENDED`]:
//! their gates count as failed (the fault is skipped with the reason, as
//! an evaluation error is) and their cooldown expressions too, and the
//! policy's status says so. Only that namespace's jobs wait; the root
//! namespace's policies (the cluster admin's) are not metered.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// CEL time a namespace may spend in a window: a fiftieth of it, so that
/// fifty namespaces at their limit still leave the loop idle half the time.
pub const BUDGET: Duration = Duration::from_millis(200);

/// The window CEL time is summed over.
pub const WINDOW: Duration = Duration::from_secs(10);

/// How long a namespace over its budget has its expressions suspended.
pub const SUSPENDED: Duration = Duration::from_secs(60);

#[derive(Debug, Default)]
struct State {
    window_start: Option<Instant>,
    spent: Duration,
    /// Suspended until then, with what the window had spent.
    suspended: Option<(Instant, Duration)>,
}

/// One namespace's meter (shared by its policies).
#[derive(Debug)]
pub struct CelMeter {
    budget: Duration,
    state: Mutex<State>,
}

impl Default for CelMeter {
    fn default() -> Self {
        CelMeter::with_budget(BUDGET)
    }
}

/// Why an expression was not evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the namespace's policies spent {spent_ms} ms of CEL time within {window_s} s (budget {budget_ms} ms): their expressions are suspended for {left_s} s more"
)]
pub struct OverBudget {
    pub spent_ms: u128,
    pub budget_ms: u128,
    pub window_s: u64,
    pub left_s: u64,
}

impl CelMeter {
    /// A meter with this budget per [`WINDOW`] (tests use a tiny one).
    pub fn with_budget(budget: Duration) -> CelMeter {
        CelMeter {
            budget,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether an expression may be evaluated now.
    pub fn admit(&self, now: Instant) -> Result<(), OverBudget> {
        let mut s = self.state();
        match s.suspended {
            Some((until, spent)) if now < until => Err(OverBudget {
                spent_ms: spent.as_millis(),
                budget_ms: self.budget.as_millis(),
                window_s: WINDOW.as_secs(),
                left_s: until.saturating_duration_since(now).as_secs().max(1),
            }),
            Some(_) => {
                *s = State::default();
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// An evaluation that started at `started` and ended at `now`.
    pub fn charge(&self, started: Instant, now: Instant) {
        let mut s = self.state();
        let start = *s.window_start.get_or_insert(started);
        if now.saturating_duration_since(start) > WINDOW {
            s.window_start = Some(started);
            s.spent = Duration::ZERO;
        }
        s.spent += now.saturating_duration_since(started);
        if s.spent > self.budget && s.suspended.is_none() {
            s.suspended = Some((now + SUSPENDED, s.spent));
        }
    }

    /// The suspension in force, if any (for the policy's status).
    pub fn suspended(&self, now: Instant) -> Option<OverBudget> {
        self.admit(now).err()
    }

    /// Evaluate `f` under the meter: refused while suspended, charged
    /// with the time it took.
    pub fn run<T>(&self, f: impl FnOnce() -> T) -> Result<T, OverBudget> {
        self.admit(Instant::now())?;
        let started = Instant::now();
        let out = f();
        self.charge(started, Instant::now());
        Ok(out)
    }
}

/// A policy's link to its namespace's meter: `None` for a policy that is
/// not metered (the root namespace's, or one not in a set yet). Not part
/// of what the policy is: two policies differing only here are equal.
#[derive(Debug, Clone, Default)]
pub struct MeterRef(pub Option<std::sync::Arc<CelMeter>>);

impl PartialEq for MeterRef {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl MeterRef {
    /// Evaluate `f` under the meter, if there is one.
    pub fn run<T>(&self, f: impl FnOnce() -> T) -> Result<T, OverBudget> {
        match &self.0 {
            Some(m) => m.run(f),
            None => Ok(f()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_over_its_budget_is_suspended_then_comes_back() {
        let m = CelMeter::with_budget(Duration::from_millis(100));
        let t0 = Instant::now();
        // 60 ms, then 50 ms within the window: over 100 ms.
        assert!(m.admit(t0).is_ok());
        m.charge(t0, t0 + Duration::from_millis(60));
        assert!(
            m.admit(t0 + Duration::from_secs(1)).is_ok(),
            "60 ms is within"
        );
        let t1 = t0 + Duration::from_secs(2);
        m.charge(t1, t1 + Duration::from_millis(50));
        let e = m.admit(t1 + Duration::from_secs(1)).expect_err("suspended");
        assert_eq!(e.spent_ms, 110);
        assert!(e.to_string().contains("suspended"), "{e}");
        // Back after the suspension, with a fresh window.
        let t2 = t1 + SUSPENDED + Duration::from_secs(1);
        assert!(m.admit(t2).is_ok());
        m.charge(t2, t2 + Duration::from_millis(60));
        assert!(m.admit(t2 + Duration::from_secs(1)).is_ok());
    }

    #[test]
    fn spending_spread_over_windows_is_never_suspended() {
        let m = CelMeter::with_budget(Duration::from_millis(100));
        let t0 = Instant::now();
        for i in 0..20u64 {
            let t = t0 + WINDOW * (i as u32) + Duration::from_millis(i);
            assert!(m.admit(t).is_ok(), "window {i}");
            m.charge(t, t + Duration::from_millis(90));
        }
    }
}
