//! A queue as the API names it: its name's check and its counts (the queues API and the admin API).

use ojs_core::OjsError;
use ojs_store::QueueCounts;

use crate::error::ApiResult;
use crate::state::AppState;

/// The counts of the one queue named (every name has counts, zeros for a queue never used).
pub(crate) async fn one_queue(st: &AppState, q: &str) -> ApiResult<QueueCounts> {
    let c = st.shards.queue_counts(&[q.to_string()]).await?;
    c.into_iter()
        .next()
        .ok_or_else(|| OjsError::new(ojs_core::ErrorCode::Internal, "no counts for the queue").into())
}
