//! Every restart ends (issue 32): each restart rebound made of a job is
//! followed by one `JobResumed` or `JobNotResumed` Event on it
//! (docs/events.md). A test waits for that with
//! [`Testbed::every_restart_ends`] while its controller still runs; a bed
//! made inside [`check_restart_endings`] (the end-to-end suite's `e2e!`
//! macro) reads its Events once more when it is dropped and panics if a
//! restart was made that no such wait covered, so no test can forget it.
//!
//! Which Events are restarts made: `JobRestarted` and `PodRestarted` whose
//! note starts with `Restarted (` (written when the restart's request was
//! answered; a restart never made ends in `RestartSkipped`), each counted
//! as often as its series says. One recovery may make more than one: a
//! fallback to the next tier (a `JobRestarted` "... falling back to ..."
//! followed by the next tier's restart) and a graded pod restart escalated
//! to the job (its restart's note says `graded: ... restarting the whole
//! job`) continue the recovery before them, which ends once. Every other
//! `JobRestarted` (a node's pods replaced during an in-place restart) is
//! part of a recovery already counted.
//!
//! The Events are read past the request log and the injected faults: in
//! process on the embedded server, straight from the upstream on a shared
//! cluster (not through the bed's proxy).

use super::*;
use k8s_openapi::api::events::v1::Event;
use std::collections::BTreeMap;

tokio::task_local! {
    static CHECKED: ();
}

/// Runs `f` with restart endings checked: every [`Testbed`] made in it
/// (in its task, not in tasks it spawns) panics when dropped if one of its
/// jobs has a restart that [`Testbed::every_restart_ends`] did not see end.
pub async fn check_restart_endings<F: std::future::Future>(f: F) -> F::Output {
    CHECKED.scope((), f).await
}

/// A job: namespace and name (Events name it in `regarding`).
type JobId = (String, String);

/// Per job: restarts made that need an ending, and endings seen.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Tally {
    restarts: usize,
    endings: usize,
}

/// Where a bed's Events are read from.
#[derive(Clone)]
enum Source {
    /// The embedded server, in process.
    Embedded(crate::server::ApiServerHandle),
    /// A shared cluster's upstream, the namespaces ending in `-<run>`.
    Upstream {
        config: Box<kube::Config>,
        suffix: String,
    },
}

impl Source {
    async fn events(&self) -> Result<Vec<Event>, String> {
        match self {
            Source::Embedded(api) => Ok(embedded_events(api)),
            Source::Upstream { config, suffix } => {
                let client =
                    kube::Client::try_from((**config).clone()).map_err(|e| e.to_string())?;
                let list = Api::<Event>::all(client)
                    .list(&Default::default())
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(list
                    .items
                    .into_iter()
                    .filter(|e| {
                        e.metadata
                            .namespace
                            .as_deref()
                            .is_some_and(|n| n.ends_with(suffix.as_str()))
                    })
                    .collect())
            }
        }
    }

    /// [`Self::events`] without a runtime (for `Drop`): a shared
    /// cluster's from a thread of its own.
    fn events_blocking(&self) -> Result<Vec<Event>, String> {
        if let Source::Embedded(api) = self {
            return Ok(embedded_events(api));
        }
        let source = self.clone();
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?
                .block_on(source.events())
        })
        .join()
        .map_err(|_| "the thread reading Events panicked".to_string())?
    }
}

fn embedded_events(api: &crate::server::ApiServerHandle) -> Vec<Event> {
    api.events_v1()
        .into_iter()
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect()
}

/// Restarts made and endings per job, from rebound's Events.
fn tally(events: &[Event]) -> BTreeMap<JobId, Tally> {
    let mut made: BTreeMap<JobId, (usize, usize)> = BTreeMap::new();
    let mut out: BTreeMap<JobId, Tally> = BTreeMap::new();
    for e in events {
        if e.reporting_controller.as_deref() != Some("rebound-controller") {
            continue;
        }
        let (Some(ns), Some(name)) = (
            e.metadata.namespace.clone(),
            e.regarding.as_ref().and_then(|r| r.name.clone()),
        ) else {
            continue;
        };
        let times = e.series.as_ref().map_or(1, |s| s.count.max(1)) as usize;
        let note = e.note.as_deref().unwrap_or_default();
        let job = (ns, name);
        match e.reason.as_deref() {
            Some("JobRestarted" | "PodRestarted") => {
                let m = made.entry(job).or_default();
                if note.starts_with("Restarted (") {
                    m.0 += times;
                    if note.contains("graded: the job is not running") {
                        m.1 += times;
                    }
                } else if note.contains("falling back to") {
                    m.1 += times;
                }
            }
            Some("JobResumed" | "JobNotResumed") => {
                out.entry(job).or_default().endings += times;
            }
            _ => {}
        }
    }
    for (job, (restarts, continued)) in made {
        // A fallback whose next restart was never made still leaves the
        // first restart to end.
        let restarts = restarts.saturating_sub(continued).max(restarts.min(1));
        out.entry(job).or_default().restarts = restarts;
    }
    out.retain(|_, t| *t != Tally::default());
    out
}

fn describe(jobs: &[(&JobId, &Tally)]) -> String {
    jobs.iter()
        .map(|((ns, name), t)| {
            format!(
                "{ns}/{name}: {} restart(s) made, {} ending(s)",
                t.restarts, t.endings
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// A bed's check of restart endings: what its waits saw end, and the
/// check once more when it is dropped.
pub(super) struct Guard {
    source: Option<Source>,
    /// Made inside [`check_restart_endings`].
    enforced: bool,
    /// Per job, the restarts [`Testbed::every_restart_ends`] saw end.
    seen: Mutex<BTreeMap<JobId, usize>>,
}

impl Guard {
    pub(super) fn embedded(api: &crate::server::ApiServerHandle) -> Self {
        Self::new(Some(Source::Embedded(api.clone())))
    }

    pub(super) fn upstream(config: kube::Config, run: &str) -> Self {
        Self::new(Some(Source::Upstream {
            config: Box::new(config),
            suffix: format!("-{run}"),
        }))
    }

    fn new(source: Option<Source>) -> Self {
        Guard {
            source,
            enforced: CHECKED.try_with(|_| ()).is_ok(),
            seen: Mutex::new(BTreeMap::new()),
        }
    }

    /// The bed's cluster is gone (a control plane the test stopped): what
    /// [`Testbed::every_restart_ends`] saw is all there is to know.
    pub(super) fn cluster_gone(&mut self) {
        self.source = None;
    }

    /// Waits up to `timeout` until every job has as many endings as
    /// restarts made, the same [`SETTLE`] later (a restart just answered
    /// may not have its Event yet); an error names those that do not.
    async fn wait(&self, timeout: Duration) -> Result<(), String> {
        let Some(source) = &self.source else {
            return Ok(());
        };
        let deadline = tokio::time::Instant::now() + timeout;
        let mut balanced: Option<(BTreeMap<JobId, Tally>, tokio::time::Instant)> = None;
        loop {
            let now = tally(&source.events().await?);
            // More endings than restarts is as wrong as fewer; either may
            // be an Event not written yet.
            let open: Vec<(&JobId, &Tally)> = now
                .iter()
                .filter(|(_, t)| t.endings != t.restarts)
                .collect();
            if !open.is_empty() {
                if tokio::time::Instant::now() >= deadline {
                    return Err(format!(
                        "restarts made and their JobResumed + JobNotResumed differ after {timeout:?}: {}",
                        describe(&open)
                    ));
                }
                balanced = None;
            } else {
                match &balanced {
                    Some((was, since)) if *was == now => {
                        if since.elapsed() >= SETTLE {
                            let mut seen = lock(&self.seen);
                            for (job, t) in &now {
                                seen.insert(job.clone(), t.restarts);
                            }
                            return Ok(());
                        }
                    }
                    _ => balanced = Some((now, tokio::time::Instant::now())),
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// How long every restart must stay ended before the wait is over.
const SETTLE: Duration = Duration::from_millis(1500);

impl Drop for Guard {
    fn drop(&mut self) {
        if !self.enforced || std::thread::panicking() {
            return;
        }
        let Some(source) = &self.source else {
            return;
        };
        let now = match source.events_blocking() {
            Ok(events) => tally(&events),
            Err(e) => {
                tracing::warn!(error = %e, "test bed: restart endings not read at the end");
                return;
            }
        };
        let seen = lock(&self.seen);
        let unchecked: Vec<(&JobId, &Tally)> = now
            .iter()
            .filter(|(job, t)| seen.get(*job).copied().unwrap_or(0) < t.restarts)
            .collect();
        if !unchecked.is_empty() {
            panic!(
                "a restart of this test was not seen to end: call every_restart_ends(&bed) \
                 (Testbed::every_restart_ends) after the last restart, while the controller \
                 runs; at the end: {}",
                describe(&unchecked)
            );
        }
    }
}

impl Testbed {
    /// Waits up to `timeout` until every restart rebound made of a job in
    /// the bed's namespaces ended in one `JobResumed` or `JobNotResumed`
    /// Event (see the module); an error names the jobs that did not. Call
    /// it while a controller runs, after the test's last restart: in the
    /// end-to-end suite a bed dropped with a restart this did not see end
    /// fails the test.
    pub async fn every_restart_ends(&self, timeout: Duration) -> Result<(), String> {
        self.ends.wait(timeout).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::api::events::v1::EventSeries;

    fn ev(job: &str, reason: &str, note: &str, count: i32) -> Event {
        Event {
            metadata: kube::api::ObjectMeta {
                namespace: Some("ml".into()),
                ..Default::default()
            },
            reason: Some(reason.into()),
            note: Some(note.into()),
            reporting_controller: Some("rebound-controller".into()),
            regarding: Some(ObjectReference {
                name: Some(job.into()),
                ..Default::default()
            }),
            series: (count > 1).then(|| EventSeries {
                count,
                last_observed_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                    Default::default(),
                ),
            }),
            ..Default::default()
        }
    }

    fn of(t: &BTreeMap<JobId, Tally>, job: &str) -> (usize, usize) {
        let t = t[&("ml".to_string(), job.to_string())];
        (t.restarts, t.endings)
    }

    #[test]
    fn restarts_made_are_counted_once_per_recovery() {
        let made = "Restarted (Recreate) after PodExit 1 (level RestartJob, policy -): deleted";
        let t = tally(&[
            // Two recoveries folded into a series, one ended so far.
            ev("a", "JobRestarted", made, 2),
            ev("a", "JobResumed", "running again 1.0s after the fault", 1),
            // A fallback: in place, then Recreate, one recovery.
            ev("b", "JobRestarted", "Restarted (InPlace) after x", 1),
            ev(
                "b",
                "JobRestarted",
                "not running again 2s after the InPlace restart: falling back to Recreate",
                1,
            ),
            ev("b", "JobRestarted", "Restarted (Recreate) after x", 1),
            ev("b", "JobNotResumed", "not running again", 1),
            // A graded pod restart escalated to the job: one recovery.
            ev("c", "PodRestarted", "Restarted (PodFirst) after x", 1),
            ev(
                "c",
                "JobRestarted",
                "Restarted (Recreate) after x; why: graded: the job is not running 5s after the pod restart; restarting the whole job",
                1,
            ),
            // A fallback whose next restart was never made: the first ends.
            ev("d", "JobRestarted", "Restarted (InPlace) after x", 1),
            ev(
                "d",
                "JobRestarted",
                "not running again 2s after the InPlace restart: falling back to Recreate",
                1,
            ),
            // Not restarts: skipped, or a node's pods replaced in place.
            ev("e", "RestartSkipped", "Cooldown: ...", 3),
            ev(
                "e",
                "JobRestarted",
                "node n failed during the in-place restart: its pods are replaced",
                1,
            ),
        ]);
        assert_eq!(of(&t, "a"), (2, 1));
        assert_eq!(of(&t, "b"), (1, 1));
        assert_eq!(of(&t, "c"), (1, 0));
        assert_eq!(of(&t, "d"), (1, 0));
        assert!(!t.contains_key(&("ml".to_string(), "e".to_string())));
    }

    #[test]
    fn other_controllers_events_do_not_count() {
        let mut e = ev("a", "JobRestarted", "Restarted (Recreate) after x", 1);
        e.reporting_controller = Some("volcano".into());
        assert!(tally(&[e]).is_empty());
    }
}
