//! ClusterD's ConfigMap contents from the view (pure): the per-node JSON
//! entries, the sharding of `cluster-info-device-<m>` under a byte bound,
//! `cluster-info-node-cm` and `fault-job-info`. Shapes follow MindCluster's
//! "Cluster Resources" documentation and ClusterD's types (docs/ascend.md).

use super::view::{NodeState, RecoveringJob, ViewState};
use crate::fault::Level;
use crate::fault::ascend::{ChipFault, DEVICEINFO_PREFIX, DeviceInfo};
use serde::Serialize;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};

/// Name prefix of the device shards (`cluster-info-device-0`, `-1`, ...).
pub const DEVICE_PREFIX: &str = "cluster-info-device-";
/// Name (and data key) of the node-level view.
pub const NODE_CM: &str = "cluster-info-node-cm";
/// Name of the recovering-jobs ConfigMap.
pub const FAULT_JOB_CM: &str = "fault-job-info";
/// Key prefix of a node in `cluster-info-node-cm`.
pub const NODEINFO_PREFIX: &str = "mindx-dl-nodeinfo-";
/// ClusterD starts a new device shard every 1000 nodes.
pub const MAX_NODES_PER_SHARD: usize = 1000;
/// ClusterD keeps each ConfigMap's data under 800 KiB (the API server
/// refuses objects over 1 MiB; the rest is headroom for metadata).
pub const MAX_BYTES: usize = 800 * 1024;

/// The ClusterD handling name of a code: the plugin's own name when it
/// means the level rebound decided (keeps `RestartBusiness`,
/// `FreeRestartNPU`, ...), else the name of rebound's level
/// (DESIGN.md §2); the plugin's name when rebound has not classified it.
pub fn level_name(rebound: Option<Level>, plugin: Option<&str>) -> String {
    match (rebound, plugin) {
        (Some(l), Some(p)) if Level::from_clusterd(p) == Some(l) => p.to_string(),
        (Some(l), _) => l.clusterd_name().to_string(),
        (None, p) => p.unwrap_or_default().to_string(),
    }
}

/// The node-level name (`cluster-info-node-cm` knows three).
pub fn node_level_name(l: Level) -> &'static str {
    match l {
        Level::Ignore | Level::RestartJob => "NotHandleFault",
        Level::PreSeparate => "PreSeparateFault",
        Level::ResetDevice | Level::Separate => "SeparateFault",
    }
}

/// `NodeStatus` from the worst level on the node: rebound takes the whole
/// node out for ResetDevice and Separate, so the node is `UnHealthy`.
pub fn node_status(worst: Option<Level>) -> &'static str {
    match worst {
        Some(Level::ResetDevice | Level::Separate) => "UnHealthy",
        Some(Level::PreSeparate) => "PreSeparate",
        _ => "Healthy",
    }
}

/// A chip's effective level for a code: rebound's, else the plugin's.
fn code_level(n: &NodeState, chip: &ChipFault, code: &str, plugin: Option<&str>) -> Option<Level> {
    let dev = chip.device().unwrap_or_default().to_string();
    n.chip_levels
        .get(&(dev, code.to_string()))
        .copied()
        .or_else(|| plugin.and_then(Level::from_clusterd))
}

/// A `-Fault` list entry, in the device plugin's field order.
#[derive(Serialize)]
struct FaultEntry {
    fault_type: String,
    npu_name: String,
    large_model_fault_level: String,
    fault_level: String,
    fault_handling: String,
    fault_code: String,
    fault_time_and_level_map: BTreeMap<String, FaultTime>,
}

#[derive(Serialize)]
struct FaultTime {
    fault_time: i64,
    fault_level: String,
}

type ChipSet = BTreeSet<(String, u64, String)>;

/// Chips sorted by name prefix, then index (`Ascend910-2` before `-10`).
fn chip_set<'a>(it: impl IntoIterator<Item = &'a String>) -> ChipSet {
    it.into_iter()
        .map(|c| {
            let digits = c.len() - c.trim_end_matches(|x: char| x.is_ascii_digit()).len();
            let (head, num) = c.split_at(c.len() - digits);
            (head.to_string(), num.parse().unwrap_or(u64::MAX), c.clone())
        })
        .collect()
}

fn csv(chips: &ChipSet) -> String {
    chips
        .iter()
        .map(|(_, _, c)| c.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// One node's entry of a device shard (`mindx-dl-deviceinfo-<node>` →
/// this JSON), `None` without a device-plugin report. Chips rebound
/// separates (level Separate) or the plugin isolated by hand move from the
/// available list to `-Unhealthy`, as ClusterD does.
pub fn device_entry(n: &NodeState) -> Option<serde_json::Value> {
    let info: &DeviceInfo = n.device.as_ref()?;
    let mut list = serde_json::Map::new();
    for r in &info.resources {
        let mut faults = Vec::new();
        let mut separated: Vec<String> = Vec::new();
        for chip in &r.faults {
            let mut times = BTreeMap::new();
            let mut worst: Option<Level> = None;
            for c in &chip.codes {
                let l = code_level(n, chip, &c.code, c.level.as_deref());
                worst = worst.max(l);
                times.insert(
                    c.code.clone(),
                    FaultTime {
                        fault_time: c.time.map(|t| t.timestamp_millis()).unwrap_or_default(),
                        fault_level: level_name(l, c.level.as_deref()),
                    },
                );
            }
            if chip.codes.is_empty() {
                worst = chip.level.as_deref().and_then(Level::from_clusterd);
            }
            if worst == Some(Level::Separate) && !chip.npu_name.is_empty() {
                separated.push(chip.npu_name.clone());
            }
            let name = level_name(worst, chip.level.as_deref());
            faults.push(FaultEntry {
                fault_type: chip.fault_type.clone(),
                npu_name: chip.npu_name.clone(),
                large_model_fault_level: name.clone(),
                fault_level: name.clone(),
                fault_handling: name,
                fault_code: chip
                    .codes
                    .iter()
                    .map(|c| c.code.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
                fault_time_and_level_map: times,
            });
        }
        let manual = info
            .manually_separated
            .iter()
            .filter(|c| r.available.contains(c) || r.unhealthy.contains(c));
        let unhealthy = chip_set(r.unhealthy.iter().chain(separated.iter()).chain(manual));
        let names: BTreeSet<&String> = unhealthy.iter().map(|(_, _, c)| c).collect();
        let available = chip_set(r.available.iter().filter(|c| !names.contains(c)));
        let res = &r.resource;
        list.insert(res.clone(), json!(csv(&available)));
        list.insert(format!("{res}-Unhealthy"), json!(csv(&unhealthy)));
        list.insert(
            format!("{res}-NetworkUnhealthy"),
            json!(csv(&chip_set(&r.network_unhealthy))),
        );
        if !r.recovering.is_empty() {
            list.insert(
                format!("{res}-Recovering"),
                json!(csv(&chip_set(&r.recovering))),
            );
        }
        if !faults.is_empty() {
            let s = serde_json::to_string(&faults).unwrap_or_else(|_| "[]".into());
            list.insert(format!("{res}-Fault"), json!(s));
        }
    }
    Some(json!({
        "DeviceList": list,
        "UpdateTime": info.update_time.map(|t| t.timestamp()).unwrap_or_default(),
        "CmName": format!("{DEVICEINFO_PREFIX}{}", info.node),
        "SuperPodID": info.super_pod_id.unwrap_or_default(),
        "ServerIndex": info.server_index.unwrap_or_default(),
    }))
}

/// One node's entry of `cluster-info-node-cm`: its faulty devices with the
/// node-level names, grouped per (type, id, level), and `NodeStatus`.
/// A fault without a device has `DeviceId` -1. NPU chips are listed only at
/// PreSeparate and above (the chips rebound takes out of service): codes
/// of lower levels stay in the device shards alone, which keeps this single
/// ConfigMap small on large clusters (ClusterD's node view carries NodeD's
/// node-level devices only).
pub fn node_entry(name: &str, n: &NodeState) -> serde_json::Value {
    let mut groups: BTreeMap<(&'static str, i64, &'static str), BTreeSet<String>> = BTreeMap::new();
    let mut worst: Option<Level> = None;
    if let Some(info) = &n.device {
        for r in &info.resources {
            for chip in &r.faults {
                let id = chip.device().and_then(|d| d.parse().ok()).unwrap_or(-1);
                for c in &chip.codes {
                    let Some(l) = code_level(n, chip, &c.code, c.level.as_deref())
                        .filter(|l| l.cordons_node())
                    else {
                        continue;
                    };
                    worst = worst.max(Some(l));
                    groups
                        .entry(("NPU", id, node_level_name(l)))
                        .or_default()
                        .insert(c.code.clone());
                }
            }
        }
    }
    for f in &n.node_faults {
        let Some(&l) = n.node_levels.get(f) else {
            continue;
        };
        worst = worst.max(Some(l));
        let id = f
            .device
            .as_deref()
            .and_then(|d| d.parse().ok())
            .unwrap_or(-1);
        groups
            .entry((f.device_type, id, node_level_name(l)))
            .or_default()
            .insert(f.code.clone());
    }
    let list: Vec<serde_json::Value> = groups
        .into_iter()
        .map(|((t, id, l), codes)| {
            json!({"DeviceType": t, "DeviceId": id, "FaultCode": codes, "FaultLevel": l})
        })
        .collect();
    json!({
        "FaultDevList": list,
        "NodeStatus": node_status(worst),
        "CmName": format!("{NODEINFO_PREFIX}{name}"),
    })
}

/// Bytes one `"key":value,` entry adds to a JSON object (quotes, colon,
/// comma; node names need no escaping).
fn entry_bytes(key: &str, value: &str) -> usize {
    key.len() + 4 + value.len()
}

/// Fixed bytes of shard `index`: its data key (the ConfigMap name) and braces.
fn base_bytes(index: usize) -> usize {
    DEVICE_PREFIX.len() + index.to_string().len() + 2
}

/// The shard of every node, kept from the previous round as far as the
/// bounds allow, so one node's change rewrites one shard and nodes never
/// move without need. Nodes of an overfull shard move out, those that grew
/// most first (the node whose change overfilled it); new and moved nodes go
/// to the lowest shard with room, or to a new one. A node whose entry alone
/// exceeds the bound is in `too_big`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Assignment {
    /// Entry key (`mindx-dl-deviceinfo-<node>`) → shard index.
    pub of: BTreeMap<String, usize>,
    /// Entries left out: alone they do not fit.
    pub too_big: Vec<String>,
    /// Entry size of each assigned node, to see who grew next round.
    pub sizes: BTreeMap<String, usize>,
}

/// Compute the [`Assignment`] for entries of these byte sizes.
pub fn assign(
    prev: &Assignment,
    sizes: &BTreeMap<String, usize>,
    max_bytes: usize,
    max_nodes: usize,
) -> Assignment {
    // index → (nodes, bytes)
    let mut shards: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
    let mut of = BTreeMap::new();
    let mut homeless: Vec<&String> = Vec::new();
    let mut too_big = Vec::new();
    for (node, &size) in sizes {
        match prev.of.get(node) {
            Some(&i) => {
                let s = shards.entry(i).or_insert((0, base_bytes(i)));
                s.0 += 1;
                s.1 += size;
                of.insert(node.clone(), i);
            }
            None => homeless.push(node),
        }
    }
    // Evict from overfull shards (a node grew), the most grown first.
    for (&i, s) in shards.iter_mut() {
        if s.0 <= max_nodes && s.1 <= max_bytes {
            continue;
        }
        let mut members: Vec<(i64, &String)> = of
            .iter()
            .filter(|(_, v)| **v == i)
            .map(|(k, _)| {
                let was = prev.sizes.get(k).copied().unwrap_or_default();
                (sizes[k] as i64 - was as i64, k)
            })
            .collect();
        members.sort();
        let members: Vec<String> = members.into_iter().map(|(_, k)| k.clone()).collect();
        for node in members.iter().rev() {
            if s.0 <= max_nodes && s.1 <= max_bytes {
                break;
            }
            of.remove(node);
            s.0 -= 1;
            s.1 -= sizes[node];
            if let Some((k, _)) = sizes.get_key_value(node) {
                homeless.push(k);
            }
        }
    }
    homeless.sort();
    for node in homeless {
        let size = sizes[node];
        let slot = shards
            .iter()
            .find(|(_, s)| s.0 < max_nodes && s.1 + size <= max_bytes)
            .map(|(i, _)| *i);
        let i = match slot {
            Some(i) => i,
            None => {
                let i = (0..)
                    .find(|i| !shards.contains_key(i))
                    .unwrap_or(shards.len());
                if base_bytes(i) + size > max_bytes {
                    too_big.push(node.clone());
                    continue;
                }
                shards.insert(i, (0, base_bytes(i)));
                i
            }
        };
        if let Some(s) = shards.get_mut(&i) {
            s.0 += 1;
            s.1 += size;
        }
        of.insert(node.clone(), i);
    }
    let sizes = of.keys().map(|k| (k.clone(), sizes[k])).collect();
    Assignment { of, too_big, sizes }
}

/// A JSON object from entries whose values are JSON already.
fn object<'a>(entries: impl Iterator<Item = (&'a String, &'a String)>) -> String {
    let mut s = String::from("{");
    for (i, (k, v)) in entries.enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&serde_json::to_string(k).unwrap_or_default());
        s.push(':');
        s.push_str(v);
    }
    s.push('}');
    s
}

/// Everything to publish, from one view.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rendered {
    /// Shard index → the value of its single data key (named as the shard).
    pub device_shards: BTreeMap<usize, String>,
    /// The shard of each node (input of the next round).
    pub assignment: Assignment,
    /// The value of `cluster-info-node-cm`'s data key.
    pub node_cm: String,
    /// Entries left out of `cluster-info-node-cm` to stay in bounds
    /// (healthy nodes first).
    pub node_cm_dropped: usize,
    /// `fault-job-info` data: job id → JSON.
    pub fault_jobs: BTreeMap<String, String>,
}

/// Render the view, keeping nodes in the shards of `prev` where possible.
pub fn render(view: &ViewState, prev: &Assignment, max_bytes: usize) -> Rendered {
    let mut dev: BTreeMap<String, String> = BTreeMap::new();
    let mut nodes: BTreeMap<String, (bool, String)> = BTreeMap::new();
    for (name, n) in &view.nodes {
        if let Some(v) = device_entry(n) {
            dev.insert(format!("{DEVICEINFO_PREFIX}{name}"), v.to_string());
        }
        let e = node_entry(name, n);
        let healthy = e["FaultDevList"].as_array().is_none_or(|a| a.is_empty());
        nodes.insert(format!("{NODEINFO_PREFIX}{name}"), (healthy, e.to_string()));
    }
    let sizes = dev
        .iter()
        .map(|(k, v)| (k.clone(), entry_bytes(k, v)))
        .collect();
    let assignment = assign(prev, &sizes, max_bytes, MAX_NODES_PER_SHARD);
    let mut by_shard: BTreeMap<usize, Vec<(&String, &String)>> = BTreeMap::new();
    for (k, i) in &assignment.of {
        if let Some(v) = dev.get_key_value(k) {
            by_shard.entry(*i).or_default().push(v);
        }
    }
    let device_shards = by_shard
        .into_iter()
        .map(|(i, entries)| (i, object(entries.into_iter())))
        .collect();
    // The node view is one ConfigMap (the Volcano plugin reads that name):
    // drop healthy entries, then faulty ones, until it fits.
    let mut total = NODE_CM.len()
        + 2
        + nodes
            .iter()
            .map(|(k, (_, v))| entry_bytes(k, v))
            .sum::<usize>();
    let mut dropped = BTreeSet::new();
    for only_healthy in [true, false] {
        for (k, (healthy, v)) in nodes.iter().rev() {
            if total <= max_bytes {
                break;
            }
            if (*healthy || !only_healthy) && dropped.insert(k.clone()) {
                total -= entry_bytes(k, v);
            }
        }
    }
    let node_cm = object(
        nodes
            .iter()
            .filter(|(k, _)| !dropped.contains(*k))
            .map(|(k, (_, v))| (k, v)),
    );
    Rendered {
        device_shards,
        assignment,
        node_cm,
        node_cm_dropped: dropped.len(),
        fault_jobs: fault_jobs(view),
    }
}

/// `fault-job-info` data: per job id, ClusterD's per-SuperPoD record
/// `{"<SuperPodID>": {"JobId", "NodeNames", "SdIds", "FaultTimes"}}`.
/// rebound does not know SDIDs: `SdIds` is empty; nodes without a
/// SuperPoD ID are under `-1`.
pub fn fault_jobs(view: &ViewState) -> BTreeMap<String, String> {
    let pod_of = |node: &str| {
        view.nodes
            .get(node)
            .and_then(|n| n.device.as_ref())
            .and_then(|d| d.super_pod_id)
            .unwrap_or(-1)
    };
    view.jobs
        .values()
        .map(|j: &RecoveringJob| {
            let mut per_pod: BTreeMap<String, Vec<&String>> = BTreeMap::new();
            for n in &j.nodes {
                per_pod.entry(pod_of(n).to_string()).or_default().push(n);
            }
            let v: serde_json::Map<String, serde_json::Value> = per_pod
                .into_iter()
                .map(|(p, nodes)| {
                    let rec = json!({
                        "JobId": j.id,
                        "NodeNames": nodes,
                        "SdIds": [],
                        "FaultTimes": j.fault_time.timestamp_millis(),
                    });
                    (p, rec)
                })
                .collect();
            (j.id.clone(), serde_json::Value::Object(v).to_string())
        })
        .collect()
}

/// Nodes of a shard value (for tests and diagnostics).
pub fn shard_nodes(value: &str) -> Vec<String> {
    serde_json::from_str::<BTreeMap<String, serde_json::Value>>(value)
        .map(|m| {
            m.into_keys()
                .filter_map(|k| k.strip_prefix(DEVICEINFO_PREFIX).map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
