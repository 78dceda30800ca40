//! Rate-limit inspection and overrides (seed §10), and queue-level limits (seed §7.2).

use axum::extract::State;
use axum::response::Response;
use ojs_core::clock;
use ojs_core::duration::format_iso8601_ms;
use ojs_core::ratelimit::Window;
use ojs_core::{names, OjsError};
use ojs_store::RateLimitState as StoreState;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use utoipa::{IntoParams, ToSchema};

use crate::error::ApiResult;
use crate::respond::{ok, OjsJson, OjsPath, OjsQuery};
use crate::schemas::{OjsErrorBody, RateWindow, OJS_MEDIA_TYPE};
use crate::state::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(inspect, put_override, delete_override))
        .routes(routes!(get_queue, put_queue, delete_queue))
}

fn check_key(key: &str) -> Result<(), OjsError> {
    names::check_rate_limit_key(key).map_err(OjsError::invalid)
}

/// A rate-limit key's state (seed §10): its limits (the newest job's policy with any override on
/// top), their use now, and why it is blocked.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)] // documents state_json
struct RateLimitState {
    key: String,
    #[schema(nullable = false)]
    concurrency: Option<ConcurrencyState>,
    #[schema(nullable = false)]
    rate: Option<RateState>,
    #[schema(nullable = false)]
    throttle: Option<ThrottleState>,
    /// The newest job's `on_limit` (each job keeps its own); empty when no job set one.
    on_limit: String,
    /// Jobs held back by this key.
    waiting_count: u64,
    /// The current blocking episode.
    #[schema(nullable = false)]
    blocked: Option<Blocked>,
    /// A worker's `rate_limit_until` still in force.
    #[schema(format = DateTime, nullable = false)]
    dynamic_until: Option<String>,
    /// The operator's override, while in force.
    #[serde(rename = "override")]
    #[schema(nullable = false)]
    override_: Option<OverrideState>,
    /// Starts refused, by strategy (`wait`, `reschedule`, `drop`…).
    exceeded_total: std::collections::HashMap<String, u64>,
}

#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
struct ConcurrencyState {
    limit: u64,
    active: u64,
    available: u64,
}

#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
struct RateState {
    limit: u64,
    period: String,
    current_count: u64,
    /// When the oldest start in the sliding window slides out.
    #[schema(format = DateTime, nullable = false)]
    window_resets_at: Option<String>,
}

#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
struct ThrottleState {
    limit: u64,
    period: String,
    #[schema(format = DateTime)]
    next_allowed_at: String,
}

#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
struct Blocked {
    /// The strategy of the job that found the key full.
    reason: Option<String>,
    #[schema(format = DateTime)]
    since: String,
    until: Option<String>,
}

#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
struct OverrideState {
    #[schema(nullable = false)]
    concurrency: Option<u64>,
    #[schema(format = DateTime, nullable = false)]
    expires_at: Option<String>,
}

pub fn state_json(key: &str, s: &StoreState) -> Value {
    let (conc, rate, thr, on_limit) = (s.concurrency, s.rate, s.throttle, &s.on_limit);
    let mut out = Map::new();
    out.insert("key".into(), json!(key));
    if let Some(c) = conc {
        out.insert(
            "concurrency".into(),
            json!({ "limit": c, "active": s.active, "available": c.saturating_sub(s.active) }),
        );
    }
    if let Some(w) = rate {
        let mut r =
            json!({ "limit": w.limit, "period": format_iso8601_ms(w.period_ms), "current_count": s.window_count });
        // A sliding window: room opens when the oldest start in it slides out.
        if let Some(oldest) = s.window_oldest_ms {
            r["window_resets_at"] = json!(clock::format_ms(oldest + w.period_ms as i64));
        }
        out.insert("rate".into(), r);
    }
    if let Some(w) = thr {
        let next = s.throttle_next_ms.unwrap_or(s.now_ms);
        out.insert("throttle".into(), json!({ "limit": w.limit, "period": format_iso8601_ms(w.period_ms), "next_allowed_at": clock::format_ms(next) }));
    }
    out.insert("on_limit".into(), json!(on_limit));
    out.insert("waiting_count".into(), json!(s.waiting));
    if let Some(since) = s.episode.get("blocked_since").and_then(|v| v.parse::<i64>().ok()) {
        let until = s
            .episode
            .get("until")
            .and_then(|v| v.parse::<i64>().ok())
            .filter(|u| *u > 0);
        out.insert(
            "blocked".into(),
            json!({
                "reason": s.episode.get("strategy"),
                "since": clock::format_ms(since),
                "until": until.map(clock::format_ms),
            }),
        );
    }
    if let Some(u) = s.dynamic_until_ms {
        out.insert("dynamic_until".into(), json!(clock::format_ms(u)));
    }
    if !s.override_fields.is_empty() {
        let mut o: Map<String, Value> = Map::new();
        if let Some(c) = s.override_fields.get("concurrency") {
            o.insert("concurrency".into(), json!(c.parse::<u64>().unwrap_or(0)));
        }
        if s.override_ttl_ms > 0 {
            o.insert(
                "expires_at".into(),
                json!(clock::format_ms(s.now_ms + s.override_ttl_ms)),
            );
        }
        out.insert("override".into(), Value::Object(o));
    }
    let exceeded: Map<String, Value> = s
        .stats
        .iter()
        .filter_map(|(k, v)| {
            Some((
                k.strip_prefix("exceeded_")?.to_string(),
                json!(v.parse::<u64>().unwrap_or(0)),
            ))
        })
        .collect();
    out.insert("exceeded_total".into(), Value::Object(exceeded));
    Value::Object(out)
}

#[utoipa::path(
    get,
    path = "/ojs/v1/rate-limits/{key}",
    tag = "rate-limits",
    summary = "One key: limits, active, window use, next throttle slot, waiting, blocked reason and until",
    params(("key" = String, Path)),
    responses((status = 200, description = "OK", body = RateLimitState, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Not a rate-limit key (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No job or override has used the key (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn inspect(State(st): State<AppState>, OjsPath(key): OjsPath<String>) -> ApiResult<Response> {
    check_key(&key)?;
    let s = st.shards.for_key(&key).await?.rate_limit_state(&key).await?;
    if !s.known {
        return Err(OjsError::not_found("rate-limit key", &key).into());
    }
    Ok(ok(state_json(&key, &s)))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct Page {
    /// From 1 (default 1).
    #[param(minimum = 0)]
    page: Option<u64>,
    /// 1 to 100 (default 20).
    #[param(minimum = 0)]
    per_page: Option<u64>,
}

#[derive(Serialize, ToSchema)]
struct RateLimitList {
    #[schema(value_type = Vec<RateLimitState>)]
    items: Vec<Value>,
    pagination: Pagination,
}

/// Not the admin listings' `Pagination`: this list clamps `per_page` instead of refusing it.
#[derive(Serialize, ToSchema)]
#[schema(as = RateLimitPagination)]
struct Pagination {
    total: u64,
    page: u64,
    per_page: u64,
}

#[utoipa::path(
    get,
    path = "/ojs/v1/rate-limits",
    tag = "rate-limits",
    summary = "Rate-limit keys with their state (paginated: page, per_page)",
    params(Page),
    responses((status = 200, description = "OK", body = RateLimitList, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid query (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn list(State(st): State<AppState>, OjsQuery(p): OjsQuery<Page>) -> ApiResult<Response> {
    let per_page = p.per_page.unwrap_or(20).clamp(1, 100);
    let page = p.page.unwrap_or(1).max(1);
    // A page past the end is empty, however far past.
    let offset = (page - 1).saturating_mul(per_page);
    let (total, keys) = st.shards.rate_limit_keys(offset, per_page).await?;
    let mut items = Vec::with_capacity(keys.len());
    for (store, k) in &keys {
        items.push(state_json(k, &store.rate_limit_state(k).await?));
    }
    Ok(ok(json!(RateLimitList {
        items,
        pagination: Pagination { total, page, per_page },
    })))
}

fn window_field(v: &Value, field: &str) -> Result<Window, OjsError> {
    let p = ojs_core::ratelimit::parse(&json!({ "key": "x", field: v }), "", "q")
        .map_err(|e| OjsError::invalid(e.message.trim_start_matches('.').to_string()))?;
    Ok(if field == "rate" { p.rate } else { p.throttle }
        .ok_or_else(|| OjsError::invalid(format!("{field} is invalid")))?)
}

/// An override: at least one of `concurrency`, `rate`, `throttle`.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)] // documents put_override
struct OverrideRequest {
    #[schema(nullable = false)]
    concurrency: Option<u64>,
    rate: Option<RateWindow>,
    throttle: Option<RateWindow>,
    /// RFC 3339, in the future; absent: until lifted.
    expires_at: Option<String>,
}

/// Queue-level limits: at least one of `concurrency`, `rate`.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)] // documents put_queue
struct QueueLimitRequest {
    concurrency: Option<u64>,
    rate: Option<RateWindow>,
}

/// A queue's own limits (`null` when not set), with their use now.
#[derive(Serialize, ToSchema)]
struct QueueLimits {
    queue: String,
    concurrency: Option<QueueConcurrency>,
    rate: Option<QueueRate>,
}

#[derive(Serialize, ToSchema)]
struct QueueConcurrency {
    limit: u64,
    active: u64,
}

#[derive(Serialize, ToSchema)]
struct QueueRate {
    limit: u64,
    period: String,
    current_count: u64,
}

/// `PUT /rate-limits/{key}` `{"concurrency"?, "rate"?, "throttle"?, "expires_at"?}`: replaces the
/// key's limits until `expires_at` (e.g. `{"concurrency": 0}` pauses the key during an incident).
#[utoipa::path(
    put,
    path = "/ojs/v1/rate-limits/{key}",
    tag = "rate-limits",
    summary = "Override a key's limits until `expires_at` (e.g. `{\"concurrency\": 0}` pauses it)",
    params(("key" = String, Path)),
    request_body = OverrideRequest,
    responses((status = 200, description = "OK", body = RateLimitState, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn put_override(
    State(st): State<AppState>,
    OjsPath(key): OjsPath<String>,
    OjsJson(body): OjsJson<Value>,
) -> ApiResult<Response> {
    check_key(&key)?;
    let o = body
        .as_object()
        .ok_or_else(|| OjsError::invalid("the override must be a JSON object"))?;
    let mut fields = Vec::new();
    if let Some(c) = o.get("concurrency").filter(|v| !v.is_null()) {
        let c = c
            .as_u64()
            .ok_or_else(|| OjsError::invalid(format!("concurrency must be an integer >= 0; got {c}")))?;
        fields.push(("concurrency".to_string(), c.to_string()));
    }
    for (name, lf, pf) in [
        ("rate", "rate_limit", "rate_period"),
        ("throttle", "throttle_limit", "throttle_period"),
    ] {
        if let Some(v) = o.get(name).filter(|v| !v.is_null()) {
            let w = window_field(v, name)?;
            fields.push((lf.to_string(), w.limit.to_string()));
            fields.push((pf.to_string(), w.period_ms.to_string()));
        }
    }
    if fields.is_empty() {
        return Err(OjsError::invalid("an override needs at least one of concurrency, rate or throttle").into());
    }
    let expires = match o.get("expires_at") {
        None | Some(Value::Null) => 0,
        Some(Value::String(t)) => clock::parse_ms(t)
            .ok_or_else(|| OjsError::invalid(format!("expires_at must be an RFC 3339 timestamp; got {t:?}")))?,
        Some(v) => return Err(OjsError::invalid(format!("expires_at must be an RFC 3339 timestamp; got {v}")).into()),
    };
    // The override lives with the key's counters (on shard 0 for a key no job has used yet).
    let store = st.shards.for_key(&key).await?;
    if !store.rate_limit_override(&key, Some((&fields, expires))).await? {
        return Err(OjsError::invalid("expires_at is in the past (by the server's clock)").into());
    }
    Ok(ok(state_json(&key, &store.rate_limit_state(&key).await?)))
}

#[utoipa::path(
    delete,
    path = "/ojs/v1/rate-limits/{key}",
    tag = "rate-limits",
    summary = "Lift a key's override",
    params(("key" = String, Path)),
    responses((status = 200, description = "OK", body = RateLimitState, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Not a rate-limit key (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn delete_override(State(st): State<AppState>, OjsPath(key): OjsPath<String>) -> ApiResult<Response> {
    check_key(&key)?;
    let store = st.shards.for_key(&key).await?;
    store.rate_limit_override(&key, None).await?;
    Ok(ok(state_json(&key, &store.rate_limit_state(&key).await?)))
}

fn queue_json(q: &str, conc: Option<u64>, rate: Option<Window>, active: u64, in_window: u64) -> Value {
    json!(QueueLimits {
        queue: q.to_string(),
        concurrency: conc.map(|limit| QueueConcurrency { limit, active }),
        rate: rate.map(|w| QueueRate {
            limit: w.limit,
            period: format_iso8601_ms(w.period_ms),
            current_count: in_window,
        }),
    })
}

#[utoipa::path(
    get,
    path = "/ojs/v1/admin/queues/{queue}/rate-limit",
    tag = "rate-limits",
    summary = "Queue-level limits",
    params(("queue" = String, Path)),
    responses((status = 200, description = "OK", body = QueueLimits, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Not a queue name (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn get_queue(State(st): State<AppState>, OjsPath(q): OjsPath<String>) -> ApiResult<Response> {
    names::check_queue(&q).map_err(OjsError::invalid)?;
    let (c, r, a, w) = st.shards.find_queue(&q).await?.queue_rate_limit(&q).await?;
    Ok(ok(queue_json(&q, c, r, a, w)))
}

/// Queue-level limits apply to every job of the queue on top of the jobs' own (most restrictive wins).
#[utoipa::path(
    put,
    path = "/ojs/v1/admin/queues/{queue}/rate-limit",
    tag = "rate-limits",
    summary = "Set queue-level limits: `{concurrency?, rate?}`",
    params(("queue" = String, Path)),
    request_body = QueueLimitRequest,
    responses((status = 200, description = "OK", body = QueueLimits, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn put_queue(
    State(st): State<AppState>,
    OjsPath(q): OjsPath<String>,
    OjsJson(body): OjsJson<Value>,
) -> ApiResult<Response> {
    names::check_queue(&q).map_err(OjsError::invalid)?;
    let o = body
        .as_object()
        .ok_or_else(|| OjsError::invalid("the queue limit must be a JSON object"))?;
    let conc = match o.get("concurrency").filter(|v| !v.is_null()) {
        Some(c) => Some(
            c.as_u64()
                .ok_or_else(|| OjsError::invalid(format!("concurrency must be an integer >= 0; got {c}")))?,
        ),
        None => None,
    };
    let rate = match o.get("rate").filter(|v| !v.is_null()) {
        Some(v) => Some(window_field(v, "rate")?),
        None => None,
    };
    if conc.is_none() && rate.is_none() {
        return Err(OjsError::invalid("a queue limit needs concurrency, rate or both").into());
    }
    st.shards
        .for_queue(&q)
        .await?
        .set_queue_rate_limit(&q, Some((conc, rate)))
        .await?;
    let (c, r, a, w) = st.shards.find_queue(&q).await?.queue_rate_limit(&q).await?;
    Ok(ok(queue_json(&q, c, r, a, w)))
}

#[utoipa::path(
    delete,
    path = "/ojs/v1/admin/queues/{queue}/rate-limit",
    tag = "rate-limits",
    summary = "Remove queue-level limits",
    params(("queue" = String, Path)),
    responses((status = 200, description = "OK", body = QueueLimits, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Not a queue name (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn delete_queue(State(st): State<AppState>, OjsPath(q): OjsPath<String>) -> ApiResult<Response> {
    names::check_queue(&q).map_err(OjsError::invalid)?;
    st.shards.for_queue(&q).await?.set_queue_rate_limit(&q, None).await?;
    Ok(ok(queue_json(&q, None, None, 0, 0)))
}
