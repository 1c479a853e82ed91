//! The per-window index against a brute-force reference: random label sets written over several
//! windows (some sealed, some hot, some still in the head), random matchers and time ranges;
//! every answer of the index (series, select, label names, label values, limits) must equal
//! what filtering every series in memory gives ([`MemQuerier`]), whichever way the samples are
//! read (a seek per series or one iterator per bucket range). Batches span more windows than the
//! writer keeps presence sets for, so sets are evicted and reloaded while a batch is built.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use saltdb::labels::Labels;
use saltdb::matcher::{MatchOp, Matcher};
use saltdb::sample::{Sample, SeriesSamples, WriteBatch};
use saltdb::storage::{MemQuerier, Querier, ReadLimits, ReadStrategy, Storage};

use crate::common::storage_config;

const DAY: i64 = 86_400_000;
const T0: i64 = 20_000 * DAY;
const VALUES: [&str; 5] = ["a", "b", "ab", "abc", "b-1"];

/// Days (one window each) the samples fall in: more than the writer's presence sets.
const DAYS: i64 = 7;

/// One generated series: label (name, value) indexes from a small alphabet (so matchers hit
/// often), and the (day, offset) of each sample.
type GenSeries = (Vec<(usize, usize)>, Vec<(i64, i64)>);

fn arb_series() -> impl Strategy<Value = GenSeries> {
    (
        proptest::collection::vec((0usize..4, 0usize..VALUES.len()), 0..4),
        proptest::collection::vec((0i64..DAYS, 0i64..DAY), 1..4),
    )
}

const NAMES: [&str; 4] = ["job", "instance", "zone", "extra"];

fn arb_matcher() -> impl Strategy<Value = Matcher> {
    let op = prop_oneof![
        Just(MatchOp::Equal),
        Just(MatchOp::NotEqual),
        Just(MatchOp::RegexMatch),
        Just(MatchOp::RegexNoMatch)
    ];
    let value = prop_oneof![
        (0usize..VALUES.len()).prop_map(|i| VALUES[i].to_owned()),
        Just(String::new()),
        Just("a.*".to_owned()),
        Just("a|b".to_owned()),
        Just(".+".to_owned()),
        Just("(ab|b)c?".to_owned()),
        Just(".*-1".to_owned()),
    ];
    let name = prop_oneof![(0usize..NAMES.len()).prop_map(|i| NAMES[i].to_owned()), Just("__name__".to_owned())];
    (op, name, value).prop_filter_map("valid matcher", |(op, name, value)| {
        let value = if name == "__name__" && op == MatchOp::Equal { format!("m_{value}") } else { value };
        Matcher::new(op, name, value).ok()
    })
}

fn build(series: &[GenSeries]) -> Vec<SeriesSamples> {
    let mut out: Vec<SeriesSamples> = Vec::new();
    for (i, (pairs, times)) in series.iter().enumerate() {
        let mut labels: Vec<(String, String)> = vec![("__name__".into(), format!("m_{}", VALUES[i % VALUES.len()]))];
        for &(n, v) in pairs {
            if labels.iter().all(|(name, _)| name != NAMES[n]) {
                labels.push((NAMES[n].into(), VALUES[v].into()));
            }
        }
        // Distinct series: the index of the series is a label of its own.
        labels.push(("id".into(), i.to_string()));
        let mut samples: Vec<Sample> =
            times.iter().map(|&(day, off)| Sample::new(T0 + day * DAY + off, (day * 10 + off % 7) as f64)).collect();
        samples.sort_by_key(|s| s.timestamp_ms);
        samples.dedup_by_key(|s| s.timestamp_ms);
        out.push(SeriesSamples { labels: Labels::from_pairs(labels).unwrap(), samples, histograms: Vec::new() });
    }
    out
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

fn label_strings(v: Vec<Labels>) -> Vec<String> {
    sorted(v.iter().map(ToString::to_string).collect())
}

fn compare(
    s: &Storage,
    reference: &MemQuerier,
    matchers: &[Matcher],
    start: i64,
    end: i64,
) -> Result<usize, TestCaseError> {
    let q = s.querier(ReadLimits::none());
    let what = format!("{matchers:?} in [{start}, {end}]");
    // Series, names and values are answered per window, as Prometheus answers them per block.
    let (ws, we) = (start.div_euclid(DAY) * DAY, end.div_euclid(DAY) * DAY + DAY - 1);
    let found = label_strings(q.series(matchers, start, end, None).unwrap());
    prop_assert_eq!(&found, &label_strings(reference.series(matchers, ws, we, None).unwrap()), "series {}", what);
    let mut got = q.select(matchers, start, end, None).unwrap();
    let mut want = reference.select(matchers, start, end, None).unwrap();
    got.sort_by_key(|s| s.labels.to_string());
    want.sort_by_key(|s| s.labels.to_string());
    prop_assert_eq!(got, want, "select {}", what);
    prop_assert_eq!(
        q.label_names(matchers, start, end, None).unwrap(),
        reference.label_names(matchers, ws, we, None).unwrap(),
        "label names {}",
        what
    );
    for name in ["job", "zone", "__name__"] {
        prop_assert_eq!(
            q.label_values(name, matchers, start, end, None).unwrap(),
            reference.label_values(name, matchers, ws, we, None).unwrap(),
            "values of {} {}",
            name,
            what
        );
    }
    // A limit returns that many of the answers, no more.
    let limited = q.series(matchers, start, end, Some(2)).unwrap();
    prop_assert!(limited.len() == found.len().min(2), "limit 2 gave {} of {}", limited.len(), found.len());
    for l in label_strings(limited) {
        prop_assert!(found.contains(&l), "limit 2 gave {} which is not an answer {}", l, what);
    }
    // Answers given from memory (the HTTP layer's path without a thread hand-off), once the
    // questions above filled the caches, are the same answers.
    let mut held = 0;
    if let Some(h) = q.held_series(matchers, start, end, None) {
        prop_assert_eq!(&label_strings(h), &found, "held series {}", what);
        held += 1;
    }
    if let Some(h) = q.held_series(matchers, start, end, Some(2)) {
        prop_assert!(h.len() == found.len().min(2), "held, limit 2 gave {} of {}", h.len(), found.len());
    }
    if let Some(h) = q.held_label_names(matchers, start, end, None) {
        prop_assert_eq!(h, q.label_names(matchers, start, end, None).unwrap(), "held label names {}", what);
        held += 1;
    }
    for name in ["job", "zone", "__name__"] {
        if let Some(h) = q.held_label_values(name, matchers, start, end, None) {
            prop_assert_eq!(h, q.label_values(name, matchers, start, end, None).unwrap(), "held values {}", what);
            held += 1;
        }
    }
    Ok(held)
}

#[test]
fn index_answers_equal_a_scan_of_every_series() {
    let mut runner = TestRunner::new(Config { cases: 24, failure_persistence: None, ..Config::default() });
    let strategy = (
        proptest::collection::vec(arb_series(), 1..40),
        proptest::collection::vec((proptest::collection::vec(arb_matcher(), 0..3), -1i64..DAYS + 1, 0i64..3), 12),
        0usize..3,
        prop_oneof![Just(ReadStrategy::Auto), Just(ReadStrategy::Seek), Just(ReadStrategy::Range)],
        any::<bool>(),
    );
    runner
        .run(&strategy, |(series, queries, sealed, read_strategy, flush_new)| {
            let data = build(&series);
            let dir = tempfile::tempdir().unwrap();
            let mut config = storage_config(dir.path());
            config.read_strategy = read_strategy;
            let s = Storage::open(config).unwrap();
            // Days before `sealed` are written first and sealed; later ones stay hot, and the
            // newest writes stay in the head (or are flushed: a flush indexes each series in
            // each window again unless the writer knows it is there).
            let cut = T0 + sealed as i64 * DAY;
            let (old, new): (Vec<_>, Vec<_>) = data
                .iter()
                .map(|d| {
                    let (a, b): (Vec<Sample>, Vec<Sample>) = d.samples.iter().partition(|x| x.timestamp_ms < cut);
                    (
                        SeriesSamples { labels: d.labels.clone(), samples: a, histograms: Vec::new() },
                        SeriesSamples { labels: d.labels.clone(), samples: b, histograms: Vec::new() },
                    )
                })
                .unzip();
            s.write(WriteBatch { series: old.into_iter().filter(|x| !x.samples.is_empty()).collect() }).unwrap();
            for day in 0..sealed as i64 {
                s.seal_window(T0 + day * DAY).unwrap();
            }
            s.flush_head().unwrap();
            s.write(WriteBatch { series: new.into_iter().filter(|x| !x.samples.is_empty()).collect() }).unwrap();
            if flush_new {
                s.flush_head().unwrap();
            }
            let reference = MemQuerier::new(data);
            for (matchers, first_day, days) in queries {
                let start = T0 + first_day * DAY + DAY / 3;
                let end = start + days * DAY;
                compare(&s, &reference, &matchers, start, end)?;
            }
            compare(&s, &reference, &[], 0, T0 + (DAYS + 3) * DAY)?;
            Ok(())
        })
        .unwrap();
}

/// Label names and values of a one-equality selection are read from the postings, or by walking
/// the selected series when they are few against the values the postings would read: series
/// shaped so that both ways are taken (a rare job of a few series against a unique `instance`
/// per series, a zone of half the series against a few jobs), every answer equal to a scan.
#[test]
fn one_equality_names_and_values_equal_a_scan_whichever_way_they_are_read() {
    let mut runner = TestRunner::new(Config { cases: 12, failure_persistence: None, ..Config::default() });
    let strategy =
        (20usize..200, 1usize..4, 1usize..4, proptest::collection::vec((0i64..DAYS, 0i64..DAY), 1..4), any::<bool>());
    runner
        .run(&strategy, |(n, jobs, rare, times, flush)| {
            let data: Vec<SeriesSamples> = (0..n)
                .map(|i| {
                    let job = if i < rare { "rare".to_owned() } else { format!("j{}", i % jobs) };
                    let zone = format!("z{}", i % 2);
                    let instance = format!("i{i}");
                    let mut pairs = vec![("__name__", "m"), ("job", job.as_str()), ("instance", instance.as_str())];
                    if i % 3 != 0 {
                        pairs.push(("zone", zone.as_str()));
                    }
                    let mut samples: Vec<Sample> = times
                        .iter()
                        .map(|&(day, off)| Sample::new(T0 + day * DAY + (off + i as i64) % DAY, i as f64))
                        .collect();
                    samples.sort_by_key(|s| s.timestamp_ms);
                    samples.dedup_by_key(|s| s.timestamp_ms);
                    SeriesSamples { labels: Labels::from_pairs(pairs).unwrap(), samples, histograms: Vec::new() }
                })
                .collect();
            let dir = tempfile::tempdir().unwrap();
            let s = Storage::open(storage_config(dir.path())).unwrap();
            s.write(WriteBatch { series: data.clone() }).unwrap();
            if flush {
                s.flush_head().unwrap();
            }
            let reference = MemQuerier::new(data);
            let q = s.querier(ReadLimits::none());
            let (start, end) = (0, T0 + (DAYS + 1) * DAY);
            for m in [("job", "rare"), ("zone", "z0"), ("job", "j0"), ("zone", ""), ("job", "none")] {
                let matchers = [Matcher::new(MatchOp::Equal, m.0, m.1).unwrap()];
                prop_assert_eq!(
                    q.label_names(&matchers, start, end, None).unwrap(),
                    reference.label_names(&matchers, start, end, None).unwrap(),
                    "names of {:?}",
                    m
                );
                for name in ["job", "instance", "zone", "__name__"] {
                    prop_assert_eq!(
                        q.label_values(name, &matchers, start, end, None).unwrap(),
                        reference.label_values(name, &matchers, start, end, None).unwrap(),
                        "values of {} for {:?}",
                        name,
                        m
                    );
                }
            }
            Ok(())
        })
        .unwrap();
}

/// A batch that indexes two new series in one window with series of more windows in between
/// (so the writer evicts and reloads that window's presence set before the second), then a
/// flush of the head (which indexes each series again unless the writer knows it is there):
/// both series stay findable by the label pair they share. Re-indexing the first one wrote a
/// postings block under the same key as the batch's block for both, and the second series lost
/// its `__name__` posting (found by `crash_load`).
#[test]
fn a_batch_over_more_windows_than_presence_sets_keeps_every_posting() {
    let dir = tempfile::tempdir().unwrap();
    let s = Storage::open(storage_config(dir.path())).unwrap();
    let series = |name: &str, id: &str, day: i64| SeriesSamples {
        labels: Labels::from_pairs([("__name__", name), ("id", id)]).unwrap(),
        samples: vec![Sample::new(T0 + day * DAY + 1_000, 1.0)],
        histograms: Vec::new(),
    };
    let mut batch = vec![series("shared", "first", 0)];
    batch.extend((1..DAYS).map(|day| series("other", &day.to_string(), day)));
    batch.push(series("shared", "second", 0));
    s.write(WriteBatch { series: batch }).unwrap();
    s.flush_head().unwrap();
    let name = [Matcher::new(MatchOp::Equal, "__name__", "shared").unwrap()];
    let found = label_strings(s.querier(ReadLimits::none()).series(&name, T0, T0 + DAY - 1, None).unwrap());
    assert_eq!(found, vec![r#"shared{id="first"}"#, r#"shared{id="second"}"#]);
}

/// The read path keeps answers of the window index between requests (`index_cache.rs`): the
/// same questions, asked again after every change of the index (new series, known series
/// reaching new windows, head flushes, seals, late writes into sealed windows and their
/// re-seals, deletes), must keep answering as a scan of every series does. The questions of
/// one step are asked twice, so the second asking is answered from what the first kept.
#[test]
fn repeated_questions_follow_every_change_of_the_index() {
    let mut runner = TestRunner::new(Config { cases: 16, failure_persistence: None, ..Config::default() });
    // Per step: new series, more samples for known ones (index, day, offset), and what follows
    // the write (0 nothing, 1 flush, 2 seal a day, 3 re-seal it after the write, 4 delete one).
    let step = (
        proptest::collection::vec(arb_series(), 0..8),
        proptest::collection::vec((0usize..64, 0i64..DAYS, 0i64..DAY), 0..6),
        0u8..5,
        0i64..DAYS,
    );
    let strategy = (
        proptest::collection::vec(step, 1..6),
        proptest::collection::vec((proptest::collection::vec(arb_matcher(), 0..3), -1i64..DAYS + 1, 0i64..3), 5),
    );
    let held = std::cell::Cell::new(0);
    runner
        .run(&strategy, |(steps, queries)| {
            let dir = tempfile::tempdir().unwrap();
            let s = Storage::open(storage_config(dir.path())).unwrap();
            let mut all: Vec<GenSeries> = Vec::new();
            for (fresh, more, action, day) in steps {
                let before = build(&all);
                // A delete is a step of its own: the answers the step before kept must not
                // outlive it.
                let (fresh, more) = if action == 4 { (Vec::new(), Vec::new()) } else { (fresh, more) };
                all.extend(fresh);
                for (i, d, off) in more {
                    if !all.is_empty() {
                        let n = all.len();
                        all[i % n].1.push((d, off));
                    }
                }
                let after = build(&all);
                // What this step adds: every sample not written before.
                let batch: Vec<SeriesSamples> = after
                    .iter()
                    .enumerate()
                    .map(|(i, a)| {
                        let old = before.get(i).map(|b| b.samples.as_slice()).unwrap_or_default();
                        let samples =
                            a.samples.iter().filter(|x| !old.iter().any(|o| o.timestamp_ms == x.timestamp_ms)).copied();
                        SeriesSamples { labels: a.labels.clone(), samples: samples.collect(), histograms: Vec::new() }
                    })
                    .filter(|x| !x.samples.is_empty())
                    .collect();
                if !batch.is_empty() {
                    s.write(WriteBatch { series: batch }).unwrap();
                }
                match action {
                    1 => s.flush_head().unwrap(),
                    2 | 3 => {
                        s.flush_head().unwrap();
                        s.seal_window(T0 + day * DAY).unwrap();
                    }
                    _ => {}
                }
                if action == 3 && !all.is_empty() {
                    // A late sample of a known series into the sealed day, then a re-seal.
                    let (at, k) = (T0 + day * DAY + 7, day as usize % all.len());
                    let late = build(&all)[k].labels.clone();
                    all[k].1.push((day, 7));
                    let value = build(&all)[k].samples.iter().find(|x| x.timestamp_ms == at).map(|x| x.value);
                    let sample = Sample::new(at, value.unwrap_or_default());
                    s.write(WriteBatch {
                        series: vec![SeriesSamples { labels: late, samples: vec![sample], histograms: Vec::new() }],
                    })
                    .unwrap();
                    s.flush_head().unwrap();
                    s.seal_window(T0 + day * DAY).unwrap();
                }
                if action == 4 && !all.is_empty() {
                    // Deleted over all time: the series keeps its labels and nothing else.
                    let k = day as usize % all.len();
                    s.delete_series(&[Matcher::equal("id", k.to_string())], 0, T0 + (DAYS + 1) * DAY).unwrap();
                    all[k].1.clear();
                }
                let reference = MemQuerier::new(build(&all).into_iter().filter(|x| !x.samples.is_empty()).collect());
                for _ in 0..2 {
                    for (matchers, first_day, days) in &queries {
                        let start = T0 + first_day * DAY + DAY / 3;
                        held.set(held.get() + compare(&s, &reference, matchers, start, start + days * DAY)?);
                    }
                    held.set(held.get() + compare(&s, &reference, &[], 0, T0 + (DAYS + 3) * DAY)?);
                }
            }
            Ok(())
        })
        .unwrap();
    assert!(held.get() > 0, "no answer was ever given from memory: the held path went untested");
}
