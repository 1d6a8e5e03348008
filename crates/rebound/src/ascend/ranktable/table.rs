//! The `hccl.json` rank table itself, pure: from the jobs' task layout and
//! the device plugin's pod annotations to the exact JSON HCCL-Controller
//! writes (v1 `group_list` or v2 `server_list`), so the training containers
//! that wait for `"status":"completed"` cannot tell rebound from it.
//! No I/O here; `controller.rs` feeds it watched objects.

use serde::{Deserialize, Serialize};
use std::net::IpAddr;

/// Label on the jobs, pods and ConfigMaps HCCL-Controller handles (its
/// `Key910`/`Val910`): only labelled objects are watched.
pub const LABEL_KEY: &str = "ring-controller.atlas";
/// The label's value for Ascend 910 jobs.
pub const LABEL_VALUE: &str = "ascend-910";
/// The job's ConfigMap is `rings-config-<job>` (HCCL-Controller's
/// `ConfigmapPrefix` and a dash).
pub const CONFIGMAP_PREFIX: &str = "rings-config-";
/// The data key of the rank table in that ConfigMap.
pub const DATA_KEY: &str = "hccl.json";
/// The pod annotation the Ascend device plugin writes at Allocate: the
/// chips given to the pod and their NIC addresses.
pub const DEVICE_ANNOTATION: &str = "ascend.kubectl.kubernetes.io/ascend-910-configuration";
/// A pod's rank index, when someone (HCCL-Controller, the user) fixed it.
pub const RANK_INDEX_ANNOTATION: &str = "hccl/rankIndex";
/// The NPU resource whose pods get a rank table.
pub const NPU_RESOURCE: &str = "huawei.com/Ascend910";
/// Most chips in one pod's annotation (HCCL-Controller's `A800MaxChipNum`).
pub const MAX_CHIPS: usize = 16;
/// The `version` field of a v2 table (fixed by HCCL-Controller).
pub const V2_VERSION: &str = "1.0";

/// Which layout of `hccl.json` to write (HCCL-Controller's `-json` flag,
/// default `v2`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// `group_count` / `group_list` / `instance_list` (no rank ids).
    V1,
    /// `server_count` / `server_list` / `device` with `rank_id`, `version`.
    #[default]
    V2,
}

/// The table's `status`: training containers start only once `completed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Initializing,
    Completed,
}

impl Status {
    /// The JSON value.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Initializing => "initializing",
            Status::Completed => "completed",
        }
    }
}

/// Why a pod's device annotation cannot go into a table. The pod is left
/// out (the table stays `initializing`) and the reason logged.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AnnotationError {
    #[error("annotation {DEVICE_ANNOTATION} is not the device plugin's JSON: {0}")]
    Json(String),
    #[error("server_id {0:?} is not an IP address")]
    ServerId(String),
    #[error("{0} devices (want 1 to {MAX_CHIPS})")]
    DeviceCount(usize),
    #[error("device_id {0:?} is not a non-negative integer")]
    DeviceId(String),
    #[error("device_ip {0:?} is not an IP address")]
    DeviceIp(String),
}

/// One chip of a pod, as the device plugin writes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    pub device_id: String,
    pub device_ip: String,
}

/// The device plugin's annotation of one pod (fields in the order
/// HCCL-Controller's v1 `instance_list` prints them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instance {
    pub devices: Vec<Device>,
    pub pod_name: String,
    pub server_id: String,
}

/// Read and check a pod's device annotation with HCCL-Controller's rules
/// (`CheckDeviceInfo`): IP addresses, 1 to 16 devices, numeric device ids.
pub fn parse_instance(raw: &str) -> Result<Instance, AnnotationError> {
    let i: Instance =
        serde_json::from_str(raw).map_err(|e| AnnotationError::Json(e.to_string()))?;
    if i.server_id.parse::<IpAddr>().is_err() {
        return Err(AnnotationError::ServerId(i.server_id));
    }
    if i.devices.is_empty() || i.devices.len() > MAX_CHIPS {
        return Err(AnnotationError::DeviceCount(i.devices.len()));
    }
    for d in &i.devices {
        if d.device_id.parse::<u32>().is_err() {
            return Err(AnnotationError::DeviceId(d.device_id.clone()));
        }
        if d.device_ip.parse::<IpAddr>().is_err() {
            return Err(AnnotationError::DeviceIp(d.device_ip.clone()));
        }
    }
    Ok(i)
}

/// One group of identical pods: a Volcano task, or the whole batch Job or
/// Deployment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    pub name: String,
    pub replicas: u32,
    /// NPUs each pod asks for; groups without NPUs have no place in the table.
    pub npus_per_pod: u32,
}

/// A pod with a valid annotation, ready to be ranked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub pod: String,
    /// Index of its group in the job's group list.
    pub group: usize,
    /// Where it wants to be in rank order (see [`rank_hint`]); pods without
    /// one come after those with one, by name.
    pub hint: Option<u64>,
    pub instance: Instance,
}

/// Pods the table waits for: the replicas of the groups that use NPUs.
pub fn expected(groups: &[Group]) -> usize {
    groups
        .iter()
        .filter(|g| g.npus_per_pod > 0)
        .map(|g| g.replicas as usize)
        .sum()
}

/// A pod's place in rank order, from (first that exists): its
/// `hccl/rankIndex` annotation; Volcano's task index plus the replicas of
/// the tasks before its own; a batch Job's completion index. Stable across
/// re-lists and restarts, so rank ids do not move when pods are recreated.
pub fn rank_hint(
    rank_index: Option<&str>,
    task_index: Option<&str>,
    completion_index: Option<&str>,
    groups: &[Group],
    group: usize,
) -> Option<u64> {
    let num = |s: Option<&str>| s.and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(r) = num(rank_index) {
        return Some(r);
    }
    if let Some(i) = num(task_index) {
        let offset: u64 = groups
            .iter()
            .take(group)
            .filter(|g| g.npus_per_pod > 0)
            .map(|g| u64::from(g.replicas))
            .sum();
        return Some(offset + i);
    }
    num(completion_index)
}

/// A rank table, ready for the ConfigMap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    pub status: Status,
    /// The `hccl.json` value.
    pub json: String,
}

/// Build the job's table. `completed` once exactly the expected number of
/// pods have a valid annotation; otherwise `initializing` with no pods
/// listed (the containers read nothing until `completed`, and a table that
/// does not change with each arriving pod costs one write per state, not
/// one per pod).
pub fn build(format: Format, job: &str, groups: &[Group], members: &[Member]) -> Table {
    let want = expected(groups);
    let complete = want > 0 && members.len() == want;
    let mut ordered: Vec<&Member> = if complete {
        members.iter().collect()
    } else {
        Vec::new()
    };
    ordered.sort_by(|a, b| {
        (a.hint.unwrap_or(u64::MAX), a.group, &a.pod).cmp(&(
            b.hint.unwrap_or(u64::MAX),
            b.group,
            &b.pod,
        ))
    });
    let status = if complete {
        Status::Completed
    } else {
        Status::Initializing
    };
    let json = match format {
        Format::V1 => v1(status, job, groups, &ordered),
        Format::V2 => v2(status, &ordered),
    };
    Table { status, json }
}

/// The table's status as written in a ConfigMap value (`None`: not a table).
pub fn status_of(raw: &str) -> Option<Status> {
    #[derive(Deserialize)]
    struct Head {
        status: String,
    }
    let h: Head = serde_json::from_str(raw).ok()?;
    match h.status.as_str() {
        "initializing" => Some(Status::Initializing),
        "completed" => Some(Status::Completed),
        _ => None,
    }
}

/// Whether `desired` must be written over `current`: never to replace one
/// `initializing` table by another (the user's `{"status":"initializing"}`
/// placeholder stays as it is), always when the contents differ otherwise.
pub fn needs_write(current: Option<&str>, desired: &Table) -> bool {
    match current {
        Some(c) if desired.status == Status::Initializing => {
            status_of(c) != Some(Status::Initializing)
        }
        Some(c) => c != desired.json,
        None => true,
    }
}

// v2, in Go's field order (HCCL-Controller marshals structs).
#[derive(Serialize)]
struct V2Table<'a> {
    status: &'a str,
    server_list: Vec<V2Server<'a>>,
    server_count: String,
    version: &'a str,
}

#[derive(Serialize)]
struct V2Server<'a> {
    device: Vec<V2Device<'a>>,
    server_id: &'a str,
}

#[derive(Serialize)]
struct V2Device<'a> {
    device_id: &'a str,
    device_ip: &'a str,
    rank_id: String,
}

/// One server entry per pod; rank ids are the pod's rank index times its
/// chip count plus the chip's position (HCCL-Controller's `CachePodInfo`).
fn v2(status: Status, ordered: &[&Member]) -> String {
    let server_list: Vec<V2Server> = ordered
        .iter()
        .enumerate()
        .map(|(rank, m)| {
            let n = m.instance.devices.len();
            V2Server {
                device: m
                    .instance
                    .devices
                    .iter()
                    .enumerate()
                    .map(|(i, d)| V2Device {
                        device_id: &d.device_id,
                        device_ip: &d.device_ip,
                        rank_id: (rank * n + i).to_string(),
                    })
                    .collect(),
                server_id: &m.instance.server_id,
            }
        })
        .collect();
    let t = V2Table {
        status: status.as_str(),
        server_count: server_list.len().to_string(),
        server_list,
        version: V2_VERSION,
    };
    serde_json::to_string(&t).unwrap_or_default()
}

#[derive(Serialize)]
struct V1Table<'a> {
    status: &'a str,
    group_list: Vec<V1Group<'a>>,
    group_count: String,
}

#[derive(Serialize)]
struct V1Group<'a> {
    instance_list: Vec<&'a Instance>,
    group_name: &'a str,
    device_count: String,
    instance_count: String,
}

/// One group per NPU task (a batch Job or Deployment is one group named
/// after it), its instances in rank order.
fn v1(status: Status, job: &str, groups: &[Group], ordered: &[&Member]) -> String {
    let group_list: Vec<V1Group> = groups
        .iter()
        .enumerate()
        .filter(|(_, g)| g.npus_per_pod > 0)
        .map(|(gi, g)| V1Group {
            instance_list: ordered
                .iter()
                .filter(|m| m.group == gi)
                .map(|m| &m.instance)
                .collect(),
            group_name: if g.name.is_empty() { job } else { &g.name },
            device_count: (u64::from(g.npus_per_pod) * u64::from(g.replicas)).to_string(),
            instance_count: g.replicas.to_string(),
        })
        .collect();
    let t = V1Table {
        status: status.as_str(),
        group_count: group_list.len().to_string(),
        group_list,
    };
    serde_json::to_string(&t).unwrap_or_default()
}

#[cfg(test)]
mod tests;
