//! Binary operators on elements of which at least one is a native histogram, with Prometheus
//! 3.x's semantics (`vectorElemBinop` in its `engine.go`): histogram `+`/`-` histogram,
//! histogram `*` float (either side), histogram `/` float, histogram `</`/`>/` float (the
//! trims), and `==`/`!=` between histograms; every other combination drops the pair with an
//! info naming the operand types (for the trims also float with float).

use std::sync::Arc;

use super::binary_op::Op;
use super::context::Context;
use super::native_rollup::note;
use crate::histogram::{CounterResetHint, Histogram, Trim};

/// One operand: a float, or a histogram (then the float is not used).
pub(crate) type Operand<'a> = (f64, Option<&'a Arc<Histogram>>);

/// What one pair of operands gives.
#[derive(Clone, Debug)]
pub(crate) enum Outcome {
    /// A value: a float, or a histogram when set.
    Value(f64, Option<Arc<Histogram>>),
    /// A comparison that does not hold (with `bool`: 0).
    Filtered,
    /// No result at all (an annotation says why).
    Dropped,
}

/// `l op r` where at least one side is a histogram (or, for a trim, both are floats).
pub(crate) fn combine(cx: &dyn Context, op: Op, l: Operand<'_>, r: Operand<'_>) -> Outcome {
    let incompatible = |lt: &str, rt: &str| {
        let sym = op.symbol();
        cx.info(format!("incompatible sample types encountered for binary operator {sym:?}: {lt} {sym} {rt}"));
        Outcome::Dropped
    };
    let scaled = |h: &Histogram, f: &dyn Fn(&mut Histogram)| {
        let mut h = h.clone();
        f(&mut h);
        h.compact(0);
        Outcome::Value(0.0, Some(Arc::new(h)))
    };
    match (l, r) {
        ((lf, None), (_, Some(hr))) => match op {
            Op::Mul => scaled(hr, &|h| h.mul(lf)),
            _ => incompatible("float", "histogram"),
        },
        ((_, Some(hl)), (rf, None)) => match op {
            Op::Mul => scaled(hl, &|h| h.mul(rf)),
            Op::Div => scaled(hl, &|h| h.div(rf)),
            Op::TrimUpper | Op::TrimLower => {
                let mut h = Histogram::clone(hl);
                h.trim(rf, if op == Op::TrimUpper { Trim::Upper } else { Trim::Lower });
                Outcome::Value(0.0, Some(Arc::new(h)))
            }
            _ => incompatible("histogram", "float"),
        },
        ((_, Some(hl)), (_, Some(hr))) => match op {
            Op::Add | Op::Sub => add_or_sub(cx, op, hl, hr),
            Op::Eq | Op::Ne => {
                if hl.equals(hr) == (op == Op::Eq) {
                    Outcome::Value(0.0, Some(Arc::clone(hl)))
                } else {
                    Outcome::Filtered
                }
            }
            _ => incompatible("histogram", "histogram"),
        },
        ((_, None), (_, None)) if op.is_trim() => incompatible("float", "float"),
        ((_, None), (_, None)) => Outcome::Dropped,
    }
}

fn add_or_sub(cx: &dyn Context, op: Op, hl: &Histogram, hr: &Histogram) -> Outcome {
    let mut res = hl.clone();
    let (combined, operation) = if op == Op::Add { (res.add(hr), "addition") } else { (res.sub(hr), "subtraction") };
    let Ok(c) = combined else {
        cx.warn(format!("incompatible bucket layout encountered for binary operator {}", op.symbol()));
        return Outcome::Dropped;
    };
    if op == Op::Sub {
        res.counter_reset_hint = CounterResetHint::Gauge;
    }
    if c.counter_reset_collision {
        cx.warn(note::counter_reset_collision(operation));
    }
    if c.custom_bounds_reconciled {
        cx.info(note::reconciled_custom_buckets(operation));
    }
    res.compact(0);
    Outcome::Value(0.0, Some(Arc::new(res)))
}
