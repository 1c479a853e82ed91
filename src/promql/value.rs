//! Query results (public) and the values flowing between nodes during one evaluation step
//! (crate-internal).

use std::sync::Arc;

use crate::histogram::Histogram;
use crate::labels::{Label, Labels, METRIC_NAME};
use crate::sample::{HistogramSample, Sample};

/// One element of an instant vector: a float, or a native histogram.
#[derive(Clone, Debug)]
pub struct InstantSample {
    /// The series labels.
    pub labels: Labels,
    /// Evaluation timestamp (milliseconds).
    pub timestamp_ms: i64,
    /// The value (0 and meaningless when `histogram` is set).
    pub value: f64,
    /// The histogram, when the element is one (then `value` is not used).
    pub histogram: Option<Arc<Histogram>>,
}

impl PartialEq for InstantSample {
    fn eq(&self, other: &Self) -> bool {
        self.labels == other.labels
            && self.timestamp_ms == other.timestamp_ms
            && self.value == other.value
            && same_histogram(self.histogram.as_deref(), other.histogram.as_deref())
    }
}

/// One series of a range vector (matrix). Invariant: both point lists ascend by timestamp
/// and no timestamp is in both.
#[derive(Clone, Debug, PartialEq)]
pub struct RangeSeries {
    /// The series labels.
    pub labels: Labels,
    /// The float points, ascending by timestamp.
    pub samples: Vec<Sample>,
    /// The histogram points, ascending by timestamp.
    pub histograms: Vec<HistogramSample>,
}

/// Data equality of two optional histograms ([`Histogram::equals`]).
fn same_histogram(a: Option<&Histogram>, b: Option<&Histogram>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => a.equals(b),
        _ => false,
    }
}

/// The result of a query, in the four PromQL value types.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A single number at the evaluation time.
    Scalar {
        /// Evaluation timestamp (milliseconds).
        timestamp_ms: i64,
        /// The value.
        value: f64,
    },
    /// An instant vector. Order matters only after `sort*`/`topk`-like functions.
    Vector(Vec<InstantSample>),
    /// A range vector (every range query result, or an instant query of a range selector),
    /// sorted by labels.
    Matrix(Vec<RangeSeries>),
    /// A string literal.
    String {
        /// Evaluation timestamp (milliseconds).
        timestamp_ms: i64,
        /// The string.
        value: String,
    },
}

impl Value {
    /// The Prometheus API `resultType`: `scalar`, `vector`, `matrix` or `string`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Scalar { .. } => "scalar",
            Self::Vector(_) => "vector",
            Self::Matrix(_) => "matrix",
            Self::String { .. } => "string",
        }
    }

    /// The number of points it holds (a scalar or string is one).
    pub fn points(&self) -> usize {
        match self {
            Self::Scalar { .. } | Self::String { .. } => 1,
            Self::Vector(v) => v.len(),
            Self::Matrix(m) => m.iter().map(|s| s.samples.len() + s.histograms.len()).sum(),
        }
    }
}

/// One element of an instant vector during evaluation. `drop_name` implements Prometheus'
/// delayed name removal: the metric name stays until the end of the query so that label
/// functions can still read (and keep) it. A histogram element has `hist` set and `value` 0
/// (a float element costs no allocation beyond its labels).
#[derive(Clone, Debug)]
pub(crate) struct Elem {
    pub labels: Labels,
    pub value: f64,
    pub drop_name: bool,
    pub hist: Option<Arc<Histogram>>,
}

impl PartialEq for Elem {
    fn eq(&self, other: &Self) -> bool {
        self.labels == other.labels
            && self.value.to_bits() == other.value.to_bits()
            && self.drop_name == other.drop_name
            && same_histogram(self.hist.as_deref(), other.hist.as_deref())
    }
}

impl Elem {
    /// A float element.
    pub fn new(labels: Labels, value: f64, drop_name: bool) -> Self {
        Self { labels, value, drop_name, hist: None }
    }

    /// A histogram element.
    pub fn histogram(labels: Labels, h: Arc<Histogram>, drop_name: bool) -> Self {
        Self { labels, value: 0.0, drop_name, hist: Some(h) }
    }

    /// An element of `point`.
    pub fn of_point(labels: Labels, point: Point, drop_name: bool) -> Self {
        match point {
            Point::Float(v) => Self::new(labels, v, drop_name),
            Point::Histogram(h) => Self::histogram(labels, h, drop_name),
        }
    }

    /// Whether the element is a float (not a histogram).
    pub fn is_float(&self) -> bool {
        self.hist.is_none()
    }
}

/// One value of a series at one time: a float or a histogram.
#[derive(Clone, Debug)]
pub(crate) enum Point {
    Float(f64),
    Histogram(Arc<Histogram>),
}

/// One series of a range vector during evaluation: the samples of one window, floats and
/// histograms apart (each ascending; no timestamp in both).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Window {
    pub labels: Labels,
    pub samples: Vec<Sample>,
    pub drop_name: bool,
    pub histograms: Vec<HistogramSample>,
}

impl Window {
    /// A window of floats only.
    pub fn floats(labels: Labels, samples: Vec<Sample>, drop_name: bool) -> Self {
        Self { labels, samples, drop_name, histograms: Vec::new() }
    }
}

/// The value of an expression at one evaluation step.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum StepValue {
    Scalar(f64),
    Vector(Vec<Elem>),
    Matrix(Vec<Window>),
    String(String),
}

impl StepValue {
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Scalar(_) => "scalar",
            Self::Vector(_) => "instant vector",
            Self::Matrix(_) => "range vector",
            Self::String(_) => "string",
        }
    }
}

/// Labels that describe the metric rather than the series, dropped together with the name
/// (Prometheus' `__type__` and `__unit__` metadata labels).
const METADATA_LABELS: [&str; 3] = [METRIC_NAME, "__type__", "__unit__"];

/// `labels` without the metric name (and its type/unit metadata labels).
pub(crate) fn without_name(labels: &Labels) -> Labels {
    let is_meta = |name: &str| METADATA_LABELS.contains(&name);
    if !labels.iter().any(|l| is_meta(&l.name)) {
        return labels.clone();
    }
    Labels::from_trusted(labels.iter().filter(|l| !is_meta(&l.name)).cloned().collect())
}

/// `labels` with `name` set to `value` (removed when `value` is empty).
pub(crate) fn with_label(labels: &Labels, name: &str, value: &str) -> Labels {
    let mut v: Vec<Label> = labels.iter().filter(|l| l.name != name).cloned().collect();
    if !value.is_empty() {
        v.push(Label::new(name, value));
    }
    Labels::from_trusted(v)
}

/// `labels` restricted to (`keep = true`) or stripped of (`keep = false`) `names`.
pub(crate) fn project(labels: &Labels, names: &[String], keep: bool) -> Labels {
    let v = labels.iter().filter(|l| names.contains(&l.name) == keep).cloned().collect();
    Labels::from_trusted(v)
}
