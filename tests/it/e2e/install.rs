//! The install paths, rendered by the real tools (kustomize of the built
//! kubectl, the built helm v4) and accepted by the real API server: every
//! object of `config/default`, of the chart with default values and with
//! every switch turned, passes a server-side dry run (schemas, admission,
//! CEL validation of the server; the MutatingAdmissionPolicy is served
//! from v1.36). The chart's ServiceMonitor and PrometheusRule are the only
//! objects left out: their CRDs are the Prometheus operator's, which the
//! bed does not run.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn run(cmd: &mut Command, what: &str) -> Vec<u8> {
    let out = cmd
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn docs(yaml: &[u8]) -> Vec<Value> {
    let text = String::from_utf8_lossy(yaml);
    serde_saphyr::from_multiple::<Value>(&text)
        .expect("rendered YAML")
        .into_iter()
        .filter(Value::is_object)
        .collect()
}

/// Applies `objects` with a server-side dry run, after the CRDs among them
/// (rebound's own, which every bed installs anyway) and the namespace for
/// real: a dry run of a namespaced object needs its namespace.
fn dry_run(kubectl: &Path, kubeconfig: &Path, objects: &[Value], what: &str) {
    let dir = std::env::temp_dir().join(format!("rebound-install-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, items: Vec<&Value>| {
        let p = dir.join(name);
        std::fs::write(
            &p,
            json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string(),
        )
        .unwrap();
        p
    };
    let (first, rest): (Vec<&Value>, Vec<&Value>) = objects
        .iter()
        .partition(|o| o["kind"] == "CustomResourceDefinition" || o["kind"] == "Namespace");
    let kc = |c: &mut Command| {
        c.arg("--kubeconfig").arg(kubeconfig);
    };
    let mut c = Command::new(kubectl);
    kc(&mut c);
    c.args(["apply", "--server-side", "--force-conflicts", "-f"])
        .arg(write("first.json", first));
    run(&mut c, &format!("{what}: apply the CRDs and namespace"));
    let crds: Vec<String> = objects
        .iter()
        .filter(|o| o["kind"] == "CustomResourceDefinition")
        .filter_map(|o| o["metadata"]["name"].as_str().map(|n| format!("crd/{n}")))
        .collect();
    if !crds.is_empty() {
        let mut c = Command::new(kubectl);
        kc(&mut c);
        c.args(["wait", "--for=condition=Established", "--timeout=60s"])
            .args(&crds);
        run(&mut c, &format!("{what}: CRDs established"));
    }
    let mut c2 = Command::new(kubectl);
    kc(&mut c2);
    c2.args(["apply", "--server-side", "--dry-run=server", "-f"])
        .arg(write("rest.json", rest.clone()));
    let out =
        String::from_utf8_lossy(&run(&mut c2, &format!("{what}: server-side dry run"))).to_string();
    // Every object was answered (kubectl prints one line per object).
    assert_eq!(
        out.lines()
            .filter(|l| l.contains("(server dry run)"))
            .count(),
        rest.len(),
        "{what}:\n{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn config_default_and_the_chart_are_accepted_by_the_real_api_server() {
    let _watchdog = crate::watchdog::start();
    if !super::real_server_or_skip(module_path!()) {
        return;
    }
    let cp = rebound_sim::envtest::shared().expect("control plane");
    let kubectl = cp.kubectl();
    let helm = crate::packaging::chart::helm().expect("helm (tools/real-components/build)");
    let kustomized = docs(&run(
        Command::new(kubectl).args(["kustomize", "config/default"]),
        "kubectl kustomize config/default",
    ));
    assert!(
        kustomized.iter().any(|o| o["kind"] == "Deployment"),
        "config/default renders the controller"
    );
    dry_run(kubectl, cp.kubeconfig_path(), &kustomized, "config/default");
    for values in [None, Some(crate::packaging::chart::NON_DEFAULT)] {
        let mut c = Command::new(&helm);
        c.args([
            "template",
            "rebound",
            "chart/rebound",
            "--namespace",
            "rebound-system",
        ]);
        if let Some(v) = values {
            c.args(["--set", v]);
        }
        let mut rendered = docs(&run(&mut c, "helm template"));
        // The Prometheus operator's kinds need its CRDs, which the bed
        // does not install: they are the only objects not dry-run.
        let foreign: Vec<String> = rendered
            .iter()
            .filter(|o| o["apiVersion"] == "monitoring.coreos.com/v1")
            .map(|o| o["kind"].as_str().unwrap_or_default().to_owned())
            .collect();
        rendered.retain(|o| o["apiVersion"] != "monitoring.coreos.com/v1");
        let expected: &[&str] = if values.is_some() {
            &["PrometheusRule", "ServiceMonitor"]
        } else {
            &[]
        };
        let mut kinds = foreign.clone();
        kinds.sort();
        assert_eq!(kinds, expected, "objects of kinds the bed cannot check");
        let mut objects = vec![
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "rebound-system"}}),
        ];
        objects.extend(rendered);
        dry_run(
            kubectl,
            cp.kubeconfig_path(),
            &objects,
            &format!("chart ({})", values.unwrap_or("defaults")),
        );
    }
}
