//! Free variables of a compiled CEL program, honouring the scopes that
//! comprehension macros open (`list.exists(f, f == "79")` binds `f`), so
//! unknown variables are rejected at compile time without rejecting macros.

use cel::IdedExpr;
use cel::common::ast::{EntryExpr, Expr};
use std::collections::BTreeSet;

/// Identifiers read but not bound by an enclosing comprehension.
pub fn free_vars(e: &IdedExpr) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    walk(e, &mut Vec::new(), &mut out);
    out
}

/// Fields selected directly on a free variable (`job.restarts`, also in
/// `has(job.restarts)`), as `(variable, field)`: the shapes of `fault`,
/// `job` and `node` are known, so a misspelt field is rejected when the
/// object is compiled, not found when a fault is evaluated.
pub fn selected_fields(e: &IdedExpr) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    fields(e, &mut Vec::new(), &mut out);
    out
}

fn fields(e: &IdedExpr, bound: &mut Vec<String>, out: &mut BTreeSet<(String, String)>) {
    match &e.expr {
        Expr::Unspecified | Expr::Literal(_) | Expr::Ident(_) => {}
        Expr::Select(s) => {
            if let Expr::Ident(name) = &s.operand.expr
                && !bound.iter().any(|b| b == name)
            {
                out.insert((name.clone(), s.field.clone()));
            }
            fields(&s.operand, bound, out);
        }
        Expr::Call(c) => {
            if let Some(t) = &c.target {
                fields(t, bound, out);
            }
            for a in &c.args {
                fields(a, bound, out);
            }
        }
        Expr::List(l) => l.elements.iter().for_each(|x| fields(x, bound, out)),
        Expr::Map(m) => {
            for en in &m.entries {
                if let EntryExpr::MapEntry(me) = &en.expr {
                    fields(&me.key, bound, out);
                    fields(&me.value, bound, out);
                }
            }
        }
        Expr::Struct(st) => {
            for en in &st.entries {
                if let EntryExpr::StructField(f) = &en.expr {
                    fields(&f.value, bound, out);
                }
            }
        }
        Expr::Comprehension(c) => {
            fields(&c.iter_range, bound, out);
            fields(&c.accu_init, bound, out);
            let depth = bound.len();
            bound.push(c.iter_var.clone());
            if let Some(v2) = &c.iter_var2 {
                bound.push(v2.clone());
            }
            bound.push(c.accu_var.clone());
            fields(&c.loop_cond, bound, out);
            fields(&c.loop_step, bound, out);
            fields(&c.result, bound, out);
            bound.truncate(depth);
        }
    }
}

fn walk(e: &IdedExpr, bound: &mut Vec<String>, out: &mut BTreeSet<String>) {
    match &e.expr {
        Expr::Unspecified | Expr::Literal(_) => {}
        Expr::Ident(name) => {
            if !bound.iter().any(|b| b == name) {
                out.insert(name.clone());
            }
        }
        Expr::Call(c) => {
            if let Some(t) = &c.target {
                walk(t, bound, out);
            }
            for a in &c.args {
                walk(a, bound, out);
            }
        }
        Expr::Select(s) => walk(&s.operand, bound, out),
        Expr::List(l) => l.elements.iter().for_each(|x| walk(x, bound, out)),
        Expr::Map(m) => entries(&m.entries, bound, out),
        Expr::Struct(s) => entries(&s.entries, bound, out),
        Expr::Comprehension(c) => {
            walk(&c.iter_range, bound, out);
            walk(&c.accu_init, bound, out);
            let depth = bound.len();
            bound.push(c.iter_var.clone());
            if let Some(v2) = &c.iter_var2 {
                bound.push(v2.clone());
            }
            bound.push(c.accu_var.clone());
            walk(&c.loop_cond, bound, out);
            walk(&c.loop_step, bound, out);
            walk(&c.result, bound, out);
            bound.truncate(depth);
        }
    }
}

fn entries(
    es: &[cel::common::ast::IdedEntryExpr],
    bound: &mut Vec<String>,
    out: &mut BTreeSet<String>,
) {
    for en in es {
        match &en.expr {
            EntryExpr::StructField(f) => walk(&f.value, bound, out),
            EntryExpr::MapEntry(m) => {
                walk(&m.key, bound, out);
                walk(&m.value, bound, out);
            }
        }
    }
}
