//! Beds on a cluster the bed does not own: the process's real control
//! plane or a kubeconfig's cluster, one bed at a time per process, through
//! the test bed's proxy, with the run's CRDs, namespaces and fake nodes.

use super::*;

impl Testbed {
    /// Why [`Self::real`] cannot run here, or `None` when it can: the
    /// cluster of [`KUBECONFIG_ENV`] when set, else this process's envtest
    /// control plane (started by this call if it is not yet running).
    pub fn real_server_unavailable() -> Option<String> {
        if Self::kubeconfig_from_env().is_some() {
            return None;
        }
        crate::envtest::shared()
            .err()
            .or_else(|| crate::envtest::operators::shared().err())
    }

    /// A bed on a real API server, through the test bed's proxy: the
    /// cluster of [`KUBECONFIG_ENV`] when set, else this process's envtest
    /// control plane (etcd, kube-apiserver, kube-controller-manager from
    /// the assets `crate::envtest::resolve_assets` finds), started on
    /// first use and shared by every bed of the process, one at a time.
    pub async fn real(mut cfg: SimConfig) -> Result<Testbed, TestbedError> {
        let upstream = Self::real_upstream().await?;
        if Self::kubeconfig_from_env().is_none() {
            // This process's control plane runs the real job operators
            // (started once, blocking for seconds the first time).
            tokio::task::spawn_blocking(crate::envtest::operators::shared)
                .await
                .map_err(|e| TestbedError::NoRealServer(format!("operators' start: {e}")))?
                .map_err(TestbedError::NoRealServer)?;
            cfg.shared
                .get_or_insert_with(SharedCluster::default)
                .real_operators = true;
        }
        Self::connect_config(upstream, cfg).await
    }

    /// The client configuration of the real API server [`Self::real`]
    /// uses (the cluster of [`KUBECONFIG_ENV`], or this process's envtest
    /// control plane as its admin), to reach it without a bed.
    pub async fn real_upstream() -> Result<kube::Config, TestbedError> {
        if let Some(path) = Self::kubeconfig_from_env() {
            let kc = kube::config::Kubeconfig::read_from(&path).map_err(|e| {
                TestbedError::Other(format!("reading kubeconfig {}: {e}", path.display()))
            })?;
            return config_from(kc).await;
        }
        // Starting the control plane blocks for seconds (once per process).
        let cp = tokio::task::spawn_blocking(crate::envtest::shared)
            .await
            .map_err(|e| TestbedError::NoRealServer(format!("control plane start: {e}")))?
            .map_err(TestbedError::NoRealServer)?;
        cp.client_config()
            .await
            .map_err(|e| TestbedError::NoRealServer(e.to_string()))
    }

    /// This process's turn on the shared cluster, as a bed takes it: for a
    /// test that uses the real server without a bed, while no bed's
    /// controller (which watches every namespace) runs beside it.
    pub async fn exclusive_turn() -> tokio::sync::OwnedMutexGuard<()> {
        SHARED_LOCK.clone().lock_owned().await
    }

    /// The kubeconfig of [`KUBECONFIG_ENV`], if set (and not empty).
    pub fn kubeconfig_from_env() -> Option<PathBuf> {
        std::env::var_os(KUBECONFIG_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
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
    pub async fn connect(kubeconfig: &Path, cfg: SimConfig) -> Result<Testbed, TestbedError> {
        let kc = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| {
            TestbedError::Other(format!("reading kubeconfig {}: {e}", kubeconfig.display()))
        })?;
        let config = config_from(kc).await?;
        Self::connect_config(config, cfg).await
    }

    /// [`Self::connect`] given the cluster's client configuration. Every
    /// request of the bed, its actors and its controller goes through a
    /// proxy of the bed (request log, fault injection); the clean-up goes
    /// to the cluster directly.
    pub async fn connect_config(
        upstream: kube::Config,
        mut cfg: SimConfig,
    ) -> Result<Testbed, TestbedError> {
        let turn = SHARED_LOCK.clone().lock_owned().await;
        let proxy = Proxy::start(upstream.clone()).await?;
        let client = proxy.client()?;
        let version = client.apiserver_version().await?;
        let bare_embedded = version.git_version.ends_with("-rebound-sim");
        let id = crate::actors::util::name_suffix();
        cfg.node_prefix = format!("rb-{id}-");
        let shared = cfg.shared.get_or_insert_with(SharedCluster::default);
        // A real server dials the nodes' kubelets for pods/log; the bare
        // embedded one answers it itself.
        let kubelet_logs = if bare_embedded {
            None
        } else {
            let logs = KubeletLogs::start(kubelet_ip()?, cfg.nodes).await?;
            shared.kubelet = Some(logs.endpoint());
            Some(logs)
        };
        let run = SharedRun {
            id: id.clone(),
            config: upstream,
            namespaces: Mutex::new(Vec::new()),
            classifications: Mutex::new(Vec::new()),
            rbac: Mutex::new(Vec::new()),
            bare_embedded,
            nodes: (0..cfg.nodes)
                .map(|i| format!("{}{i:04}", cfg.node_prefix))
                .collect(),
            node_prefix: cfg.node_prefix.clone(),
            cleaned: false,
            _turn: turn,
        };
        let real_operators = shared.real_operators;
        if !real_operators {
            for crds in crate::cluster::JOB_CRDS {
                crate::cluster::install_crds(&client, crds).await?;
            }
        }
        let crds =
            rebound_core::api::crds_yaml().map_err(|e| TestbedError::Other(e.to_string()))?;
        crate::cluster::install_own_crds(&client, &crds).await?;
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
        cfg.operators.batch = cfg.operators.batch && bare_embedded;
        if real_operators {
            cfg.operators = crate::cluster::Operators {
                kubeflow: false,
                volcano: false,
                jobset: false,
                batch: false,
            };
        }
        let config = proxy.client_config();
        // If this fails, dropping `run` removes what was made so far.
        let cluster = SimCluster::connect(client, cfg).await?;
        let bed = Testbed {
            ends: endings::Guard::upstream(run.config.clone(), &id),
            cluster,
            config,
            shared: Some(run),
            proxy: Some(proxy),
            kubelet_logs,
        };
        for ns in bed.shared.iter().flat_map(|r| lock(&r.namespaces).clone()) {
            bed.wait_for_service_account(&ns).await?;
        }
        tracing::info!(run = %id, bare_embedded, "shared-cluster test bed ready");
        Ok(bed)
    }
}
