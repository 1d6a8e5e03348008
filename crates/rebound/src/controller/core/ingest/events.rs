//! Kubernetes Events as fault carriers: a fault Event (ours, or a tenant's)
//! maps to its occurrences while it exists, bounded per line; apart from
//! the carriers that are objects of their own (pods, nodes, ConfigMaps).

use super::super::input::Change;
use super::super::occurrence;
use super::super::store::{EventFault, Watched};
use super::super::{Core, Now, Occurrence, Scope};
use super::node_occurrences;
use k8s_openapi::api::core::v1::Event;
use kube::ResourceExt;

impl Core {
    pub(in crate::controller::core) fn on_event(&mut self, c: Change<Box<Event>>, now: Now) {
        match c {
            Change::Apply(ev) => {
                let key = format!(
                    "event/{}/{}",
                    ev.namespace().unwrap_or_default(),
                    ev.name_any()
                );
                self.store.relists.saw(Watched::Events, &key);
                self.event_applied(key, &ev, now);
            }
            Change::Delete(ev) => {
                let key = format!(
                    "event/{}/{}",
                    ev.namespace().unwrap_or_default(),
                    ev.name_any()
                );
                self.event_removed(&key, now);
            }
            Change::Relist => self.store.relists.begin(Watched::Events),
            Change::Synced => {
                if let Some(seen) = self.end_relist(Watched::Events) {
                    let gone: Vec<String> = self
                        .store
                        .event_faults
                        .keys()
                        .filter(|k| !seen.contains(*k))
                        .cloned()
                        .collect();
                    for k in gone {
                        self.event_removed(&k, now);
                    }
                }
            }
        }
    }

    fn event_applied(&mut self, key: String, ev: &Event, now: Now) {
        let f = match crate::fault::event::event_fault(ev, &self.cfg.root, now.wall) {
            None => return,
            Some(Err(e)) => {
                tracing::warn!(event = %ev.name_any(), error = %e, "unreadable fault Event");
                self.metrics
                    .parse_errors
                    .get_or_create(&crate::metrics::KindLabels {
                        kind: "Event".into(),
                    })
                    .inc();
                return;
            }
            Some(Ok(f)) => f,
        };
        // A tenant's Events are tracked up to a cap per namespace.
        if let Some(ns) = f.domain().tenant()
            && !self.store.event_faults.contains_key(&key)
            && self.store.tenant_events(ns) >= crate::fault::event::MAX_TENANT_EVENTS
        {
            tracing::debug!(namespace = %ns, event = %ev.name_any(), "tenant's fault Events at their cap: not tracked");
            self.metrics
                .parse_errors
                .get_or_create(&crate::metrics::KindLabels {
                    kind: "TenantEventOverCap".into(),
                })
                .inc();
            return;
        }
        let seen = crate::fault::event::event_time(ev).unwrap_or(now.wall);
        let age = (now.wall - seen).to_std().unwrap_or_default();
        if age > self.cfg.fault_max_age {
            return;
        }
        let scope = match (&f.pod, &f.namespace) {
            (Some(pod), Some(ns)) => match self.store.pod(ns, pod) {
                Some(p) => Scope::Pod(p.job.clone()),
                None if f.node.is_some() => Scope::NodeEvent,
                None => return,
            },
            _ if f.node.is_some() => Scope::NodeEvent,
            _ => return,
        };
        let uid = ev.uid().unwrap_or_default();
        let count = f.count;
        let occs = if f.first_seen == f.last_seen && has_reporter_identity(ev) {
            node_occurrences(std::slice::from_ref(&f), scope.clone(), now)
        } else {
            // The newest counts only: a tenant writes `count`.
            occurrence::materialized(count)
                .map(|k| {
                    let mut g = f.clone();
                    // The message once, on the newest count only.
                    if k != count {
                        g.message = None;
                    }
                    g.count = k;
                    Occurrence {
                        id: occurrence::event_occurrence(&uid, k),
                        fault: g,
                        scope: scope.clone(),
                        received: Some(now.mono),
                    }
                })
                .collect()
        };
        // Only a trusted Event reaches node state.
        if let (Some(node), Scope::NodeEvent, true) = (&f.node, &scope, f.trusted) {
            self.dirty_nodes.insert(node.clone());
        }
        let before = self.store.event_faults.get(&key).map(|e| e.fault.clone());
        self.store.index_node_event(&key, before.as_ref(), Some(&f));
        if let Some(b) = before.as_ref().filter(|b| b.trusted)
            && let Some(n) = &b.node
        {
            self.dirty_nodes.insert(n.clone());
        }
        self.store.count_tenant_event(before.as_ref(), Some(&f));
        self.store.event_faults.insert(
            key.clone(),
            EventFault {
                fault: f,
                uid,
                count,
            },
        );
        self.set_carrier(key, occs, now);
    }

    fn event_removed(&mut self, key: &str, now: Now) {
        if let Some(e) = self.store.event_faults.remove(key) {
            self.store.index_node_event(key, Some(&e.fault), None);
            self.store.count_tenant_event(Some(&e.fault), None);
            if e.fault.trusted
                && let Some(n) = e.fault.node
            {
                self.dirty_nodes.insert(n);
            }
        }
        self.set_carrier(key.to_string(), Vec::new(), now);
    }
}

/// Whether the Event carries the reporter's occurrence time (`at`), so
/// that its occurrences are the ones of the condition line.
fn has_reporter_identity(ev: &Event) -> bool {
    ev.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(crate::fault::wire::FAULT_ANNOTATION))
        .and_then(|v| crate::fault::wire::parse_annotation(v).ok())
        .is_some_and(|w| w.at.is_some())
}
