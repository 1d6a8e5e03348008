//! Restarts against a mocked API server: the Volcano Command's name and
//! its retries, and the version the pod list is read at.

use super::volcano::volcano_command_name;
use super::*;
use kube::client::Body;
use serde_json::Value;
use serde_json::json;

type Handle = tower_test::mock::Handle<http::Request<Body>, http::Response<Body>>;

fn answer(code: u16, body: &Value) -> http::Response<Body> {
    http::Response::builder()
        .status(code)
        .body(Body::from(serde_json::to_vec(body).expect("json")))
        .expect("response")
}

fn status(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
           "reason": reason, "message": reason})
}

/// The Volcano restart of `vc` (uid `u-1`, generation 3) against a
/// server that answers the create with `create` and a later GET with
/// `get`; the outcome and the Command that was POSTed.
async fn restart_volcano(
    create: (u16, Value),
    get: Option<(u16, Value)>,
) -> (Result<RestartOutcome, RecoverError>, Value) {
    let (svc, mut handle): (_, Handle) = tower_test::mock::pair();
    let client = Client::new(svc, "ml");
    let server = tokio::spawn(async move {
        let (req, send) = handle.next_request().await.expect("the create");
        assert_eq!(req.method(), http::Method::POST);
        assert_eq!(
            req.uri().path(),
            "/apis/bus.volcano.sh/v1alpha1/namespaces/ml/commands"
        );
        let body = req.into_body().collect_bytes().await.expect("body");
        let sent: Value = serde_json::from_slice(&body).expect("json");
        let (code, mut v) = create;
        if code == 201 {
            v = sent.clone();
        }
        send.send_response(answer(code, &v));
        if let Some((code, v)) = get {
            let (req, send) = handle.next_request().await.expect("the get");
            assert_eq!(req.method(), http::Method::GET);
            assert!(req.uri().path().ends_with("/commands/vc-rebound-u-1-3"));
            send.send_response(answer(code, &v));
        }
        sent
    });
    let job = JobRef::new(WorkloadKind::VolcanoJob, "ml", "vc", Some("u-1".into()));
    let out = restart_job(&client, &job, Some(3), None).await;
    (out, server.await.expect("server"))
}

fn command(target_uid: &str) -> Value {
    json!({"apiVersion": "bus.volcano.sh/v1alpha1", "kind": "Command",
           "metadata": {"name": "vc-rebound-u-1-3", "namespace": "ml"},
           "action": "RestartJob",
           "target": {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                      "name": "vc", "uid": target_uid}})
}

#[tokio::test]
async fn the_command_is_named_by_the_job_uid_and_the_generation() {
    let (out, sent) = restart_volcano((201, Value::Null), None).await;
    assert_eq!(sent["metadata"]["name"], "vc-rebound-u-1-3");
    assert!(sent["metadata"].get("generateName").is_none());
    assert_eq!(sent["target"]["uid"], "u-1");
    let out = out.expect("restarted");
    assert_eq!(
        out.path,
        RestartPath::VolcanoCommand {
            command: "vc-rebound-u-1-3".into()
        }
    );
}

#[tokio::test]
async fn a_retry_that_meets_its_own_command_is_success() {
    let (out, _) = restart_volcano(
        (409, status(409, "AlreadyExists")),
        Some((200, command("u-1"))),
    )
    .await;
    let out = out.expect("the lost answer's Command is this restart");
    assert_eq!(
        out.path,
        RestartPath::VolcanoCommand {
            command: "vc-rebound-u-1-3".into()
        }
    );
    assert_eq!(out.requests, 2);
    // Taken by Volcano between the 409 and the read: still ours.
    let (out, _) = restart_volcano(
        (409, status(409, "AlreadyExists")),
        Some((404, status(404, "NotFound"))),
    )
    .await;
    assert!(out.is_ok(), "{out:?}");
}

#[tokio::test]
async fn a_command_of_that_name_for_another_job_is_an_error() {
    let (out, _) = restart_volcano(
        (409, status(409, "AlreadyExists")),
        Some((200, command("someone-else"))),
    )
    .await;
    let err = out.expect_err("not ours");
    assert!(matches!(err, RecoverError::NotOurs { .. }), "{err}");
    assert!(err.to_string().contains("someone-else"), "{err}");
}

/// A PyTorchJob restart with `pods_rv`, against a server that answers
/// its `deletecollection`s with `answers` in turn; the outcome and the
/// query of each request.
async fn restart_pytorchjob(
    pods_rv: Option<&str>,
    answers: Vec<(u16, Value)>,
) -> (Result<RestartOutcome, RecoverError>, Vec<String>) {
    let (svc, mut handle) = tower_test::mock::pair::<http::Request<Body>, http::Response<Body>>();
    let client = Client::new(svc, "ml");
    let server = tokio::spawn(async move {
        let mut queries = Vec::new();
        for (code, body) in answers {
            let (req, send) = handle.next_request().await.expect("a deletecollection");
            assert_eq!(req.method(), http::Method::DELETE);
            assert_eq!(req.uri().path(), "/api/v1/namespaces/ml/pods");
            queries.push(req.uri().query().unwrap_or("").to_string());
            send.send_response(answer(code, &body));
        }
        queries
    });
    let job = JobRef::new(WorkloadKind::PyTorchJob, "ml", "pt", Some("u-2".into()));
    let out = restart_job(&client, &job, Some(1), pods_rv).await;
    (out, server.await.expect("server"))
}

fn pod_list(n: usize) -> Value {
    let items: Vec<Value> = (0..n)
        .map(|i| json!({"metadata": {"name": format!("pt-worker-{i}"), "namespace": "ml"}}))
        .collect();
    json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
}

#[tokio::test]
async fn the_pods_are_listed_from_the_cache_no_older_than_the_watch() {
    let (out, queries) = restart_pytorchjob(Some("4711"), vec![(200, pod_list(4))]).await;
    let out = out.expect("restarted");
    assert_eq!((out.pods_deleted, out.requests), (4, 1));
    assert!(queries[0].contains("resourceVersion=4711"), "{queries:?}");
    assert!(
        queries[0].contains("resourceVersionMatch=NotOlderThan"),
        "{queries:?}"
    );
    assert!(queries[0].contains("labelSelector="), "{queries:?}");
}

#[tokio::test]
async fn a_cache_that_cannot_catch_up_gets_a_consistent_read() {
    let (out, queries) = restart_pytorchjob(
        Some("4711"),
        vec![(504, status(504, "Timeout")), (200, pod_list(3))],
    )
    .await;
    let out = out.expect("restarted on the second request");
    assert_eq!((out.pods_deleted, out.requests), (3, 2));
    assert!(!queries[1].contains("resourceVersion"), "{queries:?}");
    assert!(queries[1].contains("labelSelector="), "{queries:?}");
}

#[tokio::test]
async fn without_a_version_the_read_is_consistent_and_other_errors_are_not_retried() {
    let (out, queries) = restart_pytorchjob(None, vec![(504, status(504, "Timeout"))]).await;
    assert!(out.is_err(), "{out:?}");
    assert_eq!(queries.len(), 1);
    assert!(!queries[0].contains("resourceVersion"), "{queries:?}");
    let (out, queries) =
        restart_pytorchjob(Some("9"), vec![(500, status(500, "InternalError"))]).await;
    assert!(out.is_err(), "{out:?}");
    assert_eq!(queries.len(), 1, "only a 504 is asked again: {queries:?}");
}

#[test]
fn command_names_stay_valid() {
    let uid = "0f0e6c3a-4b7e-4a5e-9a57-2f4a1d1c7b10";
    assert_eq!(
        volcano_command_name("vc", uid, 7),
        format!("vc-rebound-{uid}-7")
    );
    let long = "a".repeat(253);
    assert!(volcano_command_name(&long, uid, u64::MAX).len() <= 253);
}
