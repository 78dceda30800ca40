use std::collections::HashMap;
use std::time::Duration;

use ojs_core::ratelimit::Window;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Value;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::OnceCell;

use crate::keys::Keys;
use crate::scripts::{self, ScriptSource};

/// What can go wrong talking to Redis. Expected outcomes (not found, wrong state, duplicate) are not
/// errors: they are variants of each operation's outcome type.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// Redis cannot be reached (connection refused, timed out, pool exhausted). Maps to 503.
    #[error("redis is unavailable: {0}")]
    Unavailable(String),
    /// Redis answered with an error or an unexpected reply. Maps to 500: it is a bug.
    #[error("redis replied unexpectedly: {0}")]
    Reply(String),
    /// The store cannot be built from this configuration.
    #[error("invalid store configuration: {0}")]
    Config(String),
}

impl From<redis::RedisError> for StoreError {
    fn from(e: redis::RedisError) -> Self {
        if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout() {
            StoreError::Unavailable(e.to_string())
        } else {
            StoreError::Reply(e.to_string())
        }
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// How long one blocking read of the event tail waits for new events.
pub const EVENTS_BLOCK_MS: u64 = 1_000;

/// How long a worker's record (and its entry in `P workers`) outlives its last heartbeat.
pub const WORKER_TTL_MS: u64 = 24 * 3600 * 1000;

/// A job hash as stored: field -> value.
pub type JobFields = HashMap<String, String>;

/// Settings the scripts need that are not part of any job.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub redis_url: String,
    pub namespace: String,
    /// Lease length for jobs that set no `visibility_timeout_ms`.
    pub default_visibility_ms: u64,
    /// How long completed, cancelled and discarded jobs stay readable. 0 keeps them forever.
    pub retention_ms: u64,
    pub pool_size: usize,
}

pub(crate) struct Scripts {
    pub(crate) enqueue: Named,
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
    pub(crate) rl_override: Named,
    pub(crate) rl_inspect: Named,
    pub(crate) rl_gauges: Named,
    pub(crate) cron_set: Named,
    pub(crate) cron_delete: Named,
    pub(crate) workflow_get: Named,
    pub(crate) workflow_cancel: Named,
}

/// An operation of the function library: its name (the metric label) and the function to `FCALL`.
pub(crate) struct Named {
    pub(crate) name: &'static str,
    pub(crate) function: String,
}

pub(crate) fn script(s: ScriptSource) -> Named {
    Named {
        name: s.name,
        function: s.function_name(),
    }
}

/// Loads this build's function library (`FUNCTION LOAD REPLACE`: loading the same text again is
/// harmless, so racing nodes need no coordination).
async fn load_library(conn: &mut ConnectionManager) -> Result<()> {
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(scripts::LIBRARY)
        .query_async(conn)
        .await?;
    Ok(())
}

/// The store: one async fn per Lua script (each in its script's typed twin, `ops/<op>.rs`) plus the
/// read-only queries (here).
///
/// Connections: a few multiplexed, self-reconnecting connections (`redis::aio::ConnectionManager`),
/// used round-robin; concurrent requests pipeline over each. (A checkout pool such as deadpool-redis
/// sends UNWATCH + PING on every checkout: one extra round trip and two extra commands per request;
/// see benches/RESULTS.md.) Each connection is made on first use, so a server starts while Redis is
/// down and answers 503 until it is back.
pub struct Store {
    client: redis::Client,
    conns: Vec<OnceCell<ConnectionManager>>,
    next: AtomicUsize,
    pub(crate) keys: Keys,
    pub(crate) cfg: StoreConfig,
    pub(crate) scripts: Scripts,
}

/// A queue's depth bound (ojs-backpressure §6), stored as P q:<queue>:conf bp_* fields.
#[derive(Debug, Clone, PartialEq)]
pub struct Backpressure {
    pub max_depth: u64,
    /// `reject` or `block`.
    pub strategy: String,
    pub warning_threshold: f64,
}

pub(crate) const BACKPRESSURE_FIELDS: [&str; 3] = ["bp_max_depth", "bp_strategy", "bp_warn"];

pub(crate) fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::Array(a) => a.iter().map(val_str).collect(),
        _ => Vec::new(),
    }
}

/// How FETCH chooses among several queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// In the order given, each drained before the next.
    Strict,
    /// Smooth weighted round-robin over the queues with ready jobs, state shared in Redis.
    Weighted,
}

impl Strategy {
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Strict => "strict",
            Strategy::Weighted => "weighted",
        }
    }
}

/// The round-robin state is per set of (queue, weight): a short stable hash of it names the key.
pub(crate) fn wrr_key(queues: &[(String, u32)]) -> String {
    // FNV-1a 64: stable across processes and versions (std's hasher is not).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (q, w) in queues {
        for b in q.bytes().chain([0u8]).chain(w.to_string().into_bytes()).chain([0u8]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

/// A job claimed by FETCH.
#[derive(Debug)]
pub struct Claimed {
    pub fields: JobFields,
}

#[derive(Debug)]
pub enum Transition<T> {
    Done(T),
    NotFound,
    /// The job exists but is in this state, which does not allow the operation.
    WrongState(String),
    /// The request named a claim (lease id, attempt or worker) that the job no longer holds; the job
    /// is in this state now and nothing changed (lua/includes/lease.lua).
    LeaseLost(String),
}

/// The claim a worker says it acts for in ACK, NACK and heartbeat (lua/includes/lease.lua). All `None`
/// acts on whoever holds the job now, which is what the official SDKs send.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimRef {
    pub lease_id: Option<String>,
    pub attempt: Option<i64>,
    pub worker_id: Option<String>,
}

impl ClaimRef {
    /// The three script arguments: lease id, attempt, worker id ('' = not named).
    pub(crate) fn args(&self) -> [String; 3] {
        [
            self.lease_id.clone().unwrap_or_default(),
            self.attempt.map(|a| a.to_string()).unwrap_or_default(),
            self.worker_id.clone().unwrap_or_default(),
        ]
    }
}

/// A script reply for a job transition: `ok` → `done(items)`, else the shared refusal tags.
pub(crate) fn transition<T>(items: &[Value], done: impl FnOnce(&[Value]) -> T) -> Transition<T> {
    match tag(items).as_str() {
        "ok" => Transition::Done(done(items)),
        "not_found" => Transition::NotFound,
        "lease_lost" => Transition::LeaseLost(items.get(1).map(val_str).unwrap_or_default()),
        _ => Transition::WrongState(items.get(1).map(val_str).unwrap_or_default()),
    }
}

#[derive(Debug)]
pub struct Acked {
    pub now_ms: i64,
    pub attempt: i64,
    pub queue: String,
    pub job_type: String,
}

#[derive(Debug, Default, Clone)]
pub struct QueueCounts {
    pub name: String,
    pub available: u64,
    pub active: u64,
    pub scheduled: u64,
    pub completed: u64,
    pub failed: u64,
    pub discarded: u64,
    pub cancelled: u64,
    pub paused: bool,
}

impl QueueCounts {
    /// The jobs that wait to run: available (rate-limit lanes included) + scheduled + retryable. What a
    /// backpressure bound counts (the enqueue script computes the same sum).
    pub fn depth(&self) -> u64 {
        self.available + self.scheduled
    }
}

pub(crate) fn val_str(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        Value::Double(d) => d.to_string(),
        Value::Okay => "OK".into(),
        _ => String::new(),
    }
}

/// A job record's fields from its stored bytes (key schema v2: a MessagePack map of field name ->
/// string value, written by lua/includes/record.lua). Bytes that are not one (never written by this
/// server) read as no fields.
pub(crate) fn decode_record(bytes: &[u8]) -> JobFields {
    rmp_serde::from_slice(bytes).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "a job record is not a MessagePack map of strings");
        JobFields::default()
    })
}

/// A value that may be absent (nil, or false from Lua): None.
pub(crate) fn val_opt_str(v: &Value) -> Option<String> {
    match v {
        Value::Nil => None,
        other => Some(val_str(other)),
    }
}

pub(crate) fn val_i64(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        other => val_str(other).parse().unwrap_or(0),
    }
}

pub(crate) fn flat_map(v: &Value) -> JobFields {
    let mut m = HashMap::new();
    if let Value::Array(items) = v {
        for pair in items.chunks(2) {
            if let [k, v] = pair {
                m.insert(val_str(k), val_str(v));
            }
        }
    }
    m
}

fn reply_items(v: Value) -> Result<Vec<Value>> {
    match v {
        Value::Array(items) if !items.is_empty() => Ok(items),
        other => Err(StoreError::Reply(format!(
            "script reply is not a tagged array: {other:?}"
        ))),
    }
}

/// The i-th item of a reply, or Nil: a short reply must never panic the server.
pub(crate) fn at(items: &[Value], i: usize) -> &Value {
    items.get(i).unwrap_or(&Value::Nil)
}

pub(crate) fn tag(items: &[Value]) -> String {
    items.first().map(val_str).unwrap_or_default()
}

impl Store {
    pub fn new(cfg: StoreConfig) -> Result<Self> {
        Keys::check_namespace(&cfg.namespace).map_err(StoreError::Config)?;
        let client = redis::Client::open(cfg.redis_url.as_str())
            .map_err(|e| StoreError::Config(format!("invalid redis url {:?}: {e}", cfg.redis_url)))?;
        Ok(Self {
            client,
            conns: (0..cfg.pool_size.max(1)).map(|_| OnceCell::new()).collect(),
            next: AtomicUsize::new(0),
            keys: Keys::new(&cfg.namespace),
            scripts: Scripts {
                enqueue: script(scripts::ENQUEUE),
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
                rl_override: script(scripts::RL_OVERRIDE),
                rl_inspect: script(scripts::RL_INSPECT),
                rl_gauges: script(scripts::RL_GAUGES),
                cron_set: script(scripts::CRON_SET),
                cron_delete: script(scripts::CRON_DELETE),
                workflow_get: script(scripts::WORKFLOW_GET),
                workflow_cancel: script(scripts::WORKFLOW_CANCEL),
            },
            cfg,
        })
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    pub fn config(&self) -> &StoreConfig {
        &self.cfg
    }

    pub(crate) async fn conn(&self) -> Result<ConnectionManager> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len();
        let cm = self.conns[i]
            .get_or_try_init(|| async {
                let cfg = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(Duration::from_secs(2)))
                    .set_response_timeout(Some(Duration::from_secs(10)))
                    .set_number_of_retries(2)
                    .set_max_delay(Duration::from_secs(1));
                ConnectionManager::new_with_config(self.client.clone(), cfg).await
            })
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        Ok(cm.clone())
    }

    /// Runs an operation with `FCALL`. When Redis does not know the function (a Redis without
    /// persistence restarted, `FUNCTION FLUSH`, or the first call of a new build) the library is loaded
    /// and the call made once more, so none of these ever breaks the server.
    pub(crate) async fn run(&self, s: &Named, keys: &[String], args: Vec<String>) -> Result<Vec<Value>> {
        let started = std::time::Instant::now();
        let mut conn = self.conn().await?;
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(&s.function).arg(keys.len()).arg(keys).arg(args);
        let v: Value = match cmd.query_async(&mut conn).await {
            Err(e) if e.to_string().contains("Function not found") => {
                load_library(&mut conn).await?;
                cmd.query_async(&mut conn).await?
            }
            other => other?,
        };
        metrics::histogram!("ojs_redis_script_duration_seconds", "script" => s.name)
            .record(started.elapsed().as_secs_f64());
        reply_items(v)
    }

    /// Checks Redis and records (or verifies) the key-schema version.
    pub async fn ping(&self) -> Result<()> {
        let mut conn = self.conn().await?;
        let existing: Option<u32> = redis::cmd("GET").arg(self.keys.schema()).query_async(&mut conn).await?;
        match existing {
            None => {
                let _: () = redis::cmd("SET")
                    .arg(self.keys.schema())
                    .arg(crate::SCHEMA_VERSION)
                    .arg("NX")
                    .query_async(&mut conn)
                    .await?;
                Ok(())
            }
            // A v1 keyspace is being upgraded (see `upgrade_schema`); every script reads it meanwhile.
            Some(v) if v == crate::SCHEMA_VERSION || v == crate::SCHEMA_VERSION_UPGRADED => Ok(()),
            Some(v) => Err(StoreError::Reply(format!(
                "key schema version {v} found in Redis, this server speaks {}; see migrations-notes/",
                crate::SCHEMA_VERSION
            ))),
        }
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

    pub async fn get_aging(&self, queue: &str) -> Result<Option<u64>> {
        let mut conn = self.conn().await?;
        Ok(redis::cmd("HGET")
            .arg(self.keys.queue_conf(queue))
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
            pipe.cmd("HGETALL").arg(self.keys.queue_priorities(q));
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

    // ---- reads (no state change, so plain commands) ----

    /// Dead-lettered jobs, newest first: (total, page of job hashes).
    pub async fn dead_list(&self, offset: u64, limit: u64) -> Result<(u64, Vec<JobFields>)> {
        let mut conn = self.conn().await?;
        let total: u64 = redis::cmd("ZCARD").arg(self.keys.dead()).query_async(&mut conn).await?;
        let (start, stop) = rank_range(offset, limit);
        let ids: Vec<String> = redis::cmd("ZRANGE")
            .arg(self.keys.dead())
            .arg(start)
            .arg(stop)
            .arg("REV")
            .query_async(&mut conn)
            .await?;
        drop(conn);
        let jobs = self.jobs(&ids).await?;
        Ok((total, jobs.into_iter().filter(|m| !m.is_empty()).collect()))
    }

    pub async fn queue_names(&self) -> Result<Vec<String>> {
        let mut conn = self.conn().await?;
        let mut names: Vec<String> = redis::cmd("SMEMBERS")
            .arg(self.keys.queues())
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
            pipe.cmd("HVALS").arg(self.keys.queue_priorities(q));
            pipe.cmd("HGETALL").arg(self.keys.queue_stats(q));
            pipe.cmd("SISMEMBER").arg(self.keys.paused()).arg(q);
        }
        let vals: Vec<Value> = pipe.query_async(&mut conn).await?;
        let mut out = Vec::with_capacity(names.len());
        for (q, c) in names.iter().zip(vals.chunks(3)) {
            let stats = flat_map(&c[1]);
            let g = |k: &str| stats.get(k).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0).max(0) as u64;
            out.push(QueueCounts {
                name: q.clone(),
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
                paused: val_i64(&c[2]) == 1,
            });
        }
        Ok(out)
    }

    pub async fn is_dead(&self, id: &str) -> Result<bool> {
        let mut conn = self.conn().await?;
        let score: Option<f64> = redis::cmd("ZSCORE")
            .arg(self.keys.dead())
            .arg(id)
            .query_async(&mut conn)
            .await?;
        Ok(score.is_some())
    }

    /// Pausing is one SADD/SREM: FETCH checks P..'paused' inside its script, so a paused queue is
    /// skipped atomically with every claim.
    pub async fn set_paused(&self, queue: &str, paused: bool) -> Result<()> {
        let mut conn = self.conn().await?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        let mut pipe = redis::pipe();
        pipe.atomic();
        pipe.cmd(if paused { "SADD" } else { "SREM" })
            .arg(self.keys.paused())
            .arg(queue)
            .ignore();
        pipe.cmd("SADD").arg(self.keys.queues()).arg(queue).ignore();
        pipe.cmd("XADD")
            .arg(self.keys.events())
            .arg("MAXLEN")
            .arg("~")
            .arg(100_000)
            .arg("*")
            .arg("type")
            .arg(if paused { "queue.paused" } else { "queue.resumed" })
            .arg("job_id")
            .arg("")
            .arg("queue")
            .arg(queue)
            .arg("job_type")
            .arg("")
            .arg("time")
            .arg(now as u64)
            .arg("data")
            .arg("{}")
            .ignore();
        let _: () = pipe.query_async(&mut conn).await?;
        Ok(())
    }

    /// The operator's directive for a worker, returned by its next heartbeat (None clears it).
    pub async fn set_worker_signal(&self, worker_id: &str, signal: Option<&str>) -> Result<()> {
        self.set_field(&self.keys.worker(worker_id), "signal", signal.map(str::to_owned))
            .await
    }

    /// Up to `count` events strictly after the event `cursor` (an event id, see [`event_position`];
    /// `0-0` for the beginning), oldest first. The entry holding the cursor is read again (it may hold
    /// later events of the same call), and what the cursor has seen is dropped.
    pub async fn events_after(&self, cursor: &str, count: usize) -> Result<Vec<(String, JobFields)>> {
        let seen = event_position(cursor).unwrap_or_default();
        // The cursor's own entry gives back its events 0..=k again (k = seen.2), dropped below.
        let want = count.saturating_add(seen.2 as usize + 1);
        let mut events = self
            .read_events(true, event_entry(cursor).to_string(), "+", want)
            .await?;
        events.retain(|(id, _)| event_position(id).unwrap_or_default() > seen);
        events.truncate(count);
        Ok(events)
    }

    /// The newest `count` events, newest first.
    pub async fn events_latest(&self, count: usize) -> Result<Vec<(String, JobFields)>> {
        self.read_events(false, "+".into(), "-", count).await
    }

    /// Reads at least `count` events (or all there are) from `from` (inclusive) towards `to`: forward
    /// (XRANGE, oldest first) or backward (XREVRANGE, newest first). Entries hold one call's events (up
    /// to 500), so the stream is read in pages of [`EVENT_PAGE`] entries until enough events are in,
    /// and no one reply grows with the size of the calls that wrote it.
    async fn read_events(
        &self,
        forward: bool,
        mut from: String,
        to: &str,
        count: usize,
    ) -> Result<Vec<(String, JobFields)>> {
        let mut conn = self.conn().await?;
        let mut out = Vec::new();
        while out.len() < count {
            let (cmd, a, b) = if forward {
                ("XRANGE", from.as_str(), to)
            } else {
                ("XREVRANGE", from.as_str(), to)
            };
            let v: Value = redis::cmd(cmd)
                .arg(self.keys.events())
                .arg(a)
                .arg(b)
                .arg("COUNT")
                .arg(EVENT_PAGE)
                .query_async(&mut conn)
                .await?;
            let entries = match &v {
                Value::Array(e) => e.len(),
                _ => 0,
            };
            let page = if forward {
                stream_entries(&v)
            } else {
                newest_first(&v, usize::MAX)
            };
            let Some((last, _)) = page.last() else { break };
            from = format!("({}", event_entry(last));
            out.extend(page);
            if entries < EVENT_PAGE {
                break;
            }
        }
        out.truncate(count);
        Ok(out)
    }

    /// Rate-limit keys in lexicographic order: (total, page).
    pub async fn rate_limit_keys(&self, offset: u64, limit: u64) -> Result<(u64, Vec<String>)> {
        let mut conn = self.conn().await?;
        let total: u64 = redis::cmd("ZCARD")
            .arg(self.keys.rl_keys())
            .query_async(&mut conn)
            .await?;
        let (start, stop) = rank_range(offset, limit);
        let keys: Vec<String> = redis::cmd("ZRANGE")
            .arg(self.keys.rl_keys())
            .arg(start)
            .arg(stop)
            .query_async(&mut conn)
            .await?;
        Ok((total, keys))
    }

    pub async fn backpressure(&self, queue: &str) -> Result<Option<Backpressure>> {
        let mut conn = self.conn().await?;
        let f: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(self.keys.queue_conf(queue))
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
        let now = redis_now_ms(&mut conn).await?;
        let rate = match (f.get(1).copied().flatten(), f.get(2).copied().flatten()) {
            (Some(limit), Some(period_ms)) => Some(Window { limit, period_ms }),
            _ => None,
        };
        let active: u64 = redis::cmd("ZCOUNT")
            .arg(format!("{}q:{queue}:rl:active", self.keys.prefix()))
            .arg(format!("({now}"))
            .arg("+inf")
            .query_async(&mut conn)
            .await?;
        let in_window: u64 = match rate {
            Some(w) => {
                redis::cmd("ZCOUNT")
                    .arg(format!("{}q:{queue}:rl:win", self.keys.prefix()))
                    .arg(now - w.period_ms as i64)
                    .arg("+inf")
                    .query_async(&mut conn)
                    .await?
            }
            None => 0,
        };
        Ok((f.first().copied().flatten(), rate, active, in_window))
    }

    /// A dedicated connection for the event tail's blocking reads (XREAD BLOCK must not hold up the
    /// shared connections). Its response timeout outlasts a whole [`EVENTS_BLOCK_MS`] read (redis-rs'
    /// default of 500 ms would drop an idle tail twice a second), and it is named
    /// `ojs-events:<namespace>` so that `CLIENT LIST` shows which pod tails what.
    pub async fn blocking_connection(&self) -> Result<redis::aio::MultiplexedConnection> {
        let cfg = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_millis(EVENTS_BLOCK_MS + 5_000)));
        let mut conn = self.client.get_multiplexed_async_connection_with_config(&cfg).await?;
        let _: () = redis::cmd("CLIENT")
            .arg("SETNAME")
            .arg(format!("ojs-events:{}", self.cfg.namespace))
            .query_async(&mut conn)
            .await?;
        Ok(conn)
    }

    /// Waits up to `block_ms` for events after `last` on a dedicated connection; oldest first.
    pub async fn events_block(
        &self,
        conn: &mut redis::aio::MultiplexedConnection,
        last: &str,
        block_ms: u64,
    ) -> Result<Vec<(String, JobFields)>> {
        let v: Value = redis::cmd("XREAD")
            .arg("COUNT")
            .arg(1000)
            .arg("BLOCK")
            .arg(block_ms)
            .arg("STREAMS")
            .arg(self.keys.events())
            .arg(last)
            .query_async(conn)
            .await?;
        // Reply: [[stream, [[id, [f, v…]], …]]] (RESP2) or a map (RESP3); nil on timeout.
        let entries = match &v {
            Value::Array(streams) => streams.first().and_then(|s| match s {
                Value::Array(pair) => pair.get(1).cloned(),
                _ => None,
            }),
            Value::Map(m) => m.first().map(|(_, e)| e.clone()),
            _ => None,
        };
        Ok(entries.map(|e| stream_entries(&e)).unwrap_or_default())
    }

    /// The id of the newest stream entry (where a tail starts), or "0-0".
    pub async fn events_last_id(&self) -> Result<String> {
        Ok(self
            .events_latest(1)
            .await?
            .first()
            .map(|(id, _)| event_entry(id).to_string())
            .unwrap_or_else(|| "0-0".into()))
    }

    // ---- cron reads (cron-set-1.lua, cron-delete-1.lua: ops/cron_*.rs; the cron tick: ops/enqueue.rs) ----

    /// Redis `TIME` in ms: the clock every script uses (cron schedules and admin views read it too).
    pub async fn now_ms(&self) -> Result<i64> {
        let mut conn = self.conn().await?;
        redis_now_ms(&mut conn).await
    }

    pub async fn cron_get(&self, name: &str) -> Result<Option<JobFields>> {
        let mut conn = self.conn().await?;
        let m: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(self.keys.cron(name))
            .query_async(&mut conn)
            .await?;
        Ok((!m.is_empty()).then_some(m))
    }

    /// Cron entries in name order: (total, page of (name, entry)).
    pub async fn cron_list(&self, offset: u64, limit: u64) -> Result<(u64, Vec<(String, JobFields)>)> {
        let mut conn = self.conn().await?;
        let total: u64 = redis::cmd("ZCARD")
            .arg(self.keys.crons())
            .query_async(&mut conn)
            .await?;
        let (first, last) = rank_range(offset, limit);
        let names: Vec<String> = redis::cmd("ZRANGE")
            .arg(self.keys.crons())
            .arg(first)
            .arg(last)
            .query_async(&mut conn)
            .await?;
        self.cron_entries(&mut conn, names).await.map(|e| (total, e))
    }

    /// Entries whose next_run_at is at or before Redis' clock, up to `limit`, and when the next one is
    /// due: (Redis now, due entries, next due ms). One round trip when nothing is due (the timer's usual
    /// case: Redis TIME and the earliest entries in one pipeline), two when something is.
    pub async fn cron_due(&self, limit: usize) -> Result<(i64, Vec<(String, JobFields)>, Option<i64>)> {
        let mut conn = self.conn().await?;
        let limit = limit.max(1);
        let (time, first): (Vec<String>, Vec<(String, f64)>) = redis::pipe()
            .cmd("TIME")
            .cmd("ZRANGE")
            .arg(self.keys.cron_due())
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

    async fn cron_entries(&self, conn: &mut ConnectionManager, names: Vec<String>) -> Result<Vec<(String, JobFields)>> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for n in &names {
            pipe.cmd("HGETALL").arg(self.keys.cron(n));
        }
        let maps: Vec<HashMap<String, String>> = pipe.query_async(conn).await?;
        Ok(names.into_iter().zip(maps).filter(|(_, m)| !m.is_empty()).collect())
    }

    /// A raw connection for read-only helpers (events, inspection) that live in the server crate.
    pub async fn connection(&self) -> Result<ConnectionManager> {
        self.conn().await
    }

    // ---- operator extensions: workers, admin listings (ext-admin-api; progress reports: ops/progress.rs) ----

    /// A worker's record (`P worker:<id>`: last_seen, state, signal, jobs), None when unknown or expired.
    pub async fn worker_record(&self, worker_id: &str) -> Result<Option<JobFields>> {
        let mut conn = self.conn().await?;
        let m: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(self.keys.worker(worker_id))
            .query_async(&mut conn)
            .await?;
        Ok((!m.is_empty()).then_some(m))
    }

    /// Workers that sent a heartbeat within [`WORKER_TTL_MS`], most recent first: (total, page of (id,
    /// record)). One ZCARD, one ZRANGE and one HGETALL per worker on the page.
    pub async fn workers_page(&self, offset: u64, limit: u64) -> Result<(u64, Vec<(String, JobFields)>)> {
        let key = self.keys.workers();
        let total = self.index_len(&key).await?;
        let ids = self.index_ids(&key, offset, limit, true).await?;
        let recs = self.hashes(ids.iter().map(|id| self.keys.worker(id))).await?;
        Ok((
            total,
            ids.into_iter().zip(recs).filter(|(_, r)| !r.is_empty()).collect(),
        ))
    }

    /// ZCARD of an index.
    pub async fn index_len(&self, key: &str) -> Result<u64> {
        let mut conn = self.conn().await?;
        Ok(redis::cmd("ZCARD").arg(key).query_async(&mut conn).await?)
    }

    /// Members `offset .. offset + count` of a sorted index (descending when `rev`), as job ids: a
    /// ready-set member (FIFO sequence + id) is cut to its last 36 bytes, the id.
    pub async fn index_ids(&self, key: &str, offset: u64, count: u64, rev: bool) -> Result<Vec<String>> {
        if count == 0 {
            return Ok(Vec::new());
        }
        let mut conn = self.conn().await?;
        let mut cmd = redis::cmd("ZRANGE");
        // Ranks past i64::MAX are refused by Redis: clamp them (such a page is empty).
        let (first, last) = rank_range(offset, count);
        cmd.arg(key).arg(first).arg(last);
        if rev {
            cmd.arg("REV");
        }
        let members: Vec<String> = cmd.query_async(&mut conn).await?;
        Ok(members
            .into_iter()
            .map(|m| match m.len() {
                n if n > 36 && m.is_char_boundary(n - 36) => m[n - 36..].to_string(),
                _ => m,
            })
            .collect())
    }

    /// HGETALL of each key in one pipeline (an empty map for a missing key).
    pub async fn hashes(&self, keys: impl IntoIterator<Item = String>) -> Result<Vec<JobFields>> {
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

    /// The dead letter set's size and its oldest and newest death times (ms): O(log n).
    pub async fn dead_summary(&self) -> Result<(u64, Option<i64>, Option<i64>)> {
        let mut conn = self.conn().await?;
        let mut pipe = redis::pipe();
        pipe.cmd("ZCARD").arg(self.keys.dead());
        pipe.cmd("ZRANGE").arg(self.keys.dead()).arg(0).arg(0).arg("WITHSCORES");
        pipe.cmd("ZRANGE")
            .arg(self.keys.dead())
            .arg(0)
            .arg(0)
            .arg("REV")
            .arg("WITHSCORES");
        type Scored = Vec<(String, f64)>;
        let (total, oldest, newest): (u64, Scored, Scored) = pipe.query_async(&mut conn).await?;
        let ms = |v: &[(String, f64)]| v.first().map(|(_, s)| *s as i64);
        Ok((total, ms(&oldest), ms(&newest)))
    }

    /// Up to `count` of the newest events at or after `since_ms` (Redis time), newest first.
    pub async fn events_since(&self, since_ms: i64, count: usize) -> Result<Vec<(String, JobFields)>> {
        let start = since_ms.max(0).to_string();
        self.read_events(false, "+".into(), &start, count).await
    }
}

/// An ack reply (includes/ack.lua), as fetch-1.lua returns it per request.
pub(crate) fn acked(items: &[redis::Value]) -> Transition<Acked> {
    transition(items, |i| Acked {
        now_ms: val_i64(at(i, 1)),
        attempt: val_i64(at(i, 2)),
        queue: val_str(at(i, 3)),
        job_type: val_str(at(i, 4)),
    })
}

/// Redis `TIME` in ms: reads use the same clock as the scripts.
async fn redis_now_ms(conn: &mut ConnectionManager) -> Result<i64> {
    let t: Vec<String> = redis::cmd("TIME").query_async(conn).await?;
    let part = |i: usize| t.get(i).and_then(|s| s.parse::<i64>().ok()).unwrap_or(0);
    Ok(part(0) * 1000 + part(1) / 1000)
}

/// Stream entries per read of the event stream (see `Store::read_events`).
const EVENT_PAGE: usize = 256;

/// The events of stream entries (an XRANGE reply), in order (lua/includes/emit.lua): an entry holds one
/// call's events, each starting at a `type` field; the k-th event of entry `<id>` has the event id `<id>`
/// (k = 0) or `<id>.<k>`.
pub fn stream_entries(v: &Value) -> Vec<(String, JobFields)> {
    let Value::Array(entries) = v else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(entries.len());
    for e in entries {
        let Value::Array(pair) = e else { continue };
        let ([id, Value::Array(fields)] | [id, Value::Array(fields), ..]) = pair.as_slice() else {
            continue;
        };
        let id = val_str(id);
        let mut k = 0usize;
        let mut event: Option<JobFields> = None;
        for f in fields.chunks(2) {
            let [name, value] = f else { continue };
            let name = val_str(name);
            if name == "type" {
                if let Some(ev) = event.take() {
                    out.push((event_id(&id, k), ev));
                    k += 1;
                }
            }
            event.get_or_insert_with(JobFields::new).insert(name, val_str(value));
        }
        if let Some(ev) = event {
            out.push((event_id(&id, k), ev));
        }
    }
    out
}

/// The newest `count` events of an XREVRANGE reply (entries newest first, each entry's events oldest
/// first), newest first.
fn newest_first(v: &Value, count: usize) -> Vec<(String, JobFields)> {
    let mut events = stream_entries(v);
    // Entries come newest first; reverse the events within each entry.
    let mut out = Vec::with_capacity(events.len());
    while !events.is_empty() {
        let entry = event_entry(&events[0].0).to_string();
        let n = events.iter().take_while(|(id, _)| event_entry(id) == entry).count();
        out.extend(events.drain(..n).rev());
    }
    out.truncate(count);
    out
}

fn event_id(entry: &str, k: usize) -> String {
    if k == 0 {
        entry.to_string()
    } else {
        format!("{entry}.{k}")
    }
}

/// The stream entry an event id lives in: `<ms>-<seq>` of `<ms>-<seq>[.<k>]`.
pub fn event_entry(id: &str) -> &str {
    id.split_once('.').map_or(id, |(e, _)| e)
}

/// An event id's position, comparable across entries: `(ms, seq, k)` of `<ms>-<seq>[.<k>]`; None for
/// anything else.
pub fn event_position(id: &str) -> Option<(u64, u64, u64)> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (entry, k) = match id.split_once('.') {
        Some((e, k)) if digits(k) => (e, k.parse().ok()?),
        Some(_) => return None,
        None => (id, 0),
    };
    let (ms, seq) = entry.split_once('-')?;
    if !digits(ms) || !digits(seq) {
        return None;
    }
    Some((ms.parse().ok()?, seq.parse().ok()?, k))
}

/// A uniform number in [0, 1) for backoff jitter, passed to the scripts so they stay deterministic.
pub(crate) fn rand_unit() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// The ZRANGE ranks of `limit` (at least 1) entries from `offset`. Redis ranks are i64, so a range past
/// that (a client's huge offset) is cut there: past the end anyway, it reads nothing, where the sum
/// would overflow.
fn rank_range(offset: u64, limit: u64) -> (u64, u64) {
    let end = i64::MAX as u64;
    (offset.min(end), offset.saturating_add(limit.max(1) - 1).min(end))
}

#[cfg(test)]
mod event_tests {
    use super::*;

    fn entry(id: &str, fields: &[&str]) -> Value {
        Value::Array(vec![
            Value::BulkString(id.as_bytes().to_vec()),
            Value::Array(
                fields
                    .iter()
                    .map(|f| Value::BulkString(f.as_bytes().to_vec()))
                    .collect(),
            ),
        ])
    }

    fn ev(t: &str, job: &str) -> Vec<&'static str> {
        let t: &'static str = Box::leak(t.to_string().into_boxed_str());
        let job: &'static str = Box::leak(job.to_string().into_boxed_str());
        vec![
            "type", t, "job_id", job, "queue", "q", "job_type", "x", "time", "1", "data", "{}",
        ]
    }

    #[test]
    fn an_entry_of_one_call_reads_as_its_events_each_with_its_own_id() {
        let one = ev("job.enqueued", "a");
        let three: Vec<&str> = [ev("job.started", "a"), ev("job.started", "b"), ev("job.completed", "c")].concat();
        let v = Value::Array(vec![entry("5-0", &one), entry("5-1", &three)]);
        let got: Vec<(String, String)> = stream_entries(&v)
            .into_iter()
            .map(|(id, f)| (id, format!("{} {}", f["type"], f["job_id"])))
            .collect();
        let want = [
            ("5-0", "job.enqueued a"),
            ("5-1", "job.started a"),
            ("5-1.1", "job.started b"),
            ("5-1.2", "job.completed c"),
        ];
        assert_eq!(got, want.map(|(a, b)| (a.to_string(), b.to_string())));
        // Newest first (an XREVRANGE reply: entries newest first), events reversed within their entry.
        let rev = Value::Array(vec![entry("5-1", &three), entry("5-0", &one)]);
        let ids: Vec<String> = newest_first(&rev, 3).into_iter().map(|(id, _)| id).collect();
        assert_eq!(ids, ["5-1.2", "5-1.1", "5-1"]);
    }

    #[test]
    fn event_ids_order_across_and_within_entries() {
        assert!(event_position("5-1.2") > event_position("5-1.1"));
        assert!(event_position("5-1.1") > event_position("5-1"));
        assert!(event_position("5-2") > event_position("5-1.9"));
        assert_eq!(event_entry("5-1.2"), "5-1");
        assert_eq!(event_entry("5-1"), "5-1");
        for bad in ["", "5", "5-", "-1", "a-1", "5-1.", "5-1.x", "5-1.+2"] {
            assert_eq!(event_position(bad), None, "{bad:?}");
        }
    }
}
