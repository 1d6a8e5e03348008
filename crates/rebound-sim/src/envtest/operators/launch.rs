//! What each operator needs to run on loopback: the objects from its own
//! manifests, its command line (its manifests' flags and configuration,
//! changed only as the module doc of `super` says), its health check and
//! one object of each of its kinds to prove its webhooks answer.

use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine as _;
use serde_json::{Value, json};

use super::manifests::{
    self, Kubectl, crd_names, helm_template, named, namespace, of_kind, to_loopback,
};
use super::pki::Pki;
use super::probe::Check;
use super::{Built, OperatorsError, io};
use crate::envtest::process::free_port;

/// Everything to install and run, in order.
pub(crate) struct Plan {
    /// CRDs and namespaces (applied first).
    pub(crate) crds_and_namespaces: Vec<Value>,
    /// The CRDs' names, to wait for.
    pub(crate) crd_names: Vec<String>,
    /// Webhook configurations, Secrets, ConfigMaps.
    pub(crate) objects: Vec<Value>,
    /// `(name, command)` of each process.
    pub(crate) commands: Vec<(String, Command)>,
    /// `(process, check)`: ready when the check answers 200.
    pub(crate) health: Vec<(String, Check)>,
    /// `(process, object)`: its webhooks answer when a server-side dry run
    /// of creating the object is admitted.
    pub(crate) dry_runs: Vec<(String, Value)>,
    /// Applied once every operator is ready (they pass its webhooks).
    pub(crate) after_ready: Vec<Value>,
}

fn port() -> Result<u16, OperatorsError> {
    free_port().map_err(|e| OperatorsError::Tool {
        what: "a free port".into(),
        message: e.to_string(),
    })
}

fn b64(path: &Path) -> Result<String, OperatorsError> {
    let bytes = std::fs::read(path).map_err(io(format!("read {}", path.display())))?;
    Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// The `"key": value` of a YAML document given as text, as JSON.
fn yaml_doc(text: &str, source: &str) -> Result<Value, OperatorsError> {
    manifests::parse(text.as_bytes(), source)?
        .into_iter()
        .next()
        .ok_or_else(|| OperatorsError::Manifest(format!("{source} is empty")))
}

fn write_json(dir: &Path, name: &str, v: &Value) -> Result<PathBuf, OperatorsError> {
    let path = dir.join(name);
    std::fs::write(&path, v.to_string()).map_err(io(format!("write {name}")))?;
    Ok(path)
}

impl Plan {
    pub(crate) fn new(
        built: &Built,
        kubectl: &Kubectl,
        pki: &Pki,
        dir: &Path,
        kubeconfig: &Path,
    ) -> Result<Plan, OperatorsError> {
        let mut plan = Plan {
            crds_and_namespaces: Vec::new(),
            crd_names: Vec::new(),
            objects: Vec::new(),
            commands: Vec::new(),
            health: Vec::new(),
            dry_runs: Vec::new(),
            after_ready: Vec::new(),
        };
        plan.training_operator(built, kubectl, pki, dir, kubeconfig)?;
        plan.jobset(built, kubectl, pki, dir, kubeconfig)?;
        plan.trainer(built, kubectl, pki, dir, kubeconfig)?;
        plan.volcano(built, pki, dir, kubeconfig)?;
        plan.crd_names = crd_names(&plan.crds_and_namespaces);
        Ok(plan)
    }

    /// CRDs and webhook configurations (pointed at `port`) of `objects`.
    fn take_crds_and_webhooks(
        &mut self,
        objects: &[Value],
        port: u16,
        ca_pem: &str,
    ) -> Result<(), OperatorsError> {
        for crd in of_kind(objects, "CustomResourceDefinition") {
            self.crds_and_namespaces.push(crd.clone());
        }
        for kind in [
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
        ] {
            for config in of_kind(objects, kind) {
                self.objects.push(to_loopback(config, port, ca_pem)?);
            }
        }
        Ok(())
    }

    /// The Kubeflow training-operator v1 with its defaults (its Deployment
    /// passes no flags). Its cert-controller keeps the CA in the Secret
    /// `kubeflow/training-operator-webhook-cert`: the bed's pair is put
    /// there, so it keeps it and injects the bed's CA into its webhook
    /// configuration itself. It checks that `/tmp/k8s-webhook-server/
    /// serving-certs/tls.crt` exists (the kubelet would mount the Secret
    /// there); the webhook server reads its pair from `$TMPDIR/...`, a
    /// directory of this bed.
    fn training_operator(
        &mut self,
        built: &Built,
        kubectl: &Kubectl,
        pki: &Pki,
        dir: &Path,
        kubeconfig: &Path,
    ) -> Result<(), OperatorsError> {
        let name = "training-operator";
        let objects = kubectl.kustomize(
            &built
                .training_operator_manifests
                .join("overlays/standalone"),
        )?;
        let webhook = port()?;
        let health = port()?;
        self.take_crds_and_webhooks(&objects, webhook, &pki.ca_pem)?;
        self.crds_and_namespaces.push(namespace("kubeflow"));
        let secret = named(&objects, "Secret", "training-operator-webhook-cert")?;
        let mut secret = secret.clone();
        secret["data"] = json!({
            "ca.crt": b64(&pki.ca_crt)?, "ca.key": b64(&pki.ca_key)?,
            "tls.crt": b64(&pki.tls_crt)?, "tls.key": b64(&pki.tls_key)?,
        });
        self.objects.push(secret);
        let tmp = dir.join(format!("{name}-tmp"));
        pki.install_serving(&tmp.join("k8s-webhook-server/serving-certs"))?;
        let fixed = Path::new("/tmp/k8s-webhook-server/serving-certs");
        if !fixed.join("tls.crt").is_file() {
            // Only its existence is checked; another bed's file serves too.
            pki.install_serving(fixed)?;
        }
        // Its workers' `init-pytorch` waits for the master's DNS name with
        // `nslookup` from `alpine:3.10`: the bed has neither cluster DNS
        // nor a registry. The same init container, from the image the
        // bed's real node has, exits 0 at once (it is the operator's
        // documented template file).
        let template = dir.join("pytorch-init-container.yaml");
        std::fs::write(
            &template,
            "- name: init-pytorch\n  image: {{.InitContainerImage}}\n  imagePullPolicy: IfNotPresent\n  command: ['/usr/local/bin/rebound', '--version']\n",
        )
        .map_err(io("write the PyTorch init container template"))?;
        let mut c = Command::new(&built.training_operator);
        c.arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--pytorch-init-container-template-file")
            .arg(&template)
            .args([
                "--pytorch-init-container-image",
                crate::envtest::node::REBOUND_IMAGE,
            ])
            .args(["--webhook-server-port", &webhook.to_string()])
            .args(["--metrics-bind-address", "0"])
            .args([
                "--health-probe-bind-address",
                &format!("127.0.0.1:{health}"),
            ])
            .env("MY_POD_NAMESPACE", "kubeflow")
            .env("TMPDIR", &tmp);
        self.commands.push((name.into(), c));
        self.health.push((
            name.into(),
            Check {
                port: health,
                path: "/readyz",
            },
        ));
        self.dry_runs.push((
            name.into(),
            json!({
                "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                "metadata": {"name": "rebound-testbed-probe", "namespace": "default"},
                "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": {
                    "containers": [{"name": "pytorch", "image": "probe"}]}}}}},
            }),
        ));
        Ok(())
    }

    /// JobSet with the configuration of its manifests, its internal
    /// certificate management off (the bed's pair in a directory of the
    /// bed instead).
    fn jobset(
        &mut self,
        built: &Built,
        kubectl: &Kubectl,
        pki: &Pki,
        dir: &Path,
        kubeconfig: &Path,
    ) -> Result<(), OperatorsError> {
        let name = "jobset";
        let objects = kubectl.kustomize(&built.jobset_config.join("default"))?;
        let webhook = port()?;
        let health = port()?;
        self.take_crds_and_webhooks(&objects, webhook, &pki.ca_pem)?;
        let cm = named(&objects, "ConfigMap", "jobset-manager-config")?;
        let text = cm["data"]["controller_manager_config.yaml"]
            .as_str()
            .ok_or_else(|| {
                OperatorsError::Manifest("jobset-manager-config has no configuration".into())
            })?;
        let mut cfg = yaml_doc(text, "jobset-manager-config")?;
        let certs = dir.join(format!("{name}-certs"));
        pki.install_serving(&certs)?;
        cfg["leaderElection"]["leaderElect"] = json!(false);
        cfg["internalCertManagement"] = json!({"enable": false});
        cfg["webhook"] = json!({"port": webhook, "host": "127.0.0.1", "certDir": certs});
        cfg["health"]["healthProbeBindAddress"] = json!(format!("127.0.0.1:{health}"));
        cfg["metrics"]["bindAddress"] = json!("0");
        // Off by default in v0.12 (alpha): rebound keeps a JobSet's own
        // in-place restart (tests/it/e2e/tiers.rs), which needs it.
        cfg["featureGates"]["InPlaceRestart"] = json!(true);
        let file = write_json(dir, "jobset-config.yaml", &cfg)?;
        let mut c = Command::new(&built.jobset);
        c.arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--config")
            .arg(file);
        self.commands.push((name.into(), c));
        self.health.push((
            name.into(),
            Check {
                port: health,
                path: "/readyz",
            },
        ));
        self.dry_runs.push((
            name.into(),
            json!({
                "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                "metadata": {"name": "rebound-testbed-probe", "namespace": "default"},
                "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {
                    "template": {"spec": {"restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "probe"}]}}}}}]},
            }),
        ));
        Ok(())
    }

    /// Kubeflow Trainer v2 with the configuration of its manifests,
    /// certificate management off; its webhook server reads the bed's pair
    /// from `$TMPDIR/k8s-webhook-server/serving-certs` (its configuration
    /// has no certificate directory). Its `torch-distributed`
    /// ClusterTrainingRuntime is applied once it is ready.
    fn trainer(
        &mut self,
        built: &Built,
        kubectl: &Kubectl,
        pki: &Pki,
        dir: &Path,
        kubeconfig: &Path,
    ) -> Result<(), OperatorsError> {
        let name = "trainer";
        let base = built.trainer_manifests.join("base");
        // The manager overlay also pulls JobSet's release from GitHub; the
        // bed runs JobSet from its module instead.
        let mut objects = kubectl.kustomize(&base.join("crds"))?;
        objects.extend(kubectl.kustomize(&base.join("webhook"))?);
        let webhook = port()?;
        let health = port()?;
        let status = port()?;
        self.take_crds_and_webhooks(&objects, webhook, &pki.ca_pem)?;
        let text = std::fs::read_to_string(base.join("manager/controller_manager_config.yaml"))
            .map_err(io("read Trainer's configuration"))?;
        let mut cfg = yaml_doc(&text, "Trainer's controller_manager_config.yaml")?;
        cfg["leaderElection"]["leaderElect"] = json!(false);
        cfg["certManagement"]["enable"] = json!(false);
        cfg["webhook"] = json!({"port": webhook, "host": "127.0.0.1"});
        cfg["health"]["healthProbeBindAddress"] = json!(format!("127.0.0.1:{health}"));
        cfg["metrics"]["bindAddress"] = json!("0");
        cfg["statusServer"]["port"] = json!(status);
        let file = write_json(dir, "trainer-config.yaml", &cfg)?;
        let tmp = dir.join(format!("{name}-tmp"));
        pki.install_serving(&tmp.join("k8s-webhook-server/serving-certs"))?;
        let mut c = Command::new(&built.trainer);
        c.arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--config")
            .arg(file)
            .env("TMPDIR", &tmp);
        self.commands.push((name.into(), c));
        self.health.push((
            name.into(),
            Check {
                port: health,
                path: "/readyz",
            },
        ));
        let runtime = std::fs::read_to_string(base.join("runtimes/torch_distributed.yaml"))
            .map_err(io("read Trainer's torch-distributed runtime"))?;
        self.after_ready
            .push(yaml_doc(&runtime, "torch_distributed.yaml")?);
        self.dry_runs.push((
            name.into(),
            json!({
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
                "metadata": {"name": "rebound-testbed-probe", "namespace": "default"},
                "spec": {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {
                    "template": {"spec": {"containers": [{"name": "node", "image": "probe"}]}}}}}]}}},
            }),
        ));
        Ok(())
    }

    /// Volcano from its Helm chart with default values: its CRDs, webhook
    /// configurations and ConfigMaps, and the three Deployments' arguments,
    /// with the files they name written here and ports of their own.
    fn volcano(
        &mut self,
        built: &Built,
        pki: &Pki,
        dir: &Path,
        kubeconfig: &Path,
    ) -> Result<(), OperatorsError> {
        let ns = "volcano-system";
        let objects = helm_template(&built.helm, "volcano", &built.volcano_chart, ns)?;
        let webhook = port()?;
        self.take_crds_and_webhooks(&objects, webhook, &pki.ca_pem)?;
        self.crds_and_namespaces.push(namespace(ns));
        let mut files: Vec<(String, PathBuf)> = Vec::new();
        for cm in of_kind(&objects, "ConfigMap") {
            if let Some(data) = cm["data"].as_object() {
                for (key, value) in data {
                    let path = dir.join(format!("volcano-{key}"));
                    std::fs::write(&path, value.as_str().unwrap_or_default())
                        .map_err(io(format!("write {key}")))?;
                    files.push((key.clone(), path));
                }
            }
            self.objects.push(cm.clone());
        }
        let file = |key: &str| {
            files
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, p)| p.display().to_string())
                .ok_or_else(|| OperatorsError::Manifest(format!("Volcano's chart has no {key}")))
        };
        let args_of = |deployment: &str| -> Result<Vec<String>, OperatorsError> {
            let d = named(&objects, "Deployment", deployment)?;
            let args = d["spec"]["template"]["spec"]["containers"][0]["args"]
                .as_array()
                .ok_or_else(|| OperatorsError::Manifest(format!("{deployment} has no args")))?;
            Ok(args
                .iter()
                .filter_map(|a| a.as_str().map(str::to_owned))
                // A shell redirection the image's entry point runs; a
                // verbosity of 4 logs every scheduling cycle: 2 keeps
                // errors and decisions.
                .filter(|a| a != "2>&1" && !a.starts_with("-v="))
                .chain(["-v=2".to_owned()])
                .collect())
        };
        let replace = |args: Vec<String>, with: &[(&str, String)], drop: &[&str]| -> Vec<String> {
            let mut out: Vec<String> = args
                .into_iter()
                .filter(|a| {
                    let flag = a.split('=').next().unwrap_or("");
                    !with.iter().any(|(f, _)| *f == flag) && !drop.contains(&flag)
                })
                .collect();
            out.extend(with.iter().map(|(f, v)| format!("{f}={v}")));
            out
        };
        let kc = kubeconfig.display().to_string();
        let health_w = port()?;
        let args = replace(
            args_of("volcano-admission")?,
            &[
                ("--kubeconfig", kc.clone()),
                ("--tls-cert-file", pki.tls_crt.display().to_string()),
                ("--tls-private-key-file", pki.tls_key.display().to_string()),
                ("--ca-cert-file", pki.ca_crt.display().to_string()),
                ("--admission-conf", file("volcano-admission.conf")?),
                ("--webhook-url", format!("https://127.0.0.1:{webhook}")),
                ("--listen-address", "127.0.0.1".into()),
                ("--port", webhook.to_string()),
                ("--healthz-address", format!("127.0.0.1:{health_w}")),
            ],
            &["--webhook-namespace", "--webhook-service-name"],
        );
        let mut c = Command::new(&built.vc_webhook);
        c.args(args);
        self.commands.push(("vc-webhook-manager".into(), c));
        for (process, deployment, bin, conf) in [
            (
                "vc-controller-manager",
                "volcano-controllers",
                &built.vc_controllers,
                None,
            ),
            (
                "vc-scheduler",
                "volcano-scheduler",
                &built.vc_scheduler,
                Some(("--scheduler-conf", file("volcano-scheduler.conf")?)),
            ),
        ] {
            let health = port()?;
            let mut with = vec![
                ("--kubeconfig", kc.clone()),
                ("--healthz-address", format!("127.0.0.1:{health}")),
                ("--listen-address", format!("127.0.0.1:{}", port()?)),
            ];
            with.extend(conf);
            let mut c = Command::new(bin);
            c.args(replace(args_of(deployment)?, &with, &[]));
            self.commands.push((process.into(), c));
            self.health.push((
                process.into(),
                Check {
                    port: health,
                    path: "/healthz",
                },
            ));
        }
        self.dry_runs.push((
            "vc-webhook-manager".into(),
            json!({
                "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                "metadata": {"name": "rebound-testbed-probe", "namespace": "default"},
                "spec": {"minAvailable": 1, "schedulerName": "volcano", "tasks": [{"name": "w", "replicas": 1,
                    "template": {"spec": {"restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "probe"}]}}}]},
            }),
        ));
        Ok(())
    }
}
