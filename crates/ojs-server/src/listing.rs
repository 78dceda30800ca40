//! Job listings over the indexes, their filters and their pagination: the admin API's job listing and
//! bulk actions, the dead letter, cron entries and workflows page through them.
//!
//! Listing reads the indexes the scripts already keep, never the keyspace (there is no SCAN here):
//!
//! | filter | index read | cost per request |
//! |---|---|---|
//! | `state=available` (+ `queue`) | that queue's ready set, then its tenants' (by tenant id), then its and their rate-limit lanes (by key) | O(tenants + lanes), pipelined, + O(log n + page) |
//! | `state=available` (no queue) | every queue's, in name order | O(queues + tenants + lanes) ZCARDs, pipelined per shard, + O(log n + page) |
//! | `state=active` | `P active` (by lease deadline) | O(log n + page) |
//! | `state=discarded` | `P dead` (dead-lettered jobs, newest first), then each queue's ended index | O(log n + page), then as below |
//! | `state=completed` or `cancelled` | each queue's `P q:<queue>:ended` (newest first; `lua/includes/ended.lua`), each entry's state read | O(queues) + O(entries walked) |
//! | `state=scheduled` or `retryable` | `P scheduled` (both states share it), each entry's state read | O(entries walked) |
//! | no `state` | all of the above, in that order | sum of the above |
//! | `queue` on a shared index, or `type` | each walked entry's hash fields read (HMGET, pipelined) | O(entries walked) |
//!
//! A walk reads at most [`MAX_EXAMINE`] index entries per request; past that the answer says
//! `"total_exact": false` and `total` counts what was examined. Ended jobs (completed, cancelled, and
//! discarded without the dead letter) are listed while their queue's ended index keeps them: the last
//! 10,000 by default, bounded by `PUT /admin/queues/{q}/retention` and the records' retention. Available jobs
//! waiting in a rate-limit lane (behind its head, or a parked lane's head) are listed after the ready
//! sets, lane by lane, as the queue's counts count them. Entries are walked in pages while other requests change the
//! indexes, so a job that moves during a walk can be missed or seen twice: an operator view, not a snapshot.

use ojs_core::job::{job_view, JobView};
use ojs_core::{names, OjsError};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::error::ApiResult;
use crate::schemas::JobState;
use crate::state::AppState;

/// Most index entries one listing or bulk request examines.
pub const MAX_EXAMINE: u64 = 100_000;
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
    /// Listed: available, active, scheduled, retryable, discarded, completed, cancelled (the ended ones
    /// as long as their queue's retention keeps them).
    #[serde(default, deserialize_with = "filter_state")]
    #[schema(value_type = Option<JobState>, nullable = false)]
    #[param(value_type = Option<JobState>)]
    pub state: Option<JobState>,
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
            state: q.get("state").map(|s| state_named(s)).transpose()?,
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

/// A filter's `state`, by name; an unknown name is a 400 that lists the states.
fn state_named(s: &str) -> Result<JobState, OjsError> {
    s.parse().map_err(|_| {
        OjsError::invalid(format!(
            "state must be one of {}; got {s:?}",
            ojs_core::job::STATES.join(", ")
        ))
    })
}

/// A bulk body's `filter.state`, read as [`state_named`] reads a query's.
fn filter_state<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<JobState>, D::Error> {
    Option::<String>::deserialize(d)?
        .map(|s| state_named(&s).map_err(|e| serde::de::Error::custom(e.message)))
        .transpose()
}

/// One index a listing reads: its key, its order, the state its entries must have (None: any; the
/// index implies it), and the queue its membership implies (ready sets).
pub struct Segment {
    /// The shard whose index this is.
    shard: usize,
    key: String,
    rev: bool,
    state: Option<JobState>,
    queue: Option<String>,
}

/// The indexes that hold jobs of `states` (None = every indexed state), narrowed to `queue` where the
/// index is per queue. A state that no index holds is refused.
pub async fn segments(
    st: &AppState,
    f: &JobFilter,
    states: &[JobState],
) -> Result<Vec<Segment>, crate::error::ApiError> {
    let wanted: Vec<JobState> = match f.state {
        Some(s) => match states.iter().find(|x| **x == s) {
            Some(x) => vec![*x],
            None => {
                return Err(OjsError::invalid(format!(
                    "this operation applies to jobs in states {}; got {:?}",
                    states.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "),
                    s.as_str()
                ))
                .into())
            }
        },
        None => states.to_vec(),
    };
    let mut out = Vec::new();
    for &s in &wanted {
        if s == JobState::Available {
            let (queues, at) = queues_at(st, f).await?;
            // Each queue's ready set, then its tenants' sub-queues' (lua/includes/tenant.lua) by tenant
            // id, then the rate-limit lanes of all of them (ratelimit.lua): every available job, as the
            // queue's counts count them. Two pipelines per shard.
            let mut subs: Vec<Vec<String>> = vec![Vec::new(); queues.len()];
            for store in st.shards.all() {
                let mine: Vec<usize> = (0..queues.len()).filter(|i| at[*i] == store.shard_index()).collect();
                if mine.is_empty() {
                    continue;
                }
                let names: Vec<String> = mine.iter().map(|i| queues[*i].clone()).collect();
                for (i, keys) in mine.into_iter().zip(store.waiting_sets(&names).await?) {
                    subs[i] = keys;
                }
            }
            for ((q, shard), subs) in queues.into_iter().zip(at).zip(subs) {
                let store = st.shards.get(shard);
                for key in std::iter::once(store.keys().queue_ready(&q)).chain(subs) {
                    out.push(Segment {
                        shard,
                        key,
                        rev: false,
                        state: None,
                        queue: Some(q.clone()),
                    });
                }
            }
            continue;
        }
        // The other indexes are one per shard.
        for store in st.shards.all() {
            let (shard, k) = (store.shard_index(), store.keys());
            match s {
                JobState::Active => out.push(Segment {
                    shard,
                    key: k.active(),
                    rev: false,
                    state: None,
                    queue: None,
                }),
                JobState::Discarded => out.push(Segment {
                    shard,
                    key: k.dead(),
                    rev: true,
                    state: None,
                    queue: None,
                }),
                JobState::Scheduled | JobState::Retryable => {
                    // Both live in P scheduled: with only one of them asked for, each entry's state is read.
                    let both = f.state.is_none()
                        && states.contains(&JobState::Scheduled)
                        && states.contains(&JobState::Retryable);
                    if both && s == JobState::Retryable {
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
    // Ended jobs (lua/includes/ended.lua): each queue's ended index, newest first, after the others. A
    // listing that takes completed jobs also finds there the discarded ones that skipped the dead letter.
    let ended_too = states.contains(&JobState::Completed);
    let ended: Vec<JobState> = wanted
        .iter()
        .copied()
        .filter(|s| matches!(s, JobState::Completed | JobState::Cancelled) || (*s == JobState::Discarded && ended_too))
        .collect();
    if let Some(&first) = ended.first() {
        // Unfiltered, every entry of the index matches (it holds only ended jobs).
        let state = f.state.map(|_| first);
        let (queues, at) = queues_at(st, f).await?;
        for (q, shard) in queues.into_iter().zip(at) {
            out.push(Segment {
                shard,
                key: st.shards.get(shard).keys().queue_ended(&q),
                rev: true,
                state,
                queue: Some(q),
            });
        }
    }
    Ok(out)
}

/// The queues a filter names (its queue, else every queue, in name order) and the shard of each.
async fn queues_at(st: &AppState, f: &JobFilter) -> Result<(Vec<String>, Vec<usize>), crate::error::ApiError> {
    let queues = match &f.queue {
        Some(q) => vec![q.clone()],
        None => st.shards.queue_names().await?,
    };
    let names: Vec<&str> = queues.iter().map(String::as_str).collect();
    let at = st.shards.find_queues(&names).await?;
    Ok((queues, at))
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
    let filtered =
        |seg: &Segment| seg.state.is_some() || (f.queue.is_some() && seg.queue.is_none()) || f.job_type.is_some();
    // The sizes of the segments whose every entry matches, one pipeline per shard (a queue of many
    // tenants and lanes has as many segments).
    let mut lens = vec![0u64; segs.len()];
    for store in st.shards.all() {
        let mine: Vec<usize> = (0..segs.len())
            .filter(|&i| segs[i].shard == store.shard_index() && !filtered(&segs[i]))
            .collect();
        let keys: Vec<&str> = mine.iter().map(|&i| segs[i].key.as_str()).collect();
        for (i, n) in mine.into_iter().zip(store.index_lens(&keys).await?) {
            lens[i] = n;
        }
    }
    for (seg, &n) in segs.iter().zip(&lens) {
        let store = st.shards.get(seg.shard);
        let queue_ok = |q: Option<&str>| f.queue.as_deref().is_none_or(|want| q == Some(want));
        if !filtered(seg) {
            // Every entry matches: count it, and read only the part of the window it holds.
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
            let jobs = store.jobs_partial(&chunk, &["state", "queue", "type"]).await?;
            for (id, j) in chunk.into_iter().zip(jobs) {
                let Some(j) = j else { continue };
                let ok = j.state.is_some()
                    && seg.state.is_none_or(|s| j.state == Some(s))
                    && (seg.queue.is_some() || queue_ok(j.queue.as_deref()))
                    && f.type_matches(j.job_type.as_deref());
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

/// The job with this id as stored now, from whichever shard holds it, or a 404.
pub async fn job(st: &AppState, id: &str) -> ApiResult<ojs_core::StoredJob> {
    Ok(st
        .shards
        .get_job(id)
        .await?
        .ok_or_else(|| OjsError::not_found("job", id))?)
}

/// The jobs with these ids as the API shows them (jobs gone meanwhile are left out).
pub async fn views(st: &AppState, ids: &[String]) -> ApiResult<Vec<JobView>> {
    Ok(st.shards.jobs(ids).await?.iter().flatten().map(job_view).collect())
}
