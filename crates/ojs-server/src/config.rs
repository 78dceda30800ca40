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
    /// MOVED/ASK and topology changes; every key of the namespace lives in one slot (see README).
    /// When given, --redis-url is not used.
    #[arg(long, env = "OJS_REDIS_CLUSTER", value_delimiter = ',')]
    pub redis_cluster: Vec<String>,

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
    #[arg(long, env = "OJS_API_KEYS", default_value = "", value_parser = crate::auth::parse_keys, hide_env_values = true)]
    pub api_keys: crate::auth::ApiKeys,

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

/// Queue weights: `name=weight` pairs.
#[derive(Debug, Clone, Default)]
pub struct Weights(pub Vec<(String, u32)>);

impl Weights {
    pub fn get(&self, queue: &str) -> Option<u32> {
        self.0.iter().find(|(q, _)| q == queue).map(|(_, w)| *w)
    }
}

fn parse_weights(s: &str) -> Result<Weights, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (q, w) = part
            .split_once('=')
            .ok_or_else(|| format!("queue weight {part:?} is not name=weight"))?;
        ojs_core::names::check_queue(q)?;
        let w: u32 = w
            .parse()
            .ok()
            .filter(|w| (1..=MAX_WEIGHT).contains(w))
            .ok_or_else(|| format!("weight of {q} must be 1..={MAX_WEIGHT}"))?;
        out.push((q.to_string(), w));
    }
    Ok(Weights(out))
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
