//! The invariants the property test checks after every step, and the
//! settling at the end (leading, every watch delivered) after which every
//! fault must be accounted for. Apart from the operations they judge.

use super::*;

impl Run {
    pub(super) fn check(&self) {
        // No barrier is left closed: a job whose generation is raised and
        // not released is followed by a recovery of the leader, or a
        // release of it is under way (when the leader acts, and sees it).
        if let Some(l) = self.leader {
            let core = &self.cores[l];
            if core.acting() {
                for name in self.m.jobs.keys() {
                    let key = (model::NS.to_string(), "JobSet".to_string(), name.clone());
                    let g = core.generation_of(&key);
                    assert!(
                        g.current <= g.released
                            || core.recoveries.contains_key(&key)
                            || core.releasing.contains_key(&key),
                        "job {name}: generation {} raised, {} released, and nothing follows it",
                        g.current,
                        g.released
                    );
                }
            }
        }
        assert!(
            self.m.separations_in_window() <= model::MAX_SEPARATED,
            "breaker exceeded: {:?}",
            self.m.applied
        );
        for a in &self.m.applied {
            if let Applied::Restart {
                job,
                uid: Some(u),
                owners,
                ..
            } = a
            {
                assert!(
                    owners.iter().all(|o| o == u),
                    "restart of {job} (uid {u}) deleted pods of another incarnation: {owners:?}"
                );
            }
        }
        // Restarts (records appended) of one incarnation are a cooldown
        // apart, unless a controller died mid-restart in between.
        let mut by_uid: std::collections::BTreeMap<&str, Vec<i64>> = Default::default();
        for a in &self.m.applied {
            if let Applied::Record {
                uid,
                at,
                pod_only: false,
                ..
            } = a
            {
                by_uid.entry(uid).or_default().push(*at);
            }
        }
        for (uid, times) in by_uid {
            for w in times.windows(2) {
                let excused = self
                    .partial_deaths
                    .iter()
                    .any(|d| *d >= w[0] - 1 && *d <= w[1]);
                assert!(
                    w[1] - w[0] >= model::COOLDOWN || excused,
                    "job {uid} restarted at {} and {} within its {}s cooldown: {:?}",
                    w[0],
                    w[1],
                    model::COOLDOWN,
                    self.m.applied
                );
            }
        }
    }

    /// Lead, deliver everything, let every effect succeed and time pass,
    /// until nothing moves.
    pub(super) fn settle(&mut self) {
        if self.leader.is_none() {
            // As at any take-over: the watches caught up first.
            for k in KINDS {
                let ins = self.m.deliver(k, 10_000);
                self.feed(ins);
            }
            self.leader = Some(0);
            self.term += 1;
            self.tell_leadership();
        }
        for round in 0..60 {
            for k in KINDS {
                let ins = self.m.deliver(k, 10_000);
                self.feed(ins);
            }
            while !self.inflight.is_empty() {
                self.complete(0, true);
            }
            self.m.operator();
            if self.wired {
                self.m.wire_all();
                self.m.agents(true);
            }
            let queued = self.m.queues.values().any(|q| !q.is_empty());
            if round > 20 && !queued && self.inflight.is_empty() {
                break;
            }
            self.m.t += 5;
            self.feed(vec![Input::Tick]);
            self.check();
        }
    }
}
