//! What `/healthz` says: each source's state, since when, why, and how often
//! it failed and was restarted.
//!
//! `/healthz` reports per source and answers 200 while the agent runs, also
//! with a source down: the supervisor already restarts a source in the
//! process, so a restart of the pod by the kubelet could not bring back what
//! that did not (a GPU off the bus, a missing permission or tool), and it
//! would stop the sources that work with it, on the very node whose fault
//! they report. A source down for long is an alert
//! (`ReboundAgentSourceFailing` on `rebound_agent_source_failing`), not a
//! liveness failure (docs/agent.md).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use serde::Serialize;

use super::fault::SourceEvent;

/// A source's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceState {
    /// It works.
    Up,
    /// It is not there on this node, or switched off: down, not failing.
    Unavailable,
    /// It is down because of an error.
    Failing,
}

/// One source as `/healthz` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SourceStatus {
    /// Its state.
    pub state: SourceState,
    /// When it entered that state (RFC 3339).
    pub since: String,
    /// Why it is down (the error, or what is missing); absent while up.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The last error, also one the source survived (an NVML wait).
    #[serde(rename = "lastError", skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Errors counted since the agent started.
    pub errors: u64,
    /// Restarts by the supervisor since the agent started.
    pub restarts: u64,
}

/// The body of `/healthz`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HealthReport {
    /// `ok`, or `degraded` while any source is failing.
    pub status: &'static str,
    /// Every source the agent started or was told about, by name.
    pub sources: BTreeMap<&'static str, SourceStatus>,
}

/// The sources' states, shared by the agent's loop (which writes) and the
/// HTTP server (which reads); cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Health(Arc<Mutex<BTreeMap<&'static str, SourceStatus>>>);

impl Health {
    /// Fold one source event in; `Some(state)` when it set a state (for
    /// the metrics), `None` for events that only count or carry faults.
    pub fn apply(&self, ev: &SourceEvent, now: SystemTime) -> Option<(&'static str, SourceState)> {
        let mut sources = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let (source, state, detail) = match ev {
            SourceEvent::Up { source } => (*source, SourceState::Up, None),
            SourceEvent::Unavailable { source, why } => {
                (*source, SourceState::Unavailable, Some(why.clone()))
            }
            SourceEvent::Failed { source, error } => {
                let s = entry(&mut sources, source, now);
                s.errors += 1;
                s.last_error = Some(error.clone());
                (*source, SourceState::Failing, Some(error.clone()))
            }
            SourceEvent::Error { source, error } => {
                let s = entry(&mut sources, source, now);
                s.errors += 1;
                s.last_error = Some(error.clone());
                return None;
            }
            SourceEvent::Restarted { source } => {
                entry(&mut sources, source, now).restarts += 1;
                return None;
            }
            SourceEvent::Fault { .. }
            | SourceEvent::Found { .. }
            | SourceEvent::ParseErrors { .. } => {
                return None;
            }
        };
        let s = entry(&mut sources, source, now);
        if s.state != state {
            s.since = stamp(now);
        }
        s.state = state;
        s.detail = detail;
        Some((source, state))
    }

    /// What `/healthz` answers now.
    pub fn report(&self) -> HealthReport {
        let sources = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let failing = sources.values().any(|s| s.state == SourceState::Failing);
        HealthReport {
            status: if failing { "degraded" } else { "ok" },
            sources,
        }
    }
}

fn entry<'a>(
    sources: &'a mut BTreeMap<&'static str, SourceStatus>,
    source: &'static str,
    now: SystemTime,
) -> &'a mut SourceStatus {
    sources.entry(source).or_insert_with(|| SourceStatus {
        // A source is first heard of when it starts, before it says more.
        state: SourceState::Unavailable,
        since: stamp(now),
        detail: None,
        last_error: None,
        errors: 0,
        restarts: 0,
    })
}

fn stamp(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn states_counts_and_since() {
        let h = Health::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let later = t0 + Duration::from_secs(60);
        let kmsg = "kmsg";
        assert_eq!(
            h.apply(&SourceEvent::Up { source: kmsg }, t0),
            Some((kmsg, SourceState::Up))
        );
        let failed = SourceEvent::Failed {
            source: kmsg,
            error: "permission denied".into(),
        };
        assert_eq!(h.apply(&failed, later), Some((kmsg, SourceState::Failing)));
        assert_eq!(
            h.apply(&SourceEvent::Restarted { source: kmsg }, later),
            None
        );
        // Still failing: the state's start stays the first failure's.
        h.apply(&failed, later + Duration::from_secs(5));
        h.apply(
            &SourceEvent::Unavailable {
                source: "dcgm",
                why: "dcgmi not found".into(),
            },
            t0,
        );
        let r = h.report();
        assert_eq!(r.status, "degraded");
        let k = &r.sources["kmsg"];
        assert_eq!(
            (k.state, k.errors, k.restarts),
            (SourceState::Failing, 2, 1)
        );
        assert_eq!(k.since, "2027-01-15T08:01:00Z");
        assert_eq!(k.detail.as_deref(), Some("permission denied"));
        assert_eq!(r.sources["dcgm"].state, SourceState::Unavailable);
        // An unavailable source is not a failing one; a survived error
        // counts without changing the state.
        h.apply(&SourceEvent::Up { source: kmsg }, later);
        h.apply(
            &SourceEvent::Error {
                source: kmsg,
                error: "one bad read".into(),
            },
            later,
        );
        let r = h.report();
        assert_eq!(r.status, "ok");
        let k = &r.sources["kmsg"];
        assert_eq!(
            (k.state, k.errors, k.detail.as_deref()),
            (SourceState::Up, 3, None)
        );
        assert_eq!(k.last_error.as_deref(), Some("one bad read"));
        let json = serde_json::to_value(&r).expect("serializes");
        assert_eq!(json["sources"]["kmsg"]["state"], "up");
        assert_eq!(json["sources"]["kmsg"]["lastError"], "one bad read");
        assert_eq!(json["sources"]["dcgm"]["detail"], "dcgmi not found");
    }
}
