//! What a real server refuses that a new user easily sends (owner
//! references without uid or with two controllers, changes of immutable
//! ConfigMaps and Secrets, bad taint and toleration effects, bad and
//! negative quantities, `events.k8s.io` Events without their reporting
//! fields, an over-long `fieldManager`, unknown `dryRun` and
//! `fieldValidation` values, unknown fields under `fieldValidation=Strict`)
//! and the PUTs that create a missing object (Leases, Events, Services).

use serde_json::json;

use super::super::scenario::{Body, Keep, Scenario};
use super::{MERGE, cm, core, pod};

fn refused() -> Scenario {
    let mut s = Scenario::namespaced(
        "validation-extras",
        "422s and 400s of the real server: owner references, immutable data, taints, tolerations, quantities, events.k8s.io, options",
    );
    let cms = core("configmaps");
    s.post("owner", &cms, cm("owner", json!({})))
        .capture("uid", "/metadata/uid")
        .keep(Keep::StatusCode);
    let mut no_uid = cm("no-uid", json!({}));
    no_uid["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner"}]);
    s.post("owner-without-uid", &cms, no_uid);
    let mut two = cm("two-controllers", json!({}));
    two["metadata"]["ownerReferences"] = json!([
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "{{uid}}", "controller": true},
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "uid": "00000000-0000-0000-0000-000000000001", "controller": true, "blockOwnerDeletion": true}]);
    s.send(
        "two-controllers",
        "POST",
        &cms,
        Some(Body::Raw(two.to_string())),
    )
    .header("Content-Type", "application/json");
    let mut frozen = cm("frozen", json!({}));
    frozen["immutable"] = json!(true);
    s.post("create-immutable", &cms, frozen)
        .keep(Keep::StatusCode);
    for (step, body) in [
        ("immutable-data", json!({"data": {"k": "changed"}})),
        ("immutable-binary", json!({"binaryData": {"b": "AAAA"}})),
        ("immutable-unset", json!({"immutable": false})),
    ] {
        s.patch(step, &format!("{cms}/frozen"), MERGE, Body::Json(body));
    }
    s.patch(
        "immutable-labels",
        &format!("{cms}/frozen"),
        MERGE,
        Body::Json(json!({"metadata": {"labels": {"x": "y"}}})),
    )
    .keep(Keep::StatusCode);
    let secrets = core("secrets");
    s.post(
        "create-immutable-secret",
        &secrets,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "frozen"}, "immutable": true, "data": {"k": "dg=="}}),
    )
    .keep(Keep::StatusCode);
    s.patch(
        "immutable-secret-data",
        &format!("{secrets}/frozen"),
        MERGE,
        Body::Json(json!({"data": {"k": "dzI="}})),
    );
    s.patch(
        "immutable-secret-string-data",
        &format!("{secrets}/frozen"),
        MERGE,
        Body::Json(json!({"stringData": {"z": "a"}})),
    );
    let node = |name: &str, extra: serde_json::Value| {
        let mut n = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}});
        if let (Some(m), Some(e)) = (n.as_object_mut(), extra.as_object()) {
            m.extend(e.clone());
        }
        n
    };
    s.post(
        "taint-bad-effect",
        "/api/v1/nodes",
        node(
            "cf-ve-taint",
            json!({"spec": {"taints": [{"key": "a", "value": "b", "effect": "Bogus"}]}}),
        ),
    );
    s.post(
        "taint-no-effect",
        "/api/v1/nodes",
        node(
            "cf-ve-taint2",
            json!({"spec": {"taints": [{"key": "a", "value": "b"}]}}),
        ),
    );
    s.post(
        "node-bad-quantity",
        "/api/v1/nodes",
        node("cf-ve-q1", json!({"status": {"capacity": {"cpu": "1x"}}})),
    );
    s.post(
        "node-negative-quantity",
        "/api/v1/nodes",
        node("cf-ve-q2", json!({"status": {"capacity": {"cpu": "-1"}}})),
    );
    let pods = core("pods");
    let mut neg = pod("negative", json!({}));
    neg["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "-1"}});
    s.post("pod-negative-request", &pods, neg);
    let mut bad = pod("bad-quantity", json!({}));
    bad["spec"]["containers"][0]["resources"] = json!({"limits": {"memory": "1.5.5Gi"}});
    s.post("pod-bad-quantity", &pods, bad);
    let mut tol = pod("toleration", json!({}));
    tol["spec"]["tolerations"] =
        json!([{"key": "a", "operator": "Equal", "value": "b", "effect": "Bogus"}]);
    s.post("pod-bad-toleration", &pods, tol);
    let events = "/apis/events.k8s.io/v1/namespaces/{ns}/events";
    let ev = |name: &str| {
        json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": name},
            "eventTime": "2026-12-04T00:00:00.000000Z",
            "regarding": {"kind": "Pod", "name": "p", "namespace": "{ns}"},
            "reason": "Started", "note": "m", "type": "Normal"})
    };
    s.post("event-without-reporting", events, ev("bare"));
    let mut no_reason = ev("no-reason");
    if let Some(m) = no_reason.as_object_mut() {
        m.remove("reason");
        m.insert("reportingController".into(), json!("example.com/c"));
        m.insert("reportingInstance".into(), json!("i"));
        m.insert("action".into(), json!("Start"));
    }
    s.post("event-without-reason", events, no_reason);
    let long = "m".repeat(129);
    s.post(
        "long-field-manager",
        &format!("{cms}?fieldManager={long}"),
        cm("long", json!({})),
    );
    s.post(
        "dry-run-unknown",
        &format!("{cms}?dryRun=Bogus"),
        cm("dry", json!({})),
    );
    s.post(
        "dry-run-two",
        &format!("{cms}?dryRun=All&dryRun=x"),
        cm("dry", json!({})),
    );
    s.delete(
        "delete-dry-run-unknown",
        &format!("{cms}/owner?dryRun=Bogus"),
        None,
    );
    s.patch(
        "patch-dry-run-unknown",
        &format!("{cms}/owner?dryRun=Bogus"),
        MERGE,
        Body::Json(json!({"data": {"x": "y"}})),
    );
    s.post(
        "field-validation-unknown",
        &format!("{cms}?fieldValidation=Bogus"),
        cm("fv", json!({})),
    );
    let mut unknown = cm("strict", json!({}));
    unknown["bogus"] = json!(1);
    s.post(
        "strict-unknown-field",
        &format!("{cms}?fieldValidation=Strict"),
        unknown.clone(),
    );
    let mut unknown_meta = cm("strict-meta", json!({}));
    unknown_meta["metadata"]["bogus2"] = json!(1);
    s.post(
        "strict-unknown-metadata-field",
        &format!("{cms}?fieldValidation=Strict"),
        unknown_meta,
    );
    s.post("warn-unknown-field", &cms, unknown)
        .compare_header("warning")
        .keep(Keep::Only(vec!["/body/bogus", "/body/data"]));
    s
}

fn put_creates() -> Scenario {
    let mut s = Scenario::namespaced(
        "put-creates",
        "PUT to a missing object creates Leases, core and events.k8s.io Events and Services (AllowCreateOnUpdate), and is 404 for the others",
    );
    s.put(
        "lease",
        "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/l1",
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l1"},
            "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15}}),
    )
    .keep(Keep::Only(vec![
        "/body/kind",
        "/body/metadata/name",
        "/body/spec",
    ]));
    s.put(
        "core-event",
        &format!("{}/e1", core("events")),
        json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1"},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": "{ns}"},
            "reason": "R", "message": "m", "type": "Normal", "source": {"component": "c"}}),
    )
    .keep(Keep::Only(vec![
        "/body/kind",
        "/body/metadata/name",
        "/body/reason",
    ]));
    s.put(
        "v1-event",
        "/apis/events.k8s.io/v1/namespaces/{ns}/events/e2",
        json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e2"},
            "eventTime": "2026-12-04T00:00:00.000000Z",
            "regarding": {"kind": "Pod", "name": "p", "namespace": "{ns}"},
            "reason": "R", "note": "m", "type": "Normal",
            "reportingController": "example.com/c", "reportingInstance": "i", "action": "A"}),
    )
    .keep(Keep::Only(vec![
        "/body/kind",
        "/body/metadata/name",
        "/body/note",
    ]));
    s.put(
        "service",
        &format!("{}/s1", core("services")),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s1"},
            "spec": {"ports": [{"port": 80}]}}),
    )
    .keep(Keep::Only(vec!["/body/kind", "/body/metadata/name"]));
    s.put(
        "configmap",
        &format!("{}/c1", core("configmaps")),
        cm("c1", json!({})),
    );
    s.put("pod", &format!("{}/p1", core("pods")), pod("p1", json!({})));
    s.get(
        "lease-stored",
        "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/l1",
    )
    .keep(Keep::Only(vec!["/body/spec"]));
    s
}

pub(super) fn all() -> Vec<Scenario> {
    vec![refused(), put_creates()]
}
