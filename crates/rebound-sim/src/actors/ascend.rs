//! The Ascend device plugin's per-node ConfigMaps
//! (`kube-system/mindx-dl-deviceinfo-<node>`, label `mx-consumer-cim: "true"`)
//! in the plugin's real format: data key `DeviceInfoCfg` holds the JSON
//! `{"DeviceInfo":{"DeviceList":{...},"UpdateTime":<unix s>},"CheckCode":"<sha256>"}`
//! where `DeviceList` lists healthy chips under `huawei.com/Ascend910`, the
//! faults under `huawei.com/Ascend910-Fault` (a JSON string of entries with
//! hex `fault_code`s) and the unhealthy chips, and `CheckCode` is the
//! SHA-256 of the `DeviceInfo` JSON (checked against a recorded A3 sample).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde::Serialize;
use serde_json::json;

use super::runtime::ActorError;
use super::util::is_conflict;

/// Namespace of the device-info ConfigMaps.
pub const NAMESPACE: &str = "kube-system";
/// Data key of the device info.
pub const DATA_KEY: &str = "DeviceInfoCfg";
/// The resource name of the chips.
pub const RESOURCE: &str = "huawei.com/Ascend910";

/// The pod annotation the plugin writes at Allocate (read by rank-table
/// builders): `{"pod_name","server_id","devices":[{"device_id","device_ip"}]}`.
pub const DEVICE_ANNOTATION: &str = "ascend.kubectl.kubernetes.io/ascend-910-configuration";

/// A chip's NIC address (hccn.conf's `address_<chip>`): one per chip and
/// node, derived from the node address `10.a.b.c` as `192.(168+chip).b.c`.
pub fn device_ip(server_id: &str, chip: u32) -> String {
    let o: Vec<u32> = server_id
        .split('.')
        .filter_map(|x| x.parse().ok())
        .collect();
    let (b, c) = match o.as_slice() {
        [_, _, b, c] => (*b, *c),
        _ => (0, 0),
    };
    format!("192.{}.{b}.{c}", 168 + chip.min(87))
}

/// The [`DEVICE_ANNOTATION`] value for a pod given `chips` on the node at
/// `server_id` (its InternalIP), as the plugin writes it at Allocate.
pub fn device_annotation(pod: &str, server_id: &str, chips: &[u32]) -> String {
    let devices: Vec<serde_json::Value> = chips
        .iter()
        .map(|c| json!({"device_id": c.to_string(), "device_ip": device_ip(server_id, *c)}))
        .collect();
    json!({"pod_name": pod, "server_id": server_id, "devices": devices}).to_string()
}

/// The lowest `n` free chips of a node with `total` chips (`used` taken),
/// or `None` when too few are free.
pub fn pick_chips(total: u32, used: &[u32], n: u32) -> Option<Vec<u32>> {
    let free: Vec<u32> = (0..total)
        .filter(|c| !used.contains(c))
        .take(n as usize)
        .collect();
    (free.len() == n as usize).then_some(free)
}

/// The ConfigMap name for a node.
pub fn configmap_name(node: &str) -> String {
    format!("mindx-dl-deviceinfo-{node}")
}

/// One faulty chip, as the device plugin reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AscendFault {
    /// Chip index (`Ascend910-<chip>`).
    pub chip: u32,
    /// Hex fault codes, e.g. `80E18402`.
    pub codes: Vec<String>,
    /// The plugin's level: `NotHandleFault`, `PreSeparateNPU`,
    /// `SeparateNPU`, `RestartNPU`, ...
    pub level: String,
    /// `CardUnhealthy` or `CardNetworkUnhealthy`.
    pub fault_type: String,
}

/// The fault entry in Go field order (the CheckCode hashes the bytes).
#[derive(Serialize)]
struct FaultEntry<'a> {
    fault_type: &'a str,
    npu_name: String,
    large_model_fault_level: &'a str,
    fault_level: &'a str,
    fault_handling: &'a str,
    fault_code: String,
    fault_time_and_level_map: BTreeMap<&'a str, FaultTime<'a>>,
}

#[derive(Serialize)]
struct FaultTime<'a> {
    fault_time: i64,
    fault_level: &'a str,
}

/// The `DeviceInfoCfg` value of a node with `chips` chips and these faults.
pub fn device_info_cfg(chips: u32, faults: &[AscendFault], update_time: i64) -> String {
    let name = |c: u32| format!("Ascend910-{c}");
    let unhealthy: Vec<u32> = faults
        .iter()
        .filter(|f| {
            f.fault_type != "CardNetworkUnhealthy"
                && matches!(
                    f.level.as_str(),
                    "SeparateNPU" | "RestartNPU" | "FreeRestartNPU"
                )
        })
        .map(|f| f.chip)
        .collect();
    let net: Vec<u32> = faults
        .iter()
        .filter(|f| f.fault_type == "CardNetworkUnhealthy")
        .map(|f| f.chip)
        .collect();
    let healthy: Vec<String> = (0..chips)
        .filter(|c| !unhealthy.contains(c))
        .map(name)
        .collect();
    let now_ms = update_time * 1000;
    let entries: Vec<FaultEntry> = faults
        .iter()
        .map(|f| FaultEntry {
            fault_type: &f.fault_type,
            npu_name: name(f.chip),
            large_model_fault_level: &f.level,
            fault_level: &f.level,
            fault_handling: &f.level,
            fault_code: f.codes.join(","),
            fault_time_and_level_map: f
                .codes
                .iter()
                .map(|c| {
                    (
                        c.as_str(),
                        FaultTime {
                            fault_time: now_ms,
                            fault_level: &f.level,
                        },
                    )
                })
                .collect(),
        })
        .collect();
    let join = |v: &[u32]| v.iter().map(|c| name(*c)).collect::<Vec<_>>().join(",");
    let mut list: BTreeMap<String, String> = BTreeMap::new();
    list.insert(RESOURCE.into(), healthy.join(","));
    list.insert(
        format!("{RESOURCE}-Fault"),
        serde_json::to_string(&entries).unwrap_or_else(|_| "[]".into()),
    );
    list.insert(format!("{RESOURCE}-NetworkUnhealthy"), join(&net));
    list.insert(format!("{RESOURCE}-Recovering"), String::new());
    list.insert(format!("{RESOURCE}-Unhealthy"), join(&unhealthy));
    let device_list = serde_json::to_string(&list).unwrap_or_else(|_| "{}".into());
    let device_info = format!("{{\"DeviceList\":{device_list},\"UpdateTime\":{update_time}}}");
    let check = hex(&sha256(device_info.as_bytes()));
    format!("{{\"DeviceInfo\":{device_info},\"CheckCode\":\"{check}\"}}")
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// SHA-256 (FIPS 180-4); the crate has no hashing dependency and the
/// plugin's CheckCode needs one.
fn sha256(data: &[u8]) -> [u8; 32] {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];
    let mut h: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
        0x5be0cd19,
    ];
    let mut msg = data.to_vec();
    let bits = (data.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bits.to_be_bytes());
    for block in msg.chunks_exact(64) {
        let mut w = [0u32; 64];
        for (i, c) in block.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16]
                .wrapping_add(s0)
                .wrapping_add(w[i - 7])
                .wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = h;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh
                .wrapping_add(s1)
                .wrapping_add(ch)
                .wrapping_add(K[i])
                .wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 32];
    for (i, v) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&v.to_be_bytes());
    }
    out
}

/// The ConfigMap object for a node.
pub fn configmap(node: &str, chips: u32, faults: &[AscendFault]) -> ConfigMap {
    let mut data = BTreeMap::new();
    data.insert(
        DATA_KEY.to_owned(),
        device_info_cfg(chips, faults, chrono::Utc::now().timestamp()),
    );
    data.insert("ManuallySeparateNPU".to_owned(), String::new());
    ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(configmap_name(node)),
            namespace: Some(NAMESPACE.into()),
            labels: Some(BTreeMap::from([(
                "mx-consumer-cim".to_owned(),
                "true".to_owned(),
            )])),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    }
}

/// Writes device-info ConfigMaps the way the device plugin on each node does.
#[derive(Clone)]
pub struct AscendPlugin {
    client: Client,
    chips: u32,
    faults: std::sync::Arc<tokio::sync::Mutex<BTreeMap<String, Vec<AscendFault>>>>,
}

impl AscendPlugin {
    /// A plugin for nodes with `chips` NPUs each.
    pub fn new(client: Client, chips: u32) -> Self {
        Self {
            client,
            chips,
            faults: Default::default(),
        }
    }

    /// Creates (or replaces) the healthy ConfigMap of a node.
    pub async fn publish_healthy(&self, node: &str) -> Result<(), ActorError> {
        self.faults.lock().await.remove(node);
        self.write(node, &[]).await
    }

    /// Reports a chip of `node` faulty with these hex codes at `level`
    /// (replacing any earlier fault of that chip).
    pub async fn set_fault(&self, node: &str, fault: AscendFault) -> Result<(), ActorError> {
        let list = {
            let mut all = self.faults.lock().await;
            let list = all.entry(node.to_owned()).or_default();
            list.retain(|f| f.chip != fault.chip);
            list.push(fault);
            list.sort_by_key(|f| f.chip);
            list.clone()
        };
        self.write(node, &list).await
    }

    /// Clears the faults of one chip of a node (`None`: of all chips).
    pub async fn clear_fault(&self, node: &str, chip: Option<u32>) -> Result<(), ActorError> {
        let list = {
            let mut all = self.faults.lock().await;
            let list = all.entry(node.to_owned()).or_default();
            list.retain(|f| chip.is_some_and(|c| f.chip != c));
            list.clone()
        };
        self.write(node, &list).await
    }

    async fn write(&self, node: &str, faults: &[AscendFault]) -> Result<(), ActorError> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), NAMESPACE);
        let cm = configmap(node, self.chips, faults);
        let name = configmap_name(node);
        match api.create(&PostParams::default(), &cm).await {
            Ok(_) => Ok(()),
            Err(e) if is_conflict(&e) => {
                let patch = json!({"data": cm.data});
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_annotation_is_what_rank_tables_read() {
        assert_eq!(pick_chips(8, &[0, 2], 3), Some(vec![1, 3, 4]));
        assert_eq!(pick_chips(2, &[0], 2), None);
        let a = device_annotation("p-0", "10.1.0.7", &[1, 3]);
        let i =
            rebound::ascend::ranktable::table::parse_instance(&a).expect("valid for rank tables");
        assert_eq!(i.server_id, "10.1.0.7");
        assert_eq!(i.devices[1].device_id, "3");
        assert_eq!(i.devices[1].device_ip, "192.171.0.7");
        assert_eq!(
            DEVICE_ANNOTATION,
            rebound::ascend::ranktable::table::DEVICE_ANNOTATION
        );
    }

    #[test]
    fn sha256_known_vector() {
        assert_eq!(
            hex(&sha256(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            hex(&sha256(&[b'a'; 1000])),
            "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3"
        );
    }

    #[test]
    fn faulty_chip_is_listed_with_its_codes_and_checked() {
        let f = AscendFault {
            chip: 4,
            codes: vec!["80E18402".into(), "A8028801".into()],
            level: "SeparateNPU".into(),
            fault_type: "CardUnhealthy".into(),
        };
        let cfg = device_info_cfg(8, &[f], 1_744_182_144);
        let v: serde_json::Value = serde_json::from_str(&cfg).expect("json");
        let list = &v["DeviceInfo"]["DeviceList"];
        assert!(
            !list[RESOURCE]
                .as_str()
                .unwrap_or("")
                .contains("Ascend910-4")
        );
        assert_eq!(list["huawei.com/Ascend910-Unhealthy"], "Ascend910-4");
        let faults: serde_json::Value =
            serde_json::from_str(list["huawei.com/Ascend910-Fault"].as_str().unwrap_or(""))
                .expect("fault json");
        assert_eq!(faults[0]["fault_code"], "80E18402,A8028801");
        assert_eq!(faults[0]["npu_name"], "Ascend910-4");
        let info = serde_json::to_string(&v["DeviceInfo"]).expect("ser");
        assert_eq!(
            v["CheckCode"].as_str(),
            Some(hex(&sha256(info.as_bytes()))).as_deref()
        );
    }

    #[test]
    fn check_code_matches_the_recorded_a3_sample() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/data/faults/ascend/deviceinfo-cfg-a3-faulty.json"
        );
        let Ok(text) = std::fs::read_to_string(path) else {
            eprintln!("shared data absent ({path}): skipped");
            return;
        };
        let v: serde_json::Value = serde_json::from_str(&text).expect("sample json");
        let start = text
            .find("\"DeviceInfo\":")
            .map(|i| i + "\"DeviceInfo\":".len())
            .expect("DeviceInfo");
        let end = text.find(",\"SuperPodID\"").expect("SuperPodID");
        assert_eq!(
            v["CheckCode"].as_str(),
            Some(hex(&sha256(&text.as_bytes()[start..end]))).as_deref()
        );
    }
}
