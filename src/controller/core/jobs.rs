//! A job's recovery, from the decision to the job running again: its tier
//! (pod first, in place, replace the faulty pods, recreate), its phases
//! (act, record, barrier, release, resume), fallbacks to the next tier,
//! retries of failed requests, force-deletion of pods stuck on dead nodes.
//!
//! Level-triggered: [`Core::advance`] looks at the recovery and at the
//! job's pods as they are now and emits what is missing, so an outcome
//! lost, a request failed or a controller restarted in the middle leads to
//! the same end. A recovery recorded on the job (its generation and
//! history) is resumed by a new leader ([`Core::resume_recoveries`]).

use super::effect::{DeleteAll, EffectKind, JobRecord, Outcome, PodTarget, describe};
use super::occurrence::{Fate, OccurrenceId};
use super::pods::AgentPhase;
use super::store::{JobKey, job_key};
use super::{Core, Now, Scope, Waiting};
use crate::api::{RecoveryTier, WorkloadKind};
use crate::fault::{Fault, Level};
use crate::policy::{RestartConfig, RestartRecord};
use crate::recover::{Notice, reasons};
use crate::workload::JobRef;
use chrono::{DateTime, Utc};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// How a recovery restarts the job.
#[derive(Clone, Debug, PartialEq)]
pub enum Tier {
    /// Delete the failed pod only (graded escalation's first step); the
    /// job follows if it is not running again within `jobAfter`.
    PodFirst { pod: PodTarget },
    /// Raise the generation: every pod restarts in place.
    InPlace,
    /// Delete the pods on faulty nodes, restart the others in place.
    ReplaceFaulty { pods: Vec<PodTarget> },
    /// A JobSet with its own in-place restart: delete the pods on faulty
    /// nodes and let JobSet restart the rest.
    NativeReplace { pods: Vec<PodTarget> },
    /// Delete every pod at once (Volcano: a Command).
    Recreate,
}

impl Tier {
    /// The name in records and Events.
    pub fn name(&self) -> &'static str {
        match self {
            Tier::PodFirst { .. } => "Pod",
            Tier::InPlace => "InPlace",
            Tier::ReplaceFaulty { .. } => "ReplaceFaulty",
            Tier::NativeReplace { .. } => "NativeReplace",
            Tier::Recreate => "Recreate",
        }
    }

    /// Whether this tier moves the job to a new restart generation.
    fn bumps(&self) -> bool {
        !matches!(self, Tier::PodFirst { .. } | Tier::NativeReplace { .. })
    }

    /// Whether pods restart in place (and wait at the barrier).
    fn in_place(&self) -> bool {
        matches!(self, Tier::InPlace | Tier::ReplaceFaulty { .. })
    }
}

/// Where a recovery stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Delete pods (or create the Volcano Command) and write the restart
    /// record, both at once: the delete is the first request after the
    /// fault, and the record (which for in-place tiers is what restarts the
    /// pods) follows without waiting for it. Each is retried until done.
    Act,
    /// Every pod must wait at the barrier before the generation is released.
    Barrier,
    /// Lift the barrier.
    Release,
    /// Wait until every pod runs and is Ready again.
    Resume,
}

/// What caused a recovery.
#[derive(Clone, Debug)]
pub struct Cause {
    pub occurrence: OccurrenceId,
    pub fault: Fault,
    pub level: Level,
    pub policy: Option<String>,
    pub reasons: String,
    pub root_cause: Option<String>,
    pub infrastructure: bool,
}

/// A recovery under way.
#[derive(Clone, Debug)]
pub struct Recovery {
    pub job: JobRef,
    /// The generation this recovery runs the job at.
    pub generation: u64,
    /// `restart-released` before it (what in-place tiers keep writing).
    pub released: u64,
    pub tier: Tier,
    pub phase: Phase,
    pub started: DateTime<Utc>,
    /// Fallback (in-place tiers) or escalation (pod first) time.
    pub deadline: Option<DateTime<Utc>>,
    /// When rebound stops waiting for the job to run again.
    pub give_up: DateTime<Utc>,
    /// Pods the job had when the recovery started.
    pub expected: usize,
    pub cause: Cause,
    pub received: Option<Instant>,
    /// The action (delete, Command, release) in flight.
    pub acting: Option<super::effect::EffectId>,
    /// The record in flight.
    pub recording: Option<super::effect::EffectId>,
    /// The action of this phase is done.
    pub acted: bool,
    /// The record is written.
    pub recorded: bool,
    pub retry_at: Option<DateTime<Utc>>,
    pub attempts: u32,
    pub cfg: RestartConfig,
    pub logs: Option<(u32, u32)>,
    pub job_after: Duration,
    /// Append a record (a new restart) or only update the generation
    /// (a fallback within the same restart).
    pub append: bool,
    /// Tiers left to fall back to.
    pub fallbacks: Vec<RecoveryTier>,
    /// Pods force-deleted already (uids).
    pub forced: HashSet<String>,
    /// Logs were asked for (once a recovery).
    pub logs_saved: bool,
    /// The pods a recreate was decided for (a retry deletes what is left
    /// of them, never a pod recreated since).
    pub targets: Vec<PodTarget>,
}

impl Recovery {
    /// Whether it has a timer due by `now` (a deadline, a retry, or the
    /// give-up time).
    pub fn wakes_by(&self, now: DateTime<Utc>) -> bool {
        (self.acting.is_none() || self.recording.is_none())
            && (self.retry_at.is_some_and(|t| t <= now)
                || self.deadline.is_some_and(|t| t <= now)
                || self.give_up <= now
                || matches!(self.phase, Phase::Resume | Phase::Barrier))
    }
}

/// Retries of a failed request: 1 s doubling to 30 s, at most this many.
const MAX_ATTEMPTS: u32 = 12;

fn backoff(attempts: u32) -> chrono::Duration {
    chrono::Duration::seconds(1i64 << attempts.min(5)).min(chrono::Duration::seconds(30))
}

fn later(now: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(d)
        .ok()
        .and_then(|d| now.checked_add_signed(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// How a job's pods are deleted at once.
pub fn delete_all(job: &JobRef) -> DeleteAll {
    match job.kind {
        WorkloadKind::VolcanoJob => DeleteAll::VolcanoCommand,
        _ => DeleteAll::Selector(crate::workload::pod_selector(job).unwrap_or_default()),
    }
}

impl Core {
    /// Start a recovery and take its first step at once (the hot path:
    /// the first request leaves in this step).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start_recovery(
        &mut self,
        key: JobKey,
        job: JobRef,
        tier: Tier,
        cause: Cause,
        cfg: RestartConfig,
        logs: Option<(u32, u32)>,
        job_after: Duration,
        received: Option<Instant>,
        now: Now,
    ) -> u64 {
        let g = self.generation_of(&key);
        let generation = if tier.bumps() {
            g.current + 1
        } else {
            g.current
        };
        let expected = self
            .store
            .job_pods(&key)
            .iter()
            .filter(|p| !p.deleting)
            .count();
        let fallbacks = match &tier {
            Tier::InPlace | Tier::ReplaceFaulty { .. } => cfg
                .tiers
                .iter()
                .skip_while(|t| t.as_str() != tier.name())
                .skip(1)
                .copied()
                .collect(),
            _ => Vec::new(),
        };
        let phase = Phase::Act;
        let acted = tier == Tier::InPlace;
        let give_up = later(now.wall, cfg.fallback_after.max(Duration::from_secs(600)));
        let rec = Recovery {
            job: job.clone(),
            generation,
            released: g.released,
            tier,
            phase,
            started: now.wall,
            deadline: None,
            give_up,
            expected,
            cause,
            received,
            acting: None,
            recording: None,
            acted,
            recorded: false,
            retry_at: None,
            attempts: 0,
            cfg,
            logs,
            job_after,
            append: true,
            fallbacks,
            forced: HashSet::new(),
            logs_saved: false,
            targets: Vec::new(),
        };
        if let Some(v) = &self.clusterd {
            v.set_recovering_job(
                &job,
                rec.cause.fault.node.as_deref(),
                rec.cause.fault.last_seen,
            );
        }
        self.recoveries.insert(key.clone(), rec);
        self.advance(&key, now);
        generation
    }

    /// Take the next step of a job's recovery, if one is due.
    pub(super) fn advance(&mut self, key: &JobKey, now: Now) {
        if !self.acting() {
            return;
        }
        let Some(rec) = self.recoveries.get(key) else {
            return;
        };
        if rec.retry_at.is_some_and(|t| t > now.wall) {
            return;
        }
        if rec.give_up <= now.wall {
            let what = format!(
                "the job is not running again {} after its restart; rebound stops following this recovery",
                crate::api::duration::format(Duration::from_secs(
                    (now.wall - rec.started).num_seconds().max(0) as u64
                ))
            );
            let job = rec.job.clone();
            self.job_event(
                &job,
                Notice::warning(reasons::RESTART_SKIPPED, "Restart", what),
            );
            self.finish(key, false, now);
            return;
        }
        let (phase, tier) = (rec.phase, rec.tier.clone());
        match phase {
            Phase::Act => {
                let (acted, acting, recorded, recording) =
                    (rec.acted, rec.acting, rec.recorded, rec.recording);
                if !acted && acting.is_none() {
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
                    self.finish(key, true, now);
                } else {
                    self.force_delete_stuck(key, now);
                    self.check_deadline(key, now);
                }
            }
        }
    }

    fn set_phase(&mut self, key: &JobKey, phase: Phase) {
        if let Some(r) = self.recoveries.get_mut(key) {
            r.phase = phase;
            r.attempts = 0;
            r.retry_at = None;
            r.acting = None;
        }
    }

    fn act(&mut self, key: &JobKey, tier: &Tier, now: Now) {
        let Some(rec) = self.recoveries.get(key) else {
            return;
        };
        let job = rec.job.clone();
        let received = rec.received;
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
                    .map(|p| PodTarget {
                        namespace: p.namespace.to_string(),
                        name: p.name.to_string(),
                        uid: p.uid.to_string(),
                        grace_seconds: None,
                    })
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
                EffectKind::RestartJob {
                    how: delete_all(&job),
                    job,
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
        let first = self.recoveries.get_mut(key).map(|r| {
            r.acting = Some(id);
            std::mem::replace(&mut r.logs_saved, true)
        });
        // Logs are read beside the restart, never before it: a pod being
        // deleted (gracefully) or restarted in place still serves them.
        if first == Some(false)
            && let Some(rec) = self.recoveries.get(key).cloned()
        {
            self.save_logs(key, &rec);
        }
    }

    /// A pod the job's selector matches that another job (same name,
    /// another uid) owns, if any.
    fn foreign_pod(&self, key: &JobKey, job: &JobRef) -> Option<String> {
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

    fn record(&mut self, key: &JobKey, _now: Now) {
        let Some(rec) = self.recoveries.get(key) else {
            return;
        };
        let released = match rec.tier {
            Tier::InPlace | Tier::ReplaceFaulty { .. } => rec.released,
            _ => rec.generation,
        };
        let record = RestartRecord {
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
        };
        let write = JobRecord {
            record,
            root_cause: rec.cause.root_cause.clone(),
            generation: rec.generation,
            released: released.max(rec.released),
            append: rec.append,
        };
        let job = rec.job.clone();
        let received = rec.received.filter(|_| rec.tier == Tier::InPlace);
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

    fn release(&mut self, key: &JobKey, _now: Now) {
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
    fn at_barrier(&self, key: &JobKey) -> bool {
        let Some(rec) = self.recoveries.get(key) else {
            return false;
        };
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
    fn resumed(&self, key: &JobKey) -> bool {
        let Some(rec) = self.recoveries.get(key) else {
            return false;
        };
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
                        // Pods of the new generation: created since, or
                        // restarted in place since.
                        Tier::Recreate => p.created >= started - 1,
                        Tier::InPlace | Tier::ReplaceFaulty { .. } => {
                            p.agent.is_some_and(|a| a.phase == AgentPhase::Past)
                        }
                        _ => true,
                    }
            })
    }

    /// A deadline passed: fall back to the next tier, or escalate a pod
    /// restart to a job restart.
    fn check_deadline(&mut self, key: &JobKey, now: Now) {
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

    fn fall_back(&mut self, key: &JobKey, now: Now) {
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
            self.job_event(
                &rec.job,
                Notice::warning(reasons::RESTART_SKIPPED, "Restart", note),
            );
            self.finish(key, false, now);
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
        }
        self.advance(key, now);
    }

    /// The graded first step did not bring the job back in `jobAfter`:
    /// restart the whole job (a new restart, counted), by the policy's
    /// tiers.
    fn escalate_pod_first(&mut self, key: &JobKey, now: Now) {
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
    fn force_delete_stuck(&mut self, key: &JobKey, now: Now) {
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
                namespace: p.namespace.to_string(),
                name: p.name.to_string(),
                uid: p.uid.to_string(),
                grace_seconds: Some(0),
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
        self.effect(
            EffectKind::DeletePods {
                job: job.clone(),
                pods: stuck,
            },
            None,
        );
        self.job_event(
            &job,
            Notice::warning(reasons::POD_FORCE_DELETED, "Restart", note),
        );
    }

    /// An effect of a job's recovery finished.
    pub(super) fn job_done(&mut self, key: &JobKey, id: u64, outcome: Outcome, now: Now) {
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
                self.job_event(
                    &job,
                    Notice::warning(
                        reasons::RESTART_SKIPPED,
                        "Restart",
                        format!("not restarted: {why}"),
                    ),
                );
                self.finish(key, false, now);
            }
            Outcome::NotLeader => {}
            Outcome::Failed(why) => {
                rec.attempts += 1;
                if rec.attempts >= MAX_ATTEMPTS {
                    let job = rec.job.clone();
                    self.job_event(
                        &job,
                        Notice::warning(
                            reasons::RESTART_SKIPPED,
                            "Restart",
                            format!("restart failed {MAX_ATTEMPTS} times; giving up: {why}"),
                        ),
                    );
                    self.finish(key, false, now);
                } else {
                    rec.retry_at = now.wall.checked_add_signed(backoff(rec.attempts));
                    tracing::warn!(job = %rec.job.id(), attempt = rec.attempts, %why, "recovery step failed; retrying");
                }
            }
        }
    }

    fn step_done(&mut self, key: &JobKey, record: bool, how: String, now: Now) {
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
                }
                let Some(r) = self.recoveries.get_mut(key) else {
                    return;
                };
                if record {
                    r.recorded = true;
                    r.logs_saved = r.logs_saved || r.tier == Tier::InPlace;
                } else {
                    r.acted = true;
                }
                r.attempts = 0;
                if !(r.acted && r.recorded) {
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
                self.set_phase(key, Phase::Resume);
                self.advance(key, now);
            }
            Phase::Barrier | Phase::Resume => {}
        }
    }

    /// Remember a record this process wrote until the job's annotations
    /// show it (cooldowns and budgets read both).
    fn store_record(&mut self, key: &JobKey, rec: &Recovery) {
        // Kept apart until the job's annotations show it: a watch event
        // older than the write (the operator's status update that crossed
        // it) must not make the core forget a restart it made.
        let written = self.written_gen.entry(key.clone()).or_default();
        written.current = written.current.max(rec.generation);
        if !rec.tier.in_place() {
            written.released = written.released.max(rec.generation);
        }
        if rec.append {
            let r = self.recorded.entry(key.clone()).or_default();
            if !r.iter().any(|x| x.at == rec.started) {
                r.push(RestartRecord {
                    at: rec.started,
                    infrastructure: rec.cause.infrastructure,
                    pod_only: matches!(rec.tier, Tier::PodFirst { .. }),
                    generation: Some(rec.generation),
                    tier: Some(rec.tier.name().to_string()),
                    ..Default::default()
                });
            }
        }
    }

    fn restarted_event(&mut self, rec: &Recovery, how: &str) {
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

    fn save_logs(&mut self, key: &JobKey, rec: &Recovery) {
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
    fn finish(&mut self, key: &JobKey, resumed: bool, now: Now) {
        let Some(rec) = self.recoveries.remove(key) else {
            return;
        };
        if let Some(v) = &self.clusterd {
            v.job_done(&rec.job);
        }
        if resumed {
            let secs = (now.wall - rec.cause.fault.last_seen)
                .to_std()
                .unwrap_or_default()
                .as_secs_f64();
            self.metrics.time_to_resume.observe(secs);
            tracing::info!(job = %rec.job.id(), tier = rec.tier.name(), seconds = secs, "job running again");
        }
        let absorbed: Vec<OccurrenceId> = self
            .current
            .iter()
            .filter(|(id, o)| {
                self.ledger
                    .get(**id)
                    .is_some_and(|e| e.fate == Fate::Absorbed)
                    && match &o.scope {
                        Scope::Pod(j) => job_key(j) == *key,
                        Scope::Node | Scope::NodeEvent => true,
                    }
            })
            .map(|(id, _)| *id)
            .collect();
        for id in absorbed {
            if let Some(e) = self.ledger.get(id) {
                let level = e.level;
                self.ledger.set(id, level, Fate::Pending { until: None });
            }
            self.decide_current(id, now);
        }
    }

    /// A new leader finds recoveries recorded on the jobs and goes on with
    /// them: a generation raised but not released is an in-place restart
    /// waiting at its barrier; a pod-only restart younger than `jobAfter`
    /// waits for the job to run again.
    pub(super) fn resume_recoveries(&mut self, now: Now) {
        let jobs: Vec<(JobKey, super::store::JobInfo)> = self
            .store
            .jobs
            .iter()
            .filter(|(k, _)| !self.recoveries.contains_key(*k))
            .map(|(k, j)| (k.clone(), j.clone()))
            .collect();
        for (key, info) in jobs {
            let Some(last) = info.history.last() else {
                continue;
            };
            let Ok(kind) = key.1.parse::<WorkloadKind>() else {
                continue;
            };
            let policy = self.policy_of(&key);
            let cfg = policy
                .as_ref()
                .map(|p| p.restart.clone())
                .unwrap_or_default();
            let job_after = policy.as_ref().map(|p| p.job_after).unwrap_or_default();
            let mut job = self
                .store
                .job_pods(&key)
                .first()
                .map(|p| (*p.job).clone())
                .unwrap_or_else(|| JobRef::new(kind, &key.0, &key.2, None));
            job.uid = info.uid.clone();
            let (tier, phase, deadline) = if info.generation.current > info.generation.released {
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
                let Some(pod) = pod else { continue };
                (
                    Tier::PodFirst { pod },
                    Phase::Resume,
                    Some(later(last.at, job_after)),
                )
            } else {
                continue;
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
                generation: info.generation.current,
                released: info.generation.released,
                tier,
                phase,
                started: last.at,
                deadline,
                give_up: later(last.at, cfg.fallback_after.max(Duration::from_secs(600))),
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
                forced: HashSet::new(),
                logs_saved: true,
                targets: Vec::new(),
                cfg,
            };
            self.recoveries.insert(key.clone(), rec);
            self.dirty_jobs.insert(key);
        }
    }

    /// The job's restart generation: what its annotations say, or what
    /// this process wrote if they do not show it yet.
    pub(super) fn generation_of(&self, key: &JobKey) -> crate::inplace::Generation {
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
    pub(super) fn job_seen(&mut self, key: &JobKey, info: &super::store::JobInfo) {
        let recreated = self
            .store
            .jobs
            .get(key)
            .is_some_and(|old| old.uid.is_some() && info.uid.is_some() && old.uid != info.uid);
        if recreated {
            self.recorded.remove(key);
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

    /// Write an Event about a job.
    pub(super) fn job_event(&mut self, job: &JobRef, notice: Notice) {
        self.effect(
            EffectKind::Event {
                about: super::effect::About::Job(job.clone()),
                notice,
            },
            None,
        );
    }
}
