//! A `rebound agent` process watched from outside, as the kubelet and
//! Prometheus see it: its `/metrics` and `/healthz`. For the tests of what
//! the agent does while its sources fail (agent_nvml.rs, agent_sources.rs).

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running agent; killed when dropped.
pub struct Daemon {
    child: Child,
    port: u16,
}

impl Daemon {
    /// `rebound agent --dry-run <args> --metrics-addr 127.0.0.1:<free port>`
    /// with `env` added, stdout dropped and stderr kept for failures.
    pub fn start(args: &[&str], env: &[(&str, &OsStr)]) -> Daemon {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
            l.local_addr().expect("addr").port()
        };
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rebound"));
        cmd.env_remove("RUST_LOG")
            .env("NO_COLOR", "1")
            .args(["agent", "--dry-run"])
            .args(args)
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        Daemon {
            child: cmd.spawn().expect("rebound agent starts"),
            port,
        }
    }

    /// The body of `GET path`, `None` while the server does not answer.
    pub fn get(&self, path: &str) -> Option<String> {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let mut response = String::new();
        s.read_to_string(&mut response).ok()?;
        let (head, body) = response.split_once("\r\n\r\n")?;
        head.starts_with("HTTP/1.1 200").then(|| body.to_string())
    }

    /// `/healthz` as JSON.
    pub fn healthz(&self) -> serde_json::Value {
        let body = self.get("/healthz").expect("/healthz answers 200");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("/healthz is JSON ({e}): {body}"))
    }

    /// Poll `/metrics` until `done` holds, for at most `within`; the last
    /// exposition. Panics (with the agent's log) when it never does or the
    /// agent exits.
    pub fn metrics_until(
        &mut self,
        what: &str,
        within: Duration,
        done: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + within;
        let mut last = String::new();
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "the agent exited ({status}) waiting for {what}:\n{}",
                    self.log()
                );
            }
            last = self.get("/metrics").unwrap_or_default();
            if done(&last) {
                return last;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "{what} not seen in {within:?}; metrics:\n{last}\nlog:\n{}",
            self.log()
        );
    }

    /// Whether the agent still runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Stop the agent and return what it logged.
    pub fn log(&mut self) -> String {
        let _ = self.child.kill();
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        let _ = self.child.wait();
        err
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of one series (`name{labels}` exactly as exposed), if present.
pub fn value(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .split(' ')
            .next()?
            .parse()
            .ok()
    })
}
