//! The scanner against the serde path: hand-picked bodies, and random ones.

use proptest::prelude::*;

use super::super::{decode, decode_serde, Decoded};
use super::*;
use crate::ingest::{Rejection, SeriesLimits, Stop};
use crate::sample::PackedBatch;

/// What the scanner alone makes of `body` (`None`: it gives up).
fn scanned(body: &str) -> Option<(PackedBatch, usize)> {
    let mut free = |_| Ok::<(), ()>(());
    let mut out = BatchBuilder::new(SeriesLimits::default(), &mut free);
    let points = super::decode(body.as_bytes(), &mut out)?;
    Some((out.finish(), points))
}

fn outcome(d: Result<Decoded, Stop<()>>) -> Result<(PackedBatch, usize), Rejection> {
    match d {
        Ok(d) => Ok((d.batch, d.points)),
        Err(Stop::Invalid(r)) => Err(r),
        Err(Stop::Refused(())) => Err(Rejection::body("refused")),
    }
}

/// The serde path's answer.
fn reference(body: &str) -> Result<(PackedBatch, usize), Rejection> {
    outcome(decode_serde(body.as_bytes(), SeriesLimits::default(), &mut |_| Ok(())))
}

/// The scanner takes `body` and agrees with the serde path.
fn agrees(body: &str) {
    let want = reference(body).unwrap();
    assert_eq!(scanned(body), Some(want), "{body}");
}

/// The scanner gives up on `body`, and `decode` answers as the serde path does.
fn falls_back(body: &str) {
    assert_eq!(scanned(body), None, "{body}");
    let got = outcome(decode(body.as_bytes(), SeriesLimits::default(), &mut |_| Ok(())));
    assert_eq!(got, reference(body), "{body}");
}

#[test]
fn the_usual_shapes_are_scanned() {
    agrees(r#"[{"metric":"sys.cpu.nice","timestamp":1346846400,"value":18,"tags":{"host":"web01","dc-id":"lga"}}]"#);
    agrees(r#"{"metric":"a","timestamp":1346846400123,"value":-1.5e-3,"tags":{"h":"x"}}"#);
    agrees(" [ { \"value\" : \"  2.5 \" , \"timestamp\" : \"1346846400\" , \"metric\" : \"a\" } ]\n");
    agrees(r#"[{"metric":"a","timestamp":1,"value":1,"tags":null},{"metric":"a","timestamp":2,"value":2,"tags":{}}]"#);
    agrees(r#"[{"metric":"a","timestamp":1,"value":-0,"tags":{"e":"","h":"1","h":"2"}}]"#);
    agrees(r#"[{"metric":"a","timestamp":1,"value":18446744073709551616,"tags":{"h":"1"}}]"#);
    agrees(r#"[{"metric":"a","timestamp":1,"value":"NaN5","tags":{"h":"1"}}]"#.replace("NaN5", "5").as_str());
    agrees("[]");
    // Non-ASCII text is borrowed as it is; tag keys are kept as on the serde path.
    agrees(r#"[{"metric":"température.°C","timestamp":1,"value":1,"tags":{"hôte":"été","1st":"ü"}}]"#);
}

#[test]
fn repeated_series_join_one_series_whatever_path() {
    let body = r#"[{"metric":"a","timestamp":1,"value":1,"tags":{"h":"1"}},
        {"metric":"a","timestamp":2,"value":2,"tags":{"h":"1"}},
        {"metric":"a","timestamp":3,"value":3,"tags":{"h":"1","x":""}},
        {"metric":"a","timestamp":4,"value":4,"tags":{"h":"2"}},
        {"metric":"a","timestamp":5,"value":5,"tags":{"h":"1"}}]"#;
    agrees(body);
    let (batch, points) = scanned(body).unwrap();
    assert_eq!(points, 5);
    let series: Vec<usize> = batch.series().map(|s| s.samples.len()).collect();
    assert_eq!(series, [3, 1, 1]);
}

#[test]
fn anything_else_falls_back() {
    for body in [
        r#"[{"metric":"a\u0062","timestamp":1,"value":1}]"#,
        r#"[{"metric":"a\n","timestamp":1,"value":1}]"#,
        r#"[{"metric":"a","timestamp":1,"value":1,"tags":{"n":7}}]"#,
        r#"[{"metric":"a","timestamp":1,"value":1,"extra":1}]"#,
        r#"[{"metric":"a","metric":"b","timestamp":1,"value":1}]"#,
        r#"[{"metric":"a","timestamp":1.5,"value":1}]"#,
        r#"[{"metric":"a","timestamp":-0,"value":1}]"#,
        r#"[{"metric":"a","timestamp":-5,"value":1}]"#,
        r#"[{"metric":"a","timestamp":9223372036854775808,"value":1}]"#,
        r#"[{"metric":"a","timestamp":1,"value":1e400}]"#,
        r#"[{"metric":"a","timestamp":1,"value":null}]"#,
        r#"[{"metric":"a","timestamp":1,"value":"x"}]"#,
        r#"[{"metric":"","timestamp":1,"value":1}]"#,
        r#"[{"timestamp":1,"value":1}]"#,
        r#"[{"metric":"a","timestamp":1,"value":01}]"#,
        r#"[{"metric":"a","timestamp":1,"value":1.}]"#,
        r#"[{"metric":"a","timestamp":1,"value":1}"#,
        r#"[{"metric":"a","timestamp":1,"value":1}]x"#,
        r#"[{"metric":"a","timestamp":1,"value":1},]"#,
        r#"[{"metric":"a","timestamp":1,"value":1,"tags":{"__name__":"b"}}]"#,
        r#"[{"metric":"a","timestamp":1,"value":1,"tags":nul}]"#,
        r#"[7]"#,
        "{}",
        "5",
        "",
    ] {
        falls_back(body);
    }
    falls_back("[{\"metric\":\"a\",\"timestamp\":1,\"value\":1,\"tags\":{\"h\":\"\u{1}\"}}]");
    assert_eq!(scanned("[{\"metric\":\"\u{0}\"}]"), None);
    // Invalid UTF-8 anywhere.
    let mut bad = br#"[{"metric":"a","timestamp":1,"value":1,"tags":{"h":"X"}}]"#.to_vec();
    let x = bad.iter().position(|&c| c == b'X').unwrap();
    bad[x] = 0xff;
    let mut free = |_| Ok::<(), ()>(());
    let mut out = BatchBuilder::new(SeriesLimits::default(), &mut free);
    assert_eq!(super::decode(&bad, &mut out), None);
}

#[test]
fn a_refusal_on_the_scanner_path_is_credited_to_the_serde_path() {
    // The budget grants 200 bytes in all: the scanner reserves some, gives up at the escape,
    // and the serde path asks only for what goes beyond what was granted.
    let body = r#"[{"metric":"a","timestamp":1,"value":1},{"metric":"b","timestamp":1,"value":1},{"metric":"\u0063","timestamp":1,"value":1}]"#;
    let mut granted = 0usize;
    let mut budget = |n: usize| {
        granted += n;
        if granted <= 400 {
            Ok(())
        } else {
            Err(())
        }
    };
    let d = decode(body.as_bytes(), SeriesLimits::default(), &mut budget).unwrap();
    assert_eq!(d.points, 3);
    let mut serde_only = 0usize;
    decode_serde(body.as_bytes(), SeriesLimits::default(), &mut |n| {
        serde_only += n;
        Ok::<(), ()>(())
    })
    .unwrap();
    assert_eq!(granted, serde_only);
}

#[test]
fn numbers_read_as_serde_json_reads_them() {
    for (ts, ms) in
        [("1", 1_000), ("1700000000", 1_700_000_000_000), ("10000000000", 10_000_000_000), ("\"+7\"", 7_000)]
    {
        assert_eq!(timestamp_ms(scalar(ts)), Some(ms), "{ts}");
    }
    for ts in ["1e3", "\"1.0\"", "\"\"", "-1", "1000000000000000000000"] {
        assert_eq!(timestamp_ms(scalar(ts)), None, "{ts}");
    }
    for v in ["0", "-0", "1.25", "-3e-7", "1E+2", "123456789012345678901234567890", "\" 4 \""] {
        agrees(&format!(r#"{{"metric":"a","timestamp":1,"value":{v}}}"#));
    }
    falls_back(r#"{"metric":"a","timestamp":1,"value":"inf"}"#);
}

fn scalar(raw: &str) -> Scalar<'_> {
    raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')).map_or(Scalar::Number(raw), Scalar::Str)
}

/// One random point member, as written.
fn member() -> impl Strategy<Value = String> {
    let metric = prop_oneof![
        8 => Just("\"m\"".to_owned()),
        4 => Just("\"sys.cpu\"".to_owned()),
        1 => Just("\"é\"".to_owned()),
        1 => Just("\"m\\u0031\"".to_owned()),
        1 => Just("\"\"".to_owned()),
        1 => Just("7".to_owned()),
    ]
    .prop_map(|m| format!("\"metric\":{m}"));
    let timestamp = prop_oneof![
        8 => (0i64..20_000_000_000).prop_map(|t| t.to_string()),
        2 => (0i64..20_000_000_000).prop_map(|t| format!("\"{t}\"")),
        1 => Just("-0".to_owned()),
        1 => Just("-12".to_owned()),
        1 => Just("1.5".to_owned()),
        1 => Just("1e3".to_owned()),
        1 => Just("18446744073709551615".to_owned()),
        1 => Just("99999999999999999999".to_owned()),
        1 => Just("null".to_owned()),
    ]
    .prop_map(|t| format!("\"timestamp\":{t}"));
    let value = prop_oneof![
        4 => any::<i64>().prop_map(|v| v.to_string()),
        4 => any::<f64>().prop_map(|v| format!("{v:e}")),
        4 => any::<f64>().prop_map(|v| v.to_string()),
        2 => "-?(0|[1-9][0-9]{0,25})(\\.[0-9]{1,20})?([eE][+-]?[0-9]{1,3})?",
        1 => "\" ?-?[0-9]{1,4}(\\.[0-9]{0,3})? ?\"",
        1 => Just("\"NaN\"".to_owned()),
        1 => Just("-0".to_owned()),
        1 => Just("true".to_owned()),
        1 => Just("[1]".to_owned()),
    ]
    .prop_map(|v| format!("\"value\":{v}"));
    let tag = (
        prop_oneof![
            Just("h"),
            Just("host"),
            Just("dc-id"),
            Just("dc_id"),
            Just("1st"),
            Just("__name__"),
            Just("h\\u0031"),
            Just(""),
            Just("名前")
        ],
        prop_oneof![Just("\"1\""), Just("\"2\""), Just("\"\""), Just("\"ü\""), Just("3"), Just("\"a\\\"b\"")],
    )
        .prop_map(|(k, v)| format!("\"{k}\":{v}"));
    let tags = prop_oneof![
        6 => proptest::collection::vec(tag, 0..3).prop_map(|t| format!("\"tags\":{{{}}}", t.join(","))),
        1 => Just("\"tags\":null".to_owned()),
        1 => Just("\"tags\":[]".to_owned()),
    ];
    prop_oneof![4 => metric, 4 => timestamp, 4 => value, 4 => tags, 1 => Just("\"other\":{\"x\":[1]}".to_owned())]
}

/// Points as clients send them, a few series in turn.
fn well_formed() -> impl Strategy<Value = Vec<String>> {
    (
        prop_oneof![Just("m"), Just("sys.cpu")],
        proptest::collection::vec(
            ("[0-2]", 1i64..3_000_000_000, any::<f64>().prop_filter("finite", |v| v.is_finite())),
            1..8,
        ),
    )
        .prop_map(|(metric, points)| {
            points
                .iter()
                .map(|(h, t, v)| format!(r#"{{"metric":"{metric}","timestamp":{t},"value":{v},"tags":{{"h":"{h}"}}}}"#))
                .collect()
        })
}

/// A random body: mostly well-formed points, sometimes cut or with a stray byte.
fn body() -> impl Strategy<Value = String> {
    let point = proptest::collection::vec(member(), 0..6).prop_map(|m| format!("{{{}}}", m.join(",")));
    let points = prop_oneof![
        2 => well_formed(),
        3 => proptest::collection::vec(point, 0..5),
    ];
    (points, prop_oneof![Just(" "), Just(""), Just("\n\t")], 0usize..400, 0u8..8).prop_map(
        |(points, space, at, damage)| {
            let mut body = format!("[{space}{}{space}]", points.join(&format!(",{space}")));
            let at = at % body.len();
            if body.is_char_boundary(at) {
                match damage {
                    0 => body.truncate(at),
                    1 => body.insert(at, ['x', '"', '\\', ',', '}'][at % 5]),
                    _ => {}
                }
            }
            body
        },
    )
}

proptest! {
    /// The scanner takes what clients send, as the serde path reads it.
    #[test]
    fn the_scanner_takes_the_usual_bodies(points in well_formed()) {
        let body = format!("[{}]", points.join(","));
        prop_assert_eq!(scanned(&body), Some(reference(&body).unwrap()));
    }

    /// Whatever the body, `decode` answers as the serde path does, and the scanner, where it
    /// takes a body, builds the same batch.
    #[test]
    fn the_scanner_agrees_with_the_serde_path(body in body()) {
        let want = reference(&body);
        if let Some(got) = scanned(&body) {
            prop_assert_eq!(Ok(got), want.clone());
        }
        let got = outcome(decode(body.as_bytes(), SeriesLimits::default(), &mut |_| Ok(())));
        prop_assert_eq!(got, want);
    }
}
