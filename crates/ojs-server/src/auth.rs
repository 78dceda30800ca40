//! Bearer API keys with two scopes. `admin` may call everything; `worker` may call everything except
//! the operator endpoints (admin routes, rate-limit overrides, dead letter, queue pause/resume, worker
//! signals). Keys come from `OJS_API_KEYS` (`admin:<key>,worker:<key>,…`) and are compared in constant
//! time. Health, readiness and the manifest stay open for load balancers. With no keys configured the server
//! refuses to listen on anything but loopback unless `--insecure-no-auth` is given.

use axum::extract::Request;
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use ojs_core::{ErrorCode, OjsError};

use crate::error::ApiError;
use crate::state::AppState;

pub use crate::api_keys::{parse_keys, ApiKeys, Scope};

/// The scope a request needs; None for open endpoints.
pub fn required_scope(method: &Method, path: &str) -> Option<Scope> {
    // The dashboard page itself is static; every call it makes carries the operator's key.
    if matches!(
        path,
        "/ojs/v1/health" | "/health" | "/ojs/v1/ready" | "/ready" | "/ojs/manifest" | "/" | "/ui" | "/ui/"
    ) {
        return None;
    }
    let admin = path.starts_with("/ojs/v1/admin/")
        || path.starts_with("/ojs/v1/dead-letter")
        || (path.starts_with("/ojs/v1/rate-limits/") && method != Method::GET)
        || (path.starts_with("/ojs/v1/queues/") && (path.ends_with("/pause") || path.ends_with("/resume")))
        || (path.starts_with("/ojs/v1/workers/") && path.ends_with("/signal"));
    Some(if admin { Scope::Admin } else { Scope::Worker })
}

/// The refusal of a request whose API key is missing, unknown, or of too low a scope; None lets it
/// through (every request when no keys are configured). `lib.rs`'s edge middleware asks it first.
pub fn refusal(st: &AppState, req: &Request) -> Option<Response> {
    let keys = &st.config.api_keys;
    if keys.is_empty() {
        return None;
    }
    let needed = required_scope(req.method(), req.uri().path())?;
    let presented = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    let err = match presented.map(|p| keys.scope_of(p)) {
        None => OjsError::new(
            ErrorCode::Unauthorized,
            "this server requires an API key: Authorization: Bearer <key>",
        ),
        Some(None) => OjsError::new(ErrorCode::Unauthorized, "the API key is not valid"),
        Some(Some(scope)) if scope >= needed => return None,
        Some(Some(_)) => OjsError::new(
            ErrorCode::Forbidden,
            format!("{} {} needs an admin key", req.method(), req.uri().path()),
        ),
    };
    Some(ApiError(err).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes() {
        let keys = parse_keys("admin:aaaaaaaaaaaaaaaa, worker:wwwwwwwwwwwwwwww").expect("keys");
        assert_eq!(keys.scope_of("aaaaaaaaaaaaaaaa"), Some(Scope::Admin));
        assert_eq!(keys.scope_of("wwwwwwwwwwwwwwww"), Some(Scope::Worker));
        assert_eq!(keys.scope_of("nope"), None);
        assert!(parse_keys("root:aaaaaaaaaaaaaaaa").is_err());
        assert!(parse_keys("admin:short").is_err());
        assert_eq!(
            required_scope(&Method::POST, "/ojs/v1/workers/fetch"),
            Some(Scope::Worker)
        );
        assert_eq!(
            required_scope(&Method::POST, "/ojs/v1/queues/q/pause"),
            Some(Scope::Admin)
        );
        assert_eq!(
            required_scope(&Method::PUT, "/ojs/v1/rate-limits/k"),
            Some(Scope::Admin)
        );
        assert_eq!(
            required_scope(&Method::GET, "/ojs/v1/rate-limits/k"),
            Some(Scope::Worker)
        );
        assert_eq!(required_scope(&Method::GET, "/ojs/v1/health"), None);
    }
}
