//! The operators' own install manifests: rendered with the kubectl
//! (kustomize) and helm of the real components, the objects the bed needs
//! picked from them, their webhooks pointed at 127.0.0.1, and applied with
//! kubectl's server-side apply.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use base64::Engine as _;
use serde_json::{Value, json};

use super::{OperatorsError, io};

/// The kubectl of the control plane, as its admin.
pub(crate) struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
    /// Where applied lists are written (kept for a look after a failure).
    dir: PathBuf,
}

fn run(mut cmd: Command, what: &str, stdin: Option<&[u8]>) -> Result<Vec<u8>, OperatorsError> {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    if stdin.is_some() {
        cmd.stdin(Stdio::piped());
    } else {
        cmd.stdin(Stdio::null());
    }
    let mut child = cmd.spawn().map_err(|e| OperatorsError::Tool {
        what: what.to_owned(),
        message: format!("cannot start: {e}"),
    })?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input)
            .map_err(io(format!("{what}: stdin")))?;
    }
    let out = child
        .wait_with_output()
        .map_err(io(format!("{what}: wait")))?;
    if !out.status.success() {
        return Err(OperatorsError::Tool {
            what: what.to_owned(),
            message: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(out.stdout)
}

impl Kubectl {
    pub(crate) fn new(bin: &Path, kubeconfig: &Path, dir: &Path) -> Kubectl {
        Kubectl {
            bin: bin.to_owned(),
            kubeconfig: kubeconfig.to_owned(),
            dir: dir.to_owned(),
        }
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new(&self.bin);
        c.arg("--kubeconfig").arg(&self.kubeconfig);
        c
    }

    /// `kubectl kustomize DIR`: the objects of a kustomization.
    pub(crate) fn kustomize(&self, dir: &Path) -> Result<Vec<Value>, OperatorsError> {
        let mut c = Command::new(&self.bin);
        c.arg("kustomize").arg(dir);
        let out = run(c, &format!("kubectl kustomize {}", dir.display()), None)?;
        parse(&out, &dir.display().to_string())
    }

    /// Applies `objects` (server-side, this bed's field manager), written
    /// first to `<dir>/<name>.json`.
    pub(crate) fn apply(&self, name: &str, objects: &[Value]) -> Result<(), OperatorsError> {
        if objects.is_empty() {
            return Ok(());
        }
        let path = self.dir.join(format!("{name}.json"));
        let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
        std::fs::write(&path, list.to_string()).map_err(io(format!("write {name}.json")))?;
        let mut c = self.cmd();
        c.args([
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=rebound-testbed",
            "-f",
        ])
        .arg(&path);
        run(c, &format!("kubectl apply {}", path.display()), None).map(|_| ())
    }

    /// Waits until every named CRD is `Established`.
    pub(crate) fn wait_established(&self, crds: &[String]) -> Result<(), OperatorsError> {
        if crds.is_empty() {
            return Ok(());
        }
        let mut c = self.cmd();
        c.args(["wait", "--for=condition=Established", "--timeout=60s"]);
        for name in crds {
            c.arg(format!("crd/{name}"));
        }
        run(c, "kubectl wait for the CRDs", None).map(|_| ())
    }

    /// A server-side dry run of creating `obj`: admitted only when every
    /// webhook it meets answers.
    pub(crate) fn dry_run_create(&self, obj: &Value) -> Result<(), String> {
        let mut c = self.cmd();
        c.args(["create", "--dry-run=server", "-o", "name", "-f", "-"]);
        run(
            c,
            "kubectl create --dry-run=server",
            Some(obj.to_string().as_bytes()),
        )
        .map(|_| ())
        .map_err(|e| e.to_string())
    }
}

/// `helm template RELEASE CHART --namespace NS`: the chart's objects with
/// its default values.
pub(crate) fn helm_template(
    helm: &Path,
    release: &str,
    chart: &Path,
    namespace: &str,
) -> Result<Vec<Value>, OperatorsError> {
    let mut c = Command::new(helm);
    c.args(["template", release])
        .arg(chart)
        .args(["--namespace", namespace]);
    let out = run(c, &format!("helm template {}", chart.display()), None)?;
    parse(&out, &chart.display().to_string())
}

/// The documents of a multi-document YAML stream, empty ones left out.
pub(crate) fn parse(yaml: &[u8], source: &str) -> Result<Vec<Value>, OperatorsError> {
    let text = String::from_utf8_lossy(yaml);
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
        .map_err(|e| OperatorsError::Manifest(format!("{source}: {e}")))?;
    Ok(docs.into_iter().filter(|d| d.is_object()).collect())
}

/// The objects of `kind` among `objects`.
pub(crate) fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

/// The one object of `kind` named `name`.
pub(crate) fn named<'a>(
    objects: &'a [Value],
    kind: &str,
    name: &str,
) -> Result<&'a Value, OperatorsError> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .ok_or_else(|| {
            OperatorsError::Manifest(format!("no {kind} {name} in the rendered manifests"))
        })
}

/// A webhook configuration with every webhook's `clientConfig.service`
/// replaced by `https://127.0.0.1:<port><path>` and the bed's CA.
pub(crate) fn to_loopback(
    config: &Value,
    port: u16,
    ca_pem: &str,
) -> Result<Value, OperatorsError> {
    let mut config = config.clone();
    let name = config["metadata"]["name"]
        .as_str()
        .unwrap_or("?")
        .to_owned();
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let hooks = config["webhooks"]
        .as_array_mut()
        .ok_or_else(|| OperatorsError::Manifest(format!("{name} has no webhooks")))?;
    for hook in hooks {
        let path = hook["clientConfig"]["service"]["path"]
            .as_str()
            .or_else(|| hook["clientConfig"]["url"].as_str().and_then(url_path))
            .unwrap_or("")
            .to_owned();
        hook["clientConfig"] = json!({
            "url": format!("https://127.0.0.1:{port}{path}"),
            "caBundle": ca,
        });
    }
    Ok(config)
}

fn url_path(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    rest.find('/').map(|i| &rest[i..])
}

/// The names of the CRDs among `objects`.
pub(crate) fn crd_names(objects: &[Value]) -> Vec<String> {
    of_kind(objects, "CustomResourceDefinition")
        .iter()
        .filter_map(|c| c["metadata"]["name"].as_str().map(str::to_owned))
        .collect()
}

/// A Namespace object.
pub(crate) fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_webhook_is_pointed_at_loopback_with_its_path_and_the_bed_ca() {
        let config = json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "v"},
            "webhooks": [
                {"name": "a", "clientConfig": {"service": {"name": "s", "namespace": "n", "path": "/validate-a", "port": 443}}},
                {"name": "b", "clientConfig": {"url": "https://svc.example:9443/validate-b"}},
            ],
        });
        let out = to_loopback(&config, 19443, "PEM").unwrap();
        assert_eq!(
            out["webhooks"][0]["clientConfig"],
            json!({"url": "https://127.0.0.1:19443/validate-a", "caBundle": "UEVN"})
        );
        assert_eq!(
            out["webhooks"][1]["clientConfig"]["url"],
            "https://127.0.0.1:19443/validate-b"
        );
        assert!(to_loopback(&json!({"metadata": {"name": "x"}}), 1, "").is_err());
    }

    #[test]
    fn multi_document_yaml_keeps_only_objects() {
        let docs = parse(b"a: 1\n---\n---\nkind: X\n", "t").unwrap();
        assert_eq!(docs, vec![json!({"a": 1}), json!({"kind": "X"})]);
    }
}
