//! The bind rate limit: a token bucket refilled at the configured rate.

use std::time::{Duration, Instant};

use super::Bucket;

impl Bucket {
    pub(super) fn new(rate: f64, burst: u32, now: Instant) -> Bucket {
        let burst = f64::from(burst.max(1));
        Bucket {
            rate,
            burst,
            tokens: burst,
            last: now,
        }
    }

    pub(super) fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + dt * self.rate).min(self.burst);
        self.last = now;
    }

    /// Takes one bind, if the rate allows it now.
    pub(super) fn take(&mut self, now: Instant) -> bool {
        if self.rate <= 0.0 {
            return true;
        }
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// How long until the next bind is allowed.
    pub(super) fn wait(&self) -> Duration {
        if self.rate <= 0.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(((1.0 - self.tokens).max(0.0) / self.rate).max(0.001))
    }
}
