//! What the scheduler does with what it knows of the cluster: pods and
//! nodes taken in from the watches, resources charged, and the choice of
//! a node for a pod.

use std::collections::{BTreeSet, HashMap, HashSet};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;

use crate::actors::util::key;

use super::{BoundPod, PendingPod, Scope, State, fits, gang, node_view, pod_requests};

impl State {
    /// Nothing known yet; binds only within `scope` when given.
    pub(super) fn new(scope: Option<Scope>) -> State {
        State {
            scope,
            nodes: HashMap::new(),
            order: BTreeSet::new(),
            pending: HashMap::new(),
            bound: HashMap::new(),
            in_flight: HashMap::new(),
            parked: HashSet::new(),
        }
    }

    pub(super) fn charge(&mut self, node: &str, req: &HashMap<String, i64>, sign: i64) {
        if let Some(n) = self.nodes.get_mut(node) {
            let before = n.used.get("pods").copied().unwrap_or(0);
            for (r, v) in req {
                *n.used.entry(r.clone()).or_default() += sign * v;
            }
            let after = n.used.get("pods").copied().unwrap_or(0);
            if before != after {
                self.order.remove(&(before, node.to_owned()));
                self.order.insert((after, node.to_owned()));
            }
        }
    }

    pub(super) fn forget(&mut self, k: &str) {
        self.pending.remove(k);
        self.parked.remove(k);
        if let Some(b) = self.bound.remove(k) {
            self.charge(&b.node, &b.requests, -1);
        }
    }

    pub(super) fn on_pod(&mut self, pod: &Pod) {
        let k = key(&pod.namespace().unwrap_or_default(), &pod.name_any());
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let terminal = matches!(phase, Some("Succeeded") | Some("Failed"));
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        if terminal || pod.metadata.deletion_timestamp.is_some() {
            self.forget(&k);
            return;
        }
        match node {
            Some(node) if !node.is_empty() => {
                self.pending.remove(&k);
                self.parked.remove(&k);
                if !self.bound.contains_key(&k) {
                    let requests = pod_requests(pod);
                    self.charge(&node, &requests, 1);
                    let group = gang::gang_of(pod).map(|g| g.0);
                    self.bound.insert(
                        k,
                        BoundPod {
                            node,
                            requests,
                            group,
                        },
                    );
                }
            }
            _ => {
                if self.in_flight.contains_key(&k) {
                    return;
                }
                if self.bound.contains_key(&k) {
                    // A pod's node is never unset: an unbound pod of a
                    // bound one's name is a new pod, and the old one's
                    // delete was missed (a watch that relisted across it).
                    self.forget(&k);
                }
                let spec = pod.spec.as_ref();
                if let Some(scope) = &self.scope
                    && spec.and_then(|s| s.scheduler_name.as_deref())
                        != Some(scope.scheduler_name.as_str())
                {
                    return;
                }
                self.pending.insert(
                    k,
                    PendingPod {
                        ns: pod.namespace().unwrap_or_default(),
                        name: pod.name_any(),
                        requests: pod_requests(pod),
                        node_selector: spec
                            .and_then(|s| s.node_selector.clone())
                            .unwrap_or_default(),
                        tolerations: spec.and_then(|s| s.tolerations.clone()).unwrap_or_default(),
                        group: gang::gang_of(pod).map(|g| g.0),
                    },
                );
            }
        }
    }

    pub(super) fn on_node(&mut self, node: &Node) {
        let name = node.name_any();
        if let Some(scope) = &self.scope
            && !name.starts_with(&scope.node_prefix)
        {
            return;
        }
        let mut view = node_view(node);
        if let Some(old) = self.nodes.get(&name) {
            view.used = old.used.clone();
        }
        self.order
            .insert((view.used.get("pods").copied().unwrap_or(0), name.clone()));
        self.nodes.insert(name, view);
    }

    pub(super) fn remove_node(&mut self, name: &str) {
        if let Some(n) = self.nodes.remove(name) {
            self.order
                .remove(&(n.used.get("pods").copied().unwrap_or(0), name.to_owned()));
        }
    }

    /// Picks the feasible node with the fewest pods.
    pub(super) fn choose(&self, pod: &PendingPod) -> Option<String> {
        self.order
            .iter()
            .find(|(_, name)| self.nodes.get(name).is_some_and(|n| fits(n, pod)))
            .map(|(_, name)| name.clone())
    }
}
