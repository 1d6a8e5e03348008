//! Building CEL values from the core's types, integers as `int`.

use super::MAX_LIST;
use super::cost::truncate;
use crate::fault::{Fault, Level};
use cel::Value;
use cel::objects::Key;
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// The four variables of an evaluation, built once per fault and shared by
/// every expression evaluated for it.
#[derive(Clone, Debug)]
pub struct Vars {
    pub fault: Value,
    pub job: Value,
    pub node: Value,
    pub now: Value,
}

impl Vars {
    /// Variables for one fault, with job and node views when known.
    pub fn new(
        fault: &Fault,
        level: Option<Level>,
        job: Option<&JobView>,
        node: Option<&NodeView>,
        now: DateTime<Utc>,
    ) -> Vars {
        Vars {
            fault: fault_value(fault, level),
            job: job
                .map(JobView::to_value)
                .unwrap_or_else(|| JobView::default().to_value()),
            node: node
                .map(NodeView::to_value)
                .unwrap_or_else(|| NodeView::default().to_value()),
            now: ts(now),
        }
    }

    /// Replace `fault.level` after classification, keeping the rest.
    pub fn with_level(&self, fault: &Fault, level: Level) -> Vars {
        Vars {
            fault: fault_value(fault, Some(level)),
            ..self.clone()
        }
    }
}

/// What CEL sees of a job (`job.*`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobView {
    pub kind: String,
    pub name: String,
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub restarts: i64,
    pub last_restart: Option<DateTime<Utc>>,
    pub replicas: i64,
}

impl JobView {
    fn to_value(&self) -> Value {
        let mut m: HashMap<Key, Value> = HashMap::with_capacity(8);
        m.insert("kind".into(), self.kind.as_str().into());
        m.insert("name".into(), self.name.as_str().into());
        m.insert("namespace".into(), self.namespace.as_str().into());
        m.insert("labels".into(), string_map(&self.labels));
        m.insert("annotations".into(), string_map(&self.annotations));
        m.insert("restarts".into(), Value::Int(self.restarts));
        m.insert(
            "lastRestart".into(),
            self.last_restart
                .map(ts)
                .unwrap_or(ts(DateTime::UNIX_EPOCH)),
        );
        m.insert("replicas".into(), Value::Int(self.replicas));
        m.into()
    }
}

/// What CEL sees of a node (`node.*`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeView {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// The node's current fault level (`Ignore` when healthy).
    pub level: Option<Level>,
    /// Codes of the faults the node carries now.
    pub faults: Vec<String>,
}

impl NodeView {
    fn to_value(&self) -> Value {
        let mut m: HashMap<Key, Value> = HashMap::with_capacity(4);
        m.insert("name".into(), self.name.as_str().into());
        m.insert("labels".into(), string_map(&self.labels));
        m.insert(
            "level".into(),
            self.level.unwrap_or(Level::Ignore).as_str().into(),
        );
        let faults: Vec<Value> = self
            .faults
            .iter()
            .take(MAX_LIST)
            .map(|f| Value::from(super::cost::truncate(f)))
            .collect();
        m.insert("faults".into(), Value::List(Arc::new(faults)));
        m.into()
    }
}

/// `fault.*`: every field present (empty string / 0 when unknown) so
/// expressions need no `has()` guards.
pub fn fault_value(f: &Fault, level: Option<Level>) -> Value {
    let mut m: HashMap<Key, Value> = HashMap::with_capacity(14);
    let s = |o: &Option<String>| Value::from(truncate(o.as_deref().unwrap_or("")));
    m.insert("source".into(), f.source.as_str().into());
    m.insert("code".into(), truncate(&f.code).into());
    m.insert(
        "level".into(),
        level.map(Level::as_str).unwrap_or("").into(),
    );
    m.insert("reason".into(), s(&f.reason));
    m.insert("message".into(), s(&f.message));
    m.insert("node".into(), s(&f.node));
    m.insert("namespace".into(), s(&f.namespace));
    m.insert("pod".into(), s(&f.pod));
    m.insert("container".into(), s(&f.container));
    m.insert("device".into(), s(&f.device));
    m.insert(
        "exitCode".into(),
        Value::Int(f.exit_code.unwrap_or(0) as i64),
    );
    m.insert("count".into(), Value::Int(f.count as i64));
    m.insert("firstSeen".into(), ts(f.first_seen));
    m.insert("lastSeen".into(), ts(f.last_seen));
    m.into()
}

fn ts(t: DateTime<Utc>) -> Value {
    Value::Timestamp(t.fixed_offset())
}

fn string_map(m: &BTreeMap<String, String>) -> Value {
    let h: HashMap<Key, Value> = m
        .iter()
        .map(|(k, v)| (Key::from(k.as_str()), Value::from(v.as_str())))
        .collect();
    h.into()
}

/// Convert JSON to CEL the way Kubernetes CEL does: integers are `int`
/// (never `uint`), lists capped at [`MAX_LIST`].
pub fn json_to_value(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::from(s.as_str()),
        serde_json::Value::Array(a) => Value::List(Arc::new(
            a.iter().take(MAX_LIST).map(json_to_value).collect(),
        )),
        serde_json::Value::Object(o) => {
            let h: HashMap<Key, Value> = o
                .iter()
                .map(|(k, v)| (Key::from(k.as_str()), json_to_value(v)))
                .collect();
            h.into()
        }
    }
}
