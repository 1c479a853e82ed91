//! The cold-chunk codec: a run of samples of one series, either encoded Gorilla-style
//! (delta-of-delta timestamps, XOR-compressed float bits) and compressed with zstd, or, when the
//! values are short decimals, as columns of byte planes (version 3). Pure: no I/O.
//!
//! Versions: 1 is Gorilla (delta-of-delta timestamps, XOR floats) under zstd, the fallback that
//! keeps every bit pattern; 2 (decimal mantissas as varints, decoded only) and 3 (columnar: grid
//! timestamps and decimal mantissas split into byte planes, each raw, constant or its own zstd
//! frame) are for runs of short decimals, nearly all scraped values. Byte layouts of all three:
//! `docs/format.md`, *Chunks*.
//!
//! Invariants: samples must be sorted by strictly ascending timestamp; every f64 bit pattern
//! (NaN payloads, staleness markers, -0.0) round-trips exactly (runs holding such values use
//! version 1).

use crate::bits::{BitReader, BitWriter, EndOfBits};
use crate::sample::Sample;

/// Gorilla bit-stream chunk format.
pub const FORMAT_VERSION: u8 = 1;
/// Decimal-mantissa chunk format (decoded only; new decimal runs use version 3).
pub const FORMAT_VERSION_DECIMAL: u8 = 2;
/// Columnar chunk format: grid timestamps and decimal mantissas in byte planes.
pub const FORMAT_VERSION_COLUMNS: u8 = 3;
const HEADER_LEN: usize = 11;
/// Most samples in one chunk: 24 h of 15 s scrapes, so one chunk per series per day window.
/// Measured with `saltdb-bench size` (2,500 node-exporter-like series, 24 h): Gorilla/decimal
/// chunks took 2.47 B/sample at 720 samples and 2.32 at 2,880; the columnar format (version 3,
/// zstd level 11) took 1.222 at 2,880 and 1.211 at 5,760 (less framing per sample), while a
/// 24 h query over sealed data stayed far faster than over hot rows.
pub const CHUNK_SAMPLES: usize = 5760;
/// zstd level of new chunks (recorded per chunk, so it may change later). Version-3 byte planes
/// are mostly short random-looking symbol streams, where zstd's matchers take spurious short
/// matches that cost more than Huffman literals: level 9 gave 1.296 B/sample (2,880-sample
/// chunks). The codec sets zstd's minimum match to 7 bytes, and then level 3 gives 1.224 at
/// 5,760 samples, level 9 no better (1.242). Levels 11 and up (btopt on inputs this small) give
/// 1.211 at 2-3x the encode time, but trip an AddressSanitizer report inside zstd-sys' C code
/// when fuzzed (see `fuzz/src/lib.rs`).
pub const ZSTD_LEVEL: i32 = 3;
/// Largest sample count a chunk may claim (bounds allocation when decoding hostile bytes).
pub const MAX_CHUNK_SAMPLES: u32 = 1 << 20;

impl From<EndOfBits> for ChunkError {
    fn from(_: EndOfBits) -> Self {
        Self::Truncated
    }
}

/// Why a chunk could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    /// The bytes end before the header or bit stream does.
    #[error("chunk is truncated")]
    Truncated,
    /// Unknown format version or dictionary.
    #[error("unsupported chunk format version {version} / dictionary {dict}")]
    Unsupported {
        /// Version byte.
        version: u8,
        /// Dictionary id.
        dict: u8,
    },
    /// The header claims an impossible size.
    #[error("chunk header is invalid: {0}")]
    BadHeader(&'static str),
    /// zstd could not decompress the payload.
    #[error("chunk payload does not decompress: {0}")]
    Zstd(String),
    /// Encoding was asked for an empty or unsorted run.
    #[error("chunk samples must be non-empty and strictly ascending by timestamp")]
    Unsorted,
}

/// Sign-extends the low `n` bits of `v`.
fn sign_extend(v: u64, n: u32) -> i64 {
    let shift = 64 - n;
    ((v << shift) as i64) >> shift
}

fn fits(v: i64, bits: u32) -> bool {
    let half = 1i64 << (bits - 1);
    (-half..half).contains(&v)
}

fn write_dod(w: &mut BitWriter, dod: i64) {
    if dod == 0 {
        w.write(0, 1);
    } else if fits(dod, 7) {
        w.write(0b10, 2);
        w.write(dod as u64, 7);
    } else if fits(dod, 9) {
        w.write(0b110, 3);
        w.write(dod as u64, 9);
    } else if fits(dod, 12) {
        w.write(0b1110, 4);
        w.write(dod as u64, 12);
    } else {
        w.write(0b1111, 4);
        w.write(dod as u64, 64);
    }
}

fn read_dod(r: &mut BitReader<'_>) -> Result<i64, ChunkError> {
    let mut ones = 0;
    while ones < 4 && r.bit()? {
        ones += 1;
    }
    Ok(match ones {
        0 => 0,
        1 => sign_extend(r.read(7)?, 7),
        2 => sign_extend(r.read(9)?, 9),
        3 => sign_extend(r.read(12)?, 12),
        _ => r.read(64)? as i64,
    })
}

/// XOR state: the previous value's bits and the previous meaningful-bits window.
struct Xor {
    prev: u64,
    leading: u32,
    trailing: u32,
}

impl Xor {
    fn write(&mut self, w: &mut BitWriter, bits: u64) {
        let x = bits ^ self.prev;
        self.prev = bits;
        if x == 0 {
            w.write(0, 1);
            return;
        }
        let (leading, trailing) = (x.leading_zeros().min(63), x.trailing_zeros());
        if self.leading != u32::MAX && leading >= self.leading && trailing >= self.trailing {
            w.write(0b10, 2);
            w.write(x >> self.trailing, 64 - self.leading - self.trailing);
        } else {
            let len = 64 - leading - trailing;
            w.write(0b11, 2);
            w.write(u64::from(leading), 6);
            w.write(u64::from(len - 1), 6);
            w.write(x >> trailing, len);
            self.leading = leading;
            self.trailing = trailing;
        }
    }

    fn read(&mut self, r: &mut BitReader<'_>) -> Result<u64, ChunkError> {
        if !r.bit()? {
            return Ok(self.prev);
        }
        if r.bit()? {
            self.leading = r.read(6)? as u32;
            let len = r.read(6)? as u32 + 1;
            if self.leading + len > 64 {
                return Err(ChunkError::BadHeader("xor window beyond 64 bits"));
            }
            self.trailing = 64 - self.leading - len;
        } else if self.leading == u32::MAX {
            return Err(ChunkError::BadHeader("xor window reused before being set"));
        }
        let len = 64 - self.leading - self.trailing;
        let x = r.read(len)? << self.trailing;
        self.prev ^= x;
        Ok(self.prev)
    }
}

/// Encodes a run of samples (non-empty, strictly ascending timestamps) at a zstd `level`.
///
/// # Errors
/// [`ChunkError::Unsorted`] for an empty or unsorted run; [`ChunkError::Zstd`] if zstd fails.
pub fn encode(samples: &[Sample], level: i32, dst: &mut Vec<u8>) -> Result<(), ChunkError> {
    let Some(first) = samples.first() else { return Err(ChunkError::Unsorted) };
    if samples.windows(2).any(|w| matches!(w, [a, b] if a.timestamp_ms >= b.timestamp_ms))
        || samples.len() > MAX_CHUNK_SAMPLES as usize
    {
        return Err(ChunkError::Unsorted);
    }
    let level = level.clamp(1, 22);
    if let Some((e, m)) = decimal::mantissas(samples) {
        return columns::encode(samples, e, &m, level, dst);
    }
    let (version, body) = (FORMAT_VERSION, gorilla_body(first, samples));
    let compressed = zstd::bulk::compress(&body, level).map_err(|e| ChunkError::Zstd(e.to_string()))?;
    let (level_byte, payload) = if compressed.len() < body.len() { (level as u8, &compressed) } else { (0, &body) };
    dst.push(version);
    dst.push(level_byte);
    dst.push(0);
    dst.extend_from_slice(&(samples.len() as u32).to_le_bytes());
    dst.extend_from_slice(&(body.len() as u32).to_le_bytes());
    dst.extend_from_slice(payload);
    Ok(())
}

fn gorilla_body(first: &Sample, samples: &[Sample]) -> Vec<u8> {
    let mut w = BitWriter::new();
    w.write(first.timestamp_ms as u64, 64);
    w.write(first.value.to_bits(), 64);
    let mut xor = Xor { prev: first.value.to_bits(), leading: u32::MAX, trailing: 0 };
    let (mut prev_ts, mut prev_delta) = (first.timestamp_ms, 0i64);
    for s in samples.iter().skip(1) {
        let delta = s.timestamp_ms.wrapping_sub(prev_ts);
        write_dod(&mut w, delta.wrapping_sub(prev_delta));
        (prev_ts, prev_delta) = (s.timestamp_ms, delta);
        xor.write(&mut w, s.value.to_bits());
    }
    w.into_bytes()
}

fn u32_at(src: &[u8], at: usize) -> Result<u32, ChunkError> {
    let b = src.get(at..at + 4).ok_or(ChunkError::Truncated)?;
    Ok(u32::from_le_bytes(b.try_into().map_err(|_| ChunkError::Truncated)?))
}

/// Decodes a chunk, appending its samples to `out` in ascending order. Never panics on
/// arbitrary input.
///
/// # Errors
/// [`ChunkError`] describing what is wrong with the bytes.
pub fn decode(src: &[u8], out: &mut Vec<Sample>) -> Result<(), ChunkError> {
    if src.len() < HEADER_LEN {
        return Err(ChunkError::Truncated);
    }
    let (version, dict) = (src.first().copied().unwrap_or(0), src.get(2).copied().unwrap_or(0));
    if !(version == FORMAT_VERSION || version == FORMAT_VERSION_DECIMAL || version == FORMAT_VERSION_COLUMNS)
        || dict != 0
    {
        return Err(ChunkError::Unsupported { version, dict });
    }
    if version == FORMAT_VERSION_COLUMNS {
        return columns::decode(src, out);
    }
    let n = u32_at(src, 3)?;
    let raw_len = u32_at(src, 7)? as usize;
    if n == 0 || n > MAX_CHUNK_SAMPLES {
        return Err(ChunkError::BadHeader("sample count out of range"));
    }
    let rest = n as usize - 1;
    // Gorilla: 128 bits plus 2..=212 bits per further sample. Decimal: 10 header bytes, then
    // 1..=10 bytes per varint, 2 varints per further sample and one for the first value.
    let (min, max) = match version {
        FORMAT_VERSION => (16 + rest / 4, 16 + rest * 27 + 1),
        _ => (12 + rest * 2, 30 + rest * 20),
    };
    if raw_len < min || raw_len > max {
        return Err(ChunkError::BadHeader("payload length does not fit the sample count"));
    }
    let payload = src.get(HEADER_LEN..).ok_or(ChunkError::Truncated)?;
    let raw = if src.get(1) == Some(&0) {
        if payload.len() != raw_len {
            return Err(ChunkError::BadHeader("stored payload length differs from the header"));
        }
        payload.to_vec()
    } else {
        zstd::bulk::decompress(payload, raw_len).map_err(|e| ChunkError::Zstd(e.to_string()))?
    };
    out.reserve(n as usize);
    if version == FORMAT_VERSION_DECIMAL {
        return decimal::decode(&raw, n as usize, out);
    }
    let mut r = BitReader::new(&raw);
    let mut ts = r.read(64)? as i64;
    let first = r.read(64)?;
    out.push(Sample::new(ts, f64::from_bits(first)));
    let mut xor = Xor { prev: first, leading: u32::MAX, trailing: 0 };
    let mut delta = 0i64;
    for _ in 1..n {
        delta = delta.wrapping_add(read_dod(&mut r)?);
        ts = ts.wrapping_add(delta);
        let v = xor.read(&mut r)?;
        out.push(Sample::new(ts, f64::from_bits(v)));
    }
    Ok(())
}

/// Format version 2: decimal mantissas, columnar zigzag varints.
mod decimal {
    use super::ChunkError;
    use crate::sample::Sample;

    /// The smallest exponent `e` and the mantissas with `m / 10^e == v` bit for bit, if any.
    pub(super) fn mantissas(samples: &[Sample]) -> Option<(u8, Vec<i64>)> {
        (0..crate::decimal::POW10.len() as u8).find_map(|e| {
            samples.iter().map(|s| crate::decimal::mantissa(s.value, e)).collect::<Option<Vec<i64>>>().map(|m| (e, m))
        })
    }

    #[cfg(test)]
    fn zigzag(v: i64) -> u64 {
        ((v << 1) ^ (v >> 63)) as u64
    }

    fn unzigzag(v: u64) -> i64 {
        ((v >> 1) as i64) ^ -((v & 1) as i64)
    }

    #[cfg(test)]
    fn put(dst: &mut Vec<u8>, v: i64) {
        let mut u = zigzag(v);
        while u >= 0x80 {
            dst.push((u as u8) | 0x80);
            u >>= 7;
        }
        dst.push(u as u8);
    }

    #[cfg(test)]
    fn varint_len(v: i64) -> usize {
        (64 - zigzag(v).leading_zeros() as usize).max(1).div_ceil(7)
    }

    fn get(src: &[u8], pos: &mut usize) -> Result<i64, ChunkError> {
        let mut u = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *src.get(*pos).ok_or(ChunkError::Truncated)?;
            *pos += 1;
            u |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(unzigzag(u));
            }
        }
        Err(ChunkError::BadHeader("varint longer than 10 bytes"))
    }

    pub(super) fn gcd(mut a: u64, mut b: u64) -> u64 {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    }

    #[cfg(test)]
    fn deltas(v: &[i64]) -> Vec<i64> {
        v.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect()
    }

    /// The version-2 body, or `None` when the values are not all short decimals. New chunks use
    /// version 3; this stays to test that version-2 chunks on disk still decode.
    #[cfg(test)]
    pub fn encode(samples: &[Sample]) -> Option<Vec<u8>> {
        let (e, m) = mantissas(samples)?;
        let first = samples.first()?;
        let ts: Vec<i64> = samples.iter().map(|s| s.timestamp_ms).collect();
        let d1 = deltas(&m);
        let d2: Vec<i64> = std::iter::once(d1.first().copied().unwrap_or(0)).chain(deltas(&d1)).collect();
        let cost = |v: &[i64]| v.iter().map(|&x| varint_len(x)).sum::<usize>();
        let mode = u8::from(!d1.is_empty() && cost(&d2) < cost(&d1));
        let mut out = Vec::with_capacity(12 + samples.len() * 4);
        out.push(e);
        out.push(mode);
        out.extend_from_slice(&first.timestamp_ms.to_le_bytes());
        let mut prev_delta = 0i64;
        for w in ts.windows(2) {
            let delta = w[1].wrapping_sub(w[0]);
            put(&mut out, delta.wrapping_sub(prev_delta));
            prev_delta = delta;
        }
        put(&mut out, m.first().copied().unwrap_or(0));
        let values = if mode == 1 { &d2 } else { &d1 };
        let g = values.iter().fold(0u64, |g, &x| gcd(g, x.unsigned_abs())).max(1);
        let g = i64::try_from(g).unwrap_or(1);
        put(&mut out, g);
        for &x in values {
            put(&mut out, x / g);
        }
        Some(out)
    }

    /// Decodes a version-2 body of `n` samples.
    pub fn decode(raw: &[u8], n: usize, out: &mut Vec<Sample>) -> Result<(), ChunkError> {
        let (&e, rest) = raw.split_first().ok_or(ChunkError::Truncated)?;
        let (&mode, rest) = rest.split_first().ok_or(ChunkError::Truncated)?;
        let p = crate::decimal::pow10(e).ok_or(ChunkError::BadHeader("decimal exponent out of range"))?;
        if mode > 1 {
            return Err(ChunkError::BadHeader("unknown value mode"));
        }
        let t0: [u8; 8] = rest.get(..8).and_then(|b| b.try_into().ok()).ok_or(ChunkError::Truncated)?;
        let body = rest.get(8..).ok_or(ChunkError::Truncated)?;
        let mut pos = 0;
        let mut ts = Vec::with_capacity(n);
        let (mut t, mut delta) = (i64::from_le_bytes(t0), 0i64);
        ts.push(t);
        for _ in 1..n {
            delta = delta.wrapping_add(get(body, &mut pos)?);
            t = t.wrapping_add(delta);
            ts.push(t);
        }
        let mut m = get(body, &mut pos)?;
        let g = get(body, &mut pos)?;
        if g < 1 {
            return Err(ChunkError::BadHeader("value divisor must be positive"));
        }
        let mut d = 0i64;
        for (i, t) in ts.into_iter().enumerate() {
            if i > 0 {
                let x = get(body, &mut pos)?.wrapping_mul(g);
                if mode == 1 {
                    d = d.wrapping_add(x);
                    m = m.wrapping_add(d);
                } else {
                    m = m.wrapping_add(x);
                }
            }
            out.push(Sample::new(t, m as f64 / p));
        }
        if pos != body.len() {
            return Err(ChunkError::BadHeader("trailing bytes after the last value"));
        }
        Ok(())
    }
}

/// Format version 3: timestamps as slots on a grid plus jitter, decimal mantissas, every column
/// split into byte planes that are stored raw, constant or as their own zstd frame.
mod columns {
    use std::cell::RefCell;

    use super::decimal::gcd;
    use super::{u32_at, ChunkError, FORMAT_VERSION_COLUMNS, MAX_CHUNK_SAMPLES};
    use crate::sample::Sample;

    /// Version, level, dictionary, sample count, first timestamp.
    const HEADER_LEN: usize = 15;
    const PLANE_RAW: u64 = 0;
    const PLANE_ZSTD: u64 = 1;
    const PLANE_CONST: u64 = 2;
    const TS_GRID: u8 = 0;
    const TS_DOD: u8 = 1;
    const VALUES_DELTA: u8 = 0;
    const VALUES_DOD: u8 = 1;
    const VALUES_RAW: u8 = 2;

    thread_local! {
        static COMPRESSORS: RefCell<Vec<(i32, zstd::bulk::Compressor<'static>)>> = const { RefCell::new(Vec::new()) };
        static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
    }

    fn zigzag(v: i64) -> u64 {
        ((v << 1) ^ (v >> 63)) as u64
    }

    fn unzigzag(v: u64) -> i64 {
        ((v >> 1) as i64) ^ -((v & 1) as i64)
    }

    fn put_u(dst: &mut Vec<u8>, mut u: u64) {
        while u >= 0x80 {
            dst.push((u as u8) | 0x80);
            u >>= 7;
        }
        dst.push(u as u8);
    }

    fn get_u(src: &[u8], pos: &mut usize) -> Result<u64, ChunkError> {
        let mut u = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *src.get(*pos).ok_or(ChunkError::Truncated)?;
            *pos += 1;
            u |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(u);
            }
        }
        Err(ChunkError::BadHeader("varint longer than 10 bytes"))
    }

    fn get_byte(src: &[u8], pos: &mut usize) -> Result<u8, ChunkError> {
        let b = *src.get(*pos).ok_or(ChunkError::Truncated)?;
        *pos += 1;
        Ok(b)
    }

    /// Bytes needed for the largest value of a column.
    fn width(vals: &[u64]) -> usize {
        let all = vals.iter().fold(0, |a, &v| a | v);
        (64 - all.leading_zeros() as usize).div_ceil(8)
    }

    /// Estimated encoded bits of a column: the order-0 entropy of each byte plane (what zstd's
    /// Huffman literals get close to on scrape noise) plus a guess at each frame's overhead.
    fn cost(vals: &[u64]) -> f64 {
        let mut bits = 8.0;
        for p in 0..width(vals) {
            let h = entropy_bits(vals.iter().map(|&v| (v >> (8 * p)) as u8), vals.len());
            bits += if h == 0.0 { 16.0 } else { h + 160.0 };
        }
        bits
    }

    /// Order-0 entropy of `n` bytes, in bits.
    fn entropy_bits(bytes: impl Iterator<Item = u8>, n: usize) -> f64 {
        let mut hist = [0u32; 256];
        for b in bytes {
            hist[usize::from(b)] += 1;
        }
        let n = n as f64;
        hist.iter().filter(|&&c| c > 0).map(|&c| f64::from(c) * (n / f64::from(c)).log2()).sum()
    }

    fn compress(plane: &[u8], level: i32) -> Result<Vec<u8>, ChunkError> {
        COMPRESSORS.with(|c| {
            let mut c = c.borrow_mut();
            let i = match c.iter().position(|(l, _)| *l == level) {
                Some(i) => i,
                None => {
                    let mut fresh = zstd::bulk::Compressor::new(level).map_err(|e| ChunkError::Zstd(e.to_string()))?;
                    // Byte planes of scrape noise are short-alphabet random streams: shorter
                    // matches than 7 bytes cost more as sequences than as Huffman literals.
                    fresh
                        .set_parameter(zstd::zstd_safe::CParameter::MinMatch(7))
                        .map_err(|e| ChunkError::Zstd(e.to_string()))?;
                    c.push((level, fresh));
                    c.len() - 1
                }
            };
            let (_, comp) = c.get_mut(i).ok_or(ChunkError::Zstd("no compressor".into()))?;
            comp.compress(plane).map_err(|e| ChunkError::Zstd(e.to_string()))
        })
    }

    /// Appends a column as a width byte and that many byte planes, least significant first.
    fn put_column(dst: &mut Vec<u8>, vals: &[u64], level: i32) -> Result<(), ChunkError> {
        let w = width(vals);
        dst.push(w as u8);
        let mut plane = Vec::with_capacity(vals.len());
        for p in 0..w {
            plane.clear();
            plane.extend(vals.iter().map(|&v| (v >> (8 * p)) as u8));
            match plane.first() {
                Some(&b) if plane.iter().all(|&x| x == b) => {
                    put_u(dst, (1 << 2) | PLANE_CONST);
                    dst.push(b);
                }
                _ => {
                    let z = compress(&plane, level)?;
                    let (kind, bytes) = if z.len() < plane.len() { (PLANE_ZSTD, &z) } else { (PLANE_RAW, &plane) };
                    put_u(dst, ((bytes.len() as u64) << 2) | kind);
                    dst.extend_from_slice(bytes);
                }
            }
        }
        Ok(())
    }

    /// Reads a column of `len` values written by [`put_column`] into `out`.
    fn get_column(src: &[u8], pos: &mut usize, len: usize, out: &mut Vec<u64>) -> Result<(), ChunkError> {
        out.clear();
        out.resize(len, 0);
        let w = get_byte(src, pos)?;
        if w > 8 {
            return Err(ChunkError::BadHeader("column wider than 8 bytes"));
        }
        let mut buf = Vec::new();
        for p in 0..u32::from(w) {
            let head = get_u(src, pos)?;
            let n = usize::try_from(head >> 2).map_err(|_| ChunkError::Truncated)?;
            let end = pos.checked_add(n).ok_or(ChunkError::Truncated)?;
            let bytes = src.get(*pos..end).ok_or(ChunkError::Truncated)?;
            *pos = end;
            let plane: &[u8] = match head & 3 {
                PLANE_RAW => bytes,
                PLANE_ZSTD => {
                    buf.clear();
                    buf.reserve(len);
                    DECOMPRESSOR.with(|d| {
                        let mut d = d.borrow_mut();
                        if d.is_none() {
                            *d = Some(zstd::bulk::Decompressor::new().map_err(|e| ChunkError::Zstd(e.to_string()))?);
                        }
                        let dec = d.as_mut().ok_or(ChunkError::Zstd("no decompressor".into()))?;
                        dec.decompress_to_buffer(bytes, &mut buf).map_err(|e| ChunkError::Zstd(e.to_string()))
                    })?;
                    &buf
                }
                PLANE_CONST => {
                    let &[b] = bytes else { return Err(ChunkError::BadHeader("constant plane of more than a byte")) };
                    let b = u64::from(b) << (8 * p);
                    out.iter_mut().for_each(|o| *o |= b);
                    continue;
                }
                _ => return Err(ChunkError::BadHeader("unknown plane kind")),
            };
            if plane.len() != len {
                return Err(ChunkError::BadHeader("plane length differs from the sample count"));
            }
            for (o, &b) in out.iter_mut().zip(plane) {
                *o |= u64::from(b) << (8 * p);
            }
        }
        Ok(())
    }

    /// Slot (multiple of `step` past the previous grid point, minus one) and jitter columns.
    fn grid(ts: &[i64], step: i64) -> (Vec<u64>, Vec<u64>) {
        let (mut slots, mut jitter) = (Vec::with_capacity(ts.len()), Vec::with_capacity(ts.len()));
        let mut g = ts.first().copied().unwrap_or(0);
        for &t in ts.iter().skip(1) {
            let d = t.wrapping_sub(g);
            let (q, r) = (d.div_euclid(step), d.rem_euclid(step));
            let s = if r >= step - r { q.wrapping_add(1) } else { q };
            g = g.wrapping_add(s.wrapping_mul(step));
            slots.push(zigzag(s.wrapping_sub(1)));
            jitter.push(zigzag(t.wrapping_sub(g)));
        }
        (slots, jitter)
    }

    /// `x` as `base + u * g` columns: `(base, g, u)`.
    fn frame(x: &[i64]) -> (i64, u64, Vec<u64>) {
        let base = x.iter().copied().min().unwrap_or(0);
        let g = x.iter().fold(0u64, |g, &v| gcd(g, v.wrapping_sub(base) as u64)).max(1);
        (base, g, x.iter().map(|&v| v.wrapping_sub(base) as u64 / g).collect())
    }

    /// Encodes a run whose values are the mantissas `m` over `10^e`.
    pub fn encode(samples: &[Sample], e: u8, m: &[i64], level: i32, dst: &mut Vec<u8>) -> Result<(), ChunkError> {
        let ts: Vec<i64> = samples.iter().map(|s| s.timestamp_ms).collect();
        let t0 = ts.first().copied().unwrap_or(0);
        dst.push(FORMAT_VERSION_COLUMNS);
        dst.push(level as u8);
        dst.push(0);
        dst.extend_from_slice(&(samples.len() as u32).to_le_bytes());
        dst.extend_from_slice(&t0.to_le_bytes());
        // Timestamps: on a grid of the median interval (scrapes), or delta-of-deltas.
        let mut deltas: Vec<i64> = ts.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
        let dod: Vec<u64> = std::iter::once(deltas.first().copied().unwrap_or(0))
            .chain(deltas.windows(2).map(|w| w[1].wrapping_sub(w[0])))
            .map(zigzag)
            .take(deltas.len())
            .collect();
        deltas.sort_unstable();
        let step = deltas.get(deltas.len() / 2).copied().unwrap_or(0);
        let grid_cols = (step > 0).then(|| grid(&ts, step));
        match grid_cols {
            Some((slots, jitter)) if cost(&slots) + cost(&jitter) <= cost(&dod) => {
                dst.push(TS_GRID);
                put_u(dst, step as u64);
                put_column(dst, &slots, level)?;
                put_column(dst, &jitter, level)?;
            }
            _ => {
                dst.push(TS_DOD);
                put_column(dst, &dod, level)?;
            }
        }
        // Values: mantissa deltas (counters), delta-of-deltas (steady counters) or the
        // mantissas themselves (gauges), whichever is cheapest; each as a base, a common
        // divisor and the quotients.
        let d1: Vec<i64> = m.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
        let d2: Vec<i64> = std::iter::once(d1.first().copied().unwrap_or(0))
            .chain(d1.windows(2).map(|w| w[1].wrapping_sub(w[0])))
            .take(d1.len())
            .collect();
        let candidates = [(VALUES_DELTA, frame(&d1)), (VALUES_DOD, frame(&d2)), (VALUES_RAW, frame(m))];
        let mut best = None;
        for (mode, f) in candidates {
            let c = cost(&f.2);
            if best.as_ref().is_none_or(|(_, _, b)| c < *b) {
                best = Some((mode, f, c));
            }
        }
        let Some((mode, (base, g, u), _)) = best else { return Err(ChunkError::Unsorted) };
        dst.push(e);
        dst.push(mode);
        if mode != VALUES_RAW {
            put_u(dst, zigzag(m.first().copied().unwrap_or(0)));
        }
        put_u(dst, zigzag(base));
        put_u(dst, g);
        put_column(dst, &u, level)
    }

    /// Decodes a whole version-3 chunk (header included).
    pub fn decode(src: &[u8], out: &mut Vec<Sample>) -> Result<(), ChunkError> {
        let n = u32_at(src, 3)?;
        if n == 0 || n > MAX_CHUNK_SAMPLES {
            return Err(ChunkError::BadHeader("sample count out of range"));
        }
        let n = n as usize;
        let t0: [u8; 8] = src.get(7..HEADER_LEN).and_then(|b| b.try_into().ok()).ok_or(ChunkError::Truncated)?;
        let mut pos = HEADER_LEN;
        let mut ts = Vec::new();
        let mut t = i64::from_le_bytes(t0);
        let mut col = Vec::new();
        match get_byte(src, &mut pos)? {
            TS_GRID => {
                let step = get_u(src, &mut pos)? as i64;
                let mut jitter = Vec::new();
                get_column(src, &mut pos, n - 1, &mut col)?;
                get_column(src, &mut pos, n - 1, &mut jitter)?;
                ts.reserve(n);
                ts.push(t);
                let mut g = t;
                for (&s, &j) in col.iter().zip(&jitter) {
                    g = g.wrapping_add(unzigzag(s).wrapping_add(1).wrapping_mul(step));
                    ts.push(g.wrapping_add(unzigzag(j)));
                }
            }
            TS_DOD => {
                get_column(src, &mut pos, n - 1, &mut col)?;
                ts.reserve(n);
                ts.push(t);
                let mut delta = 0i64;
                for &d in &col {
                    delta = delta.wrapping_add(unzigzag(d));
                    t = t.wrapping_add(delta);
                    ts.push(t);
                }
            }
            _ => return Err(ChunkError::BadHeader("unknown timestamp mode")),
        }
        let p = crate::decimal::pow10(get_byte(src, &mut pos)?)
            .ok_or(ChunkError::BadHeader("decimal exponent out of range"))?;
        let mode = get_byte(src, &mut pos)?;
        if mode > VALUES_RAW {
            return Err(ChunkError::BadHeader("unknown value mode"));
        }
        let first = if mode == VALUES_RAW { 0 } else { unzigzag(get_u(src, &mut pos)?) };
        let base = unzigzag(get_u(src, &mut pos)?);
        let g = get_u(src, &mut pos)? as i64;
        if g == 0 {
            return Err(ChunkError::BadHeader("value divisor must not be zero"));
        }
        get_column(src, &mut pos, if mode == VALUES_RAW { n } else { n - 1 }, &mut col)?;
        if pos != src.len() {
            return Err(ChunkError::BadHeader("trailing bytes after the last column"));
        }
        out.reserve(n);
        // Integer values (exponent 0, most counters) need no division: `x / 1.0 == x` exactly.
        let column = Mantissas { mode, first, base, g };
        if p == 1.0 {
            column.append(&ts, &col, out, |m| m as f64);
        } else {
            column.append(&ts, &col, out, |m| m as f64 / p);
        }
        Ok(())
    }

    /// How the value column of a chunk encodes the mantissas: each quotient `u` stands for
    /// `base + u * g`, taken as a delta (`mode` [`VALUES_DELTA`], from `first`), a delta of
    /// deltas ([`VALUES_DOD`]) or the mantissa itself ([`VALUES_RAW`]).
    struct Mantissas {
        mode: u8,
        first: i64,
        base: i64,
        g: i64,
    }

    impl Mantissas {
        /// Appends the samples of timestamps `ts` and quotients `col`, each mantissa turned
        /// into its value by `scale`.
        #[inline(always)]
        fn append(&self, ts: &[i64], col: &[u64], out: &mut Vec<Sample>, scale: impl Fn(i64) -> f64) {
            let (base, g) = (self.base, self.g);
            let x = col.iter().map(|&u| base.wrapping_add((u as i64).wrapping_mul(g)));
            match self.mode {
                VALUES_RAW => out.extend(ts.iter().zip(x).map(|(&t, m)| Sample::new(t, scale(m)))),
                VALUES_DELTA => {
                    let mut m = self.first;
                    out.push(Sample::new(t0_of(ts), scale(m)));
                    out.extend(ts.iter().skip(1).zip(x).map(|(&t, d)| {
                        m = m.wrapping_add(d);
                        Sample::new(t, scale(m))
                    }));
                }
                _ => {
                    let (mut m, mut d) = (self.first, 0i64);
                    out.push(Sample::new(t0_of(ts), scale(m)));
                    out.extend(ts.iter().skip(1).zip(x).map(|(&t, dd)| {
                        d = d.wrapping_add(dd);
                        m = m.wrapping_add(d);
                        Sample::new(t, scale(m))
                    }));
                }
            }
        }
    }

    fn t0_of(ts: &[i64]) -> i64 {
        ts.first().copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(samples: &[Sample]) -> Vec<Sample> {
        let mut buf = Vec::new();
        encode(samples, 3, &mut buf).unwrap();
        let mut out = Vec::new();
        decode(&buf, &mut out).unwrap();
        out
    }

    fn bits(s: &[Sample]) -> Vec<(i64, u64)> {
        s.iter().map(|s| (s.timestamp_ms, s.value.to_bits())).collect()
    }

    #[test]
    fn special_values_survive_bit_exact() {
        let specials = [
            1.0,
            f64::from_bits(crate::sample::STALE_NAN_BITS),
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            -0.0,
            0.0,
            1.0,
            1.0,
            f64::MIN_POSITIVE,
            f64::MAX,
        ];
        let s: Vec<Sample> =
            specials.iter().enumerate().map(|(i, &v)| Sample::new(1_700_000_000_000 + i as i64 * 15_000, v)).collect();
        assert_eq!(bits(&round_trip(&s)), bits(&s));
    }

    #[test]
    fn regular_scrapes_compress_well() {
        let s: Vec<Sample> = (0..120).map(|i| Sample::new(1_700_000_000_000 + i * 15_000, 42.0)).collect();
        let mut buf = Vec::new();
        encode(&s, 3, &mut buf).unwrap();
        assert_eq!(buf.first(), Some(&FORMAT_VERSION_COLUMNS));
        assert!(buf.len() < 40, "{} bytes for 120 samples of a constant regular series", buf.len());
        let mut small = Vec::new();
        encode(&s[..2], 3, &mut small).unwrap();
        assert!(small.len() < 40, "{} bytes for 2 samples", small.len());
        let mut out = Vec::new();
        decode(&small, &mut out).unwrap();
        assert_eq!(out, s[..2]);
    }

    #[test]
    fn jittered_scrapes_cost_under_half_a_byte_of_timestamp() {
        // 15 s scrapes jittered by 0..5 ms and one missed scrape: the grid mode keeps jitter
        // in one small byte plane and the gap in a slot column.
        let mut rng = 7u64;
        let mut next = || {
            rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (rng >> 33) as i64
        };
        let s: Vec<Sample> = (0..5760i64)
            .filter(|&k| k != 1000)
            .map(|k| Sample::new(1_700_000_000_000 + k * 15_000 + next() % 5, 1.0))
            .collect();
        let mut buf = Vec::new();
        encode(&s, 11, &mut buf).unwrap();
        assert!(buf.len() < s.len() / 2, "{} bytes for {} samples", buf.len(), s.len());
        let mut out = Vec::new();
        decode(&buf, &mut out).unwrap();
        assert_eq!(bits(&out), bits(&s));
    }

    #[test]
    fn version_2_chunks_still_decode() {
        let s: Vec<Sample> =
            (0..500).map(|i| Sample::new(1_700_000_000_000 + i * 15_000 + i % 3, (i * i) as f64 / 100.0)).collect();
        let mut out = Vec::new();
        decode(&version_2_chunk(&s, 3), &mut out).unwrap();
        assert_eq!(bits(&out), bits(&s));
    }

    /// A chunk as the version-2 encoder wrote it, its body zstd-compressed at `level` (0 = raw).
    fn version_2_chunk(s: &[Sample], level: u8) -> Vec<u8> {
        let body = decimal::encode(s).unwrap();
        let payload = if level == 0 { body.clone() } else { zstd::bulk::compress(&body, i32::from(level)).unwrap() };
        let mut buf = vec![FORMAT_VERSION_DECIMAL, level, 0];
        buf.extend_from_slice(&(s.len() as u32).to_le_bytes());
        buf.extend_from_slice(&(body.len() as u32).to_le_bytes());
        buf.extend_from_slice(&payload);
        buf
    }

    #[test]
    fn negative_zero_and_nan_fall_back_to_gorilla() {
        for odd in [-0.0, f64::NAN, f64::from_bits(crate::sample::STALE_NAN_BITS), 0.1 + 0.2] {
            let s = [Sample::new(1, 1.5), Sample::new(2, odd), Sample::new(3, 2.25)];
            let mut buf = Vec::new();
            encode(&s, 3, &mut buf).unwrap();
            let mut out = Vec::new();
            decode(&buf, &mut out).unwrap();
            assert_eq!(bits(&out), bits(&s));
            if odd.is_nan() || odd.to_bits() == (-0.0f64).to_bits() {
                assert_eq!(buf.first(), Some(&FORMAT_VERSION), "{odd}");
            }
        }
    }

    #[test]
    fn rejects_unsorted_and_empty() {
        let mut buf = Vec::new();
        assert_eq!(encode(&[], 3, &mut buf), Err(ChunkError::Unsorted));
        let s = [Sample::new(2, 1.0), Sample::new(1, 1.0)];
        assert_eq!(encode(&s, 3, &mut buf), Err(ChunkError::Unsorted));
    }

    fn arb_samples() -> impl Strategy<Value = Vec<Sample>> {
        let value = prop_oneof![
            any::<u64>().prop_map(f64::from_bits),
            (-1000i32..1000).prop_map(|v| f64::from(v) / 100.0),
            Just(f64::from_bits(crate::sample::STALE_NAN_BITS)),
            Just(-0.0),
        ];
        let step = prop_oneof![Just(15_000i64), 1i64..100_000, 1i64..(1i64 << 40)];
        (0i64..crate::sample::MAX_TIMESTAMP_MS / 2, proptest::collection::vec((step, value), 1..300)).prop_map(
            |(t0, pts)| {
                let mut t = t0;
                pts.into_iter()
                    .map(|(d, v)| {
                        t = t.saturating_add(d).min(crate::sample::MAX_TIMESTAMP_MS);
                        Sample::new(t, v)
                    })
                    .collect::<Vec<_>>()
            },
        )
    }

    fn arb_decimal_run() -> impl Strategy<Value = Vec<Sample>> {
        (0u32..5, -1_000_000_000i64..1_000_000_000, proptest::collection::vec((1i64..30_000, -5000i64..50_000), 1..800))
            .prop_map(|(decimals, start, steps)| {
                let p = 10f64.powi(decimals as i32);
                let (mut t, mut m) = (1_700_000_000_000i64, start);
                steps
                    .into_iter()
                    .map(|(dt, dm)| {
                        t += dt;
                        m += dm;
                        Sample::new(t, m as f64 / p)
                    })
                    .collect()
            })
    }

    /// Runs for version 3: grids with jitter, gaps and arbitrary steps (down to 1 ms, up to
    /// across the whole i64 range), decimals of every exponent and size up to 2^53, gauges,
    /// counters and constants, and now and then a special float that forces version 1.
    fn arb_columns_run() -> impl Strategy<Value = Vec<Sample>> {
        let step = prop_oneof![Just(15_000i64), Just(1i64), 1i64..100_000, 1i64..(1i64 << 50)];
        let jitter = prop_oneof![Just(0i64), 0i64..5, -1000i64..1000];
        let shape = prop_oneof![
            Just(0u8), // counter
            Just(1u8), // gauge
            Just(2u8), // constant
        ];
        let mantissa = prop_oneof![-1000i64..1000, -(1i64 << 53)..=(1i64 << 53)];
        (
            any::<i64>(),
            step,
            proptest::collection::vec((jitter, 0u8..20, mantissa), 1..600),
            0usize..16,
            shape,
            prop_oneof![Just(None), Just(Some(f64::NAN)), Just(Some(-0.0)), Just(Some(f64::INFINITY))],
        )
            .prop_map(|(t0, step, pts, e, shape, special)| {
                let p = 10f64.powi(e as i32);
                let mut t = t0;
                let mut m = 0i64;
                let mut out: Vec<Sample> = Vec::new();
                for (i, (j, gap, dm)) in pts.into_iter().enumerate() {
                    let skip = if gap == 0 { 3 } else { 1 };
                    t = t.saturating_add(step.saturating_mul(skip)).saturating_add(j);
                    if out.last().is_some_and(|l| l.timestamp_ms >= t) {
                        continue;
                    }
                    m = match shape {
                        0 => m.saturating_add(dm.abs() / 7).min(1 << 53),
                        1 => dm,
                        _ => 12_345,
                    };
                    let v = match special {
                        Some(x) if i == 3 => x,
                        _ => m as f64 / p,
                    };
                    out.push(Sample::new(t, v));
                }
                out
            })
    }

    proptest! {
        #[test]
        fn decimal_runs_use_version_3_and_round_trip(s in arb_decimal_run()) {
            let mut buf = Vec::new();
            encode(&s, 3, &mut buf).unwrap();
            prop_assert_eq!(buf.first(), Some(&FORMAT_VERSION_COLUMNS));
            let mut out = Vec::new();
            decode(&buf, &mut out).unwrap();
            prop_assert_eq!(bits(&out), bits(&s));
        }

        #[test]
        fn version_2_decodes_what_its_encoder_wrote(s in arb_decimal_run()) {
            let mut out = Vec::new();
            decode(&version_2_chunk(&s, 0), &mut out).unwrap();
            prop_assert_eq!(bits(&out), bits(&s));
        }

        #[test]
        fn columns_round_trip_any_timestamps_and_decimals(s in arb_columns_run(), level in 1i32..10) {
            let mut buf = Vec::new();
            encode(&s, level, &mut buf).unwrap();
            let mut out = Vec::new();
            decode(&buf, &mut out).unwrap();
            prop_assert_eq!(bits(&out), bits(&s));
            let version = if decimal::mantissas(&s).is_some() { FORMAT_VERSION_COLUMNS } else { FORMAT_VERSION };
            prop_assert_eq!(buf.first(), Some(&version));
        }

        #[test]
        fn decode_never_panics_on_corrupted_column_chunks(
            s in arb_columns_run(),
            flips in proptest::collection::vec(any::<(usize, u8)>(), 1..4),
            cut in any::<usize>(),
        ) {
            let mut buf = Vec::new();
            encode(&s, 3, &mut buf).unwrap();
            for (i, x) in flips {
                let i = i % buf.len();
                if let Some(b) = buf.get_mut(i) { *b ^= x | 1; }
            }
            let mut out = Vec::new();
            let _ = decode(&buf, &mut out);
            let _ = decode(&buf[..cut % buf.len()], &mut out);
        }

        #[test]
        fn decode_inverts_encode(mut s in arb_samples()) {
            s.dedup_by_key(|p| p.timestamp_ms);
            prop_assert_eq!(bits(&round_trip(&s)), bits(&s));
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut out = Vec::new();
            let _ = decode(&bytes, &mut out);
        }

        #[test]
        fn decode_never_panics_on_corrupted_chunks(s in arb_samples(), flip in any::<(usize, u8)>()) {
            let mut s = s;
            s.dedup_by_key(|p| p.timestamp_ms);
            let mut buf = Vec::new();
            encode(&s, 1, &mut buf).unwrap();
            let i = flip.0 % buf.len();
            if let Some(b) = buf.get_mut(i) { *b ^= flip.1 | 1; }
            let mut out = Vec::new();
            let _ = decode(&buf, &mut out);
        }
    }
}
