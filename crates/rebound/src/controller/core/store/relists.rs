//! Which watches the store keeps data of, and the relist bookkeeping that
//! finds what was deleted while a watch was down; apart from the indices
//! it prunes.

use crate::api::WorkloadKind;
use crate::controller::core::hashing::{HashMap, HashSet};

/// The watches whose data the core keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Watched {
    Pods,
    Nodes,
    Events,
    DeviceInfo,
    Policies,
    Classifications,
    /// The installed job kinds (discovery); their object watches follow.
    Kinds,
    Jobs(WorkloadKind),
}

impl Watched {
    /// The name in metrics and logs.
    pub fn name(self) -> &'static str {
        match self {
            Watched::Pods => "pods",
            Watched::Nodes => "nodes",
            Watched::Events => "events",
            Watched::DeviceInfo => "configmaps",
            Watched::Policies => "policies",
            Watched::Classifications => "classifications",
            Watched::Kinds => "kinds",
            Watched::Jobs(_) => "jobs",
        }
    }
}

/// Relist bookkeeping: between a watch's relist start and its end, the keys
/// it delivered; at the end, every object of that watch not delivered again
/// was deleted meanwhile.
/// A relist that began with nothing of its kind held has nothing to
/// remove, and keeps no keys (the first list of 20,000 pods would hold
/// 20,000 strings at the moment memory peaks).
#[derive(Debug, Default)]
pub struct Relists {
    open: HashMap<Watched, Option<HashSet<String>>>,
}

impl Relists {
    /// A relist of `w` starts.
    pub fn begin(&mut self, w: Watched) {
        self.open.insert(w, Some(HashSet::default()));
    }

    /// A relist of `w` starts while nothing of it is held: whatever it
    /// delivers is all there is, so it needs no keys.
    pub fn begin_from_nothing(&mut self, w: Watched) {
        self.open.insert(w, None);
    }

    /// `key` was delivered by `w`.
    pub fn saw(&mut self, w: Watched, key: &str) {
        if let Some(Some(s)) = self.open.get_mut(&w) {
            s.insert(key.to_string());
        }
    }

    /// The relist of `w` ended: the keys it delivered (`None` when no
    /// relist was open, e.g. a watch that reported synced twice, or when it
    /// began from nothing: then nothing held is missing from it).
    pub fn end(&mut self, w: Watched) -> Option<HashSet<String>> {
        self.open.remove(&w).flatten()
    }

    /// Whether any relist is open.
    pub fn any_open(&self) -> bool {
        !self.open.is_empty()
    }

    /// Whether a relist of any job kind is open.
    pub fn any_jobs_open(&self) -> bool {
        self.open.keys().any(|w| matches!(w, Watched::Jobs(_)))
    }

    /// Forget an open relist of `w` (its kind was removed: no list of it
    /// will ever end).
    pub fn cancel(&mut self, w: Watched) {
        self.open.remove(&w);
    }

    /// Whether the relist of `w` is open.
    pub fn is_open(&self, w: Watched) -> bool {
        self.open.contains_key(&w)
    }
}
