//! A validated new job ([`NewJob`]), its retry policy, the job states, and the JSON view of a stored job.

use serde_json::{json, Value};

use crate::clock;
use crate::duration::format_iso8601_ms;
use crate::state::JobState;
use crate::stored::{StoredJob, TIME_FIELDS};

pub use crate::state::{is_terminal, STATES};

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
            max_attempts: crate::retry_defaults::MAX_ATTEMPTS,
            initial_interval_ms: crate::retry_defaults::INITIAL_INTERVAL_MS,
            backoff_coefficient: crate::retry_defaults::BACKOFF_COEFFICIENT,
            max_interval_ms: crate::retry_defaults::MAX_INTERVAL_MS,
            jitter: crate::retry_defaults::JITTER,
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
    /// `meta.tenant_id` (the multi-tenancy extension): the job waits in its tenant's share of its queue.
    pub tenant: Option<String>,
    /// The `X-OJS-Tenant` header set `tenant`: it wins over a queue's tenancy setting.
    pub tenant_pinned: bool,
    /// The queue's tenancy setting `tenant` was resolved with, as stored ([`crate::tenancy::Tenancy::stored`];
    /// empty: none, the tenant is `meta.tenant_id`). The enqueue script checks it against the queue's.
    pub tenancy: String,
    /// The envelope's top-level `version` (ojs-job-versioning): the schema version its args are checked
    /// against when its type has schemas in the registry; `None`: the type's latest.
    pub version: Option<u32>,
}

impl NewJob {
    /// One of the job's fingerprints (`unique.key`, `dedup.key`, `root_job.key`) as it is stored: scoped
    /// to the job's tenant ([`crate::unique::tenant_scoped`]), unchanged for a job without one.
    pub fn scoped(&self, fp: &str) -> String {
        crate::unique::tenant_scoped(fp, self.tenant.as_deref())
    }

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

/// Fields of the job view that only the server sets (besides [`TIME_FIELDS`]; `scheduled_at` is the
/// client's too, resolved by the server when the job is scheduled).
const SYSTEM_FIELDS: [&str; 15] = [
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
    "checkpoint",
];

/// A job as the API shows it ([`job_view`]), already written as JSON: it is serialized into a response
/// as it stands, with no `Value` tree built and taken apart again on the way.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(transparent)]
pub struct JobView(Box<serde_json::value::RawValue>);

impl JobView {
    /// The JSON text.
    pub fn json(&self) -> &str {
        self.0.get()
    }
}

/// The client's envelope as stored (`doc`): its top-level members in order, each value left as text.
struct DocMembers<'a>(Vec<(String, &'a serde_json::value::RawValue)>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for DocMembers<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> serde::de::Visitor<'de> for Members {
            type Value = DocMembers<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(self, mut m: M) -> Result<Self::Value, M::Error> {
                let mut out = Vec::with_capacity(m.size_hint().unwrap_or(8));
                while let Some(entry) = m.next_entry::<String, &'de serde_json::value::RawValue>()? {
                    out.push(entry);
                }
                Ok(DocMembers(out))
            }
        }
        d.deserialize_map(Members)
    }
}

/// The API view of a stored job: the client's envelope plus the system-managed fields.
///
/// The envelope's members keep their order and their text; a member named like a system-managed field
/// is not echoed (it would pass for the job's state), whether or not the job has that field yet; a
/// member the server also sets (`type`, `queue`, `priority`, `scheduled_at`, progress) shows the
/// server's value in the client's position; the rest of the server's fields follow, in a fixed order.
pub fn job_view(f: &StoredJob) -> JobView {
    // The server's fields, in the order they follow the envelope's.
    let mut server: Vec<(&str, Sys)> = Vec::with_capacity(16);
    if let Some(v) = &f.job_type {
        server.push(("type", Sys::Str(v)));
    }
    if let Some(v) = &f.queue {
        server.push(("queue", Sys::Str(v)));
    }
    if let Some(s) = f.state {
        server.push(("state", Sys::Str(s.as_str())));
    }
    if let Some(p) = f.priority {
        server.push(("priority", Sys::Int(p)));
    }
    server.push(("attempt", Sys::Int(f.attempt.unwrap_or(0))));
    if let Some(d) = f.retry_delay_ms {
        server.push(("retry_delay_ms", Sys::Int(d)));
    }
    if let Some(m) = f.max_attempts {
        server.push(("max_attempts", Sys::Int(m)));
    }
    for (k, at) in TIME_FIELDS.into_iter().zip(f.times()) {
        if let Some(ms) = at {
            server.push((k, Sys::Text(clock::format_ms(ms))));
        }
    }
    if let Some(ms) = f.expires_at {
        server.push(("expires_at", Sys::Text(clock::format_ms(ms))));
    }
    if let Some(w) = f.worker_id.as_deref().filter(|w| !w.is_empty()) {
        server.push(("worker_id", Sys::Str(w)));
    }
    if let Some(ms) = f.lease_until {
        server.push(("visibility_deadline", Sys::Text(clock::format_ms(ms))));
        // The claim's identity for ACK, NACK and heartbeat (lua/includes/lease.lua); a job is only
        // leased while active.
        if let Some(claims) = &f.claims {
            server.push(("lease_id", Sys::Str(claims)));
        }
    }
    // Stored JSON is shown as stored (and not at all if it does not parse).
    fn raw(v: &Option<String>) -> Option<Sys<'_>> {
        v.as_deref()
            .and_then(|t| serde_json::from_str::<&serde_json::value::RawValue>(t).ok())
            .map(Sys::Raw)
    }
    if let Some(v) = raw(&f.result) {
        server.push(("result", v));
    }
    // A workflow's job (lua/includes/workflow.lua): its workflow, and the results of the jobs before it
    // (a chain step: every earlier step's, by index; a batch callback: every job's). The store reads
    // them from the workflow's results hash when it reads the job (wf_job_reply); a job released by an
    // older server holds them in its own record. Either way they arrive as this field.
    if let Some(w) = &f.workflow_id {
        server.push(("workflow_id", Sys::Str(w)));
    }
    if let Some(v) = raw(&f.parent_results) {
        server.push(("parent_results", v));
    }
    for (k, v) in [("error", &f.error), ("errors", &f.errors)] {
        if let Some(v) = v.as_deref().and_then(|t| serde_json::from_str::<Value>(t).ok()) {
            server.push((k, Sys::Val(stored_error_view(v))));
        }
    }
    // Completed unrun at FETCH (options.dedup, options.root_job): why.
    if let Some(v) = raw(&f.superseded) {
        server.push(("superseded", v));
    }
    // The checkpoint the attempt resumes from (ojs-durable-execution §6.1), when FETCH read one.
    if let Some(c) = &f.checkpoint {
        server.push(("checkpoint", Sys::Json(c.view(None))));
    }
    if let Some((value, message, data, updated)) = progress_view(f) {
        server.push(("progress", Sys::Val(value)));
        server.push(("progress_message", Sys::Val(message)));
        server.push(("progress_data", Sys::Val(data)));
        server.push(("progress_updated_at", Sys::Val(updated)));
    }

    let doc = f
        .doc
        .as_deref()
        .and_then(|d| serde_json::from_str::<DocMembers>(d).ok())
        .map_or_else(Vec::new, |m| m.0);
    // The members in order: the envelope's (a server field in its place), then the server's others.
    let mut used = vec![false; server.len()];
    let mut members: Vec<(&str, Member)> = Vec::with_capacity(doc.len() + server.len());
    for (k, v) in &doc {
        let k = k.as_str();
        if SYSTEM_FIELDS.contains(&k) || (TIME_FIELDS.contains(&k) && k != "scheduled_at") {
            continue;
        }
        match server.iter().position(|(s, _)| *s == k) {
            Some(i) if !used[i] => {
                used[i] = true;
                members.push((k, Member::Server(&server[i].1)));
            }
            Some(_) => {}
            None => members.push((k, Member::Client(v))),
        }
    }
    for (i, (k, v)) in server.iter().enumerate() {
        if !used[i] {
            members.push((k, Member::Server(v)));
        }
    }
    // serde_json writes it (keys escaped as everywhere else) and takes its own output unchecked.
    JobView(serde_json::value::to_raw_value(&Members(&members)).unwrap_or_else(|_| empty_object()))
}

/// A server-set field's value.
enum Sys<'a> {
    Str(&'a str),
    Int(i64),
    Text(String),
    /// Stored JSON, shown as stored.
    Raw(&'a serde_json::value::RawValue),
    /// JSON the server wrote.
    Json(Box<serde_json::value::RawValue>),
    Val(Value),
}

impl serde::Serialize for Sys<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Sys::Str(v) => s.serialize_str(v),
            Sys::Int(v) => s.serialize_i64(*v),
            Sys::Text(v) => s.serialize_str(v),
            Sys::Raw(v) => v.serialize(s),
            Sys::Json(v) => v.serialize(s),
            Sys::Val(v) => v.serialize(s),
        }
    }
}

/// One member of a job view: the client's, as sent, or the server's.
enum Member<'a> {
    Client(&'a serde_json::value::RawValue),
    Server(&'a Sys<'a>),
}

/// A job view's members, serialized as one object in their order.
struct Members<'a>(&'a [(&'a str, Member<'a>)]);

impl serde::Serialize for Members<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0 {
            match v {
                Member::Client(raw) => m.serialize_entry(k, raw)?,
                Member::Server(sys) => m.serialize_entry(k, sys)?,
            }
        }
        m.end()
    }
}

fn empty_object() -> Box<serde_json::value::RawValue> {
    serde_json::value::RawValue::from_string("{}".into()).expect("{} is JSON")
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
pub fn progress_view(f: &StoredJob) -> Option<(Value, Value, Value, Value)> {
    let at = f.progress_at?;
    if f.state == Some(JobState::Active) && f.progress_claim != f.claims {
        return None;
    }
    let mut value = f
        .progress
        .as_deref()
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(Value::Null, |p| json!(p));
    if f.state == Some(JobState::Completed) {
        value = json!(1.0);
    }
    let message = f.progress_message.as_ref().map_or(Value::Null, |m| json!(m));
    let data = f
        .progress_data
        .as_deref()
        .and_then(|d| serde_json::from_str::<Value>(d).ok())
        .unwrap_or(Value::Null);
    Some((value, message, data, json!(clock::format_ms(at))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_fields_named_like_system_fields_are_not_echoed() {
        let doc = json!({"id": "j", "type": "t", "queue": "q", "args": [], "state": "completed", "attempt": "x",
            "worker_id": 5, "lease_id": [1], "errors": "no", "scheduled_at": "2020-01-01T00:00:00Z", "x_own": 1});
        let f = StoredJob::from_pairs([
            ("doc", doc.to_string()),
            ("type", "t".into()),
            ("queue", "q".into()),
            ("state", "available".into()),
        ]);
        let v: Value = serde_json::from_str(job_view(&f).json()).expect("a job view is JSON");
        assert_eq!(v["state"], "available");
        assert_eq!(v["attempt"], 0);
        for k in ["worker_id", "lease_id", "errors"] {
            assert!(v.get(k).is_none(), "{k}: {v}");
        }
        assert_eq!(v["scheduled_at"], "2020-01-01T00:00:00Z", "the client's own start time");
        assert_eq!(v["x_own"], 1);
    }

    /// The envelope's members keep their order and text (numbers, escapes and nesting as the client
    /// sent them); the fields the server also sets take the client's position; the rest follow.
    #[test]
    fn the_view_is_the_envelope_as_stored_then_the_servers_fields() {
        let doc = r#"{"type":"email.send","queue":"default","args":[{"to":"a\"b","n":1.50}],"meta":{"z":1,"a":2},"id":"j1","state":"x"}"#;
        let f = StoredJob::from_pairs([
            ("doc", doc),
            ("type", "email.send"),
            ("queue", "default"),
            ("state", "active"),
            ("priority", "2"),
            ("attempt", "1"),
            ("max_attempts", "3"),
            ("created_at", "1795757670771"),
            ("started_at", "1795757670800"),
            ("worker_id", "w-1"),
            ("lease_until", "1795757700800"),
            ("claims", "1"),
            ("result", "not json"),
        ]);
        assert_eq!(
            job_view(&f).json(),
            r#"{"type":"email.send","queue":"default","args":[{"to":"a\"b","n":1.50}],"meta":{"z":1,"a":2},"id":"j1","state":"active","priority":2,"attempt":1,"max_attempts":3,"created_at":"2026-11-27T05:34:30.771Z","started_at":"2026-11-27T05:34:30.800Z","worker_id":"w-1","visibility_deadline":"2026-11-27T05:35:00.800Z","lease_id":"1"}"#
        );
    }

    /// What the server writes, a client reads typed: `job_view`'s answer is a `JobInfo`.
    #[test]
    fn the_view_reads_back_as_a_job_info() {
        let id = crate::names::new_job_id();
        let doc =
            json!({"type": "email.send", "queue": "mail", "args": [1, "x"], "meta": {"k": 1}, "id": id}).to_string();
        let f = StoredJob::from_pairs([
            ("doc", doc.as_str()),
            ("type", "email.send"),
            ("queue", "mail"),
            ("state", "active"),
            ("priority", "0"),
            ("attempt", "2"),
            ("lease_until", "1795757700800"),
            ("claims", "7"),
        ]);
        let j: crate::job_info::JobInfo = serde_json::from_str(job_view(&f).json()).expect("a JobInfo");
        assert_eq!(
            (j.id.as_str(), j.job_type.as_str(), j.queue.as_str()),
            (id.as_str(), "email.send", "mail")
        );
        assert_eq!(
            (j.state, j.attempt, j.priority),
            (crate::state::JobState::Active, 2, Some(0))
        );
        assert_eq!(
            (j.args, j.meta, j.lease_id.as_deref()),
            (json!([1, "x"]), Some(json!({"k": 1})), Some("7"))
        );
    }
}
