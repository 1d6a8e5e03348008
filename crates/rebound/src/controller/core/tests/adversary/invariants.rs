//! The invariants of the adversarial simulation, checked at every step
//! (and on every effect as it is emitted), apart from the actors.

use super::super::super::effect::PodTarget;
use super::super::super::occurrence::Fate;
use super::super::super::store::JobKey;
use super::*;
use crate::fault::Domain;

/// How long a trusted fault may stay pending after the schedule settled
/// (the longest hold a schedule can cause: a cooldown, a requeue).
const HOLD_BOUND: i64 = 3600;

impl Sim {
    fn key_of(job: &crate::workload::JobRef) -> JobKey {
        (
            job.namespace.clone(),
            job.kind.as_str().to_string(),
            job.name.clone(),
        )
    }

    /// An effect as it is emitted: nothing destructive because of tenant
    /// input (a node, or another namespace's job).
    pub(super) fn judge_effect(&mut self, r: usize, e: &Effect) {
        let core = &self.cores[r];
        match &e.kind {
            EffectKind::Cordon { node, .. } => {
                assert!(
                    self.ever_faulty.contains(node),
                    "node {node} cordoned without a trusted fault ever on it (tenant input)\n{}",
                    self.tail()
                );
                assert!(
                    self.cordonable.contains(node),
                    "node {node} cordoned, yet no episode of its trusted faults was ever at a cordoning level (an old episode counted)\n{}",
                    self.tail()
                );
            }
            EffectKind::RestartJob { job, .. } | EffectKind::Record { job, .. } => {
                let key = Self::key_of(job);
                let key = if key.1 == "JobSet" || core.recoveries.contains_key(&key) {
                    key
                } else {
                    return;
                };
                if let Some(rec) = core.recoveries.get(&key) {
                    let d = Domain::of(&rec.cause.fault);
                    assert!(
                        rec.cause.occurrence == 0 || d.may_touch(&job.namespace),
                        "{} restarted for a fault of {d} (tenant input from another namespace)\n{}",
                        job.name,
                        self.tail()
                    );
                }
            }
            EffectKind::DeletePods { job, pods } => {
                let key = Self::key_of(job);
                let tier = core.recoveries.get(&key).map(|r| r.tier.name());
                for p in pods {
                    self.judge_delete(tier, p);
                }
            }
            _ => {}
        }
    }

    /// A pod deleted beside a restart of the whole job: the failed pod
    /// itself, a pod stuck on a dead node, or a pod on a node that carried
    /// a trusted fault.
    fn judge_delete(&self, tier: Option<&str>, p: &PodTarget) {
        if matches!(tier, Some("Recreate") | Some("Pod")) || p.grace_seconds == Some(0) {
            return;
        }
        if self.failed_pods.contains(&p.name) {
            return;
        }
        let node = self
            .m
            .pods
            .get(&p.name)
            .and_then(|v| v["spec"]["nodeName"].as_str())
            .map(str::to_string);
        if let Some(node) = node {
            assert!(
                self.ever_faulty.contains(&node),
                "pod {} deleted on node {node}, which never carried a trusted fault (tenant input)\n{}",
                p.name,
                self.tail()
            );
        }
    }

    /// The invariants over the cluster and the replicas, after a step.
    pub fn check(&self) {
        assert!(
            self.m.separations_in_window() <= model::MAX_SEPARATED,
            "breaker exceeded: {:?} at t={}\n{}",
            self.m
                .applied
                .iter()
                .filter(|a| matches!(a, model::Applied::Cordon { .. }))
                .collect::<Vec<_>>(),
            self.m.t,
            self.tail()
        );
        // No occurrence restarts a job twice.
        // (A record taken back, its restart never made, counts for none.)
        let mut seen: BTreeSet<(&str, &str)> = BTreeSet::new();
        for a in &self.m.applied {
            match a {
                model::Applied::Record {
                    uid,
                    occurrence: Some(o),
                    pod_only: false,
                    ..
                } => assert!(
                    seen.insert((uid, o)),
                    "occurrence {o} restarted job {uid} twice\n{}",
                    self.tail()
                ),
                model::Applied::Retract {
                    uid,
                    occurrence: Some(o),
                } => {
                    seen.remove(&(uid.as_str(), o.as_str()));
                }
                _ => {}
            }
        }
        self.check_cooldowns();
        // Every raised in-place generation is followed (released, or
        // falling back) by the leader once it acts.
        if let Some(l) = self.leader {
            let core = &self.cores[l];
            if core.acting() {
                for name in self.m.jobs.keys() {
                    let key = (model::NS.to_string(), "JobSet".to_string(), name.clone());
                    let g = core.generation_of(&key);
                    assert!(
                        g.current <= g.released
                            || core.recoveries.contains_key(&key)
                            || core.releasing.contains_key(&key),
                        "job {name}: generation {} raised, {} released, and nothing follows it\n{}",
                        g.current,
                        g.released,
                        self.tail()
                    );
                }
            }
        }
        // Per-tenant memory is bounded.
        for core in &self.cores {
            let events = core
                .store
                .event_faults
                .values()
                .filter(|e| e.fault.namespace.as_deref() == Some(EVIL));
            let (n, bytes) = events.fold((0usize, 0usize), |(n, b), e| {
                (n + 1, b + e.fault.message.as_ref().map_or(0, String::len))
            });
            assert!(
                n <= crate::fault::event::MAX_TENANT_EVENTS,
                "{n} Events of one tenant tracked\n{}",
                self.tail()
            );
            assert!(
                bytes <= n * crate::fault::event::MAX_TENANT_MESSAGE,
                "{bytes} message bytes kept for {n} Events of one tenant\n{}",
                self.tail()
            );
            let kept: usize = core
                .current
                .values()
                .filter(|o| o.fault.namespace.as_deref() == Some(EVIL))
                .map(|o| o.fault.message.as_ref().map_or(0, String::len))
                .sum();
            assert!(
                kept <= n * crate::fault::event::MAX_TENANT_MESSAGE,
                "{kept} message bytes cloned into one tenant's occurrences ({n} Events)\n{}",
                self.tail()
            );
            assert!(
                core.engine.classifier.tenant_history(EVIL) <= crate::classify::MAX_KEYS_PER_TENANT
            );
        }
    }

    /// After settling: every trusted fault present is acted on, held with
    /// a stated reason, or superseded, within a bound; nothing in flight;
    /// every generation released.
    pub fn check_settled(&self) {
        let core = &self.cores[self.leader.unwrap_or(0)];
        assert!(core.ready(), "not ready after settling");
        let now = self.m.wall();
        for (id, o) in &core.current {
            if !o.fault.trusted {
                continue;
            }
            match core.ledger().get(*id).map(|e| e.fate.clone()) {
                None => panic!("trusted occurrence {id:x} has no fate\n{}", self.tail()),
                Some(Fate::Pending { until: None }) => panic!(
                    "trusted occurrence {id:x} waits for nothing\n{}",
                    self.tail()
                ),
                Some(Fate::Pending { until: Some(t) }) => assert!(
                    (t - now).num_seconds() <= HOLD_BOUND,
                    "trusted occurrence {id:x} held until {t}\n{}",
                    self.tail()
                ),
                Some(_) => {}
            }
        }
        // No fault lost: an occurrence the leader says it acted on has a
        // restart that landed for it (this term's or an earlier one's,
        // its request or its record), or one still under way. A restart
        // whose requests kept failing goes back to waiting.
        let mut recorded: BTreeSet<&str> = BTreeSet::new();
        for a in &self.m.applied {
            match a {
                model::Applied::Record {
                    occurrence: Some(o),
                    ..
                } => {
                    recorded.insert(o);
                }
                model::Applied::Retract {
                    occurrence: Some(o),
                    ..
                } => {
                    recorded.remove(o.as_str());
                }
                _ => {}
            }
        }
        for (id, o) in &core.current {
            let Some(Fate::Acted { .. }) = core.ledger().get(*id).map(|e| e.fate.clone()) else {
                continue;
            };
            let key = super::super::super::jobs::occurrence_key(*id).unwrap_or_default();
            assert!(
                self.restarts.acted_for.contains(id)
                    || recorded.contains(key.as_str())
                    || core.recoveries.values().any(|r| r.cause.occurrence == *id),
                "occurrence {id:x} ({} {} of {:?}/{:?} on {:?}) acted on, yet no restart for it ever landed and none is under way (a fault lost)\n{}",
                o.fault.source,
                o.fault.code,
                o.fault.namespace,
                o.fault.pod,
                o.fault.node,
                self.tail()
            );
        }
        // The model's ground truth: every trusted fault line a node
        // carries is a trusted occurrence of the leader with a fate (a
        // tenant's copy neither replaced it nor dropped it).
        for (node, lines) in &self.m.lines {
            for (code, device, at, n) in lines {
                let Some(first) = chrono::DateTime::from_timestamp_millis(*at) else {
                    continue;
                };
                let mut f =
                    crate::fault::Fault::new(crate::fault::FaultSource::NvidiaXid, code, first);
                f.node = Some(node.clone());
                f.device = Some(device.clone());
                f.trusted = true;
                let id = super::super::super::occurrence::line_occurrence(&f, *n);
                let o = core.current.get(&id);
                assert!(
                    o.is_some_and(|o| o.fault.trusted),
                    "the trusted line {code} on {node} (n={n}) is not a trusted occurrence of the leader: {:?}\n{}",
                    o.map(|o| o.fault.domain()),
                    self.tail()
                );
                assert!(
                    core.ledger().get(id).is_some(),
                    "the trusted line {code} on {node} has no fate\n{}",
                    self.tail()
                );
            }
        }
        assert_eq!(core.in_flight(), 0, "effects left in flight");
        for name in self.m.jobs.keys() {
            let (current, released) = self.m.released(name);
            assert_eq!(
                current,
                released,
                "job {name}: generation {current} never released\n{}",
                self.tail()
            );
        }
    }

    /// The last steps of the schedule, for a failure's report.
    pub(super) fn tail(&self) -> String {
        let from = self.trace.len().saturating_sub(
            std::env::var("REBOUND_SIM_TAIL")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(15),
        );
        self.trace[from..].join("\n")
    }
}
