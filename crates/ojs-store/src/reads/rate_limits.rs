//! Rate-limit listings and a queue's own limit (the per-key state: ops/rl_inspect.rs).

use ojs_core::ratelimit::Window;

use crate::store::{redis_now_ms, Result, Store};

impl Store {
    /// Rate-limit keys in lexicographic order: (total, page).
    pub async fn rate_limit_keys(&self, offset: u64, limit: u64) -> Result<(u64, Vec<String>)> {
        self.page(&self.keys().rl_keys(), offset, limit, false).await
    }

    /// The shard a rate-limit key is bound to in a deployment of several shards (`lua/place-1.lua`), read
    /// from shard 0's directory; `None` when no job has bound it.
    pub async fn rate_limit_key_home(&self, key: &str) -> Result<Option<usize>> {
        let mut conn = self.conn().await?;
        let home = crate::keys::Keys::new(&self.cfg.namespace).rl_home();
        Ok(redis::cmd("HGET").arg(home).arg(key).query_async(&mut conn).await?)
    }

    /// A queue's own limits and their use now.
    pub async fn queue_rate_limit(&self, queue: &str) -> Result<QueueLimitState> {
        let mut conn = self.conn().await?;
        let f: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(self.keys().queue_conf(queue))
            .arg("rl_concurrency")
            .arg("rl_rate_limit")
            .arg("rl_rate_period")
            .arg("want")
            .arg("want_gen")
            .arg("pool_gen")
            .query_async(&mut conn)
            .await?;
        // Floors owed in an earlier pool of the queue are owed no more (lua/includes/rl_pool.lua
        // Pool.owed: their generation is not the queue's pool_gen).
        let stale = f.get(4).cloned().flatten().unwrap_or_default() != f.get(5).cloned().flatten().unwrap_or_default();
        // Limits are u64 (up to the largest the PUT accepts); `want` is a counter (HINCRBY), never
        // below 0 once every part is synced.
        let f: Vec<Option<u64>> = f
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let v = v.as_deref()?;
                match i {
                    3 => v.parse::<i64>().ok().map(|n| n.max(0) as u64),
                    _ => v.parse::<u64>().ok(),
                }
            })
            .collect();
        let now = redis_now_ms(&mut conn, self.keys()).await?;
        let rate = match (f.get(1).copied().flatten(), f.get(2).copied().flatten()) {
            (Some(limit), Some(period_ms)) => Some(Window { limit, period_ms }),
            _ => None,
        };
        let active: u64 = redis::cmd("ZCOUNT")
            .arg(self.keys().queue_rl_active(queue))
            .arg(format!("({now}"))
            .arg("+inf")
            .query_async(&mut conn)
            .await?;
        let in_window: u64 = match rate {
            Some(w) => {
                redis::cmd("ZCOUNT")
                    .arg(self.keys().queue_rl_win(queue))
                    .arg(now - w.period_ms as i64)
                    .arg("+inf")
                    .query_async(&mut conn)
                    .await?
            }
            None => 0,
        };
        Ok(QueueLimitState {
            concurrency: f.first().copied().flatten(),
            rate,
            active,
            in_window,
            owed: if stale {
                0
            } else {
                f.get(3).copied().flatten().unwrap_or(0)
            },
        })
    }
}

/// A queue's own limits (`PUT /admin/queues/{q}/rate-limit`) and their use now.
#[derive(Debug, Clone, Default)]
pub struct QueueLimitState {
    pub concurrency: Option<u64>,
    pub rate: Option<Window>,
    /// Jobs holding one of the queue's slots now, and starts in its current window.
    pub active: u64,
    pub in_window: u64,
    /// The floors its pool owes to keys below theirs (burstable concurrency, ours: the conf's 'want').
    pub owed: u64,
}
