//! Deletion: grace periods of pods (bound, unbound, terminal),
//! preconditions, finalizers, owner references and the garbage collector
//! (background, foreground, orphan), deletecollection, namespace
//! termination.

use serde_json::json;

use super::super::scenario::{Body, Keep, Scenario, Wait};
use super::{MERGE, cm, core, pod};

const GONE: Wait = Wait::Status(404);

fn pods() -> Scenario {
    let mut s = Scenario::namespaced(
        "pod-deletion",
        "pod deletion: unbound and terminal pods go at once, bound ones wait for their kubelet (grace), preconditions",
    );
    let pods = core("pods");
    let meta = Keep::Only(vec![
        "/body/kind",
        "/body/metadata/deletionTimestamp",
        "/body/metadata/deletionGracePeriodSeconds",
        "/body/status/phase",
        "/body/details",
    ]);
    s.post("unbound", &pods, pod("u", json!({})))
        .keep(Keep::StatusCode);
    s.delete("delete-unbound", &format!("{pods}/u"), None)
        .keep(meta.clone());
    s.get("unbound-gone", &format!("{pods}/u"))
        .keep(Keep::StatusCode);
    s.post("bound", &pods, pod("b", json!({})))
        .keep(Keep::StatusCode);
    s.post("bind", &format!("{pods}/b/binding"), json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "b"}, "target": {"kind": "Node", "name": "cf-pd-node"}}))
        .keep(Keep::StatusCode);
    s.post("bind-again", &format!("{pods}/b/binding"), json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "b"}, "target": {"kind": "Node", "name": "other"}}));
    s.delete(
        "delete-bound",
        &format!("{pods}/b"),
        Some(json!({"gracePeriodSeconds": 20})),
    )
    .keep(meta.clone());
    s.delete(
        "delete-bound-again-shorter",
        &format!("{pods}/b"),
        Some(json!({"gracePeriodSeconds": 5})),
    )
    .keep(meta.clone());
    s.get("bound-still-there", &format!("{pods}/b"))
        .keep(meta.clone());
    s.patch(
        "label-terminating",
        &format!("{pods}/b"),
        MERGE,
        Body::Json(json!({"metadata": {"labels": {"x": "y"}}})),
    )
    .keep(Keep::StatusCode);
    s.delete(
        "delete-bound-now",
        &format!("{pods}/b"),
        Some(json!({"gracePeriodSeconds": 0})),
    )
    .keep(meta.clone());
    s.get("bound-gone", &format!("{pods}/b"))
        .keep(Keep::StatusCode);
    s.post("terminal", &pods, pod("t", json!({})))
        .keep(Keep::StatusCode);
    s.post("bind-terminal", &format!("{pods}/t/binding"), json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "t"}, "target": {"kind": "Node", "name": "cf-pd-node"}}))
        .keep(Keep::StatusCode);
    s.patch(
        "terminal-succeeded",
        &format!("{pods}/t/status"),
        MERGE,
        Body::Json(json!({"status": {"phase": "Succeeded"}})),
    )
    .keep(Keep::StatusCode);
    s.delete("delete-terminal", &format!("{pods}/t"), None)
        .keep(meta.clone());
    s.get("terminal-gone", &format!("{pods}/t"))
        .keep(Keep::StatusCode);
    s.post("pre", &pods, pod("pre", json!({})))
        .keep(Keep::StatusCode);
    s.delete(
        "precondition-uid",
        &format!("{pods}/pre"),
        Some(json!({"preconditions": {"uid": "00000000-0000-4000-8000-000000000000"}})),
    );
    s.delete(
        "precondition-rv",
        &format!("{pods}/pre"),
        Some(json!({"preconditions": {"resourceVersion": "1"}})),
    );
    s.post(
        "evict",
        &format!("{pods}/pre/eviction"),
        json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "pre"}}),
    );
    s.get("evicted", &format!("{pods}/pre"))
        .keep(Keep::StatusCode);
    s.delete(
        "delete-bad-propagation",
        &format!("{pods}/none?propagationPolicy=Sideways"),
        None,
    );
    s
}

fn finalizers() -> Scenario {
    let mut s = Scenario::namespaced(
        "finalizers",
        "an object with a finalizer stays, terminating, until the last finalizer goes; one DELETED event",
    );
    let cms = core("configmaps");
    s.post(
        "create",
        &cms,
        json!({"metadata": {"name": "f", "finalizers": ["example.com/hold"]}, "data": {}}),
    )
    .capture("rv", "/metadata/resourceVersion");
    s.watch(
        "watch",
        "w",
        &format!("{cms}?watch=1&resourceVersion={{{{rv}}}}"),
    );
    s.delete("delete", &format!("{cms}/f"), None);
    s.get("terminating", &format!("{cms}/f"));
    s.patch(
        "add-finalizer",
        &format!("{cms}/f"),
        MERGE,
        Body::Json(json!({"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}})),
    );
    s.patch(
        "change-data",
        &format!("{cms}/f"),
        MERGE,
        Body::Json(json!({"data": {"x": "1"}})),
    )
    .keep(Keep::StatusCode);
    s.delete("delete-again", &format!("{cms}/f"), None)
        .keep(Keep::Only(vec![
            "/body/metadata/deletionTimestamp",
            "/body/kind",
        ]));
    s.patch(
        "remove-finalizer",
        &format!("{cms}/f"),
        MERGE,
        Body::Json(json!({"metadata": {"finalizers": null}})),
    );
    s.get("gone", &format!("{cms}/f"));
    s.events("events", "w", super::super::scenario::Until::Count(3));
    s
}

fn gc() -> Scenario {
    let mut s = Scenario::namespaced(
        "garbage-collection",
        "owner references: background, foreground and orphan deletion (the garbage collector acts later)",
    );
    let cms = core("configmaps");
    let owned = |name: &str, owner: &str, uid: &str| json!({"metadata": {"name": name, "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": owner, "uid": uid}]}, "data": {}});
    for (step, o, var) in [
        ("owner-bg", "bg", "bguid"),
        ("owner-fg", "fg", "fguid"),
        ("owner-or", "or", "oruid"),
    ] {
        s.post(step, &cms, cm(o, json!({})))
            .capture(var, "/metadata/uid")
            .keep(Keep::StatusCode);
    }
    s.post("dep-bg", &cms, owned("bg-dep", "bg", "{{bguid}}"))
        .keep(Keep::Only(vec!["/body/metadata/ownerReferences"]));
    s.post("dep-fg", &cms, owned("fg-dep", "fg", "{{fguid}}"))
        .keep(Keep::StatusCode);
    s.post("dep-or", &cms, owned("or-dep", "or", "{{oruid}}"))
        .keep(Keep::StatusCode);
    s.delete(
        "delete-bg",
        &format!("{cms}/bg"),
        Some(json!({"propagationPolicy": "Background"})),
    );
    s.get("bg-dep-collected", &format!("{cms}/bg-dep"))
        .wait(GONE)
        .keep(Keep::StatusCode);
    s.delete(
        "delete-fg",
        &format!("{cms}/fg"),
        Some(json!({"propagationPolicy": "Foreground"})),
    )
    .keep(Keep::Only(vec![
        "/body/metadata/finalizers",
        "/body/metadata/deletionTimestamp",
        "/body/kind",
    ]));
    s.get("fg-owner-gone", &format!("{cms}/fg"))
        .wait(GONE)
        .keep(Keep::StatusCode);
    s.get("fg-dep-gone", &format!("{cms}/fg-dep"))
        .keep(Keep::StatusCode);
    s.delete(
        "delete-orphan",
        &format!("{cms}/or"),
        Some(json!({"propagationPolicy": "Orphan"})),
    )
    .keep(Keep::Only(vec!["/body/metadata/finalizers", "/body/kind"]));
    s.get("or-owner-gone", &format!("{cms}/or"))
        .wait(GONE)
        .keep(Keep::StatusCode);
    s.get("or-dep-kept", &format!("{cms}/or-dep"))
        .wait(Wait::Field(
            "/metadata/ownerReferences",
            serde_json::Value::Null,
        ))
        .keep(Keep::Only(vec![
            "/body/metadata/name",
            "/body/metadata/ownerReferences",
        ]));
    s.post("dc-1", &cms, cm("dc1", json!({"dc": "y"})))
        .keep(Keep::StatusCode);
    s.post("dc-2", &cms, cm("dc2", json!({"dc": "y"})))
        .keep(Keep::StatusCode);
    s.delete("deletecollection", &format!("{cms}?labelSelector=dc"), None)
        .keep(Keep::Only(vec![
            "/body/kind",
            "/body/apiVersion",
            "/body/items/*/metadata/name",
            "/body/status",
            "/body/details",
        ]));
    s.get("after-deletecollection", &format!("{cms}?labelSelector=dc"))
        .keep(Keep::Only(vec!["/body/items"]));
    s
}

fn namespaces() -> Scenario {
    let mut s = Scenario::new(
        "namespace-termination",
        "a deleted namespace is Terminating until its contents are gone; no new content meanwhile; no deletecollection of namespaces",
    );
    let ns = "/api/v1/namespaces";
    s.post("create", ns, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "{ns}", "labels": {"team": "a"}}}));
    s.get("get", "/api/v1/namespaces/{ns}");
    s.get(
        "default-serviceaccount",
        "/api/v1/namespaces/{ns}/serviceaccounts/default",
    )
    .wait(Wait::Status(200))
    .keep(Keep::Only(vec![
        "/body/metadata/name",
        "/body/metadata/namespace",
    ]));
    s.get(
        "root-ca",
        "/api/v1/namespaces/{ns}/configmaps/kube-root-ca.crt",
    )
    .wait(Wait::Status(200))
    .keep(Keep::Only(vec![
        "/body/metadata/name",
        "/body/metadata/annotations",
    ]));
    s.post(
        "content",
        &core("configmaps"),
        json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}, "data": {}}),
    )
    .keep(Keep::StatusCode);
    s.delete("delete", "/api/v1/namespaces/{ns}", None);
    s.get("terminating", "/api/v1/namespaces/{ns}")
        .wait(Wait::Len("/status/conditions", 5))
        .keep(Keep::Drop(vec!["/body/metadata/managedFields"]));
    s.post(
        "create-in-terminating",
        &core("configmaps"),
        cm("new", json!({})),
    );
    s.get("held-content", &format!("{}/held", core("configmaps")))
        .keep(Keep::Only(vec![
            "/body/metadata/deletionTimestamp",
            "/body/metadata/finalizers",
        ]));
    s.patch(
        "release-content",
        &format!("{}/held", core("configmaps")),
        MERGE,
        Body::Json(json!({"metadata": {"finalizers": null}})),
    )
    .keep(Keep::StatusCode);
    s.get("gone", "/api/v1/namespaces/{ns}").wait(GONE);
    s.delete(
        "deletecollection-namespaces",
        "/api/v1/namespaces?labelSelector=team%3Dnone",
        None,
    );
    s.delete(
        "delete-default",
        "/api/v1/namespaces/default?dryRun=All",
        None,
    );
    s.delete(
        "delete-kube-system",
        "/api/v1/namespaces/kube-system?dryRun=All",
        None,
    );
    s
}

pub(super) fn all() -> Vec<Scenario> {
    vec![pods(), finalizers(), gc(), namespaces()]
}
