//! `rebound inject` and the restart agent's RBAC against a real control
//! plane (kube-apiserver, kube-controller-manager and etcd from
//! `REBOUND_TEST_ASSETS`, see crates/rebound-sim/src/envtest.rs), with the job operators'
//! real CRDs from `../shared/data/crds` read in place:
//!
//! - every manifest the `rebound` binary writes is accepted (custom
//!   resources with `dryRun=All`; a Pod made of every wired pod template,
//!   which the server validates fully; a batch Job created for real, whose
//!   pods the Job controller makes), and where a CRD's schema does not know
//!   `restartPolicyRules` the server's refusal (strict) or pruning is what
//!   `inject` warns about;
//! - what `inject` refuses, the server refuses too;
//! - a ServiceAccount bound to the `rebound-restart-agent` ClusterRole of
//!   `config/rbac` can GET its PyTorchJob and WATCH it by name, and nothing
//!   else.
//!
//! The control plane is this module's own (not `envtest::shared()`), so
//! the real CRDs installed here never race the simulated operators' CRDs
//! of other suites. Without `REBOUND_TEST_ASSETS` the tests print why and
//! pass; CI sets it.

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{
    Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::{Client, ResourceExt};
use rebound::inplace::AGENT_CONTAINER;
use rebound_sim::cluster::{install_crds, wait_for};
use rebound_sim::envtest::{ControlPlane, ControlPlaneConfig};
use serde_json::{Value, json};

mod accepted;
mod refused;
mod restart_agent_rbac;

const T: Duration = Duration::from_secs(60);

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `../shared` beside the project (in a git worktree under `wt/<name>`,
/// the one two levels up).
fn shared_dir() -> std::path::PathBuf {
    let near = root().join("../shared");
    if near.is_dir() {
        near
    } else {
        root().join("../../shared")
    }
}

fn shared_crd(rel: &str) -> String {
    let p = shared_dir().join("data/crds").join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// This module's control plane, started once on a keeper thread (its
/// processes die with the test binary). `None` without assets.
fn plane() -> Option<&'static ControlPlane> {
    static CP: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
    let cfg = match ControlPlaneConfig::resolve() {
        Ok(cfg) => cfg,
        Err(e) if rebound_sim::envtest::real_server_required() => {
            panic!("no real control plane: {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED: no real control plane: {e}");
            return None;
        }
    };
    let r = CP.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("inject-envtest".into())
            .spawn(move || {
                let r = ControlPlane::start(&cfg).map_err(|e| e.to_string());
                let ok = r.is_ok();
                let _ = tx.send(r);
                if ok {
                    loop {
                        std::thread::park();
                    }
                }
            })
            .expect("keeper thread");
        rx.recv()
            .unwrap_or_else(|_| Err("keeper thread died".into()))
    });
    match r {
        Ok(cp) => Some(cp),
        Err(e) => panic!("REBOUND_TEST_ASSETS is set but the control plane did not start: {e}"),
    }
}

async fn admin(cp: &ControlPlane) -> Client {
    Client::try_from(cp.client_config().await.expect("config")).expect("client")
}

/// The job operators' real CRDs, installed once per control plane.
async fn real_crds(client: &Client) {
    static DONE: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    DONE.get_or_init(|| async {
        for f in CRD_FILES {
            install_crds(client, &shared_crd(f))
                .await
                .unwrap_or_else(|e| panic!("install {f}: {e}"));
        }
    })
    .await;
}

const CRD_FILES: [&str; 11] = [
    "kubeflow-training-v1/kubeflow.org_pytorchjobs.yaml",
    "kubeflow-training-v1/kubeflow.org_tfjobs.yaml",
    "kubeflow-training-v1/kubeflow.org_mpijobs.yaml",
    "kubeflow-training-v1/kubeflow.org_xgboostjobs.yaml",
    "kubeflow-training-v1/kubeflow.org_paddlejobs.yaml",
    "kubeflow-training-v1/kubeflow.org_jaxjobs.yaml",
    "kubeflow-trainer-v2/trainer.kubeflow.org_trainjobs.yaml",
    "kubeflow-trainer-v2/trainer.kubeflow.org_trainingruntimes.yaml",
    "kubeflow-trainer-v2/trainer.kubeflow.org_clustertrainingruntimes.yaml",
    "volcano/batch.volcano.sh_jobs.yaml",
    "jobset/jobset.x-k8s.io_jobsets.yaml",
];

async fn namespace(client: &Client, ns: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let obj = serde_json::from_value(json!({"metadata": {"name": ns}})).expect("ns");
    match api.create(&PostParams::default(), &obj).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("namespace {ns}: {e}"),
    }
    // ServiceAccount admission refuses pods until `default` exists.
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), ns);
    wait_for(T, "default ServiceAccount", || async {
        Ok(sas.get_opt("default").await?.map(|_| ()))
    })
    .await
    .expect("default ServiceAccount");
}

async fn post(client: &Client, path: &str, body: &Value) -> Result<Value, kube::Error> {
    let req = http::Request::post(path)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(body).expect("json"))
        .expect("request");
    client.request::<Value>(req).await
}

/// Where a document is created: its collection path, the CRD file that
/// serves it (None for built-in kinds).
fn collection(doc: &Value) -> (String, Option<&'static str>) {
    let av = doc["apiVersion"].as_str().expect("apiVersion");
    let kind = doc["kind"].as_str().expect("kind");
    let ns = doc["metadata"]["namespace"].as_str();
    let (plural, file) = match kind {
        "PyTorchJob" => ("pytorchjobs", Some(CRD_FILES[0])),
        "TFJob" => ("tfjobs", Some(CRD_FILES[1])),
        "MPIJob" => ("mpijobs", Some(CRD_FILES[2])),
        "XGBoostJob" => ("xgboostjobs", Some(CRD_FILES[3])),
        "PaddleJob" => ("paddlejobs", Some(CRD_FILES[4])),
        "JAXJob" => ("jaxjobs", Some(CRD_FILES[5])),
        "TrainJob" => ("trainjobs", Some(CRD_FILES[6])),
        "TrainingRuntime" => ("trainingruntimes", Some(CRD_FILES[7])),
        "ClusterTrainingRuntime" => ("clustertrainingruntimes", Some(CRD_FILES[8])),
        "Job" if av.starts_with("batch.volcano.sh/") => ("jobs", Some(CRD_FILES[9])),
        "JobSet" => ("jobsets", Some(CRD_FILES[10])),
        "Job" => ("jobs", None),
        other => panic!("no collection for {other}"),
    };
    let base = if av.contains('/') {
        format!("/apis/{av}")
    } else {
        format!("/api/{av}")
    };
    let path = match ns {
        Some(ns) => format!("{base}/namespaces/{ns}/{plural}"),
        None => format!("{base}/{plural}"),
    };
    (path, file)
}

/// Every pod template in `v` that carries the agent, with its JSON pointer.
fn wired_templates(v: &Value, at: &str, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(m) => {
            let has_agent = v["spec"]["initContainers"]
                .as_array()
                .is_some_and(|a| a.iter().any(|c| c["name"] == AGENT_CONTAINER));
            if has_agent && v["spec"]["containers"].is_array() {
                out.push((at.to_string(), v.clone()));
                return;
            }
            for (k, c) in m {
                wired_templates(c, &format!("{at}/{k}"), out);
            }
        }
        Value::Array(a) => {
            for (i, c) in a.iter().enumerate() {
                wired_templates(c, &format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

fn agent_of(tpl: &Value) -> &Value {
    tpl["spec"]["initContainers"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == AGENT_CONTAINER))
        .expect("agent")
}

/// The pod label the agent reads its job's name from.
fn job_name_label(agent: &Value) -> String {
    let path = agent["env"]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["name"] == "REBOUND_JOB_NAME"))
        .and_then(|e| e["valueFrom"]["fieldRef"]["fieldPath"].as_str())
        .expect("REBOUND_JOB_NAME");
    path.strip_prefix("metadata.labels['")
        .and_then(|s| s.strip_suffix("']"))
        .expect("label path")
        .to_string()
}

fn pod_template(name: &str) -> Value {
    json!({"spec": {"restartPolicy": "OnFailure", "containers": [{"name": name, "image": "registry.local/train:1", "command": ["python", "train.py"]}]}})
}

/// One manifest of every kind `rebound inject` wires.
fn fixtures(ns: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for (kind, specs, replicas) in [
        ("PyTorchJob", "pytorchReplicaSpecs", ["Master", "Worker"]),
        ("TFJob", "tfReplicaSpecs", ["Chief", "Worker"]),
        ("MPIJob", "mpiReplicaSpecs", ["Launcher", "Worker"]),
        ("XGBoostJob", "xgbReplicaSpecs", ["Master", "Worker"]),
        ("PaddleJob", "paddleReplicaSpecs", ["Master", "Worker"]),
        ("JAXJob", "jaxReplicaSpecs", ["Worker", "Worker"]),
    ] {
        let mut rs = serde_json::Map::new();
        for r in replicas {
            rs.insert(
                r.into(),
                json!({"replicas": 2, "restartPolicy": "OnFailure", "template": pod_template(&r.to_lowercase())}),
            );
        }
        out.push(json!({"apiVersion": "kubeflow.org/v1", "kind": kind,
            "metadata": {"name": kind.to_lowercase(), "namespace": ns},
            "spec": {specs: rs}}));
    }
    out.push(json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": "vcjob", "namespace": ns},
        "spec": {"minAvailable": 2, "schedulerName": "volcano", "queue": "default",
                 "tasks": [{"name": "worker", "replicas": 2, "template": pod_template("worker")}]}}));
    out.push(
        json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "jobset", "namespace": ns},
        "spec": {"failurePolicy": {"maxRestarts": 3},
                 "replicatedJobs": [{"name": "workers", "replicas": 2, "template": {"spec": {
                     "parallelism": 2, "completions": 2, "backoffLimit": 0,
                     "template": pod_template("worker")}}}]}}),
    );
    out.push(json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "batchjob", "namespace": ns},
        "spec": {"parallelism": 2, "completions": 2, "completionMode": "Indexed", "backoffLimit": 6,
                 "template": {"spec": {"restartPolicy": "Never", "containers": [
                     {"name": "worker", "image": "registry.local/train:1", "command": ["python", "train.py"]}]}}}}));
    let runtime_spec = |step_image: &str| {
        json!({"mlPolicy": {"numNodes": 2},
               "template": {"spec": {"replicatedJobs": [
                   {"name": "dataset-initializer", "template": {
                       "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "dataset-initializer"}},
                       "spec": {"template": {"spec": {"restartPolicy": "OnFailure", "containers": [
                           {"name": "dataset-initializer", "image": step_image}]}}}}},
                   {"name": "node", "template": {
                       "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                       "spec": {"template": {"spec": {"restartPolicy": "OnFailure", "containers": [
                           {"name": "node", "image": "registry.local/torch:1", "command": ["torchrun", "train.py"]}]}}}}}]}}})
    };
    out.push(json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
        "metadata": {"name": "torch-ns", "namespace": ns}, "spec": runtime_spec("registry.local/init:1")}));
    out.push(json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
        "metadata": {"name": format!("torch-{ns}")}, "spec": runtime_spec("registry.local/init:1")}));
    out.push(
        json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "trainjob", "namespace": ns},
        "spec": {"runtimeRef": {"name": format!("torch-{ns}")}, "trainer": {"numNodes": 2}}}),
    );
    out
}

fn to_yaml(docs: &[Value]) -> String {
    docs.iter()
        .map(|d| serde_saphyr::to_string(d).expect("yaml"))
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Run the `rebound` binary: (exit success, stdout, stderr).
fn rebound(args: &[&str], input: &str) -> (bool, String, String) {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("rebound-inject-it-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join(format!("input-{n}.yaml"));
    std::fs::write(&file, input).expect("write fixture");
    let out = Command::new(env!("CARGO_BIN_EXE_rebound"))
        .arg("inject")
        .args(args)
        .arg("-f")
        .arg(&file)
        .output()
        .expect("run rebound inject");
    let _ = std::fs::remove_file(&file);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn docs_of(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .expect("inject output parses")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// A Pod made of a wired pod template, labelled as the job's operator
/// labels its pods (the label the agent reads names the job).
fn pod_of(template: &Value, name: &str, ns: &str, job: &str) -> Value {
    let label = job_name_label(agent_of(template));
    let mut labels = template["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    labels.insert(label, json!(job));
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": template["spec"]})
}
