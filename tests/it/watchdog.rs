//! A per-test watchdog: a test that has not finished within its limit ends
//! the whole test binary with a message naming it, so a hang fails CI at
//! once and says where, instead of running into CI's time limit with no
//! trace of which test never returned (a CI run on record did exactly
//! that). A thread, not a Tokio timer: it fires even when the test's own
//! threads are blocked.

use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long one test may take (an end-to-end test: the wait for the real bed's turn
/// included). The slowest takes about a minute; a test that runs far
/// beyond this is stuck.
pub const TEST_LIMIT: Duration = Duration::from_secs(8 * 60);

/// Cancels the watchdog when dropped (the test returned or panicked).
pub struct Guard {
    _done: mpsc::Sender<()>,
}

/// Starts the watchdog of the running test, named by its thread (libtest
/// names each test's thread after the test), with [`TEST_LIMIT`].
pub fn start() -> Guard {
    let name = std::thread::current()
        .name()
        .unwrap_or("a test on the main thread")
        .to_owned();
    watch(&name, TEST_LIMIT)
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
                eprintln!(
                    "WATCHDOG: test {name} has not finished {:?} after it started (limit {limit:?}); \
                     ending the test binary so that the hang is reported here",
                    started.elapsed()
                );
                std::process::exit(101);
            }
        });
    if let Err(e) = spawned {
        eprintln!("watchdog for {test} not started: {e}");
    }
    Guard { _done: tx }
}
