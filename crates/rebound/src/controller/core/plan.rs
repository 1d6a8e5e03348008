//! How a restart is carried out: the cheapest tier of the policy that can
//! restart the job (in place needs wired pods and no pod on a faulty
//! node), and whether it would exhaust the job's own retry limit.

use super::Core;
use super::effect::PodTarget;
use super::jobs::Tier;
use super::store::JobKey;
use super::store::RetryCost;
use crate::api::{RecoveryTier, RetryLimitAction, WorkloadKind};
use crate::fault::Level;
use crate::policy::{RestartConfig, Skip};
use std::time::Duration;

/// How often a restart held for its node's cordon is decided again.
pub(super) const CORDON_WAIT: Duration = Duration::from_secs(5);

impl Core {
    /// Whether a node is being taken out of scheduling, or is NotReady:
    /// pods there must move.
    pub(super) fn node_is_faulty(&self, node: &str) -> bool {
        self.nodes.level(node).is_some_and(|l| l.cordons_node())
            || self.store.nodes.get(node).is_some_and(|n| !n.ready)
    }

    /// The job's pods on faulty nodes.
    pub(super) fn faulty_pods(&self, key: &JobKey) -> Vec<PodTarget> {
        self.store
            .job_pods(key)
            .into_iter()
            .filter(|p| {
                !p.deleting
                    && (p.node.as_deref().is_some_and(|n| self.node_is_faulty(n))
                        || self.on_isolated_device(p))
            })
            .map(PodTarget::of)
            .collect()
    }

    /// The cheapest tier of the policy's list that can restart this job,
    /// and why cheaper ones could not, if they were skipped.
    pub(super) fn plan_tier(
        &self,
        key: &JobKey,
        cfg: &RestartConfig,
        _level: Option<Level>,
    ) -> (Tier, Option<String>) {
        let pods: Vec<_> = self
            .store
            .job_pods(key)
            .into_iter()
            .filter(|p| !p.deleting)
            .collect();
        let mut faulty = self.faulty_pods(key);
        // Pods that ended for good (a container failed under
        // `restartPolicy: Never` and the pod left Running): the kubelet
        // restarts nothing in a terminated pod, so they are replaced, not
        // restarted in place.
        let ended: Vec<PodTarget> = pods
            .iter()
            .filter(|p| p.restart_never && !p.running && p.first_failure.is_some())
            .filter(|p| !faulty.iter().any(|f| f.uid == *p.uid))
            .map(|p| PodTarget::of(p))
            .collect();
        let ended_count = ended.len();
        faulty.extend(ended);
        let wired = |all: bool| {
            pods.iter()
                .filter(|p| all || !faulty.iter().any(|f| f.uid == *p.uid))
                .all(|p| p.agent.is_some())
                && !pods.is_empty()
        };
        let mut why: Vec<String> = Vec::new();
        for t in &cfg.tiers {
            match t {
                RecoveryTier::InPlace => {
                    if ended_count > 0 {
                        why.push(format!(
                            "not in place: {ended_count} pod(s) ended (restartPolicy Never) and cannot restart where they are"
                        ));
                    } else if !faulty.is_empty() {
                        why.push(format!(
                            "not in place: {} pod(s) on faulty nodes must move",
                            faulty.len()
                        ));
                    } else if !wired(true) {
                        why.push(format!(
                            "not in place: the job's pods lack the in-place wiring ({HOW_TO_WIRE})"
                        ));
                    } else if let Some(w) = self.in_place_exhausts(key) {
                        why.push(w);
                    } else {
                        why.push(wiring_of(&pods));
                        return (Tier::InPlace, join(why));
                    }
                }
                RecoveryTier::ReplaceFaulty => {
                    if faulty.is_empty() {
                        continue;
                    }
                    if !wired(false) {
                        why.push(format!("not replacing only the faulty pods: the job's pods lack the in-place wiring ({HOW_TO_WIRE})"));
                    } else if let Some(w) = self.in_place_exhausts(key) {
                        why.push(w.replacen(
                            "not in place",
                            "not replacing only the faulty pods",
                            1,
                        ));
                    } else {
                        why.push(wiring_of(&pods));
                        return (Tier::ReplaceFaulty { pods: faulty }, join(why));
                    }
                }
                RecoveryTier::Recreate => return (Tier::Recreate, join(why)),
            }
        }
        why.push("falling back to Recreate".into());
        (Tier::Recreate, join(why))
    }

    /// Whether the restart for a trusted fault of `level` waits for its
    /// node's separation (the cordon, or the device's isolation) to be
    /// made: sent in this step and not answered yet, or failed and to be
    /// tried again. A restart sent beside its cordon can have its new pods
    /// bound to the node before the cordon lands, and after a failed cordon
    /// they would stay there. Silent: a request's round trip, or a retry;
    /// the node's answer decides it again at once.
    pub(super) fn separation_pending(&self, fault: &crate::fault::Fault, level: Level) -> bool {
        fault.trusted
            && level.cordons_node()
            && fault
                .node
                .as_deref()
                .is_some_and(|n| self.nodes.separation_pending(n))
    }

    /// Whether the restart must wait for its fault's node to be cordoned:
    /// a trusted fault at a cordoning level whose cordon the circuit
    /// breaker holds back. Restarted now, the job's new pods could be put
    /// on the faulty node again (nothing keeps them off it but the cordon);
    /// held, the fault is decided again every [`CORDON_WAIT`] and the
    /// restart is made once the breaker lets the cordon through. The
    /// breaker stays the only limit on cordons.
    pub(super) fn cordon_held_skip(
        &self,
        fault: &crate::fault::Fault,
        level: Level,
        reasons: &mut Vec<String>,
    ) -> Option<Skip> {
        let node = fault.node.as_deref()?;
        if !fault.trusted || !level.cordons_node() || !self.nodes.is_held(node) {
            return None;
        }
        reasons.push(format!(
            "the circuit breaker holds the cordon of node {node} back: the restart waits for it, so that the new pods are not put on the faulty node again"
        ));
        Some(Skip::CordonHeld {
            node: node.to_string(),
        })
    }

    /// Whether the fault is a pod exit that the job's operator treats as
    /// final (it ends the job itself, so a restart cannot bring it back),
    /// and the policy says to leave the job then.
    pub(super) fn final_exit_skip(
        &self,
        key: &JobKey,
        fault: &crate::fault::Fault,
        cfg: &RestartConfig,
        reasons: &mut Vec<String>,
    ) -> Option<Skip> {
        let code = fault.exit_code?;
        let rules = self.store.restart_info(key)?.exit_rules.clone()?;
        let kind = key.1.parse::<WorkloadKind>().ok()?;
        let pod = fault.pod.as_deref().and_then(|p| self.store.pod(&key.0, p));
        let replica_type = pod.and_then(|p| {
            p.labels
                .get("training.kubeflow.org/replica-type")
                .map(|v| v.to_string())
        });
        let exit = crate::workload::operator::Exit {
            container: fault.container.as_deref(),
            code,
            replica_type: replica_type.as_deref(),
        };
        let why = crate::workload::operator::final_exit(kind, &rules, exit)?;
        match cfg.on_final_exit {
            RetryLimitAction::Proceed => {
                reasons.push(format!(
                    "{why}; restarting anyway (spec.restart.onFinalExit: Proceed)"
                ));
                None
            }
            RetryLimitAction::Skip => {
                reasons.push(format!(
                    "{why}; not restarting (spec.restart.onFinalExit: Skip)"
                ));
                Some(Skip::FinalExit { why })
            }
        }
    }

    /// Whether the restart would exhaust the job's own retry limit, and
    /// the policy says to leave the job then.
    pub(super) fn retry_limit_skip(
        &self,
        key: &JobKey,
        tier: &Tier,
        cfg: &RestartConfig,
        reasons: &mut Vec<String>,
    ) -> Option<Skip> {
        let info = self.store.restart_info(key)?;
        let limit = info.retry_limit.as_ref()?;
        // A whole-job restart through a JobSet's child Jobs spends none of
        // its limits (JobSet makes the Jobs anew); pods marked
        // DisruptionTarget cost nothing under a podFailurePolicy that
        // ignores them.
        let through_children = matches!(tier, Tier::Recreate)
            && key
                .1
                .parse::<WorkloadKind>()
                .is_ok_and(|kind| !self.child_jobs(key, kind).is_empty());
        if through_children || info.ignores_disruption {
            return None;
        }
        let deleted = match tier {
            Tier::InPlace => 0,
            Tier::PodFirst { .. } => 1,
            Tier::ReplaceFaulty { pods } | Tier::NativeReplace { pods } => pods.len() as i64,
            Tier::Recreate => self
                .store
                .job_pods(key)
                .iter()
                .filter(|p| !p.deleting)
                .count() as i64,
        };
        let cost = match limit.cost {
            RetryCost::PerPod => deleted,
            RetryCost::Fixed(c) if deleted > 0 => c,
            RetryCost::Fixed(_) => 0,
        };
        // The operator fails the job when a restart costs more than what
        // is left (each operator's arithmetic: workload::operator).
        if cost == 0 || cost <= limit.remaining {
            return None;
        }
        let what = format!(
            "the restart would use {cost} of the {} left under the job's {} (its operator then fails the job)",
            limit.remaining.max(0),
            limit.field
        );
        match cfg.on_retry_limit {
            RetryLimitAction::Proceed => {
                reasons.push(format!(
                    "{what}; proceeding (spec.restart.onRetryLimit: Proceed)"
                ));
                None
            }
            RetryLimitAction::Skip => {
                reasons.push(format!(
                    "{what}; not restarting (spec.restart.onRetryLimit: Skip)"
                ));
                Some(Skip::RetryLimit {
                    field: limit.field.to_string(),
                    remaining: limit.remaining.max(0),
                })
            }
        }
    }
}

/// The ways to wire a job, for a decision that found it unwired.
const HOW_TO_WIRE: &str = "rebound inject on the job's manifest, or the admission policy rebound-restart-agent with the label kcover.io/cascading-recovery=true on the pods, for pods created after it is installed";

/// Which wiring the job's wired pods have, as a reason of the decision.
fn wiring_of(pods: &[&super::pods::PodInfo]) -> String {
    use super::pods::Wiring;
    let kinds: std::collections::BTreeSet<Wiring> = pods
        .iter()
        .filter_map(|p| p.agent.map(|a| a.wiring))
        .collect();
    let template = "in their pod templates (rebound inject)";
    let admission = "at admission (MutatingAdmissionPolicy rebound-restart-agent)";
    let how = match (
        kinds.contains(&Wiring::Template),
        kinds.contains(&Wiring::Admission),
    ) {
        (true, true) => format!("some {template}, some {admission}"),
        (false, true) => admission.to_owned(),
        _ => template.to_owned(),
    };
    format!("in-place wiring: the job's pods were wired {how}")
}

fn join(v: Vec<String>) -> Option<String> {
    (!v.is_empty()).then(|| v.join("; "))
}
