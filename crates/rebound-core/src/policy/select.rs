//! Which policy covers a workload: namespace policies over the root-namespace
//! default, the most specific selector wins, ties broken by name.

use super::compile::{CompiledPolicy, NodeConfig};
use crate::api::{RecoveryPolicy, WorkloadKind};
use crate::classify::InvalidObject;
use kube::ResourceExt;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// What selection needs to know of a workload.
#[derive(Clone, Copy, Debug)]
pub struct WorkloadRef<'a> {
    pub kind: WorkloadKind,
    pub namespace: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    /// Labels of the failing pod: kcover lets either carry the opt-in label.
    pub pod_labels: Option<&'a BTreeMap<String, String>>,
}

/// The winner and the losers of a selection.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    pub chosen: Option<Arc<CompiledPolicy>>,
    /// `(policy id, why it lost)` for every matching policy that did not win.
    pub shadowed: Vec<(String, String)>,
}

/// A note about a policy that is in use but not entirely as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyWarning {
    pub reason: &'static str,
    pub message: String,
}

/// All compiled policies, indexed by namespace.
#[derive(Debug, Default)]
pub struct PolicySet {
    root_namespace: String,
    by_ns: HashMap<String, Vec<Arc<CompiledPolicy>>>,
    /// Each tenant namespace's measured CEL time, shared by its policies
    /// (and kept when they are edited, so an edit does not reset it).
    meters: HashMap<String, Arc<super::cel_meter::CelMeter>>,
    /// The CEL time budget of each tenant namespace (`None`: the default,
    /// [`super::cel_meter::BUDGET`]).
    cel_budget: Option<std::time::Duration>,
    invalid: BTreeMap<(String, String), InvalidObject>,
}

impl PolicySet {
    /// An empty set whose root (cluster default) namespace is `root`.
    pub fn new(root: impl Into<String>) -> PolicySet {
        PolicySet {
            root_namespace: root.into(),
            ..Default::default()
        }
    }

    /// The same set, with this CEL time budget per tenant namespace and
    /// window for the policies added from now on.
    pub fn with_cel_budget(mut self, budget: std::time::Duration) -> PolicySet {
        self.cel_budget = Some(budget);
        self
    }

    /// The operator's root namespace.
    pub fn root_namespace(&self) -> &str {
        &self.root_namespace
    }

    /// Add or replace a policy; compiles only when its generation changed.
    /// Returns warnings for parts that are ignored (a tenant asking for node
    /// actions), or the error that keeps the policy out of use.
    pub fn upsert(&mut self, p: &RecoveryPolicy) -> Result<Vec<PolicyWarning>, InvalidObject> {
        let ns = p.namespace().unwrap_or_default();
        let name = p.name_any();
        let same = p.metadata.generation.is_some()
            && self
                .get(&ns, &name)
                .is_some_and(|c| c.generation == p.metadata.generation);
        if !same {
            self.remove(&ns, &name);
            match CompiledPolicy::compile(p) {
                Ok(mut c) => {
                    if ns != self.root_namespace {
                        let budget = self.cel_budget.unwrap_or(super::cel_meter::BUDGET);
                        let m = self
                            .meters
                            .entry(ns.clone())
                            .or_insert_with(|| {
                                Arc::new(super::cel_meter::CelMeter::with_budget(budget))
                            })
                            .clone();
                        c.cel_meter = super::cel_meter::MeterRef(Some(m));
                    }
                    let list = self.by_ns.entry(ns.clone()).or_default();
                    list.push(Arc::new(c));
                    list.sort_by(|a, b| a.name.cmp(&b.name));
                }
                Err(e) => {
                    self.invalid.insert((ns, name), e.clone());
                    return Err(e);
                }
            }
        }
        let mut warnings = Vec::new();
        if ns != self.root_namespace && p.spec.node_actions.is_some() {
            warnings.push(PolicyWarning {
                reason: "NodeActionsIgnored",
                message: format!(
                    "spec.nodeActions is honoured only on policies in the root namespace {:?}; a tenant policy cannot cordon or taint nodes",
                    self.root_namespace
                ),
            });
        }
        Ok(warnings)
    }

    /// Remove a policy (deleted).
    pub fn remove(&mut self, ns: &str, name: &str) {
        self.invalid.remove(&(ns.to_string(), name.to_string()));
        if let Some(list) = self.by_ns.get_mut(ns) {
            list.retain(|c| c.name != name);
        }
    }

    /// The suspension of `ns`'s policy expressions for their CEL time,
    /// if one is in force.
    pub fn cel_suspended(&self, ns: &str) -> Option<super::cel_meter::OverBudget> {
        self.meters.get(ns)?.suspended(std::time::Instant::now())
    }

    /// A policy in use, by namespace and name.
    pub fn get(&self, ns: &str, name: &str) -> Option<&Arc<CompiledPolicy>> {
        self.by_ns.get(ns)?.iter().find(|c| c.name == name)
    }

    /// Every policy in use.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<CompiledPolicy>> {
        self.by_ns.values().flatten()
    }

    /// The error of a policy that is not in use.
    pub fn invalid(&self, ns: &str, name: &str) -> Option<&InvalidObject> {
        self.invalid.get(&(ns.to_string(), name.to_string()))
    }

    /// Node behaviour: from the root-namespace policy that sets it (first by
    /// name), else the operator's configuration. Also says where it came from.
    pub fn node_config(&self, operator: &NodeConfig) -> (NodeConfig, String) {
        self.by_ns
            .get(&self.root_namespace)
            .and_then(|l| l.iter().find_map(|p| p.node.clone().map(|n| (n, p.id()))))
            .unwrap_or_else(|| (operator.clone(), "operator configuration".into()))
    }

    /// Whether a root-namespace policy that sets node actions is a dry run.
    pub fn node_dry_run(&self) -> bool {
        self.by_ns
            .get(&self.root_namespace)
            .and_then(|l| l.iter().find(|p| p.node.is_some()))
            .is_some_and(|p| p.dry_run)
    }

    /// Choose the policy for a workload.
    pub fn select(&self, w: WorkloadRef<'_>) -> Selection {
        let local = self
            .by_ns
            .get(w.namespace)
            .map(|l| l.as_slice())
            .unwrap_or(&[]);
        let mut candidates: Vec<(&Arc<CompiledPolicy>, Specificity)> = local
            .iter()
            .filter(|p| matches(p, w))
            .map(|p| (p, (true, p.match_labels.len(), !p.kinds.is_empty())))
            .collect();
        let root_applies = candidates.is_empty() && w.namespace != self.root_namespace;
        if root_applies && let Some(root) = self.by_ns.get(&self.root_namespace) {
            candidates.extend(
                root.iter()
                    .filter(|p| matches(p, w))
                    .map(|p| (p, (false, p.match_labels.len(), !p.kinds.is_empty()))),
            );
        }
        // Most specific first, then by name.
        candidates.sort_by(|(a, sa), (b, sb)| sb.cmp(sa).then_with(|| a.name.cmp(&b.name)));
        let mut it = candidates.into_iter();
        let Some((winner, wscore)) = it.next() else {
            return Selection::default();
        };
        let shadowed = it
            .map(|(p, s)| {
                let why = if s == wscore {
                    format!("{} is as specific and sorts first by name", winner.id())
                } else {
                    format!("{} is more specific", winner.id())
                };
                (p.id(), why)
            })
            .collect();
        Selection {
            chosen: Some(winner.clone()),
            shadowed,
        }
    }
}

/// How specific a matching policy is: (in the workload's own namespace,
/// number of labels, names kinds). Higher wins.
type Specificity = (bool, usize, bool);

fn matches(p: &CompiledPolicy, w: WorkloadRef<'_>) -> bool {
    if !p.kinds.is_empty() && !p.kinds.contains(&w.kind) {
        return false;
    }
    p.match_labels.iter().all(|(k, v)| {
        w.labels.get(k) == Some(v) || w.pod_labels.is_some_and(|pl| pl.get(k) == Some(v))
    })
}
