//! The real job operators beside the envtest control plane: the Kubeflow
//! training-operator (PyTorchJob, TFJob, MPIJob...), Volcano
//! (vc-webhook-manager, vc-controller-manager, vc-scheduler), JobSet and
//! Kubeflow Trainer v2, as `tools/real-components/build` built them from
//! their Go modules. Each runs as a process on loopback, as the control
//! plane's admin, with the flags and configuration its own install
//! manifests give (rendered with the kubectl and helm built beside it),
//! changed only where a pod's world differs from a loopback process's:
//!
//! - no leader election (one replica), health and webhook ports of their
//!   own on 127.0.0.1, metrics off;
//! - admission webhooks reached through `clientConfig.url` on 127.0.0.1
//!   (there is no Service network here) with a CA the bed makes, instead of
//!   `clientConfig.service`; each operator's own certificate management is
//!   off where its configuration allows, and fed the bed's CA where it
//!   does not (the training-operator's cert-controller);
//! - CRDs, webhook configurations, the ConfigMaps they read and Trainer's
//!   `torch-distributed` runtime applied from those manifests unchanged but
//!   for the webhook addresses.
//!
//! Started once per process, on a keeper thread (the processes die with
//! it, i.e. with the process), after the control plane
//! ([`super::shared`]); started only by the first bed that needs them.

mod launch;
mod manifests;
mod pki;
pub(crate) mod probe;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::process::{die_with_parent, tail};
use super::{ControlPlane, on_keeper_thread};
use crate::components::{self, ComponentsError, Set};

/// Why the operators could not be started.
#[derive(Debug, thiserror::Error)]
pub enum OperatorsError {
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A component or manifest is not built.
    #[error(transparent)]
    Components(#[from] ComponentsError),
    /// A tool (kubectl, helm, openssl) failed.
    #[error("{what} failed: {message}")]
    Tool {
        /// The command.
        what: String,
        /// Its error output.
        message: String,
    },
    /// A rendered manifest is not what this module expects.
    #[error("manifest: {0}")]
    Manifest(String),
    /// An operator exited during start-up.
    #[error("{name} exited during start-up ({status}); last log lines:\n{log}")]
    Exited {
        /// The operator.
        name: String,
        /// Its exit status.
        status: String,
        /// The end of its log.
        log: String,
    },
    /// An operator did not become ready.
    #[error("{name} not ready within {after:?} ({why}); last log lines:\n{log}")]
    NotReady {
        /// The operator.
        name: String,
        /// How long it was given.
        after: Duration,
        /// The last failed check.
        why: String,
        /// The end of its log.
        log: String,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> OperatorsError {
    let what = what.into();
    move |source| OperatorsError::Io { what, source }
}

/// How long each operator may take to become ready (its webhook answering
/// the API server): on 2 loaded cores the Go programs start in 1-5 s.
const READY_WITHIN: Duration = Duration::from_secs(90);

/// The running operators. Dropping it stops them.
pub struct RealOperators {
    dir: PathBuf,
    children: Vec<(String, Child)>,
    kubectl: manifests::Kubectl,
    /// The operators' CRDs (and namespaces), as applied at start.
    crds: Vec<serde_json::Value>,
    crd_names: Vec<String>,
}

impl std::fmt::Debug for RealOperators {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealOperators")
            .field("dir", &self.dir)
            .field(
                "running",
                &self.children.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// The programs and manifests of every operator, found.
pub(crate) struct Built {
    pub(crate) kubectl: PathBuf,
    pub(crate) helm: PathBuf,
    pub(crate) training_operator: PathBuf,
    pub(crate) jobset: PathBuf,
    pub(crate) trainer: PathBuf,
    pub(crate) vc_webhook: PathBuf,
    pub(crate) vc_controllers: PathBuf,
    pub(crate) vc_scheduler: PathBuf,
    /// `manifests/training-operator/manifests`.
    pub(crate) training_operator_manifests: PathBuf,
    /// `manifests/jobset/config`.
    pub(crate) jobset_config: PathBuf,
    /// `manifests/trainer/manifests`.
    pub(crate) trainer_manifests: PathBuf,
    /// The Volcano Helm chart.
    pub(crate) volcano_chart: PathBuf,
}

impl Built {
    /// Everything from the built sets of the project at `root`, with the
    /// kubectl of the control plane.
    pub(crate) fn find(root: &Path, kubectl: &Path) -> Result<Built, OperatorsError> {
        let bin = |set, name| components::bin(root, set, name);
        let man = |set, comp: &str, sub: &str| {
            components::manifests(root, set, comp).map(|d| d.join(sub))
        };
        Ok(Built {
            kubectl: kubectl.to_owned(),
            helm: bin(Set::Operators, "helm")?,
            training_operator: bin(Set::TrainingOperator, "training-operator.v1")?,
            jobset: bin(Set::Operators, "jobset")?,
            trainer: bin(Set::Operators, "trainer-controller-manager")?,
            vc_webhook: bin(Set::Volcano, "vc-webhook-manager")?,
            vc_controllers: bin(Set::Volcano, "vc-controller-manager")?,
            vc_scheduler: bin(Set::Volcano, "vc-scheduler")?,
            training_operator_manifests: man(
                Set::TrainingOperator,
                "training-operator",
                "manifests",
            )?,
            jobset_config: man(Set::Operators, "jobset", "config")?,
            trainer_manifests: man(Set::Operators, "trainer", "manifests")?,
            volcano_chart: man(Set::Volcano, "volcano", "volcano")?,
        })
    }
}

impl RealOperators {
    /// Installs and starts every operator against `cp` and waits until
    /// each one's webhooks answer the API server (a server-side dry run of
    /// one job of each kind is admitted). Blocking: call it from a thread
    /// that lives as long as the operators should (see [`shared`]).
    pub fn start(cp: &ControlPlane) -> Result<RealOperators, OperatorsError> {
        let root = Path::new(crate::PROJECT_ROOT);
        if !cp.kubectl().is_file() {
            return Err(OperatorsError::Tool {
                what: "kubectl".into(),
                message: format!("{} is not there", cp.kubectl().display()),
            });
        }
        let built = Built::find(root, cp.kubectl())?;
        let dir = cp.dir().join("operators");
        std::fs::create_dir_all(&dir).map_err(io("operators' directory"))?;
        let kubectl = manifests::Kubectl::new(&built.kubectl, cp.kubeconfig_path(), &dir);
        let pki = pki::Pki::make(&dir)?;
        let plan = launch::Plan::new(&built, &kubectl, &pki, &dir, cp.kubeconfig_path())?;
        let mut ops = RealOperators {
            dir: dir.clone(),
            children: Vec::new(),
            kubectl: manifests::Kubectl::new(&built.kubectl, cp.kubeconfig_path(), &dir),
            crds: plan.crds_and_namespaces.clone(),
            crd_names: plan.crd_names.clone(),
        };
        // CRDs and namespaces first: the operators list their kinds at
        // start, and the webhooks' objects must be servable.
        kubectl.apply("crds", &plan.crds_and_namespaces)?;
        kubectl.wait_established(&plan.crd_names)?;
        kubectl.apply("objects", &plan.objects)?;
        for (name, cmd) in plan.commands {
            ops.spawn(&name, cmd)?;
        }
        let start = Instant::now();
        for (name, check) in &plan.health {
            ops.wait(name, start, || probe::http_ok(check))?;
        }
        // Each kind's webhooks answer the API server: a server-side dry
        // run of one object through them is admitted.
        for (name, obj) in &plan.dry_runs {
            ops.wait(name, start, || kubectl.dry_run_create(obj))?;
        }
        kubectl.apply("runtimes", &plan.after_ready)?;
        tracing::info!(dir = %dir.display(), "real job operators ready");
        Ok(ops)
    }

    fn spawn(&mut self, name: &str, mut cmd: Command) -> Result<(), OperatorsError> {
        let log = std::fs::File::create(self.log_path(name)).map_err(io(format!("{name} log")))?;
        let err = log.try_clone().map_err(io(format!("{name} log")))?;
        cmd.stdin(Stdio::null()).stdout(log).stderr(err);
        die_with_parent(&mut cmd);
        let child = cmd.spawn().map_err(io(format!("start {name}")))?;
        self.children.push((name.to_owned(), child));
        Ok(())
    }

    /// Polls `ok` until it holds; fails early when an operator exits.
    fn wait(
        &mut self,
        name: &str,
        start: Instant,
        mut ok: impl FnMut() -> Result<(), String>,
    ) -> Result<(), OperatorsError> {
        loop {
            for (n, c) in &mut self.children {
                if let Ok(Some(status)) = c.try_wait() {
                    return Err(OperatorsError::Exited {
                        name: n.clone(),
                        status: status.to_string(),
                        log: tail(&self.dir.join(format!("{n}.log")), 30),
                    });
                }
            }
            let why = match ok() {
                Ok(()) => return Ok(()),
                Err(why) => why,
            };
            if start.elapsed() > READY_WITHIN {
                let log = tail(&self.log_path(name), 30);
                return Err(OperatorsError::NotReady {
                    name: name.to_owned(),
                    after: READY_WITHIN,
                    why,
                    log,
                });
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Applies the operators' CRDs again, as at start, and waits until
    /// they serve: for a test that deleted one (an operator uninstalled).
    /// Blocking (kubectl).
    pub fn restore_crds(&self) -> Result<(), OperatorsError> {
        self.kubectl.apply("crds-restored", &self.crds)?;
        self.kubectl.wait_established(&self.crd_names)
    }

    /// Where an operator's output goes.
    pub fn log_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.log"))
    }

    /// The names of the running operators' processes.
    pub fn names(&self) -> Vec<&str> {
        self.children.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// Stops the process `name` (SIGSTOP) until the guard is dropped
    /// (SIGCONT): an operator that is busy or restarting, as a test needs
    /// it, without losing the state it has. Its watches may time out
    /// meanwhile; it reconnects when it goes on, as after a long GC pause.
    pub fn pause(&self, name: &str) -> Result<Paused, String> {
        let (_, child) = self
            .children
            .iter()
            .find(|(n, _)| n == name)
            .ok_or_else(|| format!("no operator process {name}"))?;
        let pid = i32::try_from(child.id()).map_err(|e| format!("{name}: pid: {e}"))?;
        // SAFETY: kill(2) with a pid of our own child and a valid signal.
        if unsafe { libc::kill(pid, libc::SIGSTOP) } != 0 {
            return Err(format!(
                "SIGSTOP {name}: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(Paused {
            pid,
            name: name.to_owned(),
        })
    }

    /// Stops every operator.
    pub fn stop(&mut self) {
        for (_, c) in self.children.iter_mut().rev() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.children.clear();
    }
}

impl Drop for RealOperators {
    fn drop(&mut self) {
        self.stop();
    }
}

/// An operator stopped by [`RealOperators::pause`]; dropping it lets the
/// operator go on.
#[derive(Debug)]
pub struct Paused {
    pid: i32,
    name: String,
}

impl Paused {
    /// Lets the operator go on (as dropping the guard does).
    pub fn resume(self) {}
}

impl Drop for Paused {
    fn drop(&mut self) {
        // SAFETY: kill(2) with a pid of our own child and a valid signal.
        if unsafe { libc::kill(self.pid, libc::SIGCONT) } != 0 {
            tracing::warn!(operator = %self.name, error = %std::io::Error::last_os_error(), "SIGCONT failed");
        }
    }
}

/// The operators of this process's control plane ([`super::shared`]),
/// started on first use on a thread that lives until the process exits.
/// An error says why there are none; resolved and started once.
pub fn shared() -> Result<&'static RealOperators, String> {
    static OPS: OnceLock<Result<RealOperators, String>> = OnceLock::new();
    let r = OPS.get_or_init(|| {
        let cp = super::shared()?;
        on_keeper_thread("operators-keeper", move || {
            RealOperators::start(cp).map_err(|e| format!("real job operators: {e}"))
        })
    });
    r.as_ref().map_err(Clone::clone)
}
