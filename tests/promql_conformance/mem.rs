//! An in-memory [`Source`] (used until/unless the real storage is wired in).

use std::collections::BTreeMap;

use saltdb::labels::Labels;
use saltdb::matcher::Matcher;
use saltdb::promql::source::{Source, SourceError};
use saltdb::sample::{Sample, SeriesSamples};

#[derive(Default)]
pub struct MemSource {
    series: BTreeMap<Labels, BTreeMap<i64, f64>>,
}

impl MemSource {
    pub fn add(&mut self, labels: Labels, points: &[(i64, f64)]) {
        let s = self.series.entry(labels).or_default();
        for &(t, v) in points {
            s.insert(t, v);
        }
    }
}

impl Source for MemSource {
    fn select(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<SeriesSamples>, SourceError> {
        let mut out = Vec::new();
        for (labels, pts) in &self.series {
            if !matchers
                .iter()
                .all(|m| m.matches(labels.get(&m.name).unwrap_or("")))
            {
                continue;
            }
            let samples: Vec<Sample> = pts
                .range(start_ms..=end_ms)
                .map(|(&t, &v)| Sample::new(t, v))
                .collect();
            if !samples.is_empty() {
                out.push(SeriesSamples {
                    labels: labels.clone(),
                    samples,
                });
            }
        }
        Ok(out)
    }
}
