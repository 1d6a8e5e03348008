//! Refusals and error shapes as the real server gives them: status bodies,
//! MicroTime precision, invalid labels.

use super::*;

#[tokio::test]
async fn error_shapes_match_real_server() -> TestResult {
    let _watchdog = crate::watchdog::start();
    let h = server().await;
    let r = raw(
        &h,
        "GET",
        "/api/v1/namespaces/default/configmaps/missing",
        None,
        "",
    )
    .await;
    assert_eq!(r.status, 404);
    let s = r.json();
    assert_eq!(s["reason"], json!("NotFound"));
    assert_eq!(
        s["details"],
        json!({"name": "missing", "kind": "configmaps"})
    );
    let r = raw(
        &h,
        "GET",
        "/apis/coordination.k8s.io/v1/namespaces/default/leases/missing",
        None,
        "",
    )
    .await;
    assert_eq!(
        r.json()["details"],
        json!({"name": "missing", "kind": "leases", "group": "coordination.k8s.io"})
    );
    let r = raw(
        &h,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some("application/json"),
        r#"{"metadata":{"name":"Bad_Name"}}"#,
    )
    .await;
    assert_eq!(r.status, 422);
    let s = r.json();
    assert_eq!(s["reason"], json!("Invalid"));
    assert_eq!(s["details"]["kind"], json!("ConfigMap"));
    assert_eq!(s["details"]["causes"][0]["field"], json!("metadata.name"));
    assert_eq!(
        s["details"]["causes"][0]["reason"],
        json!("FieldValueInvalid")
    );
    let r = raw(&h, "GET", "/apis/nothing.example/v1/things", None, "").await;
    assert_eq!(r.status, 404);
    // namespaces use DNS-1123 labels: dots are invalid
    let r = raw(
        &h,
        "POST",
        "/api/v1/namespaces",
        Some("application/json"),
        r#"{"metadata":{"name":"a.b"}}"#,
    )
    .await;
    assert_eq!(r.status, 422);
    // schema-invalid custom resource: 422 with causes; unknown fields dropped with a warning
    h.register_crds_yaml(SMALL_CRD).await?;
    let r = raw(&h, "POST", "/apis/example.com/v1/namespaces/default/widgets", Some("application/json"),
        r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"size":"big","mode":"medium"}}"#).await;
    assert_eq!(r.status, 422);
    let status = r.json();
    let fields: Vec<&str> = status["details"]["causes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["field"].as_str())
        .collect();
    assert!(
        fields.contains(&"spec.size") && fields.contains(&"spec.mode"),
        "{fields:?}"
    );
    let r = raw(&h, "POST", "/apis/example.com/v1/namespaces/default/widgets", Some("application/json"),
        r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"size":1,"extra":true}}"#).await;
    assert_eq!(r.status, 201);
    assert!(
        r.headers
            .get("warning")
            .is_some_and(|w| w.contains("spec.extra")),
        "{:?}",
        r.headers
    );
    assert!(r.json()["spec"].get("extra").is_none());
    let r = raw(&h, "POST", "/apis/example.com/v1/namespaces/default/widgets?fieldValidation=Strict", Some("application/json"),
        r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w2"},"spec":{"size":1,"extra":true}}"#).await;
    assert_eq!(r.status, 400);
    Ok(())
}

#[tokio::test]
async fn micro_time_fields_need_six_fraction_digits() -> TestResult {
    let _watchdog = crate::watchdog::start();
    let h = server().await;
    let leases: Api<Lease> = Api::namespaced(h.client(), "default");
    let bad: Lease = serde_json::from_value(
        json!({"metadata": {"name": "l"}, "spec": {"renewTime": "2026-01-01T00:00:01Z"}}),
    )?;
    let r = raw(
        &h,
        "POST",
        "/apis/coordination.k8s.io/v1/namespaces/default/leases",
        Some("application/json"),
        &serde_json::to_string(
            &json!({"metadata": {"name": "l"}, "spec": {"renewTime": "2026-01-01T00:00:01Z"}}),
        )?,
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    let _ = bad;
    let good: Lease = serde_json::from_value(
        json!({"metadata": {"name": "l"}, "spec": {"renewTime": "2026-01-01T00:00:01.000000Z"}}),
    )?;
    assert!(leases.create(&PostParams::default(), &good).await.is_ok());
    let r = raw(&h, "POST", "/apis/events.k8s.io/v1/namespaces/default/events", Some("application/json"),
        r#"{"metadata":{"name":"e"},"eventTime":"2026-01-01T00:00:01.123Z","reason":"X","action":"Y","reportingController":"c","reportingInstance":"i"}"#).await;
    assert_eq!(r.status, 400);
    Ok(())
}

#[tokio::test]
async fn invalid_labels_are_refused() -> TestResult {
    let _watchdog = crate::watchdog::start();
    let h = server().await;
    let api: Api<ConfigMap> = Api::namespaced(h.client(), "default");
    let e = api
        .create(&PostParams::default(), &cm("l", &[("ok", "-bad-")]))
        .await
        .err();
    let s = e
        .as_ref()
        .and_then(api_status)
        .cloned()
        .unwrap_or_else(|| panic!("{e:?}"));
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    assert!(
        api.create(
            &PostParams::default(),
            &cm("l", &[("app.kubernetes.io/name", "x_y.z")])
        )
        .await
        .is_ok()
    );
    Ok(())
}
