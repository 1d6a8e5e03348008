//! The restarts the model saw made, and the invariant over them (design
//! §5): "every action is idempotent: a fault seen twice, a watch replayed,
//! or two operator replicas racing never restart a job twice within its
//! cooldown".
//!
//! A restart is one decision (a recovery, known by the time it was
//! decided, which is what the job's record and its cooldown count from).
//! It is *made* when the request that restarts the whole job lands: the
//! delete of its pods (at once, or a retry of what is left of them), or,
//! in place, the record that raises the generation (a pod on a faulty node
//! deleted beside an in-place restart whose record never lands moved that
//! pod, but restarted no job). Fallbacks and retries of one decision are
//! the same restart.
//!
//! Two restarts made of one job incarnation, decided less than the
//! cooldown apart, break the invariant, with one exception the cluster
//! cannot avoid: the first one's record never reached the job before the
//! second was decided by another leadership (its term ended, or its
//! controller died, between its delete and its record: nothing anywhere
//! remembers it; the leadership that decided it remembers it from the
//! decision) *and* the
//! second was decided for a fault that truly happened after the first
//! landed (a new fault, which the first could not have covered). A fault
//! seen again, replayed, copied, or dated later than it happened never
//! justifies it.

use super::super::super::effect::{EffectId, EffectKind};
use super::super::super::occurrence::OccurrenceId;
use super::*;

/// What an emitted job effect belongs to: the job incarnation (uid) and
/// the decision time (model seconds) of its recovery.
#[derive(Clone, Debug)]
pub struct Owner {
    pub uid: String,
    pub decided: i64,
    pub pod_only: bool,
    /// The recovery's tier when the effect was emitted.
    pub tier: &'static str,
    /// When the cause truly happened (model seconds), where the model
    /// knows it.
    pub cause_at: Option<i64>,
    /// The leadership that decided it: (replica, its process, term).
    pub by: (usize, u64, u64),
    /// The occurrence it was decided for (0: resumed from a record).
    pub occurrence: OccurrenceId,
}

/// A restart made: its decision landed on the job.
#[derive(Clone, Debug)]
pub struct Made {
    pub uid: String,
    pub job: String,
    pub decided: i64,
    pub landed: i64,
    pub pod_only: bool,
    pub what: &'static str,
    pub cause_at: Option<i64>,
    pub by: (usize, u64, u64),
}

/// The restarts of one schedule.
#[derive(Default)]
pub struct Restarts {
    /// Emitted job effects, by (replica, effect id).
    pub owners: BTreeMap<(usize, EffectId), Owner>,
    pub made: Vec<Made>,
    /// When each record reached its job, by (uid, decided).
    pub records: BTreeMap<(String, i64), i64>,
    /// How much of the model's `applied` was looked at.
    pub seen_applied: usize,
    /// Occurrences for which a request that disrupts a job landed (any
    /// tier, a pod's restart included).
    pub acted_for: BTreeSet<OccurrenceId>,
}

impl Sim {
    /// Note the recovery a job effect belongs to, as it is emitted.
    pub(super) fn note_owner(&mut self, r: usize, e: &Effect) {
        let job = match &e.kind {
            EffectKind::RestartJob { job, .. }
            | EffectKind::DeletePods { job, .. }
            | EffectKind::Record { job, .. } => job,
            _ => return,
        };
        let key = (
            job.namespace.clone(),
            job.kind.as_str().to_string(),
            job.name.clone(),
        );
        let Some(rec) = self.cores[r].recoveries.get(&key) else {
            return;
        };
        let Some(uid) = rec.job.uid.clone() else {
            return;
        };
        let decided = (rec.started - self.m.wall()).num_seconds() + self.m.t;
        let pod_only = rec.tier.name() == "Pod";
        let cause_at = self.cause_time(&rec.cause.fault);
        self.restarts.owners.insert(
            (r, e.id),
            Owner {
                uid,
                decided,
                pod_only,
                tier: rec.tier.name(),
                cause_at,
                by: (r, self.processes[r], e.term),
                occurrence: rec.cause.occurrence,
            },
        );
    }

    /// What of an effect about to be applied would disrupt the job now.
    pub(super) fn disrupts(&self, e: &Effect) -> Option<&'static str> {
        match &e.kind {
            EffectKind::RestartJob { job, .. } => {
                let uid = job.uid.as_deref()?;
                self.m
                    .pods
                    .values()
                    .any(|p| {
                        p["metadata"]["labels"][model::JOBSET_UID] == uid
                            && p["metadata"]["deletionTimestamp"].is_null()
                    })
                    .then_some("delete all")
            }
            EffectKind::DeletePods { pods, .. } => pods
                .iter()
                .any(|t| {
                    self.m.pods.get(&t.name).is_some_and(|p| {
                        p["metadata"]["uid"] == t.uid.as_str()
                            && p["metadata"]["deletionTimestamp"].is_null()
                    })
                })
                .then_some("delete pods"),
            EffectKind::Record { job, write, .. } => {
                let in_place = matches!(
                    write.record.tier.as_deref(),
                    Some("InPlace") | Some("ReplaceFaulty")
                );
                let raises = self
                    .m
                    .jobs
                    .get(&job.name)
                    .map(|j| {
                        let a: BTreeMap<String, String> =
                            serde_json::from_value(j["metadata"]["annotations"].clone())
                                .unwrap_or_default();
                        crate::inplace::Generation::from_annotations(&a).current
                    })
                    .is_some_and(|g| g < write.generation);
                (in_place && raises).then_some("in place")
            }
            _ => None,
        }
    }

    /// An effect of replica `r` landed, having disrupted the job (`what`).
    pub(super) fn landed(&mut self, r: usize, e: &Effect, what: &'static str) {
        let Some(o) = self.restarts.owners.get(&(r, e.id)).cloned() else {
            return;
        };
        self.restarts.acted_for.insert(o.occurrence);
        let whole_job = match &e.kind {
            EffectKind::DeletePods { .. } => matches!(o.tier, "Recreate" | "NativeReplace"),
            _ => true,
        };
        if !whole_job {
            return;
        }
        let job = match &e.kind {
            EffectKind::RestartJob { job, .. }
            | EffectKind::DeletePods { job, .. }
            | EffectKind::Record { job, .. } => job.name.clone(),
            _ => String::new(),
        };
        self.restarts.made.push(Made {
            uid: o.uid,
            job,
            decided: o.decided,
            landed: self.m.t,
            pod_only: o.pod_only,
            what,
            cause_at: o.cause_at,
            by: o.by,
        });
    }

    /// When a fault truly happened, in model seconds: a trusted line's
    /// `k`-th occurrence from the model's own record of it; a pod's exit
    /// from its termination time; a tenant's Event from the time it gives
    /// (which it may forge, but only towards the past).
    fn cause_time(&self, f: &crate::fault::Fault) -> Option<i64> {
        let secs = |t: chrono::DateTime<chrono::Utc>| (t - self.m.wall()).num_seconds() + self.m.t;
        if f.trusted && f.source == crate::fault::FaultSource::NvidiaXid {
            let key = (
                f.node.clone()?,
                f.code.clone(),
                f.device.clone()?,
                f.first_seen.timestamp_millis(),
            );
            let k = usize::try_from(f.count.max(1)).ok()?;
            return self.m.line_times.get(&key)?.get(k - 1).copied();
        }
        if f.source == crate::fault::FaultSource::PodExit || !f.trusted {
            return Some(secs(f.last_seen));
        }
        None
    }

    /// When the record of the restart of `uid` decided at `decided`
    /// reached the job (model seconds), if it did.
    fn recorded_at(&self, uid: &str, decided: i64) -> Option<i64> {
        self.restarts
            .records
            .get(&(uid.to_string(), decided))
            .copied()
    }

    /// Note the records that reached a job, with when they did.
    pub(super) fn note_records(&mut self) {
        for a in &self.m.applied[self.restarts.seen_applied..] {
            if let model::Applied::Record { uid, at, .. } = a {
                self.restarts
                    .records
                    .entry((uid.clone(), *at))
                    .or_insert(self.m.t);
            }
        }
        self.restarts.seen_applied = self.m.applied.len();
    }

    /// No job incarnation restarted twice within its cooldown.
    pub(super) fn check_cooldowns(&self) {
        let mut by_uid: BTreeMap<&str, BTreeMap<i64, &Made>> = BTreeMap::new();
        for m in self.restarts.made.iter().filter(|m| !m.pod_only) {
            by_uid
                .entry(m.uid.as_str())
                .or_default()
                .entry(m.decided)
                .or_insert(m);
        }
        for decisions in by_uid.values() {
            let v: Vec<&&Made> = decisions.values().collect();
            for w in v.windows(2) {
                let (a, b) = (w[0], w[1]);
                if b.decided - a.decided >= self.cooldown {
                    continue;
                }
                // Forgotten only by another leadership: the one that
                // decided a restart holds its cooldown from the decision,
                // whether or not its record ever landed.
                let forgotten = a.by != b.by
                    && self
                        .recorded_at(&a.uid, a.decided)
                        .is_none_or(|t| t > b.decided);
                // Kubernetes and the model keep times to the second: a
                // fault of the very second the first restart landed may
                // have come after it.
                let new_fault = b.cause_at.is_some_and(|t| t >= a.landed);
                assert!(
                    forgotten && new_fault,
                    "job {} restarted twice within its cooldown: decided at t={} ({}, landed t={}, record {:?}) and t={} ({}, landed t={}, its fault at {:?})\n{}",
                    b.job,
                    a.decided,
                    a.what,
                    a.landed,
                    self.recorded_at(&a.uid, a.decided),
                    b.decided,
                    b.what,
                    b.landed,
                    b.cause_at,
                    self.tail()
                );
            }
        }
    }
}
