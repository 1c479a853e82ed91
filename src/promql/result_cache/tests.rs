use super::*;
use crate::labels::Labels;
use crate::promql::Engine;
use crate::sample::{Sample, SeriesSamples};
use crate::storage::MemQuerier;

const MIN: i64 = 60_000;

fn source() -> MemQuerier {
    let series = |name: &str, host: &str, k: f64| SeriesSamples {
        labels: Labels::from_pairs([("__name__", name), ("host", host)]).unwrap(),
        samples: (0..600).map(|i| Sample::new(i * 15_000, k * i as f64)).collect(),
        histograms: Vec::new(),
    };
    MemQuerier::new(vec![
        series("c", "a", 1.0),
        series("c", "b", 2.5),
        series("g", "a", -1.0),
        series("up_x", "z", 3.0),
    ])
}

fn request(query: &str, start_ms: i64, end_ms: i64, step_ms: i64) -> RangeRequest<'_> {
    RangeRequest { scope: "", query, start_ms, end_ms, step_ms, lookback_ms: 300_000 }
}

/// Runs `r` through `cache` over `src`, returning the answer, the outcome and the steps the
/// evaluator was asked for.
fn through(cache: &ResultCache, r: &RangeRequest<'_>, immutable: Option<(i64, u64)>) -> (QueryResult, Outcome, u64) {
    let (engine, src) = (Engine::default(), source());
    let mut asked = 0;
    let mut eval = |a: i64, b: i64| {
        asked += (b - a) / r.step_ms + 1;
        engine.range(&src, r.query, a, b, r.step_ms)
    };
    let (res, outcome) = cache.range(r, immutable, &mut eval).unwrap();
    (res, outcome, asked as u64)
}

fn fresh(r: &RangeRequest<'_>) -> QueryResult {
    Engine::default().range(&source(), r.query, r.start_ms, r.end_ms, r.step_ms).unwrap()
}

#[test]
fn repeats_evaluate_only_the_steps_past_the_boundary() {
    let cache = ResultCache::new(64 << 20);
    let r = request("sum by (host) (rate(c[5m]))", 10 * MIN, 140 * MIN, 5 * MIN);
    let sealed = Some((100 * MIN, 7));
    let (first, outcome, asked) = through(&cache, &r, sealed);
    assert_eq!(first.value, fresh(&r).value);
    assert_eq!((outcome.lookup, outcome.cached_steps, asked), (Lookup::Miss, 0, 27));
    let (again, outcome, asked) = through(&cache, &r, sealed);
    assert_eq!(again.value, fresh(&r).value);
    // Steps 10m..95m (18 of them) read only data before 100m.
    assert_eq!((outcome.lookup, outcome.cached_steps, outcome.evaluated_steps, asked), (Lookup::Hit, 18, 9, 9));
    // The range moves on and the boundary with it: the held steps answer, the new ones are computed.
    let later = request(r.query, 30 * MIN, 150 * MIN, 5 * MIN);
    let (moved, outcome, asked) = through(&cache, &later, Some((120 * MIN, 7)));
    assert_eq!(moved.value, fresh(&later).value);
    assert_eq!((outcome.cached_steps, asked), (14, 11));
    assert_eq!(cache.figures().hits, 2);
    assert_eq!(cache.figures().misses, 1);
}

#[test]
fn another_generation_or_alignment_is_not_used() {
    let cache = ResultCache::new(64 << 20);
    let r = request("c", 10 * MIN, 100 * MIN, 5 * MIN);
    through(&cache, &r, Some((200 * MIN, 1)));
    assert_eq!(through(&cache, &r, Some((200 * MIN, 2))).1.lookup, Lookup::Miss);
    assert_eq!(through(&cache, &r, Some((200 * MIN, 2))).1.lookup, Lookup::Hit);
    let shifted = request("c", 10 * MIN + 1_000, 100 * MIN, 5 * MIN);
    let (res, outcome, _) = through(&cache, &shifted, Some((200 * MIN, 2)));
    assert_eq!(outcome.lookup, Lookup::Miss);
    assert_eq!(res.value, fresh(&shifted).value);
}

#[test]
fn pinned_and_span_dependent_queries_are_not_kept() {
    let cache = ResultCache::new(64 << 20);
    // `offset -1h` reads up to 70m at the first step, 10m: past the boundary at 60m.
    for q in ["c @ 600", "c @ end()", "max_over_time(c[range()])", "c offset -1h"] {
        let r = request(q, 10 * MIN, 100 * MIN, 5 * MIN);
        let (res, outcome, _) = through(&cache, &r, Some((60 * MIN, 1)));
        assert_eq!(res.value, fresh(&r).value, "{q}");
        assert_eq!(outcome.lookup, Lookup::Uncacheable, "{q}");
    }
    let r = request("c", 10 * MIN, 100 * MIN, 5 * MIN);
    assert_eq!(through(&cache, &r, None).1.lookup, Lookup::Uncacheable);
    assert_eq!(through(&cache, &r, Some((10 * MIN, 1))).1.lookup, Lookup::Uncacheable);
    assert_eq!(cache.figures().entries, 0);
}

#[test]
fn an_earlier_start_evaluates_before_the_held_run() {
    let cache = ResultCache::new(64 << 20);
    let sealed = Some((1_000 * MIN, 3));
    through(&cache, &request("c * 2", 50 * MIN, 100 * MIN, MIN), sealed);
    let wider = request("c * 2", 20 * MIN, 140 * MIN, MIN);
    let (res, outcome, asked) = through(&cache, &wider, sealed);
    assert_eq!(res.value, fresh(&wider).value);
    assert_eq!((outcome.cached_steps, asked), (51, 70));
    // Annotations come with the held steps.
    let r = request("quantile(2, c)", 20 * MIN, 140 * MIN, MIN);
    through(&cache, &r, sealed);
    let (res, outcome, _) = through(&cache, &r, sealed);
    assert_eq!(outcome.lookup, Lookup::Hit);
    assert_eq!(res.annotations, fresh(&r).annotations);
    assert!(!res.annotations.is_empty());
}

#[test]
fn memory_is_bounded() {
    let cache = ResultCache::new(4_096);
    let r = request("c", 0, 140 * MIN, 15_000);
    through(&cache, &r, Some((1_000 * MIN, 1)));
    assert_eq!(cache.figures().entries, 0, "an entry over an eighth of the budget is not kept");
    assert!(cache.figures().bytes <= 4_096);
}

#[test]
fn an_entry_up_to_an_eighth_of_the_budget_is_kept_whatever_the_cores() {
    // 4 series x ~9,300 steps: ~600 kB, so that the budget below estimates enough entries for
    // quick_cache to keep its shards.
    let r = request("{__name__=~\".+\"}", 0, 10_999_000, 1_000);
    let probe = ResultCache::new(1 << 30);
    through(&probe, &r, Some((1_000 * MIN, 1)));
    let weight = probe.figures().bytes;
    // Just over 8 such entries: split in 8 shards (4 per core on 2 cores), one would not fit.
    let cache = ResultCache::new(weight * 81 / 10);
    through(&cache, &r, Some((1_000 * MIN, 1)));
    assert_eq!(cache.figures().entries, 1);
    assert_eq!(through(&cache, &r, Some((1_000 * MIN, 1))).1.lookup, Lookup::Hit);
}

/// Runs `r` through `cache`, returning the answer and the sub-ranges the evaluator was asked for.
fn calls(cache: &ResultCache, r: &RangeRequest<'_>, immutable: Option<(i64, u64)>) -> (QueryResult, Vec<(i64, i64)>) {
    let (engine, src) = (Engine::default(), source());
    let mut asked = Vec::new();
    let mut eval = |a: i64, b: i64| {
        asked.push((a, b));
        engine.range(&src, r.query, a, b, r.step_ms)
    };
    let (res, _) = cache.range(r, immutable, &mut eval).unwrap();
    (res, asked)
}

#[test]
fn a_miss_evaluates_once_and_keeps_the_settled_part() {
    let cache = ResultCache::new(64 << 20);
    let sealed = Some((100 * MIN, 4));
    let r = request("c * 2", 20 * MIN, 140 * MIN, MIN);
    let (first, asked) = calls(&cache, &r, sealed);
    assert_eq!(first.value, fresh(&r).value);
    assert_eq!(asked, vec![(20 * MIN, 140 * MIN)]);
    // Steps 20m..99m were kept; a repeat evaluates the rest in one call.
    let (again, asked) = calls(&cache, &r, sealed);
    assert_eq!(again.value, fresh(&r).value);
    assert_eq!(asked, vec![(100 * MIN, 140 * MIN)]);
    // The boundary moved: the newly settled steps and the recent ones, still one call.
    let (later, asked) = calls(&cache, &r, Some((120 * MIN, 4)));
    assert_eq!(later.value, fresh(&r).value);
    assert_eq!(asked, vec![(100 * MIN, 140 * MIN)]);
    assert_eq!(calls(&cache, &r, Some((120 * MIN, 4))).1, vec![(120 * MIN, 140 * MIN)]);
}

#[test]
fn annotations_crossing_the_boundary_are_kept_for_their_steps_only() {
    let cache = ResultCache::new(64 << 20);
    let sealed = Some((100 * MIN, 4));
    let r = request("quantile(2, c)", 20 * MIN, 140 * MIN, MIN);
    let (first, asked) = calls(&cache, &r, sealed);
    let want = fresh(&r);
    assert_eq!((&first.value, &first.annotations), (&want.value, &want.annotations));
    assert!(!first.annotations.is_empty());
    // Which steps raised an annotation is not known: the kept part is evaluated again alone.
    assert_eq!(asked, vec![(20 * MIN, 140 * MIN), (20 * MIN, 99 * MIN)]);
    let (again, asked) = calls(&cache, &r, sealed);
    assert_eq!((&again.value, &again.annotations), (&want.value, &want.annotations));
    assert_eq!(asked, vec![(100 * MIN, 140 * MIN)]);
    // A query whose recent steps alone raise an annotation: the kept steps do not carry it.
    let only_recent = request("quantile(time() / 6000, c)", 20 * MIN, 140 * MIN, MIN);
    let (res, asked) = calls(&cache, &only_recent, sealed);
    assert!(!res.annotations.is_empty());
    assert_eq!(asked.len(), 2);
    let early = request(only_recent.query, 20 * MIN, 90 * MIN, MIN);
    let (held, asked) = calls(&cache, &early, sealed);
    assert!(asked.is_empty(), "{asked:?}");
    assert_eq!(held.annotations, fresh(&early).annotations);
    assert!(held.annotations.is_empty());
}
