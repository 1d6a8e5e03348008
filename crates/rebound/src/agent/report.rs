//! Output: the Node conditions (`GpuFault`, `NpuFault`) and the Events the
//! controller reads.
//!
//! Conditions are written to the `nodes/status` subresource with a
//! strategic merge patch: Node `status.conditions` merges by `type`, so the
//! kubelet's and other agents' conditions are kept (a JSON merge patch would
//! replace the whole list). Events are `events.k8s.io/v1`, regarding the
//! Node, with the structured fault in the `rebound.dev/fault` annotation
//! (kube's `Recorder` cannot set annotations, so the fold is done in
//! [`super::state`] and the writes here).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{Node, ObjectReference};
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use super::fault::{Accelerator, AgentFault};
use super::state::DesiredCondition;
use crate::fault::wire::{FAULT_ANNOTATION, WireFault, format_annotation, parse_condition_message};

/// Field manager and `reportingController` of the agent's writes.
pub const FIELD_MANAGER: &str = "rebound-agent";
/// `reportingController` of the agent's Events.
pub const REPORTING_CONTROLLER: &str = "rebound.dev/agent";
/// Event `action`.
pub const EVENT_ACTION: &str = "Detected";
/// The API server rejects Event notes longer than this.
const MAX_NOTE_BYTES: usize = 1024;

/// A write to the API server failed.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// Reading the Node.
    #[error("reading node {node}: {source}")]
    GetNode {
        /// The node.
        node: String,
        /// Why.
        source: kube::Error,
    },
    /// Patching `nodes/status`.
    #[error("patching condition {type_} of node {node}: {source}")]
    Condition {
        /// The node.
        node: String,
        /// Condition type.
        type_: &'static str,
        /// Why.
        source: kube::Error,
    },
    /// Creating or updating an Event.
    #[error("writing event {name} in {namespace}: {source}")]
    Event {
        /// Event name.
        name: String,
        /// Namespace.
        namespace: String,
        /// Why.
        source: kube::Error,
    },
}

/// Kubernetes time from a system time (clamped to the representable range).
pub fn timestamp(t: SystemTime) -> Timestamp {
    Timestamp::try_from(t).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// The strategic merge patch that sets one condition; `transition` says
/// whether the status changed (then `lastTransitionTime` moves).
pub fn condition_patch(
    c: &DesiredCondition,
    now: SystemTime,
    transition: bool,
) -> serde_json::Value {
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(timestamp(now));
    let mut cond = json!({
        "type": c.type_,
        "status": if c.status { "True" } else { "False" },
        "reason": c.reason,
        "message": c.message,
        "lastHeartbeatTime": now,
    });
    if transition {
        cond["lastTransitionTime"] = json!(now);
    }
    json!({ "status": { "conditions": [cond] } })
}

/// The Event for a new fault (`count` > 1 when it repeated before the
/// first write).
#[allow(clippy::too_many_arguments)]
pub fn build_event(
    fault: &AgentFault,
    node: &str,
    node_uid: Option<&str>,
    namespace: &str,
    name: String,
    count: u64,
    first_seen: SystemTime,
    now: SystemTime,
) -> Event {
    let mut wire = fault.to_wire(node);
    // The same occurrence identity as the condition line carries, so that
    // the controller counts a fault once whichever channel it reads.
    wire.at = Some(crate::fault::wire::format_at(first_seen.into()));
    wire.count = Some(count);
    let now = MicroTime(timestamp(now));
    let note = match &fault.device {
        Some(d) => format!(
            "{} code {} on device {d}: {}",
            fault.source, fault.code, fault.message
        ),
        None => format!("{} code {}: {}", fault.source, fault.code, fault.message),
    };
    Event {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace.to_string()),
            annotations: Some([(FAULT_ANNOTATION.to_string(), format_annotation(&wire))].into()),
            ..ObjectMeta::default()
        },
        action: Some(EVENT_ACTION.to_string()),
        reason: Some(fault.reason.to_string()),
        note: Some(truncate_bytes(&note, MAX_NOTE_BYTES)),
        type_: Some("Warning".to_string()),
        event_time: Some(now.clone()),
        regarding: Some(ObjectReference {
            api_version: Some("v1".to_string()),
            kind: Some("Node".to_string()),
            name: Some(node.to_string()),
            uid: node_uid.map(str::to_string),
            ..ObjectReference::default()
        }),
        reporting_controller: Some(REPORTING_CONTROLLER.to_string()),
        reporting_instance: Some(truncate_bytes(&format!("{FIELD_MANAGER}-{node}"), 128)),
        series: (count > 1).then(|| EventSeries {
            count: i32::try_from(count).unwrap_or(i32::MAX),
            last_observed_time: now,
        }),
        ..Event::default()
    }
}

fn truncate_bytes(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// A condition of ours found on the Node at start-up.
#[derive(Clone, Debug, PartialEq)]
pub struct ExistingCondition {
    /// Which family.
    pub family: Accelerator,
    /// `True` = faulty.
    pub status: bool,
    /// Faults its message lists (lines that do not parse are skipped).
    pub faults: Vec<WireFault>,
    /// `lastHeartbeatTime` (our last write), to tell a condition written
    /// before the node's last boot.
    pub last_heartbeat: Option<Timestamp>,
    /// `lastTransitionTime`: the occurrence time the controller reads for a
    /// line written without `at=` (an older agent), kept on restore so the
    /// occurrence keeps its identity.
    pub last_transition: Option<Timestamp>,
}

/// Our conditions as they are on a Node object.
pub fn existing_conditions(node: &Node) -> Vec<ExistingCondition> {
    let Some(conds) = node.status.as_ref().and_then(|s| s.conditions.as_ref()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for family in Accelerator::ALL {
        if let Some(c) = conds.iter().find(|c| c.type_ == family.condition_type()) {
            out.push(ExistingCondition {
                family,
                status: c.status == "True",
                faults: parse_condition_message(c.message.as_deref().unwrap_or(""))
                    .into_iter()
                    .filter_map(Result::ok)
                    .collect(),
                last_heartbeat: c.last_heartbeat_time.as_ref().map(|t| t.0),
                last_transition: c.last_transition_time.as_ref().map(|t| t.0),
            });
        }
    }
    out
}

/// Writes conditions and Events for one node.
pub struct KubeReporter {
    client: Client,
    node: String,
    node_uid: Option<String>,
    event_namespace: String,
    /// Last status written or found per condition type.
    known: HashMap<&'static str, DesiredCondition>,
    seq: AtomicU64,
}

impl KubeReporter {
    /// A reporter for `node`, writing Events into `event_namespace` (the
    /// operator's root namespace, which the controller trusts).
    pub fn new(client: Client, node: &str, event_namespace: &str) -> Self {
        KubeReporter {
            client,
            node: node.to_string(),
            node_uid: None,
            event_namespace: event_namespace.to_string(),
            known: HashMap::new(),
            seq: AtomicU64::new(0),
        }
    }

    /// Read the Node: its uid (for Event references) and our conditions as
    /// they are (to restore faults after a restart, and to know whether the
    /// next write is a transition).
    pub async fn load_node(&mut self) -> Result<Vec<ExistingCondition>, ReportError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let node = api
            .get(&self.node)
            .await
            .map_err(|source| ReportError::GetNode {
                node: self.node.clone(),
                source,
            })?;
        self.node_uid = node.metadata.uid.clone();
        let existing = existing_conditions(&node);
        if let Some(conds) = node.status.as_ref().and_then(|s| s.conditions.as_ref()) {
            for family in Accelerator::ALL {
                if let Some(c) = conds.iter().find(|c| c.type_ == family.condition_type()) {
                    self.known.insert(
                        family.condition_type(),
                        DesiredCondition {
                            type_: family.condition_type(),
                            status: c.status == "True",
                            reason: c.reason.clone().unwrap_or_default(),
                            message: c.message.clone().unwrap_or_default(),
                        },
                    );
                }
            }
        }
        Ok(existing)
    }

    /// Write a condition if it differs from what is known to be there;
    /// returns whether a request was made.
    pub async fn write_condition(
        &mut self,
        c: &DesiredCondition,
        now: SystemTime,
    ) -> Result<bool, ReportError> {
        let prev = self.known.get(c.type_);
        if prev == Some(c) {
            return Ok(false);
        }
        // A healthy condition that was never written needs no write: the
        // absence of the condition already means healthy.
        if prev.is_none() && !c.status {
            return Ok(false);
        }
        let transition = prev.is_none_or(|p| p.status != c.status);
        let api: Api<Node> = Api::all(self.client.clone());
        let patch = condition_patch(c, now, transition);
        api.patch_status(
            &self.node,
            &PatchParams::default(),
            &Patch::Strategic(&patch),
        )
        .await
        .map_err(|source| ReportError::Condition {
            node: self.node.clone(),
            type_: c.type_,
            source,
        })?;
        self.known.insert(c.type_, c.clone());
        Ok(true)
    }

    /// Create the Event of a new fault; returns its name.
    pub async fn create_event(
        &self,
        fault: &AgentFault,
        count: u64,
        first_seen: SystemTime,
        now: SystemTime,
    ) -> Result<String, ReportError> {
        let nanos = timestamp(now).as_nanosecond();
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        // Node names are DNS subdomains; the suffix is hex: a valid name.
        let name = truncate_bytes(&format!("{}.{:x}{:x}", self.node, nanos, seq), 253);
        let ev = build_event(
            fault,
            &self.node,
            self.node_uid.as_deref(),
            &self.event_namespace,
            name.clone(),
            count,
            first_seen,
            now,
        );
        let api: Api<Event> = Api::namespaced(self.client.clone(), &self.event_namespace);
        api.create(&PostParams::default(), &ev)
            .await
            .map_err(|source| ReportError::Event {
                name: name.clone(),
                namespace: self.event_namespace.clone(),
                source,
            })?;
        Ok(name)
    }

    /// Update a folded Event's series count.
    pub async fn update_series(
        &self,
        name: &str,
        count: u64,
        now: SystemTime,
    ) -> Result<(), ReportError> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &self.event_namespace);
        let patch = json!({
            "series": {
                "count": i32::try_from(count).unwrap_or(i32::MAX),
                "lastObservedTime": MicroTime(timestamp(now)),
            }
        });
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| ReportError::Event {
                name: name.to_string(),
                namespace: self.event_namespace.clone(),
                source,
            })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::fault::SOURCE_NVIDIA_XID;
    use std::time::Duration;

    fn fault() -> AgentFault {
        AgentFault {
            family: Accelerator::Gpu,
            source: SOURCE_NVIDIA_XID,
            code: "79".into(),
            device: Some("3".into()),
            reason: "GpuXid",
            message: "Xid 79 on GPU 0000:91:00.0: GPU has fallen off the bus".into(),
        }
    }

    #[test]
    fn patch_merges_one_condition_by_type() {
        let c = DesiredCondition {
            type_: "GpuFault",
            status: true,
            reason: "GpuXid79".into(),
            message: "source=NvidiaXid code=79 device=3".into(),
        };
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let p = condition_patch(&c, t, true);
        let cond = &p["status"]["conditions"][0];
        assert_eq!(cond["type"], "GpuFault");
        assert_eq!(cond["status"], "True");
        assert_eq!(cond["lastTransitionTime"], "2027-01-15T08:00:00Z");
        assert!(
            condition_patch(&c, t, false)["status"]["conditions"][0]
                .get("lastTransitionTime")
                .is_none()
        );
    }

    #[test]
    fn event_carries_the_annotation_and_micro_time() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let ev = build_event(
            &fault(),
            "gpu-7",
            Some("uid-1"),
            "rebound-system",
            "n".into(),
            1,
            t,
            t,
        );
        let v = serde_json::to_value(&ev).expect("serialises");
        let ann = v["metadata"]["annotations"][FAULT_ANNOTATION]
            .as_str()
            .expect("annotation");
        let wire = crate::fault::wire::parse_annotation(ann).expect("wire");
        assert_eq!(wire.code, "79");
        assert_eq!(wire.node.as_deref(), Some("gpu-7"));
        assert_eq!(wire.at.as_deref(), Some("2027-01-15T08:00:00.000Z"));
        assert_eq!(wire.count, Some(1));
        assert_eq!(v["eventTime"], "2027-01-15T08:00:00.000000Z");
        assert_eq!(v["regarding"]["kind"], "Node");
        assert_eq!(v["reason"], "GpuXid");
        assert!(v.get("series").is_none());
        let ev = build_event(&fault(), "gpu-7", None, "ns", "n".into(), 5, t, t);
        assert_eq!(ev.series.map(|s| s.count), Some(5));
    }
}
