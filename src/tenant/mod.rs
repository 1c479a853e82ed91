//! Tenants: one saltdb serving many teams, each seeing only its own series.
//!
//! A series' tenant is part of its identity: the label [`TENANT_LABEL`] (absent for the
//! [`DEFAULT_TENANT`], so data written before tenants, or without them, is the default
//! tenant's). Nothing else writes that label: a write carrying it is refused
//! ([`Scope::stamp_series`]), and every write is stamped with its request's tenant on its way
//! to storage. Every read reaches storage through a [`ScopedQuerier`], which adds the tenant's
//! matcher to every selection and takes the label off what it returns, so a query can neither
//! name another tenant nor see its label.
//!
//! Pure: which tenant a request acts as is decided at the HTTP edge (`http/tenant.rs`).

mod active;
mod id;
mod limits;
mod querier;
mod scope;

pub use active::{metric_hash, series_hash, ActiveSeries, Over, GENERATION_SECONDS};
pub use id::{parse_list, TenantId, TenantIdError, DEFAULT_TENANT, MAX_LEN, SEPARATOR, TENANT_LABEL};
pub use limits::{Buckets, LimitsError, LimitsFile, RateRefusal, TenantLimits};
pub use querier::{tenant_of, ScopedQuerier};
pub use scope::{ReservedLabel, Scope, SeveralTenants, StampError};
