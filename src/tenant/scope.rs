//! What one request acts as ([`Scope`]): the matcher every read of it carries, the label every
//! series it writes gets, and how the label is shown (or not) in what it reads.

use std::borrow::Cow;

use super::id::{TenantId, DEFAULT_TENANT, TENANT_LABEL};
use crate::labels::{Label, Labels};
use crate::matcher::{MatchOp, Matcher};
use crate::sample::{PackedBatch, WriteBatch};

/// The tenants one request reads or writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Tenants are off (no `--tenants`): one namespace, read and written as if tenants did not
    /// exist. Series of tenants written while tenants were on are read with their label.
    Unscoped,
    /// One tenant: its writes carry its label (none for the default tenant), its reads see only
    /// its series, shown without the label.
    One(TenantId),
    /// Several tenants at once (an admin's `a|b`): reads see their series with the label,
    /// `__tenant__="default"` on the default tenant's; writes are refused.
    Many(Vec<TenantId>),
}

/// A write that carries the reserved tenant label.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("series {series} carries the label {TENANT_LABEL}, which saltdb reserves for tenants: send the tenant in the X-Scope-OrgID header, the /insert/<tenant>/ URL or a tenant's token instead")]
pub struct ReservedLabel {
    /// The series' position in the request (0-based).
    pub series: usize,
}

/// A scope that cannot write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a write goes to one tenant; {0:?} names several")]
pub struct SeveralTenants(pub String);

/// Why a write was refused before storage saw it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StampError {
    /// The reserved label.
    #[error(transparent)]
    Reserved(#[from] ReservedLabel),
    /// Several tenants.
    #[error(transparent)]
    Several(#[from] SeveralTenants),
}

impl Scope {
    /// The tenant a write goes to; `None` when tenants are off.
    ///
    /// # Errors
    /// [`SeveralTenants`] for a scope of several.
    pub fn writer(&self) -> Result<Option<&TenantId>, SeveralTenants> {
        match self {
            Self::Unscoped => Ok(None),
            Self::One(t) => Ok(Some(t)),
            Self::Many(ids) => Err(SeveralTenants(ids.iter().map(TenantId::as_str).collect::<Vec<_>>().join("|"))),
        }
    }

    /// The name shown for the scope in messages, metrics and logs (`default` when off).
    pub fn name(&self) -> Cow<'_, str> {
        match self {
            Self::Unscoped => Cow::Borrowed(DEFAULT_TENANT),
            Self::One(t) => Cow::Borrowed(t.as_str()),
            Self::Many(ids) => Cow::Owned(ids.iter().map(TenantId::as_str).collect::<Vec<_>>().join("|")),
        }
    }

    /// The matcher every selection of this scope carries; `None` when tenants are off.
    pub fn matcher(&self) -> Option<Matcher> {
        match self {
            Self::Unscoped => None,
            Self::One(t) => Some(Matcher::equal(TENANT_LABEL, t.label_value())),
            Self::Many(ids) => {
                let alternatives: Vec<String> = ids.iter().map(|t| regex::escape(t.label_value())).collect();
                // Tenant ids hold no regex syntax beyond what `escape` quotes: this compiles.
                Matcher::new(MatchOp::RegexMatch, TENANT_LABEL, alternatives.join("|")).ok()
            }
        }
    }

    /// `matchers` as this scope selects them: a matcher the query gives on the tenant label is
    /// judged against the label as the scope shows it (absent for one tenant; the tenant's
    /// name, `default` included, for several), and the scope's own matcher is added. So a
    /// query can narrow its tenants, never widen them.
    pub fn select<'a>(&self, matchers: &'a [Matcher]) -> Cow<'a, [Matcher]> {
        let own = |m: &Matcher| m.name == TENANT_LABEL;
        let scope_matcher = match self {
            Self::Unscoped => return Cow::Borrowed(matchers),
            Self::One(_) if matchers.iter().filter(|m| own(m)).all(Matcher::matches_empty) => self.matcher(),
            Self::One(_) => None,
            Self::Many(ids) => {
                let kept: Vec<TenantId> = ids
                    .iter()
                    .filter(|t| matchers.iter().filter(|m| own(m)).all(|m| m.matches(t.as_str())))
                    .cloned()
                    .collect();
                if kept.is_empty() {
                    None
                } else {
                    Self::Many(kept).matcher()
                }
            }
        };
        let mut all: Vec<Matcher> = matchers.iter().filter(|m| !own(m)).cloned().collect();
        // No tenant of the scope passes the query's own tenant matchers: a value no series can
        // carry (labels never hold 0x00) selects nothing.
        all.push(scope_matcher.unwrap_or_else(|| Matcher::equal(TENANT_LABEL, "\0")));
        Cow::Owned(all)
    }

    /// Whether answers show the tenant label (a read of several tenants).
    pub fn shows_label(&self) -> bool {
        matches!(self, Self::Many(_))
    }

    /// A series' labels as this scope shows them: without the tenant label for one tenant,
    /// with it (the default tenant's as `default`) for several, as stored when off.
    pub fn show(&self, labels: &mut Labels) {
        match self {
            Self::Unscoped => {}
            Self::One(_) => {
                if labels.get(TENANT_LABEL).is_some() {
                    let kept: Vec<Label> = labels.iter().filter(|l| l.name != TENANT_LABEL).cloned().collect();
                    *labels = Labels::from_trusted(kept);
                }
            }
            Self::Many(_) => {
                if labels.get(TENANT_LABEL).is_none() {
                    let mut all = labels.as_slice().to_vec();
                    all.push(Label::new(TENANT_LABEL, DEFAULT_TENANT));
                    *labels = Labels::from_trusted(all);
                }
            }
        }
    }

    /// Gives a write batch its tenant: refuses a series carrying the tenant label (whatever the
    /// scope), then labels every series with the tenant (the default tenant's stay unlabelled).
    ///
    /// # Errors
    /// [`StampError`].
    pub fn stamp_series(&self, batch: &mut WriteBatch) -> Result<(), StampError> {
        if let Some(series) = batch.series.iter().position(|s| s.labels.get(TENANT_LABEL).is_some()) {
            return Err(ReservedLabel { series }.into());
        }
        match self.writer()? {
            Some(t) if !t.is_default() => {
                for s in &mut batch.series {
                    let mut all = s.labels.as_slice().to_vec();
                    all.push(Label::new(TENANT_LABEL, t.as_str()));
                    s.labels = Labels::from_trusted(all);
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// [`Scope::stamp_series`] for a packed batch.
    ///
    /// # Errors
    /// [`StampError`].
    pub fn stamp_packed(&self, batch: &mut PackedBatch) -> Result<(), StampError> {
        match self.writer()? {
            Some(t) if !t.is_default() => batch.insert_label(TENANT_LABEL, t.as_str()),
            _ => batch.find_label(TENANT_LABEL).map_or(Ok(()), Err),
        }
        .map_err(|series| ReservedLabel { series }.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::{Sample, SeriesSamples};

    fn id(s: &str) -> TenantId {
        TenantId::parse(s).unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        Labels::from_pairs(pairs.iter().copied()).unwrap()
    }

    #[test]
    fn matchers_select_the_scope() {
        assert_eq!(Scope::Unscoped.matcher(), None);
        let a = Scope::One(id("a")).matcher().unwrap();
        assert!(a.matches("a") && !a.matches("") && !a.matches("b"));
        let default = Scope::One(TenantId::default_tenant()).matcher().unwrap();
        assert!(default.matches("") && !default.matches("a") && !default.matches("default"));
        let many = Scope::Many(vec![id("a.b"), TenantId::default_tenant()]).matcher().unwrap();
        assert!(many.matches("a.b") && many.matches("") && !many.matches("axb") && !many.matches("c"));
        assert_eq!(Scope::One(id("a")).select(&[]).len(), 1);
        // A query's own tenant matcher narrows, never widens.
        let any = Matcher::new(MatchOp::RegexMatch, TENANT_LABEL, ".+").unwrap();
        let none = Scope::One(id("a")).select(std::slice::from_ref(&any)).into_owned();
        assert!(none.iter().all(|m| m.name != TENANT_LABEL || !m.matches("a")), "{none:?}");
        let absent = Matcher::equal(TENANT_LABEL, "");
        let same = Scope::One(id("a")).select(std::slice::from_ref(&absent)).into_owned();
        assert_eq!(same, vec![Matcher::equal(TENANT_LABEL, "a")]);
        let default_only = Matcher::equal(TENANT_LABEL, "default");
        let many = Scope::Many(vec![id("a"), TenantId::default_tenant()]);
        let narrowed = many.select(std::slice::from_ref(&default_only)).into_owned();
        assert_eq!(narrowed.len(), 1);
        assert!(narrowed[0].matches("") && !narrowed[0].matches("a"));
    }

    #[test]
    fn labels_are_shown_per_scope() {
        let mut stored = labels(&[("__name__", "m"), (TENANT_LABEL, "a")]);
        Scope::One(id("a")).show(&mut stored);
        assert_eq!(stored, labels(&[("__name__", "m")]));
        Scope::Many(vec![TenantId::default_tenant()]).show(&mut stored);
        assert_eq!(stored, labels(&[("__name__", "m"), (TENANT_LABEL, "default")]));
    }

    #[test]
    fn writes_are_stamped_and_the_label_is_reserved() {
        let series = |l: Labels| SeriesSamples { labels: l, samples: vec![Sample::new(1, 1.0)], histograms: vec![] };
        let mut batch = WriteBatch { series: vec![series(labels(&[("__name__", "m"), ("z", "1")]))] };
        Scope::One(id("t")).stamp_series(&mut batch).unwrap();
        assert_eq!(batch.series[0].labels, labels(&[("__name__", "m"), (TENANT_LABEL, "t"), ("z", "1")]));
        let mut packed = PackedBatch::from(&WriteBatch { series: vec![series(labels(&[("__name__", "m")]))] });
        Scope::One(id("t")).stamp_packed(&mut packed).unwrap();
        assert_eq!(packed.unpack().unwrap().series[0].labels, labels(&[("__name__", "m"), (TENANT_LABEL, "t")]));
        for scope in [Scope::Unscoped, Scope::One(TenantId::default_tenant()), Scope::One(id("t"))] {
            let mut b = batch.clone();
            assert_eq!(scope.stamp_series(&mut b), Err(ReservedLabel { series: 0 }.into()));
            let mut p = packed.clone();
            assert_eq!(scope.stamp_packed(&mut p), Err(ReservedLabel { series: 0 }.into()));
        }
        let many = Scope::Many(vec![id("a"), id("b")]);
        let mut b = WriteBatch::default();
        assert!(matches!(many.stamp_series(&mut b), Err(StampError::Several(_))));
    }
}
