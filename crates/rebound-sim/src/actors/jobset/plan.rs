//! What a JobSet needs next: its child Jobs (named and labelled as the
//! JobSet controller makes them), a restart of the whole set when a child
//! fails, and its conditions.

use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::{Map, Value, json};

use crate::actors::children::InFlight;
use crate::actors::util::{controller_ref, key, now_rfc3339, str_at};

use super::{
    ChildJob, JOB_GLOBAL_INDEX, JOB_INDEX, JOBSET_NAME, JOBSET_UID, REPLICATED_JOB_NAME,
    REPLICATED_JOB_REPLICAS, RESTART_ATTEMPT,
};

pub(super) fn child_view(j: &Job) -> ChildJob {
    let labels = j.labels();
    let conds = j
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let is = |t: &str| conds.iter().any(|c| c.type_ == t && c.status == "True");
    let parallelism = j.spec.as_ref().and_then(|s| s.parallelism).unwrap_or(1);
    ChildJob {
        name: j.name_any(),
        attempt: labels
            .get(RESTART_ATTEMPT)
            .and_then(|a| a.parse().ok())
            .unwrap_or(0),
        failed: is("Failed"),
        complete: is("Complete"),
        ready: j.status.as_ref().and_then(|s| s.ready).unwrap_or(0) >= parallelism,
        deleting: j.metadata.deletion_timestamp.is_some(),
    }
}

#[derive(Debug, Default)]
pub(super) struct Plan {
    pub(super) creates: Vec<Value>,
    pub(super) deletes: Vec<String>,
    pub(super) status: Option<Value>,
}

pub(super) fn finished(status: &Value) -> bool {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| {
            matches!(str_at(c, &["type"]), Some("Completed") | Some("Failed"))
                && str_at(c, &["status"]) == Some("True")
        })
}

fn make_job(js: &DynamicObject, rjob: &Value, idx: i64, global: i64, attempt: i64) -> Value {
    let name = js.name_any();
    let uid = js.uid().unwrap_or_default();
    let rname = str_at(rjob, &["name"]).unwrap_or("job");
    let replicas = rjob["replicas"].as_i64().unwrap_or(1);
    let mut tags = Map::new();
    tags.insert(JOBSET_NAME.into(), json!(name));
    tags.insert(REPLICATED_JOB_NAME.into(), json!(rname));
    tags.insert(REPLICATED_JOB_REPLICAS.into(), json!(replicas.to_string()));
    tags.insert(JOB_INDEX.into(), json!(idx.to_string()));
    tags.insert(JOB_GLOBAL_INDEX.into(), json!(global.to_string()));
    tags.insert(RESTART_ATTEMPT.into(), json!(attempt.to_string()));
    tags.insert(JOBSET_UID.into(), json!(uid));
    let template = &rjob["template"];
    let merge = |base: &Value| {
        let mut m = base.as_object().cloned().unwrap_or_default();
        m.extend(tags.clone());
        Value::Object(m)
    };
    let mut spec = template["spec"].clone();
    if !spec.is_object() {
        spec = json!({});
    }
    let pod_meta = &spec["template"]["metadata"];
    let (pl, pa) = (merge(&pod_meta["labels"]), merge(&pod_meta["annotations"]));
    spec["template"]["metadata"]["labels"] = pl;
    spec["template"]["metadata"]["annotations"] = pa;
    let dns = js.data["spec"]["network"]["enableDNSHostnames"]
        .as_bool()
        .unwrap_or(true);
    if dns && spec["template"]["spec"].is_object() {
        let sub = str_at(&js.data, &["spec", "network", "subdomain"])
            .unwrap_or(&name)
            .to_owned();
        spec["template"]["spec"]["subdomain"] = json!(sub);
    }
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": format!("{name}-{rname}-{idx}"),
            "namespace": js.namespace(),
            "labels": merge(&template["metadata"]["labels"]),
            "annotations": merge(&template["metadata"]["annotations"]),
            "ownerReferences": [controller_ref("jobset.x-k8s.io/v1alpha2", "JobSet", &name, &uid)],
        },
        "spec": spec,
    })
}

fn js_condition(conds: &mut Vec<Value>, t: &str, reason: &str, message: &str) {
    if conds.iter().any(|c| str_at(c, &["type"]) == Some(t)) {
        return;
    }
    conds.push(json!({
        "type": t, "status": "True", "reason": reason, "message": message,
        "lastTransitionTime": now_rfc3339(),
    }));
}

pub(super) fn plan(js: &DynamicObject, children: &[&ChildJob], in_flight: &InFlight) -> Plan {
    let mut plan = Plan::default();
    let ns = js.namespace().unwrap_or_default();
    let name = js.name_any();
    let old = js.data.get("status").cloned().unwrap_or(json!({}));
    let mut status = if old.is_object() {
        old.clone()
    } else {
        json!({})
    };
    if finished(&old) {
        return plan;
    }
    let mut restarts = old["restarts"].as_i64().unwrap_or(0);
    let max_restarts = js.data["spec"]["failurePolicy"]["maxRestarts"]
        .as_i64()
        .unwrap_or(0);
    let mut conds: Vec<Value> = status["conditions"].as_array().cloned().unwrap_or_default();
    let current: Vec<&&ChildJob> = children.iter().filter(|c| c.attempt >= restarts).collect();
    if current.iter().any(|c| c.failed) {
        if restarts < max_restarts {
            restarts += 1;
        } else {
            js_condition(
                &mut conds,
                "Failed",
                "FailedJobs",
                "jobset failed due to reaching max number of restarts",
            );
            status["terminalState"] = json!("Failed");
        }
    }
    let rjobs: Vec<Value> = js.data["spec"]["replicatedJobs"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut rstatus = Vec::new();
    let mut all_complete = !rjobs.is_empty();
    let failing = str_at(&status, &["terminalState"]) == Some("Failed");
    for c in children {
        if (c.attempt < restarts || failing && !c.complete)
            && !c.deleting
            && !in_flight.contains(&key(&ns, &c.name))
        {
            plan.deletes.push(c.name.clone());
        }
    }
    let mut global = 0i64;
    for rj in &rjobs {
        let rname = str_at(rj, &["name"]).unwrap_or("job");
        let replicas = rj["replicas"].as_i64().unwrap_or(1);
        let mut counts = (0, 0, 0, 0);
        for idx in 0..replicas {
            let jname = format!("{name}-{rname}-{idx}");
            match children.iter().find(|c| c.name == jname) {
                Some(c) if c.attempt >= restarts => {
                    if c.complete {
                        counts.1 += 1;
                    } else {
                        all_complete = false;
                        if c.failed {
                            counts.2 += 1;
                        } else {
                            counts.3 += 1;
                            if c.ready {
                                counts.0 += 1;
                            }
                        }
                    }
                }
                Some(_) => all_complete = false,
                None => {
                    all_complete = false;
                    if !failing && !in_flight.contains(&key(&ns, &jname)) {
                        plan.creates.push(make_job(js, rj, idx, global, restarts));
                    }
                }
            }
            global += 1;
        }
        rstatus.push(json!({
            "name": rname, "ready": counts.0, "succeeded": counts.1,
            "failed": counts.2, "active": counts.3, "suspended": 0,
        }));
    }
    if all_complete && !failing {
        js_condition(
            &mut conds,
            "Completed",
            "AllJobsCompleted",
            "jobset completed successfully",
        );
        status["terminalState"] = json!("Completed");
    }
    status["restarts"] = json!(restarts);
    status["conditions"] = json!(conds);
    status["replicatedJobsStatus"] = json!(rstatus);
    if status != old {
        plan.status = Some(status);
    }
    plan
}
