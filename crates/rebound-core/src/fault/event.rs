//! Events that carry a fault (DESIGN.md §4 `KubeEvent`): the structured
//! `rebound.dev/fault` annotation written by rebound's agent, AlertManager
//! hooks and custom checkers, and kcover's `kcover.io/need-recovery`.
//!
//! Trust follows the Event's namespace: only Events in the operator's root
//! namespace or in `kube-system` (where a real API server keeps Events about
//! Nodes, and tenants cannot write) may act on nodes; a tenant's Event can at
//! most restart that tenant's own jobs.

use super::pod::{micro_time_utc, time_utc};
use super::wire::{self, FAULT_ANNOTATION, KCOVER_NEED_RECOVERY, WireError};
use super::{Fault, FaultSource};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Event;

/// The one namespace besides the root namespace whose Events are trusted:
/// a real API server accepts an Event about a Node (with `eventTime`) only
/// here or in `default`, and only cluster admins and system components write
/// here. The agent writes its node Events here.
pub const SYSTEM_NAMESPACE: &str = "kube-system";

/// Why an annotated Event could not be read as a fault. Each names the Event
/// so that the controller's log line and Event point at the culprit.
#[derive(Debug, thiserror::Error)]
pub enum EventFaultError {
    /// The annotation is not a JSON `WireFault` (bad JSON, unknown field).
    #[error("event {namespace}/{name}: {source}")]
    Annotation {
        namespace: String,
        name: String,
        #[source]
        source: WireError,
    },
    /// A source rebound has no classification for: acting on a guess could
    /// cordon nodes for a fault nobody classified.
    #[error(
        "event {namespace}/{name}: annotation {FAULT_ANNOTATION} names unknown source {found:?}: {why}"
    )]
    UnknownSource {
        namespace: String,
        name: String,
        found: String,
        why: String,
    },
    /// A fault without a code cannot be classified.
    #[error("event {namespace}/{name}: annotation {FAULT_ANNOTATION} has an empty code")]
    EmptyCode { namespace: String, name: String },
}

/// The fault an Event carries, if it is one.
///
/// Ordinary Events return `None` after one annotation lookup, so that the
/// controller can afford to call this on every Event of the cluster.
///
/// - `rebound.dev/fault`: a JSON [`wire::WireFault`]; its source must be a
///   [`FaultSource`] name (an unknown one is an error, not a guess). The node
///   is the annotation's, else the involved Node, else `source.host`.
/// - `kcover.io/need-recovery: "true"`: source `KubeEvent`, code = the Event's
///   reason (or `NeedRecovery` when it has none), message = its message.
///
/// Both take the pod from `involvedObject` when it is a Pod (and the
/// container from its `fieldPath` `spec.containers{name}`), `trusted` = the
/// Event is in `root_namespace`, `namespace` = the Event's namespace, `count`
/// from `series.count` or `count`, and `last_seen` from the latest of
/// `series.lastObservedTime`, `lastTimestamp` and `eventTime` (else the
/// creation time, else `now`).
pub fn event_fault(
    ev: &Event,
    root_namespace: &str,
    now: DateTime<Utc>,
) -> Option<Result<Fault, EventFaultError>> {
    event_fault_inner(ev, root_namespace, now).map(|r| r.map(bound_tenant_message))
}

/// Most message bytes kept of a tenant's fault Event (an Event may carry
/// up to 1 MiB; a flood of them must not become the controller's memory).
pub const MAX_TENANT_MESSAGE: usize = 1024;

/// Most fault Events tracked per tenant namespace; more are not tracked
/// (each tenant's flood costs the controller a bounded amount, and no
/// other namespace's).
pub const MAX_TENANT_EVENTS: usize = 256;

/// A tenant's message, cut to [`MAX_TENANT_MESSAGE`] bytes at a character
/// boundary.
fn bound_tenant_message(mut f: Fault) -> Fault {
    if !f.trusted
        && let Some(m) = f.message.as_mut()
        && m.len() > MAX_TENANT_MESSAGE
    {
        let mut cut = MAX_TENANT_MESSAGE;
        while !m.is_char_boundary(cut) {
            cut -= 1;
        }
        m.truncate(cut);
        m.shrink_to_fit();
    }
    f
}

fn event_fault_inner(
    ev: &Event,
    root_namespace: &str,
    now: DateTime<Utc>,
) -> Option<Result<Fault, EventFaultError>> {
    let annotations = ev.metadata.annotations.as_ref()?;
    if let Some(value) = annotations.get(FAULT_ANNOTATION) {
        return Some(structured(ev, value, root_namespace, now));
    }
    let kcover = annotations.get(KCOVER_NEED_RECOVERY)?;
    if !kcover.trim().eq_ignore_ascii_case("true") {
        return None;
    }
    let code = ev
        .reason
        .as_deref()
        .filter(|r| !r.is_empty())
        .unwrap_or("NeedRecovery");
    let mut f = base(ev, code, root_namespace, now);
    f.node = involved_node(ev);
    f.message = ev.message.clone();
    Some(Ok(f))
}

fn structured(
    ev: &Event,
    value: &str,
    root_namespace: &str,
    now: DateTime<Utc>,
) -> Result<Fault, EventFaultError> {
    let namespace = || ev.metadata.namespace.clone().unwrap_or_default();
    let name = || ev.metadata.name.clone().unwrap_or_default();
    let wf = wire::parse_annotation(value).map_err(|source| EventFaultError::Annotation {
        namespace: namespace(),
        name: name(),
        source,
    })?;
    let source =
        wf.source
            .parse::<FaultSource>()
            .map_err(|why| EventFaultError::UnknownSource {
                namespace: namespace(),
                name: name(),
                found: wf.source.clone(),
                why,
            })?;
    if wf.code.trim().is_empty() {
        return Err(EventFaultError::EmptyCode {
            namespace: namespace(),
            name: name(),
        });
    }
    let at = wf.at_time();
    let mut f = base(ev, wf.code.trim(), root_namespace, now);
    f.source = source;
    f.node = wf
        .node
        .filter(|n| !n.is_empty())
        .or_else(|| involved_node(ev));
    f.device = wf.device.filter(|d| !d.is_empty());
    f.holders = wf.pods.map(|p| wire::clean_pods(p).into());
    // The reporter's occurrence identity (rebound's agent writes it): the
    // same times and count as the Node condition line of this fault, so
    // the two channels name the same occurrences.
    if let Some(t) = at {
        f.first_seen = t;
        f.last_seen = t;
    }
    if let Some(n) = wf.count {
        f.count = f.count.max(wire::clamp_count(n));
    }
    f.message = wf.message.or_else(|| ev.message.clone());
    Ok(f)
}

/// When an Event was last observed: the latest of `series.lastObservedTime`,
/// `lastTimestamp` and `eventTime`, else its creation time. Its age decides
/// whether it is still news (`--fault-max-age`).
pub fn event_time(ev: &Event) -> Option<DateTime<Utc>> {
    [
        ev.series
            .as_ref()
            .and_then(|s| s.last_observed_time.as_ref())
            .and_then(micro_time_utc),
        ev.last_timestamp.as_ref().and_then(time_utc),
        ev.event_time.as_ref().and_then(micro_time_utc),
    ]
    .into_iter()
    .flatten()
    .max()
    .or_else(|| ev.metadata.creation_timestamp.as_ref().and_then(time_utc))
}

fn base(ev: &Event, code: &str, root_namespace: &str, now: DateTime<Utc>) -> Fault {
    let last = [
        ev.series
            .as_ref()
            .and_then(|s| s.last_observed_time.as_ref())
            .and_then(micro_time_utc),
        ev.last_timestamp.as_ref().and_then(time_utc),
        ev.event_time.as_ref().and_then(micro_time_utc),
    ]
    .into_iter()
    .flatten()
    .max()
    .or_else(|| ev.metadata.creation_timestamp.as_ref().and_then(time_utc))
    .unwrap_or(now);
    let first = ev
        .first_timestamp
        .as_ref()
        .and_then(time_utc)
        .or_else(|| ev.event_time.as_ref().and_then(micro_time_utc))
        .unwrap_or(last)
        .min(last);
    let mut f = Fault::new(FaultSource::KubeEvent, code, last);
    f.first_seen = first;
    f.reason = ev.reason.clone();
    f.namespace = ev.metadata.namespace.clone();
    f.trusted = ev
        .metadata
        .namespace
        .as_deref()
        .is_some_and(|ns| ns == root_namespace || ns == SYSTEM_NAMESPACE);
    let count = ev
        .series
        .as_ref()
        .and_then(|s| s.count)
        .or(ev.count)
        .unwrap_or(1);
    // A tenant writes this number: clamped before anything counts it.
    f.count = wire::clamp_count(u64::try_from(count).unwrap_or(1));
    let obj = &ev.involved_object;
    if obj.kind.as_deref() == Some("Pod") {
        f.pod = obj.name.clone();
        f.container = obj.field_path.as_deref().and_then(container_of);
    }
    f
}

/// The node an Event is about: the involved Node, else the reporting host.
fn involved_node(ev: &Event) -> Option<String> {
    let obj = &ev.involved_object;
    if obj.kind.as_deref() == Some("Node")
        && let Some(n) = obj.name.as_ref().filter(|n| !n.is_empty())
    {
        return Some(n.clone());
    }
    ev.source
        .as_ref()
        .and_then(|s| s.host.clone())
        .filter(|h| !h.is_empty())
}

/// `spec.containers{main}` → `main` (also `spec.initContainers{...}`).
fn container_of(field_path: &str) -> Option<String> {
    let rest = field_path
        .strip_prefix("spec.containers{")
        .or_else(|| field_path.strip_prefix("spec.initContainers{"))?;
    let name = rest.strip_suffix('}')?;
    (!name.is_empty()).then(|| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ROOT: &str = "rebound-system";

    fn now() -> DateTime<Utc> {
        "2026-01-01T12:00:00Z".parse().unwrap()
    }

    fn event(namespace: &str, annotations: serde_json::Value, rest: serde_json::Value) -> Event {
        let mut v = json!({
            "metadata": {"name": "ev-1", "namespace": namespace, "annotations": annotations,
                "creationTimestamp": "2026-01-01T10:00:00Z"},
            "involvedObject": {"kind": "Pod", "name": "trainer-0", "namespace": namespace,
                "fieldPath": "spec.containers{main}"},
            "reason": "NcclTimeout",
            "message": "collective timed out",
        });
        if let (Some(o), Some(r)) = (v.as_object_mut(), rest.as_object()) {
            for (k, val) in r {
                o.insert(k.clone(), val.clone());
            }
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn kcover_event_is_a_kube_event_fault_with_pod() {
        let ev = event(
            "team-a",
            json!({"kcover.io/need-recovery": "true"}),
            json!({"lastTimestamp": "2026-01-01T11:00:00Z", "count": 3,
                   "source": {"host": "gpu-7"}}),
        );
        let f = event_fault(&ev, ROOT, now()).unwrap().unwrap();
        assert_eq!(f.source, FaultSource::KubeEvent);
        assert_eq!(f.code, "NcclTimeout");
        assert_eq!(f.pod.as_deref(), Some("trainer-0"));
        assert_eq!(f.container.as_deref(), Some("main"));
        assert_eq!(f.namespace.as_deref(), Some("team-a"));
        assert_eq!(f.node.as_deref(), Some("gpu-7"));
        assert_eq!(f.message.as_deref(), Some("collective timed out"));
        assert_eq!(f.count, 3);
        assert_eq!(
            f.last_seen,
            "2026-01-01T11:00:00Z".parse::<DateTime<Utc>>().unwrap()
        );
        assert!(!f.trusted);
    }

    #[test]
    fn a_tenant_count_is_clamped() {
        let ev = event(
            "team-a",
            json!({"kcover.io/need-recovery": "true"}),
            json!({"lastTimestamp": "2026-01-01T11:00:00Z", "count": i32::MAX}),
        );
        let f = event_fault(&ev, ROOT, now()).unwrap().unwrap();
        assert_eq!(f.count, wire::MAX_COUNT);
        let ev = event(
            "team-a",
            json!({"kcover.io/need-recovery": "true"}),
            json!({"count": -5}),
        );
        assert_eq!(event_fault(&ev, ROOT, now()).unwrap().unwrap().count, 1);
    }

    #[test]
    fn kcover_false_is_not_a_fault() {
        let ev = event(
            "team-a",
            json!({"kcover.io/need-recovery": "false"}),
            json!({}),
        );
        assert!(event_fault(&ev, ROOT, now()).is_none());
    }

    #[test]
    fn structured_annotation_in_root_namespace_is_trusted() {
        let ann = r#"{"source":"NvidiaXid","code":"79","node":"gpu-7","device":"3","message":"fallen off the bus"}"#;
        let ev = event(
            ROOT,
            json!({"rebound.dev/fault": ann}),
            json!({"involvedObject": {"kind": "Node", "name": "gpu-7"},
                   "eventTime": "2026-01-01T11:00:00.250000Z",
                   "series": {"count": 4, "lastObservedTime": "2026-01-01T11:10:00.000000Z"}}),
        );
        let f = event_fault(&ev, ROOT, now()).unwrap().unwrap();
        assert_eq!((f.source, f.code.as_str()), (FaultSource::NvidiaXid, "79"));
        assert_eq!(
            (f.node.as_deref(), f.device.as_deref()),
            (Some("gpu-7"), Some("3"))
        );
        assert_eq!(f.message.as_deref(), Some("fallen off the bus"));
        assert_eq!(f.pod, None);
        assert_eq!(f.count, 4);
        assert_eq!(
            f.last_seen,
            "2026-01-01T11:10:00Z".parse::<DateTime<Utc>>().unwrap()
        );
        assert_eq!(
            f.first_seen,
            "2026-01-01T11:00:00.25Z".parse::<DateTime<Utc>>().unwrap()
        );
        assert!(f.trusted);
    }

    #[test]
    fn kube_system_is_trusted_default_is_not() {
        let ann = r#"{"source":"NvidiaXid","code":"79","node":"gpu-7"}"#;
        let at = |ns: &str| {
            event_fault(
                &event(ns, json!({"rebound.dev/fault": ann}), json!({})),
                ROOT,
                now(),
            )
            .unwrap()
            .unwrap()
            .trusted
        };
        assert!(at("kube-system"));
        assert!(at(ROOT));
        assert!(!at("default"));
        assert!(!at("team-a"));
    }

    #[test]
    fn structured_annotation_in_tenant_namespace_is_untrusted() {
        let ann = r#"{"source":"AscendNpu","code":"80E18402","node":"npu-1"}"#;
        let ev = event("team-a", json!({"rebound.dev/fault": ann}), json!({}));
        let f = event_fault(&ev, ROOT, now()).unwrap().unwrap();
        assert_eq!(
            (f.source, f.node.as_deref()),
            (FaultSource::AscendNpu, Some("npu-1"))
        );
        assert_eq!(f.pod.as_deref(), Some("trainer-0"));
        assert_eq!(
            f.last_seen,
            "2026-01-01T10:00:00Z".parse::<DateTime<Utc>>().unwrap()
        );
        assert!(!f.trusted);
    }

    #[test]
    fn bad_annotation_json_is_an_error_naming_the_event() {
        let ev = event(
            "team-a",
            json!({"rebound.dev/fault": "{not json"}),
            json!({}),
        );
        let err = event_fault(&ev, ROOT, now()).unwrap().unwrap_err();
        assert!(matches!(err, EventFaultError::Annotation { .. }));
        assert!(err.to_string().contains("team-a/ev-1"), "{err}");
    }

    #[test]
    fn unknown_source_and_empty_code_are_errors() {
        let ev = event(
            "team-a",
            json!({"rebound.dev/fault": r#"{"source":"Dcgm","code":"x"}"#}),
            json!({}),
        );
        let err = event_fault(&ev, ROOT, now()).unwrap().unwrap_err();
        assert!(matches!(&err, EventFaultError::UnknownSource { found, .. } if found == "Dcgm"));
        let ev = event(
            "team-a",
            json!({"rebound.dev/fault": r#"{"source":"NvidiaXid","code":" "}"#}),
            json!({}),
        );
        assert!(matches!(
            event_fault(&ev, ROOT, now()).unwrap(),
            Err(EventFaultError::EmptyCode { .. })
        ));
    }

    #[test]
    fn ordinary_events_are_none() {
        let ev = event("team-a", json!({"other": "x"}), json!({}));
        assert!(event_fault(&ev, ROOT, now()).is_none());
        let mut ev = ev;
        ev.metadata.annotations = None;
        assert!(event_fault(&ev, ROOT, now()).is_none());
    }

    #[test]
    fn container_from_field_path() {
        assert_eq!(
            container_of("spec.containers{main}").as_deref(),
            Some("main")
        );
        assert_eq!(
            container_of("spec.initContainers{init}").as_deref(),
            Some("init")
        );
        assert_eq!(container_of("spec.containers{}"), None);
        assert_eq!(container_of("metadata.name"), None);
    }
}
