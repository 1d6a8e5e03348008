//! Hang detection: a job whose progress signal (an annotation on the job
//! or any of its pods) stands still longer than its policy's
//! `hang.noProgressFor` is a fault. Each hang is an occurrence named by
//! the job and the start of its clock, so it is restarted once; a job
//! still silent after its restart is hung anew (its clock restarts with
//! the restart).

use super::occurrence;
use super::store::JobKey;
use super::{Core, Now, Occurrence, Scope};
use crate::api::WorkloadKind;
use crate::controller::core::hashing::{HashMap, HashSet};
use crate::fault::{Fault, FaultSource};
use crate::policy::{CompiledPolicy, Hang, RestartRecord};
use crate::workload::JobRef;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// A job's progress signal as last seen.
#[derive(Debug, Clone)]
struct Progress {
    /// The annotation's value on the job itself (pods keep theirs in the
    /// pod store).
    job_value: Option<String>,
    /// When the value on the job or on any of its pods last changed.
    changed: DateTime<Utc>,
}

/// Progress clocks and the policy chosen per job.
#[derive(Debug, Default)]
pub struct HangBook {
    progress: HashMap<JobKey, Progress>,
    /// Jobs under a `requireProgress` policy: since when all their pods run.
    running_since: HashMap<JobKey, DateTime<Utc>>,
    /// The policy selected for each job: the periodic scans ask for every
    /// job, and selection matches labels against every policy.
    chosen: HashMap<JobKey, Option<Arc<CompiledPolicy>>>,
    /// Jobs with a hang occurrence now.
    hung: HashSet<JobKey>,
}

impl HangBook {
    /// The job's policy choice may have changed (its labels, its pods).
    pub fn forget_choice(&mut self, key: &JobKey) {
        self.chosen.remove(key);
    }

    /// Policies changed: every choice may have.
    pub fn forget_all_choices(&mut self) {
        self.chosen.clear();
    }

    /// A job is gone.
    pub fn forget_job(&mut self, key: &JobKey) {
        self.chosen.remove(key);
        self.progress.remove(key);
        self.running_since.remove(key);
    }
}

/// When a job's hang clock started, if it runs at all: at its last
/// progress change (or its last whole-job restart, if later); for a job
/// that never reported progress only under `requireProgress`, from when
/// all its pods were seen running.
pub fn hang_since(
    progress: Option<DateTime<Utc>>,
    running_since: Option<DateTime<Utc>>,
    require_progress: bool,
    history: &[RestartRecord],
) -> Option<DateTime<Utc>> {
    let start = match (progress, running_since) {
        (Some(p), _) => p,
        (None, Some(r)) if require_progress => r,
        _ => return None,
    };
    Some(hang_clock(start, history))
}

/// The later of the last progress change and the last whole-job restart.
pub fn hang_clock(progress_changed: DateTime<Utc>, history: &[RestartRecord]) -> DateTime<Utc> {
    history
        .iter()
        .filter(|r| !r.pod_only)
        .map(|r| r.at)
        .fold(progress_changed, DateTime::max)
}

/// The fault of a job hung since `since`, carrying the job's identity.
pub fn hang_fault(
    key: &JobKey,
    uid: Option<&str>,
    since: DateTime<Utc>,
    idle: Duration,
    now: DateTime<Utc>,
) -> Fault {
    let mut f = Fault::new(FaultSource::Hang, "NoProgress", now);
    f.first_seen = since;
    f.last_seen = since;
    f.namespace = Some(key.0.clone());
    f.uid = Some(uid.map_or_else(|| format!("{}/{}", key.1, key.2), str::to_string));
    f.trusted = true;
    f.message = Some(format!(
        "no progress for {}",
        crate::api::duration::format(Duration::from_secs(idle.as_secs()))
    ));
    f
}

impl Core {
    /// The policy covering a known job (by its own labels and its first
    /// pod's), remembered until the job, its pods or the policies change.
    pub(super) fn policy_of(&mut self, key: &JobKey) -> Option<Arc<CompiledPolicy>> {
        if let Some(p) = self.hang.chosen.get(key) {
            return p.clone();
        }
        let kind = key.1.parse::<WorkloadKind>().ok()?;
        let empty = BTreeMap::new();
        let labels = self.store.jobs.get(key).map_or(&empty, |j| &j.labels);
        let pod_labels = self
            .store
            .pods_by_job
            .get(key)
            .and_then(|names| names.first())
            .and_then(|n| self.store.pod(&key.0, n))
            .map(|p| p.labels.to_map());
        let chosen = self
            .engine
            .policies
            .select(crate::policy::WorkloadRef {
                kind,
                namespace: &key.0,
                labels,
                pod_labels: pod_labels.as_ref(),
            })
            .chosen;
        self.hang.chosen.insert(key.clone(), chosen.clone());
        chosen
    }

    fn hang_of(&mut self, key: &JobKey) -> Option<Hang> {
        self.policy_of(key).and_then(|p| p.hang.clone())
    }

    /// A pod reporting progress was seen: a changed value (or a new pod's
    /// first one) is progress of its job.
    pub(super) fn pod_progress(
        &mut self,
        ns: &str,
        name: &str,
        old: Vec<(String, String)>,
        now: Now,
    ) {
        let Some(pod) = self.store.pod(ns, name) else {
            return;
        };
        let job = super::store::job_key(&pod.job);
        let Some(hang) = self.hang_of(&job) else {
            return;
        };
        let Some(pod) = self.store.pod(ns, name) else {
            return;
        };
        let Some(value) = pod.progress_value(&hang.annotation) else {
            return;
        };
        let before = old
            .iter()
            .find(|(k, _)| *k == hang.annotation)
            .map(|(_, v)| v.as_str());
        if before == Some(value) {
            return;
        }
        self.hang
            .progress
            .entry(job)
            .and_modify(|p| p.changed = now.wall)
            .or_insert(Progress {
                job_value: None,
                changed: now.wall,
            });
    }

    /// A job object was seen: a changed progress annotation on it is
    /// progress.
    pub(super) fn job_progress(&mut self, key: &JobKey, now: Now) {
        let Some(hang) = self.hang_of(key) else {
            return;
        };
        let Some(v) = self
            .store
            .jobs
            .get(key)
            .and_then(|j| j.annotations.get(&hang.annotation))
            .cloned()
        else {
            return;
        };
        let e = self.hang.progress.entry(key.clone()).or_insert(Progress {
            job_value: None,
            changed: now.wall,
        });
        if e.job_value.as_ref() != Some(&v) {
            e.job_value = Some(v);
            e.changed = now.wall;
        }
    }

    /// Lasting faults escalate with time (`lastsFor`): node occurrences are
    /// decided again; the same level is dropped as a replay.
    pub(super) fn rescan_lasting(&mut self, now: Now) {
        if !self.acting() {
            return;
        }
        let ids: Vec<occurrence::OccurrenceId> = self
            .current
            .iter()
            .filter(|(_, o)| o.fault.trusted && matches!(o.scope, Scope::Node | Scope::NodeEvent))
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.decide_current(id, now);
        }
    }

    /// Find hung jobs; each hang becomes an occurrence of its job.
    pub(super) fn scan_hangs(&mut self, now: Now) {
        let store = &self.store;
        self.hang
            .progress
            .retain(|k, _| store.jobs.contains_key(k) || store.pods_by_job.contains_key(k));
        if !self.engine.policies.iter().any(|p| p.hang.is_some()) {
            self.hang.running_since.clear();
            for key in std::mem::take(&mut self.hang.hung) {
                self.set_carrier(hang_carrier(&key), Vec::new(), now);
            }
            return;
        }
        let keys: Vec<JobKey> = self.store.pods_by_job.keys().cloned().collect();
        let mut watched = Vec::new();
        for k in keys {
            if let Some(h) = self.hang_of(&k) {
                let running = self.store.job_running(&k);
                watched.push((k, h, running));
            }
        }
        let waiting: HashSet<&JobKey> = watched
            .iter()
            .filter(|(_, h, running)| h.require_progress && *running)
            .map(|(k, _, _)| k)
            .collect();
        self.hang.running_since.retain(|k, _| waiting.contains(k));
        let mut hung_now = HashSet::default();
        for (key, hang, running) in watched {
            if !running {
                continue;
            }
            let started = hang.require_progress.then(|| {
                *self
                    .hang
                    .running_since
                    .entry(key.clone())
                    .or_insert(now.wall)
            });
            let progress = self.hang.progress.get(&key).map(|p| p.changed);
            let history = self.history(&key);
            let Some(since) = hang_since(progress, started, hang.require_progress, &history) else {
                continue;
            };
            let idle = (now.wall - since).to_std().unwrap_or(Duration::ZERO);
            if idle <= hang.limit {
                continue;
            }
            let uid = self.store.jobs.get(&key).and_then(|j| j.uid.clone());
            let f = hang_fault(&key, uid.as_deref(), since, idle, now.wall);
            let Ok(kind) = key.1.parse::<WorkloadKind>() else {
                continue;
            };
            let job = self
                .store
                .job_pods(&key)
                .first()
                .map(|p| p.job.clone())
                .unwrap_or_else(|| Arc::new(JobRef::new(kind, &key.0, &key.2, uid.clone())));
            let id = occurrence::hang_occurrence(&format!("{}/{}/{}", key.0, key.1, key.2), since);
            let occ = Occurrence {
                id,
                fault: f,
                scope: Scope::Pod(job),
                received: Some(now.mono),
            };
            hung_now.insert(key.clone());
            self.set_carrier(hang_carrier(&key), vec![occ], now);
        }
        for key in std::mem::take(&mut self.hang.hung) {
            if !hung_now.contains(&key) {
                self.set_carrier(hang_carrier(&key), Vec::new(), now);
            }
        }
        self.hang.hung = hung_now;
    }
}

fn hang_carrier(key: &JobKey) -> String {
    format!("hang/{}/{}/{}", key.0, key.1, key.2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap_or_default()
    }

    fn restart(secs: i64, pod_only: bool) -> RestartRecord {
        RestartRecord {
            at: at(secs),
            pod_only,
            ..Default::default()
        }
    }

    #[test]
    fn hang_clock_restarts_with_the_job_not_with_a_pod() {
        assert_eq!(hang_clock(at(10), &[]), at(10));
        assert_eq!(hang_clock(at(10), &[restart(5, false)]), at(10));
        assert_eq!(
            hang_clock(at(10), &[restart(5, false), restart(20, false)]),
            at(20)
        );
        assert_eq!(hang_clock(at(10), &[restart(30, true)]), at(10));
    }

    #[test]
    fn hangs_of_two_jobs_since_the_same_instant_are_two_occurrences() {
        let a = occurrence::hang_occurrence("ml/PyTorchJob/a", at(1));
        let b = occurrence::hang_occurrence("ml/PyTorchJob/b", at(1));
        assert_ne!(a, b);
        assert_eq!(a, occurrence::hang_occurrence("ml/PyTorchJob/a", at(1)));
        let job = ("ml".to_string(), "PyTorchJob".to_string(), "a".to_string());
        let f = hang_fault(&job, Some("u-1"), at(1), Duration::from_secs(5), at(6));
        assert_eq!((f.first_seen, f.uid.as_deref()), (at(1), Some("u-1")));
    }

    #[test]
    fn a_job_that_never_reported_progress_is_hung_only_when_the_policy_requires_progress() {
        assert_eq!(hang_since(Some(at(10)), None, false, &[]), Some(at(10)));
        assert_eq!(
            hang_since(Some(at(10)), Some(at(2)), true, &[]),
            Some(at(10))
        );
        assert_eq!(hang_since(None, Some(at(2)), false, &[]), None);
        assert_eq!(hang_since(None, Some(at(2)), true, &[]), Some(at(2)));
        assert_eq!(
            hang_since(None, Some(at(2)), true, &[restart(7, false)]),
            Some(at(7))
        );
        assert_eq!(hang_since(None, None, true, &[]), None);
    }
}
