//! The environment of a recreate on the real components (`rebound sim
//! --scenario resume --real-operators`): a control plane of its own with
//! kube-scheduler, the real job operators
//! ([`crate::envtest::operators::RealOperators`]: training-operator,
//! Volcano, JobSet, Trainer) installed from their own manifests, and KWOK
//! ([`crate::envtest::kwok`]) playing the nodes and their pods; the test
//! bed on it runs no simulated operator and no simulated node (its
//! scheduler and kubelet have nothing to serve), only rebound's controller
//! and the measurement.

use super::*;
use crate::cluster::SharedCluster;
use crate::envtest::kwok::{Kwok, PodTimes};
use crate::envtest::operators::RealOperators;

/// What the keeper started beside the control plane, for the report.
#[derive(Debug, Clone)]
pub struct RealOperatorsSetup {
    /// The operators' processes.
    pub operators: Vec<String>,
    /// Where their logs are.
    pub operators_dir: PathBuf,
    /// KWOK's log.
    pub kwok_log: PathBuf,
    /// KWOK's stages, with their delays.
    pub stages: Vec<(String, Duration)>,
    /// Seconds the operators and KWOK took to start (after the control
    /// plane).
    pub start_seconds: f64,
}

impl SimEnv {
    /// Starts the control plane of `--real-operators`' directory (as
    /// `--assets` finds one) with kube-scheduler, then
    /// (on a keeper thread that lives as long as this environment) the
    /// real operators and KWOK with `times` as its pods' costs, and a bed
    /// on it that runs none of the simulated operators. `cfg.nodes` should
    /// be 0: the nodes are KWOK's, registered by the caller.
    pub async fn start_real_operators(
        args: &SimArgs,
        mut cfg: SimConfig,
        times: PodTimes,
    ) -> Result<(SimEnv, RealOperatorsSetup), EnvError> {
        let assets = args
            .real_operators
            .as_deref()
            .ok_or_else(|| EnvError::RealOperators("--real-operators was not given".into()))?;
        let mut cp_cfg = control_plane_config(assets, true)?;
        // KWOK's informers watch from resourceVersion 0, which a server
        // with WatchList (beta, on by default in 1.36) turns into a
        // watch-list request; the bed's etcd (Debian's 3.4.23) lacks the
        // progress requests it needs (etcd 3.4.31, 3.5.13), so the server
        // refuses each such watch and KWOK relists with a growing backoff:
        // its pods then lagged the cluster by 16-43 s. Plain watches
        // (clients that asked for a watch-list fall back to a list).
        cp_cfg
            .apiserver_flags
            .push("--feature-gates=WatchList=false".into());
        eprintln!(
            "sim: starting etcd, kube-apiserver, kube-controller-manager and kube-scheduler from {} for the real operators...",
            cp_cfg.assets.display()
        );
        let cp = start_control_plane_async(cp_cfg).await?;
        let held = cp.clone();
        let t = Instant::now();
        let (keeper, mut setup) = tokio::task::spawn_blocking(move || {
            Keeper::start("sim-real-operators", move || {
                let ops = RealOperators::start(&held).map_err(|e| e.to_string())?;
                let kwok = Kwok::start(held.kubeconfig_path(), &held.dir().join("kwok"), &times)
                    .map_err(|e| format!("KWOK: {e}"))?;
                let setup = RealOperatorsSetup {
                    operators: ops.names().iter().map(|n| (*n).to_owned()).collect(),
                    operators_dir: held.dir().join("operators"),
                    kwok_log: kwok.log_path().to_owned(),
                    stages: kwok.stages.clone(),
                    start_seconds: 0.0,
                };
                Ok(((ops, kwok, held), setup))
            })
        })
        .await
        .map_err(|e| EnvError::RealOperators(e.to_string()))?
        .map_err(EnvError::RealOperators)?;
        setup.start_seconds = t.elapsed().as_secs_f64();
        cfg.shared = Some(SharedCluster {
            real_operators: true,
            ..SharedCluster::default()
        });
        let kubeconfig = cp.kubeconfig_path().to_owned();
        let bed = Testbed::connect(&kubeconfig, cfg).await?;
        let version = bed.client().apiserver_version().await?;
        let description = format!(
            "kube-apiserver {} with etcd, kube-controller-manager and kube-scheduler, started from --assets {} (audit log on); the real job operators ({}) and KWOK beside it",
            version.git_version,
            cp.dir().display(),
            setup.operators.join(", ")
        );
        let mut env = Self::finish(bed, Server::ControlPlane(cp), kubeconfig, description).await?;
        env.real_scheduler = true;
        env.keeper = Some(keeper);
        Ok((env, setup))
    }
}
