//! Fault parsers on the shared recorded data (`../shared/data/faults`), read
//! in place. When the data is absent (a checkout without the shared folder)
//! the tests say so and pass.

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::ConfigMap;
use rebound::fault::ascend::{self, DEVICEINFO_KEY};
use rebound::fault::{FaultSource, Level};

const SAMPLE_YAML: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/data/faults/ascend/deviceinfo-configmap-sample.yaml"
);
const A3_FAULTY_JSON: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/data/faults/ascend/deviceinfo-cfg-a3-faulty.json"
);

fn read(path: &str) -> Option<String> {
    match std::fs::read_to_string(path) {
        Ok(s) => Some(s),
        Err(e) => {
            eprintln!("notice: {path} not readable ({e}); skipping");
            None
        }
    }
}

fn now() -> DateTime<Utc> {
    "2026-01-01T12:00:00Z".parse().unwrap()
}

/// The docs show `data` only; give it the name and namespace the device
/// plugin uses (the sample's header comment).
fn named(mut cm: ConfigMap, node: &str) -> ConfigMap {
    cm.metadata.name = Some(format!("{}{node}", ascend::DEVICEINFO_PREFIX));
    cm.metadata.namespace = Some(ascend::DEVICEINFO_NAMESPACE.to_string());
    cm
}

#[test]
fn documented_configmap_sample_yields_the_manually_separated_chip() {
    let Some(yaml) = read(SAMPLE_YAML) else {
        return;
    };
    let docs: Vec<ConfigMap> = serde_saphyr::from_multiple(&yaml).expect("sample is a ConfigMap");
    assert_eq!(docs.len(), 1);
    let cm = named(docs[0].clone(), "worker-1");
    assert_eq!(ascend::deviceinfo_node(&cm).as_deref(), Some("worker-1"));

    let info = ascend::parse_deviceinfo(&cm).expect("parses");
    assert_eq!(info.node, "worker-1");
    assert_eq!(info.update_time, DateTime::from_timestamp(1718702470, 0));
    assert_eq!(info.resources.len(), 1);
    let r = &info.resources[0];
    assert_eq!(r.resource, "huawei.com/Ascend910");
    assert_eq!(r.available.len(), 7);
    assert!(!r.available.contains(&"Ascend910-0".to_string()));
    assert!(r.faults.is_empty() && r.unhealthy.is_empty() && r.network_unhealthy.is_empty());
    assert_eq!(info.manually_separated, ["Ascend910-0"]);
    assert!(
        !info.healthy(),
        "a manually separated chip keeps the node out"
    );

    let faults = ascend::deviceinfo_faults(&cm, now()).expect("parses");
    assert_eq!(faults.len(), 1, "{faults:?}");
    let f = &faults[0];
    assert_eq!(f.source, FaultSource::AscendNpu);
    assert_eq!(f.code, ascend::MANUALLY_SEPARATE_CODE);
    assert_eq!(f.device.as_deref(), Some("0"));
    assert_eq!(f.node.as_deref(), Some("worker-1"));
    assert_eq!(
        f.last_seen,
        DateTime::from_timestamp(1718702470, 0).unwrap()
    );
    assert!(f.trusted);
}

#[test]
fn atlas_a3_faulty_value_yields_every_chip_and_code() {
    let Some(json) = read(A3_FAULTY_JSON) else {
        return;
    };
    let mut cm = named(ConfigMap::default(), "a3-node-9");
    cm.data = Some([(DEVICEINFO_KEY.to_string(), json.trim().to_string())].into());

    let info = ascend::parse_deviceinfo(&cm).expect("parses");
    assert_eq!((info.super_pod_id, info.server_index), (Some(-2), Some(-2)));
    let r = &info.resources[0];
    assert_eq!(r.unhealthy, ["Ascend910-4"]);
    assert_eq!(r.network_unhealthy, ["Ascend910-0"]);
    assert!(r.recovering.is_empty());
    assert_eq!(r.faults.len(), 2);
    assert_eq!(r.faults[1].level.as_deref(), Some("SeparateNPU"));
    assert_eq!(
        r.faults[1]
            .codes
            .iter()
            .map(|c| c.level())
            .collect::<Vec<_>>(),
        [
            Some(Level::Separate),
            Some(Level::Ignore),
            Some(Level::Separate),
            Some(Level::Ignore)
        ]
    );

    assert!(!info.healthy());

    let faults = ascend::deviceinfo_faults(&cm, now()).expect("parses");
    let got: Vec<_> = faults
        .iter()
        .map(|f| {
            (
                f.device.as_deref().unwrap_or("-"),
                f.code.as_str(),
                f.reason.as_deref().unwrap_or("-"),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("0", "81078603", "PreSeparateNPU"),
            ("4", "A8028801", "SeparateNPU"),
            ("4", "A4028801", "NotHandleFault"),
            ("4", "80E18402", "SeparateNPU"),
            ("4", "80E18401", "NotHandleFault"),
        ],
        "the Unhealthy/NetworkUnhealthy listings are explained by the entries"
    );
    assert_eq!(
        faults[0].last_seen,
        DateTime::from_timestamp_millis(1744168468259).unwrap()
    );
    assert_eq!(
        faults[1].last_seen,
        DateTime::from_timestamp_millis(1744167455784).unwrap()
    );
    assert!(
        faults
            .iter()
            .all(|f| f.trusted && f.node.as_deref() == Some("a3-node-9"))
    );
    assert!(
        faults[3]
            .message
            .as_deref()
            .is_some_and(|m| m.contains("Ascend910-4"))
    );
}

#[test]
fn a3_value_in_a_tenant_namespace_is_untrusted() {
    let Some(json) = read(A3_FAULTY_JSON) else {
        return;
    };
    let mut cm = named(ConfigMap::default(), "a3-node-9");
    cm.metadata.namespace = Some("team-a".into());
    cm.data = Some([(DEVICEINFO_KEY.to_string(), json)].into());
    let faults = ascend::deviceinfo_faults(&cm, now()).expect("parses");
    assert_eq!(faults.len(), 5);
    assert!(faults.iter().all(|f| !f.trusted));
}
