//! Reads: lists with selectors, pagination, resourceVersion semantics,
//! metadata-only answers and the Tables `kubectl get` asks for.

use serde_json::json;

use super::super::scenario::{Keep, Scenario};
use super::{cm, core, pod};

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
const META: &str =
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
const META_ONE: &str =
    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";

fn selectors() -> Scenario {
    let mut s = Scenario::namespaced(
        "list-selectors",
        "label and field selectors on lists, unsupported field labels",
    );
    let cms = core("configmaps");
    for (step, name, labels) in [
        ("create-a", "a", json!({"app": "x", "tier": "1"})),
        ("create-b", "b", json!({"app": "y", "tier": "2"})),
        ("create-c", "c", json!({"app": "x"})),
    ] {
        s.post(step, &cms, cm(name, labels)).keep(Keep::StatusCode);
    }
    let names = Keep::Only(vec![
        "/body/kind",
        "/body/apiVersion",
        "/body/items/*/metadata/name",
    ]);
    for (step, q) in [
        ("eq", "labelSelector=app%3Dx"),
        ("neq", "labelSelector=app!%3Dx"),
        ("in", "labelSelector=app%20in%20(x,y),tier"),
        ("notin", "labelSelector=tier%20notin%20(1)"),
        ("exists", "labelSelector=tier"),
        ("not-exists", "labelSelector=!tier"),
        ("field-name", "fieldSelector=metadata.name%3Db"),
        ("field-name-neq", "fieldSelector=metadata.name!%3Db"),
    ] {
        s.get(step, &format!("{cms}?{q}")).keep(names.clone());
    }
    s.get(
        "bad-label-selector",
        &format!("{cms}?labelSelector=app%3D%3D%3Dx"),
    );
    s.get(
        "unsupported-field",
        &format!("{cms}?fieldSelector=data.k%3Dv"),
    );
    s.get("list-all", &cms).keep(Keep::Only(vec![
        "/body/kind",
        "/body/apiVersion",
        "/body/metadata",
        "/body/items/*/metadata/name",
        "/body/items/*/kind",
    ]));
    let pods = core("pods");
    s.post("pod-a", &pods, pod("pa", json!({})))
        .keep(Keep::StatusCode);
    s.post("pod-b", &pods, pod("pb", json!({})))
        .keep(Keep::StatusCode);
    s.post("bind-a", &format!("{pods}/pa/binding"), json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "pa"}, "target": {"kind": "Node", "name": "cf-node-1"}}));
    s.get(
        "pods-on-node",
        &format!("{pods}?fieldSelector=spec.nodeName%3Dcf-node-1"),
    )
    .keep(names.clone());
    s.get(
        "pods-unbound",
        &format!("{pods}?fieldSelector=spec.nodeName%3D"),
    )
    .keep(names.clone());
    s.get(
        "pods-phase",
        &format!("{pods}?fieldSelector=status.phase%3DPending,spec.nodeName!%3Dcf-node-1"),
    )
    .keep(names.clone());
    s.get(
        "pods-all-namespaces-on-node",
        "/api/v1/pods?fieldSelector=spec.nodeName%3Dcf-node-1",
    )
    .keep(names);
    s
}

fn paging() -> Scenario {
    let mut s = Scenario::namespaced(
        "list-pagination",
        "limit and continue pin the first page's resourceVersion; remainingItemCount; resourceVersion semantics",
    );
    let cms = core("configmaps");
    for (step, name) in [
        ("c1", "p1"),
        ("c2", "p2"),
        ("c3", "p3"),
        ("c4", "p4"),
        ("c5", "p5"),
    ] {
        s.post(step, &cms, cm(name, json!({"page": "y"})))
            .keep(Keep::StatusCode);
    }
    let page = Keep::Only(vec!["/body/metadata", "/body/items/*/metadata/name"]);
    s.get("page-1", &format!("{cms}?labelSelector=page&limit=2"))
        .capture("cont", "/metadata/continue")
        .capture("listrv", "/metadata/resourceVersion")
        .keep(page.clone());
    s.post("c6", &cms, cm("p0", json!({"page": "y"})))
        .keep(Keep::StatusCode);
    s.get(
        "page-2",
        &format!("{cms}?labelSelector=page&limit=2&continue={{{{cont}}}}"),
    )
    .capture("cont2", "/metadata/continue")
    .keep(page.clone());
    s.get(
        "page-3",
        &format!("{cms}?labelSelector=page&limit=2&continue={{{{cont2}}}}"),
    )
    .keep(page.clone());
    s.get("bad-continue", &format!("{cms}?limit=2&continue=garbage"));
    s.get(
        "rv-0",
        &format!("{cms}?labelSelector=page&resourceVersion=0"),
    )
    .keep(page.clone());
    s.get(
        "rv-exact-old",
        &format!(
            "{cms}?labelSelector=page&resourceVersion={{{{listrv}}}}&resourceVersionMatch=Exact"
        ),
    )
    .keep(page.clone());
    s.get("rv-not-older", &format!("{cms}?labelSelector=page&resourceVersion={{{{listrv}}}}&resourceVersionMatch=NotOlderThan")).keep(page.clone());
    s.get(
        "rv-match-without-rv",
        &format!("{cms}?resourceVersionMatch=Exact"),
    );
    s.get(
        "rv-exact-too-old",
        &format!("{cms}?resourceVersion=1&resourceVersionMatch=Exact"),
    );
    s.get("limit-bad", &format!("{cms}?limit=x"));
    s
}

fn render() -> Scenario {
    let mut s = Scenario::namespaced(
        "tables-and-metadata",
        "kubectl get tables and metadata-only reads",
    );
    let cms = core("configmaps");
    s.post("cm", &cms, cm("t", json!({"x": "1"})))
        .keep(Keep::StatusCode);
    let pods = core("pods");
    s.post("pod", &pods, pod("tp", json!({})))
        .keep(Keep::StatusCode);
    let table = Keep::Drop(vec!["/body/rows/*/object"]);
    s.get("table-cms", &cms)
        .header("Accept", TABLE)
        .keep(table.clone());
    s.get("table-cm", &format!("{cms}/t"))
        .header("Accept", TABLE)
        .keep(table.clone());
    s.get("table-pods", &pods)
        .header("Accept", TABLE)
        .keep(table.clone());
    s.get(
        "table-pods-include-object",
        &format!("{pods}?includeObject=Object"),
    )
    .header("Accept", TABLE)
    .keep(Keep::Only(vec![
        "/body/rows/*/object/kind",
        "/body/rows/*/object/apiVersion",
        "/body/rows/*/object/metadata/name",
    ]));
    s.get(
        "table-namespaces",
        "/api/v1/namespaces?fieldSelector=metadata.name%3D{ns}",
    )
    .header("Accept", TABLE)
    .keep(table.clone());
    s.get("table-events", &core("events"))
        .header("Accept", TABLE)
        .keep(table);
    s.get("metadata-list", &cms)
        .header("Accept", META)
        .keep(Keep::Only(vec![
            "/body/kind",
            "/body/apiVersion",
            "/body/items/*/kind",
            "/body/items/*/apiVersion",
            "/body/items/*/metadata/name",
            "/body/items/*/metadata/labels",
        ]));
    s.get("metadata-one", &format!("{cms}/t"))
        .header("Accept", META_ONE);
    s.get("yaml-accept", &format!("{cms}/t"))
        .header("Accept", "application/yaml")
        .keep(Keep::Only(vec![]));
    s.get("protobuf-accept", &format!("{cms}/t"))
        .header(
            "Accept",
            "application/vnd.kubernetes.protobuf,application/json",
        )
        .keep(Keep::Only(vec!["/body/kind"]));
    s
}

pub(super) fn all() -> Vec<Scenario> {
    vec![selectors(), paging(), render()]
}
