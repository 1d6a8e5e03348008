//! Pod exits (DESIGN.md §4 `PodExit`): containers that terminated badly and
//! pods the kubelet failed (evicted, past their deadline).
//!
//! Pod faults are never trusted: a tenant controls its containers, so the
//! most a pod exit may do is restart the tenant's own job.

use super::{Fault, FaultSource};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{ContainerStateTerminated, ContainerStatus, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::Timestamp;

/// The reason the kubelet writes for a container that exited 0 on its own.
const COMPLETED: &str = "Completed";

/// Faults of a pod: one per container (init containers too) whose most recent
/// termination is a failure, plus one for a pod the kubelet failed as a whole.
///
/// The most recent termination is `state.terminated` when the container is
/// terminated now, else `lastState.terminated` (the kubelet restarted it in
/// place under `restartPolicy: OnFailure/Always`). A container that failed
/// earlier but whose latest instance completed is not reported: it recovered
/// on its own. A termination is a failure when its exit code is non-zero or
/// its reason is anything but `Completed` (`OOMKilled` with exit 0 happens
/// when a child process was killed).
///
/// Pod-level: `status.reason` `Evicted` / `DeadlineExceeded`, or any reason on
/// a pod in phase `Failed` (kubelet admission failures such as
/// `UnexpectedAdmissionError` when a device plugin cannot allocate).
///
/// Pods being deleted yield nothing: rebound's own restart terminates them,
/// and a deleted pod's exit codes are the consequence, not a cause.
///
/// `code` is the exit code in decimal, or the reason when the exit code is 0.
/// `last_seen` is `finishedAt` (falling back to `startedAt`, the pod's start
/// or creation time, never `now` unless nothing else exists) so that replays
/// of the same pod give the same fault and the same [`termination_key`].
pub fn pod_faults(pod: &Pod, now: DateTime<Utc>) -> Vec<Fault> {
    if pod.metadata.deletion_timestamp.is_some() {
        return Vec::new();
    }
    let Some(status) = pod.status.as_ref() else {
        return Vec::new();
    };
    // A stable fallback time for terminations the kubelet wrote without
    // times (`ContainerStatusUnknown` has none).
    let pod_time = status
        .start_time
        .as_ref()
        .or(pod.metadata.creation_timestamp.as_ref())
        .and_then(time_utc)
        .unwrap_or(now);

    let mut out = Vec::new();
    let statuses = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten());
    for cs in statuses {
        if let Some(t) = latest_termination(cs)
            && is_failure(t)
        {
            out.push(container_fault(pod, cs, t, pod_time));
        }
        out.extend(unhealthy_devices(pod, cs, pod_time));
    }

    if let Some(reason) = status.reason.as_deref().filter(|r| !r.is_empty())
        && (matches!(reason, "Evicted" | "DeadlineExceeded")
            || status.phase.as_deref() == Some("Failed"))
    {
        let mut f = Fault::new(FaultSource::PodExit, reason, pod_time);
        f.reason = Some(reason.to_string());
        f.message = status.message.clone();
        fill_pod(&mut f, pod);
        // The kubelet records when it failed the pod on its conditions
        // (`DisruptionTarget`, `Ready`): the latest transition is the
        // failure, and it is stable across replays.
        if let Some(t) = status
            .conditions
            .iter()
            .flatten()
            .filter_map(|c| c.last_transition_time.as_ref().and_then(time_utc))
            .max()
        {
            f.last_seen = t.max(f.first_seen);
        }
        out.push(f);
    }
    out
}

/// A stable identity of one termination: the pod, the container (`-` for a
/// pod-level fault), the code and the termination time.
///
/// The termination time (`finishedAt`) differs for every restart of a
/// container, so together with the container it identifies one termination
/// the way `restartCount` would, and it is kept in the [`Fault`] where the
/// restart count is not. [`pod_faults`] never uses `now` while the pod has a
/// start or creation time, so the key is the same on every watch replay.
pub fn termination_key(f: &Fault, pod_uid: &str) -> String {
    use std::fmt::Write;
    let mut key = String::with_capacity(pod_uid.len() + 64);
    key.push_str(pod_uid);
    key.push('/');
    key.push_str(f.container.as_deref().unwrap_or("-"));
    key.push('/');
    key.push_str(&f.code);
    key.push('/');
    // Writing into a String cannot fail.
    let _ = write!(
        key,
        "{}.{:09}",
        f.last_seen.timestamp(),
        f.last_seen.timestamp_subsec_nanos()
    );
    key
}

fn latest_termination(cs: &ContainerStatus) -> Option<&ContainerStateTerminated> {
    match cs.state.as_ref().and_then(|s| s.terminated.as_ref()) {
        Some(t) => Some(t),
        None => cs.last_state.as_ref().and_then(|s| s.terminated.as_ref()),
    }
}

fn is_failure(t: &ContainerStateTerminated) -> bool {
    t.exit_code != 0
        || t.reason
            .as_deref()
            .is_some_and(|r| !r.is_empty() && r != COMPLETED)
}

fn container_fault(
    pod: &Pod,
    cs: &ContainerStatus,
    t: &ContainerStateTerminated,
    fallback: DateTime<Utc>,
) -> Fault {
    let reason = t.reason.as_deref().filter(|r| !r.is_empty());
    let code = match (t.exit_code, reason) {
        (0, Some(r)) => r.to_string(),
        (c, _) => c.to_string(),
    };
    let finished = t.finished_at.as_ref().and_then(time_utc);
    let started = t.started_at.as_ref().and_then(time_utc);
    let last = finished.or(started).unwrap_or(fallback);
    let mut f = Fault::new(FaultSource::PodExit, code, last);
    f.first_seen = started.unwrap_or(last).min(last);
    f.reason = reason.map(str::to_string);
    f.message = t.message.clone();
    f.container = Some(cs.name.clone());
    f.exit_code = Some(t.exit_code);
    fill_pod(&mut f, pod);
    f
}

/// The code of a device the kubelet reports `Unhealthy` for a container.
pub const DEVICE_UNHEALTHY: &str = "DeviceUnhealthy";

/// Devices the kubelet reports `Unhealthy` in the container's
/// `allocatedResourcesStatus` (KEP-4680: the device plugin's or DRA
/// driver's health of each device the container holds; beta in 1.36 with
/// `ResourceHealthStatus`). One fault per device, code [`DEVICE_UNHEALTHY`],
/// `device` the resource's id (a device plugin's device id, such as a GPU
/// UUID, or a DRA device), `reason` the resource (`nvidia.com/gpu`,
/// `claim:<claim>/<request>`). Dated by the container's current start, so
/// that a replay is the same fault and a new instance (after a restart)
/// still holding the device is a new one. Untrusted as every pod fault: at
/// most it restarts the pod's own job.
fn unhealthy_devices(pod: &Pod, cs: &ContainerStatus, fallback: DateTime<Utc>) -> Vec<Fault> {
    let started = cs
        .state
        .as_ref()
        .and_then(|s| s.running.as_ref())
        .and_then(|r| r.started_at.as_ref())
        .and_then(time_utc)
        .unwrap_or(fallback);
    let mut out = Vec::new();
    for rs in cs.allocated_resources_status.iter().flatten() {
        for r in rs.resources.iter().flatten() {
            if r.health.as_deref() != Some("Unhealthy") {
                continue;
            }
            let mut f = Fault::new(FaultSource::PodExit, DEVICE_UNHEALTHY, started);
            f.reason = Some(rs.name.clone());
            f.device = Some(r.resource_id.clone());
            f.message = Some(match &r.message {
                Some(m) => format!(
                    "kubelet: {} device {} Unhealthy: {m}",
                    rs.name, r.resource_id
                ),
                None => format!("kubelet: {} device {} Unhealthy", rs.name, r.resource_id),
            });
            f.container = Some(cs.name.clone());
            fill_pod(&mut f, pod);
            out.push(f);
        }
    }
    out
}

fn fill_pod(f: &mut Fault, pod: &Pod) {
    f.pod = pod.metadata.name.clone();
    f.namespace = pod.metadata.namespace.clone();
    f.node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    f.trusted = false;
}

/// Convert a Kubernetes time (jiff) to the core's chrono time; `None` only
/// for instants chrono cannot represent.
pub(crate) fn time_utc(t: &Time) -> Option<DateTime<Utc>> {
    timestamp_utc(&t.0)
}

/// [`time_utc`] for `MicroTime` (Event `eventTime`, series times).
pub(crate) fn micro_time_utc(t: &MicroTime) -> Option<DateTime<Utc>> {
    timestamp_utc(&t.0)
}

fn timestamp_utc(ts: &Timestamp) -> Option<DateTime<Utc>> {
    let (mut secs, mut nanos) = (ts.as_second(), ts.subsec_nanosecond());
    // jiff gives a negative sub-second part for instants before 1970.
    if nanos < 0 {
        secs -= 1;
        nanos += 1_000_000_000;
    }
    DateTime::from_timestamp(secs, u32::try_from(nanos).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> DateTime<Utc> {
        "2026-01-01T12:00:00Z".parse().unwrap()
    }

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {
                "name": "trainer-0", "namespace": "team-a", "uid": "u-1",
                "creationTimestamp": "2026-01-01T09:00:00Z"
            },
            "spec": {"nodeName": "gpu-7", "containers": [{"name": "main"}]},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn oom_killed_current_state() {
        let p = pod(json!({"phase": "Failed", "containerStatuses": [{
            "name": "main", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                "startedAt": "2026-01-01T10:00:00Z", "finishedAt": "2026-01-01T11:00:00Z"}}
        }]}));
        let fs = pod_faults(&p, now());
        assert_eq!(fs.len(), 1);
        let f = &fs[0];
        assert_eq!(f.source, FaultSource::PodExit);
        assert_eq!(f.code, "137");
        assert_eq!(f.reason.as_deref(), Some("OOMKilled"));
        assert_eq!(f.exit_code, Some(137));
        assert_eq!(f.container.as_deref(), Some("main"));
        assert_eq!(f.pod.as_deref(), Some("trainer-0"));
        assert_eq!(f.namespace.as_deref(), Some("team-a"));
        assert_eq!(f.node.as_deref(), Some("gpu-7"));
        assert_eq!(
            f.first_seen,
            "2026-01-01T10:00:00Z".parse::<DateTime<Utc>>().unwrap()
        );
        assert_eq!(
            f.last_seen,
            "2026-01-01T11:00:00Z".parse::<DateTime<Utc>>().unwrap()
        );
        assert!(!f.trusted);
    }

    #[test]
    fn a_device_the_kubelet_reports_unhealthy_is_a_fault_of_the_pod() {
        let status = |health: &str| {
            json!({"phase": "Running", "containerStatuses": [{
                "name": "main", "image": "x", "imageID": "", "ready": true, "restartCount": 0,
                "state": {"running": {"startedAt": "2026-01-01T10:00:00Z"}},
                "allocatedResourcesStatus": [{"name": "nvidia.com/gpu", "resources": [
                    {"resourceID": "GPU-aaaa", "health": "Healthy"},
                    {"resourceID": "GPU-bbbb", "health": health}]}]
            }]})
        };
        let fs = pod_faults(&pod(status("Unhealthy")), now());
        assert_eq!(fs.len(), 1, "{fs:?}");
        let f = &fs[0];
        assert_eq!(f.code, DEVICE_UNHEALTHY);
        assert_eq!(f.device.as_deref(), Some("GPU-bbbb"));
        assert_eq!(f.reason.as_deref(), Some("nvidia.com/gpu"));
        assert_eq!(f.node.as_deref(), Some("gpu-7"));
        assert!(!f.trusted, "a pod's status is the tenant's domain");
        assert_eq!(
            f.last_seen,
            "2026-01-01T10:00:00Z".parse::<DateTime<Utc>>().unwrap(),
            "dated by the container's start: a replay is the same fault"
        );
        assert_eq!(
            pod_faults(&pod(status("Unhealthy")), now())[0].last_seen,
            f.last_seen
        );
        // Healthy or Unknown: nothing.
        assert!(pod_faults(&pod(status("Unknown")), now()).is_empty());
        assert!(pod_faults(&pod(status("Healthy")), now()).is_empty());
    }

    #[test]
    fn in_place_restart_reads_last_state() {
        let p = pod(json!({"phase": "Running", "containerStatuses": [{
            "name": "main", "image": "x", "imageID": "", "ready": true, "restartCount": 3,
            "state": {"running": {"startedAt": "2026-01-01T11:00:05Z"}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                "finishedAt": "2026-01-01T11:00:00Z"}}
        }]}));
        let fs = pod_faults(&p, now());
        assert_eq!(fs.len(), 1);
        assert_eq!(
            (fs[0].code.as_str(), fs[0].reason.as_deref()),
            ("1", Some("Error"))
        );
        assert_eq!(
            fs[0].first_seen, fs[0].last_seen,
            "no startedAt: first_seen = finishedAt"
        );
    }

    #[test]
    fn crash_loop_waiting_still_reports_the_last_exit() {
        let p = pod(json!({"phase": "Running", "containerStatuses": [{
            "name": "main", "image": "x", "imageID": "", "ready": false, "restartCount": 5,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 2, "reason": "Error",
                "finishedAt": "2026-01-01T11:00:00Z"}}
        }]}));
        assert_eq!(pod_faults(&p, now())[0].code, "2");
    }

    #[test]
    fn completed_is_not_a_fault_even_after_an_earlier_failure() {
        let p = pod(json!({"phase": "Succeeded", "containerStatuses": [{
            "name": "main", "image": "x", "imageID": "", "ready": false, "restartCount": 1,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                "finishedAt": "2026-01-01T11:00:00Z"}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                "finishedAt": "2026-01-01T10:00:00Z"}}
        }]}));
        assert!(pod_faults(&p, now()).is_empty());
    }

    #[test]
    fn exit_zero_with_a_failure_reason_uses_the_reason_as_code() {
        let p = pod(json!({"containerStatuses": [{
            "name": "main", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 0, "reason": "OOMKilled"}}
        }]}));
        let fs = pod_faults(&p, now());
        assert_eq!(
            (fs[0].code.as_str(), fs[0].exit_code),
            ("OOMKilled", Some(0))
        );
    }

    #[test]
    fn deleting_pod_yields_nothing() {
        let mut p = pod(json!({"phase": "Failed", "containerStatuses": [{
            "name": "main", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 137, "reason": "Error"}}
        }]}));
        p.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert!(pod_faults(&p, now()).is_empty());
    }

    #[test]
    fn init_container_failure() {
        let p = pod(json!({"phase": "Pending", "initContainerStatuses": [{
            "name": "fetch-ckpt", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 3, "reason": "Error",
                "finishedAt": "2026-01-01T11:00:00Z"}}
        }], "containerStatuses": [{
            "name": "main", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "PodInitializing"}}
        }]}));
        let fs = pod_faults(&p, now());
        assert_eq!(fs.len(), 1);
        assert_eq!(
            (fs[0].container.as_deref(), fs[0].code.as_str()),
            (Some("fetch-ckpt"), "3")
        );
    }

    #[test]
    fn evicted_pod_is_a_pod_level_fault() {
        let p = pod(json!({"phase": "Failed", "reason": "Evicted",
            "message": "The node was low on resource: memory.",
            "conditions": [{"type": "DisruptionTarget", "status": "True",
                "lastTransitionTime": "2026-01-01T11:30:00Z"}]}));
        let fs = pod_faults(&p, now());
        assert_eq!(fs.len(), 1);
        let f = &fs[0];
        assert_eq!(
            (f.code.as_str(), f.reason.as_deref()),
            ("Evicted", Some("Evicted"))
        );
        assert_eq!((f.container.as_deref(), f.exit_code), (None, None));
        assert_eq!(
            f.last_seen,
            "2026-01-01T11:30:00Z".parse::<DateTime<Utc>>().unwrap()
        );
        assert!(f.message.as_deref().is_some_and(|m| m.contains("memory")));
    }

    #[test]
    fn running_pod_and_missing_status_yield_nothing() {
        let p = pod(json!({"phase": "Running", "containerStatuses": [{
            "name": "main", "image": "x", "imageID": "", "ready": true, "restartCount": 0,
            "state": {"running": {}}
        }]}));
        assert!(pod_faults(&p, now()).is_empty());
        let mut p = p;
        p.status = None;
        assert!(pod_faults(&p, now()).is_empty());
    }

    #[test]
    fn termination_key_is_stable_and_distinguishes_restarts() {
        let status = |finished: &str| {
            json!({"containerStatuses": [{
                "name": "main", "image": "x", "imageID": "", "ready": false, "restartCount": 1,
                "state": {"waiting": {}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": finished}}
            }]})
        };
        let a = pod_faults(&pod(status("2026-01-01T11:00:00Z")), now());
        let a2 = pod_faults(
            &pod(status("2026-01-01T11:00:00Z")),
            now() + chrono::Duration::hours(1),
        );
        let b = pod_faults(&pod(status("2026-01-01T11:05:00Z")), now());
        assert_eq!(
            termination_key(&a[0], "u-1"),
            termination_key(&a2[0], "u-1")
        );
        assert_ne!(termination_key(&a[0], "u-1"), termination_key(&b[0], "u-1"));
        assert_ne!(termination_key(&a[0], "u-1"), termination_key(&a[0], "u-2"));
    }

    #[test]
    fn termination_without_times_falls_back_to_a_stable_pod_time() {
        // The kubelet writes ContainerStatusUnknown without times.
        let p = pod(json!({"containerStatuses": [{
            "name": "main", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown"}}
        }]}));
        let f = &pod_faults(&p, now())[0];
        assert_eq!(
            f.last_seen,
            "2026-01-01T09:00:00Z".parse::<DateTime<Utc>>().unwrap()
        );
    }

    #[test]
    fn time_conversion_keeps_subseconds() {
        let ts: Timestamp = "2026-01-01T11:00:00.123456789Z".parse().unwrap();
        let t = timestamp_utc(&ts).unwrap();
        assert_eq!(t.timestamp_subsec_nanos(), 123_456_789);
        let before: Timestamp = "1969-12-31T23:59:59.5Z".parse().unwrap();
        assert_eq!(
            timestamp_utc(&before).unwrap(),
            "1969-12-31T23:59:59.5Z".parse::<DateTime<Utc>>().unwrap()
        );
    }
}
