//! Watch changes into the store and into occurrences. A relist replaces
//! what it covers; every carrier (pod, node, Event, device-plugin
//! ConfigMap) maps to the occurrences it carries now, so a rewrite that
//! carries the same occurrences changes nothing, and one that drops an
//! occurrence drops it from what is pending.

use super::input::{Change, PodSeen};
use super::occurrence::{self, OccurrenceId};
use super::store::{EventFault, JobInfo, NodeInfo, RetryLimit, Watched, job_key};
use super::{Core, Now, Occurrence, Scope};
use crate::api::WorkloadKind;
use crate::fault::Fault;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node};
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

fn pod_carrier(ns: &str, name: &str) -> String {
    format!("pod/{ns}/{name}")
}

impl Core {
    /// The occurrences `key` carries now: new ones are counted into the
    /// escalation history (also on a standby, so it is warm at take-over)
    /// and decided when the core acts; vanished ones are no longer pending.
    pub(super) fn set_carrier(&mut self, key: String, occs: Vec<Occurrence>, now: Now) {
        let new_ids: Vec<OccurrenceId> = occs.iter().map(|o| o.id).collect();
        let old = if new_ids.is_empty() {
            self.carriers.remove(&key).unwrap_or_default()
        } else {
            self.carriers
                .insert(key, new_ids.clone())
                .unwrap_or_default()
        };
        for id in old.iter().filter(|id| !new_ids.contains(id)) {
            self.current.remove(id);
            self.acted_for.remove(id);
            if let Some(e) = self.ledger.get(*id)
                && matches!(e.fate, occurrence::Fate::Pending { .. })
            {
                self.ledger.forget(*id);
            }
        }
        for o in occs {
            let id = o.id;
            let fresh = !self.current.contains_key(&id);
            if self.ledger.count_once(id) {
                let view = self.node_view(o.fault.node.as_deref());
                let c = self
                    .engine
                    .classifier
                    .classify(o.fault.clone(), view.as_ref(), now.wall);
                if let Some(v) = &self.clusterd {
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

    pub(super) fn on_event(&mut self, c: Change<Box<Event>>, now: Now) {
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
        if let (Some(node), Scope::NodeEvent) = (&f.node, &scope) {
            self.dirty_nodes.insert(node.clone());
        }
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
        if let Some(e) = self.store.event_faults.remove(key)
            && let Some(n) = e.fault.node
        {
            self.dirty_nodes.insert(n);
        }
        self.set_carrier(key.to_string(), Vec::new(), now);
    }

    pub(super) fn on_device_info(&mut self, c: Change<Box<ConfigMap>>, now: Now) {
        match c {
            Change::Apply(cm) => {
                let Some(node) = crate::fault::ascend::deviceinfo_node(&cm) else {
                    return;
                };
                let key = format!("device/{node}");
                self.store.relists.saw(Watched::DeviceInfo, &key);
                match crate::fault::ascend::deviceinfo_faults(&cm, now.wall) {
                    Ok(mut faults) => {
                        // A fault listed again is the same occurrence: keep
                        // the time it was first listed when the plugin
                        // wrote none of its own.
                        if let Some((prev, _)) = self.store.device_faults.get(&node) {
                            for f in &mut faults {
                                if let Some(p) = prev.iter().find(|p| {
                                    p.code == f.code && p.device == f.device && p.source == f.source
                                }) {
                                    f.first_seen = p.first_seen;
                                    f.last_seen = p.last_seen;
                                }
                            }
                        }
                        let parsed = crate::fault::ascend::parse_deviceinfo(&cm).ok();
                        let healthy =
                            faults.is_empty() || parsed.as_ref().is_some_and(|d| d.healthy());
                        if let Some(v) = &self.clusterd {
                            v.set_device_info(&node, parsed);
                        }
                        let occs = node_occurrences(&faults, Scope::Node, now);
                        self.store
                            .device_faults
                            .insert(node.clone(), (faults, healthy));
                        self.set_carrier(key, occs, now);
                        self.dirty_nodes.insert(node);
                    }
                    Err(e) => {
                        tracing::warn!(configmap = %cm.name_any(), error = %e, "unreadable device-plugin ConfigMap");
                        self.metrics
                            .parse_errors
                            .get_or_create(&crate::metrics::KindLabels {
                                kind: "ConfigMap".into(),
                            })
                            .inc();
                    }
                }
            }
            Change::Delete(cm) => {
                if let Some(node) = crate::fault::ascend::deviceinfo_node(&cm) {
                    self.device_removed(&node, now);
                }
            }
            Change::Relist => self.store.relists.begin(Watched::DeviceInfo),
            Change::Synced => {
                if let Some(seen) = self.end_relist(Watched::DeviceInfo) {
                    let gone: Vec<String> = self
                        .store
                        .device_faults
                        .keys()
                        .filter(|n| !seen.contains(&format!("device/{n}")))
                        .cloned()
                        .collect();
                    for n in gone {
                        self.device_removed(&n, now);
                    }
                }
            }
        }
    }

    fn device_removed(&mut self, node: &str, now: Now) {
        self.store.device_faults.remove(node);
        if let Some(v) = &self.clusterd {
            v.set_device_info(node, None);
        }
        self.set_carrier(format!("device/{node}"), Vec::new(), now);
        self.dirty_nodes.insert(node.to_string());
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

/// What the core keeps of a job object.
pub fn job_info(kind: WorkloadKind, o: &DynamicObject) -> JobInfo {
    let annotations: BTreeMap<String, String> = o.annotations().clone();
    JobInfo {
        resource_version: o.resource_version(),
        labels: o.labels().clone(),
        // For the kinds with a retry limit of their own (batch Job,
        // Volcano, JobSet), the limit decides (`spec.restart.onRetryLimit`);
        // `Never` is the training operators' and bare pods' word.
        never: !matches!(
            kind,
            WorkloadKind::Job
                | WorkloadKind::VolcanoJob
                | WorkloadKind::JobSet
                | WorkloadKind::TrainJob
        ) && crate::workload::restart_policy_never(kind, &o.data, None),
        uid: o.uid(),
        history: crate::recover::read_history(&annotations),
        generation: crate::inplace::Generation::from_annotations(&annotations),
        retry_limit: retry_limit(kind, &o.data),
        counted_restarts: super::restart_counts::counted_restarts(kind, &o.data),
        native_in_place: kind == WorkloadKind::JobSet
            && o.data["spec"]["failurePolicy"]["restartStrategy"].as_str()
                == Some("InPlaceRestart"),
        trainjob: (kind == WorkloadKind::JobSet)
            .then(|| trainjob_owner(o))
            .flatten(),
        annotations,
    }
}

/// The TrainJob a JobSet runs for: its controller owner of group
/// `trainer.kubeflow.org` (Trainer v2 names the JobSet after it).
fn trainjob_owner(o: &DynamicObject) -> Option<Arc<crate::workload::JobRef>> {
    let owner = o
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))?;
    let group = owner.api_version.split('/').next().unwrap_or_default();
    if group != "trainer.kubeflow.org" || owner.kind != "TrainJob" {
        return None;
    }
    Some(Arc::new(crate::workload::JobRef {
        kind: WorkloadKind::TrainJob,
        api_version: owner.api_version.clone(),
        plural: "trainjobs".into(),
        namespace: o.namespace().unwrap_or_default(),
        name: owner.name.clone(),
        uid: Some(owner.uid.clone()).filter(|u| !u.is_empty()),
    }))
}

/// The retry limit of a job's own operator, as its spec and status stand.
///
/// - batch Job: `spec.backoffLimit` (default 6) minus `status.failed`:
///   the Job controller counts every deleted, unfinished pod as failed.
/// - Volcano Job: `spec.maxRetry` (default 3) minus `status.retryCount`:
///   a restart counts one retry.
/// - JobSet: `spec.failurePolicy.maxRestarts` (default 0) minus
///   `status.restarts`: a restart that fails a child Job (one whose
///   `backoffLimit` is 0) restarts the JobSet once.
/// - Kubeflow: none (the training operator recreates deleted pods without
///   counting them against `runPolicy.backoffLimit`, which counts container
///   restarts).
pub fn retry_limit(kind: WorkloadKind, data: &Value) -> Option<RetryLimit> {
    let int = |v: &Value, d: i64| v.as_i64().unwrap_or(d);
    match kind {
        WorkloadKind::Job => Some(RetryLimit {
            field: "spec.backoffLimit",
            remaining: int(&data["spec"]["backoffLimit"], 6) - int(&data["status"]["failed"], 0),
            per_restart: None,
        }),
        WorkloadKind::VolcanoJob => Some(RetryLimit {
            field: "spec.maxRetry",
            remaining: int(&data["spec"]["maxRetry"], 3) - int(&data["status"]["retryCount"], 0),
            per_restart: Some(1),
        }),
        WorkloadKind::JobSet => {
            // A deleted pod fails its child Job only when that Job allows
            // no failure; then the JobSet restarts once.
            let fails_child = data["spec"]["replicatedJobs"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|rj| {
                    let s = &rj["template"]["spec"];
                    s["backoffLimit"].as_i64() == Some(0)
                        || s["backoffLimitPerIndex"].as_i64() == Some(0)
                });
            Some(RetryLimit {
                field: "spec.failurePolicy.maxRestarts",
                remaining: int(&data["spec"]["failurePolicy"]["maxRestarts"], 0)
                    - int(&data["status"]["restarts"], 0),
                per_restart: Some(i64::from(fails_child)),
            })
        }
        _ => None,
    }
}

/// The jobs of a pod's scope (tests and the decision).
pub fn scope_job(s: &Scope) -> Option<Arc<crate::workload::JobRef>> {
    match s {
        Scope::Pod(j) => Some(j.clone()),
        _ => None,
    }
}
