//! The schemas the OpenAPI document shares between resources: the OJS error body (every 4xx and 5xx
//! answer, serialized from [`OjsErrorBody`] itself, so the schema is the code), and the job as the
//! API shows it ([`Job`], which documents `ojs_core::job::job_view`; tests/contract.rs checks live
//! answers against it).

use std::borrow::Cow;

use ojs_core::{ErrorCode, OjsError};
use serde::Serialize;
use serde_json::Value;
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
                message: e.message.clone(),
                retryable: e.code.retryable(),
                hint: e.code.hint(),
                docs_url: ojs_core::error::DOCS_URL,
                details: e.details.clone(),
                request_id: None,
            },
        }
    }
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

/// The eight OJS job states (`ojs_core::job::STATES`).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)] // documents ojs_core::job::STATES; a unit test keeps the two equal
pub enum JobState {
    Scheduled,
    Available,
    Pending,
    Active,
    Completed,
    Retryable,
    Cancelled,
    Discarded,
}

/// A job as the API shows it: the envelope the client enqueued (its own fields, such as `meta`,
/// `options` or extension fields, echoed as sent) plus the system-managed fields. Times are RFC 3339.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)] // documents ojs_core::job::job_view, which builds the JSON
pub struct Job {
    /// The job id (a UUIDv7 unless the client gave its own).
    id: String,
    #[serde(rename = "type")]
    job_type: String,
    queue: String,
    state: JobState,
    /// The arguments as enqueued.
    args: Vec<Value>,
    /// The priority as the client gave it (or the model's default).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    priority: Option<i64>,
    /// Attempts started so far (0 until the first FETCH).
    attempt: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    max_attempts: Option<i64>,
    /// The delay before the next attempt, while the job is retryable.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    retry_delay_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    meta: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    options: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    created_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    enqueued_at: Option<String>,
    /// When a scheduled job becomes available (RFC 3339); the client's own value (maybe `null`) is
    /// echoed when the job was not scheduled.
    #[serde(skip_serializing_if = "Option::is_none")]
    scheduled_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    started_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    completed_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    cancelled_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    discarded_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    expires_at: Option<String>,
    /// The worker holding the job (while active).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    worker_id: Option<String>,
    /// When the current lease lapses unless extended (while active).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    visibility_deadline: Option<String>,
    /// The claim's identity for ACK, NACK and heartbeat (while active).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    lease_id: Option<String>,
    /// What the worker's ACK reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<Value>,
    /// The latest failure the worker reported (NACK `error`, with `occurred_at`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object, nullable = false)]
    error: Option<Value>,
    /// Every failure, oldest first.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Vec<Object>, nullable = false)]
    errors: Option<Vec<Value>>,
    /// The workflow this job belongs to.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    workflow_id: Option<String>,
    /// A workflow job's inputs: a chain step gets the results of the steps before it (by index), a
    /// batch callback those of every job of the batch (`null` for a job that failed or gave none).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    parent_results: Option<Vec<Value>>,
    /// Why the job was completed at FETCH without being handed to a worker (`options.dedup`,
    /// `options.root_job`): `{"reason": "dedup", "by", "started_at"}` or `{"reason": "root_job",
    /// "root_timestamp", "newest_root_timestamp"}` (epoch ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object, nullable = false)]
    superseded: Option<Value>,
    /// The client's own fields, echoed.
    #[serde(flatten)]
    extra: std::collections::HashMap<String, Value>,
}

/// Jobs by state. `scheduled` counts scheduled and retryable jobs (they wait in one index); `completed`,
/// `failed`, `discarded` and `cancelled` count since the queue was first used.
#[derive(Serialize, ToSchema, Default)]
pub struct JobCounts {
    pub available: u64,
    pub active: u64,
    pub scheduled: u64,
    pub completed: u64,
    pub failed: u64,
    pub discarded: u64,
    pub cancelled: u64,
}

impl From<&ojs_store::QueueCounts> for JobCounts {
    fn from(c: &ojs_store::QueueCounts) -> Self {
        Self {
            available: c.available,
            active: c.active,
            scheduled: c.scheduled,
            completed: c.completed,
            failed: c.failed,
            discarded: c.discarded,
            cancelled: c.cancelled,
        }
    }
}

impl JobCounts {
    /// The counts of several queues summed.
    pub fn sum<'a>(queues: impl IntoIterator<Item = &'a ojs_store::QueueCounts>) -> Self {
        queues.into_iter().fold(Self::default(), |t, c| Self {
            available: t.available + c.available,
            active: t.active + c.active,
            scheduled: t.scheduled + c.scheduled,
            completed: t.completed + c.completed,
            failed: t.failed + c.failed,
            discarded: t.discarded + c.discarded,
            cancelled: t.cancelled + c.cancelled,
        })
    }
}

/// `{"limit", "period"}`: `limit` starts per `period` (an ISO 8601 duration such as `PT1M`).
#[derive(Serialize, ToSchema)]
#[allow(dead_code)] // documents ojs_core::ratelimit::Window as requests give it
pub struct RateWindow {
    #[schema(minimum = 1)]
    limit: u64,
    #[schema(example = "PT1M")]
    period: String,
}

/// `{"job": Job}`: the answer of enqueue, GET, and cancel.
#[derive(Serialize, ToSchema)]
pub struct JobResponse {
    #[schema(value_type = Job)]
    pub job: ojs_core::job::JobView,
    /// The workflow the job started (an enqueue in the seed's form, with a `workflow` object).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub workflow: Option<crate::routes::workflows::WorkflowView>,
}

impl JobResponse {
    pub fn of(job: ojs_core::job::JobView) -> Self {
        Self { job, workflow: None }
    }
}

/// The media type of every JSON answer, for `responses(...)`: `(status = 404, description = "…",
/// body = OjsErrorBody, content_type = OJS_MEDIA_TYPE)`.
pub use crate::respond::OJS_MEDIA_TYPE;

/// The names a string-enum schema lists (tests keep such schemas equal to the lists the code checks).
#[cfg(test)]
pub(crate) fn enum_names<T: utoipa::PartialSchema>() -> Vec<String> {
    let doc = serde_json::to_value(T::schema()).unwrap_or_default();
    doc["enum"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn job_state_lists_the_core_states() {
        assert_eq!(enum_names::<JobState>(), ojs_core::job::STATES);
    }
}
