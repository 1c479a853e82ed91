//! Tenant ids: what a request names its tenant with, validated as Grafana Mimir validates
//! `X-Scope-OrgID`, so that a sender configured for Mimir works unchanged.

use std::sync::Arc;

/// The label that carries a series' tenant in its identity. Written by saltdb only: a write
/// that carries it is refused, and reads never show it except to an admin reading several
/// tenants at once.
pub const TENANT_LABEL: &str = "__tenant__";

/// The tenant of a request that names none, and of the data written before tenants existed:
/// its series carry no [`TENANT_LABEL`].
pub const DEFAULT_TENANT: &str = "default";

/// Longest tenant id (Mimir's limit).
pub const MAX_LEN: usize = 150;

/// The separator of several tenants in one header (`a|b`), for an admin's federated reads.
pub const SEPARATOR: char = '|';

/// A valid tenant id: 1 to [`MAX_LEN`] bytes of ASCII letters, digits and `!-_.*'()`, not `.`
/// or `..`. Cheap to clone.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TenantId(Arc<str>);

/// Why a tenant id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TenantIdError {
    /// Empty.
    #[error("the tenant id is empty")]
    Empty,
    /// Longer than [`MAX_LEN`].
    #[error("the tenant id is {0} bytes long, more than the limit of {MAX_LEN}")]
    TooLong(usize),
    /// A character outside the allowed set.
    #[error("the tenant id {id:?} holds {found:?}: only ASCII letters, digits and !-_.*'() are allowed")]
    Character {
        /// The id (truncated to 64 bytes).
        id: String,
        /// The first character refused.
        found: char,
    },
    /// `.` or `..`.
    #[error("the tenant id may not be {0:?}")]
    Dots(String),
}

fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '!' | '-' | '_' | '.' | '*' | '\'' | '(' | ')')
}

impl TenantId {
    /// Validates `s`.
    ///
    /// # Errors
    /// [`TenantIdError`] naming what is wrong.
    pub fn parse(s: &str) -> Result<Self, TenantIdError> {
        if s.is_empty() {
            return Err(TenantIdError::Empty);
        }
        if s.len() > MAX_LEN {
            return Err(TenantIdError::TooLong(s.len()));
        }
        if let Some(found) = s.chars().find(|&c| !allowed(c)) {
            let id: String = s.chars().take(64).collect();
            return Err(TenantIdError::Character { id, found });
        }
        if s == "." || s == ".." {
            return Err(TenantIdError::Dots(s.to_owned()));
        }
        Ok(Self(Arc::from(s)))
    }

    /// The default tenant ([`DEFAULT_TENANT`]).
    pub fn default_tenant() -> Self {
        Self(Arc::from(DEFAULT_TENANT))
    }

    /// Whether this is the default tenant, whose series carry no [`TENANT_LABEL`].
    pub fn is_default(&self) -> bool {
        &*self.0 == DEFAULT_TENANT
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The value of [`TENANT_LABEL`] on this tenant's series: `""` (absent) for the default
    /// tenant.
    pub fn label_value(&self) -> &str {
        if self.is_default() {
            ""
        } else {
            &self.0
        }
    }

    /// The tenant whose series carry `value` in [`TENANT_LABEL`] (`""`: the default).
    pub fn of_label_value(value: &str) -> Self {
        if value.is_empty() {
            Self::default_tenant()
        } else {
            Self(Arc::from(value))
        }
    }
}

impl std::fmt::Display for TenantId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The tenants of a header value: one id, or several separated by [`SEPARATOR`] (sorted,
/// without duplicates).
///
/// # Errors
/// The first invalid id's [`TenantIdError`].
pub fn parse_list(s: &str) -> Result<Vec<TenantId>, TenantIdError> {
    let mut ids = s.split(SEPARATOR).map(TenantId::parse).collect::<Result<Vec<_>, _>>()?;
    ids.sort();
    ids.dedup();
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_validated_as_mimir_does() {
        for ok in ["a", "team-a", "Team_1.prod", "(x)!*'", &"a".repeat(MAX_LEN)] {
            assert_eq!(TenantId::parse(ok).unwrap().as_str(), ok);
        }
        assert_eq!(TenantId::parse(""), Err(TenantIdError::Empty));
        assert_eq!(TenantId::parse(&"a".repeat(MAX_LEN + 1)), Err(TenantIdError::TooLong(MAX_LEN + 1)));
        for (bad, c) in [("a b", ' '), ("a/b", '/'), ("a|b", '|'), ("é", 'é'), ("a\"", '"')] {
            assert!(matches!(TenantId::parse(bad), Err(TenantIdError::Character { found, .. }) if found == c), "{bad}");
        }
        assert!(matches!(TenantId::parse(".."), Err(TenantIdError::Dots(_))));
        assert!(TenantId::parse("default").unwrap().is_default());
        assert_eq!(TenantId::default_tenant().label_value(), "");
        assert_eq!(TenantId::parse("b").unwrap().label_value(), "b");
        assert!(TenantId::of_label_value("").is_default());
    }

    #[test]
    fn lists_are_sorted_and_deduplicated() {
        let ids = parse_list("b|a|b").unwrap();
        assert_eq!(ids.iter().map(TenantId::as_str).collect::<Vec<_>>(), ["a", "b"]);
        assert!(parse_list("a||b").is_err());
    }
}
