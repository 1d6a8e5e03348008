//! Client-side rate limit for writes (`--qps`, `--burst`): a token bucket,
//! so that a storm of 500 failing nodes cannot flood the API server.
//! Actions take tokens first; records (Events) take them only while half
//! the burst is left for actions, so a storm's restarts and cordons are
//! never queued behind its Events, which follow as the bucket refills.

use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// A token bucket shared by every action task.
#[derive(Debug)]
pub struct Throttle {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl Throttle {
    /// `qps` tokens per second, at most `burst` saved up. `qps <= 0` means
    /// unlimited.
    pub fn new(qps: f64, burst: u32) -> Throttle {
        let burst = f64::from(burst.max(1));
        Throttle {
            qps,
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// Wait for one token for an action.
    pub async fn acquire(&self) {
        self.acquire_above(0.0).await;
    }

    /// Wait for one token for a record (an Event): it is taken only while
    /// half the burst stays for actions.
    pub async fn acquire_record(&self) {
        self.acquire_above((self.burst / 2.0).floor()).await;
    }

    /// Take a token once more than `reserve` + 1 are saved up.
    async fn acquire_above(&self, reserve: f64) {
        if self.qps <= 0.0 {
            return;
        }
        let need = 1.0 + reserve;
        loop {
            let wait = {
                let mut s = self.state.lock().await;
                let now = Instant::now();
                let refill = now.duration_since(s.1).as_secs_f64() * self.qps;
                s.0 = (s.0 + refill).min(self.burst);
                s.1 = now;
                if s.0 >= need {
                    s.0 -= 1.0;
                    return;
                }
                Duration::from_secs_f64((need - s.0) / self.qps)
            };
            tokio::time::sleep(wait).await;
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
            t.acquire().await;
        }
        assert!(
            start.elapsed() < Duration::from_millis(5),
            "burst is immediate"
        );
        for _ in 0..10 {
            t.acquire().await;
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
            t.acquire().await;
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

    #[tokio::test(start_paused = true)]
    async fn unlimited_never_waits() {
        let t = Throttle::new(0.0, 1);
        let start = tokio::time::Instant::now();
        for _ in 0..1000 {
            t.acquire_record().await;
            t.acquire().await;
        }
        assert!(start.elapsed() < Duration::from_millis(1));
    }
}
