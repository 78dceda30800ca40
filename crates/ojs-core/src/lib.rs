//! The OJS domain, with no I/O: the job envelope and its validation, the job states, the retry policy,
//! the priority models and their single internal rank, names that become Redis keys, durations and
//! timestamps, unique-job and deduplication fingerprints, and the error catalog. The store and the
//! server both build on it.

pub mod checkpoint;
pub mod clock;
pub mod cron;
pub mod duration;
pub mod envelope;
pub mod error;
pub mod event;
pub mod explain;
pub mod job;
pub mod job_info;
pub mod job_version;
pub mod names;
pub mod newtypes;
pub mod priority;
pub mod ratelimit;
pub mod retry_defaults;
pub mod state;
pub mod stored;
pub mod tenancy;
pub mod unique;
pub mod workflow;

pub use error::{ErrorCode, OjsError};
pub use job_info::JobInfo;
pub use newtypes::{JobId, Priority, QueueName};
pub use priority::PriorityModel;
pub use state::JobState;
pub use stored::{Fields, JobCounts, StoredJob};
