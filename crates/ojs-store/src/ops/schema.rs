//! The schema registry (ojs-job-versioning §6): the typed twins of `lua/schema-put-1.lua` and
//! `lua/schema-delete-1.lua` (see their headers), its reads, and the check of enqueued jobs' args with
//! this pod's copy of it (`schema_cache.rs`). The registry lives on shard 0; its stamp is on every shard,
//! where the enqueue script checks it.

use std::collections::HashMap;
use std::sync::Arc;

use ojs_core::job::NewJob;

use super::args::{SchemaDeleteArgs, SchemaPutArgs};
use crate::keys::Keys;
use crate::reply::Reply;
use crate::schema_cache::Registry;
use crate::store::{Result, Store, StoreError};

/// One registered version of a type's args schema.
#[derive(Debug, Clone, PartialEq)]
pub struct SchemaEntry {
    pub job_type: String,
    pub version: u32,
    /// The schema as JSON text, as registered.
    pub schema: String,
    /// When it was registered (ms, Redis' clock).
    pub registered_at_ms: i64,
}

/// What a registration did.
#[derive(Debug, PartialEq)]
pub enum SchemaPut {
    /// Registered at this time (ms).
    Registered(i64),
    /// The version is registered already; nothing changed.
    Exists,
    /// The type holds this many versions, the most it may; nothing changed.
    Full(usize),
}

impl Store {
    /// Shard 0's keys: where the registry lives, whichever shard this store serves.
    fn registry_keys(&self) -> Keys {
        Keys::for_shard(&self.cfg.namespace, 0)
    }

    /// The script's arguments, in the order of its header.
    fn schema_put_args(&self, job_type: &str, version: u32, schema: &str, stamp: &str) -> Vec<String> {
        SchemaPutArgs {
            prefix: self.registry_keys().prefix().into(),
            job_type: job_type.into(),
            version: version.to_string(),
            schema: schema.into(),
            max_versions: ojs_core::job_version::MAX_SCHEMA_VERSIONS.to_string(),
            stamp: stamp.into(),
        }
        .into_vec()
    }

    /// The script's arguments, in the order of its header.
    fn schema_delete_args(&self, job_type: &str, version: u32, stamp: &str) -> Vec<String> {
        SchemaDeleteArgs {
            prefix: self.registry_keys().prefix().into(),
            job_type: job_type.into(),
            version: version.to_string(),
            stamp: stamp.into(),
        }
        .into_vec()
    }

    /// Registers a type's args schema at `version` (`schema` already checked: a valid JSON Schema
    /// within the size bound), with the registry's new `stamp`. Call it on shard 0, then give the
    /// stamp to the other shards ([`Store::set_schemas_stamp`]).
    pub async fn schema_put(&self, job_type: &str, version: u32, schema: &str, stamp: &str) -> Result<SchemaPut> {
        let args = self.schema_put_args(job_type, version, schema, stamp);
        let keys = [self.registry_keys().arg_schemas()];
        let items = self.run(&self.scripts.schema_put, &keys, args).await?;
        let r = Reply::new(self.scripts.schema_put.name, &items);
        let out = match r.tag()? {
            "ok" => SchemaPut::Registered(r.i64(1)?),
            "exists" => SchemaPut::Exists,
            "full" => SchemaPut::Full(r.i64(1)?.max(0) as usize),
            _ => return Err(r.unknown_tag()),
        };
        if matches!(out, SchemaPut::Registered(_)) {
            self.links_schemas().forget_all();
        }
        Ok(out)
    }

    /// Removes one version; false when it was not registered. Call it on shard 0, like `schema_put`.
    pub async fn schema_delete(&self, job_type: &str, version: u32, stamp: &str) -> Result<bool> {
        let args = self.schema_delete_args(job_type, version, stamp);
        let keys = [self.registry_keys().arg_schemas()];
        let items = self.run(&self.scripts.schema_delete, &keys, args).await?;
        let r = Reply::new(self.scripts.schema_delete.name, &items);
        match r.tag()? {
            "ok" => {
                self.links_schemas().forget_all();
                Ok(true)
            }
            "not_found" => Ok(false),
            _ => Err(r.unknown_tag()),
        }
    }

    /// Sets this shard's copy of the registry's stamp (the shards other than 0, after a registry write).
    pub async fn set_schemas_stamp(&self, stamp: &str) -> Result<()> {
        let mut conn = self.conn().await?;
        let _: () = redis::cmd("SET")
            .arg(self.keys().arg_schemas_stamp())
            .arg(stamp)
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    /// A type's registered versions, ascending, with when each was registered (ms); empty when none.
    pub async fn schema_versions(&self, job_type: &str) -> Result<Vec<(u32, i64)>> {
        let mut conn = self.conn().await?;
        let list: Option<String> = redis::cmd("HGET")
            .arg(self.registry_keys().arg_schema_versions())
            .arg(job_type)
            .query_async(&mut conn)
            .await?;
        match list {
            None => Ok(Vec::new()),
            Some(t) => serde_json::from_str(&t)
                .map_err(|e| StoreError::Protocol(format!("the versions of {job_type:?} are not a list: {e}"))),
        }
    }

    /// One registered version (None: the type has no such version; `version` None: its latest).
    pub async fn schema_get(&self, job_type: &str, version: Option<u32>) -> Result<Option<SchemaEntry>> {
        let versions = self.schema_versions(job_type).await?;
        let found = match version {
            Some(v) => versions.iter().find(|(x, _)| *x == v),
            None => versions.last(),
        };
        let Some(&(v, at)) = found else { return Ok(None) };
        let mut conn = self.conn().await?;
        let text: Option<String> = redis::cmd("HGET")
            .arg(self.registry_keys().arg_schemas())
            .arg(format!("{job_type}\n{v}"))
            .query_async(&mut conn)
            .await?;
        Ok(text.map(|schema| SchemaEntry {
            job_type: job_type.to_string(),
            version: v,
            schema,
            registered_at_ms: at,
        }))
    }

    /// Reads the whole registry and its stamp in one transaction, and makes it this pod's copy.
    async fn load_registry(&self) -> Result<Arc<Registry>> {
        let keys = self.registry_keys();
        let mut conn = self.conn().await?;
        let (stamp, versions, schemas): (Option<String>, HashMap<String, String>, HashMap<String, String>) =
            redis::pipe()
                .atomic()
                .cmd("GET")
                .arg(keys.arg_schemas_stamp())
                .cmd("HGETALL")
                .arg(keys.arg_schema_versions())
                .cmd("HGETALL")
                .arg(keys.arg_schemas())
                .query_async(&mut conn)
                .await?;
        Ok(self
            .links_schemas()
            .put(Registry::new(stamp.unwrap_or_default(), versions, schemas)))
    }

    /// Checks the jobs' args with this pod's copy of the registry (read once when there is none): the
    /// copy's stamp, for the enqueue script to check; a job whose args do not match the schema of its
    /// version (the envelope's `version`, else its type's latest) is a 400 naming it (`jobs[i]` in a
    /// batch), the schema version and the failing path.
    ///
    /// A job the copy accepts is confirmed by the enqueue script (the stamp); a job the copy refuses is
    /// checked again with the registry read afresh, so a stale copy never refuses what the registry no
    /// longer forbids (the refusals pay the read, never the accepted jobs).
    pub async fn check_args(&self, jobs: &[NewJob]) -> Result<String> {
        let registry = match self.links_schemas().get() {
            Some(r) if r.check(jobs).is_ok() => return Ok(r.stamp.clone()),
            _ => self.load_registry().await?,
        };
        registry.check(jobs).map_err(|(i, m, details)| {
            let m = if jobs.len() > 1 { format!("jobs[{i}]: {m}") } else { m };
            let mut details = details;
            if jobs.len() > 1 {
                details["index"] = serde_json::json!(i);
            }
            StoreError::InvalidWith(m, details)
        })?;
        Ok(registry.stamp.clone())
    }

    /// [`Store::check_args`] against the registry as it is now, for jobs written by a script that does
    /// not check the stamp (a workflow's, a cron entry's template): one GET of the registry's stamp
    /// (shard 0's: call it on shard 0), and the copy is read again when it is not the copy's.
    pub async fn check_args_now(&self, jobs: &[NewJob]) -> Result<()> {
        let mut conn = self.conn().await?;
        let stamp: Option<String> = redis::cmd("GET")
            .arg(self.registry_keys().arg_schemas_stamp())
            .query_async(&mut conn)
            .await?;
        if let Some(copy) = self.links_schemas().get() {
            if stamp.as_deref().unwrap_or_default() != copy.stamp {
                self.links_schemas().forget(&copy.stamp);
            }
        }
        self.check_args(jobs).await.map(drop)
    }

    /// The enqueue script found this shard's stamp (`seen`) is not the copy's (`used`): the copy is
    /// forgotten (the next check reads the registry again), and a shard other than 0 whose stamp is not
    /// the registry's (a shard added after the last registry write) is given the registry's.
    pub(crate) async fn schemas_seen(&self, seen: &str, used: &str) -> Result<()> {
        self.links_schemas().forget(used);
        if self.shard_index() != 0 {
            let registry = self.load_registry().await?;
            if registry.stamp != seen {
                self.set_schemas_stamp(&registry.stamp).await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn registry_writes_are_written_in_the_order_the_headers_declare() {
        let s = super::super::test_store();
        assert_eq!(
            s.schema_put_args("email.send", 2, "{}", "st"),
            ["ojs:{t}:", "email.send", "2", "{}", "100", "st"]
        );
        assert_eq!(
            s.schema_delete_args("email.send", 2, "st"),
            ["ojs:{t}:", "email.send", "2", "st"]
        );
    }
}
