//! What a job operator keeps of the pods it owns: a compact view indexed by
//! the owner's uid, fed from a pod watch, plus the writes still in flight.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::watcher::Event;

use super::util::{controller_of, key};

/// A pod as a job operator sees it.
#[derive(Debug, Clone, Default)]
pub(crate) struct ChildPod {
    pub name: String,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub phase: Option<String>,
    /// Exit codes of terminated containers, by container name.
    pub exit_codes: Vec<(String, i32)>,
    /// Sum of container restart counts.
    pub restarts: i32,
    pub deleting: bool,
    pub ready: bool,
}

impl ChildPod {
    fn from_pod(pod: &Pod) -> Self {
        let status = pod.status.as_ref();
        let statuses = status
            .and_then(|s| s.container_statuses.as_deref())
            .unwrap_or_default();
        Self {
            name: pod.name_any(),
            uid: pod.uid().unwrap_or_default(),
            labels: pod.labels().clone(),
            annotations: pod.annotations().clone(),
            phase: status.and_then(|s| s.phase.clone()),
            exit_codes: statuses
                .iter()
                .filter_map(|c| {
                    let t = c.state.as_ref()?.terminated.as_ref()?;
                    Some((c.name.clone(), t.exit_code))
                })
                .collect(),
            restarts: statuses.iter().map(|c| c.restart_count).sum(),
            deleting: pod.metadata.deletion_timestamp.is_some(),
            ready: status
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
                .is_some_and(|c| c.status == "True"),
        }
    }

    /// The phase, `Pending` when none was reported yet.
    pub fn phase(&self) -> &str {
        self.phase.as_deref().unwrap_or("Pending")
    }

    /// Whether the pod is active (neither finished nor being deleted).
    pub fn active(&self) -> bool {
        !self.deleting && !matches!(self.phase(), "Succeeded" | "Failed")
    }

    /// Exit code of `container`, or of the first terminated container.
    pub fn exit_code(&self, container: &str) -> Option<i32> {
        self.exit_codes
            .iter()
            .find(|(n, _)| n == container)
            .or(self.exit_codes.first())
            .map(|(_, c)| *c)
    }
}

/// Pods by the uid of their controller.
#[derive(Debug, Default)]
pub(crate) struct PodIndex {
    by_owner: HashMap<String, BTreeMap<String, ChildPod>>,
    owner_of: HashMap<String, String>,
    snapshot: Option<HashSet<String>>,
}

impl PodIndex {
    /// Applies a watch event; returns the owner uids whose pods changed.
    pub fn on_event(&mut self, ev: Event<Pod>) -> Vec<String> {
        match ev {
            Event::Init => {
                self.snapshot = Some(HashSet::new());
                Vec::new()
            }
            Event::InitApply(p) => {
                let k = key(&p.namespace().unwrap_or_default(), &p.name_any());
                if let Some(s) = self.snapshot.as_mut() {
                    s.insert(k);
                }
                self.apply(&p).into_iter().collect()
            }
            Event::InitDone => {
                let Some(seen) = self.snapshot.take() else {
                    return Vec::new();
                };
                let gone: Vec<String> = self
                    .owner_of
                    .keys()
                    .filter(|k| !seen.contains(*k))
                    .cloned()
                    .collect();
                gone.iter().filter_map(|k| self.remove(k)).collect()
            }
            Event::Apply(p) => self.apply(&p).into_iter().collect(),
            Event::Delete(p) => self
                .remove(&key(&p.namespace().unwrap_or_default(), &p.name_any()))
                .into_iter()
                .collect(),
        }
    }

    fn apply(&mut self, pod: &Pod) -> Option<String> {
        let owner = controller_of(&pod.metadata)?.uid.clone();
        let ns = pod.namespace().unwrap_or_default();
        let k = key(&ns, &pod.name_any());
        if let Some(old) = self.owner_of.insert(k.clone(), owner.clone())
            && old != owner
            && let Some(m) = self.by_owner.get_mut(&old)
        {
            m.remove(&pod.name_any());
        }
        self.by_owner
            .entry(owner.clone())
            .or_default()
            .insert(pod.name_any(), ChildPod::from_pod(pod));
        Some(owner)
    }

    fn remove(&mut self, k: &str) -> Option<String> {
        let owner = self.owner_of.remove(k)?;
        let name = k.split_once('/').map(|(_, n)| n).unwrap_or(k);
        if let Some(m) = self.by_owner.get_mut(&owner) {
            m.remove(name);
            if m.is_empty() {
                self.by_owner.remove(&owner);
            }
        }
        Some(owner)
    }

    /// The pods of one owner, by name.
    pub fn of(&self, owner_uid: &str) -> impl Iterator<Item = &ChildPod> {
        self.by_owner
            .get(owner_uid)
            .into_iter()
            .flat_map(|m| m.values())
    }
}

/// Writes in flight, by object key, so a reconcile that runs before the
/// watch reports a write does not repeat it (the "expectations" of real
/// controllers). A create stays expected until the watch shows the object,
/// a delete until the watch shows it gone; failures clear them at once, and
/// entries expire, so a lost event cannot wedge an object.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    creates: HashMap<String, Instant>,
    deletes: HashMap<String, Instant>,
    others: HashMap<String, Instant>,
    /// `None`: [`Self::TTL`].
    ttl: Option<Duration>,
}

impl InFlight {
    const TTL: Duration = Duration::from_secs(30);
    /// The expectations timeout of kube-controller-manager's controllers
    /// (`ExpectationsTimeout`, 5 minutes, `pkg/controller/controller_utils.go`),
    /// for actors whose requests wait on a rate limit: a create queued
    /// behind a thousand others must not expire before it is even sent.
    pub const LIMITED_TTL: Duration = Duration::from_secs(300);

    /// Expectations that last `ttl`.
    pub fn with_ttl(ttl: Duration) -> Self {
        Self {
            ttl: Some(ttl),
            ..Self::default()
        }
    }

    fn ttl(&self) -> Duration {
        self.ttl.unwrap_or(Self::TTL)
    }

    /// A create of `k` was sent.
    pub fn insert_create(&mut self, k: String) {
        self.creates.insert(k, Instant::now());
    }

    /// A delete of `k` was sent.
    pub fn insert_delete(&mut self, k: String) {
        self.deletes.insert(k, Instant::now());
    }

    /// Another write (status) was sent; cleared when it returns.
    pub fn insert(&mut self, k: String) {
        self.others.insert(k, Instant::now());
    }

    /// Whether a write of `k` is in flight.
    pub fn contains(&self, k: &str) -> bool {
        [&self.creates, &self.deletes, &self.others]
            .iter()
            .any(|m| m.get(k).is_some_and(|t| t.elapsed() < self.ttl()))
    }

    /// The watch shows `k` exists.
    pub fn observed_apply(&mut self, k: &str) {
        self.creates.remove(k);
    }

    /// The watch shows `k` is gone.
    pub fn observed_delete(&mut self, k: &str) {
        self.deletes.remove(k);
        self.creates.remove(k);
    }

    /// A write of `k` returned; `failed` clears its expectation.
    pub fn returned(&mut self, k: &str, failed: bool) {
        self.others.remove(k);
        if failed {
            self.creates.remove(k);
            self.deletes.remove(k);
        }
    }

    /// Drops expired entries.
    pub fn expire(&mut self) {
        let ttl = self.ttl();
        for m in [&mut self.creates, &mut self.deletes, &mut self.others] {
            m.retain(|_, t| t.elapsed() < ttl);
        }
    }
}

/// The key a pod watch event is about, and whether it says the pod exists.
pub(crate) fn event_key<K: kube::Resource>(ev: &Event<K>) -> Option<(String, bool)> {
    match ev {
        Event::Apply(p) | Event::InitApply(p) => {
            Some((key(&p.namespace().unwrap_or_default(), &p.name_any()), true))
        }
        Event::Delete(p) => Some((
            key(&p.namespace().unwrap_or_default(), &p.name_any()),
            false,
        )),
        _ => None,
    }
}

/// Records in `in_flight` what a watch event confirms.
pub(crate) fn observe<K: kube::Resource>(in_flight: &mut InFlight, ev: &Event<K>) {
    match event_key(ev) {
        Some((k, true)) => in_flight.observed_apply(&k),
        Some((k, false)) => in_flight.observed_delete(&k),
        None => {}
    }
}
