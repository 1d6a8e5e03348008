//! Watches: from a resourceVersion, selectors (leaving and entering),
//! a pod watch by `spec.nodeName` (what a kubelet does), bookmarks,
//! too-old resourceVersions (410), `sendInitialEvents`, timeouts.

use std::time::Duration;

use serde_json::json;

use super::super::scenario::{Body, Keep, Scenario, Until};
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

pub(super) fn all() -> Vec<Scenario> {
    vec![basic(), node_pods(), expiry()]
}
