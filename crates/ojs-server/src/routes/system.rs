//! Health and the conformance manifest.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::json;

use crate::respond::{ojs_json, ok};
use crate::state::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(health)).routes(routes!(manifest))
}

/// 200 when Redis answers, 503 (same shape, `status: "degraded"`) when it does not.
#[utoipa::path(
    get,
    path = "/ojs/v1/health",
    tag = "system",
    summary = "Liveness and the Redis status (503 when Redis is down)",
    responses((status = 200, description = "OK"), (status = 503, description = "Redis unavailable (OJS error)"))
)]
async fn health(State(st): State<AppState>) -> Response {
    let started = std::time::Instant::now();
    let redis = st.store.ping().await;
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    let up = redis.is_ok();
    let body = json!({
        "status": if up { "ok" } else { "degraded" },
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_seconds": st.started.elapsed().as_secs(),
        "backend": {
            "type": "redis",
            "status": if up { "connected" } else { "disconnected" },
            "latency_ms": latency_ms,
            "error": redis.err().map(|e| e.to_string()),
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
        "conformance_level": 1,
        "priority_model": st.config.priority_model.as_str(),
        "extensions": ["backpressure", "dead-letter", "events", "priority", "queue-pause", "rate-limiting"],
        "endpoints": {
            "base": "/ojs/v1",
        },
    }))
}
