//! Exponential backoff with jitter for the runner's retries, apart so
//! that its arithmetic can be read (and tested) alone.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use super::RunnerConfig;

/// Exponential backoff with jitter (a quarter either way), so thousands
/// of agents that lost the API server together do not return together.
pub(super) struct Backoff {
    min: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub(super) fn new(cfg: &RunnerConfig) -> Backoff {
        Backoff {
            min: cfg.backoff_min,
            max: cfg.backoff_max.max(cfg.backoff_min),
            next: cfg.backoff_min,
        }
    }

    pub(super) fn reset(&mut self) {
        self.next = self.min;
    }

    pub(super) fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        let quarter = d / 4;
        d - quarter + jitter(quarter * 2)
    }
}

/// A random duration in `[0, max)`.
pub(super) fn jitter(max: Duration) -> Duration {
    let nanos = max.as_nanos() as u64;
    if nanos == 0 {
        return Duration::ZERO;
    }
    let mut h = RandomState::new().build_hasher();
    h.write_u64(nanos);
    Duration::from_nanos(h.finish() % nanos)
}
