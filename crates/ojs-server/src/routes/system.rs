//! Health, readiness and the conformance manifest.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Serialize;
use serde_json::json;
use utoipa::ToSchema;

use crate::respond::{ojs_json, ok};
use crate::schemas::OJS_MEDIA_TYPE;
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

/// Pings Redis within [`PROBE_TIMEOUT`]: (reachable, round trip in ms, error). On a deployment of
/// several shards, the primary of every shard must answer.
async fn probe(st: &AppState) -> (bool, f64, Option<String>) {
    let started = std::time::Instant::now();
    let r = match tokio::time::timeout(PROBE_TIMEOUT, st.shards.ping_all()).await {
        Ok(r) => r,
        Err(_) => Err(format!("redis did not answer within {} ms", PROBE_TIMEOUT.as_millis())),
    };
    (r.is_ok(), started.elapsed().as_secs_f64() * 1000.0, r.err())
}

/// The job store as a probe saw it.
#[derive(Serialize, ToSchema)]
struct Backend {
    /// Always `redis`.
    #[serde(rename = "type")]
    kind: &'static str,
    status: BackendStatus,
    /// Whether Redis answered (health only).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    connected: Option<bool>,
    /// The PING's round trip.
    latency_ms: f64,
    /// Why Redis is unreachable.
    error: Option<String>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
enum BackendStatus {
    Ok,
    Unhealthy,
}

impl Backend {
    /// Pings Redis within [`PROBE_TIMEOUT`].
    async fn probe(st: &AppState) -> Self {
        let (up, latency_ms, error) = probe(st).await;
        Self {
            kind: "redis",
            status: if up {
                BackendStatus::Ok
            } else {
                BackendStatus::Unhealthy
            },
            connected: None,
            latency_ms,
            error,
        }
    }

    fn up(&self) -> bool {
        self.error.is_none()
    }
}

/// Liveness: `ok`, or `degraded` when Redis does not answer.
#[derive(Serialize, ToSchema)]
struct Health {
    status: HealthStatus,
    /// The server's version.
    version: &'static str,
    uptime_seconds: u64,
    backend: Backend,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
enum HealthStatus {
    Ok,
    Degraded,
}

/// 200 when Redis answers, 503 (same shape, `status: "degraded"`) when it does not. `backend.status` is
/// `ok` or `unhealthy` (the ext-observability vocabulary); `backend.connected` says the same as a bool.
#[utoipa::path(
    get,
    path = "/ojs/v1/health",
    tag = "system",
    summary = "Liveness and the Redis status (503 when Redis is down)",
    responses((status = 200, description = "OK", body = Health, content_type = OJS_MEDIA_TYPE), (status = 503, description = "Redis unavailable (status: degraded)", body = Health, content_type = OJS_MEDIA_TYPE))
)]
async fn health(State(st): State<AppState>) -> Response {
    let mut backend = Backend::probe(&st).await;
    let up = backend.up();
    backend.connected = Some(up);
    let body = Health {
        status: if up { HealthStatus::Ok } else { HealthStatus::Degraded },
        version: env!("CARGO_PKG_VERSION"),
        uptime_seconds: st.started.elapsed().as_secs(),
        backend,
    };
    ojs_json(status(up), json!(body))
}

fn status(up: bool) -> StatusCode {
    if up {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

/// `/health` at the root, for probes that do not know the OJS prefix (same answer as `/ojs/v1/health`).
#[utoipa::path(
    get,
    path = "/health",
    tag = "system",
    summary = "Same as /ojs/v1/health",
    responses((status = 200, description = "OK", body = Health, content_type = OJS_MEDIA_TYPE), (status = 503, description = "Redis unavailable (status: degraded)", body = Health, content_type = OJS_MEDIA_TYPE))
)]
async fn health_root(st: State<AppState>) -> Response {
    health(st).await
}

/// Readiness: `ready`, or `not_ready` with the reason.
#[derive(Serialize, ToSchema)]
struct Readiness {
    status: ReadyStatus,
    /// Why not ready: `shutting_down` or `backend_unavailable`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    reason: Option<&'static str>,
    /// Absent while shutting down (Redis is not probed then).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    backend: Option<Backend>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
enum ReadyStatus {
    Ready,
    NotReady,
}

/// Readiness for load balancers: 200 `{"status":"ready"}` when this node can serve (Redis answers within
/// 2 s and the node is not shutting down), else 503 `{"status":"not_ready","reason":…}`. Unlike health,
/// a node that is draining for shutdown is alive but not ready.
#[utoipa::path(
    get,
    path = "/ojs/v1/ready",
    tag = "system",
    summary = "Readiness: 200 when Redis answers and the node is not shutting down, else 503",
    responses((status = 200, description = "Ready", body = Readiness, content_type = OJS_MEDIA_TYPE), (status = 503, description = "Not ready", body = Readiness, content_type = OJS_MEDIA_TYPE))
)]
async fn ready(State(st): State<AppState>) -> Response {
    let r = if *st.shutting_down.borrow() {
        Readiness {
            status: ReadyStatus::NotReady,
            reason: Some("shutting_down"),
            backend: None,
        }
    } else {
        let backend = Backend::probe(&st).await;
        let up = backend.up();
        Readiness {
            status: if up { ReadyStatus::Ready } else { ReadyStatus::NotReady },
            reason: (!up).then_some("backend_unavailable"),
            backend: Some(backend),
        }
    };
    ojs_json(status(r.reason.is_none()), json!(r))
}

/// `/ready` at the root (same answer as `/ojs/v1/ready`).
#[utoipa::path(
    get,
    path = "/ready",
    tag = "system",
    summary = "Same as /ojs/v1/ready",
    responses((status = 200, description = "Ready", body = Readiness, content_type = OJS_MEDIA_TYPE), (status = 503, description = "Not ready", body = Readiness, content_type = OJS_MEDIA_TYPE))
)]
async fn ready_root(st: State<AppState>) -> Response {
    ready(st).await
}

/// What this server implements (`GET /ojs/manifest`).
#[derive(Serialize, ToSchema)]
struct Manifest {
    /// The OJS version.
    specversion: &'static str,
    implementation: Implementation,
    protocols: Vec<&'static str>,
    backend: &'static str,
    conformance_level: u8,
    /// `seed` or `core`.
    priority_model: &'static str,
    /// The OJS extensions served, then ours (named `x-…`: `x-explain` is `GET /jobs/{id}/explain`).
    extensions: Vec<&'static str>,
    capabilities: Capabilities,
    endpoints: Endpoints,
}

#[derive(Serialize, ToSchema)]
struct Capabilities {
    unique_jobs: UniqueJobs,
}

/// How unique jobs are enforced (ojs-unique-jobs: `strong` = no two jobs with one key can be
/// accepted, however many producers race).
#[derive(Serialize, ToSchema)]
struct UniqueJobs {
    strength: &'static str,
    mechanism: &'static str,
}

#[derive(Serialize, ToSchema)]
struct Implementation {
    name: &'static str,
    version: &'static str,
    language: &'static str,
    homepage: &'static str,
}

#[derive(Serialize, ToSchema)]
struct Endpoints {
    /// The path every OJS route starts with.
    base: &'static str,
}

#[utoipa::path(
    get,
    path = "/ojs/manifest",
    tag = "system",
    summary = "Capabilities of this server",
    responses((status = 200, description = "OK", body = Manifest, content_type = OJS_MEDIA_TYPE))
)]
async fn manifest(State(st): State<AppState>) -> Response {
    ok(json!(Manifest {
        specversion: "1.0",
        implementation: Implementation {
            name: "ojs-redis-rs",
            version: env!("CARGO_PKG_VERSION"),
            language: "rust",
            homepage: "https://github.com/openjobspec",
        },
        protocols: vec!["http"],
        backend: "redis",
        conformance_level: 4,
        priority_model: st.config.priority_model.as_str(),
        extensions: vec![
            "admin-api",
            "backpressure",
            "dead-letter",
            "events",
            "fair-scheduling",
            "graceful-shutdown",
            "multi-tenancy",
            "observability",
            "priority",
            "progress",
            "queue-pause",
            "rate-limiting",
            "unique-jobs",
            // Ours, beyond the seeds and the OJS extensions: GET /ojs/v1/jobs/{id}/explain (routes/explain.rs);
            // `rate_limit.cost` and the ACK's `cost_used`; `rate_limit.adaptive`; `rate_limit.floor`; a
            // queue's tenancy setting (PUT /admin/queues/{q}/tenancy: the tenant's source, the queue's
            // own weights, and its tenants' concurrency there).
            "x-explain",
            "x-rate-limit-costs",
            "x-rate-limit-adaptive",
            "x-rate-limit-burst",
            "x-queue-tenancy",
        ],
        capabilities: Capabilities {
            unique_jobs: UniqueJobs {
                strength: "strong",
                mechanism: "check and write in one Redis Lua script (enqueue-1.lua): a key per uniqueness fingerprint naming its holder, whose state is read in the script; PX for the period",
            },
        },
        endpoints: Endpoints { base: "/ojs/v1" },
    }))
}
