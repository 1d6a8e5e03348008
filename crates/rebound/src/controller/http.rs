//! `/metrics`, `/healthz` and `/readyz`.

use super::metrics::Metrics;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Health flags the probes read.
#[derive(Debug, Default)]
pub struct Health {
    /// Every watch has delivered its initial list.
    pub ready: AtomicBool,
    /// The reactor loop is running.
    pub alive: AtomicBool,
    /// The step in progress: a step stuck past its bound fails `/healthz`.
    pub step: Arc<super::watchdog::StepWatch>,
}

#[derive(Clone)]
struct AppState {
    metrics: Metrics,
    health: Arc<Health>,
}

/// Serve until `shutdown` fires. Returns the bound address (port 0 picks one).
pub async fn serve(
    addr: SocketAddr,
    metrics: Metrics,
    health: Arc<Health>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let app = Router::new()
        .route(
            "/metrics",
            get(|State(s): State<AppState>| async move {
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    s.metrics.encode(),
                )
            }),
        )
        .route(
            "/healthz",
            get(|State(s): State<AppState>| async move {
                if !s.health.alive.load(Ordering::Relaxed) {
                    (StatusCode::SERVICE_UNAVAILABLE, "reactor stopped")
                } else if !s.health.step.healthy() {
                    (
                        StatusCode::SERVICE_UNAVAILABLE,
                        "a step of the recovery core is stuck",
                    )
                } else {
                    (StatusCode::OK, "ok")
                }
            }),
        )
        .route(
            "/readyz",
            get(|State(s): State<AppState>| async move {
                if s.health.ready.load(Ordering::Relaxed) {
                    (StatusCode::OK, "ready")
                } else {
                    (
                        StatusCode::SERVICE_UNAVAILABLE,
                        "initial watch lists not complete",
                    )
                }
            }),
        )
        .with_state(AppState { metrics, health });
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = shutdown.changed().await;
            })
            .await;
    });
    Ok((bound, task))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn status(addr: SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.expect("write");
        let mut out = String::new();
        s.read_to_string(&mut out).await.expect("read");
        out.lines().next().unwrap_or_default().to_string()
    }

    #[tokio::test]
    async fn healthz_fails_while_a_step_is_stuck() {
        let health = Arc::new(Health {
            step: Arc::new(super::super::watchdog::StepWatch::new(
                Duration::from_millis(20),
            )),
            ..Default::default()
        });
        health.alive.store(true, Ordering::Relaxed);
        let (_tx, rx) = tokio::sync::watch::channel(false);
        let (addr, task) = serve(
            "127.0.0.1:0".parse().expect("addr"),
            Metrics::new(),
            health.clone(),
            rx,
        )
        .await
        .expect("serve");
        assert!(status(addr, "/healthz").await.contains("200"), "idle");
        {
            let _step = health.step.begin(|w| w.push_str("Tick"));
            assert!(
                status(addr, "/healthz").await.contains("200"),
                "a short step"
            );
            tokio::time::sleep(Duration::from_millis(400)).await;
            let s = status(addr, "/healthz").await;
            assert!(s.contains("503"), "stuck: {s}");
        }
        assert!(status(addr, "/healthz").await.contains("200"), "ended");
        task.abort();
    }
}
