//! The node's decision (cordon, taint), behind trust, the node's own
//! state and the breaker; apart from the job's, which has policies,
//! history and escalation to weigh.

use super::{NodeAction, NodeDecision, NodeInput, Skip};
use crate::fault::{Classified, Level};
use crate::policy::breaker::Breaker;
use crate::policy::compile::NodeConfig;
use chrono::{DateTime, Utc};

/// Decide for the fault's node (cordon, taint), behind trust and breaker.
pub fn decide_node(
    c: &Classified,
    node: &NodeInput,
    cfg: &NodeConfig,
    config_from: String,
    breaker: &Breaker,
    dry_run: bool,
    now: DateTime<Utc>,
) -> NodeDecision {
    let mut d = NodeDecision {
        node: node.name.clone(),
        actions: Vec::new(),
        skip: None,
        config_from,
        reasons: Vec::new(),
    };
    if !c.level.cordons_node() {
        d.reasons
            .push(format!("level {} does not touch the node", c.level));
        return d;
    }
    let skip = |d: &mut NodeDecision, s: Skip, why: String| {
        d.reasons.push(why);
        d.skip = Some(s);
    };
    if !c.fault.trusted {
        skip(&mut d, Skip::Untrusted, "the fault came through a channel a tenant can write (an Event outside kube-system and the root namespace, a pod's exit); only Node conditions, device-plugin ConfigMaps and root-namespace Events may act on nodes".into());
        return d;
    }
    if !cfg.cordon {
        let why = format!("node actions are disabled by {}", d.config_from);
        skip(&mut d, Skip::NodeActionsDisabled, why);
        return d;
    }
    let want_taint = c.level == Level::Separate;
    let cordon_done = node.unschedulable;
    let taint_done = !want_taint || node.tainted;
    if cordon_done && taint_done {
        skip(
            &mut d,
            Skip::AlreadyApplied,
            format!(
                "node {} is already cordoned{}",
                node.name,
                if want_taint { " and tainted" } else { "" }
            ),
        );
        return d;
    }
    // A node already out of scheduling does not count against the breaker
    // again when only its taint is missing.
    if !cordon_done && !breaker.allows(now) {
        let used = breaker.used(now);
        let allowed = breaker.allowed();
        skip(
            &mut d,
            Skip::BreakerOpen { used, allowed },
            format!(
                "circuit breaker open: {used} of {allowed} nodes already separated within {}; the cordon is held",
                crate::api::duration::format(breaker.window)
            ),
        );
        d.actions.push(NodeAction::Cordon);
        return d;
    }
    if !cordon_done {
        d.actions.push(NodeAction::Cordon);
        d.reasons
            .push(format!("level {} cordons the node", c.level));
    }
    if want_taint && !node.tainted {
        d.actions.push(NodeAction::Taint {
            key: cfg.taint_key.clone(),
        });
        d.reasons.push(format!(
            "level Separate taints the node with {}:NoSchedule",
            cfg.taint_key
        ));
    }
    if dry_run {
        skip(
            &mut d,
            Skip::DryRun,
            "dry run: node actions recorded, not made".into(),
        );
    }
    d
}
