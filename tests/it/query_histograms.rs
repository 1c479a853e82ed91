//! Native histograms in `/api/v1/query` and `/api/v1/query_range` over real HTTP: the
//! `histogram` and `histograms` fields in the shape Prometheus' JSON API prints
//! (`web/api/v1/json_codec.go`, `util/jsonutil.MarshalHistogram`).

use std::sync::Arc;

use serde_json::{json, Value};

use saltdb::histogram::{Histogram, Span};
use saltdb::labels::Labels;
use saltdb::sample::{HistogramSample, SeriesSamples, WriteBatch};
use saltdb::storage::Storage;

use crate::common::*;

const T: i64 = 1_700_000_000_000;

/// Schema 0, zero bucket [-0.25, 0.25] with 3, positive buckets (0.5, 1], (1, 2], (2, 4] with
/// `k`, `2k`, `k`, and one negative bucket [-1, -0.5) with 1.
fn histogram(k: f64) -> Histogram {
    Histogram {
        schema: 0,
        zero_threshold: 0.25,
        zero_count: 3.0,
        count: 4.0 + 4.0 * k,
        sum: 10.5 * k,
        positive_spans: vec![Span { offset: 0, length: 3 }],
        positive_buckets: vec![k, 2.0 * k, k],
        negative_spans: vec![Span { offset: 0, length: 1 }],
        negative_buckets: vec![1.0],
        ..Histogram::default()
    }
}

fn get(base: &str, path: &str, query: &[(&str, &str)]) -> Value {
    let resp = client().get(format!("{base}{path}")).query(query).send().unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    serde_json::from_str(&resp.text().unwrap()).unwrap()
}

#[test]
fn histograms_in_query_results() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Storage::open(storage_config(dir.path())).unwrap();
        let histograms = (0..3)
            .map(|i| HistogramSample { timestamp_ms: T + i * 60_000, histogram: Arc::new(histogram(i as f64 + 1.0)) })
            .collect();
        let labels = Labels::from_pairs([("__name__", "latency"), ("job", "api")]).unwrap();
        store.write(WriteBatch { series: vec![SeriesSamples { labels, samples: Vec::new(), histograms }] }).unwrap();
    }
    let server = InProcess::start(storage_config(dir.path()));
    let base = server.url("");
    let at = ((T + 120_000) / 1000).to_string();

    // Buckets in ascending order of value, with Prometheus' boundary rules: 1 for a negative
    // bucket (lower bound included), 3 for the zero bucket, 0 for positive ones.
    let want = json!({"count":"16","sum":"31.5","buckets":[
        [1,"-1","-0.5","1"],[3,"-0.25","0.25","3"],[0,"0.5","1","3"],[0,"1","2","6"],[0,"2","4","3"]]});
    let v = get(&base, "/api/v1/query", &[("query", "latency"), ("time", &at)]);
    assert_eq!(
        v["data"],
        json!({"resultType":"vector","result":[{"metric":{"__name__":"latency","job":"api"},"histogram":[1_700_000_120, want]}]}),
        "{v}"
    );

    let v = get(&base, "/api/v1/query", &[("query", "histogram_count(latency)"), ("time", &at)]);
    assert_eq!(v["data"]["result"][0]["value"], json!([1_700_000_120, "16"]), "{v}");

    let (start, end) = ((T / 1000).to_string(), ((T + 120_000) / 1000).to_string());
    let v =
        get(&base, "/api/v1/query_range", &[("query", "latency"), ("start", &start), ("end", &end), ("step", "60")]);
    let series = &v["data"]["result"][0];
    assert!(series.get("values").is_none(), "a series of histograms has no float values: {v}");
    let points = series["histograms"].as_array().unwrap();
    assert_eq!(points.len(), 3, "{v}");
    assert_eq!(points[0][0], json!(1_700_000_000));
    assert_eq!(points[0][1]["count"], "8");
    assert_eq!(points[2][1], want);
    server.stop();
}
