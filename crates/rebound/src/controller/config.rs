//! Controller configuration: flags and environment, documented in `--help`.

use crate::policy::{Limit, NodeConfig};
use std::net::SocketAddr;
use std::time::Duration;

fn parse_duration(s: &str) -> Result<Duration, String> {
    crate::api::duration::parse(s)
}

/// `rebound controller` flags. Every flag can also be set by the environment
/// variable named beside it.
#[derive(clap::Args, Debug, Clone)]
pub struct ControllerArgs {
    /// The operator's root namespace: its RecoveryPolicies are the cluster
    /// default, its Events are trusted, its Lease elects the leader.
    /// Default: the namespace the pod runs in (POD_NAMESPACE), else
    /// `rebound-system`.
    #[arg(long, env = "REBOUND_ROOT_NAMESPACE")]
    pub root_namespace: Option<String>,
    /// Elect a leader through a Lease (run 2 replicas for hot standby).
    #[arg(long, env = "REBOUND_LEADER_ELECTION", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_election: bool,
    /// Name of the leader Lease.
    #[arg(long, env = "REBOUND_LEASE_NAME", default_value = "rebound-controller")]
    pub lease_name: String,
    /// Lease duration: a standby takes over this long after the leader stops renewing.
    #[arg(long, env = "REBOUND_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,
    /// A step of the recovery core running longer than this is logged with
    /// its input and counted (`rebound_core_steps_stuck_total`), and while it
    /// runs the replica stops renewing its Lease (a standby takes over) and
    /// fails /healthz (the kubelet restarts it). Real steps take
    /// milliseconds.
    #[arg(long, env = "REBOUND_STEP_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub step_timeout: Duration,
    /// This replica's identity in the Lease. Default: POD_NAME or the hostname.
    #[arg(long, env = "REBOUND_IDENTITY")]
    pub identity: Option<String>,
    /// Client-side limit of writes per second: actions (job restarts, pod
    /// deletions, cordons, uncordons) first, Events only while half the
    /// burst is left for actions. A restart's annotation on the job follows
    /// it without waiting (it keeps the restart from being repeated after a
    /// fail-over), so writes can reach about twice this.
    #[arg(long, env = "REBOUND_QPS", default_value_t = 50.0)]
    pub qps: f64,
    /// Burst of writes allowed above --qps (half of it kept for actions).
    #[arg(long, env = "REBOUND_BURST", default_value_t = 100)]
    pub burst: u32,
    /// Most nodes separated within --breaker-window: a count (`5`) or a percentage (`10%`).
    /// A root-namespace RecoveryPolicy's nodeActions.maxSeparated overrides it.
    #[arg(long, env = "REBOUND_MAX_SEPARATED", default_value = "10%", value_parser = Limit::parse)]
    pub max_separated: Limit,
    /// The circuit breaker's window.
    #[arg(long, env = "REBOUND_BREAKER_WINDOW", default_value = "5m", value_parser = parse_duration)]
    pub breaker_window: Duration,
    /// Taint key put on nodes at level Separate (effect NoSchedule).
    #[arg(
        long,
        env = "REBOUND_TAINT_KEY",
        default_value = "rebound.dev/separated"
    )]
    pub taint_key: String,
    /// Never cordon or taint nodes (jobs are still restarted).
    #[arg(long, env = "REBOUND_NO_CORDON")]
    pub no_cordon: bool,
    /// Do not uncordon nodes rebound cordoned when their fault clears.
    #[arg(long, env = "REBOUND_NO_AUTO_UNCORDON")]
    pub no_auto_uncordon: bool,
    /// Node condition types read as faults (besides the agent's GpuFault and
    /// NpuFault, and Ready). By default those the shipped samples classify:
    /// node-problem-detector's (upstream and AKS's) and NVSentinel's.
    #[arg(
        long,
        env = "REBOUND_CONDITION_TYPES",
        value_delimiter = ',',
        default_value = crate::fault::node::DEFAULT_CONDITION_TYPES
    )]
    pub condition_types: Vec<String>,
    /// The restart agent's ClusterRole: in each namespace with pods wired
    /// for in-place restarts, rebound binds it to the ServiceAccounts those
    /// pods run as (RoleBinding `rebound-restart-agent-access`), so their
    /// agents can read their jobs. Empty: bindings are made by hand
    /// (docs/in-place.md).
    #[arg(
        long,
        env = "REBOUND_RESTART_AGENT_ROLE",
        default_value = "rebound-restart-agent"
    )]
    pub restart_agent_role: String,
    /// Decide and record everything, act on nothing.
    #[arg(long, env = "REBOUND_DRY_RUN")]
    pub dry_run: bool,
    /// Ignore fault Events and container terminations older than this when
    /// they are first seen (e.g. at start-up): a container that failed days
    /// ago and was restarted in place is not a reason to restart its job now.
    #[arg(long, env = "REBOUND_FAULT_MAX_AGE", default_value = "10m", value_parser = parse_duration)]
    pub fault_max_age: Duration,
    /// Optional label selector restricting the pods watched (memory on huge clusters).
    #[arg(long, env = "REBOUND_POD_SELECTOR")]
    pub pod_selector: Option<String>,
    /// Log format.
    #[arg(long, env = "REBOUND_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, env = "REBOUND_LISTEN", default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// How often policy and classification status is written (batched).
    #[arg(long, env = "REBOUND_STATUS_INTERVAL", default_value = "5s", value_parser = parse_duration)]
    pub status_interval: Duration,
    /// Publish MindCluster ClusterD's cluster fault view
    /// (`cluster-info-node-cm`, `cluster-info-device-<m>`, `fault-job-info`)
    /// for the Ascend Volcano scheduler plugin, in place of ClusterD.
    #[arg(long, env = "REBOUND_CLUSTERD_VIEW", default_value_t = false, action = clap::ArgAction::Set)]
    pub clusterd_view: bool,
    /// Namespace of the `cluster-info-*` ConfigMaps (ClusterD's `mindx-dl`;
    /// the namespace must exist).
    #[arg(long, env = "REBOUND_CLUSTERD_NAMESPACE", default_value = "mindx-dl")]
    pub clusterd_namespace: String,
    /// Namespace of `fault-job-info` (ClusterD's `cluster-system`; must exist).
    #[arg(
        long,
        env = "REBOUND_CLUSTERD_JOB_NAMESPACE",
        default_value = "cluster-system"
    )]
    pub clusterd_job_namespace: String,
    /// Build HCCL rank tables (`hccl.json` in `rings-config-<job>`) for jobs
    /// labelled `ring-controller.atlas=ascend-910`, as HCCL-Controller does
    /// (run one or the other, not both).
    #[arg(long, env = "REBOUND_RANK_TABLES", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub rank_tables: bool,
    /// Layout of the rank tables (HCCL-Controller's `-json`).
    #[arg(
        long,
        env = "REBOUND_RANK_TABLE_FORMAT",
        value_enum,
        default_value = "v2"
    )]
    pub rank_table_format: crate::ascend::ranktable::Format,
}

impl ControllerArgs {
    /// Defaults as if no flag were given (for tests, demo and sim).
    pub fn defaults() -> ControllerArgs {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct P {
            #[command(flatten)]
            a: ControllerArgs,
        }
        // Parsing an empty command line with only defaults cannot fail.
        P::try_parse_from(["rebound"])
            .map(|p| p.a)
            .unwrap_or_else(|e| panic!("controller flag defaults are invalid: {e}"))
    }

    /// The root namespace after defaulting.
    pub fn root_namespace(&self) -> String {
        self.root_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .unwrap_or_else(|| "rebound-system".into())
    }

    /// This replica's identity after defaulting.
    pub fn identity(&self) -> String {
        self.identity
            .clone()
            .or_else(|| std::env::var("POD_NAME").ok())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| format!("rebound-{}", std::process::id()))
    }

    /// Node behaviour from the flags.
    pub fn node_config(&self) -> NodeConfig {
        NodeConfig {
            cordon: !self.no_cordon,
            taint_key: self.taint_key.clone(),
            max_separated: self.max_separated,
            breaker_window: self.breaker_window,
            auto_uncordon: !self.no_auto_uncordon,
            ..NodeConfig::default()
        }
    }
}
