//! The take-over's fresh read of the jobs' restart records. A new term
//! must know every restart an earlier term made before it decides one
//! (design §8: a new leader never repeats a restart that the old leader
//! made), and its watches may still be behind what the old leader wrote.
//! So a new term reads the records of every job kind afresh (a consistent
//! list, [`EffectKind::ReadRecords`]); a decision that would restart jobs
//! of a kind waits until that kind's read is in. Records are facts: what
//! the read shows is added to what the watch shows (by each record's
//! decision time), never taken away by an older watch event.
//!
//! The nodes are read afresh too ([`EffectKind::ReadNodes`]): the
//! breaker's window is in the nodes' `separated-at` annotations, and a
//! new leader whose nodes watch is behind the old leader's cordons would
//! otherwise let more nodes be cordoned than the breaker allows. Cordons
//! wait for that read, and so do restarts (a job restarted before its
//! faulty node is cordoned could land on it again).
//!
//! A kind whose list keeps failing does not hold the others, and holds
//! its own jobs at most [`FRESH_BOUND`]: then its decisions go on from the
//! watch's view, with a warning and the metric
//! `rebound_decisions_total{action="take_over_read", outcome="timeout"}`;
//! the nodes' read likewise.

use super::effect::EffectKind;
use super::occurrence::OccurrenceId;
use super::store::JobKey;
use super::{Core, Now};
use crate::api::WorkloadKind;
use crate::controller::core::hashing::HashMap;
use crate::policy::RestartRecord;
use chrono::{DateTime, Utc};
use kube::discovery::ApiResource;
use std::collections::BTreeSet;
use std::time::Duration;

/// Longest a kind's decisions wait for its fresh read at a take-over.
pub const FRESH_BOUND: Duration = Duration::from_secs(30);
/// How often a read that has not answered is asked again.
pub const ASK_AGAIN: Duration = Duration::from_secs(5);

/// Where the fresh read of the current term stands.
#[derive(Debug, Default)]
pub struct FreshRead {
    /// The term it is for.
    term: u64,
    /// When it was first asked, and last asked.
    started: Option<DateTime<Utc>>,
    asked: Option<DateTime<Utc>>,
    /// Kinds read (or given up on) in this term.
    done: BTreeSet<WorkloadKind>,
    /// Records the reads showed, by job.
    pub records: HashMap<JobKey, Vec<RestartRecord>>,
    /// Whether the nodes were read (or given up on) in this term.
    nodes_done: bool,
    /// Each node's last separation as the nodes' read showed it.
    pub separated: HashMap<String, DateTime<Utc>>,
    /// The installed kinds' resources (from discovery).
    pub resources: Vec<(WorkloadKind, ApiResource)>,
}

impl FreshRead {
    /// Whether decisions on jobs of `kind` may go on in `term`.
    pub fn ready_for(&self, term: u64, kind: WorkloadKind, now: DateTime<Utc>) -> bool {
        if self.term != term {
            return false;
        }
        self.done.contains(&kind) || self.timed_out(now)
    }

    /// Whether node actions (and the restarts that wait for them) may go
    /// on in `term`: the nodes' read is in, or given up on.
    pub fn nodes_ready(&self, term: u64, now: DateTime<Utc>) -> bool {
        self.term == term && (self.nodes_done || self.timed_out(now))
    }

    fn timed_out(&self, now: DateTime<Utc>) -> bool {
        let bound = chrono::Duration::from_std(FRESH_BOUND).unwrap_or_default();
        self.started.is_some_and(|s| now - s >= bound)
    }
}

impl Core {
    /// A take-over: read the records afresh if this term has not.
    pub(super) fn start_fresh_read(&mut self, now: Now) {
        if self.fresh.term == self.term && self.fresh.started.is_some() {
            return;
        }
        self.fresh.term = self.term;
        self.fresh.started = Some(now.wall);
        self.fresh.done.clear();
        self.fresh.records.clear();
        self.fresh.nodes_done = false;
        self.fresh.separated.clear();
        // Bare pods keep no records.
        self.fresh.done.insert(WorkloadKind::Pod);
        self.ask_records(now);
    }

    /// Kinds discovered during this term's take-over are read as well.
    pub(super) fn read_new_kinds(&mut self, now: Now) {
        if self.leading && self.fresh.term == self.term && self.fresh.started.is_some() {
            self.ask_records(now);
        }
    }

    fn ask_records(&mut self, now: Now) {
        let kinds: Vec<(WorkloadKind, ApiResource)> = self
            .fresh
            .resources
            .iter()
            .filter(|(k, _)| !self.fresh.done.contains(k))
            .cloned()
            .collect();
        self.fresh.asked = Some(now.wall);
        let term = self.term;
        if !self.fresh.nodes_done {
            self.effect(EffectKind::ReadNodes { term }, None);
        }
        if kinds.is_empty() {
            return;
        }
        self.effect(EffectKind::ReadRecords { term, kinds }, None);
    }

    /// On a tick: ask again for the kinds not read yet; give up waiting
    /// for them past [`FRESH_BOUND`] (their decisions go on).
    pub(super) fn fresh_tick(&mut self, now: Now) {
        if !self.acting() || self.fresh.term != self.term {
            return;
        }
        let missing: Vec<WorkloadKind> = self
            .fresh
            .resources
            .iter()
            .map(|(k, _)| *k)
            .filter(|k| !self.fresh.done.contains(k))
            .collect();
        if missing.is_empty() && self.fresh.nodes_done {
            return;
        }
        if self.fresh.timed_out(now.wall) {
            for k in missing {
                tracing::warn!(kind = %k.as_str(), "the take-over could not read this kind's restart records afresh; deciding from the watch's view");
                self.metrics.decision("take_over_read", "timeout");
                self.fresh.done.insert(k);
            }
            if !self.fresh.nodes_done {
                tracing::warn!(
                    "the take-over could not read the nodes afresh; the breaker counts from the nodes' watch"
                );
                self.metrics.decision("take_over_read", "timeout");
                self.fresh.nodes_done = true;
                self.dirty_nodes.extend(self.store.nodes.keys().cloned());
            }
            self.decide_waiting(now);
            return;
        }
        let again = chrono::Duration::from_std(ASK_AGAIN).unwrap_or_default();
        if self.fresh.asked.is_none_or(|a| now.wall - a >= again) {
            self.ask_records(now);
        }
    }

    /// The records of one kind, read afresh.
    pub(super) fn on_records(
        &mut self,
        term: u64,
        kind: WorkloadKind,
        jobs: Vec<kube::api::ObjectMeta>,
        now: Now,
    ) {
        if term != self.term || self.fresh.term != term {
            return;
        }
        for meta in jobs {
            let (Some(ns), Some(name)) = (meta.namespace.clone(), meta.name.clone()) else {
                continue;
            };
            let annotations = meta.annotations.unwrap_or_default();
            let history = crate::recover::read_history(&annotations);
            if history.is_empty() {
                continue;
            }
            let key: JobKey = (ns, kind.as_str().to_string(), name);
            self.fresh.records.insert(key, history);
        }
        if self.fresh.done.insert(kind) {
            self.metrics.decision("take_over_read", "read");
            self.decide_waiting(now);
        }
    }

    /// The nodes read afresh: their last separations count for the
    /// breaker, and the nodes whose cordon waited for the read are
    /// reconciled.
    pub(super) fn on_nodes(&mut self, term: u64, nodes: Vec<kube::api::ObjectMeta>, now: Now) {
        if term != self.term || self.fresh.term != term || self.fresh.nodes_done {
            return;
        }
        for meta in nodes {
            let Some(name) = meta.name else { continue };
            let at = meta
                .annotations
                .as_ref()
                .and_then(crate::recover::separated_at);
            if let Some(t) = at {
                self.fresh.separated.insert(name, t);
            }
        }
        self.fresh.nodes_done = true;
        self.metrics.decision("take_over_read", "read");
        self.dirty_nodes.extend(self.store.nodes.keys().cloned());
        self.decide_waiting(now);
    }

    /// Decide what waited for the read (the occurrences not decided yet,
    /// or held): a tenant's thousands of decided occurrences are not
    /// classified again (a lasting trusted fault is the rescan's).
    pub(super) fn decide_waiting(&mut self, now: Now) {
        if !self.acting() {
            return;
        }
        let ledger = &self.ledger;
        let ids: Vec<OccurrenceId> = self
            .current
            .keys()
            .filter(|id| {
                ledger
                    .get(**id)
                    .is_none_or(|e| matches!(e.fate, super::occurrence::Fate::Pending { .. }))
            })
            .copied()
            .collect();
        for id in ids {
            self.decide_current(id, now);
        }
    }

    /// Whether decisions on jobs of `kind` wait for the take-over's read.
    pub(super) fn waits_for_records(&self, kind: WorkloadKind, now: Now) -> bool {
        !self.fresh.ready_for(self.term, kind, now.wall) || self.waits_for_nodes(now)
    }

    /// Whether node actions wait for the take-over's read of the nodes.
    pub(super) fn waits_for_nodes(&self, now: Now) -> bool {
        !self.fresh.nodes_ready(self.term, now.wall)
    }
}
