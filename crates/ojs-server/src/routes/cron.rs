//! Cron entries: `POST /cron` (register or update), `GET /cron`, `GET|DELETE /cron/{name}`.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use ojs_core::OjsError;
use serde_json::{json, Value};

use crate::cron::{check_name, entry_json, parse_registration};
use crate::error::ApiResult;
use crate::respond::{ojs_json, ok, OjsJson};
use crate::routes::admin::{PageQuery, Params};
use crate::state::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(register, list))
        .routes(routes!(get_entry, delete_entry))
}

/// Registers a cron entry, or updates the one with that name (upsert): `{name, expression, timezone?,
/// overlap_policy?, enabled?, description?, job_template}`. 201 when new, 200 when updated.
#[utoipa::path(
    post,
    path = "/ojs/v1/cron",
    tag = "cron",
    summary = "Register (or update) a cron entry: `{name, expression, timezone?, overlap_policy?, enabled?, job_template}`",
    request_body = serde_json::Value,
    responses((status = 201, description = "Created"), (status = 200, description = "Updated"), (status = 400, description = "Invalid request (OJS error)"))
)]
async fn register(State(st): State<AppState>, OjsJson(body): OjsJson<Value>) -> ApiResult<Response> {
    let reg = parse_registration(&body, &st.rules)?;
    let def = serde_json::to_string(&reg.def).map_err(|e| OjsError::invalid(e.to_string()))?;
    let next = if reg.enabled {
        // Computed on Redis' clock, like every time the server acts on.
        let now = st.store.now_ms().await?;
        reg.schedule.next_after_ms(now)
    } else {
        None
    };
    let saved = st.store.cron_set(&reg.name, &def, next).await?;
    let entry = st.store.cron_get(&reg.name).await?.unwrap_or_default();
    let status = if saved.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(ojs_json(status, json!({ "cron": entry_json(&reg.name, &entry) })))
}

#[utoipa::path(
    get,
    path = "/ojs/v1/cron",
    tag = "cron",
    summary = "Cron entries in name order (paginated: page, per_page)",
    responses((status = 200, description = "OK"))
)]
async fn list(State(st): State<AppState>, Query(q): Query<Params>) -> ApiResult<Response> {
    // The same pagination as the admin listings (page/per_page or limit/offset, OJS 400 on bad numbers).
    let p = PageQuery::from_params(&q)?.resolve(100, 1000)?;
    let (total, entries) = st.store.cron_list(p.offset, p.count).await?;
    let crons: Vec<Value> = entries.iter().map(|(n, f)| entry_json(n, f)).collect();
    Ok(ok(json!({ "crons": crons, "pagination": PageQuery::json(p, total) })))
}

#[utoipa::path(
    get,
    path = "/ojs/v1/cron/{name}",
    tag = "cron",
    summary = "One cron entry with next_run_at, last_run_at and run_count",
    params(("name" = String, Path)),
    responses((status = 200, description = "OK"), (status = 404, description = "Not found (OJS error)"))
)]
async fn get_entry(State(st): State<AppState>, Path(name): Path<String>) -> ApiResult<Response> {
    check_name(&name).map_err(|_| OjsError::not_found("cron entry", &name))?;
    match st.store.cron_get(&name).await? {
        Some(f) => Ok(ok(json!({ "cron": entry_json(&name, &f) }))),
        None => Err(OjsError::not_found("cron entry", &name).into()),
    }
}

#[utoipa::path(
    delete,
    path = "/ojs/v1/cron/{name}",
    tag = "cron",
    summary = "Remove a cron entry (jobs it already created stay)",
    params(("name" = String, Path)),
    responses((status = 200, description = "OK"), (status = 404, description = "Not found (OJS error)"))
)]
async fn delete_entry(State(st): State<AppState>, Path(name): Path<String>) -> ApiResult<Response> {
    check_name(&name).map_err(|_| OjsError::not_found("cron entry", &name))?;
    match st.store.cron_delete(&name).await? {
        Some(f) => Ok(ok(json!({ "cron": entry_json(&name, &f) }))),
        None => Err(OjsError::not_found("cron entry", &name).into()),
    }
}
