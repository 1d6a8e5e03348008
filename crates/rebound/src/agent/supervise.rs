//! Keeps every long-running source running.
//!
//! A source that ends (the kernel log could not be read, NVML gave up on its
//! event wait, a tool went missing, a task or thread panicked) is started
//! again after a delay that doubles up to a cap ([`RestartPolicy`]), for as
//! long as the agent runs. Its state goes to the agent's loop as a
//! [`SourceEvent`] on the same channel as its faults, after them, so the
//! loop never sees a stale `Up` after the end that followed it:
//!
//! - an end by error is `Failed` (the source is failing, the error counted),
//!   and the start after the delay is `Restarted` (counted);
//! - an end because the source is not there (`dcgmi` not installed, no
//!   driver library) is `Unavailable`: looked for again at the same delays,
//!   which lets a driver that the GPU Operator installs after the agent
//!   started be found, but neither failing nor a restart.
//!
//! Restarting in the process, not through the kubelet, is the point: a
//! restart of the pod would stop the sources that work (the kernel log on
//! the node whose GPU is failing) for what one source lacks (docs/agent.md).

use std::future::Future;
use std::time::Duration;

use tokio::sync::{mpsc::Sender, oneshot};
use tokio::time::Instant;

use super::backoff::RestartPolicy;
use super::fault::SourceEvent;

/// Why one run of a source ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceExit {
    /// The agent's loop is gone (shutdown): stop for good.
    ReceiverGone,
    /// The source read all it was asked to (`--once`); in the long-running
    /// agent an end without an error is still an end, and is restarted.
    Done,
    /// The source is not there on this node: why.
    Unavailable(String),
    /// The source failed: the error.
    Failed(String),
}

impl SourceExit {
    /// The state event this end means for `source`; `None` when there is
    /// nobody to tell or nothing to say.
    pub fn event(&self, source: &'static str) -> Option<SourceEvent> {
        match self {
            SourceExit::ReceiverGone | SourceExit::Done => None,
            SourceExit::Unavailable(why) => Some(SourceEvent::Unavailable {
                source,
                why: why.clone(),
            }),
            SourceExit::Failed(error) => Some(SourceEvent::Failed {
                source,
                error: error.clone(),
            }),
        }
    }

    /// Log this end once at warning level; `repeat` (the same end as the
    /// last time) only at debug, so a missing tool retried every few
    /// minutes is one line, not one per retry.
    pub fn log(&self, source: &'static str, repeat: bool) {
        match (self, repeat) {
            (SourceExit::ReceiverGone | SourceExit::Done, _) => {}
            (SourceExit::Unavailable(why), false) => {
                tracing::warn!(source, why = %why, "source not available; looked for again in the background")
            }
            (SourceExit::Failed(error), false) => {
                tracing::warn!(source, error = %error, "source stopped; restarted with backoff")
            }
            (SourceExit::Unavailable(text) | SourceExit::Failed(text), true) => {
                tracing::debug!(source, %text, "source still down")
            }
        }
    }
}

/// Run `source` on its own OS thread and resolve to how it ended: a source
/// that blocks in a call nothing can cancel (a read of `/dev/kmsg`, an NVML
/// wait) must not hold a runtime thread, and a detached thread does not
/// hold up shutdown. A thread that panics resolves to `Failed`.
pub fn on_thread<F>(name: &'static str, source: F) -> impl Future<Output = SourceExit> + Send
where
    F: FnOnce() -> SourceExit + Send + 'static,
{
    let (done, ended) = oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name(format!("rebound-{name}"))
        .spawn(move || {
            // The receiver is gone only when the supervisor is.
            let _ = done.send(source());
        });
    async move {
        if let Err(e) = spawned {
            return SourceExit::Failed(format!("cannot start the {name} thread: {e}"));
        }
        ended
            .await
            .unwrap_or_else(|_| SourceExit::Failed(format!("the {name} thread panicked")))
    }
}

/// Run `start` (one run of `source`) again and again until the agent's loop
/// is gone, waiting the policy's delays between runs. Each run is a task of
/// its own, so a panic in it is an end like any other. A run that lasted
/// at least the cap starts the delays over from the minimum: it worked, and
/// its end is a new failure, not the next of a series.
pub async fn supervise<F, Fut>(
    source: &'static str,
    tx: Sender<SourceEvent>,
    policy: RestartPolicy,
    mut start: F,
) where
    F: FnMut(Sender<SourceEvent>) -> Fut,
    Fut: Future<Output = SourceExit> + Send + 'static,
{
    let mut delays = policy.delays();
    let mut last: Option<SourceExit> = None;
    loop {
        let began = Instant::now();
        let exit = match tokio::spawn(start(tx.clone())).await {
            Ok(SourceExit::Done) => SourceExit::Failed("stopped without an error".into()),
            Ok(exit) => exit,
            Err(e) if e.is_cancelled() => return,
            Err(e) => SourceExit::Failed(format!("panicked: {e}")),
        };
        let Some(event) = exit.event(source) else {
            return;
        };
        exit.log(source, last.as_ref() == Some(&exit));
        if tx.send(event).await.is_err() {
            return;
        }
        if began.elapsed() >= policy.max {
            delays = policy.delays();
        }
        let delay = delays.next().unwrap_or(policy.max);
        if !wait(&tx, delay).await {
            return;
        }
        if matches!(exit, SourceExit::Failed(_))
            && tx.send(SourceEvent::Restarted { source }).await.is_err()
        {
            return;
        }
        last = Some(exit);
    }
}

/// Sleep `delay`; `false` when the loop went away meanwhile.
async fn wait(tx: &Sender<SourceEvent>, delay: Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(delay) => true,
        _ = tx.closed() => false,
    }
}

#[cfg(test)]
#[path = "supervise_tests.rs"]
mod tests;
