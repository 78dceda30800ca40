//! The jobs' writes routed over the shards: one job on its queue's shard (coalesced with this node's
//! other single enqueues), and a batch, in one script call when its jobs live on one shard, else one
//! call per shard. The route handlers (`routes/jobs.rs`) validate requests and render answers; which
//! shards serve a write and how their replies merge is decided here and in `shards.rs`.

use ojs_core::job::NewJob;
use ojs_core::OjsError;
use ojs_store::{EnqueueOutcome, Enqueued, Pressure};
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// How often a blocked enqueue looks for room again.
const BLOCK_RECHECK: std::time::Duration = std::time::Duration::from_millis(50);

/// Writes one job (`POST /jobs`) on its queue's shard, through this node's coalesced enqueues (one script
/// call for the concurrent single enqueues of a shard: see `coalesce`), waiting for room in a full
/// queue while `block` allows.
pub(crate) async fn store_one(
    st: &AppState,
    job: &mut NewJob,
    block: Option<tokio::time::Instant>,
) -> ApiResult<crate::coalesce::Single> {
    // `placed` holds the claim on a client-chosen id until the job is written.
    let placed = st.shards.place_jobs(std::slice::from_mut(job)).await?;
    let shard = placed[0];
    // The tenant its queue's tenancy setting gives it, checked here so that a bad one is this request's
    // 400, not the coalesced call's (the store resolves it again in the call: ojs-store tenancy.rs).
    st.shards.get(shard).resolve_tenants(std::slice::from_ref(job)).await?;
    // Its args against its type's schema (the registry), likewise: a refusal is this request's 400.
    st.shards.get(shard).check_args(std::slice::from_ref(job)).await?;
    let out = loop {
        let out = st.enqueues(shard).call(job.clone()).await?;
        match (out.state.as_str(), &out.pressure) {
            ("full", Some(p)) => wait_for_room(p, block).await?,
            _ => break out,
        }
    };
    placed.release().await;
    Ok(out)
}

/// The tenants the jobs' queues' tenancy settings give them are checked on every shard before any
/// shard writes (a batch over several shards is written shard by shard): a refused one is a 400 naming
/// the job's index in the batch and the field.
async fn check_tenants(st: &AppState, jobs: &[NewJob], at: &[usize]) -> ApiResult<()> {
    let mut shards = at.to_vec();
    shards.sort_unstable();
    shards.dedup();
    for s in shards {
        let idx: Vec<usize> = (0..jobs.len()).filter(|i| at[*i] == s).collect();
        let part: std::borrow::Cow<[NewJob]> = if idx.len() == jobs.len() {
            jobs.into()
        } else {
            idx.iter().map(|i| jobs[*i].clone()).collect::<Vec<_>>().into()
        };
        if let Err((i, m)) = st.shards.get(s).resolve_tenants_checked(&part).await? {
            let i = idx[i];
            return Err(OjsError::invalid(format!("jobs[{i}]: {m}"))
                .with_details(json!({ "index": i }))
                .into());
        }
    }
    Ok(())
}

/// Writes a batch: in one script call when its jobs live on one shard (all or nothing), else one call
/// per shard in shard order, each all or nothing (a refusal names the jobs earlier shards wrote).
pub(crate) async fn store_jobs(
    st: &AppState,
    jobs: &mut [NewJob],
    block: Option<tokio::time::Instant>,
) -> ApiResult<Enqueued> {
    // `at` holds the claims on client-chosen ids until the jobs are written.
    let at = st.shards.place_jobs(jobs).await?;
    check_tenants(st, jobs, &at).await?;
    // Every job's args against its type's schema, before any shard writes (the registry is the
    // deployment's: one check of the whole batch names the job's index in it).
    st.shards.first().check_args(jobs).await?;
    let first = at[0];
    if at.iter().all(|s| *s == first) {
        let out = store_part(st, first, jobs, block).await;
        at.release().await;
        return out;
    }
    let mut shards = at.to_vec();
    shards.sort_unstable();
    shards.dedup();
    let mut all = Enqueued {
        now_ms: 0,
        states: vec![String::new(); jobs.len()],
        pressure: Vec::new(),
        existing: vec![None; jobs.len()],
    };
    let mut written: Vec<&str> = Vec::new();
    for s in shards {
        let idx: Vec<usize> = (0..jobs.len()).filter(|i| at[*i] == s).collect();
        let part: Vec<NewJob> = idx.iter().map(|i| jobs[*i].clone()).collect();
        let e = match store_part(st, s, &part, block).await {
            Ok(e) => e,
            Err(ApiError(mut e)) if !written.is_empty() => {
                let mut details = e.details.take().unwrap_or_else(|| json!({}));
                if let Some(i) = details.get("index").and_then(Value::as_u64) {
                    details["index"] = json!(idx[i as usize]);
                }
                details["written_ids"] = json!(written);
                e.message = format!(
                    "{} ({} jobs of the batch on other shards were written; details.written_ids lists them)",
                    e.message,
                    written.len()
                );
                return Err(e.with_details(details).into());
            }
            Err(e) => return Err(e),
        };
        all.now_ms = all.now_ms.max(e.now_ms);
        all.pressure.extend(e.pressure);
        for ((i, state), existing) in idx.iter().zip(e.states).zip(e.existing) {
            all.states[*i] = state;
            all.existing[*i] = existing;
        }
        written.extend(idx.iter().map(|i| jobs[*i].id.as_str()));
    }
    at.release().await;
    Ok(all)
}

/// Writes jobs that all live on shard `shard` in one script call.
async fn store_part(
    st: &AppState,
    shard: usize,
    jobs: &[NewJob],
    block: Option<tokio::time::Instant>,
) -> ApiResult<Enqueued> {
    loop {
        match st.shards.get(shard).enqueue(jobs).await? {
            EnqueueOutcome::Created(e) => {
                for (j, state) in jobs.iter().zip(&e.states) {
                    if written(state) {
                        crate::metrics::job_event("enqueued", &j.queue, &j.job_type);
                    }
                }
                return Ok(e);
            }
            EnqueueOutcome::Duplicate(id) => return Err(OjsError::duplicate_id(&id).into()),
            EnqueueOutcome::Conflict {
                index,
                existing_id,
                existing_state,
                existing_index,
            } => {
                let key = jobs
                    .get(index)
                    .and_then(|j| j.unique.as_ref().map(|u| j.scoped(&u.key)))
                    .unwrap_or_default();
                let e = OjsError::unique_conflict(&existing_id, &existing_state, &key);
                let mut details = e.details.clone().unwrap_or_default();
                details["index"] = json!(index);
                if let Some(i) = existing_index {
                    details["existing_index"] = json!(i);
                }
                let message = match existing_index {
                    Some(i) => format!("jobs[{index}]: it has the uniqueness key of jobs[{i}] of this batch (options.unique.on_conflict is reject)"),
                    None => format!("jobs[{index}]: {}", e.message),
                };
                return Err(OjsError { message, ..e }.with_details(details).into());
            }
            EnqueueOutcome::Full(p) => wait_for_room(&p, block).await?,
        }
    }
}

/// Whether an enqueue state means the job was written.
pub(crate) fn written(state: &str) -> bool {
    matches!(state, "available" | "scheduled")
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
