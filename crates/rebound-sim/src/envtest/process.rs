//! The child processes of the control plane: free ports, a death signal
//! tied to the spawning thread, log tails, and the removal of data
//! directories whose process is gone.

use std::io::Read;
use std::path::Path;
use std::process::Command;

use super::{EnvtestError, io};

pub(super) fn free_port() -> Result<u16, EnvtestError> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(io("bind a free port"))?;
    let port = l.local_addr().map_err(io("local address"))?.port();
    Ok(port)
}

/// Kill the child when the thread that spawned it ends (the keeper thread
/// lives as long as the process), so no server outlives a test binary.
pub(super) fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe and touches no memory of ours.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

pub(super) fn tail(path: &Path, lines: usize) -> String {
    let mut s = String::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let _ = f.read_to_string(&mut s);
    }
    let all: Vec<&str> = s.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Remove data directories left by processes that are gone.
pub(super) fn sweep_stale(base: &Path) {
    let Ok(rd) = std::fs::read_dir(base) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(pid) = name
            .strip_prefix("rebound-envtest-")
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}
