//! The actors of the adversarial simulation: what one step of a schedule
//! does, drawn from the schedule's seed.

use super::*;

/// A trusted fault code the model's nodes report.
const CODES: [&str; 3] = ["79", "13", "48"];

impl Sim {
    /// One step: an actor chosen by the seed does one thing.
    pub fn act(&mut self) {
        self.expire();
        if self.pick_extra(30) == Some(0) {
            self.outage();
        }
        let roll = self.pick(100);
        let what = match roll {
            0..=13 => {
                let k = KINDS[self.pick(3) as usize];
                let n = 1 + self.pick(5) as usize;
                let ins = self.m.deliver(k, n);
                self.feed(ins);
                "deliver"
            }
            14..=15 => {
                let k = KINDS[self.pick(3) as usize];
                let ins = self.m.duplicate(k);
                self.feed(ins);
                "duplicate"
            }
            16..=17 => {
                // A 410: the watch lists again.
                let k = KINDS[self.pick(3) as usize];
                let ins = self.m.relist(k);
                self.feed(ins);
                "relist"
            }
            18..=23 => {
                let i = self.pick(64) as usize;
                self.fail_pod(i);
                "fail pod"
            }
            24..=25 => {
                // A tenant's jobs crash-loop: every running pod fails.
                for i in 0..8 {
                    self.fail_pod(i);
                }
                "crash-loop"
            }
            26..=30 => {
                let node = format!("n{}", self.pick(4));
                let code = CODES[self.pick(3) as usize];
                self.ever_faulty.insert(node.clone());
                self.m.node_fault(&node, code);
                // The model's classification: 79 and 48 cordon, 13 when
                // it repeats on one GPU within its episode.
                let repeats = self.m.lines.get(&node).is_some_and(|ls| {
                    ls.iter()
                        .any(|(c, d, _, n)| c == code && d == "0" && *n >= 2)
                });
                if code != "13" || repeats {
                    self.cordonable.insert(node);
                }
                "node fault"
            }
            31..=32 => {
                let node = format!("n{}", self.pick(4));
                self.m.node_clear(&node);
                "node clear"
            }
            33..=34 => {
                let node = format!("n{}", self.pick(4));
                self.m.write_node(&node);
                "node rewrite"
            }
            35..=40 => {
                self.m.operator();
                if self.wired {
                    self.m.wire_all();
                }
                "operator"
            }
            41..=42 => {
                if self.wired {
                    let reach = self.pick(10) < 7;
                    self.m.agents(reach);
                }
                "agents"
            }
            43..=52 => {
                self.complete_one(true);
                "complete"
            }
            53..=55 => {
                self.complete_one(false);
                "fail answer"
            }
            56..=57 => {
                // Applied, its answer lost: the core times it out.
                if !self.inflight.is_empty() {
                    let i = self.pick(self.inflight.len() as u64) as usize;
                    let (r, e, _) = self.inflight.remove(i);
                    let _ = self.apply(r, &e);
                }
                "lose answer"
            }
            58..=60 => {
                self.leadership();
                "leadership"
            }
            61 => {
                self.controller_restart();
                "controller restart"
            }
            62..=69 => {
                let secs = 1 + self.pick(40) as i64;
                self.advance(secs);
                "tick"
            }
            70 => {
                // Long enough for every answer in flight to time out.
                self.advance(61);
                "long tick"
            }
            71..=78 => {
                self.copy_trusted_line();
                "tenant copies a line"
            }
            79..=81 => {
                self.flood();
                "tenant flood"
            }
            82..=84 => {
                self.ghost();
                "tenant ghost pod"
            }
            85..=88 => {
                self.forged_node_event();
                "tenant node Event"
            }
            89..=92 => {
                self.delete_event();
                "tenant deletes an Event"
            }
            93..=94 => {
                self.relist_events();
                "events relist"
            }
            95 => {
                // The API server refuses one kind of write for minutes.
                let what = ["record", "restart", "delete", "list"][self.pick(4) as usize];
                self.brownout = Some((what, self.m.t + 120 + self.pick(300) as i64));
                "brownout"
            }
            _ => {
                let i = self.pick(64) as usize;
                self.fail_pod(i);
                "fail pod"
            }
        };
        self.trace.push(format!("t={} {what}", self.m.t));
    }

    /// An outage of minutes: the API server refuses one kind of request
    /// (records, restarts, deletes or fresh reads) while the controller
    /// keeps trying (every request answered, time passing in steps), with
    /// a fault at its start. Long enough for a recovery's retries to run
    /// out (about four minutes).
    fn outage(&mut self) {
        let what =
            ["record", "restart", "delete", "list"][self.pick_extra(4).unwrap_or(0) as usize];
        let until = self.m.t + 250 + self.pick_extra(200).unwrap_or(0) as i64;
        self.brownout = Some((what, until));
        let i = self.pick_extra(64).unwrap_or(0) as usize;
        self.fail_pod(i);
        self.trace
            .push(format!("t={} outage of {what} until t={until}", self.m.t));
        while self.m.t < until {
            self.deliver_all();
            while !self.inflight.is_empty() {
                self.complete_one(true);
            }
            self.m.operator();
            if self.wired {
                self.m.wire_all();
                self.m.agents(true);
            }
            let secs = 5 + self.pick_extra(10).unwrap_or(0) as i64;
            self.advance(secs);
            self.check();
        }
    }

    fn fail_pod(&mut self, i: usize) {
        let running: Vec<String> = self
            .m
            .pods
            .iter()
            .filter(|(_, p)| p["status"]["phase"] == "Running")
            .map(|(n, _)| n.clone())
            .collect();
        if let Some(name) = running.get(i % running.len().max(1)) {
            self.failed_pods.insert(name.clone());
        }
        self.m.fail_pod(i);
    }

    fn complete_one(&mut self, ok: bool) {
        if self.inflight.is_empty() {
            return;
        }
        let i = self.pick(self.inflight.len() as u64) as usize;
        let (r, e, _) = self.inflight.remove(i);
        let browned = self.brownout.is_some_and(|(what, until)| {
            self.m.t < until
                && match what {
                    "record" => matches!(e.kind, EffectKind::Record { .. }),
                    "restart" => matches!(e.kind, EffectKind::RestartJob { .. }),
                    "list" => e.kind.is_fresh_read(),
                    _ => matches!(e.kind, EffectKind::DeletePods { .. }),
                }
        });
        let outcome = if ok && !browned {
            self.answer(r, &e)
        } else {
            let code = [
                "409 Conflict",
                "429 Too Many Requests",
                "500",
                "503",
                "timeout",
            ][self.pick(5) as usize];
            Outcome::Failed(code.into())
        };
        self.feed_to(r, vec![Input::Done(e.id, outcome)]);
    }

    fn leadership(&mut self) {
        let next = match self.pick(3) {
            0 => None,
            1 => Some(0),
            _ => Some(1),
        };
        // A new term begins only after the old one's Lease ran out. The
        // new leader's watches of the jobs and of the nodes may still be
        // behind what the old one wrote (restart records, cordons): its
        // fresh reads cover them (fresh.rs), for at most the reads' bound.
        if next.is_some() {
            let lag_jobs = self.pick(2) == 0;
            let lag_nodes = self.pick(2) == 0;
            for k in KINDS {
                let lags =
                    (lag_jobs && k == model::Kind::Jobs) || (lag_nodes && k == model::Kind::Nodes);
                if !lags {
                    let ins = self.m.deliver(k, 10_000);
                    self.feed(ins);
                }
            }
            if lag_jobs || lag_nodes {
                let bound = super::super::super::fresh::FRESH_BOUND.as_secs() as i64;
                self.catch_up_by = Some(self.m.t + bound);
            } else {
                self.catch_up_by = None;
            }
        }
        self.leader = next;
        if self.leader.is_some() {
            self.term += 1;
        }
        self.trace
            .push(format!("  leader {:?} term {}", self.leader, self.term));
        self.tell_leadership();
    }

    fn controller_restart(&mut self) {
        let dead = self.leader.unwrap_or(self.pick(2) as usize);
        let sent = self.rng.next_u64();
        let (mine, others): (Vec<_>, Vec<_>) = std::mem::take(&mut self.inflight)
            .into_iter()
            .partition(|(r, _, _)| *r == dead);
        self.inflight = others;
        let mut partial = false;
        for (k, (r, e, _)) in mine.into_iter().enumerate() {
            if sent >> (k % 64) & 1 == 1 {
                let _ = self.apply(r, &e);
            } else {
                partial |= destructive(&e);
            }
        }
        if partial {
            self.partial_deaths.push(self.m.t);
        }
        // The new process numbers its effects anew.
        self.restarts.owners.retain(|(r, _), _| *r != dead);
        for k in KINDS {
            let ins = self.m.deliver(k, 10_000);
            self.feed_to(1 - dead, ins);
        }
        self.cores[dead] = model::core();
        self.processes[dead] += 1;
        let mut ins = self.m.startup();
        // The events the restarted replica lists.
        ins.extend(self.events_list());
        self.feed_to(dead, ins);
        if self.leader == Some(dead) {
            self.term += 1;
        }
        self.tell_leadership();
    }

    /// The Events a list returns: Relist, each present Event, Synced.
    fn events_list(&self) -> Vec<Input> {
        use super::super::super::input::Change;
        let mut out = vec![Input::Event(Change::Relist)];
        out.extend(self.events.values().map(|e| self.m.event_written(e)));
        out.push(Input::Event(Change::Synced));
        out
    }

    fn relist_events(&mut self) {
        let ins = self.events_list();
        self.feed(ins);
    }

    fn write_event(&mut self, e: FaultEvent) {
        let input = self.m.event_written(&e);
        self.events.insert(format!("{}/{}", e.namespace, e.name), e);
        self.feed(vec![input]);
    }

    /// A tenant copies a trusted line, `at` included, into an Event of
    /// its own namespace (the evil one, or the jobs' own).
    fn copy_trusted_line(&mut self) {
        let lines: Vec<(String, String, i64)> = self
            .m
            .lines
            .iter()
            .flat_map(|(n, ls)| ls.iter().map(move |l| (n.clone(), l.0.clone(), l.2)))
            .collect();
        if lines.is_empty() {
            return self.forged_node_event();
        }
        let (node, code, at) = lines[self.pick(lines.len() as u64) as usize].clone();
        let ns = if self.pick(3) == 0 { model::NS } else { EVIL };
        let mut e = FaultEvent::xid(ns, &format!("copy-{}", self.pick(4)), &node, &code);
        e.at_ms = Some(at);
        if self.pick(2) == 0 {
            e.count = i32::MAX;
        }
        self.write_event(e);
    }

    /// A tenant names a node at a cordoning level in an Event.
    fn forged_node_event(&mut self) {
        let node = format!("n{}", self.pick(4));
        let code = CODES[self.pick(3) as usize];
        let ns = if self.pick(3) == 0 { model::NS } else { EVIL };
        let mut e = FaultEvent::xid(ns, &format!("forged-{}", self.pick(4)), &node, code);
        if self.pick(2) == 0 {
            // In the past: it would age a trusted line of the same key.
            e.at_ms = Some((self.m.wall() - chrono::Duration::minutes(5)).timestamp_millis());
        }
        self.write_event(e);
    }

    /// A flood: many Events with huge counts and messages.
    fn flood(&mut self) {
        let n = 4 + self.pick(12);
        let node = format!("n{}", self.pick(4));
        for i in 0..n {
            let mut e = FaultEvent::xid(EVIL, &format!("flood-{i}"), &node, "13");
            e.count = i32::MAX;
            e.message_bytes = 4 * 1024;
            e.device = Some(format!("{}", i % 8));
            self.write_event(e);
        }
    }

    /// An Event naming a pod that does not exist (a ghost job).
    fn ghost(&mut self) {
        let mut e = FaultEvent::xid(EVIL, &format!("ghost-{}", self.pick(8)), "n0", "13");
        e.pod = Some(format!("ghost-{}", self.pick(1000)));
        e.node = None;
        self.write_event(e);
    }

    fn delete_event(&mut self) {
        if self.events.is_empty() {
            return;
        }
        let i = self.pick(self.events.len() as u64) as usize;
        let Some(key) = self.events.keys().nth(i).cloned() else {
            return;
        };
        if let Some(e) = self.events.remove(&key) {
            let input = self.m.event_deleted(&e);
            self.feed(vec![input]);
        }
    }

    /// Lead, deliver everything, let every effect succeed and time pass,
    /// until nothing moves.
    pub fn settle(&mut self) {
        self.brownout = None;
        if self.leader.is_none() {
            self.deliver_all();
            self.leader = Some(0);
            self.term += 1;
            self.tell_leadership();
        }
        for round in 0..80 {
            self.deliver_all();
            self.expire();
            while !self.inflight.is_empty() {
                let (r, e, _) = self.inflight.remove(0);
                let o = self.answer(r, &e);
                self.feed_to(r, vec![Input::Done(e.id, o)]);
            }
            self.m.operator();
            if self.wired {
                self.m.wire_all();
                self.m.agents(true);
            }
            let queued = self.m.queues.values().any(|q| !q.is_empty());
            if round > 30 && !queued && self.inflight.is_empty() {
                break;
            }
            self.advance(5);
            self.check();
        }
    }
}
