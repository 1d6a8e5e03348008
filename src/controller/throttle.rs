//! Client-side rate limit for writes (`--qps`, `--burst`): a token bucket,
//! so that a storm of 500 failing nodes cannot flood the API server.

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

    /// Wait for one token.
    pub async fn acquire(&self) {
        if self.qps <= 0.0 {
            return;
        }
        loop {
            let wait = {
                let mut s = self.state.lock().await;
                let now = Instant::now();
                let refill = now.duration_since(s.1).as_secs_f64() * self.qps;
                s.0 = (s.0 + refill).min(self.burst);
                s.1 = now;
                if s.0 >= 1.0 {
                    s.0 -= 1.0;
                    return;
                }
                Duration::from_secs_f64((1.0 - s.0) / self.qps)
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
}
