//! A recording, fault-injecting HTTP proxy of the test bed, in front of any
//! Kubernetes API server (a real kube-apiserver, a kind cluster, or the
//! embedded server), so that the end-to-end tests read a request log and
//! inject faults on every kind of server the same way.
//!
//! It listens on `127.0.0.1` (plain HTTP, no authentication of its own) and
//! forwards every request through a `kube::Client` built from the
//! upstream's configuration: `Client::send` streams response bodies, so
//! watches pass through as they come. A request carrying its own bearer
//! token is forwarded with that token instead of the upstream's identity
//! (a test runs the controller as a ServiceAccount that way, under the real
//! server's authorization). The User-Agent passes unchanged.
//!
//! Each request leaves a [`RequestRecord`] with the same fields as the
//! embedded server's log (verb from method, path and `watch`; resource,
//! subresource, namespace, name, query, user agent, status, times), and
//! [`ProxyInjector`] offers the embedded `FaultInjector`'s controls plus
//! [`ProxyInjector::refuse_connections`].

mod inject;
pub mod route;

pub use inject::ProxyInjector;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header};
use futures::StreamExt;
use http_body_util::BodyExt;
use tokio::net::TcpListener;
use tokio::sync::broadcast;

use super::RequestRecord;
use super::server::ApiError;
use super::server::log::RequestLog;

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// No listening socket.
    #[error("proxy: binding 127.0.0.1: {0}")]
    Bind(std::io::Error),
    /// The upstream client could not be built.
    #[error("proxy: upstream client: {0}")]
    Client(#[from] kube::Error),
}

/// Hop-by-hop headers (RFC 9110 §7.6.1) and the ones the forwarding client
/// sets itself; none of them is copied across.
fn skipped(name: &header::HeaderName) -> bool {
    matches!(
        name.as_str(),
        "host"
            | "connection"
            | "keep-alive"
            | "proxy-connection"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "content-length"
            | "authorization"
    )
}

struct Inner {
    upstream: kube::Config,
    client: kube::Client,
    /// Clients with a request's own bearer token, by token.
    token_clients: Mutex<HashMap<String, kube::Client>>,
    log: RequestLog,
    inject: ProxyInjector,
    addr: SocketAddr,
}

/// A running proxy. Dropping it (or [`Proxy::shutdown`]) stops serving.
pub struct Proxy {
    inner: Arc<Inner>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("addr", &self.inner.addr)
            .field("upstream", &self.inner.upstream.cluster_url)
            .finish()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        self.inner
            .inject
            .refuse_connections(std::time::Duration::ZERO);
    }
}

impl Proxy {
    /// Listens on a free port of 127.0.0.1 and forwards to the server of
    /// `upstream`. Call within a Tokio runtime: the proxy's tasks and its
    /// upstream connections live on it.
    pub async fn start(mut upstream: kube::Config) -> Result<Proxy, ProxyError> {
        // The upstream's answers pass as they are: kube's own retry of
        // 429/503/504 would hide them from the caller.
        upstream.default_retry = false;
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(ProxyError::Bind)?;
        let addr = listener.local_addr().map_err(ProxyError::Bind)?;
        let client = kube::Client::try_from(upstream.clone())?;
        let inner = Arc::new(Inner {
            inject: ProxyInjector::new(client.clone(), tokio::runtime::Handle::current()),
            upstream,
            client,
            token_clients: Mutex::new(HashMap::new()),
            log: RequestLog::default(),
            addr,
        });
        let task = tokio::spawn(accept_loop(inner.clone(), listener));
        Ok(Proxy { inner, task })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.inner.addr)
    }

    /// The address served.
    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// A client configuration that goes through the proxy with the
    /// upstream's identity (no credentials of its own; the proxy adds the
    /// upstream's). Add a bearer token to act as someone else.
    pub fn client_config(&self) -> kube::Config {
        let url = self.url().parse::<axum::http::Uri>().unwrap_or_default();
        let mut cfg = kube::Config::new(url);
        cfg.read_timeout = self.inner.upstream.read_timeout;
        cfg
    }

    /// A client through the proxy (see [`Self::client_config`]).
    pub fn client(&self) -> Result<kube::Client, ProxyError> {
        Ok(kube::Client::try_from(self.client_config())?)
    }

    /// The upstream's configuration (to reach it directly, bypassing the
    /// log and the faults).
    pub fn upstream(&self) -> &kube::Config {
        &self.inner.upstream
    }

    /// Snapshot of the request log.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.inner.log.snapshot()
    }

    /// Every request logged after this call, as it is answered.
    pub fn subscribe_requests(&self) -> broadcast::Receiver<RequestRecord> {
        self.inner.log.subscribe()
    }

    /// Forgets the logged requests.
    pub fn clear_requests(&self) {
        self.inner.log.clear()
    }

    /// Number of logged requests per verb.
    pub fn request_counts(&self) -> std::collections::BTreeMap<&'static str, usize> {
        self.inner.log.counts_by_verb()
    }

    /// Fault injection controls.
    pub fn inject(&self) -> &ProxyInjector {
        &self.inner.inject
    }

    /// Stops serving and closes every connection.
    pub async fn shutdown(self) {
        self.task.abort();
        self.inner
            .inject
            .refuse_connections(std::time::Duration::ZERO);
    }
}

/// Accepts connections; while refusing, the listening socket is closed
/// (a connect is refused, as by a server that is down) and bound again on
/// the same port afterwards.
async fn accept_loop(inner: Arc<Inner>, listener: TcpListener) {
    let mut refusals = inner.inject.refusals();
    let mut listener = Some(listener);
    loop {
        let Some(l) = &listener else {
            let until = *refusals.borrow_and_update();
            if let Some(until) = until {
                tokio::time::sleep_until(until.into()).await;
            }
            listener = rebind(inner.addr).await;
            continue;
        };
        tokio::select! {
            r = l.accept() => match r {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(serve_connection(inner.clone(), stream));
                }
                Err(e) => {
                    tracing::debug!(error = %e, "proxy: accept");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            },
            changed = refusals.changed() => {
                if changed.is_err() {
                    return;
                }
                let until = *refusals.borrow_and_update();
                if until.is_some_and(|u| u > Instant::now()) {
                    listener = None;
                }
            }
        }
    }
}

/// Binds the proxy's port again (retrying: the old socket may linger).
async fn rebind(addr: SocketAddr) -> Option<TcpListener> {
    for _ in 0..200 {
        match TcpListener::bind(addr).await {
            Ok(l) => return Some(l),
            Err(e) => {
                tracing::debug!(error = %e, %addr, "proxy: binding again");
                tokio::time::sleep(std::time::Duration::from_millis(25)).await;
            }
        }
    }
    tracing::warn!(%addr, "proxy: could not bind its port again");
    None
}

async fn serve_connection(inner: Arc<Inner>, stream: tokio::net::TcpStream) {
    let mut kills = inner.inject.kills();
    kills.borrow_and_update();
    let svc_inner = inner.clone();
    let svc = hyper::service::service_fn(move |req| handle(svc_inner.clone(), req));
    let conn = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc);
    tokio::select! {
        r = conn => if let Err(e) = r {
            tracing::debug!(error = %e, "proxy: connection");
        },
        _ = kills.changed() => {}
    }
}

fn header_str(h: &HeaderMap, name: header::HeaderName) -> Option<String> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

fn json_response(code: u16, body: &serde_json::Value) -> Response<Body> {
    let mut r = Response::new(Body::from(serde_json::to_vec(body).unwrap_or_default()));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn error_response(e: &ApiError) -> Response<Body> {
    let mut r = json_response(e.code, &e.to_status());
    if let Some(s) = e.retry_after
        && let Ok(v) = HeaderValue::from_str(&s.to_string())
    {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    r
}

/// What a real server answers a watch from a compacted resourceVersion:
/// 200, one `ERROR` event carrying a `410 Expired` Status, end of stream.
fn expired_watch(rv: &str) -> Response<Body> {
    let status = ApiError::expired(format!(
        "The resourceVersion for the provided watch is too old: {rv}"
    ))
    .to_status();
    let mut line = serde_json::to_vec(&serde_json::json!({"type": "ERROR", "object": status}))
        .unwrap_or_default();
    line.push(b'\n');
    let mut r = Response::new(Body::from(line));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

async fn handle(
    inner: Arc<Inner>,
    req: Request<hyper::body::Incoming>,
) -> Result<Response<Body>, Infallible> {
    let at = Instant::now();
    let wall = SystemTime::now();
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().unwrap_or("").to_string();
    let target = route::classify(&parts.method, &path, &query);
    if let Some(d) = inner.inject.latency() {
        tokio::time::sleep(d).await;
    }
    if target.verb == "watch"
        && let Some(d) = inner.inject.hold.held(
            parts
                .headers
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok()),
            &target.resource,
        )
    {
        tokio::time::sleep(d).await;
    }
    let rv = route::query_param(&query, "resourceVersion");
    let response = match inner.inject.take_failure(target.verb, &target.resource) {
        Some(e) => error_response(&e),
        None if target.verb == "watch" && inner.inject.is_expired(rv.as_deref()).await => {
            expired_watch(rv.as_deref().unwrap_or_default())
        }
        None => {
            let answer = forward(&inner, parts.clone(), body, target.verb == "watch").await;
            // Carried out upstream; the answer, when a rule says so, lost.
            match inner.inject.take_lost_answer(target.verb, &target.resource) {
                Some(e) => {
                    tracing::debug!(path = %path, status = %answer.status(), "proxy: answer lost by injection");
                    error_response(&e)
                }
                None => answer,
            }
        }
    };
    inner.log.push(RequestRecord {
        at,
        wall,
        verb: target.verb,
        method: parts.method.to_string(),
        path,
        query,
        content_type: header_str(&parts.headers, header::CONTENT_TYPE),
        status: response.status().as_u16(),
        elapsed: at.elapsed(),
        user_agent: header_str(&parts.headers, header::USER_AGENT),
        resource: target.resource,
        subresource: target.subresource,
        namespace: target.namespace,
        name: target.name,
    });
    Ok(response)
}

/// The client for a request: the upstream's identity, or the request's own
/// bearer token.
fn client_for(inner: &Inner, headers: &HeaderMap) -> Result<kube::Client, kube::Error> {
    let Some(token) = header_str(headers, header::AUTHORIZATION)
        .and_then(|a| a.strip_prefix("Bearer ").map(str::to_string))
    else {
        return Ok(inner.client.clone());
    };
    let mut clients = inner
        .token_clients
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(c) = clients.get(&token) {
        return Ok(c.clone());
    }
    let mut cfg = inner.upstream.clone();
    cfg.auth_info = kube::config::AuthInfo {
        token: Some(token.clone().into()),
        ..Default::default()
    };
    let c = kube::Client::try_from(cfg)?;
    clients.insert(token, c.clone());
    Ok(c)
}

async fn forward(
    inner: &Inner,
    parts: axum::http::request::Parts,
    body: hyper::body::Incoming,
    watch: bool,
) -> Response<Body> {
    let bytes = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return error_response(&ApiError::bad_request(format!("proxy: reading body: {e}")));
        }
    };
    let client = match client_for(inner, &parts.headers) {
        Ok(c) => c,
        Err(e) => return error_response(&ApiError::internal(format!("proxy: client: {e}"))),
    };
    let uri = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let parts_path = format!("{} {uri}", parts.method);
    let mut out = Request::builder().method(parts.method).uri(uri);
    for (k, v) in &parts.headers {
        if !skipped(k) {
            out = out.header(k, v);
        }
    }
    let out = match out.body(kube::client::Body::from(bytes)) {
        Ok(r) => r,
        Err(e) => return error_response(&ApiError::bad_request(format!("proxy: request: {e}"))),
    };
    let res = match client.send(out).await {
        Ok(r) => r,
        Err(e) => {
            return error_response(&ApiError::other(
                502,
                format!("proxy: upstream {}: {e}", inner.upstream.cluster_url),
            ));
        }
    };
    let (rparts, rbody) = res.into_parts();
    if rparts.status.as_u16() >= 400 && !watch {
        // An error answer is one small Status: kept whole, and logged (at
        // debug) with what it was for, since the request log has no bodies.
        let bytes = match rbody.collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) => {
                return error_response(&ApiError::other(
                    502,
                    format!("proxy: reading the upstream's answer: {e}"),
                ));
            }
        };
        tracing::debug!(
            status = rparts.status.as_u16(),
            path = %parts_path,
            body = %String::from_utf8_lossy(&bytes[..bytes.len().min(600)]),
            "proxy: upstream error answer"
        );
        let mut r = Response::new(Body::from(bytes));
        *r.status_mut() = rparts.status;
        for (k, v) in &rparts.headers {
            if !skipped(k) {
                r.headers_mut().append(k, v.clone());
            }
        }
        return r;
    }
    let stream = rbody.into_data_stream();
    let body = if watch {
        let mut drops = inner.inject.drops();
        drops.borrow_and_update();
        let mut kills = inner.inject.kills();
        kills.borrow_and_update();
        let stop = async move {
            tokio::select! {
                _ = drops.changed() => {}
                _ = kills.changed() => {}
            }
        };
        Body::from_stream(stream.take_until(Box::pin(stop)))
    } else {
        Body::from_stream(stream)
    };
    let mut r = Response::new(body);
    *r.status_mut() = rparts.status;
    for (k, v) in &rparts.headers {
        if !skipped(k) {
            r.headers_mut().append(k, v.clone());
        }
    }
    r
}
