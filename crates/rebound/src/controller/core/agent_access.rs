//! The restart agents' read access to their jobs, kept by the controller
//! (issue 28, docs/in-place.md "The agent's permissions"): in every
//! namespace with wired pods, one RoleBinding of the restart agent's
//! ClusterRole to the ServiceAccounts those pods run as. Users label a
//! job and it restarts in place; nobody writes a RoleBinding by hand.
//!
//! The binding is applied (server-side apply, idempotent) when a wired pod
//! of a new ServiceAccount or job kind appears, and again by every new
//! leadership term, then checked with the API server's authorizer (can
//! each account now get and watch its jobs?); a periodic sweep deletes the
//! bindings of namespaces whose wired pods have been gone for
//! [`EMPTY_GRACE`] (a job being recreated keeps its binding), including
//! those a controller before a restart left. A namespace whose binding is
//! refused or grants nothing is said at once: a Warning `AgentAccessFailed`
//! Event on each of its wired jobs and the
//! `rebound_agent_access_failed_namespaces` gauge, never found out by a
//! fallback.

use super::effect::{About, EffectKind, Outcome};
use super::{Core, Now, Waiting};
use crate::api::WorkloadKind;
use crate::recover::{Notice, reasons};
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

/// How long a namespace keeps its binding after its last wired pod went.
pub const EMPTY_GRACE: Duration = Duration::from_secs(600);
/// How often the bindings of namespaces without wired pods are swept.
const SWEEP_EVERY: Duration = Duration::from_secs(600);
/// Pause before a failed apply is tried again.
const RETRY_AFTER: Duration = Duration::from_secs(30);

/// What one apply grants: the accounts bound, and the job resources
/// (`group`, `plural`) each of them must then be able to read, checked
/// with the API server's own authorizer after the apply.
pub type Grant = (Vec<String>, Vec<(String, String)>);

/// The resources an agent of a job of `kind` reads: its job's, and for a
/// TrainJob's pods also the JobSet it runs as (the agent follows the
/// JobSet to its TrainJob).
fn reads(kind: WorkloadKind) -> Vec<(String, String)> {
    let of = |k: WorkloadKind| {
        let r = crate::workload::JobRef::new(k, String::new(), String::new(), None).api_resource();
        (r.group, r.plural)
    };
    match kind {
        WorkloadKind::TrainJob => vec![of(WorkloadKind::JobSet), of(kind)],
        // A bare pod has no job for its agent to read (neither wiring adds
        // an agent to one): nothing to check.
        WorkloadKind::Pod => Vec::new(),
        k => vec![of(k)],
    }
}

/// A wired pod's ServiceAccount and its job's kind.
type Wired = (Arc<str>, WorkloadKind);

/// What the core keeps about the agents' bindings.
#[derive(Debug, Default)]
pub struct AgentAccess {
    /// Wired pods per namespace, by ServiceAccount and job kind (what the
    /// binding must let which account read).
    wired: BTreeMap<Arc<str>, BTreeMap<Wired, u32>>,
    /// Namespaces whose wired pods all went, and when.
    emptied: BTreeMap<Arc<str>, DateTime<Utc>>,
    /// Namespaces with a count at zero since the last [`Self::settle`] (the
    /// store has no clock: the core settles and dates them).
    settling: BTreeSet<Arc<str>>,
    /// Namespaces whose accounts changed since they were last looked at.
    changed: BTreeSet<Arc<str>>,
    /// What the last successful apply in each namespace granted and
    /// checked (this term; a new term applies again).
    applied: BTreeMap<Arc<str>, Grant>,
    /// Applies in flight and what they grant.
    pending: BTreeMap<Arc<str>, Grant>,
    /// Namespaces whose apply failed: when to try again, and whether their
    /// jobs were told.
    failed: BTreeMap<Arc<str>, DateTime<Utc>>,
    /// The namespaces the sweep in flight keeps (`None`: no sweep).
    sweeping: Option<BTreeSet<String>>,
    last_sweep: Option<DateTime<Utc>>,
}

impl AgentAccess {
    /// A wired pod of `account` and a job of `kind` in `ns` appeared
    /// (`+1`) or went (`-1`). Called for every pod event of a wired pod
    /// (an update is a `-1` and a `+1`): a count that reaches zero is kept
    /// until [`Self::settle`], so a pod's update changes nothing to apply.
    pub fn count(&mut self, ns: &Arc<str>, account: &Arc<str>, kind: WorkloadKind, delta: i32) {
        let key = (account.clone(), kind);
        match self.wired.get_mut(ns).and_then(|a| a.get_mut(&key)) {
            Some(n) if delta >= 0 => *n = n.saturating_add(1),
            Some(n) => {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.settling.insert(ns.clone());
                }
            }
            None if delta >= 0 => {
                self.wired.entry(ns.clone()).or_default().insert(key, 1);
                // A new account or kind: the binding must follow.
                self.changed.insert(ns.clone());
                self.emptied.remove(ns);
            }
            // A pod never counted (nothing to take back).
            None => {}
        }
    }

    /// Drop the counts that stayed at zero since the last call: their
    /// namespaces' bindings must follow, and a namespace left with none is
    /// dated as emptied.
    fn settle(&mut self, now: DateTime<Utc>) {
        for ns in std::mem::take(&mut self.settling) {
            let Some(accounts) = self.wired.get_mut(&ns) else {
                continue;
            };
            let before = accounts.len();
            accounts.retain(|_, n| *n > 0);
            if accounts.len() != before {
                self.changed.insert(ns.clone());
            }
            if accounts.is_empty() {
                self.wired.remove(&ns);
                self.emptied.insert(ns, now);
            }
        }
    }

    /// The ServiceAccounts of wired pods in `ns`, sorted.
    fn accounts(&self, ns: &str) -> Vec<String> {
        let set: BTreeSet<&str> = self
            .wired
            .get(ns)
            .into_iter()
            .flat_map(|a| a.iter().filter(|(_, n)| **n > 0))
            .map(|((sa, _), _)| &**sa)
            .collect();
        set.into_iter().map(str::to_string).collect()
    }

    /// The job kinds of wired pods in `ns`.
    fn kinds(&self, ns: &str) -> BTreeSet<WorkloadKind> {
        self.wired
            .get(ns)
            .into_iter()
            .flat_map(|a| a.iter().filter(|(_, n)| **n > 0))
            .map(|((_, k), _)| *k)
            .collect()
    }

    /// Namespaces whose binding must stay: wired pods now, or lately.
    fn keep(&self, now: DateTime<Utc>) -> Vec<String> {
        let grace = chrono::Duration::from_std(EMPTY_GRACE).unwrap_or_default();
        self.wired
            .keys()
            .map(|k| k.to_string())
            .chain(
                self.emptied
                    .iter()
                    .filter(|(_, at)| now - **at < grace)
                    .map(|(k, _)| k.to_string()),
            )
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    /// A new term: everything is applied again (idempotent) and swept at
    /// once (a take-over comes after every initial list: the store knows
    /// every wired pod; a binding applied lately is never swept anyway).
    pub fn new_term(&mut self) {
        self.applied.clear();
        self.pending.clear();
        self.failed.clear();
        self.sweeping = None;
        self.last_sweep = None;
        self.changed.extend(self.wired.keys().cloned());
    }

    /// Namespaces that failed (the gauge).
    pub fn failed_count(&self) -> usize {
        self.failed.len()
    }
}

impl Core {
    /// Apply the bindings that changed, retry failed ones, sweep when due.
    pub(super) fn reconcile_agent_access(&mut self, now: Now) {
        self.store.access.settle(now.wall);
        let Some(role) = self.cfg.restart_agent_role.clone() else {
            return;
        };
        if !self.acting() {
            return;
        }
        let retry: Vec<Arc<str>> = self
            .store
            .access
            .failed
            .iter()
            .filter(|(_, at)| now.wall >= **at)
            .map(|(k, _)| k.clone())
            .collect();
        let mut todo = std::mem::take(&mut self.store.access.changed);
        todo.extend(retry);
        for ns in todo {
            let accounts = self.store.access.accounts(&ns);
            let resources: Vec<(String, String)> = self
                .store
                .access
                .kinds(&ns)
                .into_iter()
                .flat_map(reads)
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let grant = (accounts.clone(), resources.clone());
            if accounts.is_empty()
                || self.store.access.applied.get(&ns) == Some(&grant)
                || self.store.access.pending.get(&ns) == Some(&grant)
            {
                continue;
            }
            if self.store.access.pending.contains_key(&ns) {
                // Another apply is under way: look again when it ends.
                self.store.access.changed.insert(ns);
                continue;
            }
            self.store.access.pending.insert(ns.clone(), grant);
            self.effect_for(
                Waiting::AgentAccess(ns.clone()),
                EffectKind::AgentAccess {
                    namespace: ns.to_string(),
                    role: role.clone(),
                    accounts,
                    reads: resources,
                },
                None,
            );
        }
        let due = self
            .store
            .access
            .last_sweep
            .is_none_or(|l| (now.wall - l).to_std().unwrap_or(Duration::ZERO) >= SWEEP_EVERY);
        if due && self.store.access.sweeping.is_none() {
            self.store.access.last_sweep = Some(now.wall);
            let keep = self.store.access.keep(now.wall);
            self.store.access.sweeping = Some(keep.iter().cloned().collect());
            let grace = chrono::Duration::from_std(EMPTY_GRACE).unwrap_or_default();
            self.store
                .access
                .emptied
                .retain(|_, at| now.wall - *at < grace);
            self.effect_for(
                Waiting::AgentAccessSweep,
                EffectKind::AgentAccessSweep { keep },
                None,
            );
        }
        self.metrics
            .agent_access_failed
            .set(self.store.access.failed_count() as i64);
    }

    /// The outcome of an apply in `ns`.
    pub(super) fn agent_access_done(&mut self, ns: Arc<str>, outcome: Outcome, now: Now) {
        let Some(grant) = self.store.access.pending.remove(&ns) else {
            return;
        };
        match outcome {
            Outcome::Ok(_) => {
                self.store.access.failed.remove(&ns);
                self.store.access.applied.insert(ns.clone(), grant);
                // Changed while the apply was under way: looked at again.
                self.store.access.changed.insert(ns);
            }
            Outcome::NotLeader => {}
            Outcome::Gone(why) | Outcome::Failed(why) => {
                let first = !self.store.access.failed.contains_key(&ns);
                let retry = chrono::Duration::from_std(RETRY_AFTER).unwrap_or_default();
                self.store
                    .access
                    .failed
                    .insert(ns.clone(), now.wall + retry);
                if first {
                    self.tell_agent_access_failed(&ns, &grant.0, &why);
                }
            }
        }
        self.metrics
            .agent_access_failed
            .set(self.store.access.failed_count() as i64);
    }

    /// The sweep ended: a namespace it did not keep may have had its
    /// binding deleted though wired pods appeared there meanwhile: such
    /// bindings are applied again.
    pub(super) fn agent_access_swept(&mut self) {
        let a = &mut self.store.access;
        let Some(kept) = a.sweeping.take() else {
            return;
        };
        a.applied.retain(|ns, _| kept.contains(&**ns));
        let again: Vec<Arc<str>> = a
            .wired
            .keys()
            .filter(|ns| !kept.contains(&***ns))
            .cloned()
            .collect();
        a.changed.extend(again);
    }

    /// A Warning Event on each wired job of `ns`: its agents cannot read it
    /// and its in-place restarts will fall back to recreating its pods.
    fn tell_agent_access_failed(&mut self, ns: &str, accounts: &[String], why: &str) {
        let jobs: BTreeMap<super::store::JobKey, crate::workload::JobRef> = self
            .store
            .pods
            .get(ns)
            .into_iter()
            .flat_map(|m| m.values())
            .filter(|p| p.agent.is_some())
            .map(|p| (super::store::job_key(&p.job), (*p.job).clone()))
            .collect();
        tracing::warn!(namespace = ns, %why, "cannot grant the restart agents read access");
        let note = format!(
            "rebound could not bind the restart agent's role to {} in this namespace ({why}): the agents cannot read the job, so its in-place restarts fall back to recreating its pods; tried again every {}s",
            accounts.join(", "),
            RETRY_AFTER.as_secs()
        );
        for job in jobs.into_values() {
            self.effect(
                EffectKind::Event {
                    about: About::Job(job),
                    notice: Notice::warning(reasons::AGENT_ACCESS_FAILED, "Grant", note.clone()),
                },
                None,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::<Utc>::from_timestamp(s, 0).unwrap_or_default()
    }

    #[test]
    fn counts_mark_changes_and_keep_lately_emptied_namespaces() {
        let mut a = AgentAccess::default();
        let (ns, sa, other) = (
            Arc::from("team-a"),
            Arc::from("default"),
            Arc::from("trainer"),
        );
        a.count(&ns, &sa, WorkloadKind::JobSet, 1);
        a.count(&ns, &sa, WorkloadKind::JobSet, 1);
        assert_eq!(a.accounts("team-a"), vec!["default"]);
        assert!(a.changed.contains("team-a"));
        a.changed.clear();
        // A second pod of the same account changes nothing to apply, nor
        // does an update of the only pod of an account (-1, +1).
        a.count(&ns, &sa, WorkloadKind::JobSet, 1);
        a.count(&ns, &sa, WorkloadKind::Job, 1);
        a.changed.clear();
        a.count(&ns, &sa, WorkloadKind::Job, -1);
        a.count(&ns, &sa, WorkloadKind::Job, 1);
        a.settle(t(1));
        assert!(a.changed.is_empty(), "{:?}", a.changed);
        // Gone for good: settled, the kind no longer read.
        a.count(&ns, &sa, WorkloadKind::Job, -1);
        a.settle(t(1));
        assert!(a.changed.contains("team-a"));
        assert_eq!(a.kinds("team-a"), [WorkloadKind::JobSet].into());
        a.count(&ns, &other, WorkloadKind::JobSet, 1);
        assert_eq!(a.accounts("team-a"), vec!["default", "trainer"]);
        a.changed.clear();
        for _ in 0..3 {
            a.count(&ns, &sa, WorkloadKind::JobSet, -1);
        }
        a.count(&ns, &other, WorkloadKind::JobSet, -1);
        a.settle(t(2));
        assert!(a.accounts("team-a").is_empty());
        // Gone at t=2: kept within the grace, not after it.
        assert_eq!(a.keep(t(2 + 599)), vec!["team-a"]);
        assert!(a.keep(t(2 + 600)).is_empty());
        // Back before the sweep: no longer emptied.
        a.count(&ns, &sa, WorkloadKind::JobSet, 1);
        assert_eq!(a.keep(t(10_000)), vec!["team-a"]);
    }
}
