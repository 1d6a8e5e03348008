//! What a decision reads: the job (with its restart history) and the node
//! as the core sees them. Apart from the decision logic so that the
//! callers' side of the contract reads on one page.

use crate::api::WorkloadKind;
use crate::expr::JobView;
use crate::fault::Level;
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::collections::BTreeMap;

/// One restart in a job's history (kept in annotations on the job).
///
/// The optional fields came with the recovery core's level-triggered
/// restarts; records written without them (older versions) still read.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RestartRecord {
    pub at: DateTime<Utc>,
    /// The restart was caused by a hardware level (free of the budget by
    /// default).
    #[serde(default)]
    pub infrastructure: bool,
    /// `true` for a single-pod restart of a graded escalation.
    #[serde(default)]
    pub pod_only: bool,
    /// The job's restart generation this restart started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
    /// How it was carried out (`InPlace`, `ReplaceFaulty`, `Recreate`,
    /// `Pod`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// A pod-only restart: the pod (`name/uid`), so that its recheck acts
    /// on that pod only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// Pods of the job when it was restarted: an in-place barrier waits
    /// for as many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<u32>,
    /// The fault occurrence this restart was for (its identity, 32 hex
    /// digits): a later term, another replica or a controller restarted
    /// in between recognises it as handled from the job itself, whatever
    /// the times' resolution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occurrence: Option<String>,
}

/// A job as the decision sees it.
#[derive(Clone, Debug, Default)]
pub struct JobInput {
    pub kind: Option<WorkloadKind>,
    pub view: JobView,
    /// Labels of the failing pod, if the fault names one.
    pub pod_labels: BTreeMap<String, String>,
    /// Restart history, oldest first.
    pub history: Vec<RestartRecord>,
    /// The job (or the failing replica) has restart policy `Never`.
    pub restart_policy_never: bool,
    /// The job is Running again (graded escalation waits for this).
    pub running: bool,
}

/// A node as the decision sees it.
#[derive(Clone, Debug, Default)]
pub struct NodeInput {
    pub name: String,
    pub unschedulable: bool,
    /// The level at which rebound cordoned it, if rebound did.
    pub cordoned_by_rebound: Option<Level>,
    pub tainted: bool,
}
