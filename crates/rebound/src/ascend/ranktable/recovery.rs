//! When a job that rebound restarted counts as recovered: its rank table is
//! `completed` again, built from pods of after the restart. Pure; the
//! record of what was reported lives in the job's annotations so that a new
//! leader or a restarted controller never reports a restart twice.

use crate::recover::{LAST_RESTART_ANNOTATION, RESTART_COUNT_ANNOTATION, read_history};
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

/// The restart count whose recovery was last reported.
pub const RECOVERED_RESTART_ANNOTATION: &str = "rebound.dev/recovered-restart";
/// When that recovery was seen (RFC 3339), for people.
pub const RECOVERED_AT_ANNOTATION: &str = "rebound.dev/recovered-at";

/// The job's last restart by rebound, from its annotations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LastRestart {
    /// `rebound.dev/restart-count`.
    pub count: u64,
    /// When it was decided: the history's last entry (sub-second), else
    /// `rebound.dev/last-restart`.
    pub at: DateTime<Utc>,
    /// The count already reported recovered, if any.
    pub reported: Option<u64>,
}

/// Read the restart records; `None` when rebound never restarted the job or
/// the annotations are unreadable (someone else's edits are not an error).
pub fn last_restart(annotations: &BTreeMap<String, String>) -> Option<LastRestart> {
    let count = annotations
        .get(RESTART_COUNT_ANNOTATION)?
        .trim()
        .parse::<u64>()
        .ok()
        .filter(|c| *c > 0)?;
    let at = read_history(annotations).last().map(|r| r.at).or_else(|| {
        annotations
            .get(LAST_RESTART_ANNOTATION)
            .and_then(|s| DateTime::parse_from_rfc3339(s.trim()).ok())
            .map(|t| t.with_timezone(&Utc))
    })?;
    let reported = annotations
        .get(RECOVERED_RESTART_ANNOTATION)
        .and_then(|s| s.trim().parse::<u64>().ok());
    Some(LastRestart {
        count,
        at,
        reported,
    })
}

/// What is known of the job's table now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableState {
    /// The ConfigMap holds a `completed` table.
    pub completed: bool,
    /// When this controller last saw a pod of the job go (in memory only).
    pub last_reset: Option<DateTime<Utc>>,
    /// The oldest creation time of the pods in the table (second precision,
    /// as the API server stores it).
    pub oldest_pod: Option<DateTime<Utc>>,
}

/// The restart count to report recovered now, if any: the last restart is
/// unreported, the table is complete, and it was rebuilt after that
/// restart — either this controller saw the job's pods go after the
/// restart was decided, or (after a controller restart, without that
/// memory) every pod in the table was created in a later second than the
/// restart (second precision cannot tell a pod of the same second apart).
pub fn recovered(restart: Option<LastRestart>, table: TableState) -> Option<u64> {
    let r = restart?;
    if r.reported.is_some_and(|n| n >= r.count) || !table.completed {
        return None;
    }
    let reset_after = table.last_reset.is_some_and(|t| t >= r.at);
    let pods_after = table
        .oldest_pod
        .is_some_and(|t| t.timestamp() > r.at.timestamp());
    (reset_after || pods_after).then_some(r.count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(s: i64, ms: u32) -> DateTime<Utc> {
        Utc.timestamp_opt(s, ms * 1_000_000).single().expect("time")
    }

    fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn reads_count_time_and_what_was_reported() {
        assert_eq!(last_restart(&ann(&[])), None);
        let a = ann(&[
            (RESTART_COUNT_ANNOTATION, "2"),
            (LAST_RESTART_ANNOTATION, "2026-01-01T00:00:10Z"),
            (RECOVERED_RESTART_ANNOTATION, "1"),
        ]);
        let r = last_restart(&a).expect("restart");
        assert_eq!(
            (r.count, r.at, r.reported),
            (2, t(1_767_225_610, 0), Some(1))
        );
        // The history's precise time wins over the rounded annotation.
        let mut h = a.clone();
        h.insert(
            crate::recover::RESTART_HISTORY_ANNOTATION.into(),
            r#"[{"at":"2026-01-01T00:00:10.250Z"}]"#.into(),
        );
        assert_eq!(last_restart(&h).expect("restart").at, t(1_767_225_610, 250));
        assert_eq!(last_restart(&ann(&[(RESTART_COUNT_ANNOTATION, "x")])), None);
        assert_eq!(last_restart(&ann(&[(RESTART_COUNT_ANNOTATION, "1")])), None);
    }

    #[test]
    fn recovered_only_after_a_rebuild_and_only_once() {
        let at = t(100, 500);
        let r = LastRestart {
            count: 3,
            at,
            reported: Some(2),
        };
        let stale = TableState {
            completed: true,
            last_reset: Some(t(90, 0)),
            oldest_pod: Some(t(100, 0)),
        };
        assert_eq!(recovered(Some(r), stale), None, "table of the old pods");
        let rebuilt = TableState {
            last_reset: Some(t(100, 700)),
            ..stale
        };
        assert_eq!(recovered(Some(r), rebuilt), Some(3));
        assert_eq!(
            recovered(
                Some(r),
                TableState {
                    completed: false,
                    ..rebuilt
                }
            ),
            None
        );
        assert_eq!(
            recovered(
                Some(LastRestart {
                    reported: Some(3),
                    ..r
                }),
                rebuilt
            ),
            None,
            "reported once"
        );
        assert_eq!(recovered(None, rebuilt), None, "never restarted by rebound");
        // Without memory of the reset (a new controller): pods of a later second.
        let fresh = TableState {
            completed: true,
            last_reset: None,
            oldest_pod: Some(t(101, 0)),
        };
        assert_eq!(recovered(Some(r), fresh), Some(3));
        assert_eq!(
            recovered(
                Some(r),
                TableState {
                    oldest_pod: Some(t(100, 0)),
                    ..fresh
                }
            ),
            None
        );
    }
}
