//! The tier-run codec: one series' [`FloatPoint`]s of one tier (one interval) in one window,
//! as columns under zstd. Pure: no I/O. Byte layout: `docs/format.md`, *Tier runs*.
//!
//! Each point is stored with the end of its interval; times inside a point are offsets back
//! from that end (small, and equal from point to point for regular scrapes), floats are XORed
//! with the same field of the point before and split into byte planes (equal fields cost
//! zero bytes before zstd sees them), and the extremes refer to the first, last or
//! second-to-last sample when they are one of those (a counter's minimum is its first sample).
//!
//! Invariants: points are in strictly ascending interval order, each end a multiple of the
//! interval, every sample of a point inside `(end - interval, end]`; every field round-trips
//! to the bit.

use crate::sample::Sample;
use crate::tier::FloatPoint;
use crate::varint;

/// Format version of tier runs.
pub const FORMAT_VERSION: u8 = 1;
/// zstd level of tier runs.
pub const ZSTD_LEVEL: i32 = 3;
/// Most points a run may claim (a year of 1-minute points; bounds allocation when decoding).
pub const MAX_POINTS: u64 = 1 << 20;
/// Most body bytes a point can take: a flags byte, 11 varints of at most 10 bytes and 11
/// floats (the five column lengths come on top, once per run).
const MAX_POINT_BYTES: u64 = 1 + 11 * 10 + 11 * 8;

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
    if body_len > n * MAX_POINT_BYTES + 50 {
        return Err(TierRunError::Invalid("body length"));
    }
    let body = zstd::bulk::decompress(payload, body_len as usize).map_err(|e| TierRunError::Zstd(e.to_string()))?;
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

/// The columns of a run's body while it is written.
#[derive(Default)]
struct Columns {
    /// Interval steps between points (varints, from the second point on).
    steps: Vec<u8>,
    /// Per point: sample count (varint).
    counts: Vec<u8>,
    /// Per point: flags byte.
    flags: Vec<u8>,
    /// Times as offsets back from the point's end, and the offset of the timestamp sum
    /// (varints).
    times: Vec<u8>,
    /// Resets and changes (varints).
    tallies: Vec<u8>,
    /// Float fields, each XORed with the same field of the point before: one chain per field.
    floats: [Vec<u64>; FLOAT_FIELDS],
    prev: [u64; FLOAT_FIELDS],
}

/// The float fields, in column order.
const FLOAT_FIELDS: usize = 12;
const F_FIRST: usize = 0;
const F_LAST: usize = 1;
const F_BEFORE_LAST: usize = 2;
const F_MIN: usize = 3;
const F_MAX: usize = 4;
const F_SUM: usize = 5;
const F_SUM_C: usize = 6;
const F_M2: usize = 7;
const F_SXX: usize = 8;
const F_SXY: usize = 9;
const F_RESET_SUM: usize = 10;
/// Unused in version 1 (kept so a field can be added without moving the others).
const _F_SPARE: usize = 11;

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

    fn offset(&mut self, end: i64, ts: i64) {
        varint::put(&mut self.times, end.abs_diff(ts));
    }

    fn put_point(&mut self, end: i64, p: &FloatPoint) {
        varint::put(&mut self.counts, p.count);
        if p.count == 0 {
            self.flags.push(ENDS_STALE);
            return;
        }
        let (min_ref, max_ref) = (reference(p, p.min_ts, p.min), reference(p, p.max_ts, p.max));
        let mut flags = (min_ref << MIN_SHIFT) | (max_ref << MAX_SHIFT);
        flags |= if p.ends_stale { ENDS_STALE } else { 0 };
        flags |= if p.constant { CONSTANT } else { 0 };
        flags |= if p.resets > 0 { HAS_RESETS } else { 0 };
        self.flags.push(flags);
        self.offset(end, p.first.timestamp_ms);
        self.float(F_FIRST, p.first.value);
        if p.count >= 2 {
            self.offset(end, p.last.timestamp_ms);
            self.float(F_LAST, p.last.value);
        }
        if let (Some(b), true) = (p.before_last, p.count >= 3) {
            self.offset(end, b.timestamp_ms);
            self.float(F_BEFORE_LAST, b.value);
        }
        if min_ref == EXPLICIT {
            self.offset(end, p.min_ts);
            self.float(F_MIN, p.min);
        }
        if max_ref == EXPLICIT {
            self.offset(end, p.max_ts);
            self.float(F_MAX, p.max);
        }
        // `count * end - Σ ts`: the same number at every point of a regular scrape.
        let spread = i128::from(end) * i128::from(p.count) - p.x_sum_ms;
        varint::put(&mut self.times, spread.unsigned_abs() as u64);
        varint::put(&mut self.times, (spread.unsigned_abs() >> 64) as u64);
        {
            self.float(F_SUM, p.sum);
            self.float(F_SUM_C, p.sum_c);
            self.float(F_M2, p.m2);
            self.float(F_SXX, p.sxx);
            self.float(F_SXY, p.sxy);
            varint::put(&mut self.tallies, p.resets);
            varint::put(&mut self.tallies, p.changes);
        }
        if p.resets > 0 {
            self.float(F_RESET_SUM, p.reset_sum);
        }
    }

    /// The body: the byte columns, each after its length, then the float chains as byte
    /// planes (the highest byte of every word first).
    fn body(&self) -> Vec<u8> {
        let mut body = Vec::new();
        for col in [&self.steps, &self.counts, &self.flags, &self.times, &self.tallies] {
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
    times: &'a [u8],
    tallies: &'a [u8],
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
        let (times, rest) = column(rest)?;
        let (tallies, planes) = column(rest)?;
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
            planes,
            words,
            chain_start,
            chain_at: [0; FLOAT_FIELDS],
            prev: [0; FLOAT_FIELDS],
        })
    }

    fn is_exhausted(&self) -> bool {
        self.steps.is_empty() && self.counts.is_empty() && self.times.is_empty() && self.tallies.is_empty()
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

    fn time(&mut self, end: i64) -> Result<i64, TierRunError> {
        let back = Self::varint(&mut self.times)?;
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
        p.count = count;
        p.ends_stale = flags & ENDS_STALE != 0;
        p.constant = flags & CONSTANT != 0;
        p.first = Sample::new(self.time(end)?, self.float(F_FIRST)?);
        p.last = p.first;
        if count >= 2 {
            p.last = Sample::new(self.time(end)?, self.float(F_LAST)?);
            p.before_last = Some(p.first);
        }
        if count >= 3 {
            p.before_last = Some(Sample::new(self.time(end)?, self.float(F_BEFORE_LAST)?));
        }
        (p.min_ts, p.min) = self.extreme(&p, end, (flags >> MIN_SHIFT) & 3, F_MIN)?;
        (p.max_ts, p.max) = self.extreme(&p, end, (flags >> MAX_SHIFT) & 3, F_MAX)?;
        let low = Self::varint(&mut self.times)?;
        let high = Self::varint(&mut self.times)?;
        let spread = i128::from(low) | (i128::from(high) << 64);
        p.x_sum_ms = i128::from(end)
            .checked_mul(i128::from(count))
            .and_then(|e| e.checked_sub(spread))
            .ok_or(TierRunError::Invalid("timestamp sum"))?;
        p.sum = self.float(F_SUM)?;
        p.sum_c = self.float(F_SUM_C)?;
        p.m2 = self.float(F_M2)?;
        p.sxx = self.float(F_SXX)?;
        p.sxy = self.float(F_SXY)?;
        p.resets = Self::varint(&mut self.tallies)?;
        p.changes = Self::varint(&mut self.tallies)?;
        if (flags & HAS_RESETS != 0) != (p.resets > 0) {
            return Err(TierRunError::Invalid("reset flag"));
        }
        p.reset_sum = if p.resets > 0 { self.float(F_RESET_SUM)? } else { 0.0 };
        Ok(p)
    }

    fn extreme(&mut self, p: &FloatPoint, end: i64, at: u8, field: usize) -> Result<(i64, f64), TierRunError> {
        let s = match at {
            AT_FIRST => p.first,
            AT_LAST => p.last,
            AT_BEFORE_LAST => p.before_last.ok_or(TierRunError::Invalid("extreme reference"))?,
            _ => return Ok((self.time(end)?, self.float(field)?)),
        };
        Ok((s.timestamp_ms, s.value))
    }
}

/// The float fields a point of `count` samples with `flags` stores, in the order written.
fn fields_of(count: u64, flags: u8) -> impl Iterator<Item = usize> {
    let (one, two) = (count >= 1, count >= 2);
    [
        (F_FIRST, count >= 1),
        (F_LAST, two),
        (F_BEFORE_LAST, count >= 3),
        (F_MIN, count >= 1 && (flags >> MIN_SHIFT) & 3 == EXPLICIT),
        (F_MAX, count >= 1 && (flags >> MAX_SHIFT) & 3 == EXPLICIT),
        (F_SUM, one),
        (F_SUM_C, one),
        (F_M2, one),
        (F_SXX, one),
        (F_SXY, one),
        (F_RESET_SUM, count >= 1 && flags & HAS_RESETS != 0),
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

    fn bits(points: &[(i64, FloatPoint)]) -> String {
        // Debug output prints every field; NaN payloads are compared through `to_bits` below.
        points
            .iter()
            .map(|(e, p)| {
                let floats =
                    [p.first.value, p.last.value, p.min, p.max, p.sum, p.sum_c, p.m2, p.sxx, p.sxy, p.reset_sum]
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
            prop_assert_eq!(bits(&got), bits(&points));
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
