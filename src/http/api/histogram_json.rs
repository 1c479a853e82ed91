//! Native histograms in the query API's JSON, as Prometheus' `jsonutil.MarshalHistogram`
//! writes them:
//!
//! ```text
//! {"count":"42","sum":"34593.34","buckets":[[3,"-0.25","0.25","3"],[0,"0.25","0.5","12"]]}
//! ```
//!
//! Buckets come in ascending order of value ([`Histogram::all_buckets`]), empty ones left
//! out; the first element of each says which bounds belong to it (0: upper only, 1: lower
//! only, 2: neither, 3: both). `buckets` is absent when every bucket is empty. Numbers are
//! strings formatted as Go's `strconv.FormatFloat` with `'f'`, or `'e'` below 1e-6 and from
//! 1e21 in magnitude.

use std::fmt::Write as _;

use crate::histogram::Histogram;

/// Appends the JSON object of `h`.
pub fn write_histogram(out: &mut String, h: &Histogram) {
    out.push_str("{\"count\":");
    write_number(out, h.count);
    out.push_str(",\"sum\":");
    write_number(out, h.sum);
    let mut first = true;
    for b in h.all_buckets().filter(|b| b.count != 0.0) {
        out.push_str(if first { ",\"buckets\":[" } else { "," });
        first = false;
        let rule = match (b.lower_inclusive, b.upper_inclusive) {
            (false, true) => 0,
            (true, false) => 1,
            (false, false) => 2,
            (true, true) => 3,
        };
        let _ = write!(out, "[{rule},");
        write_number(out, b.lower);
        out.push(',');
        write_number(out, b.upper);
        out.push(',');
        write_number(out, b.count);
        out.push(']');
    }
    if !first {
        out.push(']');
    }
    out.push('}');
}

/// Prometheus' `jsonutil.MarshalFloat`: a JSON string of the shortest decimal that reads back
/// as `v`, in exponent form (`1e-07`, `1.5e+21`) below 1e-6 and from 1e21 in magnitude;
/// `NaN`, `+Inf`, `-Inf` as such.
pub fn write_number(out: &mut String, v: f64) {
    out.push('"');
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else if v != 0.0 && (v.abs() < 1e-6 || v.abs() >= 1e21) {
        // Rust's `{:e}` gives the shortest mantissa (`1.5e21`); Go writes the exponent with a
        // sign and at least two digits.
        let s = format!("{v:e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let (sign, digits) = exp.strip_prefix('-').map_or(("+", exp), |d| ("-", d));
        let _ = write!(out, "{mantissa}e{sign}{digits:0>2}");
    } else {
        let _ = write!(out, "{v}");
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::histogram::Span;

    fn number(v: f64) -> String {
        let mut s = String::new();
        write_number(&mut s, v);
        s
    }

    #[test]
    fn numbers_follow_go_format_float() {
        // Expected strings from Go's strconv.FormatFloat semantics ('f' or 'e', precision -1).
        assert_eq!(number(0.0), "\"0\"");
        assert_eq!(number(42.0), "\"42\"");
        assert_eq!(number(0.25), "\"0.25\"");
        assert_eq!(number(1e-7), "\"1e-07\"");
        assert_eq!(number(1.5e21), "\"1.5e+21\"");
        assert_eq!(number(-2.5e-10), "\"-2.5e-10\"");
        assert_eq!(number(1e20), "\"100000000000000000000\"");
        assert_eq!(number(1e-6), "\"0.000001\"");
        assert_eq!(number(f64::NEG_INFINITY), "\"-Inf\"");
    }

    #[test]
    fn histogram_matches_prometheus_doc_example() {
        // Schema 0: positive bucket i covers (2^(i-1), 2^i]; zero bucket [-0.25, 0.25].
        let h = Histogram {
            schema: 0,
            zero_threshold: 0.25,
            zero_count: 3.0,
            count: 42.0,
            sum: 34593.34,
            positive_spans: vec![Span { offset: 0, length: 3 }],
            positive_buckets: vec![12.0, 21.0, 6.0],
            ..Histogram::default()
        };
        let mut s = String::new();
        write_histogram(&mut s, &h);
        // Bucket 0 is (0.5, 1], clamped below by the zero threshold only when it overlaps it.
        assert_eq!(
            s,
            "{\"count\":\"42\",\"sum\":\"34593.34\",\"buckets\":[[3,\"-0.25\",\"0.25\",\"3\"],[0,\"0.5\",\"1\",\"12\"],[0,\"1\",\"2\",\"21\"],[0,\"2\",\"4\",\"6\"]]}"
        );
        let empty = Histogram { count: 0.0, sum: 0.0, ..Histogram::default() };
        let mut s = String::new();
        write_histogram(&mut s, &empty);
        assert_eq!(s, "{\"count\":\"0\",\"sum\":\"0\"}");
    }
}
