//! The `rebound` command: controller, agent, explain, crds, inject, demo
//! and sim. `demo`, `sim` and `sim-server` run the simulator (the
//! rebound-sim crate), which only the default `sim` feature links: the
//! images build without it and answer those commands with an error.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// rebound: recover AI training jobs from GPU/NPU, node and process faults.
#[derive(Parser, Debug)]
#[command(name = "rebound", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the operator against the cluster of the environment (in-cluster
    /// config or KUBECONFIG).
    Controller(rebound::controller::ControllerArgs),
    /// Run the node agent (DaemonSet on accelerator nodes).
    Agent(rebound::agent::AgentArgs),
    /// The in-pod agent of in-place restarts (a native sidecar, see
    /// docs/in-place.md): holds the pod's workers at the barrier and exits
    /// with the restart rule's code when the pod is behind its job.
    RestartAgent(rebound::inplace::restart_agent::RestartAgentArgs),
    /// The embedded cluster with the controller: a narrated demo.
    #[cfg(feature = "sim")]
    Demo(rebound_sim::demo::DemoArgs),
    /// The embedded cluster at scale: reaction times, API calls, memory.
    #[cfg(feature = "sim")]
    Sim(Box<rebound_sim::bench::SimArgs>),
    /// The embedded API server alone (no nodes, actors or controller), for
    /// the end-to-end suite's REBOUND_E2E_KUBECONFIG mode.
    #[cfg(feature = "sim")]
    SimServer(rebound_sim::bare::BareArgs),
    /// Not in this build: the simulator commands (`demo`, `sim`,
    /// `sim-server`) need the `sim` feature, which the images leave out.
    #[cfg(not(feature = "sim"))]
    #[command(hide = true, name = "demo", aliases = ["sim", "sim-server"])]
    NoSim {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        _args: Vec<String>,
    },
    /// Print the CRD YAML (what `crds/` holds), or write one file per CRD.
    Crds {
        /// Write `<name>.yaml` files into this folder instead of printing.
        #[arg(long)]
        out: Option<std::path::PathBuf>,
    },
    /// Offline: classify a fault and decide with the given policy files.
    Explain(rebound::explain::ExplainArgs),
    /// Offline: add the in-place restart agent to job manifests
    /// (`kubectl apply -f <(rebound inject -f job.yaml)`).
    Inject(rebound::inplace::inject_cli::InjectArgs),
    /// Print the MutatingAdmissionPolicy and binding that wire opted-in
    /// pods at creation (what config/admission/ and the chart hold).
    AdmissionPolicy(rebound::inplace::admission::AdmissionPolicyArgs),
}

/// mimalloc instead of glibc malloc: less CPU on the watch path and less
/// memory kept after the initial lists (see Cargo.toml).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc v3's `mi_option_e` (mimalloc.h),
/// which libmimalloc-sys does not name; its default (1,000 ms in v3's
/// options.c) is checked by a test, so a renumbering fails there and not
/// silently here.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Return freed memory to the OS at once instead of a second later: the
/// controller's initial lists of 20,000 pods free their pages in bursts
/// that otherwise stay resident (peak RSS 73-75 MiB, 63-66 MiB with it).
fn purge_freed_memory_at_once() {
    // SAFETY: sets a process-wide mimalloc option; mimalloc allows that at
    // any time and reads it at each purge decision.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Only the long-running processes of a cluster, whose resident memory
    // is what users budget; the simulation allocates far more and runs
    // faster with mimalloc's default.
    if matches!(
        cli.command,
        Command::Controller(_) | Command::Agent(_) | Command::RestartAgent(_)
    ) {
        purge_freed_memory_at_once();
    }
    let json = matches!(&cli.command, Command::Controller(a) if a.log_format == "json");
    init_logging(json, quiet(&cli.command));
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Commands whose output is for a person (or a pipe) log errors only.
fn quiet(c: &Command) -> bool {
    match c {
        #[cfg(feature = "sim")]
        Command::Demo(_) | Command::Sim(_) => true,
        Command::Explain(_)
        | Command::Crds { .. }
        | Command::Inject(_)
        | Command::AdmissionPolicy(_) => true,
        _ => false,
    }
}

fn init_logging(json: bool, quiet: bool) {
    use tracing_subscriber::EnvFilter;
    // kube's client logs every failed request at ERROR on its own; the
    // callers report what matters, and at the end of `rebound sim` the
    // stopped server would otherwise fill the terminal with them.
    let default = if quiet {
        "error,kube_client=off"
    } else {
        "info"
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        b.json().init();
    } else {
        b.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Controller(a) => {
            runtime()?.block_on(rebound::controller::run(a))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Agent(a) => {
            runtime()?.block_on(rebound::agent::run(a))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::RestartAgent(a) => {
            // Exit at once with the rule's code: the kubelet restarts
            // every container of the pod in place.
            let code = rebound::inplace::restart_agent::run(a)?;
            std::process::exit(code)
        }
        #[cfg(feature = "sim")]
        Command::Demo(a) => runtime()?.block_on(rebound_sim::demo::run(a)),
        #[cfg(feature = "sim")]
        Command::Sim(a) => runtime()?.block_on(rebound_sim::bench::run(*a)),
        #[cfg(feature = "sim")]
        Command::SimServer(a) => Ok(runtime()?.block_on(rebound_sim::bare::run(a))?),
        #[cfg(not(feature = "sim"))]
        Command::NoSim { .. } => anyhow::bail!(
            "this rebound was built without the simulator (the `sim` feature): \
             `demo`, `sim` and `sim-server` are not in it; from the source, \
             `cargo run -- demo` builds it with them"
        ),
        Command::Crds { out: None } => {
            print!("{}", rebound::api::crds_yaml()?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Crds { out: Some(dir) } => {
            std::fs::create_dir_all(&dir)?;
            for (name, yaml) in rebound::api::crd_files()? {
                std::fs::write(dir.join(&name), yaml)?;
                eprintln!("wrote {}", dir.join(name).display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Explain(a) => explain(a),
        Command::Inject(a) => Ok(rebound::inplace::inject_cli::run(a)),
        Command::AdmissionPolicy(a) => {
            print!("{}", a.yaml()?);
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn explain(a: rebound::explain::ExplainArgs) -> anyhow::Result<ExitCode> {
    use rebound::explain as ex;
    let out = ex::run(&a, chrono::Utc::now())?;
    for w in &out.warnings {
        eprintln!("warning: {w}");
    }
    if a.output == "json" {
        println!("{}", serde_json::to_string_pretty(&out.decision)?);
    } else {
        print!("{}", ex::render_text(&out.decision));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_purge_delay_option_is_the_one_set() {
        // mimalloc v3's default purge_delay is 1,000 (ms); no other
        // option defaults to it.
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            // SAFETY: reads a process-wide option.
            let before = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
            assert_eq!(
                before, 1000,
                "option {MI_OPTION_PURGE_DELAY} is not purge_delay"
            );
        }
        purge_freed_memory_at_once();
        // SAFETY: as above.
        let after = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        assert_eq!(after, 0);
    }
}
