//! The server as a test bed: injected failures and a restart that keeps
//! the data, the request log, and a 20,000-pod scale smoke run.

use super::*;

#[tokio::test]
async fn injected_failures_and_restart_keep_data() -> TestResult {
    let _watchdog = crate::watchdog::start();
    let h = server().await;
    let api: Api<ConfigMap> = Api::namespaced(h.client(), "default");
    api.create(&PostParams::default(), &cm("keep", &[])).await?;
    h.inject().fail_next(1, 500);
    let r = raw(
        &h,
        "GET",
        "/api/v1/namespaces/default/configmaps/keep",
        None,
        "",
    )
    .await;
    assert_eq!(r.status, 500);
    assert_eq!(r.json()["reason"], json!("InternalError"));
    h.inject().fail_next(1, 429);
    let r = raw(
        &h,
        "GET",
        "/api/v1/namespaces/default/configmaps/keep",
        None,
        "",
    )
    .await;
    assert_eq!(r.status, 429);
    assert_eq!(r.headers.get("retry-after").map(String::as_str), Some("1"));
    assert_eq!(
        raw(
            &h,
            "GET",
            "/api/v1/namespaces/default/configmaps/keep",
            None,
            ""
        )
        .await
        .status,
        200
    );
    // a rule limited to one verb and resource lets other requests through
    h.inject()
        .fail_next_matching(1, 503, Some("delete"), Some("configmaps"));
    let keep = "/api/v1/namespaces/default/configmaps/keep";
    let nothing = "/api/v1/namespaces/default/configmaps/nothing";
    assert_eq!(raw(&h, "GET", keep, None, "").await.status, 200);
    assert_eq!(raw(&h, "DELETE", nothing, None, "").await.status, 503);
    assert_eq!(raw(&h, "DELETE", nothing, None, "").await.status, 404);
    let url = h.url();
    h.restart().await?;
    assert_eq!(h.url(), url, "same port after restart");
    let fresh: Api<ConfigMap> = Api::namespaced(h.client(), "default");
    assert!(fresh.get("keep").await.is_ok(), "data survives the restart");
    h.inject().set_latency(Duration::from_millis(50));
    let t = Instant::now();
    fresh.get("keep").await?;
    assert!(t.elapsed() >= Duration::from_millis(50));
    h.inject().set_latency(Duration::ZERO);
    h.shutdown().await;
    assert!(
        tokio::net::TcpStream::connect(h.addr()).await.is_err(),
        "closed after shutdown"
    );
    Ok(())
}

#[tokio::test]
async fn request_log_counts_and_notifies() -> TestResult {
    let _watchdog = crate::watchdog::start();
    let h = server().await;
    let mut rx = h.subscribe_requests();
    let api: Api<ConfigMap> = Api::namespaced(h.client(), "default");
    api.create(&PostParams::default(), &cm("r", &[])).await?;
    let t = Instant::now();
    api.delete("r", &DeleteParams::default()).await?;
    let rec = loop {
        let r = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await??;
        if r.verb == "delete" && r.at >= t {
            break r;
        }
    };
    assert_eq!(rec.resource, "configmaps");
    assert_eq!(rec.status, 200);
    // the record carries the client's User-Agent (kube sends none by default)
    let r = raw(&h, "GET", "/api/v1/namespaces/default/configmaps", None, "").await;
    assert_eq!(r.status, 200);
    let last = h.requests().pop().unwrap_or_else(|| panic!("no record"));
    assert_eq!(
        (last.verb, last.user_agent.as_deref()),
        ("list", Some("rawtest/1.0"))
    );
    let counts = h.request_counts();
    assert_eq!(counts.get("create"), Some(&1));
    h.clear_requests();
    assert!(h.requests().is_empty());
    Ok(())
}

#[tokio::test]
async fn scale_smoke_2000_nodes_20000_pods() -> TestResult {
    let _watchdog = crate::watchdog::start();
    let h = server().await;
    let t = Instant::now();
    for n in 0..2000 {
        h.create_json(
            "/api/v1/nodes",
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": format!("node-{n:04}"),
            "labels": {"gpu": if n % 10 == 0 { "a100" } else { "h100" }}}}),
        )?;
    }
    h.ensure_namespace("train")?;
    for i in 0..20_000 {
        h.create_json("/api/v1/namespaces/train/pods", json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("pod-{i:05}"), "labels": {"job": format!("job-{}", i % 100)}},
            "spec": {"nodeName": format!("node-{:04}", i % 2000), "containers": [{"name": "c", "image": "i"}]}}))?;
    }
    println!("bulk create of 22,000 objects: {:?}", t.elapsed());
    assert_eq!(h.object_count("/pods"), 20_000);
    let pods: Api<Pod> = Api::namespaced(h.client(), "train");
    let t = Instant::now();
    let sel = pods
        .list(&ListParams::default().labels("job=job-7"))
        .await?;
    println!("label-selected list over 20,000 pods: {:?}", t.elapsed());
    assert_eq!(sel.items.len(), 200);
    let nodes: Api<Node> = Api::all(h.client());
    assert_eq!(
        nodes
            .list(&ListParams::default().labels("gpu=a100"))
            .await?
            .items
            .len(),
        200
    );
    // several watchers; measure write → event latency
    let mut watchers = Vec::new();
    for _ in 0..4 {
        watchers.push(
            pods.watch(
                &WatchParams::default().labels("job=job-7").timeout(30),
                &sel.metadata.resource_version.clone().unwrap_or_default(),
            )
            .await?
            .boxed(),
        );
    }
    let t = Instant::now();
    pods.patch(
        "pod-00007",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
    )
    .await?;
    for w in watchers.iter_mut() {
        match tokio::time::timeout(Duration::from_secs(5), w.try_next()).await {
            Ok(Ok(Some(WatchEvent::Modified(p)))) => {
                assert_eq!(p.metadata.name.as_deref(), Some("pod-00007"))
            }
            other => panic!("{other:?}"),
        }
    }
    println!("patch round trip + event on 4 watchers: {:?}", t.elapsed());
    // write (direct path) → event on a raw watch stream, measured on this side
    let mut s = tokio::net::TcpStream::connect(h.addr()).await?;
    let req = format!(
        "GET /api/v1/namespaces/train/pods?watch=true&labelSelector=job%3Djob-7&resourceVersion={} HTTP/1.1\r\nHost: x\r\n\r\n",
        h.resource_version()
    );
    s.write_all(req.as_bytes()).await?;
    let mut buf = vec![0u8; 65536];
    let n = s.read(&mut buf).await?; // response head
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    let mut latencies = Vec::new();
    for i in 0..20 {
        let t = Instant::now();
        h.create_json("/api/v1/namespaces/train/pods", json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("lat-{i}"), "labels": {"job": "job-7"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}))?;
        let mut got = String::new();
        while !got.contains(&format!("lat-{i}")) {
            let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await??;
            assert!(n > 0, "stream closed");
            got.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        latencies.push(t.elapsed());
    }
    latencies.sort();
    println!(
        "direct write → watch event on the wire: median {:?}, max {:?}",
        latencies[10], latencies[19]
    );
    let ns: Api<Namespace> = Api::all(h.client());
    assert!(ns.get("train").await.is_ok());
    Ok(())
}
