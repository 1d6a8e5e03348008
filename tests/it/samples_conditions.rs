//! Node conditions written by other health stacks (node-problem-detector
//! upstream and on AKS, NVIDIA NVSentinel), as those writers format them,
//! read by the controller's node parser with its default
//! `--condition-types` and classified by the shipped samples: each kind
//! lands on the level its sample promises, through the rule meant for it.

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Node;
use rebound::explain::{engine_from, explain, load_paths};
use rebound::fault::Level;
use rebound::fault::node::{DEFAULT_CONDITION_TYPES, node_faults};
use rebound::policy::Engine;
use serde_json::json;
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn engine() -> Engine {
    let loaded = load_paths(&[root().join("samples")]).expect("samples/ loads");
    let (engine, warnings) = engine_from(&loaded, "rebound-system", 100).expect("compiles");
    assert!(warnings.is_empty(), "{warnings:?}");
    engine
}

fn watched() -> Vec<String> {
    DEFAULT_CONDITION_TYPES
        .split(',')
        .map(String::from)
        .collect()
}

/// One True condition on a node, through the node parser and the samples:
/// `(level, rule)` of each fault it yields.
fn decide(
    e: &mut Engine,
    type_: &str,
    reason: &str,
    message: &str,
    now: DateTime<Utc>,
) -> Vec<(Level, String)> {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "gpu-3"},
        "status": {"conditions": [
            {"type": "Ready", "status": "True"},
            {"type": type_, "status": "True", "reason": reason, "message": message,
             "lastTransitionTime": (now - chrono::Duration::seconds(30)).to_rfc3339(),
             "lastHeartbeatTime": now.to_rfc3339()}
        ]}
    }))
    .expect("a Node");
    node_faults(&node, &watched(), now)
        .into_iter()
        .map(|f| {
            let d = explain(e, f, None, 1, now);
            (d.level, d.rule)
        })
        .collect()
}

fn one(e: &mut Engine, type_: &str, reason: &str, message: &str) -> (Level, String) {
    let got = decide(e, type_, reason, message, Utc::now());
    assert_eq!(got.len(), 1, "{type_}: {got:?}");
    got.into_iter().next().expect("one fault")
}

#[test]
fn nvsentinel_conditions_map_to_their_levels() {
    let mut e = engine();
    // NVSentinel's message: "ErrorCode:<c> <EntityType>:<value> <text> Recommended Action=<A>;"
    // (process_node_events.go constructHealthEventMessage); reason <Check>IsNotHealthy.
    let reboot = "ErrorCode:79 PCI:0000:3b:00 GPU:0 NVRM: Xid 79 Recommended Action=RESTART_BM;";
    let reset = "ErrorCode:48 GPU:1 Double bit ECC Recommended Action=COMPONENT_RESET;";
    let cases: &[(&str, &str, Level, &str)] = &[
        (
            "SysLogsXIDError",
            reboot,
            Level::Separate,
            "nvsentinel/nvsentinel-reboot-recommended",
        ),
        (
            "SysLogsXIDError",
            reset,
            Level::ResetDevice,
            "nvsentinel/nvsentinel-fatal",
        ),
        (
            "SysLogsSXIDError",
            reset,
            Level::ResetDevice,
            "nvsentinel/nvsentinel-fatal",
        ),
        (
            "GpuXidError",
            reset,
            Level::ResetDevice,
            "nvsentinel/nvsentinel-fatal",
        ),
        (
            "GpuMemWatch",
            "ErrorCode:DCGM_FR_UNCONTAINED_ERROR GPU:0 Recommended Action=RESTART_VM;",
            Level::Separate,
            "nvsentinel/nvsentinel-reboot-recommended",
        ),
        (
            "GpuAllWatch",
            "ErrorCode:DCGM_FR_UNCONTAINED_ERROR GPU:0 Recommended Action=RESTART_VM;",
            Level::Separate,
            "nvsentinel/nvsentinel-reboot-recommended",
        ),
        (
            "GpuPcieWatch",
            "ErrorCode:DCGM_FR_PCI_REPLAY_RATE GPU:1 PCIe replays Recommended Action=REPORT_ISSUE;",
            Level::ResetDevice,
            "nvsentinel/nvsentinel-fatal",
        ),
        (
            "GpuNvlinkWatch",
            reset,
            Level::ResetDevice,
            "nvsentinel/nvsentinel-fatal",
        ),
        (
            "GpuThermalWatch",
            reset,
            Level::ResetDevice,
            "nvsentinel/nvsentinel-fatal",
        ),
        (
            "GpuNvswitchFatalWatch",
            reset,
            Level::ResetDevice,
            "nvsentinel/nvsentinel-fatal",
        ),
        (
            "SysLogsGPUFallenOff",
            "ErrorCode:79 GPU:0 Recommended Action=RESTART_VM;",
            Level::Separate,
            "nvsentinel/nvsentinel-gpu-fell-off",
        ),
        (
            "GpuDcgmConnectivityFailure",
            "DCGM connectivity failure Recommended Action=NONE;",
            Level::Ignore,
            "nvsentinel/nvsentinel-monitor-down",
        ),
    ];
    for (type_, message, level, rule) in cases {
        let reason = format!("{type_}IsNotHealthy");
        let got = one(&mut e, type_, &reason, message);
        assert_eq!(got, (*level, rule.to_string()), "{type_}: {message}");
    }
    // Cleared: NVSentinel sets status False, reason <Check>IsHealthy.
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "gpu-3"},
        "status": {"conditions": [{"type": "GpuMemWatch", "status": "False",
            "reason": "GpuMemWatchIsHealthy", "message": "No Health Failures"}]}
    }))
    .expect("a Node");
    assert!(node_faults(&node, &watched(), Utc::now()).is_empty());
}

#[test]
fn aks_node_problem_detector_conditions_map_to_their_levels() {
    let mut e = engine();
    let cases: &[(&str, &str, Level, &str)] = &[
        (
            "GPUMissing",
            "GPUMissing",
            Level::Separate,
            "aks-gpu-missing",
        ),
        (
            "XIDErrors",
            "XIDErrors",
            Level::PreSeparate,
            "aks-gpu-degraded",
        ),
        (
            "GPUXIDErrors",
            "GPUXIDErrors",
            Level::PreSeparate,
            "aks-gpu-degraded",
        ),
        (
            "NVLinkStatusInactive",
            "NVLinkStatusInactive",
            Level::PreSeparate,
            "aks-gpu-degraded",
        ),
        (
            "IBLinkFlapping",
            "IBLinkFlapping",
            Level::PreSeparate,
            "aks-gpu-degraded",
        ),
        (
            "GPUClockThrottling",
            "GPUClockThrottling",
            Level::PreSeparate,
            "aks-gpu-degraded",
        ),
        (
            "UnhealthyNvidiaDevicePlugin",
            "UnhealthyNvidiaDevicePlugin",
            Level::PreSeparate,
            "aks-gpu-degraded",
        ),
        (
            "FilesystemCorruptionProblem",
            "FilesystemCorruptionDetected",
            Level::Separate,
            "aks-filesystem-corrupt",
        ),
        (
            "KubeletProblem",
            "KubeletIsDown",
            Level::PreSeparate,
            "aks-node-runtime-down",
        ),
        (
            "ContainerRuntimeProblem",
            "ContainerRuntimeIsDown",
            Level::PreSeparate,
            "aks-node-runtime-down",
        ),
        (
            "VMEventScheduled",
            "VMEventScheduled",
            Level::PreSeparate,
            "aks-node-runtime-down",
        ),
    ];
    for (type_, reason, level, rule) in cases {
        let got = one(&mut e, type_, reason, "from AKS NPD");
        assert_eq!(
            got,
            (*level, format!("aks-node-problem-detector/{rule}")),
            "{type_}"
        );
    }
}

#[test]
fn upstream_node_problem_detector_conditions_map_to_their_levels() {
    let mut e = engine();
    // (type, reason of the permanent rule in kubernetes/node-problem-detector config/*.json)
    let cases: &[(&str, &str, Level)] = &[
        ("KernelDeadlock", "DockerHung", Level::Separate),
        (
            "ReadonlyFilesystem",
            "FilesystemIsReadOnly",
            Level::Separate,
        ),
        ("XfsShutdown", "XfsHasShutdown", Level::Separate),
        (
            "FrequentUnregisterNetDevice",
            "UnregisterNetDevice",
            Level::PreSeparate,
        ),
        (
            "FrequentContainerdRestart",
            "FrequentContainerdRestart",
            Level::PreSeparate,
        ),
        (
            "CorruptDockerOverlay2",
            "CorruptDockerOverlay2",
            Level::PreSeparate,
        ),
        ("KubeletUnhealthy", "KubeletUnhealthy", Level::PreSeparate),
        (
            "ContainerRuntimeUnhealthy",
            "ContainerdUnhealthy",
            Level::PreSeparate,
        ),
    ];
    for (type_, reason, level) in cases {
        let (got, rule) = one(&mut e, type_, reason, "");
        assert_eq!(got, *level, "{type_}: {rule}");
        assert!(rule.starts_with("node-condition/"), "{type_}: {rule}");
    }
}

/// Every default type is named by a rule (none falls to a defaultLevel: a
/// type read but never classified would be a silent no-op), and the chart's
/// default list is the controller's.
#[test]
fn default_condition_types_are_classified_and_the_chart_agrees() {
    let mut e = engine();
    for t in watched() {
        let got = one(&mut e, &t, "", "Recommended Action=NONE;");
        assert!(
            !got.1.ends_with("/defaultLevel"),
            "{t} is read but no rule names it: {got:?}"
        );
    }
    let values: serde_json::Value = serde_saphyr::from_str(
        &std::fs::read_to_string(root().join("chart/rebound/values.yaml")).expect("values.yaml"),
    )
    .expect("values.yaml parses");
    let chart: Vec<String> = values["controller"]["conditionTypes"]
        .as_array()
        .expect("controller.conditionTypes")
        .iter()
        .filter_map(|v| v.as_str().map(String::from))
        .collect();
    assert_eq!(
        chart,
        watched(),
        "chart/rebound/values.yaml controller.conditionTypes"
    );
}
