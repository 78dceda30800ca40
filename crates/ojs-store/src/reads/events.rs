//! The event stream `P events` (lua/includes/emit.lua): paging, the blocking tail, and event ids.

use ojs_core::event::{data_json, Event};
use redis::Value;

use crate::reply::val_str;
use crate::store::{Result, Store};

/// Stream entries per read of the event stream (see `Store::read_events`).
const EVENT_PAGE: usize = 256;

/// The events of stream entries (an XRANGE reply), in order (lua/includes/emit.lua): an entry holds one
/// call's events; the k-th event of entry `<id>` has the event id `<id>` (k = 0) or `<id>.<k>`.
pub fn stream_entries(v: &Value) -> Vec<(String, Event)> {
    let mut out = Vec::new();
    each_event(v, |id, k, event| out.push((event_id(&val_str(id), k), event.event())));
    out
}

/// One event of a stream entry, borrowed from the reply: one field named after its type whose value is
/// `<job_id> <queue> <job_type> <time> <data>` (emit.lua; the data is the parts of
/// `ojs_core::event::EVENT_KINDS`, read into the `data` JSON object here), or, in entries written before
/// that format,
/// the field/value pairs `type`, `job_id`, `queue`, `job_type`, `time`, `data`.
enum RawEvent<'a> {
    Packed(&'a str, &'a str),
    Pairs(&'a [Value]),
}

/// The parts of a packed event's value, in order.
const PACKED_PARTS: [&str; 5] = ["job_id", "queue", "job_type", "time", "data"];

impl<'a> RawEvent<'a> {
    fn etype(&self) -> &'a str {
        match self {
            RawEvent::Packed(t, _) => t,
            RawEvent::Pairs(fields) => pair_value(fields, "type"),
        }
    }

    fn queue(&self) -> &'a str {
        match self {
            RawEvent::Packed(_, v) => v.splitn(3, ' ').nth(1).unwrap_or(""),
            RawEvent::Pairs(fields) => pair_value(fields, "queue"),
        }
    }

    /// The event as every reader takes it.
    fn event(&self) -> Event {
        let mut event = Event::default();
        match self {
            RawEvent::Packed(t, v) => {
                event.event_type = (*t).into();
                for (name, part) in PACKED_PARTS.iter().zip(v.splitn(PACKED_PARTS.len(), ' ')) {
                    // The data's parts (ojs_core::event): the event's data object is written here.
                    let part = if *name == "data" {
                        data_json(t, part)
                    } else {
                        part.into()
                    };
                    event.put(name, part);
                }
            }
            RawEvent::Pairs(fields) => {
                for kv in fields.chunks(2) {
                    if let [name, value] = kv {
                        event.put(field_text(name), val_str(value));
                    }
                }
            }
        }
        event
    }
}

/// The value of field `name` among field/value pairs, borrowed (`""` when absent).
fn pair_value<'a>(fields: &'a [Value], name: &str) -> &'a str {
    fields
        .chunks(2)
        .find_map(|kv| match kv {
            [k, v] if field_text(k) == name => Some(field_text(v)),
            _ => None,
        })
        .unwrap_or("")
}

/// Splits stream entries into their events without copying: `f(entry id, k, the event)` for the k-th
/// event of each entry, oldest first. The one reading of emit.lua's formats that [`stream_entries`] and
/// [`EventsRead`] share: a field named `type` starts an event of the older format (its pairs run to the
/// next `type` or a packed event); any other field whose name holds a `.` is one packed event.
fn each_event<'a>(v: &'a Value, mut f: impl FnMut(&'a Value, usize, RawEvent<'a>)) {
    let Value::Array(entries) = v else { return };
    for e in entries {
        let Value::Array(pair) = e else { continue };
        let ([id, Value::Array(fields)] | [id, Value::Array(fields), ..]) = pair.as_slice() else {
            continue;
        };
        let mut k = 0usize;
        // The start of the older format's event being read, if any.
        let mut open: Option<usize> = None;
        let mut i = 0usize;
        while i + 1 < fields.len() {
            let name = field_text(&fields[i]);
            let packed = name != "type" && name.contains('.');
            if name == "type" || packed {
                if let Some(from) = open.take() {
                    f(id, k, RawEvent::Pairs(&fields[from..i]));
                    k += 1;
                }
            }
            if packed {
                f(id, k, RawEvent::Packed(name, field_text(&fields[i + 1])));
                k += 1;
            } else if name == "type" {
                open = Some(i);
            }
            i += 2;
        }
        if let Some(from) = open {
            f(id, k, RawEvent::Pairs(&fields[from..]));
        }
    }
}

/// A field name or value as text, borrowed (`""` for anything else).
fn field_text(v: &Value) -> &str {
    match v {
        Value::BulkString(b) => std::str::from_utf8(b).unwrap_or(""),
        Value::SimpleString(s) => s.as_str(),
        _ => "",
    }
}

/// One blocking read of the events stream (`Store::events_block`), decoded only as far as its reader
/// asks: the events tail reads every entry's type and queue to wake long-polls, and builds whole
/// events only when someone on this node listens.
pub struct EventsRead(Value);

impl EventsRead {
    /// The stream id of the last entry read, where the next read goes on from.
    pub fn last_entry(&self) -> Option<String> {
        match &self.0 {
            Value::Array(entries) => entries.iter().rev().find_map(|e| match e {
                Value::Array(pair) => pair.first().map(val_str),
                _ => None,
            }),
            _ => None,
        }
    }

    /// Calls `f(type, queue)` for each event read, oldest first (`""` for a field an event lacks).
    pub fn each_type_and_queue(&self, mut f: impl FnMut(&str, &str)) {
        each_event(&self.0, |_, _, event| f(event.etype(), event.queue()));
    }

    /// Every event read, with its id, oldest first.
    pub fn events(&self) -> Vec<(String, Event)> {
        stream_entries(&self.0)
    }
}

/// The newest `count` events of an XREVRANGE reply (entries newest first, each entry's events oldest
/// first), newest first.
fn newest_first(v: &Value, count: usize) -> Vec<(String, Event)> {
    let mut events = stream_entries(v);
    // Entries come newest first; reverse the events within each entry.
    let mut out = Vec::with_capacity(events.len());
    while !events.is_empty() {
        let entry = event_entry(&events[0].0).to_string();
        let n = events.iter().take_while(|(id, _)| event_entry(id) == entry).count();
        out.extend(events.drain(..n).rev());
    }
    out.truncate(count);
    out
}

fn event_id(entry: &str, k: usize) -> String {
    if k == 0 {
        entry.to_string()
    } else {
        format!("{entry}.{k}")
    }
}

/// The stream entry an event id lives in: `<ms>-<seq>` of `<ms>-<seq>[.<k>]`.
pub fn event_entry(id: &str) -> &str {
    id.split_once('.').map_or(id, |(e, _)| e)
}

/// An event id's position, comparable across entries: `(ms, seq, k)` of `<ms>-<seq>[.<k>]`; None for
/// anything else.
pub fn event_position(id: &str) -> Option<(u64, u64, u64)> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (entry, k) = match id.split_once('.') {
        Some((e, k)) if digits(k) => (e, k.parse().ok()?),
        Some(_) => return None,
        None => (id, 0),
    };
    let (ms, seq) = entry.split_once('-')?;
    if !digits(ms) || !digits(seq) {
        return None;
    }
    Some((ms.parse().ok()?, seq.parse().ok()?, k))
}

impl Store {
    /// Up to `count` events strictly after the event `cursor` (an event id, see [`event_position`];
    /// `0-0` for the beginning), oldest first. The entry holding the cursor is read again (it may hold
    /// later events of the same call), and what the cursor has seen is dropped.
    pub async fn events_after(&self, cursor: &str, count: usize) -> Result<Vec<(String, Event)>> {
        let seen = event_position(cursor).unwrap_or_default();
        // The cursor's own entry gives back its events 0..=k again (k = seen.2), dropped below.
        let want = count.saturating_add(seen.2 as usize + 1);
        let mut events = self
            .read_events(true, event_entry(cursor).to_string(), "+", want)
            .await?;
        events.retain(|(id, _)| event_position(id).unwrap_or_default() > seen);
        events.truncate(count);
        Ok(events)
    }

    /// The newest `count` events, newest first.
    pub async fn events_latest(&self, count: usize) -> Result<Vec<(String, Event)>> {
        self.read_events(false, "+".into(), "-", count).await
    }

    /// Up to `count` of the newest events at or after `since_ms` (Redis time), newest first.
    pub async fn events_since(&self, since_ms: i64, count: usize) -> Result<Vec<(String, Event)>> {
        let start = since_ms.max(0).to_string();
        self.read_events(false, "+".into(), &start, count).await
    }

    /// Reads at least `count` events (or all there are) from `from` (inclusive) towards `to`: forward
    /// (XRANGE, oldest first) or backward (XREVRANGE, newest first). Entries hold one call's events (up
    /// to 500), so the stream is read in pages of [`EVENT_PAGE`] entries until enough events are in,
    /// and no one reply grows with the size of the calls that wrote it.
    async fn read_events(
        &self,
        forward: bool,
        mut from: String,
        to: &str,
        count: usize,
    ) -> Result<Vec<(String, Event)>> {
        let mut conn = self.conn().await?;
        let mut out = Vec::new();
        while out.len() < count {
            let (cmd, a, b) = if forward {
                ("XRANGE", from.as_str(), to)
            } else {
                ("XREVRANGE", from.as_str(), to)
            };
            let v: Value = redis::cmd(cmd)
                .arg(self.keys().events())
                .arg(a)
                .arg(b)
                .arg("COUNT")
                .arg(EVENT_PAGE)
                .query_async(&mut conn)
                .await?;
            let entries = match &v {
                Value::Array(e) => e.len(),
                _ => 0,
            };
            let page = if forward {
                stream_entries(&v)
            } else {
                newest_first(&v, usize::MAX)
            };
            let Some((last, _)) = page.last() else { break };
            from = format!("({}", event_entry(last));
            out.extend(page);
            if entries < EVENT_PAGE {
                break;
            }
        }
        out.truncate(count);
        Ok(out)
    }

    /// Waits up to `block_ms` for events after `last` on a dedicated connection.
    pub async fn events_block(&self, conn: &mut crate::conn::Conn, last: &str, block_ms: u64) -> Result<EventsRead> {
        let v: Value = redis::cmd("XREAD")
            .arg("COUNT")
            .arg(1000)
            .arg("BLOCK")
            .arg(block_ms)
            .arg("STREAMS")
            .arg(self.keys().events())
            .arg(last)
            .query_async(conn)
            .await?;
        // Reply: [[stream, [[id, [f, v…]], …]]] (RESP2) or a map (RESP3); nil on timeout.
        let entries = match v {
            Value::Array(streams) => streams.into_iter().next().and_then(|s| match s {
                Value::Array(pair) => pair.into_iter().nth(1),
                _ => None,
            }),
            Value::Map(m) => m.into_iter().next().map(|(_, e)| e),
            _ => None,
        };
        Ok(EventsRead(entries.unwrap_or(Value::Nil)))
    }

    /// The id of the newest stream entry (where a tail starts), or "0-0": one entry read, not a page
    /// (an idle pod's tails read a page of 256 entries a second before: megabytes when calls were
    /// batches).
    pub async fn events_last_id(&self) -> Result<String> {
        let mut conn = self.conn().await?;
        let v: Value = redis::cmd("XREVRANGE")
            .arg(self.keys().events())
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1)
            .query_async(&mut conn)
            .await?;
        Ok(first_entry_id(&v).unwrap_or_else(|| "0-0".into()))
    }
}

/// The id of a stream reply's first entry (`[[id, fields], …]`).
fn first_entry_id(v: &Value) -> Option<String> {
    let Value::Array(entries) = v else { return None };
    let Some(Value::Array(entry)) = entries.first() else {
        return None;
    };
    match entry.first()? {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod event_tests {
    use super::*;

    fn entry(id: &str, fields: &[&str]) -> Value {
        Value::Array(vec![
            Value::BulkString(id.as_bytes().to_vec()),
            Value::Array(
                fields
                    .iter()
                    .map(|f| Value::BulkString(f.as_bytes().to_vec()))
                    .collect(),
            ),
        ])
    }

    fn ev(t: &str, job: &str) -> Vec<&'static str> {
        let t: &'static str = Box::leak(t.to_string().into_boxed_str());
        let job: &'static str = Box::leak(job.to_string().into_boxed_str());
        vec![
            "type", t, "job_id", job, "queue", "q", "job_type", "x", "time", "1", "data", "{}",
        ]
    }

    #[test]
    fn the_newest_entry_id_is_read_off_the_reply_whatever_its_fields() {
        let reply = Value::Array(vec![entry("1795357502123-4", &["anything", "at all"])]);
        assert_eq!(first_entry_id(&reply).as_deref(), Some("1795357502123-4"));
        let simple = Value::Array(vec![Value::Array(vec![Value::SimpleString("7-0".into()), Value::Nil])]);
        assert_eq!(first_entry_id(&simple).as_deref(), Some("7-0"));
        assert_eq!(
            first_entry_id(&Value::Array(vec![])),
            None,
            "an empty or missing stream"
        );
        assert_eq!(first_entry_id(&Value::Nil), None);
    }

    #[test]
    fn an_entry_of_one_call_reads_as_its_events_each_with_its_own_id() {
        let one = ev("job.enqueued", "a");
        let three: Vec<&str> = [ev("job.started", "a"), ev("job.started", "b"), ev("job.completed", "c")].concat();
        let v = Value::Array(vec![entry("5-0", &one), entry("5-1", &three)]);
        let got: Vec<(String, String)> = stream_entries(&v)
            .into_iter()
            .map(|(id, e)| (id, format!("{} {}", e.event_type, e.job_id)))
            .collect();
        let want = [
            ("5-0", "job.enqueued a"),
            ("5-1", "job.started a"),
            ("5-1.1", "job.started b"),
            ("5-1.2", "job.completed c"),
        ];
        assert_eq!(got, want.map(|(a, b)| (a.to_string(), b.to_string())));
        // Newest first (an XREVRANGE reply: entries newest first), events reversed within their entry.
        let rev = Value::Array(vec![entry("5-1", &three), entry("5-0", &one)]);
        let ids: Vec<String> = newest_first(&rev, 3).into_iter().map(|(id, _)| id).collect();
        assert_eq!(ids, ["5-1.2", "5-1.1", "5-1"]);
    }

    /// emit.lua's format (one field per event, named after its type) reads as the same events as the
    /// older pairs, the data keeping its spaces, an empty part empty, and entries of both formats mix.
    #[test]
    fn packed_events_read_like_the_older_pairs() {
        let packed = entry(
            "7-0",
            &[
                "job.started",
                "a q x 1 {\"attempt\":1,\"worker_id\":\"w 1\"}",
                "backpressure.rejected",
                " q  2 {}",
            ],
        );
        let older = entry("6-0", &ev("job.enqueued", "a"));
        let v = Value::Array(vec![older, packed]);
        let got = stream_entries(&v);
        let ids: Vec<&str> = got.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["6-0", "7-0", "7-0.1"]);
        let (_, first) = &got[0];
        assert_eq!(
            (first.event_type.as_str(), first.job_id.as_str(), first.queue.as_str()),
            ("job.enqueued", "a", "q")
        );
        assert_eq!(
            (first.job_type.as_str(), first.time_ms, first.data.as_str()),
            ("x", Some(1), "{}")
        );
        let (_, started) = &got[1];
        let want = Event {
            event_type: "job.started".into(),
            job_id: "a".into(),
            queue: "q".into(),
            job_type: "x".into(),
            time_ms: Some(1),
            data: "{\"attempt\":1,\"worker_id\":\"w 1\"}".into(),
        };
        assert_eq!(started, &want);
        let (_, rejected) = &got[2];
        assert_eq!((rejected.job_id.as_str(), rejected.queue.as_str()), ("", "q"));
        assert_eq!((rejected.job_type.as_str(), rejected.time_ms), ("", Some(2)));
        let mut seen = Vec::new();
        EventsRead(v.clone()).each_type_and_queue(|t, q| seen.push(format!("{t}@{q}")));
        assert_eq!(seen, ["job.enqueued@q", "job.started@q", "backpressure.rejected@q"]);
    }

    /// Data written as parts (ev_<kind> in lua/) reads as the kind's JSON object; data written as JSON
    /// before the parts reads as it is.
    #[test]
    fn data_parts_read_as_the_kinds_json() {
        let v = Value::Array(vec![entry(
            "8-0",
            &[
                "job.started",
                "a q x 1 \u{1f}2\u{1f}w-1",
                "job.failed",
                "a q x 1 \u{1f}2\u{1f}{\"code\":\"e\",\"details\":[]}",
                "job.completed",
                "a q x 1 {\"attempt\":1}",
                "job.discarded",
                "a q x 1 ",
            ],
        )]);
        let got = stream_entries(&v);
        let data: Vec<serde_json::Value> = got
            .iter()
            .map(|(_, e)| serde_json::from_str(&e.data).expect("JSON"))
            .collect();
        assert_eq!(data[0], serde_json::json!({"attempt": 2, "worker_id": "w-1"}));
        assert_eq!(
            data[1],
            serde_json::json!({"attempt": 2, "error": {"code": "e", "details": []}})
        );
        assert_eq!(data[2], serde_json::json!({"attempt": 1}));
        assert_eq!(data[3], serde_json::json!({}));
    }

    #[test]
    fn event_ids_order_across_and_within_entries() {
        assert!(event_position("5-1.2") > event_position("5-1.1"));
        assert!(event_position("5-1.1") > event_position("5-1"));
        assert!(event_position("5-2") > event_position("5-1.9"));
        assert_eq!(event_entry("5-1.2"), "5-1");
        assert_eq!(event_entry("5-1"), "5-1");
        for bad in ["", "5", "5-", "-1", "a-1", "5-1.", "5-1.x", "5-1.+2"] {
            assert_eq!(event_position(bad), None, "{bad:?}");
        }
    }

    /// The events tail reads each event's type and queue from an entry of several events without
    /// building them, and agrees with the whole decoding.
    #[test]
    fn types_and_queues_are_read_per_event() {
        let b = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let entry = |id: &str, kv: &[&str]| Value::Array(vec![b(id), Value::Array(kv.iter().map(|s| b(s)).collect())]);
        let read = EventsRead(Value::Array(vec![
            entry(
                "5-0",
                &[
                    "type",
                    "job.enqueued",
                    "job_id",
                    "a",
                    "queue",
                    "q1",
                    "type",
                    "job.started",
                    "job_id",
                    "b",
                ],
            ),
            entry("6-0", &["type", "job.available", "queue", "q2"]),
        ]));
        let mut seen = Vec::new();
        read.each_type_and_queue(|t, q| seen.push(format!("{t}@{q}")));
        assert_eq!(seen, ["job.enqueued@q1", "job.started@", "job.available@q2"]);
        assert_eq!(read.last_entry().as_deref(), Some("6-0"));
        let whole: Vec<String> = read
            .events()
            .iter()
            .map(|(id, e)| format!("{id}:{}", e.event_type))
            .collect();
        assert_eq!(whole, ["5-0:job.enqueued", "5-0.1:job.started", "6-0:job.available"]);
        assert_eq!(EventsRead(Value::Nil).last_entry(), None);
    }
}
