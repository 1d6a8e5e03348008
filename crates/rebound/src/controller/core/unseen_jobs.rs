//! Faults that reach a job before its object does.
//!
//! The pods, nodes and each job kind come from separate watches, so a
//! pod's (or a node fault's) event can arrive before the event of the job
//! the pod belongs to: a job just created, or a job kind's watch that is
//! restarting. A job the store has not seen has no labels, so no policy
//! would select it and the fault would be skipped as `NoPolicy`, for good:
//! a missed fault. Such a decision waits instead, for the job's object or
//! for [`UNSEEN_JOB_WAIT`] after the fault arrived, whichever is first;
//! the job's arrival decides it at once.

use super::occurrence::{Fate, OccurrenceId};
use super::store::{JobKey, job_key};
use super::{Core, Now, Occurrence};
use crate::api::WorkloadKind;
use crate::controller::core::hashing::HashMap;
use crate::workload::JobRef;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;
use std::time::Duration;

/// How long a decision waits for a job object its pods name but the watch
/// has not shown. The watches of one cluster deliver within milliseconds
/// of each other; a job kind's watch that restarts waits out kube-runtime's
/// backoff (up to seconds): 30 s covers both, and a job that never appears
/// (deleted, its pods on their way out) is then decided with what is known,
/// as before.
pub const UNSEEN_JOB_WAIT: Duration = Duration::from_secs(30);

/// Occurrences waiting for the object of a job they concern, each with
/// the wall time its wait ends (the ledger's wake-ups are wall times too).
///
/// Bounded per namespace: a tenant's pods can name jobs that never come
/// (ghosts), and a wait once started is never started over, so one
/// namespace's ghosts can neither grow the controller's memory nor delay
/// another namespace's decisions; past its share a namespace's new faults
/// are decided at once with what is known, as after a wait.
#[derive(Debug, Default)]
pub(super) struct UnseenJobs {
    by_job: HashMap<JobKey, BTreeMap<OccurrenceId, DateTime<Utc>>>,
    /// Jobs waited for, per namespace.
    per_namespace: HashMap<String, usize>,
}

impl UnseenJobs {
    /// At most this many jobs of one namespace are waited for at once.
    const MAX_JOBS_PER_NAMESPACE: usize = 256;
    /// At most this many jobs in all (16 namespaces at their share).
    const MAX_JOBS: usize = 4096;

    /// When the wait of `id` for `key` ends, starting it now if it has not
    /// started; `None` when the job's namespace (or the whole) has no room
    /// for another job: decide now.
    fn wait(&mut self, key: JobKey, id: OccurrenceId, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if !self.by_job.contains_key(&key) {
            let full = |u: &Self| {
                u.per_namespace.get(&key.0).copied().unwrap_or(0) >= Self::MAX_JOBS_PER_NAMESPACE
                    || u.by_job.len() >= Self::MAX_JOBS
            };
            if full(self) {
                self.prune(now);
            }
            if full(self) {
                return None;
            }
            *self.per_namespace.entry(key.0.clone()).or_default() += 1;
        }
        let wait = chrono::Duration::from_std(UNSEEN_JOB_WAIT).unwrap_or_default();
        Some(
            *self
                .by_job
                .entry(key)
                .or_default()
                .entry(id)
                .or_insert(now + wait),
        )
    }

    /// Forgets the waits that ended more than a second ago and were not
    /// taken back (their occurrence went before its wake-up: a pod deleted,
    /// an Event removed), so that they hold no room.
    fn prune(&mut self, now: DateTime<Utc>) {
        let before = now - chrono::Duration::seconds(1);
        let ended: Vec<JobKey> = self
            .by_job
            .iter()
            .filter(|(_, ids)| ids.values().all(|until| *until < before))
            .map(|(k, _)| k.clone())
            .collect();
        for k in ended {
            self.forget(&k);
        }
    }

    /// `key` is no longer waited for.
    fn forget(&mut self, key: &JobKey) -> Option<BTreeMap<OccurrenceId, DateTime<Utc>>> {
        let ids = self.by_job.remove(key)?;
        if let Some(n) = self.per_namespace.get_mut(&key.0) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_namespace.remove(&key.0);
            }
        }
        Some(ids)
    }

    /// `id` no longer waits for `key` (its wait is over).
    fn over(&mut self, key: &JobKey, id: OccurrenceId) {
        if let Some(ids) = self.by_job.get_mut(key) {
            ids.remove(&id);
            if ids.is_empty() {
                self.forget(key);
            }
        }
    }

    /// The occurrences that waited for `key`, which is seen now.
    fn seen(&mut self, key: &JobKey) -> Vec<OccurrenceId> {
        self.forget(key)
            .map(|ids| ids.into_keys().collect())
            .unwrap_or_default()
    }

    /// Jobs waited for (tests).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.by_job.len()
    }
}

impl Core {
    /// When to decide `occ` for `job` again if the job's object has not
    /// been seen yet and may still come; `None` when it can be decided now
    /// (the object is known, the kind has none, the kind is not installed,
    /// or the wait is over). Records the wait, so the object's arrival
    /// decides it.
    pub(super) fn wait_for_unseen_job(
        &mut self,
        job: &JobRef,
        occ: &Occurrence,
        now: Now,
    ) -> Option<DateTime<Utc>> {
        let key = job_key(job);
        if job.kind == WorkloadKind::Pod || self.store.jobs.contains_key(&key) {
            return None;
        }
        // A kind that is not installed has no watch to deliver it.
        if !self.kinds.as_ref().is_some_and(|k| k.contains(&job.kind)) {
            return None;
        }
        let Some(until) = self.unseen.wait(key.clone(), occ.id, now.wall) else {
            tracing::debug!(job = ?key, "too many unseen jobs in the namespace: decided without its object");
            return None;
        };
        if until <= now.wall {
            tracing::info!(job = ?key, "a fault's job was never seen: decided without its object");
            self.unseen.over(&key, occ.id);
            return None;
        }
        tracing::debug!(job = ?key, %until, "fault before its job's object: waiting for it");
        Some(until)
    }

    /// The job `key`'s object arrived: the decisions that waited for it
    /// are taken now.
    pub(super) fn unseen_job_arrived(&mut self, key: &JobKey, now: Now) {
        for id in self.unseen.seen(key) {
            let Some(level) = self
                .ledger
                .get(id)
                .filter(|e| matches!(e.fate, Fate::Pending { .. }))
                .map(|e| e.level)
            else {
                continue;
            };
            // Due now: `decide_current` leaves a wake-up still ahead.
            self.ledger.set(id, level, Fate::Pending { until: None });
            self.decide_current(id, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ns: &str, name: &str) -> JobKey {
        (ns.into(), "PyTorchJob".into(), name.into())
    }

    fn id(n: u128) -> OccurrenceId {
        n
    }

    #[test]
    fn one_namespaces_ghost_jobs_neither_reset_nor_crowd_out_anothers_waits() {
        let mut u = UnseenJobs::default();
        let t0 = Utc::now();
        let other = u.wait(key("b", "real"), id(1), t0).expect("room for b");
        // Team a names 5,000 jobs that never come, a second later each.
        let t1 = t0 + chrono::Duration::seconds(1);
        let waited = (0..5000)
            .filter(|i| {
                u.wait(key("a", &format!("ghost-{i}")), id(10 + i), t1)
                    .is_some()
            })
            .count();
        assert_eq!(waited, UnseenJobs::MAX_JOBS_PER_NAMESPACE, "a's share");
        // b's wait was not started over, and b still has room.
        assert_eq!(u.wait(key("b", "real"), id(1), t1), Some(other));
        assert!(u.wait(key("b", "new"), id(2), t1).is_some());
        // Once a's ghosts are decided, a has room again.
        u.over(&key("a", "ghost-0"), id(10));
        assert!(u.wait(key("a", "late"), id(99_999), t1).is_some());
        assert_eq!(u.len(), UnseenJobs::MAX_JOBS_PER_NAMESPACE + 2);
        assert!(u.wait(key("a", "later"), id(100_000), t1).is_none(), "full");
        // Waits that ended and were never taken back (their occurrences
        // went) hold no room once they are over.
        let after = t1
            + chrono::Duration::from_std(UNSEEN_JOB_WAIT).unwrap_or_default()
            + chrono::Duration::seconds(2);
        assert!(u.wait(key("a", "later"), id(100_000), after).is_some());
    }
}
