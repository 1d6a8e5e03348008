//! Install, operate, observe: the kustomize `config/`, the Helm chart, the
//! Dockerfile and the docs must agree with the code and with each other.
//!
//! Generated files (`config/crd/*.yaml`, `chart/rebound/files/crds/*.yaml`,
//! `docs/crd-reference.md`) are compared with what the code generates; run
//! `REBOUND_BLESS=1 cargo test --test it packaging` to rewrite them.
//!
//! No helm or kustomize binary is needed: templates are checked as text
//! (balanced actions, existing values, includes and files), plain YAML is
//! parsed and, for Kubernetes kinds, round-tripped through k8s-openapi so a
//! misspelt field (dropped by the typed parse) fails.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

mod admission;
pub(crate) mod chart;

pub(crate) use chart::{helm_render, values as chart_values};
mod docs;
mod manifests;
mod names_in_code;
mod rbac;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    let p = root().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

fn yaml_docs(text: &str, what: &str) -> Vec<Value> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(text).unwrap_or_else(|e| panic!("{what}: invalid YAML: {e}"));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

fn docs_of(rel: &str) -> Vec<Value> {
    yaml_docs(&read(rel), rel)
}

/// Files under `dir` (relative to the root), recursively, sorted.
fn files_under(dir: &str) -> Vec<String> {
    fn walk(p: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(p) else { return };
        for e in rd.flatten() {
            let path = e.path();
            if path.is_dir() {
                walk(&path, out);
            } else {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root().join(dir), &mut out);
    let mut rel: Vec<String> = out
        .iter()
        .map(|p| {
            p.strip_prefix(root())
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/")
        })
        .collect();
    rel.sort();
    rel
}

/// The first capture group of every match of `re` in `text`.
fn captures(re: &str, text: &str) -> BTreeSet<String> {
    regex::Regex::new(re)
        .unwrap()
        .captures_iter(text)
        .map(|c| c[1].to_string())
        .collect()
}

fn bless() -> bool {
    std::env::var_os("REBOUND_BLESS").is_some()
}

/// Compare a committed generated file with its expected text; rewrite it
/// under REBOUND_BLESS.
fn check_generated(rel: &str, expected: &str) {
    let path = root().join(rel);
    if bless() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, expected).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == expected,
        "{rel} is out of date with the code; run `REBOUND_BLESS=1 cargo test --test it packaging` and commit"
    );
}

/// Every `kind` in `config/` rendered as one list (what `kubectl apply -k
/// config/default` sends), following kustomizations from `dir`: their
/// resources, then their components.
pub(crate) fn kustomize(dir: &str) -> Vec<Value> {
    let k = docs_of(&format!("{dir}/kustomization.yaml")).remove(0);
    let mut out = Vec::new();
    let listed = k["resources"]
        .as_array()
        .into_iter()
        .chain(k["components"].as_array())
        .flatten();
    for r in listed {
        let r = r.as_str().unwrap();
        let p = normalize(&format!("{dir}/{r}"));
        if root().join(&p).is_dir() {
            out.extend(kustomize(&p));
        } else {
            out.extend(docs_of(&p));
        }
    }
    out
}

fn normalize(p: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "." | "" => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    parts.join("/")
}

fn one<'a>(objs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objs.iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

// ---------------------------------------------------------------- config/

/// Parse `v` as `T` and back: a field the type does not know is dropped by
/// k8s-openapi, so a difference means a misspelt or misplaced field.
fn round_trips<T: serde::de::DeserializeOwned + serde::Serialize>(v: &Value, what: &str) {
    let typed: T = serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{what}: {e}"));
    let back = serde_json::to_value(&typed).unwrap();
    if let Some(path) = first_diff(v, &back, "") {
        panic!("{what}: {path} is lost or changed in a typed round trip (misspelt or misplaced?)");
    }
}

/// The first path where `a` and `b` differ; numbers compare by value
/// (`2` and `2.0` are equal: YAML tools print either).
fn first_diff(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| {
                first_diff(
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    &format!("{path}.{k}"),
                )
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (p, q))| first_diff(p, q, &format!("{path}[{i}]"))),
        (Value::Number(x), Value::Number(y)) if x.as_f64() == y.as_f64() => None,
        _ if a == b => None,
        _ => Some(if path.is_empty() {
            ".".into()
        } else {
            path.to_string()
        }),
    }
}

/// Round-trip a Kubernetes object through its k8s-openapi type; false for
/// kinds not checked (kustomizations, values, Prometheus Operator kinds).
fn check_typed(d: &Value, what: &str) -> bool {
    use k8s_openapi::api::{
        apps::v1 as apps, core::v1 as core, policy::v1 as policy, rbac::v1 as rbac,
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    match d["kind"].as_str().unwrap_or("") {
        "Deployment" => round_trips::<apps::Deployment>(d, what),
        "DaemonSet" => round_trips::<apps::DaemonSet>(d, what),
        "Service" => round_trips::<core::Service>(d, what),
        "ServiceAccount" => round_trips::<core::ServiceAccount>(d, what),
        "Namespace" => round_trips::<core::Namespace>(d, what),
        "PodDisruptionBudget" => round_trips::<policy::PodDisruptionBudget>(d, what),
        "ClusterRole" => round_trips::<rbac::ClusterRole>(d, what),
        "ClusterRoleBinding" => round_trips::<rbac::ClusterRoleBinding>(d, what),
        "Role" => round_trips::<rbac::Role>(d, what),
        "RoleBinding" => round_trips::<rbac::RoleBinding>(d, what),
        "CustomResourceDefinition" => round_trips::<CustomResourceDefinition>(d, what),
        "MutatingAdmissionPolicy" => round_trips::<
            k8s_openapi::api::admissionregistration::v1::MutatingAdmissionPolicy,
        >(d, what),
        "MutatingAdmissionPolicyBinding" => round_trips::<
            k8s_openapi::api::admissionregistration::v1::MutatingAdmissionPolicyBinding,
        >(d, what),
        _ => return false,
    }
    true
}

#[test]
fn every_yaml_parses_and_kubernetes_objects_have_no_unknown_fields() {
    use k8s_openapi::api::rbac::v1 as rbac;
    let mut yaml_files: Vec<String> = files_under("config");
    yaml_files.extend(
        files_under("chart/rebound")
            .into_iter()
            .filter(|f| !f.contains("/templates/")),
    );
    yaml_files.retain(|f| f.ends_with(".yaml") || f.ends_with(".yml"));
    assert!(yaml_files.len() >= 15, "found only {yaml_files:?}");
    let mut typed = 0;
    for f in &yaml_files {
        if f.contains("/files/rbac/") {
            let rules: Vec<rbac::PolicyRule> = serde_json::from_value(docs_of(f).remove(0))
                .unwrap_or_else(|e| panic!("{f}: not a list of PolicyRules: {e}"));
            assert!(!rules.is_empty(), "{f}");
            continue;
        }
        for d in docs_of(f) {
            let what = format!("{f}: {} {}", d["kind"], d["metadata"]["name"]);
            typed += usize::from(check_typed(&d, &what));
        }
    }
    assert!(typed >= 19, "only {typed} Kubernetes objects checked");
}

#[test]
fn crd_copies_equal_the_generated_crds() {
    let files = rebound::api::crd_files().expect("CRD YAML");
    let names: Vec<String> = files.iter().map(|(n, _)| n.clone()).collect();
    for dir in ["config/crd", "chart/rebound/files/crds"] {
        for (name, yaml) in &files {
            check_generated(&format!("{dir}/{name}"), yaml);
        }
        let present: Vec<String> = files_under(dir)
            .into_iter()
            .map(|f| f.rsplit('/').next().unwrap().to_string())
            .filter(|f| f != "kustomization.yaml")
            .collect();
        let mut expected = names.clone();
        expected.sort();
        assert_eq!(present, expected, "{dir} holds stale CRD files");
    }
    let k = docs_of("config/crd/kustomization.yaml").remove(0);
    let listed: Vec<&str> = k["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    assert_eq!(listed, names.iter().map(String::as_str).collect::<Vec<_>>());
}
