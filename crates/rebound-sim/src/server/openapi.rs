//! A minimal OpenAPI v3 surface: the `/openapi/v3` index and one document
//! per group-version listing each resource's paths with their
//! `x-kubernetes-group-version-kind` and the `fieldValidation` parameter.
//! That is what `kubectl` looks for to choose server-side field validation
//! instead of downloading schemas; no schemas are served (`kubectl explain`
//! does not work).

use serde_json::{Map, Value, json};

use super::resources::Registry;

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: the index of group-version documents.
pub fn index(reg: &Registry) -> Value {
    let mut paths = Map::new();
    let mut gvs: Vec<(String, String)> = reg
        .all()
        .flat_map(|r| {
            r.versions
                .iter()
                .map(|v| (r.group.clone(), v.clone()))
                .collect::<Vec<_>>()
        })
        .collect();
    gvs.sort();
    gvs.dedup();
    for (g, v) in gvs {
        let p = gv_path(&g, &v);
        paths.insert(
            p.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash=0")}),
        );
    }
    json!({"paths": paths})
}

/// `/openapi/v3/<gv path>`: paths and operations, no schemas. None when the
/// group-version is not served.
pub fn document(reg: &Registry, gv: &str) -> Option<Value> {
    let mut paths = Map::new();
    for r in reg.all() {
        for v in &r.versions {
            if gv_path(&r.group, v) != gv {
                continue;
            }
            let gvk = json!({"group": r.group, "version": v, "kind": r.kind});
            let param = json!([{"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}}]);
            let op = |action: &str| json!({"x-kubernetes-action": action, "x-kubernetes-group-version-kind": gvk, "parameters": param, "responses": {}});
            let base = if r.namespaced {
                format!("/{gv}/namespaces/{{namespace}}/{}", r.plural)
            } else {
                format!("/{gv}/{}", r.plural)
            };
            paths.insert(base.clone(), json!({"get": op("list"), "post": op("post")}));
            paths.insert(format!("{base}/{{name}}"), json!({"get": op("get"), "put": op("put"), "patch": op("patch"), "delete": op("delete")}));
            if r.status {
                paths.insert(
                    format!("{base}/{{name}}/status"),
                    json!({"get": op("get"), "put": op("put"), "patch": op("patch")}),
                );
            }
        }
    }
    if paths.is_empty() {
        return None;
    }
    Some(
        json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.33.0"}, "paths": paths, "components": {"schemas": {}}}),
    )
}
