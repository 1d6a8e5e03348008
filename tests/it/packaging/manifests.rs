//! The kustomize manifests and the image: what they reference exists, the
//! controller runs HA and restricted, the agent reads only the kernel log,
//! the Dockerfile builds one static non-root image.

use super::chart::values;
use super::*;

#[test]
fn kustomizations_reference_what_exists() {
    for f in files_under("config")
        .into_iter()
        .filter(|f| f.ends_with("kustomization.yaml"))
    {
        let dir = f.trim_end_matches("/kustomization.yaml");
        let k = docs_of(&f).remove(0);
        // A Component (config/admission) is only ever pulled in by an
        // overlay's `components`.
        match k["kind"].as_str() {
            Some("Kustomization") => {
                assert_eq!(k["apiVersion"], "kustomize.config.k8s.io/v1beta1", "{f}")
            }
            Some("Component") => {
                assert_eq!(k["apiVersion"], "kustomize.config.k8s.io/v1alpha1", "{f}")
            }
            other => panic!("{f}: kind {other:?}"),
        }
        let listed = k["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .chain(k["components"].as_array().into_iter().flatten());
        for r in listed {
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
        ["/dev/kmsg", "/var/lib/kubelet/pod-resources"],
        "the agent mounts only /dev/kmsg and the kubelet's PodResources socket directory from the host"
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
    // /dev/kmsg, the kubelet's PodResources socket directory, and the
    // driver's library directory only when agent.nvml.hostLibDir asks for
    // it (read-only like every mount, above).
    assert_eq!(
        t.matches("hostPath:").count(),
        3,
        "chart agent: /dev/kmsg, the PodResources socket directory and the optional driver library directory"
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
    // The simulator is not compiled by the images' builds (no `sim`
    // feature: tests/it/workspace.rs checks their crate graphs), so what it
    // embeds (the chart's restart-agent rules) need not be in the context.
    for f in files_under("src")
        .into_iter()
        .chain(files_under("crates"))
        .filter(|f| f.ends_with(".rs") && !f.starts_with("crates/rebound-sim/"))
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
