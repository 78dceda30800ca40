//! The operator API (ext-admin-api) under `/ojs/v1/admin/` (admin scope, see `auth.rs`): aggregate stats,
//! queues, workers, job listing with filters, and bulk retry / cancel / delete.
//! Listings, their filters and pagination live in `listing.rs`, which other route modules share.

use axum::extract::State;
use axum::response::Response;
use ojs_core::event::EventType;
use ojs_core::job::JobView;
use ojs_core::{clock, JobState, OjsError};
use ojs_store::{DeadRetry, Transition};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;

use crate::error::ApiResult;
use crate::listing::{segments, views, walk, JobFilter, PageQuery, Pagination, Params};
use crate::queue::one_queue;
use crate::respond::{ok, OjsJson, OjsPath, OjsQuery, QueuePath};
use crate::schemas::{variant_name, Job, JobCounts, OjsErrorBody, QueueStatus, OJS_MEDIA_TYPE};
use crate::state::AppState;
use crate::worker::{check_worker_id, worker_view, WorkerState, WorkerView};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(stats))
        .routes(routes!(queues))
        .routes(routes!(queue_detail))
        .routes(routes!(pause_queue))
        .routes(routes!(resume_queue))
        .routes(routes!(workers))
        .routes(routes!(worker_detail))
        .routes(routes!(jobs))
        .routes(routes!(bulk_retry))
        .routes(routes!(bulk_cancel))
        .routes(routes!(bulk_delete))
}

/// Most jobs one bulk request acts on (each is its own script call); repeat the request for more.
pub const MAX_BULK: u64 = 1_000;

// ---- stats ----

/// Completions and failures per minute, from the event stream: the events of the last minute, read
/// newest first up to 1,000 (O(1,000) at most); when a minute holds more, the rate is extrapolated from
/// the span those 1,000 cover. Shared by every node (the stream is in Redis).
async fn throughput(st: &AppState, now: i64) -> ApiResult<(f64, f64)> {
    const SAMPLE: usize = 1_000;
    let events = crate::events_hub::events_latest(st, SAMPLE, Some(now - 60_000)).await?;
    let (mut done, mut failed) = (0u64, 0u64);
    for (_, e) in &events {
        match e.kind() {
            Some(EventType::JobCompleted) => done += 1,
            Some(EventType::JobFailed) => failed += 1,
            _ => {}
        }
    }
    let span_ms = if events.len() == SAMPLE {
        let oldest = events
            .last()
            .and_then(|(id, _)| crate::events_hub::position(id).0.try_into().ok())
            .unwrap_or(now - 60_000);
        (now - oldest).clamp(1, 60_000)
    } else {
        60_000
    };
    let per_min = |n: u64| (n as f64 * 60_000.0 / span_ms as f64 * 100.0).round() / 100.0;
    Ok((per_min(done), per_min(failed)))
}

/// Aggregate statistics (`GET /admin/stats`).
#[derive(Serialize, ToSchema)]
struct Stats {
    /// Known queues.
    queues: usize,
    /// Workers heard from within a day.
    workers: u64,
    jobs: StatsJobs,
    /// What the counts mean.
    counts_note: &'static str,
    throughput: Throughput,
    uptime_seconds: u64,
    #[schema(format = DateTime)]
    server_time: String,
}

/// Jobs by state over every queue, and the dead letter size.
#[derive(Serialize, ToSchema)]
struct StatsJobs {
    #[serde(flatten)]
    counts: JobCounts,
    dead_letter: u64,
}

/// Over the last minute, from the event stream.
#[derive(Serialize, ToSchema)]
struct Throughput {
    processed_per_minute: f64,
    failed_per_minute: f64,
}

/// `GET /admin/stats`: job counts summed over the queues' gauges and counters (O(queues)), the dead
/// letter size, queue and worker counts, throughput over the last minute.
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/stats",
    tag = "admin",
    summary = "Aggregate statistics: job counts by state, queues, workers, throughput per minute",
    responses((status = 200, description = "OK", body = Stats, content_type = OJS_MEDIA_TYPE))
)]
async fn stats(State(st): State<AppState>) -> ApiResult<Response> {
    let names = st.shards.queue_names().await?;
    let counts = st.shards.queue_counts(&names).await?;
    let (dead, _, _) = st.shards.dead_summary().await?;
    let (workers, _) = st.shards.workers_page(0, 0).await?;
    let now = st.shards.now_ms().await?;
    let (processed, failed) = throughput(&st, now).await?;
    Ok(ok(json!(Stats {
        queues: names.len(),
        workers,
        jobs: StatsJobs {
            counts: counts.iter().fold(JobCounts::default(), |t, c| t.plus(&c.jobs)),
            dead_letter: dead,
        },
        counts_note: "available and active are current; scheduled counts scheduled and retryable jobs (one index); completed, failed, discarded and cancelled count since the queue was first used",
        throughput: Throughput {
            processed_per_minute: processed,
            failed_per_minute: failed,
        },
        uptime_seconds: st.started.elapsed().as_secs(),
        server_time: clock::format_ms(now),
    })))
}

// ---- queues ----

/// A queue in the admin API's shape: its counts under `counts`.
#[derive(Serialize, ToSchema)]
struct AdminQueue {
    name: String,
    state: QueueStatus,
    paused: bool,
    counts: JobCounts,
}

impl From<&ojs_store::QueueCounts> for AdminQueue {
    fn from(c: &ojs_store::QueueCounts) -> Self {
        Self {
            name: c.name.clone(),
            state: QueueStatus::of(c.paused),
            paused: c.paused,
            counts: c.jobs,
        }
    }
}

#[derive(Serialize, ToSchema)]
struct AdminQueueList {
    items: Vec<AdminQueue>,
    pagination: Pagination,
}

/// `GET /admin/queues`: every known queue by name (O(queues) to sort), counts for the page only.
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/queues",
    tag = "admin",
    summary = "Queues with counts by state (page, per_page)",
    params(PageQuery),
    responses((status = 200, description = "OK", body = AdminQueueList, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn queues(State(st): State<AppState>, OjsQuery(q): OjsQuery<Params>) -> ApiResult<Response> {
    let p = PageQuery::from_params(&q)?.resolve(20, 1000)?;
    let names = st.shards.queue_names().await?;
    let total = names.len() as u64;
    let page: Vec<String> = names
        .into_iter()
        .skip(p.offset.min(total) as usize)
        .take(p.count as usize)
        .collect();
    let counts = st.shards.queue_counts(&page).await?;
    Ok(ok(json!(AdminQueueList {
        items: counts.iter().map(AdminQueue::from).collect(),
        pagination: p.of(total),
    })))
}

/// One queue with its priority aging.
#[derive(Serialize, ToSchema)]
struct AdminQueueDetail {
    #[serde(flatten)]
    queue: AdminQueue,
    /// The aging interval; `null` when aging is off.
    priority_aging_seconds: Option<u64>,
}

#[utoipa::path(
    get,
    path = "/ojs/v1/admin/queues/{queue}",
    tag = "admin",
    summary = "One queue: counts by state, paused, priority aging",
    params(("queue" = String, Path)),
    responses((status = 200, description = "OK", body = AdminQueueDetail, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Not a queue name (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 404, description = "Unknown queue (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn queue_detail(State(st): State<AppState>, QueuePath(q): QueuePath) -> ApiResult<Response> {
    let q = q.into_string();
    if !st.shards.queue_names().await?.contains(&q) {
        return Err(OjsError::not_found("queue", &q).into());
    }
    Ok(ok(json!(AdminQueueDetail {
        queue: AdminQueue::from(&one_queue(&st, &q).await?),
        priority_aging_seconds: st.shards.find_queue(&q).await?.get_aging(&q).await?,
    })))
}

/// A queue after pause or resume, with when it changed.
#[derive(Serialize, ToSchema)]
struct AdminQueueChange {
    #[serde(flatten)]
    queue: AdminQueue,
    /// After a pause.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    paused_at: Option<String>,
    /// After a resume.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    resumed_at: Option<String>,
}

async fn set_paused(st: &AppState, q: &str, paused: bool) -> ApiResult<Response> {
    st.shards.for_queue(&q).await?.set_paused(q, paused).await?;
    let queue = AdminQueue {
        paused,
        ..AdminQueue::from(&one_queue(st, q).await?)
    };
    let at = Some(clock::format_ms(st.shards.now_ms().await?));
    Ok(ok(json!(AdminQueueChange {
        queue,
        paused_at: at.clone().filter(|_| paused),
        resumed_at: at.filter(|_| !paused),
    })))
}

/// Same operation as `POST /queues/{queue}/pause`, answered in the admin API's shape.
#[utoipa::path(
    post,
    path = "/ojs/v1/admin/queues/{queue}/pause",
    tag = "admin",
    summary = "Pause a queue (FETCH skips it)",
    params(("queue" = String, Path)),
    responses((status = 200, description = "OK", body = AdminQueueChange, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Not a queue name (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn pause_queue(State(st): State<AppState>, QueuePath(q): QueuePath) -> ApiResult<Response> {
    set_paused(&st, q.as_str(), true).await
}

#[utoipa::path(
    post,
    path = "/ojs/v1/admin/queues/{queue}/resume",
    tag = "admin",
    summary = "Resume a paused queue",
    params(("queue" = String, Path)),
    responses((status = 200, description = "OK", body = AdminQueueChange, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Not a queue name (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn resume_queue(State(st): State<AppState>, QueuePath(q): QueuePath) -> ApiResult<Response> {
    set_paused(&st, q.as_str(), false).await
}

// ---- workers ----

/// Most worker records one listing reads (for the summary); a deployment with more gets the summary
/// of the most recently seen ones and `summary.exact: false`.
const MAX_WORKERS: u64 = 10_000;

/// Workers by state.
#[derive(Serialize, ToSchema, Default)]
struct WorkerSummary {
    total: u64,
    running: u64,
    quiet: u64,
    drain: u64,
    terminate: u64,
    stale: u64,
    /// False when there are more workers than one listing reads (10,000): the counts are of the most
    /// recently seen.
    exact: bool,
}

#[derive(Serialize, ToSchema)]
struct WorkerList {
    items: Vec<WorkerView>,
    summary: WorkerSummary,
    pagination: Pagination,
}

/// `GET /admin/workers`: workers heard from within a day (`P workers`, most recent first), each with its
/// last heartbeat, state and the jobs it held then. One HGETALL per worker (at most 10,000).
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/workers",
    tag = "admin",
    summary = "Workers: state, last heartbeat, current jobs; summary counts by state (page, per_page)",
    params(PageQuery),
    responses((status = 200, description = "OK", body = WorkerList, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn workers(State(st): State<AppState>, OjsQuery(q): OjsQuery<Params>) -> ApiResult<Response> {
    let p = PageQuery::from_params(&q)?.resolve(20, 1000)?;
    let (total, all) = st.shards.workers_page(0, MAX_WORKERS).await?;
    let now = st.shards.now_ms().await?;
    let views: Vec<WorkerView> = all
        .iter()
        .map(|(id, rec)| worker_view(id, rec, now, st.config.visibility_timeout_ms))
        .collect();
    let mut summary = WorkerSummary {
        total,
        exact: total <= MAX_WORKERS,
        ..Default::default()
    };
    for v in &views {
        *match v.state {
            WorkerState::Running => &mut summary.running,
            WorkerState::Quiet => &mut summary.quiet,
            WorkerState::Drain => &mut summary.drain,
            WorkerState::Terminate => &mut summary.terminate,
            WorkerState::Stale => &mut summary.stale,
        } += 1;
    }
    let items: Vec<WorkerView> = views
        .into_iter()
        .skip(p.offset.min(MAX_WORKERS) as usize)
        .take(p.count as usize)
        .collect();
    Ok(ok(json!(WorkerList {
        items,
        summary,
        pagination: p.of(total),
    })))
}

/// A worker with the jobs it held at its last heartbeat.
#[derive(Serialize, ToSchema)]
struct WorkerDetail {
    #[serde(flatten)]
    worker: WorkerView,
    /// The `current_jobs` that still exist.
    #[schema(value_type = Vec<Job>)]
    jobs: Vec<JobView>,
}

#[utoipa::path(
    get,
    path = "/ojs/v1/admin/workers/{worker_id}",
    tag = "admin",
    summary = "One worker with the jobs it held at its last heartbeat",
    params(("worker_id" = String, Path)),
    responses((status = 200, description = "OK", body = WorkerDetail, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Not a worker id (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 404, description = "Unknown worker (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn worker_detail(State(st): State<AppState>, OjsPath(w): OjsPath<String>) -> ApiResult<Response> {
    check_worker_id(&w)?;
    let rec = st
        .shards
        .worker_record(&w)
        .await?
        .ok_or_else(|| OjsError::not_found("worker", &w))?;
    let now = st.shards.now_ms().await?;
    let worker = worker_view(&w, &rec, now, st.config.visibility_timeout_ms);
    let jobs = views(&st, &worker.current_jobs).await?;
    Ok(ok(json!(WorkerDetail { worker, jobs })))
}

// ---- jobs ----

/// The states whose jobs are in an index (the ended ones while their queue's retention keeps them).
const LISTABLE: [JobState; 7] = [
    JobState::Available,
    JobState::Active,
    JobState::Scheduled,
    JobState::Retryable,
    JobState::Discarded,
    JobState::Completed,
    JobState::Cancelled,
];

#[derive(Serialize, ToSchema)]
struct AdminJobList {
    #[schema(value_type = Vec<Job>)]
    items: Vec<JobView>,
    pagination: Pagination,
    /// The same as `pagination.total_exact`.
    total_exact: bool,
}

/// `GET /admin/jobs?queue=&state=&type=&page=&per_page=`: jobs from the indexes (see the module
/// comment for what each filter costs), in index order: ready (priority, then FIFO), scheduled (by run
/// time), active (by lease deadline), dead letter (newest first), then each queue's ended jobs (newest
/// first).
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/jobs",
    tag = "admin",
    summary = "Jobs by queue, state (available, active, scheduled, retryable, discarded, completed, cancelled) and type (prefix*), paginated",
    params(JobFilter, PageQuery),
    responses((status = 200, description = "OK", body = AdminJobList, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn jobs(State(st): State<AppState>, OjsQuery(q): OjsQuery<Params>) -> ApiResult<Response> {
    let filter = JobFilter::from_params(&q)?;
    filter.check()?;
    let p = PageQuery::from_params(&q)?.resolve(20, 100)?;
    let segs = segments(&st, &filter, &LISTABLE).await?;
    let w = walk(&st, &segs, &filter, p.offset, p.count).await?;
    Ok(ok(json!(AdminJobList {
        items: views(&st, &w.ids).await?,
        pagination: p.of_walk(&w),
        total_exact: w.exact,
    })))
}

// ---- bulk ----

/// A bulk request: the jobs `filter` matches, at most `limit` of them.
#[derive(Deserialize, ToSchema)]
struct BulkReq {
    /// No filter: every job the action applies to.
    #[serde(default)]
    filter: Option<JobFilter>,
    /// Must be `true`.
    #[serde(default)]
    confirm: Option<bool>,
    /// Most jobs to act on in this request (default and maximum 1,000).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1000)]
    limit: Option<u64>,
}

/// What a bulk request did.
#[derive(Serialize, ToSchema)]
struct BulkResult {
    action: BulkAction,
    /// Jobs the filter matched (see `total_exact`).
    matched: u64,
    /// Jobs acted on in this request (at most `limit`).
    processed: u64,
    succeeded: u64,
    failed: u64,
    /// The first 100 failures.
    errors: Vec<BulkError>,
    /// Matched but not processed: repeat the request for them.
    remaining: u64,
    /// Whether every index entry was examined.
    total_exact: bool,
}

#[derive(Serialize, ToSchema, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum BulkAction {
    Retry,
    Cancel,
    Delete,
}

/// A job the action did not apply to (it moved since it was listed).
#[derive(Serialize, ToSchema)]
struct BulkError {
    job_id: String,
    error: String,
}

/// Runs `op` on every job that matches (up to the limit), each job in its own script, which re-checks
/// the job's state: a job that moved since it was listed is reported under `errors`, not forced.
async fn bulk<F, Fut>(
    st: &AppState,
    req: BulkReq,
    action: BulkAction,
    states: &[JobState],
    op: F,
) -> ApiResult<Response>
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = ApiResult<Option<String>>>,
{
    // Safe by default (ojs-admin-api §4, §8): every bulk request must say confirm: true, so neither an
    // unfiltered request (every job) nor a filtered one acts by accident.
    if req.confirm != Some(true) {
        return Err(OjsError::invalid(format!(
            "bulk {} needs \"confirm\": true (it acts on every job the filter matches{})",
            variant_name(&action),
            if req.filter.as_ref().is_none_or(JobFilter::is_empty) {
                "; with no filter, that is every job it applies to"
            } else {
                ""
            }
        ))
        .into());
    }
    let filter = req.filter.unwrap_or_default();
    filter.check()?;
    let limit = req.limit.unwrap_or(MAX_BULK);
    if limit == 0 || limit > MAX_BULK {
        return Err(OjsError::invalid(format!("limit must be from 1 to {MAX_BULK}; got {limit}")).into());
    }
    let segs = segments(st, &filter, states).await?;
    let w = walk(st, &segs, &filter, 0, limit).await?;
    let (mut succeeded, mut failed, mut errors) = (0u64, 0u64, Vec::new());
    for id in &w.ids {
        match op(id.clone()).await? {
            None => succeeded += 1,
            Some(e) => {
                failed += 1;
                if errors.len() < 100 {
                    errors.push(BulkError {
                        job_id: id.clone(),
                        error: e,
                    });
                }
            }
        }
    }
    let processed = w.ids.len() as u64;
    Ok(ok(json!(BulkResult {
        action,
        matched: w.total,
        processed,
        succeeded,
        failed,
        errors,
        remaining: w.total.saturating_sub(processed),
        total_exact: w.exact,
    })))
}

/// `POST /admin/jobs/bulk/retry {filter, confirm: true}`: dead-lettered jobs back to available with
/// fresh attempts (the only retryable jobs that are indexed: `state` may be `discarded` or absent); a
/// unique job whose key another live job holds stays dead-lettered and is counted in `failed`.
#[utoipa::path(
    post,
    path = "/ojs/v1/admin/jobs/bulk/retry",
    tag = "admin",
    summary = "Retry dead-lettered jobs matching `filter` (queue, type); needs `confirm: true`",
    request_body = BulkReq,
    responses((status = 200, description = "OK", body = BulkResult, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request or not confirmed (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn bulk_retry(State(st): State<AppState>, OjsJson(req): OjsJson<BulkReq>) -> ApiResult<Response> {
    let s = st.clone();
    bulk(&st, req, BulkAction::Retry, &[JobState::Discarded], move |id| {
        let s = s.clone();
        async move {
            let id = id.as_str();
            Ok(
                match s.shards.on_id(id, |t| async move { t.dead_retry(id).await }).await? {
                    DeadRetry::NotFound => Some("no longer in the dead letter set".to_string()),
                    r => r.refusal(id).map(|e| e.message),
                },
            )
        }
    })
    .await
}

/// `POST /admin/jobs/bulk/cancel {filter, confirm: true}`: cancels available, scheduled, retryable and
/// active jobs (non-terminal states).
#[utoipa::path(
    post,
    path = "/ojs/v1/admin/jobs/bulk/cancel",
    tag = "admin",
    summary = "Cancel non-terminal jobs matching `filter` (queue, state, type); needs `confirm: true`",
    request_body = BulkReq,
    responses((status = 200, description = "OK", body = BulkResult, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request or not confirmed (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn bulk_cancel(State(st): State<AppState>, OjsJson(req): OjsJson<BulkReq>) -> ApiResult<Response> {
    let s = st.clone();
    bulk(
        &st,
        req,
        BulkAction::Cancel,
        &[
            JobState::Available,
            JobState::Active,
            JobState::Scheduled,
            JobState::Retryable,
        ],
        move |id| {
            let s = s.clone();
            async move {
                let id = id.as_str();
                Ok(match s.shards.on_id(id, |t| async move { t.cancel(id).await }).await? {
                    Transition::Done(_) => None,
                    Transition::NotFound => Some("job not found".to_string()),
                    Transition::WrongState(state) | Transition::LeaseLost(state) => {
                        Some(format!("job is {state} and cannot be cancelled"))
                    }
                })
            }
        },
    )
    .await
}

/// `POST /admin/jobs/bulk/delete {filter, confirm: true}`: deletes dead-lettered jobs for good (terminal
/// jobs in no index, completed and cancelled, expire with the retention period instead).
#[utoipa::path(
    post,
    path = "/ojs/v1/admin/jobs/bulk/delete",
    tag = "admin",
    summary = "Delete dead-lettered jobs matching `filter` (queue, type); needs `confirm: true`",
    request_body = BulkReq,
    responses((status = 200, description = "OK", body = BulkResult, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request or not confirmed (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn bulk_delete(State(st): State<AppState>, OjsJson(req): OjsJson<BulkReq>) -> ApiResult<Response> {
    let s = st.clone();
    bulk(&st, req, BulkAction::Delete, &[JobState::Discarded], move |id| {
        let s = s.clone();
        async move {
            let id = id.as_str();
            Ok((!s.shards.on_id(id, |t| async move { t.dead_delete(id).await }).await?)
                .then(|| "no longer in the dead letter set".to_string()))
        }
    })
    .await
}
