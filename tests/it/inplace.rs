//! In-place restarts (docs/in-place.md): the restart agent against a real
//! kube-apiserver, and the simulated kubelet restarting wired pods in place
//! as the real one does (restart rules, `RestartAllContainers`, init
//! containers again, the barrier on the agent's startup probe).

use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use rebound::inplace::agent::{self, Cause, JobRef, Report, RunnerConfig};
use rebound::inplace::{Generation, Verdict};
use rebound_sim::cluster::{self, JOB_CRDS};
use rebound_sim::envtest;
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
    let mut metadata = Generation { current, released }.metadata_patch();
    metadata["name"] = json!(name);
    metadata["namespace"] = json!(ns);
    serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": metadata,
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {
            "spec": {"containers": [{"name": "pytorch", "image": "x"}]}}}}},
    }))
    .expect("job object")
}

async fn set_generation(api: &Api<DynamicObject>, name: &str, current: u64, released: u64) {
    let patch = json!({"metadata": Generation { current, released }.metadata_patch()});
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
    let _watchdog = crate::watchdog::start();
    let cp = match envtest::shared() {
        Ok(cp) => cp,
        Err(why) if envtest::real_server_required() => panic!("no real control plane: {why}"),
        Err(why) => {
            eprintln!("SKIPPED on the real server: the agent's real-server test: {why}");
            return;
        }
    };
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

    only_generation_changes_reach_the_agents_watch(&api, "later").await;
    let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let _ = ns_api.delete(&ns, &Default::default()).await;
}

/// What the API server sends to a watch with the selector an agent uses
/// once it has seen its job ([`watch_selector`]): nothing for the writes of
/// the job's operator (status, its own labels and annotations), one event
/// when rebound moves the generation, nothing for writes after that until
/// the agent watches again excluding the new state. Without the selector
/// every status write of a 1,024-pod job reached all 1,024 agents.
async fn only_generation_changes_reach_the_agents_watch(api: &Api<DynamicObject>, name: &str) {
    use futures::StreamExt;
    use kube::api::{WatchEvent, WatchParams};
    use rebound::inplace::{STATE_LABEL, watch_selector};
    let meta = api.get_metadata(name).await.expect("job");
    let seen = Generation::from_annotations(meta.metadata.annotations.as_ref().expect("annotated"));
    let label = meta
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(STATE_LABEL))
        .cloned();
    let rv = meta.metadata.resource_version.clone().unwrap_or_default();
    let events = agent_watch(api, name, label.as_deref(), seen, &rv).await;
    operator_writes(api, name, 0..5).await;
    set_generation(api, name, seen.current + 1, seen.released).await;
    let first = received(events).await;
    let moved = Generation {
        current: seen.current + 1,
        released: seen.released,
    };
    let Some((g, label, rv)) = first else {
        panic!("rebound's generation write was not sent to the agent's watch");
    };
    assert_eq!(
        g, moved,
        "ten writes of the operator were not sent; the first event is rebound's"
    );
    // The agent watches again from that event, excluding the new state:
    // the operator's writes that follow send nothing.
    let events = agent_watch(api, name, label.as_deref(), g, &rv).await;
    operator_writes(api, name, 5..8).await;
    let next = received(events).await;
    assert_eq!(
        next.map(|(g, _, _)| g),
        None,
        "six more writes of the operator: nothing sent"
    );

    /// The watch an agent makes after seeing `label` and `g` at `rv`.
    async fn agent_watch(
        api: &Api<DynamicObject>,
        name: &str,
        label: Option<&str>,
        g: Generation,
        rv: &str,
    ) -> futures::stream::BoxStream<
        'static,
        Result<WatchEvent<kube::core::PartialObjectMeta<DynamicObject>>, kube::Error>,
    > {
        let selector = watch_selector(label, g).expect("a labelled job is filtered");
        let wp = WatchParams::default()
            .fields(&format!("metadata.name={name}"))
            .labels(&selector)
            .timeout(60);
        api.watch_metadata(&wp, rv).await.expect("watch").boxed()
    }

    /// What the job's operator writes: its status, its own label and
    /// annotation, once per `i`.
    async fn operator_writes(api: &Api<DynamicObject>, name: &str, range: std::ops::Range<u32>) {
        for i in range {
            let status =
                json!({"status": {"lastReconcileTime": format!("2026-12-02T00:00:{i:02}Z")}});
            let meta = json!({"metadata": {"labels": {"operator/phase": format!("p{i}")},
                "annotations": {"operator/seen": i.to_string()}}});
            api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
                .await
                .expect("status write");
            api.patch(name, &PatchParams::default(), &Patch::Merge(&meta))
                .await
                .expect("metadata write");
        }
    }

    /// The first change event within 2 s of quiet (generation, state label,
    /// resourceVersion), bookmarks skipped.
    async fn received(
        mut events: futures::stream::BoxStream<
            'static,
            Result<WatchEvent<kube::core::PartialObjectMeta<DynamicObject>>, kube::Error>,
        >,
    ) -> Option<(Generation, Option<String>, String)> {
        loop {
            match tokio::time::timeout(Duration::from_secs(2), events.next()).await {
                Err(_) | Ok(None) => return None,
                Ok(Some(Ok(WatchEvent::Bookmark(_)))) => {}
                Ok(Some(Ok(WatchEvent::Added(m) | WatchEvent::Modified(m)))) => {
                    let a = m.metadata.annotations.unwrap_or_default();
                    let label = m.metadata.labels.and_then(|l| l.get(STATE_LABEL).cloned());
                    let rv = m.metadata.resource_version.unwrap_or_default();
                    return Some((Generation::from_annotations(&a), label, rv));
                }
                Ok(Some(other)) => panic!("unexpected on the agent's watch: {other:?}"),
            }
        }
    }
}

#[tokio::test]
async fn only_generation_changes_reach_the_agents_watch_on_the_embedded_server() {
    let _watchdog = crate::watchdog::start();
    let s = rebound_sim::ApiServer::builder()
        .start()
        .await
        .expect("server");
    s.register_crds_yaml(JOB_CRDS[0]).await.expect("crd");
    s.ensure_namespace("ml").expect("namespace");
    let api: Api<DynamicObject> = Api::namespaced_with(s.client(), "ml", &pytorchjobs());
    api.create(&PostParams::default(), &job_object("ml", "train", 3, 3))
        .await
        .expect("create job");
    only_generation_changes_reach_the_agents_watch(&api, "train").await;
}

// ---------------------------------------------------------------------
// The simulated kubelet restarting wired pods in place.

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::runtime::watcher;
use rebound::inplace::AGENT_CONTAINER;
use rebound_sim::actors::kubelet::PodCosts;
use rebound_sim::cluster::{Operators, SimCluster, SimConfig, pod_running, wait_for};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wired_pod_restarts_in_place_waits_at_the_barrier_and_runs_again() {
    let _watchdog = crate::watchdog::start();
    // No start costs, but killing takes a moment, so that the restart's
    // condition is written and seen.
    let costs = PodCosts {
        kill: Duration::from_millis(300),
        ..PodCosts::default()
    };
    let c = wired_cluster(costs).await;
    let before = c
        .wait_for_pods_running(NS, &format!("{JOB_LABEL}=train"), 2, WAIT)
        .await
        .expect("pods run: a job never restarted has no barrier");
    for p in &before {
        let agent = init_status(p, AGENT_CONTAINER);
        assert_eq!(agent.started, Some(true), "barrier open");
        assert_eq!(
            init_status(p, "setup")
                .state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .map(|t| t.exit_code),
            Some(0)
        );
        assert_eq!(
            condition(p, "AllContainersRestarting").as_deref(),
            Some("False")
        );
    }
    let (seen, recorder) = record_pods(&c);
    let jobs = job_api(&c);

    // Generation 1: every pod's agent exits, the kubelet restarts the pod
    // in place, and the new run of the agent holds the barrier.
    set_generation(&jobs, "train", 1, 0).await;
    let held = wait_for(WAIT, "both pods at the barrier", || async {
        let pods = job_pods(&c).await;
        Ok((pods.len() == 2 && pods.iter().all(|p| at_barrier(p, 1))).then_some(pods))
    })
    .await
    .expect("restarted in place");
    for p in &held {
        let old = before
            .iter()
            .find(|b| b.metadata.name == p.metadata.name)
            .expect("same name");
        assert_eq!(p.metadata.uid, old.metadata.uid, "same pod");
        assert_eq!(
            p.spec.as_ref().and_then(|s| s.node_name.clone()),
            old.spec.as_ref().and_then(|s| s.node_name.clone()),
            "same node"
        );
        let st = p.status.as_ref().expect("status");
        assert_eq!(
            st.pod_ip,
            old.status.as_ref().and_then(|s| s.pod_ip.clone()),
            "same sandbox"
        );
        assert_eq!(st.phase.as_deref(), Some("Pending"));
        assert_eq!(condition(p, "Initialized").as_deref(), Some("True"));
        assert_eq!(condition(p, "Ready").as_deref(), Some("False"));
        let agent = init_status(p, AGENT_CONTAINER);
        let last = agent
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .expect("agent's last run");
        assert_eq!(last.exit_code, 87, "the rule's code");
        let setup = init_status(p, "setup");
        assert_eq!(setup.restart_count, 1, "init containers ran again");
        let worker = main_status(p);
        let killed = worker
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .expect("worker's last run");
        assert_eq!(killed.exit_code, 137, "killed");
    }
    let restarting_seen = seen
        .lock()
        .expect("lock")
        .iter()
        .filter(|p| condition(p, "AllContainersRestarting").as_deref() == Some("True"))
        .filter_map(|p| p.metadata.name.clone())
        .collect::<std::collections::BTreeSet<_>>();
    assert_eq!(
        restarting_seen.len(),
        2,
        "AllContainersRestarting=True seen on both pods"
    );

    // The workers stay at the barrier; a second generation meanwhile is
    // adopted without another restart.
    tokio::time::sleep(Duration::from_millis(800)).await;
    set_generation(&jobs, "train", 2, 0).await;
    set_generation(&jobs, "train", 2, 1).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let pods = job_pods(&c).await;
    assert!(
        pods.iter().all(|p| at_barrier(p, 1)),
        "still held, not restarted again: {pods:#?}"
    );

    // Released: every pod runs and is Ready again.
    set_generation(&jobs, "train", 2, 2).await;
    let after = c
        .wait_for_pods_running(NS, &format!("{JOB_LABEL}=train"), 2, WAIT)
        .await
        .expect("running again");
    for p in &after {
        assert_eq!(condition(p, "Ready").as_deref(), Some("True"));
        let agent = init_status(p, AGENT_CONTAINER);
        assert_eq!((agent.started, agent.restart_count), (Some(true), 1));
        assert_eq!(init_status(p, "setup").restart_count, 1);
        assert_eq!(main_status(p).restart_count, 1, "every restartCount + 1");
        assert!(before.iter().any(|b| b.metadata.uid == p.metadata.uid));
    }
    // Two agents, each watching that one job only, no lists: one watch per
    // state of the job it saw, each excluding that state (run 1: before
    // any restart; run 2: 1-0, then 2-0, 2-1 and 2-2 as they came).
    let reqs = c.api().requests();
    let agent_watches = reqs
        .iter()
        .filter(|r| {
            r.verb == "watch"
                && r.resource == "pytorchjobs"
                && r.query.contains("fieldSelector=metadata.name%3Dtrain")
        })
        .count();
    let queries: Vec<String> = reqs
        .iter()
        .filter(|r| r.verb == "watch" && r.resource == "pytorchjobs")
        .map(|r| r.query.clone())
        .collect();
    assert_eq!(agent_watches, 2 * 5, "{queries:#?}");
    for state in ["", "%21%3D1-0", "%21%3D2-0", "%21%3D2-1", "%21%3D2-2"] {
        let sel = format!("labelSelector=rebound.dev%2Frestart-state{state}&");
        assert_eq!(
            queries.iter().filter(|q| q.contains(&sel)).count(),
            2,
            "{sel}: {queries:#?}"
        );
    }
    assert!(
        !reqs
            .iter()
            .any(|r| r.verb == "list" && r.query.contains("metadata.name%3Dtrain")),
        "agents never list"
    );
    recorder.abort();
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_that_lost_their_watch_catch_up_and_restart_their_pods() {
    let _watchdog = crate::watchdog::start();
    let c = wired_cluster(PodCosts::default()).await;
    let sel = format!("{JOB_LABEL}=train");
    c.wait_for_pods_running(NS, &sel, 2, WAIT)
        .await
        .expect("running");
    // Let both agents settle on their watches, then take watching away:
    // every watch of the job kind fails, the open ones are dropped.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let api = c.api().clone();
    api.inject()
        .fail_next_matching(1_000_000, 500, Some("watch"), Some("pytorchjobs"));
    api.inject().drop_watches();
    wait_for(WAIT, "the agents watching again and failing", || {
        let api = api.clone();
        async move {
            let failed = api
                .requests()
                .iter()
                .filter(|r| {
                    r.verb == "watch"
                        && r.status == 500
                        && r.query.contains("metadata.name%3Dtrain")
                })
                .count();
            Ok((failed >= 2).then_some(()))
        }
    })
    .await
    .expect("watches fail");
    set_generation(&job_api(&c), "train", 1, 0).await;
    let t = Instant::now();
    wait_for(
        WAIT,
        "both pods restarted in place without a watch",
        || async {
            let pods = job_pods(&c).await;
            Ok((pods.len() == 2 && pods.iter().all(|p| at_barrier(p, 1))).then_some(()))
        },
    )
    .await
    .expect("caught up by reading the job again");
    eprintln!("agents without a watch caught up in {:?}", t.elapsed());
    api.inject().fail_next_matching(0, 500, None, None);
    set_generation(&job_api(&c), "train", 1, 1).await;
    let pods = c
        .wait_for_pods_running(NS, &sel, 2, WAIT)
        .await
        .expect("released");
    assert!(pods.iter().all(pod_running));
    c.shutdown().await;
}

/// With (scaled-down) modelled costs, an in-place restart pays kill, the
/// init containers and the containers again, but no devices or sandbox;
/// a fresh start pays them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_place_restart_pays_only_kill_init_and_start_again() {
    let _watchdog = crate::watchdog::start();
    let costs = PodCosts::parse(
        "zero,devices=1s,sandbox=3s,image=100ms,start=100ms,init=200ms,ready=200ms,kill=100ms",
    )
    .expect("costs");
    let created = Instant::now();
    let c = wired_cluster(costs.clone()).await;
    let sel = format!("{JOB_LABEL}=train");
    c.wait_for_pods_running(NS, &sel, 2, WAIT)
        .await
        .expect("running");
    let fresh = created.elapsed();
    // devices + sandbox, setup (image, start, run), agent (image, start),
    // worker (image, start); no probes on the worker.
    let fresh_min = costs.devices + costs.sandbox + (costs.image + costs.start) * 3 + costs.init;
    assert!(fresh >= fresh_min, "fresh start {fresh:?} < {fresh_min:?}");
    let jobs = job_api(&c);
    let t = Instant::now();
    set_generation(&jobs, "train", 1, 0).await;
    let held = wait_for(WAIT, "at the barrier", || async {
        let pods = job_pods(&c).await;
        let all = pods.len() == 2 && pods.iter().all(|p| at_barrier(p, 1));
        Ok(all.then(|| t.elapsed()))
    })
    .await
    .expect("held");
    // kill, then setup (image, start, run) and the agent (image, start).
    let to_barrier = costs.kill + (costs.image + costs.start) * 2 + costs.init;
    assert!(
        held >= to_barrier,
        "at the barrier after {held:?} < {to_barrier:?}"
    );
    assert!(
        held < to_barrier + costs.sandbox,
        "the sandbox ({:?}) is not paid again: at the barrier after {held:?}",
        costs.sandbox
    );
    let t = Instant::now();
    set_generation(&jobs, "train", 1, 1).await;
    let resumed = wait_for(WAIT, "running again", || async {
        let pods = job_pods(&c).await;
        let done = pods.len() == 2
            && pods
                .iter()
                .all(|p| pod_running(p) && main_status(p).restart_count == 1);
        Ok(done.then(|| t.elapsed()))
    })
    .await
    .expect("resumed");
    assert!(resumed >= costs.image + costs.start, "{resumed:?}");
    eprintln!(
        "scaled costs: fresh start {fresh:?}; in place: barrier after {held:?}, running {resumed:?} after the release"
    );
    c.shutdown().await;
}

/// At scale (run with `--ignored`): a 1,024-pod wired job on 2,000 nodes,
/// one in-process agent (GET + watch) per pod, restarted in place once.
/// Prints the times; asserts only that every pod restarted in place once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "scale: about a minute in a debug build"]
async fn scale_1024_wired_pods_restart_in_place() {
    let _watchdog = crate::watchdog::start();
    let c = SimCluster::start(SimConfig {
        nodes: 2000,
        namespaces: vec![NS.into()],
        operators: Operators {
            kubeflow: false,
            volcano: false,
            jobset: false,
            batch: false,
        },
        server_threads: 2,
        ..SimConfig::default()
    })
    .await
    .expect("cluster");
    let job = c
        .api()
        .create_object(json!({
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "train", "namespace": NS},
            "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1024, "template": wired_template()}}},
        }))
        .expect("job");
    let t = Instant::now();
    for i in 0..1024 {
        let mut spec = wired_template()["spec"].clone();
        spec["restartPolicy"] = json!("OnFailure");
        spec["nodeName"] = json!(format!("node-{:04}", i % 2000));
        c.api()
            .create_object(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("train-worker-{i}"), "namespace": NS,
                    "labels": {JOB_LABEL: "train"},
                    "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                        "name": "train", "uid": job["metadata"]["uid"], "controller": true}]},
                "spec": spec,
            }))
            .expect("pod");
    }
    let sel = format!("{JOB_LABEL}=train");
    c.wait_for_pods_running(NS, &sel, 1024, Duration::from_secs(300))
        .await
        .expect("running");
    eprintln!("1,024 wired pods running after {:?}", t.elapsed());
    c.api().clear_requests();
    let jobs = job_api(&c);
    let t = Instant::now();
    set_generation(&jobs, "train", 1, 0).await;
    wait_for(Duration::from_secs(300), "all at the barrier", || async {
        let pods = job_pods(&c).await;
        Ok((pods.len() == 1024 && pods.iter().all(|p| at_barrier(p, 1))).then_some(()))
    })
    .await
    .expect("held");
    let held = t.elapsed();
    set_generation(&jobs, "train", 1, 1).await;
    c.wait_for_pods_running(NS, &sel, 1024, Duration::from_secs(300))
        .await
        .expect("running again");
    let counts = c.api().request_counts();
    eprintln!(
        "in place: all 1,024 at the barrier after {held:?}, running again after {:?}; requests meanwhile: {counts:?}",
        t.elapsed()
    );
    let pods = job_pods(&c).await;
    assert!(pods.iter().all(|p| main_status(p).restart_count == 1));
    c.shutdown().await;
}
