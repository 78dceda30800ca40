//! Workers: FETCH, ACK, NACK, heartbeat, and the operator's signals to a worker.

use std::time::Duration;

use axum::extract::State;
use axum::response::Response;
use ojs_core::job::{job_view, JobView};
use ojs_core::{clock, names, OjsError};
use ojs_store::{AckPart, Strategy, Transition};

use crate::config::{Weights, MAX_WEIGHT};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use utoipa::ToSchema;

use crate::error::ApiResult;
use crate::respond::{job_id, JobPath};
use crate::respond::{ok, OjsJson, OjsPath};
use crate::schemas::{variant, variant_name, Job, JobState, OjsErrorBody, OJS_MEDIA_TYPE};
use crate::state::AppState;
use crate::tenant::ActingTenant;
use crate::worker::{check_worker_id, lease_id, ClaimFields};
use crate::worker_ops::FetchParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(fetch))
        .routes(routes!(ack))
        .routes(routes!(nack))
        .routes(routes!(job_ack))
        .routes(routes!(job_nack))
        .routes(routes!(heartbeat))
        .routes(routes!(beat))
        .routes(routes!(signal))
}

/// A FETCH request. Every field is optional: `{}` claims one job of `default`.
#[derive(Deserialize, ToSchema)]
struct FetchReq {
    /// Queue names, or `{"name", "weight"}` objects for the weighted strategy (default `["default"]`).
    #[serde(default)]
    #[schema(value_type = Option<Vec<FetchQueue>>, nullable = false)]
    queues: Option<Vec<Value>>,
    /// `strict` (default: the server's `--fetch-strategy`) or `weighted`.
    #[serde(default)]
    #[schema(value_type = Option<FetchStrategy>, nullable = false)]
    strategy: Option<String>,
    /// How many jobs to claim at most (default 1; at most the server's `--max-fetch`).
    #[serde(default)]
    #[schema(minimum = 1, nullable = false)]
    count: Option<u32>,
    /// The Ruby SDK's name for `count` (lib/ojs/worker.rb fetch_jobs); both may be given only when equal.
    #[serde(default)]
    #[schema(minimum = 1, nullable = false)]
    batch_size: Option<u32>,
    /// Printable ASCII without quotes, backslashes or braces, at most 255 characters.
    #[serde(default)]
    #[schema(nullable = false)]
    worker_id: Option<String>,
    /// How long the claim holds before the job is taken back (default: the job's, then the server's).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 315360000000i64, nullable = false)]
    visibility_timeout_ms: Option<u64>,
    /// Long-poll: wait up to this long for a job when none is ready (off by default, at most 30 s).
    #[serde(default)]
    #[schema(nullable = false)]
    wait_ms: Option<u64>,
    /// A worker pool (`PUT /admin/pools/{name}`): its queues, strategy and weights are used instead of
    /// `queues` and `strategy` (the server's configuration wins). An unknown pool is a 404.
    #[serde(default)]
    #[schema(nullable = false)]
    pool: Option<String>,
}

impl FetchReq {
    /// The request with its pool's queues, strategy and weights in place of its own (one read on shard
    /// 0); a request naming no pool is returned as it came, without touching Redis.
    async fn with_pool(mut self, st: &AppState) -> ApiResult<Self> {
        if let Some(name) = self.pool.take() {
            let (strategy, queues) = crate::pools::load(st, &name).await?.fetch_plan();
            self.strategy = Some(variant_name(&FetchStrategy::from(strategy)));
            self.queues = Some(
                queues
                    .into_iter()
                    .map(|(q, w)| json!({"name": q, "weight": w}))
                    .collect(),
            );
        }
        Ok(self)
    }
}

#[derive(Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
enum FetchStrategy {
    Strict,
    Weighted,
}

impl From<Strategy> for FetchStrategy {
    fn from(s: Strategy) -> Self {
        match s {
            Strategy::Strict => FetchStrategy::Strict,
            Strategy::Weighted => FetchStrategy::Weighted,
        }
    }
}

impl From<FetchStrategy> for Strategy {
    fn from(s: FetchStrategy) -> Self {
        match s {
            FetchStrategy::Strict => Strategy::Strict,
            FetchStrategy::Weighted => Strategy::Weighted,
        }
    }
}

/// A queue to claim from: its name, or `{"name", "weight"}` (weight 1 to the server's maximum).
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
enum FetchQueue {
    Name(String),
    Weighted {
        name: String,
        #[schema(minimum = 1, nullable = false)]
        weight: Option<u32>,
    },
}

impl FetchQueue {
    /// `queues[i]` of a FETCH, checked but for its name (see parse_queues).
    fn parse(item: Value, i: usize) -> Result<Self, OjsError> {
        match item {
            Value::String(s) => Ok(FetchQueue::Name(s)),
            Value::Object(m) => {
                let name = m
                    .get("name")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .ok_or_else(|| {
                        OjsError::invalid(format!(
                            "queues[{i}] must be a queue name or {{\"name\": …, \"weight\": …}}"
                        ))
                    })?;
                let weight = match m.get("weight") {
                    None | Some(Value::Null) => None,
                    Some(w) => Some(
                        w.as_u64()
                            .filter(|w| (1..=u64::from(MAX_WEIGHT)).contains(w))
                            .ok_or_else(|| {
                                OjsError::invalid(format!(
                                    "queues[{i}].weight must be an integer from 1 to {MAX_WEIGHT}; got {w}"
                                ))
                            })? as u32,
                    ),
                };
                Ok(FetchQueue::Weighted { name, weight })
            }
            other => Err(OjsError::invalid(format!(
                "queues[{i}] must be a string or an object; got {other}"
            ))),
        }
    }
}

/// The claimed jobs (none when nothing was ready); each is `active` with its `lease_id`.
#[derive(Serialize, ToSchema)]
struct FetchResponse {
    #[schema(value_type = Vec<Job>)]
    jobs: Vec<JobView>,
}

#[utoipa::path(
    post,
    path = "/ojs/v1/workers/fetch",
    tag = "workers",
    summary = "Claim jobs: `{queues, strategy?, count? (alias batch_size), worker_id?, visibility_timeout_ms?, wait_ms?, pool?}`",
    request_body = FetchReq,
    responses((status = 200, description = "OK", body = FetchResponse, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such pool (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 503, description = "Redis unavailable (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn fetch(
    State(st): State<AppState>,
    tenant: ActingTenant,
    OjsJson(req): OjsJson<FetchReq>,
) -> ApiResult<Response> {
    let p = fetch_params(&st, req.with_pool(&st).await?, &tenant)?;
    let jobs = claim_loop(&st, &p).await?;
    Ok(ok(FetchResponse { jobs }))
}

/// A FETCH request, validated.
fn fetch_params(st: &AppState, req: FetchReq, tenant: &ActingTenant) -> Result<FetchParams, OjsError> {
    let strategy = match req.strategy.as_deref() {
        None => st.config.fetch_strategy,
        Some(s) => variant::<FetchStrategy>(s)
            .ok_or_else(|| OjsError::invalid(format!("strategy must be \"strict\" or \"weighted\"; got {s:?}")))?
            .into(),
    };
    let queues = parse_queues(req.queues, &st.config.queue_weights)?;
    let worker = req.worker_id.unwrap_or_default();
    check_worker_id(&worker)?;
    let count = match (req.count, req.batch_size) {
        (Some(c), Some(b)) if c != b => {
            return Err(OjsError::invalid(format!(
                "count ({c}) and batch_size ({b}) disagree; batch_size is an alias of count, give one of them"
            )))
        }
        (c, b) => c.or(b).unwrap_or(1),
    };
    if count == 0 || count > st.config.max_fetch {
        return Err(OjsError::invalid(format!(
            "count (or batch_size) must be from 1 to {}; got {count}",
            st.config.max_fetch
        )));
    }
    lease_ms(req.visibility_timeout_ms)?;
    let wait = Duration::from_millis(req.wait_ms.unwrap_or(0).min(30_000));
    Ok(FetchParams {
        queues,
        strategy,
        worker,
        count,
        visibility_ms: req.visibility_timeout_ms,
        wait,
        tenant: tenant.name().map(str::to_owned),
        began: st.traces.as_ref().map(|_| std::time::SystemTime::now()),
    })
}

/// A request's `visibility_timeout_ms`: from 1 ms to ten years.
fn lease_ms(ms: Option<u64>) -> Result<Option<u64>, OjsError> {
    if ms == Some(0) {
        return Err(OjsError::invalid("visibility_timeout_ms must be at least 1"));
    }
    if let Some(ms) = ms {
        ojs_core::envelope::check_visibility(ms, "visibility_timeout_ms")?;
    }
    Ok(ms)
}

/// Claims jobs, long-polling up to `p.wait` when none is ready.
async fn claim_loop(st: &AppState, p: &FetchParams) -> ApiResult<Vec<JobView>> {
    let deadline = tokio::time::Instant::now() + p.wait;
    let mut shutdown = st.shutting_down.clone();
    let notifiers: Vec<_> = if p.wait.is_zero() {
        Vec::new()
    } else {
        p.queues.iter().map(|(q, _)| st.wake.notifier(q)).collect()
    };
    // The events hub reads the streams while a request may wait on them (before the first FETCH).
    let _listening = (!p.wait.is_zero()).then(|| crate::wake::Listening::new(&st.listeners));
    loop {
        let (_, claims) = crate::worker_ops::claim_round(st, Some(p), None).await?;
        let claimed = claims.jobs;
        if claimed.is_empty() && claims.cut {
            // A script call stopped on its budget (many rate-limited lanes to park, or jobs to
            // discard): each call made progress and Redis served others in between; go on at once.
            continue;
        }
        let done = !claimed.is_empty() || tokio::time::Instant::now() >= deadline || *shutdown.borrow();
        if done {
            return Ok(claimed_view(st, p, &claimed));
        }
        // Wait for a job of one of these queues to become available (any node's enqueue wakes us
        // through the events hub), re-checking now and then for transitions that emit no such event.
        let pause = crate::wake::RECHECK.min(deadline - tokio::time::Instant::now());
        let woken = futures::future::select_all(notifiers.iter().map(|n| Box::pin(n.notified())));
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = woken => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// Records the claim metrics (and, with tracing on, the claim spans) and renders the claimed jobs.
fn claimed_view(st: &AppState, p: &FetchParams, claimed: &[ojs_store::Claimed]) -> Vec<JobView> {
    for c in claimed {
        record_wait(&c.job);
        let (queue, job_type) = (c.job.queue.as_deref(), c.job.job_type.as_deref());
        crate::metrics::job_event("started", queue.unwrap_or(""), job_type.unwrap_or(""));
        if let (Some(t), Some(began)) = (&st.traces, p.began) {
            crate::traces::claimed(t, &c.job, &p.worker, began);
        }
    }
    claimed.iter().map(|c| job_view(&c.job)).collect()
}

/// Time from becoming ready to being claimed, by queue and (bounded) priority.
fn record_wait(f: &ojs_core::StoredJob) {
    if let (Some(ready), Some(started)) = (f.enqueued_at, f.started_at) {
        let queue = f.queue.clone().unwrap_or_default();
        let priority = crate::metrics::priority_label(f.priority.unwrap_or(0));
        let waited = (started - ready).max(0) as f64 / 1000.0;
        metrics::histogram!("ojs_job_wait_duration_seconds", "queue" => queue, "priority" => priority).record(waited);
        if let Some(key) = &f.rl_key {
            // Ready-to-start time of a rate-limited job: includes the time its key held it back.
            metrics::histogram!("ojs_rate_limit_wait_duration_seconds", "key" => crate::metrics::key_label(key))
                .record(waited);
        }
    }
}

/// FETCH's `queues`: names or `{name, weight}`; weights default to the server's `--queue-weights`, then 1.
fn parse_queues(v: Option<Vec<Value>>, defaults: &Weights) -> Result<Vec<(String, u32)>, OjsError> {
    let v = v.unwrap_or_else(|| vec![json!("default")]);
    if v.is_empty() || v.len() > 100 {
        return Err(OjsError::invalid("queues must name from 1 to 100 queues"));
    }
    let mut out: Vec<(String, u32)> = Vec::with_capacity(v.len());
    for (i, item) in v.into_iter().enumerate() {
        let (name, weight) = match FetchQueue::parse(item, i)? {
            FetchQueue::Name(name) => (name, None),
            FetchQueue::Weighted { name, weight } => (name, weight),
        };
        names::check_queue(&name).map_err(|e| OjsError::invalid(format!("queues[{i}]: {e}")))?;
        if out.iter().any(|(q, _)| *q == name) {
            return Err(OjsError::invalid(format!("queues[{i}]: {name} is listed twice")));
        }
        let w = weight.or_else(|| defaults.get(&name)).unwrap_or(1);
        out.push((name, w));
    }
    Ok(out)
}

/// The answer to an ACK or NACK the store refused.
fn refused<T>(t: Transition<T>, id: &str, op: &str) -> OjsError {
    match t {
        Transition::NotFound => OjsError::not_found("job", id),
        Transition::LeaseLost(s) => OjsError::lease_lost(id, &s, op),
        Transition::WrongState(s) => OjsError::conflict_state(id, &s, op),
        Transition::Done(_) => OjsError::new(ojs_core::error::ErrorCode::Internal, "refused a done transition"),
    }
}

#[derive(Deserialize, ToSchema)]
struct AckReq {
    /// The job's id (a UUIDv7).
    #[schema(pattern = r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")]
    job_id: String,
    #[serde(flatten)]
    body: AckBody,
    /// Ack-and-fetch-next: a FETCH request (`queues`, `count`, `wait_ms`…) run in the same script as
    /// the ACK, so a busy worker spends one request per job; the claimed jobs come back in `jobs`.
    #[serde(default)]
    #[schema(nullable = false)]
    fetch: Option<FetchReq>,
}

/// An ACK of the job a route names: the claim, `result`, `cost_used` (`POST /jobs/{id}/ack`; with
/// `job_id`, `POST /workers/ack`).
#[derive(Deserialize, ToSchema)]
struct AckBody {
    #[serde(flatten)]
    claim: ClaimFields,
    /// Anything JSON: kept as the job's `result`.
    #[serde(default)]
    result: Option<Value>,
    /// Ours, beyond the seed: the units the job really used (an integer from 0 to 1,000,000,000, for
    /// example the tokens an LLM call took). Its rate-limit window entry counts this instead of the
    /// job's `rate_limit.cost` from now on, so units it did not use are free again in the same window.
    #[serde(default)]
    #[schema(value_type = Option<u64>, nullable = false, minimum = 0, maximum = 1_000_000_000)]
    cost_used: Option<Value>,
}

#[derive(Serialize, ToSchema)]
struct AckResponse {
    acknowledged: bool,
    job_id: String,
    /// The same as `job_id`.
    id: String,
    state: JobState,
    attempt: i64,
    #[schema(format = DateTime)]
    completed_at: String,
    /// The job as the ACK left it (GET /jobs/{id} has the rest).
    job: JobSummary,
    /// With `fetch`: the jobs claimed for the next round (maybe none).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Job>>, nullable = false)]
    jobs: Option<Vec<JobView>>,
}

/// A job as an ACK or NACK left it: its id, type, queue, state and attempt, from the transition's own
/// reply (no read of the job; `GET /jobs/{id}` has the rest).
#[derive(Serialize, ToSchema)]
struct JobSummary {
    id: String,
    #[serde(rename = "type")]
    job_type: String,
    queue: String,
    #[schema(value_type = JobState)]
    state: String,
    attempt: i64,
}

#[utoipa::path(
    post,
    path = "/ojs/v1/workers/ack",
    tag = "workers",
    summary = "An active job succeeded: `{job_id, result?, fetch?}`; with `fetch` (a FETCH request) the next jobs come back in `jobs`",
    request_body = AckReq,
    responses((status = 200, description = "OK", body = AckResponse, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such job, or another tenant's (a request acting as a tenant), or no such pool named by `fetch` (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 409, description = "The job is not active, or the lease was lost (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn ack(State(st): State<AppState>, tenant: ActingTenant, OjsJson(req): OjsJson<AckReq>) -> ApiResult<Response> {
    let id = job_id(&req.job_id)?;
    acknowledge(&st, &tenant, id.as_str(), req.body, req.fetch).await
}

/// An ACK of job `id` (`POST /workers/ack`, `POST /jobs/{id}/ack`), with the FETCH of ack-and-fetch-next.
async fn acknowledge(
    st: &AppState,
    tenant: &ActingTenant,
    id: &str,
    req: AckBody,
    fetch: Option<FetchReq>,
) -> ApiResult<Response> {
    let result = match req.result {
        None | Some(Value::Null) => None,
        Some(v) => Some(serde_json::to_string(&v).map_err(|e| OjsError::invalid(e.to_string()))?),
    };
    let used = match &req.cost_used {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .filter(|u| *u <= ojs_core::ratelimit::MAX_COST)
                .ok_or_else(|| {
                    OjsError::invalid(format!(
                        "cost_used must be an integer from 0 to {} (the units the job used); got {v}",
                        ojs_core::ratelimit::MAX_COST
                    ))
                })?,
        ),
    };
    let began = st.traces.as_ref().map(|_| std::time::SystemTime::now());
    let claim = req.claim.into_ref(tenant.name())?;
    let next = match fetch {
        Some(f) => Some(fetch_params(st, f.with_pool(st).await?, tenant)?),
        None => None,
    };
    let ack = AckPart {
        job_id: id.to_string(),
        claim,
        result,
        used,
    };
    // Concurrent ACKs and FETCHes on this node share one script call (see `coalesce`).
    let (acked, claims) = crate::worker_ops::claim_round(st, next.as_ref(), Some(ack)).await?;
    match acked.unwrap_or(Transition::NotFound) {
        Transition::Done(a) => {
            crate::metrics::job_event("completed", &a.queue, &a.job_type);
            if let (Some(t), Some(began)) = (&st.traces, began) {
                let job = settled(id, &a.job_type, &a.queue, "completed", a.attempt);
                crate::traces::settled(t, &job, crate::traces::Outcome::Completed, began);
            }
            let jobs = match next {
                // Nothing claimed yet: long-poll, or go on at once after a call cut short by its budget.
                Some(p) if claims.jobs.is_empty() && (claims.cut || !p.wait.is_zero()) => {
                    Some(claim_loop(st, &p).await?)
                }
                Some(p) => Some(claimed_view(st, &p, &claims.jobs)),
                None => None,
            };
            Ok(ok(AckResponse {
                acknowledged: true,
                job_id: id.to_string(),
                id: id.to_string(),
                state: JobState::Completed,
                attempt: a.attempt,
                completed_at: clock::format_ms(a.now_ms),
                job: JobSummary {
                    id: id.to_string(),
                    job_type: a.job_type,
                    queue: a.queue,
                    state: JobState::Completed.as_str().to_string(),
                    attempt: a.attempt,
                },
                jobs,
            }))
        }
        other => Err(refused(other, id, "ack").into()),
    }
}

#[derive(Deserialize, ToSchema)]
struct NackReq {
    /// The job's id (a UUIDv7).
    #[schema(pattern = r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")]
    job_id: String,
    #[serde(flatten)]
    body: NackBody,
}

/// A NACK of the job a route names: the claim, `error`, `requeue` (`POST /jobs/{id}/nack`; with
/// `job_id`, `POST /workers/nack`).
#[derive(Deserialize, ToSchema)]
struct NackBody {
    #[serde(flatten)]
    claim: ClaimFields,
    /// What went wrong: an object (at least `message`), or just the message.
    #[serde(default)]
    #[schema(value_type = Option<NackError>)]
    error: Option<Value>,
    /// Release the job back to `available` at once without spending the attempt (graceful shutdown).
    #[serde(default)]
    #[schema(nullable = false)]
    requeue: Option<bool>,
}

/// A worker's error report.
#[derive(Deserialize, ToSchema)]
#[serde(untagged)]
pub enum NackError {
    Message(String),
    Report {
        #[schema(nullable = false)]
        message: Option<String>,
        /// Matched against the retry policy's `non_retryable_errors` (`code` when absent).
        #[serde(rename = "type")]
        #[schema(nullable = false)]
        kind: Option<String>,
        #[schema(nullable = false)]
        code: Option<String>,
        /// `false` discards the job at once (default `true`).
        retryable: Option<bool>,
        /// RFC 3339: the job's rate-limit key takes no new starts until then.
        rate_limit_until: Option<String>,
        #[serde(flatten)]
        other: std::collections::HashMap<String, Value>,
    },
}

#[derive(Serialize, ToSchema)]
struct NackResponse {
    job_id: String,
    /// The same as `job_id`.
    id: String,
    /// `retryable`, `available` (requeue), `discarded`, or `pending`... as the retry policy decided.
    #[schema(value_type = JobState)]
    state: String,
    attempt: i64,
    max_attempts: i64,
    /// When the job is retryable: the delay before the next attempt, and when that is.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    retry_delay_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    next_attempt_at: Option<String>,
    /// When the job was discarded (also in `completed_at`, for SDKs that read that).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    discarded_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    completed_at: Option<String>,
    /// The job as the NACK left it (GET /jobs/{id} has the rest).
    job: JobSummary,
}

/// Normalises the worker's error report: an object with at least `message`; `code`/`type` kept.
/// Returns (error JSON, match key, retryable, rate_limit_until in ms or 0).
fn error_record(e: Option<Value>) -> Result<(String, String, bool, i64), OjsError> {
    let mut m = match e {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m,
        Some(Value::String(s)) => {
            let mut m = Map::new();
            m.insert("message".into(), Value::String(s));
            m
        }
        Some(v) => {
            return Err(OjsError::invalid(format!(
                "error must be an object with code, message and retryable; got {v}"
            )))
        }
    };
    if !m.get("message").is_some_and(Value::is_string) {
        m.insert("message".into(), json!("no message given"));
    }
    let retryable = match m.get("retryable") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(v) => {
            return Err(OjsError::invalid(format!(
                "error.retryable must be true or false; got {v}"
            )))
        }
    };
    let match_key = m
        .get("type")
        .and_then(Value::as_str)
        .or_else(|| m.get("code").and_then(Value::as_str))
        .unwrap_or("")
        .to_string();
    if !m.contains_key("type") {
        if let Some(code) = m.get("code").cloned() {
            m.insert("type".into(), code);
        }
    }
    let until = match m.get("rate_limit_until") {
        None | Some(Value::Null) => 0,
        Some(Value::String(t)) => clock::parse_time(t, "error.rate_limit_until").map_err(OjsError::invalid)?,
        Some(v) => {
            return Err(OjsError::invalid(format!(
                "error.rate_limit_until must be an RFC 3339 timestamp; got {v}"
            )))
        }
    };
    let text = serde_json::to_string(&Value::Object(m)).map_err(|e| OjsError::invalid(e.to_string()))?;
    Ok((text, match_key, retryable, until))
}

#[utoipa::path(
    post,
    path = "/ojs/v1/workers/nack",
    tag = "workers",
    summary = "An active job failed: `{job_id, error, requeue?}`; `error.rate_limit_until` blocks its key",
    request_body = NackReq,
    responses((status = 200, description = "OK", body = NackResponse, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such job, or (for a request acting as a tenant) another tenant's (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 409, description = "The job is not active, or the lease was lost (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn nack(State(st): State<AppState>, tenant: ActingTenant, OjsJson(req): OjsJson<NackReq>) -> ApiResult<Response> {
    let id = job_id(&req.job_id)?;
    fail(&st, &tenant, id.as_str(), req.body).await
}

/// A NACK of job `id` (`POST /workers/nack`, `POST /jobs/{id}/nack`).
async fn fail(st: &AppState, tenant: &ActingTenant, id: &str, req: NackBody) -> ApiResult<Response> {
    let began = st.traces.as_ref().map(|_| std::time::SystemTime::now());
    let (err, match_key, retryable, until) = error_record(req.error)?;
    let claim = req.claim.into_ref(tenant.name())?;
    let requeue = req.requeue.unwrap_or(false);
    let (claim, err, match_key) = (&claim, &err, &match_key);
    match st
        .shards
        .on_id(id, |s| async move {
            s.nack(id, claim, err, match_key, retryable, requeue, until).await
        })
        .await?
    {
        Transition::Done(r) => {
            crate::metrics::job_event("failed", &r.queue, &r.job_type);
            if let (Some(t), Some(began)) = (&st.traces, began) {
                // A requeue gives the attempt back: the span's parent is the claim of the attempt it ended.
                let job = settled(id, &r.job_type, &r.queue, &r.state, r.attempt + i64::from(requeue));
                let message = serde_json::from_str::<Value>(err).ok();
                let message = message.as_ref().and_then(|m| m.get("message")).and_then(Value::as_str);
                let kind = Some(match_key.as_str()).filter(|k| !k.is_empty());
                crate::traces::settled(t, &job, crate::traces::Outcome::Failed { kind, message }, began);
            }
            if r.state == "discarded" {
                crate::metrics::job_event("discarded", &r.queue, &r.job_type);
            }
            let discarded = (r.state == "discarded").then(|| clock::format_ms(r.now_ms));
            Ok(ok(json!(NackResponse {
                job_id: id.to_string(),
                id: id.to_string(),
                retry_delay_ms: r.delay_ms,
                next_attempt_at: r.delay_ms.map(|d| clock::format_ms(r.now_ms + d)),
                completed_at: discarded.clone(),
                discarded_at: discarded,
                job: JobSummary {
                    id: id.to_string(),
                    job_type: r.job_type,
                    queue: r.queue,
                    state: r.state.clone(),
                    attempt: r.attempt,
                },
                state: r.state,
                attempt: r.attempt,
                max_attempts: r.max_attempts,
            })))
        }
        other => Err(refused(other, id, "nack").into()),
    }
}

/// What a completion span says about the job.
fn settled<'a>(
    id: &'a str,
    job_type: &'a str,
    queue: &'a str,
    state: &'a str,
    attempt: i64,
) -> crate::traces::JobAttrs<'a> {
    crate::traces::JobAttrs {
        id,
        job_type,
        queue,
        state,
        priority: None,
        attempt: Some(attempt),
        worker: None,
    }
}

/// `POST /jobs/{id}/ack`: the ACK of `POST /workers/ack` for the job the path names (the shape the
/// job-versioning, encryption and WASI suites use); no ack-and-fetch-next here.
#[utoipa::path(
    post,
    path = "/ojs/v1/jobs/{id}/ack",
    tag = "jobs",
    summary = "An active job succeeded: `{result?, lease_id?, attempt?, worker_id?}`; as `POST /workers/ack`",
    params(("id" = String, Path)),
    request_body = AckBody,
    responses((status = 200, description = "OK", body = AckResponse, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such job, or another tenant's (a request acting as a tenant) (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 409, description = "The job is not active, or the lease was lost (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn job_ack(
    State(st): State<AppState>,
    tenant: ActingTenant,
    JobPath(id): JobPath,
    OjsJson(req): OjsJson<AckBody>,
) -> ApiResult<Response> {
    acknowledge(&st, &tenant, id.as_str(), req, None).await
}

/// `POST /jobs/{id}/nack`: the NACK of `POST /workers/nack` for the job the path names.
#[utoipa::path(
    post,
    path = "/ojs/v1/jobs/{id}/nack",
    tag = "jobs",
    summary = "An active job failed: `{error, requeue?, lease_id?}`; as `POST /workers/nack`",
    params(("id" = String, Path)),
    request_body = NackBody,
    responses((status = 200, description = "OK", body = NackResponse, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such job, or (for a request acting as a tenant) another tenant's (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 409, description = "The job is not active, or the lease was lost (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn job_nack(
    State(st): State<AppState>,
    tenant: ActingTenant,
    JobPath(id): JobPath,
    OjsJson(req): OjsJson<NackBody>,
) -> ApiResult<Response> {
    fail(&st, &tenant, id.as_str(), req).await
}

/// A heartbeat in any shape an official OJS SDK sends: JavaScript and Go send `active_jobs` as a count
/// with the ids in `active_job_ids`; Python and Rust send `active_jobs` as ids; Ruby sends `job_ids` and
/// may omit `worker_id`. Entries may also be `{"job_id", "lease_id"}` objects (ojs-client sends those,
/// so a stale worker's heartbeat cannot extend another worker's claim).
#[derive(Deserialize, ToSchema)]
struct HeartbeatReq {
    #[serde(default)]
    #[schema(nullable = false)]
    worker_id: Option<String>,
    /// What the worker reports of itself (ojs-graceful-shutdown): `running`, `quiet`, `drain`
    /// (`draining`), `terminate`; kept in its record for the operator and `GET /workers/{id}/health`.
    #[serde(default)]
    state: Option<String>,
    /// The jobs this worker runs (or, from the JavaScript and Go SDKs, how many: the ids then come in
    /// `active_job_ids`).
    #[serde(default)]
    #[schema(value_type = Option<ActiveJobs>)]
    active_jobs: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<Vec<HeartbeatJobRef>>)]
    active_job_ids: Option<Value>,
    /// The Ruby SDK's name for the list.
    #[serde(default)]
    #[schema(value_type = Option<Vec<HeartbeatJobRef>>)]
    job_ids: Option<Value>,
    /// One job (with its `lease_id`).
    #[serde(default)]
    #[schema(nullable = false)]
    job_id: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    lease_id: Option<Value>,
    /// Extend each named lease to now + this (default: the job's visibility timeout).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 315360000000i64, nullable = false)]
    visibility_timeout_ms: Option<u64>,
}

/// `active_jobs`: the jobs, or a count.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
enum ActiveJobs {
    Jobs(Vec<HeartbeatJobRef>),
    Count(u64),
}

/// A job id, or `{"job_id", "lease_id"}` (then only that claim's lease is extended).
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
enum HeartbeatJobRef {
    Id(String),
    Claim { job_id: String, lease_id: Option<String> },
}

#[derive(Serialize, ToSchema)]
struct HeartbeatResponse {
    acknowledged: bool,
    worker_id: String,
    /// What the operator asked of this worker: `running`, `quiet` (stop fetching) or `terminate`.
    #[schema(value_type = WorkerSignal)]
    state: String,
    /// What the worker reported of itself (`state` in the request), when it did.
    #[schema(nullable = true)]
    worker_state: Option<&'static str>,
    jobs: Vec<HeartbeatJob>,
    /// The named jobs whose lease is gone: stop working on them.
    lost_jobs: Vec<String>,
    directives: Vec<Directive>,
    #[schema(format = DateTime)]
    server_time: String,
}

#[derive(Serialize, ToSchema)]
struct HeartbeatJob {
    job_id: String,
    state: String,
    /// Whether the lease was extended (the job is active under this worker's claim).
    extended: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    visibility_deadline: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    lease_lost: Option<bool>,
}

/// `{"type": "cancel", "job_id"}`: the job was cancelled; stop working on it.
#[derive(Serialize, ToSchema)]
struct Directive {
    #[serde(rename = "type")]
    kind: &'static str,
    job_id: String,
}

#[derive(Serialize, Deserialize, ToSchema, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum WorkerSignal {
    Running,
    Quiet,
    Terminate,
}

/// The state a heartbeat reports, normalised (`draining` → `drain`; `terminated`, which the JavaScript
/// SDK sends once stopped, and `shutting_down` → `terminate`);
/// None when it reports none or names no worker (nothing to keep it against). An unknown state is a 400.
pub(crate) fn reported_state(s: Option<&str>, worker: &str) -> Result<Option<&'static str>, OjsError> {
    let Some(s) = s else { return Ok(None) };
    let state = match s {
        "running" | "run" => "running",
        "quiet" => "quiet",
        "drain" | "draining" => "drain",
        "terminate" | "terminated" | "terminating" | "shutting_down" | "stopped" => "terminate",
        other => {
            return Err(OjsError::invalid(format!(
                "state must be running, quiet, drain or terminate; got {other:?}"
            )))
        }
    };
    // Without a worker id there is no record to keep it in; the heartbeat still extends its leases.
    Ok((!worker.is_empty()).then_some(state))
}

/// Most jobs one heartbeat may name in each of its lists (`active_jobs`, `active_job_ids`, `job_ids`).
const MAX_HEARTBEAT_JOBS: usize = 10_000;

impl HeartbeatReq {
    /// The (job id, lease id) pairs the heartbeat names, each once, in the order given.
    fn jobs(self) -> Result<Vec<(String, Option<String>)>, OjsError> {
        let mut named: Vec<(String, Option<String>)> = Vec::new();
        let mut add = |id: String, lease: Option<String>| {
            if names::check_job_id(&id).is_ok() {
                named.push((id, lease));
            }
        };
        for (field, v) in [
            ("active_jobs", self.active_jobs),
            ("active_job_ids", self.active_job_ids),
            ("job_ids", self.job_ids),
        ] {
            match ActiveJobs::parse(field, v)? {
                // The JavaScript and Go SDKs' count of running jobs; the ids come in active_job_ids.
                None | Some(ActiveJobs::Count(_)) => {}
                Some(ActiveJobs::Jobs(refs)) => {
                    for r in refs {
                        match r {
                            HeartbeatJobRef::Id(id) => add(id, None),
                            HeartbeatJobRef::Claim { job_id, lease_id } => add(job_id, lease_id),
                        }
                    }
                }
            }
        }
        if let Some(id) = self.job_id {
            add(id, lease_id(self.lease_id, "lease_id")?);
        }
        Ok(first_of_each(named))
    }
}

impl ActiveJobs {
    /// The list `field` of a heartbeat (a count only in `active_jobs`), checked; None when absent.
    fn parse(field: &str, v: Option<Value>) -> Result<Option<Self>, OjsError> {
        let items = match v {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Number(n)) if field == "active_jobs" && n.as_u64().is_some() => {
                return Ok(n.as_u64().map(ActiveJobs::Count))
            }
            Some(Value::Array(items)) => items,
            Some(other) => {
                return Err(OjsError::invalid(format!(
                    "{field} must be an array of job ids or {{\"job_id\", \"lease_id\"}} objects{}; got {other}",
                    if field == "active_jobs" { ", or a count" } else { "" }
                )))
            }
        };
        if items.len() > MAX_HEARTBEAT_JOBS {
            return Err(OjsError::invalid(format!(
                "{field} names {} jobs; at most {MAX_HEARTBEAT_JOBS} per list of a heartbeat",
                items.len()
            )));
        }
        let refs = items
            .into_iter()
            .enumerate()
            .map(|(i, item)| HeartbeatJobRef::parse(item, field, i))
            .collect::<Result<_, _>>()?;
        Ok(Some(ActiveJobs::Jobs(refs)))
    }
}

impl HeartbeatJobRef {
    /// `field[i]` of a heartbeat, checked.
    fn parse(item: Value, field: &str, i: usize) -> Result<Self, OjsError> {
        match item {
            Value::String(id) => Ok(HeartbeatJobRef::Id(id)),
            Value::Object(mut m) => {
                let job_id = m
                    .remove("job_id")
                    .or_else(|| m.remove("id"))
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .ok_or_else(|| OjsError::invalid(format!("{field}[{i}] must have a job_id")))?;
                let lease_id = lease_id(m.remove("lease_id"), &format!("{field}[{i}].lease_id"))?;
                Ok(HeartbeatJobRef::Claim { job_id, lease_id })
            }
            other => Err(OjsError::invalid(format!(
                "{field}[{i}] must be a job id or a {{\"job_id\", \"lease_id\"}} object; got {other}"
            ))),
        }
    }
}

/// The pairs whose key was not seen before, in their order (a job named twice keeps its first lease).
/// Linear: one hash per key (a pairwise scan cost a 30,000-id heartbeat 1.4 s of the server's time).
fn first_of_each<K: Eq + std::hash::Hash, V>(pairs: Vec<(K, V)>) -> Vec<(K, V)> {
    let first: Vec<bool> = {
        let mut seen = std::collections::HashSet::with_capacity(pairs.len());
        pairs.iter().map(|(k, _)| seen.insert(k)).collect()
    };
    pairs
        .into_iter()
        .zip(first)
        .filter_map(|(p, first)| first.then_some(p))
        .collect()
}

#[utoipa::path(
    post,
    path = "/ojs/v1/workers/heartbeat",
    tag = "workers",
    summary = "Extend leases and read the worker state: `{worker_id?, active_jobs | active_job_ids | job_ids, visibility_timeout_ms?}`; `lost_jobs` lists the jobs whose lease is gone",
    request_body = HeartbeatReq,
    responses((status = 200, description = "OK", body = HeartbeatResponse, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn heartbeat(
    State(st): State<AppState>,
    tenant: ActingTenant,
    OjsJson(req): OjsJson<HeartbeatReq>,
) -> ApiResult<Response> {
    let worker = req.worker_id.clone().unwrap_or_default();
    check_worker_id(&worker)?;
    let reported = reported_state(req.state.as_deref(), &worker)?;
    let extend = lease_ms(req.visibility_timeout_ms)?;
    let jobs = req.jobs()?;
    let hb = crate::worker_ops::heartbeat(&st, &worker, &jobs, extend, reported, tenant.name()).await?;
    // `state` stays the operator's directive (the SDKs act on it: Go moves a quiet worker back to
    // running when told so); what the worker reported of itself is echoed as `worker_state`.
    let state = hb.signal.as_deref().unwrap_or("running").to_string();
    let lost: Vec<String> = hb
        .jobs
        .iter()
        .filter(|(_, _, lease)| lease.is_none())
        .map(|(id, _, _)| id.clone())
        .collect();
    let jobs: Vec<HeartbeatJob> = hb
        .jobs
        .iter()
        .map(|(id, s, lease)| HeartbeatJob {
            job_id: id.clone(),
            state: s.clone(),
            extended: lease.is_some(),
            visibility_deadline: lease.map(clock::format_ms),
            lease_lost: lease.is_none().then_some(true),
        })
        .collect();
    let directives: Vec<Directive> = hb
        .jobs
        .iter()
        .filter(|(_, s, _)| s == "cancelled")
        .map(|(id, _, _)| Directive {
            kind: "cancel",
            job_id: id.clone(),
        })
        .collect();
    Ok(ok(json!(HeartbeatResponse {
        acknowledged: true,
        worker_id: worker,
        state,
        worker_state: reported,
        jobs,
        lost_jobs: lost,
        directives,
        server_time: clock::format_ms(hb.now_ms),
    })))
}

/// `POST /ojs/v1/workers/beat`: the heartbeat under the name the graceful-shutdown extension uses.
#[utoipa::path(
    post,
    path = "/ojs/v1/workers/beat",
    tag = "workers",
    summary = "Heartbeat (alias of /workers/heartbeat): `{worker_id, state?: running|quiet|drain|terminate, active_jobs?}`",
    request_body = HeartbeatReq,
    responses((status = 200, description = "OK", body = HeartbeatResponse, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn beat(st: State<AppState>, tenant: ActingTenant, req: OjsJson<HeartbeatReq>) -> ApiResult<Response> {
    heartbeat(st, tenant, req).await
}

#[derive(Deserialize, ToSchema)]
struct SignalReq {
    /// `quiet`, `terminate`, or `running` (also `run`).
    signal: String,
}

#[derive(Serialize, ToSchema)]
struct SignalResponse {
    worker_id: String,
    signal: WorkerSignal,
}

/// Operator control: tell a worker (through its next heartbeat) to stop fetching (`quiet`), to stop
/// (`terminate`), or to carry on (`running`).
#[utoipa::path(
    post,
    path = "/ojs/v1/workers/{worker_id}/signal",
    tag = "workers",
    summary = "Operator: tell a worker `quiet`, `terminate` or `running`",
    params(("worker_id" = String, Path)),
    request_body = SignalReq,
    responses((status = 200, description = "OK", body = SignalResponse, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn signal(
    State(st): State<AppState>,
    OjsPath(worker): OjsPath<String>,
    OjsJson(req): OjsJson<SignalReq>,
) -> ApiResult<Response> {
    check_worker_id(&worker)?;
    if worker.is_empty() {
        return Err(OjsError::invalid("worker_id must not be empty").into());
    }
    let signal = match req.signal.as_str() {
        "run" => WorkerSignal::Running,
        s => variant(s)
            .ok_or_else(|| OjsError::invalid(format!("signal must be quiet, terminate or running; got {s:?}")))?,
    };
    // The worker registry lives on shard 0, which every heartbeat visits; running is no signal.
    let stored = (signal != WorkerSignal::Running).then(|| variant_name(&signal));
    st.shards.first().set_worker_signal(&worker, stored.as_deref()).await?;
    Ok(ok(SignalResponse {
        signal,
        worker_id: worker,
    }))
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::hash::{Hash, Hasher};

    use super::*;

    /// Every error report error_record accepts reads as the documented [`NackError`], whose members
    /// say what error_record found: the retryable flag, the type (or code) the retry policy matches,
    /// and the rate-limit block.
    #[test]
    fn nack_errors_read_as_documented() {
        for e in [
            json!("connection reset"),
            json!({"message": "smtp down", "type": "Smtp.Timeout", "code": "E1", "retryable": false, "x_host": "mx1"}),
            json!({"code": "Auth.Denied", "rate_limit_until": "2030-01-01T00:00:00Z", "details": {"n": 1}}),
        ] {
            let (_, match_key, retryable, until) = error_record(Some(e.clone())).expect("a valid report");
            match serde_json::from_value::<NackError>(e).expect("a NackError") {
                NackError::Message(m) => {
                    assert!(!m.is_empty());
                    assert!(retryable && match_key.is_empty() && until == 0);
                }
                NackError::Report {
                    message,
                    kind,
                    code,
                    retryable: r,
                    rate_limit_until,
                    other,
                } => {
                    assert!(message.is_some() || code.is_some());
                    assert_eq!(kind.or(code).unwrap_or_default(), match_key);
                    assert_eq!(r.unwrap_or(true), retryable);
                    assert_eq!(rate_limit_until.and_then(|t| clock::parse_ms(&t)).unwrap_or(0), until);
                    assert!(!other.is_empty(), "the report's own members are kept");
                }
            }
        }
    }

    thread_local! {
        /// Comparisons and hashes of [`Counted`] keys made on this thread.
        static TOUCHES: Cell<u64> = const { Cell::new(0) };
    }

    /// A key that counts every comparison and hash made of it.
    #[derive(Debug)]
    struct Counted(u32);

    impl PartialEq for Counted {
        fn eq(&self, other: &Self) -> bool {
            TOUCHES.with(|t| t.set(t.get() + 1));
            self.0 == other.0
        }
    }
    impl Eq for Counted {}
    impl Hash for Counted {
        fn hash<H: Hasher>(&self, h: &mut H) {
            TOUCHES.with(|t| t.set(t.get() + 1));
            self.0.hash(h);
        }
    }

    fn heartbeat(body: Value) -> Result<Vec<(String, Option<String>)>, OjsError> {
        serde_json::from_value::<HeartbeatReq>(body)
            .expect("a heartbeat body")
            .jobs()
    }

    #[test]
    fn a_heartbeat_names_at_most_ten_thousand_jobs_per_list() {
        let ids = |n: usize| -> Vec<String> { (0..n).map(|_| names::new_job_id()).collect() };
        let full = json!({"active_jobs": ids(MAX_HEARTBEAT_JOBS), "active_job_ids": ids(MAX_HEARTBEAT_JOBS),
            "job_ids": ids(MAX_HEARTBEAT_JOBS)});
        assert_eq!(heartbeat(full).map(|j| j.len()).ok(), Some(3 * MAX_HEARTBEAT_JOBS));
        let e = heartbeat(json!({"job_ids": ids(MAX_HEARTBEAT_JOBS + 1)})).expect_err("one too many");
        assert_eq!(e.code.status(), 400);
        assert!(
            e.message.contains("job_ids") && e.message.contains("at most 10000"),
            "{}",
            e.message
        );
    }

    #[test]
    fn a_job_named_twice_keeps_its_first_place_and_lease() {
        let pairs = vec![("a", 1), ("b", 2), ("a", 3), ("c", 4), ("b", 5)];
        assert_eq!(first_of_each(pairs), vec![("a", 1), ("b", 2), ("c", 4)]);
    }

    #[test]
    fn the_heartbeat_dedup_touches_each_id_a_bounded_number_of_times() {
        // A heartbeat's worst case: MAX_HEARTBEAT_JOBS ids in each of its three fields (30,000), a third of
        // them repeats. A pairwise scan compares ~n²/2 times (1.4 s of a server's time, measured); a
        // linear one hashes each key once and compares it only with equal hashes.
        let n = 3 * MAX_HEARTBEAT_JOBS as u32;
        let pairs: Vec<(Counted, u32)> = (0..n).map(|i| (Counted(i % (2 * n / 3)), i)).collect();
        TOUCHES.with(|t| t.set(0));
        let out = first_of_each(pairs);
        let touches = TOUCHES.with(Cell::get);
        assert_eq!(out.len(), (2 * n / 3) as usize);
        assert!(
            out.iter()
                .enumerate()
                .all(|(i, (k, v))| k.0 == i as u32 && *v == i as u32),
            "first occurrences, in order"
        );
        assert!(
            touches <= 4 * u64::from(n),
            "{touches} comparisons and hashes for {n} ids: not linear"
        );
    }
}
