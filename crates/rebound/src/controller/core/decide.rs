//! From an occurrence to what happens to each job it concerns: classify,
//! find the jobs (only pods that existed when it happened), recognise what
//! was handled already (a recovery under way absorbs it; a restart in the
//! job's history after it handled it), ask the policy engine, choose the
//! tier, check the job's own retry limit, and start the recovery — or say
//! why not, or hold it until its cooldown ends.

use super::effect::{EffectKind, PodTarget};
use super::jobs::{Cause, Phase, Tier};
use super::occurrence::{Fate, OccurrenceId};
use super::store::{JobKey, job_key};
use super::{Core, Now, Scope};
use crate::api::WorkloadKind;
use crate::expr::{JobView, NodeView};
use crate::fault::{Fault, Level};
use crate::policy::{JobAction, JobDecision, JobInput, RestartRecord, Skip};
use crate::recover::{Notice, reasons};
use crate::workload::JobRef;
use chrono::{DateTime, Utc};
use std::sync::Arc;
use std::time::Duration;

/// Kubernetes writes termination and transition times to the second: a
/// restart made in the same second as a fault's (truncated) time may have
/// come before it. Only a restart a whole second later surely handled it.
pub fn handled_before(fault_time: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(fault_time.timestamp() + 1, 0).unwrap_or(fault_time)
}

impl Core {
    /// The CEL `node` variable for a fault's node: its current fault level
    /// (its highest trusted fault, docs/cel.md), not the level rebound
    /// cordoned it at (none for a node it did not cordon).
    pub(super) fn node_view(&self, node: Option<&str>) -> Option<NodeView> {
        let n = self.store.nodes.get(node?)?;
        Some(NodeView {
            name: n.name.clone(),
            labels: n.labels.clone(),
            level: self.nodes.level(&n.name),
            faults: self
                .store
                .node_faults(&n.name)
                .map(|f| f.code.clone())
                .collect(),
        })
    }

    /// The restart history of a job: its annotations, plus records this
    /// process wrote that no annotation shows yet (bare pods carry none).
    pub(super) fn history(&self, key: &JobKey) -> Vec<RestartRecord> {
        let mut h = self
            .store
            .jobs
            .get(key)
            .map(|i| i.history.clone())
            .unwrap_or_default();
        // This process's records, and those the take-over read afresh.
        let fresh = self.fresh.records.get(key).into_iter().flatten();
        for r in self.recorded.get(key).into_iter().flatten().chain(fresh) {
            if !h.iter().any(|x| x.at == r.at) {
                h.push(r.clone());
            }
        }
        // A restart recorded at once with its delete, whose delete never
        // went through ([`Core::requeue_cause`]), did not happen.
        if let Some(unmade) = self.unmade.get(key) {
            h.retain(|r| !unmade.contains(&r.at));
        }
        h.sort_by_key(|r| r.at);
        h
    }

    fn job_input(&self, job: &JobRef, fault: &Fault) -> JobInput {
        let key = job_key(job);
        let info = self.store.jobs.get(&key);
        let pods = self.store.job_pods(&key);
        let pod = fault
            .pod
            .as_ref()
            .and_then(|p| self.store.pod(&job.namespace, p));
        let labels = match info {
            Some(i) => i.labels.clone(),
            None => pod.map(|p| p.labels.to_map()).unwrap_or_default(),
        };
        let never = match job.kind {
            WorkloadKind::Pod => pod.is_none_or(|p| p.restart_never || !p.has_controller),
            _ => info.is_some_and(|i| i.never),
        };
        JobInput {
            kind: Some(job.kind),
            view: JobView {
                kind: job.kind.as_str().to_string(),
                name: job.name.clone(),
                namespace: job.namespace.clone(),
                labels,
                annotations: info.map(|i| i.annotations.clone()).unwrap_or_default(),
                restarts: 0,
                last_restart: None,
                replicas: pods.len() as i64,
            },
            pod_labels: pod.map(|p| p.labels.to_map()).unwrap_or_default(),
            history: self.history(&key),
            restart_policy_never: never,
            running: self.store.job_running(&key),
        }
    }

    /// Decide an occurrence whose carrier is present now.
    pub(super) fn decide_current(&mut self, id: OccurrenceId, now: Now) {
        let Some(occ) = self.current.get(&id).cloned() else {
            return;
        };
        #[cfg(test)]
        if !occ.fault.trusted
            && self
                .ledger
                .get(id)
                .is_some_and(|e| !matches!(e.fate, Fate::Pending { .. }))
        {
            self.probe.redecided_untrusted += 1;
        }
        let view = self.node_view(occ.fault.node.as_deref());
        let c = self
            .engine
            .classifier
            .reclassify(occ.fault.clone(), view.as_ref(), now.wall);
        let kind = match &occ.scope {
            Scope::Pod(j) => Some(j.kind),
            Scope::Node | Scope::NodeEvent => None,
        };
        // Not leading, not synced, or a relist of what this decision reads
        // is under way: decided when that ends (the tick picks it up).
        if !self.acting() || self.relisting_for(kind) {
            if self.ledger.needs_decision(id, c.level) {
                self.ledger.set(id, c.level, Fate::Pending { until: None });
            }
            return;
        }
        if !self.ledger.needs_decision(id, c.level) {
            return;
        }
        if let Some(until) = self.ledger.get(id).and_then(|e| match e.fate {
            Fate::Pending { until } => until,
            _ => None,
        }) && until > now.wall
        {
            return;
        }
        // The node's level as this fault makes it, before the tiers are
        // planned: the node reconcile that records it runs after the
        // decisions of this step, and a job must not be restarted in
        // place on a node that this very fault takes out.
        if c.fault.trusted
            && c.level.cordons_node()
            && let Some(n) = occ.fault.node.as_deref()
        {
            self.nodes.raise_level(n, c.level);
            // Its cordon first: whether the breaker lets it through
            // decides whether the jobs on the node may be restarted now
            // (their new pods must not land on the faulty node again).
            if self
                .store
                .nodes
                .get(n)
                .is_some_and(|x| !x.snap.unschedulable)
            {
                self.reconcile_node(n, now);
            }
        }
        let when = occ.fault.last_seen;
        // Trust first, before anything acts (absorb included): a tenant's
        // fault concerns that tenant's own jobs and no one else's.
        let domain = occ.fault.domain();
        // A node this fault takes out whose cordon the breaker held back,
        // cordoned now: every pod on it must move, also one placed there
        // after the fault while the cordon was held (a job restarted for
        // another fault may have landed there). Elsewhere a fault concerns
        // the pods that were there when it happened.
        // Held is known from this term's own hold, or from the node's
        // cordon record when an earlier run made the held cordon.
        let cordoned_faulty = c.fault.trusted
            && c.level.cordons_node()
            && occ.fault.node.as_deref().is_some_and(|n| {
                self.store.nodes.get(n).is_some_and(|x| {
                    x.snap.unschedulable
                        && (self.nodes.was_held(n)
                            || x.cordoned_by.is_some()
                                && x.snap
                                    .annotations
                                    .contains_key(crate::recover::CORDON_HELD_ANNOTATION))
                })
            });
        let since = (!cordoned_faulty).then(|| when.timestamp());
        // A fault on one device concerns the jobs holding it, where device
        // scope applies (devices.rs); the node's otherwise; and waits while
        // the DRA lists that tell are still coming.
        let device = match &occ.scope {
            Scope::Pod(_) => super::devices::DeviceScope::Node,
            Scope::Node | Scope::NodeEvent => self.device_scope(&occ.fault, c.level, now),
        };
        if device == super::devices::DeviceScope::Wait {
            self.ledger.set(id, c.level, Fate::Pending { until: None });
            return;
        }
        let device_scoped = matches!(
            device,
            super::devices::DeviceScope::Device(_) | super::devices::DeviceScope::Pods(_)
        );
        let mut refs: Vec<JobRef> = match (&occ.scope, device) {
            (Scope::Pod(j), _) => vec![(*self.store.resolve(j)).clone()],
            (_, super::devices::DeviceScope::Device(dev)) => self.jobs_on_device(&dev, since),
            (_, super::devices::DeviceScope::Pods(pods)) => {
                self.jobs_of_pods(occ.fault.node.as_deref(), &pods, since)
            }
            _ => occ
                .fault
                .node
                .as_deref()
                .map(|n| self.store.jobs_on_node(n, since))
                .unwrap_or_default(),
        };
        if device_scoped && let Some(n) = occ.fault.node.as_deref() {
            // Jobs whose policy takes a device's fault for its node's.
            for r in self.store.jobs_on_node(n, since) {
                let key = job_key(&r);
                if refs.iter().any(|x| job_key(x) == key) {
                    continue;
                }
                let node_scope = self
                    .policy_of(&key)
                    .is_some_and(|p| p.device_scope == crate::api::DeviceScope::Node);
                if node_scope {
                    refs.push(r);
                }
            }
        }
        let refs: Vec<JobRef> = refs
            .into_iter()
            .filter(|r| domain.may_touch(&r.namespace))
            .collect();
        // A new term restarts no job before it has read the records of
        // its kind afresh (an earlier term may have restarted it).
        if refs.iter().any(|r| self.waits_for_records(r.kind, now)) {
            self.ledger.set(id, c.level, Fate::Pending { until: None });
            return;
        }
        let mut fates: Vec<Fate> = Vec::new();
        let mut inputs: Vec<(JobRef, JobInput)> = Vec::new();
        for r in refs {
            let key = job_key(&r);
            self.resolve_requeued(&key, now);
            if let Some(f) = self.recoveries.get(&key).filter(|f| f.follow_only) {
                // An earlier leader's restart followed only to tell its
                // end: a fault since it ends it; this one is decided as if
                // none were under way (its record says what it handled).
                if occ.fault.last_seen > f.started {
                    let note = format!(
                        "a new fault before it ran again: {}",
                        super::effect::describe(&occ.fault)
                    );
                    self.finish(&key, super::jobs::End::NotResumed(note), now);
                }
            } else if let Some(r) = self.recoveries.get_mut(&key) {
                // Restarting every process, and none started again yet:
                // this restart covers a software fault seen now.
                if r.tier.bumps() && r.phase != Phase::Resume && !c.level.cordons_node() {
                    r.covered.insert(id);
                }
                self.absorb(&key, &occ.fault, c.level, now);
                fates.push(Fate::Absorbed);
                continue;
            }
            if let Some(until) = self.wait_for_unseen_job(&r, &occ, now) {
                fates.push(Fate::Pending { until: Some(until) });
                continue;
            }
            let input = self.job_input(&r, &occ.fault);
            // Restarted for this very occurrence already (by this term,
            // an earlier one or another replica: the job's record names
            // it), or by a restart surely after it.
            let by_id = super::jobs::occurrence_key(id);
            let last = input.history.iter().rfind(|h| !h.pod_only);
            let landed_since = cordoned_faulty
                && last.is_some_and(|h| {
                    self.pods_on_node_since(&key, occ.fault.node.as_deref(), h.at)
                });
            let handled = input.history.iter().any(|h| h.occurrence == by_id)
                || last.is_some_and(|h| h.at >= handled_before(when) && !landed_since);
            if handled {
                fates.push(Fate::Handled);
                continue;
            }
            inputs.push((r, input));
        }
        let jobs: Vec<JobInput> = inputs.iter().map(|(_, i)| i.clone()).collect();
        // The policies' `node` is the node as classified, with this fault.
        let decision = self
            .engine
            .decide_classified(c, None, view.as_ref(), &jobs, now.wall);
        self.metrics
            .faults
            .get_or_create(&crate::metrics::FaultLabels {
                source: decision.fault.source.to_string(),
                level: decision.level.to_string(),
            })
            .inc();
        self.metrics.cel_errors.inc_by(
            self.engine
                .classifier
                .stats()
                .cel_errors
                .saturating_sub(self.metrics.cel_errors.get()),
        );
        let decision = Arc::new(decision);
        if let Some(tx) = &self.decisions
            && tx.receiver_count() > 0
        {
            let _ = tx.send(decision.clone());
            self.effect(EffectKind::Decision(decision.clone()), None);
        }
        for ((job, _), jd) in inputs.into_iter().zip(decision.jobs.iter()) {
            let fate = self.apply_job_decision(id, &occ, &decision, jd, job, now);
            fates.push(fate);
        }
        let fate = aggregate(fates);
        self.ledger.set(id, decision.level, fate);
    }

    /// Whether the job has a live pod on `node` made at or after `at` (its
    /// last restart): one that landed on the node since.
    fn pods_on_node_since(&self, key: &JobKey, node: Option<&str>, at: DateTime<Utc>) -> bool {
        let Some(node) = node else {
            return false;
        };
        self.store
            .job_pods(key)
            .into_iter()
            .any(|p| !p.deleting && p.node.as_deref() == Some(node) && p.created >= at.timestamp())
    }

    /// A recovery under way covers a new occurrence: one recovery, not
    /// two. A node fault under an in-place restart turns it into a
    /// replacement of the pods on that node.
    fn absorb(&mut self, key: &JobKey, fault: &Fault, level: Level, now: Now) {
        // Only a trusted fault moves pods off a node: a tenant's Event
        // naming a node at a cordoning level changes nobody's recovery.
        if !fault.trusted || !level.cordons_node() {
            return;
        }
        let Some(node) = fault.node.as_deref() else {
            return;
        };
        let pods: Vec<PodTarget> = self
            .store
            .job_pods(key)
            .into_iter()
            .filter(|p| !p.deleting && p.node.as_deref() == Some(node))
            .map(PodTarget::of)
            .collect();
        let Some(rec) = self.recoveries.get_mut(key) else {
            return;
        };
        if pods.is_empty() {
            return;
        }
        // In place so far, or already replacing other nodes' pods: these
        // pods must move as well (a Recreate replaces them anyway).
        match &mut rec.tier {
            Tier::InPlace => rec.tier = Tier::ReplaceFaulty { pods: pods.clone() },
            Tier::ReplaceFaulty { pods: moving } => {
                let fresh: Vec<PodTarget> = pods
                    .iter()
                    .filter(|p| !moving.iter().any(|m| m.uid == p.uid))
                    .cloned()
                    .collect();
                if fresh.is_empty() {
                    return;
                }
                moving.extend(fresh);
            }
            _ => return,
        }
        let job = rec.job.clone();
        self.side_delete(key, pods);
        self.job_event(
            &job,
            Notice::normal(
                reasons::JOB_RESTARTED,
                "Restart",
                format!("node {node} failed during the in-place restart: its pods are replaced, the others go on in place"),
            ),
        );
        self.dirty_jobs.insert(key.clone());
        let _ = now;
    }

    fn apply_job_decision(
        &mut self,
        id: OccurrenceId,
        occ: &super::Occurrence,
        decision: &crate::policy::Decision,
        jd: &JobDecision,
        job: JobRef,
        now: Now,
    ) -> Fate {
        let action = match &jd.action {
            Some(JobAction::RestartPod { .. }) => "restart_pod",
            Some(JobAction::RestartJob { .. }) => "restart_job",
            None => "none",
        };
        let key = job_key(&job);
        if !jd.acts() {
            let skip = jd.skip.clone().unwrap_or(Skip::ActionNone);
            self.metrics.decision(
                action,
                if matches!(skip, Skip::DryRun) {
                    "dry_run"
                } else {
                    skip.name()
                },
            );
            return self.skipped(&job, &skip, &jd.reasons.join("; "), now);
        }
        let policy = jd
            .policy
            .as_deref()
            .and_then(|id| id.split_once('/'))
            .and_then(|(ns, n)| self.engine.policies.get(ns, n).cloned());
        let cfg = policy
            .as_ref()
            .map(|p| p.restart.clone())
            .unwrap_or_default();
        let job_after = policy.as_ref().map(|p| p.job_after).unwrap_or_default();
        let mut reasons = jd.reasons.clone();
        let (tier, logs) = match &jd.action {
            Some(JobAction::RestartPod { pod, preserve_logs }) => {
                let Some(p) = self.store.pod(&job.namespace, pod) else {
                    return Fate::Handled;
                };
                let target = PodTarget {
                    namespace: job.namespace.clone(),
                    name: pod.clone(),
                    uid: p.uid.to_string(),
                    grace_seconds: None,
                };
                (Tier::PodFirst { pod: target }, *preserve_logs)
            }
            Some(JobAction::RestartJob { preserve_logs }) => {
                // A JobSet with its own InPlaceRestart restarts its healthy
                // pods itself when one fails: rebound only moves the pods
                // that sit on nodes being separated, and leaves a software
                // fault to JobSet's protocol (a second restart would race
                // it).
                if self
                    .store
                    .restart_info(&key)
                    .is_some_and(|j| j.native_in_place)
                {
                    let faulty = self.faulty_pods(&key);
                    if faulty.is_empty() {
                        self.metrics.decision(action, "NativeInPlace");
                        return Fate::Skipped("NativeInPlace");
                    }
                    reasons.push(format!(
                        "the JobSet restarts in place itself (failurePolicy.restartStrategy: InPlaceRestart): deleting only the {} pod(s) on faulty nodes",
                        faulty.len()
                    ));
                    (Tier::NativeReplace { pods: faulty }, *preserve_logs)
                } else {
                    let (tier, why) = self.plan_tier(&key, &cfg, Some(decision.level));
                    if let Some(w) = why {
                        reasons.push(w);
                    }
                    (tier, *preserve_logs)
                }
            }
            None => return Fate::Skipped("ActionNone"),
        };
        if self.separation_pending(&occ.fault, decision.level) {
            self.metrics.decision(action, "SeparationPending");
            return Fate::Pending { until: None };
        }
        if let Some(skip) = self
            .cordon_held_skip(&occ.fault, decision.level, &mut reasons)
            .or_else(|| self.final_exit_skip(&key, &occ.fault, &cfg, &mut reasons))
            .or_else(|| self.retry_limit_skip(&key, &tier, &cfg, &mut reasons))
        {
            self.metrics.decision(action, skip.name());
            return self.skipped(&job, &skip, &reasons.join("; "), now);
        }
        self.metrics.decision(action, "acted");
        let root_cause = self.root_cause(&key, &occ.fault);
        let cause = Cause {
            occurrence: id,
            fault: decision.fault.clone(),
            level: decision.level,
            policy: jd.policy.clone(),
            reasons: reasons.join("; "),
            root_cause,
            infrastructure: jd.infrastructure,
        };
        let mut jref = job.clone();
        if jref.uid.is_none() {
            jref.uid = self.store.jobs.get(&key).and_then(|i| i.uid.clone());
        }
        let generation = self.start_recovery(
            key,
            jref,
            tier,
            cause,
            cfg,
            logs,
            job_after,
            occ.received,
            now,
        );
        Fate::Acted { generation }
    }

    /// A decision that does not act: held for its cooldown, or recorded
    /// with its reason, in the Event docs/events.md gives it (once per job
    /// and reason an episode, [`SkipNotices`](super::skip_notices)).
    fn skipped(&mut self, job: &JobRef, skip: &Skip, why: &str, now: Now) -> Fate {
        if let Skip::BudgetExhausted { .. } = skip {
            self.effect(EffectKind::MarkBudgetExhausted { job: job.clone() }, None);
        }
        if let Some((reason, warning)) = crate::recover::skip_event(skip) {
            let key = job_key(job);
            let last_restart = self.history(&key).last().map(|r| r.at);
            if self
                .skip_notices
                .should_say(&key, skip.name(), last_restart, now.wall)
            {
                let note = format!("{}: {why}", skip.name());
                let notice = if warning {
                    Notice::warning(reason, "Restart", note)
                } else {
                    Notice::normal(reason, "Restart", note)
                };
                self.job_event(job, notice);
            }
        }
        match skip {
            Skip::Cooldown { remaining_secs } | Skip::WaitingForPodRestart { remaining_secs } => {
                let until = now
                    .wall
                    .checked_add_signed(chrono::Duration::seconds(*remaining_secs as i64))
                    .unwrap_or(now.wall);
                Fate::Pending { until: Some(until) }
            }
            Skip::CordonHeld { .. } => Fate::Pending {
                until: Some(super::jobs::later(now.wall, super::plan::CORDON_WAIT)),
            },
            _ => Fate::Skipped(skip.name()),
        }
    }

    /// The pod to look at first: one on a node that carries a fault, else
    /// the earliest failure among the job's pods.
    fn root_cause(&self, key: &JobKey, fault: &Fault) -> Option<String> {
        let pods = self.store.job_pods(key);
        let on_faulty = pods.iter().find(|p| {
            p.node
                .as_ref()
                .is_some_and(|n| self.store.node_has_faults(n))
        });
        if let Some(p) = on_faulty {
            return Some(format!(
                "{} (on faulty node {})",
                p.name,
                p.node.clone().unwrap_or_default()
            ));
        }
        pods.iter()
            .filter_map(|p| p.first_failure.map(|t| (t, &p.name)))
            .min()
            .map(|(t, n)| format!("{n} (first failure at {})", t.to_rfc3339()))
            .or_else(|| fault.pod.clone())
    }
}

/// One fate for an occurrence that concerned several jobs: acted if any
/// acted, else pending if any waits, else absorbed, handled or skipped.
fn aggregate(fates: Vec<Fate>) -> Fate {
    if fates.is_empty() {
        return Fate::Skipped("NoAffectedJob");
    }
    // A job held for its cooldown keeps the occurrence pending even when
    // another job was acted on: decided again when the cooldown ends, the
    // acted job is then recognised (its recovery absorbs it, or its
    // history shows the restart) and the held one restarts.
    let until = fates
        .iter()
        .filter_map(|f| match f {
            Fate::Pending { until } => Some(*until),
            _ => None,
        })
        .min();
    if let Some(until) = until {
        return Fate::Pending { until };
    }
    if let Some(f) = fates.iter().find(|f| matches!(f, Fate::Acted { .. })) {
        return f.clone();
    }
    for want in [Fate::Absorbed, Fate::Handled] {
        if fates.contains(&want) {
            return want;
        }
    }
    fates
        .into_iter()
        .next()
        .unwrap_or(Fate::Skipped("NoAffectedJob"))
}

/// Longest a cooldown can hold an occurrence (bounded like every duration).
pub const MAX_HOLD: Duration = crate::api::duration::MAX;
