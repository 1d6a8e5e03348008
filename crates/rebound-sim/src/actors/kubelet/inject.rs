//! Status edits made from outside the kubelet: a container's runtime
//! reporting an exit (fault injection, [`super::Kubelet::fail_container`])
//! and the node lifecycle controller marking the pods of a lost node not
//! ready. The kubelet task notices an injected exit in its watch (the
//! running instance's container ID shows up terminated) and applies the
//! pod's restart rules and policies to it.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use crate::actors::runtime::ActorError;
use crate::actors::util::{is_conflict, now_rfc3339, set_condition};

/// Recomputes the readiness conditions from the container statuses after
/// an injected exit (the kubelet task writes the phase and the rest).
fn settle(status: &mut Value) {
    let unready: Vec<String> = ["initContainerStatuses", "containerStatuses"]
        .iter()
        .flat_map(|k| status[*k].as_array().cloned().unwrap_or_default())
        .filter(|c| c["ready"] != json!(true) && c["state"]["terminated"]["exitCode"] != json!(0))
        .filter_map(|c| c["name"].as_str().map(str::to_owned))
        .collect();
    let mut conds = status["conditions"].as_array().cloned().unwrap_or_default();
    let (st, reason, msg) = if unready.is_empty() {
        ("True", "", String::new())
    } else {
        (
            "False",
            "ContainersNotReady",
            format!("containers with unready status: [{}]", unready.join(" ")),
        )
    };
    for t in ["Ready", "ContainersReady"] {
        set_condition(&mut conds, t, st, reason, &msg);
    }
    for c in conds.iter_mut() {
        if let Some(o) = c.as_object_mut() {
            o.remove("lastUpdateTime");
            if o.get("reason").and_then(Value::as_str) == Some("") {
                o.remove("reason");
                o.remove("message");
            }
        }
    }
    status["conditions"] = json!(conds);
}

/// Terminates `container` (a container or an init container) in `status`
/// (a pod status as JSON) the way the runtime reports an exit: the running
/// instance, same container ID, now terminated.
pub(crate) fn terminate_in(
    status: &mut Value,
    container: &str,
    exit_code: i32,
    reason: &str,
) -> Result<(), ActorError> {
    let now = now_rfc3339();
    let mut found = false;
    for key in ["containerStatuses", "initContainerStatuses"] {
        let Some(list) = status[key].as_array_mut() else {
            continue;
        };
        let Some(cs) = list.iter_mut().find(|c| c["name"] == json!(container)) else {
            continue;
        };
        if cs["state"]["running"].is_null() {
            return Err(ActorError::Invalid(format!(
                "container {container} is not running"
            )));
        }
        let started = cs["state"]["running"]["startedAt"].clone();
        let cid = cs["containerID"].clone();
        cs["state"] = json!({"terminated": {
            "exitCode": exit_code,
            "reason": reason,
            "startedAt": started,
            "finishedAt": now,
            "containerID": cid,
        }});
        cs["ready"] = json!(false);
        cs["started"] = json!(false);
        found = true;
        break;
    }
    if !found {
        return Err(ActorError::Invalid(format!(
            "no running container {container} in pod (not started yet?)"
        )));
    }
    settle(status);
    Ok(())
}

/// Fetches a pod, lets `edit` change its status, and writes it back with a
/// resourceVersion precondition, retrying conflicts.
pub(crate) async fn edit_pod_status<F>(
    api: &Api<Pod>,
    name: &str,
    mut edit: F,
) -> Result<bool, ActorError>
where
    F: FnMut(&Pod, &mut Value) -> Result<bool, ActorError>,
{
    for _ in 0..8 {
        let Some(pod) = api.get_opt(name).await? else {
            return Err(ActorError::NotFound {
                kind: "Pod",
                name: name.to_owned(),
            });
        };
        let mut status = serde_json::to_value(pod.status.clone().unwrap_or_default())?;
        if !edit(&pod, &mut status)? {
            return Ok(false);
        }
        let patch = json!({
            "metadata": {"resourceVersion": pod.resource_version()},
            "status": status,
        });
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(true),
            Err(e) if is_conflict(&e) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(ActorError::Timeout(format!(
        "pod {name}: status kept conflicting"
    )))
}

/// Marks a pod of a node that went NotReady not ready, as the node
/// lifecycle controller does (`Ready=False`, reason `NodeNotReady`).
pub(crate) fn mark_unready(status: &mut Value) -> bool {
    let mut conds = status["conditions"].as_array().cloned().unwrap_or_default();
    let changed = set_condition(&mut conds, "Ready", "False", "NodeNotReady", "");
    for c in conds.iter_mut() {
        if let Some(o) = c.as_object_mut() {
            o.remove("lastUpdateTime");
        }
    }
    status["conditions"] = json!(conds);
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running() -> Value {
        json!({
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "initContainerStatuses": [
                {"name": "agent", "ready": true, "started": true, "restartCount": 0, "containerID": "z",
                 "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}, "lastState": {}},
            ],
            "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 0, "containerID": "x",
                 "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}, "lastState": {}},
            ],
        })
    }

    #[test]
    fn an_exit_keeps_the_instance_and_makes_the_pod_unready() {
        let mut st = running();
        terminate_in(&mut st, "a", 137, "OOMKilled").expect("terminate");
        let t = &st["containerStatuses"][0]["state"]["terminated"];
        assert_eq!(
            (t["exitCode"].clone(), t["containerID"].clone()),
            (json!(137), json!("x"))
        );
        assert_eq!(st["conditions"][0]["status"], "False");
        assert_eq!(st["phase"], "Running", "the kubelet decides the phase");
        assert!(
            terminate_in(&mut st, "a", 1, "Error").is_err(),
            "not running"
        );
    }

    #[test]
    fn init_containers_exit_too_and_unknown_ones_are_errors() {
        let mut st = running();
        terminate_in(&mut st, "agent", 87, "Error").expect("terminate");
        assert_eq!(
            st["initContainerStatuses"][0]["state"]["terminated"]["exitCode"],
            87
        );
        assert!(terminate_in(&mut st, "zzz", 1, "Error").is_err());
    }
}
