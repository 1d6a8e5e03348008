//! A control plane of a test module's own, with kube-scheduler (and the
//! flags the module asks for), started once per test process on a keeper
//! thread whose processes die with the test binary, and a test bed of fake
//! nodes on it with no job operator simulated (the batch Jobs are
//! kube-controller-manager's). For the real-server-only modules that need
//! what the shared server does not run (`dra_devices`, `held_cordon_real`).

use super::*;
use rebound_sim::cluster::Operators;
use rebound_sim::envtest::{ControlPlane, ControlPlaneConfig, real_server_required};
use std::sync::OnceLock;

/// The module's control plane in `cell`, started from `config` the first
/// time; `None` (with the reason printed) when the binaries are missing, a
/// panic when they are missing and `REBOUND_REQUIRE_REAL_SERVER=1`, or
/// when it fails to start.
pub async fn plane_or_skip(
    test: &str,
    what: &'static str,
    cell: &'static OnceLock<Result<ControlPlane, String>>,
    config: impl FnOnce() -> Result<ControlPlaneConfig, String>,
) -> Option<&'static ControlPlane> {
    let cfg = match config() {
        Ok(cfg) => cfg,
        Err(why) if real_server_required() => panic!(
            "{test}: no real control plane {what}: {why} ({} is set)",
            rebound_sim::envtest::REQUIRE_ENV
        ),
        Err(why) => {
            eprintln!("SKIPPED on the real server: {test}: {why}");
            return None;
        }
    };
    let started = tokio::task::spawn_blocking(move || {
        cell.get_or_init(|| {
            let t = std::time::Instant::now();
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::Builder::new()
                .name("own-envtest".into())
                .spawn(move || {
                    let r = ControlPlane::start(&cfg).map_err(|e| e.to_string());
                    let ok = r.is_ok();
                    let _ = tx.send(r);
                    if ok {
                        loop {
                            std::thread::park();
                        }
                    }
                })
                .expect("keeper thread");
            let r = rx
                .recv()
                .unwrap_or_else(|_| Err("keeper thread died".into()));
            eprintln!("control plane {what} started in {:?}", t.elapsed());
            r
        })
        .as_ref()
    })
    .await
    .expect("control plane start");
    match started {
        Ok(cp) => Some(cp),
        Err(e) => panic!("{test}: the control plane {what} did not start: {e}"),
    }
}

/// A bed of `nodes` fake nodes on the control plane, no job operator
/// simulated.
pub async fn bed_on(cp: &ControlPlane, nodes: usize) -> Testbed {
    init_logs();
    let upstream = cp.client_config().await.expect("client config");
    let cfg = SimConfig {
        nodes,
        operators: Operators {
            kubeflow: false,
            volcano: false,
            jobset: false,
            batch: false,
        },
        ..SimConfig::default()
    };
    Testbed::connect_config(upstream, cfg)
        .await
        .expect("test bed")
}
