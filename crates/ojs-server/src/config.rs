//! Server configuration: one clap struct, every flag also readable from the environment.

use std::net::SocketAddr;

use clap::Parser;
use ojs_core::PriorityModel;
use ojs_store::Strategy;

#[derive(Debug, Clone, Parser)]
#[command(name = "ojs-server", version, about = "Open Job Spec server on Redis")]
pub struct Config {
    /// Redis to keep every job in (a single node; see --redis-cluster for a cluster).
    #[arg(long, env = "OJS_REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    pub redis_url: String,

    /// Run against a Redis Cluster instead: seed nodes, `host:port[,host:port…]`. The server follows
    /// MOVED/ASK and topology changes; every key of one shard of the namespace lives in one slot, so a
    /// deployment uses as many primaries as it has shards (--shards; see README).
    /// When given, --redis-url is not used.
    #[arg(long, env = "OJS_REDIS_CLUSTER", value_delimiter = ',')]
    pub redis_cluster: Vec<String>,

    /// Spread the deployment's queues over this many shards, each under its own hash tag (so its own
    /// Redis Cluster slot, which the cluster may put on its own primary). A queue is placed on first
    /// use, on its --queue-shard pin or on the hash of its name, and stays there; the number may be
    /// raised at any time (new queues spread over the new shards) and is never lowered (see README).
    #[arg(long, env = "OJS_SHARDS", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=MAX_SHARDS as i64))]
    pub shards: u16,

    /// Pin queues to shards, `name=shard[,name=shard…]` (shards count from 0), e.g. to keep the queues
    /// that share a rate-limit key or a workflow together. A pin applies when the queue is first
    /// placed; a queue already placed keeps its shard.
    #[arg(long = "queue-shard", env = "OJS_QUEUE_SHARDS", default_value = "", value_parser = parse_pins)]
    pub queue_shards: Pins,

    /// Address to listen on.
    #[arg(long, env = "OJS_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Deployment namespace: every key is `ojs:{<namespace>}:…` (one Redis Cluster slot).
    #[arg(long, env = "OJS_NAMESPACE", default_value = "main")]
    pub namespace: String,

    /// `seed`: top-level `priority`, 0..=4294967295, lower runs first, default 2 (the project's seed).
    /// `core`: `options.priority`, -100..=100, higher runs first, default 0 (OJS core compatibility).
    #[arg(long, env = "OJS_PRIORITY_MODEL", default_value = "seed", value_parser = parse_model)]
    pub priority_model: PriorityModel,

    /// Lease length of a fetched job that sets no visibility_timeout_ms, in ms.
    #[arg(long, env = "OJS_VISIBILITY_TIMEOUT_MS", default_value_t = 30_000)]
    pub visibility_timeout_ms: u64,

    /// How long finished (completed, cancelled, discarded) jobs stay readable, in seconds; 0 = forever.
    #[arg(long, env = "OJS_RETENTION_SECS", default_value_t = 86_400)]
    pub retention_secs: u64,

    /// How often each node promotes due scheduled jobs and reclaims expired leases, in ms.
    #[arg(long, env = "OJS_TICK_MS", default_value_t = 100)]
    pub tick_ms: u64,

    /// Redis connections per node.
    #[arg(long, env = "OJS_REDIS_POOL", default_value_t = 32)]
    pub redis_pool: usize,

    /// Answer a state change only once this many replicas have it (`WAIT`, in the same round trip as
    /// the script), so a failover cannot lose what the server acknowledged. 0 = do not wait.
    #[arg(long, env = "OJS_REDIS_WAIT_REPLICAS", default_value_t = 0)]
    pub redis_wait_replicas: u32,

    /// How long a state change waits for those replicas before it is answered 503, in ms.
    #[arg(long, env = "OJS_REDIS_WAIT_TIMEOUT_MS", default_value_t = 1_000)]
    pub redis_wait_timeout_ms: u64,

    /// Largest request body, in bytes.
    #[arg(long, env = "OJS_MAX_BODY_BYTES", default_value_t = 10 * 1024 * 1024)]
    pub max_body_bytes: usize,

    /// Most jobs in one batch enqueue.
    #[arg(long, env = "OJS_MAX_BATCH", default_value_t = 10_000)]
    pub max_batch: usize,

    /// How FETCH picks among several queues when the request names no `strategy`: `strict` (in the
    /// order given, each drained before the next) or `weighted`.
    #[arg(long, env = "OJS_FETCH_STRATEGY", default_value = "strict", value_parser = parse_strategy)]
    pub fetch_strategy: Strategy,

    /// Default queue weights for the weighted strategy, e.g. `critical=5,default=2,low=1`; a queue
    /// with no weight here or in the request weighs 1.
    #[arg(long, env = "OJS_QUEUE_WEIGHTS", default_value = "", value_parser = parse_weights)]
    pub queue_weights: Weights,

    /// API keys, `admin:<key>,worker:<key>,…` (each at least 16 characters). Without any, the server
    /// only listens on loopback unless --insecure-no-auth is given.
    #[arg(long, env = "OJS_API_KEYS", default_value = "", value_parser = crate::api_keys::parse_keys, hide_env_values = true)]
    pub api_keys: crate::api_keys::ApiKeys,

    /// Allow listening on a non-loopback address without API keys (anyone who can reach it can drain
    /// the queues).
    #[arg(long, env = "OJS_INSECURE_NO_AUTH", default_value_t = false)]
    pub insecure_no_auth: bool,

    /// Longest a request may take before it is answered 504 (`timeout`); above the 30 s long-poll cap.
    #[arg(long, env = "OJS_REQUEST_TIMEOUT_MS", default_value_t = 60_000)]
    pub request_timeout_ms: u64,

    /// Most jobs one FETCH may claim.
    #[arg(long, env = "OJS_MAX_FETCH", default_value_t = 1_000)]
    pub max_fetch: u32,

    /// Content-Type of JSON responses: `application/openjobspec+json` (default, what the OJS HTTP
    /// binding and its conformance suite demand) or `application/json` (also `ojs` / `json`). The
    /// Python SDK 0.4 parses a reply only when its Content-Type contains `application/json`: set
    /// `json` for it. The body is the same either way.
    #[arg(long, env = "OJS_RESPONSE_CONTENT_TYPE", default_value = "application/openjobspec+json",
          value_parser = parse_content_type)]
    pub response_content_type: ResponseContentType,

    /// What `queue` is in `GET /queues/{q}/stats`: `object` (default: `{"name", "available", …}`, the
    /// OpenAPI document and the conformance suite) or `name` (the queue's name, as the HTTP binding's
    /// prose shows it and the Go and Rust SDKs decode it). The counts are also at the top level and in
    /// `stats` either way.
    #[arg(long, env = "OJS_QUEUE_STATS_QUEUE", default_value = "object", value_parser = parse_stats_queue)]
    pub queue_stats_queue: QueueStatsQueue,
}

/// The Content-Type of JSON responses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseContentType {
    /// `application/openjobspec+json`.
    Ojs,
    /// `application/json` (Python SDK 0.4).
    Json,
}

fn parse_content_type(s: &str) -> Result<ResponseContentType, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "ojs" | "application/openjobspec+json" => Ok(ResponseContentType::Ojs),
        "json" | "application/json" => Ok(ResponseContentType::Json),
        _ => Err(format!(
            "response content type must be application/openjobspec+json (ojs) or application/json (json); got {s:?}"
        )),
    }
}

/// The `queue` field of a queue's stats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueStatsQueue {
    /// `{"name", "available", …}`.
    Object,
    /// The queue's name.
    Name,
}

fn parse_stats_queue(s: &str) -> Result<QueueStatsQueue, String> {
    match s {
        "object" => Ok(QueueStatsQueue::Object),
        "name" => Ok(QueueStatsQueue::Name),
        _ => Err(format!("queue stats `queue` must be 'object' or 'name'; got {s:?}")),
    }
}

fn parse_strategy(s: &str) -> Result<Strategy, String> {
    match s {
        "strict" => Ok(Strategy::Strict),
        "weighted" => Ok(Strategy::Weighted),
        _ => Err(format!("strategy must be 'strict' or 'weighted'; got {s:?}")),
    }
}

/// A setting per queue: `name=value` pairs, `value` parsed by the setting.
#[derive(Debug, Clone, Default)]
pub struct PerQueue<T>(pub Vec<(String, T)>);

impl<T: Copy> PerQueue<T> {
    pub fn get(&self, queue: &str) -> Option<T> {
        self.0.iter().find(|(q, _)| q == queue).map(|(_, v)| *v)
    }
}

/// Parses `name=value[,name=value…]` (`what` names the value in errors; `value` checks one).
fn per_queue<T>(s: &str, what: &str, value: impl Fn(&str) -> Option<T>, rule: &str) -> Result<PerQueue<T>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (q, v) = part
            .split_once('=')
            .ok_or_else(|| format!("queue {what} {part:?} is not name={what}"))?;
        ojs_core::names::check_queue(q)?;
        let v = value(v).ok_or_else(|| format!("{what} of {q} must be {rule}; got {v:?}"))?;
        out.push((q.to_string(), v));
    }
    Ok(PerQueue(out))
}

/// Queue weights: `name=weight` pairs.
pub type Weights = PerQueue<u32>;

fn parse_weights(s: &str) -> Result<Weights, String> {
    let range = format!("1..={MAX_WEIGHT}");
    per_queue(
        s,
        "weight",
        |w| w.parse().ok().filter(|w| (1..=MAX_WEIGHT).contains(w)),
        &range,
    )
}

/// Most shards a deployment may have (a server-made id names its shard in one byte).
pub const MAX_SHARDS: usize = 64;

/// Queue pins: `name=shard` pairs.
pub type Pins = PerQueue<usize>;

fn parse_pins(s: &str) -> Result<Pins, String> {
    let range = format!("0..{MAX_SHARDS}");
    per_queue(s, "shard", |n| n.parse().ok().filter(|n| *n < MAX_SHARDS), &range)
}

/// Largest queue weight (keeps one weighted round a bounded number of claims).
pub const MAX_WEIGHT: u32 = 1000;

fn parse_model(s: &str) -> Result<PriorityModel, String> {
    PriorityModel::parse(s).ok_or_else(|| format!("priority model must be 'seed' or 'core'; got {s:?}"))
}

impl Config {
    /// Refuses configurations that would expose an unauthenticated server to the network.
    pub fn validate(&self) -> Result<(), String> {
        if self.api_keys.is_empty() && !self.listen.ip().is_loopback() && !self.insecure_no_auth {
            return Err(format!(
                "refusing to listen on {} without API keys: set OJS_API_KEYS (e.g. admin:<key>,worker:<key>), \
                 listen on loopback, or pass --insecure-no-auth if the network is trusted",
                self.listen
            ));
        }
        if let Some((q, n)) = self.queue_shards.0.iter().find(|(_, n)| *n >= usize::from(self.shards)) {
            return Err(format!(
                "--queue-shard {q}={n} names shard {n}, but --shards is {}: shards count from 0",
                self.shards
            ));
        }
        Ok(())
    }

    /// Defaults for tests and embedding, as if no flag or variable were given.
    pub fn for_redis(redis_url: &str) -> Self {
        let mut c = Config::parse_from(["ojs-server"]);
        c.redis_url = redis_url.to_string();
        c.redis_cluster.clear();
        c
    }

    /// [`Config::for_redis`] on a Redis Cluster with these seed nodes (`host:port`).
    pub fn for_cluster(nodes: &[String]) -> Self {
        let mut c = Config::for_redis("redis://127.0.0.1:6379");
        c.redis_cluster = nodes.to_vec();
        c
    }

    /// The cluster's seed nodes (an empty `OJS_REDIS_CLUSTER` names none: single-node mode).
    pub fn cluster_nodes(&self) -> Vec<String> {
        self.redis_cluster
            .iter()
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
            .collect()
    }

    /// Where the jobs are, for the log: the URL, or `cluster <seed nodes>`.
    pub fn redis_target(&self) -> String {
        match self.cluster_nodes() {
            nodes if nodes.is_empty() => self.redis_url.clone(),
            nodes => format!("cluster {}", nodes.join(",")),
        }
    }
}
