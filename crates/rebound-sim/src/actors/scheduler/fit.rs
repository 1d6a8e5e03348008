//! Whether a pod fits a node: its extended-resource requests, the
//! node's readiness, labels, taints and free capacity.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::{Node, Pod, Taint, Toleration};
use kube::ResourceExt;

use super::{NodeView, PendingPod};

/// Extended resources (names with a `/`) a pod asks for, summed over its
/// containers; limits count when requests are absent, as for GPUs.
pub(super) fn pod_requests(pod: &Pod) -> HashMap<String, i64> {
    let mut out: HashMap<String, i64> = HashMap::new();
    out.insert("pods".into(), 1);
    let Some(spec) = &pod.spec else { return out };
    for c in &spec.containers {
        let Some(res) = &c.resources else { continue };
        let mut seen = HashSet::new();
        for list in [&res.requests, &res.limits].into_iter().flatten() {
            for (k, q) in list {
                if k.contains('/') && seen.insert(k.clone()) {
                    *out.entry(k.clone()).or_default() += q.0.parse::<i64>().unwrap_or(0);
                }
            }
        }
    }
    out
}

pub(super) fn node_view(node: &Node) -> NodeView {
    let status = node.status.as_ref();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    let spec = node.spec.as_ref();
    let mut allocatable = HashMap::new();
    if let Some(a) = status.and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref())) {
        for (k, q) in a {
            if k.contains('/') || k == "pods" {
                allocatable.insert(k.clone(), q.0.parse::<i64>().unwrap_or(0));
            }
        }
    }
    allocatable.entry("pods".into()).or_insert(110);
    NodeView {
        ready,
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        labels: node.labels().clone(),
        taints: spec.and_then(|s| s.taints.clone()).unwrap_or_default(),
        allocatable,
        used: HashMap::new(),
    }
}

/// Whether `tols` tolerate `taint`, with the matching rules of the real
/// scheduler (empty key with Exists matches everything, empty effect matches
/// every effect).
pub(super) fn tolerates(tols: &[Toleration], taint: &Taint) -> bool {
    tols.iter().any(|t| {
        let effect_ok = t
            .effect
            .as_deref()
            .is_none_or(|e| e.is_empty() || e == taint.effect);
        if !effect_ok {
            return false;
        }
        let op = t.operator.as_deref().unwrap_or("Equal");
        match t.key.as_deref() {
            None | Some("") => op == "Exists",
            Some(k) if k == taint.key => {
                op == "Exists"
                    || t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
            }
            _ => false,
        }
    })
}

pub(super) fn fits(node: &NodeView, pod: &PendingPod) -> bool {
    if !node.ready || node.unschedulable {
        return false;
    }
    if pod
        .node_selector
        .iter()
        .any(|(k, v)| node.labels.get(k) != Some(v))
    {
        return false;
    }
    if node
        .taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .any(|t| !tolerates(&pod.tolerations, t))
    {
        return false;
    }
    pod.requests.iter().all(|(r, n)| {
        let have = node.allocatable.get(r).copied().unwrap_or(0);
        let used = node.used.get(r).copied().unwrap_or(0);
        used + n <= have
    })
}
