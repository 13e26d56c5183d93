//! Bounds on what a selector may cost, checked once when it is compiled,
//! because the `cel` crate has no runtime cost limit and device selectors
//! come from cluster files and API objects (hostile input).
//!
//! Upstream stops a selector at a runtime cost of 1,000,000
//! (`CELSelectorExpressionMaxCost`) with "operation cancelled: actual cost
//! limit exceeded". rkube computes an upper bound of that cost from the
//! expression alone: every node costs 1, and a comprehension (the macros
//! `all`, `exists`, `map`, `filter`, ...) costs its range's size times its
//! body. A range's size is known for list and map literals, `split` of a
//! string literal and `lists.range` of an int literal; anything drawn from
//! the device is at most [`DEVICE_BOUND`] (a device has at most 32
//! attributes and 32 capacities, strings at most 64 characters); any other
//! list at most [`LIST_BOUND`] (what a 10 KiB expression can spell).
//! `lists.range` of anything but a literal is unbounded. A selector whose
//! bound passes the limit fails with upstream's error when evaluated.
//!
//! The parser and the evaluator recurse on the expression's nesting; past
//! [`MAX_OPERATORS`] operator characters an expression is refused before
//! it is parsed, so no selector can exhaust a thread's stack.

use cel::common::ast::{Expr, LiteralValue};
use cel::IdedExpr;

/// Upstream's runtime cost limit.
pub const MAX_COST: u64 = 1_000_000;
/// Size of anything drawn from the device.
pub const DEVICE_BOUND: u64 = 64;
/// Size of any list whose size is not known otherwise.
pub const LIST_BOUND: u64 = 10 * 1024;
/// Operator characters (outside string literals) an expression may have.
pub const MAX_OPERATORS: usize = 500;

/// Counts operator and bracket characters outside string literals.
pub fn operator_count(src: &str) -> usize {
    let mut n = 0;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in src.chars() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '"' | '\'' => quote = Some(c),
            '+' | '-' | '*' | '/' | '%' | '!' | '<' | '>' | '=' | '&' | '|' | '?' | '.' | '('
            | '[' | '{' => n += 1,
            _ => {}
        }
    }
    n
}

fn rooted_at_device(e: &IdedExpr) -> bool {
    match &e.expr {
        Expr::Ident(n) => n == "device",
        Expr::Select(s) => rooted_at_device(&s.operand),
        Expr::Call(c) if c.func_name == "_[_]" => c.args.first().is_some_and(rooted_at_device),
        _ => false,
    }
}

fn is_lists_range(c: &cel::common::ast::CallExpr) -> bool {
    c.func_name == "lists.range"
        || (c.func_name == "range"
            && matches!(c.target.as_deref().map(|t| &t.expr), Some(Expr::Ident(n)) if n == "lists"))
}

fn int_literal(e: &IdedExpr) -> Option<u64> {
    match &e.expr {
        Expr::Literal(LiteralValue::Int(i)) => u64::try_from(*i.inner()).ok(),
        Expr::Literal(LiteralValue::UInt(u)) => Some(*u.inner()),
        _ => None,
    }
}

/// An upper bound of the number of elements `e` evaluates to.
fn size(e: &IdedExpr) -> u64 {
    if rooted_at_device(e) {
        return DEVICE_BOUND;
    }
    match &e.expr {
        Expr::List(l) => l.elements.len() as u64,
        Expr::Map(m) => m.entries.len() as u64,
        Expr::Literal(LiteralValue::String(s)) => s.inner().len() as u64 + 1,
        Expr::Call(c) if is_lists_range(c) => {
            c.args.first().and_then(int_literal).unwrap_or(u64::MAX)
        }
        Expr::Call(c) => match c.func_name.as_str() {
            "split" => c.target.as_deref().map_or(LIST_BOUND, |t| match &t.expr {
                Expr::Literal(LiteralValue::String(s)) => s.inner().len() as u64 + 1,
                _ => DEVICE_BOUND,
            }),
            "_+_" => c.args.iter().map(size).fold(0u64, u64::saturating_add),
            _ => LIST_BOUND,
        },
        // map and filter keep at most their range's elements.
        Expr::Comprehension(c) => size(&c.iter_range),
        _ => LIST_BOUND,
    }
}

/// An upper bound of the cost of evaluating `e`.
pub fn cost(e: &IdedExpr) -> u64 {
    match &e.expr {
        Expr::Unspecified | Expr::Ident(_) | Expr::Literal(_) => 1,
        Expr::Select(s) => cost(&s.operand).saturating_add(1),
        Expr::List(l) => l.elements.iter().map(cost).fold(1, u64::saturating_add),
        Expr::Map(m) => m
            .entries
            .iter()
            .map(|en| match &en.expr {
                cel::common::ast::EntryExpr::MapEntry(me) => {
                    cost(&me.key).saturating_add(cost(&me.value))
                }
                cel::common::ast::EntryExpr::StructField(f) => cost(&f.value),
            })
            .fold(1, u64::saturating_add),
        Expr::Struct(s) => s
            .entries
            .iter()
            .map(|en| match &en.expr {
                cel::common::ast::EntryExpr::MapEntry(me) => {
                    cost(&me.key).saturating_add(cost(&me.value))
                }
                cel::common::ast::EntryExpr::StructField(f) => cost(&f.value),
            })
            .fold(1, u64::saturating_add),
        Expr::Call(c) => {
            // lists.range builds the list it returns.
            let own = if is_lists_range(c) {
                c.args.first().and_then(int_literal).unwrap_or(u64::MAX)
            } else {
                1
            };
            c.args
                .iter()
                .chain(c.target.as_deref())
                .map(cost)
                .fold(own, u64::saturating_add)
        }
        Expr::Comprehension(c) => {
            let n = size(&c.iter_range);
            let body = cost(&c.loop_cond).saturating_add(cost(&c.loop_step));
            cost(&c.iter_range)
                .saturating_add(cost(&c.accu_init))
                .saturating_add(n.saturating_mul(body))
                .saturating_add(cost(&c.result))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound(src: &str) -> u64 {
        let env = cel::Env::stdlib();
        cost(env.compile(src).unwrap().expression())
    }

    #[test]
    fn ordinary_selectors_are_cheap() {
        assert!(bound(r#"device.driver == "gpu.example.com""#) < 10);
        assert!(bound(r#"device.attributes["d"].names.all(x, x in ["a", "b"])"#) < 1_000);
        assert!(bound(r#"[1, 2, 3].exists(i, [4, 5].exists(j, i == j))"#) < 100);
    }

    #[test]
    fn nested_iteration_over_big_lists_is_bounded_high() {
        let big: Vec<String> = (0..1000).map(|i| i.to_string()).collect();
        let l = format!("[{}]", big.join(","));
        assert!(bound(&format!("{l}.all(x, {l}.all(y, x != y))")) > MAX_COST);
        assert!(bound("lists.range(100000000).size() > 0") > MAX_COST);
        assert_eq!(
            bound("lists.range(device.attributes['d'].n).size() > 0"),
            u64::MAX
        );
    }

    #[test]
    fn operators_inside_strings_do_not_count() {
        assert_eq!(operator_count(r#"device.driver == "a.b.c+++""#), 3);
        assert_eq!(operator_count(r#"'it\'s' + "x""#), 1);
    }
}
