//! Size bounds of CEL values ([`Shape`]) and of the context's variables:
//! what the cost walk multiplies by. Apart from the walk so that the
//! per-variable limits can be read (and changed) in one place.

use super::{
    ANNOTATION_VALUE_MAX, FAULT_STRING_MAX, LABEL_KEY_MAX, LABEL_VALUE_MAX, MAP_ENTRIES_MAX,
    NAME_MAX,
};

/// What a value can be, as far as its cost is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// A number, bool, timestamp, duration, null or type: constant size.
    Scalar,
    Str,
    List,
    Map,
    /// Not known statically (a map's value, a function's result).
    Any,
}

/// Size bounds of a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Shape {
    pub(super) kind: Kind,
    /// Its own length: bytes of a string, elements of a list, entries of a map.
    pub(super) len: u64,
    /// The longest length of anything nested in it (elements, keys, values,
    /// and theirs): the `len` of an element.
    pub(super) inner: u64,
    /// Its whole size: bytes and elements, nested ones included.
    pub(super) total: u64,
    /// The largest `total` of one of its elements (keys, values).
    pub(super) elem_total: u64,
}

impl Shape {
    pub(super) const SCALAR: Shape = Shape {
        kind: Kind::Scalar,
        len: 0,
        inner: 0,
        total: 1,
        elem_total: 0,
    };

    pub(super) fn string(len: u64) -> Shape {
        Shape {
            kind: Kind::Str,
            len,
            inner: 0,
            total: len.max(1),
            elem_total: 0,
        }
    }

    /// A map of up to `entries` entries with keys and values up to `key` and
    /// `value` long.
    pub(super) fn map(entries: u64, key: u64, value: u64) -> Shape {
        Shape {
            kind: Kind::Map,
            len: entries,
            inner: key.max(value),
            total: entries.saturating_mul(key.saturating_add(value).saturating_add(1)),
            elem_total: key.max(value).max(1),
        }
    }

    /// A map of fields (a `fault`, `job` or `node` view).
    pub(super) fn record(fields: &[Shape]) -> Shape {
        Shape {
            kind: Kind::Map,
            len: fields.len() as u64,
            inner: fields.iter().map(|f| f.len.max(f.inner)).max().unwrap_or(0),
            total: fields
                .iter()
                .fold(fields.len() as u64, |t, f| t.saturating_add(f.total)),
            elem_total: fields.iter().map(|f| f.total).max().unwrap_or(0),
        }
    }

    /// An element (or key, or value) of this value: as long as anything
    /// nested in it, as large as its largest element.
    pub(super) fn element(self) -> Shape {
        Shape {
            kind: Kind::Any,
            len: self.inner,
            inner: self.inner,
            total: self.elem_total,
            elem_total: self.elem_total,
        }
    }

    /// A bound of both (the two branches of a conditional).
    pub(super) fn join(self, o: Shape) -> Shape {
        Shape {
            kind: if self.kind == o.kind {
                self.kind
            } else {
                Kind::Any
            },
            len: self.len.max(o.len),
            inner: self.inner.max(o.inner),
            total: self.total.max(o.total),
            elem_total: self.elem_total.max(o.elem_total),
        }
    }

    /// Concatenation (`+` of strings or lists; of numbers a number).
    pub(super) fn concat(self, o: Shape) -> Shape {
        if self.kind == Kind::Scalar || o.kind == Kind::Scalar {
            return Shape::SCALAR;
        }
        Shape {
            kind: if self.kind == o.kind {
                self.kind
            } else {
                Kind::Any
            },
            len: self.len.saturating_add(o.len),
            inner: self.inner.max(o.inner),
            total: self.total.saturating_add(o.total),
            elem_total: self.elem_total.max(o.elem_total),
        }
    }
}

/// The cost of touching every byte or element of `s` once (see the module
/// documentation: one unit per ten).
pub(super) fn traverse(s: Shape) -> u64 {
    s.total / 10 + 1
}

/// The shape of a variable of the evaluation context.
pub(super) fn free_var(name: &str) -> Shape {
    let fields: &[&str] = match name {
        "fault" => &crate::expr::views::FAULT_FIELDS,
        "job" => &crate::expr::views::JOB_FIELDS,
        "node" => &crate::expr::views::NODE_FIELDS,
        // `now`, or anything else (rejected before the estimate).
        _ => return Shape::SCALAR,
    };
    let shapes: Vec<Shape> = fields
        .iter()
        .map(|f| field(name, f).unwrap_or(Shape::SCALAR))
        .collect();
    Shape::record(&shapes)
}

/// The shape of `var.field`, `None` for a field it does not have.
pub(super) fn field(var: &str, field: &str) -> Option<Shape> {
    let labels = Shape::map(MAP_ENTRIES_MAX, LABEL_KEY_MAX, LABEL_VALUE_MAX);
    Some(match (var, field) {
        ("fault", "exitCode" | "count" | "firstSeen" | "lastSeen") => Shape::SCALAR,
        ("fault", _) => Shape::string(FAULT_STRING_MAX),
        ("job", "name" | "namespace" | "kind") => Shape::string(NAME_MAX),
        ("job", "labels") => labels,
        ("job", "annotations") => {
            // Keys and values together fit in 256 KiB.
            let mut s = Shape::map(MAP_ENTRIES_MAX, LABEL_KEY_MAX, ANNOTATION_VALUE_MAX);
            s.total = ANNOTATION_VALUE_MAX + MAP_ENTRIES_MAX;
            s.elem_total = ANNOTATION_VALUE_MAX;
            s
        }
        ("job", "restarts" | "lastRestart" | "replicas") => Shape::SCALAR,
        ("node", "name" | "level") => Shape::string(NAME_MAX),
        ("node", "labels") => labels,
        ("node", "faults") => Shape {
            kind: Kind::List,
            len: crate::expr::MAX_LIST as u64,
            inner: FAULT_STRING_MAX,
            total: (crate::expr::MAX_LIST as u64) * (FAULT_STRING_MAX + 1),
            elem_total: FAULT_STRING_MAX,
        },
        _ => return None,
    })
}
