//! The restart agent (`rebound::inplace::agent`) against the simulator's
//! embedded API server: one get and one watch per pod, holds and releases,
//! lost and expired watches, TrainJob-owned JobSets, jobs created later,
//! failing open; and its watch selector read by the server's selector
//! parser. Here and not in the operator crate, which never imports the
//! simulator.

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use rebound::inplace::agent::*;
use rebound::inplace::{Generation, STATE_LABEL, Verdict, watch_selector};
use rebound_sim::{ApiServer, ApiServerHandle};
use serde_json::json;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

const NS: &str = "ml";
const WAIT: Duration = Duration::from_secs(10);

fn pytorchjobs() -> JobRef {
    JobRef::parse("kubeflow.org/v1/pytorchjobs", NS, "train").expect("job ref")
}

fn fast() -> RunnerConfig {
    RunnerConfig {
        backoff_min: Duration::from_millis(50),
        backoff_max: Duration::from_millis(200),
        ..RunnerConfig::default()
    }
}

async fn server() -> ApiServerHandle {
    let s = ApiServer::builder().start().await.expect("server");
    s.register_crds_yaml(rebound_sim::cluster::JOB_CRDS[0])
        .await
        .expect("crd");
    s.ensure_namespace(NS).expect("namespace");
    s
}

fn api(s: &ApiServerHandle) -> Api<DynamicObject> {
    Api::namespaced_with(s.client(), NS, &pytorchjobs().api_resource())
}

async fn create_job(s: &ApiServerHandle, current: u64, released: u64) {
    let mut metadata = Generation { current, released }.metadata_patch();
    metadata["name"] = json!("train");
    metadata["namespace"] = json!(NS);
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": metadata,
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {
            "spec": {"containers": [{"name": "pytorch", "image": "x"}]}}}}},
    }))
    .expect("object");
    api(s)
        .create(&PostParams::default(), &obj)
        .await
        .expect("create job");
}

async fn set_generation(s: &ApiServerHandle, current: u64, released: u64) {
    let patch = json!({"metadata": Generation { current, released }.metadata_patch()});
    api(s)
        .patch("train", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch job");
}

/// Starts the runner on its own task; its reports arrive on the channel.
fn start(
    s: &ApiServerHandle,
    cfg: RunnerConfig,
) -> (
    mpsc::UnboundedReceiver<Report>,
    tokio::task::JoinHandle<Report>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let client = s.client();
    let task = tokio::spawn(async move {
        run(client, &pytorchjobs(), &cfg, move |r| {
            let _ = tx.send(r.clone());
        })
        .await
    });
    (rx, task)
}

/// Waits until the agent has opened `n` watches (and the server's side
/// of the last one is running, so a drop reaches it).
async fn watching(s: &ApiServerHandle, n: usize) {
    let deadline = Instant::now() + WAIT;
    while agent_requests(s)
        .iter()
        .filter(|r| **r == ("watch", 200))
        .count()
        < n
    {
        assert!(Instant::now() < deadline, "the agent watches");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
}

async fn next(rx: &mut mpsc::UnboundedReceiver<Report>) -> Report {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("a report in time")
        .expect("runner alive")
}

/// Requests the agent made on the job kind, as `verb` strings.
fn agent_requests(s: &ApiServerHandle) -> Vec<(&'static str, u16)> {
    s.requests()
        .into_iter()
        .filter(|r| r.resource == "pytorchjobs" && r.verb != "create" && r.verb != "patch")
        .map(|r| (r.verb, r.status))
        .collect()
}

#[tokio::test]
async fn a_running_pod_exits_when_its_job_moves_on_with_one_get_and_one_watch() {
    let s = server().await;
    create_job(&s, 3, 3).await;
    let (mut rx, task) = start(&s, fast());
    let r = next(&mut rx).await;
    assert_eq!(
        (r.verdict, r.cause.clone()),
        (Verdict::Open, Cause::FirstRead)
    );
    assert_eq!(r.generation, Some(3));
    // Metadata only, one object, from the GET's version.
    let reqs = s.requests();
    let get = reqs
        .iter()
        .find(|r| r.resource == "pytorchjobs" && r.verb == "get")
        .expect("a GET");
    assert!(
        get.content_type.is_none() || get.path.ends_with("/train"),
        "GET of the object itself"
    );
    set_generation(&s, 4, 3).await;
    let r = next(&mut rx).await;
    assert_eq!(r.verdict, Verdict::Exit);
    assert_eq!(
        r.observed,
        Some(Generation {
            current: 4,
            released: 3
        })
    );
    let done = tokio::time::timeout(WAIT, task)
        .await
        .expect("run ends")
        .expect("task");
    assert_eq!(done, r);
    assert_eq!(
        agent_requests(&s),
        vec![("get", 200), ("watch", 200)],
        "one GET and one watch, no list"
    );
    let watch = s
        .requests()
        .into_iter()
        .find(|r| r.resource == "pytorchjobs" && r.verb == "watch")
        .expect("watch");
    assert!(
        watch.query.contains("fieldSelector=metadata.name%3Dtrain"),
        "{}",
        watch.query
    );
    assert!(
        watch.query.contains("allowWatchBookmarks=true"),
        "{}",
        watch.query
    );
    assert!(watch.query.contains("resourceVersion="), "{}", watch.query);
}

#[tokio::test]
async fn a_restarted_pod_holds_until_released_and_adopts_a_newer_generation() {
    let s = server().await;
    create_job(&s, 4, 3).await;
    let (mut rx, _task) = start(&s, fast());
    let r = next(&mut rx).await;
    assert_eq!((r.verdict, r.generation), (Verdict::Hold, Some(4)));
    // A second fault while waiting: adopted, no exit.
    set_generation(&s, 5, 3).await;
    set_generation(&s, 5, 4).await;
    set_generation(&s, 5, 5).await;
    let r = next(&mut rx).await;
    assert_eq!((r.verdict, r.generation), (Verdict::Open, Some(5)));
    assert_eq!(r.cause, Cause::Generation);
    assert!(rx.try_recv().is_err(), "no report for the unchanged Hold");
}

#[tokio::test]
async fn an_agent_that_lost_its_watch_catches_up_with_a_get() {
    let s = server().await;
    create_job(&s, 1, 1).await;
    let (mut rx, _task) = start(&s, fast());
    assert_eq!(next(&mut rx).await.verdict, Verdict::Open);
    watching(&s, 1).await;
    // From now on every watch fails: only GETs can tell the agent.
    s.inject()
        .fail_next_matching(1_000_000, 500, Some("watch"), Some("pytorchjobs"));
    s.inject().drop_watches();
    let deadline = Instant::now() + WAIT;
    while !agent_requests(&s).contains(&("watch", 500)) {
        assert!(Instant::now() < deadline, "the agent watches again");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    set_generation(&s, 2, 1).await;
    let r = next(&mut rx).await;
    assert_eq!(r.verdict, Verdict::Exit);
    assert!(
        agent_requests(&s)
            .iter()
            .all(|(v, _)| *v == "get" || *v == "watch"),
        "never a list: {:?}",
        agent_requests(&s)
    );
}

#[tokio::test]
async fn an_expired_watch_is_followed_by_a_fresh_read() {
    let s = server().await;
    create_job(&s, 1, 1).await;
    let (mut rx, _task) = start(&s, fast());
    assert_eq!(next(&mut rx).await.verdict, Verdict::Open);
    watching(&s, 1).await;
    // Slow requests, so that the versions expire between the agent's
    // GET and its watch from the GET's version: 410 Expired.
    let l = Duration::from_millis(400);
    s.inject().set_latency(l);
    s.inject().drop_watches();
    tokio::time::sleep(l + l / 2).await;
    s.inject().expire_all_versions();
    s.inject().set_latency(Duration::ZERO);
    set_generation(&s, 2, 1).await;
    let r = next(&mut rx).await;
    assert_eq!(r.verdict, Verdict::Exit);
    assert_eq!(r.observed.map(|g| g.current), Some(2));
    let gets = agent_requests(&s)
        .iter()
        .filter(|(v, _)| *v == "get")
        .count();
    let all: Vec<_> = s
        .requests()
        .into_iter()
        .map(|r| (r.verb, r.resource, r.status, r.query))
        .collect();
    assert!(gets >= 2, "read again after the drop: {all:?}");
}

#[tokio::test]
async fn the_agent_of_a_trainjobs_jobset_pod_follows_the_trainjob() {
    let s = server().await;
    s.register_crds_yaml(rebound_sim::cluster::JOB_CRDS[5])
        .await
        .expect("jobset crd");
    let jobsets = JobRef::parse("jobset.x-k8s.io/v1alpha2/jobsets", NS, "tj").expect("ref");
    let jobset = |owner: serde_json::Value| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "tj", "namespace": NS, "ownerReferences": owner},
            "spec": {"replicatedJobs": []},
        }))
        .expect("object")
    };
    let js_api: Api<DynamicObject> = Api::namespaced_with(s.client(), NS, &jobsets.api_resource());
    // No JobSet: the JobSet is followed (and waited for) itself.
    assert_eq!(
        follow_trainjob(&s.client(), &jobsets, &fast()).await,
        jobsets
    );
    // A plain JobSet: itself.
    js_api
        .create(&PostParams::default(), &jobset(json!([])))
        .await
        .expect("jobset");
    assert_eq!(
        follow_trainjob(&s.client(), &jobsets, &fast()).await,
        jobsets
    );
    js_api
        .delete("tj", &Default::default())
        .await
        .expect("delete");
    // A TrainJob's JobSet: the TrainJob.
    js_api
        .create(
            &PostParams::default(),
            &jobset(
                json!([{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "name": "tj", "uid": "u1", "controller": true}]),
            ),
        )
        .await
        .expect("jobset");
    let followed = follow_trainjob(&s.client(), &jobsets, &fast()).await;
    assert_eq!(
        followed,
        JobRef::parse("trainer.kubeflow.org/v1alpha1/trainjobs", NS, "tj").expect("ref")
    );
    // A plain JobSet's agent reads it once per run, not twice.
    js_api
        .delete("tj", &Default::default())
        .await
        .expect("delete");
    js_api
        .create(&PostParams::default(), &jobset(json!([])))
        .await
        .expect("jobset");
    let gets = |s: &ApiServerHandle| {
        s.requests()
            .iter()
            .filter(|r| r.resource == "jobsets" && r.verb == "get")
            .count()
    };
    let before = gets(&s);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let client = s.client();
    let task = tokio::spawn(async move {
        run(client, &jobsets, &fast(), move |r| {
            let _ = tx.send(r.clone());
        })
        .await
    });
    let r = next(&mut rx).await;
    assert_eq!(
        (r.verdict, r.cause.clone()),
        (Verdict::Open, Cause::FirstRead)
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(gets(&s) - before, 1, "one GET of the JobSet per run");
    task.abort();
    // Other kinds: no request at all.
    let before = s.requests().len();
    assert_eq!(
        follow_trainjob(&s.client(), &pytorchjobs(), &fast()).await,
        pytorchjobs()
    );
    assert_eq!(s.requests().len(), before);
}

#[tokio::test]
async fn a_job_created_after_the_agent_started_is_followed() {
    let s = server().await;
    let (mut rx, _task) = start(&s, fast());
    // The GET finds nothing; the watch from the current state waits.
    watching(&s, 1).await;
    assert_eq!(agent_requests(&s)[0], ("get", 404));
    create_job(&s, 2, 1).await;
    let r = next(&mut rx).await;
    assert_eq!(
        (r.verdict, r.cause.clone()),
        (Verdict::Hold, Cause::FirstRead)
    );
    set_generation(&s, 2, 2).await;
    assert_eq!(next(&mut rx).await.verdict, Verdict::Open);
    assert_eq!(
        agent_requests(&s),
        vec![("get", 404), ("watch", 200), ("watch", 200)],
        "the creation arrived on the watch; the agent then watches for changes of the state it saw, without a GET"
    );
}

#[tokio::test]
async fn the_jobs_own_writes_never_reach_the_agent_and_each_change_is_one_watch() {
    let s = server().await;
    create_job(&s, 4, 3).await;
    let (mut rx, _task) = start(&s, fast());
    assert_eq!(next(&mut rx).await.verdict, Verdict::Hold);
    watching(&s, 1).await;
    let sent = || s.watch_events_sent("kubeflow.org/pytorchjobs");
    let before = sent();
    // The job's operator at work: status and its own metadata.
    for i in 0..5 {
        api(&s)
            .patch_status(
                "train",
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": {"phase": format!("p{i}")}})),
            )
            .await
            .expect("status write");
        api(&s)
            .patch(
                "train",
                &PatchParams::default(),
                &Patch::Merge(
                    &json!({"metadata": {"annotations": {"operator/seen": i.to_string()}}}),
                ),
            )
            .await
            .expect("metadata write");
    }
    set_generation(&s, 4, 4).await;
    let r = next(&mut rx).await;
    assert_eq!((r.verdict, r.cause), (Verdict::Open, Cause::Generation));
    watching(&s, 2).await;
    assert_eq!(
        sent() - before,
        1,
        "ten writes of the job reached the agent as nothing, the release as one event"
    );
    let watches: Vec<String> = s
        .requests()
        .into_iter()
        .filter(|r| r.resource == "pytorchjobs" && r.verb == "watch")
        .map(|r| r.query)
        .collect();
    assert_eq!(watches.len(), 2, "{watches:?}");
    assert!(
        watches[0].contains("labelSelector=rebound.dev%2Frestart-state%21%3D4-3"),
        "{watches:?}"
    );
    assert!(
        watches[1].contains("labelSelector=rebound.dev%2Frestart-state%21%3D4-4"),
        "{watches:?}"
    );
    assert_eq!(
        agent_requests(&s)
            .iter()
            .filter(|(v, _)| *v == "get")
            .count(),
        1,
        "a change seen on the watch needs no GET"
    );
}

#[tokio::test]
async fn an_agent_that_cannot_read_its_job_fails_open_and_still_follows_it_later() {
    let s = server().await;
    let cfg = RunnerConfig {
        fail_open_after: Duration::from_millis(300),
        ..fast()
    };
    let t0 = Instant::now();
    let (mut rx, _task) = start(&s, cfg);
    let r = next(&mut rx).await;
    assert_eq!(r.verdict, Verdict::Open);
    assert!(
        matches!(&r.cause, Cause::FailOpen(why) if why.contains("not found")),
        "{r:?}"
    );
    assert!(t0.elapsed() >= Duration::from_millis(300));
    assert!(r.to_string().contains("fail-open"), "{r}");
    // The job appears later: its workers already run, so the first
    // read keeps the barrier open, and a newer generation restarts
    // the pod as usual.
    create_job(&s, 3, 2).await;
    set_generation(&s, 4, 2).await;
    let r = next(&mut rx).await;
    assert_eq!((r.verdict, r.generation), (Verdict::Exit, Some(3)));
}

fn g(current: u64, released: u64) -> Generation {
    Generation { current, released }
}

#[test]
fn the_watch_selector_excludes_exactly_the_state_seen() {
    use rebound_sim::server::selectors::LabelSelector;
    let matches = |sel: &str, v: Option<&str>| {
        let job = match v {
            Some(v) => serde_json::json!({"metadata": {"labels": {STATE_LABEL: v}}}),
            None => serde_json::json!({"metadata": {}}),
        };
        LabelSelector::parse(sel)
            .expect("selector parses")
            .matches(&job)
    };
    let seen = g(4, 3);
    let sel = watch_selector(Some(&seen.label_value()), seen).expect("filtered");
    assert!(!matches(&sel, Some("4-3")), "the state seen sends nothing");
    assert!(matches(&sel, Some("4-4")), "a release is sent");
    assert!(matches(&sel, Some("5-3")), "a new generation is sent");
    let never = watch_selector(None, g(0, 0)).expect("filtered");
    assert!(
        !matches(&never, None),
        "status writes of a job never restarted"
    );
    assert!(matches(&never, Some("1-0")), "its first restart");
    assert_eq!(watch_selector(None, g(2, 2)), None, "no label: unfiltered");
    assert_eq!(
        g(2, 1).metadata_patch()["labels"][STATE_LABEL],
        serde_json::json!("2-1")
    );
}
