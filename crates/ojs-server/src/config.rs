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
    /// 1..=64.
    #[arg(long, env = "OJS_SHARDS", default_value_t = 1, value_parser = bounds::SHARDS.parser::<u16>())]
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

    /// Lease length of a fetched job that sets no visibility_timeout_ms, in ms: 1..=315360000000 (ten
    /// years, as a FETCH's own).
    #[arg(long, env = "OJS_VISIBILITY_TIMEOUT_MS", default_value_t = 30_000,
          value_parser = bounds::VISIBILITY_TIMEOUT_MS.parser::<u64>())]
    pub visibility_timeout_ms: u64,

    /// How long finished (completed, cancelled, discarded) jobs stay readable, in seconds; 0 = forever.
    /// 0..=3153600000 (100 years).
    #[arg(long, env = "OJS_RETENTION_SECS", default_value_t = 86_400,
          value_parser = bounds::RETENTION_SECS.parser::<u64>())]
    pub retention_secs: u64,

    /// How often each node promotes due scheduled jobs and reclaims expired leases, in ms: 5..=3600000
    /// (an hour).
    #[arg(long, env = "OJS_TICK_MS", default_value_t = 100, value_parser = bounds::TICK_MS.parser::<u64>())]
    pub tick_ms: u64,

    /// Redis connections per node: 1..=1024.
    #[arg(long, env = "OJS_REDIS_POOL", default_value_t = 32, value_parser = bounds::REDIS_POOL.parser::<usize>())]
    pub redis_pool: usize,

    /// Answer a state change only once this many replicas have it (`WAIT`, in the same round trip as
    /// the script), so a failover cannot lose what the server acknowledged. 0 = do not wait. 0..=100.
    #[arg(long, env = "OJS_REDIS_WAIT_REPLICAS", default_value_t = 0,
          value_parser = bounds::REDIS_WAIT_REPLICAS.parser::<u32>())]
    pub redis_wait_replicas: u32,

    /// How long a state change waits for those replicas before it is answered 503, in ms: 1..=60000 (a
    /// minute; `WAIT` with 0 would block its connection forever).
    #[arg(long, env = "OJS_REDIS_WAIT_TIMEOUT_MS", default_value_t = 1_000,
          value_parser = bounds::REDIS_WAIT_TIMEOUT_MS.parser::<u64>())]
    pub redis_wait_timeout_ms: u64,

    /// Largest request body, in bytes: 1024..=536870912 (1 KiB to 512 MiB, Redis' largest string).
    #[arg(long, env = "OJS_MAX_BODY_BYTES", default_value_t = 10 * 1024 * 1024,
          value_parser = bounds::MAX_BODY_BYTES.parser::<usize>())]
    pub max_body_bytes: usize,

    /// Most jobs in one batch enqueue: 1..=10000 (as many as a workflow; a batch is one script call).
    #[arg(long, env = "OJS_MAX_BATCH", default_value_t = 10_000, value_parser = bounds::MAX_BATCH.parser::<usize>())]
    pub max_batch: usize,

    /// How FETCH picks among several queues when the request names no `strategy`: `strict` (in the
    /// order given, each drained before the next) or `weighted`.
    #[arg(long, env = "OJS_FETCH_STRATEGY", default_value = "strict", value_parser = parse_strategy)]
    pub fetch_strategy: Strategy,

    /// Default queue weights for the weighted strategy, e.g. `critical=5,default=2,low=1`; a queue
    /// with no weight here or in the request weighs 1.
    #[arg(long, env = "OJS_QUEUE_WEIGHTS", default_value = "", value_parser = parse_weights)]
    pub queue_weights: Weights,

    /// API keys, `admin:<key>,worker:<key>,worker@<tenant>:<key>,…` (each at least 16 characters; a
    /// `worker@<tenant>` key acts as that tenant on every request). Without any, the server only listens
    /// on loopback unless --insecure-no-auth is given.
    #[arg(long, env = "OJS_API_KEYS", default_value = "", value_parser = crate::api_keys::parse_keys, hide_env_values = true)]
    pub api_keys: crate::api_keys::ApiKeys,

    /// Allow listening on a non-loopback address without API keys (anyone who can reach it can drain
    /// the queues).
    #[arg(long, env = "OJS_INSECURE_NO_AUTH", default_value_t = false)]
    pub insecure_no_auth: bool,

    /// Longest a request may take before it is answered 504 (`timeout`); above the 30 s long-poll cap.
    /// In ms: 1..=3600000 (an hour).
    #[arg(long, env = "OJS_REQUEST_TIMEOUT_MS", default_value_t = 60_000,
          value_parser = bounds::REQUEST_TIMEOUT_MS.parser::<u64>())]
    pub request_timeout_ms: u64,

    /// Most jobs one FETCH may claim: 1..=10000.
    #[arg(long, env = "OJS_MAX_FETCH", default_value_t = 1_000, value_parser = bounds::MAX_FETCH.parser::<u32>())]
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

    /// Hosts webhook deliveries may go to, `host[,host…]` (`*`: any). A subscription may name any http(s)
    /// URL; a delivery to a host not listed fails at once, dead, and says why. The default is loopback
    /// only, so that no subscription makes the server call into a network the operator did not choose.
    #[arg(long, env = "OJS_WEBHOOK_HOSTS", default_value = "localhost,127.0.0.1,::1", value_parser = parse_hosts)]
    pub webhook_hosts: WebhookHosts,

    /// How long one webhook delivery attempt may take before it counts as failed, in ms: 100..=60000. A
    /// pod holds a claimed delivery for this long and one second more; then another pod may take it over.
    #[arg(long, env = "OJS_WEBHOOK_TIMEOUT_MS", default_value_t = 30_000,
          value_parser = bounds::WEBHOOK_TIMEOUT_MS.parser::<u64>())]
    pub webhook_timeout_ms: u64,

    /// Most attempts of one webhook delivery (the first included) before it is dead: 1..=20.
    #[arg(long, env = "OJS_WEBHOOK_MAX_ATTEMPTS", default_value_t = 8,
          value_parser = bounds::WEBHOOK_MAX_ATTEMPTS.parser::<u32>())]
    pub webhook_max_attempts: u32,

    /// The delay before a webhook delivery's second attempt, in ms: 1..=3600000. The later ones follow
    /// the webhooks spec's table (30 s, 2 min, 10 min, 1 h, 4 h, 12 h, 24 h) scaled by this over 30 s.
    #[arg(long, env = "OJS_WEBHOOK_RETRY_BASE_MS", default_value_t = 30_000,
          value_parser = bounds::WEBHOOK_RETRY_BASE_MS.parser::<u64>())]
    pub webhook_retry_base_ms: u64,

    /// Export traces of every job's life (spans for enqueue, claim and completion) over OTLP/HTTP to this
    /// collector, a base URL like `http://otel-collector:4318` (`/v1/traces` is appended). Unset: no spans,
    /// unless the standard `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set; the
    /// other `OTEL_*` variables (headers, timeout, sampler, service name) apply too. See README, "Traces".
    #[arg(long, env = "OJS_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,

    /// Print the Redis Functions library this build loads into Redis (every operation of `lua/`, as
    /// crates/ojs-store/build.rs assembles it) to stdout and exit, without connecting to Redis.
    #[arg(long)]
    pub print_lua_library: bool,
}

/// The hosts webhook deliveries may go to (`--webhook-hosts`): lowercase names or addresses, or any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebhookHosts {
    Any,
    Only(Vec<String>),
}

impl WebhookHosts {
    /// Whether a delivery may go to `host` (a URL's host; an IPv6 address with or without brackets).
    pub fn allows(&self, host: &str) -> bool {
        let host = host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        match self {
            WebhookHosts::Any => true,
            WebhookHosts::Only(hosts) => hosts.contains(&host),
        }
    }
}

fn parse_hosts(s: &str) -> Result<WebhookHosts, String> {
    let hosts: Vec<String> = s
        .split(',')
        .map(|h| {
            h.trim()
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_ascii_lowercase()
        })
        .filter(|h| !h.is_empty())
        .collect();
    if hosts.iter().any(|h| h == "*") {
        return Ok(WebhookHosts::Any);
    }
    if let Some(bad) = hosts.iter().find(|h| h.contains(['/', ' ', '@', '?', '#'])) {
        return Err(format!("webhook hosts are host names or addresses, or *; got {bad:?}"));
    }
    Ok(WebhookHosts::Only(hosts))
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

/// The allowed values of a numeric flag: clap refuses any other when it parses the flag, and
/// [`Config::validate`] again in a `Config` built in code ([`bounds::ALL`]).
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// The flag, `--name`.
    pub flag: &'static str,
    /// Least allowed value.
    pub min: u64,
    /// Greatest allowed value.
    pub max: u64,
    /// What the range means (unit, limits, special values), for the refusal.
    pub means: &'static str,
    /// The flag's value in a `Config`.
    pub get: fn(&Config) -> u64,
}

impl Bounds {
    /// Refuses a value out of the range: `<v> is not in <min>..=<max> (<means>)`.
    pub fn check(&self, v: u64) -> Result<u64, String> {
        if (self.min..=self.max).contains(&v) {
            return Ok(v);
        }
        Err(format!("{v} is not in {}..={} ({})", self.min, self.max, self.means))
    }

    /// Clap's parser of the flag: a decimal integer in the range, as `T` (which holds the range).
    pub fn parser<T: TryFrom<u64>>(self) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static {
        move |s: &str| {
            let v = s.parse::<u64>().map_err(|_| {
                format!(
                    "{s:?} is not an integer in {}..={} ({})",
                    self.min, self.max, self.means
                )
            })?;
            T::try_from(self.check(v)?).map_err(|_| format!("{v} does not fit"))
        }
    }
}

/// The range of every numeric flag. A millisecond value, even added to the time now, stays below
/// 10^14, so Lua writes it and what it computes from it in full (its `tostring` writes 10^14 as
/// `1e+14`, and a number handed to Redis from 10^17 on as `1e+17`, which PEXPIRE refuses), and far
/// below 2^53.
pub mod bounds {
    use super::{Bounds, MAX_SHARDS};

    /// `--shards`: a server-made id names its shard in one byte.
    pub const SHARDS: Bounds = Bounds {
        flag: "--shards",
        min: 1,
        max: MAX_SHARDS as u64,
        means: "shards",
        get: |c| u64::from(c.shards),
    };

    /// `--visibility-timeout-ms`: what a FETCH may ask for itself.
    pub const VISIBILITY_TIMEOUT_MS: Bounds = Bounds {
        flag: "--visibility-timeout-ms",
        min: 1,
        max: ojs_core::envelope::MAX_VISIBILITY_MS,
        means: "ms, up to ten years",
        get: |c| c.visibility_timeout_ms,
    };

    /// `--retention-secs`: 100 years is 3.15e12 ms (10^14 s, 10^17 ms, made every ACK fail).
    pub const RETENTION_SECS: Bounds = Bounds {
        flag: "--retention-secs",
        min: 0,
        max: 100 * 365 * 24 * 3600,
        means: "seconds, up to 100 years; 0 = forever",
        get: |c| c.retention_secs,
    };

    /// `--tick-ms`: the timers sleep at least 5 ms; a longer tick than an hour leaves a lapsed lease
    /// unreclaimed that long.
    pub const TICK_MS: Bounds = Bounds {
        flag: "--tick-ms",
        min: 5,
        max: 3_600_000,
        means: "ms, up to an hour",
        get: |c| c.tick_ms,
    };

    /// `--redis-pool`: connections per node.
    pub const REDIS_POOL: Bounds = Bounds {
        flag: "--redis-pool",
        min: 1,
        max: 1024,
        means: "connections",
        get: |c| c.redis_pool as u64,
    };

    /// `--redis-wait-replicas`: more than a primary has makes every write wait out the timeout.
    pub const REDIS_WAIT_REPLICAS: Bounds = Bounds {
        flag: "--redis-wait-replicas",
        min: 0,
        max: 100,
        means: "replicas; 0 = do not wait",
        get: |c| u64::from(c.redis_wait_replicas),
    };

    /// `--redis-wait-timeout-ms`: `WAIT … 0` blocks forever, and holds its connection while it waits.
    pub const REDIS_WAIT_TIMEOUT_MS: Bounds = Bounds {
        flag: "--redis-wait-timeout-ms",
        min: 1,
        max: 60_000,
        means: "ms, up to a minute",
        get: |c| c.redis_wait_timeout_ms,
    };

    /// `--max-body-bytes`: at most Redis' largest string (`proto-max-bulk-len`, 512 MiB).
    pub const MAX_BODY_BYTES: Bounds = Bounds {
        flag: "--max-body-bytes",
        min: 1024,
        max: 512 * 1024 * 1024,
        means: "bytes, 1 KiB to 512 MiB",
        get: |c| c.max_body_bytes as u64,
    };

    /// `--max-batch`: a batch is one all-or-nothing script call, as large as a workflow at most.
    pub const MAX_BATCH: Bounds = Bounds {
        flag: "--max-batch",
        min: 1,
        max: ojs_core::workflow::MAX_WORKFLOW_JOBS as u64,
        means: "jobs",
        get: |c| c.max_batch as u64,
    };

    /// `--request-timeout-ms`.
    pub const REQUEST_TIMEOUT_MS: Bounds = Bounds {
        flag: "--request-timeout-ms",
        min: 1,
        max: 3_600_000,
        means: "ms, up to an hour",
        get: |c| c.request_timeout_ms,
    };

    /// `--max-fetch`: a FETCH's claims are one script call (with up to 255 other requests').
    pub const MAX_FETCH: Bounds = Bounds {
        flag: "--max-fetch",
        min: 1,
        max: 10_000,
        means: "jobs",
        get: |c| u64::from(c.max_fetch),
    };

    /// `--webhook-timeout-ms`: the webhooks spec recommends 5 to 60 s; tests use less.
    pub const WEBHOOK_TIMEOUT_MS: Bounds = Bounds {
        flag: "--webhook-timeout-ms",
        min: 100,
        max: 60_000,
        means: "ms, up to a minute",
        get: |c| c.webhook_timeout_ms,
    };

    /// `--webhook-max-attempts`: the spec asks for at least 5 retries and recommends 8 attempts.
    pub const WEBHOOK_MAX_ATTEMPTS: Bounds = Bounds {
        flag: "--webhook-max-attempts",
        min: 1,
        max: 20,
        means: "attempts",
        get: |c| u64::from(c.webhook_max_attempts),
    };

    /// `--webhook-retry-base-ms`: the second attempt's delay; the last of the table is 2,880 times it.
    pub const WEBHOOK_RETRY_BASE_MS: Bounds = Bounds {
        flag: "--webhook-retry-base-ms",
        min: 1,
        max: 3_600_000,
        means: "ms, up to an hour",
        get: |c| c.webhook_retry_base_ms,
    };

    /// Every bounded flag, for [`super::Config::validate`].
    pub const ALL: [Bounds; 14] = [
        SHARDS,
        VISIBILITY_TIMEOUT_MS,
        RETENTION_SECS,
        TICK_MS,
        REDIS_POOL,
        REDIS_WAIT_REPLICAS,
        REDIS_WAIT_TIMEOUT_MS,
        MAX_BODY_BYTES,
        MAX_BATCH,
        REQUEST_TIMEOUT_MS,
        MAX_FETCH,
        WEBHOOK_TIMEOUT_MS,
        WEBHOOK_MAX_ATTEMPTS,
        WEBHOOK_RETRY_BASE_MS,
    ];
}

fn parse_model(s: &str) -> Result<PriorityModel, String> {
    PriorityModel::parse(s).ok_or_else(|| format!("priority model must be 'seed' or 'core'; got {s:?}"))
}

impl Config {
    /// Refuses a numeric setting out of its range ([`bounds`]; a `Config` built in code skips clap's
    /// check), and configurations that would expose an unauthenticated server to the network.
    pub fn validate(&self) -> Result<(), String> {
        for b in bounds::ALL {
            b.check((b.get)(self)).map_err(|e| format!("{}: {e}", b.flag))?;
        }
        if self.api_keys.is_empty() && !self.listen.ip().is_loopback() && !self.insecure_no_auth {
            return Err(format!(
                "refusing to listen on {} without API keys: set OJS_API_KEYS (e.g. admin:<key>,worker:<key>), \
                 listen on loopback, or pass --insecure-no-auth if the network is trusted",
                self.listen
            ));
        }
        crate::traces::endpoint(self.otlp_endpoint.as_deref())?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every numeric flag and its range, written out here rather than read from [`bounds`].
    const RANGES: [(&str, u64, u64); 14] = [
        ("--shards", 1, 64),
        ("--visibility-timeout-ms", 1, 315_360_000_000),
        ("--retention-secs", 0, 3_153_600_000),
        ("--tick-ms", 5, 3_600_000),
        ("--redis-pool", 1, 1024),
        ("--redis-wait-replicas", 0, 100),
        ("--redis-wait-timeout-ms", 1, 60_000),
        ("--max-body-bytes", 1024, 536_870_912),
        ("--max-batch", 1, 10_000),
        ("--request-timeout-ms", 1, 3_600_000),
        ("--max-fetch", 1, 10_000),
        ("--webhook-timeout-ms", 100, 60_000),
        ("--webhook-max-attempts", 1, 20),
        ("--webhook-retry-base-ms", 1, 3_600_000),
    ];

    fn parse(flag: &str, v: u64) -> Result<Config, String> {
        Config::try_parse_from(["ojs-server", flag, &v.to_string()]).map_err(|e| e.to_string())
    }

    #[test]
    fn each_numeric_flag_takes_its_limits_and_refuses_one_past_naming_the_flag() {
        let defaults = Config::try_parse_from(["ojs-server"]).expect("defaults parse");
        assert_eq!(defaults.validate(), Ok(()), "every default is in range");
        for (flag, min, max) in RANGES {
            let bound = bounds::ALL.iter().find(|b| b.flag == flag).expect(flag);
            for v in [min, max] {
                let c = parse(flag, v).unwrap_or_else(|e| panic!("{flag} {v}: {e}"));
                assert_eq!((bound.get)(&c), v, "{flag}");
                assert_eq!(c.validate(), Ok(()), "{flag} {v}");
            }
            let past = [min.checked_sub(1), Some(max + 1)];
            for v in past.into_iter().flatten() {
                let e = parse(flag, v).err().unwrap_or_else(|| panic!("{flag} {v} accepted"));
                assert!(e.contains(flag) && e.contains(&format!("{min}..={max}")), "{e}");
            }
        }
    }

    #[test]
    fn the_bounds_are_every_numeric_flag_of_config_each_in_its_help() {
        let flags: Vec<&str> = bounds::ALL.iter().map(|b| b.flag).collect();
        assert_eq!(flags, RANGES.map(|(f, _, _)| f));
        let cmd = <Config as clap::CommandFactory>::command();
        for b in bounds::ALL {
            let arg = cmd.get_arguments().find(|a| a.get_long() == b.flag.strip_prefix("--"));
            let help = arg
                .and_then(|a| a.get_help())
                .map(|h| h.to_string())
                .unwrap_or_default();
            assert!(
                help.contains(&format!("{}..={}", b.min, b.max)),
                "{}'s help: {help}",
                b.flag
            );
        }
    }

    #[test]
    fn validate_refuses_an_otlp_endpoint_that_is_not_an_http_url() {
        let mut c = Config::for_redis("redis://127.0.0.1:1");
        for bad in ["localhost:4318", "grpc://collector:4317", "http://", "http:///v1"] {
            c.otlp_endpoint = Some(bad.into());
            let e = c.validate().unwrap_err();
            assert!(e.contains("--otlp-endpoint") && e.contains(bad), "{e}");
        }
        for good in ["http://localhost:4318", "https://otel.example.com/base/"] {
            c.otlp_endpoint = Some(good.into());
            assert_eq!(c.validate(), Ok(()));
        }
    }

    #[test]
    fn validate_refuses_a_retention_of_10_to_the_14_naming_the_flag() {
        let mut c = Config::for_redis("redis://127.0.0.1:1");
        c.retention_secs = 100_000_000_000_000;
        let e = c.validate().unwrap_err();
        assert!(e.contains("--retention-secs") && e.contains("0..=3153600000"), "{e}");
        c.retention_secs = 3_153_600_000;
        assert_eq!(c.validate(), Ok(()));
    }
}
