//! The HTTP surface (async). Handlers decode and validate, then reach storage only through
//! [`blocking`]; errors become responses only in [`error`].
//!
//! Layers, each importing only those below it: [`router`](mod@router) on top, then the
//! handlers, then what they share ([`state`] with [`limits`] and [`remote_state`], [`error`],
//! [`params`], [`body`], [`blocking`], ...). Nothing below the router imports it;
//! `tests/it/module_graph.rs` checks that no import loop forms.

pub mod access;
pub mod admin;
pub mod admission;
pub mod api;
pub mod batch;
pub mod blocking;
pub mod body;
pub mod body_deadline;
pub mod client_addr;
pub mod connections;
pub mod downsampled;
pub mod error;
pub mod export;
pub mod federate;
pub mod health;
pub mod import;
pub mod influx;
pub mod ingest;
pub mod limits;
pub mod metrics;
pub mod opentsdb;
pub mod otlp;
pub mod params;
pub mod piped;
pub mod remote_read;
pub mod remote_state;
pub mod remote_write;
pub mod router;
pub mod state;
pub mod tenant;
pub mod tenant_figures;
pub mod tenant_limits;
pub mod tls;
pub mod ui;

pub use limits::Limits;
pub use router::router;
pub use state::{AppState, QueryConfig};
