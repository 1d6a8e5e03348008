//! Bounded per-(domain, node, device, code) history for frequency and
//! duration escalations.
//!
//! A line holds the fault's current *episode*: its repeats and the
//! earliest time it was seen since it last cleared. The caller ends an
//! episode when the fault clears ([`History::end_episode`]), so a node
//! NotReady for minutes yesterday does not make today's ten seconds
//! "lasting", and an old repeat does not escalate a new fault. The trust
//! domain is part of the key: a tenant's copy of a fault is a line of its
//! own and never ages or counts towards a trusted one.

use crate::fault::{Domain, Fault};
use chrono::{DateTime, Utc};
use std::collections::{HashMap, VecDeque};

/// Key of one history line: a code on one device of one node, in one
/// trust domain.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HistoryKey {
    pub domain: Domain,
    pub node: String,
    pub device: String,
    pub source: crate::fault::FaultSource,
    pub code: String,
}

impl HistoryKey {
    /// The line a fault is counted on.
    pub fn of(f: &Fault) -> HistoryKey {
        HistoryKey {
            domain: f.domain(),
            node: f.node.clone().unwrap_or_default(),
            device: f.device.clone().unwrap_or_default(),
            source: f.source,
            code: super::codes::normalize(&f.code, f.source),
        }
    }
}

#[derive(Debug, Default)]
struct Line {
    first_seen: Option<DateTime<Utc>>,
    times: VecDeque<DateTime<Utc>>,
    touched: u64,
}

/// Occurrences per key, bounded in keys, in keys per tenant and in times
/// per key, so that a flood of distinct faults cannot grow memory without
/// limit, and one tenant's flood cannot push out anyone else's lines.
#[derive(Debug)]
pub struct History {
    lines: HashMap<HistoryKey, Line>,
    /// Each tenant's keys, oldest first (its own cap evicts from here).
    tenants: HashMap<String, VecDeque<HistoryKey>>,
    max_keys: usize,
    max_times: usize,
    max_age: chrono::Duration,
    clock: u64,
}

/// Most history lines one tenant namespace holds: its oldest go first.
pub const MAX_KEYS_PER_TENANT: usize = 1024;

impl History {
    /// A history keeping at most `max_keys` lines of `max_times`
    /// occurrences, none older than `max_age`.
    pub fn new(max_keys: usize, max_times: usize, max_age: std::time::Duration) -> History {
        History {
            lines: HashMap::new(),
            tenants: HashMap::new(),
            max_keys,
            max_times,
            max_age: chrono::Duration::from_std(max_age).unwrap_or(chrono::Duration::days(7)),
            clock: 0,
        }
    }

    /// Record one occurrence at `at` (a replay of an occurrence already
    /// recorded at the same instant is not counted twice) and return the
    /// line's first-seen time.
    pub fn record(
        &mut self,
        key: &HistoryKey,
        at: DateTime<Utc>,
        first_seen: DateTime<Utc>,
    ) -> DateTime<Utc> {
        self.clock += 1;
        // A key already held (the common case) is not copied.
        if !self.lines.contains_key(key) {
            if let Domain::Tenant(ns) = &key.domain {
                let own = self.tenants.entry(ns.clone()).or_default();
                own.retain(|k| self.lines.contains_key(k));
                while own.len() >= MAX_KEYS_PER_TENANT {
                    if let Some(old) = own.pop_front() {
                        self.lines.remove(&old);
                    }
                }
                own.push_back(key.clone());
            }
            if self.lines.len() >= self.max_keys {
                self.evict();
            }
            self.lines.insert(key.clone(), Line::default());
        }
        let clock = self.clock;
        let max_times = self.max_times;
        let horizon = at - self.max_age;
        let Some(line) = self.lines.get_mut(key) else {
            return first_seen;
        };
        line.touched = clock;
        while line.times.front().is_some_and(|t| *t < horizon) {
            line.times.pop_front();
        }
        // Times are kept sorted: find the place by bisection.
        let pos = line.times.partition_point(|t| *t < at);
        if line.times.get(pos) != Some(&at) {
            line.times.insert(pos, at);
            if line.times.len() > max_times {
                line.times.pop_front();
            }
        }
        let first = match line.first_seen {
            Some(f) if f <= first_seen => f,
            _ => first_seen,
        };
        line.first_seen = Some(first);
        first
    }

    /// Occurrences of `key` in `(now - within, now]`.
    pub fn count_within(
        &self,
        key: &HistoryKey,
        now: DateTime<Utc>,
        within: chrono::Duration,
    ) -> u32 {
        self.lines.get(key).map_or(0, |l| {
            let from = now - within;
            let lo = l.times.partition_point(|t| *t <= from);
            let hi = l.times.partition_point(|t| *t <= now);
            hi.saturating_sub(lo) as u32
        })
    }

    /// The fault of `key` cleared: its episode ends, so a later fault
    /// starts a new one (its duration and repeats counted afresh).
    pub fn end_episode(&mut self, key: &HistoryKey) {
        self.lines.remove(key);
    }

    /// Lines held for one tenant namespace (metrics, tests).
    pub fn tenant_len(&self, ns: &str) -> usize {
        self.tenants.get(ns).map_or(0, |k| {
            k.iter().filter(|k| self.lines.contains_key(k)).count()
        })
    }

    /// Number of keys held (for metrics and tests).
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    fn evict(&mut self) {
        // Drop the least recently touched tenth in one pass.
        let n = (self.max_keys / 10).max(1);
        let mut ages: Vec<(u64, HistoryKey)> = self
            .lines
            .iter()
            .map(|(k, l)| (l.touched, k.clone()))
            .collect();
        ages.sort_unstable_by_key(|(t, _)| *t);
        for (_, k) in ages.into_iter().take(n) {
            self.lines.remove(&k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::FaultSource;
    use chrono::TimeZone;

    fn key(dev: &str) -> HistoryKey {
        HistoryKey {
            domain: Domain::Trusted,
            node: "n".into(),
            device: dev.into(),
            source: FaultSource::NvidiaXid,
            code: "13".into(),
        }
    }

    #[test]
    fn replays_do_not_count_twice_and_keys_are_bounded() {
        let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let mut h = History::new(10, 8, std::time::Duration::from_secs(86400 * 7));
        h.record(&key("0"), t0, t0);
        h.record(&key("0"), t0, t0);
        assert_eq!(h.count_within(&key("0"), t0, chrono::Duration::hours(1)), 1);
        for i in 0..50 {
            h.record(&key(&i.to_string()), t0, t0);
        }
        assert!(h.len() <= 10);
    }

    #[test]
    fn one_tenant_holds_at_most_its_share_and_pushes_out_nobody_else() {
        let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let mut h = History::new(100_000, 8, std::time::Duration::from_secs(86400 * 7));
        h.record(&key("0"), t0, t0);
        for i in 0..(MAX_KEYS_PER_TENANT * 3) {
            let mut k = key(&i.to_string());
            k.domain = Domain::Tenant("evil".into());
            h.record(&k, t0, t0);
        }
        assert_eq!(h.tenant_len("evil"), MAX_KEYS_PER_TENANT);
        assert_eq!(h.len(), MAX_KEYS_PER_TENANT + 1);
        assert_eq!(h.count_within(&key("0"), t0, chrono::Duration::hours(1)), 1);
    }

    #[test]
    fn an_episode_ended_starts_afresh() {
        let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let mut h = History::new(10, 8, std::time::Duration::from_secs(86400 * 7));
        assert_eq!(h.record(&key("0"), t0, t0), t0);
        let later = t0 + chrono::Duration::hours(2);
        assert_eq!(h.record(&key("0"), later, later), t0, "one episode");
        h.end_episode(&key("0"));
        assert_eq!(h.record(&key("0"), later, later), later, "a new episode");
        assert_eq!(
            h.count_within(&key("0"), later, chrono::Duration::days(1)),
            1
        );
    }

    #[test]
    fn windows_are_open_below_closed_above_and_order_free() {
        let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let m = |n: i64| t0 + chrono::Duration::minutes(n);
        let mut h = History::new(10, 8, std::time::Duration::from_secs(86400 * 7));
        // Recorded out of order, with one replay.
        for n in [5, 1, 3, 3, 10] {
            h.record(&key("0"), m(n), m(n));
        }
        let k = key("0");
        assert_eq!(h.count_within(&k, m(10), chrono::Duration::minutes(100)), 4);
        // (m(5), m(10)]: 10 only; m(5) itself is outside.
        assert_eq!(h.count_within(&k, m(10), chrono::Duration::minutes(5)), 1);
        // (m(0), m(5)]: 1, 3, 5; 10 is after `now`.
        assert_eq!(h.count_within(&k, m(5), chrono::Duration::minutes(5)), 3);
        assert_eq!(
            h.count_within(&key("1"), m(5), chrono::Duration::minutes(5)),
            0
        );
    }
}
