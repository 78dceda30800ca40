use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::OnceCell;

use crate::conn::{Backend, Conn};
use crate::keys::Keys;
use crate::reply::reply_items;
use crate::scripts::{self, ScriptSource};

pub use crate::error::{Result, StoreError};
pub use ojs_core::{Fields, StoredJob};

/// Version of the key schema this code writes; stored at `<prefix>schema`.
pub const SCHEMA_VERSION: u32 = 3;
/// The older versions this code also reads, and upgrades at start ([`Store::upgrade_schema`]).
pub const SCHEMA_VERSIONS_UPGRADED: &[u32] = &[1, 2];

/// How long one blocking read of the event tail waits for new events (`reads/events.rs`).
pub const EVENTS_BLOCK_MS: u64 = 1_000;

/// Settings the scripts need that are not part of any job.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// The Redis node, when `redis_cluster` is empty.
    pub redis_url: String,
    /// Seed nodes of a Redis Cluster (`host:port`); empty for a single node.
    pub redis_cluster: Vec<String>,
    pub namespace: String,
    /// Lease length for jobs that set no `visibility_timeout_ms`.
    pub default_visibility_ms: u64,
    /// How long completed, cancelled and discarded jobs stay readable. 0 keeps them forever.
    pub retention_ms: u64,
    pub pool_size: usize,
    /// After each script call, `WAIT` for this many replicas (0: do not wait); see [`Store::run`].
    pub wait_replicas: u32,
    /// How long that `WAIT` may take, in ms.
    pub wait_timeout_ms: u64,
}

#[derive(Clone)]
pub(crate) struct Scripts {
    pub(crate) enqueue: Named,
    pub(crate) cron_fire: Named,
    pub(crate) workflow_create: Named,
    pub(crate) fetch: Named,
    pub(crate) nack: Named,
    pub(crate) heartbeat: Named,
    pub(crate) cancel: Named,
    pub(crate) promote: Named,
    pub(crate) requeue: Named,
    pub(crate) dead_retry: Named,
    pub(crate) dead_delete: Named,
    pub(crate) set_priority: Named,
    pub(crate) set_aging: Named,
    pub(crate) queue_conf: Named,
    pub(crate) queue_pause: Named,
    pub(crate) lane_index: Named,
    pub(crate) rl_override: Named,
    pub(crate) rl_inspect: Named,
    pub(crate) rl_gauges: Named,
    pub(crate) job_explain: Named,
    pub(crate) cron_set: Named,
    pub(crate) cron_delete: Named,
    pub(crate) pool_set: Named,
    pub(crate) pool_delete: Named,
    pub(crate) workflow_get: Named,
    pub(crate) workflow_cancel: Named,
    pub(crate) place: Named,
    pub(crate) pick: Named,
    pub(crate) job_read: Named,
    pub(crate) job_migrate: Named,
    pub(crate) progress: Named,
    pub(crate) schema_put: Named,
    pub(crate) schema_delete: Named,
    pub(crate) checkpoint_save: Named,
    pub(crate) checkpoint_delete: Named,
    pub(crate) checkpoint_read: Named,
    pub(crate) webhook_sub_set: Named,
    pub(crate) webhook_fanout: Named,
    pub(crate) webhook_claim: Named,
    pub(crate) webhook_complete: Named,
    pub(crate) webhook_fail: Named,
}

/// An operation of the function library: its name (the metric label) and the function to `FCALL`.
#[derive(Clone)]
pub(crate) struct Named {
    pub(crate) name: &'static str,
    pub(crate) function: String,
    /// Whether it changes state: only then does a call wait for replicas.
    pub(crate) writes: bool,
}

pub(crate) fn script(s: ScriptSource) -> Named {
    Named {
        name: s.name,
        function: s.function_name(),
        writes: s.writes,
    }
}

/// The move guard ([`Store::run`]) of the shard `key` belongs to: `ojs:{<tag>}:moving`.
fn move_guard_of(key: &str) -> String {
    let tag = key
        .split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map_or("", |(tag, _)| tag);
    Keys::for_tag(tag).move_guard()
}

/// Loads this build's function library (`FUNCTION LOAD REPLACE`: loading the same text again is
/// harmless, so racing nodes need no coordination).
async fn load_library(conn: &mut Conn) -> Result<()> {
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(scripts::LIBRARY)
        .query_async(conn)
        .await?;
    Ok(())
}

/// The store: the connections to Redis and the runner of the function library. Its methods live
/// beside what they touch: one per Lua script in the script's typed twin (`ops/<op>.rs`), the
/// read-only queries in `reads/<what they read>.rs`.
///
/// Connections: a few multiplexed, self-reconnecting connections (`redis::aio::ConnectionManager`),
/// used round-robin; concurrent requests pipeline over each. (A checkout pool such as deadpool-redis
/// sends UNWATCH + PING on every checkout: one extra round trip and two extra commands per request;
/// see benches/RESULTS.md.) Each connection is made on first use, so a server starts while Redis is
/// down and answers 503 until it is back.
///
/// A `Store` serves one shard of the deployment (see `keys.rs`); [`Store::shard`] makes the store of
/// another shard over the same connections.
pub struct Store {
    links: Arc<Links>,
    shard: usize,
    /// The keys under the shard's recorded tag, once known ([`Store::use_tag`]).
    keys: std::sync::OnceLock<Keys>,
    /// The keys under the shard's legacy tag (`ojs:{<ns>.<i>}:`), used until then.
    legacy: Keys,
    pub(crate) cfg: StoreConfig,
    pub(crate) scripts: Scripts,
}

/// The connections, shared by the stores of every shard.
struct Links {
    backend: Backend,
    conns: Vec<OnceCell<Conn>>,
    next: AtomicUsize,
    /// Each queue's tenancy setting as this pod last read it (`None`: the queue has none), for the
    /// enqueue (tenancy.rs); the enqueue script checks it, so a stale entry costs one retry.
    pub(crate) tenancy: crate::tenancy_cache::TenancyCache,
    /// The schema registry as this pod last read it (schema_cache.rs); the enqueue script checks its
    /// stamp, so a stale copy costs one reload and one retry.
    pub(crate) schemas: crate::schema_cache::SchemaCache,
}

impl Store {
    pub fn new(cfg: StoreConfig) -> Result<Self> {
        Keys::check_namespace(&cfg.namespace).map_err(StoreError::Config)?;
        let backend =
            Backend::new(&cfg.redis_url, &cfg.redis_cluster, blocking_timeout()).map_err(StoreError::Config)?;
        // A cluster connection is already one multiplexed connection per node.
        let pool = if cfg.redis_cluster.is_empty() {
            cfg.pool_size.max(1)
        } else {
            1
        };
        Ok(Self {
            links: Arc::new(Links {
                backend,
                conns: (0..pool).map(|_| OnceCell::new()).collect(),
                next: AtomicUsize::new(0),
                tenancy: Default::default(),
                schemas: Default::default(),
            }),
            shard: 0,
            keys: Default::default(),
            legacy: Keys::new(&cfg.namespace),
            scripts: Scripts {
                enqueue: script(scripts::ENQUEUE),
                cron_fire: script(scripts::CRON_FIRE),
                workflow_create: script(scripts::WORKFLOW_CREATE),
                fetch: script(scripts::FETCH),
                nack: script(scripts::NACK),
                heartbeat: script(scripts::HEARTBEAT),
                cancel: script(scripts::CANCEL),
                promote: script(scripts::PROMOTE),
                requeue: script(scripts::REQUEUE),
                dead_retry: script(scripts::DEAD_RETRY),
                dead_delete: script(scripts::DEAD_DELETE),
                set_priority: script(scripts::SET_PRIORITY),
                set_aging: script(scripts::SET_AGING),
                queue_conf: script(scripts::QUEUE_CONF),
                queue_pause: script(scripts::QUEUE_PAUSE),
                lane_index: script(scripts::LANE_INDEX),
                rl_override: script(scripts::RL_OVERRIDE),
                rl_inspect: script(scripts::RL_INSPECT),
                rl_gauges: script(scripts::RL_GAUGES),
                job_explain: script(scripts::JOB_EXPLAIN),
                cron_set: script(scripts::CRON_SET),
                cron_delete: script(scripts::CRON_DELETE),
                pool_set: script(scripts::POOL_SET),
                pool_delete: script(scripts::POOL_DELETE),
                workflow_get: script(scripts::WORKFLOW_GET),
                workflow_cancel: script(scripts::WORKFLOW_CANCEL),
                place: script(scripts::PLACE),
                pick: script(scripts::PICK),
                job_read: script(scripts::JOB_READ),
                job_migrate: script(scripts::JOB_MIGRATE),
                progress: script(scripts::PROGRESS),
                schema_put: script(scripts::SCHEMA_PUT),
                schema_delete: script(scripts::SCHEMA_DELETE),
                checkpoint_save: script(scripts::CHECKPOINT_SAVE),
                checkpoint_delete: script(scripts::CHECKPOINT_DELETE),
                checkpoint_read: script(scripts::CHECKPOINT_READ),
                webhook_sub_set: script(scripts::WEBHOOK_SUB_SET),
                webhook_fanout: script(scripts::WEBHOOK_FANOUT),
                webhook_claim: script(scripts::WEBHOOK_CLAIM),
                webhook_complete: script(scripts::WEBHOOK_COMPLETE),
                webhook_fail: script(scripts::WEBHOOK_FAIL),
            },
            cfg,
        })
    }

    /// This pod's copy of the queues' tenancy settings (tenancy.rs).
    pub(crate) fn links_tenancy(&self) -> &crate::tenancy_cache::TenancyCache {
        &self.links.tenancy
    }

    /// This pod's copy of the schema registry (schema_cache.rs).
    pub(crate) fn links_schemas(&self) -> &crate::schema_cache::SchemaCache {
        &self.links.schemas
    }

    /// This shard's keys: under its recorded hash tag once [`Store::use_tag`] set it (a placed shard of a
    /// cluster), else under its legacy tag (`Keys::for_shard`: shard 0 always, every shard on one Redis).
    pub fn keys(&self) -> &Keys {
        self.keys.get().unwrap_or(&self.legacy)
    }

    /// Serves this shard under the hash tag `tag` (as recorded on shard 0: [`Store::shard_tags`]). A
    /// shard's tag never changes: false (and nothing changed) when it already had another one.
    pub fn use_tag(&self, tag: &str) -> bool {
        let keys = Keys::for_tag(tag);
        let now = self.keys.get_or_init(|| keys.clone());
        now.prefix() == keys.prefix()
    }

    /// The store of shard `shard` of the same deployment, over the same connections, under the shard's
    /// legacy tag until [`Store::use_tag`] gives it its recorded one (see [`Store::shard_tags`]).
    pub fn shard(&self, shard: usize) -> Store {
        Store {
            links: Arc::clone(&self.links),
            shard,
            keys: Default::default(),
            legacy: Keys::for_shard(&self.cfg.namespace, shard),
            cfg: self.cfg.clone(),
            scripts: self.scripts.clone(),
        }
    }

    /// Which shard this store serves (0 for a deployment of one shard).
    pub fn shard_index(&self) -> usize {
        self.shard
    }

    pub fn config(&self) -> &StoreConfig {
        &self.cfg
    }

    pub(crate) async fn conn(&self) -> Result<Conn> {
        let links = &self.links;
        let i = links.next.fetch_add(1, Ordering::Relaxed) % links.conns.len();
        let conn = links.conns[i]
            .get_or_try_init(|| links.backend.shared())
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        Ok(conn.clone())
    }

    /// Runs an operation with `FCALL`. When Redis does not know the function (a Redis without
    /// persistence restarted, `FUNCTION FLUSH`, or the first call of a new build) the library is loaded
    /// and the call made once more, so none of these ever breaks the server.
    ///
    /// The call names one key more than the script's: its shard's move guard (`P moving`, which never
    /// exists). A script reads and writes keys it does not name; while its shard's slot migrates to
    /// another primary those are split between the two nodes, and Redis would run it on either with half
    /// of them. Redis refuses a command naming several keys of a migrating slot, some of them absent,
    /// with `TRYAGAIN` before it runs, on both nodes; the call is sent again until the move ends
    /// (conn.rs). On one Redis, and on a cluster whose slots stay put, the extra key costs nothing.
    pub(crate) async fn run<A: redis::ToRedisArgs>(&self, s: &Named, keys: &[String], args: A) -> Result<Vec<Value>> {
        let started = std::time::Instant::now();
        let mut conn = self.conn().await?;
        let guard = match keys.first() {
            Some(k) => move_guard_of(k),
            None => self.keys().move_guard(),
        };
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(&s.function).arg(keys.len() + 1).arg(keys).arg(guard).arg(args);
        let v: Value = match self.call(&mut conn, &cmd, s.writes).await {
            Err(StoreError::Reply(e)) if e.contains("Function not found") => {
                load_library(&mut conn).await?;
                self.call(&mut conn, &cmd, s.writes).await?
            }
            other => other?,
        };
        metrics::histogram!("ojs_redis_script_duration_seconds", "script" => s.name)
            .record(started.elapsed().as_secs_f64());
        reply_items(v)
    }

    /// One script call. With `wait_replicas`, the call and a `WAIT` travel in one pipeline (one round
    /// trip, routed to the same primary on a cluster), and a write that fewer replicas than asked have
    /// confirmed is answered as unavailable: the client must not count on it surviving a failover.
    async fn call(&self, conn: &mut Conn, cmd: &redis::Cmd, writes: bool) -> Result<Value> {
        if self.cfg.wait_replicas == 0 || !writes {
            return Ok(cmd.query_async(conn).await?);
        }
        let mut pipe = redis::pipe();
        pipe.add_command(cmd.clone())
            .cmd("WAIT")
            .arg(self.cfg.wait_replicas)
            .arg(self.cfg.wait_timeout_ms);
        let (v, acked): (Value, u32) = pipe.query_async(conn).await?;
        if acked < self.cfg.wait_replicas {
            metrics::counter!("ojs_redis_wait_shortfall_total").increment(1);
            return Err(StoreError::Unavailable(format!(
                "written, but confirmed by {acked} of {} replicas within {} ms",
                self.cfg.wait_replicas, self.cfg.wait_timeout_ms
            )));
        }
        Ok(v)
    }

    /// Checks Redis and records (or verifies) the key-schema version.
    pub async fn ping(&self) -> Result<()> {
        self.read_on_a_live_connection(|mut conn| async move { self.ping_on(&mut conn).await })
            .await
    }

    /// Runs a read on the next shared connection while one fails as unavailable, at most once per
    /// connection: after Redis restarts, each connection fails its first command (and reconnects), so
    /// a health probe read "down" while Redis answered the requests before it. Reads and idempotent
    /// writes only: a write that failed so may have been applied.
    async fn read_on_a_live_connection<T, F, Fut>(&self, read: F) -> Result<T>
    where
        F: Fn(Conn) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let mut tries = self.links.conns.len();
        loop {
            match read(self.conn().await?).await {
                Err(StoreError::Unavailable(_)) if tries > 1 => tries -= 1,
                r => return r,
            }
        }
    }

    async fn ping_on(&self, conn: &mut Conn) -> Result<()> {
        let existing: Option<u32> = redis::cmd("GET").arg(self.keys().schema()).query_async(conn).await?;
        match existing {
            None => {
                let _: () = redis::cmd("SET")
                    .arg(self.keys().schema())
                    .arg(SCHEMA_VERSION)
                    .arg("NX")
                    .query_async(conn)
                    .await?;
                Ok(())
            }
            // An older keyspace is being upgraded (see `upgrade_schema`); every script reads it meanwhile.
            Some(v) if v == SCHEMA_VERSION || SCHEMA_VERSIONS_UPGRADED.contains(&v) => Ok(()),
            Some(v) => Err(StoreError::Reply(format!(
                "key schema version {v} found in Redis, this server speaks {}; see migrations-notes/",
                SCHEMA_VERSION
            ))),
        }
    }

    /// Redis `TIME` in ms: the clock every script uses (cron schedules and admin views read it too).
    pub async fn now_ms(&self) -> Result<i64> {
        self.read_on_a_live_connection(|mut conn| async move { redis_now_ms(&mut conn, self.keys()).await })
            .await
    }

    /// A dedicated connection for the event tail's blocking reads (XREAD BLOCK must not hold up the
    /// shared connections). Its response timeout outlasts a whole [`EVENTS_BLOCK_MS`](EVENTS_BLOCK_MS) read (redis-rs'
    /// default of 500 ms would drop an idle tail twice a second), and it is named
    /// `ojs-events:<namespace>` so that `CLIENT LIST` shows which pod tails what.
    pub async fn blocking_connection(&self) -> Result<Conn> {
        let mut conn = self.links.backend.dedicated(blocking_timeout()).await?;
        let mut name = redis::cmd("CLIENT");
        name.arg("SETNAME").arg(format!("ojs-events:{}", self.cfg.namespace));
        let _: () = conn.on_tag(&name, &self.keys().events()).await?;
        Ok(conn)
    }

    /// A raw connection for read-only helpers (events, inspection) that live in the server crate.
    pub async fn connection(&self) -> Result<Conn> {
        self.conn().await
    }
}

/// The response timeout of the event tail's connection: longer than one blocking read.
fn blocking_timeout() -> Duration {
    Duration::from_millis(EVENTS_BLOCK_MS + 5_000)
}

/// Redis `TIME` in ms: reads use the same clock as the scripts.
pub(crate) async fn redis_now_ms(conn: &mut Conn, keys: &Keys) -> Result<i64> {
    let t: Vec<String> = conn.on_tag(&redis::cmd("TIME"), &keys.schema()).await?;
    let part = |i: usize| t.get(i).and_then(|s| s.parse::<i64>().ok()).unwrap_or(0);
    Ok(part(0) * 1000 + part(1) / 1000)
}
