//! Watch changes into the store and into occurrences. A relist replaces
//! what it covers; every carrier (pod, node, Event, device-plugin
//! ConfigMap) maps to the occurrences it carries now, so a rewrite that
//! carries the same occurrences changes nothing, and one that drops an
//! occurrence drops it from what is pending.

use super::input::{Change, PodSeen};
use super::occurrence::{self, OccurrenceId};
use super::store::{NodeInfo, Watched, job_key};
use super::{Core, Now, Occurrence, Scope};
use crate::classify::HistoryKey;
use crate::controller::core::hashing::HashSet;
use crate::fault::Fault;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use std::sync::Arc;

mod device_info;
mod dra;
mod events;
mod job_info;

pub use job_info::job_info;

fn pod_carrier(ns: &str, name: &str) -> String {
    format!("pod/{ns}/{name}")
}

impl Core {
    /// The occurrences `key` carries now: new ones are counted into the
    /// escalation history (also on a standby, so it is warm at take-over)
    /// and decided when the core acts; vanished ones are no longer pending.
    pub(super) fn set_carrier(&mut self, key: String, occs: Vec<Occurrence>, now: Now) {
        let new_ids: Vec<OccurrenceId> = occs.iter().map(|o| o.id).collect();
        let clears = key.starts_with("node/") || key.starts_with("device/");
        let old = if new_ids.is_empty() {
            self.carriers.remove(&key).unwrap_or_default()
        } else {
            self.carriers
                .insert(key, new_ids.clone())
                .unwrap_or_default()
        };
        // A carrier that sends a clear signal (a Node's conditions, a
        // device plugin's ConfigMap) no longer carrying a fault: its
        // episode ends, unless the rewrite carries the same line on. A
        // line of the same key that began at another time is not the same
        // line: the fault cleared in between, though this reader never saw
        // the carrier clear (a relist, or writes faster than the watch).
        let mut ended: Vec<(HistoryKey, i64)> = Vec::new();
        for id in old.iter().filter(|id| !new_ids.contains(id)) {
            if let Some(o) = self.current.remove(id)
                && clears
            {
                ended.push((
                    HistoryKey::of(&o.fault),
                    o.fault.first_seen.timestamp_millis(),
                ));
            }
            if let Some(e) = self.ledger.get(*id)
                && matches!(e.fate, occurrence::Fate::Pending { .. })
            {
                self.ledger.forget(*id);
            }
        }
        let carried: HashSet<(HistoryKey, i64)> = if ended.is_empty() {
            HashSet::default()
        } else {
            occs.iter()
                .map(|o| {
                    (
                        HistoryKey::of(&o.fault),
                        o.fault.first_seen.timestamp_millis(),
                    )
                })
                .collect()
        };
        for (k, _) in ended.iter().filter(|k| !carried.contains(*k)) {
            self.engine.classifier.end_episode(k);
        }
        for mut o in occs {
            let id = o.id;
            let fresh = !self.current.contains_key(&id);
            // An occurrence keeps the time it was first dated: a rewrite of
            // its carrier (a heartbeat, another line changing) is not a new
            // sighting. A repeat a line's count only bounds is dated when
            // it was first observed; re-dated at every rewrite, it would
            // concern pods created long after it happened (a job restarted
            // for it once would be restarted again: seed 1592590341).
            if let Some(old) = self.current.get(&id) {
                o.fault.last_seen = o.fault.last_seen.min(old.fault.last_seen);
                o.received = old.received.or(o.received);
            }
            if self.ledger.count_once(id) {
                let view = self.node_view(o.fault.node.as_deref());
                let c = self
                    .engine
                    .classifier
                    .classify(o.fault.clone(), view.as_ref(), now.wall);
                // The cluster fault view schedulers read is node state:
                // trusted faults only.
                if let Some(v) = self.clusterd.as_ref().filter(|_| c.fault.trusted) {
                    v.note_level(&c.fault, c.level);
                }
            }
            self.current.insert(id, o);
            if fresh && self.acting() {
                self.decide_current(id, now);
            }
        }
    }

    pub(super) fn end_relist(&mut self, w: Watched) -> Option<HashSet<String>> {
        self.synced.insert(w);
        self.store.relists.end(w)
    }

    pub(super) fn on_pod(&mut self, c: Change<PodSeen>, now: Now) {
        match c {
            Change::Apply(PodSeen {
                mut info,
                faults,
                resource_version,
            }) => {
                self.store.saw_pods_at(resource_version);
                self.store.resolve_pod(&mut info);
                let key = pod_carrier(&info.namespace, &info.name);
                self.store.relists.saw(Watched::Pods, &key);
                let job = info.job.clone();
                let jk = job_key(&job);
                let old = self.store.pod(&info.namespace, &info.name);
                match old {
                    Some(o) if o.labels == info.labels && o.job == info.job => {}
                    Some(o) => {
                        let ok = job_key(&o.job);
                        self.hang.forget_choice(&ok);
                        self.hang.forget_choice(&jk);
                    }
                    None => self.hang.forget_choice(&jk),
                }
                let old_progress = old.map(|p| p.progress.clone()).unwrap_or_default();
                let reports = !info.progress.is_empty();
                let (ns, name) = (info.namespace.clone(), info.name.clone());
                self.store.upsert_pod(info);
                if reports {
                    self.pod_progress(&ns, &name, old_progress, now);
                }
                let occs = faults
                    .into_iter()
                    .map(|f| Occurrence {
                        id: occurrence::pod_occurrence(&f),
                        fault: f,
                        scope: Scope::Pod(job.clone()),
                        received: Some(now.mono),
                    })
                    .collect();
                self.set_carrier(key, occs, now);
                if self.recoveries.contains_key(&jk) {
                    self.dirty_jobs.insert(jk);
                }
            }
            Change::Delete(PodSeen {
                info,
                resource_version,
                ..
            }) => {
                self.store.saw_pods_at(resource_version);
                self.remove_pod(&info.namespace.clone(), &info.name.clone(), now);
            }
            Change::Relist if self.store.pod_count() == 0 => {
                self.store.relists.begin_from_nothing(Watched::Pods)
            }
            Change::Relist => self.store.relists.begin(Watched::Pods),
            Change::Synced => {
                if let Some(seen) = self.end_relist(Watched::Pods) {
                    let gone: Vec<(String, String)> = self
                        .store
                        .all_pods()
                        .filter(|p| !seen.contains(&pod_carrier(&p.namespace, &p.name)))
                        .map(|p| (p.namespace.to_string(), p.name.to_string()))
                        .collect();
                    for (ns, name) in gone {
                        self.remove_pod(&ns, &name, now);
                    }
                }
            }
        }
    }

    fn remove_pod(&mut self, ns: &str, name: &str, now: Now) {
        if let Some(old) = self.store.remove_pod(ns, name) {
            let jk = job_key(&old.job);
            self.hang.forget_choice(&jk);
            if self.recoveries.contains_key(&jk) {
                self.dirty_jobs.insert(jk);
            }
        }
        self.set_carrier(pod_carrier(ns, name), Vec::new(), now);
    }

    pub(super) fn on_node(&mut self, c: Change<Box<Node>>, now: Now) {
        match c {
            Change::Apply(n) => {
                let name = n.name_any();
                let key = format!("node/{name}");
                self.store.relists.saw(Watched::Nodes, &key);
                let faults =
                    crate::fault::node::node_faults(&n, &self.cfg.condition_types, now.wall);
                if let Some(v) = &self.clusterd {
                    v.set_node_faults(&name, &faults);
                }
                let occs = node_occurrences(&faults, Scope::Node, now);
                self.store
                    .nodes
                    .insert(name.clone(), NodeInfo::from_node(&n, faults));
                self.engine.breaker.total_nodes = self.store.nodes.len() as u32;
                self.set_carrier(key, occs, now);
                self.dirty_nodes.insert(name);
            }
            Change::Delete(n) => self.remove_node(&n.name_any(), now),
            Change::Relist => self.store.relists.begin(Watched::Nodes),
            Change::Synced => {
                if let Some(seen) = self.end_relist(Watched::Nodes) {
                    let gone: Vec<String> = self
                        .store
                        .nodes
                        .keys()
                        .filter(|n| !seen.contains(&format!("node/{n}")))
                        .cloned()
                        .collect();
                    for n in gone {
                        self.remove_node(&n, now);
                    }
                }
            }
        }
    }

    fn remove_node(&mut self, name: &str, now: Now) {
        self.store.nodes.remove(name);
        self.engine.breaker.total_nodes = self.store.nodes.len() as u32;
        if let Some(v) = &self.clusterd {
            v.remove_node(name);
        }
        self.nodes.forget(name);
        self.set_carrier(format!("node/{name}"), Vec::new(), now);
    }
}

/// The occurrences of node faults (condition lines, device faults, Events
/// with the reporter's identity): one per count of each line, the newest
/// [`occurrence::MATERIALIZED`] at most.
fn node_occurrences(faults: &[Fault], scope: Scope, now: Now) -> Vec<Occurrence> {
    faults
        .iter()
        .flat_map(|f| occurrence::line_occurrences(f, now.wall))
        .map(|(id, fault)| Occurrence {
            id,
            fault,
            scope: scope.clone(),
            received: Some(now.mono),
        })
        .collect()
}

/// The jobs of a pod's scope (tests and the decision).
pub fn scope_job(s: &Scope) -> Option<Arc<crate::workload::JobRef>> {
    match s {
        Scope::Pod(j) => Some(j.clone()),
        _ => None,
    }
}
