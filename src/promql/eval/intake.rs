//! What one selector's load keeps, counted while the storage reads it.
//!
//! A query has two sample limits (see [`EngineOptions`]): the samples it *scans* (read from
//! storage, counted by the storage's own budget as it reads: `max_scanned_samples`) and the
//! samples it *holds* at once (`max_samples`, what Prometheus' `--query.max-samples` counts).
//! A selector reduced where it is read (to its values at the outer steps, or to its newest
//! sample) scans many and holds few; a selector kept whole holds what it scans. The held count
//! must be checked as each series arrives, not once the selection is complete, or a query over
//! a billion samples would hold them all before being refused.
//!
//! An [`Intake`] is what the per-series map of a selection ends with: it counts what the
//! series keeps (samples and bytes) against what the query already holds. Past a limit it
//! empties the series (so nothing more is held), records the error, and raises the request's
//! cancellation flag, so the storage stops scanning; [`Intake::finish`] then reports the limit
//! rather than the cancellation.
//!
//! Invariant: while no limit is passed, the series are untouched.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::super::engine::EngineOptions;
use super::super::error::{EvalError, Result};
use super::super::footprint;
use crate::sample::SeriesSamples;
use crate::storage::StorageError;

/// Counts what one selection keeps; shared by the threads that read it.
pub(crate) struct Intake<'o> {
    opts: &'o EngineOptions,
    /// Samples and bytes the query held before this selection.
    before: (usize, usize),
    samples: AtomicUsize,
    bytes: AtomicUsize,
    over: Mutex<Option<EvalError>>,
    cancel: Option<Arc<AtomicBool>>,
}

impl<'o> Intake<'o> {
    /// An intake for a query that already holds `samples` samples and `bytes` bytes, which
    /// raises `cancel` when a limit is passed.
    pub fn new(opts: &'o EngineOptions, (samples, bytes): (usize, usize), cancel: Option<Arc<AtomicBool>>) -> Self {
        Self {
            opts,
            before: (samples, bytes),
            samples: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            over: Mutex::new(None),
            cancel,
        }
    }

    /// Counts what `s` keeps; past a limit, empties it and stops the selection.
    pub fn admit(&self, s: &mut SeriesSamples) {
        let n = s.samples.len() + s.histograms.len();
        let samples = self.samples.fetch_add(n, Ordering::Relaxed).saturating_add(n);
        let size = footprint::series_bytes(s);
        let bytes = self.bytes.fetch_add(size, Ordering::Relaxed).saturating_add(size);
        let held_samples = self.before.0.saturating_add(samples);
        let held_bytes = self.before.1.saturating_add(bytes);
        let over = if held_samples > self.opts.max_samples {
            Some(EvalError::TooManySamples("loading series"))
        } else if held_bytes > self.opts.max_memory_bytes {
            Some(EvalError::TooMuchMemory {
                limit: self.opts.max_memory_bytes,
                needed: held_bytes,
                what: "loading series",
            })
        } else {
            None
        };
        let Some(err) = over else { return };
        s.samples = Vec::new();
        s.histograms = Vec::new();
        let mut first = self.over.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        first.get_or_insert(err);
        if let Some(c) = &self.cancel {
            c.store(true, Ordering::Relaxed);
        }
    }

    /// The selection's result, or the limit it passed (which is why the storage may have
    /// stopped with [`StorageError::Cancelled`]); a scan limit the storage hit is reported as
    /// [`EvalError::TooManyScanned`].
    pub fn finish<T>(&self, read: Result<T>) -> Result<T> {
        let over = self.over.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        if let Some(err) = over {
            return Err(err);
        }
        read.map_err(|e| match e {
            EvalError::Storage(StorageError::TooManySamples { limit }) => EvalError::TooManyScanned { limit },
            other => other,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::Labels;
    use crate::sample::Sample;

    fn series(n: usize) -> SeriesSamples {
        SeriesSamples {
            labels: Labels::empty(),
            samples: (0..n).map(|i| Sample::new(i as i64, 1.0)).collect(),
            histograms: Vec::new(),
        }
    }

    #[test]
    fn a_series_past_the_held_limit_is_emptied_and_the_scan_cancelled() {
        let opts = EngineOptions { max_samples: 10, ..EngineOptions::default() };
        let cancel = Arc::new(AtomicBool::new(false));
        let intake = Intake::new(&opts, (2, 0), Some(Arc::clone(&cancel)));
        let mut a = series(8);
        intake.admit(&mut a);
        assert_eq!(a.samples.len(), 8, "within the limit: untouched");
        assert!(!cancel.load(Ordering::Relaxed));
        let mut b = series(1);
        intake.admit(&mut b);
        assert!(b.samples.is_empty());
        assert!(cancel.load(Ordering::Relaxed));
        let err = intake.finish(Err::<(), _>(EvalError::Storage(StorageError::Cancelled))).unwrap_err();
        assert!(matches!(err, EvalError::TooManySamples(_)), "{err}");
    }

    #[test]
    fn the_storage_scan_limit_is_reported_as_such() {
        let opts = EngineOptions::default();
        let intake = Intake::new(&opts, (0, 0), None);
        let err =
            intake.finish(Err::<(), _>(EvalError::Storage(StorageError::TooManySamples { limit: 7 }))).unwrap_err();
        assert!(matches!(err, EvalError::TooManyScanned { limit: 7 }), "{err}");
        assert!(err.to_string().contains("--query-max-scanned-samples"), "{err}");
    }

    #[test]
    fn memory_counts_too() {
        let opts = EngineOptions { max_memory_bytes: 100, ..EngineOptions::default() };
        let intake = Intake::new(&opts, (0, 0), None);
        let mut a = series(100);
        intake.admit(&mut a);
        assert!(a.samples.is_empty());
        assert!(matches!(intake.finish(Ok(())), Err(EvalError::TooMuchMemory { .. })));
    }
}
