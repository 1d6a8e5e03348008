//! What a batch Job needs next: the pods to create (one per missing
//! completion index, or up to its parallelism), the pods to delete, and
//! its status and conditions under the backoff limit.

use std::collections::HashSet;

use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use serde_json::{Map, Value, json};

use crate::actors::children::{ChildPod, InFlight};
use crate::actors::util::{controller_ref, key, name_suffix, now_rfc3339, str_at};

use super::{COMPLETION_INDEX, CONTROLLER_UID_LABEL, JOB_NAME_LABEL};

#[derive(Debug, Default)]
pub(super) struct Plan {
    pub(super) creates: Vec<(Value, Option<i32>)>,
    pub(super) deletes: Vec<String>,
    pub(super) status: Option<Value>,
}

pub(super) fn condition_true(status: &Value, t: &str) -> bool {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| str_at(c, &["type"]) == Some(t) && str_at(c, &["status"]) == Some("True"))
}

fn push_condition(conds: &mut Vec<Value>, t: &str, reason: &str, message: &str) {
    if conds.iter().any(|c| str_at(c, &["type"]) == Some(t)) {
        return;
    }
    let now = now_rfc3339();
    conds.push(json!({
        "type": t, "status": "True", "reason": reason, "message": message,
        "lastProbeTime": now, "lastTransitionTime": now,
    }));
}

fn make_pod(job: &Job, index: Option<i32>) -> Value {
    let name = job.name_any();
    let uid = job.uid().unwrap_or_default();
    let template = job
        .spec
        .as_ref()
        .map(|s| serde_json::to_value(&s.template).unwrap_or(Value::Null))
        .unwrap_or(Value::Null);
    let mut labels: Map<String, Value> = template["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    labels.insert(CONTROLLER_UID_LABEL.into(), json!(uid));
    labels.insert(JOB_NAME_LABEL.into(), json!(name));
    labels.insert("controller-uid".into(), json!(uid));
    labels.insert("job-name".into(), json!(name));
    let mut annotations: Map<String, Value> = template["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut spec = template["spec"].clone();
    if !spec.is_object() {
        spec = json!({});
    }
    let generate = match index {
        Some(i) => {
            labels.insert(COMPLETION_INDEX.into(), json!(i.to_string()));
            annotations.insert(COMPLETION_INDEX.into(), json!(i.to_string()));
            spec["hostname"] = json!(format!("{name}-{i}"));
            format!("{name}-{i}-")
        }
        None => format!("{name}-"),
    };
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("{generate}{}", name_suffix()),
            "generateName": generate,
            "namespace": job.namespace(),
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [controller_ref("batch/v1", "Job", &name, &uid)],
        },
        "spec": spec,
    })
}

/// Decides the pods to create and delete and the job's new status.
pub(super) fn plan(
    job: &Job,
    pods: &[&ChildPod],
    creating: &[Option<i32>],
    failed_seen: &mut HashSet<String>,
    in_flight: &InFlight,
) -> Plan {
    let mut plan = Plan::default();
    let ns = job.namespace().unwrap_or_default();
    let spec = job.spec.clone().unwrap_or_default();
    let old = job
        .status
        .as_ref()
        .map(|s| serde_json::to_value(s).unwrap_or(json!({})))
        .unwrap_or(json!({}));
    let finished = condition_true(&old, "Complete") || condition_true(&old, "Failed");
    let indexed = spec.completion_mode.as_deref() == Some("Indexed");
    let parallelism = spec.parallelism.unwrap_or(1).max(0);
    let completions = spec.completions;
    let backoff_limit = spec.backoff_limit.unwrap_or(6);
    let on_failure = spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        == Some("OnFailure");
    // A pod deleted before it finished counts as failed, as
    // kube-controller-manager counts it (`isPodFailed`: "count deleted
    // Pods as failures", without `podReplacementPolicy: Failed`), so a
    // restart by deleting a Job's pods spends its `backoffLimit` here as
    // there.
    for p in pods {
        if p.phase() == "Failed" || !finished && p.deleting && p.phase() != "Succeeded" {
            failed_seen.insert(p.name.clone());
        }
    }
    let active: Vec<&&ChildPod> = pods.iter().filter(|p| p.active()).collect();
    let succeeded_idx: HashSet<i32> = pods
        .iter()
        .filter(|p| p.phase() == "Succeeded")
        .filter_map(|p| p.labels.get(COMPLETION_INDEX).and_then(|i| i.parse().ok()))
        .collect();
    let succeeded = if indexed {
        succeeded_idx.len() as i32
    } else {
        pods.iter().filter(|p| p.phase() == "Succeeded").count() as i32
    };
    let restarts: i32 = if on_failure {
        pods.iter().map(|p| p.restarts).sum()
    } else {
        0
    };
    let failed = failed_seen.len() as i32;
    let mut status = old.clone();
    let mut conds: Vec<Value> = status["conditions"].as_array().cloned().unwrap_or_default();
    if !finished && spec.suspend != Some(true) {
        let done = completions
            .map(|c| succeeded >= c)
            .unwrap_or(succeeded > 0 && active.is_empty());
        if failed + restarts > backoff_limit {
            let msg = "Job has reached the specified backoff limit";
            push_condition(&mut conds, "FailureTarget", "BackoffLimitExceeded", msg);
            push_condition(&mut conds, "Failed", "BackoffLimitExceeded", msg);
            for p in &active {
                if !in_flight.contains(&key(&ns, &p.name)) {
                    plan.deletes.push(p.name.clone());
                }
            }
        } else if done {
            push_condition(
                &mut conds,
                "SuccessCriteriaMet",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
            );
            push_condition(
                &mut conds,
                "Complete",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
            );
        } else if indexed {
            let total = completions.unwrap_or(1);
            let busy: HashSet<i32> = active
                .iter()
                .filter_map(|p| p.labels.get(COMPLETION_INDEX).and_then(|i| i.parse().ok()))
                .chain(creating.iter().flatten().copied())
                .collect();
            let mut running = busy.len() as i32;
            for i in 0..total {
                if running >= parallelism {
                    break;
                }
                if !succeeded_idx.contains(&i) && !busy.contains(&i) {
                    plan.creates.push((make_pod(job, Some(i)), Some(i)));
                    running += 1;
                }
            }
        } else {
            let remaining = completions.map(|c| c - succeeded).unwrap_or(parallelism);
            let want = parallelism.min(remaining).max(0);
            let have = (active.len() + creating.len()) as i32;
            for _ in have..want {
                plan.creates.push((make_pod(job, None), None));
            }
        }
    }
    status["conditions"] = json!(conds);
    status["active"] = json!(active.len());
    status["ready"] = json!(active.iter().filter(|p| p.ready).count());
    status["succeeded"] = json!(succeeded);
    status["failed"] = json!(failed);
    if indexed && !succeeded_idx.is_empty() {
        let mut idx: Vec<i32> = succeeded_idx.into_iter().collect();
        idx.sort_unstable();
        status["completedIndexes"] =
            json!(idx.iter().map(i32::to_string).collect::<Vec<_>>().join(","));
    }
    if status.get("startTime").is_none_or(Value::is_null) && spec.suspend != Some(true) {
        status["startTime"] = json!(now_rfc3339());
    }
    if condition_true(&status, "Complete")
        && status.get("completionTime").is_none_or(Value::is_null)
    {
        status["completionTime"] = json!(now_rfc3339());
    }
    for k in ["active", "ready", "succeeded", "failed"] {
        if status[k] == json!(0)
            && old.get(k).is_none()
            && let Some(o) = status.as_object_mut()
        {
            o.remove(k);
        }
    }
    if status["conditions"] == json!([])
        && old.get("conditions").is_none()
        && let Some(o) = status.as_object_mut()
    {
        o.remove("conditions");
    }
    if status != old {
        plan.status = Some(status);
    }
    plan
}
