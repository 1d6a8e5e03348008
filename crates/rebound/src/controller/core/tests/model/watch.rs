//! The model's watch side: the changes it queued, delivered, duplicated,
//! dropped or replayed as a relist, and the inputs of a controller start.

use super::*;

impl Model {
    /// The typed objects of a kind, as a relist delivers them.
    fn current(&self, k: Kind) -> Vec<Value> {
        match k {
            Kind::Pods => self.pods.values().cloned().collect(),
            Kind::Nodes => self.nodes.values().cloned().collect(),
            Kind::Jobs => self.jobs.values().cloned().collect(),
        }
    }

    /// The input of one queued change.
    pub fn input(&mut self, k: Kind, p: &Pending) -> Input {
        let now = self.wall();
        match (k, p) {
            (Kind::Pods, Pending::Apply(v)) => {
                let pod: Pod = serde_json::from_value(v.clone()).unwrap_or_default();
                Input::Pod(Change::Apply(PodSeen::read(
                    &pod,
                    Duration::from_secs(600),
                    &self.keys.get(),
                    &mut self.pool,
                    now,
                )))
            }
            (Kind::Pods, Pending::Delete(v)) => {
                let pod: Pod = serde_json::from_value(v.clone()).unwrap_or_default();
                Input::Pod(Change::Delete(PodSeen::gone(&pod, &mut self.pool)))
            }
            (Kind::Nodes, Pending::Apply(v)) => Input::Node(Change::Apply(Box::new(node(v)))),
            (Kind::Nodes, Pending::Delete(v)) => Input::Node(Change::Delete(Box::new(node(v)))),
            (Kind::Jobs, Pending::Apply(v)) => {
                Input::Job(WorkloadKind::JobSet, Change::Apply(dynamic(v)))
            }
            (Kind::Jobs, Pending::Delete(v)) => {
                Input::Job(WorkloadKind::JobSet, Change::Delete(dynamic(v)))
            }
        }
    }

    /// Deliver up to `n` queued changes of a kind.
    pub fn deliver(&mut self, k: Kind, n: usize) -> Vec<Input> {
        let mut out = Vec::new();
        if k == Kind::Jobs {
            out.extend(self.answers.drain(..));
        }
        for _ in 0..n {
            let Some(p) = self.queues.entry(k).or_default().pop_front() else {
                break;
            };
            out.push(self.input(k, &p));
            self.last.insert(k, p);
        }
        out
    }

    /// Deliver the last change of a kind again (a duplicate).
    pub fn duplicate(&mut self, k: Kind) -> Vec<Input> {
        match self.last.get(&k).cloned() {
            Some(p) => vec![self.input(k, &p)],
            None => Vec::new(),
        }
    }

    /// A relist of a kind (after a 410 or a dropped watch): what was queued
    /// is lost, the current objects are listed.
    pub fn relist(&mut self, k: Kind) -> Vec<Input> {
        self.queues.entry(k).or_default().clear();
        // A watch never replays what came before its list.
        self.last.remove(&k);
        let mut out = vec![relist_input(k, Change::Relist)];
        for v in self.current(k) {
            out.push(self.input(k, &Pending::Apply(v)));
        }
        out.push(relist_input(k, Change::Synced));
        out
    }

    /// Everything a starting controller lists.
    pub fn startup(&mut self) -> Vec<Input> {
        let mut out = vec![
            Input::Policy(Change::Relist),
            Input::Policy(Change::Apply(Box::new(policy(&self.policy)))),
            Input::Policy(Change::Synced),
            Input::Classification(Change::Relist),
        ];
        for c in classifications() {
            out.push(Input::Classification(Change::Apply(Box::new(c))));
        }
        out.push(Input::Classification(Change::Synced));
        out.push(Input::Event(Change::Relist));
        out.push(Input::Event(Change::Synced));
        out.push(Input::DeviceInfo(Change::Relist));
        out.push(Input::DeviceInfo(Change::Synced));
        // The model's server serves no DRA (tests/devices.rs says it does).
        out.push(Input::Dra(super::super::super::input::DraChange::Served {
            claims: false,
            rules: false,
        }));
        out.push(Input::JobKinds(vec![(
            WorkloadKind::JobSet,
            jobset_resource(),
        )]));
        for k in KINDS {
            out.extend(self.relist(k));
        }
        out
    }
}

fn relist_input(k: Kind, c: Change<()>) -> Input {
    let relist = matches!(c, Change::Relist);
    match (k, relist) {
        (Kind::Pods, true) => Input::Pod(Change::Relist),
        (Kind::Pods, false) => Input::Pod(Change::Synced),
        (Kind::Nodes, true) => Input::Node(Change::Relist),
        (Kind::Nodes, false) => Input::Node(Change::Synced),
        (Kind::Jobs, true) => Input::Job(WorkloadKind::JobSet, Change::Relist),
        (Kind::Jobs, false) => Input::Job(WorkloadKind::JobSet, Change::Synced),
    }
}
