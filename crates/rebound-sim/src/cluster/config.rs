//! What a simulated cluster is made of: its size, accelerators, which
//! operators run, and whether it shares a real cluster.

use crate::actors::ascend::{self};
use crate::actors::kubelet::KubeletConfig;
use crate::actors::ratelimit::OperatorLimits;

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
    /// [`SimCluster::connect`](super::SimCluster::connect)); `None` for the embedded server.
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
    /// `pods/log` (see `crate::kubelet_logs`); `None`: the nodes keep
    /// made-up addresses and no kubelet port.
    pub kubelet: Option<crate::kubelet_logs::KubeletEndpoint>,
    /// The cluster runs the job kinds' real operators
    /// (`crate::envtest::operators`): no simulated one runs, their own
    /// CRDs are installed, and Volcano Jobs' pods are left to the real
    /// vc-scheduler (the simulated scheduler binds the others).
    pub real_operators: bool,
}

impl Default for SharedCluster {
    fn default() -> Self {
        Self {
            scheduler_name: "rebound-sim-scheduler".into(),
            taint_key: "rebound.dev/simulated-node".into(),
            kubelet: None,
            real_operators: false,
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
