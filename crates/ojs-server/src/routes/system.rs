//! Health, readiness and the conformance manifest.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::json;

use crate::respond::{ojs_json, ok};
use crate::state::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(health))
        .routes(routes!(health_root))
        .routes(routes!(ready))
        .routes(routes!(ready_root))
        .routes(routes!(manifest))
}

/// How long health and readiness wait for Redis before calling it unreachable (a load balancer's probe
/// must get an answer, not hang on a reconnecting client).
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Pings Redis within [`PROBE_TIMEOUT`]: (reachable, round trip in ms, error).
async fn probe(st: &AppState) -> (bool, f64, Option<String>) {
    let started = std::time::Instant::now();
    let r = match tokio::time::timeout(PROBE_TIMEOUT, st.store.ping()).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err(format!("redis did not answer within {} ms", PROBE_TIMEOUT.as_millis())),
    };
    (r.is_ok(), started.elapsed().as_secs_f64() * 1000.0, r.err())
}

/// 200 when Redis answers, 503 (same shape, `status: "degraded"`) when it does not. `backend.status` is
/// `ok` or `unhealthy` (the ext-observability vocabulary); `backend.connected` says the same as a bool.
#[utoipa::path(
    get,
    path = "/ojs/v1/health",
    tag = "system",
    summary = "Liveness and the Redis status (503 when Redis is down)",
    responses((status = 200, description = "OK"), (status = 503, description = "Redis unavailable (OJS error)"))
)]
async fn health(State(st): State<AppState>) -> Response {
    let (up, latency_ms, error) = probe(&st).await;
    let body = json!({
        "status": if up { "ok" } else { "degraded" },
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_seconds": st.started.elapsed().as_secs(),
        "backend": {
            "type": "redis",
            "status": if up { "ok" } else { "unhealthy" },
            "connected": up,
            "latency_ms": latency_ms,
            "error": error,
        },
    });
    ojs_json(
        if up {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        },
        body,
    )
}

/// `/health` at the root, for probes that do not know the OJS prefix (same answer as `/ojs/v1/health`).
#[utoipa::path(
    get,
    path = "/health",
    tag = "system",
    summary = "Same as /ojs/v1/health",
    responses((status = 200, description = "OK"), (status = 503, description = "Redis unavailable"))
)]
async fn health_root(st: State<AppState>) -> Response {
    health(st).await
}

/// Readiness for load balancers: 200 `{"status":"ready"}` when this node can serve (Redis answers within
/// 2 s and the node is not shutting down), else 503 `{"status":"not_ready","reason":…}`. Unlike health,
/// a node that is draining for shutdown is alive but not ready.
#[utoipa::path(
    get,
    path = "/ojs/v1/ready",
    tag = "system",
    summary = "Readiness: 200 when Redis answers and the node is not shutting down, else 503",
    responses((status = 200, description = "Ready"), (status = 503, description = "Not ready"))
)]
async fn ready(State(st): State<AppState>) -> Response {
    if *st.shutting_down.borrow() {
        return ojs_json(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "status": "not_ready", "reason": "shutting_down" }),
        );
    }
    let (up, latency_ms, error) = probe(&st).await;
    let backend = json!({ "type": "redis", "status": if up { "ok" } else { "unhealthy" }, "latency_ms": latency_ms, "error": error });
    if up {
        ojs_json(StatusCode::OK, json!({ "status": "ready", "backend": backend }))
    } else {
        ojs_json(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "status": "not_ready", "reason": "backend_unavailable", "backend": backend }),
        )
    }
}

/// `/ready` at the root (same answer as `/ojs/v1/ready`).
#[utoipa::path(
    get,
    path = "/ready",
    tag = "system",
    summary = "Same as /ojs/v1/ready",
    responses((status = 200, description = "Ready"), (status = 503, description = "Not ready"))
)]
async fn ready_root(st: State<AppState>) -> Response {
    ready(st).await
}

#[utoipa::path(
    get,
    path = "/ojs/manifest",
    tag = "system",
    summary = "Capabilities of this server",
    responses((status = 200, description = "OK"))
)]
async fn manifest(State(st): State<AppState>) -> Response {
    ok(json!({
        "specversion": "1.0",
        "implementation": {
            "name": "ojs-redis-rs",
            "version": env!("CARGO_PKG_VERSION"),
            "language": "rust",
            "homepage": "https://github.com/openjobspec",
        },
        "protocols": ["http"],
        "backend": "redis",
        "conformance_level": 2,
        "priority_model": st.config.priority_model.as_str(),
        "extensions": ["admin-api", "backpressure", "dead-letter", "events", "graceful-shutdown", "observability", "priority", "progress", "queue-pause", "rate-limiting", "unique-jobs"],
        "capabilities": {
            "unique_jobs": {
                "strength": "strong",
                "mechanism": "check and write in one Redis Lua script (enqueue-1.lua): a key per uniqueness fingerprint naming its holder, whose state is read in the script; PX for the period",
            },
        },
        "endpoints": {
            "base": "/ojs/v1",
        },
    }))
}
