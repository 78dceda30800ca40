//! Graceful shutdown (ojs-graceful-shutdown): workers report `quiet`, `drain` and `terminate` in their
//! heartbeats (`POST /workers/heartbeat`, or its alias `POST /workers/beat`), the server keeps the last
//! report in the worker's record next to the operator's signal (`POST /workers/{id}/signal`), and
//! `GET /workers/{id}/health` answers a worker's readiness from it.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use ojs_core::{clock, OjsError};
use serde_json::json;

use crate::error::ApiResult;
use crate::respond::{ojs_json, OjsJson};
use crate::routes::workers::{check_worker_id, heartbeat, HeartbeatReq};
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
    request_body = serde_json::Value,
    responses((status = 200, description = "OK"), (status = 400, description = "Invalid request (OJS error)"))
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
    responses((status = 200, description = "Running"), (status = 503, description = "Shutting down or stale"), (status = 404, description = "Unknown worker (OJS error)"))
)]
async fn worker_health(State(st): State<AppState>, Path(worker): Path<String>) -> ApiResult<Response> {
    check_worker_id(&worker)?;
    let rec = st
        .store
        .worker_record(&worker)
        .await?
        .ok_or_else(|| OjsError::not_found("worker", &worker))?;
    let now = st.store.now_ms().await?;
    let view = worker_view(&worker, &rec, now, st.config.visibility_timeout_ms);
    let healthy = view["state"] == "running";
    Ok(ojs_json(
        if healthy {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        },
        view,
    ))
}

/// A worker record as the API shows it. `state` is the operator's signal when one is set, else what the
/// worker last reported, else `running`; `stale` when the worker has been silent for longer than
/// `stale_after_ms` (the default lease: its jobs' leases have lapsed by then).
pub(crate) fn worker_view(id: &str, rec: &ojs_store::JobFields, now_ms: i64, stale_after_ms: u64) -> serde_json::Value {
    let last_seen = rec.get("last_seen").and_then(|v| v.parse::<i64>().ok());
    let stale = last_seen.is_none_or(|t| now_ms - t > stale_after_ms as i64);
    let reported = rec.get("state").map(String::as_str).unwrap_or("running");
    let signal = rec.get("signal").map(String::as_str).filter(|s| !s.is_empty());
    let state = if stale { "stale" } else { signal.unwrap_or(reported) };
    let jobs: Vec<&str> = rec
        .get("jobs")
        .map(|j| j.split(' ').filter(|s| !s.is_empty()).collect())
        .unwrap_or_default();
    json!({
        "id": id,
        "worker_id": id,
        "state": state,
        "reported_state": reported,
        "signal": signal,
        "stale": stale,
        "active_jobs": jobs.len(),
        "current_jobs": jobs,
        "last_heartbeat_at": last_seen.map(clock::format_ms),
    })
}
