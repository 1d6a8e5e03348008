//! Policy and classification status, computed in one place and written in
//! batches (never once per fault), only by the leader, only when changed.

use super::actions::ActionCtx;
use crate::api::conditions::{Condition, upsert};
use crate::api::{FaultClassification, RecoveryPolicy};
use crate::classify::InvalidObject;
use crate::policy::{Engine, PolicyWarning};
use crate::recover::{Notice, reasons};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use std::collections::{BTreeMap, HashMap};

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

    /// Write the owed Event, if any, about the object `reference` names.
    fn announce(&mut self, ctx: &ActionCtx, mut reference: ObjectReference) {
        let Some(note) = self.pending.take() else {
            return;
        };
        reference.uid = self.uid.clone();
        let events = ctx.events.clone();
        tokio::spawn(async move {
            let n = Notice::warning(reasons::INVALID_POLICY, "Validate", note);
            events.object(reference, &n).await;
        });
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
    written: Option<String>,
}

#[derive(Debug, Default, Clone)]
struct ClassBook {
    invalid: Invalid,
    generation: Option<i64>,
    conditions: Vec<Condition>,
    written: Option<String>,
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

    /// Write every status that changed since the last write.
    pub fn flush(&mut self, ctx: &ActionCtx, engine: &Engine, workloads: HashMap<String, u32>) {
        // Policies that lose to another for some workload are told so.
        for ((ns, name), b) in self.policies.iter_mut() {
            b.invalid
                .announce(ctx, reference("RecoveryPolicy", Some(ns), name));
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
            let status = serde_json::json!({
                "status": {
                    "observedGeneration": b.generation,
                    "conditions": b.conditions,
                    "workloads": count,
                    "recoveries": b.recoveries,
                    "lastRecovery": b.last_recovery.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
                }
            });
            let text = status.to_string();
            if b.written.as_deref() == Some(text.as_str()) {
                continue;
            }
            b.written = Some(text);
            let api: Api<RecoveryPolicy> = Api::namespaced(ctx.client.clone(), ns);
            let (name, metrics) = (name.clone(), ctx.metrics.clone());
            tokio::spawn(async move {
                let r = api
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                    .await;
                metrics.request("patch_status", r.is_ok());
                if let Err(e) = r {
                    tracing::debug!(policy = %name, error = %e, "status write failed");
                }
            });
        }
        for (name, b) in self.classifications.iter_mut() {
            b.invalid
                .announce(ctx, reference("FaultClassification", None, name));
            let classified = engine
                .classifier
                .in_use()
                .find(|c| &c.name == name)
                .map(|c| c.classified.load(std::sync::atomic::Ordering::Relaxed))
                .unwrap_or(0);
            let status = serde_json::json!({
                "status": {
                    "observedGeneration": b.generation,
                    "conditions": b.conditions,
                    "faultsClassified": classified,
                }
            });
            let text = status.to_string();
            if b.written.as_deref() == Some(text.as_str()) {
                continue;
            }
            b.written = Some(text);
            let api: Api<FaultClassification> = Api::all(ctx.client.clone());
            let (name, metrics) = (name.clone(), ctx.metrics.clone());
            tokio::spawn(async move {
                let r = api
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                    .await;
                metrics.request("patch_status", r.is_ok());
                if let Err(e) = r {
                    tracing::debug!(classification = %name, error = %e, "status write failed");
                }
            });
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
