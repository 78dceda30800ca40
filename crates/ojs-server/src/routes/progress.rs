//! Job progress (ojs-progress): a worker reports how far an active job got, anyone reads it back.

use axum::extract::State;
use axum::response::Response;
use ojs_core::job::progress_view;
use ojs_core::{clock, OjsError};
use ojs_store::Transition;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::ToSchema;

use crate::error::ApiResult;
use crate::respond::{job_id, JobPath};
use crate::respond::{ok, OjsJson};
use crate::schemas::{JobState, OjsErrorBody, OJS_MEDIA_TYPE};
use crate::state::AppState;
use crate::tenant::ActingTenant;
use crate::worker::ClaimFields;
use ojs_core::JobId;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_progress, put_progress))
        .routes(routes!(worker_progress))
}

/// Longest `message`, in bytes.
const MAX_MESSAGE: usize = 1024;
/// Largest `data` object, serialised (the spec recommends 4 KB; this is the hard limit).
const MAX_DATA: usize = 16 * 1024;

/// A progress report: at least one of `progress` (or `percentage`), `message`, `data`. Naming the
/// claim (`lease_id`, `attempt`, `worker_id`) fences it like an ACK.
#[derive(Deserialize, ToSchema)]
struct ProgressReq {
    /// From 0.0 to 1.0 (clamped).
    #[serde(default)]
    #[schema(value_type = Option<f64>)]
    progress: Option<Value>,
    /// 0 to 100, as the JavaScript and Python SDKs send it (`POST /workers/progress`); not with `progress`.
    #[serde(default)]
    #[schema(value_type = Option<f64>)]
    percentage: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<String>, max_length = 1024)]
    message: Option<Value>,
    /// Any JSON object, at most 16 KiB serialised.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    data: Option<Value>,
    #[serde(flatten)]
    claim: ClaimFields,
}

/// The answer to a progress report.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
enum ProgressAnswer {
    /// Recorded (the job is active); also extended the lease.
    Accepted {
        job_id: String,
        state: JobState,
        accepted: bool,
        /// The progress now (it never goes down within an attempt).
        progress: Option<f64>,
        message: Option<String>,
        #[schema(value_type = Option<Object>)]
        data: Option<Value>,
        #[schema(format = DateTime)]
        updated_at: String,
        /// The extended lease.
        #[schema(format = DateTime)]
        visibility_deadline: Option<String>,
    },
    /// Dropped: the job is no longer active (`accepted: false`, ojs-progress §6.1).
    Dropped {
        job_id: String,
        #[schema(value_type = JobState)]
        state: String,
        accepted: bool,
        reason: &'static str,
    },
}

/// A job's last progress report; nulls when there is none for the current attempt.
#[derive(Serialize, ToSchema)]
struct ProgressView {
    job_id: String,
    #[schema(value_type = JobState)]
    state: Option<String>,
    #[schema(value_type = Option<f64>)]
    progress: Value,
    #[schema(value_type = Option<String>)]
    message: Value,
    #[schema(value_type = Option<Object>)]
    data: Value,
    #[schema(value_type = Option<String>, format = DateTime)]
    updated_at: Value,
}

/// The validated report: (progress clamped to [0, 1], message, data as JSON text).
type Report = (Option<f64>, Option<String>, Option<String>);

fn parse(req: &ProgressReq) -> Result<Report, OjsError> {
    let progress = match (&req.progress, &req.percentage) {
        (None | Some(Value::Null), None | Some(Value::Null)) => None,
        (Some(v), None | Some(Value::Null)) if !v.is_null() => Some(
            v.as_f64()
                .ok_or_else(|| OjsError::invalid(format!("progress must be a number from 0.0 to 1.0; got {v}")))?
                .clamp(0.0, 1.0),
        ),
        (None | Some(Value::Null), Some(v)) => Some(
            (v.as_f64()
                .ok_or_else(|| OjsError::invalid(format!("percentage must be a number from 0 to 100; got {v}")))?
                / 100.0)
                .clamp(0.0, 1.0),
        ),
        _ => {
            return Err(OjsError::invalid(
                "give progress (0.0 to 1.0) or percentage (0 to 100), not both",
            ))
        }
    };
    let message = match &req.message {
        None | Some(Value::Null) => None,
        Some(Value::String(m)) if m.len() <= MAX_MESSAGE => Some(m.clone()),
        Some(Value::String(_)) => {
            return Err(OjsError::invalid(format!(
                "message must be at most {MAX_MESSAGE} bytes"
            )))
        }
        Some(v) => return Err(OjsError::invalid(format!("message must be a string; got {v}"))),
    };
    let data = match &req.data {
        None | Some(Value::Null) => None,
        Some(v @ Value::Object(_)) => {
            let text = v.to_string();
            if text.len() > MAX_DATA {
                return Err(OjsError::invalid(format!(
                    "data must be at most {MAX_DATA} bytes of JSON; got {}",
                    text.len()
                )));
            }
            Some(text)
        }
        Some(v) => return Err(OjsError::invalid(format!("data must be a JSON object; got {v}"))),
    };
    if progress.is_none() && message.is_none() && data.is_none() {
        return Err(OjsError::invalid(
            "a progress report needs at least one of progress (0.0 to 1.0), message or data",
        ));
    }
    Ok((progress, message, data))
}

/// `PUT /jobs/{id}/progress`: only an active job's progress changes, in one script that checks the state
/// (and the claim, when the worker names its `lease_id`, `attempt` or `worker_id`, fenced like ACK) and
/// extends the lease as a heartbeat would. Values outside [0, 1] are clamped; within one attempt the
/// number never goes down. A report for a job that is no longer active is dropped without an error
/// (`accepted: false`, ojs-progress §6.1) unless it named a claim: then 409 `lease_lost`.
#[utoipa::path(
    put,
    path = "/ojs/v1/jobs/{id}/progress",
    tag = "jobs",
    summary = "Report an active job's progress: `{progress?: 0..1, message?, data?: {}, lease_id?}` (also a heartbeat)",
    params(("id" = String, Path)),
    request_body = ProgressReq,
    responses((status = 200, description = "OK (accepted: false when the job is not active)", body = ProgressAnswer, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such job, or (for a request acting as a tenant) another tenant's (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 409, description = "Lease lost (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn put_progress(
    State(st): State<AppState>,
    tenant: ActingTenant,
    JobPath(id): JobPath,
    OjsJson(req): OjsJson<ProgressReq>,
) -> ApiResult<Response> {
    report(&st, &tenant, &id, req).await
}

/// A progress report naming its job.
#[derive(Deserialize, ToSchema)]
struct WorkerProgressReq {
    job_id: String,
    #[serde(flatten)]
    report: ProgressReq,
}

/// `POST /workers/progress {job_id, percentage | progress, message?, data?}`: the same report in the
/// shape the JavaScript and Python SDKs send.
#[utoipa::path(
    post,
    path = "/ojs/v1/workers/progress",
    tag = "workers",
    summary = "Report progress as the SDKs do: `{job_id, percentage: 0..100 | progress: 0..1, message?, data?, lease_id?}`",
    request_body = WorkerProgressReq,
    responses((status = 200, description = "OK (accepted: false when the job is not active)", body = ProgressAnswer, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such job, or (for a request acting as a tenant) another tenant's (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 409, description = "Lease lost (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn worker_progress(
    State(st): State<AppState>,
    tenant: ActingTenant,
    OjsJson(req): OjsJson<WorkerProgressReq>,
) -> ApiResult<Response> {
    report(&st, &tenant, &job_id(&req.job_id)?, req.report).await
}

/// A progress report for a request acting as `tenant`: another tenant's job is answered as absent, and
/// its report dropped (lua/progress-1.lua).
async fn report(st: &AppState, tenant: &ActingTenant, id: &JobId, req: ProgressReq) -> ApiResult<Response> {
    let id = id.as_str();
    let (progress, message, data) = parse(&req)?;
    let claim = req.claim.into_ref(tenant.name())?;
    let (claim, message_ref, data_ref) = (&claim, message.as_deref(), data.as_deref());
    match st
        .shards
        .on_id(id, |s| async move {
            s.report_progress(id, claim, progress, message_ref, data_ref).await
        })
        .await?
    {
        Transition::Done((now, stored, lease)) => Ok(ok(json!(ProgressAnswer::Accepted {
            job_id: id.to_string(),
            state: JobState::Active,
            accepted: true,
            progress: stored,
            message,
            data: data.as_deref().and_then(|d| serde_json::from_str::<Value>(d).ok()),
            updated_at: clock::format_ms(now),
            visibility_deadline: lease.map(clock::format_ms),
        }))),
        Transition::WrongState(state) => Ok(ok(json!(ProgressAnswer::Dropped {
            job_id: id.to_string(),
            state,
            accepted: false,
            reason: "progress is recorded only while the job is active",
        }))),
        Transition::NotFound => Err(OjsError::not_found("job", id).into()),
        Transition::LeaseLost(state) => Err(OjsError::lease_lost(id, &state, "progress").into()),
    }
}

/// `GET /jobs/{id}/progress`: the last report (`progress`, `message`, `data`, `updated_at`), nulls when
/// there is none for the current attempt; 404 when the job does not exist or is another tenant's.
#[utoipa::path(
    get,
    path = "/ojs/v1/jobs/{id}/progress",
    tag = "jobs",
    summary = "A job's last progress report (nulls when none)",
    params(("id" = String, Path)),
    responses((status = 200, description = "OK", body = ProgressView, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such job, or (for a request acting as a tenant) another tenant's (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn get_progress(State(st): State<AppState>, tenant: ActingTenant, JobPath(id): JobPath) -> ApiResult<Response> {
    let id = id.as_str();
    let f = tenant.job(&st, id).await?;
    let (progress, message, data, updated) =
        progress_view(&f).unwrap_or((Value::Null, Value::Null, Value::Null, Value::Null));
    Ok(ok(json!(ProgressView {
        job_id: id.to_string(),
        state: f.state.map(|s| s.as_str().to_string()),
        progress,
        message,
        data,
        updated_at: updated,
    })))
}
