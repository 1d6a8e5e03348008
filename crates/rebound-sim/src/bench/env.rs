//! Where `rebound sim` runs, and its set-up there: the embedded server
//! (jobs and pods written in-process), a real control plane it starts from
//! `--assets` (kube-apiserver with an audit log, kube-controller-manager,
//! etcd), or any cluster named by `--kubeconfig`. On the last two every
//! object goes through HTTP, as in a real cluster: the jobs are created by
//! this process, their pods by the simulated operator, bound by the
//! simulated scheduler and run by the simulated kubelets (see
//! [`crate::testbed::Testbed::connect`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams};

use super::SimArgs;
use super::serverlog::{AuditCursor, AuditError, SIM_AUDIT_POLICY, ServerRequest};
use crate::cluster::{JobOptions, SimConfig, pod_running};
use crate::envtest::{ControlPlane, ControlPlaneConfig, EnvtestError};
use crate::testbed::{Testbed, TestbedError};

mod keeper;
mod operators;
pub use keeper::Keeper;
pub use operators::RealOperatorsSetup;

/// Why the set-up failed.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// The real control plane did not start.
    #[error("control plane from {assets}: {source}")]
    ControlPlane {
        /// The assets directory.
        assets: PathBuf,
        /// The cause.
        source: Box<EnvtestError>,
    },
    /// `--assets` without a directory, and neither `REBOUND_TEST_ASSETS`
    /// nor the built Kubernetes set of tools/real-components.
    #[error("--assets without a directory: {0}")]
    NoAssets(Box<crate::envtest::AssetsError>),
    /// The simulated cluster or the test bed failed.
    #[error("test bed: {0}")]
    Testbed(Box<TestbedError>),
    /// A request failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A simulated-cluster call failed.
    #[error("simulated cluster: {0}")]
    Cluster(Box<crate::cluster::ClusterError>),
    /// The audit log could not be read.
    #[error(transparent)]
    Audit(#[from] AuditError),
    /// Files of the run could not be written.
    #[error("{what}: {source}")]
    Io {
        /// What was being written.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The real job operators or KWOK did not start.
    #[error("the real operators' environment: {0}")]
    RealOperators(String),
    /// The pods did not all run in time.
    #[error("only {running} of {want} pods running after {after:?}")]
    NotRunning {
        /// Pods running.
        running: usize,
        /// Pods wanted.
        want: usize,
        /// How long it waited.
        after: Duration,
    },
}

impl From<TestbedError> for EnvError {
    fn from(e: TestbedError) -> Self {
        EnvError::Testbed(Box::new(e))
    }
}

impl From<crate::cluster::ClusterError> for EnvError {
    fn from(e: crate::cluster::ClusterError) -> Self {
        EnvError::Cluster(Box::new(e))
    }
}

/// How long kube-controller-manager waits for a node's Lease before it
/// marks the node unhealthy, on a control plane `rebound sim` starts.
const NODE_GRACE: &str = "10m";

/// The server under the simulation.
pub enum Server {
    /// The embedded one, in this process.
    Embedded,
    /// A real control plane this process started (it stops when the last
    /// handle is dropped: the run's, and its keeper's if it has one).
    ControlPlane(Arc<ControlPlane>),
    /// A cluster named by a kubeconfig.
    Kubeconfig,
}

/// The simulation's cluster, ready for jobs.
pub struct SimEnv {
    /// The test bed (simulated nodes, actors, rebound's CRDs and samples).
    pub bed: Testbed,
    /// What serves it.
    pub server: Server,
    /// The kubeconfig the controller process is given.
    pub kubeconfig: PathBuf,
    /// How the report names the server.
    pub description: String,
    /// The namespace of the jobs.
    pub ns: String,
    /// What the report should say about this server's set-up.
    pub notes: Vec<String>,
    /// kube-scheduler runs (`--real-scheduler`): the jobs' pods ask for its
    /// default profile instead of the simulated scheduler.
    pub real_scheduler: bool,
    /// Processes of the run beside the control plane (the real job
    /// operators, KWOK), stopped before it.
    keeper: Option<Keeper>,
}

/// Starts a control plane on a thread that lives as long as the process:
/// its processes die when the thread that spawned them ends
/// (`PR_SET_PDEATHSIG`), and when the returned handle is dropped.
fn start_control_plane(cfg: ControlPlaneConfig) -> Result<ControlPlane, EnvError> {
    let assets = cfg.assets.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("sim-control-plane".into())
        .spawn(move || {
            let r = ControlPlane::start(&cfg);
            let ok = r.is_ok();
            let _ = tx.send(r);
            if ok {
                loop {
                    std::thread::park();
                }
            }
        })
        .map_err(|source| EnvError::Io {
            what: "start the control plane's keeper thread".into(),
            source,
        })?;
    match rx.recv() {
        Ok(r) => r.map_err(|source| EnvError::ControlPlane {
            assets,
            source: Box::new(source),
        }),
        Err(_) => Err(EnvError::Io {
            what: "the control plane's keeper thread".into(),
            source: std::io::Error::other("it ended without an answer"),
        }),
    }
}

/// The control plane `--assets` names (the resolved one when empty), with
/// the audit log the figures are read from and kube-scheduler if asked.
fn control_plane_config(assets: &Path, scheduler: bool) -> Result<ControlPlaneConfig, EnvError> {
    let mut cp_cfg = if assets.as_os_str().is_empty() {
        ControlPlaneConfig::resolve().map_err(|e| EnvError::NoAssets(Box::new(e)))?
    } else {
        ControlPlaneConfig::new(assets.to_owned())
    };
    cp_cfg.audit_policy = Some(SIM_AUDIT_POLICY.to_owned());
    if scheduler {
        cp_cfg.scheduler = Some(cp_cfg.assets.join("kube-scheduler"));
    }
    // One process renews every fake node's Lease, one after another
    // (a real cluster's kubelets renew their own, in parallel): at
    // 2,000 nodes on a loaded server a round outlasts the 40 s
    // lease, and the node lifecycle controller would mark nodes
    // NotReady and evict their pods in the middle of the set-up.
    cp_cfg.controller_manager_flags.extend([
        format!("--node-monitor-grace-period={NODE_GRACE}"),
        format!("--node-startup-grace-period={NODE_GRACE}"),
    ]);
    Ok(cp_cfg)
}

/// [`start_control_plane`] off the runtime's threads (it blocks for
/// seconds).
async fn start_control_plane_async(cfg: ControlPlaneConfig) -> Result<Arc<ControlPlane>, EnvError> {
    tokio::task::spawn_blocking(move || start_control_plane(cfg))
        .await
        .map_err(|e| EnvError::Io {
            what: "start the control plane".into(),
            source: std::io::Error::other(e.to_string()),
        })?
        .map(Arc::new)
}

impl SimEnv {
    /// Starts or connects to the server `args` names and sets up the bed.
    pub async fn start(args: &SimArgs, cfg: SimConfig) -> Result<SimEnv, EnvError> {
        if let Some(assets) = &args.assets {
            let cp_cfg = control_plane_config(assets, args.real_scheduler)?;
            eprintln!(
                "sim: starting etcd, kube-apiserver, kube-controller-manager{} from {}...",
                if args.real_scheduler {
                    " and kube-scheduler"
                } else {
                    ""
                },
                cp_cfg.assets.display()
            );
            let cp = start_control_plane_async(cp_cfg).await?;
            let kubeconfig = cp.kubeconfig_path().to_owned();
            let bed = Testbed::connect(&kubeconfig, cfg).await?;
            let version = bed.client().apiserver_version().await?;
            let description = format!(
                "kube-apiserver {} with etcd, kube-controller-manager{}, started from --assets {} (audit log on)",
                version.git_version,
                if args.real_scheduler {
                    " and kube-scheduler"
                } else {
                    ""
                },
                cp.dir().display()
            );
            let mut env =
                Self::finish(bed, Server::ControlPlane(cp), kubeconfig, description).await?;
            env.real_scheduler = args.real_scheduler;
            env.notes.push(format!(
                "kube-controller-manager runs with --node-monitor-grace-period and --node-startup-grace-period {NODE_GRACE}: this one process renews the 40 s Leases of all fake nodes one after another, and a slow round would otherwise get nodes marked NotReady and their pods evicted"
            ));
            return Ok(env);
        }
        if let Some(path) = &args.kubeconfig {
            let bed = Testbed::connect(path, cfg).await?;
            let version = bed.client().apiserver_version().await?;
            let description = format!(
                "{} of the cluster in --kubeconfig {} (no server log: client clock only)",
                version.git_version,
                path.display()
            );
            return Self::finish(bed, Server::Kubeconfig, path.clone(), description).await;
        }
        let bed = Testbed::start(cfg).await?;
        // One directory per environment, not per process: two measurements
        // in one process (the tests run them side by side) would otherwise
        // share a kubeconfig, and the second would point the first one's
        // watches at its own server.
        static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("rebound-sim-{}-{run}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|source| EnvError::Io {
            what: format!("create {}", dir.display()),
            source,
        })?;
        let kubeconfig = dir.join("kubeconfig");
        bed.cluster
            .api()
            .write_kubeconfig(&kubeconfig)
            .map_err(|source| EnvError::Io {
                what: format!("write {}", kubeconfig.display()),
                source,
            })?;
        let description = "embedded (in-process, request log)".to_owned();
        Self::finish(bed, Server::Embedded, kubeconfig, description).await
    }

    async fn finish(
        bed: Testbed,
        server: Server,
        kubeconfig: PathBuf,
        description: String,
    ) -> Result<SimEnv, EnvError> {
        bed.apply_samples().await?;
        // Jobs run in namespace `sim` under a plain policy (no saved logs,
        // no graded step), so the figures measure the restart path itself.
        let ns = bed.ensure_namespace("sim").await?;
        bed.apply_yaml(super::SIM_POLICY).await?;
        Ok(SimEnv {
            bed,
            server,
            kubeconfig,
            description,
            ns,
            notes: Vec::new(),
            real_scheduler: false,
            keeper: None,
        })
    }

    /// Whether the jobs and pods can be written in-process.
    pub fn embedded(&self) -> bool {
        matches!(self.server, Server::Embedded)
    }

    /// Creates `jobs` PyTorchJobs `job-<i>` of one master and `workers`
    /// workers: in-process on the embedded server (already bound, as the
    /// operator and scheduler would make them), else through the API, 16
    /// at a time, leaving the pods to the simulated operator.
    pub async fn create_jobs(&self, jobs: usize, workers: u32) -> Result<(), EnvError> {
        let opts = JobOptions::labels(&[("kcover.io/cascading-recovery", "true")]);
        let c = &self.bed.cluster;
        if self.embedded() {
            c.bulk_pytorchjobs(&self.ns, "job", jobs, workers, &opts)?;
            return Ok(());
        }
        let mut results = futures::stream::iter(0..jobs)
            .map(|i| {
                let opts = &opts;
                async move {
                    c.create_pytorchjob_with(&self.ns, &format!("job-{i}"), workers, opts)
                        .await
                }
            })
            .buffer_unordered(16);
        while let Some(r) = results.next().await {
            r?;
        }
        Ok(())
    }

    /// Waits until `want` pods run in the jobs' namespace. Progress is read
    /// off the PyTorchJobs' `Running` condition (a few KiB each, where a
    /// list of 20,000 pods is tens of MiB); the pods are counted once at the
    /// end.
    pub async fn wait_running(&self, jobs: usize, want: usize) -> Result<(), EnvError> {
        let res = crate::actors::kubeflow::KubeflowKind::PyTorchJob.api_resource();
        let job_api: Api<DynamicObject> = Api::namespaced_with(self.bed.client(), &self.ns, &res);
        let pods: Api<Pod> = Api::namespaced(self.bed.client(), &self.ns);
        let limit = Duration::from_secs(1800);
        let start = Instant::now();
        let mut said = Instant::now();
        loop {
            let t = Instant::now();
            let running_jobs = job_api
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                .filter(|j| job_running(j))
                .count();
            if running_jobs >= jobs {
                let running = pods
                    .list(&ListParams::default())
                    .await?
                    .items
                    .iter()
                    .filter(|p| pod_running(p))
                    .count();
                if running >= want {
                    return Ok(());
                }
            }
            if start.elapsed() > limit {
                let running = pods
                    .list(&ListParams::default())
                    .await?
                    .items
                    .iter()
                    .filter(|p| pod_running(p))
                    .count();
                return Err(EnvError::NotRunning {
                    running,
                    want,
                    after: limit,
                });
            }
            if said.elapsed() > Duration::from_secs(15) {
                eprintln!(
                    "sim: {running_jobs} of {jobs} jobs reported Running by their operator after {:.0}s",
                    start.elapsed().as_secs_f64()
                );
                said = Instant::now();
            }
            // Polling must not load the server it waits for.
            let pause = (t.elapsed() * 4).clamp(Duration::from_millis(200), Duration::from_secs(3));
            tokio::time::sleep(pause).await;
        }
    }

    /// Where the server's side of the measurement will be read, from now
    /// on (the embedded log is cleared; the audit log is read from its
    /// current end).
    pub fn server_log_from_now(&self) -> Result<ServerLog, EnvError> {
        Ok(match &self.server {
            Server::Embedded => {
                self.bed.cluster.api().clear_requests();
                ServerLog::Embedded
            }
            Server::ControlPlane(cp) => match cp.audit_log_path() {
                Some(p) => ServerLog::Audit(AuditCursor::at_end(p)?),
                None => ServerLog::None,
            },
            Server::Kubeconfig => ServerLog::None,
        })
    }

    /// Watch events the embedded server has sent for `key`
    /// (`group/plural`); `None` on another server, which does not count them.
    pub fn watch_events_sent(&self, key: &str) -> Option<u64> {
        match &self.server {
            Server::Embedded => Some(self.bed.cluster.api().watch_events_sent(key)),
            Server::ControlPlane(_) | Server::Kubeconfig => None,
        }
    }

    /// The name prefix of the simulated nodes.
    pub fn node_prefix(&self) -> String {
        self.bed.cluster.config().node_prefix.clone()
    }

    /// Stops the simulation. On a cluster of `--kubeconfig` what the run
    /// made there is deleted; a control plane this process started is
    /// stopped with its data instead (deleting 20,000 pods first would only
    /// cost minutes).
    /// With `keep_audit`, the control plane's audit log is copied there
    /// first (a failure is reported on stderr; the figures are out).
    pub async fn finish_run(self, keep_audit: Option<&Path>) {
        match self.server {
            Server::Embedded => {
                self.bed.cluster.shutdown().await;
                // The kubeconfig this run wrote for its embedded server.
                if let Some(dir) = self.kubeconfig.parent() {
                    let _ = std::fs::remove_dir_all(dir);
                }
            }
            Server::Kubeconfig => self.bed.cleanup().await,
            Server::ControlPlane(cp) => {
                if let (Some(to), Some(from)) = (keep_audit, cp.audit_log_path())
                    && let Err(e) = std::fs::copy(from, to)
                {
                    eprintln!("sim: copying the audit log to {}: {e}", to.display());
                }
                // The operators and KWOK first (the keeper holds a handle
                // of the control plane too), then the control plane.
                if let Some(k) = self.keeper {
                    tokio::task::spawn_blocking(move || k.stop()).await.ok();
                }
                drop(cp);
                self.bed.abandon().await;
            }
        }
    }
}

/// Whether a PyTorchJob's `Running` condition is true.
fn job_running(j: &DynamicObject) -> bool {
    j.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Running" && c["status"] == "True")
}

/// The server's side of the measurement.
pub enum ServerLog {
    /// The embedded server's request log.
    Embedded,
    /// The audit log of a control plane this process started.
    Audit(AuditCursor),
    /// None readable (a cluster of `--kubeconfig`).
    None,
}

impl ServerLog {
    /// What was logged since [`SimEnv::server_log_from_now`], and the
    /// clock's name; `None` without a log.
    pub fn read(&self, env: &SimEnv) -> Result<Option<(Vec<ServerRequest>, String)>, EnvError> {
        Ok(match self {
            ServerLog::Embedded => Some((
                env.bed
                    .cluster
                    .api()
                    .requests()
                    .iter()
                    .map(ServerRequest::from_record)
                    .collect(),
                "embedded request log".to_owned(),
            )),
            ServerLog::Audit(cursor) => {
                let (reqs, bad) = cursor.read()?;
                if bad > 0 {
                    tracing::debug!(lines = bad, "audit log lines that are no events");
                }
                Some((reqs, "kube-apiserver audit log".to_owned()))
            }
            ServerLog::None => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two embedded environments of one process (the tests measure side by
    /// side) each get a kubeconfig of their own, naming their own server;
    /// a shared one pointed the first run's watches at the second's server.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_embedded_environment_has_its_own_kubeconfig() {
        let args = SimArgs::from_flags(&["--nodes", "2", "--in-process"]).expect("flags");
        let cfg = || SimConfig {
            nodes: 2,
            ..SimConfig::default()
        };
        let a = SimEnv::start(&args, cfg()).await.expect("first");
        let b = SimEnv::start(&args, cfg()).await.expect("second");
        assert_ne!(a.kubeconfig, b.kubeconfig);
        for env in [&a, &b] {
            let text = std::fs::read_to_string(&env.kubeconfig).expect("kubeconfig");
            assert!(
                text.contains(&env.bed.cluster.api().url()),
                "{} names its own server {}: {text}",
                env.kubeconfig.display(),
                env.bed.cluster.api().url()
            );
        }
        let dir = a.kubeconfig.parent().map(Path::to_owned).expect("dir");
        a.finish_run(None).await;
        assert!(!dir.exists(), "removed with its run");
        assert!(b.kubeconfig.exists(), "the other run's stays");
        b.finish_run(None).await;
    }
}
