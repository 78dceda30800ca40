//! The OJS error catalog. Every error the API can answer is a variant here, with its HTTP status and
//! OJS code, so nothing maps to "500 something happened".

use serde_json::{json, Value};

/// Where the error catalog is explained (the public OJS errors spec; our README lists our codes).
pub const DOCS_URL: &str = "https://github.com/openjobspec/spec/blob/main/spec/ojs-errors.md";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// The body is not JSON, or not the JSON shape the endpoint takes. 400.
    InvalidPayload,
    /// A field is missing or breaks a rule (the message names the field and the rule). 400.
    InvalidRequest,
    /// A well-formed policy whose values cannot work (retry policy, rate-limit policy). 422.
    Unprocessable,
    /// No such job / dead-letter entry / queue. 404.
    NotFound,
    /// A job with this id already exists, or (unique jobs, `on_conflict: reject`) a job with the same
    /// uniqueness key does (`details.existing_job_id` names it). 409.
    Duplicate,
    /// The job is in a state that does not allow the operation (`details.state` says which). 409.
    Conflict,
    /// ACK, NACK or heartbeat named a claim (lease id, attempt, worker) that the job no longer holds:
    /// its lease lapsed and it was taken back or handed to another worker. Nothing changed. 409.
    LeaseLost,
    /// The job's queue is at its depth bound (backpressure, strategy reject). 429 with Retry-After.
    QueueFull,
    /// Missing or wrong API key. 401.
    Unauthorized,
    /// The key is valid but lacks the scope. 403.
    Forbidden,
    /// Request body over the size limit. 413.
    PayloadTooLarge,
    /// Content-Type is neither application/openjobspec+json nor application/json. 415.
    UnsupportedMediaType,
    /// Redis cannot be reached; retry later. 503.
    BackendUnavailable,
    /// The request took longer than the server's request timeout. 504.
    Timeout,
    /// A bug: the store replied something the server does not understand. 500.
    Internal,
}

impl ErrorCode {
    /// Every code, for catalogs (the OpenAPI document's error schema lists their names).
    pub const ALL: [ErrorCode; 15] = [
        Self::InvalidPayload,
        Self::InvalidRequest,
        Self::Unprocessable,
        Self::NotFound,
        Self::Duplicate,
        Self::Conflict,
        Self::LeaseLost,
        Self::QueueFull,
        Self::Unauthorized,
        Self::Forbidden,
        Self::PayloadTooLarge,
        Self::UnsupportedMediaType,
        Self::BackendUnavailable,
        Self::Timeout,
        Self::Internal,
    ];

    pub fn status(self) -> u16 {
        match self {
            Self::InvalidPayload | Self::InvalidRequest => 400,
            Self::Unprocessable => 422,
            Self::Unauthorized => 401,
            Self::Forbidden => 403,
            Self::NotFound => 404,
            Self::Duplicate | Self::Conflict | Self::LeaseLost => 409,
            Self::PayloadTooLarge => 413,
            Self::QueueFull => 429,
            Self::UnsupportedMediaType => 415,
            Self::Internal => 500,
            Self::BackendUnavailable => 503,
            Self::Timeout => 504,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidPayload => "invalid_payload",
            Self::InvalidRequest => "invalid_request",
            Self::Unprocessable => "validation_error",
            Self::NotFound => "not_found",
            Self::Duplicate => "duplicate",
            Self::Conflict => "conflict",
            Self::LeaseLost => "lease_lost",
            // The backpressure extension's own spelling (ojs-backpressure §7.1; the suite checks it).
            Self::QueueFull => "QUEUE_FULL",
            Self::Unauthorized => "unauthorized",
            Self::Forbidden => "forbidden",
            Self::PayloadTooLarge => "payload_too_large",
            Self::UnsupportedMediaType => "unsupported_media_type",
            Self::BackendUnavailable => "backend_unavailable",
            Self::Timeout => "timeout",
            Self::Internal => "internal_error",
        }
    }

    /// The error family: lets clients branch without listing every code.
    pub fn kind(self) -> &'static str {
        match self {
            Self::InvalidPayload | Self::InvalidRequest | Self::Unprocessable => "validation_error",
            Self::NotFound => "not_found_error",
            Self::Duplicate | Self::Conflict | Self::LeaseLost => "conflict_error",
            Self::Unauthorized | Self::Forbidden => "auth_error",
            Self::PayloadTooLarge | Self::UnsupportedMediaType => "request_error",
            Self::QueueFull => "backpressure_error",
            Self::BackendUnavailable | Self::Timeout | Self::Internal => "server_error",
        }
    }

    /// What to do about it, in one sentence.
    pub fn hint(self) -> &'static str {
        match self {
            Self::InvalidPayload => {
                "Send a JSON body with Content-Type application/openjobspec+json or application/json."
            }
            Self::InvalidRequest | Self::Unprocessable => {
                "Fix the field named in the message and send the request again."
            }
            Self::NotFound => "Check the id; finished jobs are kept only for the server's retention period.",
            Self::Duplicate => "Use a new id, or GET the existing job (details.existing_job_id for a unique job).",
            Self::Conflict => "GET the job to see its current state; the operation is not allowed in it.",
            Self::LeaseLost => "Stop working on this job: your lease lapsed and the job was taken back or given to another worker.",
            Self::Unauthorized => "Send Authorization: Bearer <api key>.",
            Self::Forbidden => "Use a key with the admin scope for this endpoint.",
            Self::PayloadTooLarge => "Send a smaller body, or split the batch.",
            Self::QueueFull => "The queue is full: retry after Retry-After seconds, with backoff.",
            Self::UnsupportedMediaType => "Use Content-Type application/openjobspec+json or application/json.",
            Self::BackendUnavailable => "Redis is unreachable; retry with backoff.",
            Self::Timeout => "The server did not finish in time; retry with backoff (an enqueue with an explicit id is safe to retry).",
            Self::Internal => "This is a bug in the server; please report it with the request id.",
        }
    }

    /// Whether the same request may succeed later.
    pub fn retryable(self) -> bool {
        matches!(self, Self::BackendUnavailable | Self::Timeout | Self::QueueFull)
    }
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct OjsError {
    pub code: ErrorCode,
    pub message: String,
    pub details: Option<Value>,
}

impl OjsError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            details: None,
        }
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, message)
    }
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unprocessable, message)
    }
    pub fn not_found(what: &str, id: &str) -> Self {
        Self::new(ErrorCode::NotFound, format!("{what} {id} not found"))
            .with_details(json!({ "resource": what, "id": id }))
    }
    pub fn conflict_state(id: &str, state: &str, op: &str) -> Self {
        Self::new(
            ErrorCode::Conflict,
            format!("job {id} is {state}; {op} is not allowed in that state"),
        )
        .with_details(json!({ "job_id": id, "state": state }))
    }
    /// Backpressure: `queue` holds `depth` jobs against a bound of `bound`.
    pub fn queue_full(queue: &str, depth: u64, bound: u64) -> Self {
        Self::new(
            ErrorCode::QueueFull,
            format!("queue {queue} has reached its depth bound ({bound}): it holds {depth} waiting jobs"),
        )
        .with_details(json!({ "queue": queue, "depth": depth, "bound": bound, "strategy": "reject" }))
    }
    /// The request acted for a claim of the job that has ended (lease fencing).
    pub fn lease_lost(id: &str, state: &str, op: &str) -> Self {
        Self::new(
            ErrorCode::LeaseLost,
            format!("{op} refused: the lease you hold on job {id} was lost (the job is {state} under a newer claim or no claim at all)"),
        )
        .with_details(json!({ "job_id": id, "state": state }))
    }
    /// A job with this id exists already (409).
    pub fn duplicate_id(id: &str) -> Self {
        Self::new(ErrorCode::Duplicate, format!("a job with id {id} already exists"))
            .with_details(json!({ "job_id": id }))
    }
    /// A unique job's duplicate under `on_conflict: reject` (ojs-unique-jobs §5.1).
    pub fn unique_conflict(existing_id: &str, existing_state: &str, uniqueness_key: &str) -> Self {
        Self::unique_held(
            format!("a job with the same uniqueness key exists: job {existing_id}, {existing_state} (options.unique.on_conflict is reject)"),
            existing_id,
            existing_state,
            uniqueness_key,
        )
    }
    /// A dead-letter retry of a unique job refused because another job took its uniqueness key since
    /// and is in a state the job's policy counts: the same 409 and details as the enqueue's refusal.
    pub fn unique_retry_conflict(id: &str, existing_id: &str, existing_state: &str, uniqueness_key: &str) -> Self {
        Self::unique_held(
            format!("job {id} cannot be retried: job {existing_id}, {existing_state}, holds its uniqueness key now (retry it once that job has ended, or delete it)"),
            existing_id,
            existing_state,
            uniqueness_key,
        )
    }
    fn unique_held(message: String, existing_id: &str, existing_state: &str, uniqueness_key: &str) -> Self {
        Self::new(ErrorCode::Duplicate, message).with_details(json!({
            "existing_job_id": existing_id,
            "existing_job_state": existing_state,
            "uniqueness_key": uniqueness_key,
        }))
    }
    pub fn with_details(mut self, d: Value) -> Self {
        self.details = Some(d);
        self
    }

    /// The OJS error body: `{"error": {"code", "message", "retryable", "details"?}}`.
    pub fn body(&self, request_id: Option<&str>) -> Value {
        let mut e = json!({
            "code": self.code.as_str(),
            "type": self.code.kind(),
            "message": self.message,
            "retryable": self.code.retryable(),
            "hint": self.code.hint(),
            "docs_url": DOCS_URL,
        });
        if let Some(d) = &self.details {
            e["details"] = d.clone();
        }
        if let Some(r) = request_id {
            e["request_id"] = json!(r);
        }
        json!({ "error": e })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_lists_every_code_once() {
        // A new variant must be added to ALL: this match stops compiling until it is handled here.
        let position = |c: ErrorCode| match c {
            ErrorCode::InvalidPayload
            | ErrorCode::InvalidRequest
            | ErrorCode::Unprocessable
            | ErrorCode::NotFound
            | ErrorCode::Duplicate
            | ErrorCode::Conflict
            | ErrorCode::LeaseLost
            | ErrorCode::QueueFull
            | ErrorCode::Unauthorized
            | ErrorCode::Forbidden
            | ErrorCode::PayloadTooLarge
            | ErrorCode::UnsupportedMediaType
            | ErrorCode::BackendUnavailable
            | ErrorCode::Timeout
            | ErrorCode::Internal => ErrorCode::ALL.iter().position(|x| *x == c),
        };
        for c in ErrorCode::ALL {
            assert!(position(c).is_some());
        }
        let names: std::collections::HashSet<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(names.len(), ErrorCode::ALL.len(), "codes are distinct");
    }
}
