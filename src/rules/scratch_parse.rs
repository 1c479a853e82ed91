#![allow(missing_docs)]
use super::file::*;
use serde::Deserialize;
use std::collections::BTreeMap;
#[derive(Deserialize)]
struct F {
    groups: Vec<G>,
}
#[derive(Deserialize)]
struct G {
    name: String,
    interval: Option<String>,
    #[serde(default)]
    limit: usize,
    rules: Vec<R>,
}
#[derive(Deserialize)]
struct R {
    record: Option<String>,
    alert: Option<String>,
    expr: String,
    #[serde(rename = "for")]
    for_: Option<String>,
    keep_firing_for: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}
pub fn parse(path: &str, bytes: &[u8]) -> Result<RuleFile, String> {
    let f: F = serde_norway::from_slice(bytes).map_err(|e| e.to_string())?;
    let d = |s: &Option<String>| s.as_deref().map(|s| crate::duration::parse_ms(s).unwrap_or(0));
    Ok(RuleFile {
        path: path.into(),
        groups: f
            .groups
            .into_iter()
            .map(|g| Group {
                name: g.name,
                file: path.into(),
                interval_ms: d(&g.interval),
                query_offset_ms: None,
                limit: g.limit,
                labels: BTreeMap::new(),
                rules: g
                    .rules
                    .into_iter()
                    .map(|r| Rule {
                        kind: match (r.record, r.alert) {
                            (Some(rec), _) => RuleKind::Recording { record: rec },
                            (_, a) => RuleKind::Alerting {
                                alert: a.unwrap_or_default(),
                                for_ms: d(&r.for_).unwrap_or(0),
                                keep_firing_for_ms: d(&r.keep_firing_for).unwrap_or(0),
                                annotations: r.annotations,
                            },
                        },
                        expr: r.expr,
                        labels: r.labels,
                        line: 0,
                    })
                    .collect(),
            })
            .collect(),
    })
}
