//! The periodic tick (lost outcomes, timers, status flushes) and the
//! reconciliation of what the step marked dirty; apart from the step
//! loop that calls them.

use super::effect::{EffectId, Outcome};
use super::store::JobKey;
use super::{Core, Now, OUTCOME_TIMEOUT};
use chrono::{DateTime, Utc};
use std::time::Duration;

impl Core {
    pub(super) fn on_tick(&mut self, now: Now) {
        let timeout = chrono::Duration::from_std(OUTCOME_TIMEOUT).unwrap_or_default();
        let lost: Vec<EffectId> = self
            .inflight
            .iter()
            .filter(|(_, (_, sent))| now.wall - *sent > timeout)
            .map(|(id, _)| *id)
            .collect();
        for id in lost {
            self.on_done(
                id,
                Outcome::Failed(format!("no outcome within {OUTCOME_TIMEOUT:?}")),
                now,
            );
        }
        self.skip_notices.prune(now.wall);
        // Occurrences held for a cooldown whose time has come.
        if self.acting() {
            for id in self.ledger.due(now.wall) {
                self.decide_current(id, now);
            }
        }
        let every = |last: &mut Option<DateTime<Utc>>, d: Duration| {
            let due = last.is_none_or(|l| (now.wall - l).to_std().unwrap_or(Duration::ZERO) >= d);
            if due {
                *last = Some(now.wall);
            }
            due
        };
        if every(&mut self.last_scan, Duration::from_secs(5)) {
            // Lasting faults escalate with time, the breaker's window moves
            // on: nodes with faults or held separations are looked at again.
            let faulty: Vec<String> = self
                .store
                .nodes
                .keys()
                .filter(|n| self.store.node_has_faults(n) || self.nodes.is_held(n))
                .cloned()
                .collect();
            self.dirty_nodes.extend(faulty);
            // Validations under way are read again.
            let validating: Vec<String> = self.validations.nodes().cloned().collect();
            self.dirty_nodes.extend(validating);
            self.rescan_lasting(now);
            self.scan_hangs(now);
        }
        let resync = self.cfg.resync_interval;
        if every(&mut self.last_resync, resync) {
            self.dirty_nodes.extend(self.store.nodes.keys().cloned());
            self.dirty_jobs.extend(self.recoveries.keys().cloned());
        }
        // Recoveries waiting for a deadline or a retry.
        let due: Vec<JobKey> = self
            .recoveries
            .iter()
            .filter(|(_, r)| r.wakes_by(now.wall))
            .map(|(k, _)| k.clone())
            .collect();
        self.dirty_jobs.extend(due);
        let releases = self.releases_due(now.wall);
        self.dirty_jobs.extend(releases);
        let interval = self.cfg.status_interval;
        if self.leading && every(&mut self.last_status, interval) {
            self.flush_status(now);
        }
    }

    pub(super) fn reconcile_dirty(&mut self, now: Now) {
        if !self.acting() {
            return;
        }
        for name in std::mem::take(&mut self.dirty_nodes) {
            self.reconcile_node(&name, now);
        }
        for key in std::mem::take(&mut self.dirty_jobs) {
            self.advance(&key, now);
        }
        self.reconcile_agent_access(now);
        self.metrics
            .breaker_held
            .set(self.nodes.held_count() as i64);
        self.metrics
            .breaker_open
            .set(i64::from(self.nodes.held_count() > 0));
        self.metrics
            .isolated_devices
            .set(self.store.dra.rule_count() as i64);
    }
}
