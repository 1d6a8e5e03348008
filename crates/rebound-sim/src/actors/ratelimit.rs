//! The client-side limits of the real job operators and schedulers, so
//! that a recreate in the simulated cluster pays what it pays on a real
//! one: every request of a client-go (or controller-runtime) client waits
//! on a token bucket of `qps` tokens a second holding at most `burst`
//! (`flowcontrol.NewTokenBucketRateLimiter`, a `golang.org/x/time/rate`
//! limiter whose `Wait` reserves a token and sleeps until it is due), and
//! each component sets its own `qps`/`burst` by default. The figures and
//! their sources are in docs/simulated-kubelet.md; [`OperatorLimits`]
//! holds them, `rebound sim --operator-limits` changes them.
//!
//! | component | default | source (verified in the component's code) |
//! |---|---|---|
//! | volcano-controller-manager | 50 qps, burst 100 | volcano-sh/volcano `cmd/controller-manager/app/options/options.go`: `defaultQPS = 50.0`, `defaultBurst = 100`, `defaultWorkers = 3` |
//! | vc-scheduler | 2000 qps, burst 2000, a session every 1 s | volcano-sh/volcano `cmd/scheduler/app/options/options.go`: `defaultQPS = 2000.0`, `defaultBurst = 2000`, `defaultSchedulerPeriod = time.Second` |
//! | Kubeflow training-operator v1 | 20 qps, burst 30, 1 controller thread | kubeflow/training-operator `cmd/training-operator.v1/main.go`: `--kube-api-qps` 20, `--kube-api-burst` 30, `--controller-threads` 1 |
//! | kube-controller-manager (Job controller) | 20 qps, burst 30; slow-start batches 1, 2, 4, … at most 500 per sync | kubernetes `pkg/controller/apis/config/v1alpha1/defaults.go` (`ClientConnection.QPS = 20`, `Burst = 30`); `pkg/controller/job/job_controller.go` (`MaxPodCreateDeletePerSync = 500`), `pkg/controller/controller_utils.go` (`SlowStartInitialBatchSize = 1`) |
//! | kube-controller-manager (Job controller), pod failure backoff | 10 s, doubling per failed pod, at most 10 min, from the last failure | kubernetes v1.36.3 `pkg/controller/job/job_controller.go` (`DefaultJobPodFailureBackOff = 10 * time.Second`, `MaxJobPodFailureBackOff = 10 * time.Minute`; `manageJob` creates no pod while it lasts), `backoff_utils.go` (`getRemainingTimeForFailuresCount`; a deleted pod that had not finished counts as failed, `isPodFailed`) |
//! | JobSet controller | 500 qps, burst 500 | kubernetes-sigs/jobset `main.go`: `--kube-api-qps` 500, `--kube-api-burst` 500 |
//! | Kubeflow Trainer v2 controller | 50 qps, burst 100 | kubeflow/trainer `pkg/config` defaults: `clientConnection.qps` 50, `burst` 100 |

use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One client's limit: `qps` requests a second after a burst of `burst`;
/// `qps == 0` for none.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClientLimit {
    /// Requests a second; 0 for no limit.
    pub qps: f64,
    /// Requests allowed at once before `qps` applies (at least 1).
    pub burst: u32,
}

impl ClientLimit {
    /// No limit (tests, `rebound demo`).
    pub const NONE: ClientLimit = ClientLimit { qps: 0.0, burst: 0 };

    /// A limit of `qps` a second, burst `burst`.
    pub const fn new(qps: f64, burst: u32) -> Self {
        Self { qps, burst }
    }

    /// Whether requests are limited at all.
    pub fn is_limited(&self) -> bool {
        self.qps > 0.0
    }

    /// The least time `n` requests take through a fresh bucket: the burst
    /// goes at once, the rest at `qps` (the floor a component cannot beat).
    pub fn time_for(&self, n: u64) -> Duration {
        if !self.is_limited() {
            return Duration::ZERO;
        }
        let queued = n.saturating_sub(u64::from(self.burst.max(1)));
        Duration::from_secs_f64(queued as f64 / self.qps)
    }
}

impl fmt::Display for ClientLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_limited() {
            write!(f, "{}/s burst {}", self.qps, self.burst)
        } else {
            f.write_str("unlimited")
        }
    }
}

/// A token bucket shared by every request of one simulated client, with
/// reservations: each request takes a token now, possibly going into debt,
/// and waits until its token is due, so requests are served in the order
/// they asked, at `qps`, as `rate.Limiter.Wait` does.
#[derive(Debug)]
pub struct TokenBucket {
    limit: ClientLimit,
    state: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(limit: ClientLimit) -> Self {
        Self::starting_at(limit, Instant::now())
    }

    /// A full bucket at `now` (tests).
    pub fn starting_at(limit: ClientLimit, now: Instant) -> Self {
        Self {
            limit,
            state: Mutex::new((f64::from(limit.burst.max(1)), now)),
        }
    }

    /// Reserves one request at `now`; returns how long it must wait.
    pub fn reserve(&self, now: Instant) -> Duration {
        if !self.limit.is_limited() {
            return Duration::ZERO;
        }
        let burst = f64::from(self.limit.burst.max(1));
        // A poisoned lock only means another request panicked; the counts
        // are still usable.
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let dt = now.saturating_duration_since(st.1).as_secs_f64();
        st.0 = (st.0 + dt * self.limit.qps).min(burst);
        st.1 = st.1.max(now);
        st.0 -= 1.0;
        if st.0 >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-st.0 / self.limit.qps)
        }
    }

    /// Waits for this request's token.
    pub async fn wait(&self) {
        let d = self.reserve(Instant::now());
        if !d.is_zero() {
            tokio::time::sleep(d).await;
        }
    }
}

/// Sizes of the batches in which a controller creates `n` pods by slow
/// start (kubernetes `pkg/controller/controller_utils.go` and
/// `job_controller.go` `slowStartBatch`): `initial`, then doubling while
/// every create of a batch succeeds, the last batch what is left.
pub fn slow_start_batches(n: usize, initial: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let (mut size, mut done) = (initial.max(1), 0);
    while done < n {
        let b = size.min(n - done);
        out.push(b);
        done += b;
        size = size.saturating_mul(2);
    }
    out
}

/// How long the Job controller creates no pod after `failures` failed
/// pods (kubernetes `pkg/controller/job/backoff_utils.go`,
/// `getRemainingTimeForFailuresCount`): `base` doubled for each failure
/// after the first, at most `max`; 0 without failures or without a base.
pub fn job_failure_backoff(failures: u64, base: Duration, max: Duration) -> Duration {
    if failures == 0 || base.is_zero() {
        return Duration::ZERO;
    }
    let mut d = base;
    for _ in 1..failures {
        d = d.saturating_mul(2);
        if d >= max {
            return max;
        }
    }
    d
}

/// Why an `--operator-limits` value was refused.
#[derive(Debug, thiserror::Error)]
pub enum LimitsError {
    /// An item is not `key=value`.
    #[error("operator limits: {0:?} is not key=value (keys: {LIMIT_KEYS})")]
    Item(String),
    /// The key is unknown.
    #[error("operator limits: unknown key {0:?} (keys: {LIMIT_KEYS})")]
    Key(String),
    /// The value does not parse.
    #[error("operator limits: {key}={value}: {why}")]
    Value {
        /// The key.
        key: String,
        /// The value given.
        value: String,
        /// What was wrong.
        why: String,
    },
}

const LIMIT_KEYS: &str = "volcano-qps, volcano-burst, vc-scheduler-qps, vc-scheduler-burst, vc-scheduler-period, training-operator-qps, training-operator-burst, job-controller-qps, job-controller-burst, job-max-per-sync, job-failure-backoff, job-failure-backoff-max, jobset-qps, jobset-burst, trainer-qps, trainer-burst; bases: defaults, none";

/// The client limits of every simulated operator and of Volcano's
/// scheduler (see the module documentation for each figure's source).
#[derive(Debug, Clone, PartialEq)]
pub struct OperatorLimits {
    /// volcano-controller-manager's client.
    pub volcano: ClientLimit,
    /// vc-scheduler's client (its binds).
    pub vc_scheduler: ClientLimit,
    /// vc-scheduler's `--schedule-period`: gangs are admitted and bound
    /// once per session.
    pub vc_schedule_period: Duration,
    /// The Kubeflow training-operator's client.
    pub training_operator: ClientLimit,
    /// kube-controller-manager's client, as the Job controller uses it.
    pub job_controller: ClientLimit,
    /// The Job controller's `MaxPodCreateDeletePerSync`; 0 for no cap.
    pub job_max_per_sync: usize,
    /// The Job controller's pod failure backoff: after `n` failed pods
    /// (a pod deleted before it finished counts) it creates none for
    /// `job_failure_backoff × 2^(n−1)`, at most [`Self::job_failure_backoff_max`],
    /// from the last failure; 0 for none.
    pub job_failure_backoff: Duration,
    /// The most that backoff waits.
    pub job_failure_backoff_max: Duration,
    /// The JobSet controller's client.
    pub jobset: ClientLimit,
    /// The Trainer v2 controller's client.
    pub trainer: ClientLimit,
}

impl Default for OperatorLimits {
    /// No limits: tests and `rebound demo` run as fast as the server lets.
    fn default() -> Self {
        Self::none()
    }
}

impl OperatorLimits {
    /// No limit anywhere, no schedule period, no cap.
    pub fn none() -> Self {
        Self {
            volcano: ClientLimit::NONE,
            vc_scheduler: ClientLimit::NONE,
            vc_schedule_period: Duration::ZERO,
            training_operator: ClientLimit::NONE,
            job_controller: ClientLimit::NONE,
            job_max_per_sync: 0,
            job_failure_backoff: Duration::ZERO,
            job_failure_backoff_max: Duration::ZERO,
            jobset: ClientLimit::NONE,
            trainer: ClientLimit::NONE,
        }
    }

    /// The components' published defaults (`rebound sim`).
    pub fn published() -> Self {
        Self {
            volcano: ClientLimit::new(50.0, 100),
            vc_scheduler: ClientLimit::new(2000.0, 2000),
            vc_schedule_period: Duration::from_secs(1),
            training_operator: ClientLimit::new(20.0, 30),
            job_controller: ClientLimit::new(20.0, 30),
            job_max_per_sync: 500,
            job_failure_backoff: Duration::from_secs(10),
            job_failure_backoff_max: Duration::from_secs(600),
            jobset: ClientLimit::new(500.0, 500),
            trainer: ClientLimit::new(50.0, 100),
        }
    }

    /// Parses `--operator-limits`: comma-separated `key=value` over the
    /// published defaults, or over none after `none`.
    pub fn parse(spec: &str) -> Result<Self, LimitsError> {
        let mut items = spec
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .peekable();
        let mut l = match items.peek().copied() {
            Some("none") | Some("zero") => {
                items.next();
                Self::none()
            }
            Some("defaults") | Some("published") => {
                items.next();
                Self::published()
            }
            _ => Self::published(),
        };
        for item in items {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| LimitsError::Item(item.to_owned()))?;
            let (k, v) = (k.trim(), v.trim());
            let bad = |why: &str| LimitsError::Value {
                key: k.to_owned(),
                value: v.to_owned(),
                why: why.to_owned(),
            };
            let qps = || {
                v.strip_suffix("/s")
                    .unwrap_or(v)
                    .parse::<f64>()
                    .ok()
                    .filter(|r| r.is_finite() && *r >= 0.0)
                    .ok_or_else(|| bad("requests per second, a number >= 0"))
            };
            let burst = || v.parse::<u32>().map_err(|_| bad("a whole number"));
            match k {
                "volcano-qps" => l.volcano.qps = qps()?,
                "volcano-burst" => l.volcano.burst = burst()?,
                "vc-scheduler-qps" => l.vc_scheduler.qps = qps()?,
                "vc-scheduler-burst" => l.vc_scheduler.burst = burst()?,
                "vc-scheduler-period" => {
                    l.vc_schedule_period =
                        humantime::parse_duration(v).map_err(|e| bad(&e.to_string()))?
                }
                "training-operator-qps" => l.training_operator.qps = qps()?,
                "training-operator-burst" => l.training_operator.burst = burst()?,
                "job-controller-qps" => l.job_controller.qps = qps()?,
                "job-controller-burst" => l.job_controller.burst = burst()?,
                "job-max-per-sync" => {
                    l.job_max_per_sync = v.parse().map_err(|_| bad("a whole number"))?
                }
                "job-failure-backoff" => {
                    l.job_failure_backoff =
                        humantime::parse_duration(v).map_err(|e| bad(&e.to_string()))?
                }
                "job-failure-backoff-max" => {
                    l.job_failure_backoff_max =
                        humantime::parse_duration(v).map_err(|e| bad(&e.to_string()))?
                }
                "jobset-qps" => l.jobset.qps = qps()?,
                "jobset-burst" => l.jobset.burst = burst()?,
                "trainer-qps" => l.trainer.qps = qps()?,
                "trainer-burst" => l.trainer.burst = burst()?,
                _ => return Err(LimitsError::Key(k.to_owned())),
            }
        }
        Ok(l)
    }
}

impl fmt::Display for OperatorLimits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "volcano-qps={},volcano-burst={},vc-scheduler-qps={},vc-scheduler-burst={},vc-scheduler-period={},training-operator-qps={},training-operator-burst={},job-controller-qps={},job-controller-burst={},job-max-per-sync={},job-failure-backoff={},job-failure-backoff-max={},jobset-qps={},jobset-burst={},trainer-qps={},trainer-burst={}",
            self.volcano.qps,
            self.volcano.burst,
            self.vc_scheduler.qps,
            self.vc_scheduler.burst,
            humantime::format_duration(self.vc_schedule_period),
            self.training_operator.qps,
            self.training_operator.burst,
            self.job_controller.qps,
            self.job_controller.burst,
            self.job_max_per_sync,
            humantime::format_duration(self.job_failure_backoff),
            humantime::format_duration(self.job_failure_backoff_max),
            self.jobset.qps,
            self.jobset.burst,
            self.trainer.qps,
            self.trainer.burst,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_lets_the_burst_through_then_serves_the_rate_in_order() {
        let t0 = Instant::now();
        let b = TokenBucket::starting_at(ClientLimit::new(50.0, 100), t0);
        for i in 0..100 {
            assert_eq!(b.reserve(t0), Duration::ZERO, "request {i} is in the burst");
        }
        // The 101st waits one token (20 ms), the 150th 50 tokens (1 s).
        assert_eq!(b.reserve(t0), Duration::from_millis(20));
        let mut last = Duration::ZERO;
        for _ in 101..150 {
            last = b.reserve(t0);
        }
        assert!((last.as_secs_f64() - 1.0).abs() < 1e-9, "{last:?}");
        // Time refills the debt first: a second later the next still waits.
        let w = b.reserve(t0 + Duration::from_secs(1));
        assert!((w.as_secs_f64() - 0.02).abs() < 1e-9, "{w:?}");
        let none = TokenBucket::starting_at(ClientLimit::NONE, t0);
        assert!((0..10_000).all(|_| none.reserve(t0).is_zero()));
    }

    #[test]
    fn the_bucket_refills_up_to_its_burst_only() {
        let t0 = Instant::now();
        let b = TokenBucket::starting_at(ClientLimit::new(20.0, 30), t0);
        for _ in 0..30 {
            b.reserve(t0);
        }
        // An hour idle refills 30 tokens, not 72,000.
        let t1 = t0 + Duration::from_secs(3600);
        for _ in 0..30 {
            assert!(b.reserve(t1).is_zero());
        }
        assert_eq!(b.reserve(t1), Duration::from_millis(50));
    }

    #[test]
    fn time_for_is_the_floor_of_n_requests() {
        let l = ClientLimit::new(50.0, 100);
        assert_eq!(l.time_for(100), Duration::ZERO);
        // 2,048 requests (a patch and a delete per pod of 1,024): 1,948 / 50
        assert_eq!(l.time_for(2048), Duration::from_secs_f64(38.96));
        assert_eq!(ClientLimit::NONE.time_for(1_000_000), Duration::ZERO);
    }

    #[test]
    fn slow_start_doubles_from_one_and_ends_with_the_rest() {
        assert_eq!(slow_start_batches(1, 1), [1]);
        assert_eq!(slow_start_batches(10, 1), [1, 2, 4, 3]);
        let b = slow_start_batches(500, 1);
        assert_eq!(b, [1, 2, 4, 8, 16, 32, 64, 128, 245]);
        assert_eq!(b.iter().sum::<usize>(), 500);
        assert!(slow_start_batches(0, 1).is_empty());
    }

    #[test]
    fn the_job_failure_backoff_doubles_per_failure_up_to_its_cap() {
        let (b, m) = (Duration::from_secs(10), Duration::from_secs(600));
        assert_eq!(job_failure_backoff(0, b, m), Duration::ZERO);
        assert_eq!(job_failure_backoff(1, b, m), Duration::from_secs(10));
        assert_eq!(job_failure_backoff(2, b, m), Duration::from_secs(20));
        // 4 pods deleted: 80 s (issue 32's 4-node TrainJob).
        assert_eq!(job_failure_backoff(4, b, m), Duration::from_secs(80));
        assert_eq!(job_failure_backoff(6, b, m), Duration::from_secs(320));
        // 10 × 2^6 = 640 s ≥ 600: the cap from the 7th failure on.
        assert_eq!(job_failure_backoff(7, b, m), m);
        assert_eq!(job_failure_backoff(1024, b, m), m);
        assert_eq!(job_failure_backoff(5, Duration::ZERO, m), Duration::ZERO);
    }

    #[test]
    fn limits_parse_over_the_defaults_or_over_none() {
        let d = OperatorLimits::parse("").expect("empty");
        assert_eq!(d, OperatorLimits::published());
        assert_eq!(d.volcano, ClientLimit::new(50.0, 100));
        assert_eq!(d.training_operator, ClientLimit::new(20.0, 30));
        assert_eq!(d.job_max_per_sync, 500);
        let l = OperatorLimits::parse("volcano-qps=100/s, vc-scheduler-period=500ms").expect("l");
        assert_eq!(l.volcano.qps, 100.0);
        assert_eq!(l.vc_schedule_period, Duration::from_millis(500));
        assert_eq!(l.trainer, OperatorLimits::published().trainer);
        assert_eq!(d.job_failure_backoff, Duration::from_secs(10));
        assert_eq!(d.job_failure_backoff_max, Duration::from_secs(600));
        let nb = OperatorLimits::parse("job-failure-backoff=0s").expect("nb");
        assert!(nb.job_failure_backoff.is_zero());
        let n = OperatorLimits::parse("none,job-controller-qps=5").expect("n");
        assert_eq!(n.job_controller.qps, 5.0);
        assert!(!n.volcano.is_limited());
        assert_eq!(
            OperatorLimits::parse(&d.to_string()).expect("round trip"),
            d
        );
        assert!(matches!(
            OperatorLimits::parse("qps"),
            Err(LimitsError::Item(_))
        ));
        assert!(matches!(
            OperatorLimits::parse("gpu-qps=1"),
            Err(LimitsError::Key(_))
        ));
        assert!(OperatorLimits::parse("volcano-burst=-1").is_err());
        assert!(OperatorLimits::parse("jobset-qps=fast").is_err());
    }
}
