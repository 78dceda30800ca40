//! Cron schedules (OJS cron spec §3–5): expressions are parsed and matched by the `croner` crate, time
//! zones come from the IANA database in `chrono-tz`; this module only decides how a wall-clock match
//! becomes an instant, which is where daylight saving time bites:
//!
//! - **spring forward**: a wall time that does not exist that day (02:30 when clocks jump from 02:00 to
//!   03:00) does not fire that day (§5.2);
//! - **fall back**: a wall time that occurs twice (01:30 when clocks go from 02:00 back to 01:00) fires
//!   once, at its first occurrence (§5.2).
//!
//! The trick: croner searches wall-clock time in a zone without DST (UTC standing in for "local
//! time"), and each wall-clock match is then placed in the real zone: no instant → skipped; two
//! instants → the earlier one, and only if it is still ahead.

use std::str::FromStr as _;

use chrono::{DateTime, LocalResult, NaiveDateTime, TimeZone as _, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};

/// A parsed schedule: expression and time zone.
#[derive(Debug, Clone)]
pub struct Schedule {
    cron: croner::Cron,
    tz: Tz,
}

/// How far ahead a search for the next occurrence may look (wall-clock matches skipped by DST gaps or
/// already-past fall-back hours count too); an expression that never matches (`0 0 30 2 *`) ends here.
const MAX_STEPS: usize = 1_000;

impl Schedule {
    /// `expression`: 5 fields (minute first) or 6 (second first), `*` `,` `-` `/` in every field,
    /// month and weekday names, `L` `W` `#`, and `@yearly` `@annually` `@monthly` `@weekly` `@daily`
    /// `@midnight` `@hourly`. `timezone`: an IANA name such as `Europe/Berlin`, or `UTC`; fixed offsets
    /// and abbreviations (`+05:00`, `EST`) are refused, since they carry no DST rules.
    pub fn parse(expression: &str, timezone: &str) -> Result<Self, String> {
        let expr = expression.trim();
        if expr.is_empty() {
            return Err("the cron expression is empty".into());
        }
        if expr.to_ascii_lowercase().starts_with("@every") {
            return Err("@every intervals are not supported; use a calendar expression such as */5 * * * *".into());
        }
        let expr = if expr.eq_ignore_ascii_case("@midnight") {
            "@daily"
        } else {
            expr
        };
        let fields = expr.split_whitespace().count();
        if !expr.starts_with('@') && fields != 5 && fields != 6 {
            return Err(format!(
                "a cron expression has 5 fields (minute hour day-of-month month day-of-week) or 6 (with seconds first); got {fields} in {expression:?}"
            ));
        }
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .build()
            .parse(expr)
            .map_err(|e| format!("invalid cron expression {expression:?}: {e}"))?;
        Ok(Self {
            cron,
            tz: parse_timezone(timezone)?,
        })
    }

    /// The first instant strictly after `after` at which the schedule fires.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // Wall-clock time in the zone, as a UTC stand-in that has no DST.
        let mut wall = Utc.from_utc_datetime(&after.with_timezone(&self.tz).naive_local());
        for _ in 0..MAX_STEPS {
            wall = self.cron.find_next_occurrence(&wall, false).ok()?;
            let local: NaiveDateTime = wall.naive_utc();
            let instant = match self.tz.from_local_datetime(&local) {
                LocalResult::Single(t) => t,
                // The first of the two instants, unless it has already passed (the repeated hour).
                LocalResult::Ambiguous(first, _) => first,
                // The wall time does not exist today (spring forward): no firing.
                LocalResult::None => continue,
            };
            let instant = instant.with_timezone(&Utc);
            if instant > after {
                return Some(instant);
            }
        }
        None
    }

    /// [`Schedule::next_after`] in epoch milliseconds (the store's unit).
    pub fn next_after_ms(&self, after_ms: i64) -> Option<i64> {
        let after = DateTime::<Utc>::from_timestamp_millis(after_ms)?;
        self.next_after(after).map(|t| t.timestamp_millis())
    }

    pub fn timezone(&self) -> &str {
        self.tz.name()
    }
}

/// An IANA time zone by name. Names without a region (`EST`, `CET`, `Japan`…) are legacy aliases or
/// abbreviations, refused except `UTC` itself.
pub fn parse_timezone(name: &str) -> Result<Tz, String> {
    let ok_shape = name == "UTC" || (name.contains('/') && !name.starts_with("Etc/GMT"));
    match Tz::from_str(name) {
        Ok(tz) if ok_shape => Ok(tz),
        _ => Err(format!(
            "timezone must be an IANA time zone name such as \"America/New_York\" or \"UTC\" (fixed offsets and abbreviations carry no daylight-saving rules); got {name:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).expect("rfc3339").with_timezone(&Utc)
    }

    fn next(expr: &str, tz: &str, after: &str) -> String {
        let s = Schedule::parse(expr, tz).expect("valid");
        s.next_after(at(after)).expect("fires").to_rfc3339()
    }

    #[test]
    fn five_and_six_fields_specials_and_zones() {
        assert_eq!(
            next("*/5 * * * *", "UTC", "2026-11-24T10:02:30Z"),
            "2026-11-24T10:05:00+00:00"
        );
        assert_eq!(
            next("15 * * * * *", "UTC", "2026-11-24T10:02:30Z"),
            "2026-11-24T10:03:15+00:00"
        );
        assert_eq!(
            next("@daily", "UTC", "2026-11-24T10:02:30Z"),
            "2026-11-25T00:00:00+00:00"
        );
        assert_eq!(
            next("@midnight", "UTC", "2026-11-24T10:02:30Z"),
            "2026-11-25T00:00:00+00:00"
        );
        assert_eq!(
            next("@weekly", "UTC", "2026-11-24T10:02:30Z"),
            "2026-11-29T00:00:00+00:00"
        );
        assert_eq!(
            next("0 9 * * MON-FRI", "Asia/Tokyo", "2026-11-24T10:00:00Z"),
            "2026-11-25T00:00:00+00:00"
        );
        assert_eq!(
            next("0 0 L * *", "UTC", "2026-02-10T00:00:00Z"),
            "2026-02-28T00:00:00+00:00"
        );
    }

    #[test]
    fn spring_forward_skips_the_missing_wall_time() {
        // New York, 2026-03-08: 02:00 EST jumps to 03:00 EDT; 02:30 does not exist that day.
        assert_eq!(
            next("30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z"),
            "2026-03-09T06:30:00+00:00"
        );
        // An hourly job resumes at the first valid hour after the gap.
        assert_eq!(
            next("0 * * * *", "America/New_York", "2026-03-08T06:30:00Z"),
            "2026-03-08T07:00:00+00:00"
        );
    }

    #[test]
    fn fall_back_fires_the_repeated_wall_time_once() {
        // New York, 2026-11-01: 02:00 EDT falls back to 01:00 EST; 01:30 happens at 05:30Z and 06:30Z.
        let first = next("30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z");
        assert_eq!(first, "2026-11-01T05:30:00+00:00", "the first (EDT) occurrence");
        assert_eq!(
            next("30 1 * * *", "America/New_York", "2026-11-01T05:30:00Z"),
            "2026-11-02T06:30:00+00:00",
            "not again at 01:30 EST the same night"
        );
    }

    #[test]
    fn invalid_expressions_and_zones_are_refused() {
        for e in [
            "not a valid cron",
            "0 0 0 0 0 0 0",
            "99 25 32 13 8",
            "*/0 * * * *",
            "",
            "@every 5m",
            "* * *",
        ] {
            assert!(Schedule::parse(e, "UTC").is_err(), "{e:?} must be refused");
        }
        for tz in ["+05:00", "EST", "UTC+5", "Mars/Olympus", "Etc/GMT+5"] {
            assert!(Schedule::parse("* * * * *", tz).is_err(), "{tz:?} must be refused");
        }
        assert!(Schedule::parse("0 9 * * *", "Europe/Berlin").is_ok());
    }

    #[test]
    fn an_expression_that_never_matches_has_no_next_run() {
        let s = Schedule::parse("0 0 30 2 *", "UTC").expect("parses");
        assert!(s.next_after(at("2026-01-01T00:00:00Z")).is_none());
    }
}
