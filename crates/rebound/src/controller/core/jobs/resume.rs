//! A new leader resumes the recoveries recorded on the jobs; the job
//! objects seen reconcile what this process wrote with what they show.

use super::super::effect::PodTarget;
use super::super::store::JobKey;
use super::super::{Core, Now};
use super::*;
use crate::api::WorkloadKind;
use crate::controller::core::hashing::HashSet;
use crate::fault::{Fault, Level};
use crate::workload::JobRef;
use std::time::Duration;

/// Whether the job says the ending of its restart recorded at `at` was
/// told already.
fn ended(
    annotations: &std::collections::BTreeMap<String, String>,
    at: chrono::DateTime<chrono::Utc>,
) -> bool {
    annotations
        .get(crate::recover::RESTART_ENDED_ANNOTATION)
        .and_then(|v| v.trim().parse::<i64>().ok())
        .is_some_and(|ms| ms >= at.timestamp_millis())
}

impl Core {
    /// A new leader finds recoveries recorded on the jobs and goes on with
    /// them: a generation raised but not released is an in-place restart
    /// waiting at its barrier; a pod-only restart younger than `jobAfter`
    /// waits for the job to run again; a whole-job restart whose ending
    /// no leader told (`rebound.dev/restart-ended`) within its bound is
    /// followed until the job runs again or the bound passes.
    pub(in crate::controller::core) fn resume_recoveries(&mut self, now: Now) {
        let keys: Vec<JobKey> = self
            .store
            .jobs
            .keys()
            .filter(|k| !self.recoveries.contains_key(*k))
            .cloned()
            .collect();
        for key in keys {
            self.resume_job(key, now);
        }
    }

    /// A job seen while acting shows a raised generation that no recovery
    /// of this process follows (its record reached the watch after the
    /// take-over, or a previous term wrote it): go on with it as a new
    /// leader would, rather than leave its barrier closed.
    pub(in crate::controller::core) fn resume_if_unfollowed(&mut self, key: &JobKey, now: Now) {
        if !self.acting() || self.recoveries.contains_key(key) || self.releasing.contains_key(key) {
            return;
        }
        let g = self.generation_of(key);
        if g.current > g.released {
            self.resume_job(key.clone(), now);
        }
    }

    /// Resume the recovery recorded on one job, if it has one under way:
    /// from the job's records as the watch shows them, and the records this
    /// process wrote that the watch does not show yet (a term that ended
    /// and came back while the jobs' watch was behind its own write).
    fn resume_job(&mut self, key: JobKey, now: Now) {
        let Some(info) = self.store.jobs.get(&key).cloned() else {
            return;
        };
        let generation = self.generation_of(&key);
        let written = self.recorded.get(&key).cloned().unwrap_or_default();
        {
            let Some(last) = info.history.iter().chain(&written).max_by_key(|r| r.at) else {
                return;
            };
            let Ok(kind) = key.1.parse::<WorkloadKind>() else {
                return;
            };
            let policy = self.policy_of(&key);
            let cfg = policy
                .as_ref()
                .map(|p| p.restart.clone())
                .unwrap_or_default();
            let job_after = policy.as_ref().map(|p| p.job_after).unwrap_or_default();
            // How long after its record a restart is followed at most.
            let give_up = cfg
                .fallback_after
                .saturating_add(cfg.fallback_after.max(Duration::from_secs(600)));
            let mut job = self
                .store
                .job_pods(&key)
                .first()
                .map(|p| (*p.job).clone())
                .unwrap_or_else(|| JobRef::new(kind, &key.0, &key.2, None));
            job.uid = info.uid.clone();
            let mut follow_only = false;
            let (tier, phase, deadline) = if generation.current > generation.released {
                let tier = if last.tier.as_deref() == Some("ReplaceFaulty") {
                    Tier::ReplaceFaulty { pods: Vec::new() }
                } else {
                    Tier::InPlace
                };
                (
                    tier,
                    Phase::Barrier,
                    Some(later(last.at, cfg.fallback_after)),
                )
            } else if last.pod_only && later(last.at, job_after) > now.wall {
                let pod = last
                    .pod
                    .as_deref()
                    .and_then(|p| p.split_once('/'))
                    .map(|(n, u)| PodTarget {
                        namespace: key.0.clone(),
                        name: n.to_string(),
                        uid: u.to_string(),
                        grace_seconds: None,
                    });
                let Some(pod) = pod else { return };
                (
                    Tier::PodFirst { pod },
                    Phase::Resume,
                    Some(later(last.at, job_after)),
                )
            } else if !last.pod_only
                && kind != WorkloadKind::VolcanoJob
                && later(last.at, give_up) > now.wall
                && !ended(&info.annotations, last.at)
            {
                // A whole-job restart (recreated, or in place and released)
                // whose ending no leader told: the one that made it lost
                // its lease or died before the job ran again. Followed to
                // its end from here (its pods made since the record).
                let tier = match last.tier.as_deref() {
                    Some("InPlace") | Some("ReplaceFaulty") => Tier::InPlace,
                    _ => Tier::Recreate,
                };
                follow_only = true;
                (tier, Phase::Resume, None)
            } else {
                return;
            };
            tracing::info!(job = %job.id(), tier = tier.name(), "resuming a recovery recorded on the job");
            let fallbacks = cfg
                .tiers
                .iter()
                .skip_while(|t| t.as_str() != tier.name())
                .skip(1)
                .copied()
                .collect();
            let rec = Recovery {
                job,
                generation: generation.current,
                released: generation.released,
                tier,
                phase,
                started: last.at,
                deadline,
                give_up: later(last.at, give_up),
                expected: last.pods.map(|p| p as usize).unwrap_or(0),
                cause: Cause {
                    occurrence: 0,
                    fault: Fault::new(crate::fault::FaultSource::KubeEvent, "Resumed", last.at),
                    level: Level::RestartJob,
                    policy: policy.as_ref().map(|p| p.id()),
                    reasons: "resumed from the job's restart record".into(),
                    root_cause: info
                        .annotations
                        .get(crate::recover::ROOT_CAUSE_ANNOTATION)
                        .cloned(),
                    infrastructure: last.infrastructure,
                },
                received: None,
                acting: None,
                recording: None,
                acted: true,
                recorded: true,
                retry_at: None,
                attempts: 0,
                logs: None,
                job_after,
                append: true,
                fallbacks,
                forced: HashSet::default(),
                logs_saved: true,
                targets: Vec::new(),
                cfg,
                covered: HashSet::default(),
                side: SideDeletes::default(),
                follow_only,
            };
            self.recoveries.insert(key.clone(), rec);
            self.dirty_jobs.insert(key);
        }
    }

    /// The job's restart generation: what its annotations say, or what
    /// this process wrote if they do not show it yet.
    pub(in crate::controller::core) fn generation_of(
        &self,
        key: &JobKey,
    ) -> crate::inplace::Generation {
        let mut g = self
            .store
            .jobs
            .get(key)
            .map(|i| i.generation)
            .unwrap_or_default();
        if let Some(w) = self.written_gen.get(key) {
            g.current = g.current.max(w.current);
            g.released = g.released.max(w.released);
        }
        g
    }

    /// A job object was seen: records of ours its annotations now show are
    /// no longer kept apart; a job recreated under the same name (another
    /// uid) ends the recovery of the old one and forgets what was written
    /// on the old one.
    pub(in crate::controller::core) fn job_seen(
        &mut self,
        key: &JobKey,
        info: &crate::controller::core::store::JobInfo,
    ) {
        let recreated = self
            .store
            .jobs
            .get(key)
            .is_some_and(|old| old.uid.is_some() && info.uid.is_some() && old.uid != info.uid);
        if recreated {
            self.recorded.remove(key);
            self.unmade.remove(key);
            self.requeued.remove(key);
            self.written_gen.remove(key);
        }
        if let Some(r) = self.recorded.get_mut(key) {
            r.retain(|x| !info.history.iter().any(|h| h.at == x.at));
            if r.is_empty() {
                self.recorded.remove(key);
            }
        }
        if let Some(w) = self.written_gen.get(key)
            && info.generation.current >= w.current
            && info.generation.released >= w.released
        {
            self.written_gen.remove(key);
        }
        // The recovery was for the incarnation the store knew, and a new
        // one replaced it. (A recovery decided from the pods of a newer
        // incarnation than the store knows outlives the older job's late
        // events.)
        let known = self.store.jobs.get(key).and_then(|j| j.uid.clone());
        let stale = self.recoveries.get(key).is_some_and(|r| {
            r.job.uid.is_some() && info.uid.is_some() && r.job.uid != info.uid && r.job.uid == known
        });
        if stale {
            tracing::info!(job = ?key, "job recreated under the same name; its old recovery ends");
            self.recoveries.remove(key);
        }
    }
}
