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
//!
//! [`steps`] carries a recovery through its phases, [`tiers`] handles its
//! deadlines and end, [`resume`] picks recoveries up from the cluster.

mod end;
mod release;
mod resume;
mod side_deletes;
mod steps;
mod tiers;

pub use end::End;
pub use steps::occurrence_key;

pub use release::Releasing;
pub use side_deletes::SideDeletes;

use super::effect::{DeleteAll, EffectKind, PodTarget};
use super::occurrence::OccurrenceId;
use super::store::JobKey;
use super::{Core, Now};
use crate::api::{RecoveryTier, WorkloadKind};
use crate::controller::core::hashing::HashSet;
use crate::fault::{Fault, Level};
use crate::policy::RestartConfig;
use crate::recover::Notice;
use crate::workload::JobRef;
use chrono::{DateTime, Utc};
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
    pub(in crate::controller::core) fn bumps(&self) -> bool {
        !matches!(self, Tier::PodFirst { .. } | Tier::NativeReplace { .. })
    }

    /// Whether pods restart in place (and wait at the barrier).
    pub(in crate::controller::core) fn in_place(&self) -> bool {
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
    /// Pod deletes beside the steps that failed, to be tried again.
    pub side: SideDeletes,
    /// Followed only to tell its ending: a whole-job restart an earlier
    /// leader made and did not see to its end (resume.rs). It absorbs no
    /// fault: a newer one ends it (`JobNotResumed`) and is decided as if
    /// no recovery were under way.
    pub follow_only: bool,
    /// Software faults absorbed before the job's processes started again
    /// (before the Resume phase of a tier that restarts every pod): once
    /// the job runs again they count as handled by this restart.
    pub covered: HashSet<OccurrenceId>,
}

impl Recovery {
    /// Whether it has a timer due by `now` (a deadline, a retry, or the
    /// give-up time).
    pub fn wakes_by(&self, now: DateTime<Utc>) -> bool {
        (self.acting.is_none() || self.recording.is_none())
            && (self.retry_at.is_some_and(|t| t <= now)
                || self.side.retry_at.is_some_and(|t| t <= now)
                || self.deadline.is_some_and(|t| t <= now)
                || self.give_up <= now
                || matches!(self.phase, Phase::Resume | Phase::Barrier))
    }
}

/// Retries of a failed request: 1 s doubling to 30 s, at most this many.
pub(super) const MAX_ATTEMPTS: u32 = 12;

/// How long the cause of a restart that was never made waits before it is
/// decided again (after [`MAX_ATTEMPTS`] failed requests): until its last
/// request, whose answer may have been lost, can no longer land.
pub const REQUEUE_AFTER: Duration = super::LANDING_BOUND;

/// A restart whose requests failed [`MAX_ATTEMPTS`] times: whether it was
/// made after all is read from the cluster once its last request can no
/// longer land (`not_before`): its pods gone (or, in place, its
/// generation on the job) say it was.
#[derive(Clone, Debug)]
pub struct Requeued {
    /// Its record's time (the decision).
    pub at: DateTime<Utc>,
    pub not_before: DateTime<Utc>,
    /// The pods its delete aimed at (by uid).
    pub targets: Vec<PodTarget>,
    /// In place: the generation its record raises.
    pub generation: Option<u64>,
    pub job: JobRef,
}

pub(super) fn backoff(attempts: u32) -> chrono::Duration {
    chrono::Duration::seconds(1i64 << attempts.min(5)).min(chrono::Duration::seconds(30))
}

pub(super) fn later(now: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(d)
        .ok()
        .and_then(|d| now.checked_add_signed(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// How a job's pods are deleted at once, for restart `generation`.
pub fn delete_all(job: &JobRef, generation: u64) -> DeleteAll {
    match job.kind {
        WorkloadKind::VolcanoJob => DeleteAll::VolcanoCommand { generation },
        _ => DeleteAll::Selector(crate::workload::pod_selector(job).unwrap_or_default()),
    }
}

impl Core {
    /// How the job's pods go at once: [`delete_all`], except for a JobSet
    /// (a TrainJob's JobSet), which restarts through the child Jobs its
    /// pods name (their Job's name and uid labels), as JobSet restarts
    /// itself: its Job controller then counts no failure and JobSet spends
    /// no restart (a deleted pod of a Job that allows failures would be
    /// counted, and with `backoffLimit` reached, the Job, then the JobSet
    /// and TrainJob fail). A JobSet whose pods name no Job (none left)
    /// falls back to the selector.
    pub(in crate::controller::core) fn delete_all_for(
        &self,
        key: &JobKey,
        target: &JobRef,
        generation: u64,
    ) -> DeleteAll {
        let jobs = self.child_jobs(key, target.kind);
        if !jobs.is_empty() {
            return DeleteAll::ChildJobs {
                selector: crate::workload::pod_selector(target).unwrap_or_default(),
                jobs,
            };
        }
        delete_all(target, generation)
    }

    /// The child Jobs a whole-job restart of `key` goes through: for a
    /// JobSet (a TrainJob's JobSet), the Jobs its pods name; none for
    /// other kinds, or when no pod names its Job.
    pub(in crate::controller::core) fn child_jobs(
        &self,
        key: &JobKey,
        kind: WorkloadKind,
    ) -> Vec<crate::recover::ChildJob> {
        if !crate::workload::operator::restarts_through_child_jobs(kind) {
            return Vec::new();
        }
        let jobs: std::collections::BTreeSet<crate::recover::ChildJob> = self
            .store
            .job_pods(key)
            .iter()
            .filter_map(|p| {
                Some(crate::recover::ChildJob {
                    name: p.labels.get(crate::recover::JOB_NAME_LABEL)?.to_string(),
                    uid: p.labels.get(crate::recover::JOB_UID_LABEL)?.to_string(),
                })
            })
            .collect();
        jobs.into_iter().collect()
    }

    /// Start a recovery and take its first step at once (the hot path:
    /// the first request leaves in this step).
    #[allow(clippy::too_many_arguments)]
    pub(in crate::controller::core) fn start_recovery(
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
        // After the fallback deadline (in-place tiers), never at it: a
        // give-up checked first would skip the fallback.
        let wait = cfg.fallback_after.max(Duration::from_secs(600));
        let give_up = later(now.wall, cfg.fallback_after.saturating_add(wait));
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
            forced: HashSet::default(),
            logs_saved: false,
            targets: Vec::new(),
            covered: HashSet::default(),
            side: SideDeletes::default(),
            follow_only: false,
        };
        if let Some(v) = &self.clusterd {
            v.set_recovering_job(
                &job,
                rec.cause.fault.node.as_deref(),
                rec.cause.fault.last_seen,
            );
        }
        // Remembered from the decision on (the cooldown holds even if no
        // record write ever succeeds).
        self.remember_restart(&key, &rec);
        self.recoveries.insert(key.clone(), rec);
        self.advance(&key, now);
        generation
    }

    /// Write an Event about a job.
    pub(in crate::controller::core) fn job_event(&mut self, job: &JobRef, notice: Notice) {
        self.effect(
            EffectKind::Event {
                about: super::effect::About::Job(job.clone()),
                notice,
            },
            None,
        );
    }
}
