//! The public entry points: [`Engine::instant`] and [`Engine::range`], the limits they enforce,
//! and the assembly of per-step values into a [`QueryResult`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use promql_parser::parser::value::ValueType;
use promql_parser::parser::{Call, Expr};

use super::annotations::Annotations;
use super::error::{EvalError, Result};
use super::eval::tiers::SourceResolution;
use super::eval::Query;
use super::identity::IdentityCache;
use super::positions::{self, Spot};
use super::stats::{self, QueryStats, SampleStats, Timings};
use super::value::{without_name, Elem, InstantSample, RangeSeries, StepValue, Value};
use super::{bounds, footprint};
use crate::containment;
use crate::labels::Labels;
use crate::matcher::MAX_REGEX_COST;
use crate::sample::{HistogramSample, Sample};
use crate::storage::Querier;

/// Prometheus' limit on points per series in a range query.
pub const MAX_POINTS_PER_SERIES: i64 = 11_000;
/// Fewest steps a range query part evaluated on its own thread gets (below, threads cost more
/// than they save).
const MIN_STEPS_PER_PART: i64 = 64;
/// Deepest accepted expression nesting; deeper queries are rejected as `bad_data`.
pub const MAX_NESTING_DEPTH: usize = 200;
/// Most tokens (names, numbers, operators, brackets; string contents excluded) accepted in one
/// query text. The parser's time grows with the square of a binary-operator chain's length
/// (found by fuzzing: 4,000 tokens took seconds), so this bounds parse time, not just AST size.
pub const MAX_QUERY_TOKENS: usize = 3_000;
/// Most operators and brackets outside matcher lists in one query text: bounds the AST depth
/// before parsing, far below what overflows the stack (see [`parse`]).
const MAX_QUERY_OPERATORS: usize = 2_000;

/// Default of [`EngineOptions::max_memory_bytes`] (`--query-max-memory`): 2 GiB.
pub const DEFAULT_MAX_MEMORY_BYTES: usize = 2 << 30;

/// Default of [`EngineOptions::max_scanned_samples`] (`--query-max-scanned-samples`): a
/// billion samples, about ten seconds of decoding on one core.
pub const DEFAULT_MAX_SCANNED_SAMPLES: usize = 1_000_000_000;

/// Limits and defaults of the evaluator.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// How far back an instant selector looks for the latest sample (Prometheus: 5m).
    pub lookback_ms: i64,
    /// Most samples a query may hold at once: what its selectors keep after reducing them where
    /// they are read, its cached step values and its result (`--query-max-samples`).
    pub max_samples: usize,
    /// Most samples a query may read from storage in all (`--query-max-scanned-samples`); a
    /// selector reduced where it is read scans many more samples than it holds.
    pub max_scanned_samples: usize,
    /// Most bytes a query's evaluation may hold at once (see `footprint.rs` for what counts).
    pub max_memory_bytes: usize,
    /// Longest a query may run.
    pub timeout: Duration,
    /// Which downsampled tiers range functions may read (`max_source_resolution`).
    pub source_resolution: SourceResolution,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            lookback_ms: 300_000,
            max_samples: 50_000_000,
            max_scanned_samples: DEFAULT_MAX_SCANNED_SAMPLES,
            max_memory_bytes: DEFAULT_MAX_MEMORY_BYTES,
            timeout: Duration::from_secs(120),
            source_resolution: SourceResolution::Auto,
        }
    }
}

/// A query's value together with the warnings and infos raised while computing it.
#[derive(Clone, Debug, PartialEq)]
pub struct QueryResult {
    /// The value.
    pub value: Value,
    /// Warnings and infos (never errors).
    pub annotations: Annotations,
    /// Timings and sample counts, when asked for ([`Engine::instant_with_stats`],
    /// [`Engine::range_with_stats`]).
    pub stats: Option<QueryStats>,
    /// Samples read from storage (for the slow-query log).
    pub loaded_samples: usize,
    /// Most samples the evaluation held at once: what its selectors kept after reducing them
    /// where they were read, its cached step values and its result (the figure
    /// `--query-max-samples` limits).
    pub peak_samples: usize,
}

/// The PromQL evaluator. Cheap to share; holds no per-query state.
#[derive(Clone, Debug, Default)]
pub struct Engine {
    opts: EngineOptions,
}

impl Engine {
    /// Builds an engine with the given limits.
    pub fn new(opts: EngineOptions) -> Self {
        Self { opts }
    }

    /// The engine's limits.
    pub fn options(&self) -> &EngineOptions {
        &self.opts
    }

    /// Evaluates `query` at `time_ms`.
    ///
    /// # Errors
    /// [`EvalError`]: `bad_data` for unparsable or invalid queries, `execution` for evaluation
    /// failures and exceeded sample limits, `timeout` when the timeout passes.
    pub fn instant(&self, src: &dyn Querier, query: &str, time_ms: i64) -> Result<QueryResult> {
        self.instant_counted(src, query, time_ms, false)
    }

    /// [`Engine::instant`], also measuring the query ([`QueryResult::stats`]).
    ///
    /// # Errors
    /// As [`Engine::instant`].
    pub fn instant_with_stats(&self, src: &dyn Querier, query: &str, time_ms: i64) -> Result<QueryResult> {
        self.instant_counted(src, query, time_ms, true)
    }

    fn instant_counted(&self, src: &dyn Querier, query: &str, time_ms: i64, count: bool) -> Result<QueryResult> {
        let started = Instant::now();
        let expr = parse(query)?;
        let mut q = Query::new(&self.opts, time_ms, time_ms, 0);
        q.set_positions(Arc::new(positions::locate(query, &expr)));
        q.preload(src, &expr)?;
        let prepared = Instant::now();
        let per_step = if count { Some(stats::per_step(&q, &expr, &[time_ms])?) } else { None };
        let tiers = q.tiers_read();
        let evaluating = Instant::now();
        let v = q.eval(&expr, time_ms)?;
        let evaluated = Instant::now();
        let value = instant_value(v, time_ms)?;
        q.check_samples(value.points())?;
        let peak_samples = q.peak_samples();
        let stats = per_step.map(|per_step| QueryStats {
            timings: Timings {
                preparation: prepared - started,
                inner_eval: evaluated - evaluating,
                result_sort: evaluated.elapsed(),
            },
            samples: sample_stats(per_step, peak_samples, tiers),
        });
        let loaded_samples = q.loaded();
        Ok(QueryResult { value, annotations: q.into_annotations(), stats, loaded_samples, peak_samples })
    }

    /// Evaluates `query` at every step from `start_ms` to `end_ms` (inclusive).
    ///
    /// # Errors
    /// As [`Engine::instant`]; also `bad_data` for a non-positive step, an end before the start,
    /// more than [`MAX_POINTS_PER_SERIES`] steps, or an expression that is not a scalar or
    /// instant vector.
    pub fn range(
        &self,
        src: &dyn Querier,
        query: &str,
        start_ms: i64,
        end_ms: i64,
        step_ms: i64,
    ) -> Result<QueryResult> {
        self.range_counted(src, query, (start_ms, end_ms, step_ms), false)
    }

    /// [`Engine::range`], also measuring the query ([`QueryResult::stats`]).
    ///
    /// # Errors
    /// As [`Engine::range`].
    pub fn range_with_stats(
        &self,
        src: &dyn Querier,
        query: &str,
        start_ms: i64,
        end_ms: i64,
        step_ms: i64,
    ) -> Result<QueryResult> {
        self.range_counted(src, query, (start_ms, end_ms, step_ms), true)
    }

    fn range_counted(
        &self,
        src: &dyn Querier,
        query: &str,
        (start_ms, end_ms, step_ms): (i64, i64, i64),
        count: bool,
    ) -> Result<QueryResult> {
        let started = Instant::now();
        check_range(start_ms, end_ms, step_ms)?;
        let expr = parse_at(query, step_ms, end_ms.saturating_sub(start_ms))?;
        match expr.value_type() {
            ValueType::Scalar | ValueType::Vector => {}
            other => {
                return Err(EvalError::bad(format!(
                    "invalid expression type \"{}\" for range query, must be Scalar or instant Vector",
                    type_word(other)
                )))
            }
        }
        let mut q = Query::new(&self.opts, start_ms, end_ms, step_ms);
        // Built for this tree (a copy of the cached one): the table is keyed by node address.
        let positions = Arc::new(positions::locate(query, &expr));
        q.set_positions(Arc::clone(&positions));
        if count {
            // The count reads the selectors' samples themselves, not per-step reductions.
            q.keep_samples();
        }
        q.preload(src, &expr)?;
        let prepared = Instant::now();
        let per_step = if count {
            let times: Vec<i64> = (0..=(end_ms - start_ms) / step_ms).map(|k| start_ms + k * step_ms).collect();
            Some(stats::per_step(&q, &expr, &times)?)
        } else {
            None
        };
        let tiers = q.tiers_read();
        let loaded = q.loaded();
        let evaluating = Instant::now();
        // Steps are independent: long ranges are cut into contiguous parts evaluated in parallel.
        let steps = (end_ms - start_ms) / step_ms + 1;
        let cores = crate::cores::available() as i64;
        let parts = cores.min(steps / MIN_STEPS_PER_PART).max(1);
        let per_part = (steps + parts - 1) / parts;
        let points = AtomicUsize::new(0);
        let run = |q: &Query, first: i64, count: i64| -> Result<RangeAccumulator> {
            let mut acc = RangeAccumulator::default();
            let mut counted = 0;
            for k in first..(first + count).min(steps) {
                let t = start_ms + k * step_ms;
                q.check_deadline()?;
                let v = q.eval(&expr, t)?;
                acc.push(t, v)?;
                let total = points.fetch_add(acc.points - counted, Ordering::Relaxed) + acc.points - counted;
                counted = acc.points;
                q.check_samples(total)?;
                // The assembled result: every part's points, and this part's series.
                let series = acc.series.len().saturating_mul(std::mem::size_of::<Accumulated>());
                q.check_held(total.saturating_mul(footprint::SAMPLE_BYTES).saturating_add(series))?;
            }
            Ok(acc)
        };
        let (mut acc, mut annotations, peak_samples) = if parts == 1 {
            let acc = run(&q, 0, steps)?;
            let peak = q.peak_samples();
            (acc, q.into_annotations(), peak)
        } else {
            let forks: Vec<Query> = (1..parts)
                .map(|part| {
                    let first = part * per_part;
                    let count = per_part.min(steps - first).max(0);
                    q.fork(start_ms + first * step_ms, usize::try_from(count).unwrap_or(0))
                })
                .collect();
            q.set_part(start_ms, usize::try_from(per_part).unwrap_or(0));
            let (first, rest) = std::thread::scope(|scope| {
                let handles: Vec<_> = forks
                    .into_iter()
                    .enumerate()
                    .map(|(i, fork)| {
                        let part = i as i64 + 1;
                        let run = &run;
                        scope.spawn(move || {
                            run(&fork, part * per_part, per_part).map(|acc| (acc, fork.into_annotations()))
                        })
                    })
                    .collect();
                let first = run(&q, 0, per_part);
                let rest: Vec<Result<(RangeAccumulator, Annotations)>> = handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|_| Err(EvalError::exec("query worker panicked"))))
                    .collect();
                (first, rest)
            });
            let mut acc = first?;
            let peak = q.peak_samples();
            let mut annotations = q.into_annotations();
            for part in rest {
                let (more, notes) = part?;
                acc.absorb(more);
                annotations.merge(notes);
            }
            (acc, annotations, peak)
        };
        acc.points = points.load(Ordering::Relaxed);
        if let Some(call) = last_sort(&expr) {
            // Prometheus warns at every `sort*` call evaluated; the one evaluated last (the last
            // in the text) gives the position.
            let at = positions.of(positions::key(call), Spot::Node);
            annotations.warn_at(at, "sort is ineffective for range queries since results are always ordered by labels");
        }
        let evaluated = Instant::now();
        let value = Value::Matrix(acc.finish()?);
        let stats = per_step.map(|per_step| QueryStats {
            timings: Timings {
                preparation: prepared - started,
                inner_eval: evaluated - evaluating,
                result_sort: evaluated.elapsed(),
            },
            samples: sample_stats(per_step, peak_samples, tiers),
        });
        Ok(QueryResult { value, annotations, stats, loaded_samples: loaded, peak_samples })
    }
}

/// The sample counts of a query: per step, their sum, and the peak (see [`super::stats`]).
fn sample_stats(per_step: Vec<(i64, u64)>, peak: usize, tiers: Vec<(i64, u64)>) -> SampleStats {
    let total_queryable = per_step.iter().fold(0u64, |sum, (_, n)| sum.saturating_add(*n));
    let peak = u64::try_from(peak).unwrap_or(u64::MAX);
    SampleStats { total_queryable, per_step, peak, tiers }
}

fn type_word(t: ValueType) -> &'static str {
    match t {
        ValueType::Vector => "instant vector",
        ValueType::Scalar => "scalar",
        ValueType::Matrix => "range vector",
        ValueType::String => "string",
    }
}

fn check_range(start_ms: i64, end_ms: i64, step_ms: i64) -> Result<()> {
    if step_ms <= 0 {
        return Err(EvalError::bad(
            "zero or negative query resolution step widths are not accepted. Try a positive integer",
        ));
    }
    if end_ms < start_ms {
        return Err(EvalError::bad("end timestamp must not be before start time"));
    }
    // The span may not fit an i64 (times at both ends of its range): then it is too long too.
    if end_ms.checked_sub(start_ms).is_none_or(|span| span / step_ms >= MAX_POINTS_PER_SERIES) {
        return Err(EvalError::bad(
            "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)",
        ));
    }
    Ok(())
}

/// Parses a query, rejecting absurdly large or deep ones before they can exhaust the stack.
///
/// # Errors
/// `bad_data` with the parser's message, or when a nesting/size limit is exceeded.
pub fn parse(query: &str) -> Result<Expr> {
    parse_at(query, 0, 0)
}

/// [`parse`] for a query with this step and range (end - start), in milliseconds: the values of
/// `step()` and `range()` in duration expressions (see `duration_expr.rs`).
///
/// # Errors
/// As [`parse`], and `bad_data` for a duration expression that cannot be computed.
pub fn parse_at(query: &str, step_ms: i64, range_ms: i64) -> Result<Expr> {
    if query.len() > PARSED_CACHE_MAX_LEN {
        return parse_uncached(query, step_ms, range_ms);
    }
    // `step()` and `range()` fold into the text's durations: only then do they belong in the key.
    // Matched without case, as the duration expressions match `step()` and `range()`.
    let key = if contains_ignoring_case(query, "step") || contains_ignoring_case(query, "range") {
        (query.to_owned(), step_ms, range_ms)
    } else {
        (query.to_owned(), 0, 0)
    };
    if let Some(expr) = parsed_cache().get(&key) {
        return Ok(expr.as_ref().clone());
    }
    let expr = parse_uncached(query, step_ms, range_ms)?;
    parsed_cache().insert(key, std::sync::Arc::new(expr.clone()));
    Ok(expr)
}

/// Whether `text` contains the ASCII `word` in any case.
fn contains_ignoring_case(text: &str, word: &str) -> bool {
    text.as_bytes().windows(word.len()).any(|w| w.eq_ignore_ascii_case(word.as_bytes()))
}

/// Longest query text whose parse is remembered.
const PARSED_CACHE_MAX_LEN: usize = 4096;

/// Parsed queries (only those that parsed), by text and, when the text may use them, step and
/// range: dashboards send the same queries at every refresh, and a parse (promql-parser, the
/// regex cost checks) was ~13% of a one-series range query. Cloning the tree costs less.
fn parsed_cache() -> &'static quick_cache::sync::Cache<(String, i64, i64), std::sync::Arc<Expr>> {
    static CACHE: std::sync::OnceLock<quick_cache::sync::Cache<(String, i64, i64), std::sync::Arc<Expr>>> =
        std::sync::OnceLock::new();
    CACHE.get_or_init(|| quick_cache::sync::Cache::new(512))
}

fn parse_uncached(query: &str, step_ms: i64, range_ms: i64) -> Result<Expr> {
    check_text_limits(query)?;
    let unescaped = super::byte_escapes::mark(query);
    let folded = super::duration_expr::fold(&unescaped, step_ms, range_ms).map_err(EvalError::bad)?;
    let marked = super::extended::mark(&folded).map_err(EvalError::bad)?;
    let marked = super::trim::mark(&marked).map_err(EvalError::bad)?;
    let marked = super::functions::info::mark_selectors(&marked);
    let query: &str = &marked;
    bounds::check_numeric_durations(query)?;
    // A panic of the parser on some input is contained here, whatever the caller (the blocking
    // task of a query, or the async handler of `match[]`), and answered as bad input.
    let parsed = containment::contain("parsing the query", || promql_parser::parser::parse(query))
        .map_err(|panic| EvalError::bad(panic.to_string()))?;
    let expr = parsed.map_err(|e| EvalError::bad(crate::excerpt::excerpt(&e, 500)))?;
    if depth_exceeds(&expr, MAX_NESTING_DEPTH) {
        return Err(EvalError::bad(format!("query is nested more than {MAX_NESTING_DEPTH} levels deep")));
    }
    bounds::check_times(&expr)?;
    Ok(expr)
}

/// Counts bracket nesting, tokens (runs of name/number characters, operator characters,
/// brackets), AST-level operators and the regex cost of string literals, outside string
/// literals.
///
/// promql-parser recurses once per AST level while parsing, type-checking and dropping, so an
/// expression must be bounded before it is parsed: 20,000 chained `+` overflow a 2 MiB thread
/// stack and abort the whole process. Every AST level comes from a bracket, an operator
/// character or a keyword operator (`and`, `or`, `unless`, `atan2`), so capping their count
/// (outside `{...}` matcher lists, where `=`, `!` and `,` create no level) caps the depth.
fn check_text_limits(query: &str) -> Result<()> {
    let (mut depth, mut max_depth, mut tokens, mut levels) = (0usize, 0usize, 0usize, 0usize);
    let mut in_braces = 0usize;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    // The identifier being read, up to 7 characters (enough to recognise the keywords).
    let mut word = String::new();
    let mut in_word = false;
    let end_word = |word: &mut String, levels: &mut usize| {
        if ["and", "or", "unless", "atan2"].iter().any(|k| word.eq_ignore_ascii_case(k)) {
            *levels += 1;
        }
        word.clear();
    };
    // Contents of the current string literal (backslash escapes kept, except `\\`) and the
    // summed regex cost of all of them: the parser compiles matcher regexes while parsing.
    let (mut literal, mut regex_cost) = (String::new(), 0u64);
    for c in query.chars() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
                if c != '\\' {
                    literal.push('\\');
                }
                literal.push(c);
            } else if c == '\\' && q != '`' {
                escaped = true;
            } else if c == q {
                quote = None;
                regex_cost = regex_cost.saturating_add(crate::matcher::regex_cost(&literal).unwrap_or(0));
                literal.clear();
            } else {
                literal.push(c);
            }
            continue;
        }
        // Tokens inside a matcher list cost the parser linear time; only the rest counts.
        let is_word = c.is_alphanumeric() || matches!(c, '_' | ':' | '.');
        if is_word && !in_word && in_braces == 0 {
            tokens += 1;
        }
        in_word = is_word;
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            // Longer identifiers are kept at 7 characters, none of them a keyword.
            if word.len() < 7 {
                word.push(c);
            } else {
                word.replace_range(.., "_______");
            }
            continue;
        }
        end_word(&mut word, &mut levels);
        match c {
            '"' | '\'' | '`' => {
                quote = Some(c);
                if in_braces == 0 {
                    tokens += 1;
                }
            }
            '(' | '[' | '{' => {
                depth += 1;
                max_depth = max_depth.max(depth);
                tokens += 1;
                if c == '{' {
                    in_braces += 1;
                } else if in_braces == 0 {
                    levels += 1;
                }
            }
            ')' | ']' | '}' => {
                depth = depth.saturating_sub(1);
                if c == '}' {
                    in_braces = in_braces.saturating_sub(1);
                }
            }
            '+' | '-' | '*' | '/' | '%' | '^' | '=' | '<' | '>' | '!' | ',' if in_braces == 0 => {
                tokens += 1;
                if c != ',' {
                    levels += 1;
                }
            }
            _ => {}
        }
    }
    end_word(&mut word, &mut levels);
    if regex_cost > MAX_REGEX_COST {
        return Err(EvalError::bad(format!(
            "query regexes are too complex: estimated compiled size {regex_cost}, limit {MAX_REGEX_COST}"
        )));
    }
    if max_depth > MAX_NESTING_DEPTH {
        return Err(EvalError::bad(format!(
            "query is too complex: brackets are nested more than {MAX_NESTING_DEPTH} levels deep"
        )));
    }
    if levels > MAX_QUERY_OPERATORS {
        return Err(EvalError::bad(format!(
            "query is too complex: more than {MAX_QUERY_OPERATORS} operators and brackets"
        )));
    }
    if tokens > MAX_QUERY_TOKENS {
        return Err(EvalError::bad(format!("query is too complex: more than {MAX_QUERY_TOKENS} tokens")));
    }
    Ok(())
}

/// True when the AST is deeper than `limit` (the walk itself stops at the limit).
fn depth_exceeds(e: &Expr, limit: usize) -> bool {
    if limit == 0 {
        return true;
    }
    let next = limit - 1;
    match e {
        Expr::Aggregate(a) => depth_exceeds(&a.expr, next) || a.param.as_ref().is_some_and(|p| depth_exceeds(p, next)),
        Expr::Unary(u) => depth_exceeds(&u.expr, next),
        Expr::Binary(b) => depth_exceeds(&b.lhs, next) || depth_exceeds(&b.rhs, next),
        Expr::Paren(p) => depth_exceeds(&p.expr, next),
        Expr::Subquery(s) => depth_exceeds(&s.expr, next),
        Expr::Call(c) => c.args.args.iter().any(|a| depth_exceeds(a, next)),
        _ => false,
    }
}

/// The last `sort*` call of the expression in source order, if any.
fn last_sort(e: &Expr) -> Option<&Call> {
    match e {
        Expr::Aggregate(a) => last_sort(&a.expr),
        Expr::Unary(u) => last_sort(&u.expr),
        Expr::Binary(b) => last_sort(&b.rhs).or_else(|| last_sort(&b.lhs)),
        Expr::Paren(p) => last_sort(&p.expr),
        Expr::Subquery(s) => last_sort(&s.expr),
        Expr::Call(c) => {
            c.args.args.iter().rev().find_map(|a| last_sort(a)).or_else(|| c.func.name.starts_with("sort").then_some(c))
        }
        _ => None,
    }
}

/// Turns the root's value at the instant into the public result, applying delayed name removal.
fn instant_value(v: StepValue, t: i64) -> Result<Value> {
    Ok(match v {
        StepValue::Scalar(value) => Value::Scalar { timestamp_ms: t, value },
        StepValue::String(value) => Value::String { timestamp_ms: t, value },
        StepValue::Vector(elems) => Value::Vector(finish_vector(elems, t)?),
        StepValue::Matrix(windows) => {
            let mut out: Vec<RangeSeries> = windows
                .into_iter()
                .map(|w| RangeSeries {
                    labels: if w.drop_name { without_name(&w.labels) } else { w.labels },
                    samples: w.samples,
                    histograms: w.histograms,
                })
                .collect();
            out.sort_by(|a, b| a.labels.cmp(&b.labels));
            Value::Matrix(out)
        }
    })
}

fn finish_vector(elems: Vec<Elem>, t: i64) -> Result<Vec<InstantSample>> {
    let out: Vec<InstantSample> = elems
        .into_iter()
        .map(|e| InstantSample {
            labels: if e.drop_name { without_name(&e.labels) } else { e.labels },
            timestamp_ms: t,
            value: e.value,
            histogram: e.hist,
        })
        .collect();
    let mut seen = std::collections::HashSet::with_capacity(out.len());
    for s in &out {
        if !seen.insert(&s.labels) {
            return Err(EvalError::exec("vector cannot contain metrics with the same labelset"));
        }
    }
    Ok(out)
}

/// Collects per-step values of a range query into series keyed by their labels. Label sets are
/// looked up by identity first (most nodes return the same `Arc`s at every step), by value on
/// a miss. Invariant: every index in `by_addr` and `index` points into `series`.
#[derive(Default)]
struct RangeAccumulator {
    by_addr: IdentityCache<usize>,
    index: HashMap<Labels, usize>,
    series: Vec<Accumulated>,
    points: usize,
}

/// One series of a range query result being assembled: its labels, float points, histogram
/// points (each ascending) and whether its name is dropped.
struct Accumulated {
    labels: Labels,
    samples: Vec<Sample>,
    histograms: Vec<HistogramSample>,
    drop_name: bool,
}

impl Accumulated {
    fn has_point_at(&self, t: i64) -> bool {
        self.samples.last().is_some_and(|p| p.timestamp_ms == t)
            || self.histograms.last().is_some_and(|p| p.timestamp_ms == t)
    }
}

impl RangeAccumulator {
    fn push(&mut self, t: i64, v: StepValue) -> Result<()> {
        match v {
            StepValue::Scalar(x) => self.add(&Labels::empty(), t, x, None, false)?,
            StepValue::Vector(elems) => {
                for e in elems {
                    self.add(&e.labels, t, e.value, e.hist, e.drop_name)?;
                }
            }
            other => {
                return Err(EvalError::bad(format!(
                    "invalid expression type \"{}\" for range query, must be Scalar or instant Vector",
                    other.type_name()
                )))
            }
        }
        self.by_addr.end_round();
        Ok(())
    }

    /// Appends the point at `t`; a second point at the same `t` means the step's vector held
    /// two elements with the same labels.
    fn add(
        &mut self,
        labels: &Labels,
        t: i64,
        value: f64,
        hist: Option<std::sync::Arc<crate::histogram::Histogram>>,
        drop_name: bool,
    ) -> Result<()> {
        self.points += 1;
        let (index, series) = (&mut self.index, &mut self.series);
        let i = *self.by_addr.get_or_insert_with(labels, |l| {
            *index.entry(l.clone()).or_insert_with_key(|l| {
                series.push(Accumulated {
                    labels: l.clone(),
                    samples: Vec::new(),
                    histograms: Vec::new(),
                    drop_name: false,
                });
                series.len() - 1
            })
        });
        if let Some(s) = series.get_mut(i) {
            if s.has_point_at(t) {
                return Err(EvalError::exec("vector cannot contain metrics with the same labelset"));
            }
            match hist {
                Some(h) => s.histograms.push(HistogramSample { timestamp_ms: t, histogram: h }),
                None => s.samples.push(Sample::new(t, value)),
            }
            s.drop_name |= drop_name;
        }
        Ok(())
    }

    /// Appends the points of `later` (steps after all of this one's) series by series, as if
    /// both had been accumulated in one pass.
    fn absorb(&mut self, later: RangeAccumulator) {
        for more in later.series {
            match self.index.get(&more.labels) {
                Some(&i) => {
                    if let Some(s) = self.series.get_mut(i) {
                        s.samples.extend(more.samples);
                        s.histograms.extend(more.histograms);
                        s.drop_name |= more.drop_name;
                    }
                }
                None => {
                    self.index.insert(more.labels.clone(), self.series.len());
                    self.series.push(more);
                }
            }
        }
        self.points += later.points;
    }

    /// Drops names where flagged, merges series that became equal (an error when they
    /// overlap in time), and sorts by labels.
    fn finish(self) -> Result<Vec<RangeSeries>> {
        let mut merged: HashMap<Labels, (Vec<Sample>, Vec<HistogramSample>)> =
            HashMap::with_capacity(self.series.len());
        for s in self.series {
            let labels = if s.drop_name { without_name(&s.labels) } else { s.labels };
            match merged.get_mut(&labels) {
                None => {
                    merged.insert(labels, (s.samples, s.histograms));
                }
                Some((floats, hists)) => {
                    floats.extend(s.samples);
                    floats.sort_by_key(|s| s.timestamp_ms);
                    hists.extend(s.histograms);
                    hists.sort_by_key(|s| s.timestamp_ms);
                    let mut times: Vec<i64> =
                        floats.iter().map(|p| p.timestamp_ms).chain(hists.iter().map(|p| p.timestamp_ms)).collect();
                    times.sort_unstable();
                    if times.windows(2).any(|w| matches!(w, [a, b] if a == b)) {
                        return Err(EvalError::exec("vector cannot contain metrics with the same labelset"));
                    }
                }
            }
        }
        let mut out: Vec<RangeSeries> = merged
            .into_iter()
            .map(|(labels, (samples, histograms))| RangeSeries { labels, samples, histograms })
            .collect();
        out.sort_by(|a, b| a.labels.cmp(&b.labels));
        Ok(out)
    }
}

/// Deadline bookkeeping shared by the evaluator.
pub(crate) fn deadline_after(timeout: Duration) -> Instant {
    Instant::now().checked_add(timeout).unwrap_or_else(Instant::now)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A remembered parse answers as a fresh one: for `step()`/`range()` the step and range are
    /// part of the key, errors are never remembered.
    #[test]
    fn remembered_parses_equal_fresh_ones() {
        let queries =
            ["rate(up[5m])", "sum by (job) (rate(x{a=~\"b.*\"}[step()]))", "up[range():step()]", "up offset STEP()"];
        for q in queries {
            for (step, range) in [(60_000, 3_600_000), (15_000, 3_600_000), (60_000, 600_000)] {
                let fresh = parse_uncached(q, step, range).unwrap();
                assert_eq!(parse_at(q, step, range).unwrap(), fresh, "{q} {step} {range}");
                assert_eq!(parse_at(q, step, range).unwrap(), fresh, "{q} {step} {range}, remembered");
            }
        }
        assert!(parse_at("sum(", 0, 0).is_err());
        assert!(parse_at("sum(", 0, 0).is_err());
    }

    #[test]
    fn deep_or_long_queries_are_refused_before_parsing() {
        let complex = |q: String| parse(&q).unwrap_err().to_string();
        assert!(complex(vec!["1"; 20_000].join("+")).contains("more than 2000 operators"));
        assert!(complex(vec!["up"; 3_000].join(" OR ")).contains("more than 2000 operators"));
        assert!(complex(format!("{}1{}", "(".repeat(300), ")".repeat(300))).contains("nested more than 200"));
        // Matcher lists and strings do not count: they add no AST levels.
        let matchers: Vec<String> = (0..3_000).map(|i| format!("l{i}!=\"a-b+c\"")).collect();
        assert!(parse(&format!("up{{{}}}", matchers.join(","))).is_ok());
        assert!(parse(&format!("label_replace(up, \"a\", \"{}\", \"b\", \"c\")", "-".repeat(5_000))).is_ok());
        // Identifiers that merely contain a keyword are not operators.
        assert!(parse(&vec!["order_total"; 150].join(" + ")).is_ok());
    }

    #[test]
    fn parser_messages_are_shortened() {
        let words: Vec<String> = (0..200_000).map(|i| format!("w{i}")).collect();
        let huge = format!("{{a=~\"{}\"}}", words.join("|"));
        let msg = parse(&huge).unwrap_err().to_string();
        assert!(msg.len() < 600, "{} bytes", msg.len());
    }
}
