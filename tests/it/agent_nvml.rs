//! The agent build loads the NVIDIA driver's `libnvidia-ml.so.1` at run
//! time, as the agent image does on a GPU node: a stub library compiled
//! here with `cc` (tests/it/nvml_stub/) stands in for the driver, found
//! through `LD_LIBRARY_PATH` as the container toolkit's or a hostPath
//! mount's library directory would be. Without it, the agent says so once,
//! reports `rebound_agent_source_up{source="nvml"} 0` and keeps running.
//!
//! CI has no GPU and cannot run docker; this is what it can check of the
//! image (tests/it/packaging.rs checks the Dockerfile builds this way).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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

const DRY_ONCE: [&str; 9] = [
    "agent",
    "--once",
    "--dry-run",
    "--kmsg",
    "false",
    "--dcgm",
    "false",
    "--nvidia-proc-dir",
    "/nonexistent",
];

#[test]
fn agent_loads_the_driver_library_and_reads_its_gpus() {
    let dir = scratch("stub");
    build_stub(&dir);
    let out = rebound()
        .args(DRY_ONCE)
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

    // The daemon: no crash, no exit, and the metric says the source is off.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        l.local_addr().expect("addr").port()
    };
    let mut child = rebound()
        .args([
            "agent",
            "--dry-run",
            "--kmsg",
            "false",
            "--dcgm",
            "false",
            "--nvidia-proc-dir",
            "/nonexistent",
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
        ])
        .env("LD_LIBRARY_PATH", &empty)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rebound agent starts");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut metrics = String::new();
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the agent exited without a driver: {status:?}");
        }
        metrics = scrape(port).unwrap_or_default();
        if metrics.contains(r#"rebound_agent_source_up{source="nvml"} 0"#) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // Still running a moment later: not a crash loop.
    std::thread::sleep(Duration::from_millis(500));
    let alive = child.try_wait().ok().flatten().is_none();
    let _ = child.kill();
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&empty);
    assert!(alive, "the agent stopped: {err}");
    assert!(
        metrics.contains(r#"rebound_agent_source_up{source="nvml"} 0"#),
        "metrics: {metrics}\nstderr: {err}"
    );
    assert_eq!(err.matches("NVML not available").count(), 1, "{err}");
}

/// `GET /metrics` on the agent.
fn scrape(port: u16) -> std::io::Result<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")?;
    let mut body = String::new();
    s.read_to_string(&mut body)?;
    Ok(body)
}
