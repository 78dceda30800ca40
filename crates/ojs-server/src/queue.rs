//! A queue as the API names it: its name's check and its counts (the queues API and the admin API).

use ojs_core::{names, OjsError};
use ojs_store::QueueCounts;

use crate::error::ApiResult;
use crate::state::AppState;

/// A queue name from a request (OJS core's pattern), or a 400 naming it.
pub(crate) fn queue_name(q: &str) -> Result<(), OjsError> {
    names::check_queue(q).map_err(OjsError::invalid)
}

/// The counts of the one queue named (every name has counts, zeros for a queue never used).
pub(crate) async fn one_queue(st: &AppState, q: &str) -> ApiResult<QueueCounts> {
    let c = st.shards.queue_counts(&[q.to_string()]).await?;
    c.into_iter()
        .next()
        .ok_or_else(|| OjsError::new(ojs_core::ErrorCode::Internal, "no counts for the queue").into())
}
