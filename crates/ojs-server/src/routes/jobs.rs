//! Producers: enqueue (one or a batch), read, cancel.

use std::collections::HashMap;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use ojs_core::envelope;
use ojs_core::job::{job_view, NewJob};
use ojs_core::{ErrorCode, OjsError};
use ojs_store::{EnqueueOutcome, Pressure, Transition};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiResult;
use crate::respond::{ojs_json, ok, OjsJson};
use crate::routes::path_job_id;
use crate::state::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(enqueue))
        .routes(routes!(enqueue_batch))
        .routes(routes!(get_job, cancel, update))
        .routes(routes!(admin_job))
}

/// The view of a job we just created, built from what we sent (no second round trip).
fn created_view(j: &NewJob, now_ms: i64, state: &str) -> Value {
    let mut f: HashMap<String, String> = HashMap::new();
    f.insert("doc".into(), j.doc.clone());
    f.insert("type".into(), j.job_type.clone());
    f.insert("queue".into(), j.queue.clone());
    f.insert("state".into(), state.into());
    f.insert("priority".into(), j.priority.to_string());
    f.insert("attempt".into(), "0".into());
    f.insert("max_attempts".into(), j.retry.max_attempts.to_string());
    f.insert("created_at".into(), now_ms.to_string());
    f.insert("enqueued_at".into(), now_ms.to_string());
    if state == "scheduled" {
        let at = j.scheduled_at_ms.max(now_ms + j.delay_ms as i64);
        f.insert("scheduled_at".into(), at.to_string());
    }
    if j.expires_at_ms > 0 {
        f.insert("expires_at".into(), j.expires_at_ms.to_string());
    } else if j.expires_in_ms > 0 {
        f.insert("expires_at".into(), (now_ms + j.expires_in_ms as i64).to_string());
    }
    job_view(&f)
}

async fn store_jobs(
    st: &AppState,
    jobs: &[NewJob],
    block: Option<tokio::time::Instant>,
) -> ApiResult<(i64, Vec<String>, Vec<Pressure>)> {
    loop {
        match st.store.enqueue(jobs).await? {
            EnqueueOutcome::Created {
                now_ms,
                states,
                pressure,
            } => {
                for j in jobs {
                    crate::metrics::job_event("enqueued", &j.queue, &j.job_type);
                }
                return Ok((now_ms, states, pressure));
            }
            EnqueueOutcome::Duplicate(id) => return Err(duplicate(&id).into()),
            EnqueueOutcome::Full(p) => wait_for_room(&p, block).await?,
        }
    }
}

/// Most a producer may ask to be held waiting for room (`OJS-Block-Timeout`).
const MAX_BLOCK_SECS: u64 = 30;
/// How often a blocked enqueue looks for room again.
const BLOCK_RECHECK: std::time::Duration = std::time::Duration::from_millis(50);

/// The deadline of a producer that is willing to wait for room in a full queue whose strategy is
/// `block` (ojs-backpressure §5.2: the `OJS-Block-Timeout` header, in seconds; absent or 0 = no wait).
fn block_deadline(headers: &HeaderMap) -> Result<Option<tokio::time::Instant>, OjsError> {
    let Some(v) = headers.get("ojs-block-timeout") else {
        return Ok(None);
    };
    let secs = v
        .to_str()
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|s| *s <= MAX_BLOCK_SECS)
        .ok_or_else(|| {
            OjsError::invalid(format!(
                "the OJS-Block-Timeout header must be whole seconds from 0 to {MAX_BLOCK_SECS}"
            ))
        })?;
    Ok((secs > 0).then(|| tokio::time::Instant::now() + std::time::Duration::from_secs(secs)))
}

/// A full queue: wait a moment when its strategy is `block` and the producer's deadline allows (the
/// caller then tries again), else refuse with 429 QUEUE_FULL.
async fn wait_for_room(p: &Pressure, block: Option<tokio::time::Instant>) -> Result<(), OjsError> {
    match block {
        Some(deadline) if p.strategy == "block" && tokio::time::Instant::now() + BLOCK_RECHECK < deadline => {
            tokio::time::sleep(BLOCK_RECHECK).await;
            Ok(())
        }
        _ => Err(OjsError::queue_full(&p.queue, p.depth, p.bound)),
    }
}

/// ojs-backpressure §7.3: above the warning threshold, a successful enqueue says how full the queue is.
fn pressure_headers(res: &mut Response, p: Option<&Pressure>) {
    let Some(p) = p.filter(|p| p.ratio() >= p.warning_threshold) else {
        return;
    };
    for (h, v) in [
        ("x-ojs-queue-depth", p.depth.to_string()),
        ("x-ojs-queue-bound", p.bound.to_string()),
        ("x-ojs-queue-pressure", format!("{:.2}", p.ratio())),
    ] {
        if let Ok(v) = v.parse() {
            res.headers_mut().insert(h, v);
        }
    }
}

fn duplicate(id: &str) -> OjsError {
    OjsError::new(ErrorCode::Duplicate, format!("a job with id {id} already exists"))
        .with_details(json!({ "job_id": id }))
}

#[utoipa::path(
    post,
    path = "/ojs/v1/jobs",
    tag = "jobs",
    summary = "Enqueue one job (the OJS envelope; seed priority model: top-level `priority`, lower first)",
    request_body = serde_json::Value,
    responses((status = 201, description = "Created"), (status = 400, description = "Invalid request (OJS error)"), (status = 409, description = "Conflict (OJS error)"), (status = 413, description = "Too large (OJS error)"), (status = 503, description = "Redis unavailable (OJS error)"))
)]
async fn enqueue(State(st): State<AppState>, headers: HeaderMap, OjsJson(body): OjsJson<Value>) -> ApiResult<Response> {
    let job = envelope::parse(body, &st.rules)?;
    let block = block_deadline(&headers)?;
    // Concurrent single enqueues on this node share one script call (see `coalesce`).
    let (now, state, pressure) = loop {
        let (now, state, pressure) = st.coalescer().enqueue(job.clone()).await?;
        match (state.as_str(), &pressure) {
            ("full", Some(p)) => wait_for_room(p, block).await?,
            _ => break (now, state, pressure),
        }
    };
    if state == "duplicate" {
        return Err(duplicate(&job.id).into());
    }
    crate::metrics::job_event("enqueued", &job.queue, &job.job_type);
    let view = created_view(&job, now, &state);
    let mut res = ojs_json(StatusCode::CREATED, json!({ "job": view }));
    if let Ok(loc) = format!("/ojs/v1/jobs/{}", job.id).parse() {
        res.headers_mut().insert("location", loc);
    }
    pressure_headers(&mut res, pressure.as_ref());
    // A rate-limited job says which limit it joined: the key, and its tightest per-period limit.
    if let Some(rl) = &job.rate_limit {
        let limit = rl
            .rate
            .map(|w| w.limit)
            .or(rl.throttle.map(|w| w.limit))
            .or(rl.concurrency);
        if let (Ok(k), Some(l)) = (
            rl.key.parse(),
            limit.map(|l| l.to_string()).and_then(|l| l.parse().ok()),
        ) {
            res.headers_mut().insert("x-ratelimit-key", k);
            res.headers_mut().insert("x-ratelimit-limit", l);
        }
    }
    Ok(res)
}

#[derive(Deserialize)]
struct Batch {
    jobs: Vec<Value>,
}

#[utoipa::path(
    post,
    path = "/ojs/v1/jobs/batch",
    tag = "jobs",
    summary = "Enqueue `{\"jobs\": [...]}`, all or nothing",
    request_body = serde_json::Value,
    responses((status = 201, description = "Created"), (status = 400, description = "Invalid request (OJS error)"), (status = 409, description = "Conflict (OJS error)"), (status = 413, description = "Too large (OJS error)"), (status = 503, description = "Redis unavailable (OJS error)"))
)]
async fn enqueue_batch(
    State(st): State<AppState>,
    headers: HeaderMap,
    OjsJson(body): OjsJson<Batch>,
) -> ApiResult<Response> {
    let block = block_deadline(&headers)?;
    if body.jobs.is_empty() {
        return Err(OjsError::invalid("jobs must contain at least one job").into());
    }
    if body.jobs.len() > st.config.max_batch {
        return Err(OjsError::new(
            ErrorCode::PayloadTooLarge,
            format!(
                "a batch holds at most {} jobs; got {}",
                st.config.max_batch,
                body.jobs.len()
            ),
        )
        .into());
    }
    let mut jobs = Vec::with_capacity(body.jobs.len());
    for (i, v) in body.jobs.into_iter().enumerate() {
        let j = envelope::parse(v, &st.rules).map_err(|e| {
            let msg = format!("jobs[{i}]: {}", e.message);
            OjsError { message: msg, ..e }.with_details(json!({ "index": i }))
        })?;
        jobs.push(j);
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(dup) = jobs.iter().find(|j| !seen.insert(j.id.as_str())) {
        return Err(OjsError::new(
            ErrorCode::Duplicate,
            format!("id {} appears twice in the batch", dup.id),
        )
        .into());
    }
    let (now, states, pressure) = store_jobs(&st, &jobs, block).await?;
    let views: Vec<Value> = jobs.iter().zip(&states).map(|(j, s)| created_view(j, now, s)).collect();
    let mut res = ojs_json(StatusCode::CREATED, json!({ "jobs": views, "count": views.len() }));
    // The fullest bounded queue the batch went to speaks for it.
    pressure_headers(&mut res, pressure.iter().max_by(|a, b| a.ratio().total_cmp(&b.ratio())));
    Ok(res)
}

#[utoipa::path(
    get,
    path = "/ojs/v1/jobs/{id}",
    tag = "jobs",
    summary = "A job with its system fields and error history",
    params(("id" = String, Path)),
    responses((status = 200, description = "OK"), (status = 404, description = "Not found (OJS error)"))
)]
async fn get_job(State(st): State<AppState>, Path(id): Path<String>) -> ApiResult<Response> {
    let id = path_job_id(&id)?;
    match st.store.get_job(id).await? {
        Some(f) => Ok(ok(json!({ "job": job_view(&f) }))),
        None => Err(OjsError::not_found("job", id).into()),
    }
}

#[derive(Deserialize)]
struct Update {
    priority: Option<Value>,
}

/// `PATCH /jobs/{id}` `{"priority": n}`: only available and scheduled jobs (seed §8.1).
#[utoipa::path(
    patch,
    path = "/ojs/v1/jobs/{id}",
    tag = "jobs",
    summary = "Change the priority of an available or scheduled job: `{\"priority\": n}`",
    params(("id" = String, Path)),
    request_body = serde_json::Value,
    responses((status = 200, description = "OK"), (status = 400, description = "Invalid request (OJS error)"), (status = 404, description = "Not found (OJS error)"), (status = 409, description = "Conflict (OJS error)"))
)]
async fn update(
    State(st): State<AppState>,
    Path(id): Path<String>,
    OjsJson(body): OjsJson<Update>,
) -> ApiResult<Response> {
    let id = path_job_id(&id)?;
    let model = st.rules.priority_model;
    let p = body
        .priority
        .ok_or_else(|| OjsError::invalid("priority is required: PATCH changes a job's priority"))?;
    let priority = model.check(&p).map_err(OjsError::invalid)?;
    match st.store.set_priority(id, priority, model.rank(priority)).await? {
        Transition::Done((previous, queue)) => {
            metrics::counter!("ojs_job_priority_changes_total", "queue" => queue).increment(1);
            Ok(ok(
                json!({ "id": id, "priority": priority, "previous_priority": previous }),
            ))
        }
        Transition::NotFound => Err(OjsError::not_found("job", id).into()),
        Transition::WrongState(s) | Transition::LeaseLost(s) => {
            Err(OjsError::conflict_state(id, &s, "changing the priority").into())
        }
    }
}

/// The admin view of a job: the job object itself, not wrapped (ext-admin-api).
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/jobs/{id}",
    tag = "jobs",
    summary = "The job object, unwrapped (admin view)",
    params(("id" = String, Path)),
    responses((status = 200, description = "OK"), (status = 404, description = "Not found (OJS error)"))
)]
async fn admin_job(State(st): State<AppState>, Path(id): Path<String>) -> ApiResult<Response> {
    let id = path_job_id(&id)?;
    match st.store.get_job(id).await? {
        Some(f) => Ok(ok(job_view(&f))),
        None => Err(OjsError::not_found("job", id).into()),
    }
}

#[utoipa::path(
    delete,
    path = "/ojs/v1/jobs/{id}",
    tag = "jobs",
    summary = "Cancel a scheduled, available, retryable or active job",
    params(("id" = String, Path)),
    responses((status = 200, description = "OK"), (status = 404, description = "Not found (OJS error)"), (status = 409, description = "Conflict (OJS error)"))
)]
async fn cancel(State(st): State<AppState>, Path(id): Path<String>) -> ApiResult<Response> {
    let id = path_job_id(&id)?;
    match st.store.cancel(id).await? {
        Transition::Done(_) => {
            let f = st
                .store
                .get_job(id)
                .await?
                .ok_or_else(|| OjsError::not_found("job", id))?;
            Ok(ok(json!({ "job": job_view(&f) })))
        }
        Transition::NotFound => Err(OjsError::not_found("job", id).into()),
        Transition::WrongState(s) | Transition::LeaseLost(s) => Err(OjsError::conflict_state(id, &s, "cancel").into()),
    }
}
