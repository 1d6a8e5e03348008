//! Records what a real kube-apiserver answers to the conformance scenarios
//! of the embedded API server (`rebound_sim::server::conformance`), into
//! `tests/conformance/recorded/<scenario>.json`, which the test
//! `conformance::embedded_server_answers_as_the_recorded_real_one` replays
//! against the embedded server.
//!
//! ```sh
//! cargo run --example record_conformance                 # every scenario
//! cargo run --example record_conformance -- watch-changes pod-defaults
//! ```
//!
//! It starts etcd, kube-apiserver and kube-controller-manager (envtest,
//! `crates/rebound-sim/src/envtest.rs`) from `REBOUND_TEST_ASSETS`, else `/tmp/k8s` (the
//! unpacked `../shared/k8s`), runs the scenarios on it (each in its own
//! namespace, four at a time) and stops it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use futures::StreamExt;
use rebound_sim::envtest::{ControlPlane, ControlPlaneConfig};
use rebound_sim::server::conformance::{self, Recording};

fn out_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/recorded")
}

async fn server_version(client: &kube::Client) -> String {
    client
        .apiserver_version()
        .await
        .map(|v| v.git_version)
        .unwrap_or_else(|e| format!("unknown ({e})"))
}

async fn client_of(kubeconfig: &str) -> Result<kube::Client, String> {
    let kc = kube::config::Kubeconfig::from_yaml(kubeconfig).map_err(|e| e.to_string())?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| e.to_string())?;
    kube::Client::try_from(cfg).map_err(|e| e.to_string())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let only: Vec<String> = std::env::args().skip(1).collect();
    let cfg = match ControlPlaneConfig::resolve() {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    eprintln!("starting a control plane from {}", cfg.assets.display());
    // The processes die with the thread that started them
    // (PR_SET_PDEATHSIG): a thread of its own keeps them until the end.
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<String, String>>();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let keeper = std::thread::spawn(move || match ControlPlane::start(&cfg) {
        Ok(cp) => {
            let _ = ready_tx.send(Ok(cp.kubeconfig_yaml()));
            let _ = stop_rx.recv();
            drop(cp);
        }
        Err(e) => {
            let _ = ready_tx.send(Err(e.to_string()));
        }
    });
    let kubeconfig = match ready_rx.recv() {
        Ok(Ok(k)) => k,
        Ok(Err(e)) => {
            eprintln!("control plane: {e}");
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("control plane start-up: {e}");
            return ExitCode::FAILURE;
        }
    };
    let client = match client_of(&kubeconfig).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("client: {e}");
            return ExitCode::FAILURE;
        }
    };
    let server = server_version(&client).await;
    let shared = conformance::shared_dir();
    if shared.is_none() {
        eprintln!(
            "NOTICE: ../shared is absent; the scenarios with the real job CRDs are not recorded"
        );
    }
    let scenarios: Vec<_> = conformance::all(shared.as_deref())
        .into_iter()
        .filter(|s| only.is_empty() || only.iter().any(|o| o == s.name))
        .collect();
    let dir = out_dir();
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("creating {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    let results: Vec<_> = futures::stream::iter(scenarios.iter())
        .map(|sc| {
            let client = client.clone();
            async move {
                let started = std::time::Instant::now();
                let r = conformance::run(sc, &client).await;
                (sc, r, started.elapsed())
            }
        })
        .buffer_unordered(4)
        .collect()
        .await;
    let mut failed = false;
    for (sc, r, took) in results {
        match r {
            Ok(steps) => {
                let rec = Recording {
                    scenario: sc.name.to_string(),
                    about: sc.about.to_string(),
                    server: server.clone(),
                    steps,
                };
                let path = dir.join(format!("{}.json", sc.name));
                let text = match serde_json::to_string_pretty(&rec) {
                    Ok(t) => t + "\n",
                    Err(e) => {
                        eprintln!("{}: {e}", sc.name);
                        failed = true;
                        continue;
                    }
                };
                if let Err(e) = std::fs::write(&path, text) {
                    eprintln!("writing {}: {e}", path.display());
                    failed = true;
                    continue;
                }
                eprintln!(
                    "recorded {} ({} steps, {:.1} s)",
                    sc.name,
                    rec.steps.len(),
                    took.as_secs_f64()
                );
            }
            Err(e) => {
                eprintln!("{e}");
                failed = true;
            }
        }
    }
    if only.is_empty() && shared.is_some() {
        // recordings of scenarios that no longer exist go
        let names: Vec<&str> = scenarios.iter().map(|s| s.name).collect();
        if let Ok(rd) = std::fs::read_dir(&dir) {
            for e in rd.flatten() {
                let p = e.path();
                let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or("");
                if p.extension().is_some_and(|x| x == "json") && !names.contains(&stem) {
                    eprintln!(
                        "removing the recording of a scenario that is gone: {}",
                        p.display()
                    );
                    let _ = std::fs::remove_file(&p);
                }
            }
        }
    }
    let _ = stop_tx.send(());
    let _ = keeper.join();
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
