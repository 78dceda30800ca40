//! The dead letter set: jobs that exhausted their retries with `on_exhaustion: dead_letter`.

use axum::extract::{Path, Query, State};
use axum::response::Response;
use ojs_core::job::job_view;
use ojs_core::OjsError;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiResult;
use crate::respond::ok;
use crate::routes::path_job_id;
use crate::state::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(get_one, remove))
        .routes(routes!(retry))
}

#[derive(Deserialize)]
struct Page {
    limit: Option<u64>,
    offset: Option<u64>,
    queue: Option<String>,
}

#[utoipa::path(
    get,
    path = "/ojs/v1/dead-letter",
    tag = "dead-letter",
    summary = "Dead-lettered jobs, newest first (limit, offset, queue)",
    responses((status = 200, description = "OK"))
)]
async fn list(State(st): State<AppState>, Query(p): Query<Page>) -> ApiResult<Response> {
    let limit = p.limit.unwrap_or(50).clamp(1, 1000);
    let offset = p.offset.unwrap_or(0);
    let (total, jobs) = st.store.dead_list(offset, limit).await?;
    let jobs: Vec<Value> = jobs
        .iter()
        .filter(|f| p.queue.as_ref().is_none_or(|q| f.get("queue") == Some(q)))
        .map(job_view)
        .collect();
    Ok(ok(json!({
        "jobs": jobs,
        "total": total,
        "pagination": { "total": total, "limit": limit, "offset": offset },
    })))
}

#[utoipa::path(
    get,
    path = "/ojs/v1/dead-letter/{id}",
    tag = "dead-letter",
    summary = "One dead-lettered job",
    params(("id" = String, Path)),
    responses((status = 200, description = "OK"), (status = 404, description = "Not found (OJS error)"))
)]
async fn get_one(State(st): State<AppState>, Path(id): Path<String>) -> ApiResult<Response> {
    let id = path_job_id(&id)?;
    match st.store.get_job(id).await? {
        Some(f) if st.store.is_dead(id).await? => Ok(ok(json!({ "job": job_view(&f) }))),
        _ => Err(OjsError::not_found("dead-letter job", id).into()),
    }
}

#[utoipa::path(
    post,
    path = "/ojs/v1/dead-letter/{id}/retry",
    tag = "dead-letter",
    summary = "Retry a dead-lettered job with fresh attempts",
    params(("id" = String, Path)),
    responses((status = 200, description = "OK"), (status = 404, description = "Not found (OJS error)"))
)]
async fn retry(State(st): State<AppState>, Path(id): Path<String>) -> ApiResult<Response> {
    let id = path_job_id(&id)?;
    if !st.store.dead_retry(id).await? {
        return Err(OjsError::not_found("dead-letter job", id).into());
    }
    let f = st
        .store
        .get_job(id)
        .await?
        .ok_or_else(|| OjsError::not_found("job", id))?;
    Ok(ok(json!({ "job": job_view(&f) })))
}

#[utoipa::path(
    delete,
    path = "/ojs/v1/dead-letter/{id}",
    tag = "dead-letter",
    summary = "Delete a dead-lettered job",
    params(("id" = String, Path)),
    responses((status = 200, description = "OK"), (status = 404, description = "Not found (OJS error)"))
)]
async fn remove(State(st): State<AppState>, Path(id): Path<String>) -> ApiResult<Response> {
    let id = path_job_id(&id)?;
    if !st.store.dead_delete(id).await? {
        return Err(OjsError::not_found("dead-letter job", id).into());
    }
    Ok(ok(json!({ "deleted": true, "job_id": id })))
}
