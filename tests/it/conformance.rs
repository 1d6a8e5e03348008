//! The embedded API server answers as the real kube-apiserver recorded in
//! `tests/conformance/recorded/` (re-record: `cargo run --example
//! record_conformance`), except for the differences accepted, with their
//! reasons, in `tests/conformance/known-differences.yaml` (and in prose in
//! docs/embedded-cluster.md). A difference not listed fails the test, and
//! so does a listed one that no longer occurs, so the list stays true.
//!
//! `REBOUND_CONFORMANCE_ONLY=a,b` replays only those scenarios (entries of
//! the others are then not judged); the full report of a failing run is
//! written to `target/conformance-report.txt`.

use std::path::{Path, PathBuf};

use futures::StreamExt;
use rebound_sim::server::ApiServer;
use rebound_sim::server::conformance::{self, Difference, Recording};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn load(path: &Path) -> Result<Recording, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_server_answers_as_the_recorded_real_one() {
    let _watchdog = crate::watchdog::start();
    let shared = conformance::shared_dir();
    if shared.is_none() {
        println!(
            "NOTICE: ../shared is absent: the scenarios with the real job CRDs are not replayed"
        );
    }
    let only: Option<Vec<String>> = std::env::var("REBOUND_CONFORMANCE_ONLY")
        .ok()
        .filter(|v| !v.is_empty())
        .map(|v| v.split(',').map(str::to_string).collect());
    let scenarios: Vec<_> = conformance::all(shared.as_deref())
        .into_iter()
        .filter(|s| only.as_ref().is_none_or(|o| o.iter().any(|x| x == s.name)))
        .collect();
    assert!(!scenarios.is_empty(), "no scenario selected");
    let dir = root().join("tests/conformance/recorded");
    let mut problems: Vec<String> = Vec::new();
    if only.is_none() && shared.is_some() {
        for e in std::fs::read_dir(&dir)
            .expect("tests/conformance/recorded")
            .flatten()
        {
            let stem = e
                .path()
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("")
                .to_string();
            if !scenarios.iter().any(|s| s.name == stem) {
                problems.push(format!("recording {stem}.json has no scenario: re-record"));
            }
        }
    }
    let runs: Vec<Result<Vec<Difference>, String>> = futures::stream::iter(scenarios.iter())
        .map(|sc| {
            let dir = dir.clone();
            async move {
                let rec = load(&dir.join(format!("{}.json", sc.name)))
                    .map_err(|e| format!("{}: no usable recording ({e}): run `cargo run --example record_conformance -- {}`", sc.name, sc.name))?;
                let api = ApiServer::builder()
                    .hold_pod_deletion(true)
                    .start()
                    .await
                    .map_err(|e| format!("{}: embedded server: {e}", sc.name))?;
                let steps = conformance::run(sc, &api.client()).await.map_err(|e| e.to_string())?;
                api.shutdown().await;
                Ok(conformance::compare(&rec, &steps))
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    let mut diffs = Vec::new();
    for r in runs {
        match r {
            Ok(d) => diffs.extend(d),
            Err(e) => problems.push(e),
        }
    }
    let known_path = root().join("tests/conformance/known-differences.yaml");
    let known = conformance::parse_known(
        &std::fs::read_to_string(&known_path).expect("known-differences.yaml"),
    )
    .expect("known-differences.yaml parses");
    let ran: Vec<&str> = scenarios.iter().map(|s| s.name).collect();
    let verdict = conformance::judge(&diffs, &known, &ran);
    let mut report = String::new();
    for p in &problems {
        report.push_str(&format!("PROBLEM: {p}\n"));
    }
    for d in &verdict.unlisted {
        report.push_str(&format!("UNLISTED: {d}\n"));
    }
    for i in &verdict.stale {
        let k = &known[*i];
        report.push_str(&format!(
            "NO LONGER OCCURS: scenario {} step {} path {} ({})\n",
            k.scenario, k.step, k.path, k.what
        ));
    }
    println!(
        "{} scenarios, {} differences, {} accepted by {} entries, {} unlisted, {} stale entries",
        scenarios.len(),
        diffs.len(),
        diffs.len() - verdict.unlisted.len(),
        known.len(),
        verdict.unlisted.len(),
        verdict.stale.len()
    );
    let out = root().join("target/conformance-report.txt");
    // a report left by an earlier failing run would mislead
    let _ = std::fs::remove_file(&out);
    if !report.is_empty() {
        let _ = std::fs::write(&out, &report);
        let head: String = report.lines().take(60).collect::<Vec<_>>().join("\n");
        panic!(
            "the embedded server differs from the recorded real one (full report: {}):\n{head}",
            out.display()
        );
    }
}
