//! Durations as operators write them: `15s`, `5m`, `2h`, `1d`, `4w`, `1h30m`, `250ms`.

/// A duration string that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {0:?}: use a number with a unit, e.g. 15s, 5m, 2h, 1d, 4w or 1h30m")]
pub struct DurationError(pub String);

/// Parses a duration into milliseconds. `0` (without unit) is accepted and means zero.
///
/// # Errors
/// [`DurationError`] naming the input.
pub fn parse_ms(s: &str) -> Result<i64, DurationError> {
    let err = || DurationError(s.to_owned());
    if s == "0" {
        return Ok(0);
    }
    let mut total: i64 = 0;
    let mut rest = s;
    if rest.is_empty() {
        return Err(err());
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(err());
        }
        let (num, tail) = rest.split_at(digits);
        let n: i64 = num.parse().map_err(|_| err())?;
        let unit_len = tail.bytes().take_while(u8::is_ascii_alphabetic).count();
        let (unit, tail) = tail.split_at(unit_len);
        let factor = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 7 * 86_400_000,
            "y" => 365 * 86_400_000,
            _ => return Err(err()),
        };
        total = n.checked_mul(factor).and_then(|v| total.checked_add(v)).ok_or_else(err)?;
        rest = tail;
    }
    Ok(total)
}

/// Formats milliseconds in the largest exact unit (`86400000` -> `1d`).
pub fn format_ms(ms: i64) -> String {
    const UNITS: [(i64, &str); 6] =
        [(7 * 86_400_000, "w"), (86_400_000, "d"), (3_600_000, "h"), (60_000, "m"), (1_000, "s"), (1, "ms")];
    if ms == 0 {
        return "0".into();
    }
    for (factor, unit) in UNITS {
        if ms % factor == 0 {
            return format!("{}{unit}", ms / factor);
        }
    }
    format!("{ms}ms")
}

/// Formats milliseconds as Prometheus' `model.Duration` prints them: years and weeks only when
/// exact, then days, hours, minutes, seconds and milliseconds (`15d`, `1w`, `90d`, `1h30m`,
/// `0s`).
pub fn format_prometheus(ms: i64) -> String {
    if ms == 0 {
        return "0s".into();
    }
    let mut rest = ms.unsigned_abs();
    let mut out = if ms < 0 { String::from("-") } else { String::new() };
    let units: [(u64, &str, bool); 7] = [
        (365 * 86_400_000, "y", true),
        (7 * 86_400_000, "w", true),
        (86_400_000, "d", false),
        (3_600_000, "h", false),
        (60_000, "m", false),
        (1_000, "s", false),
        (1, "ms", false),
    ];
    for (factor, unit, exact) in units {
        if exact && !rest.is_multiple_of(factor) {
            continue;
        }
        let n = rest / factor;
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
            rest -= n * factor;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_compounds() {
        assert_eq!(parse_ms("15s"), Ok(15_000));
        assert_eq!(parse_ms("5m"), Ok(300_000));
        assert_eq!(parse_ms("2h"), Ok(7_200_000));
        assert_eq!(parse_ms("1d"), Ok(86_400_000));
        assert_eq!(parse_ms("4w"), Ok(4 * 7 * 86_400_000));
        assert_eq!(parse_ms("1h30m"), Ok(5_400_000));
        assert_eq!(parse_ms("0"), Ok(0));
        assert!(parse_ms("").is_err());
        assert!(parse_ms("5").is_err());
        assert!(parse_ms("5x").is_err());
        assert!(parse_ms("-5m").is_err());
        assert!(parse_ms("99999999999999999w").is_err());
    }

    #[test]
    fn formats_in_largest_unit() {
        assert_eq!(format_ms(86_400_000), "1d");
        assert_eq!(format_ms(90 * 60_000), "90m");
        assert_eq!(format_ms(1_500), "1500ms");
    }

    #[test]
    fn formats_like_prometheus() {
        assert_eq!(format_prometheus(15 * 86_400_000), "15d");
        assert_eq!(format_prometheus(14 * 86_400_000), "2w");
        assert_eq!(format_prometheus(90 * 86_400_000), "90d");
        assert_eq!(format_prometheus(5_400_000), "1h30m");
        assert_eq!(format_prometheus(1_500), "1s500ms");
        assert_eq!(format_prometheus(0), "0s");
    }
}
