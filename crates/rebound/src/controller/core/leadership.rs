//! Leadership: what the core does when it becomes able to act (rebuild
//! from the cluster's records) and when its term ends (drop what was
//! decided under it). Apart from the step loop that notices the change.

use super::occurrence::OccurrenceId;
use super::{Core, Now, Waiting};

impl Core {
    /// Became able to act (ready and leading): resume recoveries recorded on
    /// the jobs, reconcile every node and job, decide every current
    /// occurrence not decided yet. What a previous leader did is recognised
    /// from the cluster (restart history, generations, node annotations),
    /// so nothing is done twice.
    pub(super) fn take_over(&mut self, now: Now) {
        // Restarts of jobs wait for this term's fresh read of their
        // records, cordons and restarts for its read of the nodes
        // (fresh.rs).
        self.start_fresh_read(now);
        self.store.access.new_term();
        self.resume_recoveries(now);
        self.dirty_nodes.extend(self.store.nodes.keys().cloned());
        self.dirty_jobs
            .extend(self.store.pods_by_job.keys().cloned());
        let ids: Vec<OccurrenceId> = self.current.keys().copied().collect();
        for id in ids {
            self.decide_current(id, now);
        }
    }

    /// Leadership ended or lapsed: what was decided under it is dropped
    /// and rebuilt from the cluster's records when leadership returns
    /// ([`Self::take_over`]), since another replica may have acted in
    /// between. Outcomes of its effects are ignored; the occurrences its
    /// recoveries acted on or absorbed are decided again then (a restart
    /// in the job's history after them makes them handled).
    pub(super) fn end_term(&mut self, _now: Now) {
        if !self.recoveries.is_empty() {
            tracing::info!(
                recoveries = self.recoveries.len(),
                "leadership ended: dropping the recoveries of this term"
            );
        }
        for (key, rec) in std::mem::take(&mut self.recoveries) {
            if let Some(v) = &self.clusterd {
                v.job_done(&rec.job);
            }
            // A restart this term decided but never saw made is decided
            // again by the next term, from the job's own records.
            self.forget_unmade(&key, &rec);
        }
        self.releasing.clear();
        self.inflight
            .retain(|_, (w, _)| matches!(w, Waiting::Status(..)));
        self.store.access.new_term();
        self.nodes.end_term();
        let current = &self.current;
        self.ledger.reopen_acted(|id| current.contains_key(&id));
    }
}
