//! Tests of the histogram notation: keys, defaults, expansion, errors, and every script.

use crate::histogram::{CounterResetHint, Histogram, Span};
use crate::sample::is_stale_marker;

use super::{expand_item, go_number, split_items, HistogramValue, Problem};
use crate::promql::notation::{parse_series, SeqValue};

fn values(item: &str) -> Vec<HistogramValue> {
    expand_item(item).unwrap_or_else(|e| panic!("{item}: {e}"))
}

fn one(item: &str) -> Histogram {
    let mut v = values(item);
    assert_eq!(v.len(), 1, "{item}");
    v.remove(0).histogram
}

fn problem(item: &str) -> Problem {
    match expand_item(item) {
        Ok(v) => panic!("{item} parsed into {v:?}"),
        Err(e) => e.problem,
    }
}

fn span(offset: i32, length: u32) -> Span {
    Span { offset, length }
}

#[test]
fn defaults_of_an_empty_histogram() {
    for item in ["{{}}", "{{ }}", "{{  \t }}"] {
        let v = values(item);
        let h = &v[0].histogram;
        assert!(!v[0].hint_given);
        assert_eq!((h.schema, h.count, h.sum, h.zero_count, h.zero_threshold), (0, 0.0, 0.0, 0.0, 0.0));
        assert!(h.positive_spans.is_empty() && h.positive_buckets.is_empty());
        assert!(h.negative_spans.is_empty() && h.negative_buckets.is_empty());
        assert!(h.custom_values.is_empty() && !h.integer);
        assert_eq!(h.counter_reset_hint, CounterResetHint::Unknown);
    }
}

#[test]
fn each_key() {
    let h = one("{{schema:3 sum:-1.5 count:7 z_bucket:2 z_bucket_w:0.001 offset:-2 buckets:[1 0 3]}}");
    assert_eq!((h.schema, h.sum, h.count, h.zero_count, h.zero_threshold), (3, -1.5, 7.0, 2.0, 0.001));
    assert_eq!(h.positive_spans, vec![span(-2, 3)]);
    assert_eq!(h.positive_buckets, vec![1.0, 0.0, 3.0]);
    // Any order, keys in any case, a trailing space.
    let g = one("{{BUCKETS:[1 0 3] Offset:-2 z_bucket_w:0.001 Z_BUCKET:2 count:7 sum:-1.5 schema:3 }}");
    assert!(g.identical(&h));
}

#[test]
fn buckets_make_one_span_zeros_included() {
    let h = one("{{offset:5 buckets:[0 1 0 0 2 0]}}");
    assert_eq!(h.positive_spans, vec![span(5, 6)]);
    assert_eq!(h.positive_buckets, vec![0.0, 1.0, 0.0, 0.0, 2.0, 0.0]);
    // An offset without buckets makes no span.
    let h = one("{{offset:5 n_offset:2}}");
    assert!(h.positive_spans.is_empty() && h.negative_spans.is_empty());
}

#[test]
fn negative_buckets() {
    let h = one("{{n_buckets:[1 2] n_offset:-1 buckets:[3]}}");
    assert_eq!(h.negative_spans, vec![span(-1, 2)]);
    assert_eq!(h.negative_buckets, vec![1.0, 2.0]);
    assert_eq!(h.positive_spans, vec![span(0, 1)]);
    assert_eq!(h.positive_buckets, vec![3.0]);
}

#[test]
fn custom_buckets() {
    let h = one("{{schema:-53 sum:5 count:4 custom_values:[0.1 1 10] buckets:[1 2 0 1]}}");
    assert!(h.uses_custom_buckets());
    assert_eq!(h.custom_values, vec![0.1, 1.0, 10.0]);
    assert_eq!(h.positive_spans, vec![span(0, 4)]);
    assert!(h.validate().is_ok());
    // Taken as written for any schema; validation is the loader's business.
    assert_eq!(one("{{custom_values:[1]}}").custom_values, vec![1.0]);
}

#[test]
fn counter_reset_hints() {
    for (word, hint) in [
        ("unknown", CounterResetHint::Unknown),
        ("reset", CounterResetHint::CounterReset),
        ("not_reset", CounterResetHint::NotCounterReset),
        ("gauge", CounterResetHint::Gauge),
        ("GAUGE", CounterResetHint::Gauge),
    ] {
        let v = values(&format!("{{{{sum:1 counter_reset_hint:{word}}}}}"));
        assert_eq!(v[0].histogram.counter_reset_hint, hint, "{word}");
        assert!(v[0].hint_given);
    }
    assert_eq!(problem("{{counter_reset_hint:maybe}}"), Problem::BadHint("maybe".into()));
}

#[test]
fn numbers_as_prometheus_reads_them() {
    let h = one("{{sum:Inf count:NaN z_bucket:-inf buckets:[nan Inf -2]}}");
    assert_eq!((h.sum, h.zero_count), (f64::INFINITY, f64::NEG_INFINITY));
    assert!(h.count.is_nan() && h.positive_buckets[0].is_nan());
    assert_eq!(&h.positive_buckets[1..], &[f64::INFINITY, -2.0]);
    assert_eq!(one("{{sum:1e3 count:2.5E-1 z_bucket:1.}}").sum, 1000.0);
    assert_eq!(one("{{count:2.5E-1}}").count, 0.25);
    // Go's ParseInt(s, 0, 64) first: a leading 0 is octal when it can be, `_` separates digits.
    assert_eq!(go_number("010"), Some(8.0));
    assert_eq!(go_number("09"), Some(9.0));
    assert_eq!(go_number("1_000"), Some(1000.0));
    assert_eq!(go_number("1_000.5"), Some(1000.5));
    assert_eq!(go_number("1__0"), None);
    assert_eq!(go_number("1_"), None);
    assert_eq!(go_number("1..2"), None);
    assert_eq!(go_number("1e"), None);
    assert_eq!(one("{{sum:010}}").sum, 8.0);
}

#[test]
fn repetition() {
    let v = values("{{sum:1 count:1 counter_reset_hint:gauge}}x3");
    assert_eq!(v.len(), 4);
    assert!(v.iter().all(|h| h.hint_given && h.histogram.identical(&v[0].histogram)));
    assert_eq!(values("{{sum:1}}x0").len(), 1);
}

#[test]
fn increasing_series_adds_step_by_step() {
    let v = values("{{sum:1 count:2 buckets:[1 1]}}+{{sum:2 count:3 offset:1 buckets:[1 2]}}x2");
    let got: Vec<(f64, f64, Vec<Span>, Vec<f64>)> = v
        .iter()
        .map(|h| {
            let h = &h.histogram;
            (h.sum, h.count, h.positive_spans.clone(), h.positive_buckets.clone())
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (1.0, 2.0, vec![span(0, 2)], vec![1.0, 1.0]),
            (3.0, 5.0, vec![span(0, 3)], vec![1.0, 2.0, 2.0]),
            (5.0, 8.0, vec![span(0, 3)], vec![1.0, 3.0, 4.0]),
        ]
    );
    // Buckets apart stay apart: a second span.
    let v = values("{{buckets:[1]}}+{{offset:3 buckets:[1] n_buckets:[2]}}x1");
    assert_eq!(v[1].histogram.positive_spans, vec![span(0, 1), span(2, 1)]);
    assert_eq!(v[1].histogram.negative_buckets, vec![2.0]);
    // x0: the base alone, even where a step would fail.
    assert_eq!(values("{{schema:1}}+{{schema:0}}x0").len(), 1);
}

#[test]
fn decreasing_series_subtracts() {
    let v = values("{{sum:10 count:10 z_bucket:4 buckets:[3 3]}}-{{sum:1 count:2 z_bucket:1 buckets:[1 0]}}x2");
    let last = &v[2].histogram;
    assert_eq!((last.sum, last.count, last.zero_count), (8.0, 6.0, 2.0));
    assert_eq!(last.positive_buckets, vec![1.0, 3.0]);
    // Subtraction leaves the hint as addition would; it does not make a gauge.
    let v = values("{{counter_reset_hint:not_reset}}-{{counter_reset_hint:not_reset}}x1");
    assert_eq!(v[1].histogram.counter_reset_hint, CounterResetHint::NotCounterReset);
}

#[test]
fn expansion_reconciles_schema_and_zero_bucket() {
    // The increment's schema 1 buckets 0..=3 fall into schema 0 buckets 0, 1, 1, 2.
    let v = values("{{schema:0 buckets:[1 1]}}+{{schema:1 buckets:[1 1 1 1]}}x1");
    assert_eq!(v[1].histogram.schema, 0);
    assert_eq!(v[1].histogram.positive_spans, vec![span(0, 3)]);
    assert_eq!(v[1].histogram.positive_buckets, vec![2.0, 3.0, 1.0]);
    // A wider zero bucket swallows bucket 0 ((0.5, 1]) of the base.
    let v = values("{{z_bucket_w:0.5 z_bucket:1 buckets:[1 1]}}+{{z_bucket_w:1 z_bucket:1}}x1");
    let h = &v[1].histogram;
    assert_eq!((h.zero_threshold, h.zero_count), (1.0, 3.0));
    assert_eq!((h.positive_spans.clone(), h.positive_buckets.clone()), (vec![span(1, 1)], vec![1.0]));
    // Custom buckets with the same bounds add bucket by bucket.
    let v = values(
        "{{schema:-53 custom_values:[1 2] buckets:[1 2 3]}}+{{schema:-53 custom_values:[1 2] buckets:[1 1 1]}}x1",
    );
    assert_eq!(v[1].histogram.positive_buckets, vec![2.0, 3.0, 4.0]);
}

#[test]
fn expansion_errors() {
    let finer_base = problem("{{schema:1}}+{{schema:0}}x1");
    assert_eq!(finer_base, Problem::Combine("cannot merge from schema 0 to 1".into()));
    assert!(matches!(problem("{{schema:-53 custom_values:[1]}}+{{schema:0}}x1"), Problem::Combine(_)));
    assert!(matches!(problem("{{schema:0}}+{{schema:-53}}x1"), Problem::Combine(_)));
}

#[test]
fn hint_across_expansion() {
    let hints = |item: &str| -> Vec<(CounterResetHint, bool)> {
        values(item).iter().map(|v| (v.histogram.counter_reset_hint, v.hint_given)).collect()
    };
    use CounterResetHint::{CounterReset, Gauge, NotCounterReset, Unknown};
    // Unknown wins over reset/not_reset; whether the hint counts as given comes from the increment.
    assert_eq!(
        hints("{{counter_reset_hint:reset}}+{{}}x2"),
        vec![(CounterReset, false), (Unknown, false), (Unknown, false)]
    );
    assert_eq!(hints("{{}}+{{counter_reset_hint:gauge}}x1"), vec![(Unknown, true), (Gauge, true)]);
    assert_eq!(hints("{{counter_reset_hint:gauge}}+{{}}x1"), vec![(Gauge, false), (Gauge, false)]);
    assert_eq!(
        hints("{{counter_reset_hint:reset}}+{{counter_reset_hint:not_reset}}x1"),
        vec![(CounterReset, true), (Unknown, true)]
    );
    assert_eq!(
        hints("{{counter_reset_hint:not_reset}}+{{counter_reset_hint:not_reset}}x1"),
        vec![(NotCounterReset, true), (NotCounterReset, true)]
    );
}

#[test]
fn spacing_rules() {
    for ok in ["{{sum:1 count:2}}", "{{sum:1   count:2 }}", "{{buckets:[1 2 ]}}", "{{buckets:[1\t 2]}}"] {
        assert!(expand_item(ok).is_ok(), "{ok}");
    }
    for bad in [
        "{{ sum:1}}",
        "{{sum: 1}}",
        "{{sum :1}}",
        "{{buckets:[ 1]}}",
        "{{buckets:[]}}",
        "{{sum:1count:2}}",
        "{{buckets:[1]sum:2}}",
        "{{buckets:[1,2]}}",
    ] {
        assert!(expand_item(bad).is_err(), "{bad}");
    }
}

#[test]
fn malformed_items_are_errors() {
    use Problem::*;
    assert!(matches!(problem("{{sum:1"), Expected { .. }));
    assert!(matches!(problem("{{sum:1}"), Expected { .. }));
    assert_eq!(problem("{{bogus:1}}"), UnknownKey("bogus".into()));
    assert!(matches!(problem("{{sum 1}}"), Expected { .. }));
    assert_eq!(problem("{{sum:1 sum:2}}"), DuplicateKey("sum"));
    assert!(matches!(problem("{{z_bucket_w:-1}}"), Expected { .. }));
    assert_eq!(problem("{{schema:1.5}}"), BadNumber("1.5".into()));
    assert_eq!(problem("{{schema:99999999999}}"), OutOfRange("99999999999".into()));
    assert_eq!(problem("{{sum:1x}}"), BadNumber("1x".into()));
    assert_eq!(problem("{{sum:Infinity}}"), BadNumber("Infinity".into()));
    assert!(matches!(problem("{{sum:+1}}"), Expected { .. }));
    assert!(matches!(problem("{{sum:.5}}"), Expected { .. }));
    assert!(matches!(problem("{{buckets:[1 -Inf]}}"), Expected { .. }));
    assert!(matches!(problem("{{}}x"), Expected { .. }));
    assert!(matches!(problem("{{}}x1.5"), Expected { .. }));
    assert!(matches!(problem("{{}}x2y"), Expected { .. }));
    assert!(matches!(problem("{{}}+{{}}"), Expected { .. }));
    assert!(matches!(problem("{{}}+5x2"), Expected { .. }));
    assert!(matches!(problem("{{}}5"), Expected { .. }));
    assert_eq!(problem("{{}}x5000000"), TooManyRepeats(5_000_000));
    assert!(matches!(problem("{{}}x99999999999999999999999"), OutOfRange(_)));
}

#[test]
fn no_prefix_or_garbage_panics() {
    let item = "{{schema:-53 sum:1e3 count:010 z_bucket:-Inf z_bucket_w:0.5 offset:-1 n_offset:2 \
                buckets:[1 2 ] n_buckets:[NaN] custom_values:[1 2] counter_reset_hint:not_reset}}+{{sum:1}}x3";
    for end in 0..=item.len() {
        let _ = expand_item(&item[..end]);
    }
    for garbage in ["{{", "}}", "{{}}}", "{{{{}}}}", "{{é:1}}", "{{sum:1é}}", "{{buckets:[é]}}", "{{}}xé"] {
        assert!(expand_item(garbage).is_err(), "{garbage}");
    }
}

#[test]
fn split_keeps_histograms_whole() {
    let items: Vec<(usize, &str)> = split_items(" 1 {{sum:1 count:2}}x2  _ {{a }}+{{b}}x1 stale");
    assert_eq!(items, vec![(1, "1"), (3, "{{sum:1 count:2}}x2"), (24, "_"), (26, "{{a }}+{{b}}x1"), (41, "stale")]);
    assert_eq!(split_items("{{sum:1 "), vec![(0, "{{sum:1 ")]);
}

#[test]
fn series_lines_mix_floats_histograms_gaps_and_stale() {
    let s = parse_series(r#"foo{a="b c"} 1 _ {{sum:1}} stale _x2 {{}}x1 2+1x1"#).unwrap();
    assert!(s.histogram);
    let kinds: String = s
        .values
        .iter()
        .map(|v| match v {
            SeqValue::Omitted => '_',
            SeqValue::Float(f) if is_stale_marker(*f) => 's',
            SeqValue::Float(_) => 'f',
            SeqValue::Histogram(_) => 'h',
        })
        .collect();
    assert_eq!(kinds, "f_hs__hhff");
    assert!(!parse_series("foo 1 2 stale").unwrap().histogram);
}

#[test]
fn series_line_errors_name_the_column() {
    let e = parse_series("foo {{sum:1 bogus:2}}").unwrap_err();
    assert!(e.starts_with("column 13: unknown histogram key \"bogus\""), "{e}");
}
