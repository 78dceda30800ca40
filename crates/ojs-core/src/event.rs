//! Lifecycle events: the event types and their data ([`EVENT_KINDS`], one definition the scripts'
//! emitters are generated from), and the event's `data` object written from the parts a script stored.

#[path = "event_kinds.rs"]
mod kinds;

pub use kinds::{lua_name, EventKind, EventType, Member, Part, EVENT_KINDS, PART_SEPARATOR};

/// The event kind named `name`.
pub fn event_kind(name: &str) -> Option<&'static EventKind> {
    EVENT_KINDS.iter().find(|k| k.name == name)
}

impl EventType {
    /// The event type named `name` (None for a type no script writes).
    pub fn parse(name: &str) -> Option<Self> {
        event_kind(name).map(|k| k.event)
    }

    /// The type's name, as events carry it (`job.started`).
    pub fn name(self) -> &'static str {
        EVENT_KINDS[self as usize].name
    }

    /// After events of these types a job of the event's queue may be claimable.
    pub fn makes_ready(self) -> bool {
        use EventType::*;
        matches!(
            self,
            JobEnqueued | JobAvailable | JobRequeued | JobRetried | JobReleased | RateLimitReleased
        )
    }
}

/// One lifecycle event as the event stream holds it (lua/includes/emit.lua), read back: the one
/// typed definition every reader takes (the events API and its SSE stream, history, the dashboard's
/// counts, the wake-ups, the tests).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Event {
    /// Its type's name (`job.started`): [`Event::kind`] reads it as an [`EventType`].
    pub event_type: String,
    pub job_id: String,
    pub queue: String,
    pub job_type: String,
    /// When, ms since the epoch on Redis' clock (None when the stored time is not a number).
    pub time_ms: Option<i64>,
    /// Its `data` object, JSON text ([`data_json`]).
    pub data: String,
}

impl Event {
    /// Its type (None for a name no script writes).
    pub fn kind(&self) -> Option<EventType> {
        EventType::parse(&self.event_type)
    }

    /// Takes stored field `name` (the older format's pairs: `type`, `job_id`, `queue`, `job_type`,
    /// `time`, `data`); any other is dropped.
    pub fn put(&mut self, name: &str, value: String) {
        match name {
            "type" => self.event_type = value,
            "job_id" => self.job_id = value,
            "queue" => self.queue = value,
            "job_type" => self.job_type = value,
            "time" => self.time_ms = value.parse().ok(),
            "data" => self.data = value,
            _ => {}
        }
    }
}

use serde_json::value::RawValue;
use std::fmt::Write as _;

/// The `data` JSON object of an event of type `etype` as a script stored it: parts written by
/// `ev_<kind>` (each after [`PART_SEPARATOR`]) are turned into the kind's members; anything else (an
/// entry written before the parts existed, or by the server itself) is JSON text already and is
/// returned as it is, `{}` when empty. A part that does not read as its kind (which no script writes)
/// leaves its member `null`; parts beyond the kind's are ignored, and missing ones are empty.
pub fn data_json(etype: &str, data: &str) -> String {
    let Some(parts) = data.strip_prefix(PART_SEPARATOR) else {
        return if data.is_empty() { "{}".into() } else { data.into() };
    };
    let Some(kind) = event_kind(etype) else {
        return "{}".into();
    };
    let mut out = String::with_capacity(data.len() + 16 * kind.data.len() + 2);
    out.push('{');
    let mut first = true;
    let mut values = parts.splitn(kind.data.len().max(1), PART_SEPARATOR);
    for member in kind.data {
        let value = values.next().unwrap_or("");
        if value.is_empty() && member.optional {
            continue;
        }
        if member.part == Part::Members {
            if let Some(inner) = members_of(value) {
                if !inner.is_empty() {
                    if !first {
                        out.push(',');
                    }
                    out.push_str(inner);
                    first = false;
                }
            }
            continue;
        }
        if !first {
            out.push(',');
        }
        first = false;
        write_str(&mut out, member.name);
        out.push(':');
        match member.part {
            Part::Int => match value.parse::<i64>() {
                Ok(n) => {
                    let _ = write!(out, "{n}");
                }
                Err(_) => match value.parse::<f64>() {
                    Ok(x) if x.is_finite() => {
                        let _ = write!(out, "{}", serde_json::Number::from_f64(x).expect("finite"));
                    }
                    _ => out.push_str("null"),
                },
            },
            Part::Text => write_str(&mut out, value),
            Part::Json => match serde_json::from_str::<&RawValue>(value) {
                Ok(v) => out.push_str(v.get()),
                Err(_) => out.push_str("null"),
            },
            Part::Flag => out.push_str(if value == "1" { "true" } else { "false" }),
            Part::Members => unreachable!("handled above"),
        }
    }
    out.push('}');
    out
}

/// The members of a JSON object text without its braces (`None` for anything else).
fn members_of(value: &str) -> Option<&str> {
    let v = serde_json::from_str::<&RawValue>(value).ok()?;
    let t = v.get().trim();
    let inner = t.strip_prefix('{')?.strip_suffix('}')?;
    Some(inner.trim())
}

fn write_str(out: &mut String, s: &str) {
    out.push_str(&serde_json::to_string(s).expect("a string serialises"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn parts(values: &[&str]) -> String {
        values.iter().map(|v| format!("{PART_SEPARATOR}{v}")).collect()
    }

    fn data(etype: &str, values: &[&str]) -> Value {
        serde_json::from_str(&data_json(etype, &parts(values))).expect("data is JSON")
    }

    #[test]
    fn parts_become_typed_members() {
        assert_eq!(
            data("job.started", &["1", "w 1"]),
            json!({"attempt": 1, "worker_id": "w 1"})
        );
        assert_eq!(
            data("job.retrying", &["2", "1000", r#"{"code":"x","details":[]}"#, ""]),
            json!({"attempt": 2, "delay_ms": 1000, "error": {"code": "x", "details": []}})
        );
        assert_eq!(
            data("job.retrying", &["", "500", "", "1"]),
            json!({"delay_ms": 500, "rate_limited": true})
        );
        assert_eq!(
            data("job.progress", &["", "3"]),
            json!({"progress": null, "attempt": 3})
        );
        assert_eq!(
            data("job.progress", &["0.5", "3"]),
            json!({"progress": 0.5, "attempt": 3})
        );
        assert_eq!(data("job.enqueued", &[]), json!({}));
        assert_eq!(
            data("job.enqueued", &["pending", "wf1"]),
            json!({"state": "pending", "workflow_id": "wf1"})
        );
        assert_eq!(
            data("job.superseded", &[r#"{"by":"a","reason":"r"}"#]),
            json!({"by": "a", "reason": "r"})
        );
        assert_eq!(data("job.superseded", &["{}"]), json!({}));
    }

    #[test]
    fn the_last_part_takes_the_rest() {
        let sep = PART_SEPARATOR.to_string();
        let name = format!("a{sep}b \"quoted\"");
        assert_eq!(
            data("workflow.created", &["w", "chain", &name]),
            json!({"workflow_id": "w", "type": "chain", "name": name})
        );
    }

    #[test]
    fn older_data_reads_as_it_is() {
        assert_eq!(data_json("job.started", r#"{"attempt":1}"#), r#"{"attempt":1}"#);
        assert_eq!(data_json("job.started", ""), "{}");
        assert_eq!(data_json("queue.paused", "{}"), "{}");
    }

    #[test]
    fn kinds_are_unique_and_named_like_their_lua_calls() {
        for (i, k) in EVENT_KINDS.iter().enumerate() {
            assert_eq!(k.event as usize, i, "{}: the table is in the enum's order", k.name);
            assert_eq!((EventType::parse(k.name), k.event.name()), (Some(k.event), k.name));
            assert!(EVENT_KINDS[..i].iter().all(|o| o.name != k.name), "{} twice", k.name);
            assert!(k.name.contains('.'), "{}: an event type holds a '.' (emit.lua)", k.name);
            let lua = lua_name(k);
            assert!(lua.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'), "{lua}");
            let members = k.data.iter().filter(|m| m.part == Part::Members).count();
            assert!(members == 0 || k.data.len() == 1, "{}: Members stands alone", k.name);
        }
    }
}
