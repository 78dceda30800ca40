//! Sorted indexes read by page (the admin listings) and hashes read in one pipeline.

use super::rank_range;
use crate::store::{Fields, Result, Store};

/// ZRANGE of `count` members from rank `offset` (descending when `rev`). Ranks past i64::MAX are refused
/// by Redis: they are clamped (such a page is empty).
fn zrange(key: &str, offset: u64, count: u64, rev: bool) -> redis::Cmd {
    let (first, last) = rank_range(offset, count);
    let mut cmd = redis::cmd("ZRANGE");
    cmd.arg(key).arg(first).arg(last);
    if rev {
        cmd.arg("REV");
    }
    cmd
}

impl Store {
    /// The sizes of several sorted indexes of this shard, in one pipeline.
    pub async fn index_lens(&self, keys: &[&str]) -> Result<Vec<u64>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for k in keys {
            pipe.cmd("ZCARD").arg(*k);
        }
        let mut conn = self.conn().await?;
        Ok(pipe.query_async(&mut conn).await?)
    }

    /// Members `offset .. offset + count` of a sorted index (descending when `rev`), as job ids: a
    /// ready-set member (FIFO sequence + id) is cut to its last 36 bytes, the id.
    pub async fn index_ids(&self, key: &str, offset: u64, count: u64, rev: bool) -> Result<Vec<String>> {
        if count == 0 {
            return Ok(Vec::new());
        }
        let mut conn = self.conn().await?;
        let members: Vec<String> = zrange(key, offset, count, rev).query_async(&mut conn).await?;
        Ok(members
            .into_iter()
            .map(|m| match m.len() {
                n if n > 36 && m.is_char_boundary(n - 36) => m[n - 36..].to_string(),
                _ => m,
            })
            .collect())
    }

    /// A page of a sorted index with the index's size, in one round trip: (ZCARD, members `offset ..
    /// offset + limit` ascending, or descending when `rev`). The listings of dead jobs, cron entries,
    /// rate-limit keys and workers read through it.
    pub(crate) async fn page(&self, key: &str, offset: u64, limit: u64, rev: bool) -> Result<(u64, Vec<String>)> {
        let mut conn = self.conn().await?;
        let mut pipe = redis::pipe();
        pipe.cmd("ZCARD").arg(key);
        pipe.add_command(zrange(key, offset, limit, rev));
        Ok(pipe.query_async(&mut conn).await?)
    }

    /// Workflows newest first (ids are UUIDv7): (total, page of (id, hash)), in two round trips; a
    /// workflow whose hash expired between the two reads is left out.
    pub async fn workflows_page(&self, offset: u64, limit: u64) -> Result<(u64, Vec<(String, Fields)>)> {
        let (total, ids) = self.page(&self.keys().workflows(), offset, limit, true).await?;
        let hashes = self.hashes(ids.iter().map(|id| self.keys().workflow(id))).await?;
        Ok((
            total,
            ids.into_iter().zip(hashes).filter(|(_, h)| !h.is_empty()).collect(),
        ))
    }

    /// Whether a workflow with this id exists on this shard.
    pub async fn workflow_exists(&self, id: &str) -> Result<bool> {
        self.exists(&self.keys().workflow(id)).await
    }

    /// Whether a cron entry with this name exists on this shard.
    pub async fn cron_exists(&self, name: &str) -> Result<bool> {
        self.exists(&self.keys().cron(name)).await
    }

    async fn exists(&self, key: &str) -> Result<bool> {
        let mut conn = self.conn().await?;
        let n: i64 = redis::cmd("EXISTS").arg(key).query_async(&mut conn).await?;
        Ok(n == 1)
    }

    /// Which of these job ids this shard holds, in one pipeline.
    pub async fn jobs_exist(&self, ids: &[&str]) -> Result<Vec<bool>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.cmd("EXISTS").arg(self.keys().job(id));
        }
        let mut conn = self.conn().await?;
        Ok(pipe.query_async(&mut conn).await?)
    }

    /// HGETALL of one hash, None when it does not exist (a cron entry, a worker's record).
    pub(crate) async fn hash(&self, key: String) -> Result<Option<Fields>> {
        let mut conn = self.conn().await?;
        let m: Fields = redis::cmd("HGETALL").arg(key).query_async(&mut conn).await?;
        Ok((!m.is_empty()).then_some(m))
    }

    /// HGETALL of each key in one pipeline (an empty map for a missing key).
    pub async fn hashes(&self, keys: impl IntoIterator<Item = String>) -> Result<Vec<Fields>> {
        let mut pipe = redis::pipe();
        let mut n = 0;
        for k in keys {
            pipe.cmd("HGETALL").arg(k);
            n += 1;
        }
        if n == 0 {
            return Ok(Vec::new());
        }
        let mut conn = self.conn().await?;
        Ok(pipe.query_async(&mut conn).await?)
    }
}
