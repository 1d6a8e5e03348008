//! The queue between the writes and the emulated kube-controller-manager
//! (`controllers`): writes push [`Work`], the controllers' task takes it
//! after the answer. A module of its own so that the state and the write
//! paths depend on the queue, not on the controllers that serve it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// Work for the controllers, queued by writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Work {
    /// A namespace was created: its ServiceAccount and root CA ConfigMap.
    NamespaceCreated(String),
    /// A namespace is terminating: delete its content, then finalize it.
    NamespaceDeleting(String),
    /// An object with this uid is gone: collect its dependents.
    OwnerGone(String),
    /// A CRD was created: its names are accepted and it is established.
    Establish(String),
    /// A CRD is being deleted: its objects go, then it does.
    CrdCleanup(String),
    /// An object (storage key, namespace, name) carries the
    /// `foregroundDeletion` or `orphan` finalizer.
    Finalize(Arc<str>, String, String),
}

/// The queue between the writes and the controllers' task.
#[derive(Debug, Default)]
pub struct Queue {
    items: Mutex<VecDeque<Work>>,
    wake: Notify,
}

impl Queue {
    /// Queues work (done after the current request).
    pub fn push(&self, w: Work) {
        if let Ok(mut q) = self.items.lock() {
            q.push_back(w);
        }
        self.wake.notify_one();
    }

    /// Resolves when work is pushed.
    pub(super) async fn notified(&self) {
        self.wake.notified().await;
    }

    /// Everything queued so far.
    pub(super) fn take(&self) -> Vec<Work> {
        self.items
            .lock()
            .map(|mut q| q.drain(..).collect())
            .unwrap_or_default()
    }
}
