//! Workers' records (written by heartbeat-1.lua) and the operator's signal to one.

use crate::store::{Fields, Result, Store};

/// How long a worker's record (and its entry in `P workers`) outlives its last heartbeat.
pub const WORKER_TTL_MS: u64 = 24 * 3600 * 1000;

impl Store {
    /// A worker's record (`P worker:<id>`: last_seen, state, signal, jobs), None when unknown or expired.
    pub async fn worker_record(&self, worker_id: &str) -> Result<Option<Fields>> {
        self.hash(self.keys().worker(worker_id)).await
    }

    /// Workers that sent a heartbeat within [`WORKER_TTL_MS`], most recent first: (total, page of (id,
    /// record)). One ZCARD and ZRANGE, then one HGETALL per worker on the page (two round trips).
    pub async fn workers_page(&self, offset: u64, limit: u64) -> Result<(u64, Vec<(String, Fields)>)> {
        let key = self.keys().workers();
        let (total, ids) = self.page(&key, offset, limit, true).await?;
        let recs = self.hashes(ids.iter().map(|id| self.keys().worker(id))).await?;
        Ok((
            total,
            ids.into_iter().zip(recs).filter(|(_, r)| !r.is_empty()).collect(),
        ))
    }

    /// The operator's directive for a worker, returned by its next heartbeat (None clears it).
    pub async fn set_worker_signal(&self, worker_id: &str, signal: Option<&str>) -> Result<()> {
        self.set_field(&self.keys().worker(worker_id), "signal", signal.map(str::to_owned))
            .await
    }

    /// Sets one hash field, or deletes it for `None`.
    async fn set_field(&self, key: &str, field: &str, value: Option<String>) -> Result<()> {
        let mut conn = self.conn().await?;
        let _: () = match value {
            Some(v) => {
                redis::cmd("HSET")
                    .arg(key)
                    .arg(field)
                    .arg(v)
                    .query_async(&mut conn)
                    .await?
            }
            None => redis::cmd("HDEL").arg(key).arg(field).query_async(&mut conn).await?,
        };
        Ok(())
    }
}
