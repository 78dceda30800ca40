//! One module per resource, each owning its `router()`; [`crate::app`] assembles them.

pub mod admin;
pub mod checkpoints;
pub mod cron;
pub mod dead_letter;
pub mod events;
pub mod explain;
pub mod history;
pub mod jobs;
pub mod lifecycle;
pub mod pools;
pub mod progress;
pub mod queues;
pub mod rate_limits;
pub mod scheduling;
pub mod schema_registry;
pub mod system;
pub mod tenants;
pub mod webhooks;
pub mod workers;
pub mod workflows;
