//! Connections to one Redis node or to a Redis Cluster, behind one type.
//!
//! Every key of a shard carries its shard's hash tag (`keys.rs`), so on a cluster every script, pipeline
//! and read goes to the primary that owns that shard's slot: redis-rs' cluster client routes each command by
//! its key (`FCALL` by its first key, `XREAD` by its stream), follows `MOVED` and `ASK`, refreshes the
//! slot map and reconnects. `FUNCTION LOAD` goes to every primary, so a replica promoted later already
//! has the library. Commands without a key (`TIME`, `SCAN`, `CLIENT SETNAME`) are sent to the tag's
//! primary explicitly ([`Conn::on_tag`], given a key of the shard), so the clock the server reads is the clock the scripts read.
//!
//! A shard's slot moved to another primary while the server runs (README, "Moving a shard to another
//! primary"): every script names its shard's move guard, a key that never exists, among its keys
//! (`Store::run`), so while the slot is migrating Redis refuses every script of that shard with `TRYAGAIN`
//! before it runs, on either node (a script reading and writing its undeclared keys half on each node
//! would act on half the shard). redis-rs follows `ASK` and `MOVED` and retries `TRYAGAIN` a few times
//! with a short pause; past those, a command refused because its slot is moving is sent again here,
//! with a growing pause, until [`RESPONSE_TIMEOUT`] after it was first sent; then the error is the
//! caller's (`StoreError::Unavailable`: 503, retryable). Nothing of a refused command ran.

use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, ServerErrorKind, Value};

/// The longest a command waits for its answer on a cluster (redis-rs' response timeout, its retries
/// included), and how long it is sent again while its slot moves.
pub(crate) const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether Redis refused a command because its slot is moving between primaries: `TRYAGAIN` (a
/// multi-key command, as every script is, while its slot is migrating), or an `ASK` or `MOVED` that
/// redis-rs' own retries did not get past (the nodes do not agree on the slot yet). The command did not
/// run.
pub(crate) fn slot_moving(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Server(ServerErrorKind::TryAgain | ServerErrorKind::Ask | ServerErrorKind::Moved)
    )
}

/// Runs `attempt` again while its slot is moving ([`slot_moving`]), pausing 5 ms, then twice as long
/// each time up to 100 ms, until [`RESPONSE_TIMEOUT`] after the first attempt.
async fn while_slot_moves<T, F>(mut attempt: impl FnMut() -> F) -> RedisResult<T>
where
    F: std::future::Future<Output = RedisResult<T>>,
{
    let started = Instant::now();
    let mut pause = Duration::from_millis(5);
    loop {
        match attempt().await {
            Err(e) if slot_moving(&e) && started.elapsed() + pause < RESPONSE_TIMEOUT => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            other => return other,
        }
    }
}

/// A connection to the deployment's Redis: cheap to clone, multiplexed, self-reconnecting.
#[derive(Clone)]
pub enum Conn {
    /// One Redis node (`--redis-url`).
    Node(ConnectionManager),
    /// A dedicated connection to one node (the event tail's blocking reads).
    Dedicated(MultiplexedConnection),
    /// A Redis Cluster (`--redis-cluster`).
    Cluster(ClusterConnection),
}

impl Conn {
    /// Runs a command that names no key on the primary that owns `tag_key`'s slot (on one node: there).
    pub async fn on_tag<T: redis::FromRedisValue>(&mut self, cmd: &Cmd, tag_key: &str) -> redis::RedisResult<T> {
        match self {
            Conn::Cluster(c) => {
                let route = Route::with_key(tag_key, SlotAddr::Master);
                let v = c
                    .route_command(
                        cmd.clone(),
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                    )
                    .await?;
                // A routed command's error reply comes back as a value: made an error again here, so
                // that callers match its code (`BUSYGROUP`) as on one node, not a type mismatch.
                redis::from_redis_value(v.extract_error()?).map_err(Into::into)
            }
            other => cmd.query_async(other).await,
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Node(c) => c.req_packed_command(cmd),
            Conn::Dedicated(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => {
                let c: &ClusterConnection = c;
                Box::pin(while_slot_moves(move || {
                    let mut c = c.clone();
                    async move { c.req_packed_command(cmd).await }
                }))
            }
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Node(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Dedicated(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => {
                let c: &ClusterConnection = c;
                Box::pin(while_slot_moves(move || {
                    let mut c = c.clone();
                    async move { c.req_packed_commands(cmd, offset, count).await }
                }))
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Node(c) => c.get_db(),
            Conn::Dedicated(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// Where the deployment's Redis is, parsed from the configuration.
pub(crate) enum Backend {
    Node(redis::Client),
    Cluster(redis::cluster::ClusterClient, redis::cluster::ClusterClient),
}

impl Backend {
    /// `cluster`: seed nodes (`host:port` or URLs); empty: the single node at `url`.
    pub(crate) fn new(url: &str, cluster: &[String], blocking_timeout: Duration) -> Result<Self, String> {
        if cluster.is_empty() {
            return redis::Client::open(url)
                .map(Backend::Node)
                .map_err(|e| format!("invalid redis url {url:?}: {e}"));
        }
        let nodes: Vec<String> = cluster
            .iter()
            .map(|n| {
                if n.contains("://") {
                    n.clone()
                } else {
                    format!("redis://{n}")
                }
            })
            .collect();
        let build = |response: Duration| {
            redis::cluster::ClusterClientBuilder::new(nodes.clone())
                .connection_timeout(Duration::from_secs(2))
                .response_timeout(response)
                // TRYAGAIN (a slot moving), CLUSTERDOWN, MASTERDOWN, LOADING: retried after 10 to 20,
                // 40, 80 ms (redis-rs waits at least 1.28 s by default); a slot still moving after that
                // is retried by `while_slot_moves`.
                .retries(3)
                .min_retry_wait(10)
                .max_retry_wait(100)
                .build()
                .map_err(|e| format!("invalid redis cluster nodes {cluster:?}: {e}"))
        };
        Ok(Backend::Cluster(build(RESPONSE_TIMEOUT)?, build(blocking_timeout)?))
    }

    pub(crate) async fn shared(&self) -> redis::RedisResult<Conn> {
        match self {
            Backend::Node(client) => {
                let cfg = redis::aio::ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(Duration::from_secs(2)))
                    .set_response_timeout(Some(Duration::from_secs(10)))
                    .set_number_of_retries(2)
                    .set_max_delay(Duration::from_secs(1));
                Ok(Conn::Node(
                    ConnectionManager::new_with_config(client.clone(), cfg).await?,
                ))
            }
            Backend::Cluster(client, _) => Ok(Conn::Cluster(client.get_async_connection().await?)),
        }
    }

    /// A connection of its own whose response timeout is `blocking_timeout`.
    pub(crate) async fn dedicated(&self, blocking_timeout: Duration) -> redis::RedisResult<Conn> {
        match self {
            Backend::Node(client) => {
                let cfg = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(Duration::from_secs(2)))
                    .set_response_timeout(Some(blocking_timeout));
                Ok(Conn::Dedicated(
                    client.get_multiplexed_async_connection_with_config(&cfg).await?,
                ))
            }
            Backend::Cluster(_, blocking) => Ok(Conn::Cluster(blocking.get_async_connection().await?)),
        }
    }
}
