//! A validated new job ([`NewJob`]), its retry policy, the job states, and the JSON view of a stored job.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use crate::clock;
use crate::duration::format_iso8601_ms;

/// The eight OJS job states.
pub const STATES: [&str; 8] = [
    "scheduled",
    "available",
    "pending",
    "active",
    "completed",
    "retryable",
    "cancelled",
    "discarded",
];

pub fn is_terminal(state: &str) -> bool {
    matches!(state, "completed" | "cancelled" | "discarded")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backoff {
    Exponential,
    Linear,
    Constant,
}

impl Backoff {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "exponential" => Some(Self::Exponential),
            "linear" => Some(Self::Linear),
            "constant" | "fixed" => Some(Self::Constant),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Exponential => "exponential",
            Self::Linear => "linear",
            Self::Constant => "constant",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnExhaustion {
    Discard,
    DeadLetter,
}

impl OnExhaustion {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Discard => "discard",
            Self::DeadLetter => "dead_letter",
        }
    }
}

/// The retry policy (OJS retry spec), with its defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub initial_interval_ms: u64,
    pub backoff_coefficient: f64,
    pub max_interval_ms: u64,
    pub jitter: bool,
    pub strategy: Backoff,
    pub non_retryable_errors: Vec<String>,
    pub on_exhaustion: OnExhaustion,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            initial_interval_ms: 1_000,
            backoff_coefficient: 2.0,
            max_interval_ms: 300_000,
            jitter: true,
            strategy: Backoff::Exponential,
            non_retryable_errors: Vec::new(),
            on_exhaustion: OnExhaustion::Discard,
        }
    }
}

impl RetryPolicy {
    /// JSON array text of the non-retryable patterns, or '' when there are none.
    pub fn non_retryable_json(&self) -> String {
        if self.non_retryable_errors.is_empty() {
            String::new()
        } else {
            serde_json::to_string(&self.non_retryable_errors).unwrap_or_default()
        }
    }

    /// The policy as the API shows it.
    pub fn to_json(&self) -> Value {
        json!({
            "max_attempts": self.max_attempts,
            "initial_interval": format_iso8601_ms(self.initial_interval_ms),
            "backoff_coefficient": self.backoff_coefficient,
            "max_interval": format_iso8601_ms(self.max_interval_ms),
            "jitter": self.jitter,
            "backoff_strategy": self.strategy.as_str(),
            "non_retryable_errors": self.non_retryable_errors,
            "on_exhaustion": self.on_exhaustion.as_str(),
        })
    }
}

/// A job that passed validation and is ready to be stored.
#[derive(Debug, Clone)]
pub struct NewJob {
    pub id: String,
    /// Whether the server made `id` (the client sent none): only then may [`NewJob::place_on`] change it.
    pub id_generated: bool,
    pub job_type: String,
    pub queue: String,
    /// The priority as the client gave it (or the model's default), echoed back as `priority`.
    pub priority: i64,
    /// The internal rank (lower runs first) the store orders by.
    pub rank: i64,
    /// The client's envelope (with `id` and `queue` filled in, `priority` removed) as JSON text.
    pub doc: String,
    pub retry: RetryPolicy,
    pub timeout_ms: u64,
    pub visibility_ms: u64,
    /// Absolute expiry (epoch ms), 0 for none.
    pub expires_at_ms: i64,
    /// Relative expiry (`"+PT5S"`), resolved by the enqueue script on Redis' clock; 0 for none.
    pub expires_in_ms: u64,
    pub scheduled_at_ms: i64,
    pub delay_ms: u64,
    /// The job's rate-limit policy (seed: top-level `rate_limit`, or `options.rate_limit`).
    pub rate_limit: Option<crate::ratelimit::RateLimitPolicy>,
    /// `options.unique`: checked against existing jobs inside the enqueue script.
    pub unique: Option<crate::unique::UniquePolicy>,
    /// `options.dedup`: the deduplication fingerprint, checked at FETCH (MediaWiki's `ignoreDuplicates`).
    pub dedup: Option<crate::unique::Dedup>,
    /// `options.root_job`: MediaWiki's root-job parameters, checked at FETCH.
    pub root_job: Option<crate::unique::RootJob>,
}

impl NewJob {
    /// Makes a server-made id name `shard` (see [`crate::names::id_on_shard`]), in `id` and in the stored
    /// envelope; a client's own id is left as it is.
    pub fn place_on(&mut self, shard: usize) {
        if !self.id_generated {
            return;
        }
        let id = crate::names::id_on_shard(&self.id, shard);
        if id == self.id {
            return;
        }
        if let Ok(serde_json::Value::Object(mut doc)) = serde_json::from_str(&self.doc) {
            doc.insert("id".into(), serde_json::Value::String(id.clone()));
            if let Ok(text) = serde_json::to_string(&doc) {
                self.doc = text;
                self.id = id;
            }
        }
    }
}

const TIME_FIELDS: [&str; 7] = [
    "created_at",
    "enqueued_at",
    "scheduled_at",
    "started_at",
    "completed_at",
    "cancelled_at",
    "discarded_at",
];

/// Fields of the job view that only the server sets (besides [`TIME_FIELDS`]; `scheduled_at` is the
/// client's too, resolved by the server when the job is scheduled).
const SYSTEM_FIELDS: [&str; 14] = [
    "state",
    "attempt",
    "max_attempts",
    "retry_delay_ms",
    "expires_at",
    "worker_id",
    "visibility_deadline",
    "lease_id",
    "result",
    "error",
    "errors",
    "workflow_id",
    "parent_results",
    "superseded",
];

/// The API view of a stored job hash: the client's envelope plus the system-managed fields.
pub fn job_view(f: &HashMap<String, String>) -> Value {
    let mut obj: Map<String, Value> = f
        .get("doc")
        .and_then(|d| serde_json::from_str::<Value>(d).ok())
        .and_then(|v| match v {
            Value::Object(m) => Some(m),
            _ => None,
        })
        .unwrap_or_default();
    // The system-managed fields are the server's: a client's field of the same name is not echoed
    // (it would pass for the job's state), whether or not the job has that field yet.
    for k in SYSTEM_FIELDS
        .iter()
        .chain(&TIME_FIELDS)
        .filter(|k| **k != "scheduled_at")
    {
        obj.remove(*k);
    }
    let get = |k: &str| f.get(k).map(String::as_str);
    for k in ["type", "queue", "state"] {
        if let Some(v) = get(k) {
            obj.insert(k.into(), json!(v));
        }
    }
    let int = |k: &str| get(k).and_then(|v| v.parse::<i64>().ok());
    if let Some(p) = int("priority") {
        obj.insert("priority".into(), json!(p));
    }
    obj.insert("attempt".into(), json!(int("attempt").unwrap_or(0)));
    if let Some(d) = int("retry_delay_ms") {
        obj.insert("retry_delay_ms".into(), json!(d));
    }
    if let Some(m) = int("max_attempts") {
        obj.insert("max_attempts".into(), json!(m));
    }
    for k in TIME_FIELDS {
        if let Some(ms) = int(k) {
            obj.insert(k.into(), json!(clock::format_ms(ms)));
        }
    }
    if let Some(ms) = int("expires_at") {
        obj.insert("expires_at".into(), json!(clock::format_ms(ms)));
    }
    if let Some(w) = get("worker_id").filter(|w| !w.is_empty()) {
        obj.insert("worker_id".into(), json!(w));
    }
    if let Some(ms) = int("lease_until") {
        obj.insert("visibility_deadline".into(), json!(clock::format_ms(ms)));
        // The claim's identity for ACK, NACK and heartbeat (lua/includes/lease.lua); a job is only
        // leased while active.
        if let Some(claims) = get("claims") {
            obj.insert("lease_id".into(), json!(claims));
        }
    }
    if let Some(v) = get("result").and_then(|t| serde_json::from_str::<Value>(t).ok()) {
        obj.insert("result".into(), v);
    }
    // A workflow's job (lua/includes/workflow.lua): its workflow, and the results of the jobs before it
    // (a chain step: every earlier step's, by index; a batch callback: every job's). The store reads
    // them from the workflow's results hash when it reads the job (wf_job_reply); a job released by an
    // older server holds them in its own record. Either way they arrive as this field.
    if let Some(w) = get("wf") {
        obj.insert("workflow_id".into(), json!(w));
    }
    if let Some(v) = get("parent_results").and_then(|t| serde_json::from_str::<Value>(t).ok()) {
        obj.insert("parent_results".into(), v);
    }
    for k in ["error", "errors"] {
        if let Some(v) = get(k).and_then(|t| serde_json::from_str::<Value>(t).ok()) {
            obj.insert(k.into(), stored_error_view(v));
        }
    }
    // Completed unrun at FETCH (options.dedup, options.root_job): why.
    if let Some(v) = get("superseded").and_then(|t| serde_json::from_str::<Value>(t).ok()) {
        obj.insert("superseded".into(), v);
    }
    if let Some((value, message, data, updated)) = progress_view(f) {
        obj.insert("progress".into(), value);
        obj.insert("progress_message".into(), message);
        obj.insert("progress_data".into(), data);
        obj.insert("progress_updated_at".into(), updated);
    }
    Value::Object(obj)
}

/// Error records are stored with `occurred_at` in epoch ms; show it as RFC 3339.
fn stored_error_view(v: Value) -> Value {
    match v {
        Value::Array(items) => Value::Array(items.into_iter().map(stored_error_view).collect()),
        Value::Object(mut m) => {
            if let Some(ms) = m.get("occurred_at").and_then(Value::as_i64) {
                m.insert("occurred_at".into(), json!(clock::format_ms(ms)));
            }
            Value::Object(m)
        }
        other => other,
    }
}

/// The progress a job shows (ojs-progress): `(progress, message, data, updated_at)`, all `Value::Null`
/// when none applies. Reports belong to one claim (`progress_claim`): an active job shows only what its
/// current claim reported (a retry starts with none, §5.3); a completed job that reported any shows 1.0
/// (§8.1); any other state keeps the last report (a failed job keeps where it stopped, §8.2).
pub fn progress_view(f: &HashMap<String, String>) -> Option<(Value, Value, Value, Value)> {
    let at = f.get("progress_at")?;
    if f.get("state").map(String::as_str) == Some("active") && f.get("progress_claim") != f.get("claims") {
        return None;
    }
    let mut value = f
        .get("progress")
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(Value::Null, |p| json!(p));
    if f.get("state").map(String::as_str) == Some("completed") {
        value = json!(1.0);
    }
    let message = f.get("progress_message").map_or(Value::Null, |m| json!(m));
    let data = f
        .get("progress_data")
        .and_then(|d| serde_json::from_str::<Value>(d).ok())
        .unwrap_or(Value::Null);
    let updated = at
        .parse::<i64>()
        .ok()
        .map_or(Value::Null, |ms| json!(clock::format_ms(ms)));
    Some((value, message, data, updated))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_fields_named_like_system_fields_are_not_echoed() {
        let doc = json!({"id": "j", "type": "t", "queue": "q", "args": [], "state": "completed", "attempt": "x",
            "worker_id": 5, "lease_id": [1], "errors": "no", "scheduled_at": "2020-01-01T00:00:00Z", "x_own": 1});
        let f: HashMap<String, String> = [
            ("doc", doc.to_string()),
            ("type", "t".into()),
            ("queue", "q".into()),
            ("state", "available".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let v = job_view(&f);
        assert_eq!(v["state"], "available");
        assert_eq!(v["attempt"], 0);
        for k in ["worker_id", "lease_id", "errors"] {
            assert!(v.get(k).is_none(), "{k}: {v}");
        }
        assert_eq!(v["scheduled_at"], "2020-01-01T00:00:00Z", "the client's own start time");
        assert_eq!(v["x_own"], 1);
    }
}
