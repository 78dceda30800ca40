//! Queues: list with counts, per-queue stats, pause and resume.

use axum::extract::State;
use axum::response::Response;
use ojs_core::duration::{format_iso8601_ms, parse_iso8601_ms};
use ojs_core::OjsError;
use ojs_store::{Backpressure, EndedRetention, QueueCounts, ENDED_KEEP_LAST};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use utoipa::ToSchema;

use crate::config::QueueStatsQueue;
use crate::error::ApiResult;
use crate::queue::one_queue;
use crate::respond::{ok, OjsJson, QueuePath};
use crate::schemas::{variant, variant_name, JobCounts, OjsErrorBody, QueueStatus, OJS_MEDIA_TYPE};
use crate::state::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(stats))
        .routes(routes!(get_queue))
        .routes(routes!(pause))
        .routes(routes!(resume))
        .routes(routes!(priority_stats))
        .routes(routes!(get_aging, put_aging, delete_aging))
        .routes(routes!(get_retention, put_retention, delete_retention))
        .routes(routes!(get_config, put_config))
}

/// A queue with its job counts by state.
#[derive(Serialize, ToSchema)]
struct QueueSummary {
    name: String,
    /// `active` or `paused`.
    status: QueueStatus,
    paused: bool,
    #[serde(flatten)]
    counts: Counts,
}

/// A queue's jobs by state, and its depth.
#[derive(Serialize, ToSchema)]
struct Counts {
    #[serde(flatten)]
    jobs: JobCounts,
    /// ojs-backpressure: the jobs that count against a depth bound (available + scheduled + retryable).
    depth: u64,
}

fn counts(c: &QueueCounts) -> Counts {
    Counts {
        jobs: c.jobs,
        depth: c.jobs.depth(),
    }
}

fn summary(c: &QueueCounts) -> QueueSummary {
    QueueSummary {
        name: c.name.clone(),
        status: QueueStatus::of(c.paused),
        paused: c.paused,
        counts: counts(c),
    }
}

#[derive(Serialize, ToSchema)]
struct QueueList {
    queues: Vec<QueueSummary>,
    pagination: Total,
}

#[derive(Serialize, ToSchema)]
struct Total {
    total: usize,
}

#[utoipa::path(
    get,
    path = "/ojs/v1/queues",
    tag = "queues",
    summary = "Every queue with its counts by state",
    responses((status = 200, description = "OK", body = QueueList, content_type = OJS_MEDIA_TYPE), (status = 503, description = "Redis unavailable (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn list(State(st): State<AppState>) -> ApiResult<Response> {
    let names = st.shards.queue_names().await?;
    let counts = st.shards.queue_counts(&names).await?;
    let queues: Vec<QueueSummary> = counts.iter().map(summary).collect();
    let total = queues.len();
    Ok(ok(json!(QueueList {
        queues,
        pagination: Total { total },
    })))
}

#[utoipa::path(
    get,
    path = "/ojs/v1/queues/{queue}/stats",
    tag = "queues",
    summary = "One queue's counts by state: in `queue` (an object, or the name with --queue-stats-queue name), at the top level, and in `stats`",
    params(("queue" = String, Path)),
    responses((status = 200, description = "OK", body = QueueStatsResponse, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Not a queue name (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn stats(State(st): State<AppState>, QueuePath(q): QueuePath) -> ApiResult<Response> {
    let q = q.into_string();
    let c = &one_queue(&st, &q).await?;
    // ojs-backpressure §10: the depth that counts against the bound, and the bound.
    let bound = st
        .shards
        .find_queue(&q)
        .await?
        .backpressure(&q)
        .await?
        .map(|b| b.max_depth);
    Ok(ok(json!(QueueStatsResponse {
        summary: summary(c),
        stats: QueueStats {
            counts: counts(c),
            queue: q,
            max_depth: bound,
            pressure: bound.map(|m| c.jobs.depth() as f64 / m.max(1) as f64),
        },
        queue: match st.config.queue_stats_queue {
            QueueStatsQueue::Object => QueueField::Counts(summary(c)),
            QueueStatsQueue::Name => QueueField::Name(c.name.clone()),
        },
        computed_at: ojs_core::clock::format_ms(ojs_core::clock::local_now_ms()),
    })))
}

/// One queue's stats, in a shape every reader finds its fields in: `queue` (an object with the counts,
/// as the OpenAPI document and the conformance suite read it; or the name, `--queue-stats-queue name`,
/// as the HTTP binding's prose and the Go and Rust SDKs decode it), the counts again at the top level
/// (the JavaScript SDK's `QueueStats`; `depth` and `name` for the Ruby SDK), and `status`, `stats` and
/// `computed_at` (the HTTP binding's shape: the Python, Go and Rust SDKs). `scheduled` counts the
/// retryable jobs too (they wait in the same index).
#[derive(Serialize, ToSchema)]
struct QueueStatsResponse {
    #[serde(flatten)]
    summary: QueueSummary,
    /// The counts again, with the backpressure bound when the queue has one.
    stats: QueueStats,
    /// The queue with its counts, or (`--queue-stats-queue name`) its name.
    queue: QueueField,
    #[schema(format = DateTime)]
    computed_at: String,
}

#[derive(Serialize, ToSchema)]
#[serde(untagged)]
enum QueueField {
    Counts(QueueSummary),
    Name(String),
}

#[derive(Serialize, ToSchema)]
struct QueueStats {
    #[serde(flatten)]
    counts: Counts,
    queue: String,
    /// ojs-backpressure §10: the bound, when the queue has one...
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    max_depth: Option<u64>,
    /// ...and depth / bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pressure: Option<f64>,
}

/// A queue's configuration (ojs-backpressure §6.2).
#[derive(Serialize, ToSchema)]
struct QueueConfig {
    queue: String,
    /// The depth bound; `null` when the queue is unbounded.
    backpressure: Option<BackpressureConfig>,
}

#[derive(Serialize, ToSchema)]
struct BackpressureConfig {
    /// At most this many waiting jobs (available + scheduled + retryable); 0 in a request unbinds.
    max_depth: u64,
    /// `reject` (429 QUEUE_FULL) or `block` (a producer with `OJS-Block-Timeout` waits for room).
    #[schema(value_type = BackpressureStrategy)]
    strategy: String,
    /// From 0 to 1: above this share of the bound, enqueue answers carry the pressure headers.
    warning_threshold: f64,
}

#[derive(Serialize, Deserialize, ToSchema, Clone, Copy, Default)]
#[serde(rename_all = "lowercase")]
enum BackpressureStrategy {
    #[default]
    Reject,
    Block,
}

/// `PUT …/config`: only `backpressure` can be set here (ojs-backpressure §6.2).
#[derive(Deserialize, ToSchema)]
struct QueueConfigRequest {
    /// `null` (or `max_depth` 0) makes the queue unbounded.
    #[serde(default)]
    backpressure: Option<BackpressureRequest>,
    /// Anything else is refused, naming the endpoint that sets it.
    #[serde(flatten)]
    #[schema(ignore)]
    other: Map<String, Value>,
}

#[derive(Deserialize, ToSchema)]
struct BackpressureRequest {
    /// 0 (or `null`) makes the queue unbounded.
    #[serde(default)]
    max_depth: Option<u64>,
    /// Default `reject`; `drop_oldest` is refused (422).
    #[serde(default)]
    #[schema(value_type = Option<BackpressureStrategy>)]
    strategy: Option<String>,
    /// From 0 to 1 (default 0.8).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 1)]
    warning_threshold: Option<f64>,
    /// Bounding by size is not supported: only 0 or `null` (anything else is a 422).
    #[serde(default)]
    #[schema(maximum = 0)]
    max_size_bytes: Option<u64>,
    #[serde(flatten)]
    #[schema(ignore)]
    other: Map<String, Value>,
}

fn config_json(q: &str, bp: Option<&Backpressure>) -> Value {
    json!(QueueConfig {
        queue: q.to_string(),
        backpressure: bp.map(|b| BackpressureConfig {
            max_depth: b.max_depth,
            strategy: b.strategy.clone(),
            warning_threshold: b.warning_threshold,
        }),
    })
}

#[utoipa::path(
    get,
    path = "/ojs/v1/admin/queues/{queue}/config",
    tag = "queues",
    summary = "A queue's configuration: its backpressure bound",
    params(("queue" = String, Path)),
    responses((status = 200, description = "OK", body = QueueConfig, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Not a queue name (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn get_config(State(st): State<AppState>, QueuePath(q): QueuePath) -> ApiResult<Response> {
    let q = q.into_string();
    Ok(ok(config_json(
        &q,
        st.shards.find_queue(&q).await?.backpressure(&q).await?.as_ref(),
    )))
}

/// The bound a `PUT …/config` asks for; `None` when it makes the queue unbounded.
fn parse_backpressure(req: QueueConfigRequest) -> Result<Option<Backpressure>, OjsError> {
    if let Some(k) = req.other.keys().next() {
        return Err(OjsError::invalid(format!(
            "{k} cannot be configured here: this endpoint sets backpressure (rate limits: PUT /ojs/v1/admin/queues/{{queue}}/rate-limit, aging: PUT …/priority-aging)"
        )));
    }
    let Some(bp) = req.backpressure else {
        return Ok(None);
    };
    if let Some(other) = bp.other.keys().next() {
        return Err(OjsError::invalid(format!(
            "backpressure.{other} is not a backpressure setting"
        )));
    }
    if bp.max_size_bytes.is_some_and(|b| b > 0) {
        return Err(OjsError::unprocessable(
            "backpressure.max_size_bytes is not supported by this server; bound the queue by max_depth",
        ));
    }
    let strategy =
        match bp.strategy.as_deref() {
            None => BackpressureStrategy::default(),
            Some("drop_oldest") => return Err(OjsError::unprocessable(
                "backpressure.strategy drop_oldest is not supported (it discards accepted jobs); use reject or block",
            )),
            Some(s) => variant::<BackpressureStrategy>(s).ok_or_else(|| {
                OjsError::invalid(format!(
                    "backpressure.strategy must be \"reject\" or \"block\"; got {s:?}"
                ))
            })?,
        };
    let warning_threshold = bp.warning_threshold.unwrap_or(0.8);
    if !(0.0..=1.0).contains(&warning_threshold) {
        return Err(OjsError::invalid(format!(
            "backpressure.warning_threshold must be a number from 0 to 1; got {warning_threshold}"
        )));
    }
    let max_depth = bp.max_depth.unwrap_or(0);
    Ok((max_depth > 0).then_some(Backpressure {
        max_depth,
        strategy: variant_name(&strategy),
        warning_threshold,
    }))
}

#[utoipa::path(
    put,
    path = "/ojs/v1/admin/queues/{queue}/config",
    tag = "queues",
    summary = "Bound a queue: `{\"backpressure\": {\"max_depth\", \"strategy\": \"reject\"|\"block\", \"warning_threshold\"}}`",
    params(("queue" = String, Path)),
    request_body = QueueConfigRequest,
    responses((status = 200, description = "OK", body = QueueConfig, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 422, description = "Unsupported setting (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn put_config(
    State(st): State<AppState>,
    QueuePath(q): QueuePath,
    OjsJson(req): OjsJson<QueueConfigRequest>,
) -> ApiResult<Response> {
    let q = q.into_string();
    let bp = parse_backpressure(req)?;
    st.shards.for_queue(&q).await?.set_backpressure(&q, bp.as_ref()).await?;
    Ok(ok(config_json(&q, bp.as_ref())))
}

/// Ready jobs of the queue by priority (seed §10.3).
#[utoipa::path(
    get,
    path = "/ojs/v1/queues/{queue}/priority-stats",
    tag = "queues",
    summary = "Ready jobs of a queue by priority",
    params(("queue" = String, Path)),
    responses((status = 200, description = "OK", body = PriorityStats, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Not a queue name (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn priority_stats(State(st): State<AppState>, QueuePath(q): QueuePath) -> ApiResult<Response> {
    let q = q.into_string();
    let per = st.shards.find_queue(&q).await?.priority_counts(&q).await?;
    let total: u64 = per.iter().map(|(_, n)| n).sum();
    let counts_by_priority = per.iter().map(|(p, n)| (p.to_string(), json!(n))).collect();
    Ok(ok(json!(PriorityStats {
        queue: q,
        counts_by_priority,
        total,
    })))
}

/// Ready jobs of a queue by priority (seed §10.3).
#[derive(Serialize, ToSchema)]
struct PriorityStats {
    queue: String,
    /// Priority (as a string key) → ready jobs with that priority, in priority order.
    #[schema(value_type = std::collections::HashMap<String, u64>)]
    counts_by_priority: serde_json::Map<String, Value>,
    total: u64,
}

/// A queue's priority aging: one priority level gained per `interval` waited.
#[derive(Serialize, ToSchema)]
struct Aging {
    queue: String,
    enabled: bool,
    /// ISO 8601, when enabled.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    interval: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    interval_seconds: Option<u64>,
    /// After a change: how many waiting jobs this request re-scored (the promote timer takes steps of
    /// the same re-scoring alongside it, so this may fall short of the queue's waiting jobs; every one is
    /// re-scored before the answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    rescored: Option<u64>,
}

fn aging_json(q: &str, interval_s: Option<u64>, rescored: Option<u64>) -> Value {
    json!(Aging {
        queue: q.to_string(),
        enabled: interval_s.is_some(),
        interval: interval_s.map(|s| format_iso8601_ms(s * 1000)),
        interval_seconds: interval_s,
        rescored,
    })
}

#[utoipa::path(
    get,
    path = "/ojs/v1/admin/queues/{queue}/priority-aging",
    tag = "queues",
    summary = "The queue's priority aging setting",
    params(("queue" = String, Path)),
    responses((status = 200, description = "OK", body = Aging, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Not a queue name (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn get_aging(State(st): State<AppState>, QueuePath(q): QueuePath) -> ApiResult<Response> {
    let q = q.into_string();
    Ok(ok(aging_json(
        &q,
        st.shards.find_queue(&q).await?.get_aging(&q).await?,
        None,
    )))
}

/// Exactly one of `interval` or `interval_seconds` (1 s to 2^20 s).
#[derive(serde::Deserialize, ToSchema)]
struct AgingReq {
    /// ISO 8601, such as `PT1M`.
    #[schema(nullable = false)]
    interval: Option<String>,
    #[schema(minimum = 1, nullable = false)]
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
    request_body = AgingReq,
    responses((status = 200, description = "OK", body = Aging, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn put_aging(
    State(st): State<AppState>,
    QueuePath(q): QueuePath,
    OjsJson(req): OjsJson<AgingReq>,
) -> ApiResult<Response> {
    let q = q.into_string();
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
    let rescored = st.shards.for_queue(&q).await?.set_aging(&q, Some(secs)).await?;
    Ok(ok(aging_json(&q, Some(secs), Some(rescored))))
}

#[utoipa::path(
    delete,
    path = "/ojs/v1/admin/queues/{queue}/priority-aging",
    tag = "queues",
    summary = "Turn priority aging off",
    params(("queue" = String, Path)),
    responses((status = 200, description = "OK", body = Aging, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Not a queue name (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn delete_aging(State(st): State<AppState>, QueuePath(q): QueuePath) -> ApiResult<Response> {
    let q = q.into_string();
    let rescored = st.shards.for_queue(&q).await?.set_aging(&q, None).await?;
    Ok(ok(aging_json(&q, None, Some(rescored))))
}

/// How long a queue's ended jobs (completed, cancelled, discarded without the dead letter) stay listed
/// by `GET /admin/jobs` and the dashboard: the last `keep_last`, ended within `keep_for`, and never past
/// the records' retention (`--retention-secs`), which decides when a job itself goes.
#[derive(Serialize, ToSchema)]
struct Retention {
    queue: String,
    /// The last N ended jobs are listed (0: none; default and most: 10,000).
    keep_last: u64,
    /// ISO 8601: only those that ended within it (absent: the records' retention alone).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    keep_for: Option<String>,
    /// Whether this is the default (nothing set for the queue).
    default: bool,
}

fn retention_json(q: &str, r: Option<EndedRetention>) -> Value {
    json!(Retention {
        queue: q.to_string(),
        keep_last: r.map_or(ENDED_KEEP_LAST, |r| r.keep_last),
        keep_for: r.and_then(|r| r.keep_for_ms).map(format_iso8601_ms),
        default: r.is_none(),
    })
}

#[utoipa::path(
    get,
    path = "/ojs/v1/admin/queues/{queue}/retention",
    tag = "queues",
    summary = "How long the queue's ended jobs stay listed",
    params(("queue" = String, Path)),
    responses((status = 200, description = "OK", body = Retention, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Not a queue name (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn get_retention(State(st): State<AppState>, QueuePath(q): QueuePath) -> ApiResult<Response> {
    let q = q.into_string();
    let r = st.shards.find_queue(&q).await?.ended_retention(&q).await?;
    Ok(ok(retention_json(&q, r)))
}

/// `keep_last` (0 to 10,000) and optionally `keep_for` (ISO 8601, 1 s to 10 years).
#[derive(serde::Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct RetentionReq {
    #[schema(minimum = 0, maximum = 10000)]
    keep_last: u64,
    #[serde(default)]
    #[schema(nullable = false)]
    keep_for: Option<String>,
}

#[utoipa::path(
    put,
    path = "/ojs/v1/admin/queues/{queue}/retention",
    tag = "queues",
    summary = "Keep the queue's last N ended jobs listed, for at most a duration: `{\"keep_last\": 1000, \"keep_for\": \"PT24H\"}`",
    params(("queue" = String, Path)),
    request_body = RetentionReq,
    responses((status = 200, description = "OK", body = Retention, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn put_retention(
    State(st): State<AppState>,
    QueuePath(q): QueuePath,
    OjsJson(req): OjsJson<RetentionReq>,
) -> ApiResult<Response> {
    let q = q.into_string();
    if req.keep_last > ENDED_KEEP_LAST {
        return Err(OjsError::invalid(format!(
            "keep_last must be from 0 to {ENDED_KEEP_LAST}; got {}",
            req.keep_last
        ))
        .into());
    }
    let keep_for_ms = req
        .keep_for
        .as_deref()
        .map(|d| {
            parse_iso8601_ms(d)
                .ok()
                .filter(|ms| (1000..=ojs_core::envelope::MAX_SPAN_MS).contains(ms))
                .ok_or_else(|| {
                    OjsError::invalid(format!(
                        "keep_for must be an ISO 8601 duration from PT1S to 10 years; got {d:?}"
                    ))
                })
        })
        .transpose()?;
    let r = EndedRetention {
        keep_last: req.keep_last,
        keep_for_ms,
    };
    st.shards.for_queue(&q).await?.set_ended_retention(&q, Some(&r)).await?;
    Ok(ok(retention_json(&q, Some(r))))
}

#[utoipa::path(
    delete,
    path = "/ojs/v1/admin/queues/{queue}/retention",
    tag = "queues",
    summary = "Back to the default: the last 10,000 ended jobs within the records' retention",
    params(("queue" = String, Path)),
    responses((status = 200, description = "OK", body = Retention, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Not a queue name (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn delete_retention(State(st): State<AppState>, QueuePath(q): QueuePath) -> ApiResult<Response> {
    let q = q.into_string();
    st.shards.for_queue(&q).await?.set_ended_retention(&q, None).await?;
    Ok(ok(retention_json(&q, None)))
}

/// rank × interval + epoch seconds must stay below 2^53 for every rank up to 2^32: 2^20 s (12 days).
const MAX_AGING_SECONDS: u64 = 1 << 20;

/// `{"queue": …}`: the queue with its counts after the change.
#[derive(Serialize, ToSchema)]
struct QueueResponse {
    queue: QueueSummary,
}

async fn queue_summary(st: &AppState, q: &str) -> ApiResult<QueueSummary> {
    Ok(summary(&one_queue(st, q).await?))
}

#[utoipa::path(
    get,
    path = "/ojs/v1/queues/{queue}",
    tag = "queues",
    summary = "One queue with its counts by state (the queue's, also for a request that names a tenant)",
    params(("queue" = String, Path)),
    responses((status = 200, description = "OK", body = QueueResponse, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Not a queue name (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn get_queue(State(st): State<AppState>, QueuePath(q): QueuePath) -> ApiResult<Response> {
    let q = q.into_string();
    Ok(ok(json!(QueueResponse {
        queue: queue_summary(&st, &q).await?
    })))
}

#[utoipa::path(
    post,
    path = "/ojs/v1/queues/{queue}/pause",
    tag = "queues",
    summary = "Pause a queue (FETCH skips it)",
    params(("queue" = String, Path)),
    responses((status = 200, description = "OK", body = QueueResponse, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Not a queue name (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn pause(State(st): State<AppState>, QueuePath(q): QueuePath) -> ApiResult<Response> {
    let q = q.into_string();
    st.shards.for_queue(&q).await?.set_paused(&q, true).await?;
    Ok(ok(json!(QueueResponse {
        queue: queue_summary(&st, &q).await?
    })))
}

#[utoipa::path(
    post,
    path = "/ojs/v1/queues/{queue}/resume",
    tag = "queues",
    summary = "Resume a paused queue",
    params(("queue" = String, Path)),
    responses((status = 200, description = "OK", body = QueueResponse, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Not a queue name (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn resume(State(st): State<AppState>, QueuePath(q): QueuePath) -> ApiResult<Response> {
    let q = q.into_string();
    st.shards.for_queue(&q).await?.set_paused(&q, false).await?;
    Ok(ok(json!(QueueResponse {
        queue: queue_summary(&st, &q).await?
    })))
}
