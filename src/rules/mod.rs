//! Recording and alerting rules, as Prometheus evaluates them.
//!
//! - [`file`]: rule files (Prometheus' `rulefmt`): the model, YAML parsing and validation.
//! - [`template`]: Go text/template expansion of alert labels and annotations, with
//!   Prometheus' template functions.

pub mod file;
pub mod template;
