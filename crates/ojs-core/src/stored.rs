//! What the server reads back from Redis: a job's record ([`StoredJob`]), typed, and the plain
//! field maps ([`Fields`]) of the other hashes (cron entries, workers, pools, events, key statistics).
//!
//! A job record (lua/includes/record.lua) is a MessagePack map of field name -> string, written by the
//! scripts. [`StoredJob::put`] is the one place that knows which of those names the server reads and
//! what type each holds; every other field (the scripts' own bookkeeping: lanes, slots, uniqueness,
//! rate-limit units) is skipped when the record is decoded, so nothing on the server reads it by name.

use std::collections::HashMap;

use crate::state::JobState;

/// A stored hash's fields, name -> value (cron entries, workers, pools, events, statistics). The names
/// are the server's own, so a fast seeded hasher does (std's SipHash cost a tenth of a request).
pub type Fields = HashMap<String, String, foldhash::fast::RandomState>;

/// A queue's jobs by state, as its counters hold them: the store reads them, the API shows them (its
/// OpenAPI schema is this type). `scheduled` counts scheduled and retryable jobs (they wait in one
/// index); `completed`, `failed`, `discarded` and `cancelled` count since the queue was first used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct JobCounts {
    pub available: u64,
    pub active: u64,
    pub scheduled: u64,
    pub completed: u64,
    pub failed: u64,
    pub discarded: u64,
    pub cancelled: u64,
}

impl JobCounts {
    /// The jobs that wait to run: available (rate-limit lanes included) + scheduled + retryable. What a
    /// backpressure bound counts (the enqueue script computes the same sum).
    pub fn depth(&self) -> u64 {
        self.available + self.scheduled
    }

    /// These counts and `o`'s, summed.
    pub fn plus(self, o: &JobCounts) -> JobCounts {
        JobCounts {
            available: self.available + o.available,
            active: self.active + o.active,
            scheduled: self.scheduled + o.scheduled,
            completed: self.completed + o.completed,
            failed: self.failed + o.failed,
            discarded: self.discarded + o.discarded,
            cancelled: self.cancelled + o.cancelled,
        }
    }
}

/// The names of a job's lifecycle times ([`StoredJob::times`]), in the order the API shows them.
pub const TIME_FIELDS: [&str; 7] = [
    "created_at",
    "enqueued_at",
    "scheduled_at",
    "started_at",
    "completed_at",
    "cancelled_at",
    "discarded_at",
];

/// A stored job as the server reads it: the fields of its record that the API shows or the server
/// acts on. Numbers are stored as text; one that does not parse reads as absent, as does a state
/// that is not one of the eight.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StoredJob {
    /// `type`.
    pub job_type: Option<String>,
    pub queue: Option<String>,
    pub state: Option<JobState>,
    /// As the client gave it, in the server's priority model.
    pub priority: Option<i64>,
    pub attempt: Option<i64>,
    pub max_attempts: Option<i64>,
    pub retry_delay_ms: Option<i64>,
    /// The lifecycle times, ms since the epoch.
    pub created_at: Option<i64>,
    pub enqueued_at: Option<i64>,
    pub scheduled_at: Option<i64>,
    pub started_at: Option<i64>,
    pub completed_at: Option<i64>,
    pub cancelled_at: Option<i64>,
    pub discarded_at: Option<i64>,
    pub expires_at: Option<i64>,
    /// The worker of its current or last claim ('' when it gave none).
    pub worker_id: Option<String>,
    /// The current claim's lease deadline, ms (only while active).
    pub lease_until: Option<i64>,
    /// The claim count, which is the lease id (lua/includes/lease.lua).
    pub claims: Option<String>,
    /// JSON text: the ACK's result.
    pub result: Option<String>,
    /// The job's workflow (`wf`).
    pub workflow_id: Option<String>,
    /// JSON text: the results of the jobs before it in its workflow (decode adds it: see ojs-store).
    pub parent_results: Option<String>,
    /// JSON text: the current error, and the history (ojs-store turns the stored entries into JSON).
    pub error: Option<String>,
    pub errors: Option<String>,
    /// JSON text: why a job completed unrun (options.dedup, options.root_job).
    pub superseded: Option<String>,
    /// The last progress report: its value (text of a number), message, data (JSON text), when (ms)
    /// and the claim it belongs to.
    pub progress: Option<String>,
    pub progress_message: Option<String>,
    pub progress_data: Option<String>,
    pub progress_at: Option<i64>,
    pub progress_claim: Option<String>,
    /// The job's tenant (its meta.tenant_id, or as the queue's tenancy setting resolved it).
    pub tenant: Option<String>,
    /// Its rate-limit key.
    pub rl_key: Option<String>,
    /// The client's envelope as stored (JSON text, without the system fields).
    pub doc: Option<String>,
    /// Its checkpoint, when the script that read it returns one (FETCH does, for the attempt it
    /// starts: lua/includes/checkpoint.lua); not a field of the record.
    pub checkpoint: Option<crate::checkpoint::Checkpoint>,
}

impl StoredJob {
    /// Takes record field `name`; a field the server does not read is dropped. Answers whether it was
    /// one the server reads.
    pub fn put(&mut self, name: &str, value: String) -> bool {
        let int = || value.parse::<i64>().ok();
        match name {
            "type" => self.job_type = Some(value),
            "queue" => self.queue = Some(value),
            "state" => self.state = value.parse().ok(),
            "priority" => self.priority = int(),
            "attempt" => self.attempt = int(),
            "max_attempts" => self.max_attempts = int(),
            "retry_delay_ms" => self.retry_delay_ms = int(),
            "created_at" => self.created_at = int(),
            "enqueued_at" => self.enqueued_at = int(),
            "scheduled_at" => self.scheduled_at = int(),
            "started_at" => self.started_at = int(),
            "completed_at" => self.completed_at = int(),
            "cancelled_at" => self.cancelled_at = int(),
            "discarded_at" => self.discarded_at = int(),
            "expires_at" => self.expires_at = int(),
            "worker_id" => self.worker_id = Some(value),
            "lease_until" => self.lease_until = int(),
            "claims" => self.claims = Some(value),
            "result" => self.result = Some(value),
            "wf" => self.workflow_id = Some(value),
            "parent_results" => self.parent_results = Some(value),
            "error" => self.error = Some(value),
            "errors" => self.errors = Some(value),
            "superseded" => self.superseded = Some(value),
            "progress" => self.progress = Some(value),
            "progress_message" => self.progress_message = Some(value),
            "progress_data" => self.progress_data = Some(value),
            "progress_at" => self.progress_at = int(),
            "progress_claim" => self.progress_claim = Some(value),
            "tenant" => self.tenant = Some(value),
            "rl_key" => self.rl_key = Some(value),
            "doc" => self.doc = Some(value),
            _ => return false,
        }
        true
    }

    /// A job made of record fields (tests, and readers of a plain hash).
    pub fn from_pairs<K: AsRef<str>, V: Into<String>>(pairs: impl IntoIterator<Item = (K, V)>) -> Self {
        let mut job = Self::default();
        for (k, v) in pairs {
            job.put(k.as_ref(), v.into());
        }
        job
    }

    /// The job's lifecycle times, named by [`TIME_FIELDS`] in their order.
    pub fn times(&self) -> [Option<i64>; 7] {
        [
            self.created_at,
            self.enqueued_at,
            self.scheduled_at,
            self.started_at,
            self.completed_at,
            self.cancelled_at,
            self.discarded_at,
        ]
    }

    /// When the job reached an end state (its `<state>_at`); None for a state that is not an end.
    pub fn ended_at(&self, state: JobState) -> Option<i64> {
        match state {
            JobState::Completed => self.completed_at,
            JobState::Cancelled => self.cancelled_at,
            JobState::Discarded => self.discarded_at,
            _ => None,
        }
    }

    /// The state's name, '' when the record has none.
    pub fn state_name(&self) -> &'static str {
        self.state.map_or("", JobState::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_read_typed_and_the_scripts_own_are_dropped() {
        let mut j = StoredJob::default();
        assert!(j.put("state", "active".into()));
        assert!(j.put("attempt", "2".into()));
        assert!(j.put("wf", "w1".into()));
        assert!(!j.put("lane", "x".into()), "a script's own field is not the server's");
        assert!(j.put("priority", "not a number".into()));
        assert_eq!(j.state, Some(JobState::Active));
        assert_eq!(j.attempt, Some(2));
        assert_eq!(j.workflow_id.as_deref(), Some("w1"));
        assert_eq!(j.priority, None, "a number that does not parse reads as absent");
        assert_eq!(StoredJob::from_pairs([("state", "bogus")]).state, None);
    }

    #[test]
    fn an_end_state_has_its_time() {
        let j = StoredJob::from_pairs([("completed_at", "5"), ("started_at", "3")]);
        assert_eq!(j.ended_at(JobState::Completed), Some(5));
        assert_eq!(j.ended_at(JobState::Active), None);
        assert_eq!((TIME_FIELDS[3], j.times()[3]), ("started_at", Some(3)));
    }
}
