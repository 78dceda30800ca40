//! Rate-limit inspection and overrides (seed §10), and queue-level limits (seed §7.2).

use axum::extract::State;
use axum::response::Response;
use ojs_core::clock;
use ojs_core::ratelimit::Window;
use ojs_core::{names, OjsError};
use ojs_store::RateLimitState as StoreState;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::{IntoParams, ToSchema};

use crate::error::ApiResult;
use crate::respond::{ok, OjsJson, OjsPath, OjsQuery, QueuePath};
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
struct RateLimitState {
    key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    concurrency: Option<ConcurrencyState>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    rate: Option<RateState>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    throttle: Option<ThrottleState>,
    /// The newest job's `on_limit` (each job keeps its own); empty when no job set one.
    on_limit: String,
    /// Jobs held back by this key.
    waiting_count: u64,
    /// The current blocking episode.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    blocked: Option<Blocked>,
    /// A worker's `rate_limit_until` still in force.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    dynamic_until: Option<String>,
    /// The operator's override, while in force.
    #[serde(rename = "override", skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    override_: Option<OverrideState>,
    /// Starts refused, by strategy (`wait`, `reschedule`, `drop`…).
    exceeded_total: std::collections::HashMap<String, u64>,
    /// Ours: an adaptive key's limits, the policy's and the effective ones adaptation holds now (the
    /// limits above are these under any override, which wins).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    adaptive: Option<AdaptiveView>,
}

/// An adaptive key (`rate_limit.adaptive`): each reported rate limit halves the effective limits,
/// every `increase_after` successes raise them one step back toward the policy's.
#[derive(Serialize, ToSchema)]
struct AdaptiveView {
    increase_after: u64,
    /// Successes counted toward the next step up.
    successes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    concurrency: Option<AdaptiveLimit>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    rate: Option<AdaptiveLimit>,
    /// When the limits last went down.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    last_decrease_at: Option<String>,
}

#[derive(Serialize, ToSchema)]
struct AdaptiveLimit {
    /// The policy's limit.
    policy: u64,
    /// Where adaptation has it now (at most the policy's).
    effective: u64,
}

impl AdaptiveView {
    fn of(a: &ojs_store::AdaptiveState) -> Self {
        let limit = |policy: Option<u64>, now: Option<u64>| {
            policy.map(|policy| AdaptiveLimit {
                policy,
                effective: now.map_or(policy, |n| n.min(policy)),
            })
        };
        Self {
            increase_after: a.increase_after,
            successes: a.successes,
            concurrency: limit(a.policy_concurrency, a.concurrency),
            rate: limit(a.policy_rate_limit, a.rate_limit),
            last_decrease_at: a.down_at_ms.map(clock::format_ms),
        }
    }
}

/// In units: a job holds its `rate_limit.cost` of each limit (at most the limit); jobs when every job
/// costs 1.
#[derive(Serialize, ToSchema)]
struct ConcurrencyState {
    limit: u64,
    active: u64,
    available: u64,
    /// Ours: the key's floor in its queue's pool (burstable concurrency; `limit` is then its ceiling).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    floor: Option<u64>,
}

/// In units, as [`ConcurrencyState`].
#[derive(Serialize, ToSchema)]
struct RateState {
    #[serde(flatten)]
    window: RateWindow,
    current_count: u64,
    /// Ours: the units left in the window now (`limit - current_count`).
    remaining: u64,
    /// When the oldest start in the sliding window slides out.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    window_resets_at: Option<String>,
}

#[derive(Serialize, ToSchema)]
struct ThrottleState {
    #[serde(flatten)]
    window: RateWindow,
    #[schema(format = DateTime)]
    next_allowed_at: String,
}

#[derive(Serialize, ToSchema)]
struct Blocked {
    /// The strategy of the job that found the key full.
    reason: Option<String>,
    #[schema(format = DateTime)]
    since: String,
    until: Option<String>,
}

#[derive(Serialize, ToSchema)]
struct OverrideState {
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    concurrency: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    expires_at: Option<String>,
}

impl RateLimitState {
    /// The state of `key` as the store read it.
    fn of(key: &str, s: &StoreState) -> Self {
        let episode_ms = |k: &str| s.episode.get(k).and_then(|v| v.parse::<i64>().ok());
        Self {
            key: key.to_string(),
            concurrency: s.concurrency.map(|limit| ConcurrencyState {
                limit,
                active: s.active,
                available: limit.saturating_sub(s.active),
                floor: s.floor,
            }),
            rate: s.rate.map(|w| RateState {
                window: w.into(),
                current_count: s.window_count,
                remaining: w.limit.saturating_sub(s.window_count),
                // A sliding window: room opens when the oldest start in it slides out.
                window_resets_at: s
                    .window_oldest_ms
                    .map(|oldest| clock::format_ms(oldest + w.period_ms as i64)),
            }),
            throttle: s.throttle.map(|w| ThrottleState {
                window: w.into(),
                next_allowed_at: clock::format_ms(s.throttle_next_ms.unwrap_or(s.now_ms)),
            }),
            on_limit: s.on_limit.clone(),
            waiting_count: s.waiting,
            blocked: episode_ms("blocked_since").map(|since| Blocked {
                reason: s.episode.get("strategy").cloned(),
                since: clock::format_ms(since),
                until: episode_ms("until").filter(|u| *u > 0).map(clock::format_ms),
            }),
            dynamic_until: s.dynamic_until_ms.map(clock::format_ms),
            override_: (!s.override_fields.is_empty()).then(|| OverrideState {
                concurrency: s
                    .override_fields
                    .get("concurrency")
                    .map(|c| c.parse::<u64>().unwrap_or(0)),
                expires_at: (s.override_ttl_ms > 0).then(|| clock::format_ms(s.now_ms + s.override_ttl_ms)),
            }),
            exceeded_total: s
                .stats
                .iter()
                .filter_map(|(k, v)| Some((k.strip_prefix("exceeded_")?.to_string(), v.parse::<u64>().unwrap_or(0))))
                .collect(),
            adaptive: s.adaptive.as_ref().map(AdaptiveView::of),
        }
    }
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
    Ok(ok(RateLimitState::of(&key, &s)))
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
    items: Vec<RateLimitState>,
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
        items.push(RateLimitState::of(k, &store.rate_limit_state(k).await?));
    }
    Ok(ok(RateLimitList {
        items,
        pagination: Pagination { total, page, per_page },
    }))
}

fn window_field(v: &Value, field: &str) -> Result<Window, OjsError> {
    let p = ojs_core::ratelimit::parse(&json!({ "key": "x", field: v }), "", "q")
        .map_err(|e| OjsError::invalid(e.message.trim_start_matches('.').to_string()))?;
    Ok(if field == "rate" { p.rate } else { p.throttle }
        .ok_or_else(|| OjsError::invalid(format!("{field} is invalid")))?)
}

/// An override: at least one of `concurrency`, `rate`, `throttle`.
// Each member is read as sent and checked by put_override, which names the member and the rule when it
// is wrong.
#[derive(Deserialize, ToSchema)]
struct OverrideRequest {
    #[serde(default)]
    #[schema(value_type = Option<u64>, nullable = false)]
    concurrency: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<RateWindow>)]
    rate: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<RateWindow>)]
    throttle: Option<Value>,
    /// RFC 3339, in the future; absent: until lifted.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    expires_at: Option<Value>,
}

/// Queue-level limits: at least one of `concurrency`, `rate`.
// Read as sent, checked by put_queue.
#[derive(Deserialize, ToSchema)]
struct QueueLimitRequest {
    #[serde(default)]
    #[schema(value_type = Option<u64>)]
    concurrency: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<RateWindow>)]
    rate: Option<Value>,
}

/// `body` read as `T`, a request whose members are all optional JSON values: any JSON object is one;
/// anything else is refused with `not_object`.
fn members<T: serde::de::DeserializeOwned>(body: Value, not_object: &str) -> Result<T, OjsError> {
    if !body.is_object() {
        return Err(OjsError::invalid(not_object.to_string()));
    }
    serde_json::from_value(body).map_err(|e| OjsError::invalid(format!("{not_object}: {e}")))
}

/// `concurrency` of a request: an integer >= 0, when given.
fn concurrency_field(c: Option<Value>) -> Result<Option<u64>, OjsError> {
    c.map(|c| {
        c.as_u64()
            .ok_or_else(|| OjsError::invalid(format!("concurrency must be an integer >= 0; got {c}")))
    })
    .transpose()
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
    /// Ours: of the queue's free slots, those owed to keys below their `rate_limit.floor` (burstable
    /// concurrency: the queue's concurrency is the pool their keys share). Absent when none is owed.
    #[serde(skip_serializing_if = "is_zero")]
    #[schema(nullable = false)]
    floors_owed: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Serialize, ToSchema)]
struct QueueRate {
    #[serde(flatten)]
    window: RateWindow,
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
    let req: OverrideRequest = members(body, "the override must be a JSON object")?;
    let mut fields = Vec::new();
    if let Some(c) = concurrency_field(req.concurrency)? {
        fields.push(("concurrency".to_string(), c.to_string()));
    }
    for (name, v, lf, pf) in [
        ("rate", req.rate, "rate_limit", "rate_period"),
        ("throttle", req.throttle, "throttle_limit", "throttle_period"),
    ] {
        if let Some(v) = v {
            let w = window_field(&v, name)?;
            fields.push((lf.to_string(), w.limit.to_string()));
            fields.push((pf.to_string(), w.period_ms.to_string()));
        }
    }
    if fields.is_empty() {
        return Err(OjsError::invalid("an override needs at least one of concurrency, rate or throttle").into());
    }
    let expires = match req.expires_at {
        None => 0,
        Some(Value::String(t)) => clock::parse_time(&t, "expires_at").map_err(OjsError::invalid)?,
        Some(v) => return Err(OjsError::invalid(format!("expires_at must be an RFC 3339 timestamp; got {v}")).into()),
    };
    // The override lives with the key's counters (on shard 0 for a key no job has used yet).
    let store = st.shards.for_key(&key).await?;
    if !store.rate_limit_override(&key, Some((&fields, expires))).await? {
        return Err(OjsError::invalid("expires_at is in the past (by the server's clock)").into());
    }
    Ok(ok(RateLimitState::of(&key, &store.rate_limit_state(&key).await?)))
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
    Ok(ok(RateLimitState::of(&key, &store.rate_limit_state(&key).await?)))
}

fn queue_json(q: &str, s: &ojs_store::QueueLimitState) -> Value {
    json!(QueueLimits {
        queue: q.to_string(),
        concurrency: s.concurrency.map(|limit| QueueConcurrency {
            limit,
            active: s.active,
            floors_owed: s.owed,
        }),
        rate: s.rate.map(|w| QueueRate {
            window: w.into(),
            current_count: s.in_window,
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
async fn get_queue(State(st): State<AppState>, QueuePath(q): QueuePath) -> ApiResult<Response> {
    let q = q.into_string();
    let s = st.shards.find_queue(&q).await?.queue_rate_limit(&q).await?;
    Ok(ok(queue_json(&q, &s)))
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
    QueuePath(q): QueuePath,
    OjsJson(body): OjsJson<Value>,
) -> ApiResult<Response> {
    let q = q.into_string();
    let req: QueueLimitRequest = members(body, "the queue limit must be a JSON object")?;
    let conc = concurrency_field(req.concurrency)?;
    let rate = req.rate.map(|v| window_field(&v, "rate")).transpose()?;
    if conc.is_none() && rate.is_none() {
        return Err(OjsError::invalid("a queue limit needs concurrency, rate or both").into());
    }
    st.shards
        .for_queue(&q)
        .await?
        .set_queue_rate_limit(&q, Some((conc, rate)))
        .await?;
    let s = st.shards.find_queue(&q).await?.queue_rate_limit(&q).await?;
    Ok(ok(queue_json(&q, &s)))
}

#[utoipa::path(
    delete,
    path = "/ojs/v1/admin/queues/{queue}/rate-limit",
    tag = "rate-limits",
    summary = "Remove queue-level limits",
    params(("queue" = String, Path)),
    responses((status = 200, description = "OK", body = QueueLimits, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Not a queue name (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn delete_queue(State(st): State<AppState>, QueuePath(q): QueuePath) -> ApiResult<Response> {
    let q = q.into_string();
    st.shards.for_queue(&q).await?.set_queue_rate_limit(&q, None).await?;
    Ok(ok(queue_json(&q, &ojs_store::QueueLimitState::default())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(kv: &[(&str, &str)]) -> ojs_core::Fields {
        kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// The answer keeps the shape the hand-built JSON had: absent limits and episodes are absent,
    /// an episode's unknown reason and open end are `null`.
    #[test]
    fn a_keys_state_shows_what_the_store_read() {
        let empty = StoreState {
            now_ms: 0,
            ..StoreState::default()
        };
        assert_eq!(
            serde_json::to_value(RateLimitState::of("k", &empty)).expect("json"),
            json!({"key": "k", "on_limit": "", "waiting_count": 0, "exceeded_total": {}})
        );
        let w = |limit, period_ms| Some(Window { limit, period_ms });
        let full = StoreState {
            now_ms: 1_000,
            known: true,
            concurrency: Some(2),
            floor: Some(1),
            rate: w(10, 60_000),
            throttle: w(1, 1_000),
            on_limit: "wait".into(),
            active: 3,
            window_count: 4,
            window_oldest_ms: Some(500),
            throttle_next_ms: None,
            dynamic_until_ms: Some(2_000),
            waiting: 5,
            override_fields: fields(&[("concurrency", "1")]),
            override_ttl_ms: 9_000,
            episode: fields(&[("blocked_since", "100"), ("until", "0")]),
            stats: fields(&[("exceeded_wait", "7"), ("blocked_episodes", "1")]),
            adaptive: Some(ojs_store::AdaptiveState {
                policy_concurrency: Some(4),
                policy_rate_limit: Some(10),
                increase_after: 10,
                concurrency: Some(2),
                rate_limit: None,
                successes: 3,
                down_at_ms: Some(900),
            }),
        };
        assert_eq!(
            serde_json::to_value(RateLimitState::of("k", &full)).expect("json"),
            json!({
                "key": "k",
                "concurrency": {"limit": 2, "active": 3, "available": 0, "floor": 1},
                "rate": {"limit": 10, "period": "PT1M", "current_count": 4, "remaining": 6, "window_resets_at": clock::format_ms(60_500)},
                "throttle": {"limit": 1, "period": "PT1S", "next_allowed_at": clock::format_ms(1_000)},
                "on_limit": "wait",
                "waiting_count": 5,
                "blocked": {"reason": null, "since": clock::format_ms(100), "until": null},
                "dynamic_until": clock::format_ms(2_000),
                "override": {"concurrency": 1, "expires_at": clock::format_ms(10_000)},
                "exceeded_total": {"wait": 7},
                "adaptive": {"increase_after": 10, "successes": 3, "concurrency": {"policy": 4, "effective": 2},
                    "rate": {"policy": 10, "effective": 10}, "last_decrease_at": clock::format_ms(900)},
            })
        );
    }
}
