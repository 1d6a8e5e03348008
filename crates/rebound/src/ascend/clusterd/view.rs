//! The cluster fault view as rebound knows it (pure): per node the device
//! plugin's last report and rebound's own faults and levels, plus the jobs
//! rebound is recovering. [`super::render`] turns it into ClusterD's
//! ConfigMaps; the reactor feeds it through [`super::ClusterdView`].

use crate::fault::ascend::DeviceInfo;
use crate::fault::{Fault, FaultSource, Level};
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;
use std::time::Duration;

/// How long a job stays in `fault-job-info` after its restart finished:
/// long enough for a batched write to publish it, short enough not to
/// mislead consumers once the job runs again.
pub const JOB_LINGER: Duration = Duration::from_secs(10);

/// A restart whose end was never reported (a lost action result) stops
/// being listed after this long.
pub const JOB_MAX_AGE: Duration = Duration::from_secs(600);

/// A node-level fault (from a Node condition or an Event) with where it
/// points, as listed in `cluster-info-node-cm`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct NodeFault {
    /// ClusterD's `DeviceType`: `NPU`, `GPU` or `Node`, from the source.
    pub device_type: &'static str,
    /// Device index, if the fault names one.
    pub device: Option<String>,
    /// The fault code.
    pub code: String,
}

impl NodeFault {
    /// The node-level part of a fault, for [`ViewState::set_node_faults`].
    pub fn of(f: &Fault) -> NodeFault {
        NodeFault {
            device_type: device_type(f.source),
            device: f.device.clone(),
            code: f.code.clone(),
        }
    }
}

/// Everything the view holds about one node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeState {
    /// The device plugin's last readable report (`None`: no Ascend plugin).
    pub device: Option<DeviceInfo>,
    /// rebound's node-level faults (conditions, Events).
    pub node_faults: Vec<NodeFault>,
    /// rebound's level per (chip index, code) of the plugin's faults.
    pub chip_levels: BTreeMap<(String, String), Level>,
    /// rebound's level per node-level fault.
    pub node_levels: BTreeMap<NodeFault, Level>,
    /// A Node object of this name exists (listed even when healthy).
    pub is_node: bool,
}

/// A job rebound is restarting, for `fault-job-info`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveringJob {
    /// The job's UID (ClusterD's `JobId`); `namespace/name` when unknown.
    pub id: String,
    /// Nodes whose fault caused the restart.
    pub nodes: Vec<String>,
    /// When the fault happened.
    pub fault_time: DateTime<Utc>,
    /// When the restart was decided.
    pub started_at: DateTime<Utc>,
    /// When the restart finished (`None`: still in progress).
    pub done_at: Option<DateTime<Utc>>,
}

/// The whole view. Every mutator returns whether anything changed, so the
/// publisher is woken only for real changes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ViewState {
    /// Per node, by name.
    pub nodes: BTreeMap<String, NodeState>,
    /// Recovering jobs, by id.
    pub jobs: BTreeMap<String, RecoveringJob>,
}

impl ViewState {
    /// Replace a node's device-plugin report (`None`: the ConfigMap is
    /// gone). Levels of codes no longer reported are forgotten.
    pub fn set_device_info(&mut self, node: &str, info: Option<DeviceInfo>) -> bool {
        let n = self.nodes.entry(node.to_string()).or_default();
        if n.device == info {
            return false;
        }
        let present: Vec<(String, String)> = info.as_ref().map(chip_codes).unwrap_or_default();
        n.chip_levels.retain(|k, _| present.contains(k));
        n.device = info;
        self.prune(node);
        true
    }

    /// Replace a node's node-level faults; levels of gone faults are forgotten.
    pub fn set_node_faults(&mut self, node: &str, mut faults: Vec<NodeFault>) -> bool {
        faults.sort();
        faults.dedup();
        let n = self.nodes.entry(node.to_string()).or_default();
        if n.is_node && n.node_faults == faults {
            return false;
        }
        n.is_node = true;
        n.node_levels.retain(|k, _| faults.contains(k));
        n.node_faults = faults;
        true
    }

    /// The Node object is gone: its node-level faults go; the device
    /// report stays until its ConfigMap goes too.
    pub fn remove_node(&mut self, node: &str) -> bool {
        let Some(n) = self.nodes.get_mut(node) else {
            return false;
        };
        n.is_node = false;
        n.node_faults.clear();
        n.node_levels.clear();
        self.prune(node);
        true
    }

    /// Record the level rebound classified a fault at. Only faults the view
    /// lists (a reported chip code, a current node-level fault) are kept:
    /// pod exits and stale faults do not belong to the node view.
    pub fn note_level(&mut self, fault: &Fault, level: Level) -> bool {
        let Some(n) = fault.node.as_deref().and_then(|n| self.nodes.get_mut(n)) else {
            return false;
        };
        if fault.source == FaultSource::AscendNpu
            && let Some(info) = &n.device
        {
            let key = (fault.device.clone().unwrap_or_default(), fault.code.clone());
            if chip_codes(info).contains(&key) {
                return n.chip_levels.insert(key, level) != Some(level);
            }
        }
        let nf = NodeFault::of(fault);
        if n.node_faults.contains(&nf) {
            return n.node_levels.insert(nf, level) != Some(level);
        }
        false
    }

    /// A restart started (or started again).
    pub fn set_recovering_job(&mut self, job: RecoveringJob) -> bool {
        if self.jobs.get(&job.id) == Some(&job) {
            return false;
        }
        self.jobs.insert(job.id.clone(), job);
        true
    }

    /// The restart of job `id` finished at `at`: the entry lingers for
    /// [`JOB_LINGER`] and is then dropped by [`ViewState::expire_jobs`].
    pub fn job_done(&mut self, id: &str, at: DateTime<Utc>) -> bool {
        match self.jobs.get_mut(id) {
            Some(j) if j.done_at.is_none() => {
                j.done_at = Some(at);
                true
            }
            _ => false,
        }
    }

    /// Drop jobs finished more than [`JOB_LINGER`] before `now`, and those
    /// started more than [`JOB_MAX_AGE`] before.
    pub fn expire_jobs(&mut self, now: DateTime<Utc>) -> bool {
        let before = self.jobs.len();
        let linger = chrono::Duration::from_std(JOB_LINGER).unwrap_or_default();
        let max_age = chrono::Duration::from_std(JOB_MAX_AGE).unwrap_or_default();
        self.jobs.retain(|_, j| {
            j.done_at.is_none_or(|d| now - d < linger) && now - j.started_at < max_age
        });
        self.jobs.len() != before
    }

    fn prune(&mut self, node: &str) {
        if self
            .nodes
            .get(node)
            .is_some_and(|n| n.device.is_none() && !n.is_node)
        {
            self.nodes.remove(node);
        }
    }
}

/// ClusterD's `DeviceType` for a fault source.
pub fn device_type(s: FaultSource) -> &'static str {
    match s {
        FaultSource::AscendNpu => "NPU",
        FaultSource::NvidiaXid => "GPU",
        _ => "Node",
    }
}

/// The (chip index, code) pairs of a report, the keys of `chip_levels`.
pub fn chip_codes(info: &DeviceInfo) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for r in &info.resources {
        for e in &r.faults {
            let dev = e.device().unwrap_or_default().to_string();
            for c in &e.codes {
                out.push((dev.clone(), c.code.clone()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::ascend::{ChipFault, CodeFault, ResourceDevices};

    pub(crate) fn info(node: &str, chip: u32, code: &str, level: &str) -> DeviceInfo {
        DeviceInfo {
            node: node.into(),
            resources: vec![ResourceDevices {
                resource: "huawei.com/Ascend910".into(),
                available: (0..8).map(|c| format!("Ascend910-{c}")).collect(),
                faults: vec![ChipFault {
                    fault_type: "CardUnhealthy".into(),
                    npu_name: format!("Ascend910-{chip}"),
                    level: Some(level.into()),
                    codes: vec![CodeFault {
                        code: code.into(),
                        level: Some(level.into()),
                        time: None,
                    }],
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn ascend_fault(node: &str, chip: &str, code: &str) -> Fault {
        let mut f = Fault::new(FaultSource::AscendNpu, code, Utc::now());
        f.node = Some(node.into());
        f.device = Some(chip.into());
        f
    }

    #[test]
    fn levels_are_kept_only_for_reported_codes() {
        let mut v = ViewState::default();
        assert!(v.set_device_info("n1", Some(info("n1", 3, "80E18402", "SeparateNPU"))));
        assert!(!v.set_device_info("n1", Some(info("n1", 3, "80E18402", "SeparateNPU"))));
        assert!(v.note_level(&ascend_fault("n1", "3", "80E18402"), Level::PreSeparate));
        assert!(!v.note_level(&ascend_fault("n1", "3", "80E18402"), Level::PreSeparate));
        // A code the plugin does not report is not part of the view.
        assert!(!v.note_level(&ascend_fault("n1", "4", "80E18402"), Level::Separate));
        assert_eq!(v.nodes["n1"].chip_levels.len(), 1);
        // The plugin stops reporting it: its level goes with it.
        assert!(v.set_device_info("n1", Some(info("n1", 5, "8C084E00", "RestartNPU"))));
        assert!(v.nodes["n1"].chip_levels.is_empty());
        // The ConfigMap goes and there is no node fault: the node goes.
        assert!(v.set_device_info("n1", None));
        assert!(!v.nodes.contains_key("n1"));
    }

    #[test]
    fn node_fault_levels_follow_the_node_faults() {
        let mut v = ViewState::default();
        let mut f = Fault::new(FaultSource::NodeCondition, "KernelDeadlock", Utc::now());
        f.node = Some("n2".into());
        assert!(!v.note_level(&f, Level::Separate), "unknown node");
        assert!(v.set_node_faults("n2", vec![NodeFault::of(&f)]));
        assert!(v.note_level(&f, Level::Separate));
        assert!(v.set_node_faults("n2", vec![]));
        assert!(v.nodes["n2"].node_levels.is_empty());
        // A healthy node stays listed until the Node is deleted.
        assert!(!v.set_node_faults("n2", vec![]));
        assert!(v.remove_node("n2"));
        assert!(!v.nodes.contains_key("n2"));
    }

    #[test]
    fn finished_jobs_linger_then_expire() {
        let mut v = ViewState::default();
        let t0 = Utc::now();
        let job = RecoveringJob {
            id: "uid-1".into(),
            nodes: vec!["n1".into()],
            fault_time: t0,
            started_at: t0,
            done_at: None,
        };
        assert!(v.set_recovering_job(job.clone()));
        assert!(!v.set_recovering_job(job.clone()));
        assert!(v.job_done("uid-1", t0));
        assert!(!v.expire_jobs(t0 + chrono::Duration::seconds(1)));
        assert!(v.expire_jobs(t0 + chrono::Duration::seconds(11)));
        assert!(v.jobs.is_empty());
        // A restart never reported done goes after JOB_MAX_AGE.
        assert!(v.set_recovering_job(job));
        assert!(!v.expire_jobs(t0 + chrono::Duration::seconds(599)));
        assert!(v.expire_jobs(t0 + chrono::Duration::seconds(600)));
    }
}
