//! Samples and the write batch every ingest protocol decodes into.

use std::sync::Arc;

use crate::histogram::Histogram;
use crate::labels::{LabelError, Labels};

/// Smallest accepted timestamp: 1970-01-01T00:00:00Z.
pub const MIN_TIMESTAMP_MS: i64 = 0;
/// Largest accepted timestamp: 2262-04-11T23:47:16.854Z, the end of Prometheus' time range
/// (`i64::MAX` nanoseconds).
pub const MAX_TIMESTAMP_MS: i64 = 9_223_372_036_854;

/// Bit pattern of the Prometheus staleness marker, a NaN that must be stored bit-exact.
pub const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;

/// Returns true when `v` is the Prometheus staleness marker (not just any NaN).
pub fn is_stale_marker(v: f64) -> bool {
    v.to_bits() == STALE_NAN_BITS
}

/// One point: milliseconds since the Unix epoch and a float value (any bit pattern).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Milliseconds since the Unix epoch, within `MIN_TIMESTAMP_MS..=MAX_TIMESTAMP_MS`.
    pub timestamp_ms: i64,
    /// The value; NaN payloads (staleness markers) are preserved.
    pub value: f64,
}

impl Sample {
    /// Builds a sample.
    pub fn new(timestamp_ms: i64, value: f64) -> Self {
        Self { timestamp_ms, value }
    }
}

/// A timestamp outside the supported range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("timestamp {0} ms is outside the supported range 1970-01-01..2262-04-11 ({MIN_TIMESTAMP_MS}..={MAX_TIMESTAMP_MS} ms)")]
pub struct TimestampOutOfRange(pub i64);

/// Checks that a timestamp lies in the supported range.
///
/// # Errors
/// [`TimestampOutOfRange`] naming the timestamp.
pub fn check_timestamp(ts_ms: i64) -> Result<(), TimestampOutOfRange> {
    if (MIN_TIMESTAMP_MS..=MAX_TIMESTAMP_MS).contains(&ts_ms) {
        Ok(())
    } else {
        Err(TimestampOutOfRange(ts_ms))
    }
}

/// One native histogram sample: milliseconds since the Unix epoch and the histogram (shared, so
/// that reads hand it on without copying its buckets).
#[derive(Clone, Debug)]
pub struct HistogramSample {
    /// Milliseconds since the Unix epoch, within `MIN_TIMESTAMP_MS..=MAX_TIMESTAMP_MS`.
    pub timestamp_ms: i64,
    /// The histogram; a stale marker is a histogram whose sum is [`STALE_NAN_BITS`].
    pub histogram: Arc<Histogram>,
}

/// An exemplar: a sample of an event that contributed to a series (usually a trace id and the
/// observed value), as Prometheus' exemplar storage keeps them.
#[derive(Clone, Debug, PartialEq)]
pub struct Exemplar {
    /// The exemplar's own labels (e.g. `trace_id`), at most [`MAX_EXEMPLAR_LABEL_CHARS`]
    /// characters of names and values together; may be empty.
    pub labels: Labels,
    /// The observed value (any bit pattern).
    pub value: f64,
    /// Milliseconds since the Unix epoch, within `MIN_TIMESTAMP_MS..=MAX_TIMESTAMP_MS`.
    pub timestamp_ms: i64,
}

/// The start timestamp (created timestamp) of one sample: when the counter (or, for a delta
/// series, the interval) the sample reports began, as remote-write 2.0's `created_timestamp`
/// and OpenTelemetry's `StartTimeUnixNano` carry it. A sample without one has none (Prometheus'
/// `ST == 0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StartTimestamp {
    /// The timestamp of the sample (float or histogram) it belongs to.
    pub timestamp_ms: i64,
    /// The start timestamp, milliseconds since the Unix epoch; never 0 (0 means none).
    pub start_ms: i64,
}

/// Most characters (Unicode scalar values) of an exemplar's label names and values together, as
/// Prometheus' `ExemplarMaxLabelSetLength`.
pub const MAX_EXEMPLAR_LABEL_CHARS: usize = 128;

/// Equal timestamps and [`Histogram::equals`] histograms (Prometheus' equality: bit patterns of
/// the counts, hint and integer flag aside).
impl PartialEq for HistogramSample {
    fn eq(&self, other: &Self) -> bool {
        self.timestamp_ms == other.timestamp_ms && self.histogram.equals(&other.histogram)
    }
}

/// The samples of one series: float samples and native histogram samples. In a [`WriteBatch`]
/// they may come in any order; as a read result each vector must be sorted by ascending
/// timestamp with no duplicate timestamps, and no timestamp may appear in both (a series holds
/// a float or a histogram at each instant, as in Prometheus).
#[derive(Clone, Debug, PartialEq)]
pub struct SeriesSamples {
    /// The series identity.
    pub labels: Labels,
    /// The float points.
    pub samples: Vec<Sample>,
    /// The native histogram points.
    pub histograms: Vec<HistogramSample>,
}

impl SeriesSamples {
    /// Removes staleness markers (without touching the samples when there are none).
    pub fn drop_stale_markers(&mut self) {
        if self.samples.iter().any(|p| is_stale_marker(p.value)) {
            self.samples.retain(|p| !is_stale_marker(p.value));
        }
    }
}

/// What every ingest protocol decodes into: validated series, committed atomically as a whole.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WriteBatch {
    /// The series and their samples. Labels must be validated and carry `__name__`;
    /// timestamps must pass [`check_timestamp`].
    pub series: Vec<SeriesSamples>,
}

impl WriteBatch {
    /// Total number of float samples in the batch.
    pub fn sample_count(&self) -> usize {
        self.series.iter().map(|s| s.samples.len()).sum()
    }

    /// Total number of histogram samples in the batch.
    pub fn histogram_count(&self) -> usize {
        self.series.iter().map(|s| s.histograms.len()).sum()
    }
}

/// A write batch packed into three flat vectors, so that a decoder fills it without an allocation
/// per label or per series: the canonical label-set encodings ([`Labels::encode`]) back to back,
/// the samples back to back, and where each series ends in both.
///
/// Invariants (upheld by the builder methods): every series' label bytes are a canonical encoding
/// of a validated label set with a `__name__` (so [`Labels::decode`] accepts them), every series
/// has at least one sample, and every timestamp passes [`check_timestamp`]. Samples of a series
/// may come in any order, as in [`WriteBatch`].
#[derive(Clone, Debug, Default)]
pub struct PackedBatch {
    labels: Vec<u8>,
    samples: Vec<Sample>,
    /// Per finished series: the end of its label bytes and of its samples. Anything after the
    /// last ends is the series being built.
    ends: Vec<(usize, usize)>,
    /// Native histogram samples, back to back (empty for a batch of floats only).
    histograms: Vec<HistogramSample>,
    /// Per finished series, the end of its histograms; empty until the batch's first histogram
    /// (then filled with zeros for the series before it), so float batches never touch it.
    histogram_ends: Vec<usize>,
    /// Exemplars, back to back, with the end of each finished series' as for histograms.
    exemplars: Vec<Exemplar>,
    exemplar_ends: Vec<usize>,
    /// Start timestamps of samples, back to back, with the end of each finished series' as for
    /// histograms: empty for a batch without any, so batches without them never touch it.
    starts: Vec<StartTimestamp>,
    start_ends: Vec<usize>,
}

/// Makes room for `extra` more elements in `v`, asking `grant` for the bytes first.
#[inline]
fn grow<T>(v: &mut Vec<T>, extra: usize, grant: &mut dyn FnMut(usize) -> bool) -> bool {
    if v.capacity() - v.len() >= extra {
        return true;
    }
    let cap = v.capacity().saturating_mul(2).max(v.len().saturating_add(extra)).max(4);
    if !grant((cap - v.capacity()).saturating_mul(std::mem::size_of::<T>())) {
        return false;
    }
    v.reserve_exact(cap - v.len());
    true
}

/// One series of a [`PackedBatch`].
#[derive(Clone, Copy, Debug)]
pub struct PackedSeries<'a> {
    /// The canonical encoding of the label set.
    pub labels: &'a [u8],
    /// The float points.
    pub samples: &'a [Sample],
    /// The native histogram points.
    pub histograms: &'a [HistogramSample],
    /// The series' exemplars.
    pub exemplars: &'a [Exemplar],
    /// Start timestamps of some of its samples (floats or histograms), in any order; a sample
    /// missing here has none.
    pub starts: &'a [StartTimestamp],
}

impl<'a> PackedSeries<'a> {
    /// The `(name, value)` pairs of the series' labels, as bytes.
    pub fn label_pairs(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> {
        label_pairs(self.labels)
    }
}

impl PackedBatch {
    /// An empty batch with room for about `series` series of `samples` samples in total.
    pub fn with_capacity(series: usize, samples: usize) -> Self {
        Self {
            labels: Vec::with_capacity(series * 64),
            samples: Vec::with_capacity(samples),
            ends: Vec::with_capacity(series),
            ..Self::default()
        }
    }

    /// An empty batch with room for exactly `series` series, `samples` samples and `label_bytes`
    /// of canonical labels (each name and value plus a separator).
    pub fn sized(series: usize, samples: usize, label_bytes: usize) -> Self {
        Self {
            labels: Vec::with_capacity(label_bytes),
            samples: Vec::with_capacity(samples),
            ends: Vec::with_capacity(series),
            ..Self::default()
        }
    }

    /// Makes room for `labels` more label bytes, `samples` more samples and `series` more
    /// finished series, growing each buffer as a `Vec` grows (to at least twice its capacity).
    /// `grant` is asked for the bytes of each growth before it happens; when it refuses, that
    /// buffer does not grow and the answer is `false`.
    #[inline]
    pub fn make_room(
        &mut self,
        labels: usize,
        samples: usize,
        series: usize,
        grant: &mut dyn FnMut(usize) -> bool,
    ) -> bool {
        grow(&mut self.labels, labels, grant)
            && grow(&mut self.samples, samples, grant)
            && grow(&mut self.ends, series, grant)
    }

    /// Heap bytes the batch holds (its buffers' capacities).
    pub fn heap_bytes(&self) -> usize {
        self.labels.capacity()
            + self.samples.capacity() * std::mem::size_of::<Sample>()
            + self.ends.capacity() * std::mem::size_of::<(usize, usize)>()
            + self.histograms.iter().map(|h| h.histogram.heap_bytes()).sum::<usize>()
            + self.histograms.capacity() * std::mem::size_of::<HistogramSample>()
            + self.histogram_ends.capacity() * std::mem::size_of::<usize>()
            + self.exemplars.capacity() * std::mem::size_of::<Exemplar>()
            + self
                .exemplars
                .iter()
                .map(|e| e.labels.iter().map(|l| l.name.len() + l.value.len() + 48).sum::<usize>())
                .sum::<usize>()
            + self.exemplar_ends.capacity() * std::mem::size_of::<usize>()
            + self.starts.capacity() * std::mem::size_of::<StartTimestamp>()
            + self.start_ends.capacity() * std::mem::size_of::<usize>()
    }

    /// Appends a series (skipped when `samples` is empty), dropping any series being built.
    /// `labels` must carry `__name__`; timestamps must pass [`check_timestamp`].
    pub fn push(&mut self, labels: &Labels, samples: &[Sample]) {
        self.push_mixed(labels, samples, &[]);
    }

    /// [`PackedBatch::push`] for a series with float and histogram samples (skipped when both
    /// are empty).
    pub fn push_mixed(&mut self, labels: &Labels, samples: &[Sample], histograms: &[HistogramSample]) {
        self.abandon_series();
        if samples.is_empty() && histograms.is_empty() {
            return;
        }
        labels.encode(&mut self.labels);
        self.samples.extend_from_slice(samples);
        for h in histograms {
            self.push_histogram(h.clone());
        }
        self.finish_series();
    }

    /// Adds one native histogram sample to the series being built; its timestamp must pass
    /// [`check_timestamp`] and the histogram must be valid ([`Histogram::validate`]).
    pub fn push_histogram(&mut self, sample: HistogramSample) {
        if self.histogram_ends.len() < self.ends.len() {
            self.histogram_ends.resize(self.ends.len(), 0);
        }
        self.histograms.push(sample);
    }

    /// Adds one label to the series being built. Labels must come in ascending name order, with
    /// a valid name and a non-empty value free of 0x00 (see [`crate::labels`]).
    pub fn push_label(&mut self, name: &str, value: &str) {
        self.labels.extend_from_slice(name.as_bytes());
        self.labels.push(0);
        self.labels.extend_from_slice(value.as_bytes());
        self.labels.push(0);
    }

    /// Adds a whole label set to the series being built: bytes that [`PackedBatch::push_label`]
    /// calls produced for an earlier series (see [`crate::remote::known_labels`]).
    pub(crate) fn push_canonical(&mut self, canonical: &[u8]) {
        self.labels.extend_from_slice(canonical);
    }

    /// The label bytes of the series being built so far.
    pub(crate) fn open_labels(&self) -> &[u8] {
        let from = self.ends.last().map_or(0, |&(l, _)| l);
        self.labels.get(from..).unwrap_or_default()
    }

    /// Adds one sample to the series being built; its timestamp must pass [`check_timestamp`].
    pub fn push_sample(&mut self, sample: Sample) {
        self.samples.push(sample);
    }

    /// Samples added to the series being built so far.
    pub fn open_samples(&self) -> usize {
        self.samples.len() - self.ends.last().map_or(0, |&(_, s)| s)
    }

    /// Adds one exemplar to the series being built; its timestamp must pass
    /// [`check_timestamp`] and its labels fit [`MAX_EXEMPLAR_LABEL_CHARS`].
    pub fn push_exemplar(&mut self, exemplar: Exemplar) {
        if self.exemplar_ends.len() < self.ends.len() {
            self.exemplar_ends.resize(self.ends.len(), 0);
        }
        self.exemplars.push(exemplar);
    }

    /// Records the start timestamp of a sample of the series being built (`start.start_ms`
    /// must not be 0; its `timestamp_ms` should be one of the series' samples).
    pub fn push_start(&mut self, start: StartTimestamp) {
        if self.start_ends.len() < self.ends.len() {
            self.start_ends.resize(self.ends.len(), 0);
        }
        self.starts.push(start);
    }

    /// Ends the series being built (it must have labels and at least one sample, histogram or
    /// exemplar).
    pub fn finish_series(&mut self) {
        self.ends.push((self.labels.len(), self.samples.len()));
        if !self.starts.is_empty() {
            self.start_ends.push(self.starts.len());
        }
        if !self.histograms.is_empty() {
            self.histogram_ends.push(self.histograms.len());
        }
        if !self.exemplars.is_empty() {
            self.exemplar_ends.push(self.exemplars.len());
        }
    }

    /// Drops whatever was added to the series being built.
    pub fn abandon_series(&mut self) {
        let (labels, samples) = self.ends.last().copied().unwrap_or((0, 0));
        self.labels.truncate(labels);
        self.samples.truncate(samples);
        self.histograms.truncate(self.histogram_ends.last().copied().unwrap_or(0));
        self.exemplars.truncate(self.exemplar_ends.last().copied().unwrap_or(0));
        self.starts.truncate(self.start_ends.last().copied().unwrap_or(0));
        if self.starts.is_empty() {
            self.start_ends.clear();
        }
        // Ends of nothing but zeros say what no ends say.
        if self.histograms.is_empty() {
            self.histogram_ends.clear();
        }
        if self.exemplars.is_empty() {
            self.exemplar_ends.clear();
        }
    }

    /// Number of series.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// True when the batch holds no series.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Total number of float samples in the finished series.
    pub fn sample_count(&self) -> usize {
        self.ends.last().map_or(0, |&(_, s)| s)
    }

    /// Total number of histogram samples in the finished series.
    pub fn histogram_count(&self) -> usize {
        self.histogram_ends.last().copied().unwrap_or(0)
    }

    /// Total number of start timestamps in the finished series.
    pub fn start_count(&self) -> usize {
        self.start_ends.last().copied().unwrap_or(0)
    }

    /// Total number of exemplars in the finished series.
    pub fn exemplar_count(&self) -> usize {
        self.exemplar_ends.last().copied().unwrap_or(0)
    }

    /// The histogram samples of every finished series, back to back.
    pub fn histograms(&self) -> &[HistogramSample] {
        self.histograms.get(..self.histogram_count()).unwrap_or_default()
    }

    /// The samples of every finished series, back to back.
    pub fn samples(&self) -> &[Sample] {
        self.samples.get(..self.sample_count()).unwrap_or_default()
    }

    /// The series in order.
    pub fn series(&self) -> impl ExactSizeIterator<Item = PackedSeries<'_>> + '_ {
        (0..self.ends.len()).map(|i| {
            let (l0, s0) = i.checked_sub(1).and_then(|p| self.ends.get(p)).copied().unwrap_or((0, 0));
            let (l1, s1) = self.ends.get(i).copied().unwrap_or((l0, s0));
            let h0 = i.checked_sub(1).and_then(|p| self.histogram_ends.get(p)).copied().unwrap_or(0);
            let h1 = self.histogram_ends.get(i).copied().unwrap_or(h0);
            let e0 = i.checked_sub(1).and_then(|p| self.exemplar_ends.get(p)).copied().unwrap_or(0);
            let e1 = self.exemplar_ends.get(i).copied().unwrap_or(e0);
            let st0 = i.checked_sub(1).and_then(|p| self.start_ends.get(p)).copied().unwrap_or(0);
            let st1 = self.start_ends.get(i).copied().unwrap_or(st0);
            PackedSeries {
                labels: self.labels.get(l0..l1).unwrap_or_default(),
                samples: self.samples.get(s0..s1).unwrap_or_default(),
                histograms: self.histograms.get(h0..h1).unwrap_or_default(),
                exemplars: self.exemplars.get(e0..e1).unwrap_or_default(),
                starts: self.starts.get(st0..st1).unwrap_or_default(),
            }
        })
    }

    /// The index of the first series carrying a label named `name`, if any. One vectorised
    /// scan of all label bytes when no series has it (a name is followed by 0x00 in the
    /// canonical encoding, so no match means no such label); a series by series parse only
    /// when the bytes appear somewhere (perhaps in a value).
    pub fn find_label(&self, name: &str) -> Option<usize> {
        let mut pattern = Vec::with_capacity(name.len() + 1);
        pattern.extend_from_slice(name.as_bytes());
        pattern.push(0);
        memchr::memmem::find(&self.labels, &pattern)?;
        self.series().position(|s| label_pairs(s.labels).any(|(n, _)| n == name.as_bytes()))
    }

    /// Adds the label `name`=`value` (a valid name, a non-empty value free of 0x00) to every
    /// finished series, in its place in name order; what a series being built holds is kept as
    /// it is. Nothing changes when a series already carries `name`.
    ///
    /// # Errors
    /// The index of the first series that carries `name`.
    pub fn insert_label(&mut self, name: &str, value: &str) -> Result<(), usize> {
        if let Some(i) = self.find_label(name) {
            return Err(i);
        }
        // In place, from the last series to the first: each series' bytes move right by the
        // pairs inserted before them, so nothing is overwritten before it has moved, and no
        // second buffer is allocated.
        let extra = name.len() + value.len() + 2;
        let Some(&(last_end, _)) = self.ends.last() else { return Ok(()) };
        let old_len = self.labels.len();
        let n = self.ends.len();
        self.labels.resize(old_len + extra * n, 0);
        self.labels.copy_within(last_end..old_len, last_end + extra * n);
        for i in (0..n).rev() {
            let start = i.checked_sub(1).and_then(|p| self.ends.get(p)).map_or(0, |e| e.0);
            let Some(end) = self.ends.get(i).map(|e| e.0) else { break };
            let shift = extra * i;
            let at = start + insertion_point(self.labels.get(start..end).unwrap_or_default(), name.as_bytes());
            self.labels.copy_within(at..end, at + shift + extra);
            let pair = self.labels.get_mut(at + shift..at + shift + extra).unwrap_or_default();
            let (n_bytes, rest) = pair.split_at_mut(name.len());
            n_bytes.copy_from_slice(name.as_bytes());
            if let Some((zero, rest)) = rest.split_first_mut() {
                *zero = 0;
                let (v_bytes, last) = rest.split_at_mut(value.len());
                v_bytes.copy_from_slice(value.as_bytes());
                if let Some(z) = last.first_mut() {
                    *z = 0;
                }
            }
            self.labels.copy_within(start..at, start + shift);
            if let Some(e) = self.ends.get_mut(i) {
                e.0 = end + shift + extra;
            }
        }
        Ok(())
    }

    /// The batch as a [`WriteBatch`] (decodes every label set; for tests and diagnostics).
    ///
    /// # Errors
    /// [`LabelError::Corrupt`] if label bytes are not a canonical encoding, which the builder's
    /// contract rules out.
    pub fn unpack(&self) -> Result<WriteBatch, LabelError> {
        let series = self
            .series()
            .map(|s| {
                Ok(SeriesSamples {
                    labels: Labels::decode(s.labels)?,
                    samples: s.samples.to_vec(),
                    histograms: s.histograms.to_vec(),
                })
            })
            .collect::<Result<_, LabelError>>()?;
        Ok(WriteBatch { series })
    }
}

/// The `(name, value)` pairs of a canonical label-set encoding.
fn label_pairs(encoded: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    let mut fields = encoded.strip_suffix(&[0]).unwrap_or(encoded).split(|&b| b == 0).filter(|_| !encoded.is_empty());
    std::iter::from_fn(move || Some((fields.next()?, fields.next()?)))
}

/// Where a pair named `name` goes in the canonical encoding `encoded`: the offset of the first
/// pair whose name sorts after it (the end when none does). Reads only the pairs before it.
fn insertion_point(encoded: &[u8], name: &[u8]) -> usize {
    let mut at = 0;
    while at < encoded.len() {
        let rest = encoded.get(at..).unwrap_or_default();
        let Some(name_len) = rest.iter().position(|&b| b == 0) else { return encoded.len() };
        if rest.get(..name_len).unwrap_or_default() > name {
            return at;
        }
        let value = rest.get(name_len + 1..).unwrap_or_default();
        let Some(value_len) = value.iter().position(|&b| b == 0) else { return encoded.len() };
        at += name_len + 1 + value_len + 1;
    }
    encoded.len()
}

impl PartialEq for PackedBatch {
    /// Equal when the series, their label bytes and every sample's timestamp and value *bits*
    /// are equal (NaN payloads, staleness markers, compare, and a NaN equals itself), and each
    /// series has equal histograms and exemplars.
    fn eq(&self, other: &Self) -> bool {
        let bits = |b: &Self| b.samples().iter().map(|s| (s.timestamp_ms, s.value.to_bits())).collect::<Vec<_>>();
        self.ends == other.ends
            && self.labels.get(..self.ends.last().map_or(0, |e| e.0))
                == other.labels.get(..other.ends.last().map_or(0, |e| e.0))
            && bits(self) == bits(other)
            && self
                .series()
                .zip(other.series())
                .all(|(a, b)| a.histograms == b.histograms && a.exemplars == b.exemplars && a.starts == b.starts)
    }
}

impl From<&WriteBatch> for PackedBatch {
    fn from(batch: &WriteBatch) -> Self {
        let mut packed = Self::with_capacity(batch.series.len(), batch.sample_count());
        for s in &batch.series {
            packed.push_mixed(&s.labels, &s.samples, &s.histograms);
        }
        packed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hist(t: i64, c: f64) -> HistogramSample {
        let h = Histogram { count: c, sum: c, zero_count: c, ..Default::default() };
        HistogramSample { timestamp_ms: t, histogram: Arc::new(h) }
    }

    proptest! {
        /// A packed batch of series with floats, histograms or both reads back as the batch it
        /// was packed from; a series abandoned halfway leaves nothing behind.
        #[test]
        fn mixed_batches_pack_and_unpack(
            series in proptest::collection::vec((0usize..4, 0usize..4, any::<bool>()), 0..12),
        ) {
            let mut want = WriteBatch::default();
            let mut packed = PackedBatch::default();
            for (i, &(floats, hists, abandon)) in series.iter().enumerate() {
                let labels = Labels::from_pairs([("__name__", "m"), ("i", &i.to_string())]).unwrap();
                let samples: Vec<Sample> = (0..floats).map(|t| Sample::new(t as i64, i as f64)).collect();
                let histograms: Vec<HistogramSample> = (0..hists).map(|t| hist(t as i64, i as f64)).collect();
                if abandon {
                    // Built, then dropped: nothing of it may stay.
                    packed.push_label("__name__", "gone");
                    packed.push_sample(Sample::new(1, 1.0));
                    packed.push_histogram(hist(1, 1.0));
                    packed.abandon_series();
                }
                packed.push_mixed(&labels, &samples, &histograms);
                if floats + hists > 0 {
                    want.series.push(SeriesSamples { labels, samples, histograms });
                }
            }
            prop_assert_eq!(packed.len(), want.series.len());
            prop_assert_eq!(packed.sample_count(), want.sample_count());
            prop_assert_eq!(packed.histogram_count(), want.histogram_count());
            prop_assert_eq!(&packed.unpack().unwrap(), &want);
            prop_assert_eq!(&PackedBatch::from(&want), &packed);
        }

        /// Inserting a label into every series of a packed batch gives the batch of the label
        /// sets with the label added (sorted by name, as `Labels` sorts), or refuses, changing
        /// nothing, when a series already has it.
        #[test]
        fn an_inserted_label_lands_in_name_order(
            sets in proptest::collection::vec(
                proptest::collection::btree_map("[A-Za-z_]{1,4}", "[a-z0-9]{1,3}", 0..4), 0..8),
            name in "[A-Za-z_]{1,4}",
            value in "[a-z0-9]{1,3}",
        ) {
            let mut packed = PackedBatch::default();
            let mut want = WriteBatch::default();
            let mut clash = None;
            for (i, set) in sets.iter().enumerate() {
                let labels = Labels::from_pairs(set.iter().map(|(n, v)| (n.as_str(), v.as_str()))).unwrap();
                let samples = vec![Sample::new(i as i64, 1.0)];
                packed.push(&labels, &samples);
                if set.contains_key(&name) && clash.is_none() {
                    clash = Some(i);
                }
                let mut with = labels.as_slice().to_vec();
                with.push(crate::labels::Label::new(name.clone(), value.clone()));
                want.series.push(SeriesSamples { labels: Labels::from_trusted(with), samples, histograms: Vec::new() });
            }
            // A series being built stays as it is, and can be finished after.
            packed.push_label("__name__", "building");
            let before = packed.clone();
            match packed.insert_label(&name, &value) {
                Ok(()) => {
                    prop_assert_eq!(clash, None);
                    packed.push_sample(Sample::new(0, 2.0));
                    packed.finish_series();
                    want.series.push(SeriesSamples {
                        labels: Labels::from_pairs([("__name__", "building")]).unwrap(),
                        samples: vec![Sample::new(0, 2.0)],
                        histograms: Vec::new(),
                    });
                    prop_assert_eq!(&packed.unpack().unwrap(), &want);
                }
                Err(i) => {
                    prop_assert_eq!(Some(i), clash);
                    prop_assert_eq!(&packed, &before);
                }
            }
        }
    }
}
