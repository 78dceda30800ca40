//! ISO 8601 durations (`PT1S`, `PT1M30S`, `P1D`, `PT0.5S`) as used by the OJS retry policy and the
//! rate-limiting extension. Years and months are refused: their length depends on the calendar.

/// Parses an ISO 8601 duration into whole milliseconds (fractions below 1 ms are truncated).
pub fn parse_iso8601_ms(s: &str) -> Result<u64, String> {
    let bad = || format!("'{s}' is not an ISO 8601 duration such as PT1S, PT5M or P1D");
    let rest = s.strip_prefix('P').ok_or_else(bad)?;
    if rest.is_empty() {
        return Err(bad());
    }
    let (date, time) = match rest.split_once('T') {
        Some((d, t)) => {
            if t.is_empty() {
                return Err(bad());
            }
            (d, Some(t))
        }
        None => (rest, None),
    };
    let mut total: f64 = 0.0;
    let mut parse_part = |part: &str, units: &[(char, f64)]| -> Result<(), String> {
        let mut num = String::new();
        let mut last_unit = 0usize;
        for c in part.chars() {
            if c.is_ascii_digit() || c == '.' || c == ',' {
                num.push(if c == ',' { '.' } else { c });
                continue;
            }
            let pos = units.iter().position(|(u, _)| *u == c).ok_or_else(bad)?;
            if num.is_empty() || pos < last_unit {
                return Err(bad());
            }
            let v: f64 = num.parse().map_err(|_| bad())?;
            total += v * units[pos].1;
            last_unit = pos + 1;
            num.clear();
        }
        if num.is_empty() {
            Ok(())
        } else {
            Err(bad())
        }
    };
    parse_part(date, &[('W', 604_800_000.0), ('D', 86_400_000.0)])?;
    if let Some(t) = time {
        parse_part(t, &[('H', 3_600_000.0), ('M', 60_000.0), ('S', 1_000.0)])?;
    }
    if !total.is_finite() || total > 9.0e15 {
        return Err(bad());
    }
    Ok(total as u64)
}
/// The duration at `key` of a JSON object, named `field` in errors: an ISO 8601 duration string or a
/// whole number of milliseconds; None when absent or null.
pub(crate) fn duration_field(
    o: &serde_json::Map<String, serde_json::Value>,
    key: &str,
    field: &str,
) -> Result<Option<u64>, crate::error::OjsError> {
    use crate::error::OjsError;
    use serde_json::Value;
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => parse_iso8601_ms(s)
            .map(Some)
            .map_err(|e| OjsError::invalid(format!("{field}: {e}"))),
        Some(Value::Number(n)) if n.as_u64().is_some() => Ok(n.as_u64()),
        Some(v) => Err(OjsError::invalid(format!(
            "{field} must be an ISO 8601 duration such as \"PT1S\"; got {v}"
        ))),
    }
}

/// Formats milliseconds as the shortest ISO 8601 duration in hours, minutes and seconds.
pub fn format_iso8601_ms(ms: u64) -> String {
    if ms == 0 {
        return "PT0S".into();
    }
    let (h, rem) = (ms / 3_600_000, ms % 3_600_000);
    let (m, rem) = (rem / 60_000, rem % 60_000);
    let mut out = String::from("PT");
    if h > 0 {
        out.push_str(&format!("{h}H"));
    }
    if m > 0 {
        out.push_str(&format!("{m}M"));
    }
    if rem > 0 {
        if rem % 1000 == 0 {
            out.push_str(&format!("{}S", rem / 1000));
        } else {
            out.push_str(&format!("{}.{:03}S", rem / 1000, rem % 1000));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_forms() {
        assert_eq!(parse_iso8601_ms("PT1S"), Ok(1_000));
        assert_eq!(parse_iso8601_ms("PT0.5S"), Ok(500));
        assert_eq!(parse_iso8601_ms("PT1M30S"), Ok(90_000));
        assert_eq!(parse_iso8601_ms("PT5M"), Ok(300_000));
        assert_eq!(parse_iso8601_ms("PT1H"), Ok(3_600_000));
        assert_eq!(parse_iso8601_ms("P1D"), Ok(86_400_000));
        assert_eq!(parse_iso8601_ms("P1DT1H"), Ok(90_000_000));
        assert_eq!(parse_iso8601_ms("P1W"), Ok(604_800_000));
    }

    #[test]
    fn rejects_garbage_and_calendar_units() {
        for s in [
            "", "P", "PT", "1S", "PT1", "PTS", "P1Y", "P1M", "PT1S1M", "pt1s", "PT-1S",
        ] {
            assert!(parse_iso8601_ms(s).is_err(), "{s} should be rejected");
        }
    }

    #[test]
    fn formats_round_trip() {
        for ms in [1, 500, 1_000, 90_000, 3_600_000, 3_723_004] {
            assert_eq!(parse_iso8601_ms(&format_iso8601_ms(ms)), Ok(ms));
        }
    }
}
