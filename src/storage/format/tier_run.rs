//! The tier-run codec: one series' [`FloatPoint`]s of one tier (one interval) in one window,
//! as columns under zstd. Pure: no I/O. Byte layout: `docs/format.md`, *Tier runs*.
//!
//! Each point is stored with the end of its interval; times inside a point are offsets back
//! from that end, each as its difference from the point before's (equal for regular scrapes);
//! points whose values are short decimals store mantissas and exact integer moments, others
//! their floats XORed with the same field of the point before and split into byte planes;
//! the extremes refer to the first, last or second-to-last sample when they are one of those
//! (a counter's minimum is its first sample).
//!
//! Invariants: points are in strictly ascending interval order, each end a multiple of the
//! interval, every sample of a point inside `(end - interval, end]`. Every field round-trips
//! to the bit, except that a point in decimal form decodes with its sum, `M2` and co-moment
//! rebuilt from its exact moments ([`FloatPoint::from_exact`]) and a point in float form
//! without exact moments.

use crate::decimal;
use crate::sample::Sample;
use crate::tier::{Exact, FloatPoint};
use crate::varint;

/// Format version of tier runs.
pub const FORMAT_VERSION: u8 = 1;
/// zstd level of tier runs.
pub const ZSTD_LEVEL: i32 = 3;
/// Most points a run may claim (a year of 1-minute points; bounds allocation when decoding).
pub const MAX_POINTS: u64 = 1 << 20;
/// More body bytes than a point can take: flags and scale bytes, 13 wide varints of at most
/// 19 bytes, 6 varints of at most 10 and 10 floats (389; the thirteen column lengths come on top,
/// once per run).
const MAX_POINT_BYTES: u64 = 400;

/// Why a tier run could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TierRunError {
    /// The bytes end before the header or a column does.
    #[error("tier run is truncated")]
    Truncated,
    /// Unknown format version.
    #[error("unsupported tier run format version {0}")]
    Unsupported(u8),
    /// The header or a field claims something impossible.
    #[error("tier run is invalid: {0}")]
    Invalid(&'static str),
    /// zstd could not compress or decompress the body.
    #[error("tier run body does not (de)compress: {0}")]
    Zstd(String),
}

impl From<varint::VarintError> for TierRunError {
    fn from(_: varint::VarintError) -> Self {
        Self::Truncated
    }
}

/// Which sample of a point an extreme is (2 bits of the flags byte).
const AT_FIRST: u8 = 0;
const AT_LAST: u8 = 1;
const AT_BEFORE_LAST: u8 = 2;
const EXPLICIT: u8 = 3;

const ENDS_STALE: u8 = 1;
const CONSTANT: u8 = 1 << 1;
const MIN_SHIFT: u8 = 2;
const MAX_SHIFT: u8 = 4;
const HAS_RESETS: u8 = 1 << 6;
/// The point's values are short decimals: stored as mantissas, its moments as exact integers.
const DECIMAL: u8 = 1 << 7;

/// Appends the run of `points` (`(end_ms, point)`) of a tier of `interval_ms` to `dst`.
///
/// # Errors
/// [`TierRunError::Invalid`] for no points, more than [`MAX_POINTS`], an end that is not a
/// positive multiple of the interval, or ends not ascending.
pub fn encode(interval_ms: i64, points: &[(i64, FloatPoint)], dst: &mut Vec<u8>) -> Result<(), TierRunError> {
    let (Some(&(first_end, _)), true) = (points.first(), interval_ms > 0) else {
        return Err(TierRunError::Invalid("a run needs points and a positive interval"));
    };
    if points.len() as u64 > MAX_POINTS {
        return Err(TierRunError::Invalid("too many points"));
    }
    let mut cols = Columns::default();
    let mut prev_index = first_end / interval_ms;
    for (i, &(end, p)) in points.iter().enumerate() {
        if end <= 0 || end % interval_ms != 0 {
            return Err(TierRunError::Invalid("a point's end is not a positive multiple of the interval"));
        }
        if p.count > 0 && (p.first.timestamp_ms <= end - interval_ms || p.last.timestamp_ms > end) {
            return Err(TierRunError::Invalid("a point's samples are outside its interval"));
        }
        let index = end / interval_ms;
        if i > 0 {
            if index <= prev_index {
                return Err(TierRunError::Invalid("points are not in ascending order"));
            }
            varint::put(&mut cols.steps, (index - prev_index) as u64);
        }
        prev_index = index;
        cols.put_point(end, &p);
    }
    let body = cols.body();
    dst.push(FORMAT_VERSION);
    varint::put(dst, interval_ms as u64);
    varint::put(dst, points.len() as u64);
    varint::put(dst, (first_end / interval_ms) as u64);
    varint::put(dst, body.len() as u64);
    let compressed = zstd::bulk::compress(&body, ZSTD_LEVEL).map_err(|e| TierRunError::Zstd(e.to_string()))?;
    dst.extend_from_slice(&compressed);
    Ok(())
}

/// Decodes a run: its interval (ms) and its points with their ends.
///
/// # Errors
/// [`TierRunError`] for bytes that are not a run this version wrote.
pub fn decode(src: &[u8]) -> Result<(i64, Vec<(i64, FloatPoint)>), TierRunError> {
    let (&version, rest) = src.split_first().ok_or(TierRunError::Truncated)?;
    if version != FORMAT_VERSION {
        return Err(TierRunError::Unsupported(version));
    }
    let (interval, rest) = varint::read(rest)?;
    let (n, rest) = varint::read(rest)?;
    let (first_index, rest) = varint::read(rest)?;
    let (body_len, payload) = varint::read(rest)?;
    let interval = i64::try_from(interval).ok().filter(|&i| i > 0).ok_or(TierRunError::Invalid("interval"))?;
    if n == 0 || n > MAX_POINTS {
        return Err(TierRunError::Invalid("point count"));
    }
    if body_len > n * MAX_POINT_BYTES + 13 * 10 {
        return Err(TierRunError::Invalid("body length"));
    }
    let body = decompress(payload, body_len as usize)?;
    if body.len() as u64 != body_len {
        return Err(TierRunError::Invalid("body length"));
    }
    let mut r = Reader::new(&body, n as usize)?;
    let mut index = i64::try_from(first_index).map_err(|_| TierRunError::Invalid("first interval"))?;
    let mut out = Vec::with_capacity(n as usize);
    for i in 0..n {
        if i > 0 {
            let step = r.step()?;
            index = index.checked_add(step).ok_or(TierRunError::Invalid("interval index"))?;
        }
        let end = index.checked_mul(interval).filter(|&e| e > 0).ok_or(TierRunError::Invalid("interval end"))?;
        out.push((end, r.point(end)?));
    }
    if !r.is_exhausted() {
        return Err(TierRunError::Invalid("bytes after the last point"));
    }
    Ok((interval, out))
}

thread_local! {
    /// One zstd decompression context per thread: creating one costs more than decoding a
    /// small run.
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// Decompresses a body of `len` bytes with the thread's context.
fn decompress(payload: &[u8], len: usize) -> Result<Vec<u8>, TierRunError> {
    DECOMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        let dec = match slot.as_mut() {
            Some(d) => d,
            None => slot.insert(zstd::bulk::Decompressor::new().map_err(|e| TierRunError::Zstd(e.to_string()))?),
        };
        dec.decompress(payload, len).map_err(|e| TierRunError::Zstd(e.to_string()))
    })
}

/// The columns of a run's body while it is written.
#[derive(Default)]
struct Columns {
    /// Interval steps between points (varints, from the second point on).
    steps: Vec<u8>,
    /// Per point: sample count (varint).
    counts: Vec<u8>,
    /// Per point: flags byte.
    flags: Vec<u8>,
    /// Times, one column per field: the five of `prev_times` (wide varints of differences),
    /// then the explicit extremes' offsets back from the end (varints).
    times: [Vec<u8>; TIME_COLUMNS],
    /// Resets and changes (varints).
    tallies: Vec<u8>,
    /// Per decimal point: its scale (one byte).
    scales: Vec<u8>,
    /// Per decimal point: mantissas of its stored samples, each as a zigzag varint of its
    /// difference from the one before (the first from the last of the decimal point before).
    mantissas: Vec<u8>,
    /// Per decimal point: its exact moments (zigzag varints of up to 128 bits).
    moments: Vec<u8>,
    /// Mantissa of the last sample of the decimal point before.
    prev_mantissa: i64,
    /// The point before's offsets of its first, last and second-to-last samples, its
    /// timestamp spread and its `x_sq_ms`: each stored as the difference from these.
    prev_times: [i128; 5],
    /// Float fields, each XORed with the same field of the point before: one chain per field.
    floats: [Vec<u64>; FLOAT_FIELDS],
    prev: [u64; FLOAT_FIELDS],
}

/// Appends `v` zigzag-encoded as an unsigned LEB128 varint of up to 19 bytes.
fn put_wide(dst: &mut Vec<u8>, v: i128) {
    let mut u = ((v << 1) ^ (v >> 127)) as u128;
    while u >= 0x80 {
        dst.push((u as u8) | 0x80);
        u >>= 7;
    }
    dst.push(u as u8);
}

/// Reads what [`put_wide`] wrote from the start of `src`.
fn read_wide(src: &mut &[u8]) -> Result<i128, TierRunError> {
    let mut u = 0u128;
    for (i, &b) in src.iter().enumerate().take(19) {
        let shift = 7 * i as u32;
        let group = u128::from(b & 0x7f);
        if shift == 126 && group > 3 {
            return Err(TierRunError::Invalid("wide varint out of range"));
        }
        u |= group << shift;
        if b < 0x80 {
            *src = src.get(i + 1..).unwrap_or_default();
            return Ok(((u >> 1) as i128) ^ -((u & 1) as i128));
        }
    }
    Err(TierRunError::Truncated)
}

/// How a decimal point is stored: its scale and the mantissas of its first, last,
/// second-to-last and explicit extreme values (those it stores, in that order).
struct DecimalForm {
    scale: u8,
    mantissas: Vec<i64>,
}

/// The decimal form of `p` with extremes referenced as `min_ref`, `max_ref`, when `p` has
/// exact moments, every stored value is a mantissa at their scale, and the moments rebuild.
fn decimal_form(p: &FloatPoint, (min_ref, max_ref): (u8, u8)) -> Option<DecimalForm> {
    let e = p.exact?;
    p.from_exact()?;
    let mut values = vec![p.first.value];
    if p.count >= 2 {
        values.push(p.last.value);
    }
    if p.count >= 3 {
        values.push(p.before_last?.value);
    }
    if min_ref == EXPLICIT {
        values.push(p.min);
    }
    if max_ref == EXPLICIT {
        values.push(p.max);
    }
    let mantissas = values.into_iter().map(|v| decimal::mantissa(v, e.scale)).collect::<Option<Vec<i64>>>()?;
    Some(DecimalForm { scale: e.scale, mantissas })
}

/// The float fields, in column order.
const FLOAT_FIELDS: usize = 10;
const F_FIRST: usize = 0;
const F_LAST: usize = 1;
const F_BEFORE_LAST: usize = 2;
const F_MIN: usize = 3;
const F_MAX: usize = 4;
const F_SUM: usize = 5;
const F_SUM_C: usize = 6;
const F_M2: usize = 7;
const F_SXY: usize = 8;
const F_RESET_SUM: usize = 9;

/// Time fields stored relative to the point before's (slots of `prev_times`).
const T_FIRST: usize = 0;
const T_LAST: usize = 1;
const T_BEFORE_LAST: usize = 2;
const T_SPREAD: usize = 3;
const T_SQUARES: usize = 4;
/// The column of explicit extremes' times.
const T_EXPLICIT: usize = 5;
const TIME_COLUMNS: usize = 6;

/// Which of the point's first, last and second-to-last samples is the extreme at `ts` with
/// value `v`, if one is (same time, same bits).
fn reference(p: &FloatPoint, ts: i64, v: f64) -> u8 {
    let is = |s: Sample| s.timestamp_ms == ts && s.value.to_bits() == v.to_bits();
    if is(p.first) {
        AT_FIRST
    } else if is(p.last) {
        AT_LAST
    } else if p.before_last.is_some_and(is) {
        AT_BEFORE_LAST
    } else {
        EXPLICIT
    }
}

impl Columns {
    fn float(&mut self, field: usize, v: f64) {
        let (Some(col), Some(prev)) = (self.floats.get_mut(field), self.prev.get_mut(field)) else { return };
        col.push(v.to_bits() ^ *prev);
        *prev = v.to_bits();
    }

    /// Stores `v` of time field `slot` as its difference from `guess`.
    fn residual(&mut self, slot: usize, v: i128, guess: i128) {
        if let Some(col) = self.times.get_mut(slot) {
            put_wide(col, v.wrapping_sub(guess));
        }
    }

    /// Stores `v` of time field `slot` as its difference from the point before's.
    fn relative(&mut self, slot: usize, v: i128) {
        let Some(prev) = self.prev_times.get_mut(slot) else { return };
        let Some(col) = self.times.get_mut(slot) else { return };
        put_wide(col, v.wrapping_sub(*prev));
        *prev = v;
    }

    fn offset(&mut self, end: i64, ts: i64) {
        if let Some(col) = self.times.get_mut(T_EXPLICIT) {
            varint::put(col, end.abs_diff(ts));
        }
    }

    fn put_point(&mut self, end: i64, p: &FloatPoint) {
        varint::put(&mut self.counts, p.count);
        if p.count == 0 {
            self.flags.push(ENDS_STALE);
            return;
        }
        let refs = (reference(p, p.min_ts, p.min), reference(p, p.max_ts, p.max));
        let decimal = decimal_form(p, refs);
        let mut flags = (refs.0 << MIN_SHIFT) | (refs.1 << MAX_SHIFT);
        flags |= if p.ends_stale { ENDS_STALE } else { 0 };
        flags |= if p.constant { CONSTANT } else { 0 };
        flags |= if p.resets > 0 { HAS_RESETS } else { 0 };
        flags |= if decimal.is_some() { DECIMAL } else { 0 };
        self.flags.push(flags);
        self.relative(T_FIRST, i128::from(end) - i128::from(p.first.timestamp_ms));
        if p.count >= 2 {
            self.relative(T_LAST, i128::from(end) - i128::from(p.last.timestamp_ms));
        }
        if let (Some(b), true) = (p.before_last, p.count >= 3) {
            self.relative(T_BEFORE_LAST, i128::from(end) - i128::from(b.timestamp_ms));
        }
        if refs.0 == EXPLICIT {
            self.offset(end, p.min_ts);
        }
        if refs.1 == EXPLICIT {
            self.offset(end, p.max_ts);
        }
        // `count * end - Σ ts`: the same number at every point of a regular scrape.
        let n = i128::from(p.count);
        let offsets = i128::from(end - p.first.timestamp_ms) + i128::from(end - p.last.timestamp_ms);
        let span = i128::from(p.last.timestamp_ms) - i128::from(p.first.timestamp_ms);
        let spread = i128::from(end) * n - p.x_sum_ms;
        self.residual(T_SPREAD, spread, line_spread(n, offsets));
        self.residual(T_SQUARES, p.x_sq_ms, line_moments(n, span, span));
        varint::put(&mut self.tallies, p.resets);
        varint::put(&mut self.tallies, p.changes);
        if p.resets > 0 {
            self.float(F_RESET_SUM, p.reset_sum);
        }
        match (decimal, p.exact) {
            (Some(form), Some(e)) => {
                self.scales.push(form.scale);
                // First from the previous point's last; then last from first, and the others
                // from last.
                let mut base = self.prev_mantissa;
                for (i, &m) in form.mantissas.iter().enumerate() {
                    put_wide(&mut self.mantissas, i128::from(m) - i128::from(base));
                    if i == 0 {
                        base = m;
                    } else if i == 1 {
                        self.prev_mantissa = m;
                        base = m;
                    }
                }
                if p.count == 1 {
                    self.prev_mantissa = base;
                }
                let rise = match form.mantissas.as_slice() {
                    [first, last, ..] if p.count >= 2 => i128::from(*last) - i128::from(*first),
                    _ => 0,
                };
                let n = i128::from(p.count);
                let span = i128::from(p.last.timestamp_ms) - i128::from(p.first.timestamp_ms);
                let predicted = [line_s1(n, rise), line_moments(n, rise, rise), line_moments(n, span, rise)];
                for (v, guess) in [e.s1, e.s2, e.sxy].into_iter().zip(predicted) {
                    put_wide(&mut self.moments, v.wrapping_sub(guess));
                }
            }
            _ => {
                self.float(F_FIRST, p.first.value);
                if p.count >= 2 {
                    self.float(F_LAST, p.last.value);
                }
                if let (Some(b), true) = (p.before_last, p.count >= 3) {
                    self.float(F_BEFORE_LAST, b.value);
                }
                if refs.0 == EXPLICIT {
                    self.float(F_MIN, p.min);
                }
                if refs.1 == EXPLICIT {
                    self.float(F_MAX, p.max);
                }
                self.float(F_SUM, p.sum);
                self.float(F_SUM_C, p.sum_c);
                self.float(F_M2, p.m2);
                self.float(F_SXY, p.sxy);
            }
        }
    }

    /// The body: the byte columns, each after its length, then the float chains as byte
    /// planes (the highest byte of every word first).
    fn body(&self) -> Vec<u8> {
        let mut body = Vec::new();
        let [t0, t1, t2, t3, t4, t5] = &self.times;
        for col in [
            &self.steps,
            &self.counts,
            &self.flags,
            t0,
            t1,
            t2,
            t3,
            t4,
            t5,
            &self.tallies,
            &self.scales,
            &self.mantissas,
            &self.moments,
        ] {
            varint::put(&mut body, col.len() as u64);
            body.extend_from_slice(col);
        }
        let words: Vec<u64> = self.floats.iter().flatten().copied().collect();
        for plane in (0..8).rev() {
            body.extend(words.iter().map(|w| (w >> (plane * 8)) as u8));
        }
        body
    }
}

/// Reads a body's columns back, point by point.
struct Reader<'a> {
    steps: &'a [u8],
    counts: &'a [u8],
    flags: &'a [u8],
    times: [&'a [u8]; TIME_COLUMNS],
    tallies: &'a [u8],
    scales: &'a [u8],
    mantissas: &'a [u8],
    moments: &'a [u8],
    prev_mantissa: i64,
    prev_times: [i128; 5],
    /// Byte planes of the float words (highest byte first), `words` bytes each.
    planes: &'a [u8],
    words: usize,
    /// Words read so far, over every field's chain in field order: chain starts are known
    /// only once every point's flags are, so the float words are first sized by a dry pass.
    chain_start: [usize; FLOAT_FIELDS],
    chain_at: [usize; FLOAT_FIELDS],
    prev: [u64; FLOAT_FIELDS],
}

/// Splits a length-prefixed column off `src`.
fn column(src: &[u8]) -> Result<(&[u8], &[u8]), TierRunError> {
    let (len, rest) = varint::read(src)?;
    let len = usize::try_from(len).map_err(|_| TierRunError::Truncated)?;
    if rest.len() < len {
        return Err(TierRunError::Truncated);
    }
    Ok(rest.split_at(len))
}

impl<'a> Reader<'a> {
    fn new(body: &'a [u8], n: usize) -> Result<Self, TierRunError> {
        let (steps, rest) = column(body)?;
        let (counts, rest) = column(rest)?;
        let (flags, rest) = column(rest)?;
        let mut times: [&[u8]; TIME_COLUMNS] = [&[]; TIME_COLUMNS];
        let mut rest = rest;
        for t in &mut times {
            (*t, rest) = column(rest)?;
        }
        let (tallies, rest) = column(rest)?;
        let (scales, rest) = column(rest)?;
        let (mantissas, rest) = column(rest)?;
        let (moments, planes) = column(rest)?;
        if flags.len() != n || planes.len() % 8 != 0 {
            return Err(TierRunError::Invalid("column sizes"));
        }
        // Words per field, from the counts and flags alone.
        let mut per_field = [0usize; FLOAT_FIELDS];
        let mut counts_left = counts;
        for &f in flags {
            let (count, rest) = varint::read(counts_left)?;
            counts_left = rest;
            for field in fields_of(count, f) {
                if let Some(c) = per_field.get_mut(field) {
                    *c += 1;
                }
            }
        }
        let words = planes.len() / 8;
        if per_field.iter().sum::<usize>() != words {
            return Err(TierRunError::Invalid("float column size"));
        }
        let mut chain_start = [0usize; FLOAT_FIELDS];
        let mut at = 0;
        for (start, len) in chain_start.iter_mut().zip(per_field) {
            *start = at;
            at += len;
        }
        Ok(Self {
            steps,
            counts,
            flags,
            times,
            tallies,
            scales,
            mantissas,
            moments,
            prev_mantissa: 0,
            prev_times: [0; 5],
            planes,
            words,
            chain_start,
            chain_at: [0; FLOAT_FIELDS],
            prev: [0; FLOAT_FIELDS],
        })
    }

    fn is_exhausted(&self) -> bool {
        [self.steps, self.counts, self.tallies, self.scales, self.mantissas, self.moments]
            .iter()
            .chain(self.times.iter())
            .all(|c| c.is_empty())
    }

    fn step(&mut self) -> Result<i64, TierRunError> {
        let (v, rest) = varint::read(self.steps)?;
        self.steps = rest;
        i64::try_from(v).ok().filter(|&s| s > 0).ok_or(TierRunError::Invalid("interval step"))
    }

    fn varint(src: &mut &'a [u8]) -> Result<u64, TierRunError> {
        let (v, rest) = varint::read(src)?;
        *src = rest;
        Ok(v)
    }

    /// Time field `slot`, stored as its difference from `guess`.
    fn residual(&mut self, slot: usize, guess: i128) -> Result<i128, TierRunError> {
        let col = self.times.get_mut(slot).ok_or(TierRunError::Invalid("time field"))?;
        Ok(read_wide(col)?.wrapping_add(guess))
    }

    /// Time field `slot`, stored as its difference from the point before's.
    fn relative(&mut self, slot: usize) -> Result<i128, TierRunError> {
        let col = self.times.get_mut(slot).ok_or(TierRunError::Invalid("time field"))?;
        let delta = read_wide(col)?;
        let prev = self.prev_times.get_mut(slot).ok_or(TierRunError::Invalid("time field"))?;
        *prev = prev.wrapping_add(delta);
        Ok(*prev)
    }

    /// A sample time stored as [`Reader::relative`] offset back from `end`.
    fn relative_time(&mut self, slot: usize, end: i64) -> Result<i64, TierRunError> {
        let back = self.relative(slot)?;
        i128::from(end)
            .checked_sub(back)
            .and_then(|t| i64::try_from(t).ok())
            .ok_or(TierRunError::Invalid("time offset"))
    }

    fn time(&mut self, end: i64) -> Result<i64, TierRunError> {
        let col = self.times.get_mut(T_EXPLICIT).ok_or(TierRunError::Invalid("time field"))?;
        let back = Self::varint(col)?;
        i64::try_from(back).ok().and_then(|b| end.checked_sub(b)).ok_or(TierRunError::Invalid("time offset"))
    }

    fn float(&mut self, field: usize) -> Result<f64, TierRunError> {
        let (Some(start), Some(at), Some(prev)) =
            (self.chain_start.get(field), self.chain_at.get_mut(field), self.prev.get_mut(field))
        else {
            return Err(TierRunError::Invalid("float field"));
        };
        let i = start + *at;
        *at += 1;
        let mut word = 0u64;
        for plane in 0..8 {
            let byte = self.planes.get(plane * self.words + i).ok_or(TierRunError::Truncated)?;
            word = (word << 8) | u64::from(*byte);
        }
        *prev ^= word;
        Ok(f64::from_bits(*prev))
    }

    fn point(&mut self, end: i64) -> Result<FloatPoint, TierRunError> {
        let count = Self::varint(&mut self.counts)?;
        let (&flags, rest) = self.flags.split_first().ok_or(TierRunError::Truncated)?;
        self.flags = rest;
        let mut p = FloatPoint::stale_only();
        if count == 0 {
            return if flags == ENDS_STALE { Ok(p) } else { Err(TierRunError::Invalid("flags of an empty point")) };
        }
        let (min_ref, max_ref) = ((flags >> MIN_SHIFT) & 3, (flags >> MAX_SHIFT) & 3);
        p.count = count;
        p.ends_stale = flags & ENDS_STALE != 0;
        p.constant = flags & CONSTANT != 0;
        // Times first (every point stores them alike), values after.
        let first_ts = self.relative_time(T_FIRST, end)?;
        let last_ts = if count >= 2 { self.relative_time(T_LAST, end)? } else { first_ts };
        let before_last_ts = if count >= 3 { Some(self.relative_time(T_BEFORE_LAST, end)?) } else { None };
        let min_ts = if min_ref == EXPLICIT { Some(self.time(end)?) } else { None };
        let max_ts = if max_ref == EXPLICIT { Some(self.time(end)?) } else { None };
        let n = i128::from(count);
        let offsets = i128::from(end) * 2 - i128::from(first_ts) - i128::from(last_ts);
        let span = i128::from(last_ts) - i128::from(first_ts);
        let spread = self.residual(T_SPREAD, line_spread(n, offsets))?;
        p.x_sq_ms = self.residual(T_SQUARES, line_moments(n, span, span))?;
        p.x_sum_ms = i128::from(end)
            .checked_mul(i128::from(count))
            .and_then(|e| e.checked_sub(spread))
            .ok_or(TierRunError::Invalid("timestamp sum"))?;
        p.resets = Self::varint(&mut self.tallies)?;
        p.changes = Self::varint(&mut self.tallies)?;
        if (flags & HAS_RESETS != 0) != (p.resets > 0) {
            return Err(TierRunError::Invalid("reset flag"));
        }
        p.reset_sum = if p.resets > 0 { self.float(F_RESET_SUM)? } else { -0.0 };
        let values = if flags & DECIMAL != 0 {
            self.decimal_values(&mut p, (count, min_ref, max_ref), span)?
        } else {
            let mut v: Values = smallvec::smallvec![self.float(F_FIRST)?];
            if count >= 2 {
                v.push(self.float(F_LAST)?);
            }
            if count >= 3 {
                v.push(self.float(F_BEFORE_LAST)?);
            }
            if min_ref == EXPLICIT {
                v.push(self.float(F_MIN)?);
            }
            if max_ref == EXPLICIT {
                v.push(self.float(F_MAX)?);
            }
            p.sum = self.float(F_SUM)?;
            p.sum_c = self.float(F_SUM_C)?;
            p.m2 = self.float(F_M2)?;
            p.sxy = self.float(F_SXY)?;
            v
        };
        let mut values = values.into_iter();
        let mut next = || values.next().ok_or(TierRunError::Invalid("values"));
        p.first = Sample::new(first_ts, next()?);
        p.last = p.first;
        if count >= 2 {
            p.last = Sample::new(last_ts, next()?);
            p.before_last = Some(p.first);
        }
        if let Some(ts) = before_last_ts {
            p.before_last = Some(Sample::new(ts, next()?));
        }
        (p.min_ts, p.min) = match min_ts {
            Some(ts) => (ts, next()?),
            None => referenced(&p, min_ref)?,
        };
        (p.max_ts, p.max) = match max_ts {
            Some(ts) => (ts, next()?),
            None => referenced(&p, max_ref)?,
        };
        if flags & DECIMAL != 0 {
            p = p.from_exact().ok_or(TierRunError::Invalid("exact moments"))?;
        }
        Ok(p)
    }

    /// The values of a decimal point (as [`decimal_form`] lists them), its exact moments set
    /// in `p`; `span` is its last sample's time minus its first's.
    fn decimal_values(
        &mut self,
        p: &mut FloatPoint,
        (count, min_ref, max_ref): (u64, u8, u8),
        span: i128,
    ) -> Result<Values, TierRunError> {
        let (&scale, rest) = self.scales.split_first().ok_or(TierRunError::Truncated)?;
        self.scales = rest;
        let stored = 1
            + usize::from(count >= 2)
            + usize::from(count >= 3)
            + usize::from(min_ref == EXPLICIT)
            + usize::from(max_ref == EXPLICIT);
        let mut base = self.prev_mantissa;
        let mut values = Values::new();
        let mut values_m = smallvec::SmallVec::<[i64; 5]>::new();
        for i in 0..stored {
            let m = i128::from(base)
                .checked_add(read_wide(&mut self.mantissas)?)
                .and_then(|m| i64::try_from(m).ok())
                .ok_or(TierRunError::Invalid("mantissa"))?;
            values.push(decimal::value(m, scale).ok_or(TierRunError::Invalid("decimal scale"))?);
            values_m.push(m);
            if i == 0 || i == 1 {
                base = m;
            }
            if i == 1 || (i == 0 && count == 1) {
                self.prev_mantissa = m;
            }
        }
        let rise = match values_m.as_slice() {
            [first, last, ..] if count >= 2 => i128::from(*last) - i128::from(*first),
            _ => 0,
        };
        let n = i128::from(count);
        let mut moment = |guess: i128| read_wide(&mut self.moments).map(|r| r.wrapping_add(guess));
        p.exact = Some(Exact {
            scale,
            s1: moment(line_s1(n, rise))?,
            s2: moment(line_moments(n, rise, rise))?,
            sxy: moment(line_moments(n, span, rise))?,
        });
        Ok(values)
    }
}

/// The predictions that moments are stored against: what they would be if a point's `n`
/// samples lay evenly spaced on the straight line from its first sample to its last (a
/// counter at a steady rate, scraped on time). Counters and regular scrapes then leave small
/// residuals; anything else costs no more than the moments themselves would. Integer
/// arithmetic, saturating, the same on both sides of the codec.
///
/// `Σ (i·a/k)(i·b/k)` over `i = 0..=k`, `k = n - 1`: the second moments (`x_sq_ms` with
/// `a = b = span`, `s2` with `a = b = rise`, `sxy` with `a = span`, `b = rise`).
fn line_moments(n: i128, a: i128, b: i128) -> i128 {
    let k = n - 1;
    if k < 1 {
        return 0;
    }
    // In 64 bits when nothing overflows there (the common case, and the same result).
    let narrow = || -> Option<i64> {
        let (k, n, a, b) =
            (i64::try_from(k).ok()?, i64::try_from(n).ok()?, i64::try_from(a).ok()?, i64::try_from(b).ok()?);
        let squares = k.checked_mul(n)?.checked_mul(2 * k + 1)? / 6;
        Some(a.checked_mul(b)?.checked_mul(squares)? / k.checked_mul(k)?)
    };
    if let Some(v) = narrow() {
        return i128::from(v);
    }
    let squares = quotient(k.saturating_mul(n).saturating_mul(2 * k + 1), 6);
    quotient(a.saturating_mul(b).saturating_mul(squares), k.saturating_mul(k))
}

/// `a / b` rounded towards zero (`b > 0`), in 64 bits when both fit: a 128-bit division
/// costs several times more, and decoding does a few per point.
fn quotient(a: i128, b: i128) -> i128 {
    match (i64::try_from(a), i64::try_from(b)) {
        (Ok(a), Ok(b)) if b > 0 => i128::from(a / b),
        _ => a / b.max(1),
    }
}

/// `Σ i·rise/k` over `i = 0..=k`: `s1` on the line.
fn line_s1(n: i128, rise: i128) -> i128 {
    if n < 2 {
        return 0;
    }
    quotient(rise.saturating_mul(n), 2)
}

/// `n·end - Σ t` on the line, from the first and last samples' offsets back from the end.
fn line_spread(n: i128, offsets: i128) -> i128 {
    quotient(n.saturating_mul(offsets), 2)
}

/// The values a point stores (at most five: first, last, second-to-last, minimum, maximum),
/// kept off the heap while a point is decoded.
type Values = smallvec::SmallVec<[f64; 5]>;

/// The time and value of the sample an extreme refers to.
fn referenced(p: &FloatPoint, at: u8) -> Result<(i64, f64), TierRunError> {
    let s = match at {
        AT_FIRST => p.first,
        AT_LAST => p.last,
        AT_BEFORE_LAST => p.before_last.ok_or(TierRunError::Invalid("extreme reference"))?,
        _ => return Err(TierRunError::Invalid("extreme reference")),
    };
    Ok((s.timestamp_ms, s.value))
}

/// The float fields a point of `count` samples with `flags` stores, in the order written.
fn fields_of(count: u64, flags: u8) -> impl Iterator<Item = usize> {
    let (one, two, three) = (count >= 1, count >= 2, count >= 3);
    let floats = one && flags & DECIMAL == 0;
    [
        (F_FIRST, floats),
        (F_LAST, floats && two),
        (F_BEFORE_LAST, floats && three),
        (F_MIN, floats && (flags >> MIN_SHIFT) & 3 == EXPLICIT),
        (F_MAX, floats && (flags >> MAX_SHIFT) & 3 == EXPLICIT),
        (F_SUM, floats),
        (F_SUM_C, floats),
        (F_M2, floats),
        (F_SXY, floats),
        (F_RESET_SUM, one && flags & HAS_RESETS != 0),
    ]
    .into_iter()
    .filter_map(|(field, stored)| stored.then_some(field))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::sample::STALE_NAN_BITS;

    /// Points of random samples (signed zeros, NaN, ±Inf, staleness markers) in random
    /// intervals of `interval`.
    /// Generated intervals: how many intervals after the previous one, and samples as
    /// `(offset back from the end, value kind, number)`.
    type Picks = [(i64, Vec<(i64, u8, i16)>)];

    fn run(interval: i64, picks: &Picks) -> Vec<(i64, FloatPoint)> {
        let mut index = 1i64;
        let mut out = Vec::new();
        for (skip, samples) in picks {
            index += skip;
            let end = index * interval;
            let mut raw: Vec<Sample> = samples
                .iter()
                .map(|&(at, kind, n)| {
                    let v = match kind % 10 {
                        0 => f64::from_bits(STALE_NAN_BITS),
                        1 => f64::NAN,
                        2 => f64::INFINITY,
                        3 => -0.0,
                        4 => f64::from(n) / 3.0,
                        5 | 6 => f64::from(n) / 100.0,
                        _ => f64::from(n % 9),
                    };
                    Sample::new(end - at.rem_euclid(interval), v)
                })
                .collect();
            raw.sort_by_key(|s| s.timestamp_ms);
            raw.dedup_by_key(|s| s.timestamp_ms);
            if let Some(p) = FloatPoint::of(&raw) {
                out.push((end, p));
            }
        }
        out
    }

    /// What a run keeps of `points`: each one, with its moments rebuilt from the exact ones
    /// where it is stored in decimal form, and without exact moments where it is not.
    fn stored(points: &[(i64, FloatPoint)]) -> Vec<(i64, FloatPoint)> {
        points
            .iter()
            .map(|&(e, p)| {
                let refs = (reference(&p, p.min_ts, p.min), reference(&p, p.max_ts, p.max));
                match decimal_form(&p, refs) {
                    Some(_) => (e, p.from_exact().unwrap()),
                    None => (e, FloatPoint { exact: None, ..p }),
                }
            })
            .collect()
    }

    fn bits(points: &[(i64, FloatPoint)]) -> String {
        // Debug output prints every field; NaN payloads are compared through `to_bits` below.
        points
            .iter()
            .map(|(e, p)| {
                let floats = [p.first.value, p.last.value, p.min, p.max, p.sum, p.sum_c, p.m2, p.sxy, p.reset_sum]
                    .map(f64::to_bits);
                format!("{e} {p:?} {floats:?} {:?}", p.before_last.map(|s| s.value.to_bits()))
            })
            .collect()
    }

    proptest! {
        #[test]
        fn every_field_round_trips_to_the_bit(
            interval in prop::sample::select(vec![1_000i64, 300_000, 3_600_000]),
            picks in prop::collection::vec((1i64..5, prop::collection::vec((0i64..3_600_000, any::<u8>(), any::<i16>()), 1..30)), 1..40),
        ) {
            let points = run(interval, &picks);
            prop_assume!(!points.is_empty());
            let mut bytes = Vec::new();
            encode(interval, &points, &mut bytes).unwrap();
            let (got_interval, got) = decode(&bytes).unwrap();
            prop_assert_eq!(got_interval, interval);
            prop_assert_eq!(bits(&got), bits(&stored(&points)));
        }

        #[test]
        fn damaged_bytes_are_an_error_not_a_panic(
            picks in prop::collection::vec((1i64..5, prop::collection::vec((0i64..300_000, any::<u8>(), any::<i16>()), 1..30)), 1..10),
            cut in any::<prop::sample::Index>(),
            flip in any::<(prop::sample::Index, u8)>(),
        ) {
            let points = run(300_000, &picks);
            prop_assume!(!points.is_empty());
            let mut bytes = Vec::new();
            encode(300_000, &points, &mut bytes).unwrap();
            let _ = decode(&bytes[..cut.index(bytes.len())]);
            let mut flipped = bytes.clone();
            let at = flip.0.index(flipped.len());
            flipped[at] ^= flip.1.max(1);
            let _ = decode(&flipped);
        }
    }

    #[test]
    fn encoding_refuses_what_a_run_cannot_hold() {
        let p = FloatPoint::of(&[Sample::new(250_000, 1.0)]).unwrap();
        let mut out = Vec::new();
        assert!(encode(300_000, &[], &mut out).is_err());
        assert!(encode(300_000, &[(299_999, p)], &mut out).is_err());
        assert!(encode(300_000, &[(600_000, p)], &mut out).is_err(), "sample outside the interval");
        assert!(encode(300_000, &[(300_000, p), (300_000, p)], &mut out).is_err());
        assert!(encode(300_000, &[(300_000, p)], &mut out).is_ok());
        assert_eq!(decode(&[9]), Err(TierRunError::Unsupported(9)));
    }

    /// A regular scrape's points differ only in their values: 5-minute points of a counter
    /// scraped every 15 s take a few bytes each.
    #[test]
    fn regular_points_are_small() {
        let points: Vec<(i64, FloatPoint)> = (1..=288)
            .map(|k| {
                let end = k * 300_000;
                let raw: Vec<Sample> =
                    (0..20).map(|i| Sample::new(end - 285_000 + i * 15_000, (k * 20 + i) as f64 * 3.0)).collect();
                (end, FloatPoint::of(&raw).unwrap())
            })
            .collect();
        let mut bytes = Vec::new();
        encode(300_000, &points, &mut bytes).unwrap();
        assert!(bytes.len() < 288 * 16, "{} bytes for 288 points", bytes.len());
    }
}
