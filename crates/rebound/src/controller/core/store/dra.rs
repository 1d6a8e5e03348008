//! Which pod holds which device, where the cluster runs Dynamic Resource
//! Allocation: the devices each node publishes (ResourceSlices: driver,
//! pool, device name and the attributes a fault can name a GPU by), the
//! devices each ResourceClaim was allocated and the pods it is reserved
//! for, and the DeviceTaintRules rebound made. Kept trimmed to what the
//! joins need.
//!
//! A fault names its GPU by index (`3`), UUID (`GPU-…`) or PCI address, as
//! the agent or the reporter knows it; NVIDIA's DRA driver publishes each
//! GPU as a device `gpu-<minor>` with attributes `uuid` and
//! `resource.kubernetes.io/pciBusID` (older releases: `index`, `minor`,
//! `pcieBusID`). [`DraIndex::resolve`] tries each.

use crate::agent::pci::PciAddr;
use crate::controller::core::hashing::HashMap;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use k8s_openapi::api::resource::v1beta2::DeviceTaintRule;
use std::collections::{BTreeMap, BTreeSet};

/// The label on every DeviceTaintRule rebound makes.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "rebound");
/// The label naming the node of the device a rule isolates.
pub const RULE_NODE_LABEL: &str = "rebound.dev/node";
/// The taint key of rebound's DeviceTaintRules.
pub const DEVICE_TAINT_KEY: &str = "rebound.dev/device-fault";

/// One device as DRA allocates it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceRef {
    pub driver: String,
    pub pool: String,
    pub device: String,
}

impl std::fmt::Display for DeviceRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.driver, self.pool, self.device)
    }
}

/// What a fault may name a published device by.
#[derive(Clone, Debug, Default)]
struct DeviceIds {
    name: String,
    index: Option<i64>,
    uuid: Option<String>,
    pci: Option<PciAddr>,
}

#[derive(Clone, Debug)]
struct SliceInfo {
    node: String,
    driver: String,
    pool: String,
    devices: Vec<DeviceIds>,
}

#[derive(Clone, Debug, Default)]
struct ClaimInfo {
    devices: Vec<DeviceRef>,
    /// Names of the pods it is reserved for.
    pods: Vec<String>,
}

/// A DeviceTaintRule of rebound's, as the cluster shows it.
#[derive(Clone, Debug)]
pub struct RuleInfo {
    pub name: String,
    /// Known once the watch shows the rule.
    pub uid: Option<String>,
    pub node: String,
    pub device: DeviceRef,
    /// The taint's value (the fault's code).
    pub value: String,
    pub created: Option<chrono::DateTime<chrono::Utc>>,
}

/// The DRA objects rebound reads, and whether each list is complete.
#[derive(Debug, Default)]
pub struct DraIndex {
    slices: HashMap<String, SliceInfo>,
    claims: HashMap<(String, String), ClaimInfo>,
    rules: HashMap<String, RuleInfo>,
    /// Lists complete (a relist in progress, or a watch not started, is
    /// not): device scope is used only when both slices and claims are.
    pub slices_synced: bool,
    pub claims_synced: bool,
    /// DeviceTaintRules are served and their watch has listed them.
    pub rules_synced: bool,
    /// What the server serves (the controller asks at start): `None`
    /// until it answered. ResourceSlices and ResourceClaims; DeviceTaintRules.
    pub served: Option<(bool, bool)>,
    /// When the core learned what is served: lists not complete
    /// [`LIST_BOUND`] later are given up on (the node is the scope).
    pub served_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Since when the core waits to learn what is served (its first tick):
    /// not answered within [`LIST_BOUND`], the node is the scope meanwhile.
    pub asked_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// Longest device-scope decisions wait for the DRA lists at start.
pub const LIST_BOUND: std::time::Duration = std::time::Duration::from_secs(30);

/// Whether device scope can be decided now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listed {
    /// Every list needed is complete.
    Yes,
    /// Not served, or given up on: the node is the scope.
    Never,
    /// Served and still being listed: wait.
    NotYet,
}

fn attr_str(d: &k8s_openapi::api::resource::v1::Device, names: &[&str]) -> Option<String> {
    let attrs = d.attributes.as_ref()?;
    names
        .iter()
        .find_map(|n| attrs.get(*n).and_then(|a| a.string.clone()))
}

fn device_ids(d: &k8s_openapi::api::resource::v1::Device) -> DeviceIds {
    let index = d.attributes.as_ref().and_then(|a| {
        ["index", "minor"]
            .iter()
            .find_map(|n| a.get(*n).and_then(|v| v.int))
    });
    let pci = attr_str(
        d,
        &["resource.kubernetes.io/pciBusID", "pcieBusID", "pciBusID"],
    )
    .and_then(|t| PciAddr::parse(&t).ok());
    DeviceIds {
        name: d.name.clone(),
        index,
        uuid: attr_str(d, &["uuid"]),
        pci,
    }
}

impl DraIndex {
    /// A ResourceSlice seen (or gone, with `gone`).
    pub fn slice(&mut self, s: &ResourceSlice, gone: bool) {
        let Some(name) = s.metadata.name.clone() else {
            return;
        };
        let Some(node) = s.spec.node_name.clone().filter(|_| !gone) else {
            self.slices.remove(&name);
            return;
        };
        let devices = s
            .spec
            .devices
            .as_deref()
            .unwrap_or_default()
            .iter()
            .map(device_ids)
            .collect();
        self.slices.insert(
            name,
            SliceInfo {
                node,
                driver: s.spec.driver.clone(),
                pool: s.spec.pool.name.clone(),
                devices,
            },
        );
    }

    /// A ResourceClaim seen (or gone).
    pub fn claim(&mut self, c: &ResourceClaim, gone: bool) {
        let (Some(ns), Some(name)) = (c.metadata.namespace.clone(), c.metadata.name.clone()) else {
            return;
        };
        let status = c.status.as_ref();
        let devices: Vec<DeviceRef> = status
            .and_then(|s| s.allocation.as_ref())
            .and_then(|a| a.devices.as_ref())
            .map(|d| {
                d.results
                    .iter()
                    .flatten()
                    .map(|r| DeviceRef {
                        driver: r.driver.clone(),
                        pool: r.pool.clone(),
                        device: r.device.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let pods: Vec<String> = status
            .and_then(|s| s.reserved_for.as_ref())
            .into_iter()
            .flatten()
            .filter(|r| r.resource == "pods" && r.api_group.as_deref().unwrap_or("").is_empty())
            .map(|r| r.name.clone())
            .collect();
        if gone || devices.is_empty() || pods.is_empty() {
            self.claims.remove(&(ns, name));
        } else {
            self.claims.insert((ns, name), ClaimInfo { devices, pods });
        }
    }

    /// One of rebound's DeviceTaintRules seen (or gone).
    pub fn rule(&mut self, r: &DeviceTaintRule, gone: bool) {
        let Some(name) = r.metadata.name.clone() else {
            return;
        };
        let labels = r.metadata.labels.clone().unwrap_or_default();
        let node = labels.get(RULE_NODE_LABEL).cloned();
        let sel = r.spec.device_selector.as_ref();
        let device = sel.and_then(|s| {
            Some(DeviceRef {
                driver: s.driver.clone()?,
                pool: s.pool.clone()?,
                device: s.device.clone()?,
            })
        });
        match (gone, node, device) {
            (false, Some(node), Some(device))
                if labels.get(MANAGED_BY.0).map(String::as_str) == Some(MANAGED_BY.1) =>
            {
                let created = r
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| crate::k8s::time::to_chrono(&t.0));
                self.rules.insert(
                    name.clone(),
                    RuleInfo {
                        name,
                        uid: r.metadata.uid.clone(),
                        node,
                        device,
                        value: r.spec.taint.value.clone().unwrap_or_default(),
                        created,
                    },
                );
            }
            _ => {
                self.rules.remove(&name);
            }
        }
    }

    /// A rule rebound just made, shown before its watch event comes (so
    /// that it is not made twice).
    pub fn made_rule(
        &mut self,
        rule: &str,
        node: &str,
        device: &DeviceRef,
        value: &str,
        at: chrono::DateTime<chrono::Utc>,
    ) {
        if self.rules.contains_key(rule) {
            return;
        }
        self.rules.insert(
            rule.to_string(),
            RuleInfo {
                name: rule.to_string(),
                uid: None,
                node: node.to_string(),
                device: device.clone(),
                value: value.to_string(),
                created: Some(at),
            },
        );
    }

    /// What a validation Job is told of `device` beyond its name: the
    /// attributes its slice publishes (`REBOUND_DEVICE_UUID`,
    /// `REBOUND_DEVICE_INDEX`, `REBOUND_DEVICE_PCI`).
    pub fn device_env(&self, device: &DeviceRef) -> Vec<(String, String)> {
        let Some(d) = self
            .slices
            .values()
            .filter(|s| s.driver == device.driver && s.pool == device.pool)
            .flat_map(|s| &s.devices)
            .find(|d| d.name == device.device)
        else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if let Some(u) = &d.uuid {
            out.push(("REBOUND_DEVICE_UUID".to_string(), u.clone()));
        }
        if let Some(i) = d.index {
            out.push(("REBOUND_DEVICE_INDEX".to_string(), i.to_string()));
        }
        if let Some(p) = &d.pci {
            out.push(("REBOUND_DEVICE_PCI".to_string(), p.to_string()));
        }
        out
    }

    /// A rule rebound just deleted.
    pub fn removed_rule(&mut self, rule: &str) {
        self.rules.remove(rule);
    }

    /// A relist of one kind begins: what it lists replaces what was known.
    pub fn relist(&mut self, what: DraKind) {
        match what {
            DraKind::Slices => {
                self.slices.clear();
                self.slices_synced = false;
            }
            DraKind::Claims => {
                self.claims.clear();
                self.claims_synced = false;
            }
            DraKind::Rules => {
                self.rules.clear();
                self.rules_synced = false;
            }
        }
    }

    /// A list of one kind is complete.
    pub fn synced(&mut self, what: DraKind) {
        match what {
            DraKind::Slices => self.slices_synced = true,
            DraKind::Claims => self.claims_synced = true,
            DraKind::Rules => self.rules_synced = true,
        }
    }

    /// Whether device scope can be used: every slice and claim is known.
    pub fn ready(&self) -> bool {
        self.slices_synced && self.claims_synced
    }

    /// Whether the lists device scope needs (with `rules`, the rules'
    /// too) are complete, will not be, or are awaited at `now`.
    pub fn listed(&self, rules: bool, now: chrono::DateTime<chrono::Utc>) -> Listed {
        let complete = self.ready() && (!rules || self.rules_synced);
        if complete {
            return Listed::Yes;
        }
        let bound = chrono::Duration::from_std(LIST_BOUND).unwrap_or_default();
        let Some((claims, rules_served)) = self.served else {
            return match self.asked_at {
                Some(t) if now - t >= bound => Listed::Never,
                _ => Listed::NotYet,
            };
        };
        if !claims || (rules && !rules_served) {
            return Listed::Never;
        }
        match self.served_at {
            Some(t) if now - t >= bound => Listed::Never,
            _ => Listed::NotYet,
        }
    }

    /// The DRA device of `node` a fault names `device` (an index, a UUID,
    /// a PCI address or the device's own name), if exactly one matches.
    pub fn resolve(&self, node: &str, device: &str) -> Option<DeviceRef> {
        if !self.ready() {
            return None;
        }
        let d = device.trim();
        let index: Option<i64> = d.parse().ok();
        let pci = PciAddr::parse(d).ok().filter(|_| index.is_none());
        let mut found: BTreeSet<DeviceRef> = BTreeSet::new();
        for s in self.slices.values().filter(|s| s.node == node) {
            for x in &s.devices {
                let hit = x.name == d
                    || x.uuid.as_deref().is_some_and(|u| u.eq_ignore_ascii_case(d))
                    || pci.is_some_and(|p| x.pci == Some(p))
                    || index.is_some_and(|i| {
                        x.index == Some(i) || x.index.is_none() && x.name == format!("gpu-{i}")
                    });
                if hit {
                    found.insert(DeviceRef {
                        driver: s.driver.clone(),
                        pool: s.pool.clone(),
                        device: x.name.clone(),
                    });
                }
            }
        }
        (found.len() == 1)
            .then(|| found.into_iter().next())
            .flatten()
    }

    /// The pods (namespace, name) whose claims hold `device`.
    pub fn holders(&self, device: &DeviceRef) -> Vec<(String, String)> {
        let mut out: BTreeSet<(String, String)> = BTreeSet::new();
        for ((ns, _), c) in self.claims.iter() {
            if c.devices.contains(device) {
                out.extend(c.pods.iter().map(|p| (ns.clone(), p.clone())));
            }
        }
        out.into_iter().collect()
    }

    /// How many DeviceTaintRules of rebound's there are.
    pub fn rule_count(&self) -> usize {
        self.rules.len()
    }

    /// rebound's DeviceTaintRules on `node`'s devices, by device.
    pub fn rules_on(&self, node: &str) -> BTreeMap<DeviceRef, RuleInfo> {
        self.rules
            .values()
            .filter(|r| r.node == node)
            .map(|r| (r.device.clone(), r.clone()))
            .collect()
    }

    /// Every node with a rule of rebound's, and its oldest rule's time.
    pub fn isolated_nodes(&self) -> BTreeMap<String, Option<chrono::DateTime<chrono::Utc>>> {
        let mut out: BTreeMap<String, Option<chrono::DateTime<chrono::Utc>>> = BTreeMap::new();
        for r in self.rules.values() {
            let e = out.entry(r.node.clone()).or_insert(r.created);
            *e = match (*e, r.created) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
        }
        out
    }
}

/// The DRA objects rebound watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DraKind {
    Slices,
    Claims,
    Rules,
}

/// The name of rebound's DeviceTaintRule for `device`: stable, so that
/// creating it twice makes one rule (a DNS subdomain of at most 253).
pub fn rule_name(device: &DeviceRef) -> String {
    let id = crate::controller::core::occurrence::fingerprint(&(
        &device.driver,
        &device.pool,
        &device.device,
    ));
    let dev: String = device
        .device
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    format!("rebound-{}-{:016x}", dev.trim_matches('-'), id as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(node: &str, devices: serde_json::Value) -> ResourceSlice {
        serde_json::from_value(json!({
            "metadata": {"name": format!("{node}-gpu.nvidia.com")},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": devices}
        }))
        .expect("slice")
    }

    fn claim(ns: &str, name: &str, device: &str, pod: &str) -> ResourceClaim {
        serde_json::from_value(json!({
            "metadata": {"namespace": ns, "name": name},
            "spec": {"devices": {"requests": []}},
            "status": {
                "allocation": {"devices": {"results": [
                    {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": device}
                ]}},
                "reservedFor": [{"resource": "pods", "name": pod, "uid": "u"}]
            }
        }))
        .expect("claim")
    }

    fn index() -> DraIndex {
        let mut x = DraIndex::default();
        x.relist(DraKind::Slices);
        x.slice(
            &slice(
                "n1",
                json!([
                    {"name": "gpu-0", "attributes": {"uuid": {"string": "GPU-aaaa"},
                        "resource.kubernetes.io/pciBusID": {"string": "0000:3b:00.0"}}},
                    {"name": "gpu-3", "attributes": {"uuid": {"string": "GPU-dddd"},
                        "resource.kubernetes.io/pciBusID": {"string": "0000:86:00.0"}}}
                ]),
            ),
            false,
        );
        x.slice(
            &slice(
                "n2",
                json!([{"name": "gpu-3", "attributes": {"index": {"int": 7}}}]),
            ),
            false,
        );
        x.synced(DraKind::Slices);
        x.relist(DraKind::Claims);
        x.claim(&claim("a", "c3", "gpu-3", "a-0"), false);
        x.claim(&claim("b", "c0", "gpu-0", "b-0"), false);
        x.synced(DraKind::Claims);
        x
    }

    #[test]
    fn a_fault_names_its_gpu_by_index_uuid_pci_address_or_name() {
        let x = index();
        let want = |d: &str| DeviceRef {
            driver: "gpu.nvidia.com".into(),
            pool: "n1".into(),
            device: d.into(),
        };
        assert_eq!(x.resolve("n1", "3"), Some(want("gpu-3")));
        assert_eq!(x.resolve("n1", "GPU-aaaa"), Some(want("gpu-0")));
        assert_eq!(x.resolve("n1", "PCI:0000:86:00"), Some(want("gpu-3")));
        assert_eq!(x.resolve("n1", "gpu-0"), Some(want("gpu-0")));
        // An `index` attribute wins over the name: n2's gpu-3 is index 7.
        assert_eq!(x.resolve("n2", "3"), None);
        assert_eq!(x.resolve("n2", "7").map(|d| d.device), Some("gpu-3".into()));
        // Another node's devices never match.
        assert_eq!(x.resolve("n3", "3"), None);
    }

    #[test]
    fn holders_are_the_pods_a_claim_of_that_device_is_reserved_for() {
        let mut x = index();
        let d = x.resolve("n1", "3").expect("gpu-3");
        assert_eq!(x.holders(&d), vec![("a".to_string(), "a-0".to_string())]);
        // Deallocated (the pod gone): no holder.
        x.claim(&claim("a", "c3", "gpu-3", "a-0"), true);
        assert!(x.holders(&d).is_empty());
    }

    #[test]
    fn nothing_resolves_while_a_list_is_incomplete() {
        let mut x = index();
        x.relist(DraKind::Claims);
        assert_eq!(x.resolve("n1", "3"), None, "claims relisting");
        x.synced(DraKind::Claims);
        assert!(x.resolve("n1", "3").is_some());
    }

    #[test]
    fn rule_names_are_stable_dns_names() {
        let d = DeviceRef {
            driver: "gpu.nvidia.com".into(),
            pool: "node-a".into(),
            device: "gpu-3".into(),
        };
        let n = rule_name(&d);
        assert_eq!(n, rule_name(&d.clone()));
        assert!(n.starts_with("rebound-gpu-3-") && n.len() <= 253, "{n}");
        let other = DeviceRef {
            pool: "node-b".into(),
            ..d
        };
        assert_ne!(rule_name(&other), n);
    }
}
