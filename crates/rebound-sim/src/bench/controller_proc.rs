//! The controller under measurement: started on the bed with the run's
//! settings, waited for (`/readyz`), read (`/metrics`), and the machine's
//! load and the process's peak memory beside it.

use super::*;

pub(super) async fn start_controller(env: &SimEnv, args: &SimArgs) -> anyhow::Result<Ctl> {
    let bed = &env.bed;
    let mut cargs = bed.controller_args();
    cargs.qps = args.qps;
    cargs.burst = (args.qps as u32).max(1) * 2;
    cargs.leader_election = false;
    if args.in_process {
        return Ok(Ctl::InProcess(Box::new(bed.start_controller(cargs).await?)));
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let exe = std::env::current_exe()?;
    let child = tokio::process::Command::new(exe)
        .args([
            "controller",
            "--root-namespace",
            &bed.root(),
            "--leader-election",
            "false",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--qps",
            &args.qps.to_string(),
            "--burst",
            &cargs.burst.to_string(),
        ])
        .env("KUBECONFIG", &env.kubeconfig)
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().unwrap_or(0);
    let deadline = Instant::now() + Duration::from_secs(300);
    while !readyz(port).await {
        if Instant::now() > deadline {
            anyhow::bail!("the controller process did not become ready within 300s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(Ctl::Child(child, pid, port))
}

pub(super) async fn readyz(port: u16) -> bool {
    http_get(port, "/readyz").await.is_some()
}

/// The body of a plain HTTP/1.0 GET to the controller's listener, if it
/// answered 200.
pub(super) async fn http_get(port: u16, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // Bounded: a controller that accepts but never answers must not stall
    // the measurement (the settle loop asks every second).
    let read = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf).await;
        Some(buf)
    };
    let buf = tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .ok()??;
    let text = String::from_utf8_lossy(&buf);
    if !(text.starts_with("HTTP/1.1 200") || text.starts_with("HTTP/1.0 200")) {
        return None;
    }
    text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
}

/// The 1-minute load average (`/proc/loadavg`): this VM is shared, and
/// the figures move with it.
pub(super) fn load_average() -> Option<String> {
    let s = std::fs::read_to_string("/proc/loadavg").ok()?;
    s.split_whitespace().next().map(str::to_owned)
}

pub(super) fn peak_rss_mib(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = s
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}
