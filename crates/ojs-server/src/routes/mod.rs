//! One module per resource, each owning its `router()`; [`crate::app`] assembles them.

pub mod admin;
pub mod cron;
pub mod dead_letter;
pub mod events;
pub mod history;
pub mod jobs;
pub mod lifecycle;
pub mod progress;
pub mod queues;
pub mod rate_limits;
pub mod system;
pub mod workers;
pub mod workflows;

use ojs_core::{names, OjsError};

/// A job id from a path: anything that is not a valid id cannot name a job.
pub fn path_job_id(id: &str) -> Result<&str, OjsError> {
    names::check_job_id(id)
        .map(|_| id)
        .map_err(|_| OjsError::not_found("job", id))
}
