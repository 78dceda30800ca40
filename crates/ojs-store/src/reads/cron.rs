//! Cron entries (written by cron-set-1.lua and cron-delete-1.lua; the cron tick: ops/enqueue.rs).

use crate::store::{Fields, Result, Store};

impl Store {
    pub async fn cron_get(&self, name: &str) -> Result<Option<Fields>> {
        self.hash(self.keys().cron(name)).await
    }

    /// Cron entries in name order: (total, page of (name, entry)).
    pub async fn cron_list(&self, offset: u64, limit: u64) -> Result<(u64, Vec<(String, Fields)>)> {
        let (total, names) = self.page(&self.keys().crons(), offset, limit, false).await?;
        let mut conn = self.conn().await?;
        self.cron_entries(&mut conn, names).await.map(|e| (total, e))
    }

    /// Entries whose next_run_at is at or before Redis' clock, up to `limit`, and when the next one is
    /// due: (Redis now, due entries, next due ms). One round trip when nothing is due (the timer's usual
    /// case: Redis TIME and the earliest entries in one pipeline), two when something is.
    pub async fn cron_due(&self, limit: usize) -> Result<(i64, Vec<(String, Fields)>, Option<i64>)> {
        let mut conn = self.conn().await?;
        let limit = limit.max(1);
        let (time, first): (Vec<String>, Vec<(String, f64)>) = redis::pipe()
            .cmd("TIME")
            .cmd("ZRANGE")
            .arg(self.keys().cron_due())
            .arg(0)
            .arg(limit - 1)
            .arg("WITHSCORES")
            .query_async(&mut conn)
            .await?;
        let part = |i: usize| time.get(i).and_then(|s| s.parse::<i64>().ok()).unwrap_or(0);
        let now = part(0) * 1000 + part(1) / 1000;
        let (due, later): (Vec<_>, Vec<_>) = first.into_iter().partition(|(_, at)| *at as i64 <= now);
        let next = match later.first() {
            Some((_, at)) => Some(*at as i64),
            // A full batch of due entries: more may be due right away.
            None if due.len() == limit => Some(now),
            None => None,
        };
        let names = due.into_iter().map(|(n, _)| n).collect();
        let entries = self.cron_entries(&mut conn, names).await?;
        Ok((now, entries, next))
    }

    async fn cron_entries(&self, conn: &mut crate::conn::Conn, names: Vec<String>) -> Result<Vec<(String, Fields)>> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for n in &names {
            pipe.cmd("HGETALL").arg(self.keys().cron(n));
        }
        let maps: Vec<Fields> = pipe.query_async(conn).await?;
        Ok(names.into_iter().zip(maps).filter(|(_, m)| !m.is_empty()).collect())
    }
}
