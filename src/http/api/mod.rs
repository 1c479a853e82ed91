//! The Prometheus HTTP API endpoints.

pub mod metadata;
