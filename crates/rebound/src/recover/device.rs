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
