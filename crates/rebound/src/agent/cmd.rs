//! Running a node tool (`dcgmi`, `npu-smi`) with a timeout and bounded
//! output, so a hung or chatty tool cannot stall or bloat the agent.

use std::time::Duration;

use tokio::io::AsyncReadExt;

/// Most stdout kept from a tool.
pub const MAX_OUTPUT_BYTES: usize = 4 << 20;
/// Most stderr kept from a tool.
const MAX_STDERR_BYTES: usize = 64 << 10;

/// Why a tool could not be run.
#[derive(Debug, thiserror::Error)]
pub enum CmdError {
    /// The tool is not installed: its source is disabled.
    #[error("{binary} not found")]
    Missing {
        /// The binary tried.
        binary: String,
    },
    /// It could not be started or waited for.
    #[error("running {binary}: {source}")]
    Io {
        /// The binary.
        binary: String,
        /// Why.
        source: std::io::Error,
    },
    /// It took longer than the timeout and was killed.
    #[error("{binary} timed out after {timeout:?}")]
    Timeout {
        /// The binary.
        binary: String,
        /// The limit.
        timeout: Duration,
    },
}

/// What a tool printed. The exit status is not an error: `dcgmi diag`
/// exits non-zero exactly when it has something to report.
#[derive(Debug)]
pub struct Output {
    /// stdout (lossy UTF-8, bounded).
    pub stdout: String,
    /// stderr (lossy UTF-8, bounded).
    pub stderr: String,
    /// Exit code, if it exited normally.
    pub code: Option<i32>,
}

/// Run `binary args...`, killing it after `timeout`.
pub async fn run(binary: &str, args: &[&str], timeout: Duration) -> Result<Output, CmdError> {
    let mut child = match tokio::process::Command::new(binary)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
    {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(CmdError::Missing {
                binary: binary.to_string(),
            });
        }
        Err(source) => {
            return Err(CmdError::Io {
                binary: binary.to_string(),
                source,
            });
        }
    };
    let io = |source| CmdError::Io {
        binary: binary.to_string(),
        source,
    };
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let work = async {
        let mut out = Vec::new();
        let mut err = Vec::new();
        let read_out = async {
            if let Some(s) = stdout.as_mut() {
                s.take(MAX_OUTPUT_BYTES as u64)
                    .read_to_end(&mut out)
                    .await?;
            }
            Ok::<_, std::io::Error>(())
        };
        let read_err = async {
            if let Some(s) = stderr.as_mut() {
                s.take(MAX_STDERR_BYTES as u64)
                    .read_to_end(&mut err)
                    .await?;
            }
            Ok::<_, std::io::Error>(())
        };
        let (a, b) = tokio::join!(read_out, read_err);
        a.map_err(io)?;
        b.map_err(io)?;
        let status = child.wait().await.map_err(io)?;
        Ok::<_, CmdError>((out, err, status.code()))
    };
    let (out, err, code) =
        tokio::time::timeout(timeout, work)
            .await
            .map_err(|_| CmdError::Timeout {
                binary: binary.to_string(),
                timeout,
            })??;
    Ok(Output {
        stdout: String::from_utf8_lossy(&out).into_owned(),
        stderr: String::from_utf8_lossy(&err).into_owned(),
        code,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn missing_binary() {
        let e = run("/nonexistent/dcgmi", &["diag"], Duration::from_secs(1)).await;
        assert!(matches!(e, Err(CmdError::Missing { .. })));
    }

    #[tokio::test]
    async fn slow_binary_times_out() {
        let e = run("sleep", &["5"], Duration::from_millis(100)).await;
        assert!(matches!(e, Err(CmdError::Timeout { .. })), "{e:?}");
    }

    #[tokio::test]
    async fn output_and_failing_exit_code() {
        let o = run(
            "sh",
            &["-c", "echo out; echo err >&2; exit 3"],
            Duration::from_secs(5),
        )
        .await
        .expect("runs");
        assert_eq!(
            (o.stdout.as_str(), o.stderr.as_str(), o.code),
            ("out\n", "err\n", Some(3))
        );
    }
}
