//! Ascend NPU faults from the device plugin's `mindx-dl-deviceinfo-<node>`
//! ConfigMaps (DESIGN.md §4 `AscendNpu`, the ClusterD input).
//!
//! The ConfigMap's `DeviceInfoCfg` is JSON:
//! `{"DeviceInfo":{"DeviceList":{...},"UpdateTime":<unix s>},"SuperPodID":n,"ServerIndex":n,"CheckCode":"..."}`.
//! `DeviceList` maps resource keys to strings: `huawei.com/Ascend910` (chips
//! the plugin offers, comma-separated), `...-Unhealthy`,
//! `...-NetworkUnhealthy`, `...-Recovering`, and `...-Fault`, a JSON array
//! *inside the string* of entries
//! `{fault_type, npu_name, large_model_fault_level, fault_level, fault_handling,
//! fault_code: "C1,C2", fault_time_and_level_map: {C1: {fault_time: <ms>, fault_level}}}`.
//! Older plugins write `fault_time_map: {C1: <ms>}` or no times at all; newer
//! hardware (Atlas 350/850/950) uses `huawei.com/npu` as the resource; the
//! Ascend310P writes `huawei.com/Ascend310P-*`. All are read the same way.
//! A second data key, `ManuallySeparateNPU`, lists chips the plugin isolated
//! after repeated faults; they stay isolated until a person edits the key.

use super::{Fault, FaultSource, Level};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::ConfigMap;
use std::collections::BTreeMap;
use wire::{
    ListKind, RawCfg, chip_index, chip_list, fault_list, split_chips, split_key, unix_time,
};

mod wire;

/// Name prefix of the device plugin's per-node ConfigMaps.
pub const DEVICEINFO_PREFIX: &str = "mindx-dl-deviceinfo-";
/// The namespace the device plugin writes to; only there is it trusted.
pub const DEVICEINFO_NAMESPACE: &str = "kube-system";
/// Data key holding the device JSON.
pub const DEVICEINFO_KEY: &str = "DeviceInfoCfg";
/// Data key listing chips isolated by the plugin's frequency escalation.
pub const MANUALLY_SEPARATE_KEY: &str = "ManuallySeparateNPU";
/// Fault code of a chip listed in [`MANUALLY_SEPARATE_KEY`]. ClusterD handles
/// such chips as `SeparateNPU`; classify this code as `Separate`.
pub const MANUALLY_SEPARATE_CODE: &str = "ManuallySeparateNPU";
/// Fault code of a chip in a `-Unhealthy` list with no fault entry.
pub const CARD_UNHEALTHY_CODE: &str = "CardUnhealthy";
/// Fault code of a chip in a `-NetworkUnhealthy` list with no fault entry.
pub const CARD_NETWORK_UNHEALTHY_CODE: &str = "CardNetworkUnhealthy";

/// Why a device-info ConfigMap could not be read. Each names the ConfigMap.
#[derive(Debug, thiserror::Error)]
pub enum AscendError {
    /// The name does not say which node: the caller should have filtered
    /// with [`deviceinfo_node`].
    #[error(
        "configmap {namespace}/{name} is not a device-plugin {DEVICEINFO_PREFIX}<node> ConfigMap"
    )]
    NotDeviceInfo { namespace: String, name: String },
    /// The plugin has not written its data yet, or someone removed it.
    #[error("configmap {namespace}/{name} has no data key {DEVICEINFO_KEY}")]
    MissingKey { namespace: String, name: String },
    /// The outer JSON is broken: nothing of the node can be trusted.
    #[error(
        "configmap {namespace}/{name}: {DEVICEINFO_KEY} is not valid device-info JSON: {source}"
    )]
    Json {
        namespace: String,
        name: String,
        #[source]
        source: serde_json::Error,
    },
    /// One `-Fault` list (JSON inside the JSON string) is broken.
    #[error(
        "configmap {namespace}/{name}: {DEVICEINFO_KEY} DeviceList[{key:?}] is not a fault list: {source}"
    )]
    FaultList {
        namespace: String,
        name: String,
        key: String,
        #[source]
        source: serde_json::Error,
    },
}

/// One node's devices as the Ascend device plugin reports them, parsed: the
/// base of [`deviceinfo_faults`] and of a ClusterD-style cluster fault view.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeviceInfo {
    /// The node, from the ConfigMap name.
    pub node: String,
    /// `DeviceInfo.UpdateTime`: when the plugin last wrote the list.
    pub update_time: Option<DateTime<Utc>>,
    /// Atlas A3 super-pod id (`-1`/`-2` when the driver does not know).
    pub super_pod_id: Option<i64>,
    /// Position of the node in its super pod (same `-1`/`-2` convention):
    /// with `super_pod_id`, what a fault view needs to group A3 nodes.
    pub server_index: Option<i64>,
    /// The plugin's SHA-256 of `DeviceInfo`, kept for consumers that want to
    /// detect hand edits; not verified here (it hashes Go's exact bytes).
    pub check_code: Option<String>,
    /// One entry per resource (`huawei.com/Ascend910`, `huawei.com/npu`, ...),
    /// sorted by resource name.
    pub resources: Vec<ResourceDevices>,
    /// Chips listed in `ManuallySeparateNPU`.
    pub manually_separated: Vec<String>,
}

/// The chip lists of one resource.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResourceDevices {
    /// The resource name without suffix, e.g. `huawei.com/Ascend910`.
    pub resource: String,
    /// Chips the plugin offers (`huawei.com/Ascend910`).
    pub available: Vec<String>,
    /// Chips the plugin took away from scheduling for a chip fault.
    pub unhealthy: Vec<String>,
    /// Chips whose network (RoCE/HCCS link) is faulty.
    pub network_unhealthy: Vec<String>,
    /// Chips being reset; not a fault by themselves.
    pub recovering: Vec<String>,
    /// The `-Fault` entries.
    pub faults: Vec<ChipFault>,
}

/// One `-Fault` entry: the faults of one chip (or of the node, for
/// `NodeUnhealthy` entries, whose `npu_name` is empty).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChipFault {
    /// `CardUnhealthy`, `CardNetworkUnhealthy`, `NodeUnhealthy`.
    pub fault_type: String,
    /// `Ascend910-3`; empty for a node fault.
    pub npu_name: String,
    /// The entry's handling level name (`fault_handling`, else
    /// `fault_level`, else `large_model_fault_level`), e.g. `SeparateNPU`.
    pub level: Option<String>,
    /// The entry's codes, in the plugin's order, each with its own time.
    pub codes: Vec<CodeFault>,
}

/// One fault code of a chip.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CodeFault {
    /// Upper-case hex as the plugin writes it, e.g. `80E18402`.
    pub code: String,
    /// This code's own level name when the plugin gives one, else the entry's.
    pub level: Option<String>,
    /// When the fault occurred, when the plugin says.
    pub time: Option<DateTime<Utc>>,
}

impl DeviceInfo {
    /// Whether the plugin itself reports the node fit for work: no chip in an
    /// `-Unhealthy` / `-NetworkUnhealthy` list or in `ManuallySeparateNPU`,
    /// and no fault whose plugin level would take hardware out of service
    /// (`PreSeparateNPU` and above; an unknown level counts as such).
    /// Job-level (`RestartRequest`, `RestartBusiness`) and `NotHandleFault`
    /// codes linger in the list after the job recovered, so they do not
    /// count: a node cordoned for an Ascend fault may be uncordoned when
    /// this turns true, whereas [`deviceinfo_faults`] is rarely empty.
    pub fn healthy(&self) -> bool {
        let level_ok = |l: Option<&str>| {
            l.and_then(Level::from_clusterd)
                .is_some_and(|l| !l.cordons_node())
        };
        self.manually_separated.is_empty()
            && self.resources.iter().all(|r| {
                r.unhealthy.is_empty()
                    && r.network_unhealthy.is_empty()
                    && r.faults.iter().all(|e| {
                        if e.codes.is_empty() {
                            level_ok(e.level.as_deref())
                        } else {
                            e.codes.iter().all(|c| level_ok(c.level.as_deref()))
                        }
                    })
            })
    }
}

impl ChipFault {
    /// The chip index (`Ascend910-3` → `3`), if the entry names a chip.
    pub fn device(&self) -> Option<&str> {
        chip_index(&self.npu_name)
    }
}

impl CodeFault {
    /// The rebound level of the plugin's level name, if it is a known one.
    pub fn level(&self) -> Option<Level> {
        self.level.as_deref().and_then(Level::from_clusterd)
    }
}

/// The node name if this is a device-plugin `mindx-dl-deviceinfo-<node>`
/// ConfigMap (any namespace: trust is decided by [`deviceinfo_faults`]).
pub fn deviceinfo_node(cm: &ConfigMap) -> Option<String> {
    cm.metadata
        .name
        .as_deref()
        .and_then(|n| n.strip_prefix(DEVICEINFO_PREFIX))
        .filter(|n| !n.is_empty())
        .map(str::to_string)
}

/// Parse the device lists of a `mindx-dl-deviceinfo-<node>` ConfigMap.
///
/// Tolerant of format drift (missing fields, `null`s, old time maps, unknown
/// keys); a `DeviceInfoCfg` or fault list that is not JSON is an error.
pub fn parse_deviceinfo(cm: &ConfigMap) -> Result<DeviceInfo, AscendError> {
    let namespace = || cm.metadata.namespace.clone().unwrap_or_default();
    let name = || cm.metadata.name.clone().unwrap_or_default();
    let node = deviceinfo_node(cm).ok_or_else(|| AscendError::NotDeviceInfo {
        namespace: namespace(),
        name: name(),
    })?;
    let data = cm.data.as_ref();
    let raw = data
        .and_then(|d| d.get(DEVICEINFO_KEY))
        .ok_or_else(|| AscendError::MissingKey {
            namespace: namespace(),
            name: name(),
        })?;
    let cfg: RawCfg = serde_json::from_str(raw).map_err(|source| AscendError::Json {
        namespace: namespace(),
        name: name(),
        source,
    })?;

    let mut by_resource: BTreeMap<&str, ResourceDevices> = BTreeMap::new();
    for (key, value) in &cfg.device_info.device_list {
        let (resource, kind) = split_key(key);
        let entry = by_resource
            .entry(resource)
            .or_insert_with(|| ResourceDevices {
                resource: resource.to_string(),
                ..ResourceDevices::default()
            });
        match kind {
            ListKind::Available => entry.available = chip_list(value),
            ListKind::Unhealthy => entry.unhealthy = chip_list(value),
            ListKind::NetworkUnhealthy => entry.network_unhealthy = chip_list(value),
            ListKind::Recovering => entry.recovering = chip_list(value),
            ListKind::Fault => {
                entry.faults = fault_list(value).map_err(|source| AscendError::FaultList {
                    namespace: namespace(),
                    name: name(),
                    key: key.clone(),
                    source,
                })?;
            }
        }
    }

    Ok(DeviceInfo {
        node,
        update_time: cfg.device_info.update_time.and_then(unix_time),
        super_pod_id: cfg.super_pod_id,
        server_index: cfg.server_index,
        check_code: cfg.check_code,
        resources: by_resource.into_values().collect(),
        manually_separated: data
            .and_then(|d| d.get(MANUALLY_SEPARATE_KEY))
            .map(|s| split_chips(s))
            .unwrap_or_default(),
    })
}

/// Faults in a `mindx-dl-deviceinfo-<node>` ConfigMap: one per (chip, fault
/// code) of the `*-Fault` lists, source `AscendNpu`, code = the hex code,
/// device = the chip index (`Ascend910-3` → `3`; the name is in the message),
/// reason = the plugin's level name for that code (`SeparateNPU`, ...) so that
/// a classification may follow the plugin by listing level names as codes.
///
/// Also one fault per chip in `ManuallySeparateNPU` (code
/// [`MANUALLY_SEPARATE_CODE`]: the plugin isolated the chip after repeated
/// faults and keeps it isolated until a person clears it, which ClusterD
/// handles as `SeparateNPU`), and one per chip of an `-Unhealthy` /
/// `-NetworkUnhealthy` list that no fault entry explains (codes
/// [`CARD_UNHEALTHY_CODE`], [`CARD_NETWORK_UNHEALTHY_CODE`]: older plugins
/// list chips without codes). An entry without codes becomes one fault whose
/// code is its `fault_type`.
///
/// `first_seen` = `last_seen` = the code's fault time (stable across the
/// plugin's rewrites, so a fault is not counted again at every update), else
/// `UpdateTime`, else `now`. `trusted` = the ConfigMap is in `kube-system`.
pub fn deviceinfo_faults(cm: &ConfigMap, now: DateTime<Utc>) -> Result<Vec<Fault>, AscendError> {
    let info = parse_deviceinfo(cm)?;
    let trusted = cm.metadata.namespace.as_deref() == Some(DEVICEINFO_NAMESPACE);
    let updated = info.update_time.unwrap_or(now);
    let new = |code: &str, at: DateTime<Utc>, device: Option<&str>| {
        let mut f = Fault::new(FaultSource::AscendNpu, code, at);
        f.node = Some(info.node.clone());
        f.device = device.map(str::to_string);
        f.trusted = trusted;
        f
    };

    let mut out = Vec::new();
    for res in &info.resources {
        for entry in &res.faults {
            let chip = if entry.npu_name.is_empty() {
                "node"
            } else {
                entry.npu_name.as_str()
            };
            let kind = if entry.fault_type.is_empty() {
                "fault"
            } else {
                entry.fault_type.as_str()
            };
            if entry.codes.is_empty() {
                let mut f = new(kind, updated, entry.device());
                f.reason = entry.level.clone();
                f.message = Some(format!(
                    "{chip}: {kind} without fault code ({})",
                    res.resource
                ));
                out.push(f);
                continue;
            }
            for c in &entry.codes {
                let mut f = new(&c.code, c.time.unwrap_or(updated), entry.device());
                f.reason = c.level.clone();
                f.message = Some(format!(
                    "{chip}: {kind} {} level {}",
                    c.code,
                    c.level.as_deref().unwrap_or("unknown")
                ));
                out.push(f);
            }
        }
        let explained = |chip: &str| res.faults.iter().any(|e| e.npu_name == chip);
        for (list, code, what) in [
            (&res.unhealthy, CARD_UNHEALTHY_CODE, "Unhealthy"),
            (
                &res.network_unhealthy,
                CARD_NETWORK_UNHEALTHY_CODE,
                "NetworkUnhealthy",
            ),
        ] {
            for chip in list.iter().filter(|c| !explained(c)) {
                let mut f = new(code, updated, chip_index(chip));
                f.message = Some(format!(
                    "{chip} listed in {}-{what} without a fault entry",
                    res.resource
                ));
                out.push(f);
            }
        }
    }
    for chip in &info.manually_separated {
        let mut f = new(MANUALLY_SEPARATE_CODE, updated, chip_index(chip));
        f.reason = Some(MANUALLY_SEPARATE_CODE.to_string());
        f.message = Some(format!(
            "{chip} isolated by the device plugin after repeated faults ({MANUALLY_SEPARATE_KEY}); \
             it stays isolated until removed from that key"
        ));
        out.push(f);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
