//! Fold and quiet period: the agent's memory of active faults.
//!
//! Pure (time is passed in), bounded (at most `max_entries` faults), and the
//! only place that decides whether a Node condition is `True`: a device is
//! faulty from its first fault until it has been quiet (no fault seen) for
//! the quiet period, except for sticky codes (a GPU that fell off the bus
//! does not come back by itself), which last until the node reboots.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use super::fault::{Accelerator, AgentFault};
use crate::fault::wire::format_condition_message;

/// Most faults listed in one condition message (the rest stay active and
/// counted, but are not listed), to bound the Node object's size.
pub const MAX_FAULTS_IN_MESSAGE: usize = 32;

/// Identity of a fault for folding.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FaultKey {
    /// Condition family.
    pub family: Accelerator,
    /// Source name.
    pub source: &'static str,
    /// Code.
    pub code: String,
    /// Device, if known.
    pub device: Option<String>,
}

impl FaultKey {
    /// The key of a fault.
    pub fn of(f: &AgentFault) -> Self {
        FaultKey {
            family: f.family,
            source: f.source,
            code: f.code.clone(),
            device: f.device.clone(),
        }
    }
}

/// Where the Event of a folded fault stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventState {
    /// No Event written yet.
    Pending,
    /// Event `name` written, carrying `count` occurrences, at `at`.
    Published {
        /// Event object name.
        name: String,
        /// Occurrences the Event shows.
        count: u64,
        /// When it was last written.
        at: SystemTime,
    },
    /// Restored from the Node condition after a restart: no new Event.
    Restored,
}

/// One active fault with its fold count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Folded {
    /// The latest observation (message of the last one).
    pub fault: AgentFault,
    /// First time seen.
    pub first_seen: SystemTime,
    /// Last time seen.
    pub last_seen: SystemTime,
    /// Times seen while active.
    pub count: u64,
    /// Clears only at reboot.
    pub sticky: bool,
    /// Event progress.
    pub event: EventState,
    /// Insertion order: ties of `first_seen` (a batch read at once, faults
    /// restored from a condition message) keep the order they came in.
    pub seq: u64,
}

impl Folded {
    /// The wire form with the occurrence's identity: when it was first
    /// seen and how often since.
    pub fn to_wire(&self, node: &str) -> crate::fault::wire::WireFault {
        let mut w = self.fault.to_wire(node);
        w.at = Some(crate::fault::wire::format_at(self.first_seen.into()));
        w.count = Some(self.count);
        w
    }
}

/// What an observation did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observed {
    /// A fault not active before: a new Event, maybe a condition change.
    New,
    /// A repeat of an active fault: folded into its count.
    Repeat {
        /// The count now.
        count: u64,
    },
    /// Older than the quiet period (e.g. read back from the kernel log at
    /// start-up): ignored.
    Stale,
}

/// Fold settings.
#[derive(Clone, Debug)]
pub struct FoldConfig {
    /// A device is healthy again after this long without a fault.
    pub quiet_period: Duration,
    /// Bound on active faults kept; the oldest is forgotten beyond it.
    pub max_entries: usize,
    /// `(source, code)` pairs that never clear by quiet period.
    pub sticky: Vec<(String, String)>,
}

impl Default for FoldConfig {
    fn default() -> Self {
        FoldConfig {
            quiet_period: Duration::from_secs(600),
            max_entries: 256,
            sticky: vec![("NvidiaXid".into(), "79".into())],
        }
    }
}

/// The desired state of one Node condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredCondition {
    /// `GpuFault` / `NpuFault`.
    pub type_: &'static str,
    /// `true` = faulty.
    pub status: bool,
    /// CamelCase reason carrying the code when there is one kind of fault.
    pub reason: String,
    /// [`format_condition_message`] of the active faults; empty when healthy.
    pub message: String,
}

/// An Event the reporter should write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventDue {
    /// First Event of a fault.
    Create {
        /// The fault.
        key: FaultKey,
        /// Its latest observation.
        fault: AgentFault,
        /// Occurrences so far.
        count: u64,
        /// When it was first seen (the occurrence's identity).
        first_seen: SystemTime,
    },
    /// Repeats since the last write: update the Event's series count.
    Series {
        /// The fault.
        key: FaultKey,
        /// Event object name.
        name: String,
        /// Occurrences so far.
        count: u64,
    },
}

/// Active faults of this node.
#[derive(Debug, Default)]
pub struct FoldState {
    cfg: FoldConfig,
    entries: HashMap<FaultKey, Folded>,
    next_seq: u64,
    /// Faults forgotten because `max_entries` was reached.
    pub evicted: u64,
}

impl FoldState {
    /// Empty state.
    pub fn new(cfg: FoldConfig) -> Self {
        FoldState {
            cfg,
            entries: HashMap::new(),
            next_seq: 0,
            evicted: 0,
        }
    }

    /// The settings.
    pub fn config(&self) -> &FoldConfig {
        &self.cfg
    }

    fn is_sticky(&self, f: &AgentFault) -> bool {
        self.cfg
            .sticky
            .iter()
            .any(|(s, c)| s == f.source && *c == f.code)
    }

    /// Record a fault observed at `at` (its own time, e.g. from the kernel
    /// record) when the clock says `now`.
    pub fn observe(&mut self, fault: AgentFault, at: SystemTime, now: SystemTime) -> Observed {
        self.observe_as(fault, at, now, true)
    }

    /// [`Self::observe`], saying whether `at` is the record's own time
    /// (`timed`): then a record no later than the last one seen is the same
    /// record read again (a restart rereads the kernel log) and does not
    /// count; without it, a repeat of a fault restored from our condition
    /// does not count either.
    pub fn observe_as(
        &mut self,
        fault: AgentFault,
        at: SystemTime,
        now: SystemTime,
        timed: bool,
    ) -> Observed {
        let sticky = self.is_sticky(&fault);
        let at = at.min(now);
        if !sticky && at + self.cfg.quiet_period <= now {
            return Observed::Stale;
        }
        let key = FaultKey::of(&fault);
        if let Some(e) = self.entries.get_mut(&key) {
            // The same record read again (a restart rereads the kernel
            // log) or a polled state seen again is not a repeat: only a
            // later event counts, since the count names occurrences.
            // Without the record's own time, a fault restored from our
            // condition cannot tell a repeat from the record read again.
            let new = if timed {
                at > e.last_seen
            } else {
                e.event != EventState::Restored
            };
            if new && fault.counts_repeats() {
                // Capped where every reader clamps it anyway.
                e.count = (e.count + 1).min(u64::from(crate::fault::wire::MAX_COUNT));
            }
            e.last_seen = e.last_seen.max(at);
            e.fault = fault;
            return Observed::Repeat { count: e.count };
        }
        self.make_room();
        let seq = self.bump();
        self.entries.insert(
            key,
            Folded {
                fault,
                first_seen: at,
                last_seen: at,
                count: 1,
                sticky,
                event: EventState::Pending,
                seq,
            },
        );
        Observed::New
    }

    /// Re-establish a fault listed in the Node condition written before a
    /// restart: active again for one quiet period, without a new Event,
    /// with the first sighting and count the condition carried (so that
    /// its occurrences keep their identity for the controller).
    pub fn restore(
        &mut self,
        fault: AgentFault,
        first_seen: SystemTime,
        count: u64,
        last_written: Option<SystemTime>,
        now: SystemTime,
    ) {
        let key = FaultKey::of(&fault);
        if self.entries.contains_key(&key) {
            return;
        }
        let sticky = self.is_sticky(&fault);
        self.make_room();
        let seq = self.bump();
        self.entries.insert(
            key,
            Folded {
                fault,
                first_seen: first_seen.min(now),
                // Records up to our last write are in the count already.
                last_seen: last_written
                    .unwrap_or(now)
                    .min(now)
                    .max(first_seen.min(now)),
                count: u64::from(crate::fault::wire::clamp_count(count)),
                sticky,
                event: EventState::Restored,
                seq,
            },
        );
    }

    fn bump(&mut self) -> u64 {
        self.next_seq = self.next_seq.wrapping_add(1);
        self.next_seq
    }

    fn make_room(&mut self) {
        while self.entries.len() >= self.cfg.max_entries.max(1) {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(k, e)| (e.sticky, e.last_seen, (*k).clone()))
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => {
                    self.entries.remove(&k);
                    self.evicted += 1;
                }
                None => break,
            }
        }
    }

    /// Forget the faults of every device that has been quiet for the quiet
    /// period (a device's faults clear together); returns them.
    pub fn expire(&mut self, now: SystemTime) -> Vec<Folded> {
        let mut device_last: HashMap<(Accelerator, Option<String>), SystemTime> = HashMap::new();
        for (k, e) in &self.entries {
            let slot = device_last
                .entry((k.family, k.device.clone()))
                .or_insert(e.last_seen);
            *slot = (*slot).max(e.last_seen);
        }
        let quiet = self.cfg.quiet_period;
        let gone: Vec<FaultKey> = self
            .entries
            .iter()
            .filter(|(k, e)| {
                !e.sticky
                    && device_last
                        .get(&(k.family, k.device.clone()))
                        .is_some_and(|last| *last + quiet <= now)
            })
            .map(|(k, _)| k.clone())
            .collect();
        let mut out: Vec<Folded> = gone
            .into_iter()
            .filter_map(|k| self.entries.remove(&k))
            .collect();
        out.sort_by(|a, b| FaultKey::of(&a.fault).cmp(&FaultKey::of(&b.fault)));
        out
    }

    /// When the next device becomes quiet (to schedule the next expiry).
    pub fn next_expiry(&self) -> Option<SystemTime> {
        self.entries
            .values()
            .filter(|e| !e.sticky)
            .map(|e| e.last_seen + self.cfg.quiet_period)
            .min()
    }

    /// Active faults of a family, oldest first.
    pub fn active(&self, family: Accelerator) -> Vec<&Folded> {
        let mut v: Vec<&Folded> = self
            .entries
            .values()
            .filter(|e| e.fault.family == family)
            .collect();
        v.sort_by_key(|e| (e.first_seen, e.seq));
        v
    }

    /// Number of active faults.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no fault is active.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The condition this state asks for.
    pub fn condition(&self, family: Accelerator, node: &str) -> DesiredCondition {
        let active = self.active(family);
        let type_ = family.condition_type();
        if active.is_empty() {
            return DesiredCondition {
                type_,
                status: false,
                reason: match family {
                    Accelerator::Gpu => "GpuHealthy",
                    Accelerator::Npu => "NpuHealthy",
                }
                .to_string(),
                message: String::new(),
            };
        }
        let wire: Vec<_> = active
            .iter()
            .take(MAX_FAULTS_IN_MESSAGE)
            .map(|e| e.to_wire(node))
            .collect();
        let first = &active[0].fault;
        let reason = if active.iter().all(|e| e.fault.reason == first.reason) {
            let same_code = active.iter().all(|e| e.fault.code == first.code);
            if same_code
                && !first.code.is_empty()
                && first.code.bytes().all(|b| b.is_ascii_alphanumeric())
            {
                format!("{}{}", first.reason, first.code)
            } else {
                first.reason.to_string()
            }
        } else {
            "MultipleFaults".to_string()
        };
        DesiredCondition {
            type_,
            status: true,
            reason,
            message: format_condition_message(&wire),
        }
    }

    /// Events to write now: a create for each new fault, and a series update
    /// for faults repeated since their Event was written at least
    /// `fold_interval` ago (so a storm of one fault is one Event, updated at
    /// most once per interval).
    pub fn events_due(&self, now: SystemTime, fold_interval: Duration) -> Vec<EventDue> {
        let mut due: Vec<EventDue> = self
            .entries
            .iter()
            .filter_map(|(k, e)| match &e.event {
                EventState::Pending => Some(EventDue::Create {
                    key: k.clone(),
                    fault: e.fault.clone(),
                    count: e.count,
                    first_seen: e.first_seen,
                }),
                EventState::Published { name, count, at }
                    if e.count > *count && *at + fold_interval <= now =>
                {
                    Some(EventDue::Series {
                        key: k.clone(),
                        name: name.clone(),
                        count: e.count,
                    })
                }
                _ => None,
            })
            .collect();
        due.sort_by(|a, b| due_key(a).cmp(due_key(b)));
        due
    }

    /// Record that an Event was written.
    pub fn mark_event(&mut self, key: &FaultKey, name: String, count: u64, at: SystemTime) {
        if let Some(e) = self.entries.get_mut(key) {
            e.event = EventState::Published { name, count, at };
        }
    }
}

fn due_key(d: &EventDue) -> &FaultKey {
    match d {
        EventDue::Create { key, .. } | EventDue::Series { key, .. } => key,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::fault::{SOURCE_ASCEND_NPU, SOURCE_NVIDIA_XID};

    fn xid(code: &str, dev: &str) -> AgentFault {
        AgentFault {
            family: Accelerator::Gpu,
            source: SOURCE_NVIDIA_XID,
            code: code.into(),
            device: Some(dev.into()),
            reason: "GpuXid",
            message: format!("Xid {code}"),
        }
    }

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn state(quiet: u64) -> FoldState {
        FoldState::new(FoldConfig {
            quiet_period: Duration::from_secs(quiet),
            ..FoldConfig::default()
        })
    }

    #[test]
    fn a_record_read_again_is_not_a_repeat_and_a_polled_state_never_is() {
        let mut s = state(600);
        assert_eq!(
            s.observe_as(xid("13", "0"), t(10), t(10), true),
            Observed::New
        );
        // A restart rereads the kernel log: the same record, same time.
        s.observe_as(xid("13", "0"), t(10), t(20), true);
        assert_eq!(s.active(Accelerator::Gpu)[0].count, 1);
        // A later record is a repeat.
        s.observe_as(xid("13", "0"), t(30), t(30), true);
        assert_eq!(s.active(Accelerator::Gpu)[0].count, 2);
        // A fault restored from our condition, seen again without a
        // record time (a file read again): the count stays.
        let mut r = state(600);
        r.restore(xid("13", "0"), t(0), 2, Some(t(5)), t(10));
        r.observe_as(xid("13", "0"), t(11), t(11), false);
        assert_eq!(r.active(Accelerator::Gpu)[0].count, 2);
        // A polled health state seen on every poll is one occurrence.
        let mut p = state(600);
        let mut health = xid("dcgm-health-pcie", "0");
        health.reason = "DcgmHealthFailure";
        p.observe_as(health.clone(), t(0), t(0), false);
        p.observe_as(health.clone(), t(60), t(60), false);
        p.observe_as(health, t(120), t(120), true);
        assert_eq!(p.active(Accelerator::Gpu)[0].count, 1);
    }

    #[test]
    fn repeats_fold_into_one_fault() {
        let mut s = state(600);
        assert_eq!(s.observe(xid("13", "0"), t(0), t(0)), Observed::New);
        assert_eq!(
            s.observe(xid("13", "0"), t(1), t(1)),
            Observed::Repeat { count: 2 }
        );
        assert_eq!(s.observe(xid("13", "1"), t(2), t(2)), Observed::New);
        assert_eq!(s.len(), 2);
        let c = s.condition(Accelerator::Gpu, "n");
        assert!(c.status);
        assert_eq!(c.reason, "GpuXid13");
        // Each line names its occurrence: first seen, and the count of the
        // repeats folded into it.
        let at = |s: u64| crate::fault::wire::format_at(t(s).into());
        assert_eq!(
            c.message,
            format!(
                "source=NvidiaXid code=13 device=0 at={} n=2 | Xid 13\nsource=NvidiaXid code=13 device=1 at={} n=1 | Xid 13",
                at(0),
                at(2)
            )
        );
        assert!(!s.condition(Accelerator::Npu, "n").status);
    }

    #[test]
    fn quiet_period_clears_per_device() {
        let mut s = state(600);
        s.observe(xid("13", "0"), t(0), t(0));
        s.observe(xid("31", "0"), t(300), t(300));
        s.observe(xid("48", "1"), t(100), t(100));
        assert!(s.expire(t(699)).is_empty());
        let gone = s.expire(t(700));
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].fault.code, "48");
        // Device 0 was seen at 300: both its faults clear together at 900.
        assert!(s.expire(t(899)).is_empty());
        assert_eq!(s.expire(t(900)).len(), 2);
        let c = s.condition(Accelerator::Gpu, "n");
        assert_eq!(
            (c.status, c.reason.as_str(), c.message.as_str()),
            (false, "GpuHealthy", "")
        );
    }

    #[test]
    fn sticky_codes_never_expire_and_are_never_stale() {
        let mut s = state(60);
        assert_eq!(s.observe(xid("79", "2"), t(0), t(10_000)), Observed::New);
        assert_eq!(s.observe(xid("13", "2"), t(0), t(10_000)), Observed::Stale);
        assert!(s.expire(t(1_000_000)).is_empty());
        assert_eq!(s.condition(Accelerator::Gpu, "n").reason, "GpuXid79");
        assert_eq!(s.next_expiry(), None);
    }

    #[test]
    fn mixed_reasons_and_codes() {
        let mut s = state(600);
        s.observe(xid("13", "0"), t(0), t(0));
        s.observe(xid("31", "0"), t(1), t(1));
        assert_eq!(s.condition(Accelerator::Gpu, "n").reason, "GpuXid");
        let mut sx = xid("20034", "nvswitch0");
        sx.reason = "NvSwitchSXid";
        s.observe(sx, t(2), t(2));
        assert_eq!(s.condition(Accelerator::Gpu, "n").reason, "MultipleFaults");
        let npu = AgentFault {
            family: Accelerator::Npu,
            source: SOURCE_ASCEND_NPU,
            code: "A4025021".into(),
            device: Some("0".into()),
            reason: "NpuFault",
            message: String::new(),
        };
        s.observe(npu, t(3), t(3));
        let c = s.condition(Accelerator::Npu, "n");
        assert_eq!(
            (c.type_, c.reason.as_str()),
            ("NpuFault", "NpuFaultA4025021")
        );
    }

    #[test]
    fn state_is_bounded() {
        let mut s = FoldState::new(FoldConfig {
            max_entries: 4,
            ..FoldConfig::default()
        });
        for i in 0..100u64 {
            s.observe(xid(&i.to_string(), "0"), t(i), t(i));
        }
        assert_eq!(s.len(), 4);
        assert_eq!(s.evicted, 96);
        let codes: Vec<_> = s
            .active(Accelerator::Gpu)
            .iter()
            .map(|e| e.fault.code.clone())
            .collect();
        // The sticky fell-off-the-bus fault is the last one forgotten.
        assert_eq!(codes, ["79", "97", "98", "99"]);
    }

    #[test]
    fn events_are_created_once_and_series_updated_per_interval() {
        let mut s = state(600);
        let fold = Duration::from_secs(60);
        s.observe(xid("13", "0"), t(0), t(0));
        let due = s.events_due(t(0), fold);
        let key = match &due[..] {
            [EventDue::Create { key, count: 1, .. }] => key.clone(),
            other => panic!("{other:?}"),
        };
        s.mark_event(&key, "ev-1".into(), 1, t(0));
        assert!(s.events_due(t(0), fold).is_empty());
        for i in 1..50 {
            s.observe(xid("13", "0"), t(i), t(i));
        }
        assert!(
            s.events_due(t(59), fold).is_empty(),
            "folded within the interval"
        );
        assert_eq!(
            s.events_due(t(60), fold),
            vec![EventDue::Series {
                key: key.clone(),
                name: "ev-1".into(),
                count: 50
            }]
        );
        s.mark_event(&key, "ev-1".into(), 50, t(60));
        assert!(s.events_due(t(500), fold).is_empty(), "no repeat, no write");
    }

    #[test]
    fn same_time_faults_keep_their_arrival_order() {
        let mut s = state(600);
        s.restore(xid("79", "3"), t(0), 1, None, t(0));
        s.restore(xid("20034", "nvswitch1"), t(0), 1, None, t(0));
        let codes: Vec<_> = s
            .active(Accelerator::Gpu)
            .iter()
            .map(|e| e.fault.code.clone())
            .collect();
        assert_eq!(codes, ["79", "20034"]);
    }

    #[test]
    fn restored_faults_make_no_event_and_clear_after_quiet() {
        let mut s = state(600);
        s.restore(xid("13", "0"), t(0), 1, None, t(0));
        assert!(s.events_due(t(0), Duration::from_secs(60)).is_empty());
        assert!(s.condition(Accelerator::Gpu, "n").status);
        assert_eq!(s.expire(t(600)).len(), 1);
    }
}
