//! Producers: enqueue (one or a batch), read, cancel.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use ojs_core::envelope;
use ojs_core::job::{job_view, JobView, NewJob};
use ojs_core::{ErrorCode, JobState, OjsError, StoredJob};
use ojs_store::{Pressure, Transition};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::ToSchema;

use crate::error::ApiResult;
use crate::respond::JobPath;
use crate::respond::{ojs_json, ok, OjsJson};
use crate::schemas::{Job, JobRequest, JobResponse, OjsErrorBody, OJS_MEDIA_TYPE};
use crate::state::AppState;
use crate::tenant::ActingTenant;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(enqueue))
        .routes(routes!(enqueue_batch))
        .routes(routes!(get_job, cancel, update))
        .routes(routes!(admin_job))
}

/// The view of a job we just created, built from what we sent (no second round trip); `workflow`: the
/// workflow it is the first step of.
fn created_view(j: &NewJob, now_ms: i64, state: &str, workflow: Option<&str>) -> JobView {
    // Spans are at most ten years (`envelope::MAX_SPAN_MS`), so these sums cannot wrap.
    let after = |ms: u64| now_ms.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX));
    let state: Option<JobState> = state.parse().ok();
    job_view(&StoredJob {
        doc: Some(j.doc.clone()),
        job_type: Some(j.job_type.clone()),
        queue: Some(j.queue.clone()),
        state,
        priority: Some(j.priority),
        attempt: Some(0),
        max_attempts: Some(i64::from(j.retry.max_attempts)),
        created_at: Some(now_ms),
        enqueued_at: Some(now_ms),
        scheduled_at: (state == Some(JobState::Scheduled)).then(|| j.scheduled_at_ms.max(after(j.delay_ms))),
        expires_at: if j.expires_at_ms > 0 {
            Some(j.expires_at_ms)
        } else {
            (j.expires_in_ms > 0).then(|| after(j.expires_in_ms))
        },
        workflow_id: workflow.map(str::to_string),
        ..StoredJob::default()
    })
}

/// Most a producer may ask to be held waiting for room (`OJS-Block-Timeout`).
const MAX_BLOCK_SECS: u64 = 30;

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

#[utoipa::path(
    post,
    path = "/ojs/v1/jobs",
    tag = "jobs",
    summary = "Enqueue one job (the OJS envelope; seed priority model: top-level `priority`, lower first)",
    params(("traceparent" = Option<String>, Header, description = "W3C trace context of the producer: kept in each job's meta.traceparent when the envelope has none (see README, Traces); a malformed one is ignored"), ("tracestate" = Option<String>, Header, description = "W3C trace state, kept with traceparent")),
    request_body = JobRequest,
    responses((status = 201, description = "Created", body = JobResponse, content_type = OJS_MEDIA_TYPE), (status = 200, description = "A unique duplicate (on_conflict ignore or raise_priority): the existing job, not written again", body = DeduplicatedJob, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 403, description = "A key bound to a tenant, and a header or body naming another tenant (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 409, description = "A job with this id exists, or a job with the same uniqueness key (on_conflict reject) (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 413, description = "Too large (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 422, description = "A policy that cannot work (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 429, description = "The queue is full (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 503, description = "Redis unavailable (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn enqueue(
    State(st): State<AppState>,
    tenant: ActingTenant,
    headers: HeaderMap,
    OjsJson(mut body): OjsJson<Value>,
) -> ApiResult<Response> {
    tenant.stamp(&mut body)?;
    if body.get("workflow").is_some() {
        tenant.stamp_workflow(&mut body)?;
    }
    if let Some(wf) = ojs_core::workflow::parse_job_form(&body, &st.rules) {
        let mut wf = wf?;
        for j in &mut wf.jobs {
            j.tenant_pinned = tenant.pins();
        }
        return enqueue_chain(&st, &mut wf).await;
    }
    let span = crate::traces::enqueue(st.traces.as_ref(), &headers, &mut body);
    let mut job = envelope::parse(body, &st.rules)?;
    job.tenant_pinned = tenant.pins();
    let block = block_deadline(&headers)?;
    let out = crate::job_ops::store_one(&st, &mut job, block).await?;
    if let Some(span) = span {
        let existing = out.existing.as_ref().map(|(id, _)| id.as_str());
        end_span(span, &job, &out.state, existing);
    }
    match (out.state.as_str(), &out.existing) {
        ("duplicate", _) => return Err(OjsError::duplicate_id(&job.id).into()),
        ("conflict", Some((id, f))) => {
            let state = f.state_name();
            let key = job.unique.as_ref().map(|u| job.scoped(&u.key)).unwrap_or_default();
            return Err(OjsError::unique_conflict(id, state, &key).into());
        }
        // ojs-unique-jobs §5.4: 200 (not 201) with the existing job.
        ("ignored", Some((_, f))) => {
            let mut res = ojs_json(
                StatusCode::OK,
                DeduplicatedJob {
                    job: job_view(f),
                    deduplicated: true,
                },
            );
            pressure_headers(&mut res, out.pressure.as_ref());
            return Ok(res);
        }
        _ => {}
    }
    crate::metrics::job_event("enqueued", &job.queue, &job.job_type);
    let view = created_view(&job, out.now_ms, &out.state, None);
    let mut res = ojs_json(StatusCode::CREATED, JobResponse::created(&job.id, view));
    if let Ok(loc) = format!("/ojs/v1/jobs/{}", job.id).parse() {
        res.headers_mut().insert("location", loc);
    }
    pressure_headers(&mut res, out.pressure.as_ref());
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

/// Ends an enqueue span with what the enqueue script answered (`state`); a unique duplicate not written
/// is named by the job it met (`existing`), the one its answer shows.
fn end_span(span: crate::traces::EnqueueSpan, job: &NewJob, state: &str, existing: Option<&str>) {
    let attrs = crate::traces::JobAttrs {
        id: existing.filter(|_| !crate::job_ops::written(state)).unwrap_or(&job.id),
        job_type: &job.job_type,
        queue: &job.queue,
        state,
        priority: Some(job.priority),
        attempt: None,
        worker: None,
    };
    match state {
        "duplicate" | "conflict" => span.refused(&attrs),
        _ => span.stored(&attrs),
    }
}

/// The seed's form (priority spec example 14.5): the envelope is the first step of a chain whose other
/// steps are its `workflow.chain`; they inherit its priority and queue. Answers the first step, with
/// the workflow.
async fn enqueue_chain(st: &AppState, wf: &mut ojs_core::workflow::NewWorkflow) -> ApiResult<Response> {
    let (now, states, workflow) = crate::workflow_ops::store_workflow(st, wf).await?;
    let root = &wf.jobs[0];
    let state = states.first().map(String::as_str).unwrap_or("available");
    let view = created_view(root, now, state, Some(&wf.id));
    let mut res = ojs_json(
        StatusCode::CREATED,
        JobResponse {
            workflow: Some(workflow),
            ..JobResponse::created(&root.id, view)
        },
    );
    if let Ok(loc) = format!("/ojs/v1/jobs/{}", root.id).parse() {
        res.headers_mut().insert("location", loc);
    }
    Ok(res)
}

#[derive(Deserialize, ToSchema)]
struct Batch {
    /// 1 to the server's `--max-batch` envelopes, stored all or nothing.
    #[schema(value_type = Vec<JobRequest>)]
    jobs: Vec<Value>,
}

#[derive(Serialize, ToSchema)]
struct BatchCreated {
    /// One per envelope, in order: the job written, or, for a unique duplicate answered with the job it
    /// met (`ignore`, `raise_priority`), that job.
    #[schema(value_type = Vec<Job>)]
    jobs: Vec<JobView>,
    count: usize,
    /// Indexes of `jobs` that are existing jobs (unique duplicates not written); absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    deduplicated: Vec<usize>,
}

/// `{"job": Job, "deduplicated": true}`: a unique duplicate (`on_conflict` `ignore` or
/// `raise_priority`) answered with the existing job (ojs-unique-jobs §5.4).
#[derive(Serialize, ToSchema)]
struct DeduplicatedJob {
    #[schema(value_type = Job)]
    job: JobView,
    deduplicated: bool,
}

#[utoipa::path(
    post,
    path = "/ojs/v1/jobs/batch",
    tag = "jobs",
    summary = "Enqueue `{\"jobs\": [...]}`, all or nothing",
    params(("traceparent" = Option<String>, Header, description = "W3C trace context of the producer: kept in each job's meta.traceparent when the envelope has none (see README, Traces); a malformed one is ignored"), ("tracestate" = Option<String>, Header, description = "W3C trace state, kept with traceparent")),
    request_body = Batch,
    responses((status = 201, description = "Created", body = BatchCreated, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 403, description = "A key bound to a tenant, and a header or body naming another tenant (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 409, description = "A job with this id exists, or a job with the same uniqueness key (on_conflict reject) (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 413, description = "Too large (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 422, description = "A policy that cannot work (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 429, description = "The queue is full (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 503, description = "Redis unavailable (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn enqueue_batch(
    State(st): State<AppState>,
    tenant: ActingTenant,
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
    // With tracing on, one enqueue span per job (none at all when it is off).
    let mut spans = Vec::new();
    for (i, mut v) in body.jobs.into_iter().enumerate() {
        spans.extend(crate::traces::enqueue(st.traces.as_ref(), &headers, &mut v));
        let mut j = tenant
            .stamp(&mut v)
            .and_then(|_| envelope::parse(v, &st.rules))
            .map_err(|e| {
                let msg = format!("jobs[{i}]: {}", e.message);
                OjsError { message: msg, ..e }.with_details(json!({ "index": i }))
            })?;
        j.tenant_pinned = tenant.pins();
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
    let e = crate::job_ops::store_jobs(&st, &mut jobs, block).await?;
    for (((span, j), state), existing) in spans.into_iter().zip(&jobs).zip(&e.states).zip(&e.existing) {
        end_span(span, j, state, existing.as_ref().map(|(id, _)| id.as_str()));
    }
    let mut deduplicated = Vec::new();
    let views: Vec<JobView> = jobs
        .iter()
        .zip(&e.states)
        .zip(&e.existing)
        .enumerate()
        .map(|(i, ((j, s), existing))| match existing {
            // A unique duplicate (ignore, raise_priority) is answered with the job it met.
            Some((_, f)) if !crate::job_ops::written(s) => {
                deduplicated.push(i);
                job_view(f)
            }
            _ => created_view(j, e.now_ms, s, None),
        })
        .collect();
    let count = views.len();
    let mut res = ojs_json(
        StatusCode::CREATED,
        BatchCreated {
            jobs: views,
            count,
            deduplicated,
        },
    );
    // The fullest bounded queue the batch went to speaks for it.
    pressure_headers(
        &mut res,
        e.pressure.iter().max_by(|a, b| a.ratio().total_cmp(&b.ratio())),
    );
    Ok(res)
}

#[utoipa::path(
    get,
    path = "/ojs/v1/jobs/{id}",
    tag = "jobs",
    summary = "A job with its system fields and error history",
    params(("id" = String, Path)),
    responses((status = 200, description = "OK", body = JobResponse, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such job, or (for a request acting as a tenant) another tenant's (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn get_job(State(st): State<AppState>, tenant: ActingTenant, JobPath(id): JobPath) -> ApiResult<Response> {
    Ok(ok(JobResponse::of(job_view(&tenant.job(&st, id.as_str()).await?))))
}

#[derive(Deserialize, ToSchema)]
struct Update {
    /// The new priority (the server's priority model's range).
    #[schema(value_type = i64)]
    priority: Option<Value>,
}

#[derive(Serialize, ToSchema)]
struct PriorityChanged {
    id: String,
    priority: i64,
    previous_priority: i64,
}

/// `PATCH /jobs/{id}` `{"priority": n}`: only available and scheduled jobs (seed §8.1).
#[utoipa::path(
    patch,
    path = "/ojs/v1/jobs/{id}",
    tag = "jobs",
    summary = "Change the priority of an available or scheduled job: `{\"priority\": n}`",
    params(("id" = String, Path)),
    request_body = Update,
    responses((status = 200, description = "OK", body = PriorityChanged, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such job, or (for a request acting as a tenant) another tenant's (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 409, description = "The job is not available or scheduled (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn update(
    State(st): State<AppState>,
    tenant: ActingTenant,
    JobPath(id): JobPath,
    OjsJson(body): OjsJson<Update>,
) -> ApiResult<Response> {
    let id = id.as_str();
    tenant.check_job(&st, id).await?;
    let model = st.rules.priority_model;
    let p = body
        .priority
        .ok_or_else(|| OjsError::invalid("priority is required: PATCH changes a job's priority"))?;
    let priority = model.check(&p).map_err(OjsError::invalid)?;
    match st
        .shards
        .on_id(id, |s| async move {
            s.set_priority(id, priority, model.rank(priority)).await
        })
        .await?
    {
        Transition::Done((previous, queue)) => {
            metrics::counter!("ojs_job_priority_changes_total", "queue" => queue).increment(1);
            Ok(ok(json!(PriorityChanged {
                id: id.to_string(),
                priority,
                previous_priority: previous,
            })))
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
    responses((status = 200, description = "OK", body = Job, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such job (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn admin_job(State(st): State<AppState>, JobPath(id): JobPath) -> ApiResult<Response> {
    let id = id.as_str();
    match st.shards.get_job(id).await? {
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
    responses((status = 200, description = "OK", body = JobResponse, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such job, or (for a request acting as a tenant) another tenant's (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 409, description = "The job has finished (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn cancel(State(st): State<AppState>, tenant: ActingTenant, JobPath(id): JobPath) -> ApiResult<Response> {
    let id = id.as_str();
    tenant.check_job(&st, id).await?;
    match st.shards.on_id(id, |s| async move { s.cancel(id).await }).await? {
        Transition::Done(_) => {
            let f = crate::listing::job(&st, id).await?;
            Ok(ok(JobResponse::of(job_view(&f))))
        }
        Transition::NotFound => Err(OjsError::not_found("job", id).into()),
        Transition::WrongState(s) | Transition::LeaseLost(s) => Err(OjsError::conflict_state(id, &s, "cancel").into()),
    }
}
