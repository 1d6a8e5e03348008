//! The restart agent's runner against a real kube-apiserver and the
//! embedded one: it follows its job's generation, and only generation
//! changes reach its watch.

use super::*;

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
    // No bed's controller beside it: one would release the job's raised
    // generation (it watches every namespace).
    let _turn = rebound_sim::testbed::Testbed::exclusive_turn().await;
    let client = kube::Client::try_from(cp.client_config().await.expect("config")).expect("client");
    // The shared control plane runs the real training-operator: its
    // PyTorchJob CRD and webhook, as on every real bed of this binary.
    tokio::task::spawn_blocking(rebound_sim::envtest::operators::shared)
        .await
        .expect("start")
        .expect("the real job operators");
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
