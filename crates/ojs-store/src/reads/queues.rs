//! Queues: names, counts, per-priority counts, settings (aging, backpressure) and the pause switch.

use std::collections::HashMap;

use redis::Value;

use crate::reply::{flat_map, val_i64};
use crate::store::{Result, Store};

/// A queue's depth bound (ojs-backpressure §6), stored as P q:<queue>:conf bp_* fields.
#[derive(Debug, Clone, PartialEq)]
pub struct Backpressure {
    pub max_depth: u64,
    /// `reject` or `block`.
    pub strategy: String,
    pub warning_threshold: f64,
}

pub(crate) const BACKPRESSURE_FIELDS: [&str; 3] = ["bp_max_depth", "bp_strategy", "bp_warn"];

/// How long a queue's ended jobs stay listed (lua/includes/ended.lua), stored as P q:<queue>:conf
/// ke_* fields; absent, the last [`ENDED_KEEP_LAST`] within the records' retention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndedRetention {
    /// Keep the last N (0: list none).
    pub keep_last: u64,
    /// And only those that ended within this many ms (None: the records' retention alone).
    pub keep_for_ms: Option<u64>,
}

/// The default and the largest `keep_last` (lua/includes/ended.lua ENDED_KEEP_LAST; a test holds them
/// equal).
pub const ENDED_KEEP_LAST: u64 = 10_000;

pub(crate) const ENDED_FIELDS: [&str; 2] = ["ke_last", "ke_for"];

#[derive(Debug, Default, Clone)]
pub struct QueueCounts {
    pub name: String,
    pub jobs: ojs_core::JobCounts,
    pub paused: bool,
}

impl Store {
    pub async fn get_aging(&self, queue: &str) -> Result<Option<u64>> {
        let mut conn = self.conn().await?;
        Ok(redis::cmd("HGET")
            .arg(self.keys().queue_conf(queue))
            .arg("aging_s")
            .query_async(&mut conn)
            .await?)
    }

    /// Ready jobs of a queue counted by priority: (priority, count), ascending by priority.
    pub async fn priority_counts(&self, queue: &str) -> Result<Vec<(i64, u64)>> {
        Ok(self
            .priority_counts_of(&[queue.to_string()])
            .await?
            .pop()
            .unwrap_or_default())
    }

    /// [`Store::priority_counts`] of many queues in one pipeline (one round trip).
    pub async fn priority_counts_of(&self, queues: &[String]) -> Result<Vec<Vec<(i64, u64)>>> {
        if queues.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.conn().await?;
        let mut pipe = redis::pipe();
        for q in queues {
            pipe.cmd("HGETALL").arg(self.keys().queue_pri(q));
        }
        let maps: Vec<HashMap<String, i64>> = pipe.query_async(&mut conn).await?;
        Ok(maps
            .into_iter()
            .map(|m| {
                let mut v: Vec<(i64, u64)> = m
                    .into_iter()
                    .filter_map(|(p, n)| Some((p.parse().ok()?, u64::try_from(n).ok()?)))
                    .filter(|(_, n)| *n > 0)
                    .collect();
                v.sort();
                v
            })
            .collect())
    }

    /// Which of these queues (all on this shard) a FETCH could take a job from now: they have ready jobs
    /// (`P ready`) and are not paused. One pipeline.
    pub async fn queues_ready(&self, queues: &[&str]) -> Result<Vec<bool>> {
        if queues.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        pipe.cmd("SMISMEMBER").arg(self.keys().ready_index()).arg(queues);
        pipe.cmd("SMISMEMBER").arg(self.keys().paused()).arg(queues);
        let mut conn = self.conn().await?;
        let (ready, paused): (Vec<bool>, Vec<bool>) = pipe.query_async(&mut conn).await?;
        Ok(ready.into_iter().zip(paused).map(|(r, p)| r && !p).collect())
    }

    pub async fn queue_names(&self) -> Result<Vec<String>> {
        let mut conn = self.conn().await?;
        let mut names: Vec<String> = redis::cmd("SMEMBERS")
            .arg(self.keys().queues())
            .query_async(&mut conn)
            .await?;
        names.sort();
        Ok(names)
    }

    pub async fn queue_counts(&self, names: &[String]) -> Result<Vec<QueueCounts>> {
        if names.is_empty() {
            return Ok(vec![]);
        }
        let mut conn = self.conn().await?;
        let mut pipe = redis::pipe();
        for q in names {
            // Available = every waiting job, rate-limit lanes included: the per-priority counts.
            pipe.cmd("HVALS").arg(self.keys().queue_pri(q));
            pipe.cmd("HGETALL").arg(self.keys().queue_stats(q));
            pipe.cmd("SISMEMBER").arg(self.keys().paused()).arg(q);
        }
        let vals: Vec<Value> = pipe.query_async(&mut conn).await?;
        let mut out = Vec::with_capacity(names.len());
        for (q, c) in names.iter().zip(vals.chunks(3)) {
            let stats = flat_map(&c[1]);
            let g = |k: &str| stats.get(k).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0).max(0) as u64;
            out.push(QueueCounts {
                name: q.clone(),
                jobs: ojs_core::JobCounts {
                    available: match &c[0] {
                        Value::Array(v) => v.iter().map(|n| val_i64(n).max(0) as u64).sum(),
                        _ => 0,
                    },
                    active: g("active"),
                    scheduled: g("scheduled"),
                    completed: g("completed"),
                    failed: g("failed"),
                    discarded: g("discarded"),
                    cancelled: g("cancelled"),
                },
                paused: val_i64(&c[2]) == 1,
            });
        }
        Ok(out)
    }

    /// The queue's ended-job retention as set (None: the default).
    pub async fn ended_retention(&self, queue: &str) -> Result<Option<EndedRetention>> {
        let mut conn = self.conn().await?;
        let f: Vec<Option<u64>> = redis::cmd("HMGET")
            .arg(self.keys().queue_conf(queue))
            .arg(&ENDED_FIELDS[..])
            .query_async(&mut conn)
            .await?;
        let get = |i: usize| f.get(i).copied().flatten();
        Ok(get(0).map(|keep_last| EndedRetention {
            keep_last,
            keep_for_ms: get(1).filter(|ms| *ms > 0),
        }))
    }

    pub async fn backpressure(&self, queue: &str) -> Result<Option<Backpressure>> {
        let mut conn = self.conn().await?;
        let f: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(self.keys().queue_conf(queue))
            .arg(&BACKPRESSURE_FIELDS[..])
            .query_async(&mut conn)
            .await?;
        let get = |i: usize| f.get(i).cloned().flatten();
        Ok(get(0).and_then(|d| d.parse().ok()).map(|max_depth| Backpressure {
            max_depth,
            strategy: get(1).unwrap_or_else(|| "reject".into()),
            warning_threshold: get(2).and_then(|w| w.parse().ok()).unwrap_or(0.8),
        }))
    }
}

#[cfg(test)]
mod ended_tests {
    #[test]
    fn the_default_keep_last_is_the_scripts() {
        let lua = include_str!("../../../../lua/includes/ended.lua");
        assert!(lua.contains(&format!("local ENDED_KEEP_LAST = {}", super::ENDED_KEEP_LAST)));
    }
}
