//! What a Volcano job needs next: the pods to create and delete, its
//! status, and the action its lifecycle policies or a Command ask for.

use std::collections::{HashMap, HashSet};

use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::{Map, Value, json};

use crate::actors::children::{ChildPod, InFlight};
use crate::actors::util::{controller_ref, key, now_rfc3339, str_at};

use super::{JOB_NAME, JOB_NAMESPACE, JOB_VERSION, QUEUE_NAME, TASK_INDEX, TASK_SPEC};

/// An action requested for a job, by a Command or a lifecycle policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Request {
    pub(super) action: String,
    /// The pod whose event triggered it (RestartPod, RestartTask).
    pub(super) pod: Option<String>,
}

#[derive(Debug, Default)]
pub(super) struct Plan {
    pub(super) creates: Vec<Value>,
    pub(super) deletes: Vec<String>,
    pub(super) status: Option<Value>,
}

pub(super) fn is_terminal(phase: &str) -> bool {
    matches!(phase, "Completed" | "Failed" | "Aborted" | "Terminated")
}

pub(super) fn pod_version(p: &ChildPod) -> i64 {
    p.annotations
        .get(JOB_VERSION)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The action a pod event maps to through the job's (then the task's)
/// lifecycle policies; `None` is the default `SyncJob`.
pub(super) fn policy_action(
    job: &Value,
    task: &str,
    event: &str,
    exit_code: Option<i32>,
) -> Option<String> {
    let task_policies = job["spec"]["tasks"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| str_at(t, &["name"]) == Some(task))
        .and_then(|t| t["policies"].as_array().cloned())
        .unwrap_or_default();
    let job_policies = job["spec"]["policies"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for p in task_policies.iter().chain(job_policies.iter()) {
        let mut events: Vec<&str> = p["events"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if let Some(e) = str_at(p, &["event"]) {
            events.push(e);
        }
        if events.iter().any(|e| *e == event || *e == "*") {
            return str_at(p, &["action"]).map(str::to_owned);
        }
        if let (Some(want), Some(got)) = (p["exitCode"].as_i64(), exit_code)
            && want == i64::from(got)
        {
            return str_at(p, &["action"]).map(str::to_owned);
        }
    }
    None
}

pub(super) fn make_pod(job: &DynamicObject, task: &Value, index: i64, version: i64) -> Value {
    let name = job.name_any();
    let ns = job.namespace().unwrap_or_default();
    let tname = str_at(task, &["name"]).unwrap_or("default");
    let queue = str_at(&job.data, &["spec", "queue"])
        .unwrap_or("default")
        .to_owned();
    let template = &task["template"];
    let mut labels: Map<String, Value> = template["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut ann: Map<String, Value> = template["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let idx = index.to_string();
    ann.insert(TASK_SPEC.into(), json!(tname));
    ann.insert(
        "scheduling.k8s.io/group-name".into(),
        json!(format!("{name}-{}", job.uid().unwrap_or_default())),
    );
    ann.insert(JOB_NAME.into(), json!(name));
    ann.insert(QUEUE_NAME.into(), json!(queue));
    ann.insert(JOB_VERSION.into(), json!(version.to_string()));
    ann.insert(
        "volcano.sh/template-uid".into(),
        json!(format!("{name}-{tname}")),
    );
    ann.insert(TASK_INDEX.into(), json!(idx));
    labels.insert(JOB_NAME.into(), json!(name));
    labels.insert(TASK_SPEC.into(), json!(tname));
    labels.insert(JOB_NAMESPACE.into(), json!(ns));
    labels.insert(QUEUE_NAME.into(), json!(queue));
    labels.insert(TASK_INDEX.into(), json!(idx));
    let mut spec = template["spec"].clone();
    if !spec.is_object() {
        spec = json!({});
    }
    if spec.get("schedulerName").is_none() {
        spec["schedulerName"] =
            json!(str_at(&job.data, &["spec", "schedulerName"]).unwrap_or("volcano"));
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("{name}-{tname}-{index}"),
            "namespace": ns,
            "labels": labels,
            "annotations": ann,
            "ownerReferences": [controller_ref("batch.volcano.sh/v1alpha1", "Job", &name, &job.uid().unwrap_or_default())],
        },
        "spec": spec,
    })
}

pub(super) fn set_phase(status: &mut Value, phase: &str, reason: &str, message: &str) {
    if str_at(status, &["state", "phase"]) == Some(phase) {
        return;
    }
    let now = now_rfc3339();
    status["state"] =
        json!({"phase": phase, "reason": reason, "message": message, "lastTransitionTime": now});
    let mut conds = status["conditions"].as_array().cloned().unwrap_or_default();
    conds.push(json!({"status": phase, "lastTransitionTime": now}));
    status["conditions"] = json!(conds);
}

/// One reconcile: applies pending requests, then syncs pods and status.
pub(super) fn plan(
    job: &DynamicObject,
    status_in: &Value,
    pods: &[&ChildPod],
    requests: &[Request],
    in_flight: &InFlight,
) -> Plan {
    let mut plan = Plan::default();
    let ns = job.namespace().unwrap_or_default();
    let spec = &job.data["spec"];
    let mut status = if status_in.is_object() {
        status_in.clone()
    } else {
        json!({})
    };
    let mut phase = str_at(&status, &["state", "phase"])
        .unwrap_or("Pending")
        .to_owned();
    let mut version = status["version"].as_i64().unwrap_or(0);
    let mut retry = status["retryCount"].as_i64().unwrap_or(0);
    let max_retry = spec["maxRetry"].as_i64().unwrap_or(3);
    let min_available = spec["minAvailable"].as_i64();
    let tasks: &[Value] = spec["tasks"].as_array().map_or(&[], Vec::as_slice);
    let total: i64 = tasks
        .iter()
        .map(|t| t["replicas"].as_i64().unwrap_or(1))
        .sum();
    let min_available = min_available.unwrap_or(total);
    let mut kill_all = false;
    let mut kill: HashSet<String> = HashSet::new();
    if status.get("state").is_none() {
        set_phase(&mut status, "Pending", "", "");
    }
    for r in requests {
        if is_terminal(&phase) {
            break;
        }
        match r.action.as_str() {
            "RestartJob" => {
                kill_all = true;
                version += 1;
                retry += 1;
                phase = "Restarting".into();
                set_phase(&mut status, "Restarting", "RestartJob", "job is restarting");
            }
            "AbortJob" => {
                kill_all = true;
                phase = "Aborted".into();
                set_phase(&mut status, "Aborted", "AbortJob", "job is aborted");
            }
            "TerminateJob" => {
                kill_all = true;
                phase = "Terminated".into();
                set_phase(
                    &mut status,
                    "Terminated",
                    "TerminateJob",
                    "job is terminated",
                );
            }
            "CompleteJob" => {
                kill_all = true;
                phase = "Completed".into();
                set_phase(&mut status, "Completed", "CompleteJob", "job is completed");
            }
            "RestartPod" => kill.extend(r.pod.clone()),
            "RestartTask" => {
                if let Some(p) = r
                    .pod
                    .as_ref()
                    .and_then(|n| pods.iter().find(|p| &p.name == n))
                    && let Some(t) = p.labels.get(TASK_SPEC)
                {
                    kill.extend(
                        pods.iter()
                            .filter(|q| q.labels.get(TASK_SPEC) == Some(t))
                            .map(|q| q.name.clone()),
                    );
                }
            }
            _ => {}
        }
    }
    for p in pods {
        let doomed = kill_all && (phase != "Completed" || p.active());
        if (doomed || kill.contains(&p.name))
            && !p.deleting
            && !in_flight.contains(&key(&ns, &p.name))
        {
            plan.deletes.push(p.name.clone());
        }
    }
    // by name: a job of 1,024 pods is planned on every batch of its pods'
    // changes, so no scan of the pods per replica
    let deleting: HashSet<&str> = plan.deletes.iter().map(String::as_str).collect();
    let remaining: HashMap<&str, &ChildPod> = pods
        .iter()
        .filter(|p| !deleting.contains(p.name.as_str()))
        .map(|p| (p.name.as_str(), *p))
        .collect();
    if phase == "Restarting"
        && !kill_all
        && remaining
            .values()
            .all(|p| pod_version(p) >= version || p.deleting)
    {
        let old_alive = remaining.values().any(|p| pod_version(p) < version);
        if !old_alive {
            if retry >= max_retry {
                phase = "Failed".into();
                set_phase(
                    &mut status,
                    "Failed",
                    "MaxRetryReached",
                    "job failed: it reached maxRetry",
                );
            } else {
                phase = "Pending".into();
                set_phase(&mut status, "Pending", "", "");
            }
        }
    }
    let (mut pending, mut running, mut succeeded, mut failed, mut terminating) = (0, 0, 0, 0, 0);
    let mut task_counts = Map::new();
    for t in tasks {
        let tname = str_at(t, &["name"]).unwrap_or("default");
        let replicas = t["replicas"].as_i64().unwrap_or(1);
        let mut counts: HashMap<&str, i64> = HashMap::new();
        for i in 0..replicas {
            let pname = format!("{}-{tname}-{i}", job.name_any());
            match remaining.get(pname.as_str()) {
                Some(p) if p.deleting => terminating += 1,
                Some(p) => {
                    let ph = p.phase();
                    *counts
                        .entry(match ph {
                            "Running" => "Running",
                            "Succeeded" => "Succeeded",
                            "Failed" => "Failed",
                            _ => "Pending",
                        })
                        .or_default() += 1;
                    match ph {
                        "Running" => running += 1,
                        "Succeeded" => succeeded += 1,
                        "Failed" => failed += 1,
                        _ => pending += 1,
                    }
                }
                None => {
                    if matches!(phase.as_str(), "Pending" | "Running")
                        && !deleting.contains(pname.as_str())
                        && !in_flight.contains(&key(&ns, &pname))
                    {
                        plan.creates.push(make_pod(job, t, i, version));
                    }
                }
            }
        }
        if !counts.is_empty() {
            task_counts.insert(tname.into(), json!({"phase": counts}));
        }
    }
    if phase == "Pending" && running + succeeded >= min_available && min_available > 0 {
        phase = "Running".into();
        set_phase(&mut status, "Running", "", "");
    }
    if phase == "Running" && total > 0 && succeeded + failed == total {
        if succeeded >= min_available {
            set_phase(&mut status, "Completed", "", "");
        } else {
            set_phase(&mut status, "Failed", "", "");
        }
    }
    status["minAvailable"] = json!(min_available);
    status["pending"] = json!(pending);
    status["running"] = json!(running);
    status["succeeded"] = json!(succeeded);
    status["failed"] = json!(failed);
    status["terminating"] = json!(terminating + plan.deletes.len() as i64);
    status["version"] = json!(version);
    status["retryCount"] = json!(retry);
    status["taskStatusCount"] = Value::Object(task_counts);
    if &status != status_in {
        plan.status = Some(status);
    }
    plan
}
