//! The restart agent's runner: it follows one job's restart generation
//! and feeds every observation to [`AgentCore`], reporting each change of
//! verdict to a caller-supplied sink. The same runner serves the real
//! `rebound restart-agent` (whose sink flips the startup probe and exits the
//! process) and the simulated kubelet (whose sink drives a simulated
//! container), so the API load the simulation measures is the real one.
//!
//! What it costs the API server, per pod: one metadata-only `GET` of the
//! job, then one metadata-only watch of that object alone
//! (`fieldSelector=metadata.name=<job>`, bookmarks on), renewed every
//! [`RunnerConfig::watch_timeout`] (290 s, jittered) with a fresh
//! `GET`. No lists, ever: a list of a job kind at 10,000 pods would cost the
//! server far more than every watch together. The watch also selects on
//! [`super::STATE_LABEL`], excluding the state last seen
//! ([`super::watch_selector`]), so the job's own status writes never reach
//! the agent; when the generation moves, the agent starts a new watch from
//! that event's resourceVersion with a selector excluding the new state
//! (one watch request per change seen, no `GET`).
//!
//! Resilience: a watch that ends (timeout, a dropped connection, `410
//! Expired`, an error event, or silence longer than
//! [`RunnerConfig::idle_timeout`]) is followed by a fresh `GET`, so the
//! agent catches up with a generation bumped while it was not watching. A
//! job that does not exist is watched for its creation (a watch without a
//! resourceVersion delivers it as `ADDED`). Failures back off
//! exponentially (0.5 s to 30 s, jittered). If the agent never managed to
//! read its job for [`RunnerConfig::fail_open_after`], it opens the barrier
//! ([`AgentCore::fail_open`]): a broken wiring must never keep training
//! from starting.

use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DynamicObject, WatchEvent, WatchParams};
use kube::core::ObjectMeta;
use tokio::time::Instant;

use super::{AgentCore, Generation, STATE_LABEL, Verdict, watch_selector};

pub use super::job_ref::{AgentError, JobRef};

mod backoff;
mod report;
mod trainjob;

use backoff::{Backoff, jitter};
pub use report::{Cause, Report};
pub use trainjob::follow_trainjob;
use trainjob::resolve;

/// How the runner talks to the API server.
#[derive(Clone, Debug)]
pub struct RunnerConfig {
    /// Open the barrier if the job could not be read at all for this long
    /// after the start (`--fail-open-after`).
    pub fail_open_after: Duration,
    /// The server ends each watch after this long (`timeoutSeconds`, plus
    /// up to a tenth of jitter so agents started together renew apart);
    /// the agent then reads its job again and watches anew.
    pub watch_timeout: Duration,
    /// A watch that delivers nothing (no event, no bookmark) for this long
    /// is taken for a dead connection; never less than the server's
    /// timeout (with its jitter) plus 30 s, since a real API server may
    /// send nothing at all to a watch of a quiet object.
    pub idle_timeout: Duration,
    /// Longest wait for a `GET` or for a watch to be accepted.
    pub request_timeout: Duration,
    /// First retry delay after a failure; doubles up to `backoff_max`.
    pub backoff_min: Duration,
    /// Longest retry delay.
    pub backoff_max: Duration,
}

impl Default for RunnerConfig {
    fn default() -> Self {
        Self {
            fail_open_after: Duration::from_secs(60),
            watch_timeout: Duration::from_secs(290),
            idle_timeout: Duration::from_secs(350),
            request_timeout: Duration::from_secs(30),
            backoff_min: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
        }
    }
}

/// How one watch ended.
enum WatchEnd {
    /// The pod is behind: the run is over.
    Exit(Report),
    /// The job's state changed from the one the selector excludes: watch
    /// again, from that event, with a selector excluding the new state.
    Reselect,
    /// The stream ended or went silent; read the job again.
    Ended,
    /// The watch failed (refused, an error event, a broken stream).
    Failed(String),
}

/// What a `GET` found.
enum Read {
    Exit(Report),
    Found,
    Missing,
    Failed(String),
}

struct Runner<S> {
    api: Api<DynamicObject>,
    job: JobRef,
    cfg: RunnerConfig,
    sink: S,
    core: AgentCore,
    last: Option<Verdict>,
    observed: Option<Generation>,
    read_once: bool,
    failed_open: bool,
    fail_open_at: Instant,
    last_error: String,
    /// The resourceVersion of the last GET, or of the event that ended a
    /// watch with [`WatchEnd::Reselect`]: the next watch starts there.
    resume_rv: Option<String>,
    /// The job's [`STATE_LABEL`] at the last observation (`None`: absent).
    seen_label: Option<String>,
}

impl<S: FnMut(&Report)> Runner<S> {
    fn report(&mut self, verdict: Verdict, cause: Cause) -> Report {
        let r = Report {
            verdict,
            observed: self.observed,
            generation: self.core.generation(),
            cause,
        };
        self.last = Some(verdict);
        (self.sink)(&r);
        r
    }

    /// Feeds one observation of the job to the core; `Some` once the pod
    /// must restart.
    fn observe(&mut self, meta: &ObjectMeta) -> Option<Report> {
        let empty = Default::default();
        let g = Generation::from_annotations(meta.annotations.as_ref().unwrap_or(&empty));
        self.seen_label = meta
            .labels
            .as_ref()
            .and_then(|l| l.get(STATE_LABEL))
            .cloned();
        let first = !self.read_once;
        self.read_once = true;
        self.observed = Some(g);
        let v = self.core.observe(g);
        // The sink hears changes only (a run that failed open and then
        // reads a released job stays Open without a second report).
        if self.last == Some(v) {
            return None;
        }
        let cause = if first {
            Cause::FirstRead
        } else {
            Cause::Generation
        };
        let r = self.report(v, cause);
        (v == Verdict::Exit).then_some(r)
    }

    /// The label selector of the next watch: none before the job was read
    /// (a missing job is watched for its creation, whatever its labels).
    fn selector(&self) -> Option<String> {
        if !self.read_once {
            return None;
        }
        watch_selector(
            self.seen_label.as_deref(),
            self.observed.unwrap_or_default(),
        )
    }

    fn note_error(&mut self, e: String) {
        tracing::debug!(job = %self.job, error = %e, "restart agent: cannot read the job");
        self.last_error = e;
    }

    /// Opens the barrier once the job has been unreadable for too long.
    fn maybe_fail_open(&mut self) {
        if self.read_once || self.failed_open || Instant::now() < self.fail_open_at {
            return;
        }
        self.failed_open = true;
        self.core.fail_open();
        let why = if self.last_error.is_empty() {
            format!(
                "job {} not readable within {:?}",
                self.job, self.cfg.fail_open_after
            )
        } else {
            format!(
                "job {} not readable within {:?}: {}",
                self.job, self.cfg.fail_open_after, self.last_error
            )
        };
        if self.last != Some(Verdict::Open) {
            self.report(Verdict::Open, Cause::FailOpen(why));
        }
    }

    /// Whether the fail-open deadline still lies ahead.
    fn fail_open_pending(&self) -> bool {
        !self.read_once && !self.failed_open
    }

    /// Sleeps `d`, failing open on the way if its time comes.
    async fn sleep(&mut self, d: Duration) {
        let until = Instant::now() + d;
        if self.fail_open_pending() && self.fail_open_at < until {
            tokio::time::sleep_until(self.fail_open_at).await;
            self.maybe_fail_open();
        }
        tokio::time::sleep_until(until).await;
    }

    async fn get(&mut self) -> Read {
        let name = self.job.name.clone();
        match tokio::time::timeout(self.cfg.request_timeout, self.api.get_metadata_opt(&name)).await
        {
            Err(_) => Read::Failed(format!(
                "GET timed out after {:?}",
                self.cfg.request_timeout
            )),
            Ok(Err(e)) => Read::Failed(format!("GET: {e}")),
            Ok(Ok(None)) => Read::Missing,
            Ok(Ok(Some(m))) => {
                self.resume_rv = m.metadata.resource_version.clone();
                match self.observe(&m.metadata) {
                    Some(exit) => Read::Exit(exit),
                    None => Read::Found,
                }
            }
        }
    }

    async fn watch(&mut self, from_current: bool) -> WatchEnd {
        let secs = self.cfg.watch_timeout + jitter(self.cfg.watch_timeout / 10);
        let selector = if from_current { None } else { self.selector() };
        let mut wp = WatchParams::default()
            .fields(&format!("metadata.name={}", self.job.name))
            .timeout(secs.as_secs().clamp(1, u64::from(u32::MAX)) as u32);
        if let Some(s) = &selector {
            wp = wp.labels(s);
        }
        // From the GET's resourceVersion: nothing between the GET and the
        // watch is lost. A missing job is watched from "0" (any state the
        // server has, its watch cache on a real one), so its creation
        // arrives as ADDED. Not from "" (the most recent state): a real
        // v1.36 server answers that with an error unless its etcd supports
        // watch progress requests (etcd 3.4.23 does not).
        let rv = if from_current {
            "0".to_owned()
        } else {
            self.resume_rv.clone().unwrap_or_default()
        };
        let started =
            tokio::time::timeout(self.cfg.request_timeout, self.api.watch_metadata(&wp, &rv)).await;
        let stream = match started {
            Err(_) => {
                return WatchEnd::Failed(format!(
                    "watch not accepted within {:?}",
                    self.cfg.request_timeout
                ));
            }
            Ok(Err(e)) => return WatchEnd::Failed(format!("watch: {e}")),
            Ok(Ok(s)) => s,
        };
        let mut stream = std::pin::pin!(stream);
        let idle = self.cfg.idle_timeout.max(secs + Duration::from_secs(30));
        loop {
            let next = if self.fail_open_pending() {
                tokio::select! {
                    n = tokio::time::timeout(idle, stream.next()) => n,
                    _ = tokio::time::sleep_until(self.fail_open_at) => {
                        self.maybe_fail_open();
                        continue;
                    }
                }
            } else {
                tokio::time::timeout(idle, stream.next()).await
            };
            match next {
                Err(_) => {
                    tracing::debug!(job = %self.job, "restart agent: watch silent, reading the job again");
                    return WatchEnd::Ended;
                }
                Ok(None) => return WatchEnd::Ended,
                Ok(Some(Ok(WatchEvent::Added(m) | WatchEvent::Modified(m)))) => {
                    if let Some(exit) = self.observe(&m.metadata) {
                        return WatchEnd::Exit(exit);
                    }
                    if self.selector() != selector {
                        self.resume_rv = m.metadata.resource_version.clone();
                        return WatchEnd::Reselect;
                    }
                }
                // The generation of a deleted job cannot move (a job created
                // again under the name arrives as ADDED); a bookmark only
                // says the connection lives.
                Ok(Some(Ok(WatchEvent::Deleted(_) | WatchEvent::Bookmark(_)))) => {}
                Ok(Some(Ok(WatchEvent::Error(s)))) if s.code == 410 => {
                    // Expired: the fresh GET that follows catches up.
                    return WatchEnd::Ended;
                }
                Ok(Some(Ok(WatchEvent::Error(s)))) => {
                    return WatchEnd::Failed(format!("watch error {}: {}", s.code, s.message));
                }
                Ok(Some(Err(e))) => return WatchEnd::Failed(format!("watch stream: {e}")),
            }
        }
    }
}

/// Follows `job` until the pod must restart, reporting every change of
/// verdict to `sink` (the first one as soon as the job is read, or when
/// failing open). Returns the [`Verdict::Exit`] report, which the sink has
/// received too. Never returns otherwise: a run of the agent lasts until
/// its pod is behind or its container is stopped (drop the future).
pub async fn run<S>(client: kube::Client, job: &JobRef, cfg: &RunnerConfig, sink: S) -> Report
where
    S: FnMut(&Report) + Send,
{
    let (job, first_read) = resolve(&client, job, cfg).await;
    let api: Api<DynamicObject> = Api::namespaced_with(client, &job.namespace, &job.api_resource());
    let mut r = Runner {
        api,
        job,
        cfg: cfg.clone(),
        sink,
        core: AgentCore::new(),
        last: None,
        observed: None,
        read_once: false,
        failed_open: false,
        fail_open_at: Instant::now() + cfg.fail_open_after,
        last_error: String::new(),
        resume_rv: None,
        seen_label: None,
    };
    let mut backoff = Backoff::new(cfg);
    let mut reselect = false;
    // The JobSet read to look for its TrainJob is the first read of the
    // JobSet followed itself: straight to the watch, as after a GET.
    if let Some(meta) = first_read {
        r.resume_rv = meta.resource_version.clone();
        if let Some(exit) = r.observe(&meta) {
            return exit;
        }
        reselect = true;
    }
    loop {
        let read = if std::mem::take(&mut reselect) {
            Read::Found
        } else {
            r.get().await
        };
        let missing = match read {
            Read::Exit(report) => return report,
            Read::Found => false,
            Read::Missing => {
                r.note_error(format!("job {} not found", r.job));
                r.resume_rv = None;
                true
            }
            Read::Failed(e) => {
                r.note_error(e);
                r.maybe_fail_open();
                let d = backoff.next_delay();
                r.sleep(d).await;
                continue;
            }
        };
        r.maybe_fail_open();
        let opened = Instant::now();
        match r.watch(missing).await {
            WatchEnd::Exit(report) => return report,
            WatchEnd::Reselect => {
                reselect = true;
                continue;
            }
            WatchEnd::Ended => {}
            WatchEnd::Failed(e) => r.note_error(e),
        }
        // A watch that lived long was healthy: start the backoff afresh.
        // One that ended at once (refused, expired) waits before the next
        // GET, so a broken server is not hammered by thousands of agents.
        if opened.elapsed() >= Duration::from_secs(30) {
            backoff.reset();
        } else {
            let d = backoff.next_delay();
            r.sleep(d).await;
        }
    }
}
