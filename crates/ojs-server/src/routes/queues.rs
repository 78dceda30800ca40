//! Queues: list with counts, per-queue stats, pause and resume.

use axum::extract::{Path, State};
use axum::response::Response;
use ojs_core::duration::{format_iso8601_ms, parse_iso8601_ms};
use ojs_core::{names, OjsError};
use ojs_store::{Backpressure, QueueCounts};
use serde_json::{json, Value};

use crate::config::QueueStatsQueue;
use crate::error::ApiResult;
use crate::respond::{ok, OjsJson};
use crate::state::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(stats))
        .routes(routes!(pause))
        .routes(routes!(resume))
        .routes(routes!(priority_stats))
        .routes(routes!(get_aging, put_aging, delete_aging))
        .routes(routes!(get_config, put_config))
}

fn counts_json(c: &QueueCounts) -> Value {
    json!({
        "name": c.name,
        "status": if c.paused { "paused" } else { "active" },
        "paused": c.paused,
        "available": c.available,
        "active": c.active,
        "scheduled": c.scheduled,
        "completed": c.completed,
        "failed": c.failed,
        "discarded": c.discarded,
        "cancelled": c.cancelled,
        // ojs-backpressure: the jobs that count against a depth bound (available + scheduled + retryable).
        "depth": c.depth(),
    })
}

pub(crate) fn queue_name(q: &str) -> Result<(), OjsError> {
    names::check_queue(q).map_err(OjsError::invalid)
}

#[utoipa::path(
    get,
    path = "/ojs/v1/queues",
    tag = "queues",
    summary = "Every queue with its counts by state",
    responses((status = 200, description = "OK"))
)]
async fn list(State(st): State<AppState>) -> ApiResult<Response> {
    let names = st.store.queue_names().await?;
    let counts = st.store.queue_counts(&names).await?;
    let queues: Vec<Value> = counts.iter().map(counts_json).collect();
    Ok(ok(json!({ "queues": queues, "pagination": { "total": queues.len() } })))
}

#[utoipa::path(
    get,
    path = "/ojs/v1/queues/{queue}/stats",
    tag = "queues",
    summary = "One queue's counts by state: in `queue` (an object, or the name with --queue-stats-queue name), at the top level, and in `stats`",
    params(("queue" = String, Path)),
    responses((status = 200, description = "OK"), (status = 400, description = "Invalid request (OJS error)"))
)]
async fn stats(State(st): State<AppState>, Path(q): Path<String>) -> ApiResult<Response> {
    queue_name(&q)?;
    let c = st.store.queue_counts(std::slice::from_ref(&q)).await?;
    let c = c
        .first()
        .ok_or_else(|| OjsError::new(ojs_core::ErrorCode::Internal, "no counts for the queue"))?;
    let mut body = stats_json(c, st.config.queue_stats_queue, ojs_core::clock::local_now_ms());
    // ojs-backpressure §10: the depth that counts against the bound, and the bound.
    body["stats"]["queue"] = json!(q);
    if let Some(b) = st.store.backpressure(&q).await? {
        body["stats"]["max_depth"] = json!(b.max_depth);
        body["stats"]["pressure"] = json!(c.depth() as f64 / b.max_depth.max(1) as f64);
    }
    Ok(ok(body))
}

/// One queue's stats, in a shape every reader finds its fields in: `queue` (an object with the counts,
/// as the OpenAPI document and the conformance suite read it; or the name, `--queue-stats-queue name`,
/// as the HTTP binding's prose and the Go and Rust SDKs decode it), the counts again at the top level
/// (the JavaScript SDK's `QueueStats`; `depth` and `name` for the Ruby SDK), and `status`, `stats` and
/// `computed_at` (the HTTP binding's shape: the Python, Go and Rust SDKs). `scheduled` counts the
/// retryable jobs too (they wait in the same index).
fn stats_json(c: &QueueCounts, queue_field: QueueStatsQueue, now_ms: i64) -> Value {
    let counts = counts_json(c);
    let mut body = counts.clone();
    let mut stats = counts.clone();
    if let Some(m) = stats.as_object_mut() {
        for k in ["name", "status", "paused"] {
            m.remove(k);
        }
    }
    body["stats"] = stats;
    body["depth"] = json!(c.depth());
    body["queue"] = match queue_field {
        QueueStatsQueue::Object => counts,
        QueueStatsQueue::Name => json!(c.name),
    };
    body["computed_at"] = json!(ojs_core::clock::format_ms(now_ms));
    body
}

fn config_json(q: &str, bp: Option<&Backpressure>) -> Value {
    json!({
        "queue": q,
        "backpressure": bp.map(|b| json!({
            "max_depth": b.max_depth,
            "strategy": b.strategy,
            "warning_threshold": b.warning_threshold,
        })),
    })
}

#[utoipa::path(
    get,
    path = "/ojs/v1/admin/queues/{queue}/config",
    tag = "queues",
    summary = "A queue's configuration: its backpressure bound",
    params(("queue" = String, Path)),
    responses((status = 200, description = "OK"), (status = 400, description = "Invalid request (OJS error)"))
)]
async fn get_config(State(st): State<AppState>, Path(q): Path<String>) -> ApiResult<Response> {
    queue_name(&q)?;
    Ok(ok(config_json(&q, st.store.backpressure(&q).await?.as_ref())))
}

/// `{"backpressure": {"max_depth", "strategy"?, "warning_threshold"?}}` (ojs-backpressure §6.2);
/// `max_depth` 0 or `"backpressure": null` makes the queue unbounded.
fn parse_backpressure(body: &Value) -> Result<Option<Backpressure>, OjsError> {
    let o = body
        .as_object()
        .ok_or_else(|| OjsError::invalid("the queue configuration must be a JSON object"))?;
    if let Some(k) = o.keys().find(|k| *k != "backpressure") {
        return Err(OjsError::invalid(format!(
            "{k} cannot be configured here: this endpoint sets backpressure (rate limits: PUT /ojs/v1/admin/queues/{{queue}}/rate-limit, aging: PUT …/priority-aging)"
        )));
    }
    let bp = match o.get("backpressure") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(bp)) => bp,
        Some(v) => return Err(OjsError::invalid(format!("backpressure must be an object; got {v}"))),
    };
    for (k, v) in bp {
        match k.as_str() {
            "max_depth" | "strategy" | "warning_threshold" => {}
            "max_size_bytes" if v.as_u64() == Some(0) || v.is_null() => {}
            "max_size_bytes" => {
                return Err(OjsError::unprocessable(
                    "backpressure.max_size_bytes is not supported by this server; bound the queue by max_depth",
                ))
            }
            other => {
                return Err(OjsError::invalid(format!(
                    "backpressure.{other} is not a backpressure setting"
                )))
            }
        }
    }
    let max_depth = match bp.get("max_depth") {
        None | Some(Value::Null) => 0,
        Some(v) => v
            .as_u64()
            .ok_or_else(|| OjsError::invalid(format!("backpressure.max_depth must be an integer >= 0; got {v}")))?,
    };
    let strategy =
        match bp.get("strategy") {
            None | Some(Value::Null) => "reject".to_string(),
            Some(Value::String(s)) if s == "reject" || s == "block" => s.clone(),
            Some(Value::String(s)) if s == "drop_oldest" => return Err(OjsError::unprocessable(
                "backpressure.strategy drop_oldest is not supported (it discards accepted jobs); use reject or block",
            )),
            Some(v) => {
                return Err(OjsError::invalid(format!(
                    "backpressure.strategy must be \"reject\" or \"block\"; got {v}"
                )))
            }
        };
    let warning_threshold = match bp.get("warning_threshold") {
        None | Some(Value::Null) => 0.8,
        Some(v) => v.as_f64().filter(|w| (0.0..=1.0).contains(w)).ok_or_else(|| {
            OjsError::invalid(format!(
                "backpressure.warning_threshold must be a number from 0 to 1; got {v}"
            ))
        })?,
    };
    Ok((max_depth > 0).then_some(Backpressure {
        max_depth,
        strategy,
        warning_threshold,
    }))
}

#[utoipa::path(
    put,
    path = "/ojs/v1/admin/queues/{queue}/config",
    tag = "queues",
    summary = "Bound a queue: `{\"backpressure\": {\"max_depth\", \"strategy\": \"reject\"|\"block\", \"warning_threshold\"}}`",
    params(("queue" = String, Path)),
    request_body = serde_json::Value,
    responses((status = 200, description = "OK"), (status = 400, description = "Invalid request (OJS error)"), (status = 422, description = "Unsupported setting (OJS error)"))
)]
async fn put_config(
    State(st): State<AppState>,
    Path(q): Path<String>,
    OjsJson(body): OjsJson<Value>,
) -> ApiResult<Response> {
    queue_name(&q)?;
    let bp = parse_backpressure(&body)?;
    st.store.set_backpressure(&q, bp.as_ref()).await?;
    Ok(ok(config_json(&q, bp.as_ref())))
}

/// Ready jobs of the queue by priority (seed §10.3).
#[utoipa::path(
    get,
    path = "/ojs/v1/queues/{queue}/priority-stats",
    tag = "queues",
    summary = "Ready jobs of a queue by priority",
    params(("queue" = String, Path)),
    responses((status = 200, description = "OK"), (status = 400, description = "Invalid request (OJS error)"))
)]
async fn priority_stats(State(st): State<AppState>, Path(q): Path<String>) -> ApiResult<Response> {
    queue_name(&q)?;
    let per = st.store.priority_counts(&q).await?;
    let total: u64 = per.iter().map(|(_, n)| n).sum();
    let counts: serde_json::Map<String, Value> = per.iter().map(|(p, n)| (p.to_string(), json!(n))).collect();
    Ok(ok(json!({ "queue": q, "counts_by_priority": counts, "total": total })))
}

fn aging_json(q: &str, interval_s: Option<u64>) -> Value {
    match interval_s {
        Some(s) => {
            json!({ "queue": q, "enabled": true, "interval": format_iso8601_ms(s * 1000), "interval_seconds": s })
        }
        None => json!({ "queue": q, "enabled": false }),
    }
}

#[utoipa::path(
    get,
    path = "/ojs/v1/admin/queues/{queue}/priority-aging",
    tag = "queues",
    summary = "The queue's priority aging setting",
    params(("queue" = String, Path)),
    responses((status = 200, description = "OK"))
)]
async fn get_aging(State(st): State<AppState>, Path(q): Path<String>) -> ApiResult<Response> {
    queue_name(&q)?;
    Ok(ok(aging_json(&q, st.store.get_aging(&q).await?)))
}

#[derive(serde::Deserialize)]
struct AgingReq {
    interval: Option<String>,
    interval_seconds: Option<u64>,
}

/// Priority aging: a job gains one priority level per `interval` it waits (effective = priority −
/// age / interval). Waiting jobs are re-scored under the new setting; the stored priority never changes.
#[utoipa::path(
    put,
    path = "/ojs/v1/admin/queues/{queue}/priority-aging",
    tag = "queues",
    summary = "Turn priority aging on: `{\"interval\": \"PT1M\"}`",
    params(("queue" = String, Path)),
    request_body = serde_json::Value,
    responses((status = 200, description = "OK"), (status = 400, description = "Invalid request (OJS error)"))
)]
async fn put_aging(
    State(st): State<AppState>,
    Path(q): Path<String>,
    OjsJson(req): OjsJson<AgingReq>,
) -> ApiResult<Response> {
    queue_name(&q)?;
    let secs = match (req.interval, req.interval_seconds) {
        (Some(d), None) => parse_iso8601_ms(&d).map_err(|e| OjsError::invalid(format!("interval: {e}")))? / 1000,
        (None, Some(s)) => s,
        _ => {
            return Err(
                OjsError::invalid("give exactly one of interval (ISO 8601, e.g. PT1M) or interval_seconds").into(),
            )
        }
    };
    if !(1..=MAX_AGING_SECONDS).contains(&secs) {
        return Err(OjsError::invalid(format!(
            "the aging interval must be from 1 second to {MAX_AGING_SECONDS} seconds (so scores stay exact); got {secs}"
        ))
        .into());
    }
    let rescored = st.store.set_aging(&q, Some(secs)).await?;
    let mut body = aging_json(&q, Some(secs));
    body["rescored"] = json!(rescored);
    Ok(ok(body))
}

#[utoipa::path(
    delete,
    path = "/ojs/v1/admin/queues/{queue}/priority-aging",
    tag = "queues",
    summary = "Turn priority aging off",
    params(("queue" = String, Path)),
    responses((status = 200, description = "OK"))
)]
async fn delete_aging(State(st): State<AppState>, Path(q): Path<String>) -> ApiResult<Response> {
    queue_name(&q)?;
    let rescored = st.store.set_aging(&q, None).await?;
    let mut body = aging_json(&q, None);
    body["rescored"] = json!(rescored);
    Ok(ok(body))
}

/// rank × interval + epoch seconds must stay below 2^53 for every rank up to 2^32: 2^20 s (12 days).
const MAX_AGING_SECONDS: u64 = 1 << 20;

async fn queue_json(st: &AppState, q: &str) -> ApiResult<Value> {
    let c = st.store.queue_counts(&[q.to_string()]).await?;
    Ok(c.first().map(counts_json).unwrap_or(Value::Null))
}

#[utoipa::path(
    post,
    path = "/ojs/v1/queues/{queue}/pause",
    tag = "queues",
    summary = "Pause a queue (FETCH skips it)",
    params(("queue" = String, Path)),
    responses((status = 200, description = "OK"), (status = 400, description = "Invalid request (OJS error)"))
)]
async fn pause(State(st): State<AppState>, Path(q): Path<String>) -> ApiResult<Response> {
    queue_name(&q)?;
    st.store.set_paused(&q, true).await?;
    Ok(ok(json!({ "queue": queue_json(&st, &q).await? })))
}

#[utoipa::path(
    post,
    path = "/ojs/v1/queues/{queue}/resume",
    tag = "queues",
    summary = "Resume a paused queue",
    params(("queue" = String, Path)),
    responses((status = 200, description = "OK"), (status = 400, description = "Invalid request (OJS error)"))
)]
async fn resume(State(st): State<AppState>, Path(q): Path<String>) -> ApiResult<Response> {
    queue_name(&q)?;
    st.store.set_paused(&q, false).await?;
    Ok(ok(json!({ "queue": queue_json(&st, &q).await? })))
}
