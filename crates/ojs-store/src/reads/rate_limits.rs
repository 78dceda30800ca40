//! Rate-limit listings and a queue's own limit (the per-key state: ops/rl_inspect.rs).

use ojs_core::ratelimit::Window;

use crate::store::{redis_now_ms, Result, Store};

impl Store {
    /// Rate-limit keys in lexicographic order: (total, page).
    pub async fn rate_limit_keys(&self, offset: u64, limit: u64) -> Result<(u64, Vec<String>)> {
        self.page(&self.keys.rl_keys(), offset, limit, false).await
    }

    /// The shard a rate-limit key is bound to in a deployment of several shards (`lua/place-1.lua`), read
    /// from shard 0's directory; `None` when no job has bound it.
    pub async fn rate_limit_key_home(&self, key: &str) -> Result<Option<usize>> {
        let mut conn = self.conn().await?;
        let home = crate::keys::Keys::new(&self.cfg.namespace).rl_home();
        Ok(redis::cmd("HGET").arg(home).arg(key).query_async(&mut conn).await?)
    }

    /// (concurrency, rate, active now, starts in the current window).
    pub async fn queue_rate_limit(&self, queue: &str) -> Result<(Option<u64>, Option<Window>, u64, u64)> {
        let mut conn = self.conn().await?;
        let f: Vec<Option<u64>> = redis::cmd("HMGET")
            .arg(self.keys.queue_conf(queue))
            .arg("rl_concurrency")
            .arg("rl_rate_limit")
            .arg("rl_rate_period")
            .query_async(&mut conn)
            .await?;
        let now = redis_now_ms(&mut conn, &self.keys).await?;
        let rate = match (f.get(1).copied().flatten(), f.get(2).copied().flatten()) {
            (Some(limit), Some(period_ms)) => Some(Window { limit, period_ms }),
            _ => None,
        };
        let active: u64 = redis::cmd("ZCOUNT")
            .arg(self.keys.queue_rl_active(queue))
            .arg(format!("({now}"))
            .arg("+inf")
            .query_async(&mut conn)
            .await?;
        let in_window: u64 = match rate {
            Some(w) => {
                redis::cmd("ZCOUNT")
                    .arg(self.keys.queue_rl_win(queue))
                    .arg(now - w.period_ms as i64)
                    .arg("+inf")
                    .query_async(&mut conn)
                    .await?
            }
            None => 0,
        };
        Ok((f.first().copied().flatten(), rate, active, in_window))
    }
}
