//! Command-line flags and environment of `rebound agent`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::ArgAction;

use super::backoff::RestartPolicy;
use super::state::FoldConfig;

/// Flags of `rebound agent`; each also reads an environment variable so a
/// DaemonSet can set it (the node name comes from the downward API).
#[derive(clap::Args, Clone, Debug)]
pub struct AgentArgs {
    /// This node's name (downward API `spec.nodeName`). Needed unless
    /// `--dry-run`.
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,

    /// Read the kernel log from this file instead of `/dev/kmsg` (dmesg
    /// output, a host log mounted elsewhere, tests). Followed like `tail -f`
    /// unless `--once`.
    #[arg(long, env = "REBOUND_KMSG_FILE")]
    pub kmsg_file: Option<PathBuf>,

    /// Read the kernel log (`/dev/kmsg` or `--kmsg-file`).
    #[arg(long, env = "REBOUND_KMSG", default_value_t = true, action = ArgAction::Set)]
    pub kmsg: bool,

    /// Read every source once, report, and exit.
    #[arg(long)]
    pub once: bool,

    /// Write nothing to the cluster: print the faults, conditions and Events
    /// that would be written (no cluster needed).
    #[arg(long, env = "REBOUND_DRY_RUN")]
    pub dry_run: bool,

    /// A device is healthy again (its condition clears) after this long
    /// without a fault. humantime: `10m`, `1h 30m`.
    #[arg(long, env = "REBOUND_QUIET_PERIOD", default_value = "10m", value_parser = humantime::parse_duration)]
    pub quiet_period: Duration,

    /// Faults that clear only when the node reboots, as `SOURCE:CODE`
    /// (comma-separated). Default: a GPU that fell off the bus.
    #[arg(
        long,
        env = "REBOUND_STICKY_CODES",
        value_delimiter = ',',
        default_value = "NvidiaXid:79"
    )]
    pub sticky_codes: Vec<String>,

    /// Most faults kept active at once (bounded memory).
    #[arg(long, env = "REBOUND_MAX_FAULTS", default_value_t = 256)]
    pub max_faults: usize,

    /// A repeated fault updates its Event's count at most this often.
    #[arg(long, env = "REBOUND_EVENT_FOLD_INTERVAL", default_value = "1m", value_parser = humantime::parse_duration)]
    pub event_fold_interval: Duration,

    /// How often state is flushed to the cluster (expiries, Event counts).
    #[arg(long, env = "REBOUND_FLUSH_INTERVAL", default_value = "5s", value_parser = humantime::parse_duration)]
    pub flush_interval: Duration,

    /// Namespace of the Events about this node. A real API server accepts an
    /// Event about a Node only in `default` or `kube-system`; the controller
    /// trusts `kube-system` (and its root namespace), where tenants cannot
    /// write, so only these Events may cordon.
    #[arg(
        long,
        env = "REBOUND_EVENT_NAMESPACE",
        default_value = crate::fault::event::SYSTEM_NAMESPACE
    )]
    pub event_namespace: String,

    /// PCI address to GPU index, `0000:3b:00.0=0,0000:5e:00.0=1`; overrides
    /// what `--nvidia-proc-dir` says.
    #[arg(long, env = "REBOUND_PCI_MAP")]
    pub pci_map: Option<String>,

    /// The driver's per-GPU directory; its entries (PCI addresses) in
    /// address order give GPU indices, as `nvidia-smi` numbers them.
    #[arg(
        long,
        env = "REBOUND_NVIDIA_PROC_DIR",
        default_value = "/proc/driver/nvidia/gpus"
    )]
    pub nvidia_proc_dir: PathBuf,

    /// The kubelet's PodResources socket, asked which pods hold a GPU a
    /// fault names (device plugins); empty: do not ask.
    #[arg(
        long,
        env = "REBOUND_POD_RESOURCES_SOCKET",
        default_value = super::pod_resources::DEFAULT_SOCKET
    )]
    pub pod_resources_socket: PathBuf,

    /// Run `dcgmi diag` periodically (a node without `dcgmi` logs it once).
    #[arg(long, env = "REBOUND_DCGM", default_value_t = true, action = ArgAction::Set)]
    pub dcgm: bool,

    /// `dcgmi` binary.
    #[arg(long, env = "REBOUND_DCGMI", default_value = "dcgmi")]
    pub dcgmi_path: String,

    /// `dcgmi diag -r` level (1 quick, 2 medium, 3-4 long and invasive).
    #[arg(long, env = "REBOUND_DCGM_LEVEL", default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=4))]
    pub dcgm_level: u8,

    /// Time between two `dcgmi diag` runs.
    #[arg(long, env = "REBOUND_DCGM_INTERVAL", default_value = "5m", value_parser = humantime::parse_duration)]
    pub dcgm_interval: Duration,

    /// Longest a `dcgmi` run may take.
    #[arg(long, env = "REBOUND_DCGM_TIMEOUT", default_value = "10m", value_parser = humantime::parse_duration)]
    pub dcgm_timeout: Duration,

    /// Run `dcgmi diag` also while compute processes run on the GPUs (NVML
    /// tells; without NVML the agent cannot tell and runs it). Off: a
    /// diagnostic loads the GPUs a job is training on.
    #[arg(long, env = "REBOUND_DCGM_DIAG_WHILE_BUSY", default_value_t = false, action = ArgAction::Set)]
    pub dcgm_diag_while_busy: bool,

    /// Also run `dcgmi health -c -j` with each diagnostic.
    #[arg(long, env = "REBOUND_DCGM_HEALTH", default_value_t = true, action = ArgAction::Set)]
    pub dcgm_health: bool,

    /// Scrape this node's dcgm-exporter for DCGM health (XID gauge, row-remap
    /// failure, double-bit ECC, pages pending retirement), e.g.
    /// `http://$(HOST_IP):9400/metrics`. Empty: off. Needs no `dcgmi`.
    #[arg(long, env = "REBOUND_DCGM_EXPORTER_URL", default_value = "")]
    pub dcgm_exporter_url: String,

    /// Time between two dcgm-exporter scrapes.
    #[arg(long, env = "REBOUND_DCGM_EXPORTER_INTERVAL", default_value = "30s", value_parser = humantime::parse_duration)]
    pub dcgm_exporter_interval: Duration,

    /// Poll NVML (needs a build with the `nvml` feature; the library is
    /// loaded at run time).
    #[arg(long, env = "REBOUND_NVML", default_value_t = true, action = ArgAction::Set)]
    pub nvml: bool,

    /// The driver's NVML library by full path, instead of `libnvidia-ml.so.1`
    /// found by the dynamic loader (the NVIDIA container toolkit puts it on
    /// the loader's path). For a host driver directory mounted into the
    /// container: only this file is loaded from it, its dependencies (libc)
    /// still come from the image, which `LD_LIBRARY_PATH` on the host's
    /// library directory would not guarantee.
    #[arg(long, env = "REBOUND_NVML_LIBRARY")]
    pub nvml_library: Option<PathBuf>,

    /// Time between two NVML health polls.
    #[arg(long, env = "REBOUND_NVML_INTERVAL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub nvml_interval: Duration,

    /// Poll `npu-smi info` (Ascend nodes without the device plugin).
    #[arg(long, env = "REBOUND_NPU_SMI", default_value_t = false, action = ArgAction::Set)]
    pub npu_smi: bool,

    /// `npu-smi` binary.
    #[arg(long, env = "REBOUND_NPU_SMI_PATH", default_value = "npu-smi")]
    pub npu_smi_path: String,

    /// Time between two `npu-smi` polls.
    #[arg(long, env = "REBOUND_NPU_SMI_INTERVAL", default_value = "1m", value_parser = humantime::parse_duration)]
    pub npu_smi_interval: Duration,

    /// First delay before a source that stopped (or is not there) is
    /// started again; the delays double up to `--source-restart-max`.
    #[arg(long, env = "REBOUND_SOURCE_RESTART_MIN", default_value = "1s", value_parser = humantime::parse_duration)]
    pub source_restart_min: Duration,

    /// Longest delay before a source is started again; a source that ran
    /// this long before it stopped starts the delays over.
    #[arg(long, env = "REBOUND_SOURCE_RESTART_MAX", default_value = "5m", value_parser = humantime::parse_duration)]
    pub source_restart_max: Duration,

    /// Address of `/metrics` and `/healthz`; empty disables.
    #[arg(long, env = "REBOUND_METRICS_ADDR", default_value = "0.0.0.0:9102")]
    pub metrics_addr: String,
}

impl AgentArgs {
    /// The fold settings these flags ask for.
    pub fn fold_config(&self) -> FoldConfig {
        FoldConfig {
            quiet_period: self.quiet_period,
            max_entries: self.max_faults.max(1),
            sticky: self
                .sticky_codes
                .iter()
                .filter_map(|s| s.split_once(':'))
                .map(|(s, c)| (s.trim().to_string(), c.trim().to_string()))
                .collect(),
        }
    }

    /// The delays between restarts of a source these flags ask for.
    pub fn restart_policy(&self) -> RestartPolicy {
        RestartPolicy {
            min: self.source_restart_min,
            max: self.source_restart_max,
        }
    }

    /// The metrics address, `None` when disabled.
    pub fn metrics_socket(&self) -> anyhow::Result<Option<SocketAddr>> {
        use anyhow::Context as _;
        if self.metrics_addr.trim().is_empty() {
            return Ok(None);
        }
        self.metrics_addr
            .parse()
            .map(Some)
            .with_context(|| format!("--metrics-addr {:?} is not HOST:PORT", self.metrics_addr))
    }

    /// Parse flags as `rebound agent` would (environment included), for
    /// tests and for embedding the agent in another command.
    pub fn from_args<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::{Args, FromArgMatches};
        let cmd = AgentArgs::augment_args(clap::Command::new("agent").no_binary_name(true));
        let matches = cmd.try_get_matches_from(args)?;
        AgentArgs::from_arg_matches(&matches)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        agent: AgentArgs,
    }

    #[test]
    fn flags_parse() {
        let c = Cli::try_parse_from([
            "x",
            "--node-name",
            "gpu-1",
            "--kmsg-file",
            "/tmp/k",
            "--once",
            "--dry-run",
            "--quiet-period",
            "1h 30m",
            "--dcgm",
            "false",
            "--dcgm-level",
            "2",
            "--sticky-codes",
            "NvidiaXid:79,NvidiaXid:48",
            "--pci-map",
            "0000:3b:00.0=0",
        ])
        .expect("parses");
        let a = c.agent;
        assert_eq!(a.node_name.as_deref(), Some("gpu-1"));
        assert!(a.once && a.dry_run && !a.dcgm);
        assert_eq!(a.quiet_period, Duration::from_secs(5400));
        assert_eq!(a.dcgm_level, 2);
        assert_eq!(a.fold_config().sticky.len(), 2);
        assert!(Cli::try_parse_from(["x", "--dcgm-level", "7"]).is_err());
        let d = AgentArgs::from_args(["--once"]).expect("defaults");
        assert!(d.once && d.kmsg && d.dcgm && !d.npu_smi);
        assert_eq!(d.quiet_period, Duration::from_secs(600));
        assert_eq!(d.restart_policy(), RestartPolicy::default());
    }
}
