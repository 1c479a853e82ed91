//! PromQL evaluation. Pure: no I/O; storage is reached only through the storage-owned
//! [`Querier`](crate::storage::Querier) seam.
//!
//! Entry points: [`Engine::instant`] and [`Engine::range`]. Values are [`Value`]s, failures
//! [`EvalError`]s (with a Prometheus `errorType`), and warnings travel beside results as
//! [`Annotations`].

pub mod annotations;
mod bounds;
mod budget;
mod byte_escapes;
mod duration_expr;
pub mod engine;
pub mod error;
mod eval;
mod extended;
mod footprint;
mod functions;
mod hints;
mod identity;
pub mod notation;
mod points;
mod positions;
pub mod result_cache;
pub mod stats;
mod step;
mod trim;
pub mod value;

pub use annotations::{Annotation, Annotations, Position, Severity};
pub use engine::{parse, Engine, EngineOptions, QueryResult, DEFAULT_MAX_SCANNED_SAMPLES};
pub use error::EvalError;
pub use eval::tiers::SourceResolution;
pub use stats::{QueryStats, SampleStats, Timings};
pub use value::{InstantSample, RangeSeries, Value};

#[cfg(test)]
mod native_tests;
#[cfg(test)]
mod tests;
