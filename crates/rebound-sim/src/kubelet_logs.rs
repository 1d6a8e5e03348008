//! The kubelet's log endpoint for the test bed's fake nodes on a real API
//! server: `pods/log` there is not answered by the API server but proxied
//! to the node's kubelet (`status.addresses` InternalIP and
//! `status.daemonEndpoints.kubeletEndpoint.Port`, HTTPS, the certificate
//! not verified unless `--kubelet-certificate-authority` is set). This
//! small HTTPS server answers `GET /containerLogs/{ns}/{pod}/{container}`
//! (`?tailLines=N`) with the text a test set, so saving logs before a
//! restart is tested on a real server too.
//!
//! Each fake node gets its own loopback address (`127.1.0.1`, `127.1.0.2`,
//! ...; all of 127/8 is the loopback interface on Linux), all on one port,
//! so pods on different nodes keep different host IPs as on a cluster.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{Request, Response, StatusCode, header};

/// Where the fake nodes' kubelets are reached: node `i` at
/// `first_ip + i`, port `port`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KubeletEndpoint {
    /// The first node's InternalIP.
    pub first_ip: Ipv4Addr,
    /// The kubelet port of every node.
    pub port: u16,
}

impl KubeletEndpoint {
    /// The InternalIP of node `i`.
    pub fn ip_of(&self, i: usize) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.first_ip).wrapping_add(i as u32))
    }
}

/// The first address handed out on loopback.
pub const FIRST_LOOPBACK_IP: Ipv4Addr = Ipv4Addr::new(127, 1, 0, 1);

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum KubeletLogsError {
    /// Binding one of the nodes' addresses failed.
    #[error("kubelet log endpoint: binding {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The self-signed certificate could not be made.
    #[error("kubelet log endpoint: certificate: {0}")]
    Cert(#[from] rcgen::Error),
    /// TLS could not be configured.
    #[error("kubelet log endpoint: TLS: {0}")]
    Tls(#[from] rustls::Error),
}

type Logs = Arc<Mutex<HashMap<(String, String, String), String>>>;

/// The running endpoint; dropping it stops it.
pub struct KubeletLogs {
    endpoint: KubeletEndpoint,
    logs: Logs,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for KubeletLogs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeletLogs")
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

impl Drop for KubeletLogs {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn tls_acceptor() -> Result<tokio_rustls::TlsAcceptor, KubeletLogsError> {
    let key = rcgen::KeyPair::generate()?;
    let params = rcgen::CertificateParams::new(vec!["localhost".to_string()])?;
    let cert = params.self_signed(&key)?;
    let der = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(vec![cert.der().clone()], der)?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(cfg)))
}

impl KubeletLogs {
    /// Serves the kubelets of `nodes` nodes on `first_ip`, `first_ip + 1`,
    /// ... (one listener each, one port for all; a port taken on one of the
    /// addresses makes it try another). Call within a Tokio runtime.
    pub async fn start(first_ip: Ipv4Addr, nodes: usize) -> Result<KubeletLogs, KubeletLogsError> {
        let acceptor = tls_acceptor()?;
        let logs: Logs = Arc::default();
        let mut last_err = None;
        for _ in 0..20 {
            let probe = SocketAddr::from((first_ip, 0));
            let first = tokio::net::TcpListener::bind(probe)
                .await
                .map_err(|source| KubeletLogsError::Bind {
                    addr: probe,
                    source,
                })?;
            let port = first
                .local_addr()
                .map_err(|source| KubeletLogsError::Bind {
                    addr: probe,
                    source,
                })?
                .port();
            let endpoint = KubeletEndpoint { first_ip, port };
            let mut listeners = vec![first];
            let mut ok = true;
            for i in 1..nodes {
                let addr = SocketAddr::from((endpoint.ip_of(i), port));
                match tokio::net::TcpListener::bind(addr).await {
                    Ok(l) => listeners.push(l),
                    Err(source) => {
                        last_err = Some(KubeletLogsError::Bind { addr, source });
                        ok = false;
                        break;
                    }
                }
            }
            if !ok {
                continue;
            }
            let tasks = listeners
                .into_iter()
                .map(|l| tokio::spawn(accept_loop(l, acceptor.clone(), logs.clone())))
                .collect();
            return Ok(KubeletLogs {
                endpoint,
                logs,
                tasks,
            });
        }
        Err(last_err.unwrap_or_else(|| KubeletLogsError::Bind {
            addr: SocketAddr::from((first_ip, 0)),
            source: std::io::Error::other("no common free port"),
        }))
    }

    /// Where the nodes' kubelets are.
    pub fn endpoint(&self) -> KubeletEndpoint {
        self.endpoint
    }

    /// Sets the text the kubelet returns for a container's log.
    pub fn set_pod_log(&self, ns: &str, pod: &str, container: &str, text: String) {
        self.logs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert((ns.into(), pod.into(), container.into()), text);
    }
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    logs: Logs,
) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            continue;
        };
        let acceptor = acceptor.clone();
        let logs = logs.clone();
        tokio::spawn(async move {
            let tls = match acceptor.accept(tcp).await {
                Ok(t) => t,
                Err(e) => {
                    tracing::debug!(error = %e, "kubelet log endpoint: TLS handshake");
                    return;
                }
            };
            let svc = hyper::service::service_fn(move |req| {
                let logs = logs.clone();
                async move { Ok::<_, std::convert::Infallible>(answer(&logs, &req)) }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                .await
            {
                tracing::debug!(error = %e, "kubelet log endpoint: connection");
            }
        });
    }
}

/// The first `n` bytes of `text` (all of it for `None`), as the kubelet's
/// `limitBytes` cuts what `tailLines` selected (here at the character
/// boundary at or below `n`, since the text is a `String`).
pub fn limit_bytes(mut text: String, n: Option<usize>) -> String {
    if let Some(n) = n
        && n < text.len()
    {
        let mut cut = n;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    text
}

/// The last `n` lines of `text` (all of it for `None`), each ending in a
/// newline, as the kubelet's `tailLines` gives them.
pub fn tail_lines(text: &str, n: Option<usize>) -> String {
    let Some(n) = n else {
        return text.to_string();
    };
    let lines: Vec<&str> = text.lines().collect();
    let mut t = lines[lines.len().saturating_sub(n)..].join("\n");
    if !t.is_empty() {
        t.push('\n');
    }
    t
}

fn answer<B>(logs: &Logs, req: &Request<B>) -> Response<Body> {
    let segs: Vec<&str> = req
        .uri()
        .path()
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (code, text) = match segs.as_slice() {
        ["containerLogs", ns, pod, container] if req.method() == axum::http::Method::GET => {
            let tail = req.uri().query().and_then(|q| {
                super::proxy::route::query_param(q, "tailLines").and_then(|t| t.parse().ok())
            });
            let text = logs
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(&((*ns).into(), (*pod).into(), (*container).into()))
                .cloned()
                .unwrap_or_default();
            let limit = req.uri().query().and_then(|q| {
                super::proxy::route::query_param(q, "limitBytes").and_then(|t| t.parse().ok())
            });
            (StatusCode::OK, limit_bytes(tail_lines(&text, tail), limit))
        }
        _ => (StatusCode::NOT_FOUND, "404 page not found\n".to_string()),
    };
    let mut r = Response::new(Body::from(text));
    *r.status_mut() = code;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_bytes_keeps_the_head() {
        assert_eq!(limit_bytes("abcdef".into(), Some(4)), "abcd");
        assert_eq!(limit_bytes("abc".into(), None), "abc");
        assert_eq!(limit_bytes("aé".into(), Some(2)), "a");
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail_lines("a\nb\nc\n", Some(2)), "b\nc\n");
        assert_eq!(tail_lines("a\nb\nc\n", Some(0)), "");
        assert_eq!(tail_lines("a\nb", None), "a\nb");
    }

    #[tokio::test]
    async fn serves_each_nodes_address_over_tls() {
        let k = KubeletLogs::start(Ipv4Addr::new(127, 1, 200, 1), 2)
            .await
            .expect("endpoint");
        k.set_pod_log("ml", "p", "c", "one\ntwo\nthree\n".into());
        let e = k.endpoint();
        for i in 0..2 {
            let mut cfg = kube::Config::new(
                format!("https://{}:{}", e.ip_of(i), e.port)
                    .parse()
                    .expect("url"),
            );
            cfg.accept_invalid_certs = true;
            let client = kube::Client::try_from(cfg).expect("client");
            let req = axum::http::Request::get("/containerLogs/ml/p/c?tailLines=2")
                .body(Vec::new())
                .expect("request");
            assert_eq!(client.request_text(req).await.expect("log"), "two\nthree\n");
        }
    }
}
