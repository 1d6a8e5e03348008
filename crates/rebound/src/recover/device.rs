//! Device isolation through Dynamic Resource Allocation: one device of a
//! node taken out of scheduling by a `DeviceTaintRule`
//! (`resource.k8s.io/v1beta2`, Kubernetes 1.36 with the
//! `DRADeviceTaintRules` gate and the API served; docs/devices.md), made
//! and removed by rebound, labelled as its own.

use super::RecoverError;
use crate::controller::core::store::dra::{
    DEVICE_TAINT_KEY, DeviceRef, MANAGED_BY, RULE_NODE_LABEL,
};
use k8s_openapi::api::resource::v1beta2::DeviceTaintRule;
use kube::api::{Api, DeleteParams, PostParams};

/// The rule rebound makes for `device` of `node`.
pub fn device_taint_rule(
    rule: &str,
    node: &str,
    device: &DeviceRef,
    value: &str,
    no_execute: bool,
) -> Result<DeviceTaintRule, serde_json::Error> {
    // A label value: at most 63 characters of [A-Za-z0-9._-].
    let value: String = value
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        .take(63)
        .collect();
    serde_json::from_value(serde_json::json!({
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": rule,
            "labels": {MANAGED_BY.0: MANAGED_BY.1, RULE_NODE_LABEL: node},
        },
        "spec": {
            "deviceSelector": {
                "driver": device.driver,
                "pool": device.pool,
                "device": device.device,
            },
            "taint": {
                "key": DEVICE_TAINT_KEY,
                "value": value.trim_matches(|c: char| !c.is_ascii_alphanumeric()),
                "effect": if no_execute { "NoExecute" } else { "NoSchedule" },
            },
        },
    }))
}

/// Create the rule; one of that name already there is taken as made.
/// Returns whether this call made it.
pub async fn isolate_device(
    client: &kube::Client,
    rule: DeviceTaintRule,
) -> Result<bool, RecoverError> {
    let api: Api<DeviceTaintRule> = Api::all(client.clone());
    let name = rule.metadata.name.clone().unwrap_or_default();
    match api.create(&PostParams::default(), &rule).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(source) => Err(RecoverError::Api {
            target: format!("devicetaintrule/{name}"),
            request: "create devicetaintrules".into(),
            requests: 1,
            source,
        }),
    }
}

/// Delete the rule; one already gone is taken as deleted.
pub async fn lift_device(client: &kube::Client, rule: &str) -> Result<(), RecoverError> {
    let api: Api<DeviceTaintRule> = Api::all(client.clone());
    match api.delete(rule, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(source) => Err(RecoverError::Api {
            target: format!("devicetaintrule/{rule}"),
            request: "delete devicetaintrules".into(),
            requests: 1,
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_selects_one_device_and_carries_rebounds_labels() {
        let d = DeviceRef {
            driver: "gpu.nvidia.com".into(),
            pool: "node-a".into(),
            device: "gpu-3".into(),
        };
        let r = device_taint_rule("rebound-gpu-3-x", "node-a", &d, "48", false).expect("rule");
        let v = serde_json::to_value(&r).expect("json");
        assert_eq!(v["spec"]["deviceSelector"]["device"], "gpu-3");
        assert_eq!(v["spec"]["deviceSelector"]["pool"], "node-a");
        assert_eq!(v["spec"]["taint"]["effect"], "NoSchedule");
        assert_eq!(v["spec"]["taint"]["key"], DEVICE_TAINT_KEY);
        assert_eq!(v["spec"]["taint"]["value"], "48");
        assert_eq!(v["metadata"]["labels"][RULE_NODE_LABEL], "node-a");
        let r = device_taint_rule("x", "n", &d, "GPU fell/off!", true).expect("rule");
        let v = serde_json::to_value(&r).expect("json");
        assert_eq!(v["spec"]["taint"]["effect"], "NoExecute");
        assert_eq!(v["spec"]["taint"]["value"], "GPUfelloff", "a label value");
    }
}

/// The validation Job rebound runs on `node` from the admin's `spec` (a
/// batch/v1 JobSpec): its pod pinned to the node, every container given
/// `env`, `backoffLimit` 0 and `activeDeadlineSeconds` the timeout unless
/// the spec sets them, labelled as rebound's.
pub fn validation_job(
    namespace: &str,
    job: &str,
    node: &str,
    what: &str,
    spec: &serde_json::Value,
    env: &[(String, String)],
    timeout: std::time::Duration,
) -> Result<k8s_openapi::api::batch::v1::Job, serde_json::Error> {
    let mut spec = spec.clone();
    if spec.get("backoffLimit").is_none() {
        spec["backoffLimit"] = serde_json::json!(0);
    }
    if spec.get("activeDeadlineSeconds").is_none() {
        spec["activeDeadlineSeconds"] = serde_json::json!(timeout.as_secs().max(1));
    }
    let pod = &mut spec["template"]["spec"];
    pod["nodeName"] = serde_json::json!(node);
    let vars: Vec<serde_json::Value> = env
        .iter()
        .map(|(k, v)| serde_json::json!({"name": k, "value": v}))
        .collect();
    for key in ["initContainers", "containers"] {
        if let Some(cs) = pod.get_mut(key).and_then(|c| c.as_array_mut()) {
            for c in cs {
                let mut all = c["env"].as_array().cloned().unwrap_or_default();
                all.retain(|e| !env.iter().any(|(k, _)| e["name"] == k.as_str()));
                all.extend(vars.iter().cloned());
                c["env"] = serde_json::Value::Array(all);
            }
        }
    }
    serde_json::from_value(serde_json::json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job,
            "namespace": namespace,
            "labels": {MANAGED_BY.0: MANAGED_BY.1, RULE_NODE_LABEL: node,
                       "rebound.dev/validation": what},
        },
        "spec": spec,
    }))
}

/// How a validation Job stands: `Running`, `Succeeded` or `Failed: why`.
pub fn validation_state(j: &k8s_openapi::api::batch::v1::Job) -> String {
    let status = j.status.as_ref();
    if status.and_then(|s| s.succeeded).unwrap_or(0) > 0 {
        return "Succeeded".into();
    }
    let failed = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "Failed" && c.status == "True");
    match failed {
        Some(c) => format!(
            "Failed: failed ({}{})",
            c.reason.as_deref().unwrap_or("Failed"),
            c.message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        ),
        None => "Running".into(),
    }
}

/// Create the validation Job (one already there is kept: a retry, or a
/// new controller finding the run of this isolation), then read it.
pub async fn run_validation(
    client: &kube::Client,
    job: k8s_openapi::api::batch::v1::Job,
) -> Result<Option<String>, RecoverError> {
    let ns = job.metadata.namespace.clone().unwrap_or_default();
    let name = job.metadata.name.clone().unwrap_or_default();
    let api: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), &ns);
    match api.create(&PostParams::default(), &job).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(source) => {
            return Err(RecoverError::Api {
                target: format!("job {ns}/{name}"),
                request: "create jobs".into(),
                requests: 1,
                source,
            });
        }
    }
    read_validation(client, &ns, &name).await
}

/// Read a validation Job's state; `None` when it does not exist.
pub async fn read_validation(
    client: &kube::Client,
    namespace: &str,
    job: &str,
) -> Result<Option<String>, RecoverError> {
    let api: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), namespace);
    match api.get_opt(job).await {
        Ok(j) => Ok(j.as_ref().map(validation_state)),
        Err(source) => Err(RecoverError::Api {
            target: format!("job {namespace}/{job}"),
            request: "get jobs".into(),
            requests: 1,
            source,
        }),
    }
}

#[cfg(test)]
mod validation_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_validation_job_is_pinned_to_the_node_and_told_the_device() {
        let spec = json!({"template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "diag", "image": "dcgm", "env": [{"name": "KEEP", "value": "1"}]}]}}});
        let env = vec![("REBOUND_DEVICE".to_string(), "gpu-3".to_string())];
        let j = validation_job(
            "rebound-system",
            "rebound-validate-x",
            "n1",
            "device",
            &spec,
            &env,
            std::time::Duration::from_secs(600),
        )
        .expect("job");
        let v = serde_json::to_value(&j).expect("json");
        assert_eq!(v["spec"]["template"]["spec"]["nodeName"], "n1");
        assert_eq!(v["spec"]["backoffLimit"], 0);
        assert_eq!(v["spec"]["activeDeadlineSeconds"], 600);
        let envs = &v["spec"]["template"]["spec"]["containers"][0]["env"];
        assert_eq!(envs[0]["name"], "KEEP");
        assert_eq!(envs[1]["value"], "gpu-3");
        assert_eq!(
            v["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "rebound"
        );
    }

    #[test]
    fn a_jobs_state_is_read_from_its_status() {
        let job = |status: serde_json::Value| -> k8s_openapi::api::batch::v1::Job {
            serde_json::from_value(json!({"metadata": {"name": "j"}, "status": status}))
                .expect("job")
        };
        assert_eq!(validation_state(&job(json!({"active": 1}))), "Running");
        assert_eq!(validation_state(&job(json!({"succeeded": 1}))), "Succeeded");
        let failed = validation_state(&job(json!({"failed": 1, "conditions": [
            {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]})));
        assert!(
            failed.starts_with("Failed: failed (BackoffLimitExceeded"),
            "{failed}"
        );
    }
}
