//! Decoding script and command replies, never with a panic: a script's reply through [`Reply`], which
//! holds it to its header's RETURNS (anything else is a protocol error); records, error entries and the
//! few lenient readers (`at`, `val_str`, `val_i64`) for what may be absent.

use redis::Value;

use ojs_core::checkpoint::Checkpoint;
use ojs_core::{Fields, StoredJob};

use crate::error::{Result, StoreError};

pub(crate) fn val_str(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        Value::Double(d) => d.to_string(),
        Value::Okay => "OK".into(),
        _ => String::new(),
    }
}

/// The field of a key-schema v3 record that holds its cold fields, packed as a record of their own
/// (lua/includes/record.lua, `REC_COLD`).
pub(crate) const COLD_FIELD: &str = "cold";

/// The names of the fields a v3 record keeps in [`COLD_FIELD`], as `REC_COLD` in
/// lua/includes/record.lua declares them (read from that file, so the server's packing and the test
/// kit's checker hold to the script's list).
pub fn cold_fields() -> Vec<&'static str> {
    const RECORD: &str = include_str!("../../../lua/includes/record.lua");
    RECORD
        .lines()
        .find(|l| l.starts_with("local REC_COLD = {"))
        .map(|line| line.split('\'').skip(1).step_by(2).collect())
        .unwrap_or_default()
}

/// What a record's fields are read into: every field by name ([`Fields`]: the checks of what the
/// server packs), or the ones the server reads, typed ([`StoredJob`]: every job the store answers).
pub(crate) trait RecordSink: Default {
    fn put(&mut self, name: &str, value: String);
}

impl RecordSink for Fields {
    fn put(&mut self, name: &str, value: String) {
        self.insert(name.to_string(), value);
    }
}

impl RecordSink for StoredJob {
    fn put(&mut self, name: &str, value: String) {
        StoredJob::put(self, name, value);
    }
}

/// A job record from its stored bytes: a MessagePack map of field name -> string value, written by
/// lua/includes/record.lua. In key schema v3 the cold fields sit packed in one field, [`COLD_FIELD`],
/// and are read as if they were the record's own (a v2 record has none and reads as it is). Bytes
/// that are not a record (never written by this server) read as no fields, with a warning.
pub(crate) fn decode_record<T: RecordSink>(bytes: &[u8]) -> Option<T> {
    let mut fields = T::default();
    match decode_record_into(bytes, &mut fields) {
        Ok(()) => Some(fields),
        Err(e) => {
            tracing::warn!(error = %e, "a job record is not a MessagePack map of strings");
            None
        }
    }
}

fn decode_record_into<T: RecordSink>(
    bytes: &[u8],
    fields: &mut T,
) -> std::result::Result<(), rmp_serde::decode::Error> {
    use serde::de::DeserializeSeed;
    RecordInto(fields).deserialize(&mut rmp_serde::Deserializer::from_read_ref(bytes))
}

/// Reads a record's map into the sink it is given, the cold field's nested map included.
struct RecordInto<'a, T>(&'a mut T);

impl<'de, T: RecordSink> serde::de::DeserializeSeed<'de> for RecordInto<'_, T> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, T: RecordSink> serde::de::Visitor<'de> for RecordInto<'_, T> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a map of field names to strings")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
        use serde::de::Error;
        while let Some(FieldName(name)) = map.next_key()? {
            let RecordValue(value) = map.next_value()?;
            if name == COLD_FIELD {
                decode_record_into(&value, self.0).map_err(A::Error::custom)?;
            } else if let Some(list) = error_field(&name) {
                self.0.put(&name, stored_errors_json(&value, list));
            } else {
                let value =
                    String::from_utf8(value).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
                self.0.put(&name, value);
            }
        }
        Ok(())
    }
}

/// A record field's name, borrowed from the record's bytes where it can be (no allocation per field).
struct FieldName<'de>(std::borrow::Cow<'de, str>);

impl<'de> serde::Deserialize<'de> for FieldName<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Name;
        impl<'de> serde::de::Visitor<'de> for Name {
            type Value = FieldName<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> std::result::Result<Self::Value, E> {
                Ok(FieldName(std::borrow::Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> std::result::Result<Self::Value, E> {
                Ok(FieldName(std::borrow::Cow::Owned(s.to_string())))
            }
        }
        d.deserialize_str(Name)
    }
}

/// Whether record field `name` holds error entries (lua/includes/errors.lua): `Some(false)` for `error`
/// (the current one), `Some(true)` for `errors` (the history).
fn error_field(name: &str) -> Option<bool> {
    match name {
        "error" => Some(false),
        "errors" => Some(true),
        _ => None,
    }
}

/// One item of an error entry: the error's JSON text, an attempt or a time.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum EntryItem {
    Int(i64),
    Text(String),
}

/// The JSON the API shows for a record's `error` (`list` false: the current error) or `errors` (`list`
/// true: the history, an array) as lua/includes/errors.lua stores them: entries `{error JSON, attempt,
/// occurred_at}` one after another, each shown as the error object with `attempt` and `occurred_at`
/// first (when it has them), the way records before entries held it as JSON text, which may come first
/// (a history an older server began). Whatever is not such an entry is left out, with a warning.
pub(crate) fn stored_errors_json(bytes: &[u8], list: bool) -> String {
    let mut shown: Vec<String> = Vec::new();
    let mut rest = bytes;
    // Written before entries: JSON text (an object, or an array of them for the history).
    if matches!(rest.first(), Some(b'{' | b'[')) {
        let mut stream = serde_json::Deserializer::from_slice(rest).into_iter::<&serde_json::value::RawValue>();
        match stream.next() {
            Some(Ok(v)) => {
                match serde_json::from_str::<Vec<&serde_json::value::RawValue>>(v.get()) {
                    Ok(each) => shown.extend(each.iter().map(|e| e.get().to_string())),
                    Err(_) => shown.push(v.get().to_string()),
                }
                rest = &rest[stream.byte_offset()..];
            }
            _ => {
                tracing::warn!("a job's stored error is neither JSON nor error entries");
                rest = &[];
            }
        }
    }
    let mut de = rmp_serde::Deserializer::new(std::io::Cursor::new(rest));
    while (de.position() as usize) < rest.len() {
        let items: Vec<Option<EntryItem>> = match serde::Deserialize::deserialize(&mut de) {
            Ok(items) => items,
            Err(e) => {
                tracing::warn!(error = %e, "a job's stored error entry is not {{error, attempt, occurred_at}}");
                break;
            }
        };
        let mut items = items.into_iter();
        let Some(Some(EntryItem::Text(err))) = items.next() else {
            continue;
        };
        let mut ints = items.filter_map(|i| match i {
            Some(EntryItem::Int(n)) => Some(n),
            _ => None,
        });
        let inner = err
            .trim()
            .strip_prefix('{')
            .and_then(|e| e.strip_suffix('}'))
            .map(str::trim);
        match (ints.next(), ints.next(), inner) {
            (Some(attempt), Some(at), Some(inner)) => {
                let sep = if inner.is_empty() { "" } else { "," };
                shown.push(format!("{{\"attempt\":{attempt},\"occurred_at\":{at}{sep}{inner}}}"));
            }
            _ => shown.push(err),
        }
    }
    if list {
        format!("[{}]", shown.join(","))
    } else {
        shown.pop().unwrap_or_default()
    }
}

/// One value of a stored record: a string, or (the cold field) MessagePack bytes, which need not be
/// UTF-8 (rmp_serde hands a string that is not UTF-8 to `visit_bytes`).
struct RecordValue(Vec<u8>);

impl<'de> serde::Deserialize<'de> for RecordValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_any(RecordValueVisitor)
    }
}

struct RecordValueVisitor;

impl serde::de::Visitor<'_> for RecordValueVisitor {
    type Value = RecordValue;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a string or bytes")
    }
    fn visit_str<E>(self, s: &str) -> std::result::Result<RecordValue, E> {
        Ok(RecordValue(s.as_bytes().to_vec()))
    }
    fn visit_string<E>(self, s: String) -> std::result::Result<RecordValue, E> {
        Ok(RecordValue(s.into_bytes()))
    }
    fn visit_bytes<E>(self, b: &[u8]) -> std::result::Result<RecordValue, E> {
        Ok(RecordValue(b.to_vec()))
    }
    fn visit_byte_buf<E>(self, b: Vec<u8>) -> std::result::Result<RecordValue, E> {
        Ok(RecordValue(b))
    }
}

/// A whole job as a script returns it (lua/includes/workflow.lua `wf_job_reply`): its record, or
/// `{record, {result, …}}` for a workflow job with parents, whose results (each JSON text) the script
/// read from the workflow's results hash (the record does not hold them); they become the JSON array
/// `parent_results`. Anything else (false: no such job) is None.
///
/// FETCH returns a job with a checkpoint as `{record, results or false, checkpoint}`
/// (lua/includes/checkpoint.lua `Checkpoint.job_reply`); the checkpoint becomes `checkpoint`.
pub(crate) fn decode_job(v: &Value) -> Option<StoredJob> {
    let parent_results = |f: &mut StoredJob, results: &Value| {
        f.parent_results = match results {
            Value::Array(each) => {
                let each: Vec<String> = each.iter().map(val_str).collect();
                Some(format!("[{}]", each.join(",")))
            }
            Value::Nil | Value::Boolean(false) | Value::Int(0) => None,
            other => Some(val_str(other)),
        };
    };
    match v {
        Value::BulkString(b) => decode_record(b),
        Value::Array(parts) => match parts.as_slice() {
            [Value::BulkString(b), results] => {
                let mut f: StoredJob = decode_record(b)?;
                parent_results(&mut f, results);
                Some(f)
            }
            [Value::BulkString(b), results, checkpoint] => {
                let mut f: StoredJob = decode_record(b)?;
                parent_results(&mut f, results);
                f.checkpoint = decode_checkpoint(checkpoint);
                Some(f)
            }
            _ => None,
        },
        _ => None,
    }
}

/// A checkpoint as lua/includes/checkpoint.lua `Checkpoint.read` returns it: `{state, seq, at, meta,
/// step}` (meta and step false when absent); false (nil here) for none.
pub(crate) fn decode_checkpoint(v: &Value) -> Option<Checkpoint> {
    let Value::Array(c) = v else { return None };
    let [state @ Value::BulkString(_), seq, at, meta, step] = c.as_slice() else {
        return None;
    };
    Some(Checkpoint {
        state: val_str(state),
        sequence: val_i64(seq),
        saved_at_ms: val_i64(at),
        metadata: val_opt_str(meta),
        step_index: val_opt_str(step).and_then(|s| s.parse().ok()),
    })
}

/// A value that may be absent (nil, or false from Lua): None.
pub(crate) fn val_opt_str(v: &Value) -> Option<String> {
    match v {
        Value::Nil => None,
        other => Some(val_str(other)),
    }
}

pub(crate) fn val_i64(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        other => val_str(other).parse().unwrap_or(0),
    }
}

pub(crate) fn flat_map(v: &Value) -> Fields {
    match v {
        Value::Array(items) => flat_pairs(items),
        _ => Fields::default(),
    }
}

/// A flat field/value array as a map.
pub(crate) fn flat_pairs(items: &[Value]) -> Fields {
    let mut m = Fields::default();
    for pair in items.chunks(2) {
        if let [k, v] = pair {
            m.insert(val_str(k), val_str(v));
        }
    }
    m
}

pub(crate) fn reply_items(v: Value) -> Result<Vec<Value>> {
    match v {
        Value::Array(items) if !items.is_empty() => Ok(items),
        other => Err(StoreError::Reply(format!(
            "script reply is not a tagged array: {other:?}"
        ))),
    }
}

/// A script's reply read against what its header's RETURNS promises: an item it promises that is
/// missing or of another kind, or a tag it does not declare, is a [`StoreError::Protocol`] naming the
/// script and the position (logged as an error, answered as a 500), never a silent 0 or ''. Items a
/// header documents as possibly nil or false (both nil here: a missing job in job-read-1's reply) are
/// read as they were, without it.
pub(crate) struct Reply<'a> {
    script: &'static str,
    items: &'a [Value],
}

impl<'a> Reply<'a> {
    pub(crate) fn new(script: &'static str, items: &'a [Value]) -> Self {
        Self { script, items }
    }

    /// The protocol error of item `i`, which is not `expected`.
    pub(crate) fn error(&self, i: usize, expected: &str) -> StoreError {
        let got = match self.items.get(i) {
            None => format!("a reply of {} item(s)", self.items.len()),
            Some(v) => format!("{v:?}"),
        };
        let e = StoreError::Protocol(format!("{}: item {i} should be {expected}; got {got}", self.script));
        tracing::error!(error = %e, "a script's reply does not match its header's RETURNS");
        e
    }

    /// Item 0, the reply's tag.
    pub(crate) fn tag(&self) -> Result<&'a str> {
        match self.items.first() {
            Some(Value::BulkString(b)) => std::str::from_utf8(b).map_err(|_| self.error(0, "a tag")),
            Some(Value::SimpleString(s)) => Ok(s),
            _ => Err(self.error(0, "a tag")),
        }
    }

    /// The error for a tag the script's header does not declare.
    pub(crate) fn unknown_tag(&self) -> StoreError {
        self.error(0, "a tag the header declares")
    }

    /// Item `i`, a string (a Lua number reads as its text).
    pub(crate) fn str(&self, i: usize) -> Result<String> {
        match self.items.get(i) {
            Some(v @ (Value::BulkString(_) | Value::SimpleString(_) | Value::Int(_))) => Ok(val_str(v)),
            _ => Err(self.error(i, "a string")),
        }
    }

    /// Item `i`, an integer (or a string of one).
    pub(crate) fn i64(&self, i: usize) -> Result<i64> {
        match self.items.get(i) {
            Some(Value::Int(n)) => Ok(*n),
            Some(v @ (Value::BulkString(_) | Value::SimpleString(_))) => {
                val_str(v).parse().map_err(|_| self.error(i, "an integer"))
            }
            _ => Err(self.error(i, "an integer")),
        }
    }

    /// Item `i`, an integer that is 1 (true) or 0 (false).
    pub(crate) fn flag(&self, i: usize) -> Result<bool> {
        match self.i64(i)? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(self.error(i, "0 or 1")),
        }
    }

    /// Item `i`, an array.
    pub(crate) fn array(&self, i: usize) -> Result<&'a [Value]> {
        match self.items.get(i) {
            Some(Value::Array(a)) => Ok(a),
            _ => Err(self.error(i, "an array")),
        }
    }

    /// A nested array of this reply (one of its items' items), read with the same checks and named
    /// after the same script.
    pub(crate) fn part(&self, items: &'a [Value]) -> Reply<'a> {
        Reply {
            script: self.script,
            items,
        }
    }

    /// The items from `i` on (none when the reply is shorter).
    pub(crate) fn rest(&self, i: usize) -> &'a [Value] {
        self.items.get(i..).unwrap_or_default()
    }
}

/// The i-th item of a reply, or Nil: a short reply must never panic the server.
pub(crate) fn at(items: &[Value], i: usize) -> &Value {
    items.get(i).unwrap_or(&Value::Nil)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Error entries (lua/includes/errors.lua) read as the JSON records before them held: each error
    /// object with its attempt and time first; a history an older server began (JSON text) comes first.
    #[test]
    fn error_entries_read_as_the_json_the_api_shows() {
        let entry = |err: &str, attempt: Option<i64>, at: Option<i64>| match (attempt, at) {
            (Some(a), Some(t)) => rmp_serde::to_vec(&(err, a, t)).expect("pack"),
            _ => rmp_serde::to_vec(&(err,)).expect("pack"),
        };
        let json = |t: &str| serde_json::from_str::<serde_json::Value>(t).expect("JSON");
        let one = entry(
            r#"{"code":"x","details":[],"n":12345678901234567890}"#,
            Some(2),
            Some(1000),
        );
        assert_eq!(
            json(&stored_errors_json(&one, false)),
            serde_json::json!({"attempt": 2, "occurred_at": 1000, "code": "x", "details": [],
                "n": 12345678901234567890u64})
        );
        let discarded = entry(r#"{"code":"expired","message":"m"}"#, None, None);
        assert_eq!(
            stored_errors_json(&discarded, false),
            r#"{"code":"expired","message":"m"}"#
        );
        let mut history = br#"[{"attempt":1,"occurred_at":5,"code":"a"}]"#.to_vec();
        history.extend(entry("{}", Some(2), Some(6)));
        history.extend(entry(r#"{"code":"c"}"#, Some(3), Some(7)));
        assert_eq!(
            json(&stored_errors_json(&history, true)),
            serde_json::json!([
                {"attempt": 1, "occurred_at": 5, "code": "a"},
                {"attempt": 2, "occurred_at": 6},
                {"attempt": 3, "occurred_at": 7, "code": "c"},
            ])
        );
        assert_eq!(stored_errors_json(br#"{"code":"old"}"#, false), r#"{"code":"old"}"#);
        assert_eq!(stored_errors_json(b"", true), "[]");
    }

    #[test]
    fn a_job_with_its_parents_results_reads_as_one_record() {
        let mut fields = Fields::default();
        fields.insert("state".into(), "active".into());
        fields.insert("lane".into(), "a script's own".into());
        let record = rmp_serde::to_vec(&fields).expect("pack");
        let plain = decode_job(&Value::BulkString(record.clone())).expect("a job");
        assert_eq!(plain, StoredJob::from_pairs([("state", "active")]));
        let with = decode_job(&Value::Array(vec![
            Value::BulkString(record),
            Value::Array(vec![
                Value::BulkString(b"1".to_vec()),
                Value::BulkString(b"null".to_vec()),
            ]),
        ]))
        .expect("a job");
        assert_eq!(with.parent_results.as_deref(), Some("[1,null]"));
        assert_eq!(with.state, Some(ojs_core::JobState::Active));
        assert!(decode_job(&Value::Boolean(false)).is_none());
    }

    /// A MessagePack map of the given entries, every value a str as Redis' cmsgpack writes Lua strings
    /// (whatever bytes it holds).
    fn packed(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = vec![0x80 | entries.len() as u8];
        let mut str_of = |b: &[u8]| {
            match b.len() {
                n if n < 32 => out.push(0xa0 | n as u8),
                n if n < 256 => out.extend([0xd9, n as u8]),
                n => out.extend([0xda, (n >> 8) as u8, n as u8]),
            }
            out.extend_from_slice(b);
        };
        for (k, v) in entries {
            str_of(k.as_bytes());
            str_of(v);
        }
        out
    }

    #[test]
    fn a_v3_record_reads_its_cold_fields_into_the_same_map_and_a_v2_record_reads_as_it_is() {
        let doc = br#"{"type":"mail.send","args":["\u00e9t\u00e9"]}"#;
        let cold = packed(&[("doc", doc), ("rank", b"2")]);
        assert!(
            std::str::from_utf8(&cold).is_err(),
            "the nested map is not UTF-8, as in Redis"
        );
        let v3: Fields =
            decode_record(&packed(&[("state", b"active"), (COLD_FIELD, &cold), ("attempt", b"1")])).expect("a record");
        let v2: Fields = decode_record(&packed(&[
            ("state", b"active"),
            ("doc", doc),
            ("rank", b"2"),
            ("attempt", b"1"),
        ]))
        .expect("a record");
        assert_eq!(v3, v2);
        assert_eq!(v3.len(), 4);
        assert_eq!(v3.get("doc").map(String::as_bytes), Some(&doc[..]));
        assert!(!v3.contains_key(COLD_FIELD));
        // Bytes that are not a record, or a cold field that is not one, read as no fields.
        assert!(decode_record::<Fields>(b"not msgpack").is_none());
        assert!(decode_record::<StoredJob>(&packed(&[("state", b"active"), (COLD_FIELD, b"\xc1")])).is_none());
        // The job reads its cold fields as its own.
        let job: StoredJob = decode_record(&packed(&[("state", b"active"), (COLD_FIELD, &cold)])).expect("a job");
        assert_eq!(job.doc.as_deref().map(str::as_bytes), Some(&doc[..]));
    }

    /// A reply that is short, of another kind, or tagged as its header does not say is a protocol
    /// error naming the script and the position, never a silent 0 or ''.
    #[test]
    fn a_reply_out_of_protocol_is_an_error_naming_the_script_and_item() {
        let items = [
            Value::BulkString(b"ok".to_vec()),
            Value::Int(7),
            Value::BulkString(b"x".to_vec()),
        ];
        let r = Reply::new("nack", &items);
        assert_eq!(r.tag().ok(), Some("ok"));
        assert_eq!(r.i64(1).ok(), Some(7));
        assert_eq!(r.str(1).ok().as_deref(), Some("7"));
        let short = r.i64(5).expect_err("item 5 is missing");
        assert!(matches!(&short, StoreError::Protocol(m) if m.contains("nack") && m.contains("item 5")));
        assert!(matches!(r.i64(2), Err(StoreError::Protocol(m)) if m.contains("item 2")));
        assert!(matches!(r.flag(1), Err(StoreError::Protocol(_))));
        assert!(matches!(r.array(1), Err(StoreError::Protocol(_))));
        let odd = [Value::BulkString(b"what".to_vec())];
        let transition = crate::ops::transition(&Reply::new("cancel", &odd), |_| Ok(()));
        assert!(matches!(transition, Err(StoreError::Protocol(m)) if m.contains("cancel") && m.contains("item 0")));
        let refused = [
            Value::BulkString(b"state".to_vec()),
            Value::BulkString(b"active".to_vec()),
        ];
        let transition = crate::ops::transition(&Reply::new("cancel", &refused), |_| Ok(()));
        assert!(matches!(transition, Ok(crate::ops::Transition::WrongState(s)) if s == "active"));
        let no_tag: [Value; 0] = [];
        assert!(matches!(
            Reply::new("promote", &no_tag).tag(),
            Err(StoreError::Protocol(_))
        ));
    }
}
