//! Watches: from a resourceVersion, selectors (leaving and entering),
//! a pod watch by `spec.nodeName` (what a kubelet does), bookmarks,
//! too-old resourceVersions (410), `sendInitialEvents`, timeouts.

use std::time::Duration;

use serde_json::json;

use super::super::scenario::{Body, Keep, Scenario, Until, Wait};
use super::{MERGE, cm, core, pod};

fn basic() -> Scenario {
    let mut s = Scenario::namespaced(
        "watch-changes",
        "a watch from a list's resourceVersion sees ADDED, MODIFIED, DELETED; selector transitions",
    );
    let cms = core("configmaps");
    s.get("list", &format!("{cms}?labelSelector=w"))
        .capture("rv", "/metadata/resourceVersion")
        .keep(Keep::Only(vec!["/body/items"]));
    s.watch(
        "watch-all",
        "all",
        &format!("{cms}?watch=1&labelSelector=w&resourceVersion={{{{rv}}}}"),
    );
    s.watch(
        "watch-selected",
        "sel",
        &format!("{cms}?watch=true&labelSelector=w%3Dyes&resourceVersion={{{{rv}}}}"),
    );
    s.post("create", &cms, cm("w1", json!({"w": "yes"})))
        .keep(Keep::StatusCode);
    s.patch(
        "modify",
        &format!("{cms}/w1"),
        MERGE,
        Body::Json(json!({"data": {"k": "2"}})),
    )
    .keep(Keep::StatusCode);
    s.patch(
        "stop-matching",
        &format!("{cms}/w1"),
        MERGE,
        Body::Json(json!({"metadata": {"labels": {"w": "no"}}})),
    )
    .keep(Keep::StatusCode);
    s.patch(
        "match-again",
        &format!("{cms}/w1"),
        MERGE,
        Body::Json(json!({"metadata": {"labels": {"w": "yes"}}})),
    )
    .keep(Keep::StatusCode);
    s.patch(
        "noop",
        &format!("{cms}/w1"),
        MERGE,
        Body::Json(json!({"data": {"k": "2"}})),
    )
    .keep(Keep::StatusCode);
    s.delete("delete", &format!("{cms}/w1"), None)
        .keep(Keep::StatusCode);
    s.events("all-events", "all", Until::Count(5));
    s.events("selected-events", "sel", Until::Count(5));
    s
}

fn node_pods() -> Scenario {
    let mut s = Scenario::namespaced(
        "watch-pods-by-node",
        "a kubelet's watch: pods with fieldSelector spec.nodeName, across namespaces, through binding, status and deletion",
    );
    let pods = core("pods");
    s.get("list", "/api/v1/pods?fieldSelector=spec.nodeName%3Dcf-wn-1")
        .capture("rv", "/metadata/resourceVersion")
        .keep(Keep::Only(vec!["/body/items"]));
    s.watch(
        "watch",
        "node",
        "/api/v1/pods?watch=1&fieldSelector=spec.nodeName%3Dcf-wn-1&resourceVersion={{rv}}",
    );
    s.post("create", &pods, pod("np", json!({})))
        .keep(Keep::StatusCode);
    s.post("bind", &format!("{pods}/np/binding"), json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "np"}, "target": {"kind": "Node", "name": "cf-wn-1"}}));
    s.patch(
        "status-running",
        &format!("{pods}/np/status"),
        MERGE,
        Body::Json(json!({"status": {"phase": "Running"}})),
    )
    .keep(Keep::StatusCode);
    s.patch(
        "label",
        &format!("{pods}/np"),
        MERGE,
        Body::Json(json!({"metadata": {"labels": {"x": "1"}}})),
    )
    .keep(Keep::StatusCode);
    s.delete("delete-graceful", &format!("{pods}/np"), None)
        .keep(Keep::Only(vec![
            "/body/metadata/deletionGracePeriodSeconds",
            "/body/metadata/deletionTimestamp",
            "/body/status/phase",
        ]));
    s.delete(
        "delete-now",
        &format!("{pods}/np"),
        Some(json!({"gracePeriodSeconds": 0})),
    )
    .keep(Keep::Only(vec![
        "/body/kind",
        "/body/metadata/deletionGracePeriodSeconds",
    ]));
    s.events("events", "node", Until::Count(5))
        .keep(Keep::Only(vec![
            "/object/metadata/name",
            "/object/metadata/resourceVersion",
            "/object/spec/nodeName",
            "/object/status/phase",
            "/object/metadata/labels",
            "/object/metadata/deletionGracePeriodSeconds",
        ]));
    s
}

fn expiry() -> Scenario {
    let mut s = Scenario::namespaced(
        "watch-expired-and-bookmarks",
        "bookmarks; timeoutSeconds; sendInitialEvents",
    );
    let cms = core("configmaps");
    s.post("create", &cms, cm("b1", json!({"b": "1"})))
        .capture("rv", "/metadata/resourceVersion")
        .keep(Keep::StatusCode);
    s.watch("watch-bookmarks", "bm", &format!("{cms}?watch=1&labelSelector=b&allowWatchBookmarks=true&timeoutSeconds=4&resourceVersion={{{{rv}}}}"));
    s.events("bookmark-events", "bm", Until::Closed)
        .timeout(Duration::from_secs(15));
    s.watch(
        "watch-timeout",
        "to",
        &format!("{cms}?watch=1&timeoutSeconds=1&resourceVersion={{{{rv}}}}"),
    );
    s.events("timeout-events", "to", Until::Closed)
        .timeout(Duration::from_secs(10));
    s.watch("watch-initial-events", "init", &format!("{cms}?watch=1&labelSelector=b&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=2"));
    s.events("initial-events", "init", Until::Closed)
        .timeout(Duration::from_secs(10));
    s.watch(
        "watch-no-rv",
        "norv",
        &format!("{cms}?watch=1&labelSelector=b&timeoutSeconds=2"),
    );
    s.events("no-rv-events", "norv", Until::Closed)
        .timeout(Duration::from_secs(10));
    s.watch(
        "watch-rv-0",
        "rv0",
        &format!("{cms}?watch=1&labelSelector=b&resourceVersion=0&timeoutSeconds=2"),
    );
    s.events("rv-0-events", "rv0", Until::Closed)
        .timeout(Duration::from_secs(10));
    s.watch(
        "watch-bad-selector",
        "bad",
        &format!("{cms}?watch=1&fieldSelector=data.x%3Dy"),
    );
    s.watch(
        "watch-metadata",
        "meta",
        &format!("{cms}?watch=1&resourceVersion={{{{rv}}}}&timeoutSeconds=2"),
    )
    .header(
        "Accept",
        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json",
    );
    s.patch(
        "modify",
        &format!("{cms}/b1"),
        MERGE,
        Body::Json(json!({"metadata": {"labels": {"m": "1"}}})),
    )
    .keep(Keep::StatusCode);
    s.events("metadata-events", "meta", Until::Closed)
        .timeout(Duration::from_secs(10));
    s
}

fn edges() -> Scenario {
    let mut s = Scenario::namespaced(
        "watch-edges",
        "a watch from a future resourceVersion gets nothing before it; a custom resource's watch from before its CRD is 410 Expired; every pod deletion is MODIFIED (deletionTimestamp) then DELETED on a watch by spec.nodeName",
    );
    let cms = core("configmaps");
    let pods = core("pods");
    s.get("list", &cms)
        .capture("rv", "/metadata/resourceVersion")
        .keep(Keep::StatusCode);
    s.watch(
        "watch-future",
        "future",
        &format!("{cms}?watch=1&resourceVersion={{{{rv+1000000}}}}&timeoutSeconds=3"),
    );
    s.post("create-1", &cms, cm("e1", json!({})))
        .keep(Keep::StatusCode);
    s.post("create-2", &cms, cm("e2", json!({})))
        .keep(Keep::StatusCode);
    s.events("future-events", "future", Until::Closed)
        .timeout(Duration::from_secs(15));
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "edges.cf-watch.example.com"},
        "spec": {"group": "cf-watch.example.com", "scope": "Namespaced",
            "names": {"plural": "edges", "singular": "edge", "kind": "Edge"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}});
    super::crds::register(
        &mut s,
        crd,
        "edges.cf-watch.example.com",
        "register",
        "established",
    );
    let edges = "/apis/cf-watch.example.com/v1/namespaces/{ns}/edges";
    s.get("list-edges", edges)
        .timeout(Duration::from_secs(30))
        .wait(Wait::Status(200))
        .keep(Keep::StatusCode);
    s.watch(
        "watch-edges-before-crd",
        "old",
        &format!("{edges}?watch=1&resourceVersion={{{{rv}}}}"),
    );
    s.events("expired-events", "old", Until::Count(1))
        .keep(Keep::Only(vec![
            "/type",
            "/object/kind",
            "/object/code",
            "/object/reason",
            "/object/status",
        ]));
    s.get(
        "list-pods",
        "/api/v1/pods?fieldSelector=spec.nodeName%3Dcf-we-1",
    )
    .capture("prv", "/metadata/resourceVersion")
    .keep(Keep::StatusCode);
    s.watch(
        "watch-node",
        "node",
        "/api/v1/pods?watch=1&fieldSelector=spec.nodeName%3Dcf-we-1&resourceVersion={{prv}}",
    );
    let mut bound = pod("bound", json!({}));
    bound["spec"]["nodeName"] = json!("cf-we-1");
    s.post("create-bound", &pods, bound).keep(Keep::StatusCode);
    s.delete(
        "delete-bound",
        &format!("{pods}/bound"),
        Some(json!({"gracePeriodSeconds": 0})),
    )
    .keep(Keep::Only(vec![
        "/body/kind",
        "/body/metadata/deletionGracePeriodSeconds",
    ]));
    let mut done = pod("done", json!({}));
    done["spec"]["nodeName"] = json!("cf-we-1");
    s.post("create-done", &pods, done).keep(Keep::StatusCode);
    s.patch(
        "done-succeeded",
        &format!("{pods}/done/status"),
        MERGE,
        Body::Json(json!({"status": {"phase": "Succeeded"}})),
    )
    .keep(Keep::StatusCode);
    s.delete("delete-done", &format!("{pods}/done"), None)
        .keep(Keep::StatusCode);
    s.events("node-events", "node", Until::Count(7))
        .keep(Keep::Only(vec![
            "/type",
            "/object/metadata/name",
            "/object/metadata/resourceVersion",
            "/object/metadata/deletionGracePeriodSeconds",
            "/object/status/phase",
        ]));
    s
}

pub(super) fn all() -> Vec<Scenario> {
    vec![basic(), node_pods(), expiry(), edges()]
}
