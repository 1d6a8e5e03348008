//! `fault`, `job` and `node` as CEL maps read on access.
//!
//! Binding a [`cel::Value`] map converts every field into the interpreter's
//! own representation before the expression runs, although an expression
//! reads one or two of them; that conversion was most of the engine's time.
//! A [`View`] borrows the core's value and builds a field only when the
//! expression selects it, so a fault costs what its expressions read.
//!
//! To CEL a view is a `map(string, dyn)` with the same keys and values as
//! the eager maps of [`super::values`]: selection, `has()`, `in`, `size()`,
//! comprehensions over its keys and equality behave as for a map.

use super::MAX_LIST;
use crate::expr::values::{JobView, NodeView};
use crate::fault::{Fault, Level};
use cel::ExecutionError;
use cel::common::traits::{self, Container, Indexer, Iterable, Sizer};
use cel::common::types::{self, CelInt, CelList, CelMap, CelMapKey, CelString, CelTimestamp, Type};
use cel::common::value::{CowVal, Val};
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock};

/// Keys of `fault`, in the order documented in docs/cel.md.
pub(super) static FAULT_FIELDS: [&str; 14] = [
    "source",
    "code",
    "level",
    "reason",
    "message",
    "node",
    "namespace",
    "pod",
    "container",
    "device",
    "exitCode",
    "count",
    "firstSeen",
    "lastSeen",
];
/// Keys of `job`.
pub(super) static JOB_FIELDS: [&str; 8] = [
    "kind",
    "name",
    "namespace",
    "labels",
    "annotations",
    "restarts",
    "lastRestart",
    "replicas",
];
/// Keys of `node`.
pub(super) static NODE_FIELDS: [&str; 4] = ["name", "labels", "level", "faults"];

/// One of the core's values seen by CEL, fields built on access.
#[derive(Debug, Clone, Copy)]
pub enum View<'v> {
    /// `fault`, with its level once classified.
    Fault(&'v Fault, Option<Level>),
    /// `job`.
    Job(&'v JobView),
    /// `node`.
    Node(&'v NodeView),
}

static DEFAULT_JOB: LazyLock<JobView> = LazyLock::new(JobView::default);
static DEFAULT_NODE: LazyLock<NodeView> = LazyLock::new(NodeView::default);

impl<'v> View<'v> {
    /// `job`, or an empty job when none is known (expressions need no
    /// `has()` guards).
    pub fn job(job: Option<&'v JobView>) -> View<'v> {
        View::Job(job.unwrap_or(&DEFAULT_JOB))
    }

    /// `node`, or an empty healthy node when none is known.
    pub fn node(node: Option<&'v NodeView>) -> View<'v> {
        View::Node(node.unwrap_or(&DEFAULT_NODE))
    }

    fn fields(&self) -> &'static [&'static str] {
        match self {
            View::Fault(..) => &FAULT_FIELDS,
            View::Job(_) => &JOB_FIELDS,
            View::Node(_) => &NODE_FIELDS,
        }
    }

    /// The keys as CEL strings, for iteration (which lends references).
    fn keys(&self) -> &'static [CelString<'static>] {
        fn of(fields: &'static [&'static str]) -> Vec<CelString<'static>> {
            fields.iter().map(|f| CelString::from(*f)).collect()
        }
        static FAULT: LazyLock<Vec<CelString<'static>>> = LazyLock::new(|| of(&FAULT_FIELDS));
        static JOB: LazyLock<Vec<CelString<'static>>> = LazyLock::new(|| of(&JOB_FIELDS));
        static NODE: LazyLock<Vec<CelString<'static>>> = LazyLock::new(|| of(&NODE_FIELDS));
        match self {
            View::Fault(..) => &FAULT,
            View::Job(_) => &JOB,
            View::Node(_) => &NODE,
        }
    }

    /// The value of one key, built now; `None` for an unknown key.
    fn field(&self, name: &str) -> Option<Box<dyn Val + 'v>> {
        match *self {
            View::Fault(f, level) => fault_field(f, level, name),
            View::Job(j) => job_field(j, name),
            View::Node(n) => node_field(n, name),
        }
    }

    /// Every key built: for the rare operations that need the whole map.
    fn materialize(&self) -> CelMap<'v> {
        let m: HashMap<CelMapKey<'v>, Box<dyn Val + 'v>> = self
            .fields()
            .iter()
            .filter_map(|k| Some((CelMapKey::from(*k), self.field(k)?)))
            .collect();
        CelMap::from(m)
    }
}

fn string<'v>(s: &'v str) -> Box<dyn Val + 'v> {
    Box::new(CelString::from(s))
}

/// A `fault` string, cut to the length the cost estimate assumes.
fn bounded<'v>(s: &'v str) -> Box<dyn Val + 'v> {
    string(super::cost::truncate(s))
}

fn opt<'v>(s: &'v Option<String>) -> Box<dyn Val + 'v> {
    bounded(s.as_deref().unwrap_or(""))
}

fn int<'v>(i: i64) -> Box<dyn Val + 'v> {
    Box::new(CelInt::from(i))
}

fn ts<'v>(t: DateTime<Utc>) -> Box<dyn Val + 'v> {
    Box::new(CelTimestamp::from(t.fixed_offset()))
}

fn string_map<'v>(m: &'v BTreeMap<String, String>) -> Box<dyn Val + 'v> {
    let h: HashMap<CelMapKey<'v>, Box<dyn Val + 'v>> = m
        .iter()
        .map(|(k, v)| (CelMapKey::from(k.as_str()), string(v)))
        .collect();
    Box::new(CelMap::from(h))
}

fn fault_field<'v>(f: &'v Fault, level: Option<Level>, name: &str) -> Option<Box<dyn Val + 'v>> {
    Some(match name {
        "source" => string(f.source.as_str()),
        "code" => bounded(&f.code),
        "level" => string(level.map(Level::as_str).unwrap_or("")),
        "reason" => opt(&f.reason),
        "message" => opt(&f.message),
        "node" => opt(&f.node),
        "namespace" => opt(&f.namespace),
        "pod" => opt(&f.pod),
        "container" => opt(&f.container),
        "device" => opt(&f.device),
        "exitCode" => int(f.exit_code.unwrap_or(0) as i64),
        "count" => int(f.count as i64),
        "firstSeen" => ts(f.first_seen),
        "lastSeen" => ts(f.last_seen),
        _ => return None,
    })
}

fn job_field<'v>(j: &'v JobView, name: &str) -> Option<Box<dyn Val + 'v>> {
    Some(match name {
        "kind" => string(&j.kind),
        "name" => string(&j.name),
        "namespace" => string(&j.namespace),
        "labels" => string_map(&j.labels),
        "annotations" => string_map(&j.annotations),
        "restarts" => int(j.restarts),
        "lastRestart" => ts(j.last_restart.unwrap_or(DateTime::UNIX_EPOCH)),
        "replicas" => int(j.replicas),
        _ => return None,
    })
}

fn node_field<'v>(n: &'v NodeView, name: &str) -> Option<Box<dyn Val + 'v>> {
    Some(match name {
        "name" => string(&n.name),
        "labels" => string_map(&n.labels),
        "level" => string(n.level.unwrap_or(Level::Ignore).as_str()),
        "faults" => {
            let l: Vec<Box<dyn Val + 'v>> =
                n.faults.iter().take(MAX_LIST).map(|f| bounded(f)).collect();
            Box::new(CelList::from(l))
        }
        _ => return None,
    })
}

fn key_name(key: &dyn Val) -> Result<&str, ExecutionError> {
    <&str>::try_from(key).map_err(|_| ExecutionError::UnexpectedType {
        got: key.get_type().name().to_owned(),
        want: "map key".to_owned(),
    })
}

impl<'v> Val for View<'v> {
    fn get_type(&self) -> &Type {
        <Self as Val>::cel_type()
    }

    fn cel_type() -> &'static Type {
        &types::MAP_TYPE
    }

    fn as_container(&self) -> Option<&dyn Container> {
        Some(self)
    }

    fn as_indexer<'b, 'w>(&'b self) -> Option<&'b (dyn Indexer + 'w)>
    where
        Self: 'w,
    {
        Some(self)
    }

    fn into_indexer<'w>(self: Box<Self>) -> Option<Box<dyn Indexer + 'w>>
    where
        Self: 'w,
    {
        Some(self)
    }

    fn as_iterable<'b, 'w>(&'b self) -> Option<&'b (dyn Iterable + 'w)>
    where
        Self: 'w,
    {
        Some(self)
    }

    fn as_sizer(&self) -> Option<&dyn Sizer> {
        Some(self)
    }

    fn equals(&self, other: &dyn Val) -> bool {
        self.materialize().equals(other)
    }

    fn clone_as_boxed<'w>(&self) -> Box<dyn Val + 'w>
    where
        Self: 'w,
    {
        Box::new(*self)
    }
}

impl<'v> Indexer for View<'v> {
    fn get<'b, 'w>(&'b self, idx: &dyn Val) -> Result<CowVal<'b, 'w>, ExecutionError>
    where
        Self: 'w,
    {
        let name = key_name(idx)?;
        match self.field(name) {
            Some(v) => Ok(CowVal::Owned(v)),
            None => Err(ExecutionError::NoSuchKey(Arc::new(name.to_owned()))),
        }
    }

    fn steal<'w>(self: Box<Self>, idx: &dyn Val) -> Result<Box<dyn Val + 'w>, ExecutionError>
    where
        Self: 'w,
    {
        self.get(idx).map(CowVal::into_owned)
    }
}

impl Container for View<'_> {
    fn contains(&self, value: &dyn Val) -> Result<bool, ExecutionError> {
        let name = key_name(value)?;
        Ok(self.fields().contains(&name))
    }
}

impl Sizer for View<'_> {
    fn size(&self) -> CelInt {
        CelInt::from(self.fields().len() as i64)
    }
}

impl Iterable for View<'_> {
    fn iter<'b, 'w>(&'b self) -> Box<dyn traits::Iterator<'b, 'w> + 'b>
    where
        Self: 'w,
    {
        Box::new(Keys(self.keys().iter()))
    }
}

/// Iterates a view's keys (comprehensions over a map iterate its keys).
struct Keys(std::slice::Iter<'static, CelString<'static>>);

impl<'b, 'w> traits::Iterator<'b, 'w> for Keys {
    fn next(&mut self) -> Option<&'b (dyn Val + 'w)> {
        self.0.next().map(|k| k as &(dyn Val + 'w))
    }
}
