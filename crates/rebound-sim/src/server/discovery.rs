//! Discovery documents: `/version`, `/api`, `/api/v1`, `/apis`,
//! `/apis/<group>` and `/apis/<group>/<version>` in the legacy format, and
//! the aggregated format (`apidiscovery.k8s.io/v2`, and `v2beta1`) that
//! `kubectl` 1.36 and `kube` ask for first. Resources are listed as a real
//! server lists them: built-ins by name with their subresources after
//! them, custom resources in registration order; groups in the real
//! server's priority order; verbs, scope, short names, categories and the
//! `storageVersionHash`.

use base64::Engine;
use serde_json::{Value, json};

use super::resources::{Registry, ResourceInfo};
use super::state::ServerOptions;

/// `/version`.
pub fn version(opts: &ServerOptions) -> Value {
    let minor = opts
        .git_version
        .trim_start_matches('v')
        .split('.')
        .nth(1)
        .unwrap_or("33")
        .to_string();
    json!({
        "major": "1", "minor": minor, "gitVersion": opts.git_version, "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24.0",
        "compiler": "gc", "platform": "linux/amd64",
    })
}

/// `/api`.
pub fn core_versions(server_address: &str) -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]})
}

/// The built-in groups in the order a real server lists them
/// (`apiserver` group priorities); custom groups follow by name.
const GROUP_ORDER: &[&str] = &[
    "apiregistration.k8s.io",
    "apps",
    "events.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "networking.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "storage.k8s.io",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "scheduling.k8s.io",
    "coordination.k8s.io",
];

fn group_rank(g: &str) -> (usize, String) {
    (
        GROUP_ORDER
            .iter()
            .position(|x| *x == g)
            .unwrap_or(GROUP_ORDER.len()),
        g.to_string(),
    )
}

fn ordered_groups(reg: &Registry) -> Vec<(String, Vec<String>)> {
    let mut gs: Vec<(String, Vec<String>)> = reg.groups().into_iter().collect();
    gs.sort_by_key(|(g, _)| group_rank(g));
    gs
}

fn group_doc(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    let preferred = vs.first().cloned().unwrap_or(json!({}));
    json!({"name": name, "versions": vs, "preferredVersion": preferred})
}

/// `/apis`.
pub fn groups(reg: &Registry) -> Value {
    let groups: Vec<Value> = ordered_groups(reg)
        .iter()
        .map(|(g, vs)| group_doc(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>`, None when the group is not served.
pub fn group(reg: &Registry, name: &str) -> Option<Value> {
    let groups = reg.groups();
    let vs = groups.get(name)?;
    let mut doc = group_doc(name, vs);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

/// The verbs of a resource as a real server lists them.
fn verbs(r: &ResourceInfo) -> Vec<&'static str> {
    if r.custom {
        return vec![
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "create",
            "update",
            "watch",
        ];
    }
    if r.group.is_empty() && r.plural == "namespaces" {
        return vec![
            "create", "delete", "get", "list", "patch", "update", "watch",
        ];
    }
    r.verbs()
}

/// `storageVersionHash`: base64 of the first 8 bytes of the SHA-256 of
/// the storage `group/version/kind`.
fn storage_version_hash(reg: &Registry, r: &ResourceInfo) -> String {
    let storage = r
        .storage_alias
        .as_deref()
        .and_then(|k| reg.get(k))
        .unwrap_or_else(|| std::sync::Arc::new(r.clone()));
    let s = format!(
        "{}/{}/{}",
        storage.group,
        storage.storage_version(),
        storage.kind
    );
    let d = ring::digest::digest(&ring::digest::SHA256, s.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(&d.as_ref()[..8])
}

/// A subresource served for a resource: (name, kind, group, version, verbs).
type Sub = (
    &'static str,
    String,
    &'static str,
    &'static str,
    Vec<&'static str>,
);

fn subresources(r: &ResourceInfo) -> Vec<Sub> {
    let gpu = vec!["get", "patch", "update"];
    let mut subs: Vec<Sub> = Vec::new();
    if r.pod_extras {
        subs.push(("binding", "Binding".into(), "", "", vec!["create"]));
        subs.push((
            "eviction",
            "Eviction".into(),
            "policy",
            "v1",
            vec!["create"],
        ));
        subs.push(("log", "Pod".into(), "", "", vec!["get"]));
    }
    if r.scale.is_some() {
        subs.push(("scale", "Scale".into(), "autoscaling", "v1", gpu.clone()));
    }
    if r.status {
        subs.push(("status", r.kind.clone(), "", "", gpu));
    }
    // built-ins by name; a CRD's as its versions declare them (status, scale)
    if !r.custom {
        subs.sort_by(|a, b| a.0.cmp(b.0));
    } else {
        subs.sort_by_key(|s| s.0 != "status");
    }
    subs
}

/// `/api/v1` or `/apis/<group>/<version>`, None when not served.
pub fn resource_list(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    let mut any = false;
    for r in reg
        .in_discovery_order()
        .into_iter()
        .filter(|r| r.group == group && r.versions.iter().any(|v| v == version))
    {
        any = true;
        let mut main = json!({
            "name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
            "kind": r.kind, "verbs": verbs(&r), "storageVersionHash": storage_version_hash(reg, &r),
        });
        if !r.short_names.is_empty() {
            main["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            main["categories"] = json!(r.categories);
        }
        resources.push(main);
        for (sub, kind, g, v, verbs) in subresources(&r) {
            let mut e = json!({"name": format!("{}/{sub}", r.plural), "singularName": "", "namespaced": r.namespaced,
                "kind": kind, "verbs": verbs});
            if !g.is_empty() {
                e["group"] = json!(g);
                e["version"] = json!(v);
            }
            resources.push(e);
        }
    }
    if !any {
        return None;
    }
    if group.is_empty() {
        return Some(
            json!({"kind": "APIResourceList", "groupVersion": version, "resources": resources}),
        );
    }
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{group}/{version}"), "resources": resources}),
    )
}

/// The aggregated discovery version an `Accept` header asks for
/// (`v2` or `v2beta1`), if any.
pub fn aggregated_version(accept: Option<&str>) -> Option<&'static str> {
    let accept = accept?;
    for part in accept.split(',') {
        let p = part.replace(' ', "");
        if !p.contains("g=apidiscovery.k8s.io") || !p.contains("as=APIGroupDiscoveryList") {
            continue;
        }
        if p.contains("v=v2beta1") {
            return Some("v2beta1");
        }
        if p.contains("v=v2") {
            return Some("v2");
        }
    }
    None
}

fn aggregated_resource(r: &ResourceInfo) -> Value {
    let mut e = json!({
        "resource": r.plural, "singularResource": r.singular,
        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
        "responseKind": {"group": "", "version": "", "kind": r.kind},
        "verbs": verbs(r),
    });
    if !r.short_names.is_empty() {
        e["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        e["categories"] = json!(r.categories);
    }
    let subs: Vec<Value> = subresources(r)
        .into_iter()
        .map(|(sub, kind, g, v, verbs)| json!({"subresource": sub, "responseKind": {"group": g, "version": v, "kind": kind}, "verbs": verbs}))
        .collect();
    if !subs.is_empty() {
        e["subresources"] = json!(subs);
    }
    e
}

/// The aggregated document of `/api` (`core`) or `/apis`.
pub fn aggregated(reg: &Registry, core: bool, version: &str) -> Value {
    let all = reg.in_discovery_order();
    let group_item = |g: &str, versions: &[String]| {
        let vs: Vec<Value> = versions
            .iter()
            .map(|v| {
                let rs: Vec<Value> = all
                    .iter()
                    .filter(|r| r.group == g && r.versions.iter().any(|x| x == v))
                    .map(|r| aggregated_resource(r))
                    .collect();
                json!({"version": v, "resources": rs, "freshness": "Current"})
            })
            .collect();
        let md = if g.is_empty() {
            json!({})
        } else {
            json!({"name": g})
        };
        json!({"metadata": md, "versions": vs})
    };
    let items: Vec<Value> = if core {
        vec![group_item("", &["v1".to_string()])]
    } else {
        ordered_groups(reg)
            .iter()
            .map(|(g, vs)| group_item(g, vs))
            .collect()
    };
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": format!("apidiscovery.k8s.io/{version}"), "metadata": {}, "items": items})
}
