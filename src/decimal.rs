//! Short decimals: a float that is exactly `mantissa / 10^scale` for an integer mantissa below
//! 2^53 and a scale up to 15 (what a scraped `1234.5` parses to). Such values can be stored as
//! integers and computed with exactly; the sealed-chunk codec and tier points both use this.
//! Pure arithmetic.

/// The powers of ten a scale selects (every one exact in an f64).
pub const POW10: [f64; 16] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15];

/// Largest mantissa magnitude: every integer up to it is exact in an f64.
const MAX_MANTISSA: f64 = 9_007_199_254_740_992.0; // 2^53

/// `10^scale`, for a scale up to 15.
pub fn pow10(scale: u8) -> Option<f64> {
    POW10.get(usize::from(scale)).copied()
}

/// The mantissa `m` with `m / 10^scale == v` bit for bit, if there is one (never for NaN,
/// ±Inf or -0.0): computed the way a decoder divides, so that division gives `v` back.
pub fn mantissa(v: f64, scale: u8) -> Option<i64> {
    let p = pow10(scale)?;
    let m = (v * p).round();
    if !m.is_finite() || m.abs() > MAX_MANTISSA {
        return None;
    }
    let m = m as i64;
    ((m as f64 / p).to_bits() == v.to_bits()).then_some(m)
}

/// The smallest scale at which `v` is a short decimal.
pub fn scale_of(v: f64) -> Option<u8> {
    (0..POW10.len() as u8).find(|&s| mantissa(v, s).is_some())
}

/// The value of mantissa `m` at `scale`.
pub fn value(m: i64, scale: u8) -> Option<f64> {
    Some(m as f64 / pow10(scale)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_decimals_and_what_is_not_one() {
        assert_eq!(scale_of(1234.5), Some(1));
        assert_eq!(mantissa(1234.5, 1), Some(12345));
        assert_eq!(mantissa(1234.5, 3), Some(1_234_500));
        assert_eq!(scale_of(42.0), Some(0));
        assert_eq!(scale_of(0.1 + 0.2), None);
        for v in [f64::NAN, f64::INFINITY, -0.0, 1e300] {
            assert_eq!(scale_of(v), None, "{v}");
        }
        assert_eq!(value(12345, 1), Some(1234.5));
    }
}
