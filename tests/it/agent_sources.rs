//! A source that stops is started again, and while it is down the agent
//! says so: `rebound_agent_source_up` 0, `rebound_agent_source_failing` 1,
//! restarts and errors counted, `/healthz` naming the source and its error.
//! The kernel log here: a file that is not there yet (a log mounted late,
//! a `/dev/kmsg` the container may not read) makes the reader fail at once,
//! and the file appearing later must be read by a restarted reader.

use std::time::Duration;

use crate::agent_daemon::{Daemon, value};

#[test]
fn a_kernel_log_reader_that_fails_is_restarted_and_reported_until_it_works() {
    let _watchdog = crate::watchdog::start();
    let dir = std::env::temp_dir().join(format!("rebound-agent-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let log = dir.join("kmsg.txt");
    let mut agent = Daemon::start(
        &[
            "--kmsg-file",
            log.to_str().expect("utf-8 path"),
            "--dcgm",
            "false",
            "--nvml",
            "false",
            "--nvidia-proc-dir",
            "/nonexistent",
            "--source-restart-min",
            "50ms",
            "--source-restart-max",
            "400ms",
        ],
        &[],
    );
    let series = |name: &str| format!("rebound_agent_{name}{{source=\"kmsg\"}}");
    // Down, failing, and restarted again and again.
    let down = agent.metrics_until(
        "the kernel-log source restarted while down",
        Duration::from_secs(30),
        |m| value(m, &series("source_restarts_total")).is_some_and(|n| n >= 2.0),
    );
    assert_eq!(value(&down, &series("source_up")), Some(0.0), "{down}");
    assert_eq!(value(&down, &series("source_failing")), Some(1.0), "{down}");
    assert!(
        value(&down, &series("source_errors_total")).is_some_and(|n| n >= 2.0),
        "{down}"
    );
    let health = agent.healthz();
    assert_eq!(health["status"], "degraded", "{health:#}");
    let kmsg = &health["sources"]["kmsg"];
    assert_eq!(kmsg["state"], "failing", "{health:#}");
    assert!(
        kmsg["detail"]
            .as_str()
            .is_some_and(|d| d.contains("kmsg.txt")),
        "the error names the file: {health:#}"
    );

    // The log appears: a restarted reader reads it, and the source is up.
    std::fs::write(
        &log,
        "NVRM: Xid (PCI:0000:3b:00): 31, pid=7, name=python, Ch 00000010, intr 10000000. MMU Fault\n",
    )
    .expect("write the log");
    let up = agent.metrics_until(
        "the restarted reader reads the fault",
        Duration::from_secs(30),
        |m| {
            value(
                m,
                r#"rebound_agent_faults_total{source="NvidiaXid",code="31"}"#,
            )
            .is_some_and(|n| n >= 1.0)
        },
    );
    assert_eq!(value(&up, &series("source_up")), Some(1.0), "{up}");
    assert_eq!(value(&up, &series("source_failing")), Some(0.0), "{up}");
    let health = agent.healthz();
    assert_eq!(health["status"], "ok", "{health:#}");
    assert_eq!(health["sources"]["kmsg"]["state"], "up", "{health:#}");
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}
