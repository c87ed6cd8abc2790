//! The operators on values: comparisons, arithmetic and aggregates, as
//! the module docs of `eval` define them.

use regex::Regex;

use super::Val;
use crate::ast::{Aggregate, ArithOp, CmpOp};

/// `l op r`: see `eval`'s module docs. `regex` is the compiled pattern of `r`
/// for `=~` and `!~`.
pub(super) fn compare(
    l: &Val<'_>,
    op: CmpOp,
    r: &Val<'_>,
    regex: Option<&Regex>,
    strict: bool,
) -> bool {
    if let Val::Many(ls) = l {
        return ls.iter().any(|l| compare(l, op, r, regex, strict));
    }
    if let Val::Many(rs) = r {
        return rs.iter().any(|r| compare(l, op, r, regex, strict));
    }
    if strict
        && matches!(
            (l, r),
            (Val::Int(_), Val::Float(_)) | (Val::Float(_), Val::Int(_))
        )
    {
        return false;
    }
    use std::cmp::Ordering;
    let ord: Option<Ordering> = match (l, r) {
        (Val::Str(a), Val::Str(b)) => {
            if let (CmpOp::Match | CmpOp::NotMatch, Some(re)) = (op, regex) {
                return re.is_match(a) == (op == CmpOp::Match);
            }
            Some(a.cmp(b))
        }
        (Val::Int(a), Val::Int(b)) | (Val::Dur(a), Val::Dur(b)) => Some(a.cmp(b)),
        (Val::Bool(a), Val::Bool(b)) => {
            return match op {
                CmpOp::Eq => a == b,
                CmpOp::Ne => a != b,
                _ => false,
            }
        }
        (Val::Status(a), Val::Status(b)) => {
            return match op {
                CmpOp::Eq => a == b,
                CmpOp::Ne => a != b,
                _ => false,
            }
        }
        (Val::Kind(a), Val::Kind(b)) => {
            return match op {
                CmpOp::Eq => a == b,
                CmpOp::Ne => a != b,
                _ => false,
            }
        }
        _ => match (l.number(), r.number()) {
            (Some(a), Some(b)) => a.partial_cmp(&b),
            _ => None,
        },
    };
    let Some(ord) = ord else {
        return false;
    };
    match op {
        CmpOp::Eq => ord == Ordering::Equal,
        CmpOp::Ne => ord != Ordering::Equal,
        CmpOp::Gt => ord == Ordering::Greater,
        CmpOp::Ge => ord != Ordering::Less,
        CmpOp::Lt => ord == Ordering::Less,
        CmpOp::Le => ord != Ordering::Greater,
        CmpOp::Match | CmpOp::NotMatch => false,
    }
}

pub(super) fn arith<'a>(op: ArithOp, l: &Val<'a>, r: &Val<'a>) -> Val<'static> {
    match (l, r) {
        (Val::Int(a), Val::Int(b)) => match op {
            ArithOp::Add => Val::Int(a.wrapping_add(*b)),
            ArithOp::Sub => Val::Int(a.wrapping_sub(*b)),
            ArithOp::Mul => Val::Int(a.wrapping_mul(*b)),
            ArithOp::Div if *b != 0 => Val::Int(a.wrapping_div(*b)),
            ArithOp::Mod if *b != 0 => Val::Int(a.wrapping_rem(*b)),
            ArithOp::Pow => Val::Float((*a as f64).powf(*b as f64)),
            ArithOp::Div | ArithOp::Mod => Val::Nil,
        },
        (Val::Dur(a), Val::Dur(b)) => match op {
            ArithOp::Add => Val::Dur(a.wrapping_add(*b)),
            ArithOp::Sub => Val::Dur(a.wrapping_sub(*b)),
            _ => float_arith(op, *a as f64, *b as f64),
        },
        (Val::Dur(a), other) | (other, Val::Dur(a))
            if matches!(op, ArithOp::Mul | ArithOp::Div) && other.number().is_some() =>
        {
            let (x, y) = (*a as f64, other.number().unwrap_or(0.0));
            match (op, l) {
                (ArithOp::Mul, _) => Val::Dur((x * y) as i64),
                (ArithOp::Div, Val::Dur(_)) if y != 0.0 => Val::Dur((x / y) as i64),
                _ => Val::Nil,
            }
        }
        _ => match (l.number(), r.number()) {
            (Some(a), Some(b)) => float_arith(op, a, b),
            _ => Val::Nil,
        },
    }
}

fn float_arith(op: ArithOp, a: f64, b: f64) -> Val<'static> {
    let v = match op {
        ArithOp::Add => a + b,
        ArithOp::Sub => a - b,
        ArithOp::Mul => a * b,
        ArithOp::Div => a / b,
        ArithOp::Mod => a % b,
        ArithOp::Pow => a.powf(b),
    };
    if v.is_finite() {
        Val::Float(v)
    } else {
        Val::Nil
    }
}

/// `agg` over the values of a spanset's spans that have one (nil when none
/// has): the first value's type decides. A sum adds the values of that type
/// (skipping others); a mean divides that sum by the count of every value
/// (an int sum gives a float, a duration sum a duration); a sum or mean of
/// another type is the first value itself. Min and max compare numbers.
pub(super) fn aggregate<'a>(agg: Aggregate, values: &[Val<'a>]) -> Val<'a> {
    let values: Vec<&Val<'a>> = values.iter().filter(|v| **v != Val::Nil).collect();
    let Some(first) = values.first() else {
        return Val::Nil;
    };
    let pick = |better: fn(f64, f64) -> bool| -> Val<'a> {
        let mut best: Option<&Val<'a>> = None;
        for v in &values {
            let (Some(n), Some(b)) = (v.number(), best.and_then(Val::number).or(v.number())) else {
                continue;
            };
            if best.is_none() || better(n, b) {
                best = Some(v);
            }
        }
        best.cloned().unwrap_or(Val::Nil)
    };
    let sum = || -> Val<'a> {
        match first {
            Val::Int(_) => Val::Int(values.iter().fold(0i64, |acc, v| match v {
                Val::Int(i) => acc.wrapping_add(*i),
                _ => acc,
            })),
            Val::Dur(_) => Val::Dur(values.iter().fold(0i64, |acc, v| match v {
                Val::Dur(d) => acc.wrapping_add(*d),
                _ => acc,
            })),
            Val::Float(_) => Val::Float(
                values
                    .iter()
                    .map(|v| match v {
                        Val::Float(f) => *f,
                        _ => 0.0,
                    })
                    .sum(),
            ),
            other => (*other).clone(),
        }
    };
    let count = values.len() as i64;
    match agg {
        Aggregate::Min => pick(|a, b| a < b),
        Aggregate::Max => pick(|a, b| a > b),
        Aggregate::Sum => sum(),
        Aggregate::Avg => match sum() {
            Val::Int(total) => Val::Float(total as f64 / count as f64),
            Val::Dur(total) => Val::Dur(total / count),
            Val::Float(total) => Val::Float(total / count as f64),
            other => other,
        },
    }
}
