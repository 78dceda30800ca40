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
    /// Coalesces this node's concurrent single enqueues into shared script calls (see `coalesce`);
    /// started on first use, inside the runtime.
    pub coalescer: std::sync::OnceLock<crate::coalesce::Coalescer>,
}

impl Inner {
    pub fn coalescer(&self) -> &crate::coalesce::Coalescer {
        self.coalescer
            .get_or_init(|| crate::coalesce::Coalescer::start(Arc::clone(&self.store), self.config.max_batch.min(256)))
    }
}

impl std::ops::Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}
