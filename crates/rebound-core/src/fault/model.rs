//! The one fault model every source is parsed into.

use super::{FaultSource, Level};
use chrono::{DateTime, Utc};
use serde::Serialize;

/// A fault as the decision core sees it, whatever its source.
///
/// Parsers fill what their source knows; `count` is set by the classifier
/// from its per-(node, device, code) history, `level` after classification.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Fault {
    pub source: FaultSource,
    /// The code as the source writes it: `79` (XID), `80E18402` (Ascend),
    /// `137` (exit code), a condition or Event reason.
    pub code: String,
    /// A reason such as `OOMKilled`, `Error`, a condition reason.
    pub reason: Option<String>,
    pub message: Option<String>,
    pub node: Option<String>,
    /// Namespace of the pod (or of the Event) the fault was seen in.
    pub namespace: Option<String>,
    pub pod: Option<String>,
    pub container: Option<String>,
    /// Device index or id on the node (GPU index, NPU chip id).
    pub device: Option<String>,
    pub exit_code: Option<i32>,
    /// UID of the object the fault was seen on (the pod), so that two pods
    /// of one name failing within one second are two faults.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    pub first_seen: DateTime<Utc>,
    pub last_seen: DateTime<Utc>,
    /// Times this (node, device, code) was seen within the escalation window.
    pub count: u32,
    /// The fault arrived through a channel a tenant cannot write (Node
    /// conditions, device-plugin ConfigMaps in kube-system, Events in the
    /// root namespace). Only trusted faults may act on nodes.
    pub trusted: bool,
    /// The pods (`namespace/name`) holding `device` as its reporter saw
    /// them (the node agent from the kubelet's PodResources API): device
    /// scope where DRA cannot tell. Read from trusted reporters only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holders: Option<Box<[String]>>,
}

impl Fault {
    /// Its trust domain ([`super::Domain`]).
    pub fn domain(&self) -> super::Domain {
        super::Domain::of(self)
    }

    /// A fault with just source and code, seen now: the base that parsers
    /// and tests fill in.
    pub fn new(source: FaultSource, code: impl Into<String>, now: DateTime<Utc>) -> Fault {
        Fault {
            source,
            code: code.into(),
            reason: None,
            message: None,
            node: None,
            namespace: None,
            pod: None,
            container: None,
            device: None,
            exit_code: None,
            uid: None,
            first_seen: now,
            last_seen: now,
            count: 1,
            trusted: false,
            holders: None,
        }
    }
}

/// A fault after classification: the level and how it was reached.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Classified {
    pub fault: Fault,
    pub level: Level,
    /// `<classification>/<rule>` that matched, or `default` / `builtin`.
    pub rule: String,
    /// Set when an escalation raised the level above the rule's.
    pub escalated_by: Option<String>,
}
