//! Writes: create, get, update, every patch type, server-side apply and
//! managedFields, optimistic concurrency, no-op writes, errors.

use serde_json::json;

use super::super::scenario::{Body, Keep, Scenario};
use super::{APPLY, JSONPATCH, MERGE, STRATEGIC, cm, core, pod};

fn crud() -> Scenario {
    let mut s = Scenario::namespaced(
        "configmap-crud",
        "create, get, update, delete of a ConfigMap and their errors",
    );
    let cms = core("configmaps");
    s.post("create", &cms, cm("a", json!({"app": "x"})))
        .capture("rv", "/metadata/resourceVersion");
    s.post("create-again", &cms, cm("a", json!({})));
    s.get("get", &format!("{cms}/a"));
    s.get("get-missing", &format!("{cms}/missing"));
    s.put("update", &format!("{cms}/a"), json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a", "resourceVersion": "{{rv}}", "labels": {"app": "y"}}, "data": {"k": "w"}}));
    s.put(
        "update-stale",
        &format!("{cms}/a"),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a", "resourceVersion": "{{rv}}"}, "data": {"k": "z"}}),
    );
    s.put(
        "update-without-rv",
        &format!("{cms}/a"),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a"}, "data": {"k": "z"}}),
    );
    s.put(
        "update-same",
        &format!("{cms}/a"),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a"}, "data": {"k": "z"}}),
    );
    s.put(
        "update-name-mismatch",
        &format!("{cms}/a"),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "b"}, "data": {}}),
    );
    s.put(
        "update-missing",
        &format!("{cms}/missing"),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "missing"}, "data": {}}),
    );
    s.post(
        "create-generate-name",
        &cms,
        json!({"metadata": {"generateName": "gen-"}, "data": {}}),
    );
    s.post("create-no-name", &cms, json!({"metadata": {}, "data": {}}));
    s.post(
        "create-bad-name",
        &cms,
        json!({"metadata": {"name": "Not_Valid"}, "data": {}}),
    );
    s.post(
        "create-bad-label",
        &cms,
        json!({"metadata": {"name": "l", "labels": {"bad key": "-x"}}}),
    );
    s.post(
        "create-bad-data-key",
        &cms,
        json!({"metadata": {"name": "d"}, "data": {"bad key!": "v"}}),
    );
    s.post(
        "create-other-namespace",
        &cms,
        json!({"metadata": {"name": "o", "namespace": "default"}}),
    );
    s.post(
        "create-wrong-kind",
        &cms,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "w"}}),
    );
    s.send(
        "create-not-json",
        "POST",
        &cms,
        Some(Body::Raw("{not json".into())),
    );
    s.post(
        "create-in-missing-namespace",
        "/api/v1/namespaces/cf-missing-ns/configmaps",
        cm("x", json!({})),
    );
    s.post(
        "dry-run",
        &format!("{cms}?dryRun=All"),
        cm("dry", json!({})),
    );
    s.get("dry-run-not-stored", &format!("{cms}/dry"));
    s.delete("delete", &format!("{cms}/a"), None);
    s.get("deleted", &format!("{cms}/a"));
    s.delete("delete-missing", &format!("{cms}/a"), None);
    s
}

fn patches() -> Scenario {
    let mut s = Scenario::namespaced(
        "patch-types",
        "merge, JSON and strategic merge patches; their errors",
    );
    let cms = core("configmaps");
    s.post("create-cm", &cms, cm("p", json!({"a": "1"})))
        .capture("rv", "/metadata/resourceVersion");
    s.patch(
        "merge",
        &format!("{cms}/p"),
        MERGE,
        Body::Json(json!({"metadata": {"labels": {"b": "2", "a": null}}, "data": {"x": "y"}})),
    );
    s.patch(
        "merge-noop",
        &format!("{cms}/p"),
        MERGE,
        Body::Json(json!({"data": {"x": "y"}})),
    );
    s.patch(
        "merge-stale-rv",
        &format!("{cms}/p"),
        MERGE,
        Body::Json(json!({"metadata": {"resourceVersion": "{{rv}}"}, "data": {"x": "z"}})),
    );
    s.patch("json", &format!("{cms}/p"), JSONPATCH, Body::Json(json!([{"op": "add", "path": "/data/j", "value": "1"}, {"op": "remove", "path": "/data/x"}])));
    s.patch(
        "json-test-fails",
        &format!("{cms}/p"),
        JSONPATCH,
        Body::Json(json!([{"op": "test", "path": "/data/j", "value": "2"}])),
    );
    s.patch(
        "json-bad-path",
        &format!("{cms}/p"),
        JSONPATCH,
        Body::Json(json!([{"op": "remove", "path": "/data/nope"}])),
    );
    s.patch(
        "strategic-cm",
        &format!("{cms}/p"),
        STRATEGIC,
        Body::Json(json!({"data": {"s": "1"}})),
    );
    s.patch(
        "missing",
        &format!("{cms}/missing"),
        MERGE,
        Body::Json(json!({"data": {}})),
    );
    s.patch(
        "unknown-content-type",
        &format!("{cms}/p"),
        "text/plain",
        Body::Raw("x".into()),
    );
    s.patch(
        "not-json",
        &format!("{cms}/p"),
        MERGE,
        Body::Raw("{".into()),
    );
    let pods = core("pods");
    s.post("create-pod", &pods, json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sp"},
        "spec": {"containers": [{"name": "a", "image": "busybox", "env": [{"name": "A", "value": "1"}]},
                                {"name": "b", "image": "busybox"}],
                 "tolerations": [{"key": "k", "operator": "Exists"}]}}))
        .keep(Keep::StatusCode);
    s.patch(
        "strategic-pod-containers",
        &format!("{pods}/sp"),
        STRATEGIC,
        Body::Json(json!({"spec": {"containers": [{"name": "b", "image": "busybox:2"}]}})),
    )
    .keep(Keep::Only(vec![
        "/body/spec/containers",
        "/body/spec/tolerations",
    ]));
    s.patch("strategic-pod-delete-directive", &format!("{pods}/sp"), STRATEGIC,
        Body::Json(json!({"metadata": {"labels": {"x": "1"}, "annotations": {"a": "b"}}, "spec": {"containers": [{"name": "a", "env": [{"name": "A", "$patch": "delete"}]}]}})))
        .keep(Keep::Only(vec!["/body/spec/containers", "/body/metadata/labels", "/body/metadata/annotations"]));
    s.patch(
        "strategic-pod-forbidden",
        &format!("{pods}/sp"),
        STRATEGIC,
        Body::Json(json!({"spec": {"restartPolicy": "Never"}})),
    );
    s.patch(
        "json-pod-node-name",
        &format!("{pods}/sp"),
        JSONPATCH,
        Body::Json(json!([{"op": "add", "path": "/spec/nodeName", "value": "n1"}])),
    );
    s
}

fn apply() -> Scenario {
    let mut s = Scenario::namespaced(
        "server-side-apply",
        "server-side apply: create, managers, conflicts, force, removal, no-op, managedFields",
    );
    let cms = core("configmaps");
    let cfg = |data: serde_json::Value| {
        Body::Json(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa", "labels": {"l": "1"}}, "data": data}),
        )
    };
    s.patch(
        "apply-create",
        &format!("{cms}/ssa?fieldManager=alice"),
        APPLY,
        cfg(json!({"a": "1", "b": "2"})),
    );
    s.patch(
        "apply-same",
        &format!("{cms}/ssa?fieldManager=alice"),
        APPLY,
        cfg(json!({"a": "1", "b": "2"})),
    );
    s.patch(
        "apply-conflict",
        &format!("{cms}/ssa?fieldManager=bob"),
        APPLY,
        cfg(json!({"a": "other"})),
    );
    s.patch(
        "apply-shared",
        &format!("{cms}/ssa?fieldManager=bob"),
        APPLY,
        cfg(json!({"a": "1"})),
    );
    s.patch(
        "apply-force",
        &format!("{cms}/ssa?fieldManager=bob&force=true"),
        APPLY,
        cfg(json!({"a": "bob"})),
    );
    s.patch(
        "apply-drop-field",
        &format!("{cms}/ssa?fieldManager=alice"),
        APPLY,
        cfg(json!({"a": "bob"})),
    );
    s.patch(
        "update-by-merge",
        &format!("{cms}/ssa?fieldManager=carol"),
        MERGE,
        Body::Json(json!({"data": {"c": "3"}})),
    );
    s.patch(
        "apply-yaml",
        &format!("{cms}/ssa?fieldManager=dave"),
        APPLY,
        Body::Raw(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  d: \"4\"\n".into(),
        ),
    );
    s.patch(
        "apply-no-manager",
        &format!("{cms}/ssa"),
        APPLY,
        cfg(json!({"e": "5"})),
    );
    s.patch(
        "apply-wrong-name",
        &format!("{cms}/other?fieldManager=alice"),
        APPLY,
        cfg(json!({})),
    );
    s.patch(
        "apply-bad-yaml",
        &format!("{cms}/ssa?fieldManager=alice"),
        APPLY,
        Body::Raw("a: [".into()),
    );
    s.get("get", &format!("{cms}/ssa"));
    s.post("create-plain", &cms, cm("plain", json!({})));
    s.put(
        "put-plain",
        &format!("{cms}/plain?fieldManager=erin"),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "plain", "labels": {"x": "y"}}, "data": {"k": "v2"}}),
    );
    let pods = core("pods");
    s.patch(
        "apply-pod",
        &format!("{pods}/ap?fieldManager=alice"),
        APPLY,
        Body::Json(pod("ap", json!({"app": "a"}))),
    )
    .keep(Keep::Only(vec!["/body/metadata/managedFields"]));
    s.patch(
        "apply-pod-status",
        &format!("{pods}/ap/status?fieldManager=kubelet"),
        APPLY,
        Body::Json(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ap"},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
        ),
    )
    .keep(Keep::Only(vec![
        "/body/metadata/managedFields",
        "/body/status/conditions",
    ]));
    s
}

fn status() -> Scenario {
    let mut s = Scenario::namespaced(
        "status-subresource",
        "status writes change only status (pods: also labels); main writes keep status; generation",
    );
    let pods = core("pods");
    s.post("create-pod-with-status", &pods, json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "st"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}, "status": {"phase": "Running"}}))
        .keep(Keep::Only(vec!["/body/status", "/body/metadata/generation"]));
    s.patch("status-patch", &format!("{pods}/st/status"), MERGE,
        Body::Json(json!({"metadata": {"labels": {"s": "1"}}, "spec": {"activeDeadlineSeconds": 5}, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})))
        .keep(Keep::Only(vec!["/body/status", "/body/metadata/labels", "/body/spec/activeDeadlineSeconds", "/body/metadata/generation"]));
    s.patch(
        "main-patch-ignores-status",
        &format!("{pods}/st"),
        MERGE,
        Body::Json(json!({"spec": {"activeDeadlineSeconds": 100}, "status": {"phase": "Failed"}})),
    )
    .keep(Keep::Only(vec![
        "/body/status/phase",
        "/body/spec/activeDeadlineSeconds",
        "/body/metadata/generation",
    ]));
    s.patch(
        "label-patch-keeps-generation",
        &format!("{pods}/st"),
        MERGE,
        Body::Json(json!({"metadata": {"labels": {"t": "2"}}})),
    )
    .keep(Keep::Only(vec![
        "/body/metadata/generation",
        "/body/metadata/labels",
    ]));
    s.get("get-status", &format!("{pods}/st/status"))
        .keep(Keep::Only(vec!["/body/kind", "/body/status/phase"]));
    s.put("status-put-phase-back", &format!("{pods}/st/status"), json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "st"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}, "status": {"phase": "Pending"}}));
    s.post("node", "/api/v1/nodes", json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cf-status-node", "labels": {"a": "b"}},
        "status": {"capacity": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "8"}}}))
        .keep(Keep::Only(vec!["/body/status/capacity", "/body/status/allocatable", "/body/metadata/labels"]));
    s.patch("node-status-condition", "/api/v1/nodes/cf-status-node/status", STRATEGIC,
        Body::Json(json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok",
            "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})))
        .keep(Keep::Only(vec!["/body/status/conditions"]));
    s.patch(
        "cordon",
        "/api/v1/nodes/cf-status-node",
        STRATEGIC,
        Body::Json(json!({"spec": {"unschedulable": true}})),
    )
    .keep(Keep::Only(vec![
        "/body/spec/unschedulable",
        "/body/status/conditions/*/type",
    ]));
    s.patch("taint", "/api/v1/nodes/cf-status-node", MERGE,
        Body::Json(json!({"spec": {"taints": [{"key": "rebound.dev/fault", "value": "xid-79", "effect": "NoSchedule"}]}})))
        .keep(Keep::Only(vec!["/body/spec/taints"]));
    s.delete("delete-node", "/api/v1/nodes/cf-status-node", None)
        .keep(Keep::Only(vec![
            "/body/kind",
            "/body/status",
            "/body/details",
        ]));
    s
}

pub(super) fn all() -> Vec<Scenario> {
    vec![crud(), patches(), apply(), status()]
}
