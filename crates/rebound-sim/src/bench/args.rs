//! The flags of `rebound sim` ([`SimArgs`]), shared by the scenarios.

use std::path::PathBuf;
use std::time::Duration;

use super::resume;

/// `rebound sim` flags.
#[derive(clap::Args, Debug, Clone)]
pub struct SimArgs {
    /// Simulated nodes (default 200; 2,000 for `resume`). Read it with
    /// [`SimArgs::nodes`].
    #[arg(long = "nodes")]
    pub nodes_flag: Option<usize>,
    /// Pods per node (in PyTorchJobs of --job-size pods).
    #[arg(long, default_value_t = 10)]
    pub pods_per_node: usize,
    /// Pods per job (one master and workers; default 8, 1,024 for
    /// `resume`). Read it with [`SimArgs::job_size`].
    #[arg(long = "job-size")]
    pub job_size_flag: Option<usize>,
    /// pod-exit | node-xid | storm | flapping | tenant-flood (one tenant's
    /// flood of fault Events on a node while other jobs' pods fail) |
    /// resume (time-to-resume of one wired job per recovery tier: InPlace,
    /// ReplaceFaulty, Recreate)
    #[arg(long, default_value = "pod-exit", value_parser = ["pod-exit", "node-xid", "storm", "flapping", "tenant-flood", "resume"])]
    pub scenario: String,
    /// Faults to inject (storm: nodes failing at once; default: a quarter
    /// of the nodes for storm, 20 for tenant-flood, else 100).
    #[arg(long)]
    pub faults: Option<usize>,
    /// tenant-flood: the tenant's fault Events.
    #[arg(long, default_value_t = 1000)]
    pub flood_events: usize,
    /// tenant-flood: each Event's message, in KiB.
    #[arg(long, default_value_t = 256)]
    pub flood_kib: usize,
    /// Pause between two faults (pod-exit, node-xid). Every fault's
    /// recovery makes some 50 writes (pods deleted, recreated, bound,
    /// started); a real server on a small machine saturates at a pace the
    /// embedded one absorbs, and then measures its own queue.
    #[arg(long, default_value = "20ms", value_parser = humantime::parse_duration)]
    pub interval: Duration,
    /// The controller's write QPS limit (shown against the storm's rate).
    #[arg(long, default_value_t = 50.0)]
    pub qps: f64,
    /// Run the controller in this process (no memory figure) instead of as
    /// a child process.
    #[arg(long)]
    pub in_process: bool,
    /// Run against a real control plane started from this directory of
    /// binaries (kube-apiserver, kube-controller-manager; etcd from PATH if
    /// not there). Without a directory: REBOUND_TEST_ASSETS, else the
    /// Kubernetes set tools/real-components/build made. Its audit log gives the server-side
    /// figures; every object goes through its API.
    #[arg(long, num_args = 0..=1, default_missing_value = "", value_parser = any_path, conflicts_with = "kubeconfig")]
    pub assets: Option<PathBuf>,
    /// With --assets: copy the API server's audit log here before the
    /// control plane stops (to look at what the figures were computed from).
    /// With --real-operators, that control plane's goes beside it
    /// (`<name>.real-operators.log`).
    #[arg(long)]
    pub keep_audit_log: Option<PathBuf>,
    /// Run against the cluster of this kubeconfig (cluster-admin; no
    /// Kubeflow operator installed): fake nodes, per-run namespaces and the
    /// simulated operators are set up there and removed afterwards. Its
    /// server keeps no log this process can read, so reaction is measured
    /// on the client's clock only.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long, default_value = "text", value_parser = ["text", "json"])]
    pub output: String,
    /// What starting and stopping pods costs in the simulated scheduler and
    /// kubelets: comma-separated key=value over the modelled costs
    /// (`sandbox=3s,image=5m`), or over none after `zero` (`zero` alone: pods
    /// start at once). Keys: schedule (pods/s), schedule-burst, devices,
    /// sandbox, image, start, init, ready, stop, kill. See
    /// docs/simulated-kubelet.md for the defaults and their sources.
    #[arg(long, default_value = "modelled", value_parser = parse_pod_costs)]
    pub pod_costs: crate::actors::kubelet::PodCosts,
    /// resume: the kind of the job measured (volcano | pytorchjob |
    /// trainjob | jobset | job).
    #[arg(long, default_value = "volcano", value_parser = resume::KIND_NAMES)]
    pub job_kind: String,
    /// The client limits of the simulated job operators and of Volcano's
    /// scheduler: comma-separated key=value over the components' published
    /// defaults, or over none after `none`. Keys: volcano-qps,
    /// volcano-burst, vc-scheduler-qps, vc-scheduler-burst,
    /// vc-scheduler-period, training-operator-qps, training-operator-burst,
    /// job-controller-qps, job-controller-burst, job-max-per-sync,
    /// jobset-qps, jobset-burst, trainer-qps, trainer-burst. See
    /// docs/simulated-kubelet.md for each default and its source.
    #[arg(long, default_value = "defaults", value_parser = parse_operator_limits)]
    pub operator_limits: crate::actors::ratelimit::OperatorLimits,
    /// resume: the application's own start after its pods are Ready
    /// (checkpoint load, process-group set-up), the same in every tier:
    /// reported as a separate term beside each time-to-resume.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub app_start: Duration,
    /// resume: the tiers to measure, comma-separated (default all three;
    /// they run in the order InPlace, ReplaceFaulty, Recreate whatever the
    /// order given). The goals of tiers left out are not reported.
    #[arg(long, value_delimiter = ',', value_parser = resume::TIERS)]
    pub tiers: Vec<String>,
    /// resume, with --assets: start a real node beside the control plane
    /// (kubelet v1.36.2 from the assets directory with its `pause`, Debian's
    /// containerd and runc; root) and add --real-node-pods pods to each
    /// tier's job, on that node: the same job, the same fault, and their
    /// own fault → Running-and-Ready time in the report beside the
    /// simulated pods'. Volcano Jobs only: the real node's pods use the
    /// host's network, so each needs a pod template (a task) of its own,
    /// with its own probe port.
    #[arg(long, requires = "assets")]
    pub real_node: bool,
    /// With --real-node: how many of the job's pods run on the real node,
    /// one task of one pod each, beside --job-size pods on the simulated
    /// nodes. 2 shared cores run 4 at once (docs/simulated-kubelet.md).
    #[arg(long, default_value_t = 4, requires = "real_node")]
    pub real_node_pods: usize,
    /// With --real-node: the `rebound` binary put into the real node's
    /// image for the restart agents (default: this executable).
    #[arg(long, requires = "real_node")]
    pub agent_binary: Option<PathBuf>,
    /// With --assets: start kube-scheduler v1.36.2 from the assets
    /// directory and let it place the job's pods (profile
    /// `default-scheduler`) instead of the simulated scheduler; the report
    /// says which scheduler bound them, from the audit log.
    #[arg(long, requires = "assets")]
    pub real_scheduler: bool,
    /// resume: after the tiers, run the Recreate tier once more on the
    /// real components, on a control plane of its own from this directory
    /// (without one: as `--assets` without one): kube-scheduler, the job
    /// kind's real operator from tools/real-components (training-operator,
    /// Volcano, JobSet, Trainer; batch Jobs by kube-controller-manager),
    /// nodes and pods played by KWOK at the pod costs of --pod-costs. The
    /// report puts its time-to-resume beside the model's and divides it by
    /// this run's in-place time (which stays on the simulated kubelets:
    /// KWOK runs no container to restart in place).
    #[arg(long, num_args = 0..=1, default_missing_value = "", value_parser = any_path)]
    pub real_operators: Option<PathBuf>,
    /// With --real-operators: the nodes registered for KWOK (default: one
    /// per 8 pods of the job, an 8-GPU node's worth).
    #[arg(long, requires = "real_operators")]
    pub kwok_nodes: Option<usize>,
}

fn parse_operator_limits(s: &str) -> Result<crate::actors::ratelimit::OperatorLimits, String> {
    crate::actors::ratelimit::OperatorLimits::parse(s).map_err(|e| e.to_string())
}

fn parse_pod_costs(s: &str) -> Result<crate::actors::kubelet::PodCosts, String> {
    crate::actors::kubelet::PodCosts::parse(s).map_err(|e| e.to_string())
}

/// A path, empty allowed (`--assets` alone: from the environment).
fn any_path(s: &str) -> Result<PathBuf, std::convert::Infallible> {
    Ok(PathBuf::from(s))
}

impl SimArgs {
    /// `--nodes`, or the scenario's default: 2,000 for `resume` (the
    /// cluster size issue #14 measures), 200 otherwise.
    pub fn nodes(&self) -> usize {
        self.nodes_flag
            .unwrap_or(if self.scenario == "resume" { 2000 } else { 200 })
    }

    /// `--job-size`, or the scenario's default: 1,024 for `resume` (one
    /// large training job), 8 otherwise (many small jobs).
    pub fn job_size(&self) -> usize {
        self.job_size_flag
            .unwrap_or(if self.scenario == "resume" { 1024 } else { 8 })
    }

    /// Refuses combinations clap cannot express: `--keep-audit-log`
    /// needs a control plane this process starts.
    pub fn check(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.keep_audit_log.is_none()
                || self.assets.is_some()
                || (self.real_operators.is_some() && self.scenario == "resume"),
            "--keep-audit-log needs --assets (or --real-operators with --scenario resume): only a control plane this process starts has an audit log to keep"
        );
        anyhow::ensure!(
            self.real_operators.is_none() || self.scenario == "resume",
            "--real-operators is for --scenario resume"
        );
        Ok(())
    }

    /// The flags of `rebound sim` as given on its command line (after
    /// `sim`), with the command's defaults for the rest: what tests and
    /// scripts use to run [`super::resume::measure`].
    pub fn from_flags(flags: &[&str]) -> Result<SimArgs, clap::Error> {
        #[derive(clap::Parser)]
        struct Sim {
            #[command(flatten)]
            args: SimArgs,
        }
        let argv = std::iter::once("sim").chain(flags.iter().copied());
        <Sim as clap::Parser>::try_parse_from(argv).map(|s| s.args)
    }
}
