//! Node conditions (DESIGN.md §4 `NodeCondition`, and the agent's
//! `GpuFault`/`NpuFault` conditions carrying XID and NPU faults).
//!
//! Node faults are trusted: tenants cannot write node status. They are also
//! persistent: a restarted operator finds them again on its first list.

use super::pod::time_utc;
use super::wire::{self, GPU_CONDITION, NPU_CONDITION};
use super::{Fault, FaultSource};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Node, NodeCondition};

/// The code of the fault a `Ready` condition that is not `True` becomes.
pub const NOT_READY: &str = "NotReady";

/// Condition types the controller reads by default (`--condition-types`),
/// besides the agent's and `Ready`: those the shipped samples classify, so a
/// cluster that already runs node-problem-detector (upstream configs, AKS's
/// GPU checks) or NVSentinel needs no setting for them. Each comes from its
/// writer's own config or docs, cited in the sample that classifies it
/// (`samples/classifications/node-condition.yaml`,
/// `aks-node-problem-detector.yaml`, `nvsentinel.yaml`). A type no rule
/// names would be read and ignored, so only classified types are here.
pub const DEFAULT_CONDITION_TYPES: &str = concat!(
    // node-problem-detector (upstream config/*.json), and custom plugins'
    // generic accelerator conditions.
    "KernelDeadlock,ReadonlyFilesystem,XfsShutdown,FrequentKubeletRestart,",
    "FrequentDockerRestart,FrequentContainerdRestart,FrequentUnregisterNetDevice,",
    "CorruptDockerOverlay2,KubeletUnhealthy,ContainerRuntimeUnhealthy,GPUProblem,NPUProblem,",
    // AKS's node-problem-detector plugins.
    "FilesystemCorruptionProblem,KubeletProblem,ContainerRuntimeProblem,VMEventScheduled,",
    "GPUMissing,NVLinkStatusInactive,XIDErrors,GPUXIDErrors,IBLinkFlapping,",
    "GPUClockThrottling,UnhealthyNvidiaDevicePlugin,",
    // NVSentinel's platform connector (fatal health events only).
    "SysLogsXIDError,SysLogsSXIDError,SysLogsGPUFallenOff,GpuXidError,GpuPcieWatch,",
    "GpuNvlinkWatch,GpuPmuWatch,GpuMcuWatch,GpuMemWatch,GpuSmWatch,GpuInforomWatch,",
    "GpuThermalWatch,GpuPowerWatch,GpuDriverWatch,GpuNvswitchNonfatalWatch,",
    "GpuNvswitchFatalWatch,GpuAllWatch,GpuDcgmConnectivityFailure,GpuDcgmUnresponsive"
);

/// Faults a Node carries now.
///
/// - `GpuFault` / `NpuFault` conditions with status `True`: each line of the
///   message (`source=S code=C [device=D] | text`, see [`wire`]) is one fault
///   of source S. A line that does not parse, or names a source rebound does
///   not know, becomes a `NodeCondition` fault whose code is the condition
///   type and whose message is the line, so that it is seen rather than
///   dropped; so does a `True` condition with an empty message.
/// - Any other condition type listed in `watched` with status `True`
///   (node-problem-detector: `KernelDeadlock`, `ReadonlyFilesystem`, ...):
///   `NodeCondition`, code = the type.
/// - `Ready` `False` or `Unknown`: `NodeCondition`, code [`NOT_READY`].
///
/// Times name the occurrence, so they stay the same however often the
/// condition is rewritten (a heartbeat, another line changing): `first_seen`
/// and `last_seen` are the agent's `at=` of the line when it has one (when
/// the agent first saw the fault; `count` its `n=`; `last_seen` its
/// `last=`, the newest repeat's time, where given), else the condition's
/// `lastTransitionTime` (when it went bad, stable while it stays bad; else
/// the heartbeat, else `now`). A heartbeat is never an occurrence.
pub fn node_faults(node: &Node, watched: &[String], now: DateTime<Utc>) -> Vec<Fault> {
    let mut out = Vec::new();
    for c in conditions(node) {
        if !is_fault_condition(c, watched) {
            continue;
        }
        let base = |code: &str| condition_fault(node, c, code, now);
        if c.type_ == GPU_CONDITION || c.type_ == NPU_CONDITION {
            let message = c.message.as_deref().unwrap_or("");
            let before = out.len();
            for (line, parsed) in message
                .lines()
                .filter(|l| !l.trim().is_empty())
                .zip(wire::parse_condition_message(message))
            {
                let wf = match parsed {
                    Ok(wf) => wf,
                    Err(_) => {
                        let mut f = base(&c.type_);
                        f.message = Some(line.trim().to_string());
                        out.push(f);
                        continue;
                    }
                };
                let at = wf.at_time();
                let last = wf.last_time();
                let count = wf.count;
                let mut f = match wf.source.parse::<FaultSource>() {
                    Ok(source) => {
                        let mut f = base(&wf.code);
                        f.source = source;
                        f.message = wf.message;
                        if let Some(t) = at {
                            f.first_seen = t;
                            // The newest repeat's time, when the reporter
                            // gives it (never before the first).
                            f.last_seen = last.map_or(t, |l| l.max(t));
                        }
                        if let Some(n) = count {
                            f.count = wire::clamp_count(n);
                        }
                        f
                    }
                    Err(_) => {
                        let mut f = base(&c.type_);
                        f.message = Some(line.trim().to_string());
                        f
                    }
                };
                f.device = wf.device;
                f.holders = wf.pods.map(|p| wire::clean_pods(p).into());
                out.push(f);
            }
            if out.len() == before {
                out.push(base(&c.type_));
            }
        } else if c.type_ == "Ready" {
            out.push(base(NOT_READY));
        } else {
            out.push(base(&c.type_));
        }
    }
    out
}

/// Whether the node is healthy again as far as rebound's faults go: no
/// condition [`node_faults`] would report. The controller uncordons nodes it
/// cordoned when this turns true.
pub fn node_healthy(node: &Node, watched: &[String]) -> bool {
    !conditions(node).any(|c| is_fault_condition(c, watched))
}

fn conditions(node: &Node) -> impl Iterator<Item = &NodeCondition> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
}

fn is_fault_condition(c: &NodeCondition, watched: &[String]) -> bool {
    if c.type_ == "Ready" {
        return c.status != "True";
    }
    c.status == "True"
        && (c.type_ == GPU_CONDITION || c.type_ == NPU_CONDITION || watched.contains(&c.type_))
}

fn condition_fault(node: &Node, c: &NodeCondition, code: &str, now: DateTime<Utc>) -> Fault {
    let heartbeat = c.last_heartbeat_time.as_ref().and_then(time_utc);
    // Without a transition time the heartbeat is the earliest sighting we
    // have; `now` only when the writer gave no time at all.
    let first = c
        .last_transition_time
        .as_ref()
        .and_then(time_utc)
        .or(heartbeat)
        .unwrap_or(now);
    let mut f = Fault::new(FaultSource::NodeCondition, code, first);
    f.reason = c.reason.clone();
    f.message = c.message.clone();
    f.node = node.metadata.name.clone();
    f.trusted = true;
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> DateTime<Utc> {
        "2026-01-01T12:00:00Z".parse().unwrap()
    }

    fn node(conditions: serde_json::Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "gpu-7"},
            "status": {"conditions": conditions},
        }))
        .unwrap()
    }

    fn ready() -> serde_json::Value {
        json!({"type": "Ready", "status": "True", "reason": "KubeletReady"})
    }

    fn watched() -> Vec<String> {
        vec![
            "KernelDeadlock".to_string(),
            "ReadonlyFilesystem".to_string(),
        ]
    }

    #[test]
    fn gpu_fault_condition_with_two_lines_gives_two_faults_with_devices() {
        let n = node(json!([ready(), {
            "type": "GpuFault", "status": "True", "reason": "XidError",
            "message": "source=NvidiaXid code=79 device=3 | GPU has fallen off the bus\nsource=NvidiaXid code=48 device=5 | DBE",
            "lastTransitionTime": "2026-01-01T11:00:00Z",
            "lastHeartbeatTime": "2026-01-01T11:30:00Z"
        }]));
        let fs = node_faults(&n, &watched(), now());
        assert_eq!(fs.len(), 2);
        assert_eq!(fs[0].source, FaultSource::NvidiaXid);
        assert_eq!(
            (fs[0].code.as_str(), fs[0].device.as_deref()),
            ("79", Some("3"))
        );
        assert_eq!(fs[0].message.as_deref(), Some("GPU has fallen off the bus"));
        assert_eq!(
            (fs[1].code.as_str(), fs[1].device.as_deref()),
            ("48", Some("5"))
        );
        assert_eq!(fs[0].node.as_deref(), Some("gpu-7"));
        assert!(fs.iter().all(|f| f.trusted));
        assert_eq!(
            fs[0].first_seen,
            "2026-01-01T11:00:00Z".parse::<DateTime<Utc>>().unwrap()
        );
        // The occurrence's time is the transition, never the heartbeat: a
        // condition re-posted as a heartbeat is not a repeat.
        assert_eq!(fs[0].last_seen, fs[0].first_seen);
        assert!(!node_healthy(&n, &watched()));
    }

    #[test]
    fn without_at_a_code_written_again_while_the_condition_stays_true_is_the_same_occurrence() {
        // A writer that omits `at=` (the tests' condition writer; not the
        // agent): XID 13, then 31 in its place, then 13 again, the
        // condition True throughout. The third line's time is the
        // transition's, as the first's: by the contract it is the same
        // occurrence (found on the real node: a third XID got no
        // decision). A writer without `at=` must set the condition False
        // between faults, or write `at=`, for a repeat to count.
        let write = |code: &str| {
            node(json!([{"type": "GpuFault", "status": "True",
                "message": format!("source=NvidiaXid code={code} device=0 | Xid {code}"),
                "lastTransitionTime": "2026-01-01T11:00:00Z"}]))
        };
        let first = node_faults(&write("13"), &[], now());
        let between = node_faults(&write("31"), &[], now());
        let third = node_faults(&write("13"), &[], now());
        assert_eq!(between[0].first_seen, first[0].first_seen);
        assert_eq!(third, first, "the same fault, the same identity");
        // With `at=` the third is a fault of its own.
        let stamped = node_faults(
            &node(json!([{"type": "GpuFault", "status": "True",
                "message": "source=NvidiaXid code=13 device=0 at=2026-01-01T11:40:00Z n=1 | Xid 13",
                "lastTransitionTime": "2026-01-01T11:00:00Z"}])),
            &[],
            now(),
        );
        assert_ne!(stamped[0].first_seen, first[0].first_seen);
    }

    #[test]
    fn rewriting_a_condition_keeps_every_occurrence_time() {
        // One XID 13 on GPU 0; later the agent rewrites the condition with
        // an XID 31 on GPU 1 added, and again as a heartbeat only: the
        // first line's times must not move (they name its occurrence).
        let line13 = "source=NvidiaXid code=13 device=0 at=2026-01-01T11:00:00.250Z n=1 | Xid 13";
        let line31 = "source=NvidiaXid code=31 device=1 at=2026-01-01T11:20:00.000Z n=1 | Xid 31";
        let write = |msg: &str, hb: &str| {
            node(
                json!([{"type": "GpuFault", "status": "True", "message": msg,
                "lastTransitionTime": "2026-01-01T11:00:01Z", "lastHeartbeatTime": hb}]),
            )
        };
        let a = node_faults(&write(line13, "2026-01-01T11:00:01Z"), &[], now());
        let b = node_faults(
            &write(&format!("{line13}\n{line31}"), "2026-01-01T11:20:01Z"),
            &[],
            now(),
        );
        let c = node_faults(
            &write(&format!("{line13}\n{line31}"), "2026-01-01T11:50:00Z"),
            &[],
            now(),
        );
        let t13 = "2026-01-01T11:00:00.250Z".parse::<DateTime<Utc>>().unwrap();
        for fs in [&a, &b, &c] {
            assert_eq!((fs[0].first_seen, fs[0].last_seen), (t13, t13));
            assert_eq!(fs[0].count, 1);
        }
        assert_eq!(b[1].first_seen, c[1].first_seen);
        // Without `at=` (an older agent, a person): the transition time,
        // also stable across heartbeats.
        let plain = |hb: &str| {
            node_faults(&write("source=NvidiaXid code=13 device=0", hb), &[], now())[0].last_seen
        };
        assert_eq!(plain("2026-01-01T11:00:01Z"), plain("2026-01-01T12:00:00Z"));
    }

    #[test]
    fn agent_written_message_round_trips() {
        let msg = wire::format_condition_message(&[
            wire::WireFault {
                source: "NvidiaXid".into(),
                code: "94".into(),
                device: Some("2".into()),
                message: Some("contained ECC error".into()),
                ..Default::default()
            },
            wire::WireFault {
                source: "NvidiaXid".into(),
                code: "119".into(),
                ..Default::default()
            },
        ]);
        let n = node(json!([{"type": GPU_CONDITION, "status": "True", "message": msg}]));
        let fs = node_faults(&n, &[], now());
        let got: Vec<_> = fs
            .iter()
            .map(|f| (f.source, f.code.as_str(), f.device.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                (FaultSource::NvidiaXid, "94", Some("2")),
                (FaultSource::NvidiaXid, "119", None)
            ]
        );
        assert_eq!(fs[0].message.as_deref(), Some("contained ECC error"));
    }

    #[test]
    fn a_line_gives_its_newest_repeat_time_and_keeps_its_identity() {
        let at = "2026-01-01T11:00:00.250Z";
        let last = "2026-01-01T11:07:00.500Z";
        let msg = wire::format_condition_message(&[wire::WireFault {
            source: "NvidiaXid".into(),
            code: "13".into(),
            device: Some("0".into()),
            at: Some(at.into()),
            count: Some(3),
            last: Some(last.into()),
            ..Default::default()
        }]);
        assert!(msg.contains(" last=2026-01-01T11:07:00.500Z"), "{msg}");
        let n = node(json!([{"type": GPU_CONDITION, "status": "True", "message": msg}]));
        let f = &node_faults(&n, &[], now())[0];
        let t = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        assert_eq!((f.first_seen, f.last_seen, f.count), (t(at), t(last), 3));
        // A `last` before `at` (a broken reporter) is never earlier than it.
        let msg = msg.replace(last, "2025-01-01T00:00:00Z");
        let n = node(json!([{"type": GPU_CONDITION, "status": "True", "message": msg}]));
        assert_eq!(node_faults(&n, &[], now())[0].last_seen, t(at));
    }

    #[test]
    fn npu_fault_condition_is_ascend() {
        let n = node(json!([{"type": "NpuFault", "status": "True",
            "message": "source=AscendNpu code=80E18402 device=4"}]));
        let fs = node_faults(&n, &[], now());
        assert_eq!(
            (fs[0].source, fs[0].code.as_str()),
            (FaultSource::AscendNpu, "80E18402")
        );
        assert_eq!(fs[0].message, None);
    }

    #[test]
    fn condition_false_gives_nothing_and_node_is_healthy() {
        let n = node(json!([ready(),
            {"type": "GpuFault", "status": "False", "message": "source=NvidiaXid code=79"},
            {"type": "KernelDeadlock", "status": "False", "reason": "KernelHasNoDeadlock"}]));
        assert!(node_faults(&n, &watched(), now()).is_empty());
        assert!(node_healthy(&n, &watched()));
    }

    #[test]
    fn ready_unknown_is_not_ready() {
        let n = node(
            json!([{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
            "message": "Kubelet stopped posting node status.",
            "lastHeartbeatTime": "2026-01-01T10:00:00Z",
            "lastTransitionTime": "2026-01-01T10:00:40Z"}]),
        );
        let fs = node_faults(&n, &watched(), now());
        assert_eq!(fs.len(), 1);
        let f = &fs[0];
        assert_eq!(
            (f.source, f.code.as_str()),
            (FaultSource::NodeCondition, NOT_READY)
        );
        assert_eq!(f.reason.as_deref(), Some("NodeStatusUnknown"));
        assert!(
            f.last_seen >= f.first_seen,
            "a stale heartbeat does not precede the transition"
        );
        assert!(!node_healthy(&n, &watched()));
    }

    #[test]
    fn unparseable_agent_line_is_a_condition_fault() {
        let n = node(
            json!([{"type": "GpuFault", "status": "True", "reason": "Manual",
            "message": "source=NvidiaXid code=79 device=0\nGPU 2 looks odd\nsource=DcgmDiag code=pcie device=1"}]),
        );
        let fs = node_faults(&n, &[], now());
        assert_eq!(fs.len(), 3);
        assert_eq!(
            (fs[0].source, fs[0].code.as_str()),
            (FaultSource::NvidiaXid, "79")
        );
        assert_eq!(
            (fs[1].source, fs[1].code.as_str()),
            (FaultSource::NodeCondition, "GpuFault")
        );
        assert_eq!(fs[1].message.as_deref(), Some("GPU 2 looks odd"));
        assert_eq!(fs[1].reason.as_deref(), Some("Manual"));
        // An unknown source is kept visible the same way, with its device.
        assert_eq!(
            (fs[2].source, fs[2].code.as_str()),
            (FaultSource::NodeCondition, "GpuFault")
        );
        assert_eq!(fs[2].device.as_deref(), Some("1"));
    }

    #[test]
    fn true_agent_condition_without_message_still_counts() {
        let n = node(json!([{"type": "NpuFault", "status": "True"}]));
        let fs = node_faults(&n, &[], now());
        assert_eq!(fs.len(), 1);
        assert_eq!(fs[0].code, "NpuFault");
        assert_eq!(fs[0].last_seen, now());
        // Without a transition time the (stable) heartbeat stands in for it.
        let n = node(json!([{"type": "KernelDeadlock", "status": "True",
            "lastHeartbeatTime": "2026-01-01T11:00:00Z"}]));
        let f = &node_faults(&n, &watched(), now())[0];
        let hb = "2026-01-01T11:00:00Z".parse::<DateTime<Utc>>().unwrap();
        assert_eq!((f.first_seen, f.last_seen), (hb, hb));
    }

    #[test]
    fn watched_npd_condition() {
        let n = node(json!([ready(),
            {"type": "KernelDeadlock", "status": "True", "reason": "DockerHung", "message": "task docker:7 blocked"},
            {"type": "FrequentKubeletRestart", "status": "True"}]));
        let fs = node_faults(&n, &watched(), now());
        assert_eq!(fs.len(), 1, "unwatched conditions are ignored");
        assert_eq!(
            (fs[0].code.as_str(), fs[0].reason.as_deref()),
            ("KernelDeadlock", Some("DockerHung"))
        );
        assert!(node_healthy(&n, &[]));
        assert!(!node_healthy(&n, &watched()));
    }

    #[test]
    fn node_without_status_is_healthy() {
        let n: Node = serde_json::from_value(json!({"metadata": {"name": "n"}})).unwrap();
        assert!(node_faults(&n, &watched(), now()).is_empty());
        assert!(node_healthy(&n, &watched()));
    }
}
