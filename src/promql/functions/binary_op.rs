//! Binary operators: arithmetic, comparisons (with `bool`), the set operators and the histogram
//! trims (`</`, `>/`, see `promql/trim.rs`), between scalars and vectors, with `on`/`ignoring`
//! and `group_left`/`group_right` matching. Registry: [`Op::from_name`].

use std::collections::{HashMap, HashSet};

use promql_parser::parser::{BinModifier, LabelModifier, VectorMatchCardinality};

use super::context::Context;
use super::native_binop::{self, Outcome};
use crate::histogram::Trim;
use crate::labels::{Labels, METRIC_NAME};
use crate::promql::error::{EvalError, Result};
use crate::promql::value::{project, with_label, Elem, StepValue};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Pow,
    Atan2,
    Eq,
    Ne,
    Gt,
    Lt,
    Ge,
    Le,
    And,
    Or,
    Unless,
    /// `</`: the observations of a histogram below a float.
    TrimUpper,
    /// `>/`: the observations of a histogram above a float.
    TrimLower,
}

impl Op {
    pub(crate) fn from_name(name: &str) -> Option<Self> {
        use Op::*;
        Some(match name {
            "+" => Add,
            "-" => Sub,
            "*" => Mul,
            "/" => Div,
            "%" => Mod,
            "^" => Pow,
            "atan2" => Atan2,
            "==" => Eq,
            "!=" => Ne,
            ">" => Gt,
            "<" => Lt,
            ">=" => Ge,
            "<=" => Le,
            "and" => And,
            "or" => Or,
            "unless" => Unless,
            _ => return None,
        })
    }

    /// The operator as written.
    pub(crate) fn symbol(self) -> &'static str {
        use Op::*;
        match self {
            Add => "+",
            Sub => "-",
            Mul => "*",
            Div => "/",
            Mod => "%",
            Pow => "^",
            Atan2 => "atan2",
            Eq => "==",
            Ne => "!=",
            Gt => ">",
            Lt => "<",
            Ge => ">=",
            Le => "<=",
            And => "and",
            Or => "or",
            Unless => "unless",
            TrimUpper => "</",
            TrimLower => ">/",
        }
    }

    /// The histogram trims, which the crate parses as marked comparisons (`promql/trim.rs`).
    pub(crate) fn of_trim(t: Trim) -> Self {
        match t {
            Trim::Upper => Op::TrimUpper,
            Trim::Lower => Op::TrimLower,
        }
    }

    pub(crate) fn is_trim(self) -> bool {
        matches!(self, Op::TrimUpper | Op::TrimLower)
    }

    /// Whether the result is no longer of the operand's metric (Prometheus'
    /// `changesMetricSchema`): arithmetic drops the metric name, comparisons and trims keep it.
    fn changes_schema(self) -> bool {
        !self.is_comparison() && !self.is_trim() && !self.is_set()
    }

    fn is_comparison(self) -> bool {
        matches!(self, Op::Eq | Op::Ne | Op::Gt | Op::Lt | Op::Ge | Op::Le)
    }

    fn is_set(self) -> bool {
        matches!(self, Op::And | Op::Or | Op::Unless)
    }
}

/// Applies `op` to two floats. For comparisons, returns the left value when the comparison
/// holds and `None` otherwise.
pub(crate) fn apply(op: Op, l: f64, r: f64) -> Option<f64> {
    let cmp = |c: bool| if c { Some(l) } else { None };
    match op {
        Op::Add => Some(l + r),
        Op::Sub => Some(l - r),
        Op::Mul => Some(l * r),
        Op::Div => Some(l / r),
        Op::Mod => Some(l % r),
        Op::Pow => Some(l.powf(r)),
        Op::Atan2 => Some(l.atan2(r)),
        Op::Eq => cmp(l == r),
        Op::Ne => cmp(l != r),
        Op::Gt => cmp(l > r),
        Op::Lt => cmp(l < r),
        Op::Ge => cmp(l >= r),
        Op::Le => cmp(l <= r),
        Op::And | Op::Or | Op::Unless | Op::TrimUpper | Op::TrimLower => None,
    }
}

/// `lhs op rhs`, with the matching and `bool` modifier `m`, of the evaluated operands.
pub(crate) fn operate(
    cx: &dyn Context,
    op: Op,
    m: Option<&BinModifier>,
    lhs: StepValue,
    rhs: StepValue,
) -> Result<StepValue> {
    let return_bool = m.is_some_and(|m| m.return_bool);
    match (lhs, rhs) {
        (StepValue::Scalar(_), StepValue::Scalar(_)) if op.is_trim() => {
            Err(EvalError::exec(format!("operator {:?} not allowed for Scalar operations", op.symbol())))
        }
        (StepValue::Scalar(l), StepValue::Scalar(r)) => Ok(StepValue::Scalar(scalar_op(op, l, r, return_bool))),
        (StepValue::Vector(v), StepValue::Scalar(s)) => {
            Ok(StepValue::Vector(vector_scalar(cx, op, v, s, false, return_bool)))
        }
        (StepValue::Scalar(s), StepValue::Vector(v)) => {
            Ok(StepValue::Vector(vector_scalar(cx, op, v, s, true, return_bool)))
        }
        (StepValue::Vector(l), StepValue::Vector(r)) => {
            if op.is_set() {
                Ok(StepValue::Vector(set_op(op, l, r, m)))
            } else {
                Ok(StepValue::Vector(vector_vector(cx, op, l, r, m)?))
            }
        }
        (l, r) => Err(EvalError::bad(format!(
            "binary expression must contain only scalar and instant vector types, got {} and {}",
            l.type_name(),
            r.type_name()
        ))),
    }
}

fn scalar_op(op: Op, l: f64, r: f64, return_bool: bool) -> f64 {
    if op.is_comparison() {
        let hit = apply(op, l, r).is_some();
        if return_bool {
            return if hit { 1.0 } else { 0.0 };
        }
        return if hit { l } else { f64::NAN };
    }
    apply(op, l, r).unwrap_or(f64::NAN)
}

fn vector_scalar(cx: &dyn Context, op: Op, v: Vec<Elem>, s: f64, swap: bool, return_bool: bool) -> Vec<Elem> {
    let mut out = Vec::with_capacity(v.len());
    for e in v {
        if e.hist.is_some() || op.is_trim() {
            let (l, r) =
                if swap { ((s, None), (e.value, e.hist.as_ref())) } else { ((e.value, e.hist.as_ref()), (s, None)) };
            if let Some(x) = paired(native_binop::combine(cx, op, l, r), return_bool) {
                let drop_name = op.changes_schema() || return_bool || e.drop_name;
                out.push(Elem { labels: e.labels, value: x.0, drop_name, hist: x.1 });
            }
            continue;
        }
        let (l, r) = if swap { (s, e.value) } else { (e.value, s) };
        let res = apply(op, l, r);
        if op.is_comparison() {
            match (return_bool, res) {
                (true, hit) => out.push(Elem::new(e.labels, if hit.is_some() { 1.0 } else { 0.0 }, true)),
                (false, Some(_)) => out.push(e),
                (false, None) => {}
            }
        } else if let Some(x) = res {
            out.push(Elem::new(e.labels, x, true));
        }
    }
    out
}

/// Which labels decide whether two elements match.
struct Matching<'a> {
    on: bool,
    names: &'a [String],
}

impl<'a> Matching<'a> {
    fn of(m: Option<&'a BinModifier>) -> Self {
        match m.and_then(|m| m.matching.as_ref()) {
            Some(LabelModifier::Include(l)) => Matching { on: true, names: &l.labels },
            Some(LabelModifier::Exclude(l)) => Matching { on: false, names: &l.labels },
            None => Matching { on: false, names: &[] },
        }
    }

    fn signature(&self, labels: &Labels) -> Labels {
        if self.on {
            project(labels, self.names, true)
        } else {
            let v = labels.iter().filter(|l| l.name != METRIC_NAME && !self.names.contains(&l.name)).cloned().collect();
            Labels::from_trusted(v)
        }
    }
}

fn set_op(op: Op, lhs: Vec<Elem>, rhs: Vec<Elem>, m: Option<&BinModifier>) -> Vec<Elem> {
    let matching = Matching::of(m);
    match op {
        Op::And => {
            let sigs: HashSet<Labels> = rhs.iter().map(|e| matching.signature(&e.labels)).collect();
            lhs.into_iter().filter(|e| sigs.contains(&matching.signature(&e.labels))).collect()
        }
        Op::Unless => {
            let sigs: HashSet<Labels> = rhs.iter().map(|e| matching.signature(&e.labels)).collect();
            lhs.into_iter().filter(|e| !sigs.contains(&matching.signature(&e.labels))).collect()
        }
        _ => {
            let sigs: HashSet<Labels> = lhs.iter().map(|e| matching.signature(&e.labels)).collect();
            let mut out = lhs;
            out.extend(rhs.into_iter().filter(|e| !sigs.contains(&matching.signature(&e.labels))));
            out
        }
    }
}

/// The element an [`Outcome`] gives (with `bool`, a kept or filtered comparison becomes 1 or 0).
fn paired(o: Outcome, return_bool: bool) -> Option<(f64, Option<std::sync::Arc<crate::histogram::Histogram>>)> {
    match (o, return_bool) {
        (Outcome::Value(..), true) => Some((1.0, None)),
        (Outcome::Filtered, true) => Some((0.0, None)),
        (Outcome::Value(v, h), false) => Some((v, h)),
        _ => None,
    }
}

fn vector_vector(
    cx: &dyn Context,
    op: Op,
    lhs: Vec<Elem>,
    rhs: Vec<Elem>,
    m: Option<&BinModifier>,
) -> Result<Vec<Elem>> {
    let matching = Matching::of(m);
    let return_bool = m.is_some_and(|m| m.return_bool);
    let empty = Vec::new();
    let (one_to_many, include) = match m.map(|m| &m.card) {
        Some(VectorMatchCardinality::ManyToOne(l)) => (false, Some(&l.labels)),
        Some(VectorMatchCardinality::OneToMany(l)) => (true, Some(&l.labels)),
        _ => (false, None),
    };
    let one_to_one = include.is_none();
    let include = include.unwrap_or(&empty);
    let (many, one) = if one_to_many { (rhs, lhs) } else { (lhs, rhs) };
    let fill = m.map(|m| (m.fill_values.lhs, m.fill_values.rhs)).unwrap_or((None, None));
    let mut one_sigs: HashMap<Labels, usize> = HashMap::with_capacity(one.len());
    for (i, e) in one.iter().enumerate() {
        let sig = matching.signature(&e.labels);
        if let Some(&j) = one_sigs.get(&sig) {
            let side = if one_to_many { "left" } else { "right" };
            // The two series in the order of their text, so the message does not depend on the
            // order they were read in (as Prometheus since prometheus#18810).
            let mut pair = [go_labels(&e.labels), one.get(j).map(|o| go_labels(&o.labels)).unwrap_or_default()];
            pair.sort_unstable();
            let [first, second] = pair;
            let sig = go_labels(&sig);
            return Err(EvalError::exec(format!(
                "found duplicate series for the match group {sig} on the {side} hand-side of the operation: [{first}, {second}];many-to-many matching not allowed: matching labels must be unique on one side"
            )));
        }
        one_sigs.insert(sig, i);
    }
    let mut matched: HashMap<Labels, HashSet<Labels>> = HashMap::new();
    let mut out = Vec::new();
    for ls in &many {
        let sig = matching.signature(&ls.labels);
        let Some(rs) = one_sigs.get(&sig).and_then(|&i| one.get(i)) else {
            continue;
        };
        // Cardinality is checked before comparisons filter anything out.
        let entry = matched.entry(sig).or_default();
        if one_to_one && !entry.is_empty() {
            return Err(EvalError::exec(
                "multiple matches for labels: many-to-one matching must be explicit (group_left/group_right)",
            ));
        }
        let (el, er) = if one_to_many { (rs, ls) } else { (ls, rs) };
        let (vl, vr) = (el.value, er.value);
        let labels = result_labels(&ls.labels, &rs.labels, &matching, one_to_one, include);
        if el.hist.is_some() || er.hist.is_some() || op.is_trim() {
            let outcome = native_binop::combine(cx, op, (vl, el.hist.as_ref()), (vr, er.hist.as_ref()));
            if matches!(outcome, Outcome::Dropped) {
                continue;
            }
            let kept = paired(outcome, return_bool);
            if !entry.insert(labels.clone()) {
                return Err(EvalError::exec("multiple matches for labels: grouping labels must ensure unique matches"));
            }
            if let Some((value, hist)) = kept {
                let drop = return_bool || op.changes_schema() || ls.drop_name;
                out.push(Elem { labels, value, drop_name: drop, hist });
            }
            continue;
        }
        let Some(value) = combine(op, vl, vr, return_bool) else {
            entry.insert(labels);
            continue;
        };
        if !entry.insert(labels.clone()) {
            return Err(EvalError::exec("multiple matches for labels: grouping labels must ensure unique matches"));
        }
        let drop = return_bool || !op.is_comparison() || ls.drop_name;
        out.push(Elem::new(labels, value, drop));
    }
    if fill.0.is_some() || fill.1.is_some() {
        let f = Fill { op, matching: &matching, one_to_many, one_to_one, include, return_bool };
        f.apply(&many, &one, fill, &mut out);
    }
    Ok(out)
}

/// The value of one matched pair, or `None` when a comparison filters it out.
fn combine(op: Op, vl: f64, vr: f64, return_bool: bool) -> Option<f64> {
    let res = apply(op, vl, vr);
    if op.is_comparison() && return_bool {
        return Some(if res.is_some() { 1.0 } else { 0.0 });
    }
    res
}

fn result_labels(l: &Labels, r: &Labels, matching: &Matching, one_to_one: bool, include: &[String]) -> Labels {
    let mut labels = if one_to_one {
        if matching.on {
            project(l, matching.names, true)
        } else {
            project(l, matching.names, false)
        }
    } else {
        l.clone()
    };
    for name in include {
        labels = with_label(&labels, name, r.get(name).unwrap_or(""));
    }
    labels
}

/// `fill`, `fill_left`, `fill_right`: elements without a partner are combined with a fill
/// value. As in Prometheus, the left fill stands in for the "many" side and the right fill
/// for the "one" side (so `group_right` swaps their roles).
struct Fill<'a> {
    op: Op,
    matching: &'a Matching<'a>,
    one_to_many: bool,
    one_to_one: bool,
    include: &'a [String],
    return_bool: bool,
}

impl Fill<'_> {
    fn apply(&self, many: &[Elem], one: &[Elem], fill: (Option<f64>, Option<f64>), out: &mut Vec<Elem>) {
        let sig = |e: &Elem| self.matching.signature(&e.labels);
        let one_sigs: HashSet<Labels> = one.iter().map(sig).collect();
        let many_sigs: HashSet<Labels> = many.iter().map(sig).collect();
        let cmp = self.op.is_comparison();
        if let Some(fv) = fill.1 {
            for ls in many.iter().filter(|e| !one_sigs.contains(&sig(e))) {
                let (vl, vr) = if self.one_to_many { (fv, ls.value) } else { (ls.value, fv) };
                if let Some(v) = combine(self.op, vl, vr, self.return_bool) {
                    let labels =
                        result_labels(&ls.labels, &Labels::empty(), self.matching, self.one_to_one, self.include);
                    let keeps_name = cmp && !self.return_bool && !self.one_to_many;
                    out.push(Elem::new(labels, v, !keeps_name || ls.drop_name));
                }
            }
        }
        if let Some(fv) = fill.0 {
            for rs in one.iter().filter(|e| !many_sigs.contains(&sig(e))) {
                let (vl, vr) = if self.one_to_many { (rs.value, fv) } else { (fv, rs.value) };
                if let Some(v) = combine(self.op, vl, vr, self.return_bool) {
                    out.push(Elem::new(sig(rs), v, true));
                }
            }
        }
    }
}

/// A label set as Prometheus' `labels.Labels.String()` writes it in messages: every label in the
/// braces, the name too (`{__name__="m", job="a"}`), names outside the legacy set and values
/// quoted as Go's `%q` quotes them.
fn go_labels(labels: &Labels) -> String {
    let quote = crate::promql::byte_escapes::quote;
    let pairs: Vec<String> = labels
        .iter()
        .map(|l| {
            let name = if crate::labels::is_valid_label_name(&l.name) { l.name.clone() } else { quote(&l.name) };
            format!("{name}={}", quote(&l.value))
        })
        .collect();
    format!("{{{}}}", pairs.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::promql::functions::context::Recorder;

    fn elem(instance: &str, v: f64) -> Elem {
        Elem::new(Labels::from_pairs([("__name__", "up"), ("instance", instance)]).unwrap(), v, false)
    }

    #[test]
    fn comparisons_of_operand_values() {
        let cx = Recorder::default();
        let v = || StepValue::Vector(vec![elem("a", 1.0), elem("b", 3.0)]);
        let StepValue::Vector(kept) = operate(&cx, Op::Gt, None, v(), StepValue::Scalar(2.0)).unwrap() else {
            panic!()
        };
        let kept: Vec<(Option<&str>, f64, bool)> =
            kept.iter().map(|e| (e.labels.get("instance"), e.value, e.drop_name)).collect();
        assert_eq!(kept, [(Some("b"), 3.0, false)]);
        let StepValue::Scalar(x) = operate(&cx, Op::Add, None, StepValue::Scalar(1.0), StepValue::Scalar(2.0)).unwrap()
        else {
            panic!()
        };
        assert_eq!(x, 3.0);
        let e = operate(&cx, Op::TrimUpper, None, StepValue::Scalar(1.0), StepValue::Scalar(2.0)).unwrap_err();
        assert_eq!(e.to_string(), r#"operator "</" not allowed for Scalar operations"#);
    }

    #[test]
    fn one_to_one_matching_of_vector_values() {
        let cx = Recorder::default();
        let lhs = StepValue::Vector(vec![elem("a", 1.0), elem("b", 3.0)]);
        let rhs = StepValue::Vector(vec![elem("b", 10.0), elem("c", 1.0)]);
        let StepValue::Vector(out) = operate(&cx, Op::Add, None, lhs, rhs).unwrap() else { panic!() };
        assert_eq!(out.len(), 1);
        // Arithmetic marks the name to be dropped once the result is assembled.
        assert_eq!((out[0].labels.get("instance"), out[0].drop_name, out[0].value), (Some("b"), true, 13.0));
    }
}
