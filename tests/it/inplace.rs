//! In-place restarts (docs/in-place.md): the restart agent against a real
//! kube-apiserver, and the simulated kubelet restarting wired pods in place
//! as the real one does (restart rules, `RestartAllContainers`, init
//! containers again, the barrier on the agent's startup probe).

use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use rebound::inplace::agent::{self, Cause, JobRef, Report, RunnerConfig};
use rebound::inplace::{GENERATION_ANNOTATION, RELEASED_ANNOTATION, Verdict};
use rebound::sim::cluster::{self, JOB_CRDS};
use rebound::sim::envtest;
use serde_json::json;
use tokio::sync::mpsc;

const WAIT: Duration = Duration::from_secs(30);

fn pytorchjobs() -> ApiResource {
    ApiResource {
        group: "kubeflow.org".into(),
        version: "v1".into(),
        api_version: "kubeflow.org/v1".into(),
        kind: "PyTorchJob".into(),
        plural: "pytorchjobs".into(),
    }
}

fn job_object(ns: &str, name: &str, current: u64, released: u64) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": ns, "annotations": {
            GENERATION_ANNOTATION: current.to_string(),
            RELEASED_ANNOTATION: released.to_string(),
        }},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {
            "spec": {"containers": [{"name": "pytorch", "image": "x"}]}}}}},
    }))
    .expect("job object")
}

async fn set_generation(api: &Api<DynamicObject>, name: &str, current: u64, released: u64) {
    let patch = json!({"metadata": {"annotations": {
        GENERATION_ANNOTATION: current.to_string(),
        RELEASED_ANNOTATION: released.to_string(),
    }}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch job");
}

fn start_agent(
    client: kube::Client,
    job: JobRef,
) -> (
    mpsc::UnboundedReceiver<Report>,
    tokio::task::JoinHandle<Report>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let cfg = RunnerConfig {
        backoff_min: Duration::from_millis(100),
        backoff_max: Duration::from_secs(1),
        ..RunnerConfig::default()
    };
    let task = tokio::spawn(async move {
        agent::run(client, &job, &cfg, move |r| {
            let _ = tx.send(r.clone());
        })
        .await
    });
    (rx, task)
}

async fn next(rx: &mut mpsc::UnboundedReceiver<Report>) -> Report {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("a report in time")
        .expect("agent alive")
}

/// The agent's runner against a real kube-apiserver (REBOUND_TEST_ASSETS):
/// metadata GET and field-selected metadata watch of a custom resource,
/// the generation followed through hold, release and exit, and a job that
/// is created only after its agent started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_follows_its_job_on_a_real_api_server() {
    let Some(cp) = envtest::shared() else {
        eprintln!(
            "notice: {} unset; the agent's real-server test is skipped (set it to the unpacked ../shared/k8s)",
            envtest::ASSETS_ENV
        );
        return;
    };
    let cp = cp.expect("control plane starts");
    let client = kube::Client::try_from(cp.client_config().await.expect("config")).expect("client");
    // Other tests of this binary may install the same CRD on the shared
    // control plane at the same moment: a lost race is a 409, try again.
    let mut installed = cluster::install_crds(&client, JOB_CRDS[0]).await;
    for _ in 0..3 {
        if installed.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        installed = cluster::install_crds(&client, JOB_CRDS[0]).await;
    }
    installed.expect("PyTorchJob CRD");
    let ns = format!("inplace-{}", std::process::id());
    cluster::ensure_namespace(&client, &ns)
        .await
        .expect("namespace");
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &pytorchjobs());
    api.create(&PostParams::default(), &job_object(&ns, "train", 2, 1))
        .await
        .expect("create job");
    let job = JobRef::parse("kubeflow.org/v1/pytorchjobs", &ns, "train").expect("job ref");
    let (mut rx, task) = start_agent(client.clone(), job);
    let r = next(&mut rx).await;
    assert_eq!((r.verdict, r.generation), (Verdict::Hold, Some(2)), "{r}");
    set_generation(&api, "train", 2, 2).await;
    let r = next(&mut rx).await;
    assert_eq!(
        (r.verdict, r.cause.clone()),
        (Verdict::Open, Cause::Generation)
    );
    let t = Instant::now();
    set_generation(&api, "train", 3, 2).await;
    let r = next(&mut rx).await;
    assert_eq!(r.verdict, Verdict::Exit, "{r}");
    eprintln!(
        "real server: generation bump seen by the agent in {:?}",
        t.elapsed()
    );
    let done = tokio::time::timeout(WAIT, task)
        .await
        .expect("ends")
        .expect("task");
    assert_eq!(done.verdict, Verdict::Exit);

    // A job that does not exist yet: the agent waits on its watch.
    let job = JobRef::parse("kubeflow.org/v1/pytorchjobs", &ns, "later").expect("job ref");
    let (mut rx, _task) = start_agent(client.clone(), job);
    tokio::time::sleep(Duration::from_millis(500)).await;
    api.create(&PostParams::default(), &job_object(&ns, "later", 1, 1))
        .await
        .expect("create the later job");
    let r = next(&mut rx).await;
    assert_eq!((r.verdict, r.cause), (Verdict::Open, Cause::FirstRead));
    let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let _ = ns_api.delete(&ns, &Default::default()).await;
}
