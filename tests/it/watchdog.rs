//! A per-test watchdog: a test that has not finished within its limit ends
//! the whole test binary with a message naming it, so a hang fails CI at
//! once and says where, instead of running into CI's time limit with no
//! trace of which test never returned (a CI run on record did exactly
//! that). A thread, not a Tokio timer: it fires even when the test's own
//! threads are blocked.

use std::sync::{Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

/// How long one test may take (an end-to-end test: the wait for the real bed's turn
/// included). The slowest takes about a minute; a test that runs far
/// beyond this is stuck.
pub const TEST_LIMIT: Duration = Duration::from_secs(8 * 60);

/// Cancels the watchdog when dropped (the test returned or panicked).
pub struct Guard {
    _done: mpsc::Sender<()>,
    name: String,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Ok(mut s) = STARTED.lock()
            && let Some(t) = s.iter_mut().rev().find(|(n, _, _)| *n == self.name)
        {
            t.2 = true;
        }
    }
}

/// How long the whole test binary may run. A per-test guard ends with the
/// test's body; what comes after it (a Tokio runtime's drop waits for its
/// blocking threads without a limit) is covered by this one. A full run
/// takes about five minutes here.
const BINARY_LIMIT: Duration = Duration::from_secs(35 * 60);

/// The tests started so far, and whether each one's body has returned.
static STARTED: Mutex<Vec<(String, Instant, bool)>> = Mutex::new(Vec::new());

/// Starts the watchdog of the running test, named by its thread (libtest
/// names each test's thread after the test), with [`TEST_LIMIT`]; the
/// first call also starts the binary's watchdog ([`BINARY_LIMIT`]).
pub fn start() -> Guard {
    static BINARY: OnceLock<()> = OnceLock::new();
    BINARY.get_or_init(|| {
        let began = Instant::now();
        let spawned = std::thread::Builder::new()
            .name("watchdog of the test binary".into())
            .spawn(move || {
                std::thread::sleep(BINARY_LIMIT);
                let started = STARTED.lock().map(|s| s.clone()).unwrap_or_default();
                let open: Vec<String> = started
                    .iter()
                    .filter(|(_, _, returned)| !returned)
                    .map(|(n, at, _)| format!("{n} (started {:?} ago)", at.elapsed()))
                    .collect();
                let last: Vec<&str> = started
                    .iter()
                    .rev()
                    .take(5)
                    .map(|(n, _, _)| n.as_str())
                    .collect();
                say(format_args!(
                    "WATCHDOG: the test binary has run {:?} (limit {BINARY_LIMIT:?}); ending it. \
                     Bodies still running: {open:?}; the last five started: {last:?}",
                    began.elapsed()
                ));
                std::process::exit(101);
            });
        if let Err(e) = spawned {
            eprintln!("watchdog of the test binary not started: {e}");
        }
    });
    let name = std::thread::current()
        .name()
        .unwrap_or("a test on the main thread")
        .to_owned();
    if let Ok(mut s) = STARTED.lock() {
        s.push((name.clone(), Instant::now(), false));
    }
    watch(&name, limit())
}

/// [`TEST_LIMIT`], or `REBOUND_TEST_WATCHDOG_SECS` (what the watchdog's own
/// test sets for its child).
fn limit() -> Duration {
    std::env::var("REBOUND_TEST_WATCHDOG_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(TEST_LIMIT, Duration::from_secs)
}

/// Starts the watchdog of `test`.
fn watch(test: &str, limit: Duration) -> Guard {
    let (tx, rx) = mpsc::channel::<()>();
    let name = test.to_owned();
    let started = Instant::now();
    let spawned = std::thread::Builder::new()
        .name(format!("watchdog {name}"))
        .spawn(move || {
            // A message or a hang-up (the guard dropped) both end the wait.
            if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
                say(format_args!(
                    "WATCHDOG: test {name} has not finished {:?} after it started (limit {limit:?}); \
                     ending the test binary so that the hang is reported here",
                    started.elapsed()
                ));
                std::process::exit(101);
            }
        });
    if let Err(e) = spawned {
        eprintln!("watchdog for {test} not started: {e}");
    }
    Guard {
        _done: tx,
        name: test.to_owned(),
    }
}

/// The child of [`a_hung_test_ends_the_binary_and_is_named`]: a test that
/// never returns. Ignored: it only runs when that test starts it.
#[tokio::test]
#[ignore = "a hung test, run only as the child of the watchdog's test"]
async fn hung() {
    let _watchdog = start();
    futures::future::pending::<()>().await;
}

/// The watchdog ends a hung test's binary with exit code 101 and its name,
/// well before the hang would end by itself.
#[test]
fn a_hung_test_ends_the_binary_and_is_named() {
    let exe = std::env::current_exe().expect("the test binary");
    let started = Instant::now();
    let mut child = std::process::Command::new(exe)
        .args(["--exact", "watchdog::hung", "--ignored", "--nocapture"])
        .env("REBOUND_TEST_WATCHDOG_SECS", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the child");
    // A watchdog that does not fire must fail this test, not hang it.
    while child.try_wait().expect("child status").is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("the hung child was not ended by its watchdog within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("the child's output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(101), "{stderr}");
    assert!(
        stderr.contains("WATCHDOG: test watchdog::hung has not finished"),
        "{stderr}"
    );
    assert!(started.elapsed() < Duration::from_secs(60), "{stderr}");
}

/// Writes the watchdog's last word to the process's stderr itself. A
/// thread a test spawns inherits the test's output capture, so
/// `eprintln!` there lands in a buffer that is never shown once the
/// watchdog ends the process: a CI run ended with exit code 101 and no
/// word of which test hung.
fn say(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{args}");
    let _ = err.flush();
}
