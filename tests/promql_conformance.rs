//! Runs Prometheus' PromQL conformance scripts (`promql/promqltest/testdata/*.test`) against
//! saltdb's evaluator, the way Prometheus' own runner (`promqltest/test.go`) does: instant
//! evals are also run with `@`-pinned variants and re-run as range queries.
//!
//! Data goes through saltdb's real storage: every `load` is a `WriteBatch` written to a
//! `Storage` in a temporary directory, and `clear` opens a fresh one. A second test runs every
//! script again on the ClickHouse backend (two real `clickhouse-server` shards, a fresh database
//! per `clear`) and must pass every eval the ratchet records, like the embedded store; a third
//! runs them on replicated shards (two shards of two replicas and a ZooKeeper).
//!
//! Directory: env `SALTDB_PROMQL_TESTS` (default `../shared/promql-tests/promql`, which exists
//! only in the team's workspace). Without the scripts the test prints a `SKIPPED:` line and
//! passes, except under `CI` or when `SALTDB_PROMQL_TESTS` names a missing directory: then it
//! fails. Native histograms are loaded into either store (`load_with_nhcb` also derives
//! histograms with custom buckets from classic ones, as Prometheus' runner does) and compared
//! as Prometheus' runner compares them (`promql_conformance/histograms.rs`).
//!
//! The ratchet (`tests/promql_ratchet.txt`, see `promql_conformance/ratchet.rs`) records every
//! eval that passes; the test fails naming each recorded eval that no longer passes, and when
//! the file is missing or unreadable. `SALTDB_PROMQL_RATCHET_UPDATE=1` records newly passing
//! evals; it refuses to drop a recorded one unless `SALTDB_PROMQL_RATCHET_ALLOW_DROP=1` is set.
//! The ratchet records the v3.14 scripts; to run another set (Prometheus main's
//! `promql/promqltest/testdata`), set `SALTDB_PROMQL_RATCHET=none` as well: then every eval
//! must pass, and the ratchet file is neither read nor written.
//!
//! Annotations carry their position (` (line:column)`), which Prometheus main's runner
//! compares and v3.14's did not: an expected message matches either way (see
//! [`without_position`]).

#[path = "it/clickhouse_cluster.rs"]
mod clickhouse_cluster;
#[path = "promql_conformance/histograms.rs"]
mod histograms;
#[cfg(test)]
#[path = "promql_conformance/notation_scripts.rs"]
mod notation_scripts;
#[path = "promql_conformance/ratchet.rs"]
mod ratchet;
#[path = "promql_conformance/script.rs"]
mod script;
#[path = "it/skip.rs"]
mod skip;
#[path = "it/watchdog.rs"]
mod watchdog;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use promql_parser::parser::{AtModifier, Expr};
use saltdb::clickhouse::{ClickHouse, ClickHouseConfig};
use saltdb::labels::Labels;
use saltdb::promql::{Annotations, Engine, EngineOptions, InstantSample, Value};
use saltdb::sample::{is_stale_marker, HistogramSample, PackedBatch, Sample, SeriesSamples, StartTimestamp};
use saltdb::storage::{FsyncMode, Querier, ReadLimits, Storage, StorageConfig};
use script::{Command, Eval, Expected, Load, Matcher, SeqValue, SeriesDesc};

const RATCHET_FILE: &str = "tests/promql_ratchet.txt";
const TEST: &str = "promql_conformance";

/// Functions whose result depends on the evaluation time even with `@` (Prometheus'
/// `AtModifierUnsafeFunctions`).
const AT_UNSAFE: &[&str] = &[
    "days_in_month",
    "day_of_month",
    "day_of_week",
    "day_of_year",
    "hour",
    "minute",
    "month",
    "year",
    "predict_linear",
    "time",
    "timestamp",
    "start",
    "end",
    "range",
    "step",
];

#[derive(Default, Debug, Clone)]
struct FileStats {
    passed: usize,
    failed: usize,
    skipped: usize,
    failures: Vec<String>,
    /// Every eval that passed.
    passing: BTreeMap<ratchet::EvalId, ratchet::EvalNote>,
    /// Every eval that failed, with the reason.
    failing: BTreeMap<ratchet::EvalId, (ratchet::EvalNote, String)>,
}

struct Runner {
    engine: Engine,
    /// A database opened in the background for the next `clear` (opening takes ~0.3 s).
    spare: Option<std::thread::JoinHandle<(Storage, tempfile::TempDir)>>,
    /// Databases being closed and deleted in the background.
    closing: Vec<std::thread::JoinHandle<()>>,
    /// Declared before `dir` so the database closes before its directory is removed.
    store: Storage,
    dir: tempfile::TempDir,
    /// When set, data goes to (and is read from) this ClickHouse cluster instead of `store`.
    clickhouse: Option<OnClickHouse>,
}

/// The ClickHouse cluster a run uses: its shards and the database of the current `clear`.
struct OnClickHouse {
    /// Per shard, its replicas' URLs.
    urls: Vec<Vec<String>>,
    /// Databases opened so far in this run (names are `conformance_<file>_<n>`).
    opened: usize,
    file: String,
    store: ClickHouse,
}

impl OnClickHouse {
    fn open(urls: &[Vec<String>], file: &str, n: usize) -> ClickHouse {
        let mut config = ClickHouseConfig::replicated(urls.to_vec());
        config.database = format!("conformance_{}_{n}", file.replace(|c: char| !c.is_ascii_alphanumeric(), "_"));
        ClickHouse::open(config).expect("a database on the ClickHouse shards")
    }
}

fn open_storage() -> (Storage, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("create temp dir");
    let mut config = StorageConfig::new(dir.path().to_path_buf());
    config.retention_ms = None; // test data lives at 1970
    config.fsync = FsyncMode::Never;
    let store = Storage::open(config).expect("open storage");
    (store, dir)
}

impl Runner {
    fn new() -> Self {
        let opts = EngineOptions { timeout: Duration::from_secs(100), ..EngineOptions::default() };
        let (store, dir) = open_storage();
        let spare = Some(std::thread::spawn(open_storage));
        Self { engine: Engine::new(opts), spare, closing: Vec::new(), store, dir, clickhouse: None }
    }

    /// A runner whose data lives on the ClickHouse shards at `urls` (per shard, its replicas).
    fn on_clickhouse(urls: &[Vec<String>], file: &str) -> Self {
        let mut r = Self::new();
        let store = OnClickHouse::open(urls, file, 0);
        r.clickhouse = Some(OnClickHouse { urls: urls.to_vec(), opened: 1, file: file.to_owned(), store });
        r
    }

    fn querier(&self) -> Box<dyn Querier> {
        match &self.clickhouse {
            Some(ch) => Box::new(ch.store.querier(ReadLimits::none())),
            None => Box::new(self.store.querier(ReadLimits::none())),
        }
    }

    /// Switches to a fresh, empty database.
    fn clear(&mut self) {
        if let Some(ch) = &mut self.clickhouse {
            ch.store = OnClickHouse::open(&ch.urls, &ch.file, ch.opened);
            ch.opened += 1;
            return;
        }
        let fresh = match self.spare.take().map(std::thread::JoinHandle::join) {
            Some(Ok(s)) => s,
            _ => open_storage(),
        };
        self.spare = Some(std::thread::spawn(open_storage));
        let old_store = std::mem::replace(&mut self.store, fresh.0);
        let old_dir = std::mem::replace(&mut self.dir, fresh.1);
        self.closing.push(std::thread::spawn(move || {
            drop(old_store);
            drop(old_dir);
        }));
    }

    /// Waits for background opens and closes so no temporary directory outlives the run.
    fn finish(mut self) {
        if let Some(h) = self.spare.take() {
            let _ = h.join();
        }
        for h in self.closing.drain(..) {
            let _ = h.join();
        }
    }

    fn load(&mut self, load: &Load) -> Result<(), String> {
        let floats = script::load_points(load);
        let mut hists = histograms::load_histograms(load);
        if load.with_nhcb {
            hists.extend(histograms::nhcb_series(&floats).map_err(|e| format!("load failed: {e}"))?);
        }
        let mut by_labels: BTreeMap<Labels, SeriesSamples> = BTreeMap::new();
        for (labels, points) in floats {
            let s = by_labels.entry(labels.clone()).or_insert_with(|| empty_series(labels));
            s.samples = points.into_iter().map(|(t, v)| Sample::new(t, v)).collect();
        }
        for (labels, points) in hists {
            let s = by_labels.entry(labels.clone()).or_insert_with(|| empty_series(labels));
            s.histograms = points
                .into_iter()
                .map(|(t, h)| HistogramSample { timestamp_ms: t, histogram: std::sync::Arc::new(h) })
                .collect();
        }
        let series: Vec<SeriesSamples> =
            by_labels.into_values().filter(|s| !s.samples.is_empty() || !s.histograms.is_empty()).collect();
        let starts = script::load_starts(load);
        let mut batch = PackedBatch::default();
        for s in &series {
            // Samples without a value (`_`) have no start timestamp either.
            let times: BTreeSet<i64> =
                s.samples.iter().map(|p| p.timestamp_ms).chain(s.histograms.iter().map(|h| h.timestamp_ms)).collect();
            for l in s.labels.iter() {
                batch.push_label(&l.name, &l.value);
            }
            s.samples.iter().for_each(|p| batch.push_sample(*p));
            s.histograms.iter().for_each(|h| batch.push_histogram(h.clone()));
            let sts = starts.get(&s.labels).map(Vec::as_slice).unwrap_or_default();
            for &(timestamp_ms, start_ms) in sts.iter().filter(|(t, _)| times.contains(t)) {
                batch.push_start(StartTimestamp { timestamp_ms, start_ms });
            }
            batch.finish_series();
        }
        match &self.clickhouse {
            Some(ch) => ch.store.write(&batch).map(|_| ()),
            None => self.store.write_packed(batch).map(|_| ()),
        }
        .map_err(|e| format!("load failed: {e}"))
    }

    fn run_eval(&self, ev: &Eval) -> Result<(), String> {
        if ev.is_range {
            return self.run_range(ev);
        }
        let t = match ev.range_vector {
            Some((_, end, _)) => end,
            None => ev.start_ms,
        };
        self.run_instant(ev, &ev.expr, t)?;
        for (expr, at) in at_variants(&ev.expr, t) {
            self.run_instant(ev, &expr, at)?;
        }
        Ok(())
    }

    fn run_range(&self, ev: &Eval) -> Result<(), String> {
        let res = self.engine.range(&*self.querier(), &ev.expr, ev.start_ms, ev.end_ms, ev.step_ms);
        let Some(r) = check_failure(ev, res)? else {
            return Ok(());
        };
        check_annotations(ev, &r.annotations)?;
        compare(ev, &r.value, (ev.start_ms, ev.end_ms, ev.step_ms))
    }

    fn run_instant(&self, ev: &Eval, expr: &str, t: i64) -> Result<(), String> {
        let res = self.engine.instant(&*self.querier(), expr, t);
        let Some(r) = check_failure(ev, res).map_err(|e| format!("{e} (query {expr:?} at {t})"))? else {
            return Ok(());
        };
        check_annotations(ev, &r.annotations).map_err(|e| format!("{e} (query {expr:?} at {t})"))?;
        let range = ev.range_vector.unwrap_or((0, 0, 0));
        compare(ev, &r.value, range).map_err(|e| format!("{e} (query {expr:?} at {t})"))?;
        if ev.exclude_from_range || uses_query_context(expr) {
            return Ok(());
        }
        let rr = self
            .engine
            .range(&*self.querier(), expr, t - 60_000, t + 60_000, 60_000)
            .map_err(|e| format!("range mode of {expr:?} at {t}: error {e}"))?;
        if ev.expect.ordered {
            return Ok(());
        }
        let Value::Matrix(m) = rr.value else {
            return Err("range mode did not return a matrix".into());
        };
        let vec: Vec<InstantSample> = m
            .iter()
            .filter_map(|s| {
                let float = s.samples.iter().find(|p| p.timestamp_ms == t).map(|p| InstantSample {
                    labels: s.labels.clone(),
                    timestamp_ms: t,
                    value: p.value,
                    histogram: None,
                });
                float.or_else(|| {
                    s.histograms.iter().find(|p| p.timestamp_ms == t).map(|p| InstantSample {
                        labels: s.labels.clone(),
                        timestamp_ms: t,
                        value: 0.0,
                        histogram: Some(p.histogram.clone()),
                    })
                })
            })
            .collect();
        let v = match r.value {
            Value::Scalar { .. } => match vec.first() {
                Some(s) => Value::Scalar { timestamp_ms: t, value: s.value },
                None => return Err("range mode returned no point for a scalar".into()),
            },
            _ => Value::Vector(vec),
        };
        compare(ev, &v, range).map_err(|e| format!("range mode of {expr:?} at {t}: {e}"))
    }
}

fn empty_series(labels: Labels) -> SeriesSamples {
    SeriesSamples { labels, samples: Vec::new(), histograms: Vec::new() }
}

fn uses_query_context(expr: &str) -> bool {
    ["start()", "end()", "range()", "step()"].iter().any(|f| expr.contains(f))
}

/// Pins every top-level selector and subquery to `@ t` and returns the variants to run,
/// like Prometheus' `atModifierTestCases`. Returns nothing when a function depends on the
/// evaluation time.
fn at_variants(expr: &str, t: i64) -> Vec<(String, i64)> {
    // promql-parser reads a `\xNN` escape of 0x80 and above as the character U+00NN, not as
    // the byte Go (and saltdb's engine) reads, so the printed expression would be another query.
    if has_byte_escape(expr) {
        return Vec::new();
    }
    let Ok(mut e) = promql_parser::parser::parse(expr) else {
        return Vec::new();
    };
    let at = AtModifier::At(SystemTime::UNIX_EPOCH + Duration::from_millis(t.max(0) as u64));
    let mut unsafe_fn = false;
    pin_at(&mut e, &at, &mut unsafe_fn);
    if unsafe_fn {
        return Vec::new();
    }
    let text = go_infinity(&e.to_string());
    let times: Vec<i64> = if t == 0 { vec![-1000, 0, 1000] } else { vec![-10 * t, 0, t / 5, t, 10 * t] };
    times.into_iter().map(|et| (text.clone(), et)).collect()
}

/// `text` (printed by promql-parser) with positive infinity spelled `+Inf`, as Prometheus'
/// printer (Go's `FormatFloat`) spells it in the variants its runner queries: the positions of
/// the annotations of a variant depend on its text.
fn go_infinity(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 4);
    let mut quote: Option<char> = None;
    let (mut prev, mut braces) = (' ', 0usize);
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match quote {
            Some(q) => {
                if c == '\\' && q != '`' {
                    out.push(c);
                    if let Some((_, next)) = chars.next() {
                        out.push(next);
                    }
                    continue;
                }
                if c == q {
                    quote = None;
                }
            }
            None if matches!(c, '"' | '\'' | '`') => quote = Some(c),
            None if c == '{' => braces += 1,
            None if c == '}' => braces = braces.saturating_sub(1),
            None if c == 'I'
                && braces == 0
                && text[i..].starts_with("Inf")
                && !text[i + 3..].starts_with(|n: char| n.is_ascii_alphanumeric() || n == '_' || n == ':')
                && !(prev.is_ascii_alphanumeric() || matches!(prev, '_' | ':' | '-' | '+')) =>
            {
                out.push('+');
            }
            None => {}
        }
        out.push(c);
        prev = c;
    }
    out
}

/// Whether `expr` holds `\xNN` with NN at least 0x80 (a byte outside ASCII).
fn has_byte_escape(expr: &str) -> bool {
    expr.match_indices("\\x")
        .any(|(i, _)| expr.get(i + 2..i + 4).and_then(|h| u8::from_str_radix(h, 16).ok()).is_some_and(|b| b >= 0x80))
}

fn pin_at(e: &mut Expr, at: &AtModifier, unsafe_fn: &mut bool) {
    match e {
        Expr::VectorSelector(vs) => {
            vs.at.get_or_insert_with(|| at.clone());
        }
        Expr::MatrixSelector(ms) => {
            ms.vs.at.get_or_insert_with(|| at.clone());
        }
        // Selectors inside a subquery keep their own times (the subquery gets the `@`).
        Expr::Subquery(s) => {
            s.at.get_or_insert_with(|| at.clone());
        }
        Expr::Aggregate(a) => {
            pin_at(&mut a.expr, at, unsafe_fn);
            if let Some(p) = a.param.as_mut() {
                pin_at(p, at, unsafe_fn);
            }
        }
        Expr::Unary(u) => pin_at(&mut u.expr, at, unsafe_fn),
        Expr::Binary(b) => {
            pin_at(&mut b.lhs, at, unsafe_fn);
            pin_at(&mut b.rhs, at, unsafe_fn);
        }
        Expr::Paren(p) => pin_at(&mut p.expr, at, unsafe_fn),
        Expr::Call(c) => {
            if AT_UNSAFE.contains(&c.func.name) {
                *unsafe_fn = true;
            }
            c.args.args.iter_mut().for_each(|a| pin_at(a, at, unsafe_fn));
        }
        _ => {}
    }
}

/// Applies `expect fail`: `Ok(None)` when an expected failure happened.
fn check_failure(
    ev: &Eval,
    res: Result<saltdb::promql::QueryResult, saltdb::promql::EvalError>,
) -> Result<Option<saltdb::promql::QueryResult>, String> {
    match (res, &ev.expect.fail) {
        (Err(e), Some(m)) => {
            if m.matches(&e.to_string()) {
                Ok(None)
            } else {
                Err(format!("expected error matching {m:?}, got {e}"))
            }
        }
        (Err(e), None) => Err(format!("error: {e}")),
        (Ok(_), Some(_)) => Err("expected an error but got none".into()),
        (Ok(r), None) => Ok(Some(r)),
    }
}

fn check_annotations(ev: &Eval, a: &Annotations) -> Result<(), String> {
    let (warnings, infos) = (a.warnings(), a.infos());
    if ev.expect.any_warn && warnings.is_empty() {
        return Err("expected warnings but got none".into());
    }
    if ev.expect.any_info && infos.is_empty() {
        return Err("expected info annotations but got none".into());
    }
    check_annotation_kind("warn", &ev.expect.warn, &warnings)?;
    check_annotation_kind("info", &ev.expect.info, &infos)?;
    if ev.expect.no_warn && !warnings.is_empty() {
        return Err(format!("unexpected warnings {warnings:?}"));
    }
    if ev.expect.no_info && !infos.is_empty() {
        return Err(format!("unexpected infos {infos:?}"));
    }
    Ok(())
}

fn check_annotation_kind(kind: &str, expected: &[Matcher], actual: &[String]) -> Result<(), String> {
    if expected.is_empty() {
        return Ok(());
    }
    if actual.is_empty() {
        return Err(format!("expected {kind} annotations but none were found"));
    }
    let matches = |e: &Matcher, a: &str| e.matches(a) || without_position(a).is_some_and(|a| e.matches(a));
    for e in expected {
        if !actual.iter().any(|a| matches(e, a)) {
            return Err(format!("expected {kind} annotation {e:?}, found {actual:?}"));
        }
    }
    for a in actual {
        if !expected.iter().any(|e| matches(e, a)) {
            return Err(format!("unexpected {kind} annotation {a:?}"));
        }
    }
    Ok(())
}

/// `annotation` without the ` (line:column)` position at its end, if it has one.
///
/// saltdb prints annotations with the position of the expression they refer to, as
/// Prometheus' HTTP API does. The two test frameworks differ there: Prometheus v3.14's
/// `checkAnnotations` compares `err.Error()` of annotations that were never given the query,
/// so its scripts expect messages without position; the main branch's compares
/// `annos.AsStrings(expr, 0, 0)`, with positions. An expected message therefore matches an
/// annotation as printed (main) or the annotation without its position (v3.14). A script
/// that expects a position cannot be matched by a message without one.
fn without_position(annotation: &str) -> Option<&str> {
    let body = annotation.strip_suffix(')')?;
    let open = body.rfind(" (")?;
    let (line, column) = body.get(open + 2..)?.split_once(':')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(line) && digits(column)).then(|| &annotation[..open])
}

/// Prometheus' `almost.Equal` with epsilon 1e-6.
fn almost_equal(a: f64, b: f64) -> bool {
    const MIN_NORMAL: f64 = f64::MIN_POSITIVE;
    const EPS: f64 = 1e-6;
    if is_stale_marker(a) || is_stale_marker(b) {
        return is_stale_marker(a) && is_stale_marker(b);
    }
    if a.is_nan() && b.is_nan() {
        return true;
    }
    if a == b {
        return true;
    }
    let abs_sum = a.abs() + b.abs();
    let diff = (a - b).abs();
    if a == 0.0 || b == 0.0 || abs_sum < MIN_NORMAL {
        return diff < EPS * MIN_NORMAL;
    }
    diff / abs_sum.min(f64::MAX) < EPS
}

fn expected_series(ev: &Eval) -> &[SeriesDesc] {
    match &ev.expected {
        Expected::Series(s) => s,
        _ => &[],
    }
}

fn compare(ev: &Eval, v: &Value, range: (i64, i64, i64)) -> Result<(), String> {
    let exp = expected_series(ev);
    let find = |l: &Labels| exp.iter().position(|s| s.labels == *l);
    match v {
        Value::Matrix(m) => {
            if ev.expect.ordered {
                return Err("expected ordered result, but query returned a matrix".into());
            }
            if let Expected::Scalar(_) = ev.expected {
                return Err("expected scalar, got matrix".into());
            }
            if m.windows(2).any(|w| w[0].labels > w[1].labels) {
                return Err("matrix is not sorted by labels".into());
            }
            let mut seen = vec![false; exp.len()];
            for s in m {
                let i = find(&s.labels).ok_or_else(|| format!("unexpected series {} in result", s.labels))?;
                seen[i] = true;
                let (start, end, step) = range;
                let mut want = Vec::new();
                let mut want_h = Vec::new();
                for (k, e) in exp[i].values.iter().enumerate() {
                    let ts = start + k as i64 * step;
                    if ts > end {
                        return Err(format!(
                            "expected {} points for {}, more than the range holds",
                            exp[i].values.len(),
                            s.labels
                        ));
                    }
                    match e {
                        SeqValue::Float(f) => want.push((ts, *f)),
                        SeqValue::Histogram(h) => want_h.push((ts, h)),
                        SeqValue::Omitted => {}
                    }
                }
                let got: Vec<(i64, f64)> = s.samples.iter().map(|p| (p.timestamp_ms, p.value)).collect();
                if want.len() != got.len() || want.iter().zip(&got).any(|(w, g)| w.0 != g.0 || !almost_equal(g.1, w.1))
                {
                    return Err(format!("series {}: expected {want:?}, got {got:?}", s.labels));
                }
                let same_h = want_h.len() == s.histograms.len()
                    && want_h
                        .iter()
                        .zip(&s.histograms)
                        .all(|(w, g)| w.0 == g.timestamp_ms && w.1.matches(&g.histogram, almost_equal));
                if !same_h {
                    return Err(format!(
                        "series {}: expected histograms {:?}, got {:?}",
                        s.labels,
                        want_h.iter().map(|(t, h)| (t, &h.histogram)).collect::<Vec<_>>(),
                        s.histograms
                    ));
                }
            }
            if let Some(i) = seen.iter().position(|s| !s) {
                return Err(format!("expected series {} not found", exp[i].labels));
            }
            Ok(())
        }
        Value::Vector(vec) => {
            if let Expected::Scalar(_) = ev.expected {
                return Err(format!("expected scalar, got vector {vec:?}"));
            }
            let mut seen = vec![false; exp.len()];
            for (pos, s) in vec.iter().enumerate() {
                let i = find(&s.labels)
                    .ok_or_else(|| format!("unexpected metric {} in result, value {}", s.labels, s.value))?;
                if ev.expect.ordered && i != pos {
                    return Err(format!("expected {} at position {}, was at {}", s.labels, i + 1, pos + 1));
                }
                match (exp[i].values.first(), &s.histogram) {
                    (Some(SeqValue::Float(want)), None) => {
                        if !almost_equal(*want, s.value) {
                            return Err(format!("expected {want} for {} but got {}", s.labels, s.value));
                        }
                    }
                    (Some(SeqValue::Histogram(want)), Some(got)) => {
                        if !want.matches(got, almost_equal) {
                            return Err(format!(
                                "expected histogram {:?} for {} but got {got:?}",
                                want.histogram, s.labels
                            ));
                        }
                    }
                    (Some(SeqValue::Float(want)), Some(got)) => {
                        return Err(format!("expected float {want} for {} but got histogram {got:?}", s.labels));
                    }
                    (Some(SeqValue::Histogram(want)), None) => {
                        return Err(format!(
                            "expected histogram {:?} for {} but got float {}",
                            want.histogram, s.labels, s.value
                        ));
                    }
                    _ => return Err(format!("no expected value for {}", s.labels)),
                }
                seen[i] = true;
            }
            if let Some(i) = seen.iter().position(|s| !s) {
                return Err(format!("expected metric {} not found", exp[i].labels));
            }
            Ok(())
        }
        Value::Scalar { value, .. } => match ev.expected {
            Expected::Scalar(want) if almost_equal(want, *value) => Ok(()),
            Expected::Scalar(want) => Err(format!("expected scalar {want} but got {value}")),
            _ => Err(format!("expected vector or matrix result, but got scalar {value}")),
        },
        Value::String { value, .. } => match &ev.expected {
            Expected::String(s) if s == value => Ok(()),
            Expected::String(s) => Err(format!("expected string {s:?} but got {value:?}")),
            Expected::Empty if value.is_empty() => Ok(()),
            _ => Err(format!("unexpected string {value:?}")),
        },
    }
}

/// Runs one script, on the embedded store or (with `clickhouse`, the shards' URLs) on
/// ClickHouse.
fn run_file(path: &Path, name: &str, clickhouse: Option<&[Vec<String>]>) -> FileStats {
    let mut stats = FileStats::default();
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            stats.failures.push(format!("cannot read: {e}"));
            return stats;
        }
    };
    let cmds = match script::parse_script(&text) {
        Ok(c) => c,
        Err(e) => {
            stats.failures.push(format!("cannot parse script: {e}"));
            return stats;
        }
    };
    let mut ids = ratchet::Identifier::new(name, &text);
    let mut runner = match clickhouse {
        Some(urls) => Runner::on_clickhouse(urls, name),
        None => Runner::new(),
    };
    for cmd in &cmds {
        match cmd {
            Command::Clear => runner.clear(),
            Command::Load(l) => {
                if let Err(e) = runner.load(l) {
                    stats.failures.push(e);
                }
            }
            Command::Eval(ev) => {
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runner.run_eval(ev)))
                    .unwrap_or_else(|p| {
                        let msg = p
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
                        Err(format!("PANIC: {}", msg.unwrap_or_default()))
                    });
                let (id, note) = (ids.id(ev.line), ratchet::EvalNote { line: ev.line, expr: ev.expr.clone() });
                match outcome {
                    Ok(()) => {
                        stats.passed += 1;
                        stats.passing.insert(id, note);
                    }
                    Err(reason) => {
                        stats.failed += 1;
                        stats.failures.push(format!("line {}: {}\n    {}", ev.line, ev.expr, reason));
                        stats.failing.insert(id, (note, reason));
                    }
                }
            }
        }
    }
    runner.finish();
    stats
}

/// Whether `SALTDB_PROMQL_RATCHET=none` asks for every eval to pass instead of the ratchet's
/// recorded ones: for another set of scripts than the v3.14 ones the ratchet records (such as
/// Prometheus main's), whose evals have other ids, so that the ratchet would report every
/// recorded eval as gone.
fn without_ratchet() -> bool {
    std::env::var("SALTDB_PROMQL_RATCHET").is_ok_and(|v| v == "none")
}

/// A failing eval, as the reports print it.
fn failure_line(id: &ratchet::EvalId, note: &ratchet::EvalNote, why: &str) -> String {
    format!("{}.test line {}: {}\n    {}", id.file, note.line, note.expr, why)
}

/// The scripts' directory, or `None` (after announcing the skip) when the default one is absent
/// outside CI.
///
/// # Panics
/// When `SALTDB_PROMQL_TESTS` names a directory that does not exist, or under `CI`.
fn tests_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("SALTDB_PROMQL_TESTS") {
        let d = PathBuf::from(d);
        assert!(d.is_dir(), "SALTDB_PROMQL_TESTS={} is not a directory", d.display());
        return Some(d);
    }
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/promql-tests/promql");
    if d.is_dir() {
        return Some(d);
    }
    skip::skip(
        TEST,
        &format!("Prometheus' PromQL test scripts are not at {}", d.display()),
        "set SALTDB_PROMQL_TESTS to a copy of promql/promqltest/testdata of Prometheus v3.14",
    );
    None
}

/// The `*.test` scripts of `dir`, sorted.
fn scripts(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e} (set SALTDB_PROMQL_TESTS)", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "test"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no *.test scripts in {}", dir.display());
    files
}

/// Every script again on the ClickHouse backend (two shards): every eval the ratchet records
/// as passing on the embedded store must pass here too.
#[test]
fn promql_conformance_on_clickhouse() {
    let Some(dir) = tests_dir() else { return };
    if !clickhouse_cluster::installed() {
        skip::skip(
            "promql_conformance_on_clickhouse",
            "clickhouse-server is not on PATH",
            "apt-get install clickhouse-server",
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let shards = clickhouse_cluster::start(tmp.path(), 2);
    let urls: Vec<Vec<String>> = shards.iter().map(|s| vec![s.url.clone()]).collect();
    conformance_on(&dir, &urls, "2 shards");
}

/// Every script again on replicated ClickHouse shards (two shards of two replicas and a
/// ZooKeeper): the same evals pass.
#[test]
fn promql_conformance_on_replicated_clickhouse() {
    let test = "promql_conformance_on_replicated_clickhouse";
    let Some(dir) = tests_dir() else { return };
    if !clickhouse_cluster::installed() {
        skip::skip(test, "clickhouse-server is not on PATH", "apt-get install clickhouse-server");
        return;
    }
    if !clickhouse_cluster::ZooKeeper::installed() {
        skip::skip(test, "ZooKeeper is not installed", "apt-get install zookeeper");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let zookeeper = clickhouse_cluster::ZooKeeper::start(&tmp.path().join("zookeeper"));
    let servers = clickhouse_cluster::start_replicated(tmp.path(), 2, 2, zookeeper.port);
    let urls: Vec<Vec<String>> = servers.iter().map(|r| r.iter().map(|s| s.url.clone()).collect()).collect();
    conformance_on(&dir, &urls, "2 shards x 2 replicas");
    drop(zookeeper);
}

/// Runs every script on the ClickHouse shards at `urls` and checks the ratchet's evals pass.
fn conformance_on(dir: &Path, urls: &[Vec<String>], cluster: &str) {
    let started = std::time::Instant::now();
    let (mut passing, mut failing) = (BTreeMap::new(), BTreeMap::new());
    for f in scripts(dir) {
        let name = f.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let s = run_file(&f, &name, Some(urls));
        passing.extend(s.passing);
        failing.extend(s.failing);
    }
    if without_ratchet() {
        println!("on ClickHouse ({cluster}): {} evals pass, {} fail", passing.len(), failing.len());
        let failed: Vec<String> = failing.iter().map(|(id, (note, why))| failure_line(id, note, why)).collect();
        assert!(failed.is_empty(), "{} evals fail on the ClickHouse backend:\n{}", failed.len(), failed.join("\n"));
        return;
    }
    let ratchet_path = Path::new(env!("CARGO_MANIFEST_DIR")).join(RATCHET_FILE);
    let recorded = ratchet::read(&ratchet_path).unwrap_or_else(|e| panic!("PromQL conformance ratchet: {e}"));
    let lost = ratchet::lost(&recorded, &passing, &failing);
    println!(
        "on ClickHouse ({cluster}): {} evals pass, {} fail, in {:.0} s; {} of the {} recorded pass",
        passing.len(),
        failing.len(),
        started.elapsed().as_secs_f64(),
        recorded.len() - lost.len(),
        recorded.len()
    );
    assert!(lost.is_empty(), "{} recorded evals fail on the ClickHouse backend:\n{}", lost.len(), lost.join("\n"));
}

#[test]
fn promql_conformance() {
    let Some(dir) = tests_dir() else { return };
    let files = scripts(&dir);
    let mut summary = String::new();
    let mut total = FileStats::default();
    summary.push_str(&format!("{:<28} {:>5} {:>6} {:>6} {:>7}\n", "file", "run", "passed", "failed", "skipped"));
    for f in &files {
        let name = f.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let started = std::time::Instant::now();
        let s = run_file(f, &name, None);
        eprintln!("{name}: {:.1}s", started.elapsed().as_secs_f64());
        summary.push_str(&format!(
            "{:<28} {:>5} {:>6} {:>6} {:>7}\n",
            name,
            s.passed + s.failed,
            s.passed,
            s.failed,
            s.skipped
        ));
        total.passed += s.passed;
        total.failed += s.failed;
        total.skipped += s.skipped;
        total.passing.extend(s.passing);
        total.failing.extend(s.failing);
        for fl in &s.failures {
            total.failures.push(format!("{name}.test {fl}"));
        }
    }
    summary.push_str(&format!(
        "{:<28} {:>5} {:>6} {:>6} {:>7}\n",
        "TOTAL",
        total.passed + total.failed,
        total.passed,
        total.failed,
        total.skipped
    ));
    let mut report = summary.clone();
    report.push_str("\nFailing evals:\n");
    for f in &total.failures {
        report.push_str(f);
        report.push('\n');
    }
    let report_path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("promql_conformance_summary.txt");
    let _ = std::fs::write(&report_path, &report);
    println!("{summary}\nfull report with failing evals: {}", report_path.display());

    if without_ratchet() {
        assert!(
            total.failed == 0,
            "{} evals fail (the full report is in {}):\n{report}",
            total.failed,
            report_path.display()
        );
        return;
    }
    let ratchet_path = Path::new(env!("CARGO_MANIFEST_DIR")).join(RATCHET_FILE);
    let flag = |name: &str| std::env::var(name).is_ok_and(|v| v == "1");
    let update = flag("SALTDB_PROMQL_RATCHET_UPDATE");
    let recorded = match ratchet::read(&ratchet_path) {
        Ok(r) => r,
        // Only an explicit update may create the file; a normal run without it is a failure.
        Err(e) if update && !ratchet_path.exists() => {
            eprintln!("{e}: creating it");
            Default::default()
        }
        Err(e) => panic!("PromQL conformance ratchet: {e} (create it with SALTDB_PROMQL_RATCHET_UPDATE=1)"),
    };
    let lost = ratchet::lost(&recorded, &total.passing, &total.failing);
    let gained = total.passing.keys().filter(|id| !recorded.contains(*id)).count();
    if update && (lost.is_empty() || flag("SALTDB_PROMQL_RATCHET_ALLOW_DROP")) {
        ratchet::write(&ratchet_path, &total.passing).expect("write the ratchet file");
        println!("ratchet: recorded {} passing evals ({gained} new, {} dropped)", total.passing.len(), lost.len());
        return;
    }
    if gained > 0 {
        println!(
            "ratchet: {gained} evals pass that are not recorded yet (SALTDB_PROMQL_RATCHET_UPDATE=1 records them)"
        );
    }
    assert!(
        lost.is_empty(),
        "PromQL conformance regressed: {} recorded evals no longer pass{}:\n{}\n\n{summary}",
        lost.len(),
        if update { " (the update refuses to drop them without SALTDB_PROMQL_RATCHET_ALLOW_DROP=1)" } else { "" },
        lost.join("\n")
    );
}
