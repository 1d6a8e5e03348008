//! The test bed's proxy (`rebound_sim::proxy`) in front of the embedded
//! server and in front of a real kube-apiserver: it forwards with the
//! caller's User-Agent (and bearer token), records every request as the
//! embedded log does, streams watches, and injects each fault on command.

use super::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{DeleteParams, PostParams, WatchEvent, WatchParams};
use rebound_sim::proxy::Proxy;

const UA: &str = "rebound-proxy-test/1";

/// The upstream of the proxy: a bare embedded server (kept alive by the
/// returned handle), or the real API server of the test process.
async fn upstream(server: Server) -> (kube::Config, Option<rebound_sim::ApiServerHandle>) {
    match server {
        Server::Embedded => {
            let h = rebound_sim::ApiServer::builder()
                .start()
                .await
                .expect("embedded server");
            let cfg = kube::Config::new(h.url().parse().expect("url"));
            (cfg, Some(h))
        }
        Server::Real => (Testbed::real_upstream().await.expect("real server"), None),
    }
}

/// A client through the proxy with its own User-Agent that sees every
/// answer as it comes (no retry of 429/503/504).
fn client_with_ua(proxy: &Proxy) -> kube::Client {
    let mut cfg = proxy.client_config();
    cfg.default_retry = false;
    cfg.headers.push((
        axum::http::header::USER_AGENT,
        axum::http::HeaderValue::from_static(UA),
    ));
    kube::Client::try_from(cfg).expect("client")
}

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "data": {"k": "v"}}))
        .expect("configmap")
}

fn status_of(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Waits for the ADDED event of ConfigMap `name` (a real server's own
/// `kube-root-ca.crt` may come first).
async fn added(
    w: &mut futures::stream::BoxStream<'_, kube::Result<WatchEvent<ConfigMap>>>,
    name: &str,
) {
    let found = tokio::time::timeout(T, async {
        while let Some(ev) = w.next().await {
            match ev {
                Ok(WatchEvent::Added(c)) if c.metadata.name.as_deref() == Some(name) => {
                    return true;
                }
                Ok(_) => {}
                Err(e) => panic!("watch error before {name}: {e}"),
            }
        }
        false
    })
    .await;
    assert_eq!(found.ok(), Some(true), "ADDED {name} seen on the watch");
}

async fn the_proxy_records_forwards_and_injects(server: Server) {
    let (up, _embedded) = upstream(server).await;
    let proxy = Proxy::start(up).await.expect("proxy");
    let client = client_with_ua(&proxy);
    let ns = format!(
        "proxy-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_nanos()
            % 1_000_000_007
    );
    let nss: Api<Namespace> = Api::all(client.clone());
    let obj: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": ns}})).expect("ns");
    nss.create(&PostParams::default(), &obj)
        .await
        .expect("namespace");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);

    // Recorded as the embedded log records: verb, resource, namespace,
    // name, status, and the caller's User-Agent.
    let created = cms
        .create(&PostParams::default(), &cm("a"))
        .await
        .expect("create");
    cms.get("a").await.expect("get");
    let log = proxy.requests();
    let create = log
        .iter()
        .find(|r| r.verb == "create" && r.resource == "configmaps")
        .expect("create logged");
    assert_eq!(create.namespace.as_deref(), Some(ns.as_str()));
    assert_eq!(create.status, 201);
    assert_eq!(create.user_agent.as_deref(), Some(UA));
    assert_eq!(create.method, "POST");
    assert!(
        create
            .content_type
            .as_deref()
            .is_some_and(|c| c.contains("json"))
    );
    let get = log
        .iter()
        .find(|r| r.verb == "get" && r.name.as_deref() == Some("a"));
    assert!(get.is_some_and(|r| r.status == 200), "{log:#?}");

    // Failures on command, before the upstream sees the request.
    proxy.inject().fail_next(2, 500);
    for _ in 0..2 {
        let e = cms.get("a").await.expect_err("injected 500");
        assert_eq!(status_of(&e), Some(500), "{e}");
    }
    cms.get("a").await.expect("the third passes");
    proxy.inject().fail_next(1, 429);
    let req = axum::http::Request::get(format!("/api/v1/namespaces/{ns}/configmaps/a"))
        .body(kube::client::Body::empty())
        .expect("request");
    let res = client.send(req).await.expect("429 answered");
    assert_eq!(res.status().as_u16(), 429);
    assert_eq!(
        res.headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    proxy
        .inject()
        .fail_next_matching(1, 503, Some("delete"), Some("configmaps"));
    cms.get("a").await.expect("a get does not match");
    let e = cms
        .delete("a", &DeleteParams::default())
        .await
        .expect_err("injected 503");
    assert_eq!(status_of(&e), Some(503));
    assert!(
        cms.get_opt("a").await.expect("get").is_some(),
        "the failed delete never reached the server"
    );

    // Latency on every request.
    proxy
        .inject()
        .set_latency(std::time::Duration::from_millis(300));
    let t = std::time::Instant::now();
    cms.get("a").await.expect("slow get");
    assert!(t.elapsed() >= std::time::Duration::from_millis(300));
    proxy.inject().set_latency(std::time::Duration::ZERO);

    // Watches stream through, and end when dropped.
    let rv = created.metadata.resource_version.clone().expect("rv");
    let mut w = cms
        .watch(&WatchParams::default().timeout(60), &rv)
        .await
        .expect("watch")
        .boxed();
    cms.create(&PostParams::default(), &cm("b"))
        .await
        .expect("create b");
    added(&mut w, "b").await;
    proxy.inject().drop_watches();
    let end = tokio::time::timeout(T, async {
        while let Some(ev) = w.next().await {
            if ev.is_err() {
                break;
            }
        }
    })
    .await;
    assert!(end.is_ok(), "the watch ended when dropped");
    assert!(
        proxy
            .requests()
            .iter()
            .any(|r| r.verb == "watch" && r.status == 200 && r.resource == "configmaps"),
        "the watch is logged as started"
    );

    // Expired versions: what a real server answers after a compaction.
    proxy.inject().expire_all_versions();
    let mut w = cms
        .watch(&WatchParams::default().timeout(60), &rv)
        .await
        .expect("watch from an old version")
        .boxed();
    let ev = tokio::time::timeout(T, w.next())
        .await
        .expect("an answer within T");
    match ev {
        Some(Ok(WatchEvent::Error(s))) => {
            assert_eq!(s.code, 410, "{s:?}");
            assert_eq!(s.reason, "Expired", "{s:?}");
        }
        other => panic!("expected an ERROR 410 event, got {other:?}"),
    }
    assert!(
        tokio::time::timeout(T, w.next())
            .await
            .expect("end")
            .is_none(),
        "the stream ends after the ERROR event"
    );
    // A fresh list's version is not expired.
    let list = cms.list(&Default::default()).await.expect("list");
    let fresh = list.metadata.resource_version.expect("list rv");
    let mut w = cms
        .watch(&WatchParams::default().timeout(60), &fresh)
        .await
        .expect("watch from now")
        .boxed();
    cms.create(&PostParams::default(), &cm("c"))
        .await
        .expect("create c");
    added(&mut w, "c").await;

    // Refused connections: open ones are cut, new ones refused for a while.
    let down = std::time::Duration::from_secs(1);
    let cut = std::time::Instant::now();
    proxy.inject().refuse_connections(down);
    let ended = tokio::time::timeout(T, async {
        while let Some(ev) = w.next().await {
            if ev.is_err() {
                break;
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the open watch was cut");
    let refused = tokio::net::TcpStream::connect(proxy.addr()).await;
    assert!(
        refused.is_err() || cut.elapsed() >= down,
        "a connect during the outage is refused"
    );
    let back = wait("the proxy serves again", T, || async {
        cms.get("a").await.ok().map(|_| cut.elapsed())
    })
    .await;
    assert!(back >= down, "served again after {back:?}");

    // A request's own bearer token is forwarded instead of the upstream's
    // identity: a real server refuses an unknown token.
    let mut cfg = proxy.client_config();
    cfg.auth_info.token = Some("not-a-token".to_string().into());
    let stranger: Api<ConfigMap> =
        Api::namespaced(kube::Client::try_from(cfg).expect("client"), &ns);
    let answer = stranger.get("a").await;
    // The embedded server (also behind a kubeconfig, `rebound sim-server`)
    // authenticates nobody.
    let embedded = client
        .apiserver_version()
        .await
        .expect("version")
        .git_version
        .ends_with("-rebound-sim");
    if embedded {
        assert!(answer.is_ok(), "{answer:?}");
    } else {
        assert_eq!(
            answer.as_ref().err().and_then(status_of),
            Some(401),
            "{answer:?}"
        );
    }

    nss.delete(&ns, &DeleteParams::default())
        .await
        .expect("delete namespace");
    proxy.shutdown().await;
}

e2e!(the_proxy_records_forwards_and_injects);
