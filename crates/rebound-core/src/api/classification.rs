//! `FaultClassification`: which fault is how bad (DESIGN.md §3).
//! Cluster-scoped; owned by the cluster admin.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::conditions::Condition;
use crate::fault::{FaultSource, Level};

/// Maps the codes of one fault source to levels.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "rebound.dev",
    version = "v1alpha1",
    kind = "FaultClassification",
    shortname = "fc",
    category = "rebound",
    status = "FaultClassificationStatus",
    doc = "Maps fault codes of one source (NVIDIA XIDs, Ascend NPU codes, container exits, node conditions, events) to rebound's levels. Several may exist per source: the highest priority wins.",
    printcolumn = r#"{"name":"Source","type":"string","jsonPath":".spec.source"}"#,
    printcolumn = r#"{"name":"Priority","type":"integer","jsonPath":".spec.priority"}"#,
    printcolumn = r#"{"name":"Default","type":"string","jsonPath":".spec.defaultLevel"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Classified","type":"integer","jsonPath":".status.faultsClassified"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FaultClassificationSpec {
    /// The fault source whose codes this object classifies.
    pub source: FaultSource,
    /// With several classifications for one source, a rule of the
    /// higher-priority object wins (ties: by name).
    #[serde(default)]
    #[schemars(range(min = -1000000, max = 1000000))]
    pub priority: i32,
    /// Ordered rules: within one object the first match wins.
    #[serde(default)]
    #[schemars(length(max = 1024))]
    pub rules: Vec<ClassificationRule>,
    /// Frequency and duration escalations, per node and device.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub escalations: Vec<EscalationRule>,
    /// Level for codes no rule matches. If unset, a lower-priority
    /// classification of the same source decides, and finally `RestartJob`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_level: Option<Level>,
}

/// One rule: codes (or a CEL condition) → level.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [{"rule": "has(self.codes) && size(self.codes) > 0 || has(self.when)", "message": "a rule needs codes or when"}]))]
pub struct ClassificationRule {
    /// A name for records and `rebound explain`.
    #[schemars(length(min = 1, max = 128))]
    pub name: String,
    /// Exact codes (`79`, `80E18402`, `OOMKilled`), ranges (`140-143`,
    /// `0x80E18400-0x80E184FF`). Ascend codes are hexadecimal; other sources
    /// decimal unless prefixed `0x`. A code also matches the fault's reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 4096))]
    pub codes: Vec<String>,
    /// Optional CEL condition over `fault` (and `node`, `now`); with codes,
    /// both must hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub when: Option<String>,
    /// The level of a matching fault.
    pub level: Level,
    /// Free text: why this level (e.g. NVIDIA's recommended action).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub description: Option<String>,
}

/// Raise the level of a fault that repeats or lasts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.times) == has(self.within)", "message": "times and within go together"},
    {"rule": "has(self.times) || has(self.lastsFor)", "message": "an escalation needs times/within or lastsFor"}
]))]
pub struct EscalationRule {
    /// A name for records; default `escalation-<index>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub name: Option<String>,
    /// Codes (and ranges) the escalation watches.
    #[schemars(length(min = 1, max = 1024))]
    pub codes: Vec<String>,
    /// Escalate when the same code is seen this many times on one device
    /// (or node, when the fault has no device) within `within`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 2, max = 10000))]
    pub times: Option<u32>,
    /// The window for `times` (humantime, e.g. `24h`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub within: Option<String>,
    /// Escalate when the fault has lasted this long (first seen → last seen;
    /// humantime, e.g. `20s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub lasts_for: Option<String>,
    /// The level to escalate to (never lowers a level).
    pub level: Level,
}

/// What the controller observed of a classification.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FaultClassificationStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` (reason `InvalidExpression`, `ExpressionTooExpensive`,
    /// `InvalidCode`, `InvalidDuration` when the object cannot be used).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Faults classified by this object since the controller started.
    #[serde(default)]
    pub faults_classified: u64,
}
