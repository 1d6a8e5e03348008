//! Watches: resuming from a resourceVersion, 410 for a too-old one and the
//! watcher's recovery, streaming lists, selector transitions, and periodic
//! bookmarks.

use super::*;

#[tokio::test]
async fn watch_resumes_from_resource_version() -> TestResult {
    let _watchdog = crate::watchdog::start();
    let h = server().await;
    let api: Api<ConfigMap> = Api::namespaced(h.client(), "default");
    let first = api.create(&PostParams::default(), &cm("w0", &[])).await?;
    let rv = first.metadata.resource_version.clone().unwrap_or_default();
    api.create(&PostParams::default(), &cm("w1", &[])).await?;
    api.delete("w0", &DeleteParams::default()).await?;
    let mut stream = api
        .watch(&WatchParams::default().timeout(5), &rv)
        .await?
        .boxed();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        match tokio::time::timeout(Duration::from_secs(5), stream.try_next()).await {
            Ok(Ok(Some(WatchEvent::Added(c)))) => {
                seen.push(format!("ADDED {}", c.metadata.name.unwrap_or_default()))
            }
            Ok(Ok(Some(WatchEvent::Deleted(c)))) => {
                seen.push(format!("DELETED {}", c.metadata.name.unwrap_or_default()))
            }
            Ok(Ok(Some(WatchEvent::Modified(c)))) => {
                seen.push(format!("MODIFIED {}", c.metadata.name.unwrap_or_default()))
            }
            other => panic!("unexpected {other:?} after {seen:?}"),
        }
        if seen.len() == 2 {
            api.create(&PostParams::default(), &cm("w2", &[])).await?;
        }
    }
    assert_eq!(seen, vec!["ADDED w1", "DELETED w0", "ADDED w2"]);
    Ok(())
}

#[tokio::test]
async fn too_old_resource_version_gives_410_and_watcher_recovers() -> TestResult {
    let _watchdog = crate::watchdog::start();
    let h = server().await;
    let api: Api<ConfigMap> = Api::namespaced(h.client(), "default");
    let c = api.create(&PostParams::default(), &cm("old", &[])).await?;
    let rv = c.metadata.resource_version.unwrap_or_default();
    h.inject().expire_all_versions();
    let r = raw(
        &h,
        "GET",
        &format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}"),
        None,
        "",
    )
    .await;
    assert_eq!(r.status, 200);
    let lines: Vec<Value> = r
        .body
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(lines.len(), 1, "{}", r.body);
    assert_eq!(lines[0]["type"], json!("ERROR"));
    assert_eq!(lines[0]["object"]["code"], json!(410));
    assert_eq!(lines[0]["object"]["reason"], json!("Expired"));

    // kube's watcher relists after a 410 and keeps delivering
    let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
    let wait_for = |name: &'static str| {
        let name = name.to_string();
        move |e: &watcher::Event<ConfigMap>| matches!(e, watcher::Event::Apply(c) | watcher::Event::InitApply(c) if c.metadata.name.as_deref() == Some(&name))
    };
    async fn until<F: Fn(&watcher::Event<ConfigMap>) -> bool>(
        s: &mut (impl futures::Stream<Item = Result<watcher::Event<ConfigMap>, watcher::Error>> + Unpin),
        f: F,
    ) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            match tokio::time::timeout(Duration::from_secs(20), s.next()).await {
                Ok(Some(Ok(e))) if f(&e) => return,
                Ok(Some(_)) => {}
                other => panic!("watcher ended: {other:?}"),
            }
        }
        panic!("event not seen in time");
    }
    until(&mut events, wait_for("old")).await;
    api.create(&PostParams::default(), &cm("before-expiry", &[]))
        .await?;
    until(&mut events, wait_for("before-expiry")).await;
    h.inject().expire_all_versions();
    h.inject().drop_watches();
    api.create(&PostParams::default(), &cm("after-expiry", &[]))
        .await?;
    until(&mut events, wait_for("after-expiry")).await;
    let watches_410 = h.requests().iter().filter(|r| r.verb == "watch").count();
    assert!(
        watches_410 >= 3,
        "watch re-established after the drop ({watches_410} watches)"
    );
    Ok(())
}

#[tokio::test]
async fn streaming_lists_send_initial_events_and_bookmark() -> TestResult {
    let _watchdog = crate::watchdog::start();
    let h = server().await;
    let api: Api<ConfigMap> = Api::namespaced(h.client(), "default");
    api.create(&PostParams::default(), &cm("s1", &[])).await?;
    api.create(&PostParams::default(), &cm("s2", &[])).await?;
    let r = raw(&h, "GET", "/api/v1/namespaces/default/configmaps?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1", None, "").await;
    let lines: Vec<Value> = r
        .body
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(
        lines
            .iter()
            .map(|l| l["type"].as_str().unwrap_or(""))
            .collect::<Vec<_>>(),
        // s1, s2 and the root CA; the end of the initial events; the
        // bookmark as the watch times out
        vec!["ADDED", "ADDED", "ADDED", "BOOKMARK", "BOOKMARK"]
    );
    assert_eq!(
        lines[3]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        json!("true")
    );
    assert_eq!(lines[3]["object"]["kind"], json!("ConfigMap"));
    let mut s = watcher(api.clone(), watcher::Config::default().streaming_lists()).boxed();
    let mut init = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(10), s.try_next()).await {
            Ok(Ok(Some(watcher::Event::Init))) => {}
            Ok(Ok(Some(watcher::Event::InitApply(c)))) => {
                init.push(c.metadata.name.unwrap_or_default())
            }
            Ok(Ok(Some(watcher::Event::InitDone))) => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(init, vec![ROOT_CA, "s1", "s2"]);
    api.create(&PostParams::default(), &cm("s3", &[])).await?;
    match tokio::time::timeout(Duration::from_secs(10), s.try_next()).await {
        Ok(Ok(Some(watcher::Event::Apply(c)))) => {
            assert_eq!(c.metadata.name.as_deref(), Some("s3"))
        }
        other => panic!("unexpected {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn selector_watch_sends_deleted_when_object_stops_matching() -> TestResult {
    let _watchdog = crate::watchdog::start();
    let h = server().await;
    let api: Api<ConfigMap> = Api::namespaced(h.client(), "default");
    api.create(&PostParams::default(), &cm("m", &[("sel", "yes")]))
        .await?;
    let rv = api
        .list(&ListParams::default())
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut stream = api
        .watch(&WatchParams::default().labels("sel=yes").timeout(10), &rv)
        .await?
        .boxed();
    api.patch(
        "m",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"sel": "no"}}})),
    )
    .await?;
    let ev = tokio::time::timeout(Duration::from_secs(5), stream.try_next()).await;
    let (old_label, new_rv) = match ev {
        Ok(Ok(Some(WatchEvent::Deleted(c)))) => (
            c.metadata.labels.and_then(|l| l.get("sel").cloned()),
            c.metadata.resource_version.unwrap_or_default(),
        ),
        other => panic!("expected DELETED, got {other:?}"),
    };
    assert_eq!(
        old_label.as_deref(),
        Some("yes"),
        "DELETED carries the old object"
    );
    assert_eq!(
        new_rv,
        api.get("m")
            .await?
            .metadata
            .resource_version
            .unwrap_or_default(),
        "with the new RV"
    );
    api.patch(
        "m",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"sel": "yes"}}})),
    )
    .await?;
    match tokio::time::timeout(Duration::from_secs(5), stream.try_next()).await {
        Ok(Ok(Some(WatchEvent::Added(c)))) => assert_eq!(c.metadata.name.as_deref(), Some("m")),
        other => panic!("expected ADDED, got {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn periodic_bookmarks_carry_the_global_resource_version() -> TestResult {
    let _watchdog = crate::watchdog::start();
    let h = ApiServer::builder()
        .bookmark_interval(Duration::from_millis(100))
        .start()
        .await?;
    settle(&h).await;
    let cms: Api<ConfigMap> = Api::namespaced(h.client(), "default");
    let rv = cms
        .list(&ListParams::default())
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut stream = cms
        .watch(&WatchParams::default().timeout(10), &rv)
        .await?
        .boxed();
    // a write to another resource moves the global resourceVersion only
    let leases: Api<Lease> = Api::namespaced(h.client(), "default");
    let l: Lease = serde_json::from_value(json!({"metadata": {"name": "other"}}))?;
    let lease_rv = leases
        .create(&PostParams::default(), &l)
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    loop {
        match tokio::time::timeout(Duration::from_secs(5), stream.try_next()).await {
            Ok(Ok(Some(WatchEvent::Bookmark(b)))) if b.metadata.resource_version == lease_rv => {
                break;
            }
            Ok(Ok(Some(WatchEvent::Bookmark(_)))) => {}
            other => panic!("{other:?}"),
        }
    }
    Ok(())
}
