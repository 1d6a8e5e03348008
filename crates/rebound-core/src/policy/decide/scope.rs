//! The CEL variables a policy's `when` and `cooldown` see for one job:
//! `fault` (classified), `job` (with its restart history counted), `node`
//! (the fault's node as this fault leaves it) and `now`.
//!
//! Only the variables the policy's expressions read are built, but the
//! scope itself is built whenever the policy has an expression, even one
//! that reads no variable: `when: 'false'` must hold every restart, and a
//! constant `cooldown: '600'` must still be a cooldown once the job has
//! restarted (both were skipped or failed when the scope was built only
//! for expressions that named a variable).

use super::super::compile::{CompiledPolicy, Cooldown};
use super::JobInput;
use crate::expr::{JobView, MAX_LIST, NodeView, Scope, VarSet};
use crate::fault::Classified;
use chrono::{DateTime, Utc};

/// The values the policy's expressions read, owned for one decision.
pub(super) struct Views {
    needed: VarSet,
    job: Option<JobView>,
    node: Option<NodeView>,
}

impl Views {
    /// Build what `p`'s expressions read of `job` and the fault's `node`
    /// (the node as the caller knows it before this fault).
    pub(super) fn new(
        p: &CompiledPolicy,
        c: &Classified,
        job: &JobInput,
        node: Option<&NodeView>,
    ) -> Views {
        let needed =
            p.when
                .as_ref()
                .map(|w| w.vars())
                .unwrap_or_default()
                .union(match &p.cooldown {
                    Cooldown::Cel(e) => e.vars(),
                    Cooldown::Fixed(_) => VarSet::default(),
                });
        let job = needed.job.then(|| {
            let mut view = job.view.clone();
            view.restarts = job.history.iter().filter(|r| !r.pod_only).count() as i64;
            view.last_restart = job.history.last().map(|r| r.at);
            view
        });
        let node = if needed.node {
            node_after(c, node)
        } else {
            None
        };
        Views { needed, job, node }
    }

    /// The CEL scope over these views.
    pub(super) fn scope<'v>(&'v self, c: &'v Classified, now: DateTime<Utc>) -> Scope<'v> {
        Scope::build(
            self.needed,
            &c.fault,
            Some(c.level),
            self.job.as_ref(),
            self.node.as_ref(),
            now,
        )
    }
}

/// The fault's node as a policy sees it: what the node carried before
/// (`prior`: its labels, level and fault codes), with this fault added when
/// it is trusted. A node's level is its highest trusted fault (only trusted
/// sources reach node state, docs/concepts.md), so XID 79 on gpu-7 makes
/// `node.level` `Separate` in the decision it causes, whether or not the
/// caller has recorded it yet. `None` when the fault names no node (the
/// expressions then see an empty, healthy node).
pub fn node_after(c: &Classified, prior: Option<&NodeView>) -> Option<NodeView> {
    let name = c.fault.node.as_deref()?;
    let mut v = prior.cloned().unwrap_or_else(|| NodeView {
        name: name.to_string(),
        ..Default::default()
    });
    if c.fault.trusted {
        v.level = Some(v.level.map_or(c.level, |l| l.max(c.level)));
        if v.faults.len() < MAX_LIST && !v.faults.contains(&c.fault.code) {
            v.faults.push(c.fault.code.clone());
        }
    }
    Some(v)
}
