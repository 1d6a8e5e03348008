//! Deletion: finalizers, garbage collection (background, orphan,
//! foreground), delete-collection, held pod deletions, and the cascades of
//! namespaces and CRDs.

use super::*;

#[tokio::test]
async fn finalizers_defer_deletion_until_removed() -> TestResult {
    let _watchdog = crate::watchdog::start();
    let h = server().await;
    let api: Api<ConfigMap> = Api::namespaced(h.client(), "default");
    let mut c = cm("f", &[]);
    c.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    api.create(&PostParams::default(), &c).await?;
    let rv = api
        .get("f")
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let r = raw(
        &h,
        "DELETE",
        "/api/v1/namespaces/default/configmaps/f",
        None,
        "",
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json()["kind"],
        json!("ConfigMap"),
        "returns the object while finalizers remain"
    );
    assert!(r.json()["metadata"]["deletionTimestamp"].is_string());
    let mut stream = api
        .watch(&WatchParams::default().timeout(5), &rv)
        .await?
        .boxed();
    match stream.try_next().await? {
        Some(WatchEvent::Modified(c)) => assert!(c.metadata.deletion_timestamp.is_some()),
        other => panic!("{other:?}"),
    }
    api.patch(
        "f",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await?;
    match stream.try_next().await? {
        // a real server's DELETED carries the last stored state, finalizer included
        Some(WatchEvent::Deleted(c)) => {
            assert_eq!(
                c.metadata.finalizers.unwrap_or_default(),
                vec!["example.com/hold".to_string()]
            )
        }
        other => panic!("expected one DELETED, got {other:?}"),
    }
    assert!(api.get_opt("f").await?.is_none());
    Ok(())
}

#[tokio::test]
async fn garbage_collection_background_and_orphan() -> TestResult {
    let _watchdog = crate::watchdog::start();
    let h = server().await;
    let api: Api<ConfigMap> = Api::namespaced(h.client(), "default");
    for owner in ["o1", "o2"] {
        let o = api.create(&PostParams::default(), &cm(owner, &[])).await?;
        let mut dep = cm(&format!("{owner}-dep"), &[]);
        dep.metadata.owner_references = Some(vec![serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap", "name": owner, "uid": o.metadata.uid}))?]);
        api.create(&PostParams::default(), &dep).await?;
    }
    api.delete("o1", &DeleteParams::background()).await?;
    eventually(
        "background deletes dependents (the collector acts later)",
        || async { api.get_opt("o1-dep").await.is_ok_and(|o| o.is_none()) },
    )
    .await;
    api.delete("o2", &DeleteParams::orphan()).await?;
    eventually("orphaning removes the owner", || async {
        api.get_opt("o2").await.is_ok_and(|o| o.is_none())
    })
    .await;
    let orphan = api.get("o2-dep").await?;
    assert!(
        orphan
            .metadata
            .owner_references
            .unwrap_or_default()
            .is_empty(),
        "orphan keeps them, without the reference"
    );
    // deleting a pod returns the pod, deleting a custom resource a Status
    let pods: Api<Pod> = Api::namespaced(h.client(), "default");
    pods.create(&PostParams::default(), &pod("gone")).await?;
    assert!(
        pods.delete("gone", &DeleteParams::default())
            .await?
            .is_left()
    );
    h.register_crds_yaml(SMALL_CRD).await?;
    let w = widgets(&h);
    w.create(&PostParams::default(), &widget("w", 1)).await?;
    assert!(w.delete("w", &DeleteParams::default()).await?.is_right());
    Ok(())
}

#[tokio::test]
async fn delete_collection_with_selector() -> TestResult {
    let _watchdog = crate::watchdog::start();
    let h = server().await;
    let api: Api<ConfigMap> = Api::namespaced(h.client(), "default");
    for (n, l) in [("d1", "x"), ("d2", "x"), ("d3", "y")] {
        api.create(&PostParams::default(), &cm(n, &[("grp", l)]))
            .await?;
    }
    api.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("grp=x"),
    )
    .await?;
    let left: Vec<String> = api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .filter(|n| n != ROOT_CA)
        .collect();
    assert_eq!(left, vec!["d3"]);
    assert_eq!(
        h.requests()
            .iter()
            .filter(|r| r.verb == "deletecollection")
            .count(),
        1
    );
    Ok(())
}

#[tokio::test]
async fn held_pod_deletion_waits_for_grace_zero() -> TestResult {
    let _watchdog = crate::watchdog::start();
    let h = ApiServer::builder().hold_pod_deletion(true).start().await?;
    let pods: Api<Pod> = Api::namespaced(h.client(), "default");
    let mut p = pod("held");
    if let Some(s) = p.spec.as_mut() {
        s.node_name = Some("n1".into());
    }
    pods.create(&PostParams::default(), &p).await?;
    pods.create(&PostParams::default(), &pod("unbound")).await?;
    let first = pods.delete("held", &DeleteParams::default()).await?;
    let terminating = first
        .left()
        .unwrap_or_else(|| panic!("a pod delete returns the pod"));
    assert!(terminating.metadata.deletion_timestamp.is_some());
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(30));
    assert!(
        pods.get_opt("held").await?.is_some(),
        "a bound pod waits for its kubelet"
    );
    pods.delete(
        "held",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        },
    )
    .await?;
    assert!(pods.get_opt("held").await?.is_none());
    pods.delete("unbound", &DeleteParams::default()).await?;
    assert!(
        pods.get_opt("unbound").await?.is_none(),
        "a pod never scheduled goes at once"
    );
    Ok(())
}

#[tokio::test]
async fn cascades_of_namespaces_crds_and_foreground() -> TestResult {
    let _watchdog = crate::watchdog::start();
    let h = server().await;
    h.ensure_namespace("team")?;
    let team: Api<ConfigMap> = Api::namespaced(h.client(), "team");
    team.create(&PostParams::default(), &cm("inside", &[]))
        .await?;
    let namespaces: Api<Namespace> = Api::all(h.client());
    let gone = namespaces.delete("team", &DeleteParams::default()).await?;
    assert!(gone.is_left(), "a namespace delete returns the namespace");
    eventually(
        "the namespace controller empties and removes the namespace",
        || async { namespaces.get_opt("team").await.is_ok_and(|n| n.is_none()) },
    )
    .await;
    assert!(
        team.get_opt("inside").await?.is_none(),
        "its contents are deleted"
    );

    h.register_crds_yaml(SMALL_CRD).await?;
    let w = widgets(&h);
    w.create(&PostParams::default(), &widget("w1", 1)).await?;
    let rv = w
        .list(&ListParams::default())
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut stream = w
        .watch(&WatchParams::default().timeout(5), &rv)
        .await?
        .boxed();
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> = Api::all(h.client());
    crds.delete("widgets.example.com", &DeleteParams::default())
        .await?;
    match tokio::time::timeout(Duration::from_secs(5), stream.try_next()).await {
        Ok(Ok(Some(WatchEvent::Deleted(o)))) => assert_eq!(o.metadata.name.as_deref(), Some("w1")),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        raw(
            &h,
            "GET",
            "/apis/example.com/v1/namespaces/default/widgets",
            None,
            ""
        )
        .await
        .status,
        404
    );

    let api: Api<ConfigMap> = Api::namespaced(h.client(), "default");
    let owner = api
        .create(&PostParams::default(), &cm("fg-owner", &[]))
        .await?;
    let mut dep = cm("fg-dep", &[]);
    dep.metadata.owner_references = Some(vec![serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "name": "fg-owner", "uid": owner.metadata.uid}))?]);
    api.create(&PostParams::default(), &dep).await?;
    api.delete("fg-owner", &DeleteParams::foreground()).await?;
    eventually(
        "foreground deletion removes the dependent, then the owner",
        || async {
            api.get_opt("fg-dep").await.is_ok_and(|o| o.is_none())
                && api.get_opt("fg-owner").await.is_ok_and(|o| o.is_none())
        },
    )
    .await;
    Ok(())
}
