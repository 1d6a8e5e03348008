//! Other clients of the server: pod logs, bindings and the unscheduled 204,
//! kubectl, and the recorder's events sharing storage with core Events.

use super::*;

#[tokio::test]
async fn pod_logs_binding_and_unscheduled_204() -> TestResult {
    let _watchdog = crate::watchdog::start();
    let h = server().await;
    let pods: Api<Pod> = Api::namespaced(h.client(), "default");
    let mut p = pod("l");
    if let Some(s) = p.spec.as_mut() {
        s.containers.truncate(1);
    }
    pods.create(&PostParams::default(), &p).await?;
    let r = raw(&h, "GET", "/api/v1/namespaces/default/pods/l/log", None, "").await;
    assert_eq!(r.status, 204);
    let r = raw(&h, "POST", "/api/v1/namespaces/default/pods/l/binding", Some("application/json"), r#"{"apiVersion":"v1","kind":"Binding","metadata":{"name":"l"},"target":{"kind":"Node","name":"n1"}}"#).await;
    assert_eq!(r.status, 201, "{}", r.body);
    h.set_pod_log(
        "default",
        "l",
        "main",
        "line1\nXid 79 fell off the bus\n".into(),
    );
    let text = pods.logs("l", &Default::default()).await?;
    assert!(text.contains("Xid 79"));
    assert_eq!(
        pods.get("l")
            .await?
            .spec
            .and_then(|s| s.node_name)
            .as_deref(),
        Some("n1")
    );
    Ok(())
}

#[tokio::test]
async fn kubectl_reads_the_server() -> TestResult {
    let _watchdog = crate::watchdog::start();
    let Ok(kubectl) = which_kubectl() else {
        println!("NOTICE: kubectl not on PATH; kubectl test not run");
        return Ok(());
    };
    let h = server().await;
    h.register_crds_yaml(SMALL_CRD).await?;
    let pods: Api<Pod> = Api::namespaced(h.client(), "default");
    pods.create(&PostParams::default(), &pod("kp")).await?;
    widgets(&h)
        .create(&PostParams::default(), &widget("kw", 3))
        .await?;
    let ev = raw(&h, "POST", "/api/v1/namespaces/default/events", Some("application/json"),
        r#"{"metadata":{"name":"ev1"},"involvedObject":{"kind":"Node","name":"n7"},"reason":"XidError","message":"Xid 79","type":"Warning","lastTimestamp":"2026-01-01T00:00:00Z"}"#).await;
    assert_eq!(ev.status, 201, "{}", ev.body);
    let dir = std::env::temp_dir().join(format!("rebound-kubeconfig-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let kc = dir.join("config");
    h.write_kubeconfig(&kc)?;
    let manifest = dir.join("cm.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: from-kubectl}\ndata: {a: \"1\"}\n",
    )?;
    let manifest = manifest.to_string_lossy().into_owned();
    for args in [
        vec!["get", "pods"],
        vec!["get", "widgets"],
        vec!["get", "wd", "kw", "-o", "json"],
        vec!["get", "nodes"],
        vec!["apply", "-f", manifest.as_str()],
        vec!["apply", "--server-side", "-f", manifest.as_str()],
        vec!["label", "pod", "kp", "k=v"],
        vec!["get", "events"],
    ] {
        let kc = kc.clone();
        let kubectl = kubectl.clone();
        let a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new(kubectl)
                .arg("--kubeconfig")
                .arg(kc)
                .args(a)
                .env("HOME", std::env::temp_dir())
                .output()
        })
        .await??;
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}{}",
            stdout,
            String::from_utf8_lossy(&out.stderr)
        );
        if args[1] == "pods" {
            assert!(stdout.contains("kp"), "{stdout}");
        }
        if args[1] == "events" {
            assert!(
                stdout.contains("XidError") && stdout.contains("node/n7"),
                "{stdout}"
            );
        }
        if args[0] == "get" && args.len() > 3 {
            assert!(stdout.contains("\"size\": 3"), "{stdout}");
        }
    }
    let cms: Api<ConfigMap> = Api::namespaced(h.client(), "default");
    let applied = cms.get("from-kubectl").await?;
    let managers: Vec<String> = applied
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert!(managers.contains(&"kubectl".to_string()), "{managers:?}");
    let labelled = pods.get("kp").await?;
    assert_eq!(
        labelled
            .metadata
            .labels
            .and_then(|l| l.get("k").cloned())
            .as_deref(),
        Some("v")
    );
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

fn which_kubectl() -> Result<std::path::PathBuf, ()> {
    std::env::var_os("PATH")
        .and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("kubectl"))
                .find(|p| p.is_file())
        })
        .ok_or(())
}

#[tokio::test]
async fn recorder_events_share_storage_with_core_events() -> TestResult {
    let _watchdog = crate::watchdog::start();
    use k8s_openapi::api::core::v1::{Event as CoreEvent, ObjectReference};
    use k8s_openapi::api::events::v1::Event as V1Event;
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let h = server().await;
    let rec = Recorder::new(
        h.client(),
        Reporter {
            controller: "rebound".into(),
            instance: Some("rebound-0".into()),
        },
    );
    let node = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some("n1".into()),
        ..Default::default()
    };
    let ev = Event {
        type_: EventType::Warning,
        reason: "XidError".into(),
        note: Some("Xid 79".into()),
        action: "Detect".into(),
        secondary: None,
    };
    rec.publish(&ev, &node).await?;
    rec.publish(&ev, &node).await?; // a repeat is a merge patch adding `series`
    let core: Api<CoreEvent> = Api::namespaced(h.client(), "default");
    let l = core
        .list(&ListParams::default().fields("involvedObject.name=n1,involvedObject.kind=Node"))
        .await?;
    assert_eq!(l.items.len(), 1);
    let e = &l.items[0];
    assert_eq!(e.message.as_deref(), Some("Xid 79"));
    assert_eq!(e.reporting_component.as_deref(), Some("rebound"));
    assert_eq!(e.series.as_ref().and_then(|s| s.count), Some(2));
    let v1: Api<V1Event> = Api::namespaced(h.client(), "default");
    let l = v1
        .list(&ListParams::default().fields("regarding.name=n1,reportingController=rebound"))
        .await?;
    assert_eq!(l.items.len(), 1);
    assert_eq!(l.items[0].note.as_deref(), Some("Xid 79"));
    assert_eq!(
        l.items[0]
            .regarding
            .as_ref()
            .and_then(|r| r.kind.as_deref()),
        Some("Node")
    );
    Ok(())
}
