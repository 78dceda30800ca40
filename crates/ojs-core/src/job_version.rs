//! Job versioning (ojs-job-versioning): the envelope's top-level `version`, the version of the args'
//! schema the producer built the job against, and the bounds of the schema registry that holds those
//! schemas (`PUT /ojs/v1/admin/schemas/{type}/{version}`).
//!
//! A version here is an integer from 1 to [`MAX_VERSION`] (the conformance suites' form; the spec's
//! `"2.0"` strings are refused with the range).

use serde_json::Value;

/// The largest version: `i32::MAX`, so it fits every client's integer type.
pub const MAX_VERSION: u32 = i32::MAX as u32;

/// The largest schema the registry holds, serialised (bytes).
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;

/// How many versions one job type may hold in the registry.
pub const MAX_SCHEMA_VERSIONS: usize = 100;

/// A version as a request gives it (`field` names it in the error): an integer from 1 to [`MAX_VERSION`].
pub fn parse_version(v: &Value, field: &str) -> Result<u32, String> {
    v.as_u64()
        .filter(|n| (1..=u64::from(MAX_VERSION)).contains(n))
        .map(|n| n as u32)
        .ok_or_else(|| format!("{field} must be an integer from 1 to {MAX_VERSION}; got {v}"))
}

/// A version in a path (`/admin/schemas/{type}/{version}`): the same range, as text.
pub fn parse_version_text(s: &str, field: &str) -> Result<u32, String> {
    s.parse::<u64>()
        .ok()
        .filter(|n| (1..=u64::from(MAX_VERSION)).contains(n))
        .map(|n| n as u32)
        .ok_or_else(|| format!("{field} must be an integer from 1 to {MAX_VERSION}; got {s:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_version_is_an_integer_from_one() {
        assert_eq!(parse_version(&json!(1), "version"), Ok(1));
        assert_eq!(parse_version(&json!(MAX_VERSION), "version"), Ok(MAX_VERSION));
        for bad in [
            json!(0),
            json!(-1),
            json!(1.5),
            json!("2.0"),
            json!(u64::from(MAX_VERSION) + 1),
        ] {
            let e = parse_version(&bad, "version").expect_err("refused");
            assert!(e.contains("from 1 to 2147483647"), "{e}");
        }
        assert_eq!(parse_version_text("7", "version"), Ok(7));
        assert!(parse_version_text("07x", "version").is_err());
        assert!(parse_version_text("0", "version").is_err());
    }
}
