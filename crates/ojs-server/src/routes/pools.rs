//! Worker pools (ojs-fair-scheduling §6, §10.1): `PUT|GET|DELETE /admin/pools/{name}`,
//! `GET /admin/pools`. What a pool is and how a FETCH uses it: `pools.rs`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use ojs_core::OjsError;
use ojs_store::PoolSaved;
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::ApiResult;
use crate::pools::{active_jobs, check_name, parse, Pool, PoolRequest, PoolView, MAX_POOLS};
use crate::respond::{ojs_json, ok, OjsJson, OjsPath};
use crate::schemas::{OjsErrorBody, OJS_MEDIA_TYPE};
use crate::state::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(put_pool, get_pool, delete_pool))
}

/// `{"pool": Pool}`.
#[derive(Serialize, ToSchema)]
struct PoolResponse {
    pool: PoolView,
}

/// Every pool, in name order (a deployment holds at most 1,000).
#[derive(Serialize, ToSchema)]
struct PoolList {
    items: Vec<PoolView>,
}

/// One pool's answer, with the active jobs of its queues.
async fn answer(st: &AppState, status: StatusCode, pool: Pool) -> ApiResult<Response> {
    let active = active_jobs(st, std::slice::from_ref(&pool)).await?;
    let body = PoolResponse {
        pool: pool.view(active.first().copied().unwrap_or(0)),
    };
    Ok(ojs_json(status, serde_json::json!(body)))
}

/// A name from a GET or DELETE path: one that breaks the naming rules cannot name a pool (404).
fn path_name(name: &str) -> Result<(), OjsError> {
    check_name(name).map_err(|_| OjsError::not_found("pool", name))
}

#[utoipa::path(
    put,
    path = "/ojs/v1/admin/pools/{name}",
    tag = "admin",
    summary = "Create a worker pool or replace its definition: `{queues, strategy? (strict, round-robin (default), weighted), weights?, concurrency?}`",
    params(("name" = String, Path, description = "The pool's name (the queue-name rules)")),
    request_body = PoolRequest,
    responses((status = 201, description = "Created", body = PoolResponse, content_type = OJS_MEDIA_TYPE), (status = 200, description = "Updated", body = PoolResponse, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid pool (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 409, description = "The deployment already holds 1,000 pools (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn put_pool(
    State(st): State<AppState>,
    OjsPath(name): OjsPath<String>,
    OjsJson(req): OjsJson<PoolRequest>,
) -> ApiResult<Response> {
    let def = parse(&name, req)?;
    let json = serde_json::to_string(&def).map_err(|e| OjsError::invalid(e.to_string()))?;
    // Pools are deployment-wide: they live on shard 0, whatever shards their queues live on.
    match st.shards.first().pool_set(&name, &json, MAX_POOLS).await? {
        PoolSaved::Written {
            created,
            created_at,
            updated_at,
        } => {
            let status = if created { StatusCode::CREATED } else { StatusCode::OK };
            let pool = Pool {
                name,
                def,
                created_at,
                updated_at,
            };
            answer(&st, status, pool).await
        }
        PoolSaved::Full(n) => Err(OjsError::new(
            ojs_core::ErrorCode::Conflict,
            format!("this deployment holds {n} pools, the most it may; delete one before creating {name:?}"),
        )
        .into()),
    }
}

#[utoipa::path(
    get,
    path = "/ojs/v1/admin/pools/{name}",
    tag = "admin",
    summary = "One worker pool, with the active jobs of its queues",
    params(("name" = String, Path)),
    responses((status = 200, description = "OK", body = PoolResponse, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such pool (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn get_pool(State(st): State<AppState>, OjsPath(name): OjsPath<String>) -> ApiResult<Response> {
    path_name(&name)?;
    match st.shards.first().pool_get(&name).await? {
        Some(f) => answer(&st, StatusCode::OK, Pool::from_fields(&name, &f)?).await,
        None => Err(OjsError::not_found("pool", &name).into()),
    }
}

#[utoipa::path(
    delete,
    path = "/ojs/v1/admin/pools/{name}",
    tag = "admin",
    summary = "Remove a worker pool (its queues and jobs stay; a FETCH naming it is then a 404)",
    params(("name" = String, Path)),
    responses((status = 200, description = "The pool as it was", body = PoolResponse, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such pool (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn delete_pool(State(st): State<AppState>, OjsPath(name): OjsPath<String>) -> ApiResult<Response> {
    path_name(&name)?;
    match st.shards.first().pool_delete(&name).await? {
        Some(f) => answer(&st, StatusCode::OK, Pool::from_fields(&name, &f)?).await,
        None => Err(OjsError::not_found("pool", &name).into()),
    }
}

#[utoipa::path(
    get,
    path = "/ojs/v1/admin/pools",
    tag = "admin",
    summary = "Every worker pool in name order, each with the active jobs of its queues",
    responses((status = 200, description = "OK", body = PoolList, content_type = OJS_MEDIA_TYPE))
)]
async fn list(State(st): State<AppState>) -> ApiResult<Response> {
    let (_, stored) = st.shards.first().pool_list(MAX_POOLS).await?;
    let pools = stored
        .iter()
        .map(|(n, f)| Pool::from_fields(n, f))
        .collect::<Result<Vec<_>, _>>()?;
    let active = active_jobs(&st, &pools).await?;
    Ok(ok(PoolList {
        items: pools.iter().zip(active).map(|(p, a)| p.view(a)).collect(),
    }))
}
