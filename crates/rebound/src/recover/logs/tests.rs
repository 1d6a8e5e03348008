use super::*;
use kube::client::Body;

#[test]
fn keep_tail_cuts_at_a_line_and_a_char_boundary() {
    assert_eq!(keep_tail(b"one\ntwo\nthree\n", 100), "one\ntwo\nthree\n");
    assert_eq!(keep_tail(b"one\ntwo\nthree\n", 9), "three\n");
    assert_eq!(keep_tail("aéé".as_bytes(), 3), "é");
    assert_eq!(keep_tail(b"abcdef", 3), "def");
    assert_eq!(keep_tail(b"abc", 0), "");
    assert!(keep_tail(&[0xff; 10], 4).len() <= 4);
}

/// A scripted API server: every container's log is `LINES` lines of
/// 16 bytes; `tailLines` and `limitBytes` are honoured as the kubelet
/// does (the last lines, then the head of those). A request without
/// `limitBytes` gets 16 MiB. Answers the ConfigMap create with itself.
/// Returns the log queries and the ConfigMap created.
async fn serve_logs(
    mut handle: tower_test::mock::Handle<http::Request<Body>, http::Response<Body>>,
) -> (Vec<String>, serde_json::Value) {
    const LINES: u64 = 2_000_000;
    let mut queries = Vec::new();
    loop {
        let Some((req, send)) = handle.next_request().await else {
            panic!("no ConfigMap created");
        };
        let query = req.uri().query().unwrap_or("").to_string();
        if req.method() == http::Method::POST {
            let body = req.into_body().collect_bytes().await.expect("body");
            let cm: serde_json::Value = serde_json::from_slice(&body).expect("json");
            send.send_response(
                http::Response::builder()
                    .status(201)
                    .body(Body::from(body.to_vec()))
                    .expect("response"),
            );
            return (queries, cm);
        }
        let param = |k: &str| {
            query
                .split('&')
                .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
                .and_then(|v| v.parse::<u64>().ok())
        };
        let tail = param("tailLines").unwrap_or(LINES).min(LINES);
        let limit = param("limitBytes").unwrap_or(16 << 20);
        let mut body = Vec::new();
        for i in LINES - tail..LINES {
            if body.len() as u64 >= limit {
                break;
            }
            body.extend_from_slice(format!("line {i:010}\n").as_bytes());
        }
        body.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        queries.push(query);
        send.send_response(
            http::Response::builder()
                .status(200)
                .body(Body::from(body))
                .expect("response"),
        );
    }
}

#[tokio::test]
async fn a_huge_tail_is_read_one_bounded_log_at_a_time_into_one_configmap() {
    let (svc, handle) = tower_test::mock::pair::<http::Request<Body>, http::Response<Body>>();
    let client = Client::new(svc, "ml");
    let server = tokio::spawn(serve_logs(handle));
    let pods: Vec<PodLogTarget> = (0..20)
        .map(|i| PodLogTarget {
            name: format!("pt-worker-{i}"),
            containers: vec!["pytorch".into(), "sidecar".into()],
            previous: Vec::new(),
            node: Some("n".into()),
        })
        .collect();
    let job = JobRef::new(WorkloadKind::PyTorchJob, "ml", "pt", Some("u".into()));
    let now = DateTime::from_timestamp(1_764_500_000, 0).expect("time");
    let out = save_logs(&client, &job, &pods, u32::MAX, u32::MAX, now)
        .await
        .expect("saved");
    let (queries, cm) = server.await.expect("server");
    // Every read asked for no more than its share of the ConfigMap.
    assert!(queries.len() >= 40, "{}", queries.len());
    for q in &queries {
        let limit = q
            .split('&')
            .find_map(|kv| kv.strip_prefix("limitBytes="))
            .and_then(|v| v.parse::<usize>().ok());
        assert!(
            limit.is_some_and(|l| l <= CONFIG_MAP_LIMIT / 40),
            "unbounded read: {q}"
        );
    }
    let data = cm["data"].as_object().expect("data");
    let size: usize = data
        .iter()
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum();
    assert!(size <= CONFIG_MAP_LIMIT - CONFIG_MAP_HEADROOM, "{size}");
    assert!(size > CONFIG_MAP_LIMIT / 2, "the budget is used: {size}");
    // What is kept of each log is its tail: the last line is there.
    let log = data["pt-worker-19.sidecar"].as_str().expect("log");
    assert!(
        log.ends_with("line 0001999999\n"),
        "{}",
        &log[log.len() - 40..]
    );
    assert!(log.starts_with("line "), "cut at a line");
    assert!(
        data[NOTES_KEY]
            .as_str()
            .is_some_and(|n| n.contains("longer than its share"))
    );
    assert_eq!(out.failures, 0);
    assert_eq!(out.requests as usize, queries.len() + 1);
}

#[test]
fn the_data_budget_stays_under_what_the_api_server_accepts() {
    assert_eq!(data_budget(4096, 100), 4096);
    assert_eq!(
        data_budget(u32::MAX, 1000),
        CONFIG_MAP_LIMIT - CONFIG_MAP_HEADROOM - 1000
    );
    assert_eq!(data_budget(u32::MAX, usize::MAX), 0);
}

#[test]
fn the_nodes_annotation_of_a_huge_job_stays_bounded() {
    let pods: Vec<PodLogTarget> = (0..20_000)
        .map(|i| PodLogTarget {
            name: format!("pt-worker-{i}"),
            node: Some(format!("node-{i:05}")),
            ..PodLogTarget::default()
        })
        .collect();
    let a = nodes_annotation(&pods);
    assert!(a.len() <= NODES_ANNOTATION_MAX, "{}", a.len());
    let map: BTreeMap<String, String> = serde_json::from_str(&a).expect("json");
    assert!(map.len() > 1000, "{}", map.len());
    assert_eq!(nodes_annotation(&pods[..2]).matches(':').count(), 2);
}

#[test]
fn config_map_names_stay_valid() {
    let now = DateTime::from_timestamp(1_764_500_000, 0).expect("time");
    assert_eq!(config_map_name("bert", now), "rebound-logs-bert-1764500000");
    let long = "a".repeat(253);
    assert_eq!(config_map_name(&long, now).len(), 253);
}
