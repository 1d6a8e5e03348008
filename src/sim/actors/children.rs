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

/// Writes in flight, by object name, so a reconcile that runs before the
/// watch reports a write does not repeat it. Entries also expire, so a lost
/// event cannot wedge an object.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    items: HashMap<String, Instant>,
}

impl InFlight {
    const TTL: Duration = Duration::from_secs(30);

    pub fn insert(&mut self, k: String) {
        self.items.insert(k, Instant::now());
    }

    pub fn contains(&self, k: &str) -> bool {
        self.items.get(k).is_some_and(|t| t.elapsed() < Self::TTL)
    }

    pub fn remove(&mut self, k: &str) {
        self.items.remove(k);
    }

    pub fn expire(&mut self) {
        self.items.retain(|_, t| t.elapsed() < Self::TTL);
    }
}
