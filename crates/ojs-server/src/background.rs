//! The timers every API node runs: promote due scheduled/retryable jobs, and take back jobs whose
//! lease expired. Each step is one Lua script that only moves a job that is still where it expects,
//! so any number of nodes can run them at once without double work or lost jobs.

use std::time::Duration;

use tokio::sync::watch;
use tracing::warn;

use crate::state::AppState;

const BATCH: u32 = 1_000;

/// Runs every `tick_ms`, or sooner when a scheduled job or a parked rate-limit lane is due before the
/// next tick (so a throttle's next start or a delayed job is not late by up to a tick).
pub async fn run(st: AppState, mut shutdown: watch::Receiver<bool>) {
    let tick = Duration::from_millis(st.config.tick_ms.max(crate::config::bounds::TICK_MS.min));
    let mut failing = false;
    let mut sleep = tick;
    // An older keyspace (key schema v1 or v2) is upgraded once, before the first round (jobs are served
    // meanwhile: the scripts read older jobs as they are); retried each round until Redis answers.
    let mut upgraded = false;
    let mut round: u64 = 0;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(sleep) => {}
            _ = shutdown.changed() => {}
        }
        if *shutdown.borrow() {
            return;
        }
        sleep = tick;
        if !st.shards.tags_known() {
            // A cluster's shards are visited only once their tags are known (shards.rs).
            if let Err(e) = st.shards.refresh().await {
                if !failing {
                    warn!(error = %e, "the shards' hash tags are not known yet; will keep retrying");
                }
                failing = true;
                continue;
            }
        }
        if !upgraded {
            // Shard 0 holds the version; the jobs of every shard are converted.
            match st.shards.first().upgrade_schema(st.shards.all()).await {
                Ok(_) => upgraded = true,
                Err(e) => {
                    if !failing {
                        warn!(error = %e, "key schema upgrade failed; will keep retrying");
                    }
                    failing = true;
                    continue;
                }
            }
        }
        round += 1;
        match step(&st, round).await {
            Ok(Some(due_in_ms)) => {
                failing = false;
                sleep = tick.min(Duration::from_millis(due_in_ms.clamp(2, 1_000) as u64));
            }
            Ok(None) => failing = false,
            Err(e) => {
                // Log once per outage, not once per tick.
                if !failing {
                    warn!(error = %e, "background step failed; will keep retrying");
                }
                failing = true;
            }
        }
    }
}

/// One round of the timers on every shard; returns how soon (ms, measured on Redis' clock) the next
/// scheduled job, lane wake or cron tick is due.
async fn step(st: &AppState, round: u64) -> Result<Option<i64>, ojs_store::StoreError> {
    // Learn of shards another pod added (about once a second; the count only grows).
    if round % REFRESH_ROUNDS == 0 {
        st.shards.refresh().await?;
    }
    let mut soonest: Option<i64> = None;
    for store in st.shards.all() {
        if let Some(due) = step_shard(st, store).await? {
            soonest = Some(soonest.map_or(due, |s| s.min(due)));
        }
    }
    Ok(soonest)
}

/// How many rounds pass between two reads of the deployment's number of shards.
const REFRESH_ROUNDS: u64 = 10;

/// One round of the timers of one shard: promotion, lease reclaim, cron.
async fn step_shard(st: &AppState, store: &ojs_store::Store) -> Result<Option<i64>, ojs_store::StoreError> {
    let next_due = loop {
        let (moved, next) = store.promote(BATCH).await?;
        if moved < u64::from(BATCH) {
            break next;
        }
    };
    loop {
        let (requeued, failed) = store.requeue_expired(BATCH).await?;
        if requeued + failed < u64::from(BATCH) {
            break;
        }
    }
    let cron_due = crate::cron::fire_due(st, store).await?;
    // Both ends of every interval come from Redis TIME: a pod whose clock is off sleeps just as long.
    Ok(match (next_due, cron_due) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    })
}
