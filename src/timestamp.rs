//! Times as Prometheus' HTTP API and its tools take them: RFC 3339, or Unix seconds with an
//! optional fraction.

use crate::sample::{MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS};

/// A time in messages: RFC 3339 to the second in UTC (`2026-11-25T00:00:00Z`), or `<ms> ms`
/// outside chrono's range.
pub fn format_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map_or_else(|| format!("{ms} ms"), |t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}

/// Parses a Prometheus time into milliseconds. Unix seconds are clamped to the supported range,
/// as Prometheus clamps its min/max time sentinels.
///
/// # Errors
/// A message saying what was expected.
pub fn parse_ms(s: &str) -> Result<i64, String> {
    if let Ok(secs) = s.parse::<f64>() {
        if !secs.is_finite() {
            return Err(format!("cannot parse {s:?} to a valid timestamp"));
        }
        let ms = (secs * 1000.0).round();
        return Ok(ms.clamp(MIN_TIMESTAMP_MS as f64 - 1e15, MAX_TIMESTAMP_MS as f64) as i64);
    }
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp_millis())
        .map_err(|_| format!("cannot parse {s:?} to a valid timestamp (use RFC3339 or Unix seconds)"))
}

#[cfg(test)]
mod tests {
    use super::parse_ms;

    #[test]
    fn times() {
        assert_eq!(parse_ms("1700000000"), Ok(1_700_000_000_000));
        assert_eq!(parse_ms("1700000000.123"), Ok(1_700_000_000_123));
        assert_eq!(parse_ms("2023-11-14T22:13:20Z"), Ok(1_700_000_000_000));
        assert_eq!(parse_ms("2023-11-14T23:13:20.5+01:00"), Ok(1_700_000_000_500));
        assert!(parse_ms("yesterday").is_err());
        assert!(parse_ms("NaN").is_err());
    }
}
