//! Standard `metav1.Condition`s, computed in one place.

use chrono::{DateTime, SecondsFormat, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A status condition with the fields of `metav1.Condition`.
///
/// Our own struct rather than k8s-openapi's: its `Time` is `jiff` while the
/// core works in chrono, and the schema stays the same shape.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// `Ready`, `Active`, or (on a tenant namespace's policies)
    /// `CelWithinBudget`.
    #[serde(rename = "type")]
    #[schemars(length(max = 316))]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// RFC 3339 time of the last status change.
    pub last_transition_time: String,
    /// CamelCase reason such as `InvalidExpression`.
    #[schemars(length(max = 1024))]
    pub reason: String,
    #[schemars(length(max = 32768))]
    pub message: String,
}

impl Condition {
    /// A condition, transitioned now.
    pub fn new(
        type_: &str,
        ok: bool,
        reason: &str,
        message: impl Into<String>,
        generation: Option<i64>,
        now: DateTime<Utc>,
    ) -> Condition {
        Condition {
            type_: type_.to_string(),
            status: if ok { "True" } else { "False" }.to_string(),
            observed_generation: generation,
            last_transition_time: now.to_rfc3339_opts(SecondsFormat::Secs, true),
            reason: reason.to_string(),
            message: message.into(),
        }
    }
}

/// Merge `new` into `existing`, keeping `lastTransitionTime` when the status
/// did not change (API conventions), so status writes stay no-ops when
/// nothing moved.
pub fn upsert(existing: &mut Vec<Condition>, new: Condition) {
    match existing.iter_mut().find(|c| c.type_ == new.type_) {
        Some(old) => {
            let keep_time = old.status == new.status;
            let time = old.last_transition_time.clone();
            *old = new;
            if keep_time {
                old.last_transition_time = time;
            }
        }
        None => existing.push(new),
    }
}
