//! Each tenant's series and bytes on disk, for `/api/v1/status/tenants` and `/metrics`
//! (`saltdb_tenant_series`, `saltdb_tenant_disk_bytes_estimated`): the series in the newest
//! window, and the bytes estimated window by window as the window's bytes times the tenant's
//! share of its series (from the window postings of `__tenant__`).
//!
//! Measuring walks every window's series, so `/metrics` does not measure at every scrape: it
//! reuses the figures for [`MAX_AGE`], measures at the first scrape, and refreshes in the
//! background when they are older ([`TenantFigures`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::storage::Storage;
use crate::tenant::{TenantId, DEFAULT_TENANT, TENANT_LABEL};

/// How long `/metrics` shows the same tenant figures.
pub const MAX_AGE: Duration = Duration::from_secs(300);

/// One tenant's figures.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Share {
    /// Series in the newest windows (of every retention class).
    pub series: u64,
    /// Windows it has series in.
    pub windows: u64,
    /// Estimated bytes on disk.
    pub bytes: f64,
}

/// Every tenant's figures, the largest estimated bytes first.
///
/// # Errors
/// Storage errors.
pub fn measure(storage: &Storage) -> crate::storage::Result<Vec<(String, Share)>> {
    let windows = storage.window_status()?;
    let split = storage.series_per_value(TENANT_LABEL)?;
    let mut rows: Vec<(String, Share)> = shares(&windows, &split).into_iter().collect();
    rows.sort_by(|a, b| b.1.bytes.total_cmp(&a.1.bytes).then_with(|| a.0.cmp(&b.0)));
    Ok(rows)
}

/// What a scrape does about the tenant figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Due {
    /// None were measured yet: measure before answering.
    Now,
    /// They are older than [`MAX_AGE`]: refresh in the background, answer with them.
    Background,
    /// They are fresh, or a refresh runs.
    Fresh,
}

/// When the figures on `/metrics` were measured, and whether a refresh runs.
#[derive(Debug, Default)]
pub struct TenantFigures {
    measured: Mutex<Option<Instant>>,
    refreshing: AtomicBool,
}

impl TenantFigures {
    /// What a scrape at this moment does; [`Due::Background`] claims the refresh (the caller
    /// must end it with [`TenantFigures::measured`]).
    pub fn due(&self) -> Due {
        let measured = *self.measured.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match measured {
            None => Due::Now,
            Some(at) if at.elapsed() >= MAX_AGE && !self.refreshing.swap(true, Ordering::SeqCst) => Due::Background,
            Some(_) => Due::Fresh,
        }
    }

    /// A measurement ended (`ok`: it succeeded and its figures are set).
    pub fn measured(&self, ok: bool) {
        if ok {
            *self.measured.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now());
        }
        self.refreshing.store(false, Ordering::SeqCst);
    }

    /// Makes the next scrape measure again (after a tenant's data was deleted).
    pub fn invalidate(&self) {
        *self.measured.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }
}

/// Each tenant's figures from the windows' series and bytes and their series per tenant value.
fn shares(windows: &[crate::storage::WindowStatus], split: &[crate::storage::WindowValues]) -> BTreeMap<String, Share> {
    let newest = windows.iter().map(|w| w.start_ms).max();
    let mut out: BTreeMap<String, Share> = BTreeMap::new();
    for w in windows {
        let of_tenants: Vec<(String, u64)> = split
            .iter()
            .find(|v| v.start_ms == w.start_ms && v.class == w.class)
            .map(|v| v.series.iter().map(|(t, n)| (TenantId::of_label_value(t).as_str().to_owned(), *n)).collect())
            .unwrap_or_default();
        let others: u64 = of_tenants.iter().map(|(_, n)| n).sum();
        let default = w.series.saturating_sub(others);
        let all = of_tenants.into_iter().chain((default > 0).then(|| (DEFAULT_TENANT.to_owned(), default)));
        for (tenant, n) in all {
            let share = out.entry(tenant).or_default();
            share.windows += 1;
            if Some(w.start_ms) == newest {
                share.series += n;
            }
            if w.series > 0 {
                share.bytes += w.bytes as f64 * n as f64 / w.series as f64;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{WindowState, WindowStatus, WindowValues};

    fn window(start_ms: i64, series: u64, bytes: u64) -> WindowStatus {
        WindowStatus {
            start_ms,
            class: 0,
            end_ms: start_ms + 10,
            state: WindowState::Hot,
            series,
            samples: 0,
            bytes,
            downsampled_ms: None,
        }
    }

    #[test]
    fn bytes_follow_each_windows_series_shares() {
        let windows = [window(0, 4, 400), window(10, 10, 1000)];
        let split = [
            WindowValues { start_ms: 0, class: 0, series: vec![("a".into(), 1)] },
            WindowValues { start_ms: 10, class: 0, series: vec![("a".into(), 5), ("b".into(), 5)] },
        ];
        let s = shares(&windows, &split);
        assert_eq!(s["a"], Share { series: 5, windows: 2, bytes: 600.0 });
        assert_eq!(s["b"], Share { series: 5, windows: 1, bytes: 500.0 });
        assert_eq!(s["default"], Share { series: 0, windows: 1, bytes: 300.0 });
    }

    #[test]
    fn figures_are_measured_first_then_reused_until_invalidated() {
        let f = TenantFigures::default();
        assert_eq!(f.due(), Due::Now);
        f.measured(false);
        assert_eq!(f.due(), Due::Now, "a failed measurement is tried again");
        f.measured(true);
        assert_eq!(f.due(), Due::Fresh);
        f.invalidate();
        assert_eq!(f.due(), Due::Now);
    }
}
