//! The schemas the OpenAPI document shares between resources: the OJS error body (every 4xx and 5xx
//! answer, serialized from [`OjsErrorBody`] itself, so the schema is the code), and the job as the
//! API shows it ([`Job`], which documents `ojs_core::job::job_view`; tests/contract.rs checks live
//! answers against it).

use std::borrow::Cow;
use std::collections::HashMap;

use ojs_core::event::Event;
use ojs_core::{clock, ErrorCode, OjsError};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::RefOr;
use utoipa::ToSchema;

/// The OJS error body: `{"error": {…}}`, the answer of every 4xx and 5xx.
#[derive(Serialize, ToSchema)]
#[schema(as = OjsError)]
pub struct OjsErrorBody {
    pub error: OjsErrorDetail,
}

#[derive(Serialize, ToSchema)]
pub struct OjsErrorDetail {
    /// The OJS error code (what went wrong).
    #[schema(value_type = ErrorCodeName)]
    pub code: &'static str,
    /// The error family, for clients that branch without listing every code.
    #[serde(rename = "type")]
    #[schema(value_type = ErrorTypeName)]
    pub kind: &'static str,
    /// What went wrong, naming the field and the rule.
    pub message: String,
    /// Whether the same request may succeed later.
    pub retryable: bool,
    /// What to do about it, in one sentence.
    pub hint: &'static str,
    /// Where the error catalog is explained.
    pub docs_url: &'static str,
    /// Machine-readable context (`job_id`, `state`, `queue`, `index`…), depending on the code.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object, nullable = false)]
    pub details: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub request_id: Option<String>,
}

impl From<&OjsError> for OjsErrorBody {
    fn from(e: &OjsError) -> Self {
        Self {
            error: OjsErrorDetail {
                code: e.code.as_str(),
                kind: e.code.kind(),
                message: clipped(&e.message),
                retryable: e.code.retryable(),
                hint: e.code.hint(),
                docs_url: ojs_core::error::DOCS_URL,
                details: e.details.clone(),
                request_id: None,
            },
        }
    }
}

/// An error message as answered: at most MESSAGE_MAX bytes of it, cut on a character boundary (a message
/// that quotes a refused value, a 100 KB job type say, must not send it all back).
fn clipped(message: &str) -> String {
    const MESSAGE_MAX: usize = 1000;
    if message.len() <= MESSAGE_MAX {
        return message.to_string();
    }
    let mut end = MESSAGE_MAX;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} more bytes)", &message[..end], message.len() - end)
}

/// A string schema listing `names` (deduplicated, in order).
fn string_enum(names: impl Iterator<Item = &'static str>) -> RefOr<Schema> {
    let mut seen: Vec<&str> = Vec::new();
    for n in names {
        if !seen.contains(&n) {
            seen.push(n);
        }
    }
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(seen))
        .into()
}

/// The OJS error codes ([`ErrorCode::ALL`]).
pub struct ErrorCodeName;

impl utoipa::PartialSchema for ErrorCodeName {
    fn schema() -> RefOr<Schema> {
        string_enum(ErrorCode::ALL.iter().map(|c| c.as_str()))
    }
}

impl ToSchema for ErrorCodeName {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("OjsErrorCode")
    }
}

/// The OJS error families.
pub struct ErrorTypeName;

impl utoipa::PartialSchema for ErrorTypeName {
    fn schema() -> RefOr<Schema> {
        string_enum(ErrorCode::ALL.iter().map(|c| c.kind()))
    }
}

impl ToSchema for ErrorTypeName {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("OjsErrorType")
    }
}

/// The eight OJS job states: the schema is ojs-core's, where the names are defined.
pub use ojs_core::state::JobState;

/// A job as the API shows it: the envelope the client enqueued (its own fields, such as `meta`,
/// `options` or extension fields, echoed as sent) plus the system-managed fields. Times are RFC 3339.
//
// `ojs_core::job::job_view` writes this JSON itself (it is on the hot path: no Value tree, the
// envelope's members echoed as text); answers carry its `JobView` documented as this type. The two
// stay one definition by test: a view of a job with every field set reads as a `Job` whose only
// unnamed members are the envelope's extensions, and writes back as the same JSON value.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct Job {
    /// The job id (a UUIDv7 unless the client gave its own).
    pub id: String,
    #[serde(rename = "type")]
    pub job_type: String,
    pub queue: String,
    pub state: JobState,
    /// The arguments as enqueued.
    pub args: Vec<Value>,
    /// The priority as the client gave it (or the model's default).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub priority: Option<i64>,
    /// Attempts started so far (0 until the first FETCH).
    pub attempt: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub max_attempts: Option<i64>,
    /// The delay before the next attempt, while the job is retryable.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub retry_delay_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub meta: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub options: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    pub created_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    pub enqueued_at: Option<String>,
    /// When a scheduled job becomes available (RFC 3339); the client's own value (maybe `null`) is
    /// echoed when the job was not scheduled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduled_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    pub started_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    pub completed_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    pub cancelled_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    pub discarded_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    pub expires_at: Option<String>,
    /// The worker holding the job (while active).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub worker_id: Option<String>,
    /// When the current lease lapses unless extended (while active).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    pub visibility_deadline: Option<String>,
    /// The claim's identity for ACK, NACK and heartbeat (while active).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub lease_id: Option<String>,
    /// What the worker's ACK reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The latest failure the worker reported (NACK `error`, with `occurred_at`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object, nullable = false)]
    pub error: Option<Value>,
    /// Every failure, oldest first.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Vec<Object>, nullable = false)]
    pub errors: Option<Vec<Value>>,
    /// The workflow this job belongs to.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub workflow_id: Option<String>,
    /// A workflow job's inputs: a chain step gets the results of the steps before it (by index), a
    /// batch callback those of every job of the batch (`null` for a job that failed or gave none).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub parent_results: Option<Vec<Value>>,
    /// Why the job was completed at FETCH without being handed to a worker (`options.dedup`,
    /// `options.root_job`): `{"reason": "dedup", "by", "started_at"}` or `{"reason": "root_job",
    /// "root_timestamp", "newest_root_timestamp"}` (epoch ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object, nullable = false)]
    pub superseded: Option<Value>,
    /// The job's progress (ojs-progress), once a report applies to it: `null` members for what the
    /// report did not give.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress_message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub progress_data: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub progress_updated_at: Option<String>,
    /// The client's own fields, echoed.
    #[serde(flatten)]
    pub extra: HashMap<String, Value>,
}

/// Whether FETCH takes a queue's jobs (`active`) or skips the queue (`paused`).
#[derive(Serialize, ToSchema, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub enum QueueStatus {
    Active,
    Paused,
}

impl QueueStatus {
    pub fn of(paused: bool) -> Self {
        if paused {
            QueueStatus::Paused
        } else {
            QueueStatus::Active
        }
    }
}

/// Jobs by state: ojs-core's, which the store reads and the API shows.
pub use ojs_core::JobCounts;

/// `{"limit", "period"}`: `limit` starts per `period` (an ISO 8601 duration such as `PT1M`): an
/// `ojs_core::ratelimit::Window` as requests give it and answers show it.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct RateWindow {
    #[schema(minimum = 1)]
    pub limit: u64,
    #[schema(example = "PT1M")]
    pub period: String,
}

impl From<ojs_core::ratelimit::Window> for RateWindow {
    fn from(w: ojs_core::ratelimit::Window) -> Self {
        Self {
            limit: w.limit,
            period: ojs_core::duration::format_iso8601_ms(w.period_ms),
        }
    }
}

/// `{"job": Job}`: the answer of enqueue, GET, and cancel.
#[derive(Serialize, ToSchema)]
pub struct JobResponse {
    /// An enqueue's answer names the new job's id at the top level too: the durable-execution
    /// conformance suite reads it there (`$.id`), every other suite in `job`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub id: Option<String>,
    #[schema(value_type = Job)]
    pub job: ojs_core::job::JobView,
    /// The workflow the job started (an enqueue in the seed's form, with a `workflow` object).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub workflow: Option<WorkflowView>,
}

impl JobResponse {
    pub fn of(job: ojs_core::job::JobView) -> Self {
        Self {
            id: None,
            job,
            workflow: None,
        }
    }

    /// A new job's answer: its id at the top level too.
    pub fn created(id: &str, job: ojs_core::job::JobView) -> Self {
        Self {
            id: Some(id.to_string()),
            ..Self::of(job)
        }
    }
}

/// The media type of every JSON answer, for `responses(...)`: `(status = 404, description = "…",
/// body = OjsErrorBody, content_type = OJS_MEDIA_TYPE)`.
pub use crate::media::OJS_MEDIA_TYPE;

/// An OJS job envelope as a producer sends it. Fields this server does not know are kept and echoed
/// back in the job (extensions, `x_…` fields).
#[derive(Deserialize, ToSchema)]
pub struct JobRequest {
    /// A dot-separated name such as `email.send`.
    #[serde(rename = "type")]
    #[schema(pattern = r"^[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)*$", max_length = 255)]
    pub job_type: String,
    /// Positional arguments (`[]` for none).
    pub args: Vec<Value>,
    /// The job's own id (a UUIDv7); the server mints one when absent. Enqueueing an id twice is a 409.
    #[schema(
        nullable = false,
        pattern = r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"
    )]
    pub id: Option<String>,
    /// The queue (default `default`); `options.queue` works too.
    #[schema(nullable = false, pattern = r"^[a-z0-9][a-z0-9.-]*$", max_length = 255)]
    pub queue: Option<String>,
    /// Seed priority model: the priority, 0 to 4294967295, lower runs first (default 2). With
    /// `--priority-model core`, `options.priority` instead (higher first).
    #[schema(nullable = false)]
    pub priority: Option<i64>,
    #[schema(value_type = Option<Object>)]
    pub meta: Option<Value>,
    pub options: Option<EnqueueOptions>,
    /// When the job becomes available: RFC 3339, or relative (`+PT5S`).
    #[schema(nullable = false)]
    pub scheduled_at: Option<String>,
    /// When the job is discarded if it has not started: RFC 3339, or relative (`+PT1H`);
    /// `options.expires_at` works too (not both).
    #[schema(nullable = false)]
    pub expires_at: Option<String>,
    /// The OJS envelope's place for the retry policy (`options.retry` works too, not both).
    pub retry: Option<RetryPolicy>,
    /// The seed's place for the rate-limit policy (`options.rate_limit` works too).
    pub rate_limit: Option<RateLimitPolicy>,
    /// The seed's workflow form: `{"chain": [job envelope, ...]}`; this job is the chain's first step
    /// and the others follow it in order, inheriting its priority and queue unless they set their own.
    /// Only on `POST /ojs/v1/jobs`: a batch's job, a cron template or a workflow's member carrying it is
    /// refused with 422 (use `POST /ojs/v1/workflows`).
    #[schema(value_type = Option<Object>)]
    pub workflow: Option<Value>,
    #[serde(flatten)]
    pub extensions: HashMap<String, Value>,
}

/// `options` of the envelope.
#[derive(Deserialize, ToSchema)]
pub struct EnqueueOptions {
    #[schema(nullable = false, pattern = r"^[a-z0-9][a-z0-9.-]*$", max_length = 255)]
    pub queue: Option<String>,
    /// Core priority model: the priority (higher first).
    #[schema(nullable = false)]
    pub priority: Option<i64>,
    /// The execution timeout (at most ten years).
    #[schema(minimum = 1, maximum = 315360000000i64, nullable = false)]
    pub timeout_ms: Option<u64>,
    /// How long a FETCH holds the job before it is taken back (default: the server's; at most ten years).
    #[schema(minimum = 1, maximum = 315360000000i64, nullable = false)]
    pub visibility_timeout_ms: Option<u64>,
    /// Run no sooner than this many ms from now (at most ten years).
    #[schema(maximum = 315360000000i64, nullable = false)]
    pub delay_ms: Option<u64>,
    /// RFC 3339, or relative (`+PT5S`, at most ten years).
    #[schema(nullable = false)]
    pub scheduled_at: Option<String>,
    #[schema(nullable = false)]
    pub delay_until: Option<String>,
    /// RFC 3339, or relative (`+PT1H`): the job is discarded if it has not started by then.
    #[schema(nullable = false)]
    pub expires_at: Option<String>,
    #[schema(nullable = false)]
    pub tags: Option<Vec<String>>,
    pub retry: Option<RetryPolicy>,
    pub rate_limit: Option<RateLimitPolicy>,
    pub unique: Option<UniquePolicy>,
    /// MediaWiki's `ignoreDuplicates`: `true` (deduplication info = type and args), or
    /// `{keys, args_keys, meta_keys}` as in `unique`. The job is completed unrun at FETCH
    /// (`job.superseded`) when a job of the same type with the same info started after it was created.
    #[schema(value_type = Option<Object>)]
    pub dedup: Option<Value>,
    pub root_job: Option<RootJob>,
    #[serde(flatten)]
    pub extensions: HashMap<String, Value>,
}

/// ojs-unique-jobs' UniquePolicy: checked inside the enqueue script against jobs holding the same key.
#[derive(Deserialize, ToSchema)]
pub struct UniquePolicy {
    /// Dimensions of the uniqueness key besides `type` (always in it): `type`, `queue`, `args`, `meta`
    /// (default `["type"]`).
    #[schema(nullable = false)]
    pub keys: Option<Vec<String>>,
    /// Keys of the object arguments that count (default: all of args).
    #[schema(nullable = false)]
    pub args_keys: Option<Vec<String>>,
    /// Keys of meta that count; required when `keys` has `meta`.
    #[schema(nullable = false)]
    pub meta_keys: Option<Vec<String>>,
    /// ISO 8601 duration from the existing job's creation after which the key is free (default: none).
    #[schema(nullable = false)]
    pub period: Option<String>,
    /// States of the existing job that make a duplicate (default: available, active, scheduled,
    /// retryable, pending).
    #[schema(nullable = false)]
    pub states: Option<Vec<crate::schemas::JobState>>,
    /// `reject` (default: 409), `ignore` (200 with the existing job), `replace` (the existing job is
    /// cancelled, the new one written), `replace_except_schedule` (as replace, keeping a scheduled
    /// job's run time), `raise_priority` (as ignore, and the existing job takes the new priority when
    /// it runs sooner; the priority seed's §9.3 opt-in).
    #[schema(nullable = false)]
    pub on_conflict: Option<String>,
}

/// MediaWiki's root-job parameters (`rootJobSignature`, `rootJobTimestamp`; `is_root` for the root
/// itself, which records its timestamp when it starts: `deduplicateRootJob`). A job whose signature's
/// newest started root is newer than its own timestamp is completed unrun at FETCH (`job.superseded`).
#[derive(Deserialize, ToSchema)]
pub struct RootJob {
    #[schema(min_length = 1, max_length = 1024)]
    pub signature: String,
    /// RFC 3339 (default: the job's creation time).
    #[schema(nullable = false)]
    pub timestamp: Option<String>,
    #[schema(nullable = false)]
    pub is_root: Option<bool>,
}

/// The OJS retry policy; every field has a default.
#[derive(Deserialize, ToSchema)]
pub struct RetryPolicy {
    /// 1 to 1000 (default 3).
    #[schema(minimum = 1, nullable = false)]
    pub max_attempts: Option<u32>,
    /// ISO 8601 (default `PT1S`).
    #[schema(nullable = false)]
    pub initial_interval: Option<String>,
    /// 1 to 100 (default 2).
    #[schema(nullable = false)]
    pub backoff_coefficient: Option<f64>,
    /// ISO 8601 (default `PT5M`).
    #[schema(nullable = false)]
    pub max_interval: Option<String>,
    #[schema(nullable = false)]
    pub jitter: Option<bool>,
    /// `exponential` (default), `linear`, `constant`.
    #[schema(nullable = false)]
    pub backoff_strategy: Option<String>,
    /// Error types that discard at once (patterns such as `Auth.*`).
    #[schema(nullable = false)]
    pub non_retryable_errors: Option<Vec<String>>,
    /// `discard` (default) or `dead_letter`.
    #[schema(nullable = false)]
    pub on_exhaustion: Option<String>,
}

/// The seed's RateLimitPolicy: jobs sharing `key` share these limits.
#[derive(Deserialize, ToSchema)]
pub struct RateLimitPolicy {
    #[schema(pattern = r"^[a-zA-Z0-9][a-zA-Z0-9._:-]*$", max_length = 255)]
    pub key: String,
    /// At most this many active at once.
    #[schema(nullable = false)]
    pub concurrency: Option<u64>,
    /// At most `limit` starts in any sliding `period`.
    pub rate: Option<RateWindow>,
    /// Starts spaced evenly: `limit` per `period`.
    pub throttle: Option<RateWindow>,
    /// `wait` (default), `reschedule` or `drop`.
    #[schema(nullable = false)]
    pub on_limit: Option<String>,
    /// Ours, beyond the seed: the units this job counts against each limit of the key (default 1;
    /// a job holds `min(cost, limit)` of each). The ACK's `cost_used` corrects the window.
    #[schema(nullable = false, minimum = 1, maximum = 1_000_000_000)]
    pub cost: Option<u64>,
    /// Ours, beyond the seed: additive increase, multiplicative decrease, `{"increase_after": N,
    /// "errors": [types]}` (both optional). Each failure reported as a rate limit (`rate_limit_until`,
    /// or an `error.type` listed in `errors`, at most 20 of 1 to 100 characters `[A-Za-z0-9_.:-]`)
    /// halves the key's effective concurrency and window limit (never below 1, once per round of
    /// starts) without spending the job's attempt; every `increase_after` successes (1 to 1,000,000,
    /// default 10) raise them one step back toward this policy. (Documented as an object, not its
    /// members: the nesting its array adds under a batch's jobs breaks schemathesis' example
    /// generation on CPython 3.11.)
    #[schema(value_type = Option<Object>, nullable = false, example = json!({"increase_after": 10, "errors": ["TooManyRequests"]}))]
    pub adaptive: Option<Value>,
    /// Ours, beyond the seed: burstable concurrency (needs `concurrency`, the ceiling; 0 to it). The
    /// key's slots come from its queue's concurrency (`PUT /admin/queues/{name}/rate-limit`), a pool
    /// shared with the queue's other keys: while the pool is contended the key keeps `floor` slots,
    /// and it borrows idle ones up to `concurrency`; a slot it gives back goes first to a key below its
    /// floor. A queue without a concurrency has no pool, and the floor is then not used.
    #[schema(nullable = false, minimum = 0, maximum = 1_000_000)]
    pub floor: Option<u64>,
}

/// A workflow as the API shows it. Chains count `steps_*`, groups and batches `jobs_*` (the
/// conformance suite's names); `metadata` carries the same counters under the spec's names.
#[derive(Serialize, ToSchema)]
pub struct WorkflowView {
    pub id: String,
    /// `chain`, `group` or `batch`.
    #[serde(rename = "type")]
    #[schema(pattern = "^(chain|group|batch)$")]
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub name: Option<String>,
    /// `running`, then `completed`, `failed` or `cancelled`.
    #[schema(pattern = "^(running|completed|failed|cancelled)$")]
    pub state: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub steps_total: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub steps_completed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub jobs_total: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub jobs_completed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub jobs_failed: Option<u64>,
    /// Chain: the step that failed (the chain stopped there).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub failed_step_index: Option<u64>,
    /// Batch: the callback that failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub failed_callback: Option<String>,
    pub metadata: WorkflowMetadata,
    /// The steps (chain) or jobs, in order (the first 1,000).
    pub jobs: Vec<WorkflowJob>,
    /// Batch callbacks by name (`on_complete`, `on_success`, `on_failure`).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub callbacks: std::collections::BTreeMap<String, WorkflowJob>,
}

/// ojs-workflows §3.3. Times are RFC 3339.
#[derive(Serialize, ToSchema)]
pub struct WorkflowMetadata {
    #[schema(format = DateTime)]
    pub created_at: String,
    /// When its first job was claimed.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    pub started_at: Option<String>,
    /// When it reached a terminal state.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    pub completed_at: Option<String>,
    /// Steps or jobs (callbacks not counted).
    pub job_count: u64,
    pub completed_count: u64,
    pub failed_count: u64,
}

/// One job of a workflow.
#[derive(Serialize, ToSchema)]
pub struct WorkflowJob {
    pub id: String,
    /// The job's type, state and queue; absent once the job's record passed its retention.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub job_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub state: Option<JobStateName>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub queue: Option<String>,
}

/// A job state, as [`JobState`] lists them.
#[derive(Serialize, ToSchema)]
#[schema(value_type = JobState)]
pub struct JobStateName(pub String);

/// The names a string-enum schema lists, in order: for a serde enum, the names serde gives its variants
/// (error messages list them, so they cannot drift from what the enum accepts).
pub(crate) fn enum_names<T: utoipa::PartialSchema>() -> Vec<String> {
    let doc = serde_json::to_value(T::schema()).unwrap_or_default();
    doc["enum"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

/// The unit variant of a string enum that serde names `name` (one of [`enum_names`]), for the hand
/// parsers that word their own error message.
pub(crate) fn variant<T: serde::de::DeserializeOwned>(name: &str) -> Option<T> {
    use serde::de::IntoDeserializer;
    T::deserialize(IntoDeserializer::<serde::de::value::Error>::into_deserializer(name)).ok()
}

/// The name serde gives a unit variant of a string enum (the inverse of [`variant`]).
pub(crate) fn variant_name<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(Value::String(s)) => s,
        _ => String::new(),
    }
}

/// A lifecycle event as the API shows it (CloudEvents-shaped): [`LifecycleEvent::of`] one the stream
/// holds.
#[derive(Serialize, ToSchema)]
#[schema(as = Event)]
pub struct LifecycleEvent {
    /// The stream id, also a cursor for `after`.
    id: String,
    /// `1.0`.
    specversion: &'static str,
    /// Such as `job.enqueued`, `job.started`, `job.completed`, `job.failed` (`ojs_core::event::EventType`).
    #[serde(rename = "type")]
    kind: String,
    /// `/ojs/v1`.
    source: &'static str,
    /// RFC 3339.
    time: String,
    /// The job id.
    subject: String,
    /// The event's data with `job_id`, `queue` and `job_type`.
    data: EventData,
}

/// An event's data: the members its type has (`ojs_core::event::EVENT_KINDS`), and the job it is about.
#[derive(Serialize, ToSchema)]
pub struct EventData {
    job_id: String,
    queue: String,
    job_type: String,
    /// The members of the event type's data.
    #[serde(flatten)]
    #[schema(value_type = Object)]
    members: Map<String, Value>,
}

impl LifecycleEvent {
    /// One event of the stream as the API shows it: its fields, and its data with the job's context (a
    /// member of the data by the same name wins).
    pub fn of(id: &str, e: &Event) -> Self {
        let mut members: Map<String, Value> = match serde_json::from_str::<Value>(&e.data) {
            Ok(Value::Object(m)) => m,
            _ => Map::new(),
        };
        let mut context = |k: &str, own: &str| match members.remove(k) {
            Some(Value::String(s)) => s,
            Some(other) => other.to_string(),
            None => own.to_string(),
        };
        let data = EventData {
            job_id: context("job_id", &e.job_id),
            queue: context("queue", &e.queue),
            job_type: context("job_type", &e.job_type),
            members,
        };
        LifecycleEvent {
            id: id.to_string(),
            specversion: "1.0",
            kind: e.event_type.clone(),
            source: "/ojs/v1",
            time: e.time_ms.map(clock::format_ms).unwrap_or_default(),
            subject: e.job_id.clone(),
            data,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `job_view` writes what [`Job`] documents: a view with every field the server sets reads as a
    /// `Job` (so each member has the documented type), the only members `Job` does not name are the
    /// envelope's own extensions, and the `Job` writes back as the same JSON value.
    #[test]
    fn a_job_view_is_a_job() {
        let doc = json!({"id": "019a0000-0000-7000-8000-000000000001", "type": "email.send", "queue": "mail",
            "args": [1, "a"], "meta": {"m": 1}, "options": {"retry": {"max_attempts": 5}},
            "scheduled_at": "2026-01-01T00:00:00Z", "x_tenant": "acme"});
        let mut f = ojs_core::StoredJob::from_pairs([
            ("type", "email.send"),
            ("queue", "mail"),
            ("state", "completed"),
            ("priority", "2"),
            ("attempt", "2"),
            ("retry_delay_ms", "1000"),
            ("max_attempts", "5"),
            ("expires_at", "1795757790000"),
            ("worker_id", "w-1"),
            ("lease_until", "1795757700800"),
            ("claims", "2"),
            ("result", r#"{"sent": true}"#),
            ("wf", "wf-1"),
            ("parent_results", r#"[{"a": 1}, null]"#),
            ("error", r#"{"message": "smtp down", "occurred_at": 1795757670000}"#),
            ("errors", r#"[{"message": "smtp down", "occurred_at": 1795757670000}]"#),
            (
                "superseded",
                r#"{"reason": "dedup", "by": "j0", "started_at": 1795757670000}"#,
            ),
            ("progress", "0.5"),
            ("progress_message", "half"),
            ("progress_data", r#"{"done": 5}"#),
            ("progress_at", "1795757680000"),
            ("created_at", "1795757670000"),
            ("enqueued_at", "1795757670001"),
            ("scheduled_at", "1795757670002"),
            ("started_at", "1795757670003"),
            ("completed_at", "1795757670004"),
            ("cancelled_at", "1795757670005"),
            ("discarded_at", "1795757670006"),
        ]);
        f.doc = Some(doc.to_string());
        let view = ojs_core::job::job_view(&f);
        let shown: Value = serde_json::from_str(view.json()).expect("a view is JSON");
        let job: Job = serde_json::from_str(view.json()).expect("a view reads as a Job");
        assert_eq!(job.extra.keys().collect::<Vec<_>>(), ["x_tenant"], "{shown}");
        assert_eq!(serde_json::to_value(&job).expect("json"), shown);
        // Every member the server wrote is one the schema names.
        let schema = serde_json::to_value(<Job as utoipa::PartialSchema>::schema()).expect("json");
        for k in shown
            .as_object()
            .expect("an object")
            .keys()
            .filter(|k| *k != "x_tenant")
        {
            assert!(schema["properties"].get(k).is_some(), "{k} is not in the Job schema");
        }
    }

    /// Envelopes that between them give every member [`JobRequest`] documents. Each is one
    /// `ojs_core::envelope::parse` accepts; the tests below read each as the documented type too.
    pub(crate) fn envelopes() -> Vec<Value> {
        let window = json!({"limit": 10, "period": "PT1M"});
        vec![
            json!({"type": "a.b", "args": []}),
            json!({
                "type": "email.send",
                "args": [{"to": "a@example.com"}],
                "id": "019a0000-0000-7000-8000-000000000001",
                "queue": "mail",
                "priority": 3,
                "meta": {"tenant": "acme"},
                "scheduled_at": "+PT5S",
                "rate_limit": {"key": "smtp", "concurrency": 2, "rate": window, "throttle": {"limit": 1, "period": "PT1S"}, "on_limit": "reschedule"},
                "options": {
                    "timeout_ms": 30000,
                    "visibility_timeout_ms": 60000,
                    "expires_at": "+PT1H",
                    "tags": ["t1"],
                    "retry": {"max_attempts": 5, "initial_interval": "PT2S", "backoff_coefficient": 3.0, "max_interval": "PT10M",
                        "jitter": false, "backoff_strategy": "linear", "non_retryable_errors": ["Auth.*"], "on_exhaustion": "dead_letter"},
                    "unique": {"keys": ["type", "args", "meta"], "args_keys": ["to"], "meta_keys": ["tenant"], "period": "PT1H",
                        "states": ["available", "active"], "on_conflict": "ignore"},
                    "root_job": {"signature": "sig", "timestamp": "2026-01-01T00:00:00Z", "is_root": false},
                    "x_option": 1
                },
                "x_trace": "t"
            }),
            json!({"type": "a.b", "args": [1], "options": {"queue": "q2", "delay_ms": 1000, "dedup": true,
                "rate_limit": {"key": "k", "rate": window}}}),
            json!({"type": "a.b", "args": [1], "options": {"scheduled_at": "+PT5S"}}),
            json!({"type": "a.b", "args": [1], "options": {"delay_until": "+PT5S"}}),
            json!({"type": "a.b", "args": [1], "expires_at": "+PT1H", "retry": {"max_attempts": 4}}),
        ]
    }

    /// Every envelope the parser accepts reads as the documented [`JobRequest`], which finds in it
    /// what the parser found.
    #[test]
    fn envelopes_read_as_job_requests() {
        let rules = ojs_core::envelope::EnvelopeRules::default();
        for body in envelopes() {
            let parsed = ojs_core::envelope::parse(body.clone(), &rules).expect("a valid envelope");
            let req: JobRequest = serde_json::from_value(body.clone()).expect("a JobRequest");
            let options = req.options.as_ref();
            assert_eq!(req.job_type, parsed.job_type);
            let queue = req.queue.clone().or_else(|| options.and_then(|o| o.queue.clone()));
            assert_eq!(queue.as_deref().unwrap_or("default"), parsed.queue, "{body}");
            if let Some(id) = &req.id {
                assert_eq!(*id, parsed.id);
            }
            if let Some(p) = req.priority {
                assert_eq!(p, parsed.priority);
            }
            let rate_limit = req
                .rate_limit
                .as_ref()
                .or_else(|| options.and_then(|o| o.rate_limit.as_ref()));
            assert_eq!(
                rate_limit.map(|r| r.key.as_str()),
                parsed.rate_limit.as_ref().map(|r| r.key.as_str())
            );
            if let Some(r) = rate_limit {
                let p = parsed.rate_limit.as_ref().expect("a policy");
                assert_eq!(r.concurrency, p.concurrency);
                assert_eq!(r.rate.as_ref().map(|w| w.limit), p.rate.map(|w| w.limit));
                assert_eq!(r.throttle.as_ref().map(|w| w.limit), p.throttle.map(|w| w.limit));
            }
            if let Some(r) = &req.retry {
                assert_eq!(r.max_attempts, Some(parsed.retry.max_attempts));
            }
            let expires = req.expires_at.is_some() || options.is_some_and(|o| o.expires_at.is_some());
            assert_eq!(expires, parsed.expires_at_ms > 0 || parsed.expires_in_ms > 0, "{body}");
            let Some(o) = options else { continue };
            if let Some(r) = &o.retry {
                assert_eq!(r.max_attempts, Some(parsed.retry.max_attempts));
                assert_eq!(
                    r.non_retryable_errors.as_ref(),
                    Some(&parsed.retry.non_retryable_errors)
                );
            }
            if let Some(u) = &o.unique {
                let p = parsed.unique.as_ref().expect("a unique policy");
                let states: Vec<&str> = u.states.iter().flatten().map(|s| s.as_str()).collect();
                assert_eq!(states, p.states);
            }
            if let Some(r) = &o.root_job {
                let p = parsed.root_job.as_ref().expect("a root job");
                assert_eq!(
                    (r.signature.as_str(), r.is_root),
                    (p.signature.as_str(), Some(p.is_root))
                );
            }
            assert_eq!(o.dedup.is_some(), parsed.dedup.is_some());
            assert_eq!(
                o.timeout_ms.is_some(),
                parsed.timeout_ms > 0 && body["options"].get("timeout_ms").is_some()
            );
        }
        let full: JobRequest = serde_json::from_value(envelopes()[1].clone()).expect("a JobRequest");
        assert_eq!(full.extensions.keys().collect::<Vec<_>>(), ["x_trace"]);
        assert_eq!(
            full.options.expect("options").extensions.keys().collect::<Vec<_>>(),
            ["x_option"]
        );
    }

    #[test]
    fn the_typed_error_body_is_the_catalogs() {
        let e = OjsError::not_found("job", "x");
        let typed = serde_json::to_value(OjsErrorBody::from(&e)).expect("json");
        assert_eq!(typed, e.body(None));
        let plain = OjsError::invalid("bad");
        assert_eq!(
            serde_json::to_value(OjsErrorBody::from(&plain)).expect("json"),
            plain.body(None)
        );
    }
}
