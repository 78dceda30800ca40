//! What every handler shares: the store and the configuration. Nothing here is job state: an API node
//! keeps none, so any number of them can serve the same Redis.

use std::sync::Arc;
use std::time::Instant;

use ojs_core::envelope::EnvelopeRules;
use tokio::sync::watch;

use crate::config::Config;

/// One event as the hub fans it out: (event id, fields).
pub type Entry = Arc<(String, ojs_core::event::Event)>;

#[derive(Clone)]
pub struct AppState(pub Arc<Inner>);

pub struct Inner {
    /// The deployment's shards: each a store over the same connections (one when `--shards` is 1).
    pub shards: crate::shards::Shards,
    /// The OpenTelemetry tracer when `--otlp-endpoint` is set (see `traces`); `None` costs nothing.
    pub traces: Option<crate::traces::Traces>,
    pub config: Config,
    pub rules: EnvelopeRules,
    pub started: Instant,
    /// Flips to true when the node begins shutting down: long-polls return at once, timers stop.
    pub shutting_down: watch::Receiver<bool>,
    /// This node's fan-out of the Redis event stream to its SSE clients (see `events_hub`).
    pub events: tokio::sync::broadcast::Sender<Entry>,
    /// Wakes this node's waiting long-polls when a job of their queue becomes available (see `wake`).
    pub wake: crate::wake::ReadyWake,
    /// The requests that need the event streams read on this node (see `wake::Listeners`).
    pub listeners: Arc<crate::wake::Listeners>,
    /// Group commit of this node's concurrent single enqueues (see `coalesce`), one per shard; each
    /// started on first use, inside the runtime.
    pub enqueues: crate::coalesce::PerShard<ojs_core::job::NewJob, crate::coalesce::Single>,
    /// Group commit of this node's concurrent FETCH, ACK and ack-and-fetch-next requests, per shard.
    pub worker_calls: crate::coalesce::PerShard<ojs_store::WorkerRequest, (i64, ojs_store::WorkerReply)>,
}

/// Most requests one coalesced script call serves.
const MAX_COALESCED: usize = 256;

impl Inner {
    /// The single-enqueue coalescer of shard `shard`.
    pub fn enqueues(&self, shard: usize) -> &crate::coalesce::Enqueues {
        let store = self.shards.get(shard);
        let max_batch = self.config.max_batch.min(MAX_COALESCED);
        self.enqueues.get(store.shard_index(), self.shards.count(), |calls| {
            crate::coalesce::enqueues(Arc::clone(store), max_batch, calls)
        })
    }

    /// The worker-request coalescer of shard `shard`.
    pub fn worker_calls(&self, shard: usize) -> &crate::coalesce::WorkerCalls {
        let store = self.shards.get(shard);
        self.worker_calls
            .get(store.shard_index(), self.shards.count(), |calls| {
                crate::coalesce::worker_calls(Arc::clone(store), MAX_COALESCED, calls)
            })
    }
}

impl std::ops::Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}
