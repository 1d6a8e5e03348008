//! Starting, restarting and stopping the server, and the handle that tests
//! and the simulation use: URL, `kube` client, kubeconfig, request log,
//! fault injection, pod logs, CRD registration and a direct in-process
//! path for bulk setup.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpSocket;
use tokio::sync::{broadcast, oneshot};
use tokio::task::JoinHandle;

use super::errors::SimError;
use super::http::{self};
use super::inject::FaultInjector;
use super::log::RequestRecord;
use super::state::{ServerOptions, Shared};

mod direct;

/// Builder and configuration of the embedded API server.
#[derive(Debug, Clone, Default)]
pub struct ApiServer {
    opts: ServerOptions,
}

struct Running {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

struct Inner {
    shared: Arc<Shared>,
    addr: SocketAddr,
    running: Mutex<Option<Running>>,
    /// The server's own threads, when `ServerOptions::threads` asks for them.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which panics inside async code; the
        // last handle may well be dropped there.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// The runtime to serve on: dedicated threads, so that the work of the
/// simulated kubelets and operators sharing the process does not queue
/// in front of requests (on a real cluster they run on other machines).
fn server_runtime(threads: usize) -> Result<Option<tokio::runtime::Runtime>, SimError> {
    if threads == 0 {
        return Ok(None);
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("sim-apiserver")
        .enable_all()
        .build()
        .map(Some)
        .map_err(|e| io_err("sim-apiserver runtime", e))
}

/// A running server. Cheap to clone; all clones control the same server.
#[derive(Clone)]
pub struct ApiServerHandle {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ApiServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServerHandle")
            .field("addr", &self.inner.addr)
            .finish()
    }
}

fn io_err(addr: &str, source: std::io::Error) -> SimError {
    SimError::Io {
        addr: addr.to_string(),
        source,
    }
}

async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, SimError> {
    let mut last = None;
    // a restart rebinds the same port: retry briefly while the old socket closes
    for _ in 0..50 {
        let socket = TcpSocket::new_v4().map_err(|e| io_err(&addr.to_string(), e))?;
        socket
            .set_reuseaddr(true)
            .map_err(|e| io_err(&addr.to_string(), e))?;
        match socket.bind(addr).and_then(|()| socket.listen(1024)) {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(io_err(
        &addr.to_string(),
        last.unwrap_or_else(|| std::io::Error::other("bind failed")),
    ))
}

/// Serve on `rt` (or the caller's runtime). The listener moves there as
/// a std socket: a Tokio socket belongs to the runtime that made it.
fn serve(
    shared: Arc<Shared>,
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
    rt: Option<&tokio::runtime::Runtime>,
) -> Result<Running, SimError> {
    let (stop, rx) = oneshot::channel::<()>();
    let app = http::router(shared, addr.to_string());
    let listener = listener
        .into_std()
        .map_err(|e| io_err(&addr.to_string(), e))?;
    let server = async move {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "embedded API server could not listen");
                return;
            }
        };
        // no Nagle delay: each watch event must leave at once
        let listener =
            axum::serve::ListenerExt::tap_io(listener, |tcp: &mut tokio::net::TcpStream| {
                if let Err(e) = tcp.set_nodelay(true) {
                    tracing::debug!(error = %e, "TCP_NODELAY not set");
                }
            });
        let server = axum::serve(listener, app).with_graceful_shutdown(async move {
            let _ = rx.await;
        });
        if let Err(e) = server.await {
            tracing::warn!(error = %e, "embedded API server stopped with an error");
        }
    };
    let task = match rt {
        Some(rt) => rt.spawn(server),
        None => tokio::spawn(server),
    };
    Ok(Running { stop, task })
}

/// Direct-path helpers usable before the handle exists.
struct HandleCore<'a>(&'a Arc<Shared>);

impl ApiServer {
    /// A builder with defaults: any free loopback port, 50,000 events of
    /// watch history, bookmarks every 5 s, immediate pod deletion.
    pub fn builder() -> Self {
        Self::default()
    }

    /// Listens on this loopback port (0 = any free port).
    pub fn port(mut self, port: u16) -> Self {
        self.opts.port = port;
        self
    }

    /// Number of events kept so that watches can resume (older → 410).
    pub fn history(mut self, events: usize) -> Self {
        self.opts.history = events;
        self
    }

    /// Interval of BOOKMARK events on watches that allow them.
    pub fn bookmark_interval(mut self, d: Duration) -> Self {
        self.opts.bookmark_interval = d;
        self
    }

    /// Keep deleted pods that are bound to a node (with `deletionTimestamp`)
    /// until deleted again with `gracePeriodSeconds=0`, as a kubelet would.
    pub fn hold_pod_deletion(mut self, hold: bool) -> Self {
        self.opts.hold_pod_deletion = hold;
        self
    }

    /// Serve on this many dedicated threads (0, the default: on the
    /// caller's runtime).
    pub fn threads(mut self, threads: usize) -> Self {
        self.opts.threads = threads;
        self
    }

    /// Number of newest request records kept (default 500,000).
    pub fn request_log_capacity(mut self, records: usize) -> Self {
        self.opts.request_log_capacity = records;
        self
    }

    /// All options at once.
    pub fn options(mut self, opts: ServerOptions) -> Self {
        self.opts = opts;
        self
    }

    /// Binds the port, creates the default namespaces and serves.
    pub async fn start(self) -> Result<ApiServerHandle, SimError> {
        let shared = Shared::new(self.opts.clone());
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let h = HandleCore(&shared);
            h.ensure_namespace(ns)?;
        }
        let want: SocketAddr = SocketAddr::from(([127, 0, 0, 1], self.opts.port));
        let listener = bind(want).await?;
        let addr = listener
            .local_addr()
            .map_err(|e| io_err(&want.to_string(), e))?;
        let runtime = server_runtime(self.opts.threads)?;
        let kcm = super::controllers::run(Arc::downgrade(&shared));
        match runtime.as_ref() {
            Some(rt) => drop(rt.spawn(kcm)),
            None => drop(tokio::spawn(kcm)),
        }
        let running = serve(shared.clone(), listener, addr, runtime.as_ref())?;
        Ok(ApiServerHandle {
            inner: Arc::new(Inner {
                shared,
                addr,
                running: Mutex::new(Some(running)),
                runtime,
            }),
        })
    }
}

impl ApiServerHandle {
    /// Base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.inner.addr)
    }

    /// The loopback address served.
    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// A `kube` client for the server (plain HTTP, no auth, namespace `default`).
    ///
    /// # Panics
    /// Outside a Tokio runtime (the client spawns its buffer task).
    pub fn client(&self) -> kube::Client {
        let url = self.url().parse::<axum::http::Uri>().unwrap_or_default();
        let config = kube::Config::new(url);
        kube::Client::try_from(config)
            .unwrap_or_else(|e| panic!("kube client for the embedded API server: {e}"))
    }

    /// A kubeconfig pointing at the server, for `kubectl --kubeconfig`.
    pub fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: rebound-sim\n  cluster:\n    server: {}\ncontexts:\n- name: rebound-sim\n  context:\n    cluster: rebound-sim\n    user: rebound-sim\n    namespace: default\ncurrent-context: rebound-sim\nusers:\n- name: rebound-sim\n  user: {{}}\npreferences: {{}}\n",
            self.url()
        )
    }

    /// Writes `kubeconfig_yaml()` to a file.
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig_yaml())
    }

    /// Snapshot of the request log.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.inner.shared.log.snapshot()
    }

    /// Every request logged after this call, as it happens.
    pub fn subscribe_requests(&self) -> broadcast::Receiver<RequestRecord> {
        self.inner.shared.log.subscribe()
    }

    /// Forgets the logged requests.
    pub fn clear_requests(&self) {
        self.inner.shared.log.clear()
    }

    /// Watch events (not bookmarks) the server has sent for `key`
    /// (`group/plural`, e.g. `batch.volcano.sh/jobs`; `/pods` for the core
    /// group): what the watchers of a resource cost it.
    pub fn watch_events_sent(&self, key: &str) -> u64 {
        self.inner.shared.watch_events.sent(key)
    }

    /// Number of logged requests per verb.
    pub fn request_counts(&self) -> std::collections::BTreeMap<&'static str, usize> {
        self.inner.shared.log.counts_by_verb()
    }

    /// Sets the text `pods/log` returns for a container.
    pub fn set_pod_log(&self, ns: &str, pod: &str, container: &str, text: String) {
        if let Ok(mut g) = self.inner.shared.pod_logs.lock() {
            g.insert(
                (ns.to_string(), pod.to_string(), container.to_string()),
                text,
            );
        }
    }

    /// Fault injection controls.
    pub fn inject(&self) -> &FaultInjector {
        &self.inner.shared.inject
    }

    /// Stops serving (closing every watch and connection) and serves again on
    /// the same port with the same data, as an API server restart.
    pub async fn restart(&self) -> Result<(), SimError> {
        self.stop().await;
        let listener = bind(self.inner.addr).await?;
        let running = serve(
            self.inner.shared.clone(),
            listener,
            self.inner.addr,
            self.inner.runtime.as_ref(),
        )?;
        if let Ok(mut g) = self.inner.running.lock() {
            *g = Some(running);
        }
        Ok(())
    }

    async fn stop(&self) {
        self.inner.shared.inject.drop_watches();
        let running = self.inner.running.lock().ok().and_then(|mut g| g.take());
        if let Some(r) = running {
            let _ = r.stop.send(());
            let abort = r.task.abort_handle();
            if tokio::time::timeout(Duration::from_secs(3), r.task)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }

    /// Stops serving for good.
    pub async fn shutdown(&self) {
        self.stop().await;
    }
}
