//! A thread that starts processes and keeps them until told to stop.
//!
//! The real components' processes die with the thread that spawned them
//! (`PR_SET_PDEATHSIG`), so they must be spawned from a thread that lives
//! as long as the run, not from a runtime's worker (which may end) nor the
//! caller's (which blocks in async code). The process-wide keepers of the
//! test bed (`crate::envtest::on_keeper_thread`) never end; a run of
//! `rebound sim` stops its own before its control plane, so that no
//! operator is left retrying against a server that is gone.

use std::sync::mpsc;
use std::thread::JoinHandle;

/// The keeper thread of one run; [`Keeper::stop`] (or dropping it) ends
/// what it holds.
#[derive(Debug)]
pub struct Keeper {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Keeper {
    /// Runs `start` on a new thread named `name`; what it returns first
    /// stays on that thread until the keeper is stopped, what it returns
    /// second is handed back. Blocks until `start` returned.
    pub fn start<T: 'static, I: Send + 'static>(
        name: &str,
        start: impl FnOnce() -> Result<(T, I), String> + Send + 'static,
    ) -> Result<(Keeper, I), String> {
        let (tx, rx) = mpsc::channel();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || match start() {
                Ok((held, info)) => {
                    let _ = tx.send(Ok(info));
                    // Until stopped, or until the keeper is dropped.
                    let _ = stop_rx.recv();
                    drop(held);
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                }
            })
            .map_err(|e| format!("cannot start the {name} thread: {e}"))?;
        let info = rx
            .recv()
            .unwrap_or_else(|_| Err(format!("the {name} thread died")));
        let keeper = Keeper {
            stop: Some(stop_tx),
            thread: Some(thread),
        };
        info.map(|i| (keeper, i))
    }

    /// Ends what the thread holds and waits for it.
    pub fn stop(mut self) {
        self.end();
    }

    fn end(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    struct Flag(Arc<AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn what_it_holds_lives_until_it_is_stopped() {
        let dropped = Arc::new(AtomicBool::new(false));
        let d = dropped.clone();
        let (k, info) = Keeper::start("t", move || Ok((Flag(d), 7))).expect("start");
        assert_eq!(info, 7);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!dropped.load(Ordering::SeqCst), "held while running");
        k.stop();
        assert!(dropped.load(Ordering::SeqCst), "ended by stop");
        let e = Keeper::start::<(), ()>("t", || Err("no".into())).unwrap_err();
        assert_eq!(e, "no");
    }
}
