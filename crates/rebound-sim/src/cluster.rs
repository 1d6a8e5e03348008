//! `SimCluster`: the embedded API server with its simulated actors
//! (scheduler, kubelets, Kubeflow/Volcano/JobSet/Job operators, Ascend
//! device plugin), set up in one call with nodes and namespaces, plus the
//! conveniences tests and `rebound demo`/`sim` need: create jobs, inject
//! faults, wait for pods.
//!
//! Nodes (and the Ascend ConfigMaps) are created in-process through the
//! server's bulk path, so 2,000 nodes take well under a second; everything
//! the actors do afterwards goes through `kube::Client` over HTTP, like a
//! real cluster's components.

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use super::actors::ascend::{self, AscendPlugin};
use super::actors::kubelet::Kubelet;
use super::actors::{ActorTasks, batchjob, jobset, kubeflow, scheduler, trainer, volcano};
use super::{ApiServer, ApiServerHandle};

mod config;
mod error;
mod faults;
mod install;
mod jobs;
mod nodes;
mod wait;

pub use config::{Accelerator, Operators, SharedCluster, SimConfig};
pub use error::ClusterError;
pub use faults::kcover_event;
pub use install::{JOB_CRDS, TESTBED_LABEL, ensure_namespace, install_crds, install_own_crds};
pub use jobs::JobOptions;
pub use nodes::node_name;
use nodes::{node_object, nth_node};
pub use wait::{pod_running, wait_for};

/// The embedded cluster with its actors running.
pub struct SimCluster {
    /// The embedded server; `None` on a shared (external) cluster.
    api: Option<ApiServerHandle>,
    client: Client,
    kubelet: Kubelet,
    ascend: Option<AscendPlugin>,
    config: SimConfig,
    tasks: ActorTasks,
}

impl std::fmt::Debug for SimCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimCluster")
            .field("url", &self.api.as_ref().map(ApiServerHandle::url))
            .field("nodes", &self.config.nodes)
            .field("actors", &self.tasks.len())
            .finish()
    }
}

impl SimCluster {
    /// Starts the API server, registers the job CRDs, creates namespaces and
    /// nodes, and starts the actors.
    pub async fn start(config: SimConfig) -> Result<Self, ClusterError> {
        let api = ApiServer::builder()
            .hold_pod_deletion(config.hold_pod_deletion)
            .threads(config.server_threads)
            .start()
            .await?;
        for crd in JOB_CRDS {
            api.register_crds_yaml(crd).await?;
        }
        for ns in &config.namespaces {
            api.ensure_namespace(ns)?;
        }
        let started = Instant::now();
        for i in 0..config.nodes {
            api.create_object(node_object(i, &config))?;
        }
        if config.accelerator == Accelerator::Ascend {
            for i in 0..config.nodes {
                let cm = ascend::configmap(&nth_node(&config, i), config.gpus_per_node, &[]);
                let mut v = serde_json::to_value(&cm)?;
                v["apiVersion"] = json!("v1");
                v["kind"] = json!("ConfigMap");
                api.create_object(v)?;
            }
        }
        tracing::debug!(nodes = config.nodes, took = ?started.elapsed(), "sim nodes created");
        let client = api.client();
        Ok(Self::with_actors(Some(api), client, config))
    }

    /// The simulated parts on a cluster this process does not own (a kind
    /// or k3d cluster, or an embedded server in another process): creates
    /// the namespaces and `config.nodes` fake nodes (named with
    /// `config.node_prefix`, tainted per `config.shared`) through `client`,
    /// and starts the actors. The job CRDs must be installed already (see
    /// [`install_crds`]). Whoever connects deletes the nodes again
    /// ([`Self::delete_nodes`]).
    ///
    /// Nothing here needs the embedded server: no in-process bulk path, no
    /// request log, no fault injection ([`Self::server`] is `None`).
    pub async fn connect(client: Client, mut config: SimConfig) -> Result<Self, ClusterError> {
        let shared = config
            .shared
            .get_or_insert_with(SharedCluster::default)
            .clone();
        for ns in &config.namespaces {
            ensure_namespace(&client, ns).await?;
        }
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
        // Registered 16 at a time, as many kubelets would: one by one, 2,000
        // nodes take a minute of round trips on a real server.
        let mut registered = futures::stream::iter(0..config.nodes)
            .map(|i| {
                let (nodes, config) = (&nodes, &config);
                async move {
                    let mut obj = node_object(i, config);
                    // Status is not written on create by a real server: post
                    // the node, then its status, as a kubelet registering does.
                    let status = obj["status"].take();
                    let name = nth_node(config, i);
                    let node = serde_json::from_value(obj)?;
                    nodes.create(&PostParams::default(), &node).await?;
                    nodes
                        .patch_status(
                            &name,
                            &PatchParams::default(),
                            &Patch::Merge(&json!({"status": status})),
                        )
                        .await?;
                    Ok::<(), ClusterError>(())
                }
            })
            .buffer_unordered(16);
        while let Some(r) = registered.next().await {
            r?;
        }
        drop(registered);
        if config.accelerator == Accelerator::Ascend {
            for i in 0..config.nodes {
                let cm = ascend::configmap(&nth_node(&config, i), config.gpus_per_node, &[]);
                let ns = cm
                    .metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "kube-system".into());
                ensure_namespace(&client, &ns).await?;
                Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns)
                    .create(&PostParams::default(), &cm)
                    .await?;
            }
        }
        tracing::debug!(nodes = config.nodes, scheduler = %shared.scheduler_name, "fake nodes created");
        Ok(Self::with_actors(None, client, config))
    }

    fn with_actors(api: Option<ApiServerHandle>, client: Client, config: SimConfig) -> Self {
        let ascend = (config.accelerator == Accelerator::Ascend)
            .then(|| AscendPlugin::new(client.clone(), config.gpus_per_node));
        let mut tasks = ActorTasks::new();
        let mut kubelet_cfg = config.kubelet.clone();
        // The scheduler's throughput is one of the modelled pod costs.
        let limits = config.operator_limits.clone();
        let sched = |scope| scheduler::SchedulerConfig {
            scope,
            rate: config.kubelet.costs.schedule_rate,
            burst: config.kubelet.costs.schedule_burst,
            gang: config.operators.volcano.then_some(scheduler::GangConfig {
                limit: limits.vc_scheduler,
                period: limits.vc_schedule_period,
            }),
        };
        match &config.shared {
            None => tasks.push(tokio::spawn(scheduler::run_with(
                client.clone(),
                sched(None),
            ))),
            Some(sh) => {
                let scope = scheduler::Scope {
                    scheduler_name: sh.scheduler_name.clone(),
                    node_prefix: config.node_prefix.clone(),
                };
                tasks.push(tokio::spawn(scheduler::run_with(
                    client.clone(),
                    sched(Some(scope)),
                )));
                kubelet_cfg.node_prefix = Some(config.node_prefix.clone());
                let names: Vec<String> = (0..config.nodes).map(|i| nth_node(&config, i)).collect();
                tasks.push(tokio::spawn(super::actors::kubelet::renew_leases(
                    client.clone(),
                    names,
                )));
            }
        }
        tasks.push(tokio::spawn(super::actors::kubelet::run(
            client.clone(),
            kubelet_cfg,
        )));
        if config.operators.kubeflow {
            tasks.push(tokio::spawn(kubeflow::run_limited(
                client.clone(),
                limits.training_operator,
            )));
        }
        if config.operators.volcano {
            tasks.push(tokio::spawn(volcano::run_limited(
                client.clone(),
                limits.volcano,
            )));
        }
        if config.operators.jobset {
            tasks.push(tokio::spawn(jobset::run_limited(
                client.clone(),
                limits.jobset,
            )));
            // A TrainJob runs as a JobSet: the Trainer comes with JobSet.
            tasks.push(tokio::spawn(trainer::run_limited(
                client.clone(),
                limits.trainer,
            )));
        }
        // A real cluster runs kube-controller-manager's Job controller: the
        // simulated one would race it, so there it runs only when asked.
        let batch = config.operators.batch || (config.operators.jobset && config.shared.is_none());
        if batch {
            tasks.push(tokio::spawn(batchjob::run_limited(
                client.clone(),
                limits.job_controller,
                limits.job_max_per_sync,
                (limits.job_failure_backoff, limits.job_failure_backoff_max),
            )));
        }
        Self {
            kubelet: Kubelet::new(client.clone()),
            api,
            client,
            ascend,
            config,
            tasks,
        }
    }

    /// Deletes the nodes [`Self::connect`] created (their pods are left to
    /// the cluster's pod garbage collector, or to namespace deletion).
    pub async fn delete_nodes(&self) -> Result<(), ClusterError> {
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.client.clone());
        for name in self.node_names() {
            match nodes.delete(&name, &Default::default()).await {
                Ok(_) => {}
                Err(e) if super::actors::util::is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// The embedded API server (request log, fault injection, pod logs,
    /// ...).
    ///
    /// # Panics
    /// On a cluster made by [`Self::connect`], which has none: code that
    /// may run there asks [`Self::server`] instead. The panic marks a test
    /// that forgot to skip, never a condition of the cluster.
    pub fn api(&self) -> &ApiServerHandle {
        match &self.api {
            Some(api) => api,
            None => panic!("SimCluster::api() on an external cluster; check server() first"),
        }
    }

    /// The embedded API server, `None` on an external cluster.
    pub fn server(&self) -> Option<&ApiServerHandle> {
        self.api.as_ref()
    }

    /// A client of the cluster.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The configuration the cluster was started with.
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// Names of all nodes.
    pub fn node_names(&self) -> Vec<String> {
        (0..self.config.nodes)
            .map(|i| nth_node(&self.config, i))
            .collect()
    }

    /// Waits until at least `n` pods matching `selector` in `ns` run with
    /// all containers ready, and returns them.
    pub async fn wait_for_pods_running(
        &self,
        ns: &str,
        selector: &str,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<Pod>, ClusterError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        wait_for(
            timeout,
            &format!("{n} running pods matching {selector:?} in {ns}"),
            || {
                let api = api.clone();
                async move {
                    let pods = api.list(&ListParams::default().labels(selector)).await?;
                    let running: Vec<Pod> = pods.items.into_iter().filter(pod_running).collect();
                    Ok((running.len() >= n).then_some(running))
                }
            },
        )
        .await
    }

    /// Stops the actors and the server (an external cluster keeps running).
    pub async fn shutdown(mut self) {
        self.tasks.abort_all();
        if let Some(api) = &self.api {
            api.shutdown().await;
        }
    }
}
