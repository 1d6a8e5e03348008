//! What an operator keeps of its custom resources (jobs are few, so whole
//! objects), keyed by `namespace/name`, with the uid index that maps a
//! child's owner reference back to its job.

use std::collections::{HashMap, HashSet};

use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::watcher::Event;

use super::util::key;

/// Jobs of one or more kinds, from their watches.
#[derive(Debug, Default)]
pub(crate) struct JobStore {
    pub jobs: HashMap<String, DynamicObject>,
    uid_key: HashMap<String, String>,
    snapshots: HashMap<&'static str, HashSet<String>>,
}

/// What a job watch event changed.
#[derive(Debug, Default)]
pub(crate) struct JobChange {
    /// Jobs to reconcile.
    pub dirty: Vec<String>,
    /// Jobs that went away: (key, uid).
    pub deleted: Vec<(String, String)>,
}

impl JobStore {
    /// Applies one watch event of the jobs of `kind`.
    pub fn on_event(&mut self, kind: &'static str, ev: Event<DynamicObject>) -> JobChange {
        let mut ch = JobChange::default();
        match ev {
            Event::Init => {
                self.snapshots.insert(kind, HashSet::new());
            }
            Event::InitApply(o) => {
                let k = self.apply(o, kind);
                if let Some(s) = self.snapshots.get_mut(kind) {
                    s.insert(k.clone());
                }
                ch.dirty.push(k);
            }
            Event::InitDone => {
                if let Some(seen) = self.snapshots.remove(kind) {
                    let gone: Vec<String> = self
                        .jobs
                        .iter()
                        .filter(|(k, o)| kind_of(o) == kind && !seen.contains(*k))
                        .map(|(k, _)| k.clone())
                        .collect();
                    for k in gone {
                        if let Some(o) = self.jobs.remove(&k) {
                            let uid = o.uid().unwrap_or_default();
                            self.uid_key.remove(&uid);
                            ch.deleted.push((k, uid));
                        }
                    }
                }
            }
            Event::Apply(o) => ch.dirty.push(self.apply(o, kind)),
            Event::Delete(o) => {
                let k = key(&o.namespace().unwrap_or_default(), &o.name_any());
                if let Some(old) = self.jobs.remove(&k) {
                    let uid = old.uid().unwrap_or_default();
                    self.uid_key.remove(&uid);
                    ch.deleted.push((k, uid));
                }
            }
        }
        ch
    }

    fn apply(&mut self, mut o: DynamicObject, kind: &'static str) -> String {
        let k = key(&o.namespace().unwrap_or_default(), &o.name_any());
        if let Some(uid) = o.uid() {
            self.uid_key.insert(uid, k.clone());
        }
        if o.types.is_none() {
            o.types = Some(kube::api::TypeMeta {
                api_version: String::new(),
                kind: kind.to_owned(),
            });
        } else if let Some(t) = o.types.as_mut() {
            t.kind = kind.to_owned();
        }
        o.metadata.managed_fields = None;
        self.jobs.insert(k.clone(), o);
        k
    }

    /// The key of the job with this uid.
    pub fn key_of_uid(&self, uid: &str) -> Option<&String> {
        self.uid_key.get(uid)
    }
}

/// The kind recorded for a stored job.
pub(crate) fn kind_of(o: &DynamicObject) -> &str {
    o.types.as_ref().map(|t| t.kind.as_str()).unwrap_or("")
}
