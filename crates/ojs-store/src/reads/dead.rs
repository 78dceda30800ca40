//! The dead letter set.

use crate::store::{Result, Store, StoredJob};

impl Store {
    /// Dead-lettered jobs, newest first: (total, page of jobs).
    pub async fn dead_list(&self, offset: u64, limit: u64) -> Result<(u64, Vec<StoredJob>)> {
        let (total, ids) = self.page(&self.keys().dead(), offset, limit, true).await?;
        let jobs = self.jobs(&ids).await?;
        Ok((total, jobs.into_iter().flatten().collect()))
    }

    pub async fn is_dead(&self, id: &str) -> Result<bool> {
        let mut conn = self.conn().await?;
        let score: Option<f64> = redis::cmd("ZSCORE")
            .arg(self.keys().dead())
            .arg(id)
            .query_async(&mut conn)
            .await?;
        Ok(score.is_some())
    }

    /// The dead letter set's size and its oldest and newest death times (ms): O(log n).
    pub async fn dead_summary(&self) -> Result<(u64, Option<i64>, Option<i64>)> {
        let mut conn = self.conn().await?;
        let mut pipe = redis::pipe();
        pipe.cmd("ZCARD").arg(self.keys().dead());
        pipe.cmd("ZRANGE")
            .arg(self.keys().dead())
            .arg(0)
            .arg(0)
            .arg("WITHSCORES");
        pipe.cmd("ZRANGE")
            .arg(self.keys().dead())
            .arg(0)
            .arg(0)
            .arg("REV")
            .arg("WITHSCORES");
        type Scored = Vec<(String, f64)>;
        let (total, oldest, newest): (u64, Scored, Scored) = pipe.query_async(&mut conn).await?;
        let ms = |v: &[(String, f64)]| v.first().map(|(_, s)| *s as i64);
        Ok((total, ms(&oldest), ms(&newest)))
    }
}
