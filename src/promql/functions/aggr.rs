//! Aggregation operators (`sum`, `avg`, `topk`, `count_values`, ...) with `by`/`without`, over
//! an evaluated input vector ([`Aggregation::apply`]) or series by series over every step of a
//! range query part ([`SeriesFold`]). Registry: [`Aggr::from_name`].

use std::cmp::Ordering;
use std::collections::HashMap;

use promql_parser::parser::LabelModifier;

use super::context::{Context, Spot};
use super::native_aggr;
use super::stats::{format_float, kahan_sum, mean, quantile, variance, KahanSum, Mean};
use crate::labels::{Labels, METRIC_NAME};
use crate::promql::budget::GrowingHold;
use crate::promql::error::{EvalError, Result};
use crate::promql::identity::IdentityCache;
use crate::promql::step::StepValues;
use crate::promql::value::{project, with_label, Elem, StepValue};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Aggr {
    Sum,
    Avg,
    Count,
    Min,
    Max,
    Group,
    Stddev,
    Stdvar,
    Quantile,
    Topk,
    Bottomk,
    Limitk,
    LimitRatio,
    CountValues,
}

impl Aggr {
    fn from_name(name: &str) -> Option<Self> {
        use Aggr::*;
        Some(match name {
            "sum" => Sum,
            "avg" => Avg,
            "count" => Count,
            "min" => Min,
            "max" => Max,
            "group" => Group,
            "stddev" => Stddev,
            "stdvar" => Stdvar,
            "quantile" => Quantile,
            "topk" => Topk,
            "bottomk" => Bottomk,
            "limitk" => Limitk,
            "limit_ratio" => LimitRatio,
            "count_values" => CountValues,
            _ => return None,
        })
    }
}

/// How series are grouped.
pub(crate) struct Grouping<'a> {
    without: bool,
    names: &'a [String],
}

impl Grouping<'_> {
    fn key(&self, labels: &Labels) -> Labels {
        if self.without {
            let v = labels.iter().filter(|l| l.name != METRIC_NAME && !self.names.contains(&l.name)).cloned().collect();
            Labels::from_trusted(v)
        } else {
            project(labels, self.names, true)
        }
    }
}

/// An aggregation operator with its grouping, as written.
pub(crate) struct Aggregation<'a> {
    op: Aggr,
    name: String,
    grouping: Grouping<'a>,
}

impl<'a> Aggregation<'a> {
    /// The aggregation `name` (`sum`, ...) with `by`/`without` labels `modifier`.
    ///
    /// # Errors
    /// An unknown aggregation.
    pub(crate) fn of(name: String, modifier: &'a Option<LabelModifier>) -> Result<Self> {
        let op = Aggr::from_name(&name).ok_or_else(|| EvalError::bad(format!("unknown aggregation {name}")))?;
        let grouping = match modifier {
            None => Grouping { without: false, names: &[] },
            Some(LabelModifier::Include(l)) => Grouping { without: false, names: &l.labels },
            Some(LabelModifier::Exclude(l)) => Grouping { without: true, names: &l.labels },
        };
        Ok(Self { op, name, grouping })
    }

    /// Whether this is `count_values`, whose parameter is a string (see [`Self::count_values`]).
    pub(crate) fn is_count_values(&self) -> bool {
        self.op == Aggr::CountValues
    }

    /// `count_values("label", input)`.
    pub(crate) fn count_values(&self, input: Vec<Elem>, label: &str) -> Result<StepValue> {
        count_values(input, &self.grouping, label)
    }

    /// The aggregation of `input` with the scalar parameter `param` (`topk`'s k, ...), if it
    /// takes one. `groups` is the node's group cache: the grouping of each input label set
    /// seen at earlier steps.
    pub(crate) fn apply(
        &self,
        cx: &dyn Context,
        input: Vec<Elem>,
        param: Option<f64>,
        groups: &mut GroupCache,
    ) -> Result<StepValue> {
        let (op, grouping) = (self.op, &self.grouping);
        if input.iter().any(|e| !e.is_float()) {
            return with_histograms(cx, op, group(groups, input, grouping), param, &self.name);
        }
        if op == Aggr::Sum {
            return Ok(StepValue::Vector(sum_streaming(groups, input, grouping)));
        }
        let groups = group(groups, input, grouping);
        match op {
            Aggr::Topk | Aggr::Bottomk | Aggr::Limitk => select_k(op, groups, param.unwrap_or(f64::NAN)),
            Aggr::LimitRatio => limit_ratio(cx, groups, param.unwrap_or(f64::NAN)),
            _ => Ok(StepValue::Vector(reduce(cx, op, groups, param)?)),
        }
    }

    /// Whether this aggregation, with a parameter or not (`has_param`), folds its input series
    /// by series, as [`SeriesFold`] does, when the input has one value per series per step.
    pub(crate) fn streams(&self, has_param: bool) -> bool {
        !has_param && Running::start(self.op, 0.0).is_some()
    }
}

/// Aggregation `op` (named `name`) of `groups` when its input holds native histograms:
/// `sum`/`avg` add them (see `native_aggr.rs`), `count`/`group`/`limitk`/`limit_ratio` take
/// them as any element, the others ignore them with an info.
fn with_histograms(
    cx: &dyn Context,
    op: Aggr,
    groups: Vec<(Labels, Vec<Elem>)>,
    param: Option<f64>,
    name: &str,
) -> Result<StepValue> {
    match op {
        Aggr::Limitk => select_k(op, groups, param.unwrap_or(f64::NAN)),
        Aggr::LimitRatio => limit_ratio(cx, groups, param.unwrap_or(f64::NAN)),
        Aggr::Count | Aggr::Group => Ok(StepValue::Vector(reduce(cx, op, groups, param)?)),
        Aggr::Sum | Aggr::Avg => {
            let mut out = Vec::with_capacity(groups.len());
            for (labels, elems) in groups {
                if elems.iter().all(Elem::is_float) {
                    out.extend(reduce(cx, op, vec![(labels, elems)], param)?);
                } else if let Some(e) = native_aggr::sum_or_avg(cx, op == Aggr::Avg, labels, &elems) {
                    out.push(e);
                }
            }
            Ok(StepValue::Vector(out))
        }
        _ => {
            let groups: Vec<(Labels, Vec<Elem>)> = groups
                .into_iter()
                .map(|(l, elems)| (l, native_aggr::without_histograms(cx, name, elems)))
                .filter(|(_, elems)| !elems.is_empty())
                .collect();
            match op {
                Aggr::Topk | Aggr::Bottomk => select_k(op, groups, param.unwrap_or(f64::NAN)),
                _ => Ok(StepValue::Vector(reduce(cx, op, groups, param)?)),
            }
        }
    }
}

/// The groups one aggregation node has seen during a query: each input label set's group id
/// (found by identity, so once per series rather than once per step) and each group's key.
/// Invariant: every id in `ids` and `by_key` indexes `keys`.
#[derive(Default)]
pub(crate) struct GroupCache {
    ids: IdentityCache<usize>,
    keys: Vec<Labels>,
    by_key: HashMap<Labels, usize>,
}

/// Folds `input` into one state per group key, groups in order of first appearance: `add`
/// takes each element into its group's state, which starts as `S::default()`. `cache` is the
/// aggregation's, whose grouping never changes during a query.
fn fold_groups<S: Default>(
    cache: &mut GroupCache,
    input: Vec<Elem>,
    grouping: &Grouping,
    mut add: impl FnMut(&mut S, Elem),
) -> Vec<(Labels, S)> {
    let GroupCache { ids, keys, by_key } = cache;
    // Position in `groups` of each group id seen at this step.
    let mut slot: Vec<usize> = Vec::new();
    let mut groups: Vec<(Labels, S)> = Vec::new();
    for e in input {
        let id = *ids.get_or_insert_with(&e.labels, |l| {
            let k = grouping.key(l);
            *by_key.entry(k).or_insert_with_key(|k| {
                keys.push(k.clone());
                keys.len() - 1
            })
        });
        if slot.len() <= id {
            slot.resize(keys.len().max(id + 1), usize::MAX);
        }
        let at = match slot.get(id).copied().filter(|&i| i < groups.len()) {
            Some(i) => i,
            None => {
                if let Some(s) = slot.get_mut(id) {
                    *s = groups.len();
                }
                groups.push((keys.get(id).cloned().unwrap_or_default(), S::default()));
                groups.len() - 1
            }
        };
        if let Some(g) = groups.get_mut(at) {
            add(&mut g.1, e);
        }
    }
    ids.end_round();
    groups
}

/// Groups `input` by key, in order of first appearance.
fn group(cache: &mut GroupCache, input: Vec<Elem>, grouping: &Grouping) -> Vec<(Labels, Vec<Elem>)> {
    fold_groups(cache, input, grouping, |elems: &mut Vec<Elem>, e| elems.push(e))
}

/// `sum`, without gathering each group's elements: the same compensated sum, in the same order,
/// as [`group`] followed by [`reduce`].
fn sum_streaming(cache: &mut GroupCache, input: Vec<Elem>, grouping: &Grouping) -> Vec<Elem> {
    let sums = fold_groups(cache, input, grouping, |g: &mut (KahanSum, bool), e| {
        g.0.add(e.value);
        g.1 |= e.drop_name;
    });
    sums.into_iter().map(|(labels, (sum, drop))| Elem::new(labels, sum.value(), drop)).collect()
}

/// The running state of an aggregation that needs nothing but its inputs' values, taken one
/// at a time in input order: the same arithmetic, in the same order, as [`reduce`].
#[derive(Clone, Copy, Debug)]
enum Running {
    Sum(KahanSum),
    Avg(Mean),
    Count(f64),
    Group,
    Min(f64),
    Max(f64),
}

impl Running {
    /// The state after the first value, for the operators that have one.
    fn start(op: Aggr, v: f64) -> Option<Self> {
        let mut state = match op {
            Aggr::Sum => Self::Sum(KahanSum::default()),
            Aggr::Avg => Self::Avg(Mean::default()),
            Aggr::Count => Self::Count(0.0),
            Aggr::Group => Self::Group,
            // `reduce` folds from the first value, so taking it again changes nothing.
            Aggr::Min => Self::Min(v),
            Aggr::Max => Self::Max(v),
            _ => return None,
        };
        state.add(v);
        Some(state)
    }

    #[inline(always)]
    fn add(&mut self, v: f64) {
        match self {
            Self::Sum(s) => s.add(v),
            Self::Avg(m) => m.add(v),
            Self::Count(n) => *n += 1.0,
            Self::Group => {}
            Self::Min(m) => {
                if *m > v || m.is_nan() {
                    *m = v;
                }
            }
            Self::Max(m) => {
                if *m < v || m.is_nan() {
                    *m = v;
                }
            }
        }
    }

    fn value(&self) -> f64 {
        match self {
            Self::Sum(s) => s.value(),
            Self::Avg(m) => m.value(),
            Self::Count(n) => *n,
            Self::Group => 1.0,
            Self::Min(m) | Self::Max(m) => *m,
        }
    }
}

/// An aggregation [`Running`] covers, computed for every step of a range query part at once
/// over an input with one value per series per step (a selector, or a parameterless rollup
/// such as `rate(x[5m])`), fed series by series: each series' values are folded straight into
/// its group's running state at every step. No per-step vector of inputs is built, and each
/// series' group is looked up once per query part instead of once per step.
///
/// Same values, bit for bit, as the aggregation of the input's vector at each step, when the
/// series come in the order of that vector: a step's values reach each group in series order;
/// groups are listed in order of first appearance, as [`fold_groups`] lists them.
pub(crate) struct SeriesFold<'a> {
    cx: &'a dyn Context,
    op: Aggr,
    grouping: &'a Grouping<'a>,
    steps: usize,
    by_key: HashMap<Labels, usize>,
    keys: Vec<Labels>,
    /// states[group][step].
    states: Vec<Vec<Option<Running>>>,
    /// The groups of each step, in order of first appearance.
    order: Vec<Vec<usize>>,
    growing: GrowingHold<'a>,
}

impl<'a> SeriesFold<'a> {
    /// A fold of `a` (with a parameter or not: `has_param`) over `steps` steps, its memory and
    /// points counted against `cx`'s limits; `None` unless `a` [streams](Aggregation::streams).
    pub(crate) fn new(cx: &'a dyn Context, a: &'a Aggregation<'a>, has_param: bool, steps: usize) -> Option<Self> {
        if !a.streams(has_param) {
            return None;
        }
        Some(Self {
            cx,
            op: a.op,
            grouping: &a.grouping,
            steps,
            by_key: HashMap::new(),
            keys: Vec::new(),
            states: Vec::new(),
            order: vec![Vec::new(); steps],
            growing: GrowingHold::new(cx, "aggregating"),
        })
    }

    /// Where the values of the next series, with `labels`, go: its group's column.
    ///
    /// # Errors
    /// Past the sample limit or the memory budget (a new group may hold a point per step).
    pub(crate) fn series(&mut self, labels: &Labels) -> Result<Option<SeriesColumn<'_>>> {
        let key = self.grouping.key(labels);
        let g = match self.by_key.get(&key) {
            Some(&g) => g,
            None => {
                // Every group may hold a point per step: count them before allocating.
                let slots = self.keys.len().saturating_add(1).saturating_mul(self.steps);
                self.cx.check_samples(slots)?;
                self.growing.add(self.steps.saturating_mul(std::mem::size_of::<Option<Running>>()))?;
                self.by_key.insert(key.clone(), self.keys.len());
                self.keys.push(key);
                self.states.push(vec![None; self.steps]);
                self.keys.len() - 1
            }
        };
        let Some(column) = self.states.get_mut(g) else { return Ok(None) };
        Ok(Some(SeriesColumn { op: self.op, group: g, column, order: &mut self.order }))
    }

    /// Each step's value, the results carrying a pending metric-name drop when `drop`.
    pub(crate) fn finish(self, drop: bool) -> StepValues {
        let value = |g: usize, i: usize| -> Option<Elem> {
            let state = self.states.get(g)?.get(i)?.as_ref()?;
            Some(Elem::new(self.keys.get(g)?.clone(), state.value(), drop))
        };
        self.order
            .iter()
            .enumerate()
            .map(|(i, groups)| Some(groups.iter().filter_map(|&g| value(g, i)).collect()))
            .collect()
    }
}

/// One group's running states, at every step, as one series of a [`SeriesFold`] feeds it.
pub(crate) struct SeriesColumn<'f> {
    op: Aggr,
    group: usize,
    column: &'f mut Vec<Option<Running>>,
    order: &'f mut Vec<Vec<usize>>,
}

impl SeriesColumn<'_> {
    /// Takes the series' value `v` at step `i`.
    #[inline(always)]
    pub(crate) fn add(&mut self, i: usize, v: f64) {
        match self.column.get_mut(i) {
            Some(Some(state)) => state.add(v),
            Some(slot) => {
                *slot = Running::start(self.op, v);
                if let Some(groups) = self.order.get_mut(i) {
                    groups.push(self.group);
                }
            }
            None => {}
        }
    }
}

fn reduce(cx: &dyn Context, op: Aggr, groups: Vec<(Labels, Vec<Elem>)>, param: Option<f64>) -> Result<Vec<Elem>> {
    if op == Aggr::Quantile {
        let p = param.unwrap_or(f64::NAN);
        if !(0.0..=1.0).contains(&p) {
            cx.warn_at(Spot::Param, format!("quantile value should be between 0 and 1, got {}", format_float(p)));
        }
    }
    let mut out = Vec::new();
    for (labels, elems) in groups {
        let drop = elems.iter().any(|e| e.drop_name);
        let vals = || elems.iter().map(|e| e.value);
        let first = elems.first().map(|e| e.value).unwrap_or(f64::NAN);
        let v = match op {
            Aggr::Sum => kahan_sum(vals()),
            Aggr::Avg => mean(vals()),
            Aggr::Count => elems.len() as f64,
            Aggr::Group => 1.0,
            Aggr::Min => vals().fold(first, |m, v| if m > v || m.is_nan() { v } else { m }),
            Aggr::Max => vals().fold(first, |m, v| if m < v || m.is_nan() { v } else { m }),
            Aggr::Stddev => variance(vals()).sqrt(),
            Aggr::Stdvar => variance(vals()),
            Aggr::Quantile => quantile(param.unwrap_or(f64::NAN), vals().collect()),
            _ => return Err(EvalError::bad("BUG: not a reducing aggregation")),
        };
        out.push(Elem::new(labels, v, drop));
    }
    Ok(out)
}

/// The k parameter as a count: NaN is an error, below 1 selects nothing.
fn k_param(k: f64) -> Result<usize> {
    if k.is_nan() {
        return Err(EvalError::exec("Parameter value is NaN"));
    }
    if k < 1.0 {
        return Ok(0);
    }
    Ok(if k >= usize::MAX as f64 { usize::MAX } else { k as usize })
}

/// Orders for topk (descending) / bottomk (ascending), NaN always last.
fn k_order(a: f64, b: f64, top: bool) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => {
            let o = a.partial_cmp(&b).unwrap_or(Ordering::Equal);
            if top {
                o.reverse()
            } else {
                o
            }
        }
    }
}

fn select_k(op: Aggr, groups: Vec<(Labels, Vec<Elem>)>, k: f64) -> Result<StepValue> {
    let k = k_param(k)?;
    if k == 0 {
        return Ok(StepValue::Vector(Vec::new()));
    }
    let mut out = Vec::new();
    for (_, mut elems) in groups {
        if op != Aggr::Limitk {
            let top = op == Aggr::Topk;
            elems.sort_by(|a, b| k_order(a.value, b.value, top));
        }
        out.extend(elems.into_iter().take(k));
    }
    Ok(StepValue::Vector(out))
}

fn limit_ratio(cx: &dyn Context, groups: Vec<(Labels, Vec<Elem>)>, r: f64) -> Result<StepValue> {
    if r.is_nan() {
        return Err(EvalError::exec("Ratio value is NaN"));
    }
    let r = if r > 1.0 {
        cx.warn_at(
            Spot::Param,
            format!("ratio value should be between -1 and 1, got {}, capping to 1", format_float(r)),
        );
        1.0
    } else if r < -1.0 {
        cx.warn_at(
            Spot::Param,
            format!("ratio value should be between -1 and 1, got {}, capping to -1", format_float(r)),
        );
        -1.0
    } else {
        r
    };
    let mut out = Vec::new();
    for (_, elems) in groups {
        for e in elems {
            let offset = sample_offset(&e.labels);
            if (r >= 0.0 && offset < r) || (r < 0.0 && offset >= 1.0 + r) {
                out.push(e);
            }
        }
    }
    Ok(StepValue::Vector(out))
}

/// A stable position in `[0, 1)` for a label set (FNV-1a over the canonical encoding).
fn sample_offset(labels: &Labels) -> f64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in labels.to_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h as f64 / u64::MAX as f64
}

fn count_values(input: Vec<Elem>, grouping: &Grouping, label: &str) -> Result<StepValue> {
    // Any UTF-8 name is valid (Prometheus 3); a literal with bytes that are not UTF-8 is not.
    if label.is_empty() || crate::promql::byte_escapes::holds_raw_bytes(label) {
        return Err(EvalError::exec(format!("invalid label name {}", crate::promql::byte_escapes::quote(label))));
    }
    let mut index: HashMap<Labels, usize> = HashMap::new();
    let mut out: Vec<Elem> = Vec::new();
    for e in input {
        let value = match &e.hist {
            Some(h) => super::native::histogram_string(h),
            None => format_float(e.value),
        };
        let k = with_label(&grouping.key(&e.labels), label, &value);
        match index.get(&k) {
            Some(&i) => {
                if let Some(o) = out.get_mut(i) {
                    o.value += 1.0;
                }
            }
            None => {
                index.insert(k.clone(), out.len());
                out.push(Elem::new(k, 1.0, false));
            }
        }
    }
    Ok(StepValue::Vector(out))
}

#[cfg(test)]
mod tests {
    use promql_parser::label::Labels as Names;

    use super::*;
    use crate::promql::functions::context::Recorder;

    fn series(job: &str, instance: &str) -> Labels {
        Labels::from_pairs([("__name__", "up"), ("job", job), ("instance", instance)]).unwrap()
    }

    fn by_job() -> Option<LabelModifier> {
        Some(LabelModifier::Include(Names { labels: vec!["job".to_owned()] }))
    }

    fn vector(v: StepValue) -> Vec<Elem> {
        match v {
            StepValue::Vector(v) => v,
            other => panic!("expected a vector, got {}", other.type_name()),
        }
    }

    #[test]
    fn sum_by_groups_a_vector_value() {
        let cx = Recorder::default();
        let modifier = by_job();
        let sum = Aggregation::of("sum".to_owned(), &modifier).unwrap();
        let input = vec![
            Elem::new(series("a", "1"), 1.0, false),
            Elem::new(series("b", "1"), 2.0, false),
            Elem::new(series("a", "2"), 3.0, false),
        ];
        let out = vector(sum.apply(&cx, input, None, &mut GroupCache::default()).unwrap());
        let got: Vec<(Option<&str>, f64, usize)> =
            out.iter().map(|e| (e.labels.get("job"), e.value, e.labels.len())).collect();
        assert_eq!(got, [(Some("a"), 4.0, 1), (Some("b"), 2.0, 1)]);
        assert!(cx.annotations.borrow().is_empty());
    }

    #[test]
    fn folding_series_by_series_equals_aggregating_each_step() {
        let cx = Recorder::default();
        let modifier = by_job();
        let rows: Vec<(Labels, [Option<f64>; 4])> = vec![
            (series("a", "1"), [Some(1.0), None, Some(0.1), Some(f64::NAN)]),
            (series("b", "1"), [Some(2.0), Some(5.0), None, Some(1.0)]),
            (series("a", "2"), [None, Some(-3.0), Some(0.2), Some(7.0)]),
        ];
        for op in ["sum", "avg", "count", "min", "max", "group"] {
            let aggregation = Aggregation::of(op.to_owned(), &modifier).unwrap();
            let mut fold = SeriesFold::new(&cx, &aggregation, false, 4).unwrap();
            for (labels, values) in &rows {
                let mut column = fold.series(labels).unwrap().unwrap();
                for (i, v) in values.iter().enumerate() {
                    if let Some(v) = v {
                        column.add(i, *v);
                    }
                }
            }
            let folded = fold.finish(false);
            for (i, step) in folded.into_iter().enumerate() {
                let input = rows.iter().filter_map(|(l, vs)| vs[i].map(|v| Elem::new(l.clone(), v, false))).collect();
                let want = vector(aggregation.apply(&cx, input, None, &mut GroupCache::default()).unwrap());
                let shown = |v: &[Elem]| -> Vec<(Labels, u64)> {
                    v.iter().map(|e| (e.labels.clone(), e.value.to_bits())).collect()
                };
                assert_eq!(shown(&step.unwrap()), shown(&want), "{op} at step {i}");
            }
        }
        // Aggregations with a parameter, or that need all of a group's values, do not fold.
        let topk = Aggregation::of("topk".to_owned(), &modifier).unwrap();
        assert!(SeriesFold::new(&cx, &topk, true, 4).is_none());
        let stddev = Aggregation::of("stddev".to_owned(), &modifier).unwrap();
        assert!(SeriesFold::new(&cx, &stddev, false, 4).is_none());
    }

    #[test]
    fn limit_ratio_warns_through_the_context() {
        let cx = Recorder::default();
        let aggregation = Aggregation::of("limit_ratio".to_owned(), &None).unwrap();
        let input = vec![Elem::new(series("a", "1"), 1.0, false)];
        let out = vector(aggregation.apply(&cx, input, Some(2.0), &mut GroupCache::default()).unwrap());
        assert_eq!(out.len(), 1);
        assert_eq!(
            cx.annotations.borrow().warnings(),
            ["PromQL warning: ratio value should be between -1 and 1, got 2, capping to 1"]
        );
    }
}
