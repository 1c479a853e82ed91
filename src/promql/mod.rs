//! PromQL evaluation. Pure: no I/O; storage is reached only through [`source::Source`].

pub mod source;
