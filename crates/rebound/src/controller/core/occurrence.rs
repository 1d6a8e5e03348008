//! Occurrences, not observations: a fault is counted and decided once
//! however often its carrier (a pod status, a Node condition, an Event, a
//! device-plugin ConfigMap) is rewritten or replayed by a relist.
//!
//! An occurrence's identity is a 128-bit fingerprint of what makes it this
//! occurrence: the object and its place, the code, and the time it
//! happened as its reporter wrote it (never when we saw it). The agent
//! writes that time (`at=`) and its repeat count (`n=`) on every condition
//! line and in every Event, so both channels name the same occurrences.
//! The ledger remembers what became of each.
//!
//! The trust domain is part of the identity: a tenant who copies a
//! trusted fault line (its `at=` included) into an Event of their own
//! names another occurrence, which cannot replace, remove or absorb the
//! trusted one (DESIGN.md §4, trust domains).

use crate::controller::core::hashing::HashMap;
use crate::fault::{Fault, FaultSource, Level};
use chrono::{DateTime, Utc};
use std::collections::VecDeque;
use std::hash::{Hash, Hasher};

/// A fault occurrence's identity.
pub type OccurrenceId = u128;

/// The fingerprint of `parts`: two differently keyed 64-bit hashes. Two
/// different occurrences share one with a chance near 2^-128 per pair.
pub fn fingerprint<T: Hash>(parts: &T) -> OccurrenceId {
    let half = |salt: u64| {
        let mut h = std::hash::DefaultHasher::new();
        salt.hash(&mut h);
        parts.hash(&mut h);
        h.finish()
    };
    (u128::from(half(0)) << 64) | u128::from(half(0x9e37_79b9_7f4a_7c15))
}

/// The identity of the `k`-th occurrence of a fault line (1-based):
/// `(domain, node, source, code, device, first time)` plus `k`.
pub fn line_occurrence(f: &Fault, k: u32) -> OccurrenceId {
    fingerprint(&(
        "line",
        f.domain().key().as_ref(),
        f.node.as_deref().unwrap_or(""),
        f.source,
        f.code.as_str(),
        f.device.as_deref().unwrap_or(""),
        f.first_seen.timestamp_millis(),
        k,
    ))
}

/// The identity of a container termination or a pod failure: the pod's
/// uid, the container, the code and the termination time.
pub fn pod_occurrence(f: &Fault) -> OccurrenceId {
    fingerprint(&(
        "pod",
        f.uid.as_deref().unwrap_or(""),
        f.namespace.as_deref().unwrap_or(""),
        f.pod.as_deref().unwrap_or(""),
        f.container.as_deref().unwrap_or(""),
        f.code.as_str(),
        f.last_seen.timestamp_millis(),
    ))
}

/// The identity of the `k`-th count of an Event without the agent's
/// occurrence time (kcover's annotation, a custom checker): its uid.
pub fn event_occurrence(uid: &str, k: u32) -> OccurrenceId {
    fingerprint(&("event", uid, k))
}

/// The identity of a hang: the job and when its clock started.
pub fn hang_occurrence(job: &str, since: DateTime<Utc>) -> OccurrenceId {
    fingerprint(&("hang", job, since.timestamp_millis()))
}

/// What became of an occurrence.
#[derive(Clone, Debug, PartialEq)]
pub enum Fate {
    /// Decided to wait: decided again at `until` (cooldown) or when the
    /// core is ready and leads.
    Pending { until: Option<DateTime<Utc>> },
    /// A recovery of generation `generation` was started for it.
    Acted { generation: u64 },
    /// A recovery already under way covers it (one recovery, not two).
    Absorbed,
    /// The job's history shows a restart after it (this process's or a
    /// previous leader's).
    Handled,
    /// Deliberately not acted on, for this reason (a `Skip` name).
    Skipped(&'static str),
}

/// One ledger line.
#[derive(Clone, Debug)]
pub struct Entry {
    /// The level it was decided at: a replay at the same level is
    /// dropped, an escalation (a repeat, a lasting fault) is decided again.
    pub level: Level,
    pub fate: Fate,
}

/// What the core knows of the occurrences it has seen, bounded: the
/// oldest lines go first, which at worst re-decides an old occurrence,
/// which the job's restart history then recognises.
#[derive(Debug, Default)]
pub struct Ledger {
    lines: HashMap<OccurrenceId, Entry>,
    order: VecDeque<OccurrenceId>,
    /// Occurrences counted into the classifier's history already.
    counted: HashMap<OccurrenceId, ()>,
    counted_order: VecDeque<OccurrenceId>,
}

impl Ledger {
    /// Most lines kept.
    pub const MAX: usize = 200_000;

    /// The line of an occurrence.
    pub fn get(&self, id: OccurrenceId) -> Option<&Entry> {
        self.lines.get(&id)
    }

    /// Whether `id` needs a decision at `level`: unknown, or known at a
    /// lower level (escalated), or pending.
    pub fn needs_decision(&self, id: OccurrenceId, level: Level) -> bool {
        match self.lines.get(&id) {
            None => true,
            Some(e) => level > e.level || matches!(e.fate, Fate::Pending { .. }),
        }
    }

    /// Record what became of `id`.
    pub fn set(&mut self, id: OccurrenceId, level: Level, fate: Fate) {
        if self.lines.insert(id, Entry { level, fate }).is_none() {
            self.order.push_back(id);
            if self.order.len() > Self::MAX
                && let Some(old) = self.order.pop_front()
            {
                self.lines.remove(&old);
            }
        }
    }

    /// Forget `id` (its carrier is gone and it was never acted on).
    /// A leadership ended: every occurrence it acted on or absorbed
    /// waits to be decided again by the next one (its recoveries are
    /// dropped); one whose carrier is gone for now is forgotten, so that
    /// it is decided afresh if it comes back (a tenant's Event deleted and
    /// listed again must not come back as acted on; the job's records say
    /// what was restarted).
    pub fn reopen_acted(&mut self, present: impl Fn(OccurrenceId) -> bool) {
        self.lines.retain(|id, e| {
            if !matches!(e.fate, Fate::Acted { .. } | Fate::Absorbed) {
                return true;
            }
            e.fate = Fate::Pending { until: None };
            present(*id)
        });
    }

    pub fn forget(&mut self, id: OccurrenceId) {
        self.lines.remove(&id);
    }

    /// Occurrences pending with a wake-up at or before `now`, and those
    /// pending without one (waiting for readiness or leadership).
    pub fn due(&self, now: DateTime<Utc>) -> Vec<OccurrenceId> {
        self.lines
            .iter()
            .filter(|(_, e)| match e.fate {
                Fate::Pending { until } => until.is_none_or(|u| u <= now),
                _ => false,
            })
            .map(|(id, _)| *id)
            .collect()
    }

    /// Whether `id` is counted into the escalation history already; marks
    /// it counted.
    pub fn count_once(&mut self, id: OccurrenceId) -> bool {
        if self.counted.insert(id, ()).is_some() {
            return false;
        }
        self.counted_order.push_back(id);
        if self.counted_order.len() > Self::MAX
            && let Some(old) = self.counted_order.pop_front()
        {
            self.counted.remove(&old);
        }
        true
    }

    /// Lines held (metrics, tests).
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Every line (property tests check the invariants over it).
    pub fn iter(&self) -> impl Iterator<Item = (&OccurrenceId, &Entry)> {
        self.lines.iter()
    }
}

/// Most occurrences one carrier line stands for at once: the newest
/// `MATERIALIZED` of its count. A line's count is a number anyone who can
/// write the carrier sets (a tenant's Event `count: 2147483647`, a flapping
/// GPU's `n=`); an occurrence is counted, not cloned per count, so memory,
/// decisions and ledger lines per carrier stay bounded whatever it says.
///
/// Why 32 is enough: a rewrite that grows a count by one names exactly one
/// new occurrence (k = the new count), which is always in the window; the
/// older counts have been counted and decided when they were new, and the
/// ledger keeps their fates. A rewrite that jumps by more than 32 at once
/// (a reporter that folded many repeats before writing, or a first sight
/// of a high count) stands for repeats the escalation history counts to
/// the second, and all its counts but the first share the instant they were
/// observed: they are one history entry however many are materialized. So
/// 32 is more than any escalation's `times` can tell apart in one write,
/// and small enough that 32 clones of a fault per carrier cost nothing.
pub const MATERIALIZED: u32 = 32;

/// The counts `k` of a line of `count` that are materialized: the newest
/// [`MATERIALIZED`] (1-based, so identities of counts within the window
/// never change as the count grows).
pub fn materialized(count: u32) -> std::ops::RangeInclusive<u32> {
    let count = count.max(1);
    count.saturating_sub(MATERIALIZED - 1).max(1)..=count
}

/// The occurrences a node fault line stands for: the newest
/// [`MATERIALIZED`] of its `count`, the first at its own time, later ones
/// at the reporter's time of its newest repeat where the line gives it
/// (`last=`, read into `f.last_seen`), else at `seen` (when the count that
/// includes them was first observed: a bound only, later for a reader
/// that is behind), each with its identity. `fault.count` of each is its
/// own `k`.
pub fn line_occurrences(f: &Fault, seen: DateTime<Utc>) -> Vec<(OccurrenceId, Fault)> {
    let repeat_at = if f.last_seen > f.first_seen {
        f.last_seen.min(seen.max(f.first_seen))
    } else {
        seen.max(f.first_seen)
    };
    materialized(f.count)
        .map(|k| {
            let mut g = f.clone();
            g.last_seen = if k > 1 { repeat_at } else { f.first_seen };
            g.count = k;
            (line_occurrence(f, k), g)
        })
        .collect()
}

/// Whether the fault's source sends a clear signal (its carrier goes back
/// to healthy): an Event never does.
pub fn clears(source: FaultSource, from_event: bool) -> bool {
    !from_event && !matches!(source, FaultSource::KubeEvent)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap_or_default()
    }

    fn xid(at: i64, n: u32) -> Fault {
        let mut f = Fault::new(FaultSource::NvidiaXid, "13", t(at));
        f.node = Some("gpu-1".into());
        f.device = Some("0".into());
        f.count = n;
        f
    }

    #[test]
    fn a_repeat_is_dated_by_the_reporter_where_it_says_when() {
        // Count 3, the newest repeat at 40, read at 90: the repeats are
        // dated 40 (the reporter's), not 90 (the reader's first sight),
        // and keep their identities.
        let mut f = xid(0, 3);
        f.last_seen = t(40);
        let read = line_occurrences(&f, t(90));
        let plain = line_occurrences(&xid(0, 3), t(90));
        let dates: Vec<_> = read.iter().map(|(_, g)| g.last_seen).collect();
        assert_eq!(dates, [t(0), t(40), t(40)]);
        let ids = |v: &[(OccurrenceId, Fault)]| v.iter().map(|(id, _)| *id).collect::<Vec<_>>();
        assert_eq!(ids(&read), ids(&plain), "the same occurrences");
        // Without it, the reader's first sight bounds them.
        assert_eq!(plain[2].1.last_seen, t(90));
        // A reporter's time after the reading (a clock ahead) is bounded
        // by the reading.
        f.last_seen = t(500);
        assert_eq!(line_occurrences(&f, t(90))[2].1.last_seen, t(90));
    }

    #[test]
    fn a_line_rewritten_keeps_its_occurrences_and_a_repeat_adds_one() {
        let first = line_occurrences(&xid(0, 1), t(5));
        // The same line written again later (a heartbeat, another GPU's
        // line changing): the same identities.
        let again = line_occurrences(&xid(0, 1), t(60));
        assert_eq!(first[0].0, again[0].0);
        // The agent folded a repeat: n=2 names one more occurrence.
        let repeated = line_occurrences(&xid(0, 2), t(90));
        assert_eq!(repeated.len(), 2);
        assert_eq!(repeated[0].0, first[0].0);
        assert_ne!(repeated[1].0, first[0].0);
        assert_eq!(repeated[1].1.last_seen, t(90));
        // The same code on another GPU is another occurrence.
        let mut other = xid(0, 1);
        other.device = Some("1".into());
        assert_ne!(line_occurrences(&other, t(5))[0].0, first[0].0);
    }

    #[test]
    fn a_tenants_copy_of_a_trusted_line_is_another_occurrence() {
        let mut real = xid(0, 1);
        real.trusted = true;
        let mut copy = real.clone();
        copy.trusted = false;
        copy.namespace = Some("evil".into());
        let mut other = copy.clone();
        other.namespace = Some("team-b".into());
        let ids: std::collections::HashSet<OccurrenceId> = [&real, &copy, &other]
            .iter()
            .map(|f| line_occurrence(f, 1))
            .collect();
        assert_eq!(ids.len(), 3);
        // The agent's Event in a trusted namespace names the condition's.
        let mut trusted_event = real.clone();
        trusted_event.namespace = Some("kube-system".into());
        assert_eq!(
            line_occurrence(&trusted_event, 1),
            line_occurrence(&real, 1)
        );
    }

    #[test]
    fn a_huge_count_materializes_a_bounded_window_of_occurrences() {
        // Before: one clone per count, 4 billion of them.
        let occs = line_occurrences(&xid(0, u32::MAX), t(5));
        assert_eq!(occs.len(), MATERIALIZED as usize);
        assert_eq!(occs.last().map(|o| o.1.count), Some(u32::MAX));
        assert_eq!(occs[0].1.count, u32::MAX - (MATERIALIZED - 1));
        // Identities within the window do not move as the count grows.
        let grown = line_occurrences(&xid(0, u32::MAX - 1), t(5));
        let ids = |o: &[(OccurrenceId, Fault)]| o.iter().map(|o| o.0).collect::<Vec<_>>();
        assert_eq!(ids(&grown[1..]), ids(&occs[..occs.len() - 1]));
        assert_eq!(materialized(0), 1..=1);
        assert_eq!(materialized(3), 1..=3);
        assert_eq!(materialized(MATERIALIZED + 1), 2..=MATERIALIZED + 1);
    }

    #[test]
    fn a_count_growing_one_by_one_past_the_window_adds_one_each_time() {
        let mut seen: std::collections::HashSet<OccurrenceId> = Default::default();
        for n in 1..=(MATERIALIZED * 3) {
            let occs = line_occurrences(&xid(0, n), t(i64::from(n)));
            let new: Vec<_> = occs.iter().filter(|o| seen.insert(o.0)).collect();
            assert_eq!(new.len(), 1, "n={n}");
            assert_eq!(new[0].1.count, n);
        }
    }

    #[test]
    fn the_ledger_drops_replays_and_decides_escalations_again() {
        let mut l = Ledger::default();
        let id = 7;
        assert!(l.needs_decision(id, Level::RestartJob));
        l.set(id, Level::RestartJob, Fate::Acted { generation: 1 });
        assert!(!l.needs_decision(id, Level::RestartJob), "replay");
        assert!(l.needs_decision(id, Level::ResetDevice), "escalated");
        l.set(id, Level::ResetDevice, Fate::Pending { until: Some(t(10)) });
        assert!(l.due(t(9)).is_empty());
        assert_eq!(l.due(t(10)), vec![id]);
        assert!(l.count_once(id));
        assert!(!l.count_once(id), "counted once");
    }
}
