//! The typed twin of `lua/job-migrate-1.lua`, and the upgrade of a key-schema v1 keyspace that drives
//! it: every v1 job hash becomes a v2 record. See the script's header and `migrations-notes/`.

use super::ArgWriter;

use crate::reply::{at, val_i64};
use crate::scripts;
use crate::store::{script, Named, Result, Store};

/// The script's arguments, as its header names them (checked by build.rs).
const ARGV: &[&str] = &["P"];

static JOB_MIGRATE_SCRIPT: std::sync::LazyLock<Named> = std::sync::LazyLock::new(|| script(scripts::JOB_MIGRATE));

/// Job keys per SCAN step and per script call.
const BATCH: usize = 500;

impl Store {
    /// The script's arguments, in the order of its header.
    fn job_migrate_args(&self, ids: &[String]) -> Vec<String> {
        let mut args = Vec::with_capacity(ARGV.len() + ids.len());
        ArgWriter::new(ARGV, &mut args).arg("P", self.keys.prefix()).done();
        args.extend(ids.iter().cloned());
        args
    }

    /// Converts these jobs' v1 hashes to records; returns how many were converted.
    async fn job_migrate(&self, ids: &[String]) -> Result<u64> {
        let Some(first) = ids.first() else { return Ok(0) };
        let args = self.job_migrate_args(ids);
        let items = self.run(&JOB_MIGRATE_SCRIPT, &[self.keys.job(first)], args).await?;
        Ok(val_i64(at(&items, 1)) as u64)
    }

    /// Repairs what older builds could leave behind (below), then brings a v1 keyspace to v2: SCANs every job hash, converts them in batches (logging progress),
    /// then records the new version. Jobs are served throughout (scripts read a v1 hash as a record),
    /// and servers racing here do the same idempotent work. Returns how many jobs were converted.
    pub async fn upgrade_schema(&self) -> Result<u64> {
        let mut conn = self.conn().await?;
        // Before the name `due` was reserved, registering a cron entry of that name on a deployment
        // with no cron entry yet left a hash at the due index (and answered 500), which broke every
        // later registration and the cron timer. That entry was never registered: drop the hash.
        let due_type: String = redis::cmd("TYPE")
            .arg(self.keys.cron_due())
            .query_async(&mut conn)
            .await?;
        if due_type == "hash" {
            let _: () = redis::cmd("DEL")
                .arg(self.keys.cron_due())
                .query_async(&mut conn)
                .await?;
            tracing::warn!(key = %self.keys.cron_due(), "removed a hash left at the cron due index by a refused cron entry named 'due'");
        }
        let version: Option<u32> = redis::cmd("GET").arg(self.keys.schema()).query_async(&mut conn).await?;
        if version != Some(crate::SCHEMA_VERSION_UPGRADED) {
            return Ok(0);
        }
        let pattern = self.keys.pattern("job");
        let id_at = self.keys.job("").len();
        let total: u64 = conn.on_tag(&redis::cmd("DBSIZE"), &self.keys.schema()).await?;
        tracing::info!(
            keys_in_db = total,
            "key schema v1 found: converting job hashes to v2 records"
        );
        let (mut cursor, mut converted, mut seen) = (0u64, 0u64, 0u64);
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("TYPE")
                .arg("hash")
                .arg("COUNT")
                .arg(BATCH);
            // On a cluster: the primary holding the deployment's slot (every key shares its tag).
            let (next, keys): (u64, Vec<String>) = conn.on_tag(&scan, &self.keys.schema()).await?;
            let ids: Vec<String> = keys.into_iter().map(|k| k[id_at..].to_string()).collect();
            seen += ids.len() as u64;
            for chunk in ids.chunks(BATCH) {
                converted += self.job_migrate(chunk).await?;
            }
            if !ids.is_empty() {
                tracing::info!(converted, "key schema v2: converting job hashes");
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        let _: () = redis::cmd("SET")
            .arg(self.keys.schema())
            .arg(crate::SCHEMA_VERSION)
            .query_async(&mut conn)
            .await?;
        tracing::info!(converted, seen, "key schema v2: every job is a record");
        Ok(converted)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_migration_batch_is_written_in_the_order_the_header_declares() {
        // The ArgWriter's checks run here (debug build): a value written under the wrong name panics.
        let args = super::super::test_store().job_migrate_args(&["a".into(), "b".into()]);
        assert_eq!(args, ["ojs:{t}:", "a", "b"]);
    }
}
