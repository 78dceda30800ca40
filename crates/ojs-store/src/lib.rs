//! The only crate that knows the Redis key schema and calls the Lua scripts in `lua/`.
//!
//! Every state change is one script ([`scripts`]), called by one async fn on [`Store`]. The key
//! schema is described in `docs/architecture.md` and versioned in `migrations-notes/`.

pub mod keys;
mod ops;
pub mod scripts;
mod store;

pub use keys::Keys;
pub use ops::cron_set::CronSaved;
pub use ops::enqueue::{policy_spec, CronFired, EnqueueOutcome, Enqueued, Pressure, ENQUEUE_STRIDE};
pub use ops::fetch::{AckPart, WorkerReply, WorkerRequest};
pub use ops::heartbeat::Heartbeat;
pub use ops::nack::NackResult;
pub use ops::rl_gauges::RateLimitGauges;
pub use ops::rl_inspect::RateLimitState;
pub use ops::workflow_get::{WorkflowMember, WorkflowRecord};
pub use store::*;

/// Version of the key schema this code writes; stored at `<prefix>schema`.
pub const SCHEMA_VERSION: u32 = 2;
/// The older version this code also reads, and upgrades at start ([`Store::upgrade_schema`]).
pub const SCHEMA_VERSION_UPGRADED: u32 = 1;
