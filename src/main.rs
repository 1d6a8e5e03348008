//! The `rebound` command: controller, agent, explain, crds, demo and sim.

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
    /// Print the CRD YAML (what `crds/` holds), or write one file per CRD.
    Crds {
        /// Write `<name>.yaml` files into this folder instead of printing.
        #[arg(long)]
        out: Option<std::path::PathBuf>,
    },
    /// Offline: classify a fault and decide with the given policy files.
    Explain(rebound::explain::ExplainArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
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
    }
}

fn explain(a: rebound::explain::ExplainArgs) -> anyhow::Result<ExitCode> {
    use rebound::explain as ex;
    let now = chrono::Utc::now();
    let loaded = ex::load_paths(&a.files)?;
    if loaded.classifications.is_empty() && loaded.policies.is_empty() {
        anyhow::bail!("no FaultClassification or RecoveryPolicy found in {:?}", a.files);
    }
    let (mut engine, warnings) = ex::engine_from(&loaded, &a.root_namespace, a.nodes)?;
    for w in warnings {
        eprintln!("warning: {w}");
    }
    let fault = ex::parse_fault(&a.fault, now).map_err(|e| anyhow::anyhow!("--fault: {e}"))?;
    let job = a
        .job
        .as_deref()
        .map(|j| ex::parse_job(j, &a.restarts_ago, &a.hw_restarts_ago, now))
        .transpose()
        .map_err(|e| anyhow::anyhow!("--job: {e}"))?;
    let d = ex::explain(&mut engine, fault, job, a.repeat.max(1), now);
    if a.output == "json" {
        println!("{}", serde_json::to_string_pretty(&d)?);
    } else {
        print!("{}", ex::render_text(&d));
    }
    Ok(ExitCode::SUCCESS)
}
