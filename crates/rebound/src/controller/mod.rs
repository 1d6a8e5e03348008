//! `rebound controller`: the watches and the Lease around the recovery
//! core ([`core`]), and the executor that carries its effects out.
//!
//! One loop owns the core: it takes each input (a watch change, an
//! outcome, a tick, a leadership change), steps the core, and hands the
//! effects to the executor. A panic in the core, or a dead Lease loop, ends
//! the controller at once (the process, for `rebound controller`): a
//! standby that acts is better than a leader that renews its Lease and acts
//! on nothing.

pub mod config;
pub mod core;
pub mod executor;
pub mod fence;
pub mod http;
pub mod throttle;
pub mod watchdog;
pub mod watches;

pub use crate::k8s::{discover, leader, time, watch};
pub use crate::metrics;
pub use config::ControllerArgs;

use self::core::effect::PathTrace;
use self::core::input::Input;
use self::core::{Core, CoreConfig, Now};
use crate::k8s::watch::Stamp;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch as tw};

/// A running controller, for `main`, the demo, `sim` and end-to-end tests.
pub struct ControllerHandle {
    shutdown: tw::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    /// Tasks that would outlive the loop if it were aborted (a killed
    /// process loses them all).
    aborts: Vec<tokio::task::AbortHandle>,
    /// Metrics of this replica.
    pub metrics: crate::metrics::Metrics,
    /// Where /metrics, /healthz and /readyz are served.
    pub listen: SocketAddr,
    /// Leadership of this replica.
    pub leader: leader::Leadership,
    /// Readiness and liveness flags.
    pub health: Arc<http::Health>,
    decisions: tokio::sync::broadcast::Sender<Arc<crate::policy::Decision>>,
    fatal: tw::Receiver<Option<String>>,
}

impl ControllerHandle {
    /// Every decision this replica makes from now on (in-process observers:
    /// the demo's timeline, end-to-end tests).
    pub fn subscribe_decisions(
        &self,
    ) -> tokio::sync::broadcast::Receiver<Arc<crate::policy::Decision>> {
        self.decisions.subscribe()
    }

    /// Stop gracefully: act on nothing new, finish the actions in flight
    /// (at most [`SHUTDOWN_DRAIN`]), clear leadership, then release the
    /// Lease.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = tokio::time::timeout(SHUTDOWN_DRAIN + Duration::from_secs(5), self.task).await;
    }

    /// Stop at once, as if the process were killed (no Lease release).
    pub fn kill(self) {
        self.task.abort();
        for a in &self.aborts {
            a.abort();
        }
        std::mem::forget(self.shutdown);
    }

    /// Why the controller stopped by itself (a panic in the core, a dead
    /// Lease loop), once it did.
    pub async fn fatal(&mut self) -> String {
        loop {
            if let Some(why) = self.fatal.borrow().clone() {
                return why;
            }
            if self.fatal.changed().await.is_err() {
                return "the controller loop ended".into();
            }
        }
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
    let (lease_stop_tx, lease_stop_rx) = tw::channel(false);
    let (fatal_tx, fatal_rx) = tw::channel(None);
    let metrics = crate::metrics::Metrics::new();
    let step = Arc::new(watchdog::StepWatch::new(args.step_timeout));
    if let Err(e) = watchdog::spawn(&step, metrics.clone()) {
        tracing::error!(error = %e, "cannot start the step watchdog thread");
    }
    let health = Arc::new(http::Health {
        step: step.clone(),
        ..Default::default()
    });
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
        let gate = step.clone();
        let (l, t) = leader::start(
            client.clone(),
            cfg,
            lease_stop_rx,
            Arc::new(move || gate.may_renew()),
        );
        (l, Some(t))
    } else {
        (leader::Leadership::always(), None)
    };
    let (tx, rx) = mpsc::channel::<(Input, Stamp)>(4096);
    let (decisions, _) = tokio::sync::broadcast::channel(1024);
    let clusterd = args
        .clusterd_view
        .then(crate::ascend::clusterd::ClusterdView::new);
    let events = crate::recover::Events::new(client.clone(), Some(args.identity()));
    let mut aborts = vec![http_task.abort_handle()];
    if let Some(view) = &clusterd {
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
            events: events.clone(),
        };
        let t = crate::ascend::ranktable::spawn(deps, shutdown_rx.clone());
        aborts.push(t.abort_handle());
    }
    if let Some(t) = &lease_task {
        aborts.push(t.abort_handle());
    }
    let executor = executor::Executor::new(
        client.clone(),
        Arc::new(throttle::Throttle::new(args.qps, args.burst)),
        leadership.clone(),
        metrics.clone(),
        events,
        tx.clone(),
    );
    let progress_keys = core::pods::ProgressKeys::default();
    let mut core = Core::new(
        CoreConfig {
            root,
            condition_types: args.condition_types.clone(),
            fault_max_age: args.fault_max_age,
            dry_run: args.dry_run,
            node_default: args.node_config(),
            status_interval: args.status_interval,
            resync_interval: Duration::from_secs(30),
            restart_agent_role: Some(args.restart_agent_role.clone())
                .filter(|r| !r.is_empty() && !args.dry_run),
        },
        metrics.clone(),
        clusterd,
        progress_keys.clone(),
    );
    core.observe_decisions(decisions.clone());
    let lp = Loop {
        client,
        args,
        core,
        executor,
        tx,
        rx,
        shutdown: shutdown_rx,
        lease_stop: lease_stop_tx,
        lease_task,
        http_task,
        health: health.clone(),
        leadership: leadership.clone(),
        progress_keys,
        fatal: fatal_tx,
        step_seconds: metrics.step.clone(),
    };
    let task = tokio::spawn(lp.run());
    Ok(ControllerHandle {
        shutdown: shutdown_tx,
        task,
        aborts,
        metrics,
        listen,
        leader: leadership,
        health,
        decisions,
        fatal: fatal_rx,
    })
}

/// The loop that owns the core.
struct Loop {
    client: kube::Client,
    args: ControllerArgs,
    core: Core,
    executor: executor::Executor,
    tx: watches::Tx,
    rx: mpsc::Receiver<(Input, Stamp)>,
    shutdown: tw::Receiver<bool>,
    lease_stop: tw::Sender<bool>,
    lease_task: Option<tokio::task::JoinHandle<()>>,
    http_task: tokio::task::JoinHandle<()>,
    health: Arc<http::Health>,
    leadership: leader::Leadership,
    progress_keys: core::pods::ProgressKeys,
    fatal: tw::Sender<Option<String>>,
    /// For the step histogram (the core counts the rest).
    step_seconds: prometheus_client::metrics::histogram::Histogram,
}

impl Loop {
    async fn run(mut self) {
        let mut tasks =
            watches::spawn_base(&self.client, &self.args, &self.tx, &self.progress_keys);
        tasks.push(watches::spawn_kinds(self.client.clone(), self.tx.clone()));
        tasks.push(watches::spawn_dra(self.client.clone(), self.tx.clone()));
        let mut jobs = watches::JobWatches::default();
        // Ticks: timers, resyncs, status flushes.
        let ttx = self.tx.clone();
        tasks.push(tokio::spawn(async move {
            let mut iv = tokio::time::interval(Duration::from_secs(1));
            loop {
                iv.tick().await;
                if ttx.send((Input::Tick, Stamp::now())).await.is_err() {
                    return;
                }
            }
        }));
        // Leadership changes.
        let mut lead_rx = self.leadership.subscribe();
        let ltx = self.tx.clone();
        let leadership = self.leadership.clone();
        tasks.push(tokio::spawn(async move {
            // The term is read with each change: a lapse and a renew that
            // the channel folded into one `true` still shows as a new term.
            let leading_now = (leadership.is_leader(), leadership.term());
            let input = Input::Leader(leading_now.0, leading_now.1);
            if ltx.send((input, Stamp::now())).await.is_err() {
                return;
            }
            while lead_rx.changed().await.is_ok() {
                let l = *lead_rx.borrow_and_update();
                let input = Input::Leader(l, leadership.term());
                if ltx.send((input, Stamp::now())).await.is_err() {
                    return;
                }
            }
        }));
        self.health
            .alive
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let mut why_fatal: Option<String> = None;
        loop {
            tokio::select! {
                biased;
                _ = self.shutdown.changed() => break,
                msg = self.rx.recv() => {
                    let Some((input, stamp)) = msg else { break };
                    if let Input::JobKinds(k) = &input {
                        jobs.sync(&self.client, &self.tx, k);
                    }
                    let started = Instant::now();
                    let now = Now { wall: chrono::Utc::now(), mono: stamp.arrived };
                    let core = &mut self.core;
                    let step = self.health.step.clone();
                    let guard = step.begin(|w| watchdog::describe(&input, w));
                    let stepped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| core.step(input, now)));
                    let took = step.running_for();
                    drop(guard);
                    if let Some(t) = took {
                        self.step_seconds.observe(t.as_secs_f64());
                    }
                    if let Some(took) = took.filter(|t| *t > step.bound()) {
                        tracing::warn!(took_s = took.as_secs_f64(), "a stuck step of the recovery core ended");
                    }
                    match stepped {
                        Ok(effects) => {
                            let decided = Instant::now();
                            for mut e in effects {
                                // Effects this input caused carry its path so far.
                                if e.received == Some(stamp.arrived) {
                                    e.trace = Some(PathTrace {
                                        read: stamp.read,
                                        queued: started.saturating_duration_since(stamp.arrived).saturating_sub(stamp.read),
                                        decided: decided.saturating_duration_since(started),
                                        at: decided,
                                    });
                                }
                                self.executor.run(e);
                            }
                        }
                        Err(p) => {
                            let what = p
                                .downcast_ref::<String>()
                                .cloned()
                                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                                .unwrap_or_else(|| "a panic".into());
                            why_fatal = Some(format!("the recovery core panicked: {what}"));
                            break;
                        }
                    }
                    self.health.ready.store(self.core.ready(), std::sync::atomic::Ordering::Relaxed);
                }
            }
            if let Some(t) = &self.lease_task
                && t.is_finished()
                && !*self.shutdown.borrow()
            {
                why_fatal = Some("the leader-election loop stopped".into());
                break;
            }
        }
        self.health
            .alive
            .store(false, std::sync::atomic::Ordering::Relaxed);
        for t in tasks {
            t.abort();
        }
        jobs.abort_all();
        if let Some(why) = why_fatal {
            // Act on nothing more; the Lease loop releases the Lease so a
            // standby takes over at once.
            tracing::error!("{why}; stopping so that a healthy replica takes over");
            self.leadership.revoke();
            let _ = self.fatal.send(Some(why));
        } else {
            // The shutdown order: no new effects, the ones in flight
            // finished, then the Lease given up. The core leads no more
            // (what it asks for now is not carried out); the actions in
            // flight may take as long as any effect may (the Lease is
            // still renewed meanwhile), so the next leader sees their
            // results rather than racing them; then the Lease loop clears
            // leadership and only then releases the Lease.
            let now = Now {
                wall: chrono::Utc::now(),
                mono: Instant::now(),
            };
            let dropped = self
                .core
                .step(Input::Leader(false, self.leadership.term()), now);
            if !dropped.is_empty() {
                tracing::debug!(
                    effects = dropped.len(),
                    "shutting down: effects not carried out"
                );
            }
            self.executor.drain(SHUTDOWN_DRAIN).await;
            if self.executor.in_flight() > 0 {
                tracing::warn!(
                    in_flight = self.executor.in_flight(),
                    "shutting down with effects still in flight after {SHUTDOWN_DRAIN:?}"
                );
            }
        }
        let _ = self.lease_stop.send(true);
        if let Some(t) = self.lease_task {
            let _ = tokio::time::timeout(Duration::from_secs(3), t).await;
        }
        self.http_task.abort();
    }
}

/// Longest a graceful shutdown waits for the effects in flight: as long
/// as any one effect may take ([`executor::EFFECT_TIMEOUT`]), and a second
/// for its outcome. The Deployment's `terminationGracePeriodSeconds`
/// leaves room for it.
pub const SHUTDOWN_DRAIN: Duration = Duration::from_secs(executor::EFFECT_TIMEOUT.as_secs() + 1);

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
/// (in-cluster config or kubeconfig) until SIGTERM/SIGINT. A fatal error
/// (a panic in the core, a dead Lease loop) ends the process with an
/// error, so that Kubernetes restarts it and the standby takes over.
pub async fn run(args: ControllerArgs) -> anyhow::Result<()> {
    let mut cfg = kube::Config::infer().await?;
    identify(&mut cfg);
    let client = kube::Client::try_from(cfg)?;
    let mut handle = start(client, args).await?;
    tracing::info!(listen = %handle.listen, "rebound controller started");
    let fatal = tokio::select! {
        _ = shutdown_signal() => None,
        why = handle.fatal() => Some(why),
    };
    match fatal {
        None => {
            tracing::info!("shutting down");
            handle.shutdown().await;
            Ok(())
        }
        Some(why) => Err(anyhow::anyhow!("{why}")),
    }
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
