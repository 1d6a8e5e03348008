//! Events about skipped restarts, once per job and reason.
//!
//! A crash loop under a `when: 'false'` gate, a cooldown or a dry run is
//! decided on every exit; an Event per decision would cost an API request
//! each and bury the job's other Events. So a job hears of a reason once,
//! then again only when it restarted since (a new episode: the skip is news
//! again) or after [`REPEAT`] while the reason lasts. Every decision is
//! still counted in `rebound_decisions_total`.

use super::store::JobKey;
use crate::controller::core::hashing::HashMap;
use chrono::{DateTime, Utc};

/// How long a job hears of the same skip reason only once.
pub const REPEAT: chrono::Duration = chrono::Duration::minutes(10);

/// When each job last heard of each reason.
#[derive(Debug, Default)]
pub struct SkipNotices {
    said: HashMap<(JobKey, &'static str), Said>,
}

#[derive(Debug, Clone, Copy)]
struct Said {
    at: DateTime<Utc>,
    /// The job's last restart then: a later one starts a new episode.
    last_restart: Option<DateTime<Utc>>,
}

impl SkipNotices {
    /// Whether `job` should hear of `reason` now (and remember that it
    /// did).
    pub fn should_say(
        &mut self,
        job: &JobKey,
        reason: &'static str,
        last_restart: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> bool {
        let key = (job.clone(), reason);
        let say = self
            .said
            .get(&key)
            .is_none_or(|s| s.last_restart != last_restart || now - s.at >= REPEAT);
        if say {
            self.said.insert(
                key,
                Said {
                    at: now,
                    last_restart,
                },
            );
        }
        say
    }

    /// Forget what is older than [`REPEAT`] (it would be said again
    /// anyway): the book holds only jobs skipped lately.
    pub fn prune(&mut self, now: DateTime<Utc>) {
        self.said.retain(|_, s| now - s.at < REPEAT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(n: &str) -> JobKey {
        ("JobSet".into(), "ml".into(), n.into())
    }

    #[test]
    fn once_per_job_and_reason_until_a_restart_or_the_repeat_interval() {
        let t0 = DateTime::from_timestamp(1_900_000_000, 0).unwrap_or_default();
        let s = chrono::Duration::seconds;
        let mut b = SkipNotices::default();
        assert!(b.should_say(&job("a"), "GateFalse", None, t0));
        assert!(!b.should_say(&job("a"), "GateFalse", None, t0 + s(30)));
        // Another reason, another job: said.
        assert!(b.should_say(&job("a"), "Cooldown", None, t0 + s(30)));
        assert!(b.should_say(&job("b"), "GateFalse", None, t0 + s(30)));
        // The job restarted since: a new episode.
        assert!(b.should_say(&job("a"), "GateFalse", Some(t0 + s(40)), t0 + s(60)));
        assert!(!b.should_say(&job("a"), "GateFalse", Some(t0 + s(40)), t0 + s(90)));
        // A reminder once the interval has passed.
        assert!(b.should_say(
            &job("a"),
            "GateFalse",
            Some(t0 + s(40)),
            t0 + s(60) + REPEAT
        ));
        // Pruning keeps what is recent.
        b.prune(t0 + s(60) + REPEAT);
        assert!(!b.should_say(
            &job("a"),
            "GateFalse",
            Some(t0 + s(40)),
            t0 + s(61) + REPEAT
        ));
        assert_eq!(b.said.len(), 1);
    }
}
