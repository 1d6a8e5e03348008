//! A real Kubernetes control plane on loopback, the way controller-runtime's
//! envtest starts one: etcd, kube-apiserver and (optionally)
//! kube-controller-manager from a directory of binaries
//! (`REBOUND_TEST_ASSETS`, else the set `tools/real-components/build`
//! makes from the Kubernetes Go module), with random
//! ports, a temporary data directory on tmpfs, certificates made in-process
//! and a static admin token.
//!
//! The end-to-end suite runs every test against the embedded server and
//! against this; `rebound sim --assets DIR` measures against it. There is
//! no kubelet and no scheduler: the simulated ones of `crates/rebound-sim/src/actors` play
//! them over the API, as on any shared cluster.
//!
//! The child processes die with the process that started them
//! (`PR_SET_PDEATHSIG`), so a test binary that exits or panics leaves none
//! behind; data directories of dead processes are removed by the next
//! start.

use std::path::{Path, PathBuf};

mod assets;
mod components;
mod pki;
mod process;
use process::{die_with_parent, free_port, sweep_stale, tail};
pub mod kwok;
pub mod node;
pub mod oci;
pub mod operators;
pub use assets::{
    Assets, AssetsError, NodeAssets, node_assets_in, resolve_assets, resolve_node_assets,
    resolve_scheduler,
};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The environment variable naming the directory with `kube-apiserver`,
/// `kube-controller-manager` and `kubectl` (and optionally `etcd`).
pub const ASSETS_ENV: &str = "REBOUND_TEST_ASSETS";

/// Set to `1`, a missing real control plane fails the tests that need one
/// instead of letting them skip (CI sets it, so nothing skips there).
pub const REQUIRE_ENV: &str = "REBOUND_REQUIRE_REAL_SERVER";

/// The admin's bearer token (in `system:masters`).
const ADMIN_TOKEN: &str = "rebound-envtest-admin";

/// Why the control plane could not start.
#[derive(Debug, thiserror::Error)]
pub enum EnvtestError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("certificates: {0}")]
    Cert(#[from] rcgen::Error),
    #[error(
        "{name} is not in {dir} (set {ASSETS_ENV} to a directory of the Kubernetes binaries, or unset it to use tools/real-components/build's)"
    )]
    MissingBinary { name: String, dir: PathBuf },
    #[error("{name} exited during start-up ({status}); last log lines:\n{log}")]
    Exited {
        name: String,
        status: String,
        log: String,
    },
    #[error("{name} not ready within {after:?}; last log lines:\n{log}")]
    NotReady {
        name: String,
        after: Duration,
        log: String,
    },
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    #[error("{0}")]
    Assets(#[from] AssetsError),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> EnvtestError {
    let what = what.into();
    move |source| EnvtestError::Io { what, source }
}

/// What to start.
#[derive(Debug, Clone)]
pub struct ControlPlaneConfig {
    /// Directory of `kube-apiserver` and `kube-controller-manager`.
    pub assets: PathBuf,
    /// The etcd binary: `assets/etcd` if present, else `etcd` on `PATH`
    /// (Debian's `etcd-server`).
    pub etcd: Option<PathBuf>,
    /// Run kube-controller-manager too (garbage collection, namespace
    /// deletion, ServiceAccounts, batch Jobs, node lifecycle).
    pub controller_manager: bool,
    /// Extra kube-apiserver flags (`--max-requests-inflight=...`).
    pub apiserver_flags: Vec<String>,
    /// Extra kube-controller-manager flags (`--node-monitor-grace-period=...`).
    pub controller_manager_flags: Vec<String>,
    /// Run kube-scheduler too, this binary (the test bed's pods are bound
    /// by the simulated scheduler otherwise; `rebound sim --real-scheduler`
    /// starts the real one). Its default profile, `default-scheduler`.
    pub scheduler: Option<PathBuf>,
    /// Extra kube-scheduler flags (`--feature-gates=...`), when
    /// [`Self::scheduler`] runs.
    pub scheduler_flags: Vec<String>,
    /// An audit policy (YAML of `audit.k8s.io/v1` `Policy`): with one, the
    /// API server writes its audit log (JSON lines, not rotated, written
    /// before each answer) to [`ControlPlane::audit_log_path`]. Its events
    /// carry `requestReceivedTimestamp` and `stageTimestamp` in
    /// microseconds: the server-side clock `rebound sim` measures reaction
    /// with on a real server, which has no request log of its own.
    pub audit_policy: Option<String>,
}

impl ControlPlaneConfig {
    /// The configuration of the assets [`resolve_assets`] finds for this
    /// project ([`ASSETS_ENV`], else the built Kubernetes set), or why
    /// there are none.
    pub fn resolve() -> Result<ControlPlaneConfig, AssetsError> {
        resolve_assets(Path::new(crate::PROJECT_ROOT)).map(|a| Self::from_assets(&a))
    }

    /// Everything from resolved assets (see [`resolve_assets`]).
    pub fn from_assets(assets: &Assets) -> ControlPlaneConfig {
        ControlPlaneConfig {
            etcd: Some(assets.etcd.clone()),
            ..ControlPlaneConfig::new(assets.dir.clone())
        }
    }

    /// Everything from `assets`, with the controller manager.
    pub fn new(assets: PathBuf) -> ControlPlaneConfig {
        ControlPlaneConfig {
            assets,
            etcd: None,
            controller_manager: true,
            apiserver_flags: Vec::new(),
            controller_manager_flags: Vec::new(),
            scheduler: None,
            scheduler_flags: Vec::new(),
            audit_policy: None,
        }
    }
}

/// A running control plane. Dropping it stops the processes and removes
/// the data directory.
pub struct ControlPlane {
    dir: PathBuf,
    children: Vec<(String, Child)>,
    url: String,
    kubeconfig: PathBuf,
    kubectl: PathBuf,
    audit_log: Option<PathBuf>,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("url", &self.url)
            .field("dir", &self.dir)
            .finish()
    }
}

impl ControlPlane {
    /// Start etcd, kube-apiserver and (if asked) kube-controller-manager
    /// and wait until the API server is ready (a few seconds on 2 cores).
    /// Blocking: call it from a thread that lives as long as the control
    /// plane should (see [`shared`]).
    pub fn start(cfg: &ControlPlaneConfig) -> Result<ControlPlane, EnvtestError> {
        let apiserver = cfg.assets.join("kube-apiserver");
        let kcm = cfg.assets.join("kube-controller-manager");
        let scheduler = cfg.scheduler.clone().unwrap_or_default();
        for (bin, needed) in [
            (&apiserver, true),
            (&kcm, cfg.controller_manager),
            (&scheduler, cfg.scheduler.is_some()),
        ] {
            if needed && !bin.is_file() {
                return Err(EnvtestError::MissingBinary {
                    name: bin
                        .file_name()
                        .map(|n| n.to_string_lossy().to_string())
                        .unwrap_or_default(),
                    dir: cfg.assets.clone(),
                });
            }
        }
        let etcd = cfg.etcd.clone().unwrap_or_else(|| {
            let local = cfg.assets.join("etcd");
            if local.is_file() {
                local
            } else {
                PathBuf::from("etcd")
            }
        });
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        sweep_stale(&base);
        let dir = base.join(format!(
            "rebound-envtest-{}-{}",
            std::process::id(),
            crate::actors::util::name_suffix()
        ));
        std::fs::create_dir_all(dir.join("etcd")).map_err(io("data directory"))?;
        let mut cp = ControlPlane {
            dir: dir.clone(),
            children: Vec::new(),
            url: String::new(),
            kubeconfig: dir.join("admin.kubeconfig"),
            kubectl: cfg.assets.join("kubectl"),
            audit_log: None,
        };
        let pki = pki::pki()?;
        let write = |name: &str, body: &str| -> Result<PathBuf, EnvtestError> {
            let p = dir.join(name);
            std::fs::write(&p, body).map_err(io(format!("write {name}")))?;
            Ok(p)
        };
        let ca_crt = write("ca.crt", &pki.ca_cert)?;
        let ca_key = write("ca.key", &pki.ca_key)?;
        let srv_crt = write("apiserver.crt", &pki.server_cert)?;
        let srv_key = write("apiserver.key", &pki.server_key)?;
        let sa_key = write("sa.key", &pki.sa_key)?;
        let sa_pub = write("sa.pub", &pki.sa_pub)?;
        let tokens = write(
            "tokens.csv",
            &format!("{ADMIN_TOKEN},rebound-envtest-admin,rebound-envtest-admin,system:masters\n"),
        )?;

        let (client_port, peer_port) = (free_port()?, free_port()?);
        let client_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let mut c = Command::new(&etcd);
        c.args(["--name", "t", "--data-dir"])
            .arg(dir.join("etcd"))
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("t={peer_url}")])
            .args(["--initial-cluster-state", "new"])
            .args(["--quota-backend-bytes", "4294967296"])
            .args(["--auto-compaction-retention", "1"]);
        cp.spawn("etcd", c)?;

        let port = free_port()?;
        cp.url = format!("https://127.0.0.1:{port}");
        let p = |p: &PathBuf| p.to_string_lossy().to_string();
        let mut c = Command::new(&apiserver);
        c.arg(format!("--etcd-servers={client_url}"))
            .arg("--bind-address=127.0.0.1")
            .arg("--advertise-address=127.0.0.1")
            .arg(format!("--secure-port={port}"))
            .arg(format!("--cert-dir={}", p(&dir.join("certs"))))
            .arg(format!("--tls-cert-file={}", p(&srv_crt)))
            .arg(format!("--tls-private-key-file={}", p(&srv_key)))
            .arg(format!("--client-ca-file={}", p(&ca_crt)))
            .arg(format!("--token-auth-file={}", p(&tokens)))
            .arg("--authorization-mode=Node,RBAC")
            .arg("--service-account-issuer=https://kubernetes.default.svc.cluster.local")
            .arg(format!("--service-account-key-file={}", p(&sa_pub)))
            .arg(format!("--service-account-signing-key-file={}", p(&sa_key)))
            .arg("--api-audiences=https://kubernetes.default.svc.cluster.local")
            .arg("--service-cluster-ip-range=10.96.0.0/12")
            .arg("--endpoint-reconciler-type=none")
            .arg("--allow-privileged=true")
            .arg("--profiling=false")
            // `pods/log` dials the node's kubelet: the test bed's fake
            // nodes name a loopback InternalIP where its log endpoint
            // listens (crates/rebound-sim/src/kubelet_logs.rs).
            .arg("--kubelet-preferred-address-types=InternalIP")
            .args(&cfg.apiserver_flags);
        if let Some(policy) = &cfg.audit_policy {
            let policy_file = write("audit-policy.yaml", policy)?;
            let log = dir.join("audit.log");
            c.arg(format!("--audit-policy-file={}", p(&policy_file)))
                .arg(format!("--audit-log-path={}", p(&log)))
                .arg("--audit-log-format=json")
                .arg("--audit-log-mode=blocking")
                .arg("--audit-log-maxsize=0");
            cp.audit_log = Some(log);
        }
        cp.spawn("kube-apiserver", c)?;
        cp.write_kubeconfig()?;
        cp.wait_ready("kube-apiserver", Duration::from_secs(60))?;

        if cfg.controller_manager {
            cp.start_controller_manager(
                &kcm,
                &sa_key,
                &ca_crt,
                &ca_key,
                &cfg.controller_manager_flags,
            )?;
        }
        if let Some(bin) = &cfg.scheduler {
            cp.start_scheduler(bin, &cfg.scheduler_flags)?;
        }
        Ok(cp)
    }

    fn spawn(&mut self, name: &str, mut cmd: Command) -> Result<(), EnvtestError> {
        let log = std::fs::File::create(self.dir.join(format!("{name}.log")))
            .map_err(io(format!("{name} log")))?;
        let err = log.try_clone().map_err(io(format!("{name} log")))?;
        cmd.stdin(Stdio::null()).stdout(log).stderr(err);
        die_with_parent(&mut cmd);
        let child = cmd.spawn().map_err(io(format!("start {name}")))?;
        self.children.push((name.to_string(), child));
        Ok(())
    }

    fn write_kubeconfig(&self) -> Result<(), EnvtestError> {
        std::fs::write(&self.kubeconfig, self.kubeconfig_yaml()).map_err(io("write the kubeconfig"))
    }

    /// Poll `/readyz` with the admin token; fail early if a child exited.
    fn wait_ready(&mut self, name: &str, within: Duration) -> Result<(), EnvtestError> {
        let start = Instant::now();
        let port = self
            .url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse::<u16>().ok())
            .unwrap_or_default();
        loop {
            for (n, c) in &mut self.children {
                if let Ok(Some(status)) = c.try_wait() {
                    return Err(EnvtestError::Exited {
                        name: n.clone(),
                        status: status.to_string(),
                        log: tail(&self.dir.join(format!("{n}.log")), 30),
                    });
                }
            }
            if readyz(port) {
                return Ok(());
            }
            if start.elapsed() > within {
                return Err(EnvtestError::NotReady {
                    name: name.to_string(),
                    after: within,
                    log: tail(&self.dir.join(format!("{name}.log")), 30),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The admin kubeconfig (token in `system:masters`, the CA inline).
    pub fn kubeconfig_yaml(&self) -> String {
        let ca = self.dir.join("ca.crt");
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: envtest\n  cluster:\n    server: {url}\n    certificate-authority: {ca}\nusers:\n- name: admin\n  user:\n    token: {ADMIN_TOKEN}\ncontexts:\n- name: envtest\n  context: {{cluster: envtest, user: admin}}\ncurrent-context: envtest\n",
            url = self.url,
            ca = ca.display()
        )
    }

    /// Where the admin kubeconfig is written.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The `kubectl` of the assets (it may not exist).
    pub fn kubectl(&self) -> &Path {
        &self.kubectl
    }

    /// The API server's audit log, when [`ControlPlaneConfig::audit_policy`]
    /// asked for one.
    pub fn audit_log_path(&self) -> Option<&Path> {
        self.audit_log.as_deref()
    }

    /// The data and log directory (`etcd/`, `*.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A client configuration for the admin (call within a Tokio runtime).
    pub async fn client_config(&self) -> Result<kube::Config, EnvtestError> {
        let kc = kube::config::Kubeconfig::from_yaml(&self.kubeconfig_yaml())
            .map_err(|e| EnvtestError::Kubeconfig(e.to_string()))?;
        kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .map_err(|e| EnvtestError::Kubeconfig(e.to_string()))
    }

    /// Stop every process (controller manager first) and remove the data.
    pub fn stop(&mut self) {
        for (_, c) in self.children.iter_mut().rev() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.children.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `GET /readyz` over TLS with the admin token, on a small runtime of its
/// own (start-up runs on a plain thread).
fn readyz(port: u16) -> bool {
    probe_readyz(port).unwrap_or(false)
}

fn probe_readyz(port: u16) -> Option<bool> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    rt.block_on(async move {
        let mut cfg = kube::Config::new(format!("https://127.0.0.1:{port}").parse().ok()?);
        cfg.accept_invalid_certs = true;
        cfg.auth_info.token = Some(ADMIN_TOKEN.to_string().into());
        let client = kube::Client::try_from(cfg).ok()?;
        let req = axum::http::Request::get("/readyz").body(Vec::new()).ok()?;
        let text = tokio::time::timeout(Duration::from_secs(2), client.request_text(req))
            .await
            .ok()?
            .ok()?;
        Some(text.trim() == "ok")
    })
}

/// Run `start` on a thread that then lives until the process exits, and
/// return what it made. Child processes started with `PR_SET_PDEATHSIG`
/// die with the thread that spawned them, so processes that must live
/// until exit are started on a keeper thread that never ends.
pub(crate) fn on_keeper_thread<T: Send + 'static>(
    name: &str,
    start: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let r = start();
            let ok = r.is_ok();
            let _ = tx.send(r);
            if ok {
                loop {
                    std::thread::park();
                }
            }
        });
    match spawned {
        Ok(_) => rx
            .recv()
            .unwrap_or_else(|_| Err(format!("the {name} thread died"))),
        Err(e) => Err(format!("cannot start the {name} thread: {e}")),
    }
}

/// The control plane of this process, started on first use from the
/// assets [`resolve_assets`] finds for this project, on a thread that
/// lives until the process exits (the processes die with it). An error
/// says why there is none (no assets, no etcd, or a start that failed);
/// whether that skips or fails a test is the caller's choice (see
/// [`REQUIRE_ENV`]). Resolved and started once per process.
pub fn shared() -> Result<&'static ControlPlane, String> {
    static CP: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
    let r = CP.get_or_init(|| {
        let assets = resolve_assets(Path::new(crate::PROJECT_ROOT)).map_err(|e| e.to_string())?;
        let cfg = ControlPlaneConfig::from_assets(&assets);
        on_keeper_thread("envtest-keeper", move || {
            ControlPlane::start(&cfg).map_err(|e| e.to_string())
        })
    });
    r.as_ref().map_err(Clone::clone)
}

/// Whether [`REQUIRE_ENV`] is set to `1` (or `true`).
pub fn real_server_required() -> bool {
    std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}
