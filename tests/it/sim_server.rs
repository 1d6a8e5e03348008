//! Conformance of the embedded API server, driven through the `kube`
//! client (and raw HTTP where the client hides the detail under test).
//! One test per semantic; see docs/embedded-cluster.md.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::watcher;
use rebound_sim::server::{ApiServer, ApiServerHandle};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod clients;
mod crds;
mod deletion;
mod reads;
mod test_bed;
mod validation;
mod watch;
mod writes;

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// The ConfigMap the emulated root CA publisher puts in every namespace.
const ROOT_CA: &str = "kube-root-ca.crt";

/// A server whose `default` namespace has been set up by its emulated
/// controllers (ServiceAccount, root CA), so tests start from a settled
/// state, as on a real cluster some time after start.
async fn server() -> ApiServerHandle {
    let h = match ApiServer::builder().start().await {
        Ok(h) => h,
        Err(e) => panic!("server start: {e}"),
    };
    settle(&h).await;
    h
}

/// Waits until the emulated controllers have set up `default`.
async fn settle(h: &ApiServerHandle) {
    let path = format!("/api/v1/namespaces/default/configmaps/{ROOT_CA}");
    for _ in 0..200 {
        if h.get_json(&path).is_some() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the root CA ConfigMap never appeared in default");
}

/// Polls `f` until it holds (the emulated controllers act asynchronously).
async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..300 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("not within 3 s: {what}");
}

fn cm(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}),
    )
    .unwrap_or_default()
}

/// A raw HTTP answer: status, headers (lower-case names), body.
struct Raw {
    status: u16,
    headers: BTreeMap<String, String>,
    body: String,
}

impl Raw {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// Minimal HTTP/1.1 client (Connection: close, de-chunks the body).
async fn raw(h: &ApiServerHandle, method: &str, path: &str, ct: Option<&str>, body: &str) -> Raw {
    let headers: Vec<(&str, &str)> = ct.map(|c| ("Content-Type", c)).into_iter().collect();
    raw_with(h, method, path, &headers, body).await
}

/// `raw` with arbitrary extra headers.
async fn raw_with(
    h: &ApiServerHandle,
    method: &str,
    path: &str,
    extra: &[(&str, &str)],
    body: &str,
) -> Raw {
    let mut s = match tokio::net::TcpStream::connect(h.addr()).await {
        Ok(s) => s,
        Err(e) => panic!("connect: {e}"),
    };
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nUser-Agent: rawtest/1.0\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in extra {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    assert!(s.write_all(req.as_bytes()).await.is_ok());
    let mut buf = Vec::new();
    assert!(s.read_to_end(&mut buf).await.is_ok());
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers: BTreeMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let body = if headers
        .get("transfer-encoding")
        .is_some_and(|t| t.contains("chunked"))
    {
        let mut out = String::new();
        let mut rest = rest;
        while let Some((size, tail)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 || tail.len() < n {
                break;
            }
            out.push_str(&tail[..n]);
            rest = tail.get(n + 2..).unwrap_or("");
        }
        out
    } else {
        rest.to_string()
    };
    Raw {
        status,
        headers,
        body,
    }
}

fn api_status(e: &kube::Error) -> Option<&kube::core::Status> {
    match e {
        kube::Error::Api(s) => Some(s),
        _ => None,
    }
}

const SMALL_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd], categories: [all]}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 0}
              mode: {type: string, enum: [fast, slow], default: slow}
              free: {type: object, x-kubernetes-preserve-unknown-fields: true}
          status:
            type: object
            properties:
              phase: {type: string}
"#;

fn widgets(h: &ApiServerHandle) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Widget"),
        "widgets",
    );
    Api::namespaced_with(h.client(), "default", &ar)
}

fn widget(name: &str, size: i64) -> DynamicObject {
    serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": name}, "spec": {"size": size}}))
    .unwrap_or_else(|e| panic!("widget: {e}"))
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app": "x"}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}, {"name": "side", "image": "busybox"}]}}))
    .unwrap_or_default()
}
