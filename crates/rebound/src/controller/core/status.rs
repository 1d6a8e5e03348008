//! Policy and classification status, computed in one place and written in
//! batches (never once per fault), only by the leader, only when changed:
//! the book says what status should be; the writes are effects, and only
//! one that succeeded counts as written.

use super::effect::{About, EffectKind, StatusTarget};
use super::{Core, Now};
use crate::api::conditions::{Condition, upsert};
use crate::api::{FaultClassification, RecoveryPolicy};
use crate::classify::InvalidObject;
use crate::controller::core::hashing::HashMap;
use crate::policy::{Engine, PolicyWarning};
use crate::recover::{Notice, reasons};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use std::collections::BTreeMap;

/// An `InvalidPolicy` Event owed for an object: said once per generation
/// (never again on a resync of the same generation), by the leader, with
/// the status flush.
#[derive(Debug, Default, Clone)]
struct Invalid {
    /// The generation last announced as invalid.
    announced: Option<Option<i64>>,
    /// The note of an Event not yet written.
    pending: Option<String>,
    uid: Option<String>,
}

impl Invalid {
    /// Record the outcome of compiling generation `g`.
    fn judged(&mut self, g: Option<i64>, uid: Option<String>, error: Option<&InvalidObject>) {
        self.uid = uid;
        match error {
            Some(e) if self.announced != Some(g) => {
                self.announced = Some(g);
                self.pending = Some(format!("{} (generation {}): {e}", e.reason, g.unwrap_or(0)));
            }
            Some(_) => {}
            None => {
                self.announced = None;
                self.pending = None;
            }
        }
    }

    /// The owed Event, if any, about the object `reference` names.
    fn announce(&mut self, mut reference: ObjectReference) -> Option<EffectKind> {
        let note = self.pending.take()?;
        reference.uid = self.uid.clone();
        Some(EffectKind::Event {
            about: About::Object(reference),
            notice: Notice::warning(reasons::INVALID_POLICY, "Validate", note),
        })
    }
}

/// A tenant policy's `CelWithinBudget` condition: whether its namespace's
/// expressions are suspended for the CEL time they took
/// (`rebound_core::policy::cel_meter`).
fn cel_condition(engine: &Engine, ns: &str, generation: Option<i64>) -> Condition {
    match engine.policies.cel_suspended(ns) {
        Some(e) => Condition::new(
            "CelWithinBudget",
            false,
            "Suspended",
            format!(
                "the policies of namespace {ns} spent {} ms of CEL time within {} s (budget {} ms): their expressions are suspended for {} s, and gates count as failed meanwhile",
                e.spent_ms,
                e.window_s,
                e.budget_ms,
                crate::policy::cel_meter::SUSPENDED.as_secs()
            ),
            generation,
            Utc::now(),
        ),
        None => Condition::new(
            "CelWithinBudget",
            true,
            "WithinBudget",
            format!(
                "the policies of namespace {ns} spend less than {} ms of CEL time in {} s",
                crate::policy::cel_meter::BUDGET.as_millis(),
                crate::policy::cel_meter::WINDOW.as_secs()
            ),
            generation,
            Utc::now(),
        ),
    }
}

/// What an Event about a rebound object refers to.
fn reference(kind: &str, namespace: Option<&str>, name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("rebound.dev/v1alpha1".into()),
        kind: Some(kind.into()),
        namespace: namespace.map(str::to_string),
        name: Some(name.into()),
        ..ObjectReference::default()
    }
}

#[derive(Debug, Default, Clone)]
struct PolicyBook {
    invalid: Invalid,
    generation: Option<i64>,
    conditions: Vec<Condition>,
    recoveries: u64,
    last_recovery: Option<DateTime<Utc>>,
    resumed: u64,
    not_resumed: u64,
    last_time_to_resume: Option<std::time::Duration>,
    written: Option<String>,
    /// A write of this text is in flight.
    writing: Option<String>,
}

#[derive(Debug, Default, Clone)]
struct ClassBook {
    invalid: Invalid,
    generation: Option<i64>,
    conditions: Vec<Condition>,
    written: Option<String>,
    writing: Option<String>,
}

/// What status should say, and what was last written.
#[derive(Debug, Default)]
pub struct StatusBook {
    policies: BTreeMap<(String, String), PolicyBook>,
    classifications: BTreeMap<String, ClassBook>,
}

impl StatusBook {
    /// A policy was added or changed; `r` is the result of compiling it.
    pub fn policy_changed(
        &mut self,
        p: &RecoveryPolicy,
        r: Result<Vec<PolicyWarning>, InvalidObject>,
    ) {
        let key = (p.namespace().unwrap_or_default(), p.name_any());
        let now = Utc::now();
        let g = p.metadata.generation;
        let b = self.policies.entry(key).or_default();
        if b.recoveries == 0
            && let Some(s) = &p.status
        {
            b.recoveries = s.recoveries;
            b.resumed = s.resumed;
            b.not_resumed = s.not_resumed;
        }
        b.generation = g;
        b.invalid
            .judged(g, p.metadata.uid.clone(), r.as_ref().err());
        let cond = match &r {
            Ok(w) if w.is_empty() => Condition::new("Ready", true, "Compiled", "in use", g, now),
            Ok(w) => Condition::new(
                "Ready",
                true,
                w[0].reason,
                w.iter()
                    .map(|w| w.message.clone())
                    .collect::<Vec<_>>()
                    .join("; "),
                g,
                now,
            ),
            Err(e) => Condition::new("Ready", false, e.reason, e.to_string(), g, now),
        };
        upsert(&mut b.conditions, cond);
    }

    /// A policy was deleted.
    pub fn policy_deleted(&mut self, ns: &str, name: &str) {
        self.policies.remove(&(ns.to_string(), name.to_string()));
    }

    /// A classification was added or changed.
    pub fn classification_changed(
        &mut self,
        o: &FaultClassification,
        r: Result<(), InvalidObject>,
    ) {
        let g = o.metadata.generation;
        let b = self.classifications.entry(o.name_any()).or_default();
        b.generation = g;
        b.invalid
            .judged(g, o.metadata.uid.clone(), r.as_ref().err());
        let cond = match &r {
            Ok(()) => Condition::new("Ready", true, "Compiled", "in use", g, Utc::now()),
            Err(e) => Condition::new("Ready", false, e.reason, e.to_string(), g, Utc::now()),
        };
        upsert(&mut b.conditions, cond);
    }

    /// A classification was deleted.
    pub fn classification_deleted(&mut self, name: &str) {
        self.classifications.remove(name);
    }

    /// A recovery was made under policy `id` (`ns/name`).
    pub fn recovered(&mut self, id: &str, at: DateTime<Utc>) {
        if let Some((ns, name)) = id.split_once('/')
            && let Some(b) = self.policies.get_mut(&(ns.to_string(), name.to_string()))
        {
            b.recoveries += 1;
            b.last_recovery = Some(at);
        }
    }

    /// A job recovered under policy `id` runs again, `lost` after its fault.
    pub fn resumed(&mut self, id: &str, lost: std::time::Duration) {
        if let Some(b) = self.book(id) {
            b.resumed += 1;
            b.last_time_to_resume = Some(lost);
        }
    }

    /// A job recovered under policy `id` did not run again.
    pub fn not_resumed(&mut self, id: &str) {
        if let Some(b) = self.book(id) {
            b.not_resumed += 1;
        }
    }

    fn book(&mut self, id: &str) -> Option<&mut PolicyBook> {
        let (ns, name) = id.split_once('/')?;
        self.policies.get_mut(&(ns.to_string(), name.to_string()))
    }

    /// Every policy and classification key known (relists compare them).
    pub fn policy_keys(&self) -> Vec<(String, String)> {
        self.policies.keys().cloned().collect()
    }

    /// Every classification name known.
    pub fn classification_keys(&self) -> Vec<String> {
        self.classifications.keys().cloned().collect()
    }

    /// A status write ended: only a successful one counts as written.
    pub fn written(&mut self, target: &StatusTarget, text: String, ok: bool) {
        let (written, writing) = match target {
            StatusTarget::Policy { namespace, name } => {
                match self.policies.get_mut(&(namespace.clone(), name.clone())) {
                    Some(b) => (&mut b.written, &mut b.writing),
                    None => return,
                }
            }
            StatusTarget::Classification { name } => match self.classifications.get_mut(name) {
                Some(b) => (&mut b.written, &mut b.writing),
                None => return,
            },
        };
        if writing.as_deref() == Some(text.as_str()) {
            *writing = None;
        }
        if ok {
            *written = Some(text);
        }
    }

    /// The writes (and owed Events) that bring every status to what it
    /// should say: `(effect, target and text when it is a status write)`.
    pub fn flush(
        &mut self,
        engine: &Engine,
        workloads: HashMap<String, u32>,
    ) -> Vec<(EffectKind, Option<(StatusTarget, String)>)> {
        let mut out = Vec::new();
        for ((ns, name), b) in self.policies.iter_mut() {
            if let Some(e) = b
                .invalid
                .announce(reference("RecoveryPolicy", Some(ns), name))
            {
                out.push((e, None));
            }
            let id = format!("{ns}/{name}");
            let ready = b
                .conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            let count = workloads.get(&id).copied().unwrap_or(0);
            let active = if !ready {
                Condition::new(
                    "Active",
                    false,
                    "NotReady",
                    "the policy is not in use until it is valid",
                    b.generation,
                    Utc::now(),
                )
            } else if count == 0 {
                Condition::new(
                    "Active",
                    false,
                    "NoWorkloads",
                    "no workload is covered by this policy (another policy may be more specific; see rebound explain)",
                    b.generation,
                    Utc::now(),
                )
            } else {
                Condition::new(
                    "Active",
                    true,
                    "Covering",
                    format!("covers {count} workload(s)"),
                    b.generation,
                    Utc::now(),
                )
            };
            upsert(&mut b.conditions, active);
            if ns != engine.policies.root_namespace() {
                upsert(&mut b.conditions, cel_condition(engine, ns, b.generation));
            }
            let body = serde_json::json!({
                "status": {
                    "observedGeneration": b.generation,
                    "conditions": b.conditions,
                    "workloads": count,
                    "recoveries": b.recoveries,
                    "lastRecovery": b.last_recovery.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
                    "resumed": b.resumed,
                    "notResumed": b.not_resumed,
                    "lastTimeToResume": b.last_time_to_resume.map(|d| crate::api::duration::format(std::time::Duration::from_secs(d.as_secs().max(1)))),
                }
            });
            let text = body.to_string();
            if b.written.as_deref() == Some(text.as_str())
                || b.writing.as_deref() == Some(text.as_str())
            {
                continue;
            }
            b.writing = Some(text.clone());
            let target = StatusTarget::Policy {
                namespace: ns.clone(),
                name: name.clone(),
            };
            out.push((
                EffectKind::Status {
                    target: target.clone(),
                    body,
                },
                Some((target, text)),
            ));
        }
        for (name, b) in self.classifications.iter_mut() {
            if let Some(e) = b
                .invalid
                .announce(reference("FaultClassification", None, name))
            {
                out.push((e, None));
            }
            let classified = engine
                .classifier
                .in_use()
                .find(|c| &c.name == name)
                .map(|c| c.classified.load(std::sync::atomic::Ordering::Relaxed))
                .unwrap_or(0);
            let body = serde_json::json!({
                "status": {
                    "observedGeneration": b.generation,
                    "conditions": b.conditions,
                    "faultsClassified": classified,
                }
            });
            let text = body.to_string();
            if b.written.as_deref() == Some(text.as_str())
                || b.writing.as_deref() == Some(text.as_str())
            {
                continue;
            }
            b.writing = Some(text.clone());
            let target = StatusTarget::Classification { name: name.clone() };
            out.push((
                EffectKind::Status {
                    target: target.clone(),
                    body,
                },
                Some((target, text)),
            ));
        }
        out
    }
}

impl Core {
    /// Write every status that changed (the leader only, batched).
    pub(super) fn flush_status(&mut self, _now: Now) {
        let keys: Vec<super::store::JobKey> = self.store.pods_by_job.keys().cloned().collect();
        let mut counts: HashMap<String, u32> = HashMap::default();
        for key in keys {
            if let Some(p) = self.policy_of(&key) {
                *counts.entry(p.id()).or_default() += 1;
            }
        }
        for (kind, status) in self.status.flush(&self.engine, counts) {
            match status {
                Some((target, text)) => {
                    self.effect_for(super::Waiting::Status(target, text), kind, None);
                }
                None => {
                    self.effect(kind, None);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bad() -> InvalidObject {
        InvalidObject {
            field: "spec.when".into(),
            reason: "InvalidExpression",
            message: "syntax error".into(),
        }
    }

    #[test]
    fn an_invalid_generation_is_announced_once() {
        let mut i = Invalid::default();
        i.judged(Some(1), None, None);
        assert_eq!(i.pending, None, "a valid object is not announced");
        i.judged(Some(2), None, Some(&bad()));
        assert!(
            i.pending
                .as_deref()
                .is_some_and(|n| n.contains("spec.when"))
        );
        // Written, then the same generation seen again (resync): nothing.
        i.pending = None;
        i.judged(Some(2), None, Some(&bad()));
        assert_eq!(i.pending, None, "a resync repeats nothing");
        // A new generation, still invalid: announced again.
        i.judged(Some(3), None, Some(&bad()));
        assert!(i.pending.is_some());
        // Fixed before the Event was written: nothing owed.
        i.judged(Some(4), None, None);
        assert_eq!(i.pending, None);
    }
}
