//! Plain-HTTP health checks of the operators' probe endpoints
//! (`127.0.0.1:<port>/readyz` or `/healthz`), on the keeper thread without
//! a runtime.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A health endpoint: `127.0.0.1:<port>` and a path.
#[derive(Debug, Clone)]
pub(crate) struct Check {
    pub(crate) port: u16,
    pub(crate) path: &'static str,
}

/// `GET path` answered 200, or why not.
pub(crate) fn http_ok(check: &Check) -> Result<(), String> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], check.port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    write!(
        s,
        "GET {} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        check.path
    )
    .map_err(|e| format!("write to {addr}: {e}"))?;
    let mut head = [0u8; 64];
    let n = s
        .read(&mut head)
        .map_err(|e| format!("read from {addr}: {e}"))?;
    let line = String::from_utf8_lossy(&head[..n]);
    let status = line.split_whitespace().nth(1).unwrap_or("");
    if status == "200" {
        Ok(())
    } else {
        Err(format!(
            "GET {}{} answered {:?}",
            addr,
            check.path,
            line.lines().next().unwrap_or("")
        ))
    }
}
