//! The walk over a parsed expression that sums its worst-case cost: one
//! unit a node, comprehensions multiplied by their range's largest size,
//! size-proportional work by [`traverse`]. The sizes come from [`shape`](super::shape).

use cel::IdedExpr;
use cel::common::ast::{EntryExpr, Expr, LiteralValue, operators};

use super::DYNAMIC_PATTERN_COST;
use super::shape::{Kind, Shape, field, free_var, traverse};

/// An estimate: worst-case cost and the shape of the result.
#[derive(Clone, Copy, Debug)]
struct Est {
    cost: u64,
    shape: Shape,
}

/// The worst-case cost of evaluating `e` once, in units (see [`MAX_COST`](super::MAX_COST)).
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
