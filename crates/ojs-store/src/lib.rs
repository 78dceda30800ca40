//! The only crate that knows the Redis key schema and calls the Lua scripts in `lua/`.
//!
//! Every state change is one script ([`scripts`]), called by one async fn on [`Store`] in the script's
//! typed twin (`ops/<op>.rs`); reads are plain commands in `reads/<what they read>.rs`; `store.rs` holds
//! the connections and the runner. The key
//! schema is described in `docs/architecture.md` and versioned in `migrations-notes/`.

mod conn;
mod error;
mod fnv;
pub mod keys;
pub mod layout;
mod ops;
mod reads;
mod reply;
mod schema_cache;
pub mod scripts;
pub mod shard_tags;
mod store;
mod tenancy;
mod tenancy_cache;

pub use conn::Conn;
pub use keys::Keys;
pub use ops::checkpoint::{CheckpointRead, CheckpointSaved, NewCheckpoint};
pub use ops::cron_fire::{CronFired, CronTick};
pub use ops::cron_set::CronSaved;
pub use ops::dead::DeadRetry;
pub use ops::enqueue::{policy_spec, EnqueueOutcome, Enqueued, Pressure};
pub use ops::fetch::{AckPart, WorkerReply, WorkerRequest};
pub use ops::fetch::{Claimed, Strategy};
pub use ops::heartbeat::Heartbeat;
pub use ops::job_explain::{ExplainGate, Explained};
pub use ops::nack::NackResult;
pub use ops::pick::PickQueue;
pub use ops::place::Placed;
pub use ops::pool_set::PoolSaved;
pub use ops::rl_gauges::RateLimitGauges;
pub use ops::rl_inspect::{AdaptiveState, RateLimitState};
pub use ops::schema::{SchemaEntry, SchemaPut};
pub use ops::webhook::{AfterFailure, ClaimedDelivery, DeliveryEnd, NewDelivery, SubSaved};
pub use ops::workflow_get::{WorkflowMember, WorkflowRecord};
pub use ops::{rand_unit, Acked, ClaimRef, Transition};
pub use reads::events::{event_entry, event_position, stream_entries, EventsRead};
pub use reads::queues::{Backpressure, EndedRetention, QueueCounts, ENDED_KEEP_LAST};
pub use reads::rate_limits::QueueLimitState;
pub use reads::tenants::{TenantCounts, TenantSeen};
pub use reads::webhooks::{GroupEntry, GroupLag, LoggedDelivery};
pub use reads::workers::WORKER_TTL_MS;
pub use reply::cold_fields;
pub use schema_cache::compile_schema;
pub use store::*;
