//! Bearer API keys with three scopes. `admin` may call everything; `worker` may call everything except
//! the operator endpoints (admin routes, rate-limit overrides, dead letter, queue pause/resume, worker
//! signals); `worker@<tenant>` only the routes that serve one tenant's jobs, and acts as that tenant on
//! each (`tenant.rs`). Keys come from `OJS_API_KEYS` (`admin:<key>,worker:<key>,worker@acme:<key>,…`)
//! and are compared in constant time. Health, readiness and the manifest stay open for load balancers.
//! With no keys configured the server refuses to listen on anything but loopback unless
//! `--insecure-no-auth` is given.

use axum::extract::Request;
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use ojs_core::{ErrorCode, OjsError};

use crate::error::ApiError;
use crate::state::AppState;
use crate::tenant::ActingTenant;

pub use crate::api_keys::{parse_keys, ApiKeys, KeyTenant, Scope};

/// The scope a request needs; None for open endpoints.
pub fn required_scope(method: &Method, path: &str) -> Option<Scope> {
    // The dashboard page itself is static; every call it makes carries the operator's key.
    if matches!(
        path,
        "/ojs/v1/health" | "/health" | "/ojs/v1/ready" | "/ready" | "/ojs/manifest" | "/" | "/ui" | "/ui/"
    ) {
        return None;
    }
    // Webhook subscriptions receive every tenant's events (ojs-webhooks §9.3 scopes them to a tenant,
    // which this server does not do yet): operator only.
    let admin = path.starts_with("/ojs/v1/admin/")
        || path.starts_with("/ojs/v1/webhooks/")
        || path.starts_with("/ojs/v1/dead-letter")
        || (path.starts_with("/ojs/v1/rate-limits/") && method != Method::GET)
        || (path.starts_with("/ojs/v1/queues/") && (path.ends_with("/pause") || path.ends_with("/resume")))
        || (path.starts_with("/ojs/v1/workers/") && path.ends_with("/signal"));
    Some(if admin {
        Scope::Admin
    } else if serves_one_tenant(method, path) {
        Scope::Tenant
    } else {
        Scope::Worker
    })
}

/// The routes a key bound to a tenant may call: each either acts on one job, workflow or cron entry
/// (another tenant's is answered as absent), creates what belongs to the tenant, claims only its jobs,
/// lists only its own (cron entries, a worker's jobs), or shows counts without job ids (queues, one
/// rate-limit key). `/events` and `/events/stream` serve it only with a job filter (`routes/events.rs`).
/// Every other route spans tenants (the event streams of every job or queue, the workflow and rate-limit
/// listings, the metrics), and a route added later is refused until it is listed here.
fn serves_one_tenant(method: &Method, path: &str) -> bool {
    let Some(rest) = path.strip_prefix("/ojs/v1/") else {
        return false;
    };
    let get = method == Method::GET;
    let segments: Vec<&str> = rest.split('/').collect();
    match segments.as_slice() {
        ["jobs"]
        | ["jobs", _]
        | ["jobs", _, "explain" | "progress" | "checkpoint" | "ack" | "nack"]
        | ["jobs", _, "events", "stream"] => true,
        ["checkpoints", _] | ["checkpoints", _, "resume"] => true,
        // The JavaScript SDK's doubled prefix (routes/checkpoints.rs js_sdk_alias_router).
        ["ojs", "v1", "checkpoints", _] | ["ojs", "v1", "checkpoints", _, "resume"] => true,
        ["workers", "fetch" | "ack" | "nack" | "heartbeat" | "beat" | "progress"] | ["workers", _, "health"] => true,
        // POST creates one; GET lists every tenant's.
        ["workflows"] => !get,
        ["workflows", _] | ["cron"] | ["cron", _] | ["events"] | ["events", "stream"] | ["openapi.json"] => true,
        ["queues"] | ["queues", _] | ["queues", _, "stats" | "priority-stats"] | ["rate-limits", _] => get,
        _ => false,
    }
}

/// The refusal of a request (None lets it through): an API key missing, unknown, or of too low a scope,
/// or bound to a tenant while its `X-OJS-Tenant` names another (403). A key bound to a tenant puts the
/// [`ActingTenant`] it acts as into the request's extensions, which the handlers' extractor reads. Every request passes when no keys are configured. `lib.rs`'s edge
/// middleware asks it first.
pub fn admit(st: &AppState, req: &mut Request) -> Option<Response> {
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
    let err = match presented.map(|p| keys.find(p)) {
        None => OjsError::new(
            ErrorCode::Unauthorized,
            "this server requires an API key: Authorization: Bearer <key>",
        ),
        Some(None) => OjsError::new(ErrorCode::Unauthorized, "the API key is not valid"),
        Some(Some(key)) if key.scope >= needed => match &key.tenant {
            None => return None,
            // A key bound to a tenant acts as it on every path; a header naming another is refused here.
            Some(t) => match ActingTenant::resolve(Some(t), req.headers()) {
                Ok(acting) => {
                    req.extensions_mut().insert(acting);
                    return None;
                }
                Err(e) => e,
            },
        },
        Some(Some(key)) => {
            let (method, path) = (req.method(), req.uri().path());
            OjsError::new(
                ErrorCode::Forbidden,
                match (&key.tenant, needed) {
                    (Some(KeyTenant(t)), Scope::Worker) => {
                        format!("{method} {path} spans tenants: a key bound to tenant {t:?} may not call it")
                    }
                    _ => format!("{method} {path} needs an admin key"),
                },
            )
        }
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
            Some(Scope::Tenant)
        );
        assert_eq!(
            required_scope(&Method::POST, "/ojs/v1/queues/q/pause"),
            Some(Scope::Admin)
        );
        assert_eq!(
            required_scope(&Method::PUT, "/ojs/v1/rate-limits/k"),
            Some(Scope::Admin)
        );
        assert_eq!(required_scope(&Method::GET, "/ojs/v1/rate-limits"), Some(Scope::Worker));
        assert_eq!(required_scope(&Method::GET, "/ojs/v1/health"), None);
        for (method, path) in [
            (Method::POST, "/ojs/v1/webhooks/subscriptions"),
            (Method::GET, "/ojs/v1/webhooks/subscriptions"),
            (Method::PATCH, "/ojs/v1/webhooks/subscriptions/x"),
            (Method::GET, "/ojs/v1/webhooks/subscriptions/x/deliveries"),
        ] {
            assert_eq!(required_scope(&method, path), Some(Scope::Admin), "{method} {path}");
        }
    }

    #[test]
    fn a_key_bound_to_a_tenant_is_written_worker_at_tenant() {
        let keys = parse_keys("worker@acme:aaaaaaaaaaaaaaaa,worker@acme.eu-1:bbbbbbbbbbbbbbbb").expect("keys");
        let k = keys.find("aaaaaaaaaaaaaaaa").expect("a key");
        assert_eq!(
            (k.scope, k.tenant.as_ref()),
            (Scope::Tenant, Some(&KeyTenant("acme".into())))
        );
        assert_eq!(
            keys.find("bbbbbbbbbbbbbbbb").and_then(|k| k.tenant.clone()),
            Some(KeyTenant("acme.eu-1".into()))
        );
        for bad in [
            "admin@acme:aaaaaaaaaaaaaaaa",
            "worker@:aaaaaaaaaaaaaaaa",
            "worker@no spaces:aaaaaaaaaaaaaaaa",
            "worker@{x}:aaaaaaaaaaaaaaaa",
            "worker@acme:short",
            // One key, two bindings: which tenant would it act as?
            "worker@acme:aaaaaaaaaaaaaaaa,worker@globex:aaaaaaaaaaaaaaaa",
            "worker:aaaaaaaaaaaaaaaa,worker@acme:aaaaaaaaaaaaaaaa",
        ] {
            assert!(parse_keys(bad).is_err(), "{bad}");
        }
        // A key listed under two unbound scopes has the higher, as before.
        let keys = parse_keys("worker:aaaaaaaaaaaaaaaa,admin:aaaaaaaaaaaaaaaa").expect("keys");
        assert_eq!(keys.scope_of("aaaaaaaaaaaaaaaa"), Some(Scope::Admin));
    }

    #[test]
    fn a_tenant_key_may_call_the_routes_that_serve_one_tenant_only() {
        let id = "019a5f00-0000-7000-8000-0000000000c1";
        for (method, path) in [
            (Method::POST, "/ojs/v1/jobs".to_string()),
            (Method::POST, "/ojs/v1/jobs/batch".to_string()),
            (Method::DELETE, format!("/ojs/v1/jobs/{id}")),
            (Method::GET, format!("/ojs/v1/jobs/{id}/explain")),
            (Method::PUT, format!("/ojs/v1/jobs/{id}/progress")),
            (Method::POST, format!("/ojs/v1/jobs/{id}/ack")),
            (Method::POST, format!("/ojs/v1/jobs/{id}/nack")),
            (Method::PUT, format!("/ojs/v1/jobs/{id}/checkpoint")),
            (Method::DELETE, format!("/ojs/v1/checkpoints/{id}")),
            (Method::GET, format!("/ojs/v1/checkpoints/{id}/resume")),
            (Method::GET, format!("/ojs/v1/jobs/{id}/events/stream")),
            (Method::POST, "/ojs/v1/workers/heartbeat".to_string()),
            (Method::GET, "/ojs/v1/workers/w-1/health".to_string()),
            (Method::POST, "/ojs/v1/workflows".to_string()),
            (Method::DELETE, format!("/ojs/v1/workflows/{id}")),
            (Method::GET, "/ojs/v1/cron".to_string()),
            (Method::GET, "/ojs/v1/events".to_string()),
            (Method::GET, "/ojs/v1/queues/q/stats".to_string()),
            (Method::GET, "/ojs/v1/rate-limits/k".to_string()),
        ] {
            assert_eq!(required_scope(&method, &path), Some(Scope::Tenant), "{method} {path}");
        }
        for (method, path) in [
            (Method::GET, "/ojs/v1/workflows"),
            (Method::GET, "/ojs/v1/rate-limits"),
            (Method::GET, "/ojs/v1/events/stream/x"),
            (Method::GET, "/ojs/v1/queues/q/events/stream"),
            (Method::DELETE, "/ojs/v1/queues/q"),
            (Method::GET, "/metrics"),
            (Method::GET, "/ojs/v1/some/route/added/later"),
        ] {
            assert_eq!(required_scope(&method, path), Some(Scope::Worker), "{method} {path}");
        }
        assert_eq!(
            required_scope(&Method::GET, "/ojs/v1/admin/tenants"),
            Some(Scope::Admin)
        );
    }
}
