//! The object store: every object of every resource as JSON, one global
//! monotonic resourceVersion, the event history that watches resume from,
//! an owner index for garbage collection and the snapshots that pin paged
//! lists. All writes go through one lock so resourceVersions, history and
//! the broadcast to watchers stay in the same order.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Instant;

use serde_json::Value;
use tokio::sync::{broadcast, watch};

mod change;
use change::ENCODINGS_KEPT;
pub use change::{Change, ChangeKind, EncodingKey};

/// `(namespace, name)`; namespace is `""` for cluster-scoped objects.
pub type ObjKey = (String, String);

/// A reference to a stored object from the owner index.
pub type ObjRef = (Arc<str>, String, String);

/// The data behind the lock.
#[derive(Debug, Default)]
pub struct Inner {
    rv: u64,
    /// Watches from a resourceVersion below this get 410.
    floor: u64,
    /// Per resource, where its watch cache starts: a custom resource's
    /// cache is made when its CRD is created, at the then current
    /// resourceVersion, as a real server answers watches from before its
    /// resource was served with 410 (`too old resource version: 1 (438)`).
    cache_start: HashMap<Arc<str>, u64>,
    objects: HashMap<Arc<str>, BTreeMap<ObjKey, Arc<Value>>>,
    history: VecDeque<Arc<Change>>,
    history_cap: usize,
    owners: HashMap<String, HashSet<ObjRef>>,
    /// One broadcast per resource, so a watcher wakes only for its resource.
    txs: Mutex<HashMap<Arc<str>, broadcast::Sender<Arc<Change>>>>,
    broadcast_cap: usize,
    rv_tx: Option<watch::Sender<u64>>,
}

fn owner_uids(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

impl Inner {
    /// Current (latest) resourceVersion.
    pub fn rv(&self) -> u64 {
        self.rv
    }

    /// Oldest resourceVersion a watch can resume from.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// Oldest resourceVersion a watch of resource `res` can resume from:
    /// [`Inner::floor`], or later where the resource's watch cache began.
    pub fn floor_of(&self, res: &str) -> u64 {
        self.cache_start
            .get(res)
            .map_or(self.floor, |s| self.floor.max(*s))
    }

    /// Starts the watch cache of resource `res` now (a newly served custom
    /// resource): watches from before the current resourceVersion get 410.
    pub fn start_cache(&mut self, res: &str) {
        let rv = self.rv;
        self.cache_start.insert(Arc::from(res), rv);
    }

    /// One object.
    pub fn get(&self, res: &str, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.objects
            .get(res)
            .and_then(|m| m.get(&(ns.to_string(), name.to_string())))
            .cloned()
    }

    /// Objects of a resource, optionally only one namespace, in key order.
    pub fn iter<'a>(
        &'a self,
        res: &str,
        ns: Option<&'a str>,
    ) -> Box<dyn Iterator<Item = (&'a ObjKey, &'a Arc<Value>)> + 'a> {
        let Some(m) = self.objects.get(res) else {
            return Box::new(std::iter::empty());
        };
        match ns {
            None => Box::new(m.iter()),
            Some(ns) => Box::new(
                m.range((ns.to_string(), String::new())..)
                    .take_while(move |((n, _), _)| n == ns),
            ),
        }
    }

    /// Number of objects of a resource.
    pub fn count(&self, res: &str) -> usize {
        self.objects.get(res).map_or(0, BTreeMap::len)
    }

    /// Objects that name `uid` in their ownerReferences.
    pub fn dependents(&self, uid: &str) -> Vec<ObjRef> {
        let mut v: Vec<ObjRef> = self
            .owners
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    /// Events with rv > `from` (oldest first), for resuming watches.
    pub fn history_since(&self, from: u64) -> Vec<Arc<Change>> {
        let start = self.history.partition_point(|c| c.rv <= from);
        self.history.range(start..).cloned().collect()
    }

    /// Subscribes to live changes (call under the lock to not miss any).
    pub fn subscribe(&self, res: &Arc<str>) -> Option<broadcast::Receiver<Arc<Change>>> {
        let mut txs = self.txs.lock().ok()?;
        let tx = txs
            .entry(res.clone())
            .or_insert_with(|| broadcast::channel(self.broadcast_cap.max(16)).0);
        Some(tx.subscribe())
    }

    fn index(
        &mut self,
        res: &Arc<str>,
        ns: &str,
        name: &str,
        old: Option<&Value>,
        new: Option<&Value>,
    ) {
        let r: ObjRef = (res.clone(), ns.to_string(), name.to_string());
        if let Some(o) = old {
            for uid in owner_uids(o) {
                if let Some(set) = self.owners.get_mut(&uid) {
                    set.remove(&r);
                    if set.is_empty() {
                        self.owners.remove(&uid);
                    }
                }
            }
        }
        if let Some(n) = new {
            for uid in owner_uids(n) {
                self.owners.entry(uid).or_default().insert(r.clone());
            }
        }
    }

    fn record(&mut self, change: Change) -> Arc<Change> {
        let change = Arc::new(change);
        self.history.push_back(change.clone());
        while self.history.len() > self.history_cap {
            if let Some(c) = self.history.pop_front() {
                self.floor = self.floor.max(c.rv);
            }
        }
        // Encodings serve the watchers of a change as it happens; kept on
        // all 50,000 changes of the history they would double its memory.
        // A watch resuming from further back encodes again.
        if let Some(old) = self
            .history
            .len()
            .checked_sub(ENCODINGS_KEPT + 1)
            .and_then(|i| self.history.get(i))
            && let Ok(mut e) = old.encoded.lock()
        {
            e.clear();
        }
        if let Ok(txs) = self.txs.lock()
            && let Some(tx) = txs.get(&change.res)
        {
            let _ = tx.send(change.clone());
        }
        if let Some(tx) = &self.rv_tx {
            tx.send_replace(self.rv);
        }
        change
    }

    /// Stores `obj` (created or replaced), assigning the next
    /// resourceVersion, and emits ADDED or MODIFIED.
    pub fn put(&mut self, res: &Arc<str>, mut obj: Value) -> Arc<Change> {
        self.rv += 1;
        let rv = self.rv;
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            m.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        let ns = obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let obj = Arc::new(obj);
        let old = self
            .objects
            .entry(res.clone())
            .or_default()
            .insert((ns.clone(), name.clone()), obj.clone());
        self.index(res, &ns, &name, old.as_deref(), Some(&obj));
        let kind = if old.is_some() {
            ChangeKind::Modified
        } else {
            ChangeKind::Added
        };
        self.record(Change {
            rv,
            res: res.clone(),
            ns,
            kind,
            obj,
            old,
            encoded: Mutex::default(),
        })
    }

    /// Removes an object, emitting DELETED with its last state stamped with
    /// the new resourceVersion. `None` when it did not exist.
    pub fn remove(&mut self, res: &Arc<str>, ns: &str, name: &str) -> Option<Arc<Change>> {
        self.remove_as(res, ns, name, None)
    }

    /// Like `remove`, but the DELETED event carries `last` (e.g. the object
    /// with its last finalizer removed) instead of the stored state.
    pub fn remove_as(
        &mut self,
        res: &Arc<str>,
        ns: &str,
        name: &str,
        last: Option<Value>,
    ) -> Option<Arc<Change>> {
        let old = self
            .objects
            .get_mut(res)?
            .remove(&(ns.to_string(), name.to_string()))?;
        self.index(res, ns, name, Some(&old), None);
        self.rv += 1;
        let rv = self.rv;
        let mut last = last.unwrap_or_else(|| (*old).clone());
        if let Some(m) = last.get_mut("metadata").and_then(Value::as_object_mut) {
            m.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        Some(self.record(Change {
            rv,
            res: res.clone(),
            ns: ns.to_string(),
            kind: ChangeKind::Deleted,
            obj: Arc::new(last),
            old: Some(old),
            encoded: Mutex::default(),
        }))
    }

    /// Deletes every stored object of a resource, one DELETED event each
    /// (the objects of a CRD being deleted).
    pub fn drop_resource(&mut self, res: &str) {
        let r: Arc<str> = Arc::from(res);
        let keys: Vec<ObjKey> = self
            .objects
            .get(res)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        for (ns, name) in keys {
            self.remove(&r, &ns, &name);
        }
        self.objects.remove(res);
    }

    /// Makes every resourceVersion issued so far too old (etcd compaction).
    pub fn expire_all(&mut self) {
        self.rv += 1;
        self.floor = self.rv;
        self.history.clear();
        if let Some(tx) = &self.rv_tx {
            tx.send_replace(self.rv);
        }
    }
}

/// A pinned list result that `continue` tokens page through.
#[derive(Debug)]
pub struct Snapshot {
    /// resourceVersion the list was taken at.
    pub rv: u64,
    /// Matching items, in order.
    pub items: Arc<Vec<Arc<Value>>>,
    created: Instant,
}

/// The store. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Store {
    inner: RwLock<Inner>,
    rv_rx: watch::Receiver<u64>,
    snapshots: Mutex<BTreeMap<u64, Snapshot>>,
    next_snapshot: AtomicU64,
}

/// Most pinned list snapshots kept at once (oldest evicted → 410 on continue).
const MAX_SNAPSHOTS: usize = 256;

impl Store {
    /// A store keeping `history_cap` events for resuming watches and
    /// buffering `broadcast_cap` events per slow watcher.
    pub fn new(history_cap: usize, broadcast_cap: usize) -> Self {
        let (rv_tx, rv_rx) = watch::channel(0);
        Self {
            inner: RwLock::new(Inner {
                history_cap: history_cap.max(1),
                broadcast_cap,
                rv_tx: Some(rv_tx),
                ..Inner::default()
            }),
            rv_rx,
            snapshots: Mutex::new(BTreeMap::new()),
            next_snapshot: AtomicU64::new(1),
        }
    }

    /// Read access.
    pub fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Write access (all writes are serialised).
    pub fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits until the store reaches `rv` or the timeout passes; true if reached.
    pub async fn wait_for_rv(&self, rv: u64, timeout: std::time::Duration) -> bool {
        let mut rx = self.rv_rx.clone();
        tokio::time::timeout(timeout, rx.wait_for(|cur| *cur >= rv))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Pins a list result; returns the snapshot id.
    pub fn pin(&self, rv: u64, items: Vec<Arc<Value>>) -> u64 {
        let id = self.next_snapshot.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut g) = self.snapshots.lock() {
            g.retain(|_, s| s.created.elapsed().as_secs() < 300);
            while g.len() >= MAX_SNAPSHOTS {
                let Some(k) = g.keys().next().copied() else {
                    break;
                };
                g.remove(&k);
            }
            g.insert(
                id,
                Snapshot {
                    rv,
                    items: Arc::new(items),
                    created: Instant::now(),
                },
            );
        }
        id
    }

    /// A pinned snapshot, if still kept and not older than the compaction floor.
    pub fn snapshot(&self, id: u64) -> Option<(u64, Arc<Vec<Arc<Value>>>)> {
        let floor = self.read().floor();
        let g = self.snapshots.lock().ok()?;
        g.get(&id)
            .filter(|s| s.rv >= floor)
            .map(|s| (s.rv, s.items.clone()))
    }

    /// Makes all issued resourceVersions and continue tokens too old.
    pub fn expire_all(&self) {
        self.write().expire_all();
        if let Ok(mut g) = self.snapshots.lock() {
            g.clear();
        }
    }
}

#[cfg(test)]
mod tests;
