//! The kubelets' pods: a `PodRun` per pod on a Ready node, updated from
//! the pod watch and synced (advanced, status compared) when due.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Instant;

use k8s_openapi::api::core::v1::PodStatus;
use kube::api::DynamicObject;
use kube::{Client, ResourceExt};

use crate::actors::ascend;
use crate::actors::kubelet::KubeletConfig;
use crate::actors::kubelet::agents::Agents;
use crate::actors::kubelet::pod::{PodRun, Timing};
use crate::actors::kubelet::spec::parse_pod;
use crate::actors::kubelet::status::{KUBELET_CONDITIONS, Transitions, fingerprint};
use crate::actors::runtime::Writer;
use crate::actors::util::key;

use super::{Entry, Input, NodeView, apply, exits, npus_of, rv_number, spawn_delete, spawn_status};

pub(super) struct Kubelets {
    pub(super) client: Client,
    pub(super) cfg: KubeletConfig,
    pub(super) writer: Writer<Input>,
    pub(super) agents: Agents,
    pub(super) nodes: HashMap<String, NodeView>,
    pub(super) pods: HashMap<String, Entry>,
    pub(super) by_node: HashMap<String, HashSet<String>>,
    /// The Ascend device plugin's allocations: node -> chip -> pod key.
    pub(super) chips: HashMap<String, HashMap<u32, String>>,
    pub(super) wakeups: BTreeSet<(Instant, String)>,
}

impl Kubelets {
    pub(super) fn forget(&mut self, k: &str) {
        self.agents.stop(k);
        if let Some(e) = self.pods.remove(k)
            && let Some(n) = e.node
        {
            if let Some(set) = self.by_node.get_mut(&n) {
                set.remove(k);
            }
            if let Some(set) = self.chips.get_mut(&n) {
                set.retain(|_, p| p != k);
            }
        }
    }

    /// A pod event; returns whether the pod needs a look.
    pub(super) fn on_pod(&mut self, obj: DynamicObject, now: Instant) -> Option<String> {
        let ns = obj.namespace().unwrap_or_default();
        let k = key(&ns, &obj.name_any());
        let uid = obj.uid().unwrap_or_default();
        let rv = obj.resource_version().unwrap_or_default();
        let rv_n = rv_number(&rv);
        let deleting = obj.metadata.deletion_timestamp.is_some();
        let annotated = obj.annotations().contains_key(ascend::DEVICE_ANNOTATION);
        let v = serde_json::to_value(&obj).ok()?;
        let status: PodStatus = serde_json::from_value(v["status"].clone()).unwrap_or_default();
        let node = v["spec"]["nodeName"]
            .as_str()
            .filter(|n| !n.is_empty())
            .map(str::to_owned);
        if self.pods.get(&k).is_some_and(|e| e.uid != uid) {
            // Another pod under the same name.
            self.forget(&k);
        }
        let e = self.pods.entry(k.clone()).or_insert_with(|| Entry {
            uid: uid.clone(),
            node: None,
            deleting: false,
            api_terminal: false,
            rv: String::new(),
            rv_n: 0,
            seen: 0,
            foreign: Vec::new(),
            spec: parse_pod(&v),
            npus: npus_of(&v),
            annotated: false,
            device: None,
            run: None,
            tr: Transitions::default(),
            in_flight: false,
            delete_in_flight: false,
            sent: None,
            conflicted_at: None,
            wake: None,
        });
        if rv_n != 0 && rv_n < e.rv_n {
            // Older than what a write of ours already answered.
            return None;
        }
        if e.node.is_none()
            && let Some(n) = &node
        {
            self.by_node.entry(n.clone()).or_default().insert(k.clone());
        }
        e.node = node;
        e.rv = rv;
        e.rv_n = rv_n;
        e.deleting = deleting;
        e.annotated |= annotated;
        e.api_terminal = matches!(status.phase.as_deref(), Some("Succeeded") | Some("Failed"));
        e.foreign = status
            .conditions
            .iter()
            .flatten()
            .filter(|c| !KUBELET_CONDITIONS.contains(&c.type_.as_str()))
            .cloned()
            .collect();
        e.seen = fingerprint(&status);
        if let Some(sent) = &mut e.sent
            && sent.rv == rv_n
        {
            sent.echo = Some(e.seen);
        }
        let t = Timing {
            costs: &self.cfg.costs,
            restart_delay: self.cfg.restart_delay,
        };
        if let Some(run) = &mut e.run {
            let mut fx = Vec::new();
            for (name, code, reason) in exits(run, &status) {
                run.exited(&name, code, &reason, now, t, &mut fx);
            }
            apply(
                &mut self.agents,
                &k,
                &e.uid,
                fx,
                &mut e.delete_in_flight,
                &self.writer,
                &self.client,
            );
        }
        Some(k)
    }

    /// Looks at one pod: starts it, advances it, writes its status, and
    /// sets its next wake-up.
    pub(super) fn sync(&mut self, k: &str, now: Instant) {
        let t = Timing {
            costs: &self.cfg.costs,
            restart_delay: self.cfg.restart_delay,
        };
        let Some(e) = self.pods.get_mut(k) else {
            return;
        };
        let Some(node) = e.node.as_ref().and_then(|n| self.nodes.get(n)) else {
            return;
        };
        if !node.ready {
            return;
        }
        if e.run.is_none() {
            if e.deleting {
                // Never ran here: nothing to stop.
                if !e.delete_in_flight {
                    e.delete_in_flight = true;
                    spawn_delete(&self.writer, &self.client, k, &e.uid);
                }
                return;
            }
            if e.api_terminal {
                return;
            }
            e.run = Some(PodRun::new(
                e.spec.clone(),
                node.ip.clone(),
                now,
                t.costs,
                self.cfg.start_delay,
            ));
            // The device plugin's Allocate: chips for the pod, written in
            // its annotation before the containers start.
            if e.npus > 0 && node.npus > 0 && !e.annotated {
                let node_name = e.node.clone().unwrap_or_default();
                let taken = self.chips.entry(node_name).or_default();
                taken.retain(|_, p| p != k);
                let used: Vec<u32> = taken.keys().copied().collect();
                match ascend::pick_chips(node.npus, &used, e.npus) {
                    Some(picked) => {
                        for c in &picked {
                            taken.insert(*c, k.to_owned());
                        }
                        let name = k.split_once('/').map_or(k, |(_, n)| n);
                        e.device = Some(ascend::device_annotation(name, &node.ip, &picked));
                    }
                    None => {
                        tracing::debug!(pod = %k, "not enough free Ascend chips for the annotation");
                    }
                }
            }
        }
        let Some(run) = e.run.as_mut() else { return };
        let mut fx = Vec::new();
        if e.deleting {
            run.delete(now, t, &mut fx);
        }
        run.advance(now, t, &mut fx);
        apply(
            &mut self.agents,
            k,
            &e.uid,
            fx,
            &mut e.delete_in_flight,
            &self.writer,
            &self.client,
        );
        // A deleted pod's status is written once more when it stopped
        // (its terminal phase), as the kubelet does before it goes.
        let writes = !e.deleting || run.terminal.is_some();
        if writes && !e.in_flight && e.conflicted_at != Some(e.rv_n) {
            let desired = run.status(&mut e.tr, &e.foreign);
            let hash = fingerprint(&desired);
            let echoed = e
                .sent
                .as_ref()
                .is_some_and(|s| s.hash == hash && s.echo == Some(e.seen));
            if hash != e.seen && !echoed {
                e.in_flight = true;
                spawn_status(&self.writer, &self.client, k, e, &desired, hash);
            }
        }
        let due = e.run.as_ref().and_then(PodRun::next_due);
        if let Some(due) = due
            && e.wake != Some(due)
        {
            e.wake = Some(due);
            self.wakeups.insert((due, k.to_owned()));
        }
    }
}
