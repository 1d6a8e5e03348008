//! The engine: classify → select → decide, in one pure call per fault.

use super::breaker::Breaker;
use super::compile::NodeConfig;
use super::decide::{JobDecision, JobInput, NodeDecision, NodeInput, decide_job, decide_node};
use super::select::PolicySet;
use crate::classify::Classifier;
use crate::expr::NodeView;
use crate::fault::{Fault, Level};
use chrono::{DateTime, Utc};
use serde::Serialize;

/// Everything decided about one fault.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    pub fault: Fault,
    pub level: Level,
    pub rule: String,
    pub escalated_by: Option<String>,
    pub node: Option<NodeDecision>,
    pub jobs: Vec<JobDecision>,
}

/// Classifications, policies, node configuration and breaker state: the
/// whole decision state, with no I/O.
#[derive(Debug)]
pub struct Engine {
    pub classifier: Classifier,
    pub policies: PolicySet,
    /// Node behaviour from the operator's flags, used when no root policy
    /// sets `nodeActions`.
    pub node_default: NodeConfig,
    /// The operator-wide dry run (`--dry-run`).
    pub global_dry_run: bool,
    pub breaker: Breaker,
}

impl Engine {
    /// An engine with no objects yet for a cluster of `total_nodes`.
    pub fn new(root_namespace: &str, node_default: NodeConfig, total_nodes: u32) -> Engine {
        let breaker = Breaker::new(
            node_default.max_separated,
            node_default.breaker_window,
            total_nodes,
        );
        Engine {
            classifier: Classifier::new(),
            policies: PolicySet::new(root_namespace),
            node_default,
            global_dry_run: false,
            breaker,
        }
    }

    /// Classify and decide. `jobs` are the workloads the fault affects (the
    /// failing pod's job, or every job on the node for node levels). A node
    /// separation decided here is recorded in the breaker at once, so a
    /// storm processed fault by fault never exceeds the limit.
    pub fn decide(
        &mut self,
        fault: Fault,
        node: Option<&NodeInput>,
        node_view: Option<&NodeView>,
        jobs: &[JobInput],
        now: DateTime<Utc>,
    ) -> Decision {
        let c = self.classifier.classify(fault, node_view, now);
        self.decide_classified(c, node, node_view, jobs, now)
    }

    /// Decide for a fault already classified (the controller classifies
    /// first to tell a replay from an escalation). `node_view` is the
    /// fault's node as CEL saw it when classifying (before this fault).
    pub fn decide_classified(
        &mut self,
        c: crate::fault::Classified,
        node: Option<&NodeInput>,
        node_view: Option<&NodeView>,
        jobs: &[JobInput],
        now: DateTime<Utc>,
    ) -> Decision {
        let node_decision = node.map(|n| {
            let (cfg, from) = self.policies.node_config(&self.node_default);
            self.breaker.limit = cfg.max_separated;
            self.breaker.window = cfg.breaker_window;
            let dry = self.global_dry_run || self.policies.node_dry_run();
            let d = decide_node(&c, n, &cfg, from, &self.breaker, dry, now);
            if d.acts() && d.actions.contains(&super::NodeAction::Cordon) {
                self.breaker.record(now);
            }
            d
        });
        let jobs = jobs
            .iter()
            .map(|j| decide_job(&c, node_view, j, &self.policies, self.global_dry_run, now))
            .collect();
        Decision {
            level: c.level,
            rule: c.rule,
            escalated_by: c.escalated_by,
            fault: c.fault,
            node: node_decision,
            jobs,
        }
    }
}
