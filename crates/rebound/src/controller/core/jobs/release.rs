//! Every recovery ends released: an in-place restart raises the job's
//! generation and its workers wait behind a barrier until rebound writes
//! `restart-released`. A recovery that ends any other way than through its
//! own release (a fallback with no tier left, a give-up, a failed or
//! refused step, a job changed under it) leaves that barrier to this
//! reconcile: a job whose generation is raised but not released and that
//! no recovery follows is released, level-triggered and retried, so no
//! worker waits behind a closed barrier for its startup probe's day.

use super::super::effect::{EffectId, EffectKind, Outcome};
use super::super::store::JobKey;
use super::super::{Core, Now, Waiting};
use super::backoff;
use crate::api::WorkloadKind;
use crate::workload::JobRef;
use chrono::{DateTime, Utc};

/// A release that no recovery follows.
#[derive(Clone, Debug)]
pub struct Releasing {
    /// The generation to release (the job's current one).
    pub generation: u64,
    /// The release in flight.
    pub effect: Option<EffectId>,
    /// When a failed release is tried again.
    pub retry_at: Option<DateTime<Utc>>,
    pub attempts: u32,
}

impl Core {
    /// Release the job's raised generation if no recovery follows it.
    pub(in crate::controller::core) fn ensure_released(&mut self, key: &JobKey, now: Now) {
        if !self.acting() || self.recoveries.contains_key(key) {
            return;
        }
        let Some(info) = self.store.jobs.get(key) else {
            // The job is gone (its delete seen): no barrier is left to
            // open, and what this process wrote on it is moot; a job made
            // anew under the name starts from its own annotations.
            self.releasing.remove(key);
            self.written_gen.remove(key);
            return;
        };
        let g = self.generation_of(key);
        if g.current <= g.released {
            self.releasing.remove(key);
            return;
        }
        let Ok(kind) = key.1.parse::<WorkloadKind>() else {
            return;
        };
        let uid = info.uid.clone();
        let r = self
            .releasing
            .entry(key.clone())
            .or_insert_with(|| Releasing {
                generation: g.current,
                effect: None,
                retry_at: None,
                attempts: 0,
            });
        if r.generation != g.current {
            *r = Releasing {
                generation: g.current,
                effect: None,
                retry_at: None,
                attempts: 0,
            };
        }
        if r.effect.is_some() || r.retry_at.is_some_and(|t| t > now.wall) {
            return;
        }
        let generation = r.generation;
        let mut job = self
            .store
            .job_pods(key)
            .first()
            .map(|p| (*p.job).clone())
            .unwrap_or_else(|| JobRef::new(kind, &key.0, &key.2, None));
        job.uid = uid;
        tracing::info!(job = %job.id(), generation, "no recovery follows the raised generation; releasing its barrier");
        let id = self.effect_for(
            Waiting::Release(key.clone()),
            EffectKind::Release { job, generation },
            None,
        );
        if let Some(r) = self.releasing.get_mut(key) {
            r.effect = Some(id);
        }
    }

    /// The outcome of a release of [`Self::ensure_released`].
    pub(in crate::controller::core) fn release_done(
        &mut self,
        key: &JobKey,
        id: EffectId,
        outcome: Outcome,
        now: Now,
    ) {
        let Some(r) = self.releasing.get_mut(key) else {
            return;
        };
        if r.effect != Some(id) {
            return;
        }
        r.effect = None;
        match outcome {
            Outcome::Ok(_) => {
                let generation = r.generation;
                self.releasing.remove(key);
                let w = self.written_gen.entry(key.clone()).or_default();
                w.current = w.current.max(generation);
                w.released = w.released.max(generation);
            }
            // The job is gone, was recreated, or moved on to another
            // generation: what the watch shows next decides. Until it
            // shows it, the store still has the raised generation, so the
            // release stays owed and is tried again after a backoff (a
            // deleted or fresh job, or one at a released generation, then
            // clears it in `ensure_released`; a newer one is released or
            // followed by its own recovery).
            Outcome::Gone(why) => {
                tracing::info!(job = ?key, %why, "release not needed as sent; waiting for the watch to show the job as it is now");
                r.attempts = r.attempts.saturating_add(1);
                r.retry_at = now.wall.checked_add_signed(backoff(r.attempts));
            }
            Outcome::NotLeader => {}
            Outcome::Failed(why) => {
                r.attempts = r.attempts.saturating_add(1);
                r.retry_at = now.wall.checked_add_signed(backoff(r.attempts));
                tracing::warn!(job = ?key, attempt = r.attempts, %why, "release failed; retrying");
            }
        }
    }

    /// Jobs whose release is due again (a failed one's backoff ended).
    pub(in crate::controller::core) fn releases_due(&self, now: DateTime<Utc>) -> Vec<JobKey> {
        self.releasing
            .iter()
            .filter(|(_, r)| r.effect.is_none() && r.retry_at.is_none_or(|t| t <= now))
            .map(|(k, _)| k.clone())
            .collect()
    }
}
