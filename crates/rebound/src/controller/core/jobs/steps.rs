//! The steps of a recovery: act and record, the barrier and its release,
//! the job running again; outcomes routed back, failures retried.

use super::super::effect::{EffectKind, JobRecord, Outcome, PodTarget};
use super::super::pods::AgentPhase;
use super::super::store::{JobKey, Watched};
use super::super::{Core, Now, Waiting};
use super::*;
use crate::policy::RestartRecord;
use crate::recover::{Notice, reasons};
use crate::workload::JobRef;
use std::time::Duration;

impl Core {
    /// Take the next step of a job's recovery, if one is due.
    pub(in crate::controller::core) fn advance(&mut self, key: &JobKey, now: Now) {
        if !self.acting() {
            return;
        }
        self.retry_side_deletes(key, now);
        let Some(rec) = self.recoveries.get(key) else {
            self.ensure_released(key, now);
            return;
        };
        // Its operator gave up on the job after rebound's restart: the
        // job will not run again whatever rebound waits for.
        if rec.made()
            && let Some(why) = self
                .store
                .restart_info(key)
                .and_then(|i| i.operator_failed.clone())
        {
            self.finish(
                key,
                End::NotResumed(format!("its operator gave up on it: {why}")),
                now,
            );
            return;
        }
        if rec.retry_at.is_some_and(|t| t > now.wall) {
            return;
        }
        // A tier whose deadline passed falls back before anything gives
        // up (the next tier gets its own time), and a barrier every pod
        // waits at is released whatever the time: giving up is for a
        // recovery with nowhere left to go.
        let deadline_due = rec.deadline.is_some_and(|d| d <= now.wall)
            && matches!(rec.phase, Phase::Barrier | Phase::Resume)
            && rec.acting.is_none();
        let releasable =
            rec.phase == Phase::Barrier && rec.acting.is_none() && self.at_barrier(key);
        if rec.give_up <= now.wall && !deadline_due && !releasable {
            let waited = crate::api::duration::format(Duration::from_secs(
                (now.wall - rec.started).num_seconds().max(0) as u64,
            ));
            if rec.made() {
                let what = format!(
                    "its pods are not running and Ready again {waited} after its {} restart; rebound stops following this recovery",
                    rec.tier.name()
                );
                self.finish(key, End::NotResumed(what), now);
            } else {
                let what = format!(
                    "the restart was not made within {waited}; rebound stops following this recovery"
                );
                let job = rec.job.clone();
                self.job_event(
                    &job,
                    Notice::warning(reasons::RESTART_SKIPPED, "Restart", what),
                );
                self.finish(key, End::Dropped, now);
            }
            return;
        }
        let (phase, tier) = (rec.phase, rec.tier.clone());
        match phase {
            Phase::Act => {
                let (acted, acting, recorded, recording) =
                    (rec.acted, rec.acting, rec.recorded, rec.recording);
                // Volcano restarts a job through a Command and ends with a
                // status write; any write of rebound's to the job in
                // between (its record) makes that write conflict, and
                // Volcano runs the whole restart again (256 pods made
                // twice, issue 32 item 6). The record goes first there.
                let record_first =
                    tier == Tier::Recreate && rec.job.kind == WorkloadKind::VolcanoJob;
                if !acted && acting.is_none() && (recorded || !record_first) {
                    self.act(key, &tier, now);
                }
                if !recorded && recording.is_none() {
                    self.record(key, now);
                }
            }
            Phase::Barrier => {
                if rec.acting.is_some() {
                    return;
                }
                if self.at_barrier(key) {
                    self.set_phase(key, Phase::Release);
                    self.release(key, now);
                } else {
                    self.force_delete_stuck(key, now);
                    self.check_deadline(key, now);
                }
            }
            Phase::Release => {
                if rec.acting.is_none() {
                    self.release(key, now);
                }
            }
            Phase::Resume => {
                if self.resumed(key) {
                    self.finish(key, End::Resumed, now);
                } else {
                    self.force_delete_stuck(key, now);
                    self.check_deadline(key, now);
                }
            }
        }
    }

    pub(in crate::controller::core) fn set_phase(&mut self, key: &JobKey, phase: Phase) {
        if let Some(r) = self.recoveries.get_mut(key) {
            r.phase = phase;
            r.attempts = 0;
            r.retry_at = None;
            r.acting = None;
        }
    }

    pub(in crate::controller::core) fn act(&mut self, key: &JobKey, tier: &Tier, now: Now) {
        let Some(rec) = self.recoveries.get(key) else {
            return;
        };
        let job = rec.job.clone();
        let received = rec.received;
        let generation = rec.generation;
        let kind = match tier {
            Tier::Recreate => {
                // Level-triggered: a retry (an outcome failed or lost)
                // deletes only what is left of the pods the restart was
                // decided for, by uid; when none is left, it is done.
                let pods = self.store.job_pods(key);
                let live = |t: &PodTarget| {
                    pods.iter()
                        .any(|p| !p.deleting && *p.uid == *t.uid && *p.name == *t.name)
                };
                if rec.attempts > 0 && !rec.targets.is_empty() {
                    let left: Vec<PodTarget> =
                        rec.targets.iter().filter(|t| live(t)).cloned().collect();
                    if left.is_empty() {
                        if let Some(r) = self.recoveries.get_mut(key) {
                            r.acted = true;
                        }
                        self.dirty_jobs.insert(key.clone());
                        return;
                    }
                    if left.len() < rec.targets.len() {
                        let id = self.effect_for(
                            Waiting::Job(key.clone()),
                            EffectKind::DeletePods { job, pods: left },
                            None,
                        );
                        if let Some(r) = self.recoveries.get_mut(key) {
                            r.acting = Some(id);
                        }
                        return;
                    }
                }
                let targets: Vec<PodTarget> = pods
                    .iter()
                    .filter(|p| !p.deleting)
                    .map(|p| PodTarget::of(p))
                    .collect();
                if rec.targets.is_empty()
                    && let Some(r) = self.recoveries.get_mut(key)
                {
                    r.targets = targets;
                }
                if let Some(other) = self.foreign_pod(key, &job) {
                    // A job of the same name but another uid owns pods
                    // the selector would match: the decision is stale.
                    if let Some(r) = self.recoveries.get_mut(key) {
                        r.acting = Some(0);
                    }
                    self.job_done(key, 0, Outcome::Gone(other), now);
                    return;
                }
                // A TrainJob restarts through its JobSet.
                let target = self.store.restart_target(&job);
                EffectKind::RestartJob {
                    how: self.delete_all_for(key, &target, generation),
                    job: target,
                    pods_rv: self.store.pods_rv.clone(),
                }
            }
            Tier::PodFirst { pod } => EffectKind::DeletePods {
                job,
                pods: vec![pod.clone()],
            },
            Tier::ReplaceFaulty { pods } | Tier::NativeReplace { pods } => EffectKind::DeletePods {
                job,
                pods: pods.clone(),
            },
            Tier::InPlace => return,
        };
        let id = self.effect_for(Waiting::Job(key.clone()), kind, received);
        if let Some(r) = self.recoveries.get_mut(key) {
            r.acting = Some(id);
        }
    }

    /// A pod the job's selector matches that another job (same name,
    /// another uid) owns, if any.
    pub(in crate::controller::core) fn foreign_pod(
        &self,
        key: &JobKey,
        job: &JobRef,
    ) -> Option<String> {
        let uid = job.uid.as_deref()?;
        self.store
            .job_pods(key)
            .into_iter()
            .find(|p| p.job.uid.as_deref().is_some_and(|u| u != uid))
            .map(|p| {
                format!(
                    "pod {} belongs to another {} named {} (uid {}), not to the one decided for (uid {uid})",
                    p.name,
                    job.kind.as_str(),
                    job.name,
                    p.job.uid.as_deref().unwrap_or("?")
                )
            })
    }

    pub(in crate::controller::core) fn record(&mut self, key: &JobKey, _now: Now) {
        let Some(rec) = self.recoveries.get(key) else {
            return;
        };
        let released = match rec.tier {
            Tier::InPlace | Tier::ReplaceFaulty { .. } => rec.released,
            _ => rec.generation,
        };
        let record = restart_record(rec);
        let write = JobRecord {
            record,
            root_cause: rec.cause.root_cause.clone(),
            generation: rec.generation,
            released: released.max(rec.released),
            append: rec.append,
            // Records of this job's restarts never made go in the same
            // patch (their own taking back, at the requeue, may have failed).
            retract: if rec.append {
                self.unmade.get(key).cloned().unwrap_or_default()
            } else {
                Vec::new()
            },
        };
        let job = rec.job.clone();
        // On the critical path where the record is the restart (in place)
        // or goes before it (Volcano's Command waits for it).
        let received = rec.received.filter(|_| {
            rec.tier == Tier::InPlace
                || (rec.tier == Tier::Recreate && rec.job.kind == WorkloadKind::VolcanoJob)
        });
        let current = self.store.jobs.get(key).map(|j| kube::api::ObjectMeta {
            resource_version: j.resource_version.clone(),
            annotations: Some(j.annotations.clone()),
            ..Default::default()
        });
        let id = self.effect_for(
            Waiting::Job(key.clone()),
            EffectKind::Record {
                job,
                current,
                write,
            },
            received,
        );
        if let Some(r) = self.recoveries.get_mut(key) {
            r.recording = Some(id);
        }
    }

    pub(in crate::controller::core) fn release(&mut self, key: &JobKey, _now: Now) {
        let Some(rec) = self.recoveries.get(key) else {
            return;
        };
        let kind = EffectKind::Release {
            job: rec.job.clone(),
            generation: rec.generation,
        };
        let id = self.effect_for(Waiting::Job(key.clone()), kind, None);
        if let Some(r) = self.recoveries.get_mut(key) {
            r.acting = Some(id);
        }
    }

    /// Whether every pod of the job (as many as when the recovery started,
    /// replacements included) waits at the barrier.
    pub(in crate::controller::core) fn at_barrier(&self, key: &JobKey) -> bool {
        let Some(rec) = self.recoveries.get(key) else {
            return false;
        };
        // Pods being relisted may be gone or replaced: wait for the list.
        if self.store.relists.is_open(Watched::Pods) {
            return false;
        }
        let pods: Vec<_> = self
            .store
            .job_pods(key)
            .into_iter()
            .filter(|p| !p.deleting)
            .collect();
        pods.len() >= rec.expected
            && pods
                .iter()
                .all(|p| p.agent.is_some_and(|a| a.phase == AgentPhase::Waiting))
    }

    /// Whether every pod of the job runs and is Ready again (in-place
    /// tiers: past the barrier).
    pub(in crate::controller::core) fn resumed(&self, key: &JobKey) -> bool {
        let Some(rec) = self.recoveries.get(key) else {
            return false;
        };
        if self.store.relists.is_open(Watched::Pods) {
            return false;
        }
        let pods: Vec<_> = self
            .store
            .job_pods(key)
            .into_iter()
            .filter(|p| !p.deleting)
            .collect();
        let started = rec.started.timestamp();
        pods.len() >= rec.expected
            && pods.iter().all(|p| {
                p.running
                    && p.ready
                    && match rec.tier {
                        // Pods of the new generation: created since (and
                        // none the restart was decided for: creation
                        // times are seconds, and a pod made in the second
                        // of the restart is not new for that), or
                        // restarted in place since.
                        Tier::Recreate => {
                            p.created >= started - 1
                                && !rec.targets.iter().any(|t| *t.uid == *p.uid)
                        }
                        Tier::InPlace | Tier::ReplaceFaulty { .. } => {
                            p.agent.is_some_and(|a| a.phase == AgentPhase::Past)
                        }
                        _ => true,
                    }
            })
    }

    /// An effect of a job's recovery finished.
    pub(in crate::controller::core) fn job_done(
        &mut self,
        key: &JobKey,
        id: u64,
        outcome: Outcome,
        now: Now,
    ) {
        let Some(rec) = self.recoveries.get_mut(key) else {
            return;
        };
        let is_record = rec.recording == Some(id);
        if is_record {
            rec.recording = None;
        } else if rec.acting == Some(id) {
            rec.acting = None;
        } else {
            // An outcome of an earlier phase or tier: nothing to do with it.
            return;
        }
        match outcome {
            Outcome::Ok(how) => self.step_done(key, is_record, how, now),
            Outcome::Gone(why) => {
                let job = rec.job.clone();
                tracing::warn!(job = %job.id(), %why, "the job changed under a recovery; dropping it");
                if rec.made() {
                    let what = format!("the job changed under its recovery: {why}");
                    self.finish(key, End::NotResumed(what), now);
                } else {
                    self.job_event(
                        &job,
                        Notice::warning(
                            reasons::RESTART_SKIPPED,
                            "Restart",
                            format!("not restarted: {why}"),
                        ),
                    );
                    self.finish(key, End::Dropped, now);
                }
            }
            Outcome::NotLeader => {}
            Outcome::Failed(why) => {
                rec.attempts += 1;
                if rec.attempts >= MAX_ATTEMPTS {
                    let rec = rec.clone();
                    if !rec.made() && rec.cause.occurrence != 0 {
                        // Nothing was restarted: the fault is not lost.
                        // Its cause waits again and is decided anew after
                        // a backoff (an API brownout, a run of 429s).
                        self.requeue_cause(key, &rec, &why, now);
                        return;
                    }
                    if rec.made() {
                        let what = format!(
                            "a step after its restart failed {MAX_ATTEMPTS} times; rebound stops following this recovery: {why}"
                        );
                        self.finish(key, End::NotResumed(what), now);
                    } else {
                        self.job_event(
                            &rec.job,
                            Notice::warning(
                                reasons::RESTART_SKIPPED,
                                "Restart",
                                format!("restart failed {MAX_ATTEMPTS} times; giving up: {why}"),
                            ),
                        );
                        self.finish(key, End::Dropped, now);
                    }
                } else {
                    rec.retry_at = now.wall.checked_add_signed(backoff(rec.attempts));
                    tracing::warn!(job = %rec.job.id(), attempt = rec.attempts, %why, "recovery step failed; retrying");
                }
            }
        }
    }

    /// A recovery whose restart was never made after [`MAX_ATTEMPTS`]:
    /// its cause goes back to pending, decided again after
    /// [`REQUEUE_AFTER`], with an Event and a metric.
    fn requeue_cause(&mut self, key: &JobKey, rec: &Recovery, why: &str, now: Now) {
        let until = later(now.wall, REQUEUE_AFTER);
        tracing::warn!(job = %rec.job.id(), %why, %until, "restart failed {MAX_ATTEMPTS} times; its fault waits and is decided again");
        self.metrics.decision("restart_job", "Requeued");
        self.job_event(
            &rec.job,
            Notice::warning(
                reasons::RESTART_SKIPPED,
                "Restart",
                format!(
                    "restart failed {MAX_ATTEMPTS} times ({why}); the fault is decided again at {}",
                    until.to_rfc3339()
                ),
            ),
        );
        self.finish(key, End::Dropped, now);
        // Remembered (its cooldown holds) until the cluster can say
        // whether it was made after all ([`Core::resolve_requeued`]).
        let entry = Requeued {
            at: rec.started,
            not_before: until,
            targets: rec.targets.clone(),
            generation: (rec.tier == Tier::InPlace).then_some(rec.generation),
            job: rec.job.clone(),
        };
        let q = self.requeued.entry(key.clone()).or_default();
        q.push(entry);
        if q.len() > crate::policy::KEPT_RESTARTS {
            q.remove(0);
        }
        let id = rec.cause.occurrence;
        if self.current.contains_key(&id) {
            self.ledger.set(
                id,
                rec.cause.level,
                super::super::occurrence::Fate::Pending { until: Some(until) },
            );
        }
    }

    /// The restarts of `key` requeued after failing, judged once their
    /// last request can no longer land: made if the pods they aimed at are
    /// gone (in place: the job shows their generation), and then kept as
    /// restarts; otherwise not made: forgotten, not counted, and their
    /// record (written at once with the delete) taken back, so that no
    /// later leader reads their fault as handled. Should that write fail
    /// too, this process still knows (`unmade`), and its next record on the
    /// job takes it back.
    pub(in crate::controller::core) fn resolve_requeued(&mut self, key: &JobKey, now: Now) {
        let Some(q) = self.requeued.get_mut(key) else {
            return;
        };
        let (due, wait): (Vec<Requeued>, Vec<Requeued>) = std::mem::take(q)
            .into_iter()
            .partition(|r| r.not_before <= now.wall);
        *q = wait;
        if q.is_empty() {
            self.requeued.remove(key);
        }
        // The job's pods not being deleted, with when each was made.
        let live: Vec<(String, i64)> = self
            .store
            .job_pods(key)
            .iter()
            .filter(|p| !p.deleting)
            .map(|p| (p.uid.to_string(), p.created))
            .collect();
        let generation = self.generation_of(key);
        for r in due {
            let made = match r.generation {
                Some(g) => generation.current >= g,
                // Every pod it aimed at is gone, or was made after the
                // second of its decision (another leader's restart after
                // it covers its fault).
                None => {
                    let decided = r.at.timestamp();
                    !r.targets.is_empty()
                        && r.targets.iter().all(|t| {
                            live.iter()
                                .find(|(u, _)| *u == *t.uid)
                                .is_none_or(|(_, made)| *made > decided)
                        })
                }
            };
            if made {
                continue;
            }
            if let Some(kept) = self.recorded.get_mut(key) {
                kept.retain(|x| x.at != r.at);
                if kept.is_empty() {
                    self.recorded.remove(key);
                }
            }
            let unmade = self.unmade.entry(key.clone()).or_default();
            unmade.push(r.at);
            if unmade.len() > crate::policy::KEPT_RESTARTS {
                unmade.remove(0);
            }
            let write = JobRecord {
                record: crate::policy::RestartRecord {
                    at: r.at,
                    ..Default::default()
                },
                root_cause: None,
                generation: generation.current,
                released: generation.released,
                append: false,
                retract: vec![r.at],
            };
            self.effect(
                EffectKind::Record {
                    job: r.job,
                    current: None,
                    write,
                },
                None,
            );
        }
    }

    pub(in crate::controller::core) fn step_done(
        &mut self,
        key: &JobKey,
        record: bool,
        how: String,
        now: Now,
    ) {
        let Some(rec) = self.recoveries.get(key).cloned() else {
            return;
        };
        match rec.phase {
            Phase::Act => {
                if record {
                    self.store_record(key, &rec);
                    if rec.append
                        && let Some(p) = &rec.cause.policy
                    {
                        self.status.recovered(p, now.wall);
                    }
                    if rec.tier == Tier::InPlace {
                        self.restarted_event(&rec, &how);
                        if !rec.logs_saved {
                            self.save_logs(key, &rec);
                        }
                    }
                } else {
                    self.restarted_event(&rec, &how);
                    // Logs are read once the restart's request was
                    // answered, never before or beside it: the action has
                    // the API server to itself, and a pod being deleted
                    // (gracefully) still serves its logs.
                    if !rec.logs_saved {
                        self.save_logs(key, &rec);
                    }
                }
                let Some(r) = self.recoveries.get_mut(key) else {
                    return;
                };
                if record {
                    r.recorded = true;
                    r.logs_saved = r.logs_saved || r.tier == Tier::InPlace;
                } else {
                    r.acted = true;
                    r.logs_saved = true;
                }
                r.attempts = 0;
                if !(r.acted && r.recorded) {
                    // The other half may have waited for this one.
                    self.dirty_jobs.insert(key.clone());
                    return;
                }
                let (phase, deadline) = match r.tier {
                    Tier::InPlace | Tier::ReplaceFaulty { .. } => {
                        (Phase::Barrier, Some(later(r.started, r.cfg.fallback_after)))
                    }
                    Tier::PodFirst { .. } => (Phase::Resume, Some(later(r.started, r.job_after))),
                    _ => (Phase::Resume, None),
                };
                r.deadline = deadline;
                self.set_phase(key, phase);
                self.advance(key, now);
            }
            Phase::Release => {
                // Released: kept until the job's annotations show it, so
                // that a recovery ending before the watch delivers it does
                // not release the same generation again.
                let w = self.written_gen.entry(key.clone()).or_default();
                w.current = w.current.max(rec.generation);
                w.released = w.released.max(rec.generation);
                self.set_phase(key, Phase::Resume);
                self.advance(key, now);
            }
            Phase::Barrier | Phase::Resume => {}
        }
    }

    /// Remember a record this process wrote until the job's annotations
    /// show it (cooldowns and budgets read both).
    pub(in crate::controller::core) fn store_record(&mut self, key: &JobKey, rec: &Recovery) {
        // Kept apart until the job's annotations show it: a watch event
        // older than the write (the operator's status update that crossed
        // it) must not make the core forget a restart it made.
        let written = self.written_gen.entry(key.clone()).or_default();
        written.current = written.current.max(rec.generation);
        if !rec.tier.in_place() {
            written.released = written.released.max(rec.generation);
        }
        if rec.append {
            self.remember_restart(key, rec);
        }
    }

    /// Remember a restart from the moment it is decided, until the job's
    /// annotations show it: cooldowns, budgets and "handled" hold from the
    /// decision, not from a record write that may never succeed.
    pub(in crate::controller::core) fn remember_restart(&mut self, key: &JobKey, rec: &Recovery) {
        let r = self.recorded.entry(key.clone()).or_default();
        if !r.iter().any(|x| x.at == rec.started) {
            r.push(RestartRecord {
                at: rec.started,
                infrastructure: rec.cause.infrastructure,
                pod_only: matches!(rec.tier, Tier::PodFirst { .. }),
                generation: Some(rec.generation),
                tier: Some(rec.tier.name().to_string()),
                occurrence: occurrence_key(rec.cause.occurrence),
                ..Default::default()
            });
        }
    }
}

impl Recovery {
    /// Whether the restart it stands for was made, as far as this process
    /// knows: its delete answered (or, in place and replacing the faulty
    /// pods, its record written: that write is what restarts the pods), or
    /// a tier before this one's.
    pub fn made(&self) -> bool {
        if !self.append {
            // A fallback to the next tier: the restart was made by the
            // tier before (a fallback follows a tier whose steps were all
            // answered), and this tier is part of it.
            return true;
        }
        match self.tier {
            Tier::InPlace => self.recorded,
            // The record restarts the pods on healthy nodes in place, the
            // delete moves those on faulty ones: either is the restart.
            Tier::ReplaceFaulty { .. } => self.recorded || self.acted,
            _ => self.acted,
        }
    }
}

impl Core {
    /// A recovery ends without its restart made (its term ended, or its
    /// requests kept failing): the restart remembered at its decision is
    /// forgotten, so its fault is decided again, by this term or the next
    /// one, from what the job's own records show.
    pub(in crate::controller::core) fn forget_unmade(&mut self, key: &JobKey, rec: &Recovery) {
        if rec.made() || !rec.append {
            return;
        }
        if let Some(r) = self.recorded.get_mut(key) {
            r.retain(|x| x.at != rec.started);
            if r.is_empty() {
                self.recorded.remove(key);
            }
        }
    }
}

/// The restart record a recovery writes on its job.
fn restart_record(rec: &Recovery) -> RestartRecord {
    RestartRecord {
        at: rec.started,
        infrastructure: rec.cause.infrastructure,
        pod_only: matches!(rec.tier, Tier::PodFirst { .. }),
        generation: Some(rec.generation),
        tier: Some(rec.tier.name().to_string()),
        pod: match &rec.tier {
            Tier::PodFirst { pod } => Some(format!("{}/{}", pod.name, pod.uid)),
            _ => None,
        },
        pods: u32::try_from(rec.expected).ok(),
        occurrence: occurrence_key(rec.cause.occurrence),
    }
}

/// How a restart record names its occurrence (none for a recovery resumed
/// from a record, whose cause is that record).
pub fn occurrence_key(id: super::super::occurrence::OccurrenceId) -> Option<String> {
    (id != 0).then(|| format!("{id:032x}"))
}
