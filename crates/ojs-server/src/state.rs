//! What every handler shares: the store and the configuration. Nothing here is job state: an API node
//! keeps none, so any number of them can serve the same Redis.

use std::sync::Arc;
use std::time::Instant;

use ojs_core::envelope::EnvelopeRules;
use ojs_store::Store;
use tokio::sync::watch;

use crate::config::Config;

#[derive(Clone)]
pub struct AppState(pub Arc<Inner>);

pub struct Inner {
    pub store: Arc<Store>,
    pub config: Config,
    pub rules: EnvelopeRules,
    pub started: Instant,
    /// Flips to true when the node begins shutting down: long-polls return at once, timers stop.
    pub shutting_down: watch::Receiver<bool>,
    /// This node's fan-out of the Redis event stream to its SSE clients (see `events_hub`).
    pub events: tokio::sync::broadcast::Sender<crate::events_hub::Entry>,
    /// Wakes this node's waiting long-polls when a job of their queue becomes available (see `wake`).
    pub wake: crate::wake::ReadyWake,
    /// Group commit of this node's concurrent single enqueues (see `coalesce`); started on first use,
    /// inside the runtime.
    pub enqueues: std::sync::OnceLock<crate::coalesce::Enqueues>,
    /// Group commit of this node's concurrent FETCH, ACK and ack-and-fetch-next requests.
    pub worker_calls: std::sync::OnceLock<crate::coalesce::WorkerCalls>,
}

/// Most requests one coalesced script call serves.
const MAX_COALESCED: usize = 256;

impl Inner {
    pub fn enqueues(&self) -> &crate::coalesce::Enqueues {
        self.enqueues.get_or_init(|| {
            crate::coalesce::enqueues(Arc::clone(&self.store), self.config.max_batch.min(MAX_COALESCED))
        })
    }

    pub fn worker_calls(&self) -> &crate::coalesce::WorkerCalls {
        self.worker_calls
            .get_or_init(|| crate::coalesce::worker_calls(Arc::clone(&self.store), MAX_COALESCED))
    }
}

impl std::ops::Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}
