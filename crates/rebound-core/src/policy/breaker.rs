//! The circuit breaker on node separations: never more nodes out of
//! scheduling within a window than the limit, so that a switch failure
//! cannot empty the cluster.

use super::compile::Limit;
use chrono::{DateTime, Utc};
use std::collections::VecDeque;
use std::time::Duration;

/// Separations within a sliding window, against a limit.
#[derive(Clone, Debug)]
pub struct Breaker {
    pub limit: Limit,
    pub window: Duration,
    pub total_nodes: u32,
    recent: VecDeque<DateTime<Utc>>,
}

impl Breaker {
    /// A breaker with nothing separated yet.
    pub fn new(limit: Limit, window: Duration, total_nodes: u32) -> Breaker {
        Breaker {
            limit,
            window,
            total_nodes,
            recent: VecDeque::new(),
        }
    }

    fn horizon(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        chrono::Duration::from_std(self.window)
            .ok()
            .and_then(|w| now.checked_sub_signed(w))
            .unwrap_or(DateTime::<Utc>::MIN_UTC)
    }

    /// Separations within the window ending `now`.
    pub fn used(&self, now: DateTime<Utc>) -> u32 {
        let h = self.horizon(now);
        self.recent.iter().filter(|t| **t > h).count() as u32
    }

    /// Nodes allowed within the window.
    pub fn allowed(&self) -> u32 {
        self.limit.of(self.total_nodes)
    }

    /// Whether one more separation may happen now.
    pub fn allows(&self, now: DateTime<Utc>) -> bool {
        self.used(now) < self.allowed()
    }

    /// Whether the breaker is open (holding separations back) now.
    pub fn is_open(&self, now: DateTime<Utc>) -> bool {
        !self.allows(now)
    }

    /// Record one separation made at `at`, which may lie up to one window
    /// ahead of the times the breaker is asked about (a request whose
    /// outcome is unknown counts from the latest moment it can land).
    /// Only separations older than two windows before `at` are dropped:
    /// one still in the window of an earlier `now` is kept.
    pub fn record(&mut self, at: DateTime<Utc>) {
        let h = self.horizon(self.horizon(at));
        while self.recent.front().is_some_and(|t| *t <= h) {
            self.recent.pop_front();
        }
        self.recent.push_back(at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn percentage_limit_holds_and_reopens_after_the_window() {
        let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let mut b = Breaker::new(Limit::Percent(10), Duration::from_secs(300), 50);
        assert_eq!(b.allowed(), 5);
        for i in 0..5 {
            assert!(b.allows(t0), "separation {i}");
            b.record(t0);
        }
        assert!(b.is_open(t0));
        assert!(b.allows(t0 + chrono::Duration::minutes(6)));
        assert_eq!(Limit::Percent(1).of(10), 1, "at least one node");
        assert_eq!(Limit::parse("7"), Ok(Limit::Count(7)));
        assert!(Limit::parse("150%").is_err());
    }

    #[test]
    fn a_separation_recorded_ahead_of_now_hides_none_still_in_the_window() {
        let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let s = chrono::Duration::seconds;
        let mut b = Breaker::new(Limit::Count(2), Duration::from_secs(300), 50);
        b.record(t0 + s(10));
        // A cordon sent at 200 whose answer was lost may land until 320.
        b.record(t0 + s(320));
        assert_eq!(
            b.used(t0 + s(305)),
            2,
            "the one made at 10 is still in the window"
        );
        assert!(b.is_open(t0 + s(305)));
        assert!(b.allows(t0 + s(601)));
        b.record(t0 + s(1000));
        assert_eq!(b.recent.len(), 1, "old separations are dropped");
    }
}
