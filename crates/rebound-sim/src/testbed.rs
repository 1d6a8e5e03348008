//! A simulated cluster with rebound's CRDs, the samples and the controller:
//! the common ground of `rebound demo`, `rebound sim` and the end-to-end
//! tests.
//!
//! Two kinds: [`Testbed::start`] owns an embedded API server with every
//! simulated actor; [`Testbed::connect`] shares a cluster it does not own
//! (named by a kubeconfig, e.g. `REBOUND_E2E_KUBECONFIG`, or the
//! process's real control plane, [`Testbed::real`]): it installs the CRDs,
//! adds fake nodes and per-run namespaces, runs the simulated actors
//! against them and removes what it made when dropped. Tests name
//! namespaces through [`Testbed::ns`], which is the identity on the
//! embedded server and adds the run's suffix on a shared one.
//!
//! A shared bed talks to its cluster through the test bed's proxy
//! (`super::proxy`), so both kinds keep a request log
//! ([`Testbed::requests`]) and take injected faults ([`Testbed::inject`]);
//! pod logs a test sets ([`Testbed::set_pod_log`]) are served by the
//! server itself (embedded) or by the fake nodes' kubelet endpoint
//! (`super::kubelet_logs`) that a real server dials.

mod agent_rbac;
mod cleanup;
mod connect;
mod endings;
mod faults;
mod rbac;

pub use agent_rbac::{grant_restart_agent, install_cluster_roles, install_restart_agent_role};
pub use endings::check_restart_endings;
pub use faults::Injector;

use cleanup::{Made, remove_shared};

use super::RequestRecord;
use super::cluster::{SharedCluster, SimCluster, SimConfig};
use super::kubelet_logs::KubeletLogs;
use super::proxy::Proxy;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use rebound::controller::{ControllerArgs, ControllerHandle};
use rebound_core::api::{FaultClassification, RecoveryPolicy};
use rebound_core::explain::load::{Loaded, load_str};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

/// The environment variable naming the kubeconfig of a real cluster for
/// the end-to-end suite's real-server runs ([`Testbed::real`]); unset, they
/// use this process's envtest control plane (`super::envtest::shared`).
pub const KUBECONFIG_ENV: &str = "REBOUND_E2E_KUBECONFIG";

/// The environment variable with the address a real API server reaches
/// the test process at, for the fake nodes' kubelet log endpoint (e.g. the
/// docker network gateway for kind); unset, loopback addresses
/// (`127.1.0.1`...), right for a control plane on this machine.
pub const KUBELET_IP_ENV: &str = "REBOUND_E2E_KUBELET_IP";

/// Which API server a bed runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    /// The in-process embedded server ([`Testbed::start`]).
    Embedded,
    /// A real kube-apiserver ([`Testbed::real`]).
    Real,
}

impl std::fmt::Display for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Server::Embedded => "embedded",
            Server::Real => "real",
        })
    }
}

/// One shared-cluster bed at a time per process: its controller watches
/// every node and classification of the cluster, so two at once would act
/// on each other's fake nodes.
static SHARED_LOCK: LazyLock<Arc<tokio::sync::Mutex<()>>> =
    LazyLock::new(|| Arc::new(tokio::sync::Mutex::new(())));

/// What a bed on a shared cluster made there, to remove it again.
struct SharedRun {
    /// The run's suffix of namespaces and fake node names.
    id: String,
    /// Client configuration from the kubeconfig (a new client is made for
    /// the clean-up, which may run on another runtime).
    config: kube::Config,
    namespaces: Mutex<Vec<String>>,
    classifications: Mutex<Vec<String>>,
    /// RBAC objects made outside the run's namespaces:
    /// `(kind, namespace or "", name)`.
    rbac: Mutex<Vec<(String, String, String)>>,
    /// The fake nodes (their Leases have the same names).
    nodes: Vec<String>,
    /// The fake nodes' name prefix (`rb-<run>-`).
    node_prefix: String,
    /// The server is the bare embedded one (no controller-manager).
    bare_embedded: bool,
    cleaned: bool,
    _turn: tokio::sync::OwnedMutexGuard<()>,
}

/// Errors setting up the test bed.
#[derive(Debug, thiserror::Error)]
pub enum TestbedError {
    #[error("simulated cluster: {0}")]
    Cluster(#[from] super::cluster::ClusterError),
    #[error("embedded API server: {0}")]
    Server(#[from] super::SimError),
    /// Boxed: the largest error by far, and rare.
    #[error("{0}")]
    Load(Box<rebound_core::explain::LoadError>),
    #[error("API: {0}")]
    Kube(#[from] kube::Error),
    #[error("controller: {0}")]
    Start(#[from] rebound::controller::StartError),
    #[error("{0}")]
    Proxy(#[from] super::proxy::ProxyError),
    #[error("{0}")]
    KubeletLogs(#[from] super::kubelet_logs::KubeletLogsError),
    /// No real API server to run on (no assets, no etcd, no kubeconfig).
    #[error("no real API server: {0}")]
    NoRealServer(String),
    #[error("{0}")]
    Other(String),
}

impl From<rebound_core::explain::LoadError> for TestbedError {
    fn from(e: rebound_core::explain::LoadError) -> Self {
        TestbedError::Load(Box::new(e))
    }
}

/// The root namespace used by the test bed.
pub const ROOT: &str = "rebound-system";

/// A simulated cluster ready for rebound.
pub struct Testbed {
    /// First, so that a bed dropped reads its Events before anything of it
    /// stops or is removed.
    ends: endings::Guard,
    pub cluster: SimCluster,
    /// Client configuration of the controller (before its User-Agent).
    config: kube::Config,
    /// `Some` on a shared cluster.
    shared: Option<SharedRun>,
    /// The recording proxy a shared bed talks through.
    proxy: Option<Proxy>,
    /// The fake nodes' kubelet log endpoint (a real server only).
    kubelet_logs: Option<KubeletLogs>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn push_unique(m: &Mutex<Vec<String>>, v: &str) {
    let mut l = lock(m);
    if !l.iter().any(|x| x == v) {
        l.push(v.to_owned());
    }
}

async fn config_from(kc: kube::config::Kubeconfig) -> Result<kube::Config, TestbedError> {
    kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| TestbedError::Other(format!("kubeconfig: {e}")))
}

impl Testbed {
    /// Start a cluster with rebound's CRDs registered and the root namespace.
    pub async fn start(mut cfg: SimConfig) -> Result<Testbed, TestbedError> {
        for ns in [ROOT, "team-a", "team-b"] {
            if !cfg.namespaces.iter().any(|n| n == ns) {
                cfg.namespaces.push(ns.to_string());
            }
        }
        let cluster = SimCluster::start(cfg).await?;
        let crds =
            rebound_core::api::crds_yaml().map_err(|e| TestbedError::Other(e.to_string()))?;
        cluster.api().register_crds_yaml(&crds).await?;
        let kc = kube::config::Kubeconfig::from_yaml(&cluster.api().kubeconfig_yaml())
            .map_err(|e| TestbedError::Other(e.to_string()))?;
        let config = config_from(kc).await?;
        Ok(Testbed {
            ends: endings::Guard::embedded(cluster.api()),
            cluster,
            config,
            shared: None,
            proxy: None,
            kubelet_logs: None,
        })
    }

    /// A bed on `server`: [`Self::start`] or [`Self::real`].
    pub async fn on(server: Server, cfg: SimConfig) -> Result<Testbed, TestbedError> {
        match server {
            Server::Embedded => Self::start(cfg).await,
            Server::Real => Self::real(cfg).await,
        }
    }

    /// Whether the bed shares a cluster it does not own.
    pub fn is_shared(&self) -> bool {
        self.shared.is_some()
    }

    /// Whether the bed runs on a real API server (shared, and not the
    /// bare embedded one of `rebound sim-server`).
    pub fn is_real(&self) -> bool {
        self.shared.as_ref().is_some_and(|r| !r.bare_embedded)
    }

    /// Whether the job kinds' real operators run on the bed's cluster (the
    /// real server of this process: `crate::envtest::operators`), instead
    /// of the simulated ones.
    pub fn runs_real_operators(&self) -> bool {
        self.cluster
            .config()
            .shared
            .as_ref()
            .is_some_and(|s| s.real_operators)
    }

    /// The server kind of the bed.
    pub fn server(&self) -> Server {
        if self.is_real() {
            Server::Real
        } else {
            Server::Embedded
        }
    }

    /// Snapshot of the request log: the embedded server's own, or the
    /// proxy's on a shared cluster (the requests of the bed, its actors and
    /// its controllers; not those of the cluster's own components).
    pub fn requests(&self) -> Vec<RequestRecord> {
        match &self.proxy {
            Some(p) => p.requests(),
            None => self.cluster.api().requests(),
        }
    }

    /// Every request logged after this call, as it is answered.
    pub fn subscribe_requests(&self) -> tokio::sync::broadcast::Receiver<RequestRecord> {
        match &self.proxy {
            Some(p) => p.subscribe_requests(),
            None => self.cluster.api().subscribe_requests(),
        }
    }

    /// Forgets the logged requests.
    pub fn clear_requests(&self) {
        match &self.proxy {
            Some(p) => p.clear_requests(),
            None => self.cluster.api().clear_requests(),
        }
    }

    /// Fault injection: the embedded server's own, or the proxy's.
    pub fn inject(&self) -> Injector<'_> {
        match &self.proxy {
            Some(p) => Injector::Proxy(p.inject()),
            None => Injector::Embedded(self.cluster.api().inject()),
        }
    }

    /// An API server outage, as a restart: every connection and watch is
    /// cut. Behind the proxy new connections are refused for `down`; the
    /// embedded server restarts at once (same data, same port).
    pub async fn interrupt_api_server(&self, down: Duration) -> Result<(), TestbedError> {
        match &self.proxy {
            Some(p) => {
                p.inject().refuse_connections(down);
                Ok(())
            }
            None => Ok(self.cluster.api().restart().await?),
        }
    }

    /// Sets what `pods/log` returns for a container: on the embedded server
    /// directly, on a real one through the fake nodes' kubelet endpoint.
    /// The bare embedded server behind a kubeconfig has no handle for it.
    pub fn set_pod_log(
        &self,
        ns: &str,
        pod: &str,
        container: &str,
        text: String,
    ) -> Result<(), TestbedError> {
        match (&self.shared, &self.kubelet_logs) {
            (None, _) => {
                self.cluster.api().set_pod_log(ns, pod, container, text);
                Ok(())
            }
            (Some(_), Some(k)) => {
                k.set_pod_log(ns, pod, container, text);
                Ok(())
            }
            (Some(_), None) => Err(TestbedError::Other(
                "pod logs cannot be set on a bare embedded server reached by kubeconfig".into(),
            )),
        }
    }

    /// The fake nodes' name prefix (`node-` on the embedded server,
    /// `rb-<run>-` on a shared one): names a test makes up for node-like
    /// objects (device-plugin ConfigMaps of nodes that do not exist) start
    /// with it, so the clean-up finds them.
    pub fn node_prefix(&self) -> String {
        self.cluster.config().node_prefix.clone()
    }

    /// The namespace a test calls `base`: `base` itself on the embedded
    /// server, `<base>-<run>` on a shared cluster, so runs never meet a
    /// namespace another run is still deleting.
    pub fn ns(&self, base: &str) -> String {
        match &self.shared {
            Some(r) => shared_ns(&r.id, base),
            None => base.to_owned(),
        }
    }

    /// The controller's root namespace ([`ROOT`] through [`Self::ns`]).
    pub fn root(&self) -> String {
        self.ns(ROOT)
    }

    /// Creates the namespace a test calls `base` (see [`Self::ns`]) unless
    /// it exists, and returns its name.
    pub async fn ensure_namespace(&self, base: &str) -> Result<String, TestbedError> {
        let ns = self.ns(base);
        if let Some(r) = &self.shared {
            push_unique(&r.namespaces, &ns);
        }
        super::cluster::ensure_namespace(&self.client(), &ns).await?;
        self.wait_for_service_account(&ns).await?;
        Ok(ns)
    }

    /// On a real cluster, waits for the `default` ServiceAccount of `ns`:
    /// ServiceAccount admission refuses pods until the ServiceAccount
    /// controller has made it. The bare embedded server has neither.
    async fn wait_for_service_account(&self, ns: &str) -> Result<(), TestbedError> {
        if self.shared.as_ref().is_some_and(|r| !r.bare_embedded) {
            let sa: Api<k8s_openapi::api::core::v1::ServiceAccount> =
                Api::namespaced(self.client(), ns);
            super::cluster::wait_for(
                Duration::from_secs(30),
                &format!("{ns}/default ServiceAccount"),
                || {
                    let sa = sa.clone();
                    async move { Ok(sa.get_opt("default").await?.map(|_| ())) }
                },
            )
            .await?;
        }
        Ok(())
    }

    /// Removes what a shared-cluster bed made (namespaces and their pods,
    /// fake nodes and their Leases, classifications) and lets the next bed
    /// have its turn; the simulated actors stop first, so nothing is
    /// recreated. Dropping the bed does the same; the embedded bed has
    /// nothing to remove.
    pub async fn cleanup(self) {
        if let Some(mut r) = self.stop().await {
            match kube::Client::try_from(r.config.clone()) {
                Ok(client) => remove_shared(&client, &Made::of(&r)).await,
                Err(e) => tracing::warn!(error = %e, "test bed clean-up: no client"),
            }
            r.cleaned = true;
        }
    }

    /// Ends the bed without removing what it made, for a cluster that is
    /// gone (a control plane this process stopped: the clean-up would only
    /// meet a closed port, once per object it made). Its actors and proxy
    /// stop, and the turn passes to the next bed of the process: a bed
    /// forgotten instead held it for good, and every later real-server
    /// test of the binary waited for it until the watchdog ended the run.
    pub async fn abandon(mut self) {
        self.ends.cluster_gone();
        if let Some(mut r) = self.stop().await {
            r.cleaned = true;
        }
    }

    /// Stops the bed's actors, its kubelet log endpoint and its proxy;
    /// returns its run on a shared cluster, for the caller to clean up or
    /// not (its drop releases the turn).
    async fn stop(self) -> Option<SharedRun> {
        let Testbed {
            ends,
            cluster,
            shared,
            proxy,
            kubelet_logs,
            ..
        } = self;
        drop(ends);
        cluster.shutdown().await;
        drop(kubelet_logs);
        if let Some(p) = proxy {
            p.shutdown().await;
        }
        shared
    }

    /// The cluster's client.
    pub fn client(&self) -> kube::Client {
        self.cluster.client()
    }

    /// Create or replace the rebound objects of a YAML text.
    pub async fn apply_yaml(&self, yaml: &str) -> Result<usize, TestbedError> {
        let mut loaded = Loaded::default();
        load_str(Path::new("<inline>"), yaml, &mut loaded)?;
        let n = loaded.classifications.len() + loaded.policies.len();
        for (_, fc) in loaded.classifications {
            self.apply_classification(&fc).await?;
        }
        for (_, p) in loaded.policies {
            self.apply_policy(&p).await?;
        }
        Ok(n)
    }

    /// Server-side apply of one classification.
    pub async fn apply_classification(&self, fc: &FaultClassification) -> Result<(), TestbedError> {
        let api: Api<FaultClassification> = Api::all(self.client());
        if let Some(r) = &self.shared {
            push_unique(&r.classifications, &fc.name_any());
        }
        let mut o = fc.clone();
        o.metadata.managed_fields = None;
        let pp = PatchParams::apply("rebound-testbed").force();
        api.patch(&o.name_any(), &pp, &Patch::Apply(&o)).await?;
        Ok(())
    }

    /// Create or replace one policy (namespace `default` when unset; the
    /// namespace goes through [`Self::ns`]).
    pub async fn apply_policy(&self, p: &RecoveryPolicy) -> Result<(), TestbedError> {
        let ns = self
            .ensure_namespace(&p.namespace().unwrap_or_else(|| "default".into()))
            .await?;
        let api: Api<RecoveryPolicy> = Api::namespaced(self.client(), &ns);
        let mut o = p.clone();
        o.metadata.namespace = Some(ns);
        match api.get_opt(&o.name_any()).await? {
            Some(cur) => {
                o.metadata.resource_version = cur.metadata.resource_version;
                api.replace(&o.name_any(), &PostParams::default(), &o)
                    .await?;
            }
            None => {
                api.create(&PostParams::default(), &o).await?;
            }
        }
        Ok(())
    }

    /// Apply every shipped sample.
    pub async fn apply_samples(&self) -> Result<usize, TestbedError> {
        let mut n = 0;
        for (_, yaml) in rebound_core::samples::SAMPLES {
            n += self.apply_yaml(yaml).await?;
        }
        Ok(n)
    }

    /// Controller flags for the test bed: root namespace, a free metrics
    /// port, short lease and status intervals.
    pub fn controller_args(&self) -> ControllerArgs {
        let mut a = ControllerArgs::defaults();
        a.root_namespace = Some(self.root());
        a.listen = "127.0.0.1:0".parse().unwrap_or(a.listen);
        a.lease_duration = Duration::from_secs(3);
        a.status_interval = Duration::from_millis(500);
        a.qps = 0.0;
        a
    }

    /// A client that identifies itself as the controller does
    /// (User-Agent `rebound-controller/<version>`), so the request log tells
    /// its requests from the simulated actors'.
    pub async fn controller_client(&self) -> Result<kube::Client, TestbedError> {
        let mut cfg = self.config.clone();
        rebound::controller::identify(&mut cfg);
        kube::Client::try_from(cfg).map_err(TestbedError::Kube)
    }

    /// Start a controller and wait until it leads and its caches are filled.
    pub async fn start_controller(
        &self,
        args: ControllerArgs,
    ) -> Result<ControllerHandle, TestbedError> {
        self.start_controller_as(self.controller_client().await?, args)
            .await
    }

    /// [`Self::start_controller`] with a client of the caller's (another
    /// identity, see [`Self::controller_client_with_rbac`]).
    pub async fn start_controller_as(
        &self,
        client: kube::Client,
        args: ControllerArgs,
    ) -> Result<ControllerHandle, TestbedError> {
        let h = rebound::controller::start(client, args).await?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !(h.health.ready.load(std::sync::atomic::Ordering::Relaxed) && h.leader.is_leader()) {
            if tokio::time::Instant::now() > deadline {
                return Err(TestbedError::Other(
                    "controller not ready and leading within 20s".into(),
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(h)
    }
}

/// The namespace `base` of run `id` on a shared cluster.
fn shared_ns(id: &str, base: &str) -> String {
    format!("{base}-{id}")
}

/// The address of the first fake node's kubelet endpoint.
fn kubelet_ip() -> Result<std::net::Ipv4Addr, TestbedError> {
    match std::env::var(KUBELET_IP_ENV) {
        Ok(v) if !v.is_empty() => v
            .parse()
            .map_err(|e| TestbedError::Other(format!("{KUBELET_IP_ENV}={v:?}: {e}"))),
        _ => Ok(super::kubelet_logs::FIRST_LOOPBACK_IP),
    }
}
