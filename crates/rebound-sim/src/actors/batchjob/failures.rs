//! The Job controller's pod failure backoff, as kube-controller-manager
//! keeps it (kubernetes v1.36.3 `pkg/controller/job/backoff_utils.go`):
//! per job, the failed pods since the last success and the time of the
//! last failure; while `base × 2^(failures−1)` (at most `max`) has not
//! passed since then, `manageJob` creates no pod. A pod deleted before it
//! finished counts as failed (`isPodFailed`, without
//! `podReplacementPolicy: Failed`), so a recreate by deleting every pod of
//! a job waits the whole backoff: 10 s × 2^(n−1), 10 minutes from the 7th
//! pod on (measured on the real one, docs/benchmarks.md).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::actors::children::ChildPod;
use crate::actors::ratelimit::job_failure_backoff;

#[derive(Debug, Default)]
struct Record {
    /// Pods (by uid) counted already.
    counted: HashSet<String>,
    failures: u64,
    last: Option<Instant>,
}

/// Every job's record, by job key.
#[derive(Debug, Default)]
pub(super) struct FailureBackoff {
    base: Duration,
    max: Duration,
    jobs: HashMap<String, Record>,
    /// Jobs found waiting, to be synced again once their wait is over.
    held: HashSet<String>,
}

impl FailureBackoff {
    /// A backoff of `base` doubling up to `max`; none when `base` is 0.
    pub(super) fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            jobs: HashMap::new(),
            held: HashSet::new(),
        }
    }

    /// Counts `pods`' new failures ([`Self::observe`]) and whether `job`
    /// must wait before it creates pods; a job that must is remembered
    /// for [`Self::due`].
    pub(super) fn holds(&mut self, job: &str, pods: &[&ChildPod], now: Instant) -> bool {
        self.observe(job, pods, now);
        let wait = !self.remaining(job, now).is_zero();
        if wait {
            self.held.insert(job.to_owned());
        }
        wait
    }

    /// The jobs held whose wait is over (each returned once).
    pub(super) fn due(&mut self, now: Instant) -> Vec<String> {
        let done: Vec<String> = self
            .held
            .iter()
            .filter(|k| self.remaining(k, now).is_zero())
            .cloned()
            .collect();
        for k in &done {
            self.held.remove(k);
        }
        done
    }

    /// Counts the failures among `pods` not counted yet (failed, or deleted
    /// before they finished); a pod that succeeded resets the count.
    pub(super) fn observe(&mut self, job: &str, pods: &[&ChildPod], now: Instant) {
        if self.base.is_zero() {
            return;
        }
        let r = self.jobs.entry(job.to_owned()).or_default();
        for p in pods {
            if r.counted.contains(&p.uid) {
                continue;
            }
            match p.phase() {
                "Succeeded" => {
                    r.counted.insert(p.uid.clone());
                    r.failures = 0;
                    r.last = None;
                }
                "Failed" => {
                    r.counted.insert(p.uid.clone());
                    r.failures += 1;
                    r.last = Some(now);
                }
                _ if p.deleting => {
                    r.counted.insert(p.uid.clone());
                    r.failures += 1;
                    r.last = Some(now);
                }
                _ => {}
            }
        }
    }

    /// How long `job` must still wait before it creates pods.
    pub(super) fn remaining(&self, job: &str, now: Instant) -> Duration {
        let Some(r) = self.jobs.get(job) else {
            return Duration::ZERO;
        };
        let Some(last) = r.last else {
            return Duration::ZERO;
        };
        job_failure_backoff(r.failures, self.base, self.max)
            .saturating_sub(now.saturating_duration_since(last))
    }

    /// Forgets a deleted job.
    pub(super) fn forget(&mut self, job: &str) {
        self.jobs.remove(job);
        self.held.remove(job);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, phase: &str, deleting: bool) -> ChildPod {
        ChildPod {
            name: uid.into(),
            uid: uid.into(),
            phase: Some(phase.into()),
            deleting,
            ..ChildPod::default()
        }
    }

    #[test]
    fn deleted_pods_count_as_failures_and_hold_the_creates() {
        let t0 = Instant::now();
        let mut b = FailureBackoff::new(Duration::from_secs(10), Duration::from_secs(600));
        let (a, c) = (pod("a", "Running", true), pod("c", "Running", true));
        let running = pod("r", "Running", false);
        assert!(b.holds("ns/j", &[&a, &running], t0));
        assert_eq!(b.remaining("ns/j", t0), Duration::from_secs(10));
        // Seen again: not counted twice; a second deleted pod doubles it.
        assert!(b.holds("ns/j", &[&a, &c], t0));
        assert_eq!(b.remaining("ns/j", t0), Duration::from_secs(20));
        let later = t0 + Duration::from_secs(15);
        assert_eq!(b.remaining("ns/j", later), Duration::from_secs(5));
        assert!(b.due(later).is_empty(), "still waiting");
        let over = t0 + Duration::from_secs(21);
        assert_eq!(b.due(over), ["ns/j"]);
        assert!(b.due(over).is_empty(), "returned once");
        assert!(!b.holds("ns/j", &[&a, &c], over));
        // A success resets it.
        b.observe("ns/j", &[&pod("s", "Succeeded", false)], later);
        assert!(b.remaining("ns/j", later).is_zero());
        b.forget("ns/j");
        assert!(b.remaining("ns/j", later).is_zero());
    }

    #[test]
    fn without_a_base_nothing_waits() {
        let t0 = Instant::now();
        let mut b = FailureBackoff::new(Duration::ZERO, Duration::from_secs(600));
        assert!(!b.holds("ns/j", &[&pod("a", "Failed", false)], t0));
    }
}
