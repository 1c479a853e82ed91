//! A [`Querier`] confined to one [`Scope`]: every selection carries the scope's matcher, and
//! every label set read comes back as the scope shows it. Every read path reaches storage
//! through a querier, so a read confined here cannot see another tenant's series.

use super::id::{TenantId, TENANT_LABEL};
use super::scope::Scope;
use crate::labels::Labels;
use crate::matcher::Matcher;
use crate::sample::SeriesSamples;
use crate::storage::{PointsRead, Querier, Result, SeriesMap, SeriesPoints, SeriesStarts, SinkFactory};

/// `inner` confined to `scope`.
pub struct ScopedQuerier {
    inner: Box<dyn Querier>,
    scope: Scope,
}

impl ScopedQuerier {
    /// `inner` seen through `scope`; `inner` itself when tenants are off.
    pub fn confine(inner: Box<dyn Querier>, scope: &Scope) -> Box<dyn Querier> {
        match scope {
            Scope::Unscoped => inner,
            _ => Box::new(Self { inner, scope: scope.clone() }),
        }
    }

    /// What a selection runs on each series read: its labels as the scope shows them, then the
    /// caller's `map`.
    fn shown<'m>(&'m self, map: Option<SeriesMap<'m>>) -> impl Fn(&mut SeriesSamples) + Sync + 'm {
        move |s: &mut SeriesSamples| {
            self.scope.show(&mut s.labels);
            if let Some(map) = map {
                map(s);
            }
        }
    }

    /// Whether this reads the default tenant of a store where no series of another tenant has
    /// data in the range: then the tenant's matcher would select every series, and label names
    /// and values are read without it (from the postings, at a cost per value, instead of
    /// through every series).
    fn default_is_everyone(&self, start_ms: i64, end_ms: i64, held_only: bool) -> Option<bool> {
        if !matches!(&self.scope, Scope::One(t) if t.is_default()) {
            return Some(false);
        }
        let others = if held_only {
            self.inner.held_label_values(TENANT_LABEL, &[], start_ms, end_ms, Some(1))?
        } else {
            self.inner.label_values(TENANT_LABEL, &[], start_ms, end_ms, Some(1)).ok()?
        };
        Some(others.is_empty())
    }

    /// The selection label names and values are read with: the query's own matchers while the
    /// default tenant is everyone ([`ScopedQuerier::default_is_everyone`]), else the scope's.
    fn label_selection<'a>(&self, matchers: &'a [Matcher], alone: bool) -> std::borrow::Cow<'a, [Matcher]> {
        if alone {
            std::borrow::Cow::Borrowed(matchers)
        } else {
            self.scope.select(matchers)
        }
    }

    /// Label names read with one more than `limit` (the tenant label may be among them), as
    /// the scope shows them: without the tenant label for one tenant, with it for several.
    fn names(&self, mut names: Vec<String>, limit: Option<usize>) -> Vec<String> {
        let any = !names.is_empty();
        if self.scope.shows_label() {
            if any && !names.iter().any(|n| n == TENANT_LABEL) {
                names.push(TENANT_LABEL.to_owned());
                names.sort();
            }
        } else {
            names.retain(|n| n != TENANT_LABEL);
        }
        if let Some(n) = limit {
            names.truncate(n);
        }
        names
    }

    /// The tenant label's values: none for one tenant; the tenants holding matching series for
    /// several (`default` for the default tenant).
    fn tenant_values(&self, matchers: &[Matcher], start_ms: i64, end_ms: i64) -> Result<Vec<String>> {
        let Scope::Many(ids) = &self.scope else { return Ok(Vec::new()) };
        let mut found = Vec::new();
        for id in ids {
            let one = Scope::One(id.clone());
            if !self.inner.series(&one.select(matchers), start_ms, end_ms, Some(1))?.is_empty() {
                found.push(id.as_str().to_owned());
            }
        }
        found.sort();
        Ok(found)
    }
}

impl Querier for ScopedQuerier {
    fn cancellation(&self) -> Option<std::sync::Arc<std::sync::atomic::AtomicBool>> {
        self.inner.cancellation()
    }

    fn immutable_before(&self) -> Option<(i64, u64)> {
        self.inner.immutable_before()
    }

    fn tier_intervals(&self) -> Vec<i64> {
        self.inner.tier_intervals()
    }

    fn downsampled_in(&self, start_ms: i64, end_ms: i64) -> Option<(i64, i64)> {
        self.inner.downsampled_in(start_ms, end_ms)
    }

    fn select_points(
        &self,
        matchers: &[Matcher],
        ends: (i64, i64),
        interval_ms: i64,
        how: PointsRead<'_>,
    ) -> Result<Option<Vec<SeriesPoints>>> {
        let outer = how.map;
        let each = |p: &mut SeriesPoints| {
            self.scope.show(&mut p.labels);
            if let Some(map) = outer {
                map(p);
            }
        };
        self.inner.select_points(
            &self.scope.select(matchers),
            ends,
            interval_ms,
            PointsRead { map: Some(&each), ..how },
        )
    }

    fn warnings(&self) -> Vec<String> {
        self.inner.warnings()
    }

    fn select(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        map: Option<SeriesMap<'_>>,
    ) -> Result<Vec<SeriesSamples>> {
        let each = self.shown(map);
        self.inner.select(&self.scope.select(matchers), start_ms, end_ms, Some(&each))
    }

    fn select_reduced(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        sink: SinkFactory<'_>,
        map: Option<SeriesMap<'_>>,
    ) -> Result<Vec<SeriesSamples>> {
        let each = self.shown(map);
        self.inner.select_reduced(&self.scope.select(matchers), start_ms, end_ms, sink, Some(&each))
    }

    fn for_each_series(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        f: &mut dyn FnMut(SeriesSamples) -> bool,
    ) -> Result<()> {
        self.inner.for_each_series(&self.scope.select(matchers), start_ms, end_ms, &mut |mut s| {
            self.scope.show(&mut s.labels);
            f(s)
        })
    }

    fn start_timestamps(&self, matchers: &[Matcher], start_ms: i64, end_ms: i64) -> Result<Vec<SeriesStarts>> {
        let mut found = self.inner.start_timestamps(&self.scope.select(matchers), start_ms, end_ms)?;
        for s in &mut found {
            self.scope.show(&mut s.labels);
        }
        Ok(found)
    }

    fn series(&self, matchers: &[Matcher], start_ms: i64, end_ms: i64, limit: Option<usize>) -> Result<Vec<Labels>> {
        let mut found = self.inner.series(&self.scope.select(matchers), start_ms, end_ms, limit)?;
        for l in &mut found {
            self.scope.show(l);
        }
        Ok(found)
    }

    fn label_names(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        limit: Option<usize>,
    ) -> Result<Vec<String>> {
        let alone = self.default_is_everyone(start_ms, end_ms, false) == Some(true);
        let selection = self.label_selection(matchers, alone);
        let names = self.inner.label_names(&selection, start_ms, end_ms, limit.map(|n| n + 1))?;
        Ok(self.names(names, limit))
    }

    fn label_values(
        &self,
        name: &str,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        limit: Option<usize>,
    ) -> Result<Vec<String>> {
        if name == TENANT_LABEL {
            let mut values = self.tenant_values(matchers, start_ms, end_ms)?;
            if let Some(n) = limit {
                values.truncate(n);
            }
            return Ok(values);
        }
        let alone = self.default_is_everyone(start_ms, end_ms, false) == Some(true);
        self.inner.label_values(name, &self.label_selection(matchers, alone), start_ms, end_ms, limit)
    }

    fn held_series(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        limit: Option<usize>,
    ) -> Option<Vec<Labels>> {
        let mut found = self.inner.held_series(&self.scope.select(matchers), start_ms, end_ms, limit)?;
        for l in &mut found {
            self.scope.show(l);
        }
        Some(found)
    }

    fn held_label_names(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        limit: Option<usize>,
    ) -> Option<Vec<String>> {
        let alone = self.default_is_everyone(start_ms, end_ms, true)?;
        let selection = self.label_selection(matchers, alone);
        let names = self.inner.held_label_names(&selection, start_ms, end_ms, limit.map(|n| n + 1))?;
        Some(self.names(names, limit))
    }

    fn held_label_values(
        &self,
        name: &str,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        limit: Option<usize>,
    ) -> Option<Vec<String>> {
        if name == TENANT_LABEL {
            return None;
        }
        let alone = self.default_is_everyone(start_ms, end_ms, true)?;
        self.inner.held_label_values(name, &self.label_selection(matchers, alone), start_ms, end_ms, limit)
    }
}

/// The tenant of a stored series' labels.
pub fn tenant_of(labels: &Labels) -> TenantId {
    TenantId::of_label_value(labels.get(TENANT_LABEL).unwrap_or(""))
}
