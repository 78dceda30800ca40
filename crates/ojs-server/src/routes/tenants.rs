//! Tenants (the OJS multi-tenancy extension, §8 and §10): a tenant's fair-share weight and its
//! counters. How a tenant's jobs wait and share FETCH: lua/includes/tenant.lua.

use axum::extract::State;
use axum::response::Response;
use ojs_core::{names, OjsError};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ApiResult;
use crate::respond::{ok, OjsJson, OjsPath, OjsQuery, QueuePath};
use crate::schemas::{OjsErrorBody, OJS_MEDIA_TYPE};
use crate::state::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(get_tenant, put_tenant))
        .routes(routes!(stats))
        .routes(routes!(get_tenancy, put_tenancy, delete_tenancy))
}

/// `GET /admin/tenants?limit=n`: the tenants active in the last 30 days, most recent first.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// At most this many (1 to 1,000; default 100).
    limit: Option<u64>,
}

#[derive(Serialize, ToSchema)]
struct TenantSummary {
    tenant_id: String,
    /// Its last enqueue or claim.
    #[schema(format = DateTime)]
    last_active_at: String,
    jobs: TenantJobs,
}

#[derive(Serialize, ToSchema)]
struct TenantList {
    items: Vec<TenantSummary>,
}

#[utoipa::path(
    get,
    path = "/ojs/v1/admin/tenants",
    tag = "tenants",
    summary = "The tenants active in the last 30 days, most recent first, with their counters",
    params(ListQuery),
    responses((status = 200, description = "OK", body = TenantList, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn list(State(st): State<AppState>, OjsQuery(q): OjsQuery<ListQuery>) -> ApiResult<Response> {
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(OjsError::invalid(format!("limit must be from 1 to 1000; got {limit}")).into());
    }
    let recent = crate::tenant::recent(&st, limit as usize).await?;
    let hour = crate::tenant::last_hour(&st, recent.iter().map(|t| t.tenant.as_str())).await?;
    let items = recent
        .into_iter()
        .zip(hour)
        .map(|(t, h)| TenantSummary {
            tenant_id: t.tenant,
            last_active_at: ojs_core::clock::format_ms(t.last_active_ms),
            jobs: TenantJobs {
                enqueued: t.counts.enqueued,
                dispatched: t.counts.dispatched,
                dispatched_last_hour: h.dispatched,
                share_last_hour: h.share,
            },
        })
        .collect();
    Ok(ok(TenantList { items }))
}

/// The most a weight may be (a tenant of weight w gets w shares to another's 1).
const MAX_TENANT_WEIGHT: u64 = ojs_core::tenancy::MAX_TENANT_WEIGHT;

fn tenant_id(t: &str) -> Result<(), OjsError> {
    names::check_tenant(t, "the tenant id").map_err(OjsError::invalid)
}

/// A tenant's configuration.
#[derive(Serialize, ToSchema)]
struct Tenant {
    tenant_id: String,
    /// Its share of FETCH against other tenants of a queue, both backlogged: weight / sum of weights.
    fairness_weight: u32,
    /// Whether `fairness_weight` was set (else it is the default, 1).
    configured: bool,
}

#[derive(Serialize, ToSchema)]
struct TenantResponse {
    tenant: Tenant,
}

async fn tenant_of(st: &AppState, id: &str) -> ApiResult<Tenant> {
    let w = crate::tenant::weight(st, id).await?;
    Ok(Tenant {
        tenant_id: id.to_string(),
        fairness_weight: w.unwrap_or(1),
        configured: w.is_some(),
    })
}

#[utoipa::path(
    get,
    path = "/ojs/v1/admin/tenants/{id}",
    tag = "tenants",
    summary = "A tenant's configuration (its fair-share weight)",
    params(("id" = String, Path)),
    responses((status = 200, description = "OK", body = TenantResponse, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Not a tenant id (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn get_tenant(State(st): State<AppState>, OjsPath(id): OjsPath<String>) -> ApiResult<Response> {
    tenant_id(&id)?;
    Ok(ok(TenantResponse {
        tenant: tenant_of(&st, &id).await?,
    }))
}

/// `PUT /admin/tenants/{id}`: `{"fairness_weight": n}` (1 to 1,000,000), or `null` for the default.
#[derive(Deserialize, ToSchema)]
struct TenantRequest {
    #[schema(value_type = Option<u32>, minimum = 1, maximum = 1000000)]
    fairness_weight: Option<serde_json::Value>,
}

#[utoipa::path(
    put,
    path = "/ojs/v1/admin/tenants/{id}",
    tag = "tenants",
    summary = "Set a tenant's fair-share weight: `{\"fairness_weight\": n}` (null: back to 1)",
    params(("id" = String, Path)),
    request_body = TenantRequest,
    responses((status = 200, description = "OK", body = TenantResponse, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn put_tenant(
    State(st): State<AppState>,
    OjsPath(id): OjsPath<String>,
    OjsJson(req): OjsJson<TenantRequest>,
) -> ApiResult<Response> {
    tenant_id(&id)?;
    let weight = match req.fairness_weight {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(w) if (1..=MAX_TENANT_WEIGHT).contains(&w) => Some(w as u32),
            _ => {
                return Err(OjsError::invalid(format!(
                    "fairness_weight must be an integer from 1 to {MAX_TENANT_WEIGHT}; got {v}"
                ))
                .into())
            }
        },
    };
    crate::tenant::set_weight(&st, &id, weight).await?;
    Ok(ok(TenantResponse {
        tenant: tenant_of(&st, &id).await?,
    }))
}

/// `GET /admin/tenants/{id}/stats` (multi-tenancy §10.2).
#[derive(Serialize, ToSchema)]
struct TenantStats {
    tenant_id: String,
    /// Jobs enqueued with this tenant (counted over the last 30 days of the tenant's activity).
    total_jobs: u64,
    jobs: TenantJobs,
    fairness: TenantFairness,
}

#[derive(Serialize, ToSchema)]
struct TenantJobs {
    /// As `total_jobs`.
    enqueued: u64,
    /// Claims of the tenant's jobs by FETCH (each attempt counts).
    dispatched: u64,
    /// Claims of the tenant's jobs in the last hour (the current minute and the 59 before it).
    dispatched_last_hour: u64,
    /// `dispatched_last_hour` over every tenant's claims in that hour (0 to 1; 0 when there were none):
    /// the tenant's fair share at work.
    #[schema(minimum = 0, maximum = 1)]
    share_last_hour: f64,
}

#[derive(Serialize, ToSchema)]
struct TenantFairness {
    weight: u32,
}

#[utoipa::path(
    get,
    path = "/ojs/v1/admin/tenants/{id}/stats",
    tag = "tenants",
    summary = "A tenant's counters: jobs enqueued and dispatched, and its fair-share weight",
    params(("id" = String, Path)),
    responses((status = 200, description = "OK", body = TenantStats, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Not a tenant id (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn stats(State(st): State<AppState>, OjsPath(id): OjsPath<String>) -> ApiResult<Response> {
    tenant_id(&id)?;
    let ojs_store::TenantCounts { enqueued, dispatched } = crate::tenant::counts(&st, &id).await?;
    let t = tenant_of(&st, &id).await?;
    let h = crate::tenant::last_hour(&st, std::iter::once(id.as_str()))
        .await?
        .into_iter()
        .next()
        .unwrap_or(crate::tenant::LastHour {
            dispatched: 0,
            share: 0.0,
        });
    Ok(ok(TenantStats {
        tenant_id: id,
        total_jobs: enqueued,
        jobs: TenantJobs {
            enqueued,
            dispatched,
            dispatched_last_hour: h.dispatched,
            share_last_hour: h.share,
        },
        fairness: TenantFairness {
            weight: t.fairness_weight,
        },
    }))
}

/// `…/admin/queues/{queue}/tenancy` (ours): where the queue's jobs take their tenant from, the queue's
/// own fair-share weights, and its tenants' concurrency in it.
#[derive(Deserialize, Serialize, ToSchema)]
struct TenancySetting {
    /// `meta`: the tenant is `meta.<field>`; `rate_limit_key`: the job's `rate_limit.key` up to the first
    /// `separator` (a key without it is its own tenant).
    #[schema(value_type = String, example = "meta")]
    source: String,
    /// `meta` only: the top-level meta key (default `tenant_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    field: Option<String>,
    /// `rate_limit_key` only: 1 to 8 characters of a rate-limit key (default `:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    separator: Option<String>,
    /// Tenant → weight in this queue (1 to 1,000,000), over the tenant's global `fairness_weight`; at
    /// most 1,000 tenants.
    #[serde(default)]
    #[schema(value_type = std::collections::HashMap<String, u64>)]
    weights: serde_json::Map<String, serde_json::Value>,
    /// The weight of the queue's jobs without a tenant, over the global `_default` (null: that one).
    #[serde(default)]
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 1000000)]
    default_weight: Option<serde_json::Value>,
    /// Tenant → the most of its jobs of this queue active at once (1 to 1,000,000); at most 1,000
    /// tenants. A tenant at its cap leaves the queue's fair share until one of its jobs ends.
    #[serde(default)]
    #[schema(value_type = std::collections::HashMap<String, u64>)]
    concurrency: serde_json::Map<String, serde_json::Value>,
    /// The concurrency of the tenants `concurrency` does not name (null: not capped); the queue's jobs
    /// without a tenant are never capped.
    #[serde(default)]
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 1000000)]
    default_concurrency: Option<serde_json::Value>,
}

#[derive(Serialize, ToSchema)]
struct QueueTenancy {
    queue: String,
    /// The setting; null when the queue has none (a job's tenant is its `meta.tenant_id`).
    tenancy: Option<TenancySetting>,
}

fn tenancy_json(queue: &str, t: Option<&ojs_core::tenancy::Tenancy>) -> serde_json::Value {
    serde_json::json!({"queue": queue, "tenancy": t.map(|t| t.to_json())})
}

#[utoipa::path(
    get,
    path = "/ojs/v1/admin/queues/{queue}/tenancy",
    tag = "tenants",
    summary = "A queue's tenancy setting: where its jobs' tenant comes from, its own weights and its tenants' concurrency",
    params(("queue" = String, Path)),
    responses((status = 200, description = "OK", body = QueueTenancy, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Not a queue name (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn get_tenancy(State(st): State<AppState>, QueuePath(q): QueuePath) -> ApiResult<Response> {
    let q = q.into_string();
    let t = st.shards.find_queue(&q).await?.tenancy(&q).await?;
    Ok(ok(tenancy_json(&q, t.as_ref())))
}

#[utoipa::path(
    put,
    path = "/ojs/v1/admin/queues/{queue}/tenancy",
    tag = "tenants",
    summary = "Set a queue's tenancy: `{\"source\": \"meta\"|\"rate_limit_key\", \"field\", \"separator\", \"weights\", \"default_weight\", \"concurrency\", \"default_concurrency\"}`",
    params(("queue" = String, Path)),
    request_body = TenancySetting,
    responses((status = 200, description = "OK", body = QueueTenancy, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn put_tenancy(
    State(st): State<AppState>,
    QueuePath(q): QueuePath,
    OjsJson(body): OjsJson<serde_json::Value>,
) -> ApiResult<Response> {
    let q = q.into_string();
    let t = ojs_core::tenancy::Tenancy::parse(&body).map_err(OjsError::invalid)?;
    st.shards.for_queue(&q).await?.set_tenancy(&q, Some(&t)).await?;
    Ok(ok(tenancy_json(&q, Some(&t))))
}

#[utoipa::path(
    delete,
    path = "/ojs/v1/admin/queues/{queue}/tenancy",
    tag = "tenants",
    summary = "Remove a queue's tenancy setting (its jobs' tenant is `meta.tenant_id` again)",
    params(("queue" = String, Path)),
    responses((status = 200, description = "OK", body = QueueTenancy, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Not a queue name (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn delete_tenancy(State(st): State<AppState>, QueuePath(q): QueuePath) -> ApiResult<Response> {
    let q = q.into_string();
    st.shards.for_queue(&q).await?.set_tenancy(&q, None).await?;
    Ok(ok(tenancy_json(&q, None)))
}
