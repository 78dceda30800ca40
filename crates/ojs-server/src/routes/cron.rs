//! Cron entries: `POST /cron` (register or update), `GET /cron`, `GET|DELETE /cron/{name}`. An entry
//! belongs to the tenant whose request registered it: a request acting as a tenant sees, lists and
//! removes only its own (`cron.rs`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use ojs_core::OjsError;
use serde::Serialize;
use serde_json::json;
use utoipa::ToSchema;

use crate::cron::{check_name, entry_view, parse_registration, CronEntry, CronRequest};
use crate::error::ApiResult;
use crate::listing::{PageQuery, Pagination, Params};
use crate::respond::{ojs_json, ok, OjsJson, OjsPath, OjsQuery};
use crate::schemas::{OjsErrorBody, OJS_MEDIA_TYPE};
use crate::state::AppState;
use crate::tenant::ActingTenant;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(register, list))
        .routes(routes!(get_entry, delete_entry))
}

/// `{"cron": CronEntry}`.
#[derive(Serialize, ToSchema)]
struct CronResponse {
    cron: CronEntry,
}

/// Cron entries in name order.
#[derive(Serialize, ToSchema)]
struct CronList {
    crons: Vec<CronEntry>,
    pagination: Pagination,
}

/// Registers a cron entry, or updates the one with that name (upsert): `{name, expression, timezone?,
/// overlap_policy?, enabled?, description?, job_template}`. 201 when new, 200 when updated.
#[utoipa::path(
    post,
    path = "/ojs/v1/cron",
    tag = "cron",
    summary = "Register (or update) a cron entry: `{name, expression, timezone?, overlap_policy?, enabled?, job_template}`",
    request_body = CronRequest,
    responses((status = 201, description = "Created", body = CronResponse, content_type = OJS_MEDIA_TYPE), (status = 200, description = "Updated", body = CronResponse, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 403, description = "A key bound to a tenant, and a header or body naming another tenant (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 409, description = "An entry of this name exists and the request's tenant does not own it (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 422, description = "A template this server cannot run (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn register(
    State(st): State<AppState>,
    tenant: ActingTenant,
    OjsJson(req): OjsJson<CronRequest>,
) -> ApiResult<Response> {
    let reg = parse_registration(req, &st.rules, &tenant)?;
    let (created, entry) = crate::cron::save(&st, &reg).await?;
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    Ok(ojs_json(
        status,
        json!(CronResponse {
            cron: entry_view(&reg.name, &entry)
        }),
    ))
}

#[utoipa::path(
    get,
    path = "/ojs/v1/cron",
    tag = "cron",
    summary = "Cron entries in name order (paginated: page, per_page)",
    params(PageQuery),
    responses((status = 200, description = "OK", body = CronList, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid query (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn list(State(st): State<AppState>, tenant: ActingTenant, OjsQuery(q): OjsQuery<Params>) -> ApiResult<Response> {
    // The same pagination as the admin listings (page/per_page or limit/offset, OJS 400 on bad numbers).
    let p = PageQuery::from_params(&q)?.resolve(100, 1000)?;
    let (total, entries) = crate::cron::page(&st, &tenant, p.offset, p.count).await?;
    Ok(ok(json!(CronList {
        crons: entries.iter().map(|(n, f)| entry_view(n, f)).collect(),
        pagination: p.of(total),
    })))
}

#[utoipa::path(
    get,
    path = "/ojs/v1/cron/{name}",
    tag = "cron",
    summary = "One cron entry with next_run_at, last_run_at and run_count",
    params(("name" = String, Path)),
    responses((status = 200, description = "OK", body = CronResponse, content_type = OJS_MEDIA_TYPE), (status = 404, description = "Not found, or another tenant's (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn get_entry(
    State(st): State<AppState>,
    tenant: ActingTenant,
    OjsPath(name): OjsPath<String>,
) -> ApiResult<Response> {
    check_name(&name).map_err(|_| OjsError::not_found("cron entry", &name))?;
    match crate::cron::entry(&st, &tenant, &name).await? {
        Some(f) => Ok(ok(json!(CronResponse {
            cron: entry_view(&name, &f)
        }))),
        None => Err(OjsError::not_found("cron entry", &name).into()),
    }
}

#[utoipa::path(
    delete,
    path = "/ojs/v1/cron/{name}",
    tag = "cron",
    summary = "Remove a cron entry (jobs it already created stay)",
    params(("name" = String, Path)),
    responses((status = 200, description = "The entry as it was", body = CronResponse, content_type = OJS_MEDIA_TYPE), (status = 404, description = "Not found, or another tenant's (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn delete_entry(
    State(st): State<AppState>,
    tenant: ActingTenant,
    OjsPath(name): OjsPath<String>,
) -> ApiResult<Response> {
    check_name(&name).map_err(|_| OjsError::not_found("cron entry", &name))?;
    match crate::cron::remove(&st, &tenant, &name).await? {
        Some(f) => Ok(ok(json!(CronResponse {
            cron: entry_view(&name, &f)
        }))),
        None => Err(OjsError::not_found("cron entry", &name).into()),
    }
}
