//! A simulated cluster with rebound's CRDs, the samples and the controller:
//! the common ground of `rebound demo`, `rebound sim` and the end-to-end
//! tests.
//!
//! Two kinds: [`Testbed::start`] owns an embedded API server with every
//! simulated actor; [`Testbed::connect`] shares a cluster it does not own
//! (named by a kubeconfig, e.g. `REBOUND_E2E_KUBECONFIG`): it installs the
//! CRDs, adds fake nodes and per-run namespaces, runs the simulated actors
//! against them and removes what it made when dropped. Tests name
//! namespaces through [`Testbed::ns`], which is the identity on the
//! embedded server and adds the run's suffix on a shared one.

use super::cluster::{SharedCluster, SimCluster, SimConfig};
use crate::api::{FaultClassification, RecoveryPolicy};
use crate::controller::{ControllerArgs, ControllerHandle};
use crate::explain::load::{Loaded, load_str};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

/// The environment variable naming the kubeconfig of a real cluster for
/// the end-to-end suite; unset, the suite runs on the embedded server.
pub const KUBECONFIG_ENV: &str = "REBOUND_E2E_KUBECONFIG";

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
    /// The fake nodes (their Leases have the same names).
    nodes: Vec<String>,
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
    #[error("{0}")]
    Load(#[from] crate::explain::LoadError),
    #[error("API: {0}")]
    Kube(#[from] kube::Error),
    #[error("controller: {0}")]
    Start(#[from] crate::controller::StartError),
    #[error("{0}")]
    Other(String),
}

/// The root namespace used by the test bed.
pub const ROOT: &str = "rebound-system";

/// A simulated cluster ready for rebound.
pub struct Testbed {
    pub cluster: SimCluster,
    /// Client configuration of the controller (before its User-Agent).
    config: kube::Config,
    /// `Some` on a shared cluster.
    shared: Option<SharedRun>,
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
        let crds = crate::api::crds_yaml().map_err(|e| TestbedError::Other(e.to_string()))?;
        cluster.api().register_crds_yaml(&crds).await?;
        let kc = kube::config::Kubeconfig::from_yaml(&cluster.api().kubeconfig_yaml())
            .map_err(|e| TestbedError::Other(e.to_string()))?;
        let config = config_from(kc).await?;
        Ok(Testbed {
            cluster,
            config,
            shared: None,
        })
    }

    /// The kubeconfig of [`KUBECONFIG_ENV`], if set (and not empty).
    pub fn kubeconfig_from_env() -> Option<PathBuf> {
        std::env::var_os(KUBECONFIG_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    }

    /// [`Self::connect`] to the cluster of [`KUBECONFIG_ENV`] when it is
    /// set, else [`Self::start`] an embedded one.
    pub async fn from_env(cfg: SimConfig) -> Result<Testbed, TestbedError> {
        match Self::kubeconfig_from_env() {
            Some(path) => Self::connect(&path, cfg).await,
            None => Self::start(cfg).await,
        }
    }

    /// Set up on a cluster this process does not own, given its kubeconfig:
    /// waits for this process's turn (one shared bed at a time), installs
    /// rebound's and the simulated operators' CRDs (refusing a cluster
    /// where a real operator owns one), creates the per-run namespaces
    /// (`<name>-<run>`) and `cfg.nodes` fake nodes `rb-<run>-NNNN`, and runs
    /// the simulated scheduler, kubelets and operators against them.
    ///
    /// The batch Job controller is simulated only when the server says it is
    /// the bare embedded one (`/version` ends in `-rebound-sim`); a real
    /// cluster has kube-controller-manager's.
    pub async fn connect(kubeconfig: &Path, mut cfg: SimConfig) -> Result<Testbed, TestbedError> {
        let turn = SHARED_LOCK.clone().lock_owned().await;
        let kc = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| {
            TestbedError::Other(format!("reading kubeconfig {}: {e}", kubeconfig.display()))
        })?;
        let config = config_from(kc).await?;
        let client = kube::Client::try_from(config.clone())?;
        let version = client.apiserver_version().await?;
        let bare_embedded = version.git_version.ends_with("-rebound-sim");
        let id = super::actors::util::name_suffix();
        cfg.node_prefix = format!("rb-{id}-");
        let run = SharedRun {
            id: id.clone(),
            config,
            namespaces: Mutex::new(Vec::new()),
            classifications: Mutex::new(Vec::new()),
            bare_embedded,
            nodes: (0..cfg.nodes)
                .map(|i| format!("{}{i:04}", cfg.node_prefix))
                .collect(),
            cleaned: false,
            _turn: turn,
        };
        for crds in super::cluster::JOB_CRDS {
            super::cluster::install_crds(&client, crds).await?;
        }
        let crds = crate::api::crds_yaml().map_err(|e| TestbedError::Other(e.to_string()))?;
        super::cluster::install_crds(&client, &crds).await?;
        let mut namespaces: Vec<String> =
            cfg.namespaces.iter().map(|n| shared_ns(&id, n)).collect();
        for ns in [ROOT, "team-a", "team-b"] {
            let ns = shared_ns(&id, ns);
            if !namespaces.contains(&ns) {
                namespaces.push(ns);
            }
        }
        for ns in &namespaces {
            push_unique(&run.namespaces, ns);
        }
        cfg.namespaces = namespaces;
        cfg.shared.get_or_insert_with(SharedCluster::default);
        cfg.operators.batch = cfg.operators.batch && bare_embedded;
        let config = run.config.clone();
        // If this fails, dropping `run` removes what was made so far.
        let cluster = SimCluster::connect(client, cfg).await?;
        let bed = Testbed {
            cluster,
            config,
            shared: Some(run),
        };
        for ns in bed.shared.iter().flat_map(|r| lock(&r.namespaces).clone()) {
            bed.wait_for_service_account(&ns).await?;
        }
        tracing::info!(run = %id, bare_embedded, "shared-cluster test bed ready");
        Ok(bed)
    }

    /// Whether the bed shares a cluster it does not own (no request log,
    /// fault injection or server restart there).
    pub fn is_shared(&self) -> bool {
        self.shared.is_some()
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
        let Testbed {
            cluster, shared, ..
        } = self;
        let client = cluster.client();
        cluster.shutdown().await;
        if let Some(mut r) = shared {
            remove_shared(&client, &Made::of(&r)).await;
            r.cleaned = true;
        }
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
        for (_, yaml) in super::samples::SAMPLES {
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
        crate::controller::identify(&mut cfg);
        kube::Client::try_from(cfg).map_err(TestbedError::Kube)
    }

    /// Start a controller and wait until it leads and its caches are filled.
    pub async fn start_controller(
        &self,
        args: ControllerArgs,
    ) -> Result<ControllerHandle, TestbedError> {
        let h = crate::controller::start(self.controller_client().await?, args).await?;
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

impl Drop for SharedRun {
    /// A shared-cluster bed not cleaned up (a test that panicked) is
    /// cleaned here, on a thread with its own runtime since Drop cannot
    /// wait on the test's; the turn passes to the next bed only after.
    fn drop(&mut self) {
        if self.cleaned {
            return;
        }
        let config = self.config.clone();
        let made = Made::of(self);
        let done = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            match rt {
                Ok(rt) => rt.block_on(async {
                    match kube::Client::try_from(config) {
                        Ok(client) => remove_shared(&client, &made).await,
                        Err(e) => tracing::warn!(error = %e, "test bed clean-up: no client"),
                    }
                }),
                Err(e) => tracing::warn!(error = %e, "test bed clean-up: no runtime"),
            }
        });
        let _ = done.join();
    }
}

/// The namespace `base` of run `id` on a shared cluster.
fn shared_ns(id: &str, base: &str) -> String {
    format!("{base}-{id}")
}

/// The objects a run made.
struct Made {
    namespaces: Vec<String>,
    classifications: Vec<String>,
    nodes: Vec<String>,
}

impl Made {
    fn of(r: &SharedRun) -> Made {
        Made {
            namespaces: lock(&r.namespaces).clone(),
            classifications: lock(&r.classifications).clone(),
            nodes: r.nodes.clone(),
        }
    }
}

/// Deletes what a run made; failures are logged (a clean-up must go on).
async fn remove_shared(client: &kube::Client, made: &Made) {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
    let dp = kube::api::DeleteParams::default();
    let (namespaces, classifications) = (&made.namespaces, &made.classifications);
    // No kubelet confirms the deletion of a pod on a fake node: pods are
    // deleted at once (grace 0), before and after their namespace (a real
    // Job controller may have made new ones meanwhile).
    let force = kube::api::DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    let ns_api: Api<Namespace> = Api::all(client.clone());
    for round in 0..2 {
        for ns in namespaces {
            let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
            if let Err(e) = pods
                .delete_collection(&force, &kube::api::ListParams::default())
                .await
            {
                tracing::debug!(namespace = %ns, error = %e, "test bed clean-up: pods");
            }
            if round == 0
                && let Err(e) = ns_api.delete(ns, &dp).await
            {
                tracing::debug!(namespace = %ns, error = %e, "test bed clean-up");
            }
        }
    }
    let node_api: Api<Node> = Api::all(client.clone());
    let lease_api: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    for n in &made.nodes {
        if let Err(e) = node_api.delete(n, &dp).await {
            tracing::debug!(node = %n, error = %e, "test bed clean-up");
        }
        if let Err(e) = lease_api.delete(n, &dp).await {
            tracing::debug!(lease = %n, error = %e, "test bed clean-up");
        }
    }
    // The Ascend device plugin's ConfigMaps of the fake nodes, if any.
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), super::actors::ascend::NAMESPACE);
    for n in &made.nodes {
        let name = super::actors::ascend::configmap_name(n);
        if let Err(e) = cms.delete(&name, &dp).await
            && !super::actors::util::is_not_found(&e)
        {
            tracing::debug!(configmap = %name, error = %e, "test bed clean-up");
        }
    }
    let fc_api: Api<FaultClassification> = Api::all(client.clone());
    for fc in classifications {
        if let Err(e) = fc_api.delete(fc, &dp).await {
            tracing::debug!(classification = %fc, error = %e, "test bed clean-up");
        }
    }
}
