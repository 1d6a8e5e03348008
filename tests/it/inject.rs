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
    let Some(cfg) = ControlPlaneConfig::from_env() else {
        eprintln!(
            "SKIPPED: {} is not set (the real control plane: ../shared/k8s unpacked)",
            rebound_sim::envtest::ASSETS_ENV
        );
        return None;
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

#[tokio::test]
async fn every_manifest_inject_writes_is_accepted_by_a_real_api_server() {
    let _watchdog = crate::watchdog::start();
    let Some(cp) = plane() else { return };
    let client = admin(cp).await;
    let ns = "inject-accept";
    namespace(&client, ns).await;
    real_crds(&client).await;

    let input = fixtures(ns);
    let (ok, out, err) = rebound(&[], &to_yaml(&input));
    assert!(ok, "rebound inject failed: {err}");
    let docs = docs_of(&out);
    assert_eq!(docs.len(), input.len(), "the same documents come out");
    // Kubeflow (6 kinds x 2 replica types, JAXJob's one map key twice is
    // one), Volcano 1, JobSet 1, batch 1, the two runtimes' trainer nodes.
    let mut wired = Vec::new();
    for d in &docs {
        wired_templates(d, "", &mut wired);
    }
    assert_eq!(wired.len(), 5 * 2 + 1 + 1 + 1 + 1 + 2, "wired templates");
    assert!(
        err.contains("TrainJob cannot carry the agent"),
        "TrainJob note: {err}"
    );

    let mut pruned_kinds = BTreeSet::new();
    for d in &docs {
        let kind = d["kind"].as_str().unwrap_or_default().to_string();
        let (path, crd) = collection(d);
        let knows_rules = crd.is_none_or(|f| shared_crd(f).contains("restartPolicyRules"));
        let strict = post(
            &client,
            &format!("{path}?dryRun=All&fieldValidation=Strict"),
            d,
        )
        .await;
        let mut returned = Vec::new();
        let has_wired = {
            let mut w = Vec::new();
            wired_templates(d, "", &mut w);
            !w.is_empty()
        };
        if knows_rules || !has_wired {
            let back = strict.unwrap_or_else(|e| panic!("{kind} refused: {e}"));
            wired_templates(&back, "", &mut returned);
            for (at, tpl) in &returned {
                let a = agent_of(tpl);
                assert_eq!(
                    a["restartPolicyRules"][0]["action"], "RestartAllContainers",
                    "{kind}{at}: the rule survives"
                );
                assert_eq!(a["restartPolicy"], "Always", "{kind}{at}");
                assert_eq!(a["startupProbe"]["httpGet"]["path"], "/barrier");
            }
        } else {
            // The CRD's pod template schema predates the field: strict
            // validation refuses it, lenient validation drops it.
            let e = strict.expect_err("strict refusal of an unknown field");
            assert!(e.to_string().contains("restartPolicyRules"), "{kind}: {e}");
            let back = post(
                &client,
                &format!("{path}?dryRun=All&fieldValidation=Ignore"),
                d,
            )
            .await
            .unwrap_or_else(|e| panic!("{kind} refused even without strict validation: {e}"));
            wired_templates(&back, "", &mut returned);
            for (at, tpl) in &returned {
                let a = agent_of(tpl);
                assert!(a.get("restartPolicyRules").is_none(), "{kind}{at}: pruned");
                assert_eq!(
                    a["restartPolicy"], "Always",
                    "{kind}{at}: the sidecar itself survives"
                );
            }
            assert!(
                err.contains(&kind) || kind.ends_with("TrainingRuntime"),
                "inject warns about {kind}: {err}"
            );
            pruned_kinds.insert(kind.clone());
        }
        if has_wired {
            assert!(!returned.is_empty(), "{kind}: the server kept the agent");
        }
    }
    // The shipped CRDs: JobSet v0.12 and Volcano know the rules; the
    // training-operator v1.9 and Trainer a55f03a CRDs do not (what the
    // inject warnings and docs/in-place.md say).
    assert_eq!(
        pruned_kinds,
        BTreeSet::from(
            [
                "ClusterTrainingRuntime",
                "JAXJob",
                "MPIJob",
                "PaddleJob",
                "PyTorchJob",
                "TFJob",
                "TrainingRuntime",
                "XGBoostJob"
            ]
            .map(String::from)
        )
    );
    assert!(err.contains("Trainer v2 runtime"), "{err}");

    // A Pod of every wired template: the real pod validation of the
    // sidecar, its rule, probe, ports, env, resources and security.
    for (i, (at, tpl)) in wired.iter().enumerate() {
        let pod = pod_of(tpl, &format!("pod-{i}"), ns, "job-x");
        let back = post(
            &client,
            &format!("/api/v1/namespaces/{ns}/pods?dryRun=All&fieldValidation=Strict"),
            &pod,
        )
        .await
        .unwrap_or_else(|e| panic!("pod of {at} refused: {e}"));
        let a = agent_of(&back);
        assert_eq!(
            a["restartPolicyRules"][0]["exitCodes"]["values"],
            json!([87])
        );
    }

    // A batch Job for real: the Job controller makes its pods, which carry
    // the label the agent reads and the agent with its rule.
    let job = docs
        .iter()
        .find(|d| d["apiVersion"] == "batch/v1")
        .expect("batch job");
    post(
        &client,
        &format!("/apis/batch/v1/namespaces/{ns}/jobs"),
        job,
    )
    .await
    .expect("batch job created");
    let pods: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<Pod>(&()));
    let made = wait_for(T, "the Job controller's pods", || async {
        let l = pods
            .list(&ListParams::default().labels("batch.kubernetes.io/job-name=batchjob"))
            .await?;
        Ok((l.items.len() == 2).then_some(l.items))
    })
    .await
    .expect("pods of the batch Job");
    for p in &made {
        let v = serde_json::to_value(p).expect("pod json");
        let a = agent_of(&v);
        assert_eq!(a["restartPolicyRules"][0]["action"], "RestartAllContainers");
        assert_eq!(
            p.labels().get(&job_name_label(a)).map(String::as_str),
            Some("batchjob"),
            "REBOUND_JOB_NAME resolves to the Job"
        );
    }
}

#[tokio::test]
async fn what_inject_refuses_the_real_api_server_refuses() {
    let _watchdog = crate::watchdog::start();
    let Some(cp) = plane() else { return };
    let client = admin(cp).await;
    let ns = "inject-refuse";
    namespace(&client, ns).await;

    // A regular container with the agent's name.
    let bad = json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "bad", "namespace": ns},
        "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": {"spec": {
            "restartPolicy": "OnFailure",
            "containers": [{"name": AGENT_CONTAINER, "image": "registry.local/train:1"}]}}}}}]}});
    let text = to_yaml(std::slice::from_ref(&bad));
    let (ok, out, err) = rebound(&[], &text);
    assert!(!ok, "refused");
    assert!(out.is_empty(), "nothing written: {out}");
    assert!(
        err.contains("document 1 (JobSet inject-refuse/bad): spec.replicatedJobs[0].template.spec.template.spec.containers[0].name:"),
        "{err}"
    );
    // What inject would have written: the template plus the agent.
    let good = fixtures(ns)
        .into_iter()
        .find(|d| d["kind"] == "JobSet")
        .expect("jobset");
    let (ok, wired_out, e) = rebound(&[], &to_yaml(&[good]));
    assert!(ok, "{e}");
    let mut wired = Vec::new();
    wired_templates(&docs_of(&wired_out)[0], "", &mut wired);
    let agent = agent_of(&wired[0].1).clone();
    let mut tpl = bad["spec"]["replicatedJobs"][0]["template"]["spec"]["template"].clone();
    tpl["spec"]["initContainers"] = json!([agent]);
    let pods = format!("/api/v1/namespaces/{ns}/pods?dryRun=All");
    let e = post(&client, &pods, &pod_of(&tpl, "dup", ns, "bad"))
        .await
        .expect_err("the server refuses the duplicate name");
    assert!(
        e.to_string().contains("spec.initContainers[0].name")
            && e.to_string().contains("Duplicate"),
        "{e}"
    );
    // With --ignore-unsupported the document passes through unchanged.
    let (ok, out, err) = rebound(&["--ignore-unsupported"], &text);
    assert!(ok, "{err}");
    assert_eq!(docs_of(&out), vec![bad.clone()]);
    assert!(err.contains("written unchanged"), "{err}");

    // A probe port the server refuses, refused by inject first.
    let (ok, out, err) = rebound(&["--probe-port", "0"], &text);
    assert!(
        !ok && out.is_empty() && err.contains("--probe-port"),
        "{err}"
    );
    let mut zero = wired[0].1.clone();
    zero["spec"]["initContainers"][0]["startupProbe"]["httpGet"]["port"] = json!(0);
    let e = post(&client, &pods, &pod_of(&zero, "zero", ns, "j"))
        .await
        .expect_err("port 0 refused");
    assert!(e.to_string().contains("startupProbe.httpGet.port"), "{e}");
}

/// RBAC: verbs a subject may use on a resource, per the real authorizer.
async fn allowed(
    client: &Client,
    user: &str,
    ns: &str,
    group: &str,
    res: &str,
    verb: &str,
) -> bool {
    let sar = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user,
                 "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{ns}"), "system:authenticated"],
                 "resourceAttributes": {"namespace": ns, "group": group, "resource": res, "verb": verb}}});
    let r = post(
        client,
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        &sar,
    )
    .await
    .expect("SubjectAccessReview");
    r["status"]["allowed"] == true
}

#[tokio::test]
async fn the_restart_agent_role_allows_get_and_watch_of_its_job_and_nothing_else() {
    let _watchdog = crate::watchdog::start();
    let Some(cp) = plane() else { return };
    let client = admin(cp).await;
    let ns = "inject-rbac";
    namespace(&client, ns).await;
    namespace(&client, "inject-rbac-other").await;
    real_crds(&client).await;

    // config/rbac's ClusterRoles, applied as they are.
    let text = std::fs::read_to_string(root().join("config/rbac/restart_agent_role.yaml"))
        .expect("role file");
    for d in serde_saphyr::from_multiple::<Value>(&text).expect("yaml") {
        if d.is_null() {
            continue;
        }
        let name = d["metadata"]["name"].as_str().expect("name").to_string();
        let p = format!(
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}?fieldManager=test&force=true"
        );
        let req = http::Request::patch(p)
            .header("content-type", "application/apply-patch+yaml")
            .body(serde_json::to_vec(&d).expect("json"))
            .expect("req");
        client
            .request::<Value>(req)
            .await
            .unwrap_or_else(|e| panic!("apply {name}: {e}"));
    }
    // The aggregation controller fills the aggregated role.
    let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(client.clone());
    wait_for(T, "aggregated rules", || async {
        let r = roles.get("rebound-restart-agent").await?;
        Ok(r.rules.is_some_and(|r| !r.is_empty()).then_some(()))
    })
    .await
    .expect("the control plane aggregates the job rules");

    // The job's ServiceAccount, bound in its namespace as the docs say.
    post(
        &client,
        &format!("/api/v1/namespaces/{ns}/serviceaccounts"),
        &json!({"metadata": {"name": "trainer"}}),
    )
    .await
    .expect("sa");
    post(
        &client,
        &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings"),
        &json!({"metadata": {"name": "rebound-restart-agent"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "rebound-restart-agent"},
                "subjects": [{"kind": "ServiceAccount", "name": "trainer", "namespace": ns}]}),
    )
    .await
    .expect("rolebinding");
    let user = format!("system:serviceaccount:{ns}:trainer");
    // The authorizer reads roles and bindings from its cache: wait until
    // the binding (and the aggregated rules) reached it.
    wait_for(T, "the RoleBinding in effect", || async {
        Ok(allowed(
            &client,
            &user,
            ns,
            "trainer.kubeflow.org",
            "trainjobs",
            "watch",
        )
        .await
        .then_some(()))
    })
    .await
    .expect("binding effective");
    for (group, res) in [
        ("kubeflow.org", "pytorchjobs"),
        ("kubeflow.org", "mpijobs"),
        ("batch.volcano.sh", "jobs"),
        ("jobset.x-k8s.io", "jobsets"),
        ("batch", "jobs"),
        ("trainer.kubeflow.org", "trainjobs"),
    ] {
        for verb in ["get", "watch"] {
            assert!(
                allowed(&client, &user, ns, group, res, verb).await,
                "{verb} {group}/{res}"
            );
        }
        for verb in [
            "list",
            "create",
            "update",
            "patch",
            "delete",
            "deletecollection",
        ] {
            assert!(
                !allowed(&client, &user, ns, group, res, verb).await,
                "{verb} {group}/{res} must be refused"
            );
        }
        assert!(
            !allowed(&client, &user, "inject-rbac-other", group, res, "get").await,
            "{group}/{res} in another namespace"
        );
    }
    for (group, res) in [("", "pods"), ("", "secrets"), ("", "configmaps")] {
        assert!(
            !allowed(&client, &user, ns, group, res, "get").await,
            "{res}"
        );
    }

    // As the ServiceAccount itself, with a token from the TokenRequest API.
    let pj = json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "llm", "namespace": ns},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1, "template": pod_template("pytorch")}}}});
    post(
        &client,
        &format!("/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs"),
        &pj,
    )
    .await
    .expect("pytorchjob");
    let tr = post(
        &client,
        &format!("/api/v1/namespaces/{ns}/serviceaccounts/trainer/token"),
        &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}),
    )
    .await
    .expect("token request");
    let token = tr["status"]["token"].as_str().expect("token");
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: sa\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context: {{cluster: c, user: sa}}\ncurrent-context: c\n",
        cp.url(),
        cp.dir().join("ca.crt").display()
    );
    let kc = kube::config::Kubeconfig::from_yaml(&kubeconfig).expect("kubeconfig");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("config");
    let sa = Client::try_from(cfg).expect("sa client");
    let res = ApiResource {
        group: "kubeflow.org".into(),
        version: "v1".into(),
        api_version: "kubeflow.org/v1".into(),
        kind: "PyTorchJob".into(),
        plural: "pytorchjobs".into(),
    };
    let jobs: Api<DynamicObject> = Api::namespaced_with(sa.clone(), ns, &res);
    let got = jobs
        .get_metadata("llm")
        .await
        .expect("the agent GETs its job");
    let rv = got.resource_version().expect("resourceVersion");
    let mut watch = jobs
        .watch_metadata(&WatchParams::default().fields("metadata.name=llm"), &rv)
        .await
        .expect("the agent watches its job by name")
        .boxed();
    // An annotation written by rebound reaches the agent's watch.
    let admin_jobs: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &res);
    admin_jobs
        .patch(
            "llm",
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"metadata": {"annotations": {"rebound.dev/restart-generation": "1"}}}),
            ),
        )
        .await
        .expect("admin patch");
    let ev = tokio::time::timeout(T, async {
        loop {
            match watch.try_next().await {
                Ok(Some(WatchEvent::Modified(m))) => break m,
                Ok(Some(_)) => continue,
                Ok(None) => panic!("watch ended"),
                Err(e) => panic!("watch error: {e}"),
            }
        }
    })
    .await
    .expect("a MODIFIED event in time");
    assert_eq!(
        ev.annotations()
            .get("rebound.dev/restart-generation")
            .map(String::as_str),
        Some("1")
    );
    let refused = |r: Result<(), kube::Error>, what: &str| match r {
        Err(kube::Error::Api(e)) if e.code == 403 => {}
        other => panic!("{what}: expected 403, got {other:?}"),
    };
    refused(
        jobs.list_metadata(&ListParams::default()).await.map(|_| ()),
        "list",
    );
    refused(
        jobs.patch(
            "llm",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .map(|_| ()),
        "patch",
    );
    refused(
        jobs.delete("llm", &Default::default()).await.map(|_| ()),
        "delete",
    );
    let mut copy: DynamicObject = serde_json::from_value(pj.clone()).expect("pj");
    copy.metadata.name = Some("other".into());
    refused(
        jobs.create(&PostParams::default(), &copy).await.map(|_| ()),
        "create",
    );
    let other: Api<DynamicObject> = Api::namespaced_with(sa.clone(), "inject-rbac-other", &res);
    refused(
        other.get_metadata("llm").await.map(|_| ()),
        "get in another namespace",
    );
    let pods: Api<Pod> = Api::namespaced(sa, ns);
    refused(
        pods.list(&ListParams::default()).await.map(|_| ()),
        "list pods",
    );
}
