//! Prometheus' `model.Duration` in YAML (`prometheus/common` `ParseDuration`): units `y`, `w`,
//! `d`, `h`, `m`, `s`, `ms`, each at most once and from the largest to the smallest
//! (`1h30m`, not `30m1h`), `0` without a unit, nothing negative, at most ~292 years.

/// Nanoseconds per unit, with the unit's rank (units must come in increasing rank).
fn unit(name: &str) -> Option<(u8, u64)> {
    const MS: u64 = 1_000_000;
    Some(match name {
        "y" => (1, 365 * 24 * 3_600_000 * MS),
        "w" => (2, 7 * 24 * 3_600_000 * MS),
        "d" => (3, 24 * 3_600_000 * MS),
        "h" => (4, 3_600_000 * MS),
        "m" => (5, 60_000 * MS),
        "s" => (6, 1_000 * MS),
        "ms" => (7, MS),
        _ => return None,
    })
}

/// Parses a duration into milliseconds.
///
/// # Errors
/// Prometheus' message: `empty duration string`, `not a valid duration string: "5"`,
/// `unknown unit "x" in duration "5x"`, `duration out of range`.
pub(super) fn parse_ms(text: &str) -> Result<i64, String> {
    match text {
        "0" => return Ok(0),
        "" => return Err("empty duration string".to_owned()),
        _ => {}
    }
    let invalid = || format!("not a valid duration string: {}", super::error::go_quote(text));
    let mut rest = text;
    let mut nanos: u64 = 0;
    let mut last_rank = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(invalid());
        }
        let value: u64 = rest[..digits].parse().map_err(|_| invalid())?;
        rest = &rest[digits..];
        let letters = rest.bytes().take_while(|b| !b.is_ascii_digit()).count();
        if letters == 0 {
            return Err(invalid());
        }
        let name = &rest[..letters];
        rest = &rest[letters..];
        let Some((rank, mult)) = unit(name) else {
            let (u, d) = (super::error::go_quote(name), super::error::go_quote(text));
            return Err(format!("unknown unit {u} in duration {d}"));
        };
        if rank <= last_rank {
            return Err(invalid());
        }
        last_rank = rank;
        let out_of_range = || "duration out of range".to_owned();
        if value > (1u64 << 63) / mult {
            return Err(out_of_range());
        }
        nanos = nanos.checked_add(value * mult).filter(|n| *n < 1 << 63).ok_or_else(out_of_range)?;
    }
    i64::try_from(nanos / 1_000_000).map_err(|_| invalid())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_prometheus_durations() {
        assert_eq!(parse_ms("0"), Ok(0));
        assert_eq!(parse_ms("0s"), Ok(0));
        assert_eq!(parse_ms("1m"), Ok(60_000));
        assert_eq!(parse_ms("1h30m"), Ok(5_400_000));
        assert_eq!(parse_ms("1d"), Ok(86_400_000));
        assert_eq!(parse_ms("1w"), Ok(604_800_000));
        assert_eq!(parse_ms("1y"), Ok(31_536_000_000));
        assert_eq!(parse_ms("250ms"), Ok(250));
        assert_eq!(parse_ms("1y2w3d4h5m6s7ms"), Ok(31_536_000_000 + 1_209_600_000 + 259_200_000 + 14_706_007));
    }

    #[test]
    fn refuses_what_prometheus_refuses() {
        assert_eq!(parse_ms(""), Err("empty duration string".to_owned()));
        assert_eq!(parse_ms("5"), Err(r#"not a valid duration string: "5""#.to_owned()));
        assert_eq!(parse_ms("-5m"), Err(r#"not a valid duration string: "-5m""#.to_owned()));
        assert_eq!(parse_ms("30m1h"), Err(r#"not a valid duration string: "30m1h""#.to_owned()));
        assert_eq!(parse_ms("1m1m"), Err(r#"not a valid duration string: "1m1m""#.to_owned()));
        assert_eq!(parse_ms("1.5h"), Err(r#"unknown unit "." in duration "1.5h""#.to_owned()));
        assert_eq!(parse_ms("5x"), Err(r#"unknown unit "x" in duration "5x""#.to_owned()));
        assert_eq!(parse_ms("300y"), Err("duration out of range".to_owned()));
        assert_eq!(
            parse_ms("99999999999999999999s"),
            Err(r#"not a valid duration string: "99999999999999999999s""#.to_owned())
        );
    }
}
