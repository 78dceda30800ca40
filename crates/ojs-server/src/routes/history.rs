//! `GET /ojs/v1/admin/stats/history?minutes=60&queue=`: per-minute series for the dashboard's charts,
//! computed from the capped event stream (`P events`), so every pod answers the same.
//!
//! What is exact and what is not:
//!
//! * `series` (enqueued, started, completed, failed, retried, dead_lettered per minute) count the
//!   stream's events, exactly, for the part of the window the answer says it covers (`complete_from`).
//!   The stream keeps the newest ~100,000 events (all queues), and one request reads at most
//!   [`MAX_EVENTS`] of them, newest first (fewer than the cap, so a window the cap cut is always cut by
//!   the read bound first); when the window is cut, `truncated` says so and the minutes before
//!   `complete_from` are missing, not zero. `stream_begins_at` is the oldest event the stream holds.
//! * `wait_by_priority`: a start's wait is the time from the job's last "ready" event (enqueued,
//!   available, retried, requeued, released) to its `job.started` event when both are in the stream;
//!   else, for a first attempt, from the job's `enqueued_at` (or `scheduled_at`, when later). The
//!   priority is read from the job (one pipelined HMGET per start, at most [`MAX_WAIT_READS`], newest
//!   first): it is the job's priority now (a `PATCH` since the start moves it), and starts of jobs
//!   gone since (retention, deletion) are counted in `wait.unknown`. The Prometheus histogram
//!   `ojs_job_wait_duration_seconds` measures enqueued_at → started_at on the pod that served the fetch.
//!
//! Cost: one XREVRANGE of at most [`MAX_EVENTS`] entries, one XRANGE of one entry, one pipeline of at
//! most [`MAX_WAIT_READS`] HMGETs.

use std::collections::{BTreeMap, HashMap};

use axum::extract::State;
use axum::response::Response;
use ojs_core::event::EventType;
use ojs_core::{clock, names, OjsError};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::{IntoParams, ToSchema};

use crate::error::ApiResult;
use crate::respond::{ok, OjsQuery};
use crate::schemas::{OjsErrorBody, OJS_MEDIA_TYPE};
use crate::state::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(history))
}

/// Most stream entries one request reads.
pub const MAX_EVENTS: usize = 20_000;
/// Most starts whose job is read for its priority and enqueue time.
pub const MAX_WAIT_READS: usize = 2_000;
/// Longest window, in minutes.
pub const MAX_MINUTES: i64 = 180;
/// Most queues listed in `by_queue` (the busiest).
const MAX_QUEUES: usize = 50;
const MINUTE: i64 = 60_000;

/// One value per kind of event counted.
#[derive(Serialize, ToSchema, Default)]
struct PerKind<T> {
    enqueued: T,
    started: T,
    completed: T,
    failed: T,
    retried: T,
    dead_lettered: T,
}

impl<T> PerKind<T> {
    fn at(&mut self, kind: usize) -> &mut T {
        match kind {
            0 => &mut self.enqueued,
            1 => &mut self.started,
            2 => &mut self.completed,
            3 => &mut self.failed,
            4 => &mut self.retried,
            _ => &mut self.dead_lettered,
        }
    }
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct HistoryQuery {
    /// The window, in minutes (1 to 180, default 60).
    #[param(minimum = 1, maximum = 180)]
    minutes: Option<i64>,
    /// Only this queue's events.
    queue: Option<String>,
}

/// Per-minute series over the window (see the module comment for what is exact).
#[derive(Serialize, ToSchema)]
struct History {
    minutes: i64,
    bucket_seconds: u32,
    queue: Option<String>,
    #[schema(format = DateTime)]
    from: String,
    #[schema(format = DateTime)]
    to: String,
    /// The start of each minute; every series has one value per bucket.
    buckets: Vec<String>,
    #[schema(value_type = PerKind<Vec<u64>>)]
    series: PerKind<Vec<u64>>,
    /// Event counts over the window per queue, the busiest 50.
    #[schema(value_type = std::collections::HashMap<String, PerKind<u64>>)]
    by_queue: serde_json::Map<String, Value>,
    /// Queues with events in the window (`by_queue` lists at most 50).
    by_queue_total: usize,
    /// Ready → started per priority (the job's current priority).
    #[schema(value_type = std::collections::HashMap<String, WaitSeries>)]
    wait_by_priority: serde_json::Map<String, Value>,
    wait: WaitSummary,
    events_read: usize,
    max_events: usize,
    /// The oldest event the stream holds.
    #[schema(format = DateTime)]
    stream_begins_at: Option<String>,
    /// The minutes before this one are missing (not zero) when `truncated`.
    #[schema(format = DateTime)]
    complete_from: String,
    truncated: bool,
    truncated_reason: Option<String>,
    #[schema(format = DateTime)]
    server_time: String,
}

/// Waits of one priority, per bucket and over the window.
#[derive(Serialize, ToSchema)]
struct WaitSeries {
    count: Vec<u64>,
    /// `null` for a bucket without starts.
    mean_ms: Vec<Option<i64>>,
    max_ms: Vec<i64>,
    samples: usize,
    p50_ms: i64,
    p95_ms: i64,
    max_window_ms: i64,
}

/// How the waits were measured.
#[derive(Serialize, ToSchema)]
struct WaitSummary {
    /// Starts in the window.
    starts: usize,
    /// Starts whose job was read (the newest, at most `max_reads`).
    sampled: usize,
    max_reads: usize,
    /// Measured from the job's ready event in the stream.
    from_events: u64,
    /// Measured from the job's enqueued_at/scheduled_at.
    from_job: u64,
    /// Not measured (job gone, or a retry without its ready event).
    unknown: u64,
    note: &'static str,
}

fn entry_ms(id: &str) -> Option<i64> {
    crate::events_hub::parse_event_id(id)?.1.split('-').next()?.parse().ok()
}

/// One start seen in the window.
struct Start {
    job_id: String,
    at: i64,
    attempt: i64,
    /// From the job's ready event in the stream, when there is one.
    waited: Option<i64>,
}

#[derive(Default)]
struct WaitAcc {
    count: Vec<u64>,
    sum: Vec<i64>,
    max: Vec<i64>,
    all: Vec<i64>,
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// `GET /admin/stats/history`: see the module comment.
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/stats/history",
    tag = "admin",
    summary = "Per-minute started/completed/failed counts and wait time by priority over the last `minutes` (default 60, at most 180), from the event stream; optional `queue`",
    params(HistoryQuery),
    responses((status = 200, description = "OK", body = History, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn history(State(st): State<AppState>, OjsQuery(q): OjsQuery<HistoryQuery>) -> ApiResult<Response> {
    let minutes = q.minutes.unwrap_or(60);
    if !(1..=MAX_MINUTES).contains(&minutes) {
        return Err(OjsError::invalid(format!("minutes must be from 1 to {MAX_MINUTES}; got {minutes}")).into());
    }
    let queue = q.queue.filter(|s| !s.is_empty());
    if let Some(name) = &queue {
        names::check_queue(name).map_err(|e| OjsError::invalid(format!("queue: {e}")))?;
    }
    let now = st.shards.now_ms().await?;
    // Buckets are clock minutes; the last one is the current, partial, minute.
    let start = (now / MINUTE - (minutes - 1)) * MINUTE;
    let n = minutes as usize;
    let bucket = |t: i64| ((t - start).max(0) / MINUTE).min(minutes - 1) as usize;

    let mut events = crate::events_hub::events_latest(&st, MAX_EVENTS, Some(start)).await?;
    let hit_count = events.len() == MAX_EVENTS;
    events.reverse(); // oldest first
    let stream_from = crate::events_hub::events_after(&st, "0-0", 1)
        .await?
        .first()
        .and_then(|(id, _)| entry_ms(id));
    // When the read bound cut the window: the first minute whose events are all here (the minute cut in
    // the middle is left out, even the current one: then no minute is complete). A stream that begins inside the window without that holds fewer entries
    // than one request reads, far below its cap, so it never lost any: the minutes before its first
    // event are true zeros.
    let (complete_from, reason) = match events.first().and_then(|(id, _)| entry_ms(id)) {
        Some(oldest) if hit_count => (
            (oldest / MINUTE + 1) * MINUTE,
            Some(format!(
                "more than {MAX_EVENTS} events in the window: only the newest {MAX_EVENTS} were read"
            )),
        ),
        _ => (start, None),
    };

    let mut series = PerKind {
        enqueued: vec![0u64; n],
        started: vec![0u64; n],
        completed: vec![0u64; n],
        failed: vec![0u64; n],
        retried: vec![0u64; n],
        dead_lettered: vec![0u64; n],
    };
    let mut by_queue: HashMap<String, PerKind<u64>> = HashMap::new();
    let mut ready: HashMap<String, i64> = HashMap::new();
    let mut starts: Vec<Start> = Vec::new();
    for (id, f) in &events {
        let Some(t) = entry_ms(id) else { continue };
        if t < start {
            continue;
        }
        if queue.as_deref().is_some_and(|want| want != f.queue) {
            continue;
        }
        let job_id = f.job_id.clone();
        let data = || serde_json::from_str::<Value>(&f.data).unwrap_or(Value::Null);
        let Some(event) = f.kind() else {
            continue;
        };
        let kind = match event {
            EventType::JobEnqueued => {
                ready.insert(job_id, t);
                Some(0)
            }
            EventType::JobAvailable | EventType::JobRetried | EventType::JobRequeued | EventType::JobReleased => {
                ready.insert(job_id, t);
                None
            }
            EventType::JobStarted => {
                let attempt = data()["attempt"].as_i64().unwrap_or(0);
                let waited = ready.remove(&job_id).map(|r| (t - r).max(0));
                starts.push(Start {
                    job_id,
                    at: t,
                    attempt,
                    waited,
                });
                Some(1)
            }
            EventType::JobCompleted => Some(2),
            EventType::JobFailed => Some(3),
            EventType::JobRetrying => {
                if data()["rate_limited"].as_bool() == Some(true) {
                    // A worker's 429: the job waits again, its attempt unspent; not a failure.
                    ready.insert(job_id, t);
                    None
                } else {
                    Some(4)
                }
            }
            EventType::JobDeadLettered => Some(5),
            _ => None,
        };
        if let Some(k) = kind {
            series.at(k)[bucket(t)] += 1;
            *by_queue.entry(f.queue.clone()).or_default().at(k) += 1;
        }
    }

    // Wait by priority: the newest starts, one HMGET each (pipelined).
    let sampled: Vec<&Start> = starts.iter().rev().take(MAX_WAIT_READS).collect();
    let ids: Vec<String> = sampled.iter().map(|s| s.job_id.clone()).collect();
    let jobs = st
        .shards
        .jobs_partial(&ids, &["priority", "enqueued_at", "scheduled_at"])
        .await?;
    let mut waits: BTreeMap<i64, WaitAcc> = BTreeMap::new();
    let (mut from_events, mut from_job, mut unknown) = (0u64, 0u64, 0u64);
    for (s, j) in sampled.iter().zip(jobs) {
        let j = j.unwrap_or_default();
        let Some(priority) = j.priority else {
            unknown += 1;
            continue;
        };
        let waited = match s.waited {
            Some(w) => {
                from_events += 1;
                w
            }
            None if s.attempt == 1 => match j.enqueued_at {
                Some(enq) => {
                    from_job += 1;
                    (s.at - enq.max(j.scheduled_at.unwrap_or(0))).max(0)
                }
                None => {
                    unknown += 1;
                    continue;
                }
            },
            None => {
                unknown += 1;
                continue;
            }
        };
        let acc = waits.entry(priority).or_insert_with(|| WaitAcc {
            count: vec![0; n],
            sum: vec![0; n],
            max: vec![0; n],
            all: Vec::new(),
        });
        let b = bucket(s.at);
        acc.count[b] += 1;
        acc.sum[b] += waited;
        acc.max[b] = acc.max[b].max(waited);
        acc.all.push(waited);
    }
    let wait_by_priority: serde_json::Map<String, Value> = waits
        .into_iter()
        .map(|(p, mut a)| {
            a.all.sort_unstable();
            let mean_ms: Vec<Option<i64>> = (0..n)
                .map(|i| (a.count[i] > 0).then(|| a.sum[i] / a.count[i] as i64))
                .collect();
            (
                p.to_string(),
                json!(WaitSeries {
                    samples: a.all.len(),
                    p50_ms: percentile(&a.all, 0.5),
                    p95_ms: percentile(&a.all, 0.95),
                    max_window_ms: a.all.last().copied().unwrap_or(0),
                    count: a.count,
                    mean_ms,
                    max_ms: a.max,
                }),
            )
        })
        .collect();

    let mut queues: Vec<(u64, String, PerKind<u64>)> = by_queue
        .into_iter()
        .map(|(q, c)| {
            (
                c.enqueued + c.started + c.completed + c.failed + c.retried + c.dead_lettered,
                q,
                c,
            )
        })
        .collect();
    queues.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let queues_total = queues.len();
    let by_queue: serde_json::Map<String, Value> = queues
        .into_iter()
        .take(MAX_QUEUES)
        .map(|(_, q, c)| (q, json!(c)))
        .collect();

    Ok(ok(json!(History {
        minutes,
        bucket_seconds: 60,
        queue,
        from: clock::format_ms(start),
        to: clock::format_ms(now),
        buckets: (0..minutes).map(|i| clock::format_ms(start + i * MINUTE)).collect(),
        series,
        by_queue,
        by_queue_total: queues_total,
        wait_by_priority,
        wait: WaitSummary {
            starts: starts.len(),
            sampled: sampled.len(),
            max_reads: MAX_WAIT_READS,
            from_events,
            from_job,
            unknown,
            note: "ready → started per start: from the job's ready event in the stream, else (first attempts) from its enqueued_at/scheduled_at; priority is the job's current one",
        },
        events_read: events.len(),
        max_events: MAX_EVENTS,
        stream_begins_at: stream_from.map(clock::format_ms),
        truncated: complete_from > start,
        complete_from: clock::format_ms(complete_from),
        truncated_reason: reason,
        server_time: clock::format_ms(now),
    })))
}
