//! Decoding script and command replies: a short or odd reply reads as empty, never a panic.

use redis::Value;

use crate::store::{JobFields, Result, StoreError};

pub(crate) fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::Array(a) => a.iter().map(val_str).collect(),
        _ => Vec::new(),
    }
}

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

/// A job record's fields from its stored bytes (key schema v2: a MessagePack map of field name ->
/// string value, written by lua/includes/record.lua). Bytes that are not one (never written by this
/// server) read as no fields.
pub(crate) fn decode_record(bytes: &[u8]) -> JobFields {
    rmp_serde::from_slice(bytes).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "a job record is not a MessagePack map of strings");
        JobFields::default()
    })
}

/// A whole job as a script returns it (lua/includes/workflow.lua `wf_job_reply`): its record, or
/// `{record, parent_results}` for a workflow job with parents, whose results the script read from the
/// workflow's results hash (the record does not hold them). Anything else reads as no fields.
pub(crate) fn decode_job(v: &Value) -> JobFields {
    match v {
        Value::BulkString(b) => decode_record(b),
        Value::Array(parts) => match parts.as_slice() {
            [Value::BulkString(b), results] => {
                let mut f = decode_record(b);
                f.insert("parent_results".into(), val_str(results));
                f
            }
            _ => JobFields::default(),
        },
        _ => JobFields::default(),
    }
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

pub(crate) fn flat_map(v: &Value) -> JobFields {
    let mut m = JobFields::default();
    if let Value::Array(items) = v {
        for pair in items.chunks(2) {
            if let [k, v] = pair {
                m.insert(val_str(k), val_str(v));
            }
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

/// The i-th item of a reply, or Nil: a short reply must never panic the server.
pub(crate) fn at(items: &[Value], i: usize) -> &Value {
    items.get(i).unwrap_or(&Value::Nil)
}

pub(crate) fn tag(items: &[Value]) -> String {
    items.first().map(val_str).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_with_its_parents_results_reads_as_one_record() {
        let mut fields = JobFields::default();
        fields.insert("state".into(), "active".into());
        let record = rmp_serde::to_vec(&fields).expect("pack");
        let plain = decode_job(&Value::BulkString(record.clone()));
        assert_eq!(plain, fields);
        let with = decode_job(&Value::Array(vec![
            Value::BulkString(record),
            Value::BulkString(b"[1,null]".to_vec()),
        ]));
        assert_eq!(with.get("parent_results").map(String::as_str), Some("[1,null]"));
        assert_eq!(with.get("state").map(String::as_str), Some("active"));
        assert!(decode_job(&Value::Boolean(false)).is_empty());
    }
}
