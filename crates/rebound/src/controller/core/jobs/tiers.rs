//! Deadlines of a recovery: fallback to the next tier, escalation of a
//! pod restart to the job, force-deletion of pods stuck on dead nodes; the
//! records of a restart (Event, logs) and its end.

use super::super::effect::{EffectKind, PodTarget, describe};
use super::super::occurrence::{Fate, OccurrenceId};
use super::super::store::{JobKey, job_key};
use super::super::{Core, Now, Scope};
use super::*;
use crate::api::RecoveryTier;
use crate::recover::{Notice, reasons};

impl Core {
    /// A deadline passed: fall back to the next tier, or escalate a pod
    /// restart to a job restart.
    pub(in crate::controller::core) fn check_deadline(&mut self, key: &JobKey, now: Now) {
        let Some(rec) = self.recoveries.get(key) else {
            return;
        };
        if rec.deadline.is_none_or(|d| d > now.wall) {
            return;
        }
        match rec.tier.clone() {
            Tier::PodFirst { .. } => self.escalate_pod_first(key, now),
            Tier::InPlace | Tier::ReplaceFaulty { .. } => self.fall_back(key, now),
            _ => {}
        }
    }

    pub(in crate::controller::core) fn fall_back(&mut self, key: &JobKey, now: Now) {
        let Some(rec) = self.recoveries.get(key).cloned() else {
            return;
        };
        let faulty = self.faulty_pods(key);
        let next = rec.fallbacks.iter().find_map(|t| match t {
            RecoveryTier::ReplaceFaulty
                if !faulty.is_empty() && !matches!(rec.tier, Tier::ReplaceFaulty { .. }) =>
            {
                Some(Tier::ReplaceFaulty {
                    pods: faulty.clone(),
                })
            }
            RecoveryTier::Recreate => Some(Tier::Recreate),
            _ => None,
        });
        let waited = crate::api::duration::format(rec.cfg.fallback_after);
        let Some(next) = next else {
            let note = format!(
                "not running again {waited} after the {} restart and no further tier in spec.restart.tiers",
                rec.tier.name()
            );
            self.finish(key, End::NotResumed(note), now);
            return;
        };
        let note = format!(
            "not running again {waited} after the {} restart: falling back to {}",
            rec.tier.name(),
            next.name()
        );
        tracing::info!(job = %rec.job.id(), "{note}");
        self.job_event(
            &rec.job,
            Notice::normal(reasons::JOB_RESTARTED, "Restart", note),
        );
        if let Some(r) = self.recoveries.get_mut(key) {
            r.fallbacks.retain(|t| t.as_str() != next.name());
            r.tier = next;
            r.phase = Phase::Act;
            r.acted = false;
            r.recorded = false;
            r.acting = None;
            r.recording = None;
            r.targets.clear();
            r.append = false;
            r.deadline = None;
            r.attempts = 0;
            r.retry_at = None;
            // The next tier's own time to bring the job back.
            r.give_up = later(now.wall, r.cfg.fallback_after.max(Duration::from_secs(600)));
        }
        self.advance(key, now);
    }

    /// The graded first step did not bring the job back in `jobAfter`:
    /// restart the whole job (a new restart, counted), by the policy's
    /// tiers.
    pub(in crate::controller::core) fn escalate_pod_first(&mut self, key: &JobKey, now: Now) {
        let Some(rec) = self.recoveries.remove(key) else {
            return;
        };
        let mut cause = rec.cause.clone();
        cause.reasons.push_str(&format!(
            "; graded: the job is not running {} after the pod restart; restarting the whole job",
            crate::api::duration::format(rec.job_after)
        ));
        let (tier, why) = self.plan_tier(key, &rec.cfg, None);
        if let Some(w) = why {
            cause.reasons.push_str(&format!("; {w}"));
        }
        self.start_recovery(
            key.clone(),
            rec.job,
            tier,
            cause,
            rec.cfg,
            rec.logs,
            rec.job_after,
            None,
            now,
        );
    }

    /// Pods of a restarting job stuck Terminating on a NotReady node longer
    /// than the policy's bound: force-delete them (grace 0), so that
    /// operators with fixed pod names can recreate them elsewhere.
    pub(in crate::controller::core) fn force_delete_stuck(&mut self, key: &JobKey, now: Now) {
        let Some(rec) = self.recoveries.get(key) else {
            return;
        };
        let bound = rec.cfg.force_delete_after.as_secs() as i64;
        let stuck: Vec<PodTarget> = self
            .store
            .job_pods(key)
            .into_iter()
            .filter(|p| {
                p.deleting_since
                    .is_some_and(|t| now.wall.timestamp() - t >= bound)
                    && p.node
                        .as_deref()
                        .is_some_and(|n| self.store.nodes.get(n).is_some_and(|n| !n.ready))
                    && !rec.forced.contains(&*p.uid)
            })
            .map(|p| PodTarget {
                grace_seconds: Some(0),
                ..PodTarget::of(p)
            })
            .collect();
        if stuck.is_empty() {
            return;
        }
        let job = rec.job.clone();
        let names: Vec<String> = stuck
            .iter()
            .map(|p| format!("{} (on NotReady node)", p.name))
            .collect();
        let note = format!(
            "force-deleted {} pod(s) Terminating for over {} on NotReady nodes (their kubelets cannot confirm): {}",
            stuck.len(),
            crate::api::duration::format(rec.cfg.force_delete_after),
            names.join(", ")
        );
        if let Some(r) = self.recoveries.get_mut(key) {
            r.forced.extend(stuck.iter().map(|p| p.uid.clone()));
        }
        self.side_delete(key, stuck);
        self.job_event(
            &job,
            Notice::warning(reasons::POD_FORCE_DELETED, "Restart", note),
        );
    }

    pub(in crate::controller::core) fn restarted_event(&mut self, rec: &Recovery, how: &str) {
        let rc = rec
            .cause
            .root_cause
            .clone()
            .unwrap_or_else(|| "unknown".into());
        let mut note = format!(
            "Restarted ({}) after {} (level {}, policy {}): {how}; root cause: {rc}",
            rec.tier.name(),
            describe(&rec.cause.fault),
            rec.cause.level,
            rec.cause.policy.as_deref().unwrap_or("-"),
        );
        if !rec.cause.reasons.is_empty() {
            note.push_str(&format!("; why: {}", rec.cause.reasons));
        }
        let reason = if matches!(rec.tier, Tier::PodFirst { .. }) {
            reasons::POD_RESTARTED
        } else {
            reasons::JOB_RESTARTED
        };
        tracing::info!(job = %rec.job.id(), "{note}");
        self.job_event(&rec.job, Notice::normal(reason, "Restart", note));
    }

    pub(in crate::controller::core) fn save_logs(&mut self, key: &JobKey, rec: &Recovery) {
        let Some((tail_lines, max_bytes)) = rec.logs else {
            return;
        };
        let only = match &rec.tier {
            Tier::PodFirst { pod } => Some(pod.name.clone()),
            _ => None,
        };
        let root = rec
            .cause
            .root_cause
            .as_deref()
            .and_then(|r| r.split_whitespace().next())
            .map(str::to_string);
        let mut pods: Vec<crate::recover::PodLogTarget> = self
            .store
            .job_pods(key)
            .iter()
            .filter(|p| only.as_deref().is_none_or(|o| &*p.name == o))
            .map(|p| crate::recover::PodLogTarget {
                name: p.name.to_string(),
                containers: p.containers.iter().map(|c| c.to_string()).collect(),
                previous: p.restarted.iter().map(|c| c.to_string()).collect(),
                node: p.node.as_deref().map(str::to_string),
            })
            .collect();
        // The root-cause pod's log first: it is the one people read.
        pods.sort_by_key(|p| Some(&p.name) != root.as_ref());
        self.effect(
            EffectKind::SaveLogs {
                job: rec.job.clone(),
                pods,
                tail_lines,
                max_bytes,
            },
            None,
        );
    }

    /// A recovery ended (the job runs again, or it was given up): the
    /// occurrences it absorbed are decided again, so a job that never
    /// came back is looked at afresh (with its cooldown and budget).
    pub(in crate::controller::core) fn finish(&mut self, key: &JobKey, end: End, now: Now) {
        let Some(rec) = self.recoveries.remove(key) else {
            return;
        };
        if let Some(v) = &self.clusterd {
            v.job_done(&rec.job);
        }
        let resumed = matches!(end, End::Resumed);
        self.report_end(&rec, end, now);
        let absorbed: Vec<OccurrenceId> = self
            .current
            .iter()
            .filter(|(id, o)| {
                self.ledger
                    .get(**id)
                    .is_some_and(|e| e.fate == Fate::Absorbed)
                    && match &o.scope {
                        Scope::Pod(j) => job_key(&self.store.resolve(j)) == *key,
                        Scope::Node | Scope::NodeEvent => true,
                    }
            })
            .map(|(id, _)| *id)
            .collect();
        for id in absorbed {
            let Some(level) = self.ledger.get(id).map(|e| e.level) else {
                continue;
            };
            // A software fault seen while the job was restarting, before
            // any of its processes started again, is covered by that
            // restart once the job runs again (a second restart would be
            // one fault restarted twice). One seen after the workers
            // started, and a node fault (the pods may still sit on that
            // node), are looked at again.
            if resumed && rec.covered.contains(&id) {
                self.ledger.set(id, level, Fate::Handled);
                continue;
            }
            self.ledger.set(id, level, Fate::Pending { until: None });
            self.decide_current(id, now);
        }
        // However it ended, its barrier does not stay closed (unless a
        // new recovery of the job, decided just above, follows it).
        self.ensure_released(key, now);
    }
}
