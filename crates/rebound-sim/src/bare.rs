//! `rebound sim-server`: the embedded API server alone — no nodes, no
//! actors, no controller — behind a kubeconfig, so that the end-to-end
//! suite's shared-cluster mode (`REBOUND_E2E_KUBECONFIG`) can be run for
//! real where no kube-apiserver exists. It stands in for an empty cluster;
//! its differences from a real one are listed in docs/testing.md.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::{ApiServer, ApiServerHandle, SimError};

/// Flags of `rebound sim-server`.
#[derive(clap::Args, Debug, Clone)]
pub struct BareArgs {
    /// Where to write the kubeconfig of the server.
    #[arg(long, default_value = "rebound-sim.kubeconfig")]
    pub kubeconfig: PathBuf,
    /// Port on 127.0.0.1 (0: any free one).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
}

/// Why the bare server could not start.
#[derive(Debug, thiserror::Error)]
pub enum BareError {
    /// The server did not start.
    #[error("embedded API server: {0}")]
    Server(#[from] SimError),
    /// The kubeconfig could not be written.
    #[error("writing kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// Starts a bare server as a real cluster's API server would behave for
/// pods (a bound pod's deletion waits for its kubelet) and writes its
/// kubeconfig to `kubeconfig`.
pub async fn start(port: u16, kubeconfig: &Path) -> Result<ApiServerHandle, BareError> {
    let api = ApiServer::builder()
        .port(port)
        .hold_pod_deletion(true)
        .start()
        .await?;
    api.write_kubeconfig(kubeconfig)
        .map_err(|source| BareError::Kubeconfig {
            path: kubeconfig.to_owned(),
            source,
        })?;
    Ok(api)
}

/// Runs `rebound sim-server` until Ctrl-C.
pub async fn run(args: BareArgs) -> Result<ExitCode, BareError> {
    let api = start(args.port, &args.kubeconfig).await?;
    println!(
        "bare embedded API server at {} (kubeconfig {}); Ctrl-C stops it",
        api.url(),
        args.kubeconfig.display()
    );
    let _ = tokio::signal::ctrl_c().await;
    api.shutdown().await;
    Ok(ExitCode::SUCCESS)
}
