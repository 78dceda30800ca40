//! What the store's operations return: their error, their result, and a stored job's fields (below
//! every other module of the crate, which all use them).

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
    /// A script's reply does not match what its header's RETURNS promises (an item missing or of
    /// another kind, an undeclared tag): the script and its twin disagree. Maps to 500: it is a bug.
    #[error("script reply out of protocol: {0}")]
    Protocol(String),
    /// The store cannot be built from this configuration.
    #[error("invalid store configuration: {0}")]
    Config(String),
    /// The request cannot be served as it is (a job's tenant derived from its queue's tenancy setting
    /// is not a tenant id). Maps to 400; the message names the field.
    #[error("{0}")]
    Invalid(String),
    /// As `Invalid`, with machine-readable details (a job's args refused by its schema: the type, the
    /// version, the failing path). Maps to 400.
    #[error("{0}")]
    InvalidWith(String, serde_json::Value),
    /// Settings this request depends on kept changing while it was written (the schema registry under
    /// a burst of changes), or the cluster kept refusing it while it changed (a slot moving, a
    /// failover): nothing was written. Maps to 503, retryable, with this message (Redis is up).
    #[error("{0}")]
    Contended(String),
}

impl From<redis::RedisError> for StoreError {
    fn from(e: redis::RedisError) -> Self {
        if crate::conn::slot_moving(&e) {
            StoreError::Contended(format!(
                "the Redis Cluster slot of this request's shard is moving to another primary and stayed \
                 so for {} s; nothing was applied, send it again ({e})",
                crate::conn::RESPONSE_TIMEOUT.as_secs()
            ))
        } else if not_now(&e) {
            StoreError::Contended(format!(
                "the Redis Cluster is changing (a failover, a node loading); nothing was applied, send it again ({e})"
            ))
        } else if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout() {
            StoreError::Unavailable(e.to_string())
        } else {
            StoreError::Reply(e.to_string())
        }
    }
}

/// Whether Redis refused the command without running it because the cluster is changing, which the
/// connection's retries did not outlast (`conn.rs`; a slot moving to another primary is
/// `conn::slot_moving`): a failover (`CLUSTERDOWN`, `MASTERDOWN`, `READONLY`, no connection to a slot's
/// node), a node loading its data (`LOADING`).
fn not_now(e: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind as S};
    matches!(
        e.kind(),
        ErrorKind::Server(S::ClusterDown | S::MasterDown | S::ReadOnly | S::BusyLoading)
            | ErrorKind::ClusterConnectionNotFound
    )
}

pub type Result<T> = std::result::Result<T, StoreError>;
