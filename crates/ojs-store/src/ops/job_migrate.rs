//! The typed twin of `lua/job-migrate-1.lua`, and the upgrade of an older keyspace that drives it:
//! every v1 job hash and every v2 record becomes a v3 record. See the script's header and
//! `migrations-notes/`.

use super::args::JobMigrateArgs;

use crate::reply::Reply;
use crate::store::{Result, Store};

/// Job keys per SCAN step and per script call.
const BATCH: usize = 500;

impl Store {
    /// The script's arguments, in the order of its header.
    fn job_migrate_args(&self, ids: &[String]) -> Vec<String> {
        let mut args = Vec::with_capacity(JobMigrateArgs::LEN + ids.len());
        JobMigrateArgs {
            prefix: self.keys().prefix().into(),
        }
        .push(&mut args);
        args.extend(ids.iter().cloned());
        args
    }

    /// Converts these jobs to v3 records; returns how many were converted.
    async fn job_migrate(&self, ids: &[String]) -> Result<u64> {
        let Some(first) = ids.first() else { return Ok(0) };
        let args = self.job_migrate_args(ids);
        let items = self
            .run(&self.scripts.job_migrate, &[self.keys().job(first)], args)
            .await?;
        Ok(Reply::new(self.scripts.job_migrate.name, &items).i64(1)?.max(0) as u64)
    }

    /// Repairs what older builds could leave behind (below), then brings an older keyspace (v1 or v2,
    /// [`SCHEMA_VERSIONS_UPGRADED`](crate::store::SCHEMA_VERSIONS_UPGRADED)) to v3: converts every job of every
    /// shard in `shards` (SCAN, batches, progress in the log), then records the new version here. `self` is
    /// shard 0, which holds the version. Jobs are served throughout (scripts read an older job as it is and
    /// write it as v3), and servers racing here do the same idempotent work. Returns how many jobs were
    /// converted.
    pub async fn upgrade_schema(&self, shards: &[impl AsRef<Store>]) -> Result<u64> {
        let mut conn = self.conn().await?;
        // Before the name `due` was reserved, registering a cron entry of that name on a deployment
        // with no cron entry yet left a hash at the due index (and answered 500), which broke every
        // later registration and the cron timer. That entry was never registered: drop the hash.
        let due_type: String = redis::cmd("TYPE")
            .arg(self.keys().cron_due())
            .query_async(&mut conn)
            .await?;
        if due_type == "hash" {
            let _: () = redis::cmd("DEL")
                .arg(self.keys().cron_due())
                .query_async(&mut conn)
                .await?;
            tracing::warn!(key = %self.keys().cron_due(), "removed a hash left at the cron due index by a refused cron entry named 'due'");
        }
        // Rate-limit lanes parked by a build before the index of each key's parked lanes (which a release
        // now wakes a few at a time) are indexed, first in line: without it no release would wake them.
        for shard in shards {
            shard.as_ref().index_parked_lanes().await?;
        }
        let version: Option<u32> = redis::cmd("GET")
            .arg(self.keys().schema())
            .query_async(&mut conn)
            .await?;
        let Some(from) = version.filter(|v| crate::store::SCHEMA_VERSIONS_UPGRADED.contains(v)) else {
            return Ok(0);
        };
        let to = crate::store::SCHEMA_VERSION;
        let mut converted = 0;
        for shard in shards {
            converted += shard.as_ref().convert_jobs(from).await?;
        }
        let _: () = redis::cmd("SET")
            .arg(self.keys().schema())
            .arg(to)
            .query_async(&mut conn)
            .await?;
        tracing::info!(converted, "key schema v{to}: every job is a v{to} record");
        Ok(converted)
    }

    /// Indexes this shard's parked rate-limit lanes in `P rl:<key>:parked` (lua/includes/rl_lanes.lua
    /// Lane.park), those parked by an older build at score 0 so they are woken first; a lane already
    /// indexed keeps its place (NX), and one no longer parked is not indexed (lua/lane-index-2.lua).
    /// Idempotent; returns how many lanes it found.
    async fn index_parked_lanes(&self) -> Result<u64> {
        let mut conn = self.conn().await?;
        let pattern = self.keys().pattern("queue_parked");
        let (mut cursor, mut found) = (0u64, 0u64);
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor).arg("MATCH").arg(&pattern).arg("COUNT").arg(BATCH);
            let (next, keys): (u64, Vec<String>) = conn.on_tag(&scan, &self.keys().schema()).await?;
            for key in keys {
                // A queue name holds no ':' (a lane of a key named "parked" matches the pattern too).
                let Some(queue) = self
                    .keys()
                    .parts("queue_parked", &key)
                    .and_then(|p| p.first().copied())
                    .filter(|q| !q.contains(':'))
                else {
                    continue;
                };
                let lanes: Vec<String> = conn
                    .on_tag(redis::cmd("HKEYS").arg(&key), &self.keys().schema())
                    .await?;
                for k in lanes {
                    // Indexed only if still parked, in one script: a lane re-opened since HKEYS (a
                    // claim, a cancel, a release) would otherwise be indexed after it left.
                    self.lane_index(queue, &k).await?;
                    found += 1;
                }
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        if found > 0 {
            tracing::info!(
                found,
                prefix = self.keys().prefix(),
                "indexed the parked rate-limit lanes"
            );
        }
        Ok(found)
    }

    /// Converts every job of this shard from key schema `from` to this one's; returns how many.
    async fn convert_jobs(&self, from: u32) -> Result<u64> {
        let mut conn = self.conn().await?;
        let to = crate::store::SCHEMA_VERSION;
        let pattern = self.keys().pattern("job");
        let id_at = self.keys().job("").len();
        let total: u64 = conn.on_tag(&redis::cmd("DBSIZE"), &self.keys().schema()).await?;
        tracing::info!(
            keys_in_db = total,
            prefix = self.keys().prefix(),
            "key schema v{from} found: converting job records to v{to}"
        );
        let (mut cursor, mut converted, mut seen) = (0u64, 0u64, 0u64);
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor).arg("MATCH").arg(&pattern).arg("COUNT").arg(BATCH);
            // On a cluster: the primary holding the shard's slot (every key of a shard shares its tag).
            let (next, keys): (u64, Vec<String>) = conn.on_tag(&scan, &self.keys().schema()).await?;
            let ids: Vec<String> = keys.into_iter().map(|k| k[id_at..].to_string()).collect();
            seen += ids.len() as u64;
            for chunk in ids.chunks(BATCH) {
                converted += self.job_migrate(chunk).await?;
            }
            if !ids.is_empty() {
                tracing::info!(converted, seen, "key schema v{to}: converting job records");
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        tracing::info!(
            converted,
            seen,
            prefix = self.keys().prefix(),
            "key schema v{to}: this shard's jobs are converted"
        );
        Ok(converted)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_migration_batch_is_written_in_the_order_the_header_declares() {
        let args = super::super::test_store().job_migrate_args(&["a".into(), "b".into()]);
        assert_eq!(args, ["ojs:{t}:", "a", "b"]);
    }
}
