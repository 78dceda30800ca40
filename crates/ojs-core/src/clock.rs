//! Timestamps. Redis `TIME` is the clock of every state change (so API pods with skewed clocks agree);
//! these helpers only convert milliseconds since the Unix epoch to and from RFC 3339 text.

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// RFC 3339 in UTC with millisecond precision, e.g. `2026-02-13T12:00:00.123Z` (whole seconds are
/// written without a fraction: `2099-12-31T23:59:59Z`, so a time the client gave echoes unchanged).
pub fn format_ms(ms: i64) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    match OffsetDateTime::from_unix_timestamp_nanos(nanos) {
        Ok(t) if (0..=9999).contains(&t.year()) => {
            // Every job view shows several of these: digits written in place (`format!` with
            // padding was a twentieth of a FETCH's instructions).
            let two = |b: &mut [u8], v: u8| {
                b[0] = b'0' + v / 10;
                b[1] = b'0' + v % 10;
            };
            let mut b = *b"0000-00-00T00:00:00.000Z";
            let y = t.year() as u16;
            two(&mut b[0..2], (y / 100) as u8);
            two(&mut b[2..4], (y % 100) as u8);
            two(&mut b[5..7], u8::from(t.month()));
            two(&mut b[8..10], t.day());
            two(&mut b[11..13], t.hour());
            two(&mut b[14..16], t.minute());
            two(&mut b[17..19], t.second());
            let milli = t.millisecond();
            let end = if milli == 0 {
                b[19] = b'Z';
                20
            } else {
                b[20] = b'0' + (milli / 100) as u8;
                two(&mut b[21..23], (milli % 100) as u8);
                24
            };
            String::from_utf8_lossy(&b[..end]).into_owned()
        }
        Ok(t) => {
            let (y, mo, d) = (t.year(), u8::from(t.month()), t.day());
            let (h, mi, s, ms) = (t.hour(), t.minute(), t.second(), t.millisecond());
            if ms == 0 {
                format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
            } else {
                format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{ms:03}Z")
            }
        }
        Err(_) => String::new(),
    }
}

/// The times the server stores and computes with: from the epoch up to, not including, 10^14 ms (in the
/// year 5138), so that a time plus any duration stays exact in a Lua number and is written in full. The
/// scripts' argument type `ms` has the same bound (crates/ojs-store/build/arg_types.rs `MS_LIMIT`; a test
/// of ojs-store holds the two equal): a time outside it is refused here, at the boundary, never by a
/// script.
pub const MS_LIMIT: i64 = 100_000_000_000_000;

/// Parses an RFC 3339 timestamp (any offset) into milliseconds since the epoch; None when it is not one,
/// or lies outside 0..[`MS_LIMIT`].
pub fn parse_ms(s: &str) -> Option<i64> {
    parse_time(s, "time").ok()
}

/// [`parse_ms`] for a request's field: the error names the field, and says whether the text is no
/// timestamp or one out of range.
pub fn parse_time(s: &str, field: &str) -> Result<i64, String> {
    let t = OffsetDateTime::parse(s, &Rfc3339)
        .map_err(|_| format!("{field} must be an RFC 3339 timestamp such as 2026-02-13T12:00:00Z; got {s:?}"))?;
    match i64::try_from(t.unix_timestamp_nanos() / 1_000_000) {
        Ok(ms) if (0..MS_LIMIT).contains(&ms) => Ok(ms),
        _ => Err(format!(
            "{field} must lie between {} and {}; got {s:?}",
            format_ms(0),
            format_ms(MS_LIMIT - 1)
        )),
    }
}

/// The local clock, for values that never order jobs (request logs, uptime).
pub fn local_now_ms() -> i64 {
    let t = OffsetDateTime::now_utc();
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let ms = 1_771_000_000_123;
        let s = format_ms(ms);
        assert!(s.ends_with(".123Z"), "{s}");
        assert_eq!(parse_ms(&s), Some(ms));
        assert_eq!(parse_ms("2026-02-13T12:00:00+01:00"), Some(1_770_980_400_000));
        assert_eq!(parse_ms("yesterday"), None);
        // Outside the range the scripts take: refused with the range named.
        assert_eq!(parse_ms("9999-12-31T23:59:59Z"), None);
        assert_eq!(parse_ms("1969-12-31T23:59:59Z"), None);
        assert_eq!(parse_ms(&format_ms(MS_LIMIT - 1)), Some(MS_LIMIT - 1));
        let e = parse_time("9999-12-31T23:59:59Z", "scheduled_at").unwrap_err();
        assert!(
            e.contains("scheduled_at must lie between 1970-01-01T00:00:00Z and 5138-11-16T09:46:39.999Z"),
            "{e}"
        );
        assert_eq!(format_ms(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_ms(1_795_757_670_007), "2026-11-27T05:34:30.007Z");
        assert_eq!(format_ms(253_402_300_799_999), "9999-12-31T23:59:59.999Z");
        assert_eq!(format_ms(-1), "1969-12-31T23:59:59.999Z");
    }
}
