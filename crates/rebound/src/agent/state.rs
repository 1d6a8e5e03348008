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
    /// When the newest repeat counted happened (the line's `last=`), so
    /// that a controller reading the line late dates that repeat by it.
    pub repeat_at: Option<SystemTime>,
    /// Clears only at reboot.
    pub sticky: bool,
    /// Event progress.
    pub event: EventState,
    /// Insertion order: ties of `first_seen` (a batch read at once, faults
    /// restored from a condition message) keep the order they came in.
    pub seq: u64,
    /// The pods holding the device when the fault was first reported (the
    /// kubelet's PodResources API, `pods=` on the line); `None`: not known.
    pub pods: Option<Vec<String>>,
    /// Whether `pods` was looked up (or restored): once per fault, so its
    /// line does not change after the controller read it.
    pub pods_resolved: bool,
}

impl Folded {
    /// The wire form with the occurrence's identity: when it was first
    /// seen and how often since.
    pub fn to_wire(&self, node: &str) -> crate::fault::wire::WireFault {
        let mut w = self.fault.to_wire(node);
        w.at = Some(crate::fault::wire::format_at(self.first_seen.into()));
        w.count = Some(self.count);
        w.pods = self.pods.clone().filter(|p| !p.is_empty());
        // A repeat's own time, for readers that see the count late.
        w.last = self
            .repeat_at
            .filter(|_| self.count > 1)
            .map(|t| crate::fault::wire::format_at(t.into()));
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
                e.repeat_at = Some(e.repeat_at.map_or(at, |r| r.max(at)));
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
                repeat_at: None,
                sticky,
                event: EventState::Pending,
                seq,
                pods: None,
                pods_resolved: false,
            },
        );
        Observed::New
    }

    /// Re-establish a fault listed in the Node condition written before a
    /// restart: active again for one quiet period, without a new Event,
    /// with the first sighting and count the condition carried (so that
    /// its occurrences keep their identity for the controller).
    #[allow(clippy::too_many_arguments)]
    pub fn restore(
        &mut self,
        fault: AgentFault,
        first_seen: SystemTime,
        count: u64,
        repeat_at: Option<SystemTime>,
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
                repeat_at: repeat_at.map(|t| t.min(now)),
                sticky,
                event: EventState::Restored,
                seq,
                pods: None,
                pods_resolved: true,
            },
        );
    }

    /// Set the pods of a restored fault (the `pods=` its line carried).
    pub fn restore_pods(&mut self, key: &FaultKey, pods: Option<Vec<String>>) {
        if let Some(e) = self.entries.get_mut(key)
            && e.event == EventState::Restored
        {
            e.pods = pods;
            e.pods_resolved = true;
        }
    }

    /// Devices of active GPU faults whose holders were not looked up yet
    /// (sorted, distinct).
    pub fn unresolved_gpu_devices(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .entries
            .values()
            .filter(|e| e.fault.family == Accelerator::Gpu && !e.pods_resolved)
            .filter_map(|e| e.fault.device.clone())
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Look up the holders of every GPU fault naming a device not looked up
    /// yet, with `holders(device)`; each fault is looked up once.
    pub fn resolve_pods(&mut self, mut holders: impl FnMut(&str) -> Option<Vec<String>>) {
        for e in self.entries.values_mut() {
            if e.fault.family != Accelerator::Gpu || e.pods_resolved {
                continue;
            }
            if let Some(d) = &e.fault.device {
                e.pods = holders(d);
                e.pods_resolved = true;
            }
        }
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
mod tests;
