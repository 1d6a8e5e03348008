//! What the agent's GPU health sources report (NVML readings, recorded
//! `dcgmi diag` output, a dcgm-exporter exposition) goes through the wire
//! the controller reads (a `GpuFault` condition line, parsed back by the
//! node parser) and gets the level the shipped samples give it.

use chrono::Utc;
use k8s_openapi::api::core::v1::Node;
use rebound::agent::dcgm;
use rebound::agent::dcgm_exporter::{ExporterState, parse_exposition};
use rebound::agent::fault::AgentFault;
use rebound::agent::nvml::{NvmlSample, faults_from_sample};
use rebound::explain::{engine_from, explain, load_paths};
use rebound::fault::Level;
use rebound::fault::node::{DEFAULT_CONDITION_TYPES, node_faults};
use rebound::fault::wire::format_condition_message;
use serde_json::json;
use std::path::PathBuf;

/// `(code, device, level, rule)` of each fault, as the controller decides it
/// from the condition the agent writes.
fn levels(faults: &[AgentFault]) -> Vec<(String, Option<String>, Level, String)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let loaded = load_paths(&[root.join("samples")]).expect("samples load");
    let (mut engine, _) = engine_from(&loaded, "rebound-system", 100).expect("compile");
    let wire: Vec<_> = faults.iter().map(|f| f.to_wire("gpu-7")).collect();
    let now = Utc::now();
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "gpu-7"},
        "status": {"conditions": [{"type": "GpuFault", "status": "True", "reason": "MultipleFaults",
            "message": format_condition_message(&wire), "lastTransitionTime": now.to_rfc3339()}]}
    }))
    .expect("a Node");
    let watched: Vec<String> = DEFAULT_CONDITION_TYPES
        .split(',')
        .map(String::from)
        .collect();
    node_faults(&node, &watched, now)
        .into_iter()
        .map(|f| {
            let (code, device) = (f.code.clone(), f.device.clone());
            let d = explain(&mut engine, f, None, 1, now);
            (code, device, d.level, d.rule)
        })
        .collect()
}

fn short(v: Vec<(String, Option<String>, Level, String)>) -> Vec<(String, Level, String)> {
    v.into_iter().map(|(c, _, l, r)| (c, l, r)).collect()
}

#[test]
fn nvml_health_events_get_the_samples_levels() {
    let f = faults_from_sample(&NvmlSample {
        index: 2,
        lost: true,
        ecc_uncorrected: Some(3),
        pages_pending: Some(true),
        remap_pending: Some(true),
        remap_failed: Some(false),
        xid: Some(48),
    });
    let got = levels(&f);
    assert!(got.iter().all(|g| g.1.as_deref() == Some("2")), "{got:?}");
    assert_eq!(
        short(got),
        [
            (
                "79".into(),
                Level::Separate,
                "nvidia-xid/node-reboot-required".into()
            ),
            (
                "48".into(),
                Level::ResetDevice,
                "nvidia-xid/double-bit-ecc".into()
            ),
            (
                "nvml-ecc-uncorrected".into(),
                Level::ResetDevice,
                "gpu-health/uncorrected-ecc".into()
            ),
            (
                "nvml-row-remap-pending".into(),
                Level::PreSeparate,
                "gpu-health/pages-pending-retirement".into()
            ),
            (
                "nvml-retired-pages-pending".into(),
                Level::PreSeparate,
                "gpu-health/pages-pending-retirement".into()
            ),
        ]
    );
}

#[test]
fn dcgm_exporter_fields_get_the_samples_levels() {
    let text = "# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n\
        DCGM_FI_DEV_XID_ERRORS{gpu=\"0\",UUID=\"GPU-a\",device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\"} 0\n\
        DCGM_FI_DEV_ROW_REMAP_FAILURE{gpu=\"1\",UUID=\"GPU-b\",device=\"nvidia1\"} 1\n\
        DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu=\"2\",UUID=\"GPU-c\",device=\"nvidia2\"} 5\n\
        DCGM_FI_DEV_RETIRED_PENDING{gpu=\"3\",UUID=\"GPU-d\",device=\"nvidia3\"} 1\n";
    let mut st = ExporterState::default();
    let (samples, errors) = parse_exposition(text);
    assert_eq!(errors, 0);
    let mut f = st.faults(&samples);
    // XID 79 appears on GPU 0 at the next scrape.
    let (next, _) = parse_exposition(&text.replace(
        "nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\"} 0",
        "nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\"} 79",
    ));
    f.extend(
        st.faults(&next)
            .into_iter()
            .filter(|f| f.source == "NvidiaXid"),
    );
    let got: Vec<(String, Option<String>, Level)> = levels(&f)
        .into_iter()
        .map(|(c, d, l, _)| (c, d, l))
        .collect();
    assert_eq!(
        got,
        [
            (
                "nvml-row-remap-failure".into(),
                Some("1".into()),
                Level::Separate
            ),
            (
                "nvml-ecc-uncorrected".into(),
                Some("2".into()),
                Level::ResetDevice
            ),
            (
                "nvml-retired-pages-pending".into(),
                Some("3".into()),
                Level::PreSeparate
            ),
            ("79".into(), Some("0".into()), Level::Separate),
        ]
    );
}

#[test]
fn dcgm_diag_and_health_failures_get_the_samples_levels() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/data/faults/dcgm/dcgmi-diag-json-legacy-level1-fail.json"
    );
    let Ok(text) = std::fs::read_to_string(path) else {
        eprintln!("NOTICE: {path} is not readable; skipping the recorded dcgmi diag check");
        return;
    };
    let diag = dcgm::parse_diag(&text).expect("recorded diag parses");
    assert!(!diag.is_empty(), "the recorded run has failures");
    let mut f: Vec<AgentFault> = diag.iter().map(|d| d.to_fault()).collect();
    f.push(
        dcgm::HealthFailure {
            gpu: Some("1".into()),
            system: "PCIe".into(),
            message: "PCIe replay rate".into(),
        }
        .to_fault(),
    );
    for (code, _, level, rule) in levels(&f) {
        let want = if code == "dcgm-persistence_mode"
            || code == "dcgm-blacklist"
            || code == "dcgm-inforom"
        {
            Level::PreSeparate
        } else {
            Level::ResetDevice
        };
        assert_eq!(level, want, "{code}: {rule}");
        assert!(rule.starts_with("gpu-health/"), "{code}: {rule}");
    }
}
