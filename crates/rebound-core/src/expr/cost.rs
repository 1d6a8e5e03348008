//! A static, worst-case cost estimate of a compiled CEL expression.
//!
//! cel-rust 0.15 has no cost tracking of its own: its parser caps the
//! recursion depth (96) and can cap the node count, but an evaluation runs
//! to the end whatever it costs, and `when` runs inside the recovery core's
//! step. Comprehension macros multiply: `[1,…,10].all(a, [1,…,10].all(b,
//! …))` ten deep is 10^10 loop steps in a few hundred bytes. So an
//! expression is estimated when it is compiled, from its parsed AST, and
//! refused when the estimate exceeds [`MAX_COST`].
//!
//! The estimate is an upper bound, not an average:
//! - every node evaluated costs one unit; a comprehension (`all`,
//!   `exists`, `exists_one`, `map`, `filter`) costs the largest size its
//!   range can have × (its condition + its step + 1), so nesting multiplies;
//! - a list literal's size is its element count; the size of a variable's
//!   list or map is the documented maximum below ([`FAULT_STRING_MAX`],
//!   [`MAP_ENTRIES_MAX`], [`super::MAX_LIST`], …), enforced by the binding
//!   where Kubernetes does not enforce it itself;
//! - work proportional to a value's size (string functions, equality,
//!   concatenation, `in` on a list, `string()`) costs one unit per ten
//!   bytes or elements touched, Kubernetes' own traversal factor
//!   (`StringTraversalCostFactor` 0.1 in k8s.io/apiserver's CEL library);
//!   `matches` costs that × the pattern's length (a regex scan is at worst
//!   input × pattern);
//! - a conditional costs its condition and the dearer branch.
//!
//! Sizes are tracked as a [`Shape`]: the length of the value itself, the
//! longest length of anything nested in it, and its total size, so that a
//! comprehension over a variable's elements (`node.faults.all(f, f…)`)
//! knows how long each element can be.

use cel::IdedExpr;
use cel::common::ast::{EntryExpr, Expr, LiteralValue, operators};

/// The most an expression may cost, in estimate units.
///
/// The arithmetic: the engine targets 200,000 decisions a second, 5 µs a
/// fault, and ordinary expressions cost 10–100 units (every sample and
/// documented example is under 10,000: a `matches` on a 4 KiB message is
/// ~6,000). Measured, an expression at this bound (two nested `all` over
/// 94 elements) evaluates in ~130 µs, and string-heavy ones at the bound in
/// under 1 ms: one such tenant policy slows the faults it gates to a
/// thousand or more a second instead of 200,000, and a step of the core
/// that evaluates a hundred of them still ends far below the step
/// watchdog's 5 s. Ten times more would let a few tenant policies stall a
/// step for seconds.
pub const MAX_COST: u64 = 100_000;

/// Longest string of a `fault` field bound into an evaluation (bytes):
/// longer ones are cut at a character boundary when bound. The kubelet
/// caps a termination message at 4096 bytes (`terminationMessagePath`), and
/// the other fields (codes, reasons, names) are far shorter; an Event's or
/// a Node condition's message has no cap of its own, so the binding
/// enforces this one ([`truncate`]). A node fault code (`node.faults`) is
/// bounded the same way.
pub const FAULT_STRING_MAX: u64 = 4096;

/// Most entries of `job.labels`, `job.annotations` or `node.labels`.
///
/// Annotations: Kubernetes caps their total size (keys and values) at
/// 256 KiB (`TotalAnnotationSizeLimitB` in apimachinery's validation), and
/// a key has at least one byte: 262,144 entries. Labels: the count is not
/// capped, but an object is at most 1.5 MiB (etcd's default
/// `--max-request-bytes`) and a label takes at least 6 bytes of JSON
/// (`"a":"",`): 262,144 again. Iterating a job's labels or annotations is
/// therefore refused; look keys up with `in` and `[]` instead (a hash
/// lookup, one unit).
pub const MAP_ENTRIES_MAX: u64 = 262_144;

/// Longest label or annotation key: a DNS-subdomain prefix (253), `/` and
/// a 63-character name (apimachinery's qualified-name validation).
pub const LABEL_KEY_MAX: u64 = 317;
/// Longest label value (apimachinery: 63 characters).
pub const LABEL_VALUE_MAX: u64 = 63;
/// Longest annotation value: the whole 256 KiB annotation budget.
pub const ANNOTATION_VALUE_MAX: u64 = 256 * 1024;
/// Longest object name (a DNS subdomain) and namespace.
pub const NAME_MAX: u64 = 253;

/// Largest compiled size of a literal `matches` pattern (bytes, the regex
/// crate's `size_limit`): cel-rust compiles the pattern on every
/// evaluation, and a short pattern with counted repetitions
/// (`((a{100}){100}){100}`) compiles to megabytes, so literal patterns are
/// compiled once when the expression is, against this limit (about a
/// millisecond of compiling at most).
pub const REGEX_SIZE_MAX: usize = 64 * 1024;

/// What a `matches` pattern computed at run time costs: it is compiled on
/// every evaluation up to the regex crate's default limit (10 MiB of
/// program), which no estimate can bound more tightly, so such an
/// expression is refused; write the pattern as a literal.
pub const DYNAMIC_PATTERN_COST: u64 = 1_000_000;

/// The literal patterns of `matches` calls in `e` (the pattern is the
/// argument after the string matched).
pub fn literal_patterns(e: &IdedExpr) -> Vec<String> {
    fn walk(e: &IdedExpr, out: &mut Vec<String>) {
        match &e.expr {
            Expr::Unspecified | Expr::Literal(_) | Expr::Ident(_) => {}
            Expr::Select(s) => walk(&s.operand, out),
            Expr::Call(c) => {
                if c.func_name == "matches" {
                    let p = if c.target.is_some() {
                        c.args.first()
                    } else {
                        c.args.get(1)
                    };
                    if let Some(IdedExpr {
                        expr: Expr::Literal(LiteralValue::String(s)),
                        ..
                    }) = p
                    {
                        out.push(s.inner().to_string());
                    }
                }
                if let Some(t) = &c.target {
                    walk(t, out);
                }
                c.args.iter().for_each(|a| walk(a, out));
            }
            Expr::List(l) => l.elements.iter().for_each(|x| walk(x, out)),
            Expr::Map(m) => m.entries.iter().for_each(|en| entry(en, out)),
            Expr::Struct(st) => st.entries.iter().for_each(|en| entry(en, out)),
            Expr::Comprehension(c) => {
                for x in [
                    &c.iter_range,
                    &c.accu_init,
                    &c.loop_cond,
                    &c.loop_step,
                    &c.result,
                ] {
                    walk(x, out);
                }
            }
        }
    }
    fn entry(en: &cel::common::ast::IdedEntryExpr, out: &mut Vec<String>) {
        match &en.expr {
            EntryExpr::MapEntry(me) => {
                walk(&me.key, out);
                walk(&me.value, out);
            }
            EntryExpr::StructField(f) => walk(&f.value, out),
        }
    }
    let mut out = Vec::new();
    walk(e, &mut out);
    out
}

/// Cut `s` to at most [`FAULT_STRING_MAX`] bytes at a character boundary:
/// what the cost estimate assumes of every `fault` string.
pub fn truncate(s: &str) -> &str {
    let max = FAULT_STRING_MAX as usize;
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// What a value can be, as far as its cost is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
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
struct Shape {
    kind: Kind,
    /// Its own length: bytes of a string, elements of a list, entries of a map.
    len: u64,
    /// The longest length of anything nested in it (elements, keys, values,
    /// and theirs): the `len` of an element.
    inner: u64,
    /// Its whole size: bytes and elements, nested ones included.
    total: u64,
    /// The largest `total` of one of its elements (keys, values).
    elem_total: u64,
}

impl Shape {
    const SCALAR: Shape = Shape {
        kind: Kind::Scalar,
        len: 0,
        inner: 0,
        total: 1,
        elem_total: 0,
    };

    fn string(len: u64) -> Shape {
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
    fn map(entries: u64, key: u64, value: u64) -> Shape {
        Shape {
            kind: Kind::Map,
            len: entries,
            inner: key.max(value),
            total: entries.saturating_mul(key.saturating_add(value).saturating_add(1)),
            elem_total: key.max(value).max(1),
        }
    }

    /// A map of fields (a `fault`, `job` or `node` view).
    fn record(fields: &[Shape]) -> Shape {
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
    fn element(self) -> Shape {
        Shape {
            kind: Kind::Any,
            len: self.inner,
            inner: self.inner,
            total: self.elem_total,
            elem_total: self.elem_total,
        }
    }

    /// A bound of both (the two branches of a conditional).
    fn join(self, o: Shape) -> Shape {
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
    fn concat(self, o: Shape) -> Shape {
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
fn traverse(s: Shape) -> u64 {
    s.total / 10 + 1
}

/// An estimate: worst-case cost and the shape of the result.
#[derive(Clone, Copy, Debug)]
struct Est {
    cost: u64,
    shape: Shape,
}

/// The worst-case cost of evaluating `e` once, in units (see [`MAX_COST`]).
pub fn estimate(e: &IdedExpr) -> u64 {
    Walker { scopes: Vec::new() }.walk(e).cost
}

struct Walker {
    /// Variables bound by enclosing comprehensions (iteration variables
    /// and accumulators) with their shapes, innermost last.
    scopes: Vec<(String, Shape)>,
}

impl Walker {
    fn lookup(&self, name: &str) -> Shape {
        if let Some((_, s)) = self.scopes.iter().rev().find(|(n, _)| n == name) {
            return *s;
        }
        free_var(name)
    }

    /// Whether `name` is the accumulator of a comprehension being walked
    /// (the macros name it `@result`, a name CEL source cannot write).
    fn is_accu(&self, name: &str) -> bool {
        name.starts_with('@') && self.scopes.iter().any(|(n, _)| n == name)
    }

    fn walk(&mut self, e: &IdedExpr) -> Est {
        match &e.expr {
            Expr::Unspecified => Est {
                cost: 1,
                shape: Shape::SCALAR,
            },
            Expr::Literal(l) => Est {
                cost: 1,
                shape: match l {
                    LiteralValue::String(s) => Shape::string(s.inner().len() as u64),
                    LiteralValue::Bytes(b) => Shape::string(b.inner().len() as u64),
                    _ => Shape::SCALAR,
                },
            },
            Expr::Ident(name) => Est {
                cost: 1,
                shape: self.lookup(name),
            },
            Expr::Select(s) => {
                let operand = self.walk(&s.operand);
                let shape = if s.test {
                    Shape::SCALAR
                } else {
                    match &s.operand.expr {
                        Expr::Ident(var) if !self.scopes.iter().any(|(n, _)| n == var) => {
                            field(var, &s.field).unwrap_or_else(|| operand.shape.element())
                        }
                        _ => operand.shape.element(),
                    }
                };
                Est {
                    cost: operand.cost.saturating_add(1),
                    shape,
                }
            }
            Expr::List(l) => {
                let mut e = self.entries(l.elements.iter(), l.elements.len());
                e.shape.kind = Kind::List;
                e
            }
            Expr::Map(m) => self.entries(
                m.entries.iter().flat_map(|en| match &en.expr {
                    EntryExpr::MapEntry(me) => vec![&me.key, &me.value],
                    EntryExpr::StructField(f) => vec![&f.value],
                }),
                m.entries.len(),
            ),
            Expr::Struct(st) => self.entries(
                st.entries.iter().flat_map(|en| match &en.expr {
                    EntryExpr::MapEntry(me) => vec![&me.key, &me.value],
                    EntryExpr::StructField(f) => vec![&f.value],
                }),
                st.entries.len(),
            ),
            Expr::Call(c) => {
                let target = c.target.as_deref().map(|t| self.walk(t));
                let args: Vec<Est> = c.args.iter().map(|a| self.walk(a)).collect();
                self.call(&c.func_name, target, &args, c)
            }
            Expr::Comprehension(c) => {
                let range = self.walk(&c.iter_range);
                let init = self.walk(&c.accu_init);
                // The largest number of iterations: the range's length.
                let n = range.shape.len;
                let depth = self.scopes.len();
                let elem = range.shape.element();
                self.scopes.push((c.iter_var.clone(), elem));
                if let Some(v2) = &c.iter_var2 {
                    self.scopes.push((v2.clone(), elem));
                }
                // The step is walked once, with the accumulator as it
                // starts: the macros' steps (`@result && p`, `@result ||
                // p`, `c ? @result + 1 : @result`, `@result + [x]`, appended
                // in place) cost the same whatever the accumulator holds.
                // What one step adds to it (a `map` or `filter` appends one
                // element) is extrapolated to n steps for the result.
                let a0 = init.shape;
                self.scopes.push((c.accu_var.clone(), a0));
                let step = self.walk(&c.loop_step);
                let first = step.shape;
                let accu = Shape {
                    kind: first.join(a0).kind,
                    len: a0
                        .len
                        .saturating_add(n.saturating_mul(first.len.saturating_sub(a0.len))),
                    inner: a0.inner.max(first.inner),
                    total: a0
                        .total
                        .saturating_add(n.saturating_mul(first.total.saturating_sub(a0.total))),
                    elem_total: a0.elem_total.max(first.elem_total),
                };
                self.scopes.pop();
                self.scopes.push((c.accu_var.clone(), accu));
                let cond = self.walk(&c.loop_cond);
                let result = self.walk(&c.result);
                self.scopes.truncate(depth);
                let per = cond.cost.saturating_add(step.cost).saturating_add(1);
                Est {
                    cost: range
                        .cost
                        .saturating_add(init.cost)
                        .saturating_add(n.saturating_mul(per))
                        .saturating_add(result.cost)
                        .saturating_add(1),
                    shape: result.shape,
                }
            }
        }
    }

    fn entries<'a>(&mut self, xs: impl Iterator<Item = &'a IdedExpr>, n: usize) -> Est {
        let mut cost = 1u64;
        let mut inner = 0u64;
        let mut total = n as u64;
        let mut elem_total = 0u64;
        for x in xs {
            let x = self.walk(x);
            cost = cost.saturating_add(x.cost).saturating_add(1);
            inner = inner.max(x.shape.len).max(x.shape.inner);
            total = total.saturating_add(x.shape.total);
            elem_total = elem_total.max(x.shape.total);
        }
        Est {
            cost,
            shape: Shape {
                kind: Kind::Map,
                len: n as u64,
                inner,
                total,
                elem_total,
            },
        }
    }

    /// A call: the cost of its operands, one unit, and the work the function
    /// does on them.
    fn call(
        &self,
        name: &str,
        target: Option<Est>,
        args: &[Est],
        c: &cel::common::ast::CallExpr,
    ) -> Est {
        let all: Vec<Shape> = target.iter().chain(args).map(|e| e.shape).collect();
        let operands = target
            .iter()
            .chain(args)
            .fold(1u64, |t, e| t.saturating_add(e.cost));
        let first = all.first().copied().unwrap_or(Shape::SCALAR);
        let second = all.get(1).copied().unwrap_or(Shape::SCALAR);
        let (work, shape) = match name {
            operators::CONDITIONAL if args.len() == 3 => {
                // The condition, and the dearer branch.
                let cost = args[0]
                    .cost
                    .saturating_add(args[1].cost.max(args[2].cost))
                    .saturating_add(1);
                return Est {
                    cost,
                    shape: args[1].shape.join(args[2].shape),
                };
            }
            operators::LOGICAL_AND
            | operators::LOGICAL_OR
            | operators::LOGICAL_NOT
            | operators::NOT_STRICTLY_FALSE
            | operators::SUBSTRACT
            | operators::MULTIPLY
            | operators::DIVIDE
            | operators::MODULO
            | operators::NEGATE => (0, Shape::SCALAR),
            operators::EQUALS
            | operators::NOT_EQUALS
            | operators::LESS
            | operators::LESS_EQUALS
            | operators::GREATER
            | operators::GREATER_EQUALS => {
                // Compares until the smaller side ends.
                let smaller = if first.total <= second.total {
                    first
                } else {
                    second
                };
                (traverse(smaller), Shape::SCALAR)
            }
            operators::ADD => {
                // `@result + [x]` in a map/filter step appends in place
                // (cel-rust's AppendStep); any other `+` copies both sides.
                let appends = matches!(
                    c.args.first().map(|a| &a.expr),
                    Some(Expr::Ident(n)) if self.is_accu(n)
                );
                let shape = first.concat(second);
                let work = if appends || shape.kind == Kind::Scalar {
                    0
                } else {
                    traverse(shape)
                };
                (work, shape)
            }
            operators::INDEX | operators::OPT_INDEX | operators::OPT_SELECT => {
                (traverse(second), first.element())
            }
            operators::IN => {
                // A hash lookup in a map, a scan of a list.
                let work = match second.kind {
                    Kind::Map => traverse(first),
                    _ => second.len.saturating_mul(traverse(first)),
                };
                (work, Shape::SCALAR)
            }
            "size" => {
                let work = match first.kind {
                    Kind::List | Kind::Map | Kind::Scalar => 0,
                    // Counts characters.
                    Kind::Str | Kind::Any => traverse(first),
                };
                (work, Shape::SCALAR)
            }
            // A linear search (two-way) through the receiver.
            "contains" => (
                traverse(first).saturating_add(traverse(second)),
                Shape::SCALAR,
            ),
            // Compares the prefix or suffix only.
            "startsWith" | "endsWith" => (
                traverse(if first.total <= second.total {
                    first
                } else {
                    second
                }),
                Shape::SCALAR,
            ),
            "matches" => {
                // Compiling the pattern, then a scan of at worst input ×
                // pattern. A literal pattern is checked against
                // [`REGEX_SIZE_MAX`] when the expression is compiled; one
                // computed at run time is charged the regex crate's
                // default compile limit.
                let (input, pattern) = (first, second);
                let pattern_expr = if c.target.is_some() {
                    c.args.first()
                } else {
                    c.args.get(1)
                };
                let literal = matches!(
                    pattern_expr.map(|p| &p.expr),
                    Some(Expr::Literal(LiteralValue::String(_)))
                );
                let compile = if literal {
                    pattern.len
                } else {
                    DYNAMIC_PATTERN_COST
                };
                (
                    traverse(input)
                        .saturating_mul(pattern.len.saturating_add(1))
                        .saturating_add(compile),
                    Shape::SCALAR,
                )
            }
            "string" | "bytes" => (
                traverse(first),
                Shape::string(first.total.saturating_mul(2).max(32)),
            ),
            "dyn" => (0, first),
            _ => {
                // Conversions, timestamp accessors, `duration()`,
                // `timestamp()`, optional helpers: at most one pass over
                // their operands; the result no larger than they are.
                let work = all.iter().fold(0u64, |t, s| t.saturating_add(traverse(*s)));
                let shape = all.iter().copied().fold(Shape::SCALAR, Shape::join);
                (work, shape)
            }
        };
        Est {
            cost: operands.saturating_add(work),
            shape,
        }
    }
}

/// The shape of a variable of the evaluation context.
fn free_var(name: &str) -> Shape {
    let fields: &[&str] = match name {
        "fault" => &super::views::FAULT_FIELDS,
        "job" => &super::views::JOB_FIELDS,
        "node" => &super::views::NODE_FIELDS,
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
fn field(var: &str, field: &str) -> Option<Shape> {
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
            len: super::MAX_LIST as u64,
            inner: FAULT_STRING_MAX,
            total: (super::MAX_LIST as u64) * (FAULT_STRING_MAX + 1),
            elem_total: FAULT_STRING_MAX,
        },
        _ => return None,
    })
}
