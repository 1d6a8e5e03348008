//! The DRA objects into the store's device index: a change of which pod
//! holds which device decides nothing by itself (faults are decided when
//! they come); a change of one of rebound's DeviceTaintRules marks its
//! node for reconcile (the rule made, or removed by someone else).

use super::super::Core;
use super::super::input::{Change, DraChange};
use super::super::store::dra::DraKind;

impl Core {
    pub(in crate::controller::core) fn on_dra(&mut self, c: DraChange, now: super::super::Now) {
        let dra = &mut self.store.dra;
        match c {
            DraChange::Served { claims, rules } => {
                dra.served = Some((claims, rules));
                dra.served_at = Some(now.wall);
                self.dirty_nodes.extend(self.store.nodes.keys().cloned());
                self.decide_waiting(now);
            }
            DraChange::Slice(c) => match c {
                Change::Apply(s) => dra.slice(&s, false),
                Change::Delete(s) => dra.slice(&s, true),
                Change::Relist => dra.relist(DraKind::Slices),
                Change::Synced => {
                    dra.synced(DraKind::Slices);
                    self.decide_waiting(now);
                }
            },
            DraChange::Claim(c) => match c {
                Change::Apply(x) => dra.claim(&x, false),
                Change::Delete(x) => dra.claim(&x, true),
                Change::Relist => dra.relist(DraKind::Claims),
                Change::Synced => {
                    dra.synced(DraKind::Claims);
                    self.decide_waiting(now);
                }
            },
            DraChange::Rule(c) => {
                let node = match &c {
                    Change::Apply(r) | Change::Delete(r) => r
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(super::super::store::dra::RULE_NODE_LABEL))
                        .cloned(),
                    _ => None,
                };
                match c {
                    Change::Apply(r) => dra.rule(&r, false),
                    Change::Delete(r) => dra.rule(&r, true),
                    Change::Relist => dra.relist(DraKind::Rules),
                    Change::Synced => {
                        dra.synced(DraKind::Rules);
                        self.dirty_nodes.extend(self.store.nodes.keys().cloned());
                        self.decide_waiting(now);
                    }
                }
                if let Some(n) = node {
                    self.dirty_nodes.insert(n);
                }
            }
        }
    }
}
