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

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use super::actors::ascend::{self, AscendFault, AscendPlugin};
use super::actors::kubelet::{Kubelet, KubeletConfig};
use super::actors::ratelimit::OperatorLimits;
use super::actors::{
    ActorError, ActorTasks, batchjob, jobset, kubeflow, scheduler, trainer, volcano,
};
use super::{ApiServer, ApiServerHandle, SimError};

/// The embedded cluster's own minimal CRDs of the job kinds (not the real
/// ones, which are other projects' files).
pub const JOB_CRDS: [&str; 7] = [
    include_str!("crds/kubeflow-pytorchjobs.yaml"),
    include_str!("crds/kubeflow-tfjobs.yaml"),
    include_str!("crds/kubeflow-mpijobs.yaml"),
    include_str!("crds/volcano-jobs.yaml"),
    include_str!("crds/volcano-commands.yaml"),
    include_str!("crds/jobset-jobsets.yaml"),
    include_str!("crds/trainer-trainjobs.yaml"),
];

/// The accelerator every simulated node carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accelerator {
    /// NVIDIA GPUs (`nvidia.com/gpu`).
    Gpu,
    /// Huawei Ascend 910 NPUs (`huawei.com/Ascend910`), with the device
    /// plugin's `mindx-dl-deviceinfo-<node>` ConfigMaps.
    Ascend,
}

impl Accelerator {
    /// The extended resource name.
    pub fn resource(self) -> &'static str {
        match self {
            Self::Gpu => "nvidia.com/gpu",
            Self::Ascend => ascend::RESOURCE,
        }
    }
}

/// Which operators run (all by default; a test of one kind may switch the
/// others off to save watches).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operators {
    /// Kubeflow training operator (PyTorchJob, TFJob, MPIJob).
    pub kubeflow: bool,
    /// Volcano job controller.
    pub volcano: bool,
    /// JobSet controller (and the Kubeflow Trainer v2 controller: a
    /// TrainJob runs as a JobSet).
    pub jobset: bool,
    /// batch Job controller.
    pub batch: bool,
}

impl Default for Operators {
    fn default() -> Self {
        Self {
            kubeflow: true,
            volcano: true,
            jobset: true,
            batch: true,
        }
    }
}

/// Shape of the simulated cluster.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Number of nodes (`node-0000`, `node-0001`, ...).
    pub nodes: usize,
    /// Accelerators per node.
    pub gpus_per_node: u32,
    /// GPUs or NPUs.
    pub accelerator: Accelerator,
    /// Accelerators each pod of the `create_*` helpers asks for (0: none,
    /// so many pods fit on one node).
    pub gpus_per_pod: u32,
    /// Namespaces to create besides the default ones.
    pub namespaces: Vec<String>,
    /// Kubelet timings.
    pub kubelet: KubeletConfig,
    /// Which operators run.
    pub operators: Operators,
    /// Keep deleted pods (with `deletionTimestamp`) until their kubelet
    /// confirms, as a real API server does for bound pods.
    pub hold_pod_deletion: bool,
    /// Threads of the API server's own runtime (0: it shares the caller's
    /// runtime with the actors). At scale the actors' bursts of work would
    /// otherwise delay every request, which a real cluster's API server,
    /// on machines of its own, does not see.
    pub server_threads: usize,
    /// Prefix of the nodes' names (`node-` gives `node-0000`, ...): on a
    /// shared cluster a per-run prefix keeps runs and real nodes apart.
    pub node_prefix: String,
    /// `Some` when the simulated parts share a real cluster (see
    /// [`SimCluster::connect`]); `None` for the embedded server.
    pub shared: Option<SharedCluster>,
    /// The client limits of the simulated job operators and of Volcano's
    /// scheduler (none by default; `rebound sim` uses the published ones).
    pub operator_limits: OperatorLimits,
}

/// How the simulated nodes and pods keep out of a real cluster's way.
///
/// The simulated nodes carry a `NoSchedule` taint so the real scheduler
/// puts no real pod there, and the simulated pods ask for a scheduler name
/// only the simulated scheduler serves (and tolerate that taint), so the
/// real kube-scheduler never races it for them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedCluster {
    /// `spec.schedulerName` of the simulated pods.
    pub scheduler_name: String,
    /// Key of the `NoSchedule` taint on the simulated nodes.
    pub taint_key: String,
    /// Where a real API server reaches the fake nodes' kubelets for
    /// `pods/log` (see `super::kubelet_logs`); `None`: the nodes keep
    /// made-up addresses and no kubelet port.
    pub kubelet: Option<super::kubelet_logs::KubeletEndpoint>,
}

impl Default for SharedCluster {
    fn default() -> Self {
        Self {
            scheduler_name: "rebound-sim-scheduler".into(),
            taint_key: "rebound.dev/simulated-node".into(),
            kubelet: None,
        }
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            nodes: 4,
            gpus_per_node: 8,
            accelerator: Accelerator::Gpu,
            gpus_per_pod: 0,
            namespaces: Vec::new(),
            kubelet: KubeletConfig::default(),
            operators: Operators::default(),
            hold_pod_deletion: false,
            server_threads: 0,
            node_prefix: "node-".into(),
            shared: None,
            operator_limits: OperatorLimits::none(),
        }
    }
}

/// Why a simulated-cluster call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The embedded API server failed (start, CRDs, bulk setup).
    #[error("embedded API server: {0}")]
    Server(#[from] SimError),
    /// An actor's operation failed (fault injection).
    #[error(transparent)]
    Actor(#[from] ActorError),
    /// A request through the client failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// An object could not be built.
    #[error("serialization: {0}")]
    Json(#[from] serde_json::Error),
    /// A wait ran out of time.
    #[error("timed out after {after:?}: {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long.
        after: Duration,
    },
    /// The cluster was not set up for this (e.g. Ascend faults on GPU nodes).
    #[error("{0}")]
    Unsupported(String),
}

/// Options of the jobs the `create_*` helpers make.
#[derive(Debug, Clone, Default)]
pub struct JobOptions {
    /// Labels on the job and on its pod templates (so they reach the pods,
    /// as with real operators).
    pub labels: BTreeMap<String, String>,
    /// Restart policy: for Kubeflow the replica policy (`Never`,
    /// `OnFailure`, `Always`, `ExitCode`), otherwise the pods' policy.
    /// `None`: the kind's usual choice.
    pub restart_policy: Option<String>,
    /// Accelerators per pod; `None`: the cluster's `gpus_per_pod`.
    pub gpus_per_pod: Option<u32>,
    /// Wire the pod templates for in-place restarts as `rebound inject`
    /// does (the agent sidecar, its restart rule and barrier probe).
    pub wired: bool,
}

impl JobOptions {
    /// Options with these labels.
    pub fn labels(labels: &[(&str, &str)]) -> Self {
        Self {
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..Self::default()
        }
    }

    /// The same with this restart policy.
    pub fn restart_policy(mut self, policy: &str) -> Self {
        self.restart_policy = Some(policy.to_owned());
        self
    }
    /// The same, wired for in-place restarts.
    pub fn wired(mut self) -> Self {
        self.wired = true;
        self
    }
}

/// Wire a job manifest as `rebound inject` would when `opts` asks for it.
fn wire(obj: &mut Value, opts: &JobOptions) -> Result<(), ClusterError> {
    if opts.wired {
        rebound::inplace::inject::inject_document(
            obj,
            &rebound::inplace::inject::InjectOptions::default(),
            "job",
        )
        .map_err(|e| ClusterError::Unsupported(format!("rebound inject refused the job: {e}")))?;
    }
    Ok(())
}

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

/// The name of node `i`.
pub fn node_name(i: usize) -> String {
    format!("node-{i:04}")
}

fn node_object(i: usize, cfg: &SimConfig) -> Value {
    let name = format!("{}{i:04}", cfg.node_prefix);
    let kubelet = cfg.shared.as_ref().and_then(|s| s.kubelet);
    let ip = match kubelet {
        Some(k) => k.ip_of(i).to_string(),
        None => format!("10.{}.{}.{}", 1 + i / 65536, (i / 256) % 256, i % 256),
    };
    let res = cfg.accelerator.resource();
    let mut labels = json!({
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": if cfg.accelerator == Accelerator::Ascend { "arm64" } else { "amd64" },
        "node.kubernetes.io/instance-type": "sim.accelerated",
        "topology.kubernetes.io/zone": format!("zone-{}", i % 3),
    });
    match cfg.accelerator {
        Accelerator::Gpu => {
            labels["nvidia.com/gpu.present"] = json!("true");
            labels["nvidia.com/gpu.product"] = json!("NVIDIA-H100-80GB-HBM3");
            labels["nvidia.com/gpu.count"] = json!(cfg.gpus_per_node.to_string());
        }
        Accelerator::Ascend => {
            labels["accelerator"] = json!("huawei-Ascend910");
            labels["host-arch"] = json!("huawei-arm");
        }
    }
    let capacity = json!({
        "cpu": "192", "memory": "2113877504Ki", "pods": "110", "ephemeral-storage": "3750000000Ki",
        res: cfg.gpus_per_node.to_string(),
    });
    let now = super::actors::util::now_rfc3339();
    let cond = |t: &str, s: &str, r: &str, m: &str| {
        json!({"type": t, "status": s, "reason": r, "message": m,
               "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    let spec = match &cfg.shared {
        None => json!({"podCIDR": format!("10.244.{}.0/24", i % 256)}),
        // On a real cluster the node IPAM controller hands out pod CIDRs; a
        // made-up one could collide with a real node's.
        Some(sh) => {
            json!({"taints": [{"key": sh.taint_key, "value": "true", "effect": "NoSchedule"}]})
        }
    };
    let mut node = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "nodeInfo": {
                "machineID": "", "systemUUID": "", "bootID": "",
                "kernelVersion": "5.15.0-sim", "osImage": "Ubuntu 22.04.4 LTS",
                "containerRuntimeVersion": "containerd://1.7.20", "kubeletVersion": "v1.33.0",
                "kubeProxyVersion": "", "operatingSystem": "linux",
                "architecture": if cfg.accelerator == Accelerator::Ascend { "arm64" } else { "amd64" },
            },
        },
    });
    if let Some(k) = kubelet {
        node["status"]["daemonEndpoints"] = json!({"kubeletEndpoint": {"Port": k.port}});
    }
    node
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

    fn container(&self, name: &str, opts: &JobOptions) -> Value {
        let gpus = opts.gpus_per_pod.unwrap_or(self.config.gpus_per_pod);
        let mut c = json!({
            "name": name,
            "image": "registry.local/rebound-sim/trainer:latest",
            "command": ["python", "train.py"],
        });
        if gpus > 0 {
            let r = self.config.accelerator.resource();
            c["resources"] =
                json!({"limits": {r: gpus.to_string()}, "requests": {r: gpus.to_string()}});
        }
        c
    }

    fn pod_template(&self, container: &str, opts: &JobOptions, pod_policy: Option<&str>) -> Value {
        let mut spec = json!({"containers": [self.container(container, opts)]});
        if let Some(p) = pod_policy {
            spec["restartPolicy"] = json!(p);
        }
        if let Some(sh) = &self.config.shared {
            spec["schedulerName"] = json!(sh.scheduler_name);
            spec["tolerations"] = json!([{"key": sh.taint_key, "operator": "Exists"}]);
        }
        json!({"metadata": {"labels": opts.labels}, "spec": spec})
    }

    async fn create_custom(
        &self,
        ns: &str,
        res: &kube::api::ApiResource,
        obj: Value,
    ) -> Result<DynamicObject, ClusterError> {
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), ns, res);
        let obj: DynamicObject = serde_json::from_value(obj)?;
        Ok(api.create(&PostParams::default(), &obj).await?)
    }

    /// Creates a PyTorchJob with one master and `workers` workers; `labels`
    /// go on the job and its pod templates.
    pub async fn create_pytorchjob(
        &self,
        ns: &str,
        name: &str,
        workers: u32,
        labels: &[(&str, &str)],
    ) -> Result<DynamicObject, ClusterError> {
        self.create_pytorchjob_with(ns, name, workers, &JobOptions::labels(labels))
            .await
    }

    /// [`Self::create_pytorchjob`] with all options.
    pub async fn create_pytorchjob_with(
        &self,
        ns: &str,
        name: &str,
        workers: u32,
        opts: &JobOptions,
    ) -> Result<DynamicObject, ClusterError> {
        let res = kubeflow::KubeflowKind::PyTorchJob.api_resource();
        let obj = self.pytorchjob_object(ns, name, workers, opts);
        self.create_custom(ns, &res, obj).await
    }

    fn pytorchjob_object(&self, ns: &str, name: &str, workers: u32, opts: &JobOptions) -> Value {
        let policy = opts
            .restart_policy
            .clone()
            .unwrap_or_else(|| "OnFailure".into());
        let replica = |n: u32| json!({"replicas": n, "restartPolicy": policy, "template": self.pod_template("pytorch", opts, None)});
        let mut specs = json!({"Master": replica(1)});
        if workers > 0 {
            specs["Worker"] = replica(workers);
        }
        json!({
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": ns, "labels": opts.labels},
            "spec": {"runPolicy": {"cleanPodPolicy": "None"}, "pytorchReplicaSpecs": specs},
        })
    }

    /// The bulk path for large simulations: creates `count` PyTorchJobs
    /// `<prefix>-<i>` (one master, `workers` workers) and their pods,
    /// already bound to nodes (spread, within accelerator capacity),
    /// in-process, without HTTP. The pods are exactly what the operator
    /// would make, so it adopts them; the kubelets then report them
    /// running. Returns the job names. Pods that fit on no node are left
    /// unbound for the scheduler. Embedded server only (see [`Self::api`]).
    pub fn bulk_pytorchjobs(
        &self,
        ns: &str,
        prefix: &str,
        count: usize,
        workers: u32,
        opts: &JobOptions,
    ) -> Result<Vec<String>, ClusterError> {
        let kind = kubeflow::KubeflowKind::PyTorchJob;
        let gpus = opts.gpus_per_pod.unwrap_or(self.config.gpus_per_pod);
        // Pods per node: as many as the accelerators allow, else the pod limit.
        let per_node = self
            .config
            .gpus_per_node
            .checked_div(gpus)
            .map_or(110, |n| n as usize);
        let mut load = vec![0usize; self.config.nodes];
        let mut next = 0usize;
        let mut place = || {
            for _ in 0..load.len() {
                let i = next % load.len();
                next += 1;
                if load[i] < per_node {
                    load[i] += 1;
                    return Some(node_name(i));
                }
            }
            None
        };
        let mut names = Vec::with_capacity(count);
        let policy = opts
            .restart_policy
            .clone()
            .unwrap_or_else(|| "OnFailure".into());
        for i in 0..count {
            let name = format!("{prefix}-{i}");
            let created = self
                .api()
                .create_object(self.pytorchjob_object(ns, &name, workers, opts))?;
            let job: DynamicObject = serde_json::from_value(created)?;
            for (rtype, replicas) in [("Master", 1), ("Worker", workers)] {
                let spec = &job.data["spec"]["pytorchReplicaSpecs"][rtype];
                for index in 0..replicas as usize {
                    let mut pod = kubeflow::make_pod(
                        kind,
                        &job,
                        rtype,
                        index,
                        spec,
                        rtype == "Master",
                        &policy,
                    );
                    if let Some(node) = place() {
                        pod["spec"]["nodeName"] = json!(node);
                    }
                    match self.api().create_object(pod) {
                        Ok(_) => {}
                        // The simulated operator saw the job first and made
                        // the pod itself (unbound; the scheduler places it):
                        // the same pod, so the set-up goes on.
                        Err(SimError::Api { source, .. })
                            if source.code == 409 && source.reason == "AlreadyExists" => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            names.push(name);
        }
        Ok(names)
    }

    /// Creates a Volcano Job with one task `worker` of `replicas` pods
    /// (minAvailable = replicas, queue `default`).
    pub async fn create_volcano_job(
        &self,
        ns: &str,
        name: &str,
        replicas: u32,
        labels: &[(&str, &str)],
    ) -> Result<DynamicObject, ClusterError> {
        self.create_volcano_job_with(ns, name, replicas, &JobOptions::labels(labels), json!([]))
            .await
    }

    /// [`Self::create_volcano_job`] with all options and job-level lifecycle
    /// `policies` (a JSON list, e.g. `[{"event": "PodEvicted", "action": "RestartJob"}]`).
    pub async fn create_volcano_job_with(
        &self,
        ns: &str,
        name: &str,
        replicas: u32,
        opts: &JobOptions,
        policies: Value,
    ) -> Result<DynamicObject, ClusterError> {
        let policy = opts.restart_policy.as_deref().unwrap_or("Never");
        let mut template = self.pod_template("worker", opts, Some(policy));
        template["metadata"]["name"] = json!("worker");
        let obj = json!({
            "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns, "labels": opts.labels},
            "spec": {
                "schedulerName": "volcano", "queue": "default", "minAvailable": replicas,
                "policies": policies,
                "tasks": [{"name": "worker", "replicas": replicas, "template": template}],
            },
        });
        let mut obj = obj;
        wire(&mut obj, opts)?;
        self.create_custom(ns, &volcano::job_resource(), obj).await
    }

    /// Creates a JobSet with one replicated job `workers` of `jobs` Indexed
    /// Jobs of `pods_per_job` pods each, restarted up to `max_restarts` times.
    pub async fn create_jobset(
        &self,
        ns: &str,
        name: &str,
        jobs: u32,
        pods_per_job: u32,
        max_restarts: u32,
        labels: &[(&str, &str)],
    ) -> Result<DynamicObject, ClusterError> {
        let policy = json!({"maxRestarts": max_restarts});
        self.create_jobset_with(
            ns,
            name,
            jobs,
            pods_per_job,
            policy,
            &JobOptions::labels(labels),
        )
        .await
    }

    /// [`Self::create_jobset`] with its whole `failurePolicy` (e.g.
    /// `{"maxRestarts": 3, "restartStrategy": "InPlaceRestart"}`) and all
    /// options.
    pub async fn create_jobset_with(
        &self,
        ns: &str,
        name: &str,
        jobs: u32,
        pods_per_job: u32,
        failure_policy: Value,
        opts: &JobOptions,
    ) -> Result<DynamicObject, ClusterError> {
        let policy = "Never";
        let mut obj = json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": ns, "labels": opts.labels},
            "spec": {
                "failurePolicy": failure_policy,
                "replicatedJobs": [{"name": "workers", "replicas": jobs, "template": {
                    "metadata": {"labels": opts.labels},
                    "spec": {
                        "parallelism": pods_per_job, "completions": pods_per_job,
                        "completionMode": "Indexed", "backoffLimit": 0,
                        "template": self.pod_template("worker", opts, Some(policy)),
                    },
                }}],
            },
        });
        wire(&mut obj, opts)?;
        self.create_custom(ns, &jobset::api_resource(), obj).await
    }

    /// Creates a Kubeflow Trainer v2 TrainJob of `nodes` training nodes and
    /// the namespaced TrainingRuntime `<name>-runtime` it runs (one
    /// replicated job `node`, the trainer step, container `node`). `labels`
    /// go on the TrainJob, into its `spec.labels` (the JobSet and Jobs, as
    /// the Trainer propagates them) and on the runtime's pod template, the
    /// one way they reach a TrainJob's pods. Runs with the JobSet operator.
    pub async fn create_trainjob(
        &self,
        ns: &str,
        name: &str,
        nodes: u32,
        labels: &[(&str, &str)],
    ) -> Result<DynamicObject, ClusterError> {
        let opts = JobOptions::labels(labels);
        let runtime = format!("{name}-runtime");
        let mut job_labels = opts.labels.clone();
        job_labels.insert(
            trainer::ANCESTOR_LABEL.into(),
            trainer::ANCESTOR_TRAINER.into(),
        );
        let rt = json!({
            "apiVersion": trainer::API_VERSION, "kind": "TrainingRuntime",
            "metadata": {"name": runtime, "namespace": ns},
            "spec": {
                "mlPolicy": {"numNodes": 1},
                // Restarts allowed, as a training runtime that resumes
                // from checkpoints sets: rebound's restart fails a child
                // Job (backoffLimit 0), which costs one of these.
                "template": {"spec": {"failurePolicy": {"maxRestarts": 3},
                    "replicatedJobs": [{"name": "node", "template": {
                    "metadata": {"labels": job_labels},
                    "spec": {
                        "parallelism": 1, "completions": 1,
                        "completionMode": "Indexed", "backoffLimit": 0,
                        "template": self.pod_template(trainer::NODE_CONTAINER, &opts, Some("Never")),
                    },
                }}]}},
            },
        });
        match self
            .create_custom(ns, &trainer::runtime_resource(false), rt)
            .await
        {
            Ok(_) => {}
            Err(ClusterError::Kube(e)) if super::actors::util::is_conflict(&e) => {}
            Err(e) => return Err(e),
        }
        let obj = json!({
            "apiVersion": trainer::API_VERSION, "kind": "TrainJob",
            "metadata": {"name": name, "namespace": ns, "labels": opts.labels},
            "spec": {
                "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime", "name": runtime},
                "labels": opts.labels,
                "trainer": {"numNodes": nodes},
            },
        });
        self.create_custom(ns, &trainer::trainjob_resource(), obj)
            .await
    }

    /// Creates an Indexed batch Job of `pods` pods running in parallel.
    pub async fn create_batch_job(
        &self,
        ns: &str,
        name: &str,
        pods: u32,
        labels: &[(&str, &str)],
    ) -> Result<k8s_openapi::api::batch::v1::Job, ClusterError> {
        self.create_batch_job_with(ns, name, pods, &JobOptions::labels(labels))
            .await
    }

    /// [`Self::create_batch_job`] with all options.
    pub async fn create_batch_job_with(
        &self,
        ns: &str,
        name: &str,
        pods: u32,
        opts: &JobOptions,
    ) -> Result<k8s_openapi::api::batch::v1::Job, ClusterError> {
        let mut job = json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns, "labels": opts.labels},
            "spec": {
                "parallelism": pods, "completions": pods, "completionMode": "Indexed", "backoffLimit": 6,
                "template": self.pod_template("worker", opts, Some("Never")),
            },
        });
        wire(&mut job, opts)?;
        let api: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(self.client.clone(), ns);
        Ok(api
            .create(&PostParams::default(), &serde_json::from_value(job)?)
            .await?)
    }

    /// Terminates a container (see [`Kubelet::fail_container`]).
    pub async fn fail_container(
        &self,
        ns: &str,
        pod: &str,
        container: &str,
        exit_code: i32,
        reason: &str,
    ) -> Result<(), ClusterError> {
        Ok(self
            .kubelet
            .fail_container(ns, pod, container, exit_code, reason)
            .await?)
    }

    /// Sets a node condition (see [`Kubelet::set_node_condition`]).
    pub async fn set_node_condition(
        &self,
        node: &str,
        ctype: &str,
        status: &str,
        reason: &str,
        message: &str,
    ) -> Result<(), ClusterError> {
        Ok(self
            .kubelet
            .set_node_condition(node, ctype, status, reason, message)
            .await?)
    }

    /// Makes a node Ready or NotReady.
    pub async fn set_node_ready(&self, node: &str, ready: bool) -> Result<(), ClusterError> {
        Ok(self.kubelet.set_node_ready(node, ready).await?)
    }

    /// Cordons or uncordons a node (`spec.unschedulable`), as `kubectl cordon` does.
    pub async fn set_node_unschedulable(
        &self,
        node: &str,
        unschedulable: bool,
    ) -> Result<(), ClusterError> {
        let api: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.client.clone());
        let patch = json!({"spec": {"unschedulable": if unschedulable { json!(true) } else { Value::Null }}});
        api.patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    /// Reports NPU `chip` of `node` faulty with these hex fault codes, at
    /// level `SeparateNPU`, in the node's device-info ConfigMap.
    pub async fn set_ascend_fault(
        &self,
        node: &str,
        chip: u32,
        codes: &[&str],
    ) -> Result<(), ClusterError> {
        self.set_ascend_fault_with(
            node,
            AscendFault {
                chip,
                codes: codes.iter().map(|c| (*c).to_owned()).collect(),
                level: "SeparateNPU".into(),
                fault_type: "CardUnhealthy".into(),
            },
        )
        .await
    }

    /// Reports an NPU fault with a chosen level and type.
    pub async fn set_ascend_fault_with(
        &self,
        node: &str,
        fault: AscendFault,
    ) -> Result<(), ClusterError> {
        let plugin = self.ascend_plugin()?;
        Ok(plugin.set_fault(node, fault).await?)
    }

    /// Clears the NPU faults of `chip` (`None`: all chips) of `node`.
    pub async fn clear_ascend_fault(
        &self,
        node: &str,
        chip: Option<u32>,
    ) -> Result<(), ClusterError> {
        let plugin = self.ascend_plugin()?;
        Ok(plugin.clear_fault(node, chip).await?)
    }

    fn ascend_plugin(&self) -> Result<&AscendPlugin, ClusterError> {
        self.ascend.as_ref().ok_or_else(|| {
            ClusterError::Unsupported("the cluster was started with GPU nodes, not Ascend".into())
        })
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

/// The name of node `i` of a cluster shaped by `cfg`.
fn nth_node(cfg: &SimConfig, i: usize) -> String {
    format!("{}{i:04}", cfg.node_prefix)
}

/// Creates a namespace unless it exists.
pub async fn ensure_namespace(client: &Client, ns: &str) -> Result<(), ClusterError> {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let obj = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
    match api.create(&PostParams::default(), &obj).await {
        Ok(_) => Ok(()),
        Err(e) if super::actors::util::is_status(&e, 409) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Label on the CRDs [`install_crds`] creates, so a later run may replace
/// them and never touches a real operator's.
pub const TESTBED_LABEL: (&str, &str) = ("app.kubernetes.io/managed-by", "rebound-testbed");

/// Installs CRDs (multi-document YAML) on a cluster through the API and
/// waits until each serves: absent ones are created, ones this function
/// made before (labelled [`TESTBED_LABEL`]) replaced, and one that belongs
/// to someone else (a real training operator's) is an error, since the real
/// operator would race the simulated one.
pub async fn install_crds(client: &Client, yaml: &str) -> Result<Vec<String>, ClusterError> {
    install(client, yaml, false).await
}

/// Installs or updates rebound's own CRDs: like [`install_crds`], but one
/// installed by someone else (rebound deployed on the cluster) is updated
/// in place, keeping its labels, instead of refused: no simulated operator
/// races for rebound's objects, and the tests need this version's schema.
pub async fn install_own_crds(client: &Client, yaml: &str) -> Result<Vec<String>, ClusterError> {
    install(client, yaml, true).await
}

async fn install(
    client: &Client,
    yaml: &str,
    update_foreign: bool,
) -> Result<Vec<String>, ClusterError> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition as Crd;
    let api: Api<Crd> = Api::all(client.clone());
    let mut names = Vec::new();
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml)
        .map_err(|e| ClusterError::Unsupported(format!("CRD YAML: {e}")))?;
    for v in docs {
        if v.is_null() {
            continue;
        }
        let mut crd: Crd = serde_json::from_value(v)?;
        crd.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(TESTBED_LABEL.0.into(), TESTBED_LABEL.1.into());
        let name = crd.name_any();
        // A real server's CRD controllers write the status of a new CRD
        // right after it is made: a replace may meet a newer version once.
        let mut attempt = 0;
        loop {
            attempt += 1;
            let written = match api.get_opt(&name).await? {
                None => api.create(&PostParams::default(), &crd).await.map(|_| ()),
                Some(cur)
                    if cur.labels().get(TESTBED_LABEL.0).map(String::as_str)
                        == Some(TESTBED_LABEL.1) =>
                {
                    crd.metadata.resource_version = cur.metadata.resource_version;
                    api.replace(&name, &PostParams::default(), &crd)
                        .await
                        .map(|_| ())
                }
                Some(cur) if update_foreign => {
                    crd.metadata.labels = cur.metadata.labels.clone();
                    crd.metadata.resource_version = cur.metadata.resource_version;
                    api.replace(&name, &PostParams::default(), &crd)
                        .await
                        .map(|_| ())
                }
                Some(_) => {
                    return Err(ClusterError::Unsupported(format!(
                        "CRD {name} exists and was not installed by the test bed: a real operator would race the simulated one; use a cluster without it"
                    )));
                }
            };
            match written {
                Ok(()) => break,
                Err(e) if attempt < 5 && super::actors::util::is_status(&e, 409) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        names.push(name);
    }
    for name in &names {
        wait_for(
            Duration::from_secs(30),
            &format!("CRD {name} established"),
            || {
                let api = api.clone();
                async move {
                    let crd = api.get_opt(name).await?;
                    Ok(crd
                        .and_then(|c| c.status)
                        .and_then(|s| s.conditions)
                        .is_some_and(|cs| {
                            cs.iter()
                                .any(|c| c.type_ == "Established" && c.status == "True")
                        })
                        .then_some(()))
                }
            },
        )
        .await?;
    }
    Ok(names)
}

/// Whether a pod runs with every container ready (and is not being deleted).
pub fn pod_running(p: &Pod) -> bool {
    let Some(st) = &p.status else { return false };
    p.metadata.deletion_timestamp.is_none()
        && st.phase.as_deref() == Some("Running")
        && st
            .container_statuses
            .as_ref()
            .is_some_and(|cs| !cs.is_empty() && cs.iter().all(|c| c.ready))
}

/// Polls `check` until it yields a value or `timeout` passes.
pub async fn wait_for<T, F, Fut>(
    timeout: Duration,
    what: &str,
    mut check: F,
) -> Result<T, ClusterError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, ClusterError>>,
{
    let start = Instant::now();
    loop {
        let t = Instant::now();
        if let Some(v) = check().await? {
            return Ok(v);
        }
        if start.elapsed() > timeout {
            return Err(ClusterError::Timeout {
                what: what.to_owned(),
                after: timeout,
            });
        }
        // Polling must not starve the cluster it waits for: a check that
        // costs much (listing thousands of pods) runs less often.
        let pause = (t.elapsed() * 4).clamp(Duration::from_millis(20), Duration::from_secs(2));
        tokio::time::sleep(pause).await;
    }
}
