//! Cordon, taint and uncordon nodes, each in one request.

use super::error::{RecoverError, api_code, api_error};
use crate::fault::Level;
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Set when rebound cordoned (or tainted) the node, to the level that made
/// it; only nodes carrying it are uncordoned by rebound.
pub const CORDONED_ANNOTATION: &str = "rebound.dev/cordoned";
/// Set when the node was already unschedulable (cordoned by someone else)
/// when rebound acted on it: uncordoning then leaves it unschedulable.
pub const WAS_UNSCHEDULABLE_ANNOTATION: &str = "rebound.dev/was-unschedulable";

/// When rebound last took the node out of scheduling (kept when it is
/// uncordoned: the breaker counts separations within its window from it).
pub const SEPARATED_AT_ANNOTATION: &str = "rebound.dev/separated-at";
/// What rebound cordoned the node for (`source/code`).
pub const CORDON_REASON_ANNOTATION: &str = "rebound.dev/cordon-reason";
/// `"true"`: cordoned for a fault with no clear signal; never uncordoned
/// by rebound.
pub const CORDON_STICKY_ANNOTATION: &str = "rebound.dev/cordon-sticky";

/// `"true"`: the circuit breaker held this cordon back for a while, with
/// the fault already on the node: pods may have been placed there
/// meanwhile, and must move too. On the node, not in memory, so that a
/// controller that restarts before it has moved them still knows.
pub const CORDON_HELD_ANNOTATION: &str = "rebound.dev/cordon-held";

/// Attempts of the resourceVersion-guarded patch before giving up.
const ATTEMPTS: u32 = 3;

/// The parts of a node its cordon patch is computed from, as last seen (a
/// watch cache entry will do: a stale one costs one 409 and a re-read).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeSnapshot {
    pub unschedulable: bool,
    pub taints: Vec<Taint>,
    pub annotations: BTreeMap<String, String>,
    pub resource_version: Option<String>,
}

impl NodeSnapshot {
    /// The snapshot of a node object.
    pub fn from_node(node: &Node) -> NodeSnapshot {
        let spec = node.spec.as_ref();
        NodeSnapshot {
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            taints: spec.and_then(|s| s.taints.clone()).unwrap_or_default(),
            annotations: node.metadata.annotations.clone().unwrap_or_default(),
            resource_version: node.metadata.resource_version.clone(),
        }
    }
}

/// The level at which rebound cordoned the node, from its annotations
/// (`NodeInput::cordoned_by_rebound`).
pub fn cordoned_level(annotations: &BTreeMap<String, String>) -> Option<Level> {
    annotations.get(CORDONED_ANNOTATION)?.parse().ok()
}

/// When rebound last took the node out of scheduling, from its
/// annotations (none when missing or not RFC 3339).
pub fn separated_at(
    annotations: &BTreeMap<String, String>,
) -> Option<chrono::DateTime<chrono::Utc>> {
    let v = annotations.get(SEPARATED_AT_ANNOTATION)?;
    chrono::DateTime::parse_from_rfc3339(v)
        .ok()
        .map(|t| t.with_timezone(&chrono::Utc))
}

/// What `cordon` or `uncordon` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeOutcome {
    /// False when the node already was as asked (no write made).
    pub changed: bool,
    pub requests: u32,
}

/// Take a node out of scheduling at `level`, and with `taint` add a
/// `NoSchedule` taint of that key (value: the level), in one JSON merge
/// patch: `spec.unschedulable: true`, the whole taint list (a merge patch
/// replaces lists, so the others' taints computed from `current` are sent
/// back unchanged), the `rebound.dev/cordoned: <level>` annotation (the
/// highest level seen), and `metadata.resourceVersion` from `current` as
/// precondition, so a taint added meanwhile by someone else is not lost: on
/// 409 the node is read again and the patch recomputed (three attempts).
/// No request when the node already is as asked.
pub async fn cordon(
    client: &Client,
    node: &str,
    level: Level,
    taint: Option<&str>,
    current: &NodeSnapshot,
) -> Result<NodeOutcome, RecoverError> {
    cordon_for(client, node, level, taint, &Why::default(), current).await
}

/// Why rebound cordons a node, written on it (`rebound.dev/cordon-reason`,
/// `rebound.dev/cordon-sticky`, `rebound.dev/separated-at`), so that who
/// cordoned what and why, and the breaker's window, survive a fail-over.
#[derive(Clone, Debug, Default)]
pub struct Why {
    /// `source/code` of the fault.
    pub reason: String,
    /// The fault sends no clear signal: do not uncordon by itself.
    pub sticky: bool,
    /// When (RFC 3339); `None`: now.
    pub at: Option<String>,
    /// The breaker held the cordon back while the fault was on the node.
    pub held: bool,
}

/// [`cordon`], recording why on the node.
pub async fn cordon_for(
    client: &Client,
    node: &str,
    level: Level,
    taint: Option<&str>,
    why: &Why,
    current: &NodeSnapshot,
) -> Result<NodeOutcome, RecoverError> {
    let at = why
        .at
        .clone()
        .unwrap_or_else(|| crate::fault::wire::format_at(chrono::Utc::now()));
    patch_node(client, node, "cordon", current, |snap| {
        cordon_patch(snap, level, taint, why, &at)
    })
    .await
}

/// Undo `cordon`: only on a node carrying `rebound.dev/cordoned` (others were
/// cordoned by people, and stay so): remove the annotations, the taint of
/// `taint_key`, and `spec.unschedulable` unless the node was unschedulable
/// before rebound came. One request, guarded like `cordon`; none when the
/// node carries no annotation.
pub async fn uncordon(
    client: &Client,
    node: &str,
    taint_key: Option<&str>,
    current: &NodeSnapshot,
) -> Result<NodeOutcome, RecoverError> {
    patch_node(client, node, "uncordon", current, |snap| {
        uncordon_patch(snap, taint_key)
    })
    .await
}

/// Patch a node with the body `compute` makes from a snapshot (`None`:
/// nothing to do), retrying on resourceVersion conflicts with a fresh one.
async fn patch_node(
    client: &Client,
    node: &str,
    action: &str,
    current: &NodeSnapshot,
    compute: impl Fn(&NodeSnapshot) -> Option<Value>,
) -> Result<NodeOutcome, RecoverError> {
    let api: Api<Node> = Api::all(client.clone());
    let target = format!("node/{node}");
    let request = format!("merge-patch node ({action})");
    let mut requests = 0;
    let mut snap = current.clone();
    for _ in 0..ATTEMPTS {
        let Some(body) = compute(&snap) else {
            return Ok(NodeOutcome {
                changed: false,
                requests,
            });
        };
        requests += 1;
        match api
            .patch(node, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            Ok(_) => {
                return Ok(NodeOutcome {
                    changed: true,
                    requests,
                });
            }
            Err(e) if api_code(&e) == Some(409) => {
                requests += 1;
                let fresh = api.get(node).await.map_err(api_error(
                    &target,
                    "get node after a conflict",
                    requests,
                ))?;
                snap = NodeSnapshot::from_node(&fresh);
            }
            Err(e) => return Err(api_error(&target, request, requests)(e)),
        }
    }
    Err(RecoverError::Conflict {
        target,
        request,
        attempts: ATTEMPTS,
        requests,
    })
}

/// The merge patch that cordons (and taints) a node as `snap` shows it,
/// recording why; `None` when it is already so.
pub fn cordon_patch(
    snap: &NodeSnapshot,
    level: Level,
    taint: Option<&str>,
    why: &Why,
    at: &str,
) -> Option<Value> {
    let recorded = cordoned_level(&snap.annotations);
    let mut spec = json!({});
    let mut annotations = json!({});
    if !snap.unschedulable {
        spec["unschedulable"] = json!(true);
        annotations[SEPARATED_AT_ANNOTATION] = json!(at);
    } else if recorded.is_none() && !snap.annotations.contains_key(CORDONED_ANNOTATION) {
        annotations[WAS_UNSCHEDULABLE_ANNOTATION] = json!("true");
    }
    if recorded.is_none_or(|r| r < level) {
        annotations[CORDONED_ANNOTATION] = json!(level.as_str());
        if !why.reason.is_empty() {
            annotations[CORDON_REASON_ANNOTATION] = json!(why.reason);
        }
    }
    if why.sticky && !snap.annotations.contains_key(CORDON_STICKY_ANNOTATION) {
        annotations[CORDON_STICKY_ANNOTATION] = json!("true");
    }
    if why.held && !snap.annotations.contains_key(CORDON_HELD_ANNOTATION) {
        annotations[CORDON_HELD_ANNOTATION] = json!("true");
    }
    if let Some(key) = taint {
        let present = snap
            .taints
            .iter()
            .any(|t| t.key == key && t.effect == "NoSchedule");
        if !present {
            let mut taints = snap.taints.clone();
            taints.push(Taint {
                key: key.to_string(),
                value: Some(level.as_str().to_string()),
                effect: "NoSchedule".into(),
                time_added: None,
            });
            spec["taints"] = json!(taints);
        }
    }
    finish(snap, spec, annotations)
}

/// The merge patch that undoes [`cordon_patch`]; `None` for a node rebound
/// did not cordon.
pub fn uncordon_patch(snap: &NodeSnapshot, taint_key: Option<&str>) -> Option<Value> {
    if !snap.annotations.contains_key(CORDONED_ANNOTATION) {
        return None;
    }
    let mut spec = json!({});
    let mut annotations = json!({ CORDONED_ANNOTATION: null });
    for k in [
        CORDON_REASON_ANNOTATION,
        CORDON_STICKY_ANNOTATION,
        CORDON_HELD_ANNOTATION,
    ] {
        if snap.annotations.contains_key(k) {
            annotations[k] = Value::Null;
        }
    }
    if snap.annotations.contains_key(WAS_UNSCHEDULABLE_ANNOTATION) {
        annotations[WAS_UNSCHEDULABLE_ANNOTATION] = Value::Null;
    } else if snap.unschedulable {
        spec["unschedulable"] = Value::Null;
    }
    if let Some(key) = taint_key
        && snap.taints.iter().any(|t| t.key == key)
    {
        let kept: Vec<&Taint> = snap.taints.iter().filter(|t| t.key != key).collect();
        spec["taints"] = if kept.is_empty() {
            Value::Null
        } else {
            json!(kept)
        };
    }
    finish(snap, spec, annotations)
}

/// The patch body, or `None` when it would change nothing.
fn finish(snap: &NodeSnapshot, spec: Value, annotations: Value) -> Option<Value> {
    let empty = |v: &Value| v.as_object().is_none_or(|o| o.is_empty());
    if empty(&spec) && empty(&annotations) {
        return None;
    }
    let mut metadata = json!({});
    if !empty(&annotations) {
        metadata["annotations"] = annotations;
    }
    if let Some(rv) = &snap.resource_version {
        metadata["resourceVersion"] = json!(rv);
    }
    let mut body = json!({ "metadata": metadata });
    if !empty(&spec) {
        body["spec"] = spec;
    }
    Some(body)
}
