//! [`quantile()`], [`fraction()`], [`std_var`] and [`std_dev`] against the answers of Prometheus'
//! own test scripts (`../shared/promql-tests/promql/native_histograms.test` and
//! `histograms.test`), whose histograms are rebuilt here by hand, and property tests of their
//! invariants. Each table row is one `eval` of a script; the comment above a table names the
//! script and the eval's expression, `<q>`/`<lo>`/`<hi>` standing for the row's parameters.
#![expect(clippy::approx_constant, reason = "the scripts' literal values, not mathematical constants")]

use proptest::prelude::*;

use super::*;

/// A histogram in the scripts' `{{schema:.. sum:.. count:.. z_bucket:.. z_bucket_w:.. offset:..
/// buckets:[..] n_offset:.. n_buckets:[..] custom_values:[..]}}` notation (one span per side).
#[derive(Clone, Copy)]
struct Notation<'a> {
    schema: i32,
    sum: f64,
    count: f64,
    z_bucket: f64,
    z_bucket_w: f64,
    offset: i32,
    buckets: &'a [f64],
    n_offset: i32,
    n_buckets: &'a [f64],
    custom_values: &'a [f64],
}

/// The notation's defaults (`{{}}`).
const N: Notation<'static> = Notation {
    schema: 0,
    sum: 0.0,
    count: 0.0,
    z_bucket: 0.0,
    z_bucket_w: 0.0,
    offset: 0,
    buckets: &[],
    n_offset: 0,
    n_buckets: &[],
    custom_values: &[],
};

impl Notation<'_> {
    fn build(self) -> Histogram {
        let span = |offset: i32, b: &[f64]| {
            if b.is_empty() {
                Vec::new()
            } else {
                vec![Span { offset, length: b.len() as u32 }]
            }
        };
        let (pos, neg) = (span(self.offset, self.buckets), span(self.n_offset, self.n_buckets));
        let layout = Layout {
            schema: self.schema,
            zero_threshold: self.z_bucket_w,
            positive_spans: &pos,
            negative_spans: &neg,
            custom_values: self.custom_values,
        };
        Histogram::from_float_counts(
            layout,
            self.count,
            self.z_bucket,
            self.sum,
            self.buckets,
            self.n_buckets,
            CounterResetHint::Unknown,
        )
    }
}

/// A classic histogram as `load_with_nhcb` turns it into custom buckets (Prometheus'
/// `convertnhcb`): bounds `les` (the last +Inf) with cumulative counts, the count that of the
/// +Inf bucket unless given, compacted as Prometheus compacts integer (2) or float (0) counts.
fn classic(les: &[f64], cumulative: &[f64], sum: f64, count: Option<f64>) -> Histogram {
    let mut prev = 0.0;
    let buckets: Vec<f64> = cumulative
        .iter()
        .map(|&c| {
            let d = c - prev;
            prev = c;
            d
        })
        .collect();
    let mut h = Histogram {
        schema: CUSTOM_BUCKETS_SCHEMA,
        sum,
        count: count.unwrap_or(prev),
        positive_spans: vec![Span { offset: 0, length: buckets.len() as u32 }],
        positive_buckets: buckets,
        custom_values: les.iter().copied().filter(|b| b.is_finite()).collect(),
        ..Histogram::default()
    };
    h.compact(if cumulative.iter().all(|c| c.fract() == 0.0) { 2 } else { 0 });
    h
}

const INF: f64 = f64::INFINITY;
const NAN: f64 = f64::NAN;

/// `got` within 1e-9 relative of `want` (NaN matches NaN; 0 and ±Inf must match exactly, or
/// within 1e-12 for 0).
fn close(got: f64, want: f64, tolerance: f64) -> bool {
    if want.is_nan() {
        return got.is_nan();
    }
    if want.is_infinite() {
        return got == want;
    }
    if want == 0.0 {
        return got.abs() <= 1e-12;
    }
    ((got - want) / want).abs() <= tolerance
}

#[track_caller]
fn check_quantiles(h: &Histogram, rows: &[(f64, f64)]) {
    for &(q, want) in rows {
        let got = quantile(q, h);
        assert!(close(got.value, want, 1e-9), "quantile({q}): got {}, want {want}", got.value);
        assert_eq!(got.note, None, "quantile({q})");
    }
}

#[track_caller]
fn check_fractions(h: &Histogram, rows: &[(f64, f64, f64)]) {
    for &(lo, hi, want) in rows {
        let got = fraction(lo, hi, h);
        assert!(close(got.value, want, 1e-9), "fraction({lo}, {hi}): got {}, want {want}", got.value);
        assert_eq!(got.note, None, "fraction({lo}, {hi})");
    }
}

#[track_caller]
fn check_spread(h: &Histogram, stddev: f64, stdvar: f64) {
    assert!(close(std_dev(h), stddev, 1e-9), "stddev: got {}, want {stddev}", std_dev(h));
    assert!(close(std_var(h), stdvar, 1e-9), "stdvar: got {}, want {stdvar}", std_var(h));
}

#[test]
fn empty_histograms() {
    // native_histograms.test: `histogram_fraction(-Inf, +Inf, empty_histogram)` and
    // `histogram_fraction(0, 8, empty_histogram)`, for h="exp" and h="cbh".
    let exp = N.build();
    let cbh = Notation { schema: -53, custom_values: &[-2.0, 3.0], ..N }.build();
    for h in [&exp, &cbh] {
        check_fractions(h, &[(-INF, INF, NAN), (0.0, 8.0, NAN)]);
    }
    // native_histograms.test: `histogram_fraction(3.1415, 42, histogram_fraction_1)`.
    check_fractions(&exp, &[(3.1415, 42.0, NAN)]);
    // native_histograms.test, `rate(const_histogram[5m])` is {{schema:0 sum:0 count:0}}:
    // `histogram_fraction(0.0, 1.0, ..)`, `histogram_quantile(1.0, ..)`, `histogram_stddev(..)`,
    // `histogram_stdvar(..)` are all NaN.
    let rate = Notation { schema: 0, ..N }.build();
    check_fractions(&rate, &[(0.0, 1.0, NAN)]);
    check_quantiles(&rate, &[(1.0, NAN)]);
    check_spread(&rate, NAN, NAN);
}

#[test]
fn positive_exponential_buckets() {
    // native_histograms.test: single_histogram {{schema:0 sum:5 count:4 buckets:[1 2 1]}},
    // `histogram_fraction(<lo>, <hi>, single_histogram)`, `histogram_quantile(<q>, ..)` and
    // `histogram_quantiles(single_histogram, "q", 0.5)`; multi_histogram at 5m and 50m is the
    // same histogram (`histogram_fraction(1, 2, ..)`, `histogram_quantile(0.5, ..)` twice each).
    let h = Notation { sum: 5.0, count: 4.0, buckets: &[1.0, 2.0, 1.0], ..N }.build();
    check_fractions(&h, &[(1.0, 2.0, 0.5), (0.0, 8.0, 1.0), (1.0, 2.0, 0.5), (1.0, 2.0, 0.5)]);
    check_quantiles(&h, &[(0.5, 1.414213562373095), (0.5, 1.414213562373095), (0.5, 1.414213562373095)]);
    check_quantiles(&h, &[(0.5, 1.414213562373095)]);

    // native_histograms.test: incr_histogram at 5m {{schema:0 sum:6 count:5 buckets:[1 3 1]}}:
    // `histogram_fraction(1, 2, incr_histogram)`, `histogram_quantile(0.5, incr_histogram)`.
    let h = Notation { sum: 6.0, count: 5.0, buckets: &[1.0, 3.0, 1.0], ..N }.build();
    check_fractions(&h, &[(1.0, 2.0, 0.6)]);
    check_quantiles(&h, &[(0.5, 1.414213562373095)]);
    // The same at 50m, {{count:14 sum:24 buckets:[1 12 1]}}.
    let h = Notation { sum: 24.0, count: 14.0, buckets: &[1.0, 12.0, 1.0], ..N }.build();
    check_fractions(&h, &[(1.0, 2.0, 0.8571428571428571)]);
    check_quantiles(&h, &[(0.5, 1.414213562373095)]);
    // `histogram_quantile(0.5, rate(incr_histogram[10m]))` at 50m, the rate being
    // {{count:0.0033333333333333335 sum:0.006666666666666667 offset:1 buckets:[0.0033333333333333335]}}.
    let third = 0.0033333333333333335;
    let h = Notation { sum: 0.006666666666666667, count: third, offset: 1, buckets: &[third], ..N }.build();
    check_quantiles(&h, &[(0.5, 1.414213562373095)]);

    // native_histograms.test: `histogram_quantile(0.5, histogram unless histogram_count(histogram) == 0)`
    // and `histogram_quantiles(.., "q", 0.5)`, histogram {{schema:0 count:10 sum:50 buckets:[1 2 3 4]}}.
    let h = Notation { sum: 50.0, count: 10.0, buckets: &[1.0, 2.0, 3.0, 4.0], ..N }.build();
    check_quantiles(&h, &[(0.5, 3.1748021039363987), (0.5, 3.1748021039363987)]);
}

#[test]
fn zero_bucket_only_and_negative_buckets() {
    // native_histograms.test: single_zero_histogram {{schema:0 z_bucket:1 z_bucket_w:0.5 sum:0.25
    // count:1}}: `histogram_fraction(-0.5, 0.5, ..)`, `histogram_quantile(0.5, ..)`.
    let h = Notation { z_bucket: 1.0, z_bucket_w: 0.5, sum: 0.25, count: 1.0, ..N }.build();
    check_fractions(&h, &[(-0.5, 0.5, 1.0)]);
    check_quantiles(&h, &[(0.5, 0.0)]);

    // native_histograms.test: negative_histogram {{schema:0 sum:-5 count:4 n_buckets:[1 2 1]}}
    // and two_samples_histogram at 5m (the same with sum -4): `histogram_fraction(-2, -1, ..)`,
    // `histogram_quantile(0.5, ..)`.
    for sum in [-5.0, -4.0] {
        let h = Notation { sum, count: 4.0, n_buckets: &[1.0, 2.0, 1.0], ..N }.build();
        check_fractions(&h, &[(-2.0, -1.0, 0.5)]);
        check_quantiles(&h, &[(0.5, -1.414213562373095)]);
    }

    // native_histograms.test: balanced_histogram at 5m {{schema:0 count:8 sum:0 buckets:[1 2 1]
    // n_buckets:[1 2 1]}}: `histogram_fraction(0, 4, ..)`, `histogram_quantile(0.5, ..)` (the
    // lower bound of the first populated bucket above the empty middle).
    let h = Notation { count: 8.0, buckets: &[1.0, 2.0, 1.0], n_buckets: &[1.0, 2.0, 1.0], ..N }.build();
    check_fractions(&h, &[(0.0, 4.0, 0.5)]);
    check_quantiles(&h, &[(0.5, 0.5)]);
}

#[test]
fn quantiles_with_zero_bucket() {
    // native_histograms.test: `histogram_quantile(<q>, histogram_quantile_1)` at 10m,
    // {{schema:0 count:12 sum:100 z_bucket:2 z_bucket_w:0.001 buckets:[2 3 0 1 4]}}.
    let buckets: &[f64] = &[2.0, 3.0, 0.0, 1.0, 4.0];
    let h = Notation { count: 12.0, sum: 100.0, z_bucket: 2.0, z_bucket_w: 0.001, buckets, ..N }.build();
    check_quantiles(
        &h,
        &[
            (1.001, INF),
            (1.0, 16.0),
            (0.99, 15.67072476139083),
            (0.9, 12.99603834169977),
            (0.6, 4.594793419988138),
            (0.5, 1.5874010519681994),
            (0.1, 0.0006),
            (0.0, 0.0),
            (-1.0, -INF),
        ],
    );
    // `histogram_quantile(<q>, histogram_quantile_2)`, the same mirrored (n_buckets).
    let h = Notation { count: 12.0, sum: 100.0, z_bucket: 2.0, z_bucket_w: 0.001, n_buckets: buckets, ..N }.build();
    check_quantiles(
        &h,
        &[
            (1.001, INF),
            (1.0, 0.0),
            (0.99, -0.00006),
            (0.9, -0.0006),
            (0.5, -1.5874010519681996),
            (0.1, -12.996038341699768),
            (0.0, -16.0),
            (-1.0, -INF),
        ],
    );
    // `histogram_quantile(<q>, histogram_quantile_3)`, both sides: {{schema:0 count:24 sum:100
    // z_bucket:4 z_bucket_w:0.001 buckets:[2 3 0 1 4] n_buckets:[2 3 0 1 4]}}.
    let h = both_sides();
    check_quantiles(
        &h,
        &[
            (1.001, INF),
            (1.0, 16.0),
            (0.99, 15.34822590920423),
            (0.9, 10.556063286183155),
            (0.7, 1.2030250360821164),
            (0.55, 0.0006),
            (0.5, 0.0),
            (0.45, -0.0006),
            (0.3, -1.2030250360821169),
            (0.1, -10.556063286183155),
            (0.01, -15.34822590920423),
            (0.0, -16.0),
            (-1.0, -INF),
        ],
    );
}

/// native_histograms.test's histogram_quantile_3 and histogram_fraction_4.
fn both_sides() -> Histogram {
    let buckets: &[f64] = &[2.0, 3.0, 0.0, 1.0, 4.0];
    Notation { count: 24.0, sum: 100.0, z_bucket: 4.0, z_bucket_w: 0.001, buckets, n_buckets: buckets, ..N }.build()
}

#[test]
fn fractions_with_zero_bucket() {
    // native_histograms.test: `histogram_fraction(<lo>, <hi>, histogram_fraction_2)` and
    // `histogram_quantile(<q>, histogram_fraction_2)` at 10m, {{schema:0 count:12 sum:100
    // z_bucket:2 z_bucket_w:0.001 buckets:[2 3 0 1 4]}}.
    let buckets: &[f64] = &[2.0, 3.0, 0.0, 1.0, 4.0];
    let h = Notation { count: 12.0, sum: 100.0, z_bucket: 2.0, z_bucket_w: 0.001, buckets, ..N }.build();
    check_fractions(
        &h,
        &[
            (0.0, INF, 1.0),
            (-INF, 0.0, 0.0),
            (-0.001, 0.0, 0.0),
            (0.0, 0.001, 0.16666666666666666),
            (0.001, INF, 0.8333333333333334),
            (0.0, 0.0005, 0.08333333333333333),
            (-INF, -0.001, 0.0),
            (1.0, 2.0, 0.25),
            (0.0, 1.5, 0.4795739585136224),
            (1.5, 2.0, 0.10375937481971091),
            (1.0, 8.0, 0.3333333333333333),
            (0.0, 6.0, 0.6320802083934297),
            (1.0, 6.0, 0.29874687506009634),
            (1.5, 6.0, 0.15250624987980724),
            (-2.0, -1.0, 0.0),
            (-2.0, -1.5, 0.0),
            (-8.0, -1.0, 0.0),
            (-6.0, -1.0, 0.0),
            (-6.0, -1.5, 0.0),
            (42.0, 3.1415, 0.0),
            (0.0, 0.0, 0.0),
            (0.000001, 0.000001, 0.0),
            (42.0, 42.0, 0.0),
            (-3.1, -3.1, 0.0),
            (3.1415, NAN, NAN),
            (NAN, 42.0, NAN),
            (NAN, NAN, NAN),
            (-INF, INF, 1.0),
        ],
    );
    check_quantiles(&h, &[(0.08333333333333333, 0.0005), (0.6320802083934297, 6.0)]);

    // `histogram_fraction(<lo>, <hi>, histogram_fraction_3)` and `histogram_quantile(<q>, ..)`,
    // the same mirrored (n_buckets).
    let h = Notation { count: 12.0, sum: 100.0, z_bucket: 2.0, z_bucket_w: 0.001, n_buckets: buckets, ..N }.build();
    check_fractions(
        &h,
        &[
            (0.0, INF, 0.0),
            (-INF, 0.0, 1.0),
            (-0.001, 0.0, 0.16666666666666666),
            (0.0, 0.001, 0.0),
            (-0.0005, 0.0, 0.08333333333333333),
            (-INF, -0.0005, 0.9166666666666666),
            (0.001, INF, 0.0),
            (-INF, -0.001, 0.8333333333333334),
            (1.0, 2.0, 0.0),
            (1.5, 2.0, 0.0),
            (1.0, 8.0, 0.0),
            (1.0, 6.0, 0.0),
            (1.5, 6.0, 0.0),
            (-2.0, -1.0, 0.25),
            (-2.0, -1.5, 0.10375937481971091),
            (-8.0, -1.0, 0.3333333333333333),
            (-INF, -6.0, 0.36791979160657035),
            (-6.0, -1.0, 0.29874687506009634),
            (-6.0, -1.5, 0.15250624987980724),
            (42.0, 3.1415, 0.0),
            (0.0, 0.0, 0.0),
            (0.000001, 0.000001, 0.0),
            (42.0, 42.0, 0.0),
            (-3.1, -3.1, 0.0),
            (3.1415, NAN, NAN),
            (NAN, 42.0, NAN),
            (NAN, NAN, NAN),
            (-INF, INF, 1.0),
        ],
    );
    check_quantiles(&h, &[(0.9166666666666666, -0.0005), (0.36791979160657035, -6.0)]);

    // `histogram_fraction(<lo>, <hi>, histogram_fraction_4)` and `histogram_quantile(<q>, ..)`,
    // both sides.
    let h = both_sides();
    check_fractions(
        &h,
        &[
            (0.0, INF, 0.5),
            (-INF, 0.0, 0.5),
            (-0.001, 0.0, 0.08333333333333333),
            (0.0, 0.001, 0.08333333333333333),
            (-0.0005, 0.0005, 0.08333333333333333),
            (-INF, 0.0005, 0.5416666666666666),
            (-INF, -0.0005, 0.4583333333333333),
            (0.001, INF, 0.4166666666666667),
            (-INF, -0.001, 0.4166666666666667),
            (1.0, 2.0, 0.125),
            (1.5, 2.0, 0.051879687409855414),
            (1.0, 8.0, 0.16666666666666666),
            (1.0, 6.0, 0.14937343753004825),
            (1.5, 6.0, 0.07625312493990366),
            (-2.0, -1.0, 0.125),
            (-2.0, -1.5, 0.051879687409855456),
            (-8.0, -1.0, 0.16666666666666666),
            (-6.0, -1.0, 0.14937343753004817),
            (-6.0, -1.5, 0.07625312493990362),
            (42.0, 3.1415, 0.0),
            (0.0, 0.0, 0.0),
            (0.000001, 0.000001, 0.0),
            (42.0, 42.0, 0.0),
            (-3.1, -3.1, 0.0),
            (3.1415, NAN, NAN),
            (NAN, 42.0, NAN),
            (NAN, NAN, NAN),
            (-INF, INF, 1.0),
        ],
    );
    check_quantiles(&h, &[(0.5416666666666666, 0.0005), (0.4583333333333333, -0.0005)]);
}

#[test]
fn schemas_interpolate_alike() {
    // native_histograms.test, var_res_histogram with schemas -1, 0, +1 (four loads):
    // `histogram_quantile(0.5, var_res_histogram)` and `histogram_fraction(<lo>, <hi>,
    // var_res_histogram{schema=..})`. The script gives 2^(1/4) and 2^(3/4) to 7 places, where
    // its runner compares to 1e-6; here the exact powers are used in their place.
    let cases = [
        (-1, 6.0, 2.0, 8.0),
        (0, 4.0, 1.4142135623730951, 2.82842712474619),
        (1, 4.0, 2f64.powf(0.25), 1.6817928305074292),
    ];
    for negative in [false, true] {
        for (schema, sum, one_right, two_right) in cases {
            let (near, far): (&[f64], &[f64]) = (&[0.0, 5.0], &[0.0, 0.0, 5.0]);
            for (buckets, want) in [(near, one_right), (far, two_right)] {
                let n = Notation { schema, sum, count: 5.0, ..N };
                let h = if negative { Notation { n_buckets: buckets, ..n } } else { Notation { buckets, ..n } }.build();
                if negative {
                    check_quantiles(&h, &[(0.5, -want)]);
                    check_fractions(&h, &[(-want, 0.0, 0.5)]);
                } else {
                    check_quantiles(&h, &[(0.5, want)]);
                    check_fractions(&h, &[(0.0, want, 0.5)]);
                }
            }
        }
    }
    // The script's rounded 1.189207 itself, at the runner's 1e-6.
    let h = Notation { schema: 1, sum: 4.0, count: 5.0, buckets: &[0.0, 5.0], ..N }.build();
    assert!(close(quantile(0.5, &h).value, 1.189207, 1e-6));
    assert!(close(fraction(0.0, 1.189207, &h).value, 0.5, 1e-6));

    // native_histograms.test: low_res_histogram at 5m, the sum of {{schema:-1 sum:4 count:1
    // buckets:[1] offset:1}} and {{schema:0 sum:4 count:4 buckets:[2 2] offset:1}}, is
    // {{schema:-1 count:5 sum:8 offset:1 buckets:[5]}}: `histogram_fraction(1, 4, ..)` is 1.
    let mut h = Notation { schema: -1, sum: 4.0, count: 1.0, offset: 1, buckets: &[1.0], ..N }.build();
    let finer = Notation { schema: 0, sum: 4.0, count: 4.0, offset: 1, buckets: &[2.0, 2.0], ..N }.build();
    h.add(&finer).expect("both exponential");
    h.compact(0);
    assert_eq!((h.schema, h.count, h.positive_buckets.as_slice()), (-1, 5.0, &[5.0][..]));
    check_fractions(&h, &[(1.0, 4.0, 1.0)]);
}

#[test]
fn standard_deviation_and_variance() {
    // native_histograms.test: `histogram_stddev(histogram_stddev_stdvar_<n>)` and
    // `histogram_stdvar(..)` at 10m for n = 1..=7.
    let h = Notation { schema: 2, count: 4.0, sum: 10.0, buckets: &[1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0], ..N };
    check_spread(&h.build(), 1.0787993180043811, 1.163807968526718);
    let h = Notation { schema: 8, count: 10.0, sum: 10.0, buckets: &[1.0, 2.0, 3.0, 4.0], ..N };
    check_spread(&h.build(), 0.0048960313898237465, 2.3971123370139447e-05);
    let mut pos = [0.0; 55];
    pos[13] = 1.0;
    pos[24] = 1.0;
    pos[26] = 1.0;
    pos[54] = 1.0;
    let mut neg = [0.0; 47];
    neg[24] = 1.0;
    neg[46] = 1.0;
    let h3 = Notation { schema: 3, count: 7.0, sum: 62.0, z_bucket: 1.0, buckets: &pos, n_buckets: &neg, ..N };
    check_spread(&h3.build(), 42.94723640026, 1844.4651144196398);
    let n = [0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 3.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0];
    let h = Notation { count: 10.0, sum: -112946.0, n_buckets: &n, ..N };
    check_spread(&h.build(), 27556.344499842, 759352122.1939945);
    let h = Notation { count: 10.0, sum: -100.0, n_buckets: &[0.0, 0.0, 0.0, 0.0, 10.0], ..N };
    check_spread(&h.build(), 1.3137084989848, 1.725830020304794);
    check_spread(&Notation { sum: NAN, ..h3 }.build(), NAN, NAN);
    check_spread(&Notation { sum: INF, ..h3 }.build(), INF, INF);
}

/// histograms.test's testhistogram3 at 50m (positive, negative).
fn testhistogram3() -> [Histogram; 2] {
    [
        classic(&[0.0, 0.1, 0.2, 1.0, INF], &[0.0, 50.0, 70.0, 110.0, 110.0], 330.0, Some(110.0)),
        classic(&[-0.25, -0.2, -0.1, 0.3, INF], &[0.0, 10.0, 20.0, 20.0, 20.0], 80.0, Some(20.0)),
    ]
}

#[test]
fn custom_buckets_from_classic_histograms() {
    // histograms.test: `histogram_stddev(testhistogram3)`, `histogram_stdvar(testhistogram3)`.
    let [pos, neg] = testhistogram3();
    check_spread(&pos, 2.7435461458749795, 7.527045454545455);
    check_spread(&neg, 4.187667907081458, 17.5365625);
    // `histogram_fraction(0, 0.2, testhistogram3)`, and `.. rate(testhistogram3[10m]))` (a rate
    // scales every count alike).
    for scale in [1.0, 1.0 / 600.0] {
        let (mut p, mut n) = (pos.clone(), neg.clone());
        p.mul(scale);
        n.mul(scale);
        check_fractions(&p, &[(0.0, 0.2, 0.6363636363636364)]);
        check_fractions(&n, &[(0.0, 0.2, 0.0)]);
    }
    // `histogram_quantile(<q>, testhistogram3)` and `histogram_quantiles(testhistogram3, "q",
    // 0, 0.25, 0.5, 0.75, 1)`.
    for _ in 0..2 {
        check_quantiles(&pos, &[(0.0, 0.0), (0.25, 0.055), (0.5, 0.125), (0.75, 0.45), (1.0, 1.0)]);
        check_quantiles(&neg, &[(0.0, -0.25), (0.25, -0.225), (0.5, -0.2), (0.75, -0.15), (1.0, -0.1)]);
    }

    // histograms.test: `histogram_fraction(<lo>, <hi>, testhistogram2)` at 50m.
    let h2 = classic(&[0.0, 2.0, 4.0, 6.0, INF], &[0.0, 10.0, 20.0, 30.0, 30.0], 0.0, None);
    check_fractions(&h2, &[(0.0, 4.0, 0.6666666666666666), (0.0, 6.0, 1.0), (0.0, 3.5, 0.5833333333333334)]);
    // `histogram_quantile(<q>, testhistogram2)` at 7m, and of `rate(testhistogram2[15m])` at 47m.
    let h2 = classic(&[0.0, 2.0, 4.0, 6.0, INF], &[0.0, 1.0, 2.0, 3.0, 3.0], 0.0, None);
    check_quantiles(&h2, &[(1. / 6., 1.0), (0.5, 3.0), (5. / 6., 5.0)]);
    let mut rate = h2.clone();
    rate.mul(1.0 / 300.0);
    check_quantiles(&rate, &[(1. / 6., 1.0), (0.5, 3.0), (5. / 6., 5.0)]);

    // histograms.test: `histogram_quantile(<q>, testhistogram)` and `histogram_quantiles(
    // testhistogram, "q", <q>)` at 50m, with invalid, lowest, highest and inner quantiles, and
    // of `rate(testhistogram[10m])`.
    let pos = classic(&[0.1, 0.2, 1.0, INF], &[50.0, 70.0, 110.0, 120.0], 0.0, None);
    let neg = classic(&[-0.2, -0.1, 0.3, INF], &[10.0, 20.0, 20.0, 30.0], 0.0, None);
    for h in [&pos, &neg] {
        check_quantiles(h, &[(-0.1, -INF), (-0.1, -INF), (1.01, INF), (1.01, INF), (NAN, NAN), (NAN, NAN)]);
    }
    for scale in [1.0, 1.0 / 600.0] {
        let (mut p, mut n) = (pos.clone(), neg.clone());
        p.mul(scale);
        n.mul(scale);
        check_quantiles(&p, &[(0.0, 0.0), (1.0, 1.0), (0.2, 0.048), (0.5, 0.15), (0.8, 0.72)]);
        check_quantiles(&n, &[(0.0, -0.2), (1.0, 0.3), (0.2, -0.2), (0.5, -0.15), (0.8, 0.3)]);
    }
}

#[test]
fn aggregated_custom_buckets() {
    // histograms.test: request_duration_seconds at 50m per job and instance; a rate or sum of
    // rates is the sum of the per-5m increments below scaled alike. `histogram_quantile(<q>,
    // rate(request_duration_seconds[10m]))` and `sum(..) by (job, instance)`:
    let les = [0.1, 0.2, INF];
    let each = |c: [f64; 3]| classic(&les, &c.map(|v| v / 300.0), 0.0, None);
    let add = |a: [f64; 3], b: [f64; 3]| [a[0] + b[0], a[1] + b[1], a[2] + b[2]];
    let (j1i1, j1i2, j2i1, j2i2) = ([1.0, 3.0, 4.0], [2.0, 5.0, 6.0], [3.0, 4.0, 6.0], [4.0, 7.0, 9.0]);
    for _ in 0..2 {
        check_quantiles(&each(j1i1), &[(0.3, 0.11), (0.5, 0.15)]);
        check_quantiles(&each(j1i2), &[(0.3, 0.09), (0.5, 0.13333333333333333)]);
        check_quantiles(&each(j2i1), &[(0.3, 0.06), (0.5, 0.1)]);
        check_quantiles(&each(j2i2), &[(0.3, 0.0675), (0.5, 0.11666666666666667)]);
    }
    // `sum(..) by (job)`:
    check_quantiles(&each(add(j1i1, j1i2)), &[(0.3, 0.1), (0.5, 0.14)]);
    check_quantiles(&each(add(j2i1, j2i2)), &[(0.3, 0.0642857142857143), (0.5, 0.1125)]);
    // `sum(..) by (instance)`:
    check_quantiles(&each(add(j1i1, j2i1)), &[(0.3, 0.075), (0.5, 0.1333333333)]);
    check_quantiles(&each(add(j1i2, j2i2)), &[(0.3, 0.075), (0.5, 0.125)]);
    // `sum(..)` and `avg(..)` (a quarter of the sum):
    let all = add(add(j1i1, j1i2), add(j2i1, j2i2));
    check_quantiles(&each(all), &[(0.3, 0.075), (0.5, 0.1277777777777778)]);
    check_quantiles(&each(all.map(|v| v / 4.0)), &[(0.3, 0.075), (0.5, 0.12777777777777778)]);

    // native_histograms.test: custom_buckets_histogram {{schema:-53 sum:5 count:4
    // custom_values:[5 10] buckets:[1 2 1]}}: `histogram_fraction(5, 10, ..)`,
    // `histogram_quantile(0.5, ..)`.
    let h = Notation { schema: -53, sum: 5.0, count: 4.0, custom_values: &[5.0, 10.0], buckets: &[1.0, 2.0, 1.0], ..N };
    let h = h.build();
    check_fractions(&h, &[(5.0, 10.0, 0.5)]);
    check_quantiles(&h, &[(0.5, 7.5)]);
}

#[test]
fn custom_bucket_fraction_edges() {
    // histograms.test, one classic histogram per case (le 1, 2, 3, +Inf: 1, 3, 6, 100, or le -3,
    // -2, -1, +Inf: 10, 12, 15, 100): `histogram_fraction(<lo>, <hi>, <name>)` at 50m.
    let pos = classic(&[1.0, 2.0, 3.0, INF], &[1.0, 3.0, 6.0, 100.0], 0.0, None);
    let neg = classic(&[-3.0, -2.0, -1.0, INF], &[10.0, 12.0, 15.0, 100.0], 0.0, None);
    check_fractions(
        &pos,
        &[
            (0.0, 1.5, 0.02),   // positive_buckets_lower_falls_in_the_first_bucket
            (-INF, INF, 1.0),   // lower_is_negative_Inf_and_upper_is_positive_Inf__positive_buckets_
            (4.0, 5.0, 0.0),    // lower_and_upper_fall_in_last_bucket__positive_buckets_
            (2.0, 5.0, 0.03),   // upper_falls_in_last_bucket
            (400.0, INF, 0.94), // upper_is_positive_Inf
            (2.0, 2.0, 0.0),    // lower_equals_upper
            (3.0, 2.0, 0.0),    // lower_greater_than_upper
            (2.0, 3.5, 0.03),   // lower_exactly_on_bucket_boundary
            (0.5, 2.0, 0.025),  // upper_exactly_on_bucket_boundary
            (1.0, 3.0, 0.05),   // both_bounds_exactly_on_bucket_boundaries
        ],
    );
    check_fractions(
        &neg,
        &[
            (-4.0, -2.0, 0.02),  // negative_buckets_lower_falls_in_the_first_bucket
            (-INF, -1.5, 0.135), // lower_is_negative_Inf
            (-INF, INF, 1.0),    // lower_is_negative_Inf_and_upper_is_positive_Inf__negative_buckets_
            (0.0, 1.0, 0.0),     // lower_and_upper_fall_in_last_bucket__negative_buckets_
        ],
    );
    // single_bucket (le +Inf: 100), all_zero_counts (le 1, 2, 3, +Inf: all 0),
    // fractional_bucket_bounds (le 0.5, 1, +Inf: 2.5, 7.5, 100), range_crosses_zero (le -2, -1,
    // 0, 1, +Inf: 5, 10, 15, 20, 100), lower_is_NaN and upper_is_NaN (le 1, +Inf: 1, 100),
    // range_entirely_below/above_all_buckets (le 1, 2, +Inf: 1, 3, 10).
    check_fractions(&classic(&[INF], &[100.0], 0.0, None), &[(0.0, 1.0, 0.0)]);
    check_fractions(&classic(&[1.0, 2.0, 3.0, INF], &[0.0; 4], 0.0, None), &[(0.0, 5.0, NAN)]);
    check_fractions(&classic(&[0.5, 1.0, INF], &[2.5, 7.5, 100.0], 0.0, None), &[(0.1, 0.75, 0.045)]);
    let crossing = classic(&[-2.0, -1.0, 0.0, 1.0, INF], &[5.0, 10.0, 15.0, 20.0, 100.0], 0.0, None);
    check_fractions(&crossing, &[(-1.0, 1.0, 0.1)]);
    let one = classic(&[1.0, INF], &[1.0, 100.0], 0.0, None);
    check_fractions(&one, &[(NAN, 1.0, NAN), (0.0, NAN, NAN)]);
    let few = classic(&[1.0, 2.0, INF], &[1.0, 3.0, 10.0], 0.0, None);
    check_fractions(&few, &[(-10.0, -5.0, 0.0), (5.0, 10.0, 0.0)]);
}

#[test]
fn fractions_matching_trims() {
    // native_histograms.test, trim identities at 1m: `histogram_fraction(<lo>, <hi>, h_test) *
    // histogram_count(h_test)`, h_test {{schema:0 sum:123.75 count:34 z_bucket:1
    // z_bucket_w:0.001 buckets:[2 4 8 16] n_buckets:[1 2]}}.
    let h = Notation {
        sum: 123.75,
        count: 34.0,
        z_bucket: 1.0,
        z_bucket_w: 0.001,
        buckets: &[2.0, 4.0, 8.0, 16.0],
        n_buckets: &[1.0, 2.0],
        ..N
    }
    .build();
    let times_count = |h: &Histogram, rows: &[(f64, f64, f64)]| {
        let rows: Vec<_> = rows.iter().map(|&(lo, hi, want)| (lo, hi, want / h.count)).collect();
        check_fractions(h, &rows);
    };
    let sqrt2 = 1.4142135624;
    times_count(
        &h,
        &[
            (-INF, 2.0, 10.0),
            (2.0, INF, 24.0),
            (-INF, -1.0, 2.0),
            (-1.0, INF, 32.0),
            (-INF, 0.0, 3.5),
            (0.0, INF, 30.5),
            (-INF, sqrt2, 8.0),
            (sqrt2, INF, 26.0),
        ],
    );
    // h_test_2 {{schema:2 sum:12.8286080906 count:28 z_bucket:1 z_bucket_w:0.001 buckets:[1 2 4
    // 7 3] n_buckets:[1 5 3 1]}}.
    let h = Notation {
        schema: 2,
        sum: 12.8286080906,
        count: 28.0,
        z_bucket: 1.0,
        z_bucket_w: 0.001,
        buckets: &[1.0, 2.0, 4.0, 7.0, 3.0],
        n_buckets: &[1.0, 5.0, 3.0, 1.0],
        ..N
    }
    .build();
    times_count(&h, &[(-INF, 1.13, 13.410582181123704), (1.13, INF, 14.589417818876296)]);
    // cbh {{schema:-53 sum:172.5 count:15 custom_values:[5 10 15 20] buckets:[1 6 4 3 1]}}.
    let h = Notation {
        schema: -53,
        sum: 172.5,
        count: 15.0,
        custom_values: &[5.0, 10.0, 15.0, 20.0],
        buckets: &[1.0, 6.0, 4.0, 3.0, 1.0],
        ..N
    }
    .build();
    times_count(&h, &[(-INF, 15.0, 11.0), (15.0, INF, 4.0), (-INF, 13.0, 9.4), (13.0, INF, 5.6)]);
}

#[test]
fn nan_observations_are_noted() {
    // native_histograms.test, histogram_nan at 1m: "100% NaNs" {{schema:0 count:3 sum:NaN}} and
    // "20% NaNs" {{schema:0 count:15 sum:NaN buckets:[12]}}.
    let all_nan = Notation { count: 3.0, sum: NAN, ..N }.build();
    let some_nan = Notation { count: 15.0, sum: NAN, buckets: &[12.0], ..N }.build();
    let nan = Estimate { value: NAN, note: Some(Note::QuantileNaN) };
    let same = |a: Estimate, b: Estimate| a.note == b.note && close(a.value, b.value, 1e-9);
    // `histogram_quantile(1, histogram_nan)`, `histogram_quantile(0.81, ..)`,
    // `histogram_quantiles(histogram_nan, "q", 0.81)`: NaN for both, noted.
    for q in [1.0, 0.81, 0.81] {
        assert!(same(quantile(q, &all_nan), nan));
        assert!(same(quantile(q, &some_nan), nan));
    }
    // `histogram_quantile(0.8, histogram_nan{case="100% NaNs"})`, and 0.4.
    assert!(same(quantile(0.8, &all_nan), nan));
    assert!(same(quantile(0.4, &all_nan), nan));
    // `histogram_quantile(0.8, histogram_nan{case="20% NaNs"})` and 0.4: skewed.
    let skewed = |value| Estimate { value, note: Some(Note::QuantileSkewedByNaN) };
    assert!(same(quantile(0.8, &some_nan), skewed(1.0)));
    assert!(same(quantile(0.4, &some_nan), skewed(0.7071067811865475)));
    // `histogram_fraction(-Inf, 0.7071067811865475, histogram_nan)`, `histogram_fraction(-Inf,
    // +Inf, histogram_nan)`.
    let excluded = |value| Estimate { value, note: Some(Note::FractionExcludesNaN) };
    assert!(same(fraction(-INF, 0.7071067811865475, &all_nan), excluded(0.0)));
    assert!(same(fraction(-INF, 0.7071067811865475, &some_nan), excluded(0.4)));
    assert!(same(fraction(-INF, INF, &all_nan), excluded(0.0)));
    assert!(same(fraction(-INF, INF, &some_nan), excluded(0.8)));
    assert_eq!(
        Note::QuantileSkewedByNaN.message_for("histogram_nan"),
        "input to histogram_quantile has NaN observations, result is skewed higher for metric name \"histogram_nan\""
    );
}

#[test]
fn nan_sum_interpolates_in_the_last_bucket_as_prometheus_does() {
    // Prometheus' HistogramQuantile with a NaN sum takes the bounds of the last bucket it
    // counted (buckets [2, 2] at indices 1, 2, count 6): q 0.25 ranks 1.5 into (1, 2] but is
    // interpolated in (2, 4] to 2^1.75; q 0.75 lies beyond the buckets.
    let h = Notation { count: 6.0, sum: NAN, offset: 1, buckets: &[2.0, 2.0], ..N }.build();
    let got = quantile(0.25, &h);
    assert!(close(got.value, 2f64.powf(1.75), 1e-12), "{got:?}");
    assert_eq!(got.note, Some(Note::QuantileSkewedByNaN));
    assert!(close(quantile(0.5, &h).value, 2f64.powf(1.5), 1e-12));
    assert!(quantile(0.75, &h).value.is_nan());
}

#[test]
fn odd_inputs_do_not_panic() {
    let odd = [
        Histogram {
            schema: 40,
            count: 3.0,
            positive_spans: vec![Span { offset: 0, length: 9 }],
            ..Histogram::default()
        },
        Histogram {
            schema: -53,
            count: NAN,
            custom_values: vec![NAN, 1.0],
            positive_spans: vec![Span { offset: i32::MAX, length: 3 }],
            positive_buckets: vec![1.0, INF, -1.0],
            ..Histogram::default()
        },
        Histogram {
            schema: 8,
            count: -4.0,
            zero_threshold: NAN,
            zero_count: 2.0,
            negative_spans: vec![Span { offset: i32::MIN, length: 2 }],
            negative_buckets: vec![NAN, 3.0],
            ..Histogram::default()
        },
    ];
    for h in &odd {
        for q in [-1.0, 0.0, 0.3, 0.5, 0.9, 1.0, NAN] {
            let _ = quantile(q, h);
        }
        for (lo, hi) in [(-INF, INF), (0.0, 1.0), (-1.0, 0.5), (NAN, 1.0)] {
            let _ = fraction(lo, hi, h);
        }
        let _ = (std_var(h), std_dev(h));
    }
}

/// A valid histogram with integer counts, sum and count consistent, at least one observation.
fn arb_populated() -> impl Strategy<Value = Histogram> {
    let counts = || proptest::collection::vec(0u32..20, 0..6);
    let exponential =
        (-4i32..=8, prop_oneof![Just(0.0), Just(0.001), Just(0.75)], 0u32..4, -8i32..8, counts(), -8i32..8, counts())
            .prop_map(|(schema, zt, zc, po, pb, no, nb)| {
                let zero_count = if zt == 0.0 { 0.0 } else { f64::from(zc) };
                // As in what clients send, no bucket lies inside the zero bucket.
                let (po, no) = (outside_zero_bucket(po, schema, zt), outside_zero_bucket(no, schema, zt));
                side_histogram(
                    Notation { schema, z_bucket_w: zt, z_bucket: zero_count, offset: po, n_offset: no, ..N },
                    &pb,
                    &nb,
                )
            });
    let custom = (proptest::collection::vec(1u32..8, 0..5), -6i32..3, counts()).prop_map(|(steps, start, pb)| {
        let mut bound = f64::from(start);
        let cv: Vec<f64> = steps
            .iter()
            .map(|&s| {
                bound += f64::from(s) / 2.0;
                bound
            })
            .collect();
        let mut h = side_histogram(Notation { schema: -53, ..N }, &pb[..pb.len().min(cv.len() + 1)], &[]);
        h.custom_values = cv;
        h
    });
    prop_oneof![exponential, custom].prop_filter("has observations", |h| h.count > 0.0)
}

/// The first index from `index` on whose bucket ends beyond `zero_threshold`.
fn outside_zero_bucket(mut index: i32, schema: i32, zero_threshold: f64) -> i32 {
    while exponential_bound(index, schema) <= zero_threshold {
        index += 1;
    }
    index
}

fn side_histogram(n: Notation, pos: &[u32], neg: &[u32]) -> Histogram {
    let pos: Vec<f64> = pos.iter().map(|&c| f64::from(c)).collect();
    let neg: Vec<f64> = neg.iter().map(|&c| f64::from(c)).collect();
    let mut h = Notation { buckets: &[], n_buckets: &[], ..n }.build();
    let span = |offset, len: usize| if len == 0 { vec![] } else { vec![Span { offset, length: len as u32 }] };
    h.positive_spans = span(n.offset, pos.len());
    h.negative_spans = span(n.n_offset, neg.len());
    h.count = h.zero_count + pos.iter().sum::<f64>() + neg.iter().sum::<f64>();
    h.positive_buckets = pos;
    h.negative_buckets = neg;
    h.sum = 0.5 * h.count;
    h
}

/// `a <= b` but for rounding.
fn not_above(a: f64, b: f64) -> bool {
    a <= b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

proptest! {
    #[test]
    fn quantile_grows_with_q(h in arb_populated(), q1 in 0.0f64..=1.0, q2 in 0.0f64..=1.0) {
        let (lo, hi) = if q1 <= q2 { (q1, q2) } else { (q2, q1) };
        let (a, b) = (quantile(lo, &h).value, quantile(hi, &h).value);
        prop_assert!(not_above(a, b), "quantile({lo}) = {a} > quantile({hi}) = {b}");
        prop_assert!(!a.is_nan() && !b.is_nan());
    }

    #[test]
    fn fraction_of_everything_is_one(h in arb_populated()) {
        prop_assert_eq!(fraction(f64::NEG_INFINITY, f64::INFINITY, &h), Estimate { value: 1.0, note: None });
    }

    #[test]
    fn fraction_is_a_share(h in arb_populated(), a in -40.0f64..40.0, b in -40.0f64..40.0, inf in 0u8..3) {
        let (lo, hi) = match inf { 0 => (a, b), 1 => (f64::NEG_INFINITY, b), _ => (a, f64::INFINITY) };
        let got = fraction(lo, hi, &h).value;
        prop_assert!((0.0..=1.0).contains(&got), "fraction({lo}, {hi}) = {got}");
    }

    #[test]
    fn fraction_below_grows_with_the_bound(h in arb_populated(), a in -40.0f64..40.0, b in -40.0f64..40.0) {
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        let (x, y) = (fraction(f64::NEG_INFINITY, lo, &h).value, fraction(f64::NEG_INFINITY, hi, &h).value);
        prop_assert!(not_above(x, y), "below {lo}: {x}, below {hi}: {y}");
    }
}
