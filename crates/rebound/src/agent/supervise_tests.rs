//! The supervisor against fake sources: what it restarts, after which
//! delays, what it only looks for again, and when it stops. Time is paused
//! (tokio's test clock), so the delays are exact.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use tokio::sync::mpsc;

use super::*;

const POLICY: RestartPolicy = RestartPolicy {
    min: Duration::from_millis(100),
    max: Duration::from_millis(1000),
};

/// A fake source: run `n` (from 1) ends as `script(n)` says, after
/// `lasts(n)`; `None` from the script means the source comes up and stays
/// until the loop is gone.
fn fake(
    script: fn(u32) -> Option<SourceExit>,
    lasts: fn(u32) -> Duration,
) -> impl FnMut(Sender<SourceEvent>) -> std::pin::Pin<Box<dyn Future<Output = SourceExit> + Send>> {
    let runs = Arc::new(AtomicU32::new(0));
    move |tx: Sender<SourceEvent>| {
        let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
        Box::pin(async move {
            tokio::time::sleep(lasts(n)).await;
            match script(n) {
                Some(exit) => exit,
                None => {
                    if tx.send(SourceEvent::Up { source: "fake" }).await.is_err() {
                        return SourceExit::ReceiverGone;
                    }
                    tx.closed().await;
                    SourceExit::ReceiverGone
                }
            }
        })
    }
}

/// Events until the fake says `Up`, each with the paused clock's time
/// since the start, in milliseconds.
async fn until_up<F, Fut>(start: F) -> Vec<(u128, SourceEvent)>
where
    F: FnMut(Sender<SourceEvent>) -> Fut + Send + 'static,
    Fut: Future<Output = SourceExit> + Send + 'static,
{
    let (tx, mut rx) = mpsc::channel(16);
    let t0 = Instant::now();
    let sup = tokio::spawn(supervise("fake", tx, POLICY, start));
    let mut seen = Vec::new();
    while let Some(ev) = rx.recv().await {
        let up = matches!(ev, SourceEvent::Up { .. });
        seen.push((t0.elapsed().as_millis(), ev));
        if up {
            break;
        }
    }
    drop(rx);
    sup.await
        .expect("the supervisor ends when the loop is gone");
    seen
}

fn failed(error: &str) -> SourceEvent {
    SourceEvent::Failed {
        source: "fake",
        error: error.into(),
    }
}

const RESTARTED: SourceEvent = SourceEvent::Restarted { source: "fake" };
const UP: SourceEvent = SourceEvent::Up { source: "fake" };

#[tokio::test(start_paused = true)]
async fn a_failed_source_is_restarted_after_doubling_delays() {
    let seen = until_up(fake(
        |n| (n <= 3).then(|| SourceExit::Failed(format!("boom {n}"))),
        |_| Duration::ZERO,
    ))
    .await;
    assert_eq!(
        seen,
        [
            (0, failed("boom 1")),
            (100, RESTARTED),
            (100, failed("boom 2")),
            (300, RESTARTED),
            (300, failed("boom 3")),
            (700, RESTARTED),
            (700, UP),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn delays_stop_at_the_cap_and_start_over_after_a_run_that_lasted() {
    // Runs 1-5 fail at once (delays 100, 200, 400, 800, then the 1000 cap);
    // run 6 works for 2 s before it fails: the next delay is 100 again.
    let seen = until_up(fake(
        |n| (n <= 6).then(|| SourceExit::Failed(format!("boom {n}"))),
        |n| Duration::from_millis(if n == 6 { 2000 } else { 0 }),
    ))
    .await;
    let restarts: Vec<u128> = seen
        .iter()
        .filter(|(_, e)| *e == RESTARTED)
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(restarts, [100, 300, 700, 1500, 2500, 4600]);
}

#[tokio::test(start_paused = true)]
async fn a_source_that_ends_without_an_error_or_panics_is_restarted() {
    let seen = until_up(fake(
        |n| match n {
            1 => Some(SourceExit::Done),
            2 => panic!("a bug in a source"),
            _ => None,
        },
        |_| Duration::ZERO,
    ))
    .await;
    let kinds: Vec<&SourceEvent> = seen.iter().map(|(_, e)| e).collect();
    assert_eq!(kinds[0], &failed("stopped without an error"));
    assert_eq!(kinds[1], &RESTARTED);
    assert!(
        matches!(kinds[2], SourceEvent::Failed { error, .. } if error.contains("panicked")),
        "{kinds:?}"
    );
    assert_eq!(kinds[3..], [&RESTARTED, &UP]);
}

#[tokio::test(start_paused = true)]
async fn a_missing_source_is_looked_for_again_but_not_counted_as_restarted() {
    let seen = until_up(fake(
        |n| (n <= 2).then(|| SourceExit::Unavailable("dcgmi not found".into())),
        |_| Duration::ZERO,
    ))
    .await;
    let missing = SourceEvent::Unavailable {
        source: "fake",
        why: "dcgmi not found".into(),
    };
    assert_eq!(seen, [(0, missing.clone()), (100, missing), (300, UP)]);
}

/// A source on its own thread that panics is an end like any other, and
/// the supervisor stops (without a restart) once the loop is gone.
#[tokio::test]
async fn a_thread_that_panics_is_restarted_and_the_supervisor_stops_with_the_loop() {
    let runs = Arc::new(AtomicU32::new(0));
    let (tx, mut rx) = mpsc::channel(16);
    let policy = RestartPolicy {
        min: Duration::from_millis(5),
        max: Duration::from_millis(20),
    };
    let sup = tokio::spawn(supervise("fake", tx, policy, move |tx| {
        let n = runs.fetch_add(1, Ordering::SeqCst);
        on_thread("fake", move || {
            if n == 0 {
                panic!("a bug in a blocking source");
            }
            match tx.blocking_send(SourceEvent::Up { source: "fake" }) {
                Ok(()) => SourceExit::Failed("ended after coming up".into()),
                Err(_) => SourceExit::ReceiverGone,
            }
        })
    }));
    let first = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await;
    assert!(
        matches!(&first, Ok(Some(SourceEvent::Failed { error, .. })) if error.contains("fake thread panicked")),
        "{first:?}"
    );
    let second = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await;
    assert_eq!(second.expect("in time"), Some(RESTARTED));
    let third = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await;
    assert_eq!(third.expect("in time"), Some(UP));
    drop(rx);
    tokio::time::timeout(Duration::from_secs(10), sup)
        .await
        .expect("the supervisor stops once the loop is gone")
        .expect("no panic in the supervisor");
}
