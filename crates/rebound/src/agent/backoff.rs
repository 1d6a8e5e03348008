//! The agent's two delay policies, both exponential with a cap (backon's
//! `ExponentialBuilder`, already in the tree through kube-runtime):
//!
//! - [`RestartPolicy`]: how long the supervisor waits before it starts a
//!   source that ended again;
//! - [`ErrorBackoff`]: how long a source waits after a call that failed at
//!   once (an NVML event wait on a GPU off the bus), so a failing call
//!   cannot spin a core, and when it gives up so the source is opened anew.
//!
//! No jitter: every source is local to its node (the kernel log, the
//! driver, the node's hostengine), so agents retrying at the same moment
//! contend for nothing, and fixed delays keep the tests exact.

use std::time::Duration;

use backon::{BackoffBuilder as _, ExponentialBackoff, ExponentialBuilder};

/// backon's delays, rounded to whole milliseconds: it multiplies in `f32`,
/// which leaves 200 ms as 200.000003 ms, and a timer rounds that up to the
/// next millisecond.
pub type Delays = std::iter::Map<ExponentialBackoff, fn(Duration) -> Duration>;

fn whole_millis(d: Duration) -> Duration {
    Duration::from_millis((d.as_secs_f64() * 1000.0).round() as u64)
}

/// Delays doubling from `min` up to `max`, for as long as asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestartPolicy {
    /// The first delay.
    pub min: Duration,
    /// The cap; also how long a source must have run for its next end to
    /// count as a new failure (the delays start again from `min`).
    pub max: Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            min: Duration::from_secs(1),
            max: Duration::from_secs(300),
        }
    }
}

impl RestartPolicy {
    /// The delays, fresh from `min` (an endless iterator).
    pub fn delays(&self) -> Delays {
        let min = self.min.max(Duration::from_millis(1));
        ExponentialBuilder::new()
            .with_min_delay(min)
            .with_max_delay(self.max.max(min))
            .with_factor(2.0)
            .without_max_times()
            .build()
            .map(whole_millis as fn(Duration) -> Duration)
    }
}

/// Consecutive failures of one call: a delay after each, and after
/// `give_up_after` in a row, none (the caller reopens what it calls).
#[derive(Debug)]
pub struct ErrorBackoff {
    policy: RestartPolicy,
    give_up_after: u32,
    failures: u32,
    delays: Delays,
}

impl ErrorBackoff {
    /// A backoff over `policy`'s delays that gives up after
    /// `give_up_after` failures in a row.
    pub fn new(policy: RestartPolicy, give_up_after: u32) -> Self {
        ErrorBackoff {
            policy,
            give_up_after: give_up_after.max(1),
            failures: 0,
            delays: policy.delays(),
        }
    }

    /// The call worked: the next failure waits `min` again.
    pub fn succeeded(&mut self) {
        if self.failures > 0 {
            self.failures = 0;
            self.delays = self.policy.delays();
        }
    }

    /// The call failed: how long to wait before calling again, or `None`
    /// when it failed `give_up_after` times in a row.
    pub fn failed(&mut self) -> Option<Duration> {
        self.failures = self.failures.saturating_add(1);
        if self.failures >= self.give_up_after {
            return None;
        }
        Some(self.delays.next().unwrap_or(self.policy.max))
    }

    /// Failures in a row so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn restart_delays_double_up_to_the_cap() {
        let p = RestartPolicy {
            min: ms(100),
            max: ms(500),
        };
        let got: Vec<Duration> = p.delays().take(6).collect();
        assert_eq!(got, [ms(100), ms(200), ms(400), ms(500), ms(500), ms(500)]);
        // A cap below the start is lifted to it rather than inverted.
        let odd = RestartPolicy {
            min: ms(300),
            max: ms(100),
        };
        assert_eq!(odd.delays().take(2).collect::<Vec<_>>(), [ms(300), ms(300)]);
    }

    #[test]
    fn error_backoff_gives_up_after_the_limit_and_starts_over_after_a_success() {
        let p = RestartPolicy {
            min: ms(10),
            max: ms(40),
        };
        let mut b = ErrorBackoff::new(p, 4);
        assert_eq!(b.failed(), Some(ms(10)));
        assert_eq!(b.failed(), Some(ms(20)));
        b.succeeded();
        assert_eq!(b.failures(), 0);
        assert_eq!(b.failed(), Some(ms(10)), "a success starts the delays over");
        assert_eq!(b.failed(), Some(ms(20)));
        assert_eq!(b.failed(), Some(ms(40)));
        assert_eq!(b.failed(), None, "the fourth failure in a row gives up");
    }
}
