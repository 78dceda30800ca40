//! Graceful shutdown (ojs-graceful-shutdown): workers report `quiet`, `drain` and `terminate` in their
//! heartbeats (`POST /workers/heartbeat`, or its alias `POST /workers/beat`), the server keeps the last
//! report in the worker's record next to the operator's signal (`POST /workers/{id}/signal`), and
//! `GET /workers/{id}/health` answers a worker's readiness from it.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use ojs_core::OjsError;
use serde_json::json;

use crate::error::ApiResult;
use crate::respond::{ojs_json, OjsPath};
use crate::schemas::{OjsErrorBody, OJS_MEDIA_TYPE};
use crate::state::AppState;
use crate::tenant::ActingTenant;
use crate::worker::{check_worker_id, worker_view, WorkerState, WorkerView};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(worker_health))
}

/// A worker's health as the server knows it: 200 while it runs, 503 once it reported `quiet`, `drain`
/// or `terminate` or the operator signalled it to (a readiness probe that stops routing to it), or when
/// it has been silent for longer than a lease (its leases lapsed: `stale`). 404 for a worker that never
/// sent a heartbeat, or whose record expired (a day after its last one), and for a request acting as a
/// tenant, a worker another tenant's request registered; of a worker of its own or of the shared fleet
/// (registered by requests acting as no tenant) it is shown only its own tenant's jobs.
#[utoipa::path(
    get,
    path = "/ojs/v1/workers/{worker_id}/health",
    tag = "workers",
    summary = "A worker's state from its last heartbeat: 200 running, 503 quiet/drain/terminate/stale",
    params(("worker_id" = String, Path)),
    responses((status = 200, description = "Running", body = WorkerView, content_type = OJS_MEDIA_TYPE), (status = 503, description = "Shutting down or stale", body = WorkerView, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Not a worker id (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 404, description = "Unknown worker (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn worker_health(
    State(st): State<AppState>,
    tenant: ActingTenant,
    OjsPath(worker): OjsPath<String>,
) -> ApiResult<Response> {
    check_worker_id(&worker)?;
    let rec = st
        .shards
        .worker_record(&worker)
        .await?
        // Another tenant's worker is absent to a request acting as a tenant; the shared fleet's ('' or,
        // written by an older build, no owner) is shown with the tenant's own jobs only.
        .filter(|rec| match rec.get("tenant").map(String::as_str) {
            None | Some("") => true,
            owner => tenant.sees_owner(owner),
        })
        .ok_or_else(|| OjsError::not_found("worker", &worker))?;
    let now = st.shards.now_ms().await?;
    let mut view = worker_view(&worker, &rec, now, st.config.visibility_timeout_ms);
    // A request acting as a tenant sees only its own tenant's jobs of the worker.
    let own = tenant.seen_ids(&st, &view.current_jobs).await?;
    view.keep_jobs(|j| own.contains(j));
    let status = match view.state {
        WorkerState::Running => StatusCode::OK,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    Ok(ojs_json(status, json!(view)))
}
