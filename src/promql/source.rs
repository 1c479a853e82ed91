//! The one seam between the PromQL evaluator and storage.

use crate::matcher::Matcher;
use crate::sample::SeriesSamples;

/// Why a source could not answer.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// Storage failed (I/O, corruption, poisoned database).
    #[error("storage: {0}")]
    Storage(String),
    /// The selection would load more samples than allowed.
    #[error("query would load more than {limit} samples; narrow the selector or time range")]
    TooManySamples {
        /// The configured limit.
        limit: usize,
    },
}

/// Where the evaluator reads series from. Storage implements it; tests use in-memory fakes.
pub trait Source: Send + Sync {
    /// Every series matching all `matchers` with at least one sample in `[start_ms, end_ms]`
    /// (both inclusive), with exactly the samples in that range, sorted ascending by timestamp.
    /// The order of the returned series is unspecified.
    ///
    /// # Errors
    /// [`SourceError`] when storage fails or a limit is exceeded.
    fn select(&self, matchers: &[Matcher], start_ms: i64, end_ms: i64) -> Result<Vec<SeriesSamples>, SourceError>;

    /// As [`Source::select`], with `map` applied to every series as soon as it is read, on
    /// whichever thread read it, and before it is collected: a reduction (e.g. to one value per
    /// query step) then runs while the samples are in the CPU caches, and only what it keeps
    /// is held. Sample limits apply to the samples read, before `map`.
    ///
    /// # Errors
    /// As [`Source::select`].
    fn select_mapped(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        map: SeriesMap<'_>,
    ) -> Result<Vec<SeriesSamples>, SourceError> {
        let mut series = self.select(matchers, start_ms, end_ms)?;
        series.iter_mut().for_each(map);
        Ok(series)
    }
}

/// A transformation applied to each selected series where it is read (see
/// [`Source::select_mapped`]).
pub type SeriesMap<'a> = &'a (dyn Fn(&mut SeriesSamples) + Sync);

/// A fixed in-memory [`Source`]: answers every selection by filtering a list of series held in
/// memory. Used by tests and the fuzz harness, which need an engine without storage.
#[derive(Clone, Debug, Default)]
pub struct MemSource {
    series: Vec<SeriesSamples>,
}

impl MemSource {
    /// Wraps `series`; each one's samples must be sorted by strictly ascending timestamp.
    pub fn new(series: Vec<SeriesSamples>) -> Self {
        Self { series }
    }
}

impl Source for MemSource {
    fn select(&self, matchers: &[Matcher], start_ms: i64, end_ms: i64) -> Result<Vec<SeriesSamples>, SourceError> {
        Ok(self
            .series
            .iter()
            .filter(|s| matchers.iter().all(|m| m.matches(s.labels.get(&m.name).unwrap_or(""))))
            .map(|s| SeriesSamples {
                labels: s.labels.clone(),
                samples: s
                    .samples
                    .iter()
                    .filter(|p| p.timestamp_ms >= start_ms && p.timestamp_ms <= end_ms)
                    .copied()
                    .collect(),
            })
            .filter(|s| !s.samples.is_empty())
            .collect())
    }
}
