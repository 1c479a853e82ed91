//! [`FloatPoint`]: the aggregate of one series' float samples over an interval, built from the
//! samples ([`FloatPoint::of`]) or from the points of consecutive intervals
//! ([`FloatPoint::merge`]).

use crate::decimal;
use crate::kahan::kahan_inc;
use crate::sample::{is_stale_marker, Sample};

/// The exact moments of a point whose values are all short decimals (`m / 10^scale`, see
/// [`crate::decimal`]), about its first sample (`m_0`, `t_0`): integers, so they merge without
/// rounding and are stored in a few bytes when values move little. A tier run keeps these
/// instead of the float sum, `M2` and co-moment, and rebuilds those from them
/// ([`FloatPoint::from_exact`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exact {
    /// The values are `m / 10^scale`.
    pub scale: u8,
    /// `Σ (m_i - m_0)`.
    pub s1: i128,
    /// `Σ (m_i - m_0)²`.
    pub s2: i128,
    /// `Σ (t_i - t_0)(m_i - m_0)`, times in ms.
    pub sxy: i128,
}

/// The integer `m` with `v = m / 10^scale` exactly, for a short decimal `v` of at most
/// `scale` digits: its own mantissa times a power of ten, so not limited to 2^53.
fn mantissa_at(v: f64, scale: u8) -> Option<i128> {
    if let Some(m) = decimal::mantissa(v, scale) {
        return Some(i128::from(m));
    }
    let own = decimal::scale_of(v)?;
    let f = 10i128.checked_pow(u32::from(scale.checked_sub(own)?))?;
    i128::from(decimal::mantissa(v, own)?).checked_mul(f)
}

impl Exact {
    /// The moments of `values` (non-stale samples, time order), if every one is a short
    /// decimal and nothing overflows.
    fn of<'a>(mut values: impl Iterator<Item = &'a Sample> + Clone) -> Option<Exact> {
        let scale = values.clone().try_fold(0u8, |acc, s| decimal::scale_of(s.value).map(|e| acc.max(e)))?;
        let first = values.next()?;
        let (m0, t0) = (mantissa_at(first.value, scale)?, i128::from(first.timestamp_ms));
        let mut e = Exact { scale, s1: 0, s2: 0, sxy: 0 };
        for s in values {
            let d = mantissa_at(s.value, scale)? - m0;
            e.s1 = e.s1.checked_add(d)?;
            e.s2 = e.s2.checked_add(d.checked_mul(d)?)?;
            e.sxy = e.sxy.checked_add((i128::from(s.timestamp_ms) - t0).checked_mul(d)?)?;
        }
        Some(e)
    }

    /// The same moments at a scale `scale` at least this one's.
    fn rescaled(self, scale: u8) -> Option<Exact> {
        let f = 10i128.checked_pow(u32::from(scale.checked_sub(self.scale)?))?;
        Some(Exact {
            scale,
            s1: self.s1.checked_mul(f)?,
            s2: self.s2.checked_mul(f)?.checked_mul(f)?,
            sxy: self.sxy.checked_mul(f)?,
        })
    }

    /// The moments of `a`'s samples followed by `b`'s.
    fn merge(a: &FloatPoint, b: &FloatPoint) -> Option<Exact> {
        let (ea, eb) = (a.exact?, b.exact?);
        let scale = ea.scale.max(eb.scale);
        let (ea, eb) = (ea.rescaled(scale)?, eb.rescaled(scale)?);
        let dm = mantissa_at(b.first.value, scale)? - mantissa_at(a.first.value, scale)?;
        let dt = i128::from(b.first.timestamp_ms) - i128::from(a.first.timestamp_ms);
        let nb = i128::from(b.count);
        // Σ (t - t_0) over b's samples, t_0 being b's first.
        let sx_b = b.x_sum_ms.checked_sub(nb.checked_mul(i128::from(b.first.timestamp_ms))?)?;
        let s1 = ea.s1.checked_add(eb.s1)?.checked_add(nb.checked_mul(dm)?)?;
        let s2 = ea
            .s2
            .checked_add(eb.s2)?
            .checked_add(dm.checked_mul(eb.s1)?.checked_mul(2)?)?
            .checked_add(nb.checked_mul(dm)?.checked_mul(dm)?)?;
        let sxy = ea
            .sxy
            .checked_add(eb.sxy)?
            .checked_add(dm.checked_mul(sx_b)?)?
            .checked_add(dt.checked_mul(eb.s1)?)?
            .checked_add(nb.checked_mul(dt)?.checked_mul(dm)?)?;
        Some(Exact { scale, s1, s2, sxy })
    }
}

/// Which fields of a [`FloatPoint`] a merge computes ([`FloatPoint::absorb`]); each names
/// some beside those every merge keeps (`count`, `first`, `last`, `before_last`, `ends_stale`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fields {
    /// Nothing more (`count_over_time`, `last_over_time`, `irate`, ...).
    Ends,
    /// `min`, `max` and their times.
    Extremes,
    /// `resets`, `reset_sum` and `changes` (`rate`, `increase`, `delta`, `resets`, `changes`).
    Counter,
    /// `sum` and `sum_c` (`sum_over_time`, `avg_over_time`).
    Sums,
    /// Every field, as [`FloatPoint::merge`] (the default).
    #[default]
    All,
}

/// What one series' float samples in one interval leave for PromQL: counts, the first, last
/// and second-to-last samples, a compensated sum, extremes with their times, central moments
/// (values and times) and a counter record. Staleness markers are not samples here (range
/// selectors drop them); whether the interval's last raw sample was one is kept in
/// [`ends_stale`](Self::ends_stale), which is what an instant selector's lookback needs.
///
/// Fields hold for the non-stale samples `s[0..count]` of the interval, in time order:
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FloatPoint {
    /// Number of samples. 0 only in a point of staleness markers alone, whose other fields
    /// are then meaningless (and [`ends_stale`](Self::ends_stale) is set).
    pub count: u64,
    /// `s[0]`.
    pub first: Sample,
    /// `s[count - 1]`.
    pub last: Sample,
    /// `s[count - 2]`, when `count >= 2` (`irate`, `idelta`).
    pub before_last: Option<Sample>,
    /// The interval's last raw sample is a staleness marker (it then comes after `last`).
    pub ends_stale: bool,
    /// Neumaier's running sum of the values (`sum + sum_c` is the sum), in sample order:
    /// within one interval the same two numbers as PromQL's `sum_over_time` computes.
    pub sum: f64,
    /// The compensation of [`sum`](Self::sum).
    pub sum_c: f64,
    /// The least value, NaN only when every value is NaN (`min_over_time`: the first of equal
    /// minima).
    pub min: f64,
    /// Time of the last sample holding the least value (`ts_of_min_over_time`).
    pub min_ts: i64,
    /// The greatest value, NaN only when every value is NaN (`max_over_time`).
    pub max: f64,
    /// Time of the last sample holding the greatest value (`ts_of_max_over_time`).
    pub max_ts: i64,
    /// Sum of squared deviations from the mean of the values (Welford's `M2`: `stdvar` is
    /// `m2 / count`).
    pub m2: f64,
    /// Sum of the samples' timestamps, in ms (exact: their mean is `x_sum_ms / count`).
    pub x_sum_ms: i128,
    /// Sum of the squared distances of the timestamps from the first, in ms² (exact:
    /// [`sxx`](Self::sxx) is computed from it).
    pub x_sq_ms: i128,
    /// Sum of products of the timestamps' deviations (s) and the values' deviations from
    /// their means (`deriv`, `predict_linear`).
    pub sxy: f64,
    /// Every value equals the first (and the first is not NaN, unless it is alone): the
    /// least-squares fit is flat, as PromQL's shortcut finds it.
    pub constant: bool,
    /// Number of `s[i] < s[i - 1]` (`resets`).
    pub resets: u64,
    /// Sum of `s[i - 1]` over those `i`: what a counter lost at its resets (`rate`, `increase`
    /// add it to `last - first`). Starts at -0.0, the sum that adds nothing to any value
    /// (`0.0` would turn a sum of `-0.0` positive).
    pub reset_sum: f64,
    /// Number of `s[i] != s[i - 1]`, two NaN counting as equal (`changes`).
    pub changes: u64,
    /// The exact moments, when every value is a short decimal.
    pub exact: Option<Exact>,
}

impl FloatPoint {
    /// The point of the raw samples `raw` of one interval (time order, staleness markers
    /// included); `None` when `raw` is empty.
    pub fn of(raw: &[Sample]) -> Option<FloatPoint> {
        let ends_stale = is_stale_marker(raw.last()?.value);
        let kept = || raw.iter().filter(|s| !is_stale_marker(s.value));
        let mut values = kept();
        let Some(&first) = values.next() else {
            return Some(Self::stale_only());
        };
        let (sum, sum_c) = kahan_inc(first.value, 0.0, 0.0);
        let mut p = FloatPoint {
            count: 1,
            first,
            last: first,
            ends_stale,
            sum,
            sum_c,
            min: first.value,
            min_ts: first.timestamp_ms,
            max: first.value,
            max_ts: first.timestamp_ms,
            x_sum_ms: i128::from(first.timestamp_ms),
            exact: Exact::of(kept()),
            ..Self::stale_only()
        };
        // Welford's mean and M2 with compensated accumulators, as PromQL's `variance`.
        let (mut mean, mut c_mean, mut aux, mut c_aux) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
        welford(first.value, 1.0, (&mut mean, &mut c_mean), (&mut aux, &mut c_aux));
        for &s in values {
            let (prev, v) = (p.last.value, s.value);
            p.count += 1;
            if v < prev {
                p.resets += 1;
                p.reset_sum += prev;
            }
            if !(v == prev || (v.is_nan() && prev.is_nan())) {
                p.changes += 1;
            }
            if p.constant && v != p.first.value {
                p.constant = false;
            }
            (p.sum, p.sum_c) = kahan_inc(v, p.sum, p.sum_c);
            if v < p.min || p.min.is_nan() {
                p.min = v;
            }
            if p.min.is_nan() || (!v.is_nan() && v <= p.min) {
                p.min_ts = s.timestamp_ms;
            }
            if v > p.max || p.max.is_nan() {
                p.max = v;
            }
            if p.max.is_nan() || (!v.is_nan() && v >= p.max) {
                p.max_ts = s.timestamp_ms;
            }
            welford(v, p.count as f64, (&mut mean, &mut c_mean), (&mut aux, &mut c_aux));
            p.x_sum_ms += i128::from(s.timestamp_ms);
            let dt = i128::from(s.timestamp_ms - first.timestamp_ms);
            p.x_sq_ms = p.x_sq_ms.saturating_add(dt * dt);
            p.before_last = Some(p.last);
            p.last = s;
        }
        p.m2 = aux + c_aux;
        // Second pass for the co-moments, about the exact means.
        let y_mean = p.mean();
        for s in kept() {
            let dx = (s.timestamp_ms as f64 - p.x_mean_ms()) / 1e3;
            p.sxy += dx * (s.value - y_mean);
        }
        Some(p)
    }

    /// A point whose interval held staleness markers only (and the starting state of every
    /// field that [`FloatPoint::of`] accumulates).
    pub fn stale_only() -> FloatPoint {
        let nothing = Sample::new(0, f64::NAN);
        FloatPoint {
            count: 0,
            first: nothing,
            last: nothing,
            before_last: None,
            ends_stale: true,
            sum: 0.0,
            sum_c: 0.0,
            min: f64::NAN,
            min_ts: 0,
            max: f64::NAN,
            max_ts: 0,
            m2: 0.0,
            x_sum_ms: 0,
            x_sq_ms: 0,
            sxy: 0.0,
            constant: true,
            resets: 0,
            reset_sum: -0.0,
            changes: 0,
            exact: None,
        }
    }

    /// [`FloatPoint::merge`] in place, computing only `fields` (and what every field needs:
    /// `count`, `first`, `last`, `before_last`, `ends_stale`); the other fields are left as
    /// they were, meaningless after. A query folding points for one function merges only what
    /// that function reads.
    pub fn absorb(&mut self, later: &FloatPoint, fields: Fields) {
        if fields == Fields::All {
            *self = self.merge(later);
            return;
        }
        if later.count == 0 {
            self.ends_stale = true;
            return;
        }
        if self.count == 0 {
            *self = *later;
            return;
        }
        let (a, b) = (&mut *self, later);
        match fields {
            Fields::Ends | Fields::All => {}
            Fields::Extremes => {
                if a.min.is_nan() || b.min <= a.min {
                    a.min_ts = b.min_ts;
                }
                if a.min.is_nan() || b.min < a.min {
                    a.min = b.min;
                }
                if a.max.is_nan() || b.max >= a.max {
                    a.max_ts = b.max_ts;
                }
                if a.max.is_nan() || b.max > a.max {
                    a.max = b.max;
                }
            }
            Fields::Counter => {
                let (at_seam, prev) = (b.first.value, a.last.value);
                let seam_resets = at_seam < prev;
                let seam_changes = !(at_seam == prev || (at_seam.is_nan() && prev.is_nan()));
                a.resets += b.resets + u64::from(seam_resets);
                a.reset_sum = a.reset_sum + b.reset_sum + if seam_resets { prev } else { -0.0 };
                a.changes += b.changes + u64::from(seam_changes);
            }
            Fields::Sums => (a.sum, a.sum_c) = kahan_inc(b.sum, a.sum, a.sum_c + b.sum_c),
        }
        a.count += b.count;
        a.before_last = b.before_last.or(Some(a.last));
        a.last = b.last;
        a.ends_stale = b.ends_stale;
    }

    /// The point of this point's interval followed by `later`'s: every sample of `later`
    /// must come after every sample of `self`.
    #[must_use]
    pub fn merge(&self, later: &FloatPoint) -> FloatPoint {
        let (a, b) = (self, later);
        if b.count == 0 {
            return FloatPoint { ends_stale: true, ..*a };
        }
        if a.count == 0 {
            return *b;
        }
        let (na, nb) = (a.count as f64, b.count as f64);
        let n = na + nb;
        let (at_seam, prev) = (b.first.value, a.last.value);
        let seam_resets = u64::from(at_seam < prev);
        let seam_changes = u64::from(!(at_seam == prev || (at_seam.is_nan() && prev.is_nan())));
        let (sum, sum_c) = kahan_inc(b.sum, a.sum, a.sum_c + b.sum_c);
        // Chan et al.'s pairwise update of the central moments.
        let dy = b.mean() - a.mean();
        let dx = (b.x_mean_ms() - a.x_mean_ms()) / 1e3;
        let weight = na * nb / n;
        FloatPoint {
            count: a.count + b.count,
            first: a.first,
            last: b.last,
            before_last: b.before_last.or(Some(a.last)),
            ends_stale: b.ends_stale,
            sum,
            sum_c,
            min: if a.min.is_nan() || b.min < a.min { b.min } else { a.min },
            min_ts: if a.min.is_nan() || b.min <= a.min { b.min_ts } else { a.min_ts },
            max: if a.max.is_nan() || b.max > a.max { b.max } else { a.max },
            max_ts: if a.max.is_nan() || b.max >= a.max { b.max_ts } else { a.max_ts },
            m2: a.m2 + b.m2 + dy * dy * weight,
            x_sum_ms: a.x_sum_ms + b.x_sum_ms,
            x_sq_ms: x_sq_merged(a, b),
            sxy: a.sxy + b.sxy + dx * dy * weight,
            constant: a.constant && b.constant && b.first.value == a.first.value,
            resets: a.resets + b.resets + seam_resets,
            reset_sum: a.reset_sum + b.reset_sum + if seam_resets == 1 { prev } else { -0.0 },
            changes: a.changes + b.changes + seam_changes,
            exact: Exact::merge(a, b),
        }
    }

    /// This point with its sum, `M2` and co-moment computed from its exact moments (each
    /// rounded once or twice, where the sample loop rounds at every step): what a tier run
    /// decodes. `None` without exact moments, or when a product overflows.
    pub fn from_exact(&self) -> Option<FloatPoint> {
        let e = self.exact?;
        self.from_exact_about(mantissa_at(self.first.value, e.scale)?)
    }

    /// [`FloatPoint::from_exact`] given `m0`, the first value's mantissa at the exact moments'
    /// scale, which a decoder has read already: the same result when `m0` is the one
    /// `from_exact` finds.
    pub fn from_exact_about(&self, m0: i128) -> Option<FloatPoint> {
        let mut p = *self;
        p.set_from_exact_about(m0)?;
        Some(p)
    }

    /// [`FloatPoint::from_exact_about`] in place (a decoder's point is not copied); `None`
    /// (the point unchanged) when a product overflows.
    pub fn set_from_exact_about(&mut self, m0: i128) -> Option<()> {
        let e = self.exact?;
        let p = decimal::pow10(e.scale)?;
        // A u64 times an i64 fits 128 bits.
        let sx = self.x_sum_ms.checked_sub(i128::from(self.count) * i128::from(self.first.timestamp_ms))?;
        let (total, spread, cross) = match narrow_moments(self.count, m0, e, sx) {
            Some(v) => v,
            None => {
                let n = i128::from(self.count);
                let total = n.checked_mul(m0)?.checked_add(e.s1)?;
                let spread = n.checked_mul(e.s2)?.checked_sub(e.s1.checked_mul(e.s1)?)?;
                let cross = n.checked_mul(e.sxy)?.checked_sub(sx.checked_mul(e.s1)?)?;
                (total, spread, cross)
            }
        };
        let nf = self.count as f64;
        let (total, spread, cross) = (to_f64(total), to_f64(spread), to_f64(cross));
        (self.sum, self.sum_c, self.m2, self.sxy) = (total / p, 0.0, spread / (nf * p * p), cross / (nf * 1e3 * p));
        Some(())
    }

    /// The mantissa at `scale` of the first value, given the one a decoder read (`read`): that
    /// one below 2^51, where it is the one [`FloatPoint::from_exact`] would find again from the
    /// value; above, found again from the value. `None` when the value has none at `scale`.
    pub fn first_mantissa(&self, read: i64, scale: u8) -> Option<i128> {
        if read.unsigned_abs() < 1 << 51 {
            Some(i128::from(read))
        } else {
            mantissa_at(self.first.value, scale)
        }
    }

    /// Sets this point's sum from its exact first moment `s1` at `scale` (`m0` the mantissa of
    /// its first value, see [`FloatPoint::first_mantissa`]), as
    /// [`FloatPoint::from_exact_about`] computes it: for a decode that wants the sum and no
    /// other moment. `None` (the point unchanged) when a product overflows.
    pub fn set_exact_sum(&mut self, m0: i128, s1: i128, scale: u8) -> Option<()> {
        let p = decimal::pow10(scale)?;
        let total = i128::from(self.count).checked_mul(m0)?.checked_add(s1)?;
        (self.sum, self.sum_c) = (to_f64(total) / p, 0.0);
        Some(())
    }

    /// Sum of squared deviations of the timestamps from their mean, in s² (`deriv`): from the
    /// exact sums, rounded once while they fit 128 bits.
    pub fn sxx(&self) -> f64 {
        let n = i128::from(self.count);
        let sx = self.x_sum_ms - n * i128::from(self.first.timestamp_ms);
        match n.checked_mul(self.x_sq_ms).and_then(|a| a.checked_sub(sx.checked_mul(sx)?)) {
            Some(spread) => spread as f64 / (self.count as f64 * 1e6),
            None => (self.x_sq_ms as f64 - (sx as f64) * (sx as f64) / self.count as f64) / 1e6,
        }
    }

    /// The mean of the samples' timestamps, in ms.
    pub fn x_mean_ms(&self) -> f64 {
        self.x_sum_ms as f64 / self.count as f64
    }

    /// The compensated sum of the values.
    pub fn sum_value(&self) -> f64 {
        if self.sum.is_infinite() {
            self.sum
        } else {
            self.sum + self.sum_c
        }
    }

    /// The mean of the values, as PromQL's `avg_over_time` computes it when the sum stays
    /// finite (NaN for a point without samples).
    pub fn mean(&self) -> f64 {
        let n = self.count as f64;
        if self.sum.is_infinite() {
            self.sum / n
        } else {
            self.sum / n + self.sum_c / n
        }
    }
}

/// `x_sq_ms` of `a`'s samples followed by `b`'s: `b`'s distances moved to `a`'s first sample
/// (saturating: 128 bits hold a century of millisecond samples).
fn x_sq_merged(a: &FloatPoint, b: &FloatPoint) -> i128 {
    let nb = i128::from(b.count);
    let dt = i128::from(b.first.timestamp_ms) - i128::from(a.first.timestamp_ms);
    let sx_b = b.x_sum_ms - nb * i128::from(b.first.timestamp_ms);
    a.x_sq_ms
        .saturating_add(b.x_sq_ms)
        .saturating_add(dt.saturating_mul(sx_b).saturating_mul(2))
        .saturating_add(nb.saturating_mul(dt).saturating_mul(dt))
}

/// [`FloatPoint::from_exact`]'s three integers (`n m_0 + s1`, `n s2 - s1²` and
/// `n sxy - sx s1`) from products of 64-bit factors, when every factor fits 64 bits: the same
/// integers as the checked 128-bit arithmetic (two such products and a 64-bit term cannot
/// overflow 128 bits), without its software multiplications (most of a decode's time).
fn narrow_moments(count: u64, m0: i128, e: Exact, sx: i128) -> Option<(i128, i128, i128)> {
    let n = i64::try_from(count).ok()?;
    let (m0, s1, s2, sxy, sx) = (
        i64::try_from(m0).ok()?,
        i64::try_from(e.s1).ok()?,
        i64::try_from(e.s2).ok()?,
        i64::try_from(e.sxy).ok()?,
        i64::try_from(sx).ok()?,
    );
    let wide = |a: i64, b: i64| i128::from(a) * i128::from(b);
    Some((wide(n, m0) + i128::from(s1), wide(n, s2) - wide(s1, s1), wide(n, sxy) - wide(sx, s1)))
}

/// `v` rounded to the nearest `f64`, through `i64` when it fits (one instruction instead of a
/// software conversion; both round to nearest, so the same float).
fn to_f64(v: i128) -> f64 {
    #[inline(never)]
    fn wide(v: i128) -> f64 {
        v as f64
    }
    if v == i128::from(v as i64) {
        v as i64 as f64
    } else {
        wide(v)
    }
}

/// One step of Welford's update with compensated accumulators (PromQL's `variance`).
fn welford(f: f64, count: f64, (mean, c_mean): (&mut f64, &mut f64), (aux, c_aux): (&mut f64, &mut f64)) {
    let delta = f - (*mean + *c_mean);
    (*mean, *c_mean) = kahan_inc(delta / count, *mean, *c_mean);
    (*aux, *c_aux) = kahan_inc(delta * (f - (*mean + *c_mean)), *aux, *c_aux);
}
