//! Shared strings: the pool that holds each namespace, node name, label
//! and job reference once for thousands of pods, and the compact label
//! set built from it. Apart from what a pod is, which it only stores.

use crate::controller::core::hashing::HashSet;
use crate::workload::JobRef;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Strings that thousands of pods share (namespaces, node names, label
/// keys and values, container names) and the pods' job references, each
/// held once. At 20,000 pods the copies were most of the controller's
/// memory. Owned by the pods' watch task, which compacts the pods.
#[derive(Debug, Default)]
pub struct Interner {
    strings: HashSet<Arc<str>>,
    jobs: HashSet<Arc<JobRef>>,
    since_sweep: usize,
}

impl Interner {
    /// Pool entries added between sweeps; a sweep costs one pass over the
    /// pool, so this keeps it rare and the pool at most twice its live size.
    const SWEEP_EVERY: usize = 50_000;

    /// The shared copy of `s`.
    pub fn str(&mut self, s: &str) -> Arc<str> {
        if let Some(a) = self.strings.get(s) {
            return a.clone();
        }
        let a: Arc<str> = Arc::from(s);
        self.strings.insert(a.clone());
        self.added();
        a
    }

    /// The shared copy of a job reference.
    pub fn job(&mut self, j: JobRef) -> Arc<JobRef> {
        if let Some(a) = self.jobs.get(&j) {
            return a.clone();
        }
        let a = Arc::new(j);
        self.jobs.insert(a.clone());
        self.added();
        a
    }

    fn added(&mut self) {
        self.since_sweep += 1;
        if self.since_sweep >= Self::SWEEP_EVERY.max(self.strings.len() + self.jobs.len()) {
            self.sweep();
        }
    }

    /// Forget what only the pool still holds (jobs and nodes that are gone).
    pub fn sweep(&mut self) {
        self.strings.retain(|a| Arc::strong_count(a) > 1);
        self.jobs.retain(|a| Arc::strong_count(a) > 1);
        self.since_sweep = 0;
    }

    /// Entries in the pool (strings and job references).
    pub fn len(&self) -> usize {
        self.strings.len() + self.jobs.len()
    }

    /// Whether the pool is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A pod's labels, sorted by key, with shared strings: a few hundred bytes
/// where a `BTreeMap<String, String>` took a kilobyte.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Labels(Box<[(Arc<str>, Arc<str>)]>);

impl Labels {
    /// Labels from an object's map, through the interner.
    pub fn new(map: Option<&BTreeMap<String, String>>, pool: &mut Interner) -> Labels {
        Labels(
            map.into_iter()
                .flatten()
                .map(|(k, v)| (pool.str(k), pool.str(v)))
                .collect(),
        )
    }

    /// The value of a label.
    pub fn get(&self, key: &str) -> Option<&Arc<str>> {
        self.0
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &self.0[i].1)
    }

    /// As the map the policy engine and CEL read (made per decision, not
    /// kept).
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.0
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}
