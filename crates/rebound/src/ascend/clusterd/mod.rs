//! ClusterD's cluster fault view (issue #7): the ConfigMaps MindCluster's
//! ClusterD publishes for the Volcano scheduler plugin
//! (`cluster-info-node-cm`, `cluster-info-device-<m>`, `fault-job-info`),
//! written by rebound so that an Ascend cluster can drop ClusterD without
//! changing its jobs or its scheduler.
//!
//! The reactor feeds a [`ClusterdView`] (device-plugin reports, node faults,
//! classified levels, restarts); [`publish`] renders it ([`render`], pure)
//! and writes only what changed, rate-limited, while this replica leads.
//! Off unless `--clusterd-view` is set.

pub mod publish;
pub mod render;
pub mod view;

use crate::fault::ascend::DeviceInfo;
use crate::fault::{Fault, Level};
use crate::workload::JobRef;
use chrono::{DateTime, Utc};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use view::{NodeFault, RecoveringJob, ViewState};

/// A cheap, cloneable handle on the view: the reactor writes, the publisher
/// reads. Every change that alters the view wakes the publisher once;
/// changes arriving while it writes are coalesced into its next round.
#[derive(Clone, Default)]
pub struct ClusterdView {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    state: Mutex<ViewState>,
    changed: Notify,
}

/// The `JobId` of a job: its UID, else `namespace/name`.
pub fn job_id(job: &JobRef) -> String {
    job.uid
        .clone()
        .unwrap_or_else(|| format!("{}/{}", job.namespace, job.name))
}

impl ClusterdView {
    /// An empty view.
    pub fn new() -> ClusterdView {
        ClusterdView::default()
    }

    /// Run `f` on the state; wake the publisher if it reports a change.
    fn update(&self, f: impl FnOnce(&mut ViewState) -> bool) {
        let changed = {
            let mut s = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
            f(&mut s)
        };
        if changed {
            self.inner.changed.notify_one();
        }
    }

    /// Read the state (the publisher renders under this lock).
    pub fn read<T>(&self, f: impl FnOnce(&ViewState) -> T) -> T {
        let s = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        f(&s)
    }

    /// Wait for the next change (a change since the last wait counts).
    pub async fn changed(&self) {
        self.inner.changed.notified().await;
    }

    /// The device plugin's report of a node (`None`: its ConfigMap is gone).
    pub fn set_device_info(&self, node: &str, info: Option<DeviceInfo>) {
        self.update(|s| s.set_device_info(node, info));
    }

    /// A Node's current node-level faults (conditions).
    pub fn set_node_faults(&self, node: &str, faults: &[Fault]) {
        let nf = faults.iter().map(NodeFault::of).collect();
        self.update(|s| s.set_node_faults(node, nf));
    }

    /// A Node was deleted.
    pub fn remove_node(&self, node: &str) {
        self.update(|s| s.remove_node(node));
    }

    /// rebound classified `fault` at `level`.
    pub fn note_level(&self, fault: &Fault, level: Level) {
        self.update(|s| s.note_level(fault, level));
    }

    /// rebound started restarting `job` for a fault on `node` at `at`.
    pub fn set_recovering_job(&self, job: &JobRef, node: Option<&str>, at: DateTime<Utc>) {
        let j = RecoveringJob {
            id: job_id(job),
            nodes: node.map(|n| vec![n.to_string()]).unwrap_or_default(),
            fault_time: at,
            started_at: Utc::now(),
            done_at: None,
        };
        self.update(|s| s.set_recovering_job(j));
    }

    /// The restart of `job` finished (successfully or not).
    pub fn job_done(&self, job: &JobRef) {
        let id = job_id(job);
        self.update(|s| s.job_done(&id, Utc::now()));
    }

    /// Drop finished jobs past their linger time (the publisher calls it).
    pub fn expire_jobs(&self, now: DateTime<Utc>) {
        self.update(|s| s.expire_jobs(now));
    }
}
