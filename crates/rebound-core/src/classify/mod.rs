//! FaultClassification: compile every object once per generation, then
//! classify faults: rules (codes, ranges, hex, CEL), priority across
//! objects, default level, and frequency/duration escalations.

mod codes;
mod history;

pub use codes::{CodeError, CodeKey, CodeSet};
pub use history::{History, HistoryKey, MAX_KEYS_PER_TENANT};

use crate::api::{FaultClassification, duration};
use crate::expr::{CLASSIFY_VARS, CompileError, Expr, NodeView, Scope, VarSet};
use crate::fault::{Classified, Fault, FaultSource, Level};
use chrono::{DateTime, Utc};
use kube::ResourceExt;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Why a classification cannot be used; becomes its `Ready=False` condition.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidObject {
    /// The field at fault, e.g. `spec.rules[2].when`.
    pub field: String,
    /// `InvalidExpression`, `ExpressionTooExpensive`, `InvalidCode` or
    /// `InvalidDuration`.
    pub reason: &'static str,
    pub message: String,
}

impl InvalidObject {
    pub(crate) fn expr(field: String, e: CompileError) -> Self {
        InvalidObject {
            field,
            reason: e.reason(),
            message: e.to_string(),
        }
    }
    pub(crate) fn duration(field: String, e: String) -> Self {
        InvalidObject {
            field,
            reason: "InvalidDuration",
            message: e,
        }
    }
}

#[derive(Debug)]
struct Rule {
    /// `classification/rule`, as decisions name it (formatted once).
    id: String,
    codes: CodeSet,
    when: Option<Expr>,
    level: Level,
}

#[derive(Debug)]
struct Escalation {
    name: String,
    codes: CodeSet,
    times: Option<(u32, chrono::Duration)>,
    lasts_for: Option<chrono::Duration>,
    level: Level,
}

/// One FaultClassification, compiled.
#[derive(Debug)]
pub struct Compiled {
    pub name: String,
    pub generation: Option<i64>,
    pub source: FaultSource,
    pub priority: i32,
    rules: Vec<Rule>,
    escalations: Vec<Escalation>,
    default_level: Option<Level>,
    /// Faults classified by this object (for its status).
    pub classified: std::sync::atomic::AtomicU64,
    /// Variables its rules' CEL reads.
    needs: VarSet,
}

impl Compiled {
    /// Compile an object; any invalid part makes the whole object unusable.
    pub fn compile(obj: &FaultClassification) -> Result<Compiled, InvalidObject> {
        let spec = &obj.spec;
        let mut rules = Vec::with_capacity(spec.rules.len());
        for (i, r) in spec.rules.iter().enumerate() {
            let codes = CodeSet::compile(&r.codes, spec.source).map_err(|e| InvalidObject {
                field: format!("spec.rules[{i}].codes"),
                reason: "InvalidCode",
                message: e.to_string(),
            })?;
            let when = match &r.when {
                Some(w) => Some(
                    Expr::compile(w, CLASSIFY_VARS)
                        .map_err(|e| InvalidObject::expr(format!("spec.rules[{i}].when"), e))?,
                ),
                None => None,
            };
            if codes.is_empty() && when.is_none() {
                return Err(InvalidObject {
                    field: format!("spec.rules[{i}]"),
                    reason: "InvalidCode",
                    message: "a rule needs codes or when".into(),
                });
            }
            rules.push(Rule {
                id: format!("{}/{}", obj.name_any(), r.name),
                codes,
                when,
                level: r.level,
            });
        }
        let mut escalations = Vec::with_capacity(spec.escalations.len());
        for (i, e) in spec.escalations.iter().enumerate() {
            let field = |f: &str| format!("spec.escalations[{i}].{f}");
            let codes = CodeSet::compile(&e.codes, spec.source).map_err(|err| InvalidObject {
                field: field("codes"),
                reason: "InvalidCode",
                message: err.to_string(),
            })?;
            let dur = |f: &str, v: &str| -> Result<chrono::Duration, InvalidObject> {
                let d = duration::parse(v).map_err(|m| InvalidObject::duration(field(f), m))?;
                chrono::Duration::from_std(d)
                    .map_err(|_| InvalidObject::duration(field(f), format!("{v:?} is too long")))
            };
            let times = match (e.times, &e.within) {
                (Some(t), Some(w)) => Some((t, dur("within", w)?)),
                (None, None) => None,
                _ => {
                    return Err(InvalidObject::duration(
                        field("times"),
                        "times and within go together".into(),
                    ));
                }
            };
            let lasts_for = e
                .lasts_for
                .as_deref()
                .map(|v| dur("lastsFor", v))
                .transpose()?;
            if times.is_none() && lasts_for.is_none() {
                return Err(InvalidObject::duration(
                    field("times"),
                    "an escalation needs times/within or lastsFor".into(),
                ));
            }
            escalations.push(Escalation {
                name: e.name.clone().unwrap_or_else(|| format!("escalation-{i}")),
                codes,
                times,
                lasts_for,
                level: e.level,
            });
        }
        let needs = rules
            .iter()
            .filter_map(|r: &Rule| r.when.as_ref().map(|w| w.vars()))
            .fold(VarSet::default(), VarSet::union);
        Ok(Compiled {
            name: obj.name_any(),
            generation: obj.metadata.generation,
            source: spec.source,
            priority: spec.priority,
            rules,
            escalations,
            default_level: spec.default_level,
            classified: Default::default(),
            needs,
        })
    }

    /// Number of rules (for status and explain).
    pub fn rule_count(&self) -> usize {
        self.rules.len()
    }
}

/// Counters of the classifier, for metrics.
#[derive(Debug, Default, Clone)]
pub struct ClassifyStats {
    /// CEL evaluation errors (each treated as no match).
    pub cel_errors: u64,
}

/// Every compiled classification by source, plus the escalation history.
#[derive(Debug)]
pub struct Classifier {
    by_source: HashMap<FaultSource, Vec<Arc<Compiled>>>,
    invalid: HashMap<String, InvalidObject>,
    history: History,
    /// Window used for `fault.count` when no escalation names one.
    pub default_count_window: Duration,
    stats: ClassifyStats,
}

impl Default for Classifier {
    fn default() -> Self {
        Classifier::new()
    }
}

/// The level a fault gets when no classification exists for its source.
pub const BUILTIN_DEFAULT: Level = Level::RestartJob;

impl Classifier {
    /// An empty classifier with a history of at most 100,000 keys.
    pub fn new() -> Classifier {
        Classifier {
            by_source: HashMap::new(),
            invalid: HashMap::new(),
            history: History::new(100_000, 64, Duration::from_secs(7 * 86400)),
            default_count_window: Duration::from_secs(86400),
            stats: ClassifyStats::default(),
        }
    }

    /// Add or replace an object. Compiles only when the generation changed;
    /// an invalid object is removed from use and its error returned.
    pub fn upsert(&mut self, obj: &FaultClassification) -> Result<(), InvalidObject> {
        let name = obj.name_any();
        if obj.metadata.generation.is_some()
            && self.find(&name).is_some_and(|c| {
                c.generation == obj.metadata.generation && c.source == obj.spec.source
            })
        {
            return Ok(());
        }
        self.remove(&name);
        match Compiled::compile(obj) {
            Ok(c) => {
                let list = self.by_source.entry(c.source).or_default();
                list.push(Arc::new(c));
                list.sort_by(|a, b| {
                    b.priority
                        .cmp(&a.priority)
                        .then_with(|| a.name.cmp(&b.name))
                });
                Ok(())
            }
            Err(e) => {
                self.invalid.insert(name, e.clone());
                Err(e)
            }
        }
    }

    /// Remove an object (deleted from the cluster).
    pub fn remove(&mut self, name: &str) {
        self.invalid.remove(name);
        for list in self.by_source.values_mut() {
            list.retain(|c| c.name != name);
        }
    }

    fn find(&self, name: &str) -> Option<&Arc<Compiled>> {
        self.by_source.values().flatten().find(|c| c.name == name)
    }

    /// The error of an object that is not in use, if any.
    pub fn invalid(&self, name: &str) -> Option<&InvalidObject> {
        self.invalid.get(name)
    }

    /// Names of the classifications in use, by source.
    pub fn in_use(&self) -> impl Iterator<Item = &Arc<Compiled>> {
        self.by_source.values().flatten()
    }

    /// Counters since start.
    pub fn stats(&self) -> &ClassifyStats {
        &self.stats
    }

    /// The fault of a history line cleared (its carrier went back to
    /// healthy): its episode ends, and durations (`lastsFor`,
    /// `now - fault.firstSeen`) and repeats (`times`/`within`) of a later
    /// fault are measured on a new episode.
    pub fn end_episode(&mut self, key: &HistoryKey) {
        self.history.end_episode(key);
    }

    /// History lines one tenant namespace holds (metrics, tests).
    pub fn tenant_history(&self, ns: &str) -> usize {
        self.history.tenant_len(ns)
    }

    /// Classify one fault: record it in the history, set `count`, find the
    /// rule, then apply escalations.
    pub fn classify(
        &mut self,
        fault: Fault,
        node: Option<&NodeView>,
        now: DateTime<Utc>,
    ) -> Classified {
        self.classify_inner(fault, node, now, true)
    }

    /// Classify a fault seen before again (a node's lasting faults, its
    /// desired state after a change): the same answer as [`Self::classify`]
    /// (the history ignores a time it holds), without counting it once
    /// more in the classification's status.
    pub fn reclassify(
        &mut self,
        fault: Fault,
        node: Option<&NodeView>,
        now: DateTime<Utc>,
    ) -> Classified {
        self.classify_inner(fault, node, now, false)
    }

    fn classify_inner(
        &mut self,
        mut fault: Fault,
        node: Option<&NodeView>,
        now: DateTime<Utc>,
        count_stat: bool,
    ) -> Classified {
        let list = self
            .by_source
            .get(&fault.source)
            .cloned()
            .unwrap_or_default();
        let key = HistoryKey::of(&fault);
        // Occurrences are counted to the second: the same fault reported by
        // a Node condition and by an Event of the same instant is one.
        let at = trunc_secs(fault.last_seen);
        let first = self.history.record(&key, at, fault.first_seen);
        let ck = CodeKey::new(fault.source, &fault.code, fault.reason.as_deref());
        fault.first_seen = first;
        let window = list
            .iter()
            .flat_map(|c| c.escalations.iter())
            .filter(|e| e.codes.matches_key(&ck))
            .filter_map(|e| e.times.map(|(_, w)| w))
            .max()
            .unwrap_or_else(|| {
                chrono::Duration::from_std(self.default_count_window)
                    .unwrap_or(chrono::Duration::days(1))
            });
        fault.count = self.history.count_within(&key, at, window).max(1);

        let mut scope: Option<Scope> = None;
        let mut found: Option<(Level, String, &Arc<Compiled>)> = None;
        'objects: for c in &list {
            for r in &c.rules {
                let code_ok = r.codes.is_empty() || r.codes.matches_key(&ck);
                if !code_ok {
                    continue;
                }
                if let Some(w) = &r.when {
                    let sc = scope.get_or_insert_with(|| {
                        let needed = list.iter().fold(VarSet::default(), |a, c| a.union(c.needs));
                        Scope::build(needed, &fault, None, None, node, now)
                    });
                    match w.eval_bool_in(sc) {
                        Ok(true) => {}
                        Ok(false) => continue,
                        Err(_) => {
                            self.stats.cel_errors += 1;
                            continue;
                        }
                    }
                }
                found = Some((r.level, r.id.clone(), c));
                break 'objects;
            }
        }
        drop(scope);
        let (mut level, rule, object) = match found {
            Some((l, r, o)) => (l, r, Some(o)),
            None => match list.iter().find(|c| c.default_level.is_some()) {
                Some(c) => (
                    c.default_level.unwrap_or(BUILTIN_DEFAULT),
                    format!("{}/defaultLevel", c.name),
                    Some(c),
                ),
                None => (BUILTIN_DEFAULT, "builtin-default".to_string(), None),
            },
        };
        let mut escalated_by = None;
        for c in &list {
            for e in &c.escalations {
                if e.level <= level || !e.codes.matches_key(&ck) {
                    continue;
                }
                let by_times = e
                    .times
                    .is_some_and(|(t, w)| self.history.count_within(&key, at, w) >= t);
                // A lasting fault is re-evaluated while it persists: its
                // duration runs to `now`, not to its last occurrence.
                let by_duration = e
                    .lasts_for
                    .is_some_and(|d| now.max(fault.last_seen) - fault.first_seen >= d);
                if by_times || by_duration {
                    level = e.level;
                    escalated_by = Some(format!("{}/{}", c.name, e.name));
                }
            }
        }
        if let Some(o) = object.filter(|_| count_stat) {
            o.classified
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Classified {
            fault,
            level,
            rule,
            escalated_by,
        }
    }
}

fn trunc_secs(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(t.timestamp(), 0).unwrap_or(t)
}

#[cfg(test)]
mod tests;
