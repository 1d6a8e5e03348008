//! The literal `matches` patterns of an expression, so that compiling can
//! check each regex (and its size) once, apart from the cost walk.

use cel::IdedExpr;
use cel::common::ast::{EntryExpr, Expr, LiteralValue};

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
