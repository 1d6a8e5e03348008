//! What a Kubeflow job needs next: its pods (named and labelled as the
//! training operator makes them), the pods to delete per restart and
//! clean-pod policy, and its conditions.

use std::collections::{BTreeMap, HashMap};

use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::{Map, Value, json};

use crate::actors::children::{ChildPod, InFlight};
use crate::actors::util::{controller_ref, key, now_rfc3339, str_at};

use super::{
    JOB_NAME_LABEL, JOB_ROLE_LABEL, KubeflowKind, OPERATOR_NAME_LABEL, REPLICA_INDEX_LABEL,
    REPLICA_TYPE_LABEL,
};

/// The replica specs of a job in a stable order (master-like types first).
pub(super) fn replica_specs(kind: KubeflowKind, job: &Value) -> Vec<(&String, &Value)> {
    let mut v: Vec<(&String, &Value)> = job["spec"][kind.replica_specs_field()]
        .as_object()
        .map(|m| m.iter().collect())
        .unwrap_or_default();
    v.sort_by_key(|(t, _)| (!matches!(t.as_str(), "Master" | "Chief" | "Launcher"), *t));
    v
}

/// What one reconcile of a job wants done.
#[derive(Debug, Default)]
pub(super) struct Plan {
    pub(super) creates: Vec<Value>,
    pub(super) deletes: Vec<String>,
    pub(super) status: Option<Value>,
}

pub(super) fn is_finished(status: &Value) -> bool {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| {
            matches!(str_at(c, &["type"]), Some("Succeeded") | Some("Failed"))
                && str_at(c, &["status"]) == Some("True")
        })
}

/// Sets a job condition the way the training operator does: the changed
/// condition moves to the end of the list, and Running/Restarting/finished
/// conditions switch the others off.
pub(super) fn kf_condition(conds: &mut Vec<Value>, ctype: &str, reason: &str, message: &str) {
    let exists = conds
        .iter()
        .any(|c| str_at(c, &["type"]) == Some(ctype) && str_at(c, &["status"]) == Some("True"));
    if exists {
        return;
    }
    let now = now_rfc3339();
    let off: &[&str] = match ctype {
        "Running" => &["Restarting"],
        "Restarting" => &["Running"],
        "Succeeded" | "Failed" => &["Running", "Restarting"],
        _ => &[],
    };
    for c in conds.iter_mut() {
        if let Some(t) = str_at(c, &["type"])
            && off.contains(&t)
            && str_at(c, &["status"]) == Some("True")
        {
            c["status"] = json!("False");
            c["lastTransitionTime"] = json!(now);
            c["lastUpdateTime"] = json!(now);
        }
    }
    conds.retain(|c| str_at(c, &["type"]) != Some(ctype));
    conds.push(json!({
        "type": ctype,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastUpdateTime": now,
        "lastTransitionTime": now,
    }));
}

/// The pod the operator makes for one replica.
pub(crate) fn make_pod(
    kind: KubeflowKind,
    job: &DynamicObject,
    rtype: &str,
    index: usize,
    spec: &Value,
    master: bool,
    policy: &str,
) -> Value {
    let name = job.name_any();
    let rt = rtype.to_lowercase();
    let template = &spec["template"];
    let mut labels: Map<String, Value> = template["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    labels.insert(OPERATOR_NAME_LABEL.into(), json!(kind.operator_name()));
    labels.insert(JOB_NAME_LABEL.into(), json!(name.replace('/', "-")));
    labels.insert(REPLICA_TYPE_LABEL.into(), json!(rt));
    labels.insert(REPLICA_INDEX_LABEL.into(), json!(index.to_string()));
    if master {
        labels.insert(JOB_ROLE_LABEL.into(), json!("master"));
    }
    let mut pod_spec = template["spec"].clone();
    if !pod_spec.is_object() {
        pod_spec = json!({});
    }
    if kind == KubeflowKind::PyTorchJob {
        pytorch_defaults(&mut pod_spec, job, &rt, &name);
    }
    pod_spec["restartPolicy"] = json!(if policy == "ExitCode" {
        "Never"
    } else {
        policy
    });
    let mut meta = json!({
        "name": format!("{name}-{rt}-{index}"),
        "namespace": job.namespace(),
        "labels": labels,
        "ownerReferences": [controller_ref(
            "kubeflow.org/v1",
            kind.kind(),
            &name,
            &job.uid().unwrap_or_default(),
        )],
    });
    if let Some(a) = template["metadata"]["annotations"].as_object() {
        meta["annotations"] = json!(a);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec})
}

/// The port training-operator v1.9 gives the `pytorch` container when it
/// names none (`pytorchjob-port`, `PyTorchJobDefaultPort`).
pub(crate) const PYTORCH_PORT: i64 = 23456;

/// What training-operator v1.9 adds to a PyTorchJob's pods
/// (pkg/apis/kubeflow.org/v1/pytorch_defaults.go, pkg/controller.v1/
/// pytorch/initcontainer.go): the `pytorch` container's port
/// `pytorchjob-port` 23456 unless it has one of that name, and, when the
/// job has a Master, each worker an init container `init-pytorch` after
/// the template's own, waiting for the master's name with `nslookup`
/// (`alpine:3.10`, 50m/10Mi). In place, a pod runs its init containers
/// again, this one included.
fn pytorch_defaults(pod_spec: &mut Value, job: &DynamicObject, rtype: &str, name: &str) {
    if let Some(c) = pod_spec["containers"]
        .as_array_mut()
        .and_then(|cs| cs.iter_mut().find(|c| c["name"] == "pytorch"))
    {
        let named = c["ports"]
            .as_array()
            .is_some_and(|ps| ps.iter().any(|p| p["name"] == "pytorchjob-port"));
        if !named {
            let ports = c["ports"].as_array().cloned().unwrap_or_default();
            let mut ports = ports;
            ports.push(json!({"name": "pytorchjob-port", "containerPort": PYTORCH_PORT}));
            c["ports"] = json!(ports);
        }
    }
    let has_master = job.data["spec"]["pytorchReplicaSpecs"]["Master"].is_object();
    if has_master && rtype == "worker" {
        let master = format!("{name}-master-0");
        let init = json!({
            "name": "init-pytorch",
            "image": "alpine:3.10",
            "imagePullPolicy": "IfNotPresent",
            "resources": {"limits": {"cpu": "100m", "memory": "20Mi"},
                          "requests": {"cpu": "50m", "memory": "10Mi"}},
            "command": ["sh", "-c", format!("err=1;for i in $(seq 100); do if nslookup {master}; then err=0 && break; fi;echo waiting for master; sleep 2; done; exit $err")],
        });
        let mut inits = pod_spec["initContainers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        inits.push(init);
        pod_spec["initContainers"] = json!(inits);
    }
}

/// Decides creates, deletes and the new status of one job from its pods.
pub(super) fn plan(
    kind: KubeflowKind,
    job: &DynamicObject,
    pods: &[&ChildPod],
    in_flight: &InFlight,
) -> Plan {
    let mut plan = Plan::default();
    let name = job.name_any();
    let ns = job.namespace().unwrap_or_default();
    let old_status = job.data.get("status").cloned().unwrap_or_else(|| json!({}));
    let run_policy = &job.data["spec"]["runPolicy"];
    let clean = str_at(run_policy, &["cleanPodPolicy"]).unwrap_or(kind.default_clean_pod_policy());
    if is_finished(&old_status) {
        for p in pods {
            let remove = match clean {
                "All" => !p.deleting,
                "Running" => p.active(),
                _ => false,
            };
            if remove && !in_flight.contains(&key(&ns, &p.name)) {
                plan.deletes.push(p.name.clone());
            }
        }
        return plan;
    }
    let specs = replica_specs(kind, &job.data);
    let types: Vec<String> = specs.iter().map(|(t, _)| (*t).clone()).collect();
    let master_type = kind.master_type(&types);
    let mut status = old_status.clone();
    if !status.is_object() {
        status = json!({});
    }
    let mut conds: Vec<Value> = status["conditions"].as_array().cloned().unwrap_or_default();
    let kname = kind.kind();
    kf_condition(
        &mut conds,
        "Created",
        &format!("{kname}Created"),
        &format!("{kname} {name} is created."),
    );
    let mut replica_statuses = Map::new();
    let mut expected = 0usize;
    let mut running = 0usize;
    let mut restarting = false;
    let mut failed_msg: Option<String> = None;
    let mut master_succeeded = None::<bool>;
    let mut workers_all_succeeded = true;
    let mut restarts_counted = 0i64;
    for &(rtype, spec) in &specs {
        let rt = rtype.to_lowercase();
        let replicas = spec["replicas"].as_u64().unwrap_or(1) as usize;
        let policy = str_at(spec, &["restartPolicy"]).unwrap_or(kind.default_restart_policy());
        // by replica index (the first pod seen of each), so a job of 1,024
        // workers is not scanned once per replica
        let mine: Vec<&&ChildPod> = pods
            .iter()
            .filter(|p| p.labels.get(REPLICA_TYPE_LABEL).map(String::as_str) == Some(rt.as_str()))
            .collect();
        let mut by_index: HashMap<&str, &ChildPod> = HashMap::new();
        for p in &mine {
            if let Some(i) = p.labels.get(REPLICA_INDEX_LABEL) {
                by_index.entry(i.as_str()).or_insert(**p);
            }
        }
        let (mut active, mut succeeded, mut failed) = (0, 0, 0);
        let mut all_succeeded = replicas > 0;
        for index in 0..replicas {
            expected += 1;
            let pod_name = format!("{name}-{rt}-{index}");
            let k = key(&ns, &pod_name);
            let Some(pod) = by_index.get(index.to_string().as_str()) else {
                all_succeeded = false;
                if !in_flight.contains(&k) {
                    let master = master_type.as_deref() == Some(rtype.as_str())
                        || (master_type.is_none()
                            && kind == KubeflowKind::TFJob
                            && rtype == "Worker"
                            && index == 0);
                    plan.creates
                        .push(make_pod(kind, job, rtype, index, spec, master, policy));
                }
                continue;
            };
            if matches!(policy, "OnFailure" | "Always") {
                restarts_counted += i64::from(pod.restarts);
            }
            match pod.phase() {
                "Running" if !pod.deleting => {
                    active += 1;
                    running += 1;
                    all_succeeded = false;
                }
                "Succeeded" => succeeded += 1,
                "Failed" => {
                    failed += 1;
                    all_succeeded = false;
                    let code = pod.exit_code(kind.default_container()).unwrap_or(1);
                    let retry = match policy {
                        "ExitCode" => code >= 128,
                        "OnFailure" | "Always" => true,
                        _ => false,
                    };
                    if retry {
                        restarting = true;
                        if !pod.deleting && !in_flight.contains(&k) {
                            plan.deletes.push(pod.name.clone());
                        }
                    } else {
                        failed_msg = Some(format!(
                            "{kname} {name} is failed because {failed} {rtype} replica(s) failed."
                        ));
                    }
                }
                _ => {
                    active += 1;
                    all_succeeded = false;
                }
            }
        }
        for p in &mine {
            let idx: Option<usize> = p
                .labels
                .get(REPLICA_INDEX_LABEL)
                .and_then(|i| i.parse().ok());
            if idx.is_none_or(|i| i >= replicas)
                && !p.deleting
                && !in_flight.contains(&key(&ns, &p.name))
            {
                plan.deletes.push(p.name.clone());
            }
        }
        if master_type.as_deref() == Some(rtype.as_str()) {
            master_succeeded = Some(all_succeeded);
        } else if rtype == "Worker" {
            workers_all_succeeded = all_succeeded;
        }
        let mut selector = BTreeMap::new();
        selector.insert(OPERATOR_NAME_LABEL, kind.operator_name().to_owned());
        selector.insert(JOB_NAME_LABEL, name.clone());
        selector.insert(REPLICA_TYPE_LABEL, rt.clone());
        let sel_str = selector
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        replica_statuses.insert(
            rtype.to_owned(),
            json!({
                "active": active,
                "succeeded": succeeded,
                "failed": failed,
                "labelSelector": {"matchLabels": selector},
                "selector": sel_str,
            }),
        );
    }
    let backoff_limit = run_policy["backoffLimit"].as_i64();
    let succeeded = match master_succeeded {
        Some(m) => m,
        None => workers_all_succeeded && !specs.is_empty(),
    };
    if succeeded {
        kf_condition(
            &mut conds,
            "Succeeded",
            &format!("{kname}Succeeded"),
            &format!("{kname} {name} is successfully completed."),
        );
    } else if let Some(msg) = failed_msg {
        kf_condition(&mut conds, "Failed", &format!("{kname}Failed"), &msg);
    } else if backoff_limit.is_some_and(|b| restarts_counted > b) {
        kf_condition(
            &mut conds,
            "Failed",
            "BackoffLimitExceeded",
            &format!(
                "{kname} {name} has failed because it has reached the specified backoff limit"
            ),
        );
    } else if restarting {
        kf_condition(
            &mut conds,
            "Restarting",
            &format!("{kname}Restarting"),
            &format!("{kname} {name} is restarting because some replica(s) failed."),
        );
    } else if expected > 0 && running == expected {
        kf_condition(
            &mut conds,
            "Running",
            &format!("{kname}Running"),
            &format!("{kname} {name} is running."),
        );
    }
    status["conditions"] = json!(conds);
    status["replicaStatuses"] = Value::Object(replica_statuses);
    if status.get("startTime").is_none_or(Value::is_null) {
        status["startTime"] = json!(now_rfc3339());
    }
    if is_finished(&status) && status.get("completionTime").is_none_or(Value::is_null) {
        status["completionTime"] = json!(now_rfc3339());
    }
    if status != old_status {
        status["lastReconcileTime"] = json!(now_rfc3339());
        plan.status = Some(status);
    }
    plan
}
