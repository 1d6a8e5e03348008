//! A simulated cluster with rebound's CRDs, the samples and the controller:
//! the common ground of `rebound demo`, `rebound sim` and the end-to-end
//! tests.

use super::cluster::{SimCluster, SimConfig};
use crate::api::{FaultClassification, RecoveryPolicy};
use crate::controller::{ControllerArgs, ControllerHandle};
use crate::explain::load::{Loaded, load_str};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::path::Path;
use std::time::Duration;

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
        Ok(Testbed { cluster })
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
        let mut o = fc.clone();
        o.metadata.managed_fields = None;
        let pp = PatchParams::apply("rebound-testbed").force();
        api.patch(&o.name_any(), &pp, &Patch::Apply(&o)).await?;
        Ok(())
    }

    /// Create or replace one policy (namespace `default` when unset).
    pub async fn apply_policy(&self, p: &RecoveryPolicy) -> Result<(), TestbedError> {
        let ns = p.namespace().unwrap_or_else(|| "default".into());
        let _ = self.cluster.api().ensure_namespace(&ns);
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
        a.root_namespace = Some(ROOT.into());
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
        let kc = kube::config::Kubeconfig::from_yaml(&self.cluster.api().kubeconfig_yaml())
            .map_err(|e| TestbedError::Other(e.to_string()))?;
        let mut cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .map_err(|e| TestbedError::Other(e.to_string()))?;
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
