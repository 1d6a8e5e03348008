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
/// config/default` sends), following kustomizations from `dir`.
fn kustomize(dir: &str) -> Vec<Value> {
    let k = docs_of(&format!("{dir}/kustomization.yaml")).remove(0);
    let mut out = Vec::new();
    for r in k["resources"].as_array().expect("resources") {
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

/// The image in the chart's copy of the admission policy, which its
/// template replaces with the agent's image.
const CHART_AGENT_IMAGE: &str = "REBOUND_AGENT_IMAGE";

/// The admission policy is generated from the code (`rebound
/// admission-policy`): config/admission/ with the default image, the chart's
/// file with a placeholder its template replaces; config/default installs it,
/// and the chart's template renders it only under `admissionPolicy.enabled`
/// (on by default), so turning the value off removes it.
#[test]
fn admission_policy_copies_equal_the_generated_policy_and_the_chart_value_turns_it_off() {
    use rebound::inplace::admission::{POLICY_NAME, policy_yaml};
    use rebound::inplace::inject::InjectOptions;
    let config = policy_yaml(&InjectOptions::default()).expect("policy");
    check_generated("config/admission/restart_agent_policy.yaml", &config);
    let chart = policy_yaml(&InjectOptions {
        image: CHART_AGENT_IMAGE.into(),
        ..InjectOptions::default()
    })
    .expect("policy");
    check_generated(
        "chart/rebound/files/admission/restart-agent-policy.yaml",
        &chart,
    );
    let objs = kustomize("config/default");
    one(&objs, "MutatingAdmissionPolicy", POLICY_NAME);
    one(&objs, "MutatingAdmissionPolicyBinding", POLICY_NAME);
    // The agent's image in config/ is the image config/default runs
    // (kustomize's `images:` cannot rewrite it inside CEL).
    let k = docs_of("config/default/kustomization.yaml").remove(0);
    let img = &k["images"][0];
    let image = format!(
        "{}:{}",
        img["newName"].as_str().expect("newName"),
        img["newTag"].as_str().expect("newTag")
    );
    assert!(
        config.contains(&format!("image: \"{image}\"")),
        "config/admission's agent image is not {image}, the image config/default runs"
    );
    // The template: a comment, then everything inside one guard.
    let t = read("chart/rebound/templates/admission-policy.yaml");
    let body = t.split_once("*/ -}}").map_or(t.as_str(), |(_, b)| b).trim();
    assert!(
        body.starts_with("{{- if .Values.admissionPolicy.enabled }}")
            && body.ends_with("{{- end }}"),
        "chart/rebound/templates/admission-policy.yaml: not all of it is under `if .Values.admissionPolicy.enabled`:\n{body}"
    );
    assert_eq!(
        body.matches("{{- end }}").count(),
        1,
        "one guard, closed at the end"
    );
    assert!(
        body.contains(&format!(
            r#".Files.Get "files/admission/restart-agent-policy.yaml" | replace "\"{CHART_AGENT_IMAGE}\"""#
        )),
        "the template replaces the placeholder image of the generated file"
    );
    assert_eq!(
        chart.matches(&format!("\"{CHART_AGENT_IMAGE}\"")).count(),
        1,
        "the placeholder occurs once, as the agent's image"
    );
    assert_eq!(
        values()["admissionPolicy"]["enabled"],
        true,
        "on by default"
    );
}

/// With a helm binary: the chart renders the policy with the agent's image
/// by default, and nothing of it with `admissionPolicy.enabled=false`.
#[test]
fn helm_renders_the_admission_policy_only_when_enabled() {
    let Some(helm) = helm() else {
        eprintln!(
            "notice: no helm binary (set REBOUND_HELM or put helm on PATH); the admission policy's guard is checked as text only"
        );
        return;
    };
    let kinds = |objs: &[Value]| -> Vec<String> {
        objs.iter()
            .filter_map(|o| o["kind"].as_str())
            .filter(|k| k.starts_with("MutatingAdmissionPolicy"))
            .map(str::to_owned)
            .collect()
    };
    let on = helm_template(
        &helm,
        &["--set", "restartAgent.image=reg.example/rebound:7"],
    )
    .unwrap_or_else(|e| panic!("helm template failed: {e}"));
    assert_eq!(kinds(&on).len(), 2, "policy and binding by default");
    let policy = on
        .iter()
        .find(|o| o["kind"] == "MutatingAdmissionPolicy")
        .expect("policy");
    assert!(
        policy
            .to_string()
            .contains(r#"image: \"reg.example/rebound:7\""#),
        "the agent's image is restartAgent.image"
    );
    let off = helm_template(&helm, &["--set", "admissionPolicy.enabled=false"])
        .unwrap_or_else(|e| panic!("helm template failed: {e}"));
    assert_eq!(
        kinds(&off),
        Vec::<String>::new(),
        "turned off: no policy, no binding"
    );
}

#[test]
fn kustomizations_reference_what_exists() {
    for f in files_under("config")
        .into_iter()
        .filter(|f| f.ends_with("kustomization.yaml"))
    {
        let dir = f.trim_end_matches("/kustomization.yaml");
        let k = docs_of(&f).remove(0);
        assert_eq!(k["kind"], "Kustomization", "{f}");
        for r in k["resources"].as_array().expect("resources") {
            let p = normalize(&format!("{dir}/{}", r.as_str().unwrap()));
            let full = root().join(&p);
            assert!(
                full.is_file() || full.join("kustomization.yaml").is_file(),
                "{f} lists {p}, which is neither a file nor a kustomization"
            );
        }
    }
    // Every shipped classification is in config/samples.
    {
        let k = read("config/samples/kustomization.yaml");
        for f in files_under("samples/classifications") {
            assert!(
                k.contains(&format!("../../{f}")),
                "config/samples does not list {f}"
            );
        }
    }
    // default = namespace + crd + rbac + manager + agent.
    let all = kustomize("config/default");
    let kinds: BTreeSet<&str> = all.iter().filter_map(|o| o["kind"].as_str()).collect();
    for k in [
        "Namespace",
        "CustomResourceDefinition",
        "ClusterRole",
        "Deployment",
        "DaemonSet",
        "ServiceAccount",
    ] {
        assert!(kinds.contains(k), "config/default renders no {k}");
    }
    // Without a namespace transformer, every namespaced object names its
    // namespace: rebound-system, or kube-system for the device-info Role.
    for o in &all {
        let cluster_scoped = [
            "Namespace",
            "CustomResourceDefinition",
            "ClusterRole",
            "ClusterRoleBinding",
            "MutatingAdmissionPolicy",
            "MutatingAdmissionPolicyBinding",
        ];
        if cluster_scoped.contains(&o["kind"].as_str().unwrap()) {
            assert!(
                o["metadata"]["namespace"].is_null(),
                "{} is cluster-scoped",
                o["metadata"]["name"]
            );
            continue;
        }
        let ns = o["metadata"]["namespace"].as_str().unwrap_or("");
        // In kube-system: the controller reads the device plugin's
        // ConfigMaps there, and the agent writes its Events about Nodes
        // there (the one namespace besides `default` a real server allows).
        let ok = ns == "rebound-system"
            || (ns == "kube-system"
                && (o["metadata"]["name"] == "rebound-controller-device-info"
                    || o["metadata"]["name"] == "rebound-agent-events"));
        assert!(
            ok,
            "{} {} is in namespace {ns:?}",
            o["kind"], o["metadata"]["name"]
        );
    }
}

fn restricted_container(c: &Value, what: &str) {
    let sc = &c["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true, "{what}");
    assert_eq!(sc["allowPrivilegeEscalation"], false, "{what}");
    assert_eq!(
        sc["capabilities"]["drop"],
        serde_json::json!(["ALL"]),
        "{what}"
    );
}

fn env_from_field(c: &Value, name: &str) -> String {
    c["env"]
        .as_array()
        .and_then(|e| e.iter().find(|v| v["name"] == name))
        .and_then(|v| v["valueFrom"]["fieldRef"]["fieldPath"].as_str())
        .unwrap_or_else(|| panic!("env {name} does not come from the downward API"))
        .to_string()
}

#[test]
fn controller_deployment_is_ha_and_restricted() {
    let all = kustomize("config/default");
    let d = one(&all, "Deployment", "rebound-controller");
    assert_eq!(d["spec"]["replicas"], 2);
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "rebound-controller");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    assert!(pod["volumes"].is_null(), "the controller needs no volumes");
    // A graceful stop lets the effects in flight finish before the Lease
    // is released: the kubelet must not kill it first.
    let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap_or(30);
    assert!(
        grace > rebound::controller::SHUTDOWN_DRAIN.as_secs() + 5,
        "terminationGracePeriodSeconds {grace} cuts the shutdown drain short"
    );
    let c = &pod["containers"][0];
    restricted_container(c, "controller");
    assert_eq!(c["securityContext"]["runAsNonRoot"], true);
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args[0], "controller");
    assert!(
        !args.contains(&"--leader-election=false"),
        "leader election must be on with 2 replicas"
    );
    assert_eq!(env_from_field(c, "POD_NAMESPACE"), "metadata.namespace");
    assert_eq!(env_from_field(c, "POD_NAME"), "metadata.name");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    let port = c["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == c["livenessProbe"]["httpGet"]["port"]);
    assert_eq!(
        port.expect("probe port is a named container port")["containerPort"],
        8080
    );
    for k in ["requests", "limits"] {
        assert!(c["resources"][k]["memory"].is_string(), "memory {k}");
    }
    assert!(c["resources"]["requests"]["cpu"].is_string());
    // The chart's template says the same (text: it is not rendered here).
    let t = read("chart/rebound/templates/deployment.yaml");
    for line in [
        "runAsNonRoot: true",
        "readOnlyRootFilesystem: true",
        "allowPrivilegeEscalation: false",
        "drop: [ALL]",
        "type: RuntimeDefault",
        "path: /healthz",
        "path: /readyz",
        "fieldPath: metadata.namespace",
        "fieldPath: metadata.name",
        "- controller",
        "terminationGracePeriodSeconds: 60",
    ] {
        assert!(t.contains(line), "chart deployment lacks `{line}`");
    }
    let values = values();
    assert_eq!(values["controller"]["replicas"], 2);
    assert_eq!(values["controller"]["leaderElection"], true);
}

fn check_agent_pod(pod: &Value, what: &str) {
    let c = &pod["containers"][0];
    restricted_container(c, what);
    assert_eq!(
        c["securityContext"]["capabilities"]["add"],
        serde_json::json!(["SYSLOG"]),
        "{what}: only CAP_SYSLOG"
    );
    assert_ne!(c["securityContext"]["privileged"], true, "{what}");
    assert!(
        pod["hostPID"].is_null() && pod["hostNetwork"].is_null() && pod["hostIPC"].is_null(),
        "{what}: no host namespaces"
    );
    let mounts = c["volumeMounts"].as_array().expect("mounts");
    for v in pod["volumes"].as_array().expect("volumes") {
        if v["hostPath"].is_object() {
            let m = mounts
                .iter()
                .find(|m| m["name"] == v["name"])
                .expect("mounted");
            assert_eq!(
                m["readOnly"], true,
                "{what}: host path {} mounted writable",
                v["hostPath"]["path"]
            );
        }
    }
    assert_eq!(env_from_field(c, "NODE_NAME"), "spec.nodeName");
    assert_eq!(c["args"][0], "agent");
}

#[test]
fn agent_daemonset_reads_only_the_kernel_log() {
    let all = kustomize("config/default");
    let ds = one(&all, "DaemonSet", "rebound-agent");
    let pod = &ds["spec"]["template"]["spec"];
    check_agent_pod(pod, "config agent");
    assert_eq!(pod["serviceAccountName"], "rebound-agent");
    let hp: Vec<&str> = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["hostPath"]["path"].as_str())
        .collect();
    assert_eq!(
        hp,
        ["/dev/kmsg"],
        "the agent mounts only /dev/kmsg from the host"
    );
    let terms = serde_json::to_string(&pod["affinity"]["nodeAffinity"]).unwrap();
    assert!(
        terms.contains("nvidia.com/gpu.present"),
        "accelerator nodes only"
    );
    // It tolerates the taint rebound itself puts on separated nodes.
    let taint = rebound::policy::NodeConfig::default().taint_key;
    assert!(
        pod["tolerations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["key"] == taint.as_str() && t["operator"] == "Exists"),
        "the agent must tolerate {taint}"
    );
    let t = read("chart/rebound/templates/daemonset.yaml");
    for line in [
        "add: [SYSLOG]",
        "drop: [ALL]",
        "readOnly: true",
        "readOnlyRootFilesystem: true",
        "allowPrivilegeEscalation: false",
        "key: {{ .Values.controller.taintKey }}",
        "fieldPath: spec.nodeName",
    ] {
        assert!(t.contains(line), "chart daemonset lacks `{line}`");
    }
    // /dev/kmsg, and the driver's library directory only when
    // agent.nvml.hostLibDir asks for it (read-only like every mount, above).
    assert_eq!(
        t.matches("hostPath:").count(),
        2,
        "chart agent: /dev/kmsg and the optional driver library directory"
    );
    assert!(
        t.contains("{{- with .Values.agent.nvml.hostLibDir }}\n      - name: driver-lib"),
        "chart agent: the driver library mount is optional"
    );
    assert_eq!(
        values()["controller"]["taintKey"],
        taint.as_str(),
        "chart default taint key"
    );
}

// ------------------------------------------------------------------ RBAC

type Grants = BTreeSet<(String, String, String)>;

fn grants(rules: &Value, what: &str) -> Grants {
    let mut g = Grants::new();
    for r in rules
        .as_array()
        .unwrap_or_else(|| panic!("{what}: no rules"))
    {
        assert!(r["resourceNames"].is_null() || r["resourceNames"].is_array());
        for group in r["apiGroups"].as_array().unwrap() {
            for res in r["resources"].as_array().unwrap() {
                for verb in r["verbs"].as_array().unwrap() {
                    let (group, res, verb) = (
                        group.as_str().unwrap(),
                        res.as_str().unwrap(),
                        verb.as_str().unwrap(),
                    );
                    for s in [group, res, verb] {
                        assert!(!s.contains('*'), "{what}: wildcard in {group}/{res} {verb}");
                    }
                    g.insert((group.to_string(), res.to_string(), verb.to_string()));
                }
            }
        }
    }
    g
}

fn table(rows: &[(&str, &[&str], &[&str])]) -> Grants {
    let mut g = Grants::new();
    for (group, resources, verbs) in rows {
        for r in *resources {
            for v in *verbs {
                g.insert((group.to_string(), r.to_string(), v.to_string()));
            }
        }
    }
    g
}

/// What the controller uses, cluster-wide (issue text: every verb the code
/// uses and no more).
const CONTROLLER_CLUSTER: &[(&str, &[&str], &[&str])] = &[
    (
        "",
        &["pods"],
        &["get", "list", "watch", "delete", "deletecollection"],
    ),
    ("", &["pods/log"], &["get"]),
    ("", &["nodes"], &["get", "list", "watch", "patch"]),
    ("", &["events"], &["list", "watch"]),
    ("events.k8s.io", &["events"], &["create", "patch"]),
    ("", &["configmaps"], &["create"]),
    (
        "apiextensions.k8s.io",
        &["customresourcedefinitions"],
        &["list", "watch"],
    ),
    (
        "rebound.dev",
        &["recoverypolicies", "faultclassifications"],
        &["get", "list", "watch"],
    ),
    (
        "rebound.dev",
        &["recoverypolicies/status", "faultclassifications/status"],
        &["patch"],
    ),
    (
        "kubeflow.org",
        &[
            "pytorchjobs",
            "tfjobs",
            "mpijobs",
            "xgboostjobs",
            "paddlejobs",
            "jaxjobs",
        ],
        &["get", "list", "watch", "patch"],
    ),
    (
        "batch.volcano.sh",
        &["jobs"],
        &["get", "list", "watch", "patch"],
    ),
    (
        "jobset.x-k8s.io",
        &["jobsets"],
        &["get", "list", "watch", "patch"],
    ),
    (
        "trainer.kubeflow.org",
        &["trainjobs"],
        &["get", "list", "watch", "patch"],
    ),
    ("batch", &["jobs"], &["get", "list", "watch", "patch"]),
    ("bus.volcano.sh", &["commands"], &["create"]),
    ("", &["configmaps"], &["list", "watch", "patch"]),
    ("apps", &["deployments"], &["list", "watch"]),
];
const CONTROLLER_KUBE_SYSTEM: &[(&str, &[&str], &[&str])] =
    &[("", &["configmaps"], &["list", "watch"])];
const CONTROLLER_ROOT_NS: &[(&str, &[&str], &[&str])] = &[(
    "coordination.k8s.io",
    &["leases"],
    &["get", "create", "update"],
)];
const AGENT_CLUSTER: &[(&str, &[&str], &[&str])] = &[
    ("", &["nodes"], &["get"]),
    ("", &["nodes/status"], &["patch"]),
];
const AGENT_KUBE_SYSTEM: &[(&str, &[&str], &[&str])] =
    &[("events.k8s.io", &["events"], &["create", "patch"])];

/// Grants of a ServiceAccount through bindings of `kind` (ClusterRoleBinding
/// or RoleBinding), per namespace ("" for cluster-wide).
fn bound_grants(all: &[Value], sa: &str) -> BTreeMap<String, Grants> {
    let mut out: BTreeMap<String, Grants> = BTreeMap::new();
    for b in all
        .iter()
        .filter(|o| o["kind"] == "ClusterRoleBinding" || o["kind"] == "RoleBinding")
    {
        let subjects = b["subjects"].as_array().unwrap();
        if !subjects.iter().any(|s| {
            s["kind"] == "ServiceAccount" && s["name"] == sa && s["namespace"] == "rebound-system"
        }) {
            continue;
        }
        let role = one(
            all,
            b["roleRef"]["kind"].as_str().unwrap(),
            b["roleRef"]["name"].as_str().unwrap(),
        );
        let ns = if b["kind"] == "RoleBinding" {
            b["metadata"]["namespace"].as_str().unwrap()
        } else {
            ""
        };
        let what = format!("{} {}", role["kind"], role["metadata"]["name"]);
        out.entry(ns.to_string())
            .or_default()
            .extend(grants(&role["rules"], &what));
    }
    out
}

#[test]
fn rbac_grants_exactly_what_each_component_uses() {
    let all = kustomize("config/default");
    let c = bound_grants(&all, "rebound-controller");
    assert_eq!(
        c.keys().collect::<Vec<_>>(),
        ["", "kube-system", "rebound-system"]
    );
    assert_eq!(c[""], table(CONTROLLER_CLUSTER), "controller ClusterRole");
    assert_eq!(
        c["kube-system"],
        table(CONTROLLER_KUBE_SYSTEM),
        "controller in kube-system"
    );
    assert_eq!(
        c["rebound-system"],
        table(CONTROLLER_ROOT_NS),
        "controller in the root namespace"
    );
    let a = bound_grants(&all, "rebound-agent");
    assert_eq!(a.keys().collect::<Vec<_>>(), ["", "kube-system"]);
    assert_eq!(a[""], table(AGENT_CLUSTER), "agent ClusterRole");
    assert_eq!(
        a["kube-system"],
        table(AGENT_KUBE_SYSTEM),
        "agent in kube-system"
    );
    // No wildcard and no Secrets anywhere (aggregated roles have no rules
    // of their own).
    for r in all.iter().filter(|o| {
        (o["kind"] == "ClusterRole" || o["kind"] == "Role") && o["aggregationRule"].is_null()
    }) {
        let g = grants(&r["rules"], r["metadata"]["name"].as_str().unwrap());
        assert!(
            !g.iter().any(|(_, res, _)| res == "secrets"),
            "{}",
            r["metadata"]["name"]
        );
    }
    // The chart uses the same rules.
    for (file, name) in [
        (
            "chart/rebound/files/rbac/controller-rules.yaml",
            "rebound-controller",
        ),
        ("chart/rebound/files/rbac/agent-rules.yaml", "rebound-agent"),
    ] {
        let chart = docs_of(file).remove(0);
        assert_eq!(
            chart,
            one(&all, "ClusterRole", name)["rules"],
            "{file} differs from config/rbac's {name}"
        );
    }
    let chart = read("chart/rebound/templates/rbac-controller.yaml");
    assert!(chart.contains("verbs: [list, watch]") && chart.contains("namespace: kube-system"));
    assert!(chart.contains("verbs: [get, create, update]"));
    // docs/operations.md has the table: a row per (group, resource) with its verbs.
    let ops = read("docs/operations.md");
    for (who, rows) in [
        (
            "controller",
            [
                CONTROLLER_CLUSTER,
                CONTROLLER_KUBE_SYSTEM,
                CONTROLLER_ROOT_NS,
            ]
            .concat(),
        ),
        ("agent", [AGENT_CLUSTER, AGENT_KUBE_SYSTEM].concat()),
    ] {
        for (group, resources, verbs) in rows {
            for res in resources {
                let group = if group.is_empty() { "core" } else { group };
                let ok = ops.lines().any(|l| {
                    let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                    cells.len() > 5
                        && cells[1] == who
                        && cells[2] == format!("`{group}`")
                        && cells[3].split(", ").any(|r| r == format!("`{res}`"))
                        && verbs.iter().all(|v| cells[4].split(", ").any(|x| x == *v))
                });
                assert!(
                    ok,
                    "docs/operations.md has no RBAC row for the {who}: {group} {res} with {verbs:?}"
                );
            }
        }
    }
}

/// The in-pod restart agent (`rebound inject`'s sidecar): get and watch of
/// the job kinds, in the job's namespace, nothing else.
const RESTART_AGENT: &[(&str, &[&str], &[&str])] = &[
    (
        "kubeflow.org",
        &[
            "pytorchjobs",
            "tfjobs",
            "mpijobs",
            "xgboostjobs",
            "paddlejobs",
            "jaxjobs",
        ],
        &["get", "watch"],
    ),
    ("batch.volcano.sh", &["jobs"], &["get", "watch"]),
    ("jobset.x-k8s.io", &["jobsets"], &["get", "watch"]),
    ("batch", &["jobs"], &["get", "watch"]),
    ("trainer.kubeflow.org", &["trainjobs"], &["get", "watch"]),
];

/// The label that aggregates job rules into the restart agent's role.
const RESTART_AGENT_AGGREGATE: &str = "rebound.dev/aggregate-to-restart-agent";

/// `REBOUND_JOB_API` of the agent `rebound inject` adds to a document.
fn injected_job_api(mut doc: Value) -> String {
    let opts = rebound::inplace::inject::InjectOptions::default();
    rebound::inplace::inject::inject_document(&mut doc, &opts, "packaging").expect("inject");
    fn find(v: &Value) -> Option<String> {
        match v {
            Value::Object(m) => {
                if m.get("name").and_then(Value::as_str) == Some("REBOUND_JOB_API") {
                    return m.get("value").and_then(Value::as_str).map(str::to_owned);
                }
                m.values().find_map(find)
            }
            Value::Array(a) => a.iter().find_map(find),
            _ => None,
        }
    }
    find(&doc).expect("REBOUND_JOB_API")
}

#[test]
fn restart_agent_rbac_is_get_and_watch_of_every_job_kind_inject_wires() {
    use serde_json::json;
    let all = kustomize("config/default");
    let agg = one(&all, "ClusterRole", "rebound-restart-agent");
    assert_eq!(
        agg["aggregationRule"]["clusterRoleSelectors"][0]["matchLabels"][RESTART_AGENT_AGGREGATE],
        "true"
    );
    assert!(
        agg.get("rules").is_none(),
        "the control plane fills it; `rules: []` would make each apply empty it"
    );
    let jobs = one(&all, "ClusterRole", "rebound-restart-agent-jobs");
    assert_eq!(jobs["metadata"]["labels"][RESTART_AGENT_AGGREGATE], "true");
    let g = grants(&jobs["rules"], "rebound-restart-agent-jobs");
    assert_eq!(g, table(RESTART_AGENT), "restart agent rules");
    // Bound per namespace by the job owners, never cluster-wide here.
    for b in all
        .iter()
        .filter(|o| o["kind"] == "ClusterRoleBinding" || o["kind"] == "RoleBinding")
    {
        let r = b["roleRef"]["name"].as_str().unwrap_or_default();
        assert!(!r.starts_with("rebound-restart-agent"), "config binds {r}");
    }
    // Every job API the injected agent watches is granted.
    let pod = json!({"spec": {"containers": [{"name": "c", "image": "i"}]}});
    let mut docs = vec![
        json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "v"},
               "spec": {"tasks": [{"name": "t", "template": pod}]}}),
        json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "s"},
               "spec": {"replicatedJobs": [{"name": "r", "template": {"spec": {"template": pod}}}]}}),
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "b"}, "spec": {"template": pod}}),
        json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime", "metadata": {"name": "r"},
               "spec": {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": pod}}}]}}}}),
    ];
    for (kind, _, specs) in rebound::inplace::inject::KUBEFLOW_KINDS {
        docs.push(
            json!({"apiVersion": "kubeflow.org/v1", "kind": kind, "metadata": {"name": "k"},
                         "spec": {specs: {"Worker": {"template": pod}}}}),
        );
    }
    let mut seen = BTreeSet::new();
    for d in docs {
        let api = injected_job_api(d);
        let (group, rest) = api.rsplit_once('/').map_or(("", ""), |(gv, plural)| {
            (gv.rsplit_once('/').map_or("", |(g, _)| g), plural)
        });
        for verb in ["get", "watch"] {
            assert!(
                g.contains(&(group.to_string(), rest.to_string(), verb.to_string())),
                "the agent of {api} may not {verb} it"
            );
        }
        seen.insert((group.to_string(), rest.to_string()));
    }
    let granted: BTreeSet<(String, String)> =
        g.iter().map(|(a, b, _)| (a.clone(), b.clone())).collect();
    assert_eq!(seen, granted, "no grant for a kind inject does not wire");
    // The chart: the same rules, the same aggregation, bindings of the
    // aggregated role from values.
    let chart = docs_of("chart/rebound/files/rbac/restart-agent-rules.yaml").remove(0);
    assert_eq!(chart, jobs["rules"], "chart rules differ from config/rbac");
    let t = read("chart/rebound/templates/rbac-restart-agent.yaml");
    assert!(t.contains(&format!("{RESTART_AGENT_AGGREGATE}: \"true\"")));
    assert!(t.contains(".Values.restartAgent.bindings") && t.contains("kind: RoleBinding"));
    assert!(!t.contains("ClusterRoleBinding"), "never cluster-wide");
    assert!(
        t.contains("name: {{ $name }}\nsubjects:"),
        "binds the aggregated role"
    );
    let values = values();
    assert_eq!(values["restartAgent"]["bindings"], json!([]));
    // `rebound inject`'s default image is the one the chart and config/ run.
    let chart_meta = docs_of("chart/rebound/Chart.yaml").remove(0);
    let chart_image = format!(
        "{}:{}",
        values["image"]["repository"].as_str().unwrap_or_default(),
        chart_meta["appVersion"].as_str().unwrap_or_default()
    );
    assert_eq!(rebound::inplace::inject::DEFAULT_IMAGE, chart_image);
    let k = docs_of("config/default/kustomization.yaml").remove(0);
    let img = &k["images"][0];
    assert_eq!(
        format!(
            "{}:{}",
            img["newName"].as_str().unwrap_or_default(),
            img["newTag"].as_str().unwrap_or_default()
        ),
        rebound::inplace::inject::DEFAULT_IMAGE
    );
    assert!(values["restartAgent"]["image"].is_string());
    assert!(read("chart/rebound/templates/NOTES.txt").contains("rebound inject --image"));
    // docs/in-place.md has the table: a row per (group, resources) with its verbs.
    let doc = read("docs/in-place.md");
    for (group, resources, verbs) in RESTART_AGENT {
        let ok = doc.lines().any(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            cells.len() > 4
                && cells[1] == format!("`{group}`")
                && resources
                    .iter()
                    .all(|r| cells[2].split(", ").any(|x| x == format!("`{r}`")))
                && cells[3] == verbs.join(", ")
        });
        assert!(
            ok,
            "docs/in-place.md has no RBAC row for {group} {resources:?}"
        );
    }
}

// ------------------------------------------------------------------ chart

fn values() -> Value {
    docs_of("chart/rebound/values.yaml").remove(0)
}

#[test]
fn chart_templates_are_balanced_and_use_existing_values_includes_and_files() {
    let values = values();
    let helpers = read("chart/rebound/templates/_helpers.tpl");
    let defined = captures(r#"define "([^"]+)""#, &helpers);
    let values_re = regex::Regex::new(r"\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)").unwrap();
    let include_re = regex::Regex::new(r#"include "([^"]+)""#).unwrap();
    let files_re = regex::Regex::new(r#"\.Files\.(Get|Glob) "([^"]+)""#).unwrap();
    let open_re = regex::Regex::new(r"\{\{-?\s*(if|range|with|define)\b").unwrap();
    let end_re = regex::Regex::new(r"\{\{-?\s*end\s*-?\}\}").unwrap();
    let templates = files_under("chart/rebound/templates");
    assert!(templates.len() >= 10, "{templates:?}");
    let mut used_values = 0;
    for t in &templates {
        let text = read(t);
        // Actions open and close in order, never nested, never across a `---`.
        let mut rest = text.as_str();
        while let Some(open) = rest.find("{{") {
            let after = &rest[open + 2..];
            let close = after
                .find("}}")
                .unwrap_or_else(|| panic!("{t}: `{{{{` without `}}}}`"));
            let inner = &after[..close];
            assert!(
                !inner.contains("{{") && !inner.contains('\n')
                    || inner.trim_start_matches('-').trim_start().starts_with("/*"),
                "{t}: unbalanced action near {:?}",
                &inner[..inner.len().min(60)]
            );
            rest = &after[close + 2..];
        }
        assert!(!rest.contains("}}"), "{t}: `}}}}` without `{{{{`");
        // Control blocks balance.
        let opens = open_re.find_iter(&text).count();
        let ends = end_re.find_iter(&text).count();
        assert_eq!(
            opens, ends,
            "{t}: {opens} if/range/with/define but {ends} end"
        );
        for c in values_re.captures_iter(&text) {
            let path = &c[1][1..];
            let mut node = &values;
            for seg in path.split('.') {
                node = node
                    .get(seg)
                    .unwrap_or_else(|| panic!("{t} uses .Values.{path}, which values.yaml lacks"));
            }
            used_values += 1;
        }
        for c in include_re.captures_iter(&text) {
            assert!(
                defined.contains(&c[1]),
                "{t} includes undefined template {}",
                &c[1]
            );
        }
        for c in files_re.captures_iter(&text) {
            let (how, pat) = (&c[1], &c[2]);
            let hits = if how == "Get" {
                usize::from(root().join("chart/rebound").join(pat).is_file())
            } else {
                let (dir, ext) = pat.rsplit_once("/*").unwrap();
                files_under(&format!("chart/rebound/{dir}"))
                    .iter()
                    .filter(|f| f.ends_with(ext))
                    .count()
            };
            assert!(hits > 0, "{t}: .Files.{how} {pat:?} finds nothing");
        }
    }
    assert!(used_values > 40, "templates use only {used_values} values");
    // Every value is used by some template: the leaf itself, or a parent
    // used whole (`toYaml .Values.controller.resources`).
    let all_text: String = templates.iter().map(|t| read(t)).collect();
    let refs: BTreeSet<String> = values_re
        .captures_iter(&all_text)
        .map(|c| c[1].to_string())
        .collect();
    fn leaves(prefix: &str, v: &Value, out: &mut Vec<String>) {
        match v.as_object() {
            Some(o) if !o.is_empty() => o
                .iter()
                .for_each(|(k, c)| leaves(&format!("{prefix}.{k}"), c, out)),
            _ => out.push(prefix.to_string()),
        }
    }
    let mut paths = Vec::new();
    leaves("", &values, &mut paths);
    for p in paths {
        let used = refs
            .iter()
            .any(|r| *r == p || p.starts_with(&format!("{r}.")));
        assert!(used, "values.yaml{p} is not used by any template");
    }
}

/// `schema` accepts `v`'s shape: every key has a schema, every type matches.
fn covers(schema: &Value, v: &Value, path: &str, problems: &mut Vec<String>) {
    let ty = schema["type"].as_str().unwrap_or("");
    let ok = match ty {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "" => true,
        other => {
            problems.push(format!("{path}: unknown type {other}"));
            true
        }
    };
    if !ok {
        problems.push(format!("{path}: value {v} is not a {ty}"));
    }
    if let (Some(o), Some(props)) = (v.as_object(), schema["properties"].as_object()) {
        for (k, child) in o {
            match props.get(k) {
                Some(s) => covers(s, child, &format!("{path}.{k}"), problems),
                None => problems.push(format!("{path}.{k}: not in values.schema.json")),
            }
        }
    }
    if let Some(e) = schema["enum"].as_array()
        && !e.contains(v)
    {
        problems.push(format!("{path}: {v} not in {e:?}"));
    }
}

#[test]
fn values_schema_is_valid_json_and_covers_every_value() {
    let schema: Value = serde_json::from_str(&read("chart/rebound/values.schema.json"))
        .expect("values.schema.json is JSON");
    assert_eq!(schema["type"], "object");
    assert_eq!(
        schema["additionalProperties"], false,
        "unknown top-level values must be rejected"
    );
    let values = values();
    let top: BTreeSet<&String> = values.as_object().unwrap().keys().collect();
    let covered: BTreeSet<&String> = schema["properties"].as_object().unwrap().keys().collect();
    assert_eq!(
        top, covered,
        "top-level keys of values.yaml and values.schema.json"
    );
    let mut problems = Vec::new();
    covers(&schema, &values, "values", &mut problems);
    assert!(problems.is_empty(), "{problems:#?}");
    // The schema rejects what it should (this checker, not helm, so it is a
    // check of our own walker too).
    let mut bad = values.clone();
    bad["controller"]["replicas"] = Value::String("two".into());
    bad["controller"]["logFormat"] = Value::String("xml".into());
    bad["controller"]["typo"] = Value::Bool(true);
    let mut p = Vec::new();
    covers(&schema, &bad, "values", &mut p);
    assert_eq!(p.len(), 3, "{p:#?}");
    // Defaults agree with the controller's own defaults where the chart
    // states one (maxSeparated, breakerWindow, taintKey).
    let d = rebound::policy::NodeConfig::default();
    assert_eq!(
        rebound::policy::Limit::parse(values["controller"]["maxSeparated"].as_str().unwrap()),
        Ok(d.max_separated)
    );
    assert_eq!(
        rebound::api::duration::parse(values["controller"]["breakerWindow"].as_str().unwrap()),
        Ok(d.breaker_window)
    );
    let chart = docs_of("chart/rebound/Chart.yaml").remove(0);
    assert_eq!(chart["apiVersion"], "v2");
    assert_eq!(
        chart["appVersion"],
        env!("CARGO_PKG_VERSION"),
        "Chart appVersion follows the crate version"
    );
}

/// Long flags and environment variables of a clap `Args` struct.
fn clap_surface<A: clap::Args>() -> (BTreeSet<String>, BTreeSet<String>) {
    let cmd = A::augment_args(clap::Command::new("rebound"));
    let flags = cmd
        .get_arguments()
        .filter_map(|a| a.get_long())
        .map(str::to_string)
        .collect();
    let envs = cmd
        .get_arguments()
        .filter_map(|a| a.get_env())
        .map(|e| e.to_string_lossy().to_string())
        .collect();
    (flags, envs)
}

fn flags_in(text: &str) -> BTreeSet<String> {
    captures(r"- --([a-z][a-z0-9-]*)", text)
}

fn rebound_envs_in(text: &str) -> BTreeSet<String> {
    captures(r"name: (REBOUND_[A-Z0-9_]+)", text)
}

/// Every `--flag` and `REBOUND_*` variable the manifests pass exists on the
/// subcommand they run, so a renamed flag cannot crash-loop the pods.
#[test]
fn manifest_flags_and_env_exist_in_the_code() {
    let controller = clap_surface::<rebound::controller::ControllerArgs>();
    let agent = clap_surface::<rebound::agent::args::AgentArgs>();
    for (component, (flags, envs), manifests) in [
        (
            "controller",
            controller,
            [
                "config/manager/deployment.yaml",
                "chart/rebound/templates/deployment.yaml",
            ],
        ),
        (
            "agent",
            agent,
            [
                "config/agent/daemonset.yaml",
                "chart/rebound/templates/daemonset.yaml",
            ],
        ),
    ] {
        for m in manifests {
            let text = read(m);
            for f in flags_in(&text) {
                assert!(
                    flags.contains(&f),
                    "{m} passes --{f}, which `rebound {component}` does not have"
                );
            }
            for e in rebound_envs_in(&text) {
                assert!(
                    envs.contains(&e),
                    "{m} sets {e}, which `rebound {component}` does not read"
                );
            }
            if component == "agent" {
                // The downward-API variables the agent relies on.
                assert!(
                    envs.contains("NODE_NAME") && text.contains("name: NODE_NAME"),
                    "{m}: NODE_NAME"
                );
            }
        }
    }
    // The chart passes the flags its values stand for.
    let chart = flags_in(&read("chart/rebound/templates/deployment.yaml"));
    for f in [
        "root-namespace",
        "qps",
        "burst",
        "max-separated",
        "breaker-window",
        "taint-key",
        "condition-types",
        "dry-run",
        "log-format",
    ] {
        assert!(chart.contains(f), "the chart never passes --{f}");
    }
}

// ------------------------------------------------------------ image, docs

#[test]
fn dockerfile_builds_one_static_nonroot_image() {
    let d = read("Dockerfile");
    let froms: Vec<&str> = d.lines().filter(|l| l.starts_with("FROM ")).collect();
    assert!(froms.len() >= 2, "multi-stage");
    let last = froms.last().unwrap();
    assert!(
        last.contains("distroless/static") || last.contains("scratch"),
        "final stage is static: {last}"
    );
    assert!(d.contains("musl"), "a static (musl) binary");
    assert!(d.contains("USER 65532"), "non-root 65532");
    assert!(d.contains("ENTRYPOINT [\"/usr/local/bin/rebound\"]"));
    let ignore = read(".dockerignore");
    let ignored: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.trim_end_matches('/'))
        .collect();
    // Whatever the build COPYs exists and is not ignored.
    let mut copied: Vec<&str> = Vec::new();
    for l in d
        .lines()
        .filter(|l| l.starts_with("COPY ") && !l.contains("--from"))
    {
        let parts: Vec<&str> = l.split_whitespace().collect();
        for src in &parts[1..parts.len() - 1] {
            assert!(
                root().join(src).exists(),
                "Dockerfile copies {src}, which does not exist"
            );
            copied.push(src);
            assert!(
                !ignored.contains(src),
                ".dockerignore excludes {src}, which the Dockerfile copies"
            );
        }
    }
    // The build must not need a file it does not copy or .dockerignore
    // leaves out: `rebound demo` embeds samples/ with include_str!.
    let inc = regex::Regex::new(
        r#"include_(?:str|bytes)!\(\s*(?:concat!\(\s*env!\("CARGO_MANIFEST_DIR"\),\s*)?"([^"]+)""#,
    )
    .unwrap();
    for f in files_under("src")
        .into_iter()
        .chain(files_under("crates"))
        .filter(|f| f.ends_with(".rs"))
    {
        for c in inc.captures_iter(&read(&f)) {
            let p = &c[1];
            let dir = Path::new(&f)
                .parent()
                .unwrap()
                .to_string_lossy()
                .to_string();
            let resolved = if p.starts_with('/') {
                normalize(p)
            } else {
                normalize(&format!("{dir}/{p}"))
            };
            let top = resolved.split('/').next().unwrap_or("");
            assert!(
                copied.contains(&top),
                "{f} embeds {resolved}, but the Dockerfile does not COPY {top}/ into the build"
            );
            assert!(
                !ignored.contains(&top),
                "{f} embeds {resolved}, but .dockerignore leaves {top}/ out of the image build"
            );
        }
    }
}

fn metric_refs(text: &str) -> BTreeSet<String> {
    regex::Regex::new(r"\brebound_[a-z0-9_]+")
        .unwrap()
        .find_iter(text)
        .map(|m| {
            let s = m.as_str();
            for suffix in ["_bucket", "_sum", "_count"] {
                if let Some(base) = s.strip_suffix(suffix) {
                    return base.to_string();
                }
            }
            s.to_string()
        })
        .collect()
}

#[test]
fn metrics_docs_alerts_and_dashboard_name_real_metrics() {
    let names: Vec<String> = rebound::controller::metrics::NAMES
        .iter()
        .map(|n| n.to_string())
        .collect();
    assert!(names.len() >= 10, "{names:?}");
    let docs = read("docs/metrics.md");
    for n in &names {
        assert!(
            docs.contains(&format!("`{n}`")),
            "docs/metrics.md does not document {n}"
        );
    }
    let dashboard: Value =
        serde_json::from_str(&read("docs/grafana-dashboard.json")).expect("dashboard JSON");
    assert!(dashboard["panels"].as_array().is_some_and(|p| p.len() >= 5));
    for (what, text) in [
        ("docs/metrics.md", docs.clone()),
        (
            "chart/rebound/templates/prometheusrule.yaml",
            read("chart/rebound/templates/prometheusrule.yaml"),
        ),
        (
            "docs/grafana-dashboard.json",
            read("docs/grafana-dashboard.json"),
        ),
        ("docs/operations.md", read("docs/operations.md")),
    ] {
        let refs = metric_refs(&text);
        assert!(!refs.is_empty(), "{what} names no metric");
        for r in refs {
            assert!(
                names.contains(&r),
                "{what} names {r}, which the controller does not export"
            );
        }
    }
    let rules = read("chart/rebound/templates/prometheusrule.yaml");
    for alert in [
        "ReboundBreakerOpen",
        "ReboundRestartBudgetExhausted",
        "ReboundCelErrors",
        "ReboundNoLeader",
    ] {
        assert!(
            rules.contains(&format!("alert: {alert}")),
            "missing alert {alert}"
        );
    }
    // The budget alert keys on the skip reason the decision core reports.
    assert!(rules.contains(&format!(
        "outcome=\"{}\"",
        rebound::policy::Skip::BudgetExhausted { used: 0, max: 0 }.name()
    )));
}

#[test]
fn crd_reference_is_generated_from_the_schemas() {
    check_generated("docs/crd-reference.md", &crd_reference());
}

/// Markdown reference of every CRD field, from the OpenAPI schemas.
fn crd_reference() -> String {
    let mut out = String::from(
        "# CRD reference\n\n<!-- Generated from the CRD schemas by tests/it/packaging.rs; do not edit.\n     Regenerate: REBOUND_BLESS=1 cargo test --test it packaging -->\n\n\
         Every field of the `rebound.dev/v1alpha1` custom resources, as the API\nserver validates them (`kubectl explain <kind>.spec` shows the same\ndescriptions). Concepts and examples: [concepts.md](concepts.md),\n[cel.md](cel.md).\n",
    );
    for crd in rebound::api::crds() {
        let v = serde_json::to_value(&crd).unwrap();
        let names = &v["spec"]["names"];
        let ver = &v["spec"]["versions"][0];
        let schema = &ver["schema"]["openAPIV3Schema"];
        out.push_str(&format!("\n## {}\n\n", names["kind"].as_str().unwrap()));
        out.push_str(&format!(
            "{}\n\n",
            one_line(schema["description"].as_str().unwrap_or(""))
        ));
        out.push_str(&format!(
            "- API version: `{}/{}`\n- Scope: {}\n- Plural: `{}`; short names: {}; category: `{}`\n",
            v["spec"]["group"].as_str().unwrap(),
            ver["name"].as_str().unwrap(),
            v["spec"]["scope"].as_str().unwrap(),
            names["plural"].as_str().unwrap(),
            names["shortNames"].as_array().unwrap().iter().map(|s| format!("`{}`", s.as_str().unwrap())).collect::<Vec<_>>().join(", "),
            names["categories"][0].as_str().unwrap(),
        ));
        let cols: Vec<String> = ver["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                format!(
                    "{} (`{}`)",
                    c["name"].as_str().unwrap(),
                    c["jsonPath"].as_str().unwrap()
                )
            })
            .collect();
        out.push_str(&format!("- `kubectl get` columns: {}\n", cols.join(", ")));
        for part in ["spec", "status"] {
            let node = &schema["properties"][part];
            out.push_str(&format!(
                "\n### {}.{part}\n\n",
                names["kind"].as_str().unwrap()
            ));
            out.push_str("| field | type | required | description |\n|---|---|---|---|\n");
            fields(part, node, &mut out);
        }
    }
    out
}

fn one_line(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

fn type_of(s: &Value) -> String {
    if let Some(t) = s["type"].as_str() {
        return match t {
            "array" => format!("[]{}", type_of(&s["items"])),
            "object" if s["additionalProperties"].is_object() => {
                format!("map[string]{}", type_of(&s["additionalProperties"]))
            }
            t => t.to_string(),
        };
    }
    if s["x-kubernetes-int-or-string"] == true {
        return "int-or-string".into();
    }
    "any".into()
}

fn constraints(s: &Value) -> Vec<String> {
    let mut c = Vec::new();
    if let Some(e) = s["enum"].as_array() {
        c.push(format!(
            "one of {}",
            e.iter()
                .map(|x| format!(
                    "`{}`",
                    x.as_str().map(str::to_string).unwrap_or(x.to_string())
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    for (k, label) in [
        ("minimum", "min"),
        ("maximum", "max"),
        ("minLength", "min length"),
        ("maxLength", "max length"),
        ("minItems", "min items"),
        ("maxItems", "max items"),
    ] {
        if let Some(n) = s[k].as_f64() {
            c.push(format!("{label} {n}"));
        }
    }
    if let Some(d) = s.get("default") {
        c.push(format!("default `{d}`"));
    }
    let item_rules = s["items"]["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten();
    for r in s["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(item_rules)
    {
        c.push(format!("rule: {}", r["message"].as_str().unwrap_or("")));
    }
    c
}

fn fields(path: &str, node: &Value, out: &mut String) {
    let required: BTreeSet<&str> = node["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r.as_str())
        .collect();
    let Some(props) = node["properties"].as_object() else {
        return;
    };
    for (name, child) in props {
        let p = format!("{path}.{name}");
        let mut desc = one_line(child["description"].as_str().unwrap_or(""));
        let c = constraints(child);
        if !c.is_empty() {
            if !desc.is_empty() {
                desc.push(' ');
            }
            desc.push_str(&format!("({})", one_line(&c.join("; "))));
        }
        out.push_str(&format!(
            "| `{p}` | {} | {} | {desc} |\n",
            type_of(child),
            if required.contains(name.as_str()) {
                "yes"
            } else {
                ""
            }
        ));
        if child["type"] == "array" {
            fields(&format!("{p}[]"), &child["items"], out);
        } else {
            fields(&p, child, out);
        }
    }
}

#[test]
fn docs_cover_levels_skips_cel_variables_events_and_ascend_names() {
    use rebound::fault::Level;
    let concepts = read("docs/concepts.md");
    for l in Level::ALL {
        assert!(
            concepts.contains(&format!("`{l}`")),
            "docs/concepts.md lacks level {l}"
        );
    }
    // Every skip reason the decision core can report.
    let decide = read("crates/rebound-core/src/policy/decide/outcome.rs");
    let skips = captures(
        r#"Skip::[A-Za-z]+(?: \{ \.\. \})? => "([A-Za-z]+)""#,
        &decide,
    );
    assert!(skips.len() >= 10, "{skips:?}");
    for s in &skips {
        assert!(
            concepts.contains(&format!("`{s}`")),
            "docs/concepts.md does not explain skip reason {s}"
        );
    }
    // Every field CEL sees.
    let cel = read("docs/cel.md");
    let values = read("crates/rebound-core/src/expr/values.rs");
    let keys = captures(r#"m\.insert\(\s*"([A-Za-z]+)""#, &values);
    assert!(keys.len() >= 20, "{keys:?}");
    for k in &keys {
        assert!(
            cel.contains(&format!(".{k}`")),
            "docs/cel.md does not document the CEL field `{k}`"
        );
    }
    for v in rebound::expr::POLICY_VARS {
        assert!(
            cel.contains(&format!("`{v}`")),
            "docs/cel.md lacks variable {v}"
        );
    }
    // Every Event reason the controller may write.
    let events = read("docs/events.md");
    let reasons = rebound::recover::events::reasons::ALL;
    assert!(!reasons.is_empty());
    for r in &reasons {
        assert!(
            events.contains(&format!("`{r}`")),
            "docs/events.md lacks Event reason {r}"
        );
    }
    // The Ascend table maps each ClusterD name to the level the code does.
    let ascend = read("docs/ascend.md");
    let row = regex::Regex::new(r"(?m)^\| `([A-Za-z]+)` \| `([A-Za-z]+)` \|").unwrap();
    let mut n = 0;
    for c in row.captures_iter(&ascend) {
        let level: Level = c[2].parse().unwrap();
        assert_eq!(
            Level::from_clusterd(&c[1]),
            Some(level),
            "docs/ascend.md maps {} wrongly",
            &c[1]
        );
        n += 1;
    }
    assert!(n >= 7, "docs/ascend.md has only {n} mapping rows");
}

#[test]
fn install_commands_in_docs_reference_files_that_exist() {
    let mut docs: Vec<String> = files_under("docs")
        .into_iter()
        .filter(|f| f.ends_with(".md"))
        .collect();
    if root().join("README.md").is_file() {
        docs.push("README.md".into());
    }
    let cmd = regex::Regex::new(r"(?:kubectl (?:apply|create|delete)(?: --server-side)? -[kf]|kubectl kustomize(?: --load-restrictor \S+)?|helm (?:install|upgrade(?: --install)?|template) [a-z0-9-]+) (\S+)").unwrap();
    let mut checked = 0;
    for d in &docs {
        let text = read(d);
        for c in cmd.captures_iter(&text) {
            let p = c[1].trim_end_matches(['`', ')', ',', '.']);
            if p.starts_with("http")
                || p == "-"
                || p.starts_with('<')
                || p.starts_with('$')
                || p.contains("://")
                || p.starts_with('/')
            {
                continue;
            }
            assert!(
                root().join(p).exists(),
                "{d}: `{}` names {p}, which does not exist",
                &c[0]
            );
            checked += 1;
        }
    }
    assert!(
        checked >= 5,
        "only {checked} install commands found in the docs"
    );
}

#[test]
fn cel_examples_in_the_docs_compile_and_evaluate() {
    use rebound::expr::{Expr, JobView, NodeView, POLICY_VARS, Vars};
    use rebound::fault::{Fault, FaultSource, Level};
    let doc = read("docs/cel.md");
    let blocks: Vec<&str> = doc
        .split("```cel\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap().trim())
        .collect();
    assert!(
        blocks.len() >= 8,
        "docs/cel.md has only {} examples",
        blocks.len()
    );
    let now = chrono::Utc::now();
    let mut fault = Fault::new(FaultSource::NvidiaXid, "79", now);
    fault.node = Some("gpu-7".into());
    let job = JobView {
        kind: "PyTorchJob".into(),
        name: "llm".into(),
        namespace: "team-a".into(),
        restarts: 4,
        replicas: 8,
        ..Default::default()
    };
    let node = NodeView {
        name: "gpu-7".into(),
        level: Some(Level::Separate),
        faults: vec!["79".into()],
        ..Default::default()
    };
    let vars = Vars::new(&fault, Some(Level::Separate), Some(&job), Some(&node), now);
    for src in blocks {
        let e = Expr::compile(src, POLICY_VARS)
            .unwrap_or_else(|err| panic!("docs/cel.md: `{src}` does not compile: {err}"));
        let ok = e
            .eval_bool(&vars)
            .map(|_| ())
            .or_else(|_| e.eval_duration(&vars).map(|_| ()));
        assert!(
            ok.is_ok(),
            "docs/cel.md: `{src}` fails to evaluate: {:?}",
            e.eval_bool(&vars)
        );
    }
}

/// A helm binary: `REBOUND_HELM`, else `helm` on PATH.
fn helm() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("REBOUND_HELM") {
        return Some(PathBuf::from(p));
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join("helm"))
        .find(|p| p.is_file())
}

fn helm_template(helm: &Path, extra: &[&str]) -> Result<Vec<Value>, String> {
    let out = std::process::Command::new(helm)
        .args([
            "template",
            "rebound",
            "chart/rebound",
            "--namespace",
            "rebound-system",
            "--kube-version",
            "1.30.0",
        ])
        .args(extra)
        .current_dir(root())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", helm.display()))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).to_string());
    }
    Ok(yaml_docs(
        &String::from_utf8_lossy(&out.stdout),
        "helm template output",
    ))
}

/// With a helm binary (REBOUND_HELM or PATH), the chart renders, its schema
/// rejects bad values, and with default values it renders the objects of
/// `config/default` with the same rules, security settings and mounts.
/// Without one it prints a notice: the text checks above still run.
#[test]
fn helm_renders_the_chart_like_config_default() {
    let Some(helm) = helm() else {
        eprintln!(
            "notice: no helm binary (set REBOUND_HELM or put helm on PATH); chart rendering not checked"
        );
        return;
    };
    let rendered =
        helm_template(&helm, &[]).unwrap_or_else(|e| panic!("helm template failed: {e}"));
    for d in &rendered {
        check_typed(d, &format!("helm: {} {}", d["kind"], d["metadata"]["name"]));
    }
    let config = kustomize("config/default");
    let ids = |objs: &[Value]| -> BTreeSet<(String, String)> {
        objs.iter()
            .filter(|o| o["kind"] != "Namespace")
            .map(|o| {
                (
                    o["kind"].as_str().unwrap().to_string(),
                    o["metadata"]["name"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    assert_eq!(
        ids(&rendered),
        ids(&config),
        "helm (release `rebound`) and config/default render different objects"
    );
    for (kind, name) in ids(&config) {
        let (h, k) = (one(&rendered, &kind, &name), one(&config, &kind, &name));
        match kind.as_str() {
            "ClusterRole" | "Role" => assert_eq!(h["rules"], k["rules"], "{kind} {name}"),
            "Deployment" | "DaemonSet" => {
                let (hp, kp) = (
                    &h["spec"]["template"]["spec"],
                    &k["spec"]["template"]["spec"],
                );
                for field in [
                    "securityContext",
                    "volumes",
                    "tolerations",
                    "serviceAccountName",
                ] {
                    assert_eq!(hp[field], kp[field], "{kind} {name}: pod {field}");
                }
                let (hc, kc) = (&hp["containers"][0], &kp["containers"][0]);
                for field in [
                    "securityContext",
                    "volumeMounts",
                    "livenessProbe",
                    "readinessProbe",
                    "resources",
                    "ports",
                ] {
                    assert_eq!(hc[field], kc[field], "{kind} {name}: container {field}");
                }
            }
            _ => {}
        }
    }
    let all_on = helm_template(
        &helm,
        &["--set", "metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true,controller.dryRun=true,crds.install=false,agent.enabled=false"],
    )
    .unwrap_or_else(|e| panic!("helm template with every option failed: {e}"));
    let kinds: BTreeSet<&str> = all_on.iter().filter_map(|o| o["kind"].as_str()).collect();
    assert!(
        kinds.contains("ServiceMonitor") && kinds.contains("PrometheusRule"),
        "{kinds:?}"
    );
    assert!(
        !kinds.contains("DaemonSet") && !kinds.contains("CustomResourceDefinition"),
        "{kinds:?}"
    );
    let err = helm_template(&helm, &["--set", "controller.leaderElection=false"])
        .expect_err("two replicas without leader election must not render");
    assert!(err.contains("leaderElection"), "{err}");
    let err = helm_template(&helm, &["--set", "controller.logFormat=xml"])
        .expect_err("the schema must reject logFormat=xml");
    assert!(err.contains("logFormat"), "{err}");
}
