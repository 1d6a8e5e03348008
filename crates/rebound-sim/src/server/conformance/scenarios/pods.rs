//! Pods as the simulated job operators and `rebound inject` make them:
//! the server's defaults, quantities, validation (sidecars and container
//! restart rules, which in-place recovery depends on), binding and logs.

use serde_json::{Value, json};

use super::super::scenario::{Keep, Scenario};
use super::{core, pod};

fn with_spec(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
}

fn main_c() -> Value {
    json!({"name": "main", "image": "busybox"})
}

fn agent(rules: Value, policy: Value) -> Value {
    let mut a = json!({"name": "rebound-restart-agent", "image": "rebound:0.1.0",
        "startupProbe": {"httpGet": {"path": "/barrier", "port": 9079}, "periodSeconds": 1, "failureThreshold": 86400}});
    if !policy.is_null() {
        a["restartPolicy"] = policy;
    }
    if !rules.is_null() {
        a["restartPolicyRules"] = rules;
    }
    a
}

fn rule(action: &str, op: &str, values: Value) -> Value {
    json!([{"action": action, "exitCodes": {"operator": op, "values": values}}])
}

fn defaults() -> Scenario {
    let mut s = Scenario::namespaced(
        "pod-defaults",
        "a pod as created: every default the server fills in, quantities canonicalised, QoS",
    );
    let pods = core("pods");
    s.post("create", &pods, json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "d", "labels": {"training.kubeflow.org/job-name": "llm"}, "annotations": {"a": "b"}},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36", "command": ["sleep"], "args": ["3600"],
            "ports": [{"containerPort": 23456, "name": "pytorchjob-port"}],
            "env": [{"name": "RANK", "value": "0"}],
            "resources": {"requests": {"cpu": "1000m", "memory": "1024Mi", "nvidia.com/gpu": "8"},
                          "limits": {"cpu": "2", "memory": "2Gi", "nvidia.com/gpu": "8"}}}],
            "tolerations": [{"key": "rebound.dev/simulated-node", "operator": "Exists", "effect": "NoSchedule"}]}}));
    s.post("create-minimal", &pods, pod("m", json!({})));
    s.post("create-sidecar", &pods, with_spec("sc", json!({"initContainers": [agent(rule("RestartAllContainers", "In", json!([87])), json!("Always"))],
        "containers": [main_c()]})))
        .keep(Keep::Only(vec!["/status", "/body/spec/initContainers", "/body/status"]));
    s.post("create-quantities", &pods, with_spec("q", json!({"containers": [{"name": "c", "image": "busybox",
        "resources": {"requests": {"cpu": "0.5", "memory": "1e3"}, "limits": {"cpu": "1.5", "memory": "1000000k"}}}]})))
        .keep(Keep::Only(vec!["/status", "/body/spec/containers/*/resources", "/body/status/qosClass"]));
    s.get("log-unscheduled", &format!("{pods}/m/log"));
    s.get("log-bad-container", &format!("{pods}/m/log?container=nope"));
    s
}

fn validation() -> Scenario {
    let mut s = Scenario::namespaced(
        "pod-validation",
        "pod validation: containers, restart policies, sidecars and container restart rules (in-place recovery)",
    );
    let pods = core("pods");
    let cases: Vec<(&'static str, Value)> = vec![
        ("no-containers", json!({"containers": []})),
        ("no-image", json!({"containers": [{"name": "c"}]})),
        (
            "duplicate-names",
            json!({"containers": [main_c(), main_c()]}),
        ),
        (
            "bad-container-name",
            json!({"containers": [{"name": "Main_1", "image": "busybox"}]}),
        ),
        (
            "bad-restart-policy",
            json!({"restartPolicy": "Sometimes", "containers": [main_c()]}),
        ),
        (
            "limits-below-requests",
            json!({"containers": [{"name": "c", "image": "busybox",
            "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}]}),
        ),
        (
            "gpu-request-without-limit",
            json!({"containers": [{"name": "c", "image": "busybox",
            "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}),
        ),
        (
            "bad-quantity",
            json!({"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "one"}}}]}),
        ),
        (
            "sidecar-ok",
            json!({"initContainers": [agent(rule("RestartAllContainers", "In", json!([87])), json!("Always"))], "containers": [main_c()]}),
        ),
        (
            "sidecar-no-rules",
            json!({"initContainers": [agent(Value::Null, json!("Always"))], "containers": [main_c()]}),
        ),
        (
            "init-restart-on-failure",
            json!({"initContainers": [agent(Value::Null, json!("OnFailure"))], "containers": [main_c()]}),
        ),
        (
            "init-rules-without-policy",
            json!({"initContainers": [agent(rule("RestartAllContainers", "In", json!([87])), Value::Null)], "containers": [main_c()]}),
        ),
        (
            "init-rules-never",
            json!({"initContainers": [agent(rule("RestartAllContainers", "In", json!([87])), json!("Never"))], "containers": [main_c()]}),
        ),
        (
            "rules-bad-action",
            json!({"initContainers": [agent(rule("Explode", "In", json!([87])), json!("Always"))], "containers": [main_c()]}),
        ),
        (
            "rules-bad-operator",
            json!({"initContainers": [agent(rule("RestartAllContainers", "Maybe", json!([87])), json!("Always"))], "containers": [main_c()]}),
        ),
        (
            "rules-no-values",
            json!({"initContainers": [agent(rule("RestartAllContainers", "In", json!([])), json!("Always"))], "containers": [main_c()]}),
        ),
        (
            "rules-no-exit-codes",
            json!({"initContainers": [agent(json!([{"action": "RestartAllContainers"}]), json!("Always"))], "containers": [main_c()]}),
        ),
        (
            "rules-notin-zero",
            json!({"initContainers": [agent(rule("RestartAllContainers", "NotIn", json!([0])), json!("Always"))], "containers": [main_c()]}),
        ),
        (
            "rules-duplicate-values",
            json!({"initContainers": [agent(rule("RestartAllContainers", "In", json!([87, 87])), json!("Always"))], "containers": [main_c()]}),
        ),
        (
            "rules-negative-value",
            json!({"initContainers": [agent(rule("RestartAllContainers", "In", json!([-1])), json!("Always"))], "containers": [main_c()]}),
        ),
        (
            "container-restart-action",
            json!({"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox", "restartPolicy": "Never",
            "restartPolicyRules": rule("Restart", "In", json!([42]))}]}),
        ),
        (
            "container-restart-all",
            json!({"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox", "restartPolicy": "Never",
            "restartPolicyRules": rule("RestartAllContainers", "In", json!([42]))}]}),
        ),
        (
            "container-rules-without-policy",
            json!({"containers": [{"name": "main", "image": "busybox",
            "restartPolicyRules": rule("Restart", "In", json!([42]))}]}),
        ),
        (
            "container-policy-always",
            json!({"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox", "restartPolicy": "Always"}]}),
        ),
        (
            "container-policy-onfailure",
            json!({"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox", "restartPolicy": "OnFailure"}]}),
        ),
        (
            "sidecar-with-lifecycle",
            json!({"initContainers": [{"name": "s", "image": "busybox", "restartPolicy": "Always",
            "lifecycle": {"preStop": {"exec": {"command": ["true"]}}}, "readinessProbe": {"exec": {"command": ["true"]}}}], "containers": [main_c()]}),
        ),
        (
            "regular-init-with-probe",
            json!({"initContainers": [{"name": "s", "image": "busybox", "readinessProbe": {"exec": {"command": ["true"]}}}], "containers": [main_c()]}),
        ),
        (
            "bad-toleration",
            json!({"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}], "containers": [main_c()]}),
        ),
        (
            "bad-env-name",
            json!({"containers": [{"name": "c", "image": "busybox", "env": [{"name": ""}]}]}),
        ),
        (
            "bad-port",
            json!({"containers": [{"name": "c", "image": "busybox", "ports": [{"containerPort": 70000}]}]}),
        ),
    ];
    for (name, spec) in cases {
        s.post(name, &pods, with_spec(name, spec))
            .keep(Keep::Only(vec![
                "/status",
                "/body/kind",
                "/body/reason",
                "/body/message",
                "/body/details",
            ]));
    }
    s.post("update-base", &pods, with_spec("upd", json!({"initContainers": [agent(rule("RestartAllContainers", "In", json!([87])), json!("Always"))], "containers": [main_c()]})))
        .keep(Keep::StatusCode);
    s.patch(
        "update-image",
        &format!("{pods}/upd"),
        super::STRATEGIC,
        super::super::scenario::Body::Json(
            json!({"spec": {"containers": [{"name": "main", "image": "busybox:2"}]}}),
        ),
    )
    .keep(Keep::Only(vec!["/status", "/body/spec/containers/0/image"]));
    s.patch("update-rules-forbidden", &format!("{pods}/upd"), super::JSONPATCH,
        super::super::scenario::Body::Json(json!([{"op": "replace", "path": "/spec/initContainers/0/restartPolicyRules/0/exitCodes/values", "value": [88]}])))
        .keep(Keep::Only(vec!["/status", "/body/reason", "/body/details"]));
    s
}

pub(super) fn all() -> Vec<Scenario> {
    vec![defaults(), validation()]
}
