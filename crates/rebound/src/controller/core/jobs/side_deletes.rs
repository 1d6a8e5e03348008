//! Pod deletes beside a recovery's own steps: the pods of a node that
//! failed during an in-place restart (absorbed into `ReplaceFaulty`), and
//! pods force-deleted off dead nodes. Their outcomes come back like any
//! step's: a failed delete is tried again (the pods still there, by uid),
//! never forgotten, so a barrier does not wait for a replacement whose
//! old pod was never deleted.

use super::super::effect::{EffectId, EffectKind, Outcome, PodTarget};
use super::super::store::JobKey;
use super::super::{Core, Now, Waiting};
use super::backoff;

/// Deletes of a recovery that failed and wait to be tried again.
#[derive(Clone, Debug, Default)]
pub struct SideDeletes {
    /// Pods whose delete failed (by uid), to be deleted again.
    pub retry: Vec<PodTarget>,
    pub attempts: u32,
    pub retry_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl Core {
    /// Delete `pods` of the job under recovery `key`, routing the outcome
    /// back to it.
    pub(in crate::controller::core) fn side_delete(&mut self, key: &JobKey, pods: Vec<PodTarget>) {
        let Some(rec) = self.recoveries.get(key) else {
            return;
        };
        let job = rec.job.clone();
        self.effect_for(
            Waiting::SideDelete(key.clone(), pods.clone()),
            EffectKind::DeletePods { job, pods },
            None,
        );
    }

    /// The outcome of a [`Self::side_delete`].
    pub(in crate::controller::core) fn side_delete_done(
        &mut self,
        key: &JobKey,
        pods: Vec<PodTarget>,
        _id: EffectId,
        outcome: Outcome,
        now: Now,
    ) {
        let Some(rec) = self.recoveries.get_mut(key) else {
            return;
        };
        match outcome {
            Outcome::Ok(_) | Outcome::Gone(_) => {}
            Outcome::NotLeader => {}
            Outcome::Failed(why) => {
                tracing::warn!(job = %rec.job.id(), %why, pods = pods.len(), "pod delete failed; retrying");
                // A force-delete is chosen again by the stuck-pod check.
                for p in &pods {
                    rec.forced.remove(&p.uid);
                }
                let side = &mut rec.side;
                side.attempts = side.attempts.saturating_add(1);
                side.retry_at = now.wall.checked_add_signed(backoff(side.attempts));
                for p in pods.into_iter().filter(|p| p.grace_seconds.is_none()) {
                    if !side.retry.iter().any(|r| r.uid == p.uid) {
                        side.retry.push(p);
                    }
                }
            }
        }
    }

    /// Try failed side deletes again once their backoff ended: only pods
    /// still there (same uid) and not being deleted.
    pub(in crate::controller::core) fn retry_side_deletes(&mut self, key: &JobKey, now: Now) {
        let Some(rec) = self.recoveries.get(key) else {
            return;
        };
        if rec.side.retry.is_empty() || rec.side.retry_at.is_some_and(|t| t > now.wall) {
            return;
        }
        let pods = self.store.job_pods(key);
        let left: Vec<PodTarget> = rec
            .side
            .retry
            .iter()
            .filter(|t| pods.iter().any(|p| !p.deleting && *p.uid == *t.uid))
            .cloned()
            .collect();
        if let Some(r) = self.recoveries.get_mut(key) {
            r.side.retry.clear();
            r.side.retry_at = None;
        }
        if !left.is_empty() {
            self.side_delete(key, left);
        }
    }
}
