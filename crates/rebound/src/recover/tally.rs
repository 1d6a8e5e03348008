//! The compact tally of restarts older than the full history: what a
//! restart budget of up to [`MAX_BUDGET`] restarts within a window of up
//! to 366 days needs (a time and whether hardware caused it), in at most
//! [`TALLY_BYTES`] of one annotation on the job.
//!
//! An entry is the restart's time in seconds since 1970 in base 36,
//! followed by `h` when a hardware level caused it; entries are separated
//! by a space, oldest first (`s44we8 s44wfwh`). Anyone can edit
//! annotations: an entry that does not parse is ignored, never an error.

use crate::policy::{MAX_BUDGET, RestartRecord, TALLY_BYTES};
use chrono::{DateTime, Utc};

/// The annotation holding the tally.
pub const RESTART_TALLY_ANNOTATION: &str = "rebound.dev/restart-tally";

/// Restarts older than this before the newest are never counted by any
/// budget (windows are at most 366 days): they are dropped.
const HORIZON: chrono::Duration = chrono::Duration::days(366);

/// The restarts in `raw`, oldest first, as records with only what the
/// tally keeps (time and hardware cause).
pub fn read(raw: &str) -> Vec<RestartRecord> {
    let mut out: Vec<RestartRecord> = raw
        .split_ascii_whitespace()
        .filter_map(|e| {
            let (digits, infrastructure) = match e.strip_suffix('h') {
                Some(d) => (d, true),
                None => (e, false),
            };
            let secs = i64::from_str_radix(digits, 36).ok()?;
            let at = DateTime::<Utc>::from_timestamp(secs, 0)?;
            Some(RestartRecord {
                at,
                infrastructure,
                ..RestartRecord::default()
            })
        })
        .collect();
    out.sort_by_key(|r| r.at);
    out
}

/// The tally of `older` (restarts that fell out of the full history,
/// oldest first): pod-only restarts (no budget counts them) and those
/// beyond the horizon of `newest` dropped, then only as many as a budget
/// of [`MAX_BUDGET`] can count — the newest `MAX_BUDGET` of all, and the
/// newest `MAX_BUDGET` not caused by hardware (a budget that leaves
/// hardware out counts those). `None` when nothing is left.
pub fn write(older: &[RestartRecord], newest: DateTime<Utc>) -> Option<String> {
    let horizon = newest.checked_sub_signed(HORIZON)?;
    let max = MAX_BUDGET as usize;
    let (mut all, mut own) = (0usize, 0usize);
    let mut kept: Vec<&RestartRecord> = Vec::new();
    // Newest first: an entry stays while a budget may still count it.
    for r in older.iter().rev().filter(|r| !r.pod_only && r.at > horizon) {
        let counted = all < max || (!r.infrastructure && own < max);
        if !counted {
            continue;
        }
        all += 1;
        own += usize::from(!r.infrastructure);
        kept.push(r);
    }
    if kept.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(kept.len() * 8);
    for r in kept.iter().rev() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&base36(r.at.timestamp()));
        if r.infrastructure {
            out.push('h');
        }
    }
    debug_assert!(out.len() <= TALLY_BYTES, "tally of {} bytes", out.len());
    Some(out)
}

/// `n` in base 36, lower case (negative times, before 1970, keep their
/// sign: `i64::from_str_radix` reads them back).
fn base36(n: i64) -> String {
    let neg = n < 0;
    let mut v = n.unsigned_abs();
    let mut digits = Vec::new();
    loop {
        digits.push(char::from_digit((v % 36) as u32, 36).unwrap_or('0'));
        v /= 36;
        if v == 0 {
            break;
        }
    }
    if neg {
        digits.push('-');
    }
    digits.iter().rev().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn rec(s: i64, infrastructure: bool) -> RestartRecord {
        RestartRecord {
            at: Utc.timestamp_opt(s, 0).single().expect("valid time"),
            infrastructure,
            ..RestartRecord::default()
        }
    }

    #[test]
    fn round_trip_keeps_time_and_cause() {
        let older = vec![rec(1_700_000_000, false), rec(1_700_000_060, true)];
        let raw = write(&older, older[1].at).expect("something kept");
        assert_eq!(raw, "s44we8 s44wfwh");
        assert_eq!(read(&raw), older);
        assert_eq!(read(&base36(-5)), vec![rec(-5, false)]);
    }

    #[test]
    fn garbage_is_ignored_entry_by_entry() {
        let r = read("s44we8 ~~ zzzzzzzzzzzzzzzzzzzzzzz h s44wfwh");
        assert_eq!(r, vec![rec(1_700_000_000, false), rec(1_700_000_060, true)]);
        assert!(read("").is_empty());
    }

    #[test]
    fn pod_only_and_beyond_the_horizon_are_dropped() {
        let now = 1_800_000_000;
        let mut pod = rec(now - 10, false);
        pod.pod_only = true;
        let older = vec![rec(now - 367 * 86_400, false), pod];
        assert_eq!(write(&older, rec(now, false).at), None);
    }

    /// The bound: however many restarts, the tally keeps what a budget of
    /// `MAX_BUDGET` needs of each kind and no more, within `TALLY_BYTES`.
    #[test]
    fn bounded_in_bytes_and_exact_for_the_largest_budget() {
        let max = MAX_BUDGET as i64;
        let base = 1_800_000_000;
        // 3 × max restarts a minute apart: the oldest max are not caused
        // by hardware, the newest 2 × max are.
        let older: Vec<_> = (0..3 * max).map(|i| rec(base + 60 * i, i >= max)).collect();
        let newest = older.last().expect("some").at;
        let raw = write(&older, newest).expect("kept");
        assert!(raw.len() <= TALLY_BYTES, "{} bytes", raw.len());
        let kept = read(&raw);
        // A budget that counts hardware: the newest max of all.
        assert_eq!(kept.iter().filter(|r| r.infrastructure).count() as i64, max);
        // A budget that does not: the max others, all of them.
        assert_eq!(
            kept.iter().filter(|r| !r.infrastructure).count() as i64,
            max
        );
        assert_eq!(kept.first().map(|r| r.at), Some(older[0].at));
        // The kept hardware restarts are the newest ones.
        assert_eq!(
            kept.iter().find(|r| r.infrastructure).map(|r| r.at),
            Some(older[2 * max as usize].at)
        );
    }
}
