//! What a TrainJob becomes: the JobSet built from its runtime and its own
//! overrides, and its status read back from that JobSet.

use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::{Value, json};

use crate::actors::util::{controller_ref, set_condition, str_at};

use super::{ANCESTOR_LABEL, ANCESTOR_TRAINER, API_VERSION, DEFAULT_RUNTIME_KIND, NODE_CONTAINER};

fn merged(base: &Value, extra: &Value) -> Value {
    let mut m = base.as_object().cloned().unwrap_or_default();
    if let Some(e) = extra.as_object() {
        m.extend(e.clone());
    }
    Value::Object(m)
}

/// Upsert `vars` into a container's `env` by name.
fn upsert_env(container: &mut Value, vars: &Value) {
    let Some(vars) = vars.as_array() else { return };
    if !container["env"].is_array() {
        container["env"] = json!([]);
    }
    if let Some(env) = container["env"].as_array_mut() {
        for v in vars {
            match env.iter_mut().find(|e| e["name"] == v["name"]) {
                Some(slot) => *slot = v.clone(),
                None => env.push(v.clone()),
            }
        }
    }
}

/// The JobSet the Trainer makes of `tj` with the runtime `runtime` (the
/// runtime object's JSON: `{spec: {mlPolicy, template: {metadata, spec}}}`).
pub fn build_jobset(tj: &DynamicObject, runtime: &Value) -> Value {
    let name = tj.name_any();
    let uid = tj.uid().unwrap_or_default();
    let tspec = &tj.data["spec"];
    let template = &runtime["spec"]["template"];
    let mut spec = match &template["spec"] {
        Value::Object(m) => Value::Object(m.clone()),
        _ => json!({}),
    };
    let num_nodes = tspec["trainer"]["numNodes"]
        .as_i64()
        .or_else(|| runtime["spec"]["mlPolicy"]["numNodes"].as_i64())
        .unwrap_or(1);
    let trainer = &tspec["trainer"];
    if let Some(rjobs) = spec["replicatedJobs"].as_array_mut() {
        for rj in rjobs {
            let jt = &mut rj["template"];
            jt["metadata"]["labels"] = merged(&jt["metadata"]["labels"], &tspec["labels"]);
            jt["metadata"]["annotations"] =
                merged(&jt["metadata"]["annotations"], &tspec["annotations"]);
            if str_at(jt, &["metadata", "labels", ANCESTOR_LABEL]) != Some(ANCESTOR_TRAINER) {
                continue;
            }
            rj["replicas"] = json!(1);
            let jt = &mut rj["template"];
            jt["spec"]["parallelism"] = json!(num_nodes);
            jt["spec"]["completions"] = json!(num_nodes);
            let Some(containers) = jt["spec"]["template"]["spec"]["containers"].as_array_mut()
            else {
                continue;
            };
            for c in containers
                .iter_mut()
                .filter(|c| c["name"] == NODE_CONTAINER)
            {
                for field in ["image", "command", "args"] {
                    if !trainer[field].is_null() {
                        c[field] = trainer[field].clone();
                    }
                }
                if !trainer["resourcesPerNode"].is_null() {
                    c["resources"] = trainer["resourcesPerNode"].clone();
                }
                upsert_env(c, &trainer["env"]);
            }
        }
    }
    if let Some(s) = tspec["suspend"].as_bool() {
        spec["suspend"] = json!(s);
    }
    json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "namespace": tj.namespace(),
            "labels": merged(&template["metadata"]["labels"], &tspec["labels"]),
            "annotations": merged(&template["metadata"]["annotations"], &tspec["annotations"]),
            "ownerReferences": [controller_ref(API_VERSION, "TrainJob", &name, &uid)],
        },
        "spec": spec,
    })
}

/// The TrainJob's status from its JobSet (or the reason there is none);
/// `None` when nothing changes.
pub(super) fn plan_status(
    tj: &DynamicObject,
    js: Option<&DynamicObject>,
    error: Option<&str>,
) -> Option<Value> {
    let old = match tj.data.get("status") {
        Some(s @ Value::Object(_)) => s.clone(),
        _ => json!({}),
    };
    let mut status = old.clone();
    let mut conds: Vec<Value> = status["conditions"].as_array().cloned().unwrap_or_default();
    let suspended = tj.data["spec"]["suspend"].as_bool() == Some(true);
    if suspended && js.is_none() {
        set_condition(
            &mut conds,
            "Suspended",
            "True",
            "Suspended",
            "TrainJob is suspended",
        );
    }
    match (js, error) {
        (Some(js), _) => {
            set_condition(
                &mut conds,
                "Created",
                "True",
                "JobsCreationSucceeded",
                "Succeeded to create Jobs",
            );
            let jconds = js.data["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            for (from, to) in [("Completed", "Complete"), ("Failed", "Failed")] {
                if let Some(c) = jconds
                    .iter()
                    .find(|c| c["type"] == from && c["status"] == "True")
                {
                    set_condition(
                        &mut conds,
                        to,
                        "True",
                        str_at(c, &["reason"]).unwrap_or(from),
                        str_at(c, &["message"]).unwrap_or_default(),
                    );
                }
            }
            let jobs: Vec<Value> = js.data["status"]["replicatedJobsStatus"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|r| {
                    json!({"name": r["name"], "ready": r["ready"], "succeeded": r["succeeded"],
                           "failed": r["failed"], "active": r["active"], "suspended": r["suspended"]})
                })
                .collect();
            status["jobsStatus"] = json!(jobs);
        }
        (None, Some(e)) => {
            set_condition(
                &mut conds,
                "Created",
                "False",
                "JobsBuildFailed",
                &format!("Failed to build Jobs: {e}"),
            );
        }
        (None, None) => {}
    }
    status["conditions"] = json!(conds);
    (status != old).then_some(status)
}

pub(super) fn runtime_ref(tj: &DynamicObject) -> (bool, String) {
    let r = &tj.data["spec"]["runtimeRef"];
    let kind = str_at(r, &["kind"]).unwrap_or(DEFAULT_RUNTIME_KIND);
    (
        kind == DEFAULT_RUNTIME_KIND,
        str_at(r, &["name"]).unwrap_or_default().to_owned(),
    )
}
