//! The agent build loads the NVIDIA driver's `libnvidia-ml.so.1` at run
//! time, as the agent image does on a GPU node: a stub library compiled
//! here with `cc` (tests/it/nvml_stub/) stands in for the driver, found
//! through `LD_LIBRARY_PATH` as the container toolkit's or a hostPath
//! mount's library directory would be. Without it, the agent says so once,
//! reports `rebound_agent_source_up{source="nvml"} 0` and keeps running.
//!
//! CI has no GPU and cannot run docker; this is what it can check of the
//! image (tests/it/packaging.rs checks the Dockerfile builds this way).
//! The stub also plays a GPU off the bus, whose NVML event wait fails at
//! once, for the agent's backoff on it.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::agent_daemon::{Daemon, value};

fn rebound() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rebound"));
    c.env_remove("RUST_LOG").env("NO_COLOR", "1");
    c
}

/// A fresh directory for this test.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rebound-nvml-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// Compile the stub into `dir/libnvidia-ml.so.1` (the soname NVML is loaded by).
fn build_stub(dir: &Path) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/nvml_stub/libnvidia-ml-stub.c");
    let out = dir.join("libnvidia-ml.so.1");
    // `cc` is there wherever this crate builds: mimalloc's C code needs it.
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-O0", "-Wall", "-Werror", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("running cc (a C compiler is needed to build this crate)");
    assert!(status.success(), "cc failed to build the NVML stub");
}

/// NVML alone: no kernel log, no `dcgmi`, no driver proc directory.
const NVML_ONLY: [&str; 6] = [
    "--kmsg",
    "false",
    "--dcgm",
    "false",
    "--nvidia-proc-dir",
    "/nonexistent",
];

const DRY_ONCE: [&str; 3] = ["agent", "--once", "--dry-run"];

#[test]
fn agent_loads_the_driver_library_and_reads_its_gpus() {
    let dir = scratch("stub");
    build_stub(&dir);
    let out = rebound()
        .args(DRY_ONCE)
        .args(NVML_ONLY)
        .env("LD_LIBRARY_PATH", &dir)
        .output()
        .expect("rebound agent runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {stderr}", out.status);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "JSON report ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    assert_eq!(report["sources"]["nvml"], true, "{report:#}\n{stderr}");
    let found: Vec<&str> = report["found"]
        .as_array()
        .expect("found")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert_eq!(
        found,
        [
            "NVML 99.999.99-stub, driver 999.99.99-stub: 1 GPU(s)",
            "GPU 0: Rebound Stub GPU (GPU-00000000-stub-0000-0000-000000000000)"
        ],
        "{report:#}"
    );
    // The stub's 2 uncorrected ECC errors and pending row remap on GPU 0,
    // read through NVML (the remap through the raw symbol).
    let faults: Vec<(&str, &str, &str)> = report["faults"]
        .as_array()
        .expect("faults")
        .iter()
        .map(|f| {
            (
                f["fault"]["source"].as_str().unwrap_or_default(),
                f["fault"]["code"].as_str().unwrap_or_default(),
                f["fault"]["device"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        faults,
        [
            ("NodeCondition", "nvml-ecc-uncorrected", "0"),
            ("NodeCondition", "nvml-row-remap-pending", "0")
        ],
        "{report:#}"
    );
    assert_eq!(report["conditions"][0]["type"], "GpuFault");
    assert_eq!(report["conditions"][0]["status"], "True");

    // A host driver directory mounted elsewhere: the library by full path
    // (`--nvml-library`, the chart's hostLibDir), not on the loader's path.
    let lib = dir.join("libnvidia-ml.so.1");
    let out = rebound()
        .args(DRY_ONCE)
        .args(NVML_ONLY)
        .arg("--nvml-library")
        .arg(&lib)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("rebound agent runs");
    let _ = std::fs::remove_dir_all(&dir);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(
        report["sources"]["nvml"],
        true,
        "{report:#}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        report["found"].as_array().map(Vec::len),
        Some(2),
        "{report:#}"
    );
}

#[test]
fn agent_without_a_driver_says_so_once_and_goes_on() {
    let empty = scratch("none");
    let out = rebound()
        .args(DRY_ONCE)
        .args(NVML_ONLY)
        .env("LD_LIBRARY_PATH", &empty)
        .output()
        .expect("rebound agent runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {stderr}", out.status);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(report["sources"]["nvml"], false, "{report:#}");
    assert_eq!(
        stderr.matches("NVML not available").count(),
        1,
        "one clear line: {stderr}"
    );
    // (When the machine running this has a real driver in its default
    // library path, the agent finds it: nothing to check then.)
    if Path::new("/dev/nvidiactl").exists() {
        eprintln!(
            "NOTICE: this machine has an NVIDIA driver; the no-driver daemon check is skipped"
        );
        return;
    }

    // The daemon: no crash, no exit, and the metric says the source is off;
    // off is not failing (no alert for a node without a driver).
    let mut agent = Daemon::start(&NVML_ONLY, &[("LD_LIBRARY_PATH", empty.as_os_str())]);
    let metrics = agent.metrics_until("nvml down", Duration::from_secs(20), |m| {
        m.contains(r#"rebound_agent_source_up{source="nvml"} 0"#)
    });
    assert!(
        metrics.contains(r#"rebound_agent_source_failing{source="nvml"} 0"#),
        "{metrics}"
    );
    let health = agent.healthz();
    assert_eq!(health["status"], "ok", "{health:#}");
    assert_eq!(
        health["sources"]["nvml"]["state"], "unavailable",
        "{health:#}"
    );
    // Still running a moment later: not a crash loop.
    std::thread::sleep(Duration::from_millis(500));
    let alive = agent.running();
    let err = agent.log();
    let _ = std::fs::remove_dir_all(&empty);
    assert!(alive, "the agent stopped: {err}");
    assert_eq!(err.matches("NVML not available").count(), 1, "{err}");
}

/// A GPU off the bus: every NVML event wait fails at once (the stub's
/// `lost` mode). The loop used to go straight back to the next wait and
/// spin a core; each failure is now counted and followed by a delay (250 ms
/// doubling up to the poll interval), and after
/// `WAIT_FAILURES_BEFORE_REOPEN` in a row the supervisor opens NVML again.
#[test]
fn an_event_wait_that_fails_at_once_is_backed_off_counted_and_reopened() {
    let _watchdog = crate::watchdog::start();
    let dir = scratch("lost");
    build_stub(&dir);
    let waits = dir.join("waits");
    let mut agent = Daemon::start(
        &[
            &NVML_ONLY[..],
            &[
                "--nvml-interval",
                "1s",
                "--source-restart-min",
                "1s",
                "--source-restart-max",
                "1s",
            ],
        ]
        .concat(),
        &[
            ("LD_LIBRARY_PATH", dir.as_os_str()),
            ("REBOUND_NVML_STUB_EVENTS", OsStr::new("lost")),
            ("REBOUND_NVML_STUB_WAIT_LOG", waits.as_os_str()),
        ],
    );
    // The positive control: the waits fail, are counted, and end in a reopen.
    let in_a_row = f64::from(rebound::agent::nvml::WAIT_FAILURES_BEFORE_REOPEN);
    agent.metrics_until(
        "NVML wait errors counted and NVML opened again",
        Duration::from_secs(60),
        |m| {
            value(m, r#"rebound_agent_source_errors_total{source="nvml"}"#)
                .is_some_and(|n| n >= in_a_row)
                && value(m, r#"rebound_agent_source_restarts_total{source="nvml"}"#)
                    .is_some_and(|n| n >= 1.0)
        },
    );
    let health = agent.healthz();
    let nvml = &health["sources"]["nvml"];
    assert!(nvml["restarts"].as_u64() >= Some(1), "{health:#}");
    assert!(
        nvml["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("waiting for NVML events")),
        "{health:#}"
    );
    // The waits go on (the stub counts them), a bounded number a second:
    // at most 1 + 2 + 3 in any 3 s (delays of 250 ms, 500 ms, then 1 s, and
    // 1 s between a reopen and its first wait). Without the delays, the 10
    // failures before each reopen come at once: 10 a second here, and
    // without the reopen, as many as the core can make.
    let count = || std::fs::metadata(&waits).map(|m| m.len()).unwrap_or(0);
    let (before, t0) = (count(), Instant::now());
    std::thread::sleep(Duration::from_secs(3));
    let (after, secs) = (count(), t0.elapsed().as_secs_f64());
    assert!(
        after > before,
        "the agent stopped waiting:\n{}",
        agent.log()
    );
    let rate = (after - before) as f64 / secs;
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        rate <= 4.0,
        "{rate:.0} NVML event waits a second on a GPU whose wait fails at once"
    );
}
