//! Volcano's scheduler (vc-scheduler), for the pods of Volcano Jobs: it
//! schedules in sessions, one every `--schedule-period` (1 s by default),
//! admits a job's pods only as a gang (once at least the PodGroup's
//! `minMember`, the job's `minAvailable`, of its pods exist), and binds
//! them through its own client, limited to 2000 requests a second, burst
//! 2000 (volcano-sh/volcano `cmd/scheduler/app/options/options.go`:
//! `defaultSchedulerPeriod`, `defaultQPS`, `defaultBurst`). kube-scheduler
//! and its 50 binds a second do not place these pods.
//!
//! Not modelled: the PodGroup object itself (the gang's size is read from
//! the Volcano Job), queues and their capacity, the enqueue action's own
//! session before the controller creates the pods (volcano-controller
//! creates a job's pods once its PodGroup left `Pending`), preemption and
//! the other actions and plugins.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject};
use kube::{Client, ResourceExt};

use super::super::ratelimit::ClientLimit;
use super::super::volcano;
use super::{BoundPod, Bucket, PendingPod};

/// Annotation naming a pod's PodGroup (the gang).
pub const GROUP_ANNOTATION: &str = "scheduling.k8s.io/group-name";

/// How the Volcano scheduler runs.
#[derive(Debug, Clone, PartialEq)]
pub struct GangConfig {
    /// Its client's limit (its binds).
    pub limit: ClientLimit,
    /// Time between two sessions; zero for a session on every pass.
    pub period: Duration,
}

/// The gang of a pod: `namespace/group`, and the Volcano Job that owns it
/// (`namespace`, `name`), if the pod names them.
pub(super) fn gang_of(pod: &Pod) -> Option<(String, String, String)> {
    let ann = pod.metadata.annotations.as_ref()?;
    let group = ann.get(GROUP_ANNOTATION)?;
    let ns = pod.namespace().unwrap_or_default();
    let job = ann
        .get(volcano::JOB_NAME)
        .cloned()
        .or_else(|| pod.labels().get(volcano::JOB_NAME).cloned())
        .unwrap_or_default();
    Some((format!("{ns}/{group}"), ns, job))
}

/// What the Volcano scheduler keeps between passes.
#[derive(Debug)]
pub(super) struct Gangs {
    cfg: GangConfig,
    bucket: Bucket,
    /// The gang's minimum, by `namespace/group`, once read.
    min: HashMap<String, i64>,
    /// Gangs whose minimum was asked for.
    asked: HashSet<String>,
    /// Gangs admitted by the last session.
    admitted: HashSet<String>,
    next_session: Instant,
}

impl Gangs {
    pub(super) fn new(cfg: GangConfig, now: Instant) -> Self {
        Self {
            bucket: Bucket::new(cfg.limit.qps, cfg.limit.burst, now),
            cfg,
            min: HashMap::new(),
            asked: HashSet::new(),
            admitted: HashSet::new(),
            next_session: now,
        }
    }

    /// Whether the gang's minimum must be read (first time seen).
    pub(super) fn needs_min(&mut self, group: &str) -> bool {
        !self.min.contains_key(group) && self.asked.insert(group.to_owned())
    }

    /// The gang's minimum is known (1 if it could not be read).
    pub(super) fn set_min(&mut self, group: String, min: i64) {
        self.min.insert(group, min.max(1));
    }

    /// Runs a session if one is due at `now`: admits every gang with at
    /// least its minimum of pods, waiting or placed. Returns when the next
    /// session is due.
    pub(super) fn session(
        &mut self,
        now: Instant,
        pending: &HashMap<String, PendingPod>,
        bound: &HashMap<String, BoundPod>,
    ) -> Instant {
        if now < self.next_session {
            return self.next_session;
        }
        let mut count: HashMap<&str, i64> = HashMap::new();
        for g in pending
            .values()
            .filter_map(|p| p.group.as_deref())
            .chain(bound.values().filter_map(|b| b.group.as_deref()))
        {
            *count.entry(g).or_default() += 1;
        }
        self.admitted = count
            .into_iter()
            .filter(|(g, n)| self.min.get(*g).is_some_and(|m| n >= m))
            .map(|(g, _)| g.to_owned())
            .collect();
        self.next_session = if self.cfg.period.is_zero() {
            now
        } else {
            now + self.cfg.period
        };
        self.next_session
    }

    /// Whether the last session admitted the gang.
    pub(super) fn admitted(&self, group: &str) -> bool {
        self.admitted.contains(group)
    }

    /// Takes one bind of the Volcano scheduler's client, if its rate
    /// allows it now.
    pub(super) fn take(&mut self, now: Instant) -> bool {
        self.bucket.take(now)
    }

    /// How long until its client allows the next bind.
    pub(super) fn wait(&self) -> Duration {
        self.bucket.wait()
    }
}

/// Reads a gang's minimum: the Volcano Job's `spec.minAvailable` (its
/// replicas when unset); 1 when the job cannot be read.
pub(super) async fn read_min(client: Client, ns: String, job: String) -> i64 {
    let api: Api<DynamicObject> = Api::namespaced_with(client, &ns, &volcano::job_resource());
    match api.get(&job).await {
        Ok(j) => j.data["spec"]["minAvailable"].as_i64().unwrap_or_else(|| {
            j.data["spec"]["tasks"].as_array().map_or(1, |t| {
                t.iter().map(|t| t["replicas"].as_i64().unwrap_or(1)).sum()
            })
        }),
        Err(e) => {
            tracing::debug!(job = %job, error = %e, "vc-scheduler: gang size unknown, taken as 1");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(group: &str) -> PendingPod {
        PendingPod {
            ns: "ml".into(),
            name: "p".into(),
            requests: HashMap::new(),
            node_selector: Default::default(),
            tolerations: Vec::new(),
            group: Some(group.into()),
        }
    }

    #[test]
    fn a_gang_is_admitted_at_a_session_once_its_minimum_exists() {
        let t0 = Instant::now();
        let mut g = Gangs::new(
            GangConfig {
                limit: ClientLimit::new(2000.0, 2000),
                period: Duration::from_secs(1),
            },
            t0,
        );
        assert!(g.needs_min("ml/vj"));
        assert!(!g.needs_min("ml/vj"), "asked once");
        g.set_min("ml/vj".into(), 3);
        let mut p: HashMap<String, PendingPod> = (0..2)
            .map(|i| (format!("ml/p{i}"), pending("ml/vj")))
            .collect();
        let b = HashMap::new();
        assert_eq!(g.session(t0, &p, &b), t0 + Duration::from_secs(1));
        assert!(!g.admitted("ml/vj"), "2 of 3 pods: not a gang yet");
        p.insert("ml/p2".into(), pending("ml/vj"));
        // The third pod arrives between sessions: admitted at the next one.
        g.session(t0 + Duration::from_millis(500), &p, &b);
        assert!(!g.admitted("ml/vj"), "no session before the period");
        g.session(t0 + Duration::from_secs(1), &p, &b);
        assert!(g.admitted("ml/vj"));
        // Its binds go through the scheduler's own client: 2000 at once.
        let now = t0 + Duration::from_secs(1);
        assert!((0..2000).all(|_| g.take(now)));
        assert!(!g.take(now));
    }
}
