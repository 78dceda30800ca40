//! The operator API (ext-admin-api) under `/ojs/v1/admin/` (admin scope, see `auth.rs`): aggregate stats,
//! queues, workers, job listing with filters, and bulk retry / cancel / delete.
//!
//! Listing reads the indexes the scripts already keep, never the keyspace (there is no SCAN here):
//!
//! | filter | index read | cost per request |
//! |---|---|---|
//! | `state=available` (+ `queue`) | that queue's ready set | O(log n + page) |
//! | `state=available` (no queue) | every queue's ready set, in name order | O(queues) ZCARDs + O(log n + page) |
//! | `state=active` | `P active` (by lease deadline) | O(log n + page) |
//! | `state=discarded` | `P dead` (dead-lettered jobs, newest first) | O(log n + page) |
//! | `state=scheduled` or `retryable` | `P scheduled` (both states share it), each entry's state read | O(entries walked) |
//! | no `state` | all of the above, in that order | sum of the above |
//! | `queue` on a shared index, or `type` | each walked entry's hash fields read (HMGET, pipelined) | O(entries walked) |
//!
//! A walk reads at most [`MAX_EXAMINE`] index entries per request; past that the answer says
//! `"total_exact": false` and `total` counts what was examined. `completed` and `cancelled` jobs are in
//! no index (they are kept for the retention period and read by id), so those filters are refused with a
//! 400 that says so; likewise plain `discarded` jobs (without dead letter) are not listed. Available jobs
//! waiting behind their rate-limit lane's head are not in the ready set and are not listed (the queue
//! counts leave them out the same way). Entries are walked in pages while other requests change the
//! indexes, so a job that moves during a walk can be missed or seen twice: an operator view, not a snapshot.

use axum::extract::State;
use axum::response::Response;
use ojs_core::job::{job_view, JobView};
use ojs_core::{clock, names, OjsError};
use ojs_store::{DeadRetry, Transition};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::{IntoParams, ToSchema};

use crate::error::ApiResult;
use crate::respond::{ok, OjsJson, OjsPath, OjsQuery};
use crate::routes::lifecycle::{worker_view, WorkerState, WorkerView};
use crate::routes::queues::{one_queue, queue_name, QueueStatus};
use crate::schemas::{Job, JobCounts, JobState, OjsErrorBody, OJS_MEDIA_TYPE};
use crate::state::AppState;
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

/// Most index entries one listing or bulk request examines.
pub const MAX_EXAMINE: u64 = 100_000;
/// Most jobs one bulk request acts on (each is its own script call); repeat the request for more.
pub const MAX_BULK: u64 = 1_000;
/// Entries read per step of a walk.
const CHUNK: u64 = 500;

// ---- pagination ----

/// `page` (1-based) and `per_page` (the admin API), or `limit` and `offset` (the older dead-letter API).
/// Read from the raw query map, next to the listing's filters.
#[derive(Default, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// From 1 (default 1).
    #[param(minimum = 0)]
    pub page: Option<u64>,
    /// Items per page (default and maximum depend on the listing).
    #[param(minimum = 0)]
    pub per_page: Option<u64>,
    /// The same as `per_page`.
    #[param(minimum = 0)]
    pub limit: Option<u64>,
    /// Items to skip (instead of `page`).
    #[param(minimum = 0)]
    pub offset: Option<u64>,
}

/// Query parameters as given (never rejected by the extractor).
pub type Params = std::collections::HashMap<String, String>;

fn number(q: &Params, name: &str) -> Result<Option<u64>, OjsError> {
    q.get(name)
        .map(|v| {
            v.parse::<u64>()
                .map_err(|_| OjsError::invalid(format!("{name} must be a whole number; got {v:?}")))
        })
        .transpose()
}

impl PageQuery {
    pub fn from_params(q: &Params) -> Result<Self, OjsError> {
        Ok(Self {
            page: number(q, "page")?,
            per_page: number(q, "per_page")?,
            limit: number(q, "limit")?,
            offset: number(q, "offset")?,
        })
    }
}

/// A resolved page: (offset, count, page, per_page).
#[derive(Clone, Copy)]
pub struct Page {
    pub offset: u64,
    pub count: u64,
    pub page: u64,
}

impl PageQuery {
    pub fn resolve(&self, default: u64, max: u64) -> Result<Page, OjsError> {
        if self.page == Some(0) {
            return Err(OjsError::invalid("page starts at 1"));
        }
        let count = self.per_page.or(self.limit).unwrap_or(default);
        if count == 0 || count > max {
            return Err(OjsError::invalid(format!(
                "per_page (or limit) must be from 1 to {max}; got {count}"
            )));
        }
        let offset = match (self.page, self.offset) {
            (Some(p), _) => (p - 1).saturating_mul(count),
            (None, Some(o)) => o,
            (None, None) => 0,
        };
        Ok(Page {
            offset,
            count,
            page: offset / count + 1,
        })
    }
}

/// Where a page sits in its listing.
#[derive(Serialize, ToSchema)]
pub struct Pagination {
    /// Items in the whole listing (what was examined, when `total_exact` is false).
    pub total: u64,
    /// From 1.
    pub page: u64,
    pub per_page: u64,
    /// The same as `per_page`.
    pub limit: u64,
    pub offset: u64,
    pub has_more: bool,
    /// Whether every index entry was examined (listings that walk an index, see `MAX_EXAMINE`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub total_exact: Option<bool>,
}

impl Page {
    /// This page of a listing of `total` items.
    pub fn of(self, total: u64) -> Pagination {
        Pagination {
            total,
            page: self.page,
            per_page: self.count,
            limit: self.count,
            offset: self.offset,
            has_more: self.offset.saturating_add(self.count) < total,
            total_exact: None,
        }
    }

    /// This page of a walk's matches.
    pub fn of_walk(self, w: &Walk) -> Pagination {
        Pagination {
            total_exact: Some(w.exact),
            ..self.of(w.total)
        }
    }
}

// ---- job filters over the indexes ----

/// Which jobs a listing or bulk request is about.
#[derive(Deserialize, Default, Clone, ToSchema, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct JobFilter {
    #[schema(nullable = false)]
    pub queue: Option<String>,
    /// Listed: available, active, scheduled, retryable, discarded (completed and cancelled jobs are in
    /// no index).
    #[schema(value_type = Option<JobState>, nullable = false)]
    #[param(value_type = Option<JobState>)]
    pub state: Option<String>,
    /// Exact type, or a prefix followed by `*`.
    #[serde(rename = "type")]
    #[schema(nullable = false)]
    #[param(rename = "type")]
    pub job_type: Option<String>,
}

impl JobFilter {
    /// The filter of a listing's query. Filters this server does not implement (`since`, `until`,
    /// `sort`, `order`) are refused rather than ignored, as the bulk body's unknown fields are: an
    /// operator must not read a list as filtered when it is not.
    pub fn from_params(q: &Params) -> Result<Self, OjsError> {
        if let Some(k) = ["since", "until", "sort", "order"].iter().find(|k| q.contains_key(**k)) {
            return Err(OjsError::invalid(format!(
                "{k} is not supported here: filter by queue, state and type (index order is fixed)"
            )));
        }
        Ok(Self {
            queue: q.get("queue").cloned(),
            state: q.get("state").cloned(),
            job_type: q.get("type").cloned(),
        })
    }

    pub fn check(&self) -> Result<(), OjsError> {
        if let Some(q) = &self.queue {
            names::check_queue(q).map_err(|e| OjsError::invalid(format!("queue: {e}")))?;
        }
        if let Some(t) = &self.job_type {
            if t.is_empty() || t.len() > 255 {
                return Err(OjsError::invalid(
                    "type must be 1 to 255 characters (a trailing * matches a prefix)",
                ));
            }
        }
        if let Some(s) = &self.state {
            if !ojs_core::job::STATES.contains(&s.as_str()) {
                return Err(OjsError::invalid(format!(
                    "state must be one of {}; got {s:?}",
                    ojs_core::job::STATES.join(", ")
                )));
            }
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_none() && self.state.is_none() && self.job_type.is_none()
    }

    fn type_matches(&self, t: Option<&str>) -> bool {
        match (&self.job_type, t) {
            (None, _) => true,
            (Some(want), Some(t)) => match want.strip_suffix('*') {
                Some(prefix) => t.starts_with(prefix),
                None => t == want,
            },
            (Some(_), None) => false,
        }
    }
}

/// One index a listing reads: its key, its order, the state its entries must have (None: any; the
/// index implies it), and the queue its membership implies (ready sets).
pub struct Segment {
    /// The shard whose index this is.
    shard: usize,
    key: String,
    rev: bool,
    state: Option<&'static str>,
    queue: Option<String>,
}

/// The indexes that hold jobs of `states` (None = every indexed state), narrowed to `queue` where the
/// index is per queue. A state that no index holds is refused.
pub async fn segments(
    st: &AppState,
    f: &JobFilter,
    states: &[&'static str],
) -> Result<Vec<Segment>, crate::error::ApiError> {
    let wanted: Vec<&'static str> = match &f.state {
        Some(s) => match states.iter().find(|x| **x == s.as_str()) {
            Some(x) => vec![*x],
            None if matches!(s.as_str(), "completed" | "cancelled") => {
                return Err(OjsError::invalid(format!(
                    "{s} jobs are kept only for the retention period and are in no index, so they cannot be listed; read one by id"
                ))
                .into())
            }
            None => {
                return Err(OjsError::invalid(format!(
                    "this operation applies to jobs in states {}; got {s:?}",
                    states.join(", ")
                ))
                .into())
            }
        },
        None => states.to_vec(),
    };
    let mut out = Vec::new();
    for s in wanted {
        if s == "available" {
            let queues = match &f.queue {
                Some(q) => vec![q.clone()],
                None => st.shards.queue_names().await?,
            };
            let names: Vec<&str> = queues.iter().map(String::as_str).collect();
            let at = st.shards.find_queues(&names).await?;
            for (q, shard) in queues.into_iter().zip(at) {
                out.push(Segment {
                    shard,
                    key: st.shards.get(shard).keys().queue_ready(&q),
                    rev: false,
                    state: None,
                    queue: Some(q),
                });
            }
            continue;
        }
        // The other indexes are one per shard.
        for store in st.shards.all() {
            let (shard, k) = (store.shard_index(), store.keys());
            match s {
                "active" => out.push(Segment {
                    shard,
                    key: k.active(),
                    rev: false,
                    state: None,
                    queue: None,
                }),
                "discarded" => out.push(Segment {
                    shard,
                    key: k.dead(),
                    rev: true,
                    state: None,
                    queue: None,
                }),
                "scheduled" | "retryable" => {
                    // Both live in P scheduled: with only one of them asked for, each entry's state is read.
                    let both = f.state.is_none() && states.contains(&"scheduled") && states.contains(&"retryable");
                    if both && s == "retryable" {
                        continue;
                    }
                    out.push(Segment {
                        shard,
                        key: k.scheduled(),
                        rev: false,
                        state: if both { None } else { Some(s) },
                        queue: None,
                    });
                }
                _ => {}
            }
        }
    }
    Ok(out)
}

/// What a walk found: the ids in the requested window, how many matched, and whether every entry was
/// examined.
pub struct Walk {
    pub ids: Vec<String>,
    pub total: u64,
    pub exact: bool,
}

/// Walks `segs` in order and keeps the matching ids at positions `offset .. offset + count`.
pub async fn walk(st: &AppState, segs: &[Segment], f: &JobFilter, offset: u64, count: u64) -> ApiResult<Walk> {
    let mut w = Walk {
        ids: Vec::new(),
        total: 0,
        exact: true,
    };
    let mut examined = 0u64;
    let end = offset.saturating_add(count);
    for seg in segs {
        let store = st.shards.get(seg.shard);
        let queue_ok = |q: Option<&str>| f.queue.as_deref().is_none_or(|want| q == Some(want));
        let filtered = seg.state.is_some() || (f.queue.is_some() && seg.queue.is_none()) || f.job_type.is_some();
        if !filtered {
            // Every entry matches: count it, and read only the part of the window it holds.
            let n = store.index_len(&seg.key).await?;
            let (lo, hi) = (w.total, w.total + n);
            if offset < hi && end > lo {
                let from = offset.max(lo) - lo;
                let take = end.min(hi) - lo - from;
                w.ids.extend(store.index_ids(&seg.key, from, take, seg.rev).await?);
            }
            w.total = hi;
            continue;
        }
        let mut pos = 0u64;
        loop {
            if examined >= MAX_EXAMINE {
                w.exact = false;
                return Ok(w);
            }
            let chunk = store.index_ids(&seg.key, pos, CHUNK, seg.rev).await?;
            if chunk.is_empty() {
                break;
            }
            pos += chunk.len() as u64;
            examined += chunk.len() as u64;
            let fields = store.jobs_fields(&chunk, &["state", "queue", "type"]).await?;
            for (id, f3) in chunk.into_iter().zip(fields) {
                let get = |i: usize| f3.get(i).and_then(|v| v.as_deref());
                let ok = get(0).is_some()
                    && seg.state.is_none_or(|s| get(0) == Some(s))
                    && (seg.queue.is_some() || queue_ok(get(1)))
                    && f.type_matches(get(2));
                if ok {
                    if w.total >= offset && w.total < end {
                        w.ids.push(id);
                    }
                    w.total += 1;
                }
            }
        }
    }
    Ok(w)
}

/// The jobs with these ids as the API shows them (jobs gone meanwhile are left out).
pub async fn views(st: &AppState, ids: &[String]) -> ApiResult<Vec<JobView>> {
    Ok(st
        .shards
        .jobs(ids)
        .await?
        .iter()
        .filter(|f| !f.is_empty())
        .map(job_view)
        .collect())
}

// ---- stats ----

/// Completions and failures per minute, from the event stream: the events of the last minute, read
/// newest first up to 1,000 (O(1,000) at most); when a minute holds more, the rate is extrapolated from
/// the span those 1,000 cover. Shared by every node (the stream is in Redis).
async fn throughput(st: &AppState, now: i64) -> ApiResult<(f64, f64)> {
    const SAMPLE: usize = 1_000;
    let events = crate::events_hub::events_latest(st, SAMPLE, Some(now - 60_000)).await?;
    let (mut done, mut failed) = (0u64, 0u64);
    for (_, e) in &events {
        match e.get("type").map(String::as_str) {
            Some("job.completed") => done += 1,
            Some("job.failed") => failed += 1,
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
    let now = st.shards.first().now_ms().await?;
    let (processed, failed) = throughput(&st, now).await?;
    Ok(ok(json!(Stats {
        queues: names.len(),
        workers,
        jobs: StatsJobs {
            counts: JobCounts::sum(&counts),
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
    #[schema(value_type = QueueStatus)]
    state: &'static str,
    paused: bool,
    counts: JobCounts,
}

impl From<&ojs_store::QueueCounts> for AdminQueue {
    fn from(c: &ojs_store::QueueCounts) -> Self {
        Self {
            name: c.name.clone(),
            state: if c.paused { "paused" } else { "active" },
            paused: c.paused,
            counts: c.into(),
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
async fn queue_detail(State(st): State<AppState>, OjsPath(q): OjsPath<String>) -> ApiResult<Response> {
    queue_name(&q)?;
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
    queue_name(q)?;
    st.shards.for_queue(&q).await?.set_paused(q, paused).await?;
    let queue = AdminQueue {
        paused,
        ..AdminQueue::from(&one_queue(st, q).await?)
    };
    let at = Some(clock::format_ms(st.shards.first().now_ms().await?));
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
async fn pause_queue(State(st): State<AppState>, OjsPath(q): OjsPath<String>) -> ApiResult<Response> {
    set_paused(&st, &q, true).await
}

#[utoipa::path(
    post,
    path = "/ojs/v1/admin/queues/{queue}/resume",
    tag = "admin",
    summary = "Resume a paused queue",
    params(("queue" = String, Path)),
    responses((status = 200, description = "OK", body = AdminQueueChange, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Not a queue name (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn resume_queue(State(st): State<AppState>, OjsPath(q): OjsPath<String>) -> ApiResult<Response> {
    set_paused(&st, &q, false).await
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
    let now = st.shards.first().now_ms().await?;
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
    crate::routes::workers::check_worker_id(&w)?;
    let rec = st
        .shards
        .worker_record(&w)
        .await?
        .ok_or_else(|| OjsError::not_found("worker", &w))?;
    let now = st.shards.first().now_ms().await?;
    let worker = worker_view(&w, &rec, now, st.config.visibility_timeout_ms);
    let jobs = views(&st, &worker.current_jobs).await?;
    Ok(ok(json!(WorkerDetail { worker, jobs })))
}

// ---- jobs ----

const LISTABLE: [&str; 5] = ["available", "active", "scheduled", "retryable", "discarded"];

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
/// time), active (by lease deadline), dead letter (newest first).
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/jobs",
    tag = "admin",
    summary = "Jobs by queue, state (available, active, scheduled, retryable, discarded) and type (prefix*), paginated",
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
    #[schema(value_type = BulkAction)]
    action: &'static str,
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

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)] // documents the action strings
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
    action: &'static str,
    states: &[&'static str],
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
            "bulk {action} needs \"confirm\": true (it acts on every job the filter matches{})",
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
    bulk(&st, req, "retry", &["discarded"], move |id| {
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
        "cancel",
        &["available", "active", "scheduled", "retryable"],
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
    bulk(&st, req, "delete", &["discarded"], move |id| {
        let s = s.clone();
        async move {
            let id = id.as_str();
            Ok((!s.shards.on_id(id, |t| async move { t.dead_delete(id).await }).await?)
                .then(|| "no longer in the dead letter set".to_string()))
        }
    })
    .await
}
