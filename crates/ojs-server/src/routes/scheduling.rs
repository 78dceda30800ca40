//! `GET /ojs/v1/admin/scheduling/stats` (ojs-fair-scheduling §10.2): how the last minute's dispatches
//! were shared between queues and pools, read from what Redis already holds, so every pod answers the
//! same and no dispatch pays for the count:
//!
//! * a dispatch is a claim: one `job.started` event in the event stream (`P events` of every shard),
//!   written by the FETCH script that claimed the job (FETCH, ack-and-fetch-next, any strategy, with or
//!   without a pool). Jobs a FETCH completed unrun (superseded) or discarded (expired) are not
//!   dispatches. The window is the minute before the answer's `server_time` (Redis' clock).
//! * the read is bounded: the newest [`MAX_EVENTS`] events of the window (all kinds, all queues). When
//!   the window holds more, `stats.complete` is false and the counts cover only the part from
//!   `stats.counted_from` on (a lower bound, never extrapolated).
//! * `active_jobs` is a queue's `active` gauge now (kept by the scripts, O(1) per queue).
//! * a pool's figures sum its queues' (a queue in two pools counts in both; a job claimed by a worker
//!   that named no pool counts too: pools share queues, not jobs).

use std::collections::BTreeMap;

use axum::extract::State;
use axum::response::Response;
use ojs_core::clock;
use ojs_core::event::EventType;
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::ApiResult;
use crate::pools::{Pool, PoolStrategy, MAX_POOLS};
use crate::respond::ok;
use crate::schemas::OJS_MEDIA_TYPE;
use crate::state::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(stats))
}

/// Most events one request reads (newest first).
pub const MAX_EVENTS: usize = 20_000;
const WINDOW_MS: i64 = 60_000;

/// The last minute's dispatches by queue and pool.
#[derive(Serialize, ToSchema)]
struct SchedulingStats {
    /// The window the dispatch counts cover (ISO 8601): the last minute.
    window: &'static str,
    stats: Totals,
    /// Queues with a dispatch in the window or an active job now, by name.
    queues: Vec<QueueDispatch>,
    /// Every pool, by name.
    pools: Vec<PoolDispatch>,
    #[schema(format = DateTime)]
    server_time: String,
}

/// Over every queue.
#[derive(Serialize, ToSchema)]
struct Totals {
    /// Jobs claimed by workers in the window (`job.started` events).
    dispatch_count_1m: u64,
    /// Jobs active now.
    active_jobs: u64,
    /// False when the window held more than the events one request reads: the counts then start at
    /// `counted_from` (a lower bound).
    complete: bool,
    #[schema(format = DateTime)]
    counted_from: String,
}

/// One queue's share.
#[derive(Serialize, ToSchema)]
struct QueueDispatch {
    name: String,
    dispatch_count_1m: u64,
    /// This queue's dispatches / all dispatches in the window (0 when there were none), 4 decimals.
    dispatch_ratio_1m: f64,
    active_jobs: u64,
}

/// One pool's share: the sums over its queues.
#[derive(Serialize, ToSchema)]
struct PoolDispatch {
    name: String,
    strategy: PoolStrategy,
    dispatch_count_1m: u64,
    dispatch_ratio_1m: f64,
    active_jobs: u64,
}

fn ratio(n: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        (n as f64 / total as f64 * 10_000.0).round() / 10_000.0
    }
}

#[utoipa::path(
    get,
    path = "/ojs/v1/admin/scheduling/stats",
    tag = "admin",
    summary = "Dispatches of the last minute by queue and pool (from the event stream), with their ratios and the active jobs",
    responses((status = 200, description = "OK", body = SchedulingStats, content_type = OJS_MEDIA_TYPE))
)]
async fn stats(State(st): State<AppState>) -> ApiResult<Response> {
    let now = st.shards.now_ms().await?;
    let from = now - WINDOW_MS;
    let events = crate::events_hub::events_latest(&st, MAX_EVENTS, Some(from)).await?;
    let complete = events.len() < MAX_EVENTS;
    let mut dispatched: BTreeMap<String, u64> = BTreeMap::new();
    for (id, e) in &events {
        let at = crate::events_hub::position(id).0 as i64;
        if at < from || at > now {
            continue;
        }
        if e.kind() == Some(EventType::JobStarted) {
            let q = e.queue.clone();
            *dispatched.entry(q).or_default() += 1;
        }
    }
    // Newest first: when the read was cut, the last event read is the oldest counted.
    let counted_from = match events.last() {
        Some((id, _)) if !complete => (crate::events_hub::position(id).0 as i64).max(from),
        _ => from,
    };
    let total: u64 = dispatched.values().sum();

    let names = st.shards.queue_names().await?;
    let counts = st.shards.queue_counts(&names).await?;
    let active: BTreeMap<&str, u64> = counts.iter().map(|c| (c.name.as_str(), c.jobs.active)).collect();
    let mut listed: Vec<&str> = active
        .iter()
        .filter(|(_, a)| **a > 0)
        .map(|(q, _)| *q)
        .chain(dispatched.keys().map(String::as_str))
        .collect();
    listed.sort_unstable();
    listed.dedup();
    let queues = listed
        .iter()
        .map(|q| {
            let n = dispatched.get(*q).copied().unwrap_or(0);
            QueueDispatch {
                name: q.to_string(),
                dispatch_count_1m: n,
                dispatch_ratio_1m: ratio(n, total),
                active_jobs: active.get(q).copied().unwrap_or(0),
            }
        })
        .collect();

    let (_, stored) = st.shards.first().pool_list(MAX_POOLS).await?;
    let pools = stored
        .iter()
        .filter_map(|(n, f)| Pool::from_fields(n, f).ok())
        .map(|p| {
            let (mut n, mut a) = (0, 0);
            for (q, _) in &p.def.queues {
                n += dispatched.get(q).copied().unwrap_or(0);
                a += active.get(q.as_str()).copied().unwrap_or(0);
            }
            PoolDispatch {
                name: p.name.clone(),
                strategy: p.def.strategy,
                dispatch_count_1m: n,
                dispatch_ratio_1m: ratio(n, total),
                active_jobs: a,
            }
        })
        .collect();

    Ok(ok(SchedulingStats {
        window: "PT1M",
        stats: Totals {
            dispatch_count_1m: total,
            active_jobs: counts.iter().map(|c| c.jobs.active).sum(),
            complete,
            counted_from: clock::format_ms(counted_from),
        },
        queues,
        pools,
        server_time: clock::format_ms(now),
    }))
}
