//! Ingest decoders: one file per protocol, each a pure function from a request body (already
//! read and decompressed) to a [`PackedBatch`] or a typed [`Stop`]. The HTTP pipeline
//! (`http/ingest.rs`) owns everything else: admission, body reading, the memory budget, the
//! hand-off to storage, metrics and the mapping of errors to statuses. Adding a protocol is one
//! decoder file here plus one route.
//!
//! Every decoder validates the whole body before returning a batch (nothing of a bad request is
//! written), and asks its `reserve` callback for the memory each decoded series holds before it
//! keeps it.
//!
//! | protocol | decoder |
//! |---|---|
//! | InfluxDB line protocol | [`influx`] |
//! | OpenTSDB HTTP `/api/put` | [`opentsdb`] |
//! | Prometheus text exposition / OpenMetrics | [`prom_text`] |
//! | VictoriaMetrics JSON lines | `http/import.rs` (values: [`json_sample`]) |
//! | Prometheus remote-write 1.0 / 2.0 | `remote/decode.rs` |

pub mod influx;
pub mod json_sample;
pub mod opentsdb;
pub mod otlp;
pub mod prom_text;

use std::borrow::Cow;

use crate::labels::{is_storable_label_name, is_valid_label_name, LabelError, METRIC_NAME};
use crate::sample::{HistogramSample, PackedBatch, Sample};

/// Limits applied to every ingested series, whatever the protocol.
#[derive(Clone, Copy, Debug)]
pub struct SeriesLimits {
    /// Most labels one series may carry (`__name__` included).
    pub max_labels: usize,
    /// Longest label name or value in bytes.
    pub max_label_bytes: usize,
    /// Most series (import lines, remote-write time series, line-protocol fields) one request
    /// may carry.
    pub max_series: usize,
    /// `--ingest-legacy-label-names`: the doors that name labels on their own (InfluxDB line
    /// protocol tag keys, OpenTSDB tag keys, OTLP attributes under `keep-utf8`) rewrite names
    /// that are not legacy Prometheus names ([`sanitize_label_name`]) instead of keeping them as
    /// sent.
    pub legacy_label_names: bool,
}

impl Default for SeriesLimits {
    fn default() -> Self {
        Self {
            max_labels: 128,
            max_label_bytes: 16 * 1024,
            max_series: DEFAULT_MAX_SERIES_PER_REQUEST,
            legacy_label_names: false,
        }
    }
}

/// Default of `--max-series-per-request`. Prometheus sends at most `max_samples_per_send`
/// (2,000 by default) series per remote-write request, and a 64 MiB import of one-sample lines
/// holds about a million, so a million never refuses a normal batch or a reasonable import while
/// bounding the memory one request's decoded series may take (a few hundred bytes each).
pub const DEFAULT_MAX_SERIES_PER_REQUEST: usize = 1_000_000;

/// Why a body was refused: what is wrong, and where (a 1-based line or item number).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", where_.map(|(what, n)| format!("{what} {n}: ")).unwrap_or_default())]
pub struct Rejection {
    /// `("line", 3)` or `("point", 2)`; `None` for the body as a whole.
    pub where_: Option<(&'static str, usize)>,
    /// What is wrong.
    pub message: String,
}

impl Rejection {
    /// A problem with the `n`-th (1-based) line.
    pub fn line(n: usize, message: impl Into<String>) -> Self {
        Self { where_: Some(("line", n)), message: message.into() }
    }

    /// A problem with the body as a whole.
    pub fn body(message: impl Into<String>) -> Self {
        Self { where_: None, message: message.into() }
    }
}

/// Why a decoder stopped.
#[derive(Debug)]
pub enum Stop<E> {
    /// The body is invalid.
    Invalid(Rejection),
    /// The memory budget refused what the next series needs.
    Refused(E),
}

/// Label names and values of one series, the metric name aside.
pub type Pairs = Vec<(String, String)>;

/// Asks the memory budget for bytes before they are held.
pub type Reserve<'a, E> = &'a mut dyn FnMut(usize) -> Result<(), E>;

/// A tag key of a door that names labels on its own: as sent, or sanitized under
/// `--ingest-legacy-label-names` ([`SeriesLimits::legacy_label_names`]). A name the store
/// cannot keep (empty, or holding 0x00) is refused by [`BatchBuilder`] with a 400 naming it.
pub fn label_name(name: Cow<'_, str>, legacy: bool) -> Cow<'_, str> {
    match name {
        name if !legacy => name,
        Cow::Borrowed(k) => sanitize_label_name(k),
        Cow::Owned(k) => Cow::Owned(sanitize_label_name(&k).into_owned()),
    }
}

/// `name` made a legacy Prometheus label name: every character outside `[a-zA-Z0-9_]` becomes `_`, and a
/// leading digit gets a `_` before it (as Prometheus' OTLP and Telegraf's outputs do).
pub fn sanitize_label_name(name: &str) -> Cow<'_, str> {
    if is_valid_label_name(name) {
        return Cow::Borrowed(name);
    }
    let mut out = String::with_capacity(name.len() + 1);
    if name.starts_with(|c: char| c.is_ascii_digit()) || name.is_empty() {
        out.push('_');
    }
    out.extend(name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }));
    Cow::Owned(out)
}

/// Collects validated series under the request's limits straight into a [`PackedBatch`]
/// (canonical label bytes, as remote-write's decoder builds them: no label set is allocated per
/// series), reserving each one's memory first.
///
/// Float samples of a label set pushed right after the same label set join that series instead
/// of starting another one (as VictoriaMetrics reuses the previous row's series when the metric
/// name is the same): text protocols carry one sample a line, and a sender flushing several
/// samples of a series sends them back to back. Storage takes a series' samples in any order,
/// a later one winning on an equal timestamp, exactly as for consecutive series of one label
/// set, so what is stored is the same; the writer resolves the series once instead of per
/// sample. `max_series` still counts every push.
pub struct BatchBuilder<'a, E> {
    batch: PackedBatch,
    limits: SeriesLimits,
    reserve: Reserve<'a, E>,
    /// Series pushed so far, merged ones included (what `max_series` limits).
    pushed: usize,
    /// Whether the last series pushed is still open in `batch` (not finished), and whether it
    /// holds a histogram (then it takes no more samples).
    open: Option<Open>,
    /// The canonical label bytes of the series being pushed, before they join `batch`.
    scratch: Vec<u8>,
}

/// What the open series of a [`BatchBuilder`] holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Open {
    /// Float samples only: a push of the same label set adds to it.
    Floats,
    /// A histogram: the next push starts a series of its own.
    Histogram,
}

impl<'a, E> BatchBuilder<'a, E> {
    /// An empty batch.
    pub fn new(limits: SeriesLimits, reserve: Reserve<'a, E>) -> Self {
        Self { batch: PackedBatch::default(), limits, reserve, pushed: 0, open: None, scratch: Vec::new() }
    }

    /// Whether the request's door should sanitize the label names it makes up
    /// ([`SeriesLimits::legacy_label_names`]).
    pub fn legacy_label_names(&self) -> bool {
        self.limits.legacy_label_names
    }

    /// Adds a series of `name` with the labels `pairs` (names as sent or sanitized) and
    /// `samples` (timestamps already checked), validated as `Labels::from_pairs` and
    /// `Labels::check_limits` validate: the same rules and messages.
    ///
    /// # Errors
    /// A message for an invalid label set or a limit exceeded (the caller says where), or the
    /// budget's refusal.
    pub fn push(&mut self, name: String, mut pairs: Pairs, samples: &[Sample]) -> Result<(), Stop<E>> {
        self.push_pairs(&name, &mut pairs, samples)
    }

    /// [`push`](Self::push) without owning anything: `pairs` may borrow from the request body
    /// (`&str`, or `Cow` where an escape had to be undone). `pairs` is sorted by name in place.
    ///
    /// # Errors
    /// As [`push`](Self::push).
    pub fn push_pairs<K: AsRef<str>, V: AsRef<str>>(
        &mut self,
        name: &str,
        pairs: &mut [(K, V)],
        samples: &[Sample],
    ) -> Result<(), Stop<E>> {
        self.push_points(name, pairs, samples, None)
    }

    /// Adds `samples` to the series of the last push, as pushing its label set again would:
    /// for a decoder that saw the same raw label set again and need not check it twice.
    /// `Ok(false)` (nothing done) when the last push left no series open for floats: push the
    /// label set instead.
    ///
    /// # Errors
    /// The series limit, or the budget's refusal.
    pub fn push_again(&mut self, samples: &[Sample]) -> Result<bool, Stop<E>> {
        if self.open != Some(Open::Floats) {
            return Ok(false);
        }
        if self.pushed >= self.limits.max_series {
            return Err(self.too_many_series());
        }
        if samples.is_empty() {
            return Ok(true);
        }
        (self.reserve)(std::mem::size_of_val(samples) + 16).map_err(Stop::Refused)?;
        for s in samples {
            self.batch.push_sample(*s);
        }
        self.pushed += 1;
        Ok(true)
    }

    fn too_many_series(&self) -> Stop<E> {
        Stop::Invalid(Rejection::body(format!(
            "the request has more than {} series, the limit set by --max-series-per-request",
            self.limits.max_series
        )))
    }

    /// [`push`](Self::push) for one native histogram sample (validated by the caller).
    ///
    /// # Errors
    /// As [`push`](Self::push).
    pub fn push_histogram(&mut self, name: String, mut pairs: Pairs, sample: HistogramSample) -> Result<(), Stop<E>> {
        self.push_points(&name, &mut pairs, &[], Some(sample))
    }

    fn push_points<K: AsRef<str>, V: AsRef<str>>(
        &mut self,
        name: &str,
        pairs: &mut [(K, V)],
        samples: &[Sample],
        histogram: Option<HistogramSample>,
    ) -> Result<(), Stop<E>> {
        let invalid = |e: LabelError| Stop::Invalid(Rejection::body(e.to_string()));
        if self.pushed >= self.limits.max_series {
            return Err(self.too_many_series());
        }
        if samples.is_empty() && histogram.is_none() {
            return Ok(());
        }
        let label_bytes =
            name.len() + pairs.iter().map(|(k, v)| k.as_ref().len() + v.as_ref().len() + 2).sum::<usize>() + 10;
        // The histogram (built by the caller, at most the size of the buckets prost decoded),
        // its slot in the batch (which may double) and an end per series.
        let histogram_bytes = histogram.as_ref().map_or(0, |h| {
            h.histogram.heap_bytes()
                + std::mem::size_of::<crate::histogram::Histogram>()
                + 2 * std::mem::size_of::<HistogramSample>()
                + 16
        });
        (self.reserve)(label_bytes + std::mem::size_of_val(samples) + histogram_bytes + 16).map_err(Stop::Refused)?;
        for (k, v) in pairs.iter() {
            let (k, v) = (k.as_ref(), v.as_ref());
            if !is_storable_label_name(k) {
                return Err(invalid(LabelError::InvalidName(k.to_owned())));
            }
            if v.as_bytes().contains(&0) {
                return Err(invalid(LabelError::NulInValue(k.to_owned())));
            }
        }
        if name.as_bytes().contains(&0) {
            return Err(invalid(LabelError::NulInValue(METRIC_NAME.to_owned())));
        }
        if !pairs.windows(2).all(|w| matches!(w, [a, b] if a.0.as_ref() < b.0.as_ref())) {
            pairs.sort_unstable_by(|a, b| a.0.as_ref().cmp(b.0.as_ref()));
        }
        // The first duplicate name in sorted order, `__name__` (always present) included.
        let duplicate = pairs.windows(2).find_map(|w| match w {
            [a, b] if a.0.as_ref() == b.0.as_ref() => Some(a.0.as_ref()),
            _ => None,
        });
        let name_duplicate = pairs.binary_search_by(|p| p.0.as_ref().cmp(METRIC_NAME)).is_ok();
        let duplicate = match (duplicate, name_duplicate) {
            (Some(d), true) => Some(d.min(METRIC_NAME)),
            (d, n) => d.or(n.then_some(METRIC_NAME)),
        };
        if let Some(d) = duplicate {
            return Err(invalid(LabelError::DuplicateName(d.to_owned())));
        }
        if name.is_empty() {
            return Err(invalid(LabelError::MissingMetricName));
        }
        // The label set in canonical order: `pairs` with `__name__` at its place, empty values
        // left out.
        let at = pairs.partition_point(|p| p.0.as_ref() < METRIC_NAME);
        let (before, after) = pairs.split_at(at);
        let ordered = || {
            let named = std::iter::once((METRIC_NAME, name));
            before
                .iter()
                .map(|(k, v)| (k.as_ref(), v.as_ref()))
                .chain(named)
                .chain(after.iter().map(|(k, v)| (k.as_ref(), v.as_ref())))
                .filter(|(_, v)| !v.is_empty())
        };
        let count = ordered().count();
        if count > self.limits.max_labels {
            return Err(invalid(LabelError::TooManyLabels { count, limit: self.limits.max_labels }));
        }
        if let Some((k, len)) =
            ordered().map(|(k, v)| (k, k.len().max(v.len()))).find(|&(_, len)| len > self.limits.max_label_bytes)
        {
            let mut name = k.to_owned();
            name.truncate(64);
            return Err(invalid(LabelError::TooLong { name, len, limit: self.limits.max_label_bytes }));
        }
        self.scratch.clear();
        for (k, v) in ordered() {
            for part in [k, v] {
                self.scratch.extend_from_slice(part.as_bytes());
                self.scratch.push(0);
            }
        }
        let joins = histogram.is_none()
            && self.open == Some(Open::Floats)
            && self.batch.open_labels() == self.scratch.as_slice();
        if !joins {
            if self.open.take().is_some() {
                self.batch.finish_series();
            }
            self.batch.push_canonical(&self.scratch);
        }
        for s in samples {
            self.batch.push_sample(*s);
        }
        self.open = Some(match histogram {
            Some(h) => {
                self.batch.push_histogram(h);
                Open::Histogram
            }
            None => Open::Floats,
        });
        self.pushed += 1;
        Ok(())
    }

    /// The batch.
    pub fn finish(mut self) -> PackedBatch {
        if self.open.is_some() {
            self.batch.finish_series();
        }
        self.batch
    }
}

/// Gives a body-level rejection the place it was found at (`("line", n)`), keeping a refusal.
pub fn at<E>(what: &'static str, n: usize) -> impl Fn(Stop<E>) -> Stop<E> {
    move |stop| match stop {
        Stop::Invalid(r) if r.where_.is_none() => {
            Stop::Invalid(Rejection { where_: Some((what, n)), message: r.message })
        }
        other => other,
    }
}

/// A float sample as a decoder's property tests compare it: label set, timestamp, value bits.
#[cfg(test)]
pub(crate) type ComparedSample = (String, i64, u64);

/// Every float sample of a batch in order.
#[cfg(test)]
pub(crate) fn samples_in_order(batch: &PackedBatch) -> Vec<ComparedSample> {
    let Ok(unpacked) = batch.unpack() else { return Vec::new() };
    unpacked
        .series
        .iter()
        .flat_map(|s| {
            let labels: Vec<String> = s.labels.iter().map(|l| format!("{}={:?}", l.name, l.value)).collect();
            let series = labels.join(",");
            s.samples.iter().map(move |p| (series.clone(), p.timestamp_ms, p.value.to_bits()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_names_are_sanitized_like_prometheus() {
        assert_eq!(sanitize_label_name("host"), "host");
        assert_eq!(sanitize_label_name("my-tag"), "my_tag");
        assert_eq!(sanitize_label_name("host.name"), "host_name");
        assert_eq!(sanitize_label_name("1st"), "_1st");
        assert_eq!(sanitize_label_name("ünï"), "_n_");
        assert_eq!(sanitize_label_name(""), "_");
        for s in ["a b", "9", "x/y.z", "__ok"] {
            assert!(is_valid_label_name(&sanitize_label_name(s)), "{s}");
        }
    }

    use proptest::prelude::*;

    /// The reference: what `Labels::from_pairs` + `require_metric_name` + `check_limits` say.
    fn reference(name: &str, pairs: &Pairs, limits: SeriesLimits) -> Result<crate::labels::Labels, String> {
        let mut all = pairs.clone();
        all.push((METRIC_NAME.to_owned(), name.to_owned()));
        let labels = crate::labels::Labels::from_pairs(all).map_err(|e| e.to_string())?;
        labels.require_metric_name().map_err(|e| e.to_string())?;
        labels.check_limits(limits.max_labels, limits.max_label_bytes).map_err(|e| e.to_string())?;
        Ok(labels)
    }

    proptest! {
        /// The builder accepts and refuses exactly what the label-set validation does, with the
        /// same message, and what it accepts decodes to the same label set.
        #[test]
        fn the_builder_validates_as_labels_do(
            name in "[a-z_]{0,3}",
            pairs in proptest::collection::vec(
                (prop_oneof![4 => "[A-Ca-c1_.]{0,3}", 1 => Just("__name__".to_owned())], "[xy\\x00]{0,4}"),
                0..6,
            ),
            max_labels in 1usize..8,
            max_bytes in 1usize..6,
        ) {
            let limits = SeriesLimits { max_labels, max_label_bytes: max_bytes, max_series: 10, ..SeriesLimits::default() };
            let mut free = |_| Ok::<(), ()>(());
            let mut b = BatchBuilder::new(limits, &mut free);
            let got = b.push(name.clone(), pairs.clone(), &[Sample::new(1, 1.0)]);
            match (reference(&name, &pairs, limits), got) {
                (Ok(want), Ok(())) => {
                    let batch = b.finish().unpack().unwrap();
                    prop_assert_eq!(batch.series.len(), 1);
                    prop_assert_eq!(&batch.series[0].labels, &want);
                }
                (Err(want), Err(Stop::Invalid(r))) => prop_assert_eq!(r.message, want),
                (want, got) => prop_assert!(false, "reference {:?}, builder {:?}", want, got.err()),
            }
        }
    }

    #[test]
    fn rejections_say_where() {
        assert_eq!(Rejection::line(3, "bad").to_string(), "line 3: bad");
        assert_eq!(Rejection::body("bad").to_string(), "bad");
        let Stop::<()>::Invalid(r) = at("point", 2)(Stop::Invalid(Rejection::body("x"))) else { panic!() };
        assert_eq!(r.to_string(), "point 2: x");
    }
}
