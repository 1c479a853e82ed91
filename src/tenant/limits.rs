//! Limits per tenant, from a YAML file in the shape of Grafana Mimir's runtime configuration
//! overrides: `defaults:` for every tenant, `overrides:` per tenant id (a tenant's fields
//! replace the defaults' field by field), and the token bucket that enforces a tenant's
//! ingestion rate ([`Buckets`]).
//!
//! Pure: the file's text comes in, time comes in as seconds; reading the file, reloading it
//! and answering requests is the HTTP layer's (`http/tenant_limits.rs`).

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;

use super::id::{TenantId, TENANT_LABEL};

/// One tenant's limits (every field optional: absent means no limit, or the default's).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantLimits {
    /// Samples per second the tenant may write (float and histogram samples alike).
    pub ingestion_rate: Option<f64>,
    /// Samples the tenant may write at once (the token bucket's size); defaults to one second
    /// of `ingestion_rate`.
    pub ingestion_burst_size: Option<u64>,
    /// Longest label name, in bytes.
    pub max_label_name_length: Option<usize>,
    /// Longest label value, in bytes.
    pub max_label_value_length: Option<usize>,
    /// Samples one query may load or scan (lowers the server's `--query-max-samples` and
    /// `--query-max-scanned-samples` for the tenant).
    pub max_fetched_samples_per_query: Option<u64>,
    /// Longest `end - start` of a range query, as a duration (`30d`).
    pub max_total_query_length: Option<String>,
    /// Queries of the tenant evaluated at once.
    pub max_concurrent_queries: Option<usize>,
    /// Active series the tenant may have (see [`super::ActiveSeries`]: the distinct series it
    /// wrote samples to in the last 30 to 60 minutes, counted since the process started).
    pub max_global_series_per_user: Option<u64>,
    /// Active series any one metric (`__name__`) of the tenant may have, counted as
    /// `max_global_series_per_user`.
    pub max_global_series_per_metric: Option<u64>,
    /// How long the tenant's samples are kept, as a duration (`30d`; Mimir's
    /// `compactor_blocks_retention_period` is accepted too). Each distinct
    /// retention is a retention class of the embedded store (see
    /// [`LimitsFile::retention_selectors`]).
    #[serde(alias = "compactor_blocks_retention_period")]
    pub retention_period: Option<String>,
}

impl TenantLimits {
    /// `self`, with every field it leaves unset taken from `defaults`.
    pub fn over(&self, defaults: &Self) -> Self {
        Self {
            ingestion_rate: self.ingestion_rate.or(defaults.ingestion_rate),
            ingestion_burst_size: self.ingestion_burst_size.or(defaults.ingestion_burst_size),
            max_label_name_length: self.max_label_name_length.or(defaults.max_label_name_length),
            max_label_value_length: self.max_label_value_length.or(defaults.max_label_value_length),
            max_fetched_samples_per_query: self
                .max_fetched_samples_per_query
                .or(defaults.max_fetched_samples_per_query),
            max_total_query_length: self
                .max_total_query_length
                .clone()
                .or_else(|| defaults.max_total_query_length.clone()),
            max_concurrent_queries: self.max_concurrent_queries.or(defaults.max_concurrent_queries),
            max_global_series_per_user: self.max_global_series_per_user.or(defaults.max_global_series_per_user),
            max_global_series_per_metric: self.max_global_series_per_metric.or(defaults.max_global_series_per_metric),
            retention_period: self.retention_period.clone().or_else(|| defaults.retention_period.clone()),
        }
    }

    /// The token bucket's size: `ingestion_burst_size`, else one second of the rate (at least
    /// one sample); `None` without a rate.
    pub fn burst(&self) -> Option<u64> {
        let rate = self.ingestion_rate?;
        Some(self.ingestion_burst_size.unwrap_or_else(|| rate.ceil().max(1.0) as u64))
    }

    /// `max_global_series_per_user` and `max_global_series_per_metric` in force: 0 is no limit,
    /// as in Mimir.
    pub fn series_limits(&self) -> (Option<u64>, Option<u64>) {
        let set = |l: Option<u64>| l.filter(|&n| n > 0);
        (set(self.max_global_series_per_user), set(self.max_global_series_per_metric))
    }

    /// Whether either active series limit is in force.
    pub fn limits_series(&self) -> bool {
        self.series_limits() != (None, None)
    }

    /// `max_total_query_length` in milliseconds (validated when the file is parsed).
    pub fn max_total_query_length_ms(&self) -> Option<i64> {
        self.max_total_query_length.as_deref().and_then(|d| crate::duration::parse_ms(d).ok())
    }

    fn validate(&self) -> Result<(), String> {
        if let Some(rate) = self.ingestion_rate {
            if !rate.is_finite() || rate <= 0.0 {
                return Err(format!("ingestion_rate must be a positive number of samples per second, not {rate}"));
            }
        }
        if self.ingestion_burst_size == Some(0) {
            return Err("ingestion_burst_size must be at least 1".into());
        }
        if self.max_concurrent_queries == Some(0) {
            return Err("max_concurrent_queries must be at least 1".into());
        }
        if self.max_fetched_samples_per_query == Some(0) {
            return Err("max_fetched_samples_per_query must be at least 1".into());
        }
        if let Some(d) = &self.retention_period {
            match crate::duration::parse_ms(d) {
                Ok(ms) if ms > 0 => {}
                Ok(_) => return Err("retention_period must be longer than 0".into()),
                Err(e) => return Err(format!("retention_period: {e}")),
            }
        }
        if let Some(d) = &self.max_total_query_length {
            match crate::duration::parse_ms(d) {
                Ok(ms) if ms > 0 => {}
                Ok(_) => return Err("max_total_query_length must be longer than 0".into()),
                Err(e) => return Err(format!("max_total_query_length: {e}")),
            }
        }
        Ok(())
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    defaults: Option<TenantLimits>,
    #[serde(default)]
    overrides: Option<BTreeMap<String, Option<TenantLimits>>>,
}

/// A parsed limits file: the defaults and each overridden tenant's limits (already merged
/// with the defaults).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LimitsFile {
    defaults: TenantLimits,
    overrides: HashMap<TenantId, TenantLimits>,
}

/// A limits file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tenant limits file {file}: {problem}")]
pub struct LimitsError {
    /// The file.
    pub file: String,
    /// What is wrong, naming the key or the tenant.
    pub problem: String,
}

impl LimitsFile {
    /// Parses the YAML `text` of `file` (named in errors).
    ///
    /// # Errors
    /// [`LimitsError`] for invalid YAML, an unknown key, an invalid tenant id or value.
    pub fn parse(file: &str, text: &str) -> Result<Self, LimitsError> {
        let err = |problem: String| LimitsError { file: file.to_owned(), problem };
        let raw: RawFile = if text.trim().is_empty() {
            RawFile::default()
        } else {
            serde_norway::from_str::<Option<RawFile>>(text).map_err(|e| err(e.to_string()))?.unwrap_or_default()
        };
        let defaults = raw.defaults.unwrap_or_default();
        defaults.validate().map_err(|p| err(format!("defaults: {p}")))?;
        let mut overrides = HashMap::new();
        for (id, limits) in raw.overrides.unwrap_or_default() {
            let tenant = TenantId::parse(&id).map_err(|e| err(format!("overrides: {e}")))?;
            let limits = limits.unwrap_or_default();
            limits.validate().map_err(|p| err(format!("overrides of tenant {id:?}: {p}")))?;
            if tenant.is_default() && limits.retention_period.is_some() {
                return Err(err(
                    "overrides of tenant \"default\": retention_period: the default tenant keeps --retention".into(),
                ));
            }
            overrides.insert(tenant, limits.over(&defaults));
        }
        Ok(Self { defaults, overrides })
    }

    /// Retention per tenant as retention-rule selectors with their durations, in the order the
    /// first match decides: each overridden tenant with a `retention_period` (its own or the
    /// defaults'), then every other tenant but the default one (`{__tenant__=~".+"}`) with the
    /// defaults' `retention_period`. The default tenant keeps the server's `--retention`.
    pub fn retention_selectors(&self) -> Vec<(String, String)> {
        let mut tenants: Vec<(&TenantId, &TenantLimits)> = self.overrides.iter().collect();
        tenants.sort_by(|a, b| a.0.cmp(b.0));
        let mut out: Vec<(String, String)> = tenants
            .into_iter()
            .filter_map(|(t, l)| {
                let period = l.retention_period.clone()?;
                Some((format!("{{{TENANT_LABEL}={:?}}}", t.as_str()), period))
            })
            .collect();
        if let Some(period) = &self.defaults.retention_period {
            out.push((format!("{{{TENANT_LABEL}=~\".+\"}}"), period.clone()));
        }
        out
    }

    /// The limits of `tenant`: its override merged over the defaults, else the defaults.
    pub fn of(&self, tenant: &TenantId) -> &TenantLimits {
        self.overrides.get(tenant).unwrap_or(&self.defaults)
    }
}

/// A request the ingestion rate refuses.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RateRefusal {
    /// Fewer tokens than samples now: retry after this many seconds.
    Wait(f64),
    /// More samples than the bucket holds: never allowed whole.
    OverBurst,
}

/// One token bucket: `burst` tokens at most, `rate` added per second.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    rate: f64,
    burst: u64,
    tokens: f64,
    last: f64,
}

impl Bucket {
    fn full(rate: f64, burst: u64, now: f64) -> Self {
        Self { rate, burst, tokens: burst as f64, last: now }
    }

    fn allow(&mut self, samples: u64, now: f64) -> Result<(), RateRefusal> {
        if now > self.last {
            self.tokens = (self.tokens + (now - self.last) * self.rate).min(self.burst as f64);
            self.last = now;
        }
        if samples > self.burst {
            return Err(RateRefusal::OverBurst);
        }
        let n = samples as f64;
        if n <= self.tokens {
            self.tokens -= n;
            Ok(())
        } else {
            Err(RateRefusal::Wait((n - self.tokens) / self.rate))
        }
    }
}

/// The token buckets of every tenant with an ingestion rate. A tenant's bucket starts full, and
/// starts over full when its rate or burst changes (a reloaded file).
#[derive(Debug, Default)]
pub struct Buckets {
    buckets: HashMap<TenantId, Bucket>,
}

impl Buckets {
    /// Takes `samples` tokens from `tenant`'s bucket of `rate` samples/s and `burst` at time
    /// `now` (seconds, any monotonic origin); a request larger than `burst` is refused whole.
    ///
    /// # Errors
    /// [`RateRefusal`]: how long to wait, or that it never fits.
    pub fn allow(
        &mut self,
        tenant: &TenantId,
        (rate, burst): (f64, u64),
        samples: u64,
        now: f64,
    ) -> Result<(), RateRefusal> {
        let bucket = self.buckets.entry(tenant.clone()).or_insert_with(|| Bucket::full(rate, burst, now));
        if bucket.rate.to_bits() != rate.to_bits() || bucket.burst != burst {
            *bucket = Bucket::full(rate, burst, now);
        }
        bucket.allow(samples, now)
    }

    /// When `tenant`'s bucket of `rate` and `burst` holds less than one sample's token at
    /// `now`: the seconds until it holds one. Takes nothing (a bucket it has not seen, or whose
    /// limits changed, is full).
    pub fn exhausted(&self, tenant: &TenantId, (rate, burst): (f64, u64), now: f64) -> Option<f64> {
        let bucket = self.buckets.get(tenant)?;
        if bucket.rate.to_bits() != rate.to_bits() || bucket.burst != burst {
            return None;
        }
        let tokens = (bucket.tokens + (now - bucket.last).max(0.0) * bucket.rate).min(bucket.burst as f64);
        (tokens < 1.0).then(|| (1.0 - tokens) / bucket.rate)
    }

    /// Forgets the buckets of tenants that no longer have a rate (after a reload).
    pub fn retain(&mut self, keep: impl Fn(&TenantId) -> bool) {
        self.buckets.retain(|t, _| keep(t));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_per_tenant_becomes_selectors() {
        let text = "defaults:\n  retention_period: 30d\noverrides:\n  b:\n    compactor_blocks_retention_period: 7d\n  a:\n    ingestion_rate: 5\n";
        let f = LimitsFile::parse("l.yml", text).unwrap();
        assert_eq!(
            f.retention_selectors(),
            vec![
                (r#"{__tenant__="a"}"#.to_owned(), "30d".to_owned()),
                (r#"{__tenant__="b"}"#.to_owned(), "7d".to_owned()),
                (r#"{__tenant__=~".+"}"#.to_owned(), "30d".to_owned()),
            ]
        );
        let e = LimitsFile::parse("l.yml", "overrides:\n  default:\n    retention_period: 1d\n").unwrap_err();
        assert!(e.to_string().contains("--retention"), "{e}");
        let e = LimitsFile::parse("l.yml", "overrides:\n  a:\n    retention_period: soon\n").unwrap_err();
        assert!(e.to_string().contains("retention_period"), "{e}");
    }
    use proptest::prelude::*;

    fn id(s: &str) -> TenantId {
        TenantId::parse(s).unwrap()
    }

    #[test]
    fn defaults_and_overrides_merge_field_by_field() {
        let f = LimitsFile::parse(
            "limits.yml",
            "defaults:\n  ingestion_rate: 100\n  max_label_value_length: 64\n  max_total_query_length: 30d\n\
             overrides:\n  a:\n    ingestion_rate: 5.5\n    ingestion_burst_size: 10\n    max_concurrent_queries: 2\n  b:\n",
        )
        .unwrap();
        let a = f.of(&id("a"));
        assert_eq!(a.ingestion_rate, Some(5.5));
        assert_eq!(a.burst(), Some(10));
        assert_eq!(a.max_label_value_length, Some(64));
        assert_eq!(a.max_concurrent_queries, Some(2));
        assert_eq!(a.max_total_query_length_ms(), Some(30 * 86_400_000));
        assert_eq!(f.of(&id("b")), f.of(&id("c")));
        assert_eq!(f.of(&id("c")).burst(), Some(100));
        assert_eq!(f.of(&id("c")).max_concurrent_queries, None);
        assert_eq!(LimitsFile::parse("x", "").unwrap(), LimitsFile::default());
        assert_eq!(LimitsFile::parse("x", "# nothing\n").unwrap(), LimitsFile::default());
    }

    #[test]
    fn series_limits_parse_and_merge() {
        let f = LimitsFile::parse(
            "limits.yml",
            "defaults:\n  max_global_series_per_user: 100\noverrides:\n  a:\n    max_global_series_per_metric: 3\n",
        )
        .unwrap();
        let a = f.of(&id("a"));
        assert_eq!((a.max_global_series_per_user, a.max_global_series_per_metric), (Some(100), Some(3)));
        assert!(a.limits_series());
        assert_eq!(f.of(&id("b")).max_global_series_per_metric, None);
        assert!(!TenantLimits::default().limits_series());
        let zero = LimitsFile::parse("l.yml", "defaults:\n  max_global_series_per_user: 0\n").unwrap();
        assert_eq!(zero.of(&id("a")).series_limits(), (None, None), "0 is no limit, as in Mimir");
    }

    #[test]
    fn bad_files_are_refused_naming_file_and_key() {
        let e = LimitsFile::parse("l.yml", "defaults:\n  ingestion_rat: 1\n").unwrap_err();
        assert_eq!(e.file, "l.yml");
        assert!(e.to_string().contains("l.yml") && e.problem.contains("ingestion_rat"), "{e}");
        let e = LimitsFile::parse("l.yml", "overrides:\n  a:\n    max_series: 1\n").unwrap_err();
        assert!(e.problem.contains("max_series"), "{e}");
        let e = LimitsFile::parse("l.yml", "limits:\n  a: 1\n").unwrap_err();
        assert!(e.problem.contains("limits"), "{e}");
        let e = LimitsFile::parse("l.yml", "overrides:\n  \"a b\":\n    ingestion_rate: 1\n").unwrap_err();
        assert!(e.problem.contains("a b"), "{e}");
        let e = LimitsFile::parse("l.yml", "overrides:\n  a:\n    max_total_query_length: soon\n").unwrap_err();
        assert!(e.problem.contains("\"a\"") && e.problem.contains("max_total_query_length"), "{e}");
        let e = LimitsFile::parse("l.yml", "defaults:\n  ingestion_rate: -1\n").unwrap_err();
        assert!(e.problem.contains("defaults") && e.problem.contains("ingestion_rate"), "{e}");
        assert!(LimitsFile::parse("l.yml", "defaults: [1]\n").is_err());
    }

    #[test]
    fn a_bucket_refuses_past_its_burst_and_refills() {
        let mut b = Buckets::default();
        let a = id("a");
        assert_eq!(b.allow(&a, (10.0, 20), 21, 0.0), Err(RateRefusal::OverBurst));
        assert_eq!(b.allow(&a, (10.0, 20), 20, 0.0), Ok(()));
        assert_eq!(b.allow(&a, (10.0, 20), 5, 0.0), Err(RateRefusal::Wait(0.5)));
        assert_eq!(b.allow(&a, (10.0, 20), 5, 0.5), Ok(()));
        // Another tenant has its own bucket; a changed limit starts over full.
        assert_eq!(b.allow(&id("b"), (10.0, 20), 20, 0.5), Ok(()));
        assert_eq!(b.allow(&a, (10.0, 40), 40, 0.5), Ok(()));
    }

    #[test]
    fn an_exhausted_bucket_is_seen_without_taking() {
        let mut b = Buckets::default();
        let a = id("a");
        assert_eq!(b.exhausted(&a, (10.0, 20), 0.0), None, "a new bucket is full");
        assert_eq!(b.allow(&a, (10.0, 20), 20, 0.0), Ok(()));
        assert_eq!(b.exhausted(&a, (10.0, 20), 0.0), Some(0.1));
        assert!(b.exhausted(&a, (10.0, 20), 0.05).is_some_and(|w| (w - 0.05).abs() < 1e-9));
        assert_eq!(b.exhausted(&a, (10.0, 20), 0.1), None);
        // Looking took nothing: the token refilled by 0.1 s is there to take.
        assert_eq!(b.allow(&a, (10.0, 20), 1, 0.1), Ok(()));
        assert!(b.exhausted(&a, (10.0, 20), 0.1).is_some());
        assert_eq!(b.exhausted(&a, (5.0, 20), 0.1), None, "changed limits start over full");
    }

    /// The bucket's level by brute force over the history of accepted requests: the bucket was
    /// last full either at the start or just before one of the accepted requests, and the
    /// level is the least of what each of those implies now.
    fn model_level(rate: f64, burst: f64, accepted: &[(f64, u64)], now: f64) -> f64 {
        let mut level = burst;
        for (k, &(t, _)) in accepted.iter().enumerate() {
            let spent: u64 = accepted[k..].iter().map(|&(_, n)| n).sum();
            level = level.min(burst + rate * (now - t) - spent as f64);
        }
        level
    }

    proptest! {
        #[test]
        fn the_bucket_agrees_with_a_brute_force_model(
            rate in 1u32..1000,
            burst in 1u64..5000,
            steps in prop::collection::vec((0u32..3000, 0u64..6000), 1..60),
        ) {
            let rate = f64::from(rate);
            let mut buckets = Buckets::default();
            let a = id("a");
            let mut accepted: Vec<(f64, u64)> = Vec::new();
            let mut now = 0.0;
            for (dt_ms, n) in steps {
                now += f64::from(dt_ms) / 1000.0;
                let level = model_level(rate, burst as f64, &accepted, now);
                let got = buckets.allow(&a, (rate, burst), n, now);
                let close = (level - n as f64).abs() < 1e-6;
                match got {
                    Ok(()) => {
                        prop_assert!(n <= burst);
                        prop_assert!(close || n as f64 <= level, "accepted {n} with {level} left");
                        accepted.push((now, n));
                    }
                    Err(RateRefusal::OverBurst) => prop_assert!(n > burst),
                    Err(RateRefusal::Wait(w)) => {
                        prop_assert!(n <= burst);
                        prop_assert!(close || (n as f64) > level, "refused {n} with {level} left");
                        prop_assert!((w - (n as f64 - level) / rate).abs() < 1e-6, "wait {w}");
                    }
                }
            }
        }
    }
}
