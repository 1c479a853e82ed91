//! Native histograms (Prometheus' sparse, exponential-bucket histograms, and histograms with
//! custom buckets): the value type, bucket bounds, PromQL arithmetic and the chunk codec. Pure:
//! no I/O, no dependency on storage, remote-write or PromQL, which build on it.
//!
//! - [`Histogram`]: one sample in float form, built from remote-write's integer or float form
//!   ([`Histogram::from_integer_deltas`], [`Histogram::from_float_counts`]) and checked with
//!   [`Histogram::validate`].
//! - [`bucket_bound`] and the bucket iterators: bounds as Prometheus builds them, to within a
//!   few binary places (its fraction table is computed here, not copied).
//! - [`Histogram::add`], [`Histogram::sub`], [`Histogram::mul`], [`Histogram::div`],
//!   [`Histogram::compact`], [`Histogram::reduce_resolution`], [`detect_reset`],
//!   [`Histogram::equals`]: Prometheus' `FloatHistogram` semantics.
//! - [`Histogram::trim`]: PromQL's trim operators `</` and `>/` ([`Trim`]), interpolating in
//!   the bucket that holds the threshold as `histogram_fraction` does.
//! - [`quantile()`], [`fraction()`], [`std_var`], [`std_dev`]: PromQL's `histogram_quantile`,
//!   `histogram_fraction`, `histogram_stdvar` and `histogram_stddev` with Prometheus 3.x's
//!   interpolation; quantile and fraction return an [`Estimate`] whose [`Note`] carries the
//!   info annotation to raise.
//! - [`read_hint`], [`continues`]: the counter reset hint a query sees, as Prometheus' chunks
//!   re-derive it on read from the histogram before.
//! - [`chunk`]: the compressed chunk of a run of samples (`docs/format.md`, *Histogram chunks*).

mod arith;
mod buckets;
pub mod chunk;
mod compare;
mod hint;
mod layout;
mod quantile;
mod spread;
mod trim;
mod types;
mod validate;

pub use arith::Combined;
pub use buckets::{bucket_bound, exponential_bound, target_index, Bucket};
pub use compare::detect_reset;
pub use hint::{continues, read_hint};
pub use layout::ArithError;
pub use quantile::{fraction, quantile, Estimate, Note};
pub use spread::{std_dev, std_var};
pub use trim::Trim;
pub use types::{
    is_custom_schema, is_exponential_schema, CounterResetHint, Histogram, IntegerCounts, Layout, Span,
    CUSTOM_BUCKETS_SCHEMA, MAX_EXPONENTIAL_SCHEMA, MIN_EXPONENTIAL_SCHEMA,
};
pub use validate::{Side, ValidationError};

#[cfg(test)]
mod stats_tests;
#[cfg(test)]
mod tests;
