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

const fn kind(name: &'static str, data: &'static [Member]) -> EventKind {
    EventKind { name, data }
}

use Part::{Flag, Int, Json, Members, Text};

/// Every event type a script writes.
pub const EVENT_KINDS: &[EventKind] = &[
    // A job's life.
    kind("job.enqueued", &[opt("state", Text), opt("workflow_id", Text)]),
    kind("job.scheduled", &[m("scheduled_at", Int), opt("reason", Text)]),
    kind("job.available", &[m("from", Text)]),
    kind("job.started", &[m("attempt", Int), m("worker_id", Text)]),
    kind("job.progress", &[m("progress", Json), m("attempt", Int)]),
    kind("job.completed", &[m("attempt", Int), m("duration_ms", Int)]),
    kind(
        "job.retrying",
        &[
            opt("attempt", Int),
            m("delay_ms", Int),
            opt("error", Json),
            opt("rate_limited", Flag),
        ],
    ),
    kind("job.failed", &[m("attempt", Int), m("error", Json)]),
    kind("job.dead_lettered", &[]),
    kind("job.discarded", &[]),
    kind("job.expired", &[]),
    kind("job.cancelled", &[m("previous_state", Text), opt("reason", Text)]),
    kind("job.superseded", &[m("why", Members)]),
    kind("job.requeued", &[m("reason", Text)]),
    kind("job.released", &[]),
    kind("job.retried", &[m("from", Text)]),
    kind("job.deleted", &[]),
    kind(
        "priority.changed",
        &[m("previous_priority", Int), m("new_priority", Int)],
    ),
    // Limits and backpressure.
    kind(
        "rate_limit.exceeded",
        &[m("key", Text), m("strategy", Text), m("limit", Int), m("current", Int)],
    ),
    kind("rate_limit.dropped", &[m("key", Text), m("strategy", Text)]),
    kind("rate_limit.released", &[m("key", Text), m("strategy", Text)]),
    kind(
        "rate_limit.dynamic_adjusted",
        &[m("key", Text), m("until", Int), m("reason", Json)],
    ),
    kind(
        "backpressure.rejected",
        &[m("queue", Text), m("depth", Int), m("bound", Int)],
    ),
    // Queues.
    kind("queue.paused", &[]),
    kind("queue.resumed", &[]),
    // Cron entries and workflows.
    kind("cron.triggered", &[m("cron_name", Text)]),
    kind("cron.skipped", &[m("cron_name", Text), m("reason", Text)]),
    kind(
        "workflow.created",
        &[m("workflow_id", Text), m("type", Text), opt("name", Text)],
    ),
    kind(
        "workflow.completed",
        &[m("workflow_id", Text), m("type", Text), opt("name", Text)],
    ),
    kind(
        "workflow.failed",
        &[m("workflow_id", Text), m("type", Text), opt("name", Text)],
    ),
    kind(
        "workflow.cancelled",
        &[m("workflow_id", Text), m("type", Text), opt("name", Text)],
    ),
];

/// The Lua call that writes events of `kind`: `ev_job_started` for `job.started`.
pub fn lua_name(kind: &EventKind) -> String {
    format!("ev_{}", kind.name.replace('.', "_"))
}

/// The separator before each part of an event's data.
pub const PART_SEPARATOR: char = '\x1f';
