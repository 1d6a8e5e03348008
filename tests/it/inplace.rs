//! In-place restarts (docs/in-place.md): the restart agent against a real
//! kube-apiserver, and the simulated kubelet restarting wired pods in place
//! as the real one does (restart rules, `RestartAllContainers`, init
//! containers again, the barrier on the agent's startup probe).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use rebound::inplace::AGENT_CONTAINER;
use rebound::inplace::agent::{self, Cause, JobRef, Report, RunnerConfig};
use rebound::inplace::{Generation, Verdict};
use rebound_sim::actors::kubelet::PodCosts;
use rebound_sim::cluster::{self, JOB_CRDS};
use rebound_sim::cluster::{Operators, SimCluster, SimConfig, pod_running, wait_for};
use rebound_sim::envtest;
use serde_json::json;
use tokio::sync::mpsc;

mod agent_watch;
mod kubelet;
mod kubelet_costs;

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

async fn set_generation(api: &Api<DynamicObject>, name: &str, current: u64, released: u64) {
    let patch = json!({"metadata": Generation { current, released }.metadata_patch()});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch job");
}

// The simulated kubelet restarting wired pods in place: its cluster and
// what the tests read of its pods.

const NS: &str = "ml";
const JOB_LABEL: &str = "training.kubeflow.org/job-name";

/// A pod template wired as docs/in-place.md says: a regular init
/// container, the agent as a native sidecar with its rule and probe, the
/// job's name from the pod's label through the downward API.
fn wired_template() -> serde_json::Value {
    json!({"spec": {
        "initContainers": [
            {"name": "setup", "image": "busybox", "command": ["sh", "-c", "true"]},
            {"name": AGENT_CONTAINER, "image": "rebound:dev",
             "command": ["rebound", "restart-agent"],
             "restartPolicy": "Always",
             "restartPolicyRules": [{"action": "RestartAllContainers",
                                     "exitCodes": {"operator": "In", "values": [87]}}],
             "startupProbe": {"httpGet": {"path": "/barrier", "port": 9079},
                              "periodSeconds": 1, "failureThreshold": 86400},
             "env": [
                 {"name": "REBOUND_JOB_API", "value": "kubeflow.org/v1/pytorchjobs"},
                 {"name": "REBOUND_JOB_NAME", "valueFrom": {"fieldRef": {
                     "fieldPath": format!("metadata.labels['{JOB_LABEL}']")}}},
                 {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
             ]},
        ],
        "containers": [{"name": "pytorch", "image": "trainer", "command": ["python", "train.py"]}],
    }})
}

/// A cluster with a PyTorchJob `train` and its two pods, wired. The pods
/// are made here as the training operator would make them (names, labels,
/// owner), since the simulated operators create pods through the typed
/// `Pod` of this build, which has no `restartPolicyRules`; no operator
/// runs, and none is needed: nothing is recreated.
async fn wired_cluster(costs: PodCosts) -> SimCluster {
    let mut cfg = SimConfig {
        nodes: 2,
        namespaces: vec![NS.into()],
        operators: Operators {
            kubeflow: false,
            volcano: false,
            jobset: false,
            batch: false,
        },
        ..SimConfig::default()
    };
    cfg.kubelet.costs = costs;
    let c = SimCluster::start(cfg).await.expect("cluster");
    let job: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "train", "namespace": NS},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": wired_template()}}},
    }))
    .expect("job");
    let job = job_api(&c)
        .create(&PostParams::default(), &job)
        .await
        .expect("create job");
    let pods: Api<DynamicObject> =
        Api::namespaced_with(c.client(), NS, &ApiResource::erase::<Pod>(&()));
    for (i, rtype) in ["master", "worker"].iter().enumerate() {
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("train-{rtype}-0"), "namespace": NS,
                "labels": {JOB_LABEL: "train", "training.kubeflow.org/replica-type": rtype},
                "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                    "name": "train", "uid": job.metadata.uid, "controller": true}]},
            "spec": wired_template()["spec"].clone(),
        });
        pod["spec"]["restartPolicy"] = json!("OnFailure");
        pod["spec"]["nodeName"] = json!(format!("node-{i:04}"));
        let pod: DynamicObject = serde_json::from_value(pod).expect("pod");
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("create pod");
    }
    c
}

fn job_api(c: &SimCluster) -> Api<DynamicObject> {
    Api::namespaced_with(c.client(), NS, &pytorchjobs())
}

fn init_status<'a>(p: &'a Pod, name: &str) -> &'a ContainerStatus {
    p.status
        .as_ref()
        .and_then(|s| s.init_container_statuses.as_ref())
        .and_then(|v| v.iter().find(|c| c.name == name))
        .unwrap_or_else(|| panic!("init container {name} of {:?}", p.metadata.name))
}

fn main_status(p: &Pod) -> &ContainerStatus {
    &p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .expect("container statuses")[0]
}

fn condition(p: &Pod, t: &str) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == t)
        .map(|c| c.status.clone())
}

/// Whether a pod waits at the barrier of a restart in place: the agent
/// runs again (restarted once) but has not started, the workers wait.
fn at_barrier(p: &Pod, restarts: i32) -> bool {
    let agent = init_status(p, AGENT_CONTAINER);
    let runs = agent.state.as_ref().is_some_and(|s| s.running.is_some());
    let worker_waits = main_status(p)
        .state
        .as_ref()
        .is_some_and(|s| s.waiting.is_some());
    runs && agent.started == Some(false) && agent.restart_count == restarts && worker_waits
}

async fn job_pods(c: &SimCluster) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(c.client(), NS);
    api.list(&kube::api::ListParams::default().labels(&format!("{JOB_LABEL}=train")))
        .await
        .expect("list pods")
        .items
}

/// Every pod status the watch showed, to see short-lived states.
fn record_pods(c: &SimCluster) -> (Arc<Mutex<Vec<Pod>>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let api: Api<Pod> = Api::namespaced(c.client(), NS);
    let s = seen.clone();
    let task = tokio::spawn(async move {
        let mut w = watcher(api, watcher::Config::default()).boxed();
        while let Some(e) = w.next().await {
            if let Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = e {
                s.lock().expect("lock").push(p);
            }
        }
    });
    (seen, task)
}
