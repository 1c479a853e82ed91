//! The HTTP surface (async). Handlers decode and validate, then reach storage only through
//! [`blocking`]; errors become responses only in [`error`].

pub mod api;
pub mod blocking;
pub mod body;
pub mod error;
pub mod export;
pub mod health;
pub mod import;
pub mod params;
pub mod router;

pub use router::{router, AppState, Limits, QueryConfig};
