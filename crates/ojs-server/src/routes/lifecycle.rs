//! Graceful shutdown (ojs-graceful-shutdown): workers report `quiet`, `drain` and `terminate` in their
//! heartbeats (`POST /workers/heartbeat`, or its alias `POST /workers/beat`), the server keeps the last
//! report in the worker's record next to the operator's signal (`POST /workers/{id}/signal`), and
//! `GET /workers/{id}/health` answers a worker's readiness from it.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use ojs_core::{clock, OjsError};
use serde::Serialize;
use serde_json::json;
use utoipa::ToSchema;

use crate::error::ApiResult;
use crate::respond::{ojs_json, OjsJson, OjsPath};
use crate::routes::workers::{check_worker_id, heartbeat, HeartbeatReq, HeartbeatResponse};
use crate::schemas::{OjsErrorBody, OJS_MEDIA_TYPE};
use crate::state::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(beat))
        .routes(routes!(worker_health))
}

/// `POST /ojs/v1/workers/beat`: the heartbeat under the name the graceful-shutdown extension uses.
#[utoipa::path(
    post,
    path = "/ojs/v1/workers/beat",
    tag = "workers",
    summary = "Heartbeat (alias of /workers/heartbeat): `{worker_id, state?: running|quiet|drain|terminate, active_jobs?}`",
    request_body = HeartbeatReq,
    responses((status = 200, description = "OK", body = HeartbeatResponse, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn beat(st: State<AppState>, req: OjsJson<HeartbeatReq>) -> ApiResult<Response> {
    heartbeat(st, req).await
}

/// A worker's health as the server knows it: 200 while it runs, 503 once it reported `quiet`, `drain`
/// or `terminate` or the operator signalled it to (a readiness probe that stops routing to it), or when
/// it has been silent for longer than a lease (its leases lapsed: `stale`). 404 for a worker that never
/// sent a heartbeat, or whose record expired (a day after its last one).
#[utoipa::path(
    get,
    path = "/ojs/v1/workers/{worker_id}/health",
    tag = "workers",
    summary = "A worker's state from its last heartbeat: 200 running, 503 quiet/drain/terminate/stale",
    params(("worker_id" = String, Path)),
    responses((status = 200, description = "Running", body = WorkerView, content_type = OJS_MEDIA_TYPE), (status = 503, description = "Shutting down or stale", body = WorkerView, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Not a worker id (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 404, description = "Unknown worker (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn worker_health(State(st): State<AppState>, OjsPath(worker): OjsPath<String>) -> ApiResult<Response> {
    check_worker_id(&worker)?;
    let rec = st
        .shards
        .worker_record(&worker)
        .await?
        .ok_or_else(|| OjsError::not_found("worker", &worker))?;
    let now = st.shards.first().now_ms().await?;
    let view = worker_view(&worker, &rec, now, st.config.visibility_timeout_ms);
    let status = match view.state {
        WorkerState::Running => StatusCode::OK,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    Ok(ojs_json(status, json!(view)))
}

/// A worker's state as the operator sees it.
#[derive(Serialize, ToSchema, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum WorkerState {
    Running,
    Quiet,
    Drain,
    Terminate,
    /// Silent for longer than a lease.
    Stale,
}

impl WorkerState {
    /// A state as stored (`reported_state` normalised it; the operator's signal is quiet or terminate).
    fn parse(s: &str) -> Self {
        match s {
            "quiet" => Self::Quiet,
            "drain" => Self::Drain,
            "terminate" => Self::Terminate,
            _ => Self::Running,
        }
    }
}

/// A worker record as the API shows it.
#[derive(Serialize, ToSchema)]
pub(crate) struct WorkerView {
    id: String,
    /// The same as `id`.
    worker_id: String,
    /// The operator's signal when one is set, else what the worker last reported, else `running`;
    /// `stale` when silent for longer than a lease.
    pub(crate) state: WorkerState,
    /// What the worker last reported of itself.
    #[schema(value_type = WorkerState)]
    reported_state: String,
    /// The operator's signal (`quiet` or `terminate`), if any.
    signal: Option<String>,
    stale: bool,
    /// How many jobs it held at its last heartbeat.
    active_jobs: usize,
    /// Their ids.
    pub(crate) current_jobs: Vec<String>,
    #[schema(format = DateTime)]
    last_heartbeat_at: Option<String>,
}

/// A worker record as the API shows it. `state` is the operator's signal when one is set, else what the
/// worker last reported, else `running`; `stale` when the worker has been silent for longer than
/// `stale_after_ms` (the default lease: its jobs' leases have lapsed by then).
pub(crate) fn worker_view(id: &str, rec: &ojs_store::JobFields, now_ms: i64, stale_after_ms: u64) -> WorkerView {
    let last_seen = rec.get("last_seen").and_then(|v| v.parse::<i64>().ok());
    let stale = last_seen.is_none_or(|t| now_ms - t > stale_after_ms as i64);
    let reported = rec.get("state").map(String::as_str).unwrap_or("running");
    let signal = rec.get("signal").map(String::as_str).filter(|s| !s.is_empty());
    let state = if stale {
        WorkerState::Stale
    } else {
        WorkerState::parse(signal.unwrap_or(reported))
    };
    let jobs: Vec<String> = rec
        .get("jobs")
        .map(|j| j.split(' ').filter(|s| !s.is_empty()).map(str::to_owned).collect())
        .unwrap_or_default();
    WorkerView {
        id: id.to_string(),
        worker_id: id.to_string(),
        state,
        reported_state: reported.to_string(),
        signal: signal.map(str::to_owned),
        stale,
        active_jobs: jobs.len(),
        current_jobs: jobs,
        last_heartbeat_at: last_seen.map(clock::format_ms),
    }
}
