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

use axum::extract::{Path, Query, State};
use axum::response::Response;
use ojs_core::job::job_view;
use ojs_core::{clock, names, OjsError};
use ojs_store::Transition;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiResult;
use crate::respond::{ok, OjsJson};
use crate::routes::lifecycle::worker_view;
use crate::routes::queues::queue_name;
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
/// Read from the raw query map so that a malformed number is an OJS 400, not axum's plain-text rejection.
#[derive(Default)]
pub struct PageQuery {
    pub page: Option<u64>,
    pub per_page: Option<u64>,
    pub limit: Option<u64>,
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

    pub fn json(p: Page, total: u64) -> Value {
        json!({
            "total": total,
            "page": p.page,
            "per_page": p.count,
            "limit": p.count,
            "offset": p.offset,
            "has_more": p.offset + p.count < total,
        })
    }
}

// ---- job filters over the indexes ----

/// Which jobs a listing or bulk request is about.
#[derive(Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct JobFilter {
    pub queue: Option<String>,
    pub state: Option<String>,
    /// Exact type, or a prefix followed by `*`.
    #[serde(rename = "type")]
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
    let k = st.store.keys();
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
        match s {
            "available" => {
                let queues = match &f.queue {
                    Some(q) => vec![q.clone()],
                    None => st.store.queue_names().await?,
                };
                for q in queues {
                    out.push(Segment {
                        key: k.ready(&q),
                        rev: false,
                        state: None,
                        queue: Some(q),
                    });
                }
            }
            "active" => out.push(Segment {
                key: k.active(),
                rev: false,
                state: None,
                queue: None,
            }),
            "discarded" => out.push(Segment {
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
                    key: k.scheduled(),
                    rev: false,
                    state: if both { None } else { Some(s) },
                    queue: None,
                });
            }
            _ => {}
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
        let queue_ok = |q: Option<&str>| f.queue.as_deref().is_none_or(|want| q == Some(want));
        let filtered = seg.state.is_some() || (f.queue.is_some() && seg.queue.is_none()) || f.job_type.is_some();
        if !filtered {
            // Every entry matches: count it, and read only the part of the window it holds.
            let n = st.store.index_len(&seg.key).await?;
            let (lo, hi) = (w.total, w.total + n);
            if offset < hi && end > lo {
                let from = offset.max(lo) - lo;
                let take = end.min(hi) - lo - from;
                w.ids.extend(st.store.index_ids(&seg.key, from, take, seg.rev).await?);
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
            let chunk = st.store.index_ids(&seg.key, pos, CHUNK, seg.rev).await?;
            if chunk.is_empty() {
                break;
            }
            pos += chunk.len() as u64;
            examined += chunk.len() as u64;
            let fields = st.store.jobs_fields(&chunk, &["state", "queue", "type"]).await?;
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
pub async fn views(st: &AppState, ids: &[String]) -> ApiResult<Vec<Value>> {
    Ok(st
        .store
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
    let events = st.store.events_since(now - 60_000, SAMPLE).await?;
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
            .and_then(|(id, _)| id.split('-').next()?.parse::<i64>().ok())
            .unwrap_or(now - 60_000);
        (now - oldest).clamp(1, 60_000)
    } else {
        60_000
    };
    let per_min = |n: u64| (n as f64 * 60_000.0 / span_ms as f64 * 100.0).round() / 100.0;
    Ok((per_min(done), per_min(failed)))
}

/// `GET /admin/stats`: job counts summed over the queues' gauges and counters (O(queues)), the dead
/// letter size, queue and worker counts, throughput over the last minute.
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/stats",
    tag = "admin",
    summary = "Aggregate statistics: job counts by state, queues, workers, throughput per minute",
    responses((status = 200, description = "OK"))
)]
async fn stats(State(st): State<AppState>) -> ApiResult<Response> {
    let names = st.store.queue_names().await?;
    let counts = st.store.queue_counts(&names).await?;
    let sum = |f: fn(&ojs_store::QueueCounts) -> u64| counts.iter().map(f).sum::<u64>();
    let (dead, _, _) = st.store.dead_summary().await?;
    let (workers, _) = st.store.workers_page(0, 0).await?;
    let now = st.store.now_ms().await?;
    let (processed, failed) = throughput(&st, now).await?;
    Ok(ok(json!({
        "queues": names.len(),
        "workers": workers,
        "jobs": {
            "available": sum(|c| c.available),
            "active": sum(|c| c.active),
            "scheduled": sum(|c| c.scheduled),
            "completed": sum(|c| c.completed),
            "failed": sum(|c| c.failed),
            "discarded": sum(|c| c.discarded),
            "cancelled": sum(|c| c.cancelled),
            "dead_letter": dead,
        },
        "counts_note": "available and active are current; scheduled counts scheduled and retryable jobs (one index); completed, failed, discarded and cancelled count since the queue was first used",
        "throughput": { "processed_per_minute": processed, "failed_per_minute": failed },
        "uptime_seconds": st.started.elapsed().as_secs(),
        "server_time": clock::format_ms(now),
    })))
}

// ---- queues ----

fn queue_item(c: &ojs_store::QueueCounts) -> Value {
    json!({
        "name": c.name,
        "state": if c.paused { "paused" } else { "active" },
        "paused": c.paused,
        "counts": {
            "available": c.available,
            "active": c.active,
            "scheduled": c.scheduled,
            "completed": c.completed,
            "failed": c.failed,
            "discarded": c.discarded,
            "cancelled": c.cancelled,
        },
    })
}

/// `GET /admin/queues`: every known queue by name (O(queues) to sort), counts for the page only.
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/queues",
    tag = "admin",
    summary = "Queues with counts by state (page, per_page)",
    responses((status = 200, description = "OK"), (status = 400, description = "Invalid request (OJS error)"))
)]
async fn queues(State(st): State<AppState>, Query(q): Query<Params>) -> ApiResult<Response> {
    let p = PageQuery::from_params(&q)?.resolve(20, 1000)?;
    let names = st.store.queue_names().await?;
    let total = names.len() as u64;
    let page: Vec<String> = names
        .into_iter()
        .skip(p.offset.min(total) as usize)
        .take(p.count as usize)
        .collect();
    let counts = st.store.queue_counts(&page).await?;
    Ok(ok(json!({
        "items": counts.iter().map(queue_item).collect::<Vec<_>>(),
        "pagination": PageQuery::json(p, total),
    })))
}

async fn known_queue(st: &AppState, q: &str) -> ApiResult<Value> {
    queue_name(q)?;
    if !st.store.queue_names().await?.iter().any(|n| n == q) {
        return Err(OjsError::not_found("queue", q).into());
    }
    let c = st.store.queue_counts(&[q.to_string()]).await?;
    let mut v = c.first().map(queue_item).unwrap_or(Value::Null);
    v["priority_aging_seconds"] = json!(st.store.get_aging(q).await?);
    Ok(v)
}

#[utoipa::path(
    get,
    path = "/ojs/v1/admin/queues/{queue}",
    tag = "admin",
    summary = "One queue: counts by state, paused, priority aging",
    params(("queue" = String, Path)),
    responses((status = 200, description = "OK"), (status = 404, description = "Unknown queue (OJS error)"))
)]
async fn queue_detail(State(st): State<AppState>, Path(q): Path<String>) -> ApiResult<Response> {
    Ok(ok(known_queue(&st, &q).await?))
}

async fn set_paused(st: &AppState, q: &str, paused: bool) -> ApiResult<Response> {
    queue_name(q)?;
    st.store.set_paused(q, paused).await?;
    let c = st.store.queue_counts(&[q.to_string()]).await?;
    let mut v = c.first().map(queue_item).unwrap_or(Value::Null);
    v["paused"] = json!(paused);
    v[if paused { "paused_at" } else { "resumed_at" }] = json!(clock::format_ms(st.store.now_ms().await?));
    Ok(ok(v))
}

/// Same operation as `POST /queues/{queue}/pause`, answered in the admin API's shape.
#[utoipa::path(
    post,
    path = "/ojs/v1/admin/queues/{queue}/pause",
    tag = "admin",
    summary = "Pause a queue (FETCH skips it)",
    params(("queue" = String, Path)),
    responses((status = 200, description = "OK"), (status = 400, description = "Invalid request (OJS error)"))
)]
async fn pause_queue(State(st): State<AppState>, Path(q): Path<String>) -> ApiResult<Response> {
    set_paused(&st, &q, true).await
}

#[utoipa::path(
    post,
    path = "/ojs/v1/admin/queues/{queue}/resume",
    tag = "admin",
    summary = "Resume a paused queue",
    params(("queue" = String, Path)),
    responses((status = 200, description = "OK"), (status = 400, description = "Invalid request (OJS error)"))
)]
async fn resume_queue(State(st): State<AppState>, Path(q): Path<String>) -> ApiResult<Response> {
    set_paused(&st, &q, false).await
}

// ---- workers ----

/// Most worker records one listing reads (for the summary); a deployment with more gets the summary
/// of the most recently seen ones and `summary.exact: false`.
const MAX_WORKERS: u64 = 10_000;

/// `GET /admin/workers`: workers heard from within a day (`P workers`, most recent first), each with its
/// last heartbeat, state and the jobs it held then. One HGETALL per worker (at most 10,000).
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/workers",
    tag = "admin",
    summary = "Workers: state, last heartbeat, current jobs; summary counts by state (page, per_page)",
    responses((status = 200, description = "OK"), (status = 400, description = "Invalid request (OJS error)"))
)]
async fn workers(State(st): State<AppState>, Query(q): Query<Params>) -> ApiResult<Response> {
    let p = PageQuery::from_params(&q)?.resolve(20, 1000)?;
    let (total, all) = st.store.workers_page(0, MAX_WORKERS).await?;
    let now = st.store.now_ms().await?;
    let views: Vec<Value> = all
        .iter()
        .map(|(id, rec)| worker_view(id, rec, now, st.config.visibility_timeout_ms))
        .collect();
    let mut summary = json!({ "total": total, "running": 0, "quiet": 0, "drain": 0, "terminate": 0, "stale": 0, "exact": total <= MAX_WORKERS });
    for v in &views {
        if let Some(s) = v["state"].as_str() {
            if let Some(n) = summary[s].as_u64() {
                summary[s] = json!(n + 1);
            }
        }
    }
    let items: Vec<Value> = views
        .into_iter()
        .skip(p.offset as usize)
        .take(p.count as usize)
        .collect();
    Ok(ok(json!({
        "items": items,
        "summary": summary,
        "pagination": PageQuery::json(p, total),
    })))
}

#[utoipa::path(
    get,
    path = "/ojs/v1/admin/workers/{worker_id}",
    tag = "admin",
    summary = "One worker with the jobs it held at its last heartbeat",
    params(("worker_id" = String, Path)),
    responses((status = 200, description = "OK"), (status = 404, description = "Unknown worker (OJS error)"))
)]
async fn worker_detail(State(st): State<AppState>, Path(w): Path<String>) -> ApiResult<Response> {
    crate::routes::workers::check_worker_id(&w)?;
    let rec = st
        .store
        .worker_record(&w)
        .await?
        .ok_or_else(|| OjsError::not_found("worker", &w))?;
    let now = st.store.now_ms().await?;
    let mut v = worker_view(&w, &rec, now, st.config.visibility_timeout_ms);
    let ids: Vec<String> = v["current_jobs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|j| j.as_str().map(str::to_owned))
        .collect();
    v["jobs"] = json!(views(&st, &ids).await?);
    Ok(ok(v))
}

// ---- jobs ----

const LISTABLE: [&str; 5] = ["available", "active", "scheduled", "retryable", "discarded"];

/// `GET /admin/jobs?queue=&state=&type=&page=&per_page=`: jobs from the indexes (see the module
/// comment for what each filter costs), in index order: ready (priority, then FIFO), scheduled (by run
/// time), active (by lease deadline), dead letter (newest first).
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/jobs",
    tag = "admin",
    summary = "Jobs by queue, state (available, active, scheduled, retryable, discarded) and type (prefix*), paginated",
    responses((status = 200, description = "OK"), (status = 400, description = "Invalid request (OJS error)"))
)]
async fn jobs(State(st): State<AppState>, Query(q): Query<Params>) -> ApiResult<Response> {
    let filter = JobFilter::from_params(&q)?;
    filter.check()?;
    let p = PageQuery::from_params(&q)?.resolve(20, 100)?;
    let segs = segments(&st, &filter, &LISTABLE).await?;
    let w = walk(&st, &segs, &filter, p.offset, p.count).await?;
    let mut pagination = PageQuery::json(p, w.total);
    pagination["total_exact"] = json!(w.exact);
    Ok(ok(json!({
        "items": views(&st, &w.ids).await?,
        "pagination": pagination,
        "total_exact": w.exact,
    })))
}

// ---- bulk ----

#[derive(Deserialize)]
struct BulkReq {
    #[serde(default)]
    filter: Option<JobFilter>,
    #[serde(default)]
    confirm: Option<bool>,
    /// Most jobs to act on in this request (default and maximum 1,000).
    #[serde(default)]
    limit: Option<u64>,
}

/// Runs `op` on every job that matches (up to the limit), each job in its own script, which re-checks
/// the job's state: a job that moved since it was listed is reported under `errors`, not forced.
async fn bulk<F, Fut>(st: &AppState, req: BulkReq, action: &str, states: &[&'static str], op: F) -> ApiResult<Response>
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
                    errors.push(json!({ "job_id": id, "error": e }));
                }
            }
        }
    }
    Ok(ok(json!({
        "action": action,
        "matched": w.total,
        "processed": w.ids.len(),
        "succeeded": succeeded,
        "failed": failed,
        "errors": errors,
        "remaining": w.total.saturating_sub(w.ids.len() as u64),
        "total_exact": w.exact,
    })))
}

/// `POST /admin/jobs/bulk/retry {filter, confirm: true}`: dead-lettered jobs back to available with
/// fresh attempts (the only retryable jobs that are indexed: `state` may be `discarded` or absent).
#[utoipa::path(
    post,
    path = "/ojs/v1/admin/jobs/bulk/retry",
    tag = "admin",
    summary = "Retry dead-lettered jobs matching `filter` (queue, type); needs `confirm: true`",
    request_body = serde_json::Value,
    responses((status = 200, description = "OK"), (status = 400, description = "Invalid request or not confirmed (OJS error)"))
)]
async fn bulk_retry(State(st): State<AppState>, OjsJson(req): OjsJson<BulkReq>) -> ApiResult<Response> {
    let s = st.clone();
    bulk(&st, req, "retry", &["discarded"], move |id| {
        let s = s.clone();
        async move { Ok((!s.store.dead_retry(&id).await?).then(|| "no longer in the dead letter set".to_string())) }
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
    request_body = serde_json::Value,
    responses((status = 200, description = "OK"), (status = 400, description = "Invalid request or not confirmed (OJS error)"))
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
                Ok(match s.store.cancel(&id).await? {
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
    request_body = serde_json::Value,
    responses((status = 200, description = "OK"), (status = 400, description = "Invalid request or not confirmed (OJS error)"))
)]
async fn bulk_delete(State(st): State<AppState>, OjsJson(req): OjsJson<BulkReq>) -> ApiResult<Response> {
    let s = st.clone();
    bulk(&st, req, "delete", &["discarded"], move |id| {
        let s = s.clone();
        async move { Ok((!s.store.dead_delete(&id).await?).then(|| "no longer in the dead letter set".to_string())) }
    })
    .await
}
