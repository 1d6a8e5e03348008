//! Reads: discovery, create/get/list with generateName, paging pinned to a
//! resourceVersion, label and field selectors, metadata-only reads, and
//! exact lists at an older resourceVersion.

use super::*;

#[tokio::test]
async fn discovery_finds_builtins_and_registered_crd() -> TestResult {
    let _watchdog = crate::watchdog::start();
    let h = server().await;
    assert_eq!(
        h.register_crds_yaml(SMALL_CRD).await?,
        vec!["widgets.example.com".to_string()]
    );
    let d = kube::discovery::Discovery::new(h.client()).run().await?;
    let mut found = Vec::new();
    for g in d.groups() {
        for (ar, caps) in g.recommended_resources() {
            found.push((ar.group.clone(), ar.plural.clone(), caps.scope.clone()));
        }
    }
    assert!(found.iter().any(|(g, p, _)| g.is_empty() && p == "pods"));
    assert!(found.iter().any(|(g, p, s)| g == "example.com"
        && p == "widgets"
        && *s == kube::discovery::Scope::Namespaced));
    let v1 = raw(&h, "GET", "/api/v1", None, "").await.json();
    let names: Vec<&str> = v1["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str())
        .collect();
    for n in [
        "pods",
        "pods/status",
        "pods/log",
        "nodes/status",
        "events",
        "configmaps",
        "namespaces",
    ] {
        assert!(names.contains(&n), "{n} missing from /api/v1");
    }
    let w = raw(&h, "GET", "/apis/example.com/v1", None, "")
        .await
        .json();
    assert_eq!(w["resources"][0]["shortNames"], json!(["wd"]));
    assert_eq!(w["resources"][1]["name"], json!("widgets/status"));
    let version = h.client().apiserver_version().await?;
    assert_eq!(version.major, "1");
    Ok(())
}

#[tokio::test]
async fn create_get_list_and_generate_name() -> TestResult {
    let _watchdog = crate::watchdog::start();
    let h = server().await;
    let api: Api<ConfigMap> = Api::namespaced(h.client(), "default");
    let created = api.create(&PostParams::default(), &cm("one", &[])).await?;
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    assert_eq!(created.metadata.namespace.as_deref(), Some("default"));
    let mut generated = cm("", &[]);
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("gen-".into());
    let g = api.create(&PostParams::default(), &generated).await?;
    let gname = g.metadata.name.unwrap_or_default();
    assert!(gname.starts_with("gen-") && gname.len() == 9, "{gname}");
    let got = api.get("one").await?;
    assert_eq!(got.data, created.data);
    let list = api.list(&ListParams::default()).await?;
    assert_eq!(list.items.len(), 3, "one, gen-… and the root CA ConfigMap");
    let dup = api.create(&PostParams::default(), &cm("one", &[])).await;
    let e = dup
        .err()
        .unwrap_or_else(|| panic!("duplicate create accepted"));
    let s = api_status(&e).unwrap_or_else(|| panic!("not an API error: {e}"));
    assert_eq!((s.code, s.reason.as_str()), (409, "AlreadyExists"));
    // core list items carry no kind/apiVersion
    let l = raw(&h, "GET", "/api/v1/namespaces/default/configmaps", None, "")
        .await
        .json();
    assert_eq!(l["kind"], json!("ConfigMapList"));
    assert!(l["items"][0].get("kind").is_none());
    // namespace must exist for namespaced creates
    let other: Api<ConfigMap> = Api::namespaced(h.client(), "nope");
    let e = other
        .create(&PostParams::default(), &cm("x", &[]))
        .await
        .err();
    assert_eq!(e.as_ref().and_then(api_status).map(|s| s.code), Some(404));
    Ok(())
}

#[tokio::test]
async fn list_paging_pins_resource_version() -> TestResult {
    let _watchdog = crate::watchdog::start();
    let h = server().await;
    let api: Api<ConfigMap> = Api::namespaced(h.client(), "default");
    for i in 0..25 {
        api.create(&PostParams::default(), &cm(&format!("cm-{i:02}"), &[]))
            .await?;
    }
    let p1 = api.list(&ListParams::default().limit(10)).await?;
    assert_eq!(p1.items.len(), 10);
    let rv = p1.metadata.resource_version.clone();
    // 25 and the root CA ConfigMap
    assert_eq!(p1.metadata.remaining_item_count, Some(16));
    api.create(&PostParams::default(), &cm("zz-late", &[]))
        .await?;
    let mut names: Vec<String> = p1
        .items
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    let mut cont = p1.metadata.continue_.clone();
    while let Some(c) = cont.filter(|c| !c.is_empty()) {
        let p = api
            .list(&ListParams::default().limit(10).continue_token(&c))
            .await?;
        assert_eq!(p.metadata.resource_version, rv, "continue pins the list RV");
        names.extend(p.items.iter().filter_map(|c| c.metadata.name.clone()));
        cont = p.metadata.continue_.clone();
    }
    assert_eq!(names.len(), 26);
    assert!(!names.contains(&"zz-late".to_string()));
    assert_eq!(api.list(&ListParams::default()).await?.items.len(), 27);
    Ok(())
}

#[tokio::test]
async fn label_and_field_selectors() -> TestResult {
    let _watchdog = crate::watchdog::start();
    let h = server().await;
    let api: Api<ConfigMap> = Api::namespaced(h.client(), "default");
    api.create(
        &PostParams::default(),
        &cm("a", &[("app", "web"), ("tier", "front")]),
    )
    .await?;
    api.create(&PostParams::default(), &cm("b", &[("app", "db")]))
        .await?;
    api.create(&PostParams::default(), &cm("c", &[])).await?;
    let names = |l: kube::core::ObjectList<ConfigMap>| -> Vec<String> {
        l.items
            .into_iter()
            .filter_map(|c| c.metadata.name)
            .filter(|n| n != ROOT_CA)
            .collect()
    };
    assert_eq!(
        names(api.list(&ListParams::default().labels("app=web")).await?),
        vec!["a"]
    );
    assert_eq!(
        names(api.list(&ListParams::default().labels("app==db")).await?),
        vec!["b"]
    );
    assert_eq!(
        names(api.list(&ListParams::default().labels("app!=web")).await?),
        vec!["b", "c"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("app in (web,db)"))
                .await?
        ),
        vec!["a", "b"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("app notin (web)"))
                .await?
        ),
        vec!["b", "c"]
    );
    assert_eq!(
        names(api.list(&ListParams::default().labels("tier")).await?),
        vec!["a"]
    );
    assert_eq!(
        names(api.list(&ListParams::default().labels("!app")).await?),
        vec!["c"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().fields("metadata.name=b"))
                .await?
        ),
        vec!["b"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().fields("metadata.name!=b"))
                .await?
        ),
        vec!["a", "c"]
    );
    // pods by node and phase
    let pods: Api<Pod> = Api::namespaced(h.client(), "default");
    for (name, node) in [("p1", "n1"), ("p2", "n2")] {
        let p: Pod = serde_json::from_value(
            json!({"metadata": {"name": name}, "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}}),
        )?;
        pods.create(&PostParams::default(), &p).await?;
    }
    let on_n2 = pods
        .list(&ListParams::default().fields("spec.nodeName=n2,status.phase=Pending"))
        .await?;
    assert_eq!(
        on_n2
            .items
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect::<Vec<_>>(),
        vec!["p2"]
    );
    let bad = pods
        .list(&ListParams::default().fields("spec.bogus=1"))
        .await
        .err();
    assert_eq!(bad.as_ref().and_then(api_status).map(|s| s.code), Some(400));
    Ok(())
}

#[tokio::test]
async fn metadata_only_reads_and_watches() -> TestResult {
    let _watchdog = crate::watchdog::start();
    use kube::core::PartialObjectMeta;
    use kube::runtime::WatchStreamExt;
    let h = server().await;
    let pods: Api<Pod> = Api::namespaced(h.client(), "default");
    pods.create(&PostParams::default(), &pod("meta")).await?;
    let r = raw_with(
        &h,
        "GET",
        "/api/v1/namespaces/default/pods",
        &[(
            "Accept",
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
        )],
        "",
    )
    .await;
    let l = r.json();
    assert_eq!(l["kind"], json!("PartialObjectMetadataList"));
    assert_eq!(l["items"][0]["metadata"]["name"], json!("meta"));
    assert!(l["items"][0].get("spec").is_none());
    let got = pods.get_metadata("meta").await?;
    assert_eq!(got.metadata.name.as_deref(), Some("meta"));
    let mut s = watcher(
        Api::<PartialObjectMeta<Pod>>::namespaced(h.client(), "default"),
        watcher::Config::default(),
    )
    .applied_objects()
    .boxed();
    match tokio::time::timeout(Duration::from_secs(10), s.try_next()).await {
        Ok(Ok(Some(m))) => assert_eq!(m.metadata.name.as_deref(), Some("meta")),
        other => panic!("{other:?}"),
    }
    pods.create(&PostParams::default(), &pod("meta2")).await?;
    match tokio::time::timeout(Duration::from_secs(10), s.try_next()).await {
        Ok(Ok(Some(m))) => assert_eq!(m.metadata.name.as_deref(), Some("meta2")),
        other => panic!("{other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn exact_list_rebuilds_an_older_resource_version() -> TestResult {
    let _watchdog = crate::watchdog::start();
    let h = server().await;
    let api: Api<ConfigMap> = Api::namespaced(h.client(), "default");
    api.create(&PostParams::default(), &cm("a", &[])).await?;
    api.create(&PostParams::default(), &cm("b", &[])).await?;
    let rv = api
        .list(&ListParams::default())
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    api.delete("a", &DeleteParams::default()).await?;
    api.patch(
        "b",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "changed"}})),
    )
    .await?;
    api.create(&PostParams::default(), &cm("c", &[])).await?;
    let old = api
        .list(
            &ListParams::default()
                .at(&rv)
                .matching(kube::api::VersionMatch::Exact),
        )
        .await?;
    assert_eq!(old.metadata.resource_version.as_deref(), Some(rv.as_str()));
    let seen: Vec<(String, String)> = old
        .items
        .into_iter()
        .filter(|c| c.metadata.name.as_deref() != Some(ROOT_CA))
        .map(|c| {
            (
                c.metadata.name.unwrap_or_default(),
                c.data.and_then(|d| d.get("k").cloned()).unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            ("a".to_string(), "v".to_string()),
            ("b".to_string(), "v".to_string())
        ]
    );
    h.inject().expire_all_versions();
    let e = api
        .list(
            &ListParams::default()
                .at(&rv)
                .matching(kube::api::VersionMatch::Exact),
        )
        .await
        .err();
    assert_eq!(e.as_ref().and_then(api_status).map(|s| s.code), Some(410));
    Ok(())
}
