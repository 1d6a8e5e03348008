//! The device plugin's wire format of `DeviceInfoCfg` as serde reads it,
//! and the tolerant helpers that turn it into [`ChipFault`]s, chip lists and
//! times (string-in-JSON fault lists, old time maps, seconds-or-millis).
//! Apart from [`super`] so that the drift of the format stays in one place.

use super::{ChipFault, CodeFault};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Deserialize)]
pub(super) struct RawCfg {
    #[serde(rename = "DeviceInfo", default)]
    pub(super) device_info: RawDeviceInfo,
    #[serde(rename = "SuperPodID", default)]
    pub(super) super_pod_id: Option<i64>,
    #[serde(rename = "ServerIndex", default)]
    pub(super) server_index: Option<i64>,
    #[serde(rename = "CheckCode", default)]
    pub(super) check_code: Option<String>,
}

#[derive(Deserialize, Default)]
pub(super) struct RawDeviceInfo {
    #[serde(rename = "DeviceList", default, deserialize_with = "null_as_default")]
    pub(super) device_list: BTreeMap<String, serde_json::Value>,
    #[serde(rename = "UpdateTime", default)]
    pub(super) update_time: Option<i64>,
}

#[derive(Deserialize, Default)]
struct RawFault {
    #[serde(default, deserialize_with = "null_as_default")]
    fault_type: String,
    #[serde(default, deserialize_with = "null_as_default")]
    npu_name: String,
    #[serde(default)]
    large_model_fault_level: Option<String>,
    #[serde(default)]
    fault_level: Option<String>,
    #[serde(default)]
    fault_handling: Option<String>,
    /// `"C1,C2"`; some writers use an array.
    #[serde(default)]
    fault_code: Option<serde_json::Value>,
    #[serde(default, deserialize_with = "null_as_default")]
    fault_time_and_level_map: BTreeMap<String, RawTimeLevel>,
    /// The older per-code time map.
    #[serde(default, deserialize_with = "null_as_default")]
    fault_time_map: BTreeMap<String, i64>,
}

#[derive(Deserialize, Default)]
struct RawTimeLevel {
    #[serde(default)]
    fault_time: Option<i64>,
    #[serde(default)]
    fault_level: Option<String>,
}

fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

pub(super) enum ListKind {
    Available,
    Unhealthy,
    NetworkUnhealthy,
    Recovering,
    Fault,
}

pub(super) fn split_key(key: &str) -> (&str, ListKind) {
    // `-NetworkUnhealthy` before `-Unhealthy`: the latter is its suffix.
    for (suffix, kind) in [
        ("-NetworkUnhealthy", ListKind::NetworkUnhealthy),
        ("-Unhealthy", ListKind::Unhealthy),
        ("-Recovering", ListKind::Recovering),
        ("-Fault", ListKind::Fault),
    ] {
        if let Some(base) = key.strip_suffix(suffix) {
            return (base, kind);
        }
    }
    (key, ListKind::Available)
}

pub(super) fn chip_list(v: &serde_json::Value) -> Vec<String> {
    match v {
        serde_json::Value::String(s) => split_chips(s),
        serde_json::Value::Array(a) => a
            .iter()
            .filter_map(|x| x.as_str())
            .flat_map(split_chips)
            .collect(),
        _ => Vec::new(),
    }
}

pub(super) fn split_chips(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(str::to_string)
        .collect()
}

/// The `-Fault` value: a JSON array in a string (as the plugin writes it), or
/// an array directly; empty string or `null` is no fault.
pub(super) fn fault_list(v: &serde_json::Value) -> Result<Vec<ChipFault>, serde_json::Error> {
    let raw: Vec<RawFault> = match v {
        serde_json::Value::String(s) if s.trim().is_empty() => Vec::new(),
        serde_json::Value::String(s) => {
            serde_json::from_str::<Option<Vec<RawFault>>>(s)?.unwrap_or_default()
        }
        serde_json::Value::Null => Vec::new(),
        other => Vec::<RawFault>::deserialize(other)?,
    };
    Ok(raw.into_iter().map(chip_fault).collect())
}

fn chip_fault(r: RawFault) -> ChipFault {
    let nonempty = |s: &Option<String>| {
        s.as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let level = nonempty(&r.fault_handling)
        .or_else(|| nonempty(&r.fault_level))
        .or_else(|| nonempty(&r.large_model_fault_level));

    let mut names: Vec<String> = Vec::new();
    let mut push = |c: &str| {
        let c = c.trim();
        if !c.is_empty() && !names.iter().any(|n| n.eq_ignore_ascii_case(c)) {
            names.push(c.to_ascii_uppercase());
        }
    };
    match &r.fault_code {
        Some(serde_json::Value::String(s)) => s.split(',').for_each(&mut push),
        Some(serde_json::Value::Array(a)) => a.iter().for_each(|x| match x {
            serde_json::Value::String(s) => push(s),
            serde_json::Value::Number(n) => push(&n.to_string()),
            _ => {}
        }),
        _ => {}
    }
    // Codes only present in the time maps are faults too.
    r.fault_time_and_level_map.keys().for_each(|k| push(k));
    r.fault_time_map.keys().for_each(|k| push(k));

    let codes = names
        .into_iter()
        .map(|code| {
            let timed = lookup(&r.fault_time_and_level_map, &code);
            let time = timed
                .and_then(|t| t.fault_time)
                .or_else(|| lookup(&r.fault_time_map, &code).copied())
                .and_then(fault_time);
            let level = timed
                .and_then(|t| nonempty(&t.fault_level))
                .or_else(|| level.clone());
            CodeFault { code, level, time }
        })
        .collect();
    ChipFault {
        fault_type: r.fault_type.trim().to_string(),
        npu_name: r.npu_name.trim().to_string(),
        level,
        codes,
    }
}

fn lookup<'a, T>(map: &'a BTreeMap<String, T>, code: &str) -> Option<&'a T> {
    map.get(code).or_else(|| {
        map.iter()
            .find(|(k, _)| k.trim().eq_ignore_ascii_case(code))
            .map(|(_, v)| v)
    })
}

/// Fault times are milliseconds; a value too small to be milliseconds since
/// 1973 is taken as seconds (some writers use seconds).
fn fault_time(t: i64) -> Option<DateTime<Utc>> {
    if t <= 0 {
        None
    } else if t < 100_000_000_000 {
        unix_time(t)
    } else {
        DateTime::from_timestamp_millis(t)
    }
}

pub(super) fn unix_time(s: i64) -> Option<DateTime<Utc>> {
    if s <= 0 {
        None
    } else {
        DateTime::from_timestamp(s, 0)
    }
}

/// `Ascend910-3` → `3`; vNPU names end in the physical id too
/// (`Ascend910-2c-100-3`). A name without a numeric suffix is kept whole.
pub(super) fn chip_index(name: &str) -> Option<&str> {
    if name.is_empty() {
        return None;
    }
    match name.rsplit_once('-') {
        Some((_, idx)) if !idx.is_empty() && idx.bytes().all(|b| b.is_ascii_digit()) => Some(idx),
        _ => Some(name),
    }
}
