//! Read-only queries (no state change, so plain commands or pipelines, no script), one module per
//! thing read. State changes are the scripts' typed twins in `ops/`.

pub mod cron;
pub mod dead;
pub mod events;
pub mod index;
pub mod pools;
pub mod queues;
pub mod rate_limits;
pub mod tenants;
pub mod webhooks;
pub mod workers;

/// The ZRANGE ranks of `limit` (at least 1) entries from `offset`. Redis ranks are i64, so a range past
/// that (a client's huge offset) is cut there: past the end anyway, it reads nothing, where the sum
/// would overflow.
pub(crate) fn rank_range(offset: u64, limit: u64) -> (u64, u64) {
    let end = i64::MAX as u64;
    (offset.min(end), offset.saturating_add(limit.max(1) - 1).min(end))
}
