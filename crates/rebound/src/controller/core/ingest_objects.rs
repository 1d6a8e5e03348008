//! Watch changes of the objects that say what to do and to whom: policies,
//! classifications, job objects and the installed job kinds.

use super::ingest::job_info;
use super::input::Change;
use super::store::Watched;
use super::{Core, Now};
use crate::api::{FaultClassification, RecoveryPolicy, WorkloadKind};
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::discovery::ApiResource;
use std::collections::BTreeSet;

impl Core {
    pub(super) fn on_policy(&mut self, c: Change<Box<RecoveryPolicy>>, _now: Now) {
        self.hang.forget_all_choices();
        match c {
            Change::Apply(p) => {
                let (ns, name) = (p.namespace().unwrap_or_default(), p.name_any());
                self.store
                    .relists
                    .saw(Watched::Policies, &format!("{ns}/{name}"));
                let r = self.engine.policies.upsert(&p);
                self.status.policy_changed(&p, r);
            }
            Change::Delete(p) => {
                let ns = p.namespace().unwrap_or_default();
                self.engine.policies.remove(&ns, &p.name_any());
                self.status.policy_deleted(&ns, &p.name_any());
            }
            Change::Relist => self.store.relists.begin(Watched::Policies),
            Change::Synced => {
                if let Some(seen) = self.end_relist(Watched::Policies) {
                    for (ns, name) in self.status.policy_keys() {
                        if !seen.contains(&format!("{ns}/{name}")) {
                            self.engine.policies.remove(&ns, &name);
                            self.status.policy_deleted(&ns, &name);
                        }
                    }
                }
            }
        }
        let root = self.engine.policies.root_namespace();
        let mut keys = super::pods::KeySet::default();
        for p in self.engine.policies.iter() {
            if let Some(h) = &p.hang {
                if p.namespace == root {
                    keys.read_everywhere(&h.annotation);
                } else {
                    keys.read_in(&h.annotation, &p.namespace);
                }
            }
        }
        self.progress_keys.set(keys);
    }

    pub(super) fn on_classification(&mut self, c: Change<Box<FaultClassification>>, _now: Now) {
        match c {
            Change::Apply(o) => {
                self.store
                    .relists
                    .saw(Watched::Classifications, &o.name_any());
                let r = self.engine.classifier.upsert(&o);
                self.status.classification_changed(&o, r);
            }
            Change::Delete(o) => {
                self.engine.classifier.remove(&o.name_any());
                self.status.classification_deleted(&o.name_any());
            }
            Change::Relist => self.store.relists.begin(Watched::Classifications),
            Change::Synced => {
                if let Some(seen) = self.end_relist(Watched::Classifications) {
                    for name in self.status.classification_keys() {
                        if !seen.contains(&name) {
                            self.engine.classifier.remove(&name);
                            self.status.classification_deleted(&name);
                        }
                    }
                }
            }
        }
        // Levels may have changed: every node is looked at again.
        self.dirty_nodes.extend(self.store.nodes.keys().cloned());
    }

    pub(super) fn on_job(&mut self, kind: WorkloadKind, c: Change<DynamicObject>, now: Now) {
        let w = Watched::Jobs(kind);
        match c {
            Change::Apply(o) => {
                let key = (
                    o.namespace().unwrap_or_default(),
                    kind.as_str().to_string(),
                    o.name_any(),
                );
                self.store.relists.saw(w, &format!("{}/{}", key.0, key.2));
                let info = job_info(kind, &o);
                self.hang.forget_choice(&key);
                self.job_seen(&key, &info);
                let before = self.store.jobs.insert(key.clone(), info);
                if kind == WorkloadKind::JobSet {
                    let before = before.and_then(|b| b.trainjob);
                    let after = self.store.jobs.get(&key).and_then(|j| j.trainjob.as_ref());
                    if before.as_ref() != after {
                        self.store.rehome_jobset(&key, before.as_ref());
                    }
                }
                self.job_progress(&key, now);
                self.resume_if_unfollowed(&key, now);
                self.unseen_job_arrived(&key, now);
                if self.recoveries.contains_key(&key) {
                    self.dirty_jobs.insert(key);
                }
            }
            Change::Delete(o) => {
                let key = (
                    o.namespace().unwrap_or_default(),
                    kind.as_str().to_string(),
                    o.name_any(),
                );
                // The delete of an earlier incarnation (same name, another
                // uid) leaves the current one's recovery alone.
                let other = |u: &Option<String>| u.is_some() && o.uid().is_some() && *u != o.uid();
                if self.recoveries.get(&key).is_some_and(|r| other(&r.job.uid)) {
                    if self.store.jobs.get(&key).is_some_and(|j| !other(&j.uid)) {
                        self.store.jobs.remove(&key);
                    }
                    return;
                }
                self.job_removed(&key);
            }
            Change::Relist => self.store.relists.begin(w),
            Change::Synced => {
                if let Some(seen) = self.end_relist(w) {
                    let gone: Vec<_> = self
                        .store
                        .jobs
                        .keys()
                        .filter(|k| {
                            k.1 == kind.as_str() && !seen.contains(&format!("{}/{}", k.0, k.2))
                        })
                        .cloned()
                        .collect();
                    for k in gone {
                        self.job_removed(&k);
                    }
                }
            }
        }
    }

    pub(super) fn job_removed(&mut self, key: &super::store::JobKey) {
        let before = self.store.jobs.remove(key).and_then(|j| j.trainjob);
        if before.is_some() {
            self.store.rehome_jobset(key, before.as_ref());
        }
        self.hang.forget_job(key);
        self.recorded.remove(key);
        self.written_gen.remove(key);
        if self.recoveries.remove(key).is_some() {
            tracing::info!(job = ?key, "job deleted during its recovery");
        }
    }

    pub(super) fn on_job_kinds(&mut self, kinds: Vec<(WorkloadKind, ApiResource)>, at: Now) {
        let now: BTreeSet<WorkloadKind> = kinds.iter().map(|(k, _)| *k).collect();
        self.fresh.resources = kinds.clone();
        // A kind installed during a term is read afresh too.
        self.read_new_kinds(at);
        if let Some(before) = self.kinds.clone() {
            for gone in before.difference(&now) {
                self.synced.remove(&Watched::Jobs(*gone));
                self.store.relists.cancel(Watched::Jobs(*gone));
                let keys: Vec<_> = self
                    .store
                    .jobs
                    .keys()
                    .filter(|k| k.1 == gone.as_str())
                    .cloned()
                    .collect();
                for k in keys {
                    self.job_removed(&k);
                }
            }
        }
        self.kinds = Some(now);
        self.synced.insert(Watched::Kinds);
    }
}
