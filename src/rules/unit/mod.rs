//! `saltdb test rules`: Prometheus' rule unit tests (`promtool test rules`), run on saltdb's own
//! evaluator and a real store in a temporary directory.
//!
//! Each test group loads its input series lazily, as promtool does: before the evaluation at
//! time `t`, exactly the samples at or before `t` are written, so an expression looking ahead
//! (`offset -1m`, `@ end()`) sees what promtool's sees. All groups are evaluated at `0`,
//! `evaluation_interval`, ... up to the latest `eval_time` of the group's tests; the alerts
//! expected at `eval_time` are compared with the firing alerts of the evaluation at or
//! just before it; queries are asked at the end, of everything loaded.
//!
//! Where saltdb differs from promtool 2.42 (it follows newer Prometheus): a test group without
//! `interval` takes the evaluation interval, `start_timestamp` and `fuzzy_compare` are read,
//! and groups not named in `group_eval_order` keep their file order.

mod file;
mod text;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::backend::Backend;
use std::sync::Arc;

use crate::histogram::Histogram;
use crate::labels::Labels;
use crate::promql::notation::{parse_metric, parse_values, HistogramValue, SeqValue};
use crate::promql::{Engine, EngineOptions, Value};
use crate::sample::{HistogramSample, PackedBatch, Sample};
use crate::storage::{FsyncMode, ReadLimits, Storage, StorageConfig};

use super::group::{Env, GroupRun, DEFAULT_RESEND_DELAY_MS};
use super::RuleFiles;
pub use file::UnitTestFile;
pub use text::go_float_e;
use text::{go_duration, samples_text, AlertText};

/// One test file's outcome: its failures, as promtool prints them (empty: it passed).
pub type Failures = Vec<String>;

/// Runs every test group of the unit test file at `path`.
pub fn run_file(path: &Path) -> Failures {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => return vec![format!("open {}: {e}", path.display())],
    };
    let file: UnitTestFile = match serde_norway::from_slice(&bytes) {
        Ok(f) => f,
        Err(e) => return vec![e.to_string()],
    };
    let base = path.parent().unwrap_or(Path::new("."));
    let patterns: Vec<String> = file
        .rule_files
        .iter()
        .map(|f| if Path::new(f).is_absolute() { f.clone() } else { base.join(f).to_string_lossy().into_owned() })
        .collect();
    let rules = match RuleFiles::load(&patterns) {
        Ok(r) => r,
        Err(errors) => return errors,
    };
    let eval_interval = file.evaluation_interval.filter(|&i| i > 0).unwrap_or(60_000);
    let mut order = BTreeMap::new();
    for (i, name) in file.group_eval_order.iter().enumerate() {
        if order.insert(name.as_str(), i).is_some() {
            return vec![format!("group name repeated in evaluation order: {name}")];
        }
    }
    let mut failures = Vec::new();
    for group in &file.tests {
        let setting = Setting { eval_interval, order: &order, fuzzy: file.fuzzy_compare, rules: &rules };
        failures.extend(run_group(group, &setting));
    }
    failures
}

/// What every test group of a file shares.
struct Setting<'a> {
    eval_interval: i64,
    order: &'a BTreeMap<&'a str, usize>,
    fuzzy: bool,
    rules: &'a RuleFiles,
}

/// A store in a temporary directory, removed when dropped (fields drop in order: the store
/// closes before its directory goes).
struct ScratchStore {
    backend: Backend,
    _dir: RemovedOnDrop,
}

/// A directory removed when dropped.
struct RemovedOnDrop(PathBuf);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl ScratchStore {
    fn open() -> Result<Self, String> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("saltdb-rules-test-{}-{n}", std::process::id()));
        let mut config = StorageConfig::new(dir.clone());
        config.retention_ms = None;
        config.fsync = FsyncMode::Never;
        // Tests may write years ahead of the clock (`long-period.yml` spans days from 1970,
        // others start in the future).
        config.max_future_ms = None;
        // One window for a whole test: tests span days to centuries (`long-period.yml` evaluates
        // every 100 days up to 2262), and a window per day would be thousands of keyspaces.
        config.window_ms = 100 * 365 * 86_400_000;
        let guard = RemovedOnDrop(dir);
        let store =
            Storage::open(config).map_err(|e| format!("opening a scratch store in {}: {e}", guard.0.display()))?;
        Ok(Self { backend: Backend::Embedded(store), _dir: guard })
    }
}

/// One input value: a float or a native histogram.
#[derive(Clone)]
enum Point {
    Float(f64),
    Histogram(Arc<Histogram>),
}

/// Input samples by series, written up to a time as evaluation advances.
struct LazyInput {
    series: Vec<(Labels, Vec<(i64, Point)>)>,
    /// Per series, how many samples are written.
    written: Vec<usize>,
}

impl LazyInput {
    fn parse(group: &file::TestGroup, start_ms: i64, interval: i64) -> Result<Self, String> {
        let mut series = Vec::with_capacity(group.input_series.len());
        for s in &group.input_series {
            let labels = parse_metric(&s.series).map_err(|e| format!("series {:?}: {e}", s.series))?;
            let values = parse_values(s.values.as_deref().unwrap_or(""))?;
            let points = (0i64..)
                .zip(values)
                .filter_map(|(i, v)| {
                    let t = start_ms + i * interval;
                    match v {
                        SeqValue::Omitted => None,
                        SeqValue::Float(v) => Some((t, Point::Float(v))),
                        SeqValue::Histogram(h) => Some((t, Point::Histogram(Arc::new(h.histogram)))),
                    }
                })
                .collect();
            series.push((labels, points));
        }
        let written = vec![0; series.len()];
        Ok(Self { series, written })
    }

    /// Writes the samples at or before `t_ms` not written yet.
    fn write_until(&mut self, t_ms: i64, backend: &Backend) -> Result<(), String> {
        let mut batch = PackedBatch::default();
        for ((labels, points), done) in self.series.iter().zip(self.written.iter_mut()) {
            let upto = points.partition_point(|&(t, _)| t <= t_ms);
            let Some(new) = points.get(*done..upto).filter(|p| !p.is_empty()) else { continue };
            for l in labels.iter() {
                batch.push_label(&l.name, &l.value);
            }
            for (t, p) in new {
                match p {
                    Point::Float(v) => batch.push_sample(Sample::new(*t, *v)),
                    Point::Histogram(h) => {
                        batch.push_histogram(HistogramSample { timestamp_ms: *t, histogram: h.clone() });
                    }
                }
            }
            batch.finish_series();
            *done = upto;
        }
        if batch.is_empty() {
            return Ok(());
        }
        backend.write_packed(batch).map(|_| ()).map_err(|e| format!("loading input series: {e}"))
    }
}

fn run_group(group: &file::TestGroup, setting: &Setting<'_>) -> Failures {
    match run_group_inner(group, setting) {
        Ok(f) => f,
        Err(e) => vec![e],
    }
}

fn start_of(group: &file::TestGroup) -> Result<i64, String> {
    let Some(text) = group.start_timestamp.as_deref() else { return Ok(0) };
    if let Ok(secs) = text.parse::<f64>() {
        return Ok((secs * 1000.0).round() as i64);
    }
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| t.timestamp_millis())
        .map_err(|e| format!("start_timestamp {text:?}: {e}"))
}

fn run_group_inner(group: &file::TestGroup, setting: &Setting<'_>) -> Result<Failures, String> {
    let interval = group.interval.filter(|&i| i > 0).unwrap_or(setting.eval_interval);
    let start = start_of(group)?;
    let mut input = LazyInput::parse(group, start, interval)?;
    let store = ScratchStore::open()?;
    let engine = Engine::new(EngineOptions::default());
    let env = Env {
        engine: &engine,
        backend: &store.backend,
        scope: &crate::tenant::Scope::Unscoped,
        gate: None,
        external_labels: &group.external_labels,
        external_url: &group.external_url,
    };
    let mut groups: Vec<GroupRun> = setting.rules.groups().map(|g| GroupRun::new(g.clone(), interval, 0)).collect();
    groups.sort_by_key(|g| setting.order.get(g.group.name.as_str()).copied().unwrap_or(0));
    let named = if group.name.is_empty() { String::new() } else { format!("    name: {},\n", group.name) };
    for t in &group.alert_rule_test {
        if t.alertname.is_empty() {
            let in_group =
                if group.name.is_empty() { String::new() } else { format!(" (in TestGroup {})", group.name) };
            return Err(format!(
                "an item under alert_rule_test misses required attribute alertname at eval_time {}{in_group}",
                crate::duration::format_prometheus(t.eval_time.unwrap_or(0))
            ));
        }
    }
    let latest = group
        .alert_rule_test
        .iter()
        .map(|t| t.eval_time.unwrap_or(0))
        .chain(group.promql_expr_test.iter().map(|t| t.eval_time.unwrap_or(0)))
        .max()
        .unwrap_or(0);
    let mut failures = Vec::new();
    let mut ts = 0;
    while ts <= latest {
        input.write_until(start + ts, &store.backend)?;
        let mut errors = Vec::new();
        for g in &mut groups {
            g.evaluate(start + ts, &env, DEFAULT_RESEND_DELAY_MS);
            for r in &g.rules {
                if let Some(e) = &r.last_error {
                    errors.push(format!("    rule: {}, time: {}, err: {e}", r.rule.name(), go_duration(ts)));
                }
            }
        }
        if !errors.is_empty() {
            failures.extend(errors);
            return Ok(failures);
        }
        for t in group
            .alert_rule_test
            .iter()
            .filter(|t| (ts..ts + setting.eval_interval).contains(&t.eval_time.unwrap_or(0)))
        {
            let got = AlertText::firing(&groups, &t.alertname);
            let expected = AlertText::expected(&t.alertname, &t.exp_alerts);
            if !got.equals(&expected, setting.fuzzy) {
                failures.push(format!(
                    "{named}    alertname: {}, time: {}, \n        exp:{}, \n        got:{}",
                    t.alertname,
                    crate::duration::format_prometheus(t.eval_time.unwrap_or(0)),
                    expected.indented("            "),
                    got.indented("            ")
                ));
            }
        }
        ts += setting.eval_interval;
    }
    for t in &group.promql_expr_test {
        if let Err(e) = check_expr(t, start, &env, setting.fuzzy) {
            failures.push(e);
        }
    }
    Ok(failures)
}

/// One `promql_expr_test`: the query's answer against the expected samples, both sorted.
fn check_expr(t: &file::ExprTest, start: i64, env: &Env<'_>, fuzzy: bool) -> Result<(), String> {
    let at = crate::duration::format_prometheus(t.eval_time.unwrap_or(0));
    let fail = |e: String| format!("    expr: {:?}, time: {at}, err: {e}", t.expr);
    let querier = env.backend.querier(ReadLimits::none());
    let answer =
        env.engine.instant(&*querier, &t.expr, start + t.eval_time.unwrap_or(0)).map_err(|e| fail(e.to_string()))?;
    let mut got: Vec<Got> = match answer.value {
        Value::Vector(v) => {
            v.into_iter().map(|s| Got { labels: s.labels, value: s.value, histogram: s.histogram }).collect()
        }
        Value::Scalar { value, .. } => vec![Got { labels: Labels::empty(), value, histogram: None }],
        _ => return Err(fail("rule result is not a vector or scalar".to_owned())),
    };
    let mut expected = Vec::with_capacity(t.exp_samples.len());
    for s in &t.exp_samples {
        let labels = match s.labels.as_deref() {
            None | Some("") => Labels::empty(),
            Some(text) => parse_metric(text).map_err(|e| fail(format!("labels {text:?}: {e}")))?,
        };
        let histogram = match s.histogram.as_deref() {
            None => None,
            Some(text) => match parse_values(text).map_err(|e| fail(format!("histogram {text:?}: {e}")))?.pop() {
                Some(SeqValue::Histogram(h)) => Some(*h),
                _ => return Err(fail(format!("histogram {text:?} is not one native histogram"))),
            },
        };
        expected.push(Expected { labels, value: s.value, histogram });
    }
    got.sort_by(|a, b| a.labels.cmp(&b.labels));
    expected.sort_by(|a, b| a.labels.cmp(&b.labels));
    let same = got.len() == expected.len()
        && got.iter().zip(&expected).all(|(g, e)| {
            g.labels == e.labels
                && match (&e.histogram, &g.histogram) {
                    (None, None) => text::float_equal(g.value, e.value, fuzzy),
                    (Some(want), Some(h)) => want.matches(h, |a, b| text::float_equal(a, b, fuzzy)),
                    _ => false,
                }
        });
    if same {
        return Ok(());
    }
    let got: Vec<(Labels, String)> =
        got.into_iter().map(|g| (g.labels, text::value_text(g.value, g.histogram.as_deref()))).collect();
    let expected: Vec<(Labels, String)> = expected
        .into_iter()
        .map(|e| (e.labels, text::value_text(e.value, e.histogram.as_ref().map(|h| &h.histogram))))
        .collect();
    Err(format!(
        "    expr: {:?}, time: {at},\n        exp: {}\n        got: {}",
        t.expr,
        samples_text(&expected),
        samples_text(&got)
    ))
}

/// A sample of a query's answer.
struct Got {
    labels: Labels,
    value: f64,
    histogram: Option<Arc<Histogram>>,
}

/// An expected sample.
struct Expected {
    labels: Labels,
    value: f64,
    histogram: Option<HistogramValue>,
}
