//! Writes: merge, JSON and strategic patches, server-side apply, stale
//! updates and PUT without resourceVersion, and the status subresource.

use super::*;

#[tokio::test]
async fn patch_types_merge_json_strategic() -> TestResult {
    let _watchdog = crate::watchdog::start();
    let h = server().await;
    let pods: Api<Pod> = Api::namespaced(h.client(), "default");
    pods.create(&PostParams::default(), &pod("p")).await?;
    let p = pods
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"m": "1"}}})),
        )
        .await?;
    assert_eq!(
        p.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("m"))
            .map(String::as_str),
        Some("1")
    );
    let jp: json_patch::Patch = serde_json::from_value(
        json!([{"op": "add", "path": "/metadata/annotations", "value": {"a": "b"}}]),
    )?;
    let p = pods
        .patch("p", &PatchParams::default(), &Patch::<()>::Json(jp))
        .await?;
    assert_eq!(
        p.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("a"))
            .map(String::as_str),
        Some("b")
    );
    // strategic: containers merged by name (a merge patch would replace the list)
    let p = pods
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"spec": {"containers": [{"name": "side", "image": "alpine"}]}}),
            ),
        )
        .await?;
    let images: Vec<String> = p
        .spec
        .map(|s| s.containers.into_iter().filter_map(|c| c.image).collect())
        .unwrap_or_default();
    assert_eq!(images, vec!["busybox", "alpine"]);
    // strategic on pods/status: conditions merged by type
    let st = PatchParams::default();
    pods.patch_status("p", &st, &Patch::Strategic(json!({"status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]}}))).await?;
    let p = pods
        .patch_status(
            "p",
            &st,
            &Patch::Strategic(
                json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
            ),
        )
        .await?;
    let conds: Vec<(String, String)> = p
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.type_, c.status))
        .collect();
    assert_eq!(
        conds,
        vec![
            ("Ready".into(), "True".into()),
            ("PodScheduled".into(), "True".into())
        ]
    );
    // a JSON patch test op that fails is a 422
    let jp: json_patch::Patch = serde_json::from_value(
        json!([{"op": "test", "path": "/metadata/name", "value": "other"}]),
    )?;
    let e = pods
        .patch("p", &PatchParams::default(), &Patch::<()>::Json(jp))
        .await
        .err();
    assert_eq!(e.as_ref().and_then(api_status).map(|s| s.code), Some(422));
    // pod spec is immutable but for images and a few fields: nodeName needs pods/binding
    let e = pods
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"nodeName": "n1"}})),
        )
        .await
        .err();
    assert_eq!(e.as_ref().and_then(api_status).map(|s| s.code), Some(422));
    Ok(())
}

#[tokio::test]
async fn server_side_apply_managers_and_conflicts() -> TestResult {
    let _watchdog = crate::watchdog::start();
    let h = server().await;
    let api: Api<ConfigMap> = Api::namespaced(h.client(), "default");
    let a = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"shared": "a", "mine": "a"}});
    let c = api
        .patch("ssa", &PatchParams::apply("alice"), &Patch::Apply(&a))
        .await?;
    let mf = c.metadata.managed_fields.clone().unwrap_or_default();
    assert_eq!(mf.len(), 1);
    assert_eq!(mf[0].manager.as_deref(), Some("alice"));
    assert_eq!(mf[0].operation.as_deref(), Some("Apply"));
    let rv = c.metadata.resource_version.clone();
    // same apply again: no-op, same RV
    let again = api
        .patch("ssa", &PatchParams::apply("alice"), &Patch::Apply(&a))
        .await?;
    assert_eq!(again.metadata.resource_version, rv);
    // bob applies a different value for alice's field: conflict
    let b = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"shared": "b"}});
    let e = api
        .patch("ssa", &PatchParams::apply("bob"), &Patch::Apply(&b))
        .await
        .err();
    let s = e
        .as_ref()
        .and_then(api_status)
        .cloned()
        .unwrap_or_else(|| panic!("no conflict: {e:?}"));
    assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
    assert!(s.message.contains("alice"), "{}", s.message);
    // force takes it over
    let c = api
        .patch("ssa", &PatchParams::apply("bob").force(), &Patch::Apply(&b))
        .await?;
    assert_eq!(
        c.data
            .as_ref()
            .and_then(|d| d.get("shared"))
            .map(String::as_str),
        Some("b")
    );
    // alice drops "mine" from her config: removed (she owned it alone)
    let a2 =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {}});
    let c = api
        .patch("ssa", &PatchParams::apply("alice"), &Patch::Apply(&a2))
        .await?;
    let keys: Vec<String> = c.data.unwrap_or_default().into_keys().collect();
    assert_eq!(keys, vec!["shared"]);
    // apply creates when absent
    let n = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa-new"}, "data": {"x": "1"}});
    api.patch("ssa-new", &PatchParams::apply("alice"), &Patch::Apply(&n))
        .await?;
    assert!(api.get("ssa-new").await.is_ok());
    // a later update by another manager takes ownership of the field it changed
    api.patch(
        "ssa-new",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"x": "2"}})),
    )
    .await?;
    let e = api
        .patch("ssa-new", &PatchParams::apply("alice"), &Patch::Apply(&n))
        .await
        .err();
    assert_eq!(e.as_ref().and_then(api_status).map(|s| s.code), Some(409));
    Ok(())
}

#[tokio::test]
async fn stale_update_conflicts_and_put_without_rv_rules() -> TestResult {
    let _watchdog = crate::watchdog::start();
    let h = server().await;
    let api: Api<ConfigMap> = Api::namespaced(h.client(), "default");
    let c = api.create(&PostParams::default(), &cm("u", &[])).await?;
    let mut stale = c.clone();
    let mut fresh = c.clone();
    fresh.data = Some([("k".to_string(), "new".to_string())].into());
    api.replace("u", &PostParams::default(), &fresh).await?;
    stale.data = Some([("k".to_string(), "stale".to_string())].into());
    let e = api.replace("u", &PostParams::default(), &stale).await.err();
    let s = e
        .as_ref()
        .and_then(api_status)
        .cloned()
        .unwrap_or_else(|| panic!("{e:?}"));
    assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        s.details.as_ref().map(|d| d.kind.as_str()),
        Some("configmaps")
    );
    // PUT without resourceVersion: ConfigMap accepted
    let mut no_rv = api.get("u").await?;
    no_rv.metadata.resource_version = None;
    no_rv.data = Some([("k".to_string(), "unconditional".to_string())].into());
    assert!(
        api.replace("u", &PostParams::default(), &no_rv)
            .await
            .is_ok()
    );
    // Lease: 422
    let leases: Api<Lease> = Api::namespaced(h.client(), "default");
    let l: Lease = serde_json::from_value(
        json!({"metadata": {"name": "l"}, "spec": {"holderIdentity": "a", "renewTime": "2026-01-01T00:00:01.000000Z"}}),
    )?;
    leases.create(&PostParams::default(), &l).await?;
    let mut l2 = leases.get("l").await?;
    l2.metadata.resource_version = None;
    let e = leases.replace("l", &PostParams::default(), &l2).await.err();
    assert_eq!(e.as_ref().and_then(api_status).map(|s| s.code), Some(422));
    // custom resource: 422
    h.register_crds_yaml(SMALL_CRD).await?;
    let w = widgets(&h);
    w.create(&PostParams::default(), &widget("w", 1)).await?;
    let mut obj = w.get("w").await?;
    obj.metadata.resource_version = None;
    let e = w.replace("w", &PostParams::default(), &obj).await.err();
    assert_eq!(e.as_ref().and_then(api_status).map(|s| s.code), Some(422));
    Ok(())
}

#[tokio::test]
async fn status_subresource_isolation_and_generation() -> TestResult {
    let _watchdog = crate::watchdog::start();
    let h = server().await;
    h.register_crds_yaml(SMALL_CRD).await?;
    let w = widgets(&h);
    let mut obj = widget("g", 1);
    obj.data["status"] = json!({"phase": "Ignored"});
    let c = w.create(&PostParams::default(), &obj).await?;
    assert_eq!(c.metadata.generation, Some(1));
    assert!(c.data.get("status").is_none(), "create drops status");
    assert_eq!(
        c.data["spec"]["mode"],
        json!("slow"),
        "schema default applied"
    );
    // status write: only status changes, generation stays
    let s = w.patch_status("g", &PatchParams::default(), &Patch::Merge(json!({"spec": {"size": 9}, "status": {"phase": "Running"}, "metadata": {"labels": {"x": "y"}}}))).await?;
    assert_eq!(s.data["status"]["phase"], json!("Running"));
    assert_eq!(s.data["spec"]["size"], json!(1));
    assert!(
        s.metadata.labels.is_none(),
        "CR status write ignores metadata"
    );
    assert_eq!(s.metadata.generation, Some(1));
    // main write: status ignored, spec change moves generation
    let m = w
        .patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 2}, "status": {"phase": "Hacked"}})),
        )
        .await?;
    assert_eq!(m.data["status"]["phase"], json!("Running"));
    assert_eq!(m.metadata.generation, Some(2));
    // metadata-only change: generation unchanged
    let m2 = w
        .patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await?;
    assert_eq!(m2.metadata.generation, Some(2));
    // no-op patch keeps the RV
    let m3 = w
        .patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 2}})),
        )
        .await?;
    assert_eq!(m3.metadata.resource_version, m2.metadata.resource_version);
    // pod status patch also applies labels
    let pods: Api<Pod> = Api::namespaced(h.client(), "default");
    pods.create(&PostParams::default(), &pod("ps")).await?;
    let p = pods
        .patch_status(
            "ps",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"l": "v"}}, "status": {"phase": "Running"}}),
            ),
        )
        .await?;
    assert_eq!(
        p.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("l"))
            .map(String::as_str),
        Some("v")
    );
    assert_eq!(p.status.and_then(|s| s.phase).as_deref(), Some("Running"));
    let p = pods
        .patch(
            "ps",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Failed"}})),
        )
        .await?;
    assert_eq!(
        p.status.and_then(|s| s.phase).as_deref(),
        Some("Running"),
        "main resource ignores status"
    );
    Ok(())
}
