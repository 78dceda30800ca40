//! Every lifecycle event the scripts write, and the members of its `data`, written once.
//!
//! This table is plain data: `crates/ojs-store/build.rs` includes it by path and turns each call
//! `ev_<kind>(P, job_id, queue, job_type, now, <part>, …)` in `lua/` into the `emit` of that event type
//! (the kind's name with `.` as `_`: `ev_job_started` writes `job.started`), failing the build for a kind
//! not listed here or a call with the wrong number of parts. A script never writes an event's type or
//! its data by hand. The parts travel as text, each after a `\x1f` (`lua/includes/emit.lua`), and
//! [`crate::event::data_json`] writes the event's `data` object from them, member by member, with the
//! JSON type each part names here: no JSON is built in Lua.
//!
//! A part may hold any byte but `\x1f`, except the kind's last part, which takes the rest of the value:
//! free text such as a workflow's name goes last. Names, states and the server's JSON (which escapes
//! control characters) never hold it.

/// How a part's text becomes a member of the event's `data`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// A number, written as the script wrote it (an integer: `text(v)` in Lua).
    Int,
    /// A string.
    Text,
    /// JSON text the server wrote (an error object, a progress value), copied as it is; `null` when
    /// empty.
    Json,
    /// `true` when the part is `1` (a Lua boolean in the `ev_<kind>` call: true, or false or nil).
    Flag,
    /// A JSON object whose members become members of `data` (a superseded job's reason).
    Members,
}

/// One member of an event's `data`: its name, its kind, and whether an empty part leaves it out.
#[derive(Clone, Copy, Debug)]
pub struct Member {
    pub name: &'static str,
    pub part: Part,
    pub optional: bool,
}

/// An event type and the members of its `data`, in order.
#[derive(Clone, Copy, Debug)]
pub struct EventKind {
    pub event: EventType,
    pub name: &'static str,
    pub data: &'static [Member],
}

const fn m(name: &'static str, part: Part) -> Member {
    Member {
        name,
        part,
        optional: false,
    }
}

/// A member left out of `data` when its part is empty (the script passed `nil`).
const fn opt(name: &'static str, part: Part) -> Member {
    Member {
        name,
        part,
        optional: true,
    }
}

use Part::{Flag, Int, Json, Members, Text};

/// Defines [`EventType`] and [`EVENT_KINDS`] from one list: each line a variant, its type's name and the
/// members of its data, so the enum and the table cannot disagree (the k-th kind is the k-th variant).
macro_rules! event_kinds {
    ($($(#[$doc:meta])* $variant:ident = $name:literal [$($member:expr),* $(,)?];)*) => {
        /// Every event type a script writes.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum EventType {
            $($(#[$doc])* $variant,)*
        }

        /// Every event type a script writes, with its data's members, in [`EventType`]'s order.
        pub const EVENT_KINDS: &[EventKind] = &[
            $(EventKind { event: EventType::$variant, name: $name, data: &[$($member),*] },)*
        ];
    };
}

event_kinds! {
    // A job's life.
    JobEnqueued = "job.enqueued" [opt("state", Text), opt("workflow_id", Text)];
    JobScheduled = "job.scheduled" [m("scheduled_at", Int), opt("reason", Text)];
    JobAvailable = "job.available" [m("from", Text)];
    JobStarted = "job.started" [m("attempt", Int), m("worker_id", Text)];
    JobProgress = "job.progress" [m("progress", Json), m("attempt", Int)];
    /// A checkpoint saved (ojs-durable-execution DUR-R003): its sequence, and the job's attempt then.
    JobCheckpointed = "job.checkpointed" [m("sequence", Int), m("attempt", Int)];
    JobCompleted = "job.completed" [m("attempt", Int), m("duration_ms", Int)];
    /// A failed attempt that will be retried, or a worker's 429 (`rate_limited`: no attempt spent).
    JobRetrying = "job.retrying" [opt("attempt", Int), m("delay_ms", Int), opt("error", Json), opt("rate_limited", Flag)];
    JobFailed = "job.failed" [m("attempt", Int), m("error", Json)];
    JobDeadLettered = "job.dead_lettered" [];
    JobDiscarded = "job.discarded" [];
    JobExpired = "job.expired" [];
    JobCancelled = "job.cancelled" [m("previous_state", Text), opt("reason", Text)];
    JobSuperseded = "job.superseded" [m("why", Members)];
    JobRequeued = "job.requeued" [m("reason", Text)];
    JobReleased = "job.released" [];
    JobRetried = "job.retried" [m("from", Text)];
    JobDeleted = "job.deleted" [];
    PriorityChanged = "priority.changed" [m("previous_priority", Int), m("new_priority", Int)];
    // Limits, backpressure and queues.
    RateLimitExceeded = "rate_limit.exceeded" [m("key", Text), m("strategy", Text), m("limit", Int), m("current", Int)];
    RateLimitDropped = "rate_limit.dropped" [m("key", Text), m("strategy", Text)];
    RateLimitReleased = "rate_limit.released" [m("key", Text), m("strategy", Text)];
    RateLimitDynamicAdjusted = "rate_limit.dynamic_adjusted" [m("key", Text), m("until", Int), m("reason", Json)];
    /// Ours: an adaptive key's effective limit moved (`reason`: `rate_limited` halved it, `recovered`
    /// raised it one step after `increase_after` successes).
    RateLimitAdjusted = "rate_limit.adjusted" [m("key", Text), m("strategy", Text), m("from", Int), m("to", Int), m("reason", Text)];
    BackpressureRejected = "backpressure.rejected" [m("queue", Text), m("depth", Int), m("bound", Int)];
    QueuePaused = "queue.paused" [];
    QueueResumed = "queue.resumed" [];
    // Cron entries and workflows.
    CronTriggered = "cron.triggered" [m("cron_name", Text)];
    CronSkipped = "cron.skipped" [m("cron_name", Text), m("reason", Text)];
    WorkflowCreated = "workflow.created" [m("workflow_id", Text), m("type", Text), opt("name", Text)];
    WorkflowCompleted = "workflow.completed" [m("workflow_id", Text), m("type", Text), opt("name", Text)];
    WorkflowFailed = "workflow.failed" [m("workflow_id", Text), m("type", Text), opt("name", Text)];
    WorkflowCancelled = "workflow.cancelled" [m("workflow_id", Text), m("type", Text), opt("name", Text)];
}

/// The Lua call that writes events of `kind`: `ev_job_started` for `job.started`.
pub fn lua_name(kind: &EventKind) -> String {
    format!("ev_{}", kind.name.replace('.', "_"))
}

/// The separator before each part of an event's data.
pub const PART_SEPARATOR: char = '\x1f';
