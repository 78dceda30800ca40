//! The dead letter set: jobs that exhausted their retries with `on_exhaustion: dead_letter`.
//!
//! Served twice: under `/ojs/v1/dead-letter` (this server's original paths) and under
//! `/ojs/v1/admin/dead-letter` (ext-dead-letter / ext-admin-api). Both call the same functions here;
//! only the admin DELETE answers 204 (as that extension asks) where the original answers 200 with a body.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ojs_core::job::{job_view, JobView};
use ojs_core::{clock, OjsError};
use serde::Serialize;
use serde_json::json;
use utoipa::ToSchema;

use crate::error::ApiResult;
use crate::listing::{segments, views, walk, JobFilter, PageQuery, Pagination, Params};
use crate::respond::JobPath;
use crate::respond::{ok, OjsQuery};
use crate::schemas::{Job, JobResponse, OjsErrorBody, OJS_MEDIA_TYPE};
use crate::state::AppState;
use ojs_core::{JobId, JobState};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(stats))
        .routes(routes!(get_one, remove))
        .routes(routes!(retry))
        .routes(routes!(admin_list))
        .routes(routes!(admin_stats))
        .routes(routes!(admin_get_one, admin_remove))
        .routes(routes!(admin_retry))
}

/// Dead-lettered jobs, newest first.
#[derive(Serialize, ToSchema)]
struct DeadLetterList {
    #[schema(value_type = Vec<Job>)]
    items: Vec<JobView>,
    /// The same as `items`.
    #[schema(value_type = Vec<Job>)]
    jobs: Vec<JobView>,
    /// The same as `pagination.total`.
    total: u64,
    pagination: Pagination,
}

/// The dead letter set's size and age.
#[derive(Serialize, ToSchema)]
struct DeadLetterStats {
    total: u64,
    /// When the oldest entry was dead-lettered.
    #[schema(format = DateTime)]
    oldest_at: Option<String>,
    #[schema(format = DateTime)]
    newest_at: Option<String>,
}

#[derive(Serialize, ToSchema)]
struct Deleted {
    /// Always true.
    deleted: bool,
    job_id: String,
}

/// Newest first. Without a filter one ZRANGE of the page; with `queue` or `type` the set is walked and
/// each entry's fields read (see listing.rs for the cost and the cap).
async fn list_impl(st: &AppState, q: Params) -> ApiResult<Response> {
    let p = PageQuery::from_params(&q)?.resolve(50, 1000)?;
    let filter = JobFilter {
        state: Some(JobState::Discarded),
        ..JobFilter::from_params(&q)?
    };
    filter.check()?;
    let segs = segments(st, &filter, &[JobState::Discarded]).await?;
    let w = walk(st, &segs, &filter, p.offset, p.count).await?;
    let jobs = views(st, &w.ids).await?;
    Ok(ok(json!(DeadLetterList {
        items: jobs.clone(),
        jobs,
        total: w.total,
        pagination: p.of_walk(&w),
    })))
}

/// Size and age of the set: O(log n).
async fn stats_impl(st: &AppState) -> ApiResult<Response> {
    let (total, oldest, newest) = st.shards.dead_summary().await?;
    Ok(ok(json!(DeadLetterStats {
        total,
        oldest_at: oldest.map(clock::format_ms),
        newest_at: newest.map(clock::format_ms),
    })))
}

async fn get_impl(st: &AppState, id: &JobId) -> ApiResult<Response> {
    let id = id.as_str();
    match st.shards.get_job(id).await? {
        Some(f) if st.shards.on_id(id, |s| async move { s.is_dead(id).await }).await? => {
            Ok(ok(JobResponse::of(job_view(&f))))
        }
        _ => Err(OjsError::not_found("dead-letter job", id).into()),
    }
}

async fn retry_impl(st: &AppState, id: &JobId) -> ApiResult<Response> {
    let id = id.as_str();
    if let Some(e) = st
        .shards
        .on_id(id, |s| async move { s.dead_retry(id).await })
        .await?
        .refusal(id)
    {
        return Err(e.into());
    }
    let f = crate::listing::job(&st, id).await?;
    Ok(ok(JobResponse::of(job_view(&f))))
}

async fn delete_impl(st: &AppState, id: &JobId) -> ApiResult<Deleted> {
    let id = id.as_str();
    if !st.shards.on_id(id, |s| async move { s.dead_delete(id).await }).await? {
        return Err(OjsError::not_found("dead-letter job", id).into());
    }
    Ok(Deleted {
        deleted: true,
        job_id: id.to_string(),
    })
}

#[utoipa::path(
    get,
    path = "/ojs/v1/dead-letter",
    tag = "dead-letter",
    summary = "Dead-lettered jobs, newest first (page & per_page or limit & offset; queue, type)",
    params(JobFilter, PageQuery),
    responses((status = 200, description = "OK", body = DeadLetterList, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn list(State(st): State<AppState>, OjsQuery(q): OjsQuery<Params>) -> ApiResult<Response> {
    list_impl(&st, q).await
}

#[utoipa::path(
    get,
    path = "/ojs/v1/dead-letter/stats",
    tag = "dead-letter",
    summary = "How many jobs are dead-lettered, the oldest and the newest",
    responses((status = 200, description = "OK", body = DeadLetterStats, content_type = OJS_MEDIA_TYPE))
)]
async fn stats(State(st): State<AppState>) -> ApiResult<Response> {
    stats_impl(&st).await
}

#[utoipa::path(
    get,
    path = "/ojs/v1/dead-letter/{id}",
    tag = "dead-letter",
    summary = "One dead-lettered job",
    params(("id" = String, Path)),
    responses((status = 200, description = "OK", body = JobResponse, content_type = OJS_MEDIA_TYPE), (status = 404, description = "Not found (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn get_one(State(st): State<AppState>, JobPath(id): JobPath) -> ApiResult<Response> {
    get_impl(&st, &id).await
}

#[utoipa::path(
    post,
    path = "/ojs/v1/dead-letter/{id}/retry",
    tag = "dead-letter",
    summary = "Retry a dead-lettered job with fresh attempts (a unique job: unless its key is held by another live job)",
    params(("id" = String, Path)),
    responses((status = 200, description = "OK", body = JobResponse, content_type = OJS_MEDIA_TYPE), (status = 404, description = "Not found (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 409, description = "A unique job whose uniqueness key another job holds now, in a state its policy counts (OJS error `duplicate`, details as the enqueue's)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn retry(State(st): State<AppState>, JobPath(id): JobPath) -> ApiResult<Response> {
    retry_impl(&st, &id).await
}

#[utoipa::path(
    delete,
    path = "/ojs/v1/dead-letter/{id}",
    tag = "dead-letter",
    summary = "Delete a dead-lettered job",
    params(("id" = String, Path)),
    responses((status = 200, description = "OK", body = Deleted, content_type = OJS_MEDIA_TYPE), (status = 404, description = "Not found (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn remove(State(st): State<AppState>, JobPath(id): JobPath) -> ApiResult<Response> {
    Ok(ok(json!(delete_impl(&st, &id).await?)))
}

#[utoipa::path(
    get,
    path = "/ojs/v1/admin/dead-letter",
    tag = "dead-letter",
    summary = "Dead-lettered jobs, newest first (same as /ojs/v1/dead-letter)",
    params(JobFilter, PageQuery),
    responses((status = 200, description = "OK", body = DeadLetterList, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn admin_list(State(st): State<AppState>, OjsQuery(q): OjsQuery<Params>) -> ApiResult<Response> {
    list_impl(&st, q).await
}

#[utoipa::path(
    get,
    path = "/ojs/v1/admin/dead-letter/stats",
    tag = "dead-letter",
    summary = "Dead letter statistics (same as /ojs/v1/dead-letter/stats)",
    responses((status = 200, description = "OK", body = DeadLetterStats, content_type = OJS_MEDIA_TYPE))
)]
async fn admin_stats(State(st): State<AppState>) -> ApiResult<Response> {
    stats_impl(&st).await
}

#[utoipa::path(
    get,
    path = "/ojs/v1/admin/dead-letter/{id}",
    tag = "dead-letter",
    summary = "One dead-lettered job (same as /ojs/v1/dead-letter/{id})",
    params(("id" = String, Path)),
    responses((status = 200, description = "OK", body = JobResponse, content_type = OJS_MEDIA_TYPE), (status = 404, description = "Not found (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn admin_get_one(State(st): State<AppState>, JobPath(id): JobPath) -> ApiResult<Response> {
    get_impl(&st, &id).await
}

#[utoipa::path(
    post,
    path = "/ojs/v1/admin/dead-letter/{id}/retry",
    tag = "dead-letter",
    summary = "Retry a dead-lettered job (same as /ojs/v1/dead-letter/{id}/retry)",
    params(("id" = String, Path)),
    responses((status = 200, description = "OK", body = JobResponse, content_type = OJS_MEDIA_TYPE), (status = 404, description = "Not found (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 409, description = "A unique job whose uniqueness key another job holds now, in a state its policy counts (OJS error `duplicate`, details as the enqueue's)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn admin_retry(State(st): State<AppState>, JobPath(id): JobPath) -> ApiResult<Response> {
    retry_impl(&st, &id).await
}

#[utoipa::path(
    delete,
    path = "/ojs/v1/admin/dead-letter/{id}",
    tag = "dead-letter",
    summary = "Delete a dead-lettered job: 204",
    params(("id" = String, Path)),
    responses((status = 204, description = "Deleted"), (status = 404, description = "Not found (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn admin_remove(State(st): State<AppState>, JobPath(id): JobPath) -> ApiResult<Response> {
    delete_impl(&st, &id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
