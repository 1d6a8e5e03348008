//! `rebound controller`: watches, leader election and wiring around the
//! pure decision core.

pub mod actions;
pub mod config;
pub mod discover;
pub mod http;
pub mod inputs;
pub mod leader;
pub mod metrics;
pub mod reactor;
pub mod state;
pub mod status;
pub mod throttle;
pub mod time;
pub mod watch;

pub use config::ControllerArgs;

use crate::api::{FaultClassification, RecoveryPolicy};
use inputs::{Change, Input};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod};
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch as tw};

/// A running controller, for `main`, the demo, `sim` and end-to-end tests.
pub struct ControllerHandle {
    shutdown: tw::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    /// Tasks that would outlive the reactor if it were aborted (a killed
    /// process loses them all).
    aborts: Vec<tokio::task::AbortHandle>,
    /// Metrics of this replica.
    pub metrics: metrics::Metrics,
    /// Where /metrics, /healthz and /readyz are served.
    pub listen: SocketAddr,
    /// Leadership of this replica.
    pub leader: leader::Leadership,
    /// Readiness and liveness flags.
    pub health: Arc<http::Health>,
    decisions: tokio::sync::broadcast::Sender<Arc<crate::policy::Decision>>,
}

impl ControllerHandle {
    /// Every decision this replica makes from now on (in-process observers:
    /// the demo's timeline, end-to-end tests).
    pub fn subscribe_decisions(
        &self,
    ) -> tokio::sync::broadcast::Receiver<Arc<crate::policy::Decision>> {
        self.decisions.subscribe()
    }

    /// Stop gracefully: release the Lease, finish the reactor.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(5), self.task).await;
    }

    /// Stop at once, as if the process were killed (no Lease release).
    pub fn kill(self) {
        self.task.abort();
        for a in &self.aborts {
            a.abort();
        }
        std::mem::forget(self.shutdown);
    }
}

/// Errors starting the controller.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot serve metrics on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// Start the controller with a client (real cluster or embedded one).
pub async fn start(
    client: kube::Client,
    args: ControllerArgs,
) -> Result<ControllerHandle, StartError> {
    let (shutdown_tx, shutdown_rx) = tw::channel(false);
    let metrics = metrics::Metrics::new();
    let health = Arc::new(http::Health::default());
    let (listen, http_task) = http::serve(
        args.listen,
        metrics.clone(),
        health.clone(),
        shutdown_rx.clone(),
    )
    .await
    .map_err(|source| StartError::Listen {
        addr: args.listen,
        source,
    })?;
    let root = args.root_namespace();
    let (leadership, lease_task) = if args.leader_election {
        let cfg = leader::LeaseConfig {
            namespace: root.clone(),
            name: args.lease_name.clone(),
            identity: args.identity(),
            duration: args.lease_duration,
            retry: (args.lease_duration / 5).max(Duration::from_millis(200)),
            grace: (args.lease_duration / 5).max(Duration::from_millis(200)),
        };
        let (l, t) = leader::start(client.clone(), cfg, shutdown_rx.clone());
        (l, Some(t))
    } else {
        (leader::Leadership::always(), None)
    };
    let (tx, rx) = mpsc::channel::<Input>(4096);
    let (decisions, _) = tokio::sync::broadcast::channel(1024);
    let ctx = actions::ActionCtx {
        client: client.clone(),
        throttle: Arc::new(throttle::Throttle::new(args.qps, args.burst)),
        leader: leadership.clone(),
        metrics: metrics.clone(),
        events: crate::recover::Events::new(client.clone(), Some(args.identity())),
        tx: tx.clone(),
        health: health.clone(),
        decisions: decisions.clone(),
        clusterd: args
            .clusterd_view
            .then(crate::ascend::clusterd::ClusterdView::new),
    };
    let mut aborts = vec![http_task.abort_handle()];
    if let Some(view) = &ctx.clusterd {
        let cfg = crate::ascend::clusterd::publish::PublishConfig::new(
            &args.clusterd_namespace,
            &args.clusterd_job_namespace,
        );
        let t = crate::ascend::clusterd::publish::spawn(
            client.clone(),
            view.clone(),
            leadership.clone(),
            metrics.clone(),
            cfg,
            shutdown_rx.clone(),
        );
        aborts.push(t.abort_handle());
    }
    if args.rank_tables {
        let deps = crate::ascend::ranktable::Deps {
            client: client.clone(),
            format: args.rank_table_format,
            leader: leadership.clone(),
            metrics: metrics.clone(),
            events: ctx.events.clone(),
        };
        let t = crate::ascend::ranktable::spawn(deps, shutdown_rx.clone());
        aborts.push(t.abort_handle());
    }
    if let Some(t) = &lease_task {
        aborts.push(t.abort_handle());
    }
    let task = tokio::spawn(run_loop(
        client,
        args,
        ctx,
        tx,
        rx,
        shutdown_rx,
        http_task,
        lease_task,
    ));
    Ok(ControllerHandle {
        shutdown: shutdown_tx,
        task,
        aborts,
        metrics,
        listen,
        leader: leadership,
        health,
        decisions,
    })
}

#[allow(clippy::too_many_arguments)]
async fn run_loop(
    client: kube::Client,
    args: ControllerArgs,
    ctx: actions::ActionCtx,
    tx: mpsc::Sender<Input>,
    mut rx: mpsc::Receiver<Input>,
    mut shutdown: tw::Receiver<bool>,
    http_task: tokio::task::JoinHandle<()>,
    lease_task: Option<tokio::task::JoinHandle<()>>,
) {
    let progress_keys = state::ProgressKeys::default();
    let mut tasks = spawn_watches(&client, &args, &tx, &progress_keys).await;
    tasks.push(http_task);
    // Ticks for breaker retries, hang scans and status flushes.
    let ttx = tx.clone();
    tasks.push(tokio::spawn(async move {
        let mut iv = tokio::time::interval(Duration::from_secs(1));
        loop {
            iv.tick().await;
            if ttx.send(Input::Tick).await.is_err() {
                return;
            }
        }
    }));
    // Leadership changes: re-evaluate current faults on takeover.
    let mut lead_rx = ctx.leader.subscribe();
    let ltx = tx.clone();
    tasks.push(tokio::spawn(async move {
        while lead_rx.changed().await.is_ok() {
            if *lead_rx.borrow() && ltx.send(Input::BecameLeader).await.is_err() {
                return;
            }
        }
    }));
    let health = ctx.health.clone();
    let mut reactor = reactor::Reactor::new(args, ctx, progress_keys);
    health
        .alive
        .store(true, std::sync::atomic::Ordering::Relaxed);
    loop {
        tokio::select! {
            biased;
            _ = shutdown.changed() => break,
            msg = rx.recv() => match msg {
                Some(m) => reactor.handle(m),
                None => break,
            },
        }
        if let Some(t) = &lease_task
            && t.is_finished()
            && !*shutdown.borrow()
        {
            tracing::error!(
                "the leader-election loop stopped; stopping so that a healthy replica takes over"
            );
            break;
        }
    }
    health
        .alive
        .store(false, std::sync::atomic::Ordering::Relaxed);
    for t in tasks {
        t.abort();
    }
    if let Some(t) = lease_task {
        let _ = tokio::time::timeout(Duration::from_secs(3), t).await;
    }
}

async fn spawn_watches(
    client: &kube::Client,
    args: &ControllerArgs,
    tx: &mpsc::Sender<Input>,
    progress_keys: &state::ProgressKeys,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    let mut pod_cfg = watch::config();
    if let Some(sel) = &args.pod_selector {
        pod_cfg = pod_cfg.labels(sel);
    }
    let max_age = args.fault_max_age;
    let keys = progress_keys.clone();
    let mut pool = state::Interner::default();
    tasks.push(watch::spawn(
        "pods",
        watcher(Api::<Pod>::all(client.clone()), pod_cfg),
        tx.clone(),
        move |c, at| inputs::PodSeen::input(c, at, max_age, &keys, &mut pool),
    ));
    tasks.push(watch::spawn(
        "nodes",
        watcher(Api::<Node>::all(client.clone()), watch::config()),
        tx.clone(),
        Input::Node,
    ));
    tasks.push(watch::spawn(
        "events",
        watcher(Api::<Event>::all(client.clone()), watch::config()),
        tx.clone(),
        Input::Event,
    ));
    tasks.push(watch::spawn(
        "configmaps",
        watcher(
            Api::<ConfigMap>::namespaced(client.clone(), "kube-system"),
            watch::config(),
        ),
        tx.clone(),
        Input::ConfigMap,
    ));
    tasks.push(watch::spawn(
        "policies",
        watcher(Api::<RecoveryPolicy>::all(client.clone()), watch::config()),
        tx.clone(),
        |c, _| Input::Policy(c),
    ));
    tasks.push(watch::spawn(
        "classifications",
        watcher(
            Api::<FaultClassification>::all(client.clone()),
            watch::config(),
        ),
        tx.clone(),
        |c, _| Input::Classification(c),
    ));
    match discover::job_kinds(client).await {
        Ok(kinds) => {
            for ar in kinds {
                let kind = if ar.group == "batch.volcano.sh" {
                    "VolcanoJob".to_string()
                } else {
                    ar.kind.clone()
                };
                tracing::info!(kind = %kind, group = %ar.group, "watching job kind");
                let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
                let k = kind.clone();
                tasks.push(watch::spawn(
                    "jobs",
                    watcher(api, watch::config()),
                    tx.clone(),
                    move |c: Change<DynamicObject>, _| Input::Job(k.clone(), c),
                ));
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "job kind discovery failed; job objects are not watched (restart history is read from in-memory records only)")
        }
    }
    tasks
}

/// The User-Agent of the controller's requests (`rebound-controller/0.1.0`):
/// the API server's default field manager, and what audit logs show.
pub const USER_AGENT: &str = concat!("rebound-controller/", env!("CARGO_PKG_VERSION"));

/// Make a client configuration identify itself as the controller.
pub fn identify(cfg: &mut kube::Config) {
    cfg.headers.push((
        axum::http::header::USER_AGENT,
        axum::http::HeaderValue::from_static(USER_AGENT),
    ));
}

/// `rebound controller`: run against the cluster of the environment
/// (in-cluster config or kubeconfig) until SIGTERM/SIGINT.
pub async fn run(args: ControllerArgs) -> anyhow::Result<()> {
    let mut cfg = kube::Config::infer().await?;
    identify(&mut cfg);
    let client = kube::Client::try_from(cfg)?;
    let handle = start(client, args).await?;
    tracing::info!(listen = %handle.listen, "rebound controller started");
    shutdown_signal().await;
    tracing::info!("shutting down");
    handle.shutdown().await;
    Ok(())
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
