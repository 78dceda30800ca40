//! Checkpoints (the durable-execution extension): a worker saves the state its job's next attempt
//! resumes from, and FETCH hands it to that attempt (`checkpoint` in the job). One store beneath
//! (`lua/includes/checkpoint.lua`), three shapes on the wire, as three public sources ask:
//!
//! - the extension (`ojs-durable-execution.md` §4, §7) and its conformance suite: `POST` (the spec) or
//!   `PUT` (the suite), `GET`, `DELETE /ojs/v1/jobs/{id}/checkpoint`;
//! - the official SDKs' durable contexts (JS `src/durable.ts`, Go `durable.go`): `POST` (JS) or `PUT`
//!   (Go) and `DELETE /ojs/v1/checkpoints/{job_id}`, and `GET /ojs/v1/checkpoints/{job_id}/resume`,
//!   with `step_index` and `metadata` (their replay log) beside the state.
//!
//! Where they disagree, the README's "Checkpoints" section says what we chose and why.

use axum::extract::State;
use axum::response::Response;
use ojs_core::checkpoint::{Checkpoint, MAX_METADATA_BYTES, MAX_STATE_BYTES};
use ojs_core::{clock, ErrorCode, JobId, OjsError};
use ojs_store::{ClaimRef, NewCheckpoint, Transition};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::ApiResult;
use crate::respond::{ok, JobPath, OjsQuery, OjsRawJson};
use crate::schemas::{OjsErrorBody, OJS_MEDIA_TYPE};
use crate::state::AppState;
use crate::tenant::ActingTenant;
use crate::worker::ClaimFields;

/// The JavaScript SDK's durable context (`src/durable.ts`, 0.4) builds its paths as
/// `/ojs/v1/checkpoints/…` and its transport prefixes `/ojs/v1` again: it calls
/// `/ojs/v1/ojs/v1/checkpoints/{id}` and `…/resume`. Served here as the same routes, so that the SDK
/// works unchanged; left out of the OpenAPI document (they are the documented routes under a doubled
/// prefix).
pub fn js_sdk_alias_router() -> axum::Router<AppState> {
    use axum::routing::get;
    axum::Router::new()
        .route(
            "/ojs/v1/ojs/v1/checkpoints/{id}",
            get(get_checkpoint)
                .post(save_checkpoint)
                .put(put_checkpoint)
                .delete(delete_checkpoint),
        )
        .route("/ojs/v1/ojs/v1/checkpoints/{id}/resume", get(resume_checkpoint))
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(
            save_job_checkpoint,
            put_job_checkpoint,
            get_job_checkpoint,
            delete_job_checkpoint
        ))
        .routes(routes!(
            save_checkpoint,
            put_checkpoint,
            get_checkpoint,
            delete_checkpoint
        ))
        .routes(routes!(resume_checkpoint))
}

/// A checkpoint to save. Naming the claim (`lease_id`, `attempt`, `worker_id`; or the SDKs'
/// `metadata.attempt`) fences it like an ACK: a worker whose lease lapsed cannot overwrite the next
/// holder's checkpoint. `state` and `metadata` are kept as the client wrote them.
#[derive(Deserialize, ToSchema)]
struct CheckpointReq {
    /// Any JSON value, at most 1 MiB serialised (required; `null` is a value).
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = serde_json::Value)]
    state: Option<Box<RawValue>>,
    /// The SDKs' step number (an integer >= 0).
    #[serde(default)]
    #[schema(value_type = Option<u64>)]
    step_index: Option<Value>,
    /// The SDKs' metadata: a JSON object (their replay log is `_replay_log`), at most 1 MiB serialised.
    /// Its `attempt` (digits, as the SDKs send it), when the request names no other, is the attempt the
    /// save acts for.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    metadata: Option<Box<RawValue>>,
    /// The `lease_id` FETCH returned.
    #[serde(default)]
    #[schema(value_type = Option<String>, nullable = false)]
    lease_id: Option<Value>,
    /// The attempt FETCH returned (>= 1).
    #[serde(default)]
    #[schema(value_type = Option<i64>, minimum = 1, nullable = false)]
    attempt: Option<Value>,
    #[serde(default)]
    #[schema(nullable = false)]
    worker_id: Option<String>,
}

/// A member given, even as `null` (Some(raw null)); absent is None.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(d).map(Some)
}

/// A delete's claim, in its query (a DELETE has no body): `?lease_id=&attempt=&worker_id=`.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct DeleteClaim {
    lease_id: Option<String>,
    /// An integer >= 1.
    attempt: Option<String>,
    worker_id: Option<String>,
}

/// The claim a save names: its own fields, else the SDKs' `metadata.attempt` (the attempt their
/// durable contexts run, as text). A `metadata.attempt` that names no attempt is a 400, not a save
/// without a fence.
fn claim_of(req: &CheckpointReq, metadata: Option<&Value>, tenant: &ActingTenant) -> Result<ClaimRef, OjsError> {
    let mut attempt = req.attempt.clone();
    if attempt.is_none() {
        if let Some(a) = metadata.and_then(|m| m.get("attempt")) {
            let n = a
                .as_str()
                .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|t| t.parse::<i64>().ok())
                .or_else(|| a.as_i64())
                .filter(|n| (1..=i64::from(u32::MAX)).contains(n))
                .ok_or_else(|| {
                    OjsError::invalid(format!(
                        "metadata.attempt must name an attempt: the digits of an integer from 1 to {}; got {a}",
                        u32::MAX
                    ))
                })?;
            attempt = Some(Value::from(n));
        }
    }
    ClaimFields::new(req.lease_id.clone(), attempt, req.worker_id.clone()).into_ref(tenant.name())
}

/// The saved checkpoint, as the extension answers a save (§4.1).
#[derive(Serialize, ToSchema)]
struct Saved {
    checkpoint: SavedCheckpoint,
}

#[derive(Serialize, ToSchema)]
struct SavedCheckpoint {
    job_id: String,
    /// Saves since the checkpoint was last deleted (the first is 1).
    sequence: i64,
    #[schema(format = DateTime)]
    created_at: String,
}

/// A checkpoint: the state as saved, its sequence and time, and the SDKs' fields when they sent them.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)] // the OpenAPI document's shape of Checkpoint::view
struct CheckpointView {
    job_id: String,
    /// Any JSON value, as saved.
    state: Value,
    sequence: i64,
    #[schema(format = DateTime)]
    created_at: String,
    step_index: Option<u64>,
    #[schema(value_type = Option<Object>)]
    metadata: Option<Value>,
}

/// The checkpoint wrapped, as the extension answers a read (§4.3) and the SDKs' resume.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
struct Wrapped {
    checkpoint: CheckpointView,
}

/// What a durable context asks before it runs: is there a checkpoint to resume from.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
struct Resume {
    job_id: String,
    has_checkpoint: bool,
    /// The job's attempt now.
    attempt: i64,
    checkpoint: Option<CheckpointView>,
}

/// Deleted (or there was none: a delete is idempotent).
#[derive(Serialize, ToSchema)]
struct Deleted {
    job_id: String,
    /// Whether there was a checkpoint to delete.
    deleted: bool,
}

/// What a save stores: the state and metadata as JSON text, as sent and bounded (413 past the bound),
/// the step, and the metadata read (for its `attempt`).
struct Checked {
    state: String,
    metadata: Option<String>,
    metadata_value: Option<Value>,
    step: Option<u64>,
}

fn checked(req: &CheckpointReq) -> Result<Checked, OjsError> {
    let state = req
        .state
        .as_ref()
        .ok_or_else(|| OjsError::invalid("a checkpoint needs state: any JSON value, at most 1 MiB"))?
        .get()
        .to_string();
    if state.len() > MAX_STATE_BYTES {
        return Err(OjsError::new(
            ErrorCode::PayloadTooLarge,
            format!(
                "checkpoint state is {} bytes of JSON; at most {MAX_STATE_BYTES} (1 MiB) are kept: store large state elsewhere and checkpoint a reference",
                state.len()
            ),
        ));
    }
    let (metadata, metadata_value) = match &req.metadata {
        None => (None, None),
        Some(raw) => {
            let text = raw.get().to_string();
            if text.len() > MAX_METADATA_BYTES {
                return Err(OjsError::new(
                    ErrorCode::PayloadTooLarge,
                    format!(
                        "checkpoint metadata is {} bytes of JSON; at most {MAX_METADATA_BYTES} (1 MiB)",
                        text.len()
                    ),
                ));
            }
            match serde_json::from_str::<Value>(&text) {
                Ok(v @ Value::Object(_)) => (Some(text), Some(v)),
                _ => {
                    return Err(OjsError::invalid(format!(
                        "metadata must be a JSON object; got {text:.80}"
                    )))
                }
            }
        }
    };
    let step = match &req.step_index {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_u64().filter(|s| *s <= clock::MS_LIMIT as u64).ok_or_else(|| {
            OjsError::invalid(format!(
                "step_index must be an integer from 0 to {}; got {v}",
                clock::MS_LIMIT
            ))
        })?),
    };
    Ok(Checked {
        state,
        metadata,
        metadata_value,
        step,
    })
}

async fn save(st: &AppState, tenant: &ActingTenant, id: &JobId, req: CheckpointReq) -> ApiResult<Response> {
    let id = id.as_str();
    let c = checked(&req)?;
    let claim = claim_of(&req, c.metadata_value.as_ref(), tenant)?;
    let cp = NewCheckpoint {
        state: &c.state,
        metadata: c.metadata.as_deref(),
        step_index: c.step,
    };
    let (cp, claim) = (&cp, &claim);
    match st
        .shards
        .on_id(id, |s| async move { s.save_checkpoint(id, cp, claim).await })
        .await?
    {
        Transition::Done(saved) => Ok(ok(Saved {
            checkpoint: SavedCheckpoint {
                job_id: id.to_string(),
                sequence: saved.sequence,
                created_at: clock::format_ms(saved.saved_at_ms),
            },
        })),
        Transition::NotFound => Err(OjsError::not_found("job", id).into()),
        Transition::WrongState(state) => Err(OjsError::conflict_state(id, &state, "a checkpoint save").into()),
        Transition::LeaseLost(state) => Err(OjsError::lease_lost(id, &state, "checkpoint save").into()),
    }
}

/// The job's checkpoint, or 404 (no job, another tenant's, or no checkpoint).
async fn read(st: &AppState, tenant: &ActingTenant, id: &JobId) -> ApiResult<(i64, Option<Checkpoint>)> {
    let id = id.as_str();
    let t = tenant.name();
    let read = st
        .shards
        .on_id(id, |s| async move { s.read_checkpoint(id, t).await })
        .await?
        .ok_or_else(|| OjsError::not_found("job", id))?;
    Ok((read.attempt, read.checkpoint))
}

fn no_checkpoint(id: &str) -> OjsError {
    OjsError::new(ErrorCode::NotFound, format!("job {id} has no checkpoint"))
}

/// A delete may name the claim it acts for in its query, fenced like a save; naming none, it acts for
/// whoever holds the job, or for none (the SDKs' `complete()` names none).
async fn delete(st: &AppState, tenant: &ActingTenant, id: &JobId, q: DeleteClaim) -> ApiResult<Response> {
    let id = id.as_str();
    let attempt = q
        .attempt
        .map(|a| {
            a.parse::<i64>()
                .map(Value::from)
                .map_err(|_| OjsError::invalid(format!("attempt must be an integer from 1 to {}; got {a:?}", u32::MAX)))
        })
        .transpose()?;
    let claim = ClaimFields::new(q.lease_id.map(Value::String), attempt, q.worker_id).into_ref(tenant.name())?;
    let claim = &claim;
    match st
        .shards
        .on_id(id, |s| async move { s.delete_checkpoint(id, claim).await })
        .await?
    {
        Transition::Done(deleted) => Ok(ok(Deleted {
            job_id: id.to_string(),
            deleted,
        })),
        Transition::NotFound | Transition::WrongState(_) => Err(OjsError::not_found("job", id).into()),
        Transition::LeaseLost(state) => Err(OjsError::lease_lost(id, &state, "checkpoint delete").into()),
    }
}

/// `POST /jobs/{id}/checkpoint` (the extension's save): replaces the job's checkpoint; 409 for a job
/// that has ended, or (naming a claim) for a claim it no longer holds; 413 past 1 MiB.
#[utoipa::path(
    post,
    path = "/ojs/v1/jobs/{id}/checkpoint",
    tag = "checkpoints",
    summary = "Save a job's checkpoint: `{state, step_index?, metadata?, lease_id?, attempt?, worker_id?}` (the next attempt gets it at FETCH)",
    params(("id" = String, Path)),
    request_body = CheckpointReq,
    responses((status = 200, description = "Saved", body = Saved, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such job, or another tenant's (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 409, description = "The job has ended, or the named claim was lost (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 413, description = "State or metadata over 1 MiB (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn save_job_checkpoint(
    State(st): State<AppState>,
    tenant: ActingTenant,
    JobPath(id): JobPath,
    OjsRawJson(req): OjsRawJson<CheckpointReq>,
) -> ApiResult<Response> {
    save(&st, &tenant, &id, req).await
}

/// `PUT /jobs/{id}/checkpoint`: the same save, as the conformance suite sends it.
#[utoipa::path(
    put,
    path = "/ojs/v1/jobs/{id}/checkpoint",
    tag = "checkpoints",
    summary = "Save a job's checkpoint (as POST)",
    params(("id" = String, Path)),
    request_body = CheckpointReq,
    responses((status = 200, description = "Saved", body = Saved, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such job, or another tenant's (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 409, description = "The job has ended, or the named claim was lost (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 413, description = "State or metadata over 1 MiB (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn put_job_checkpoint(
    State(st): State<AppState>,
    tenant: ActingTenant,
    JobPath(id): JobPath,
    OjsRawJson(req): OjsRawJson<CheckpointReq>,
) -> ApiResult<Response> {
    save(&st, &tenant, &id, req).await
}

/// `GET /jobs/{id}/checkpoint`: the checkpoint's members at the top level, as the conformance suite
/// reads them; 404 when the job has none.
#[utoipa::path(
    get,
    path = "/ojs/v1/jobs/{id}/checkpoint",
    tag = "checkpoints",
    summary = "A job's checkpoint: `{job_id, state, sequence, created_at, step_index?, metadata?}`",
    params(("id" = String, Path)),
    responses((status = 200, description = "OK", body = CheckpointView, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such job, another tenant's, or no checkpoint (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn get_job_checkpoint(
    State(st): State<AppState>,
    tenant: ActingTenant,
    JobPath(id): JobPath,
) -> ApiResult<Response> {
    let (_, cp) = read(&st, &tenant, &id).await?;
    let cp = cp.ok_or_else(|| no_checkpoint(id.as_str()))?;
    Ok(ok(cp.view(Some(id.as_str()))))
}

/// `DELETE /jobs/{id}/checkpoint`: the next attempt starts afresh; deleting none is not an error.
#[utoipa::path(
    delete,
    path = "/ojs/v1/jobs/{id}/checkpoint",
    tag = "checkpoints",
    summary = "Delete a job's checkpoint (idempotent)",
    params(("id" = String, Path), DeleteClaim),
    responses((status = 200, description = "Deleted, or there was none", body = Deleted, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such job, or another tenant's (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 409, description = "The named claim was lost (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn delete_job_checkpoint(
    State(st): State<AppState>,
    tenant: ActingTenant,
    JobPath(id): JobPath,
    OjsQuery(q): OjsQuery<DeleteClaim>,
) -> ApiResult<Response> {
    delete(&st, &tenant, &id, q).await
}

/// `POST /checkpoints/{job_id}`: the JavaScript SDK's save (`DurableContext.checkpoint`).
#[utoipa::path(
    post,
    path = "/ojs/v1/checkpoints/{id}",
    tag = "checkpoints",
    summary = "Save a job's checkpoint as the SDKs' durable contexts do: `{state, step_index, metadata}`",
    params(("id" = String, Path)),
    request_body = CheckpointReq,
    responses((status = 200, description = "Saved", body = Saved, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such job, or another tenant's (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 409, description = "The job has ended, or the named claim was lost (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 413, description = "State or metadata over 1 MiB (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn save_checkpoint(
    State(st): State<AppState>,
    tenant: ActingTenant,
    JobPath(id): JobPath,
    OjsRawJson(req): OjsRawJson<CheckpointReq>,
) -> ApiResult<Response> {
    save(&st, &tenant, &id, req).await
}

/// `PUT /checkpoints/{job_id}`: the Go SDK's save.
#[utoipa::path(
    put,
    path = "/ojs/v1/checkpoints/{id}",
    tag = "checkpoints",
    summary = "Save a job's checkpoint (as POST)",
    params(("id" = String, Path)),
    request_body = CheckpointReq,
    responses((status = 200, description = "Saved", body = Saved, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such job, or another tenant's (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 409, description = "The job has ended, or the named claim was lost (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 413, description = "State or metadata over 1 MiB (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn put_checkpoint(
    State(st): State<AppState>,
    tenant: ActingTenant,
    JobPath(id): JobPath,
    OjsRawJson(req): OjsRawJson<CheckpointReq>,
) -> ApiResult<Response> {
    save(&st, &tenant, &id, req).await
}

/// `GET /checkpoints/{job_id}`: the checkpoint wrapped, as the extension's read answers (§4.3).
#[utoipa::path(
    get,
    path = "/ojs/v1/checkpoints/{id}",
    tag = "checkpoints",
    summary = "A job's checkpoint, wrapped: `{checkpoint: {job_id, state, sequence, created_at, …}}`",
    params(("id" = String, Path)),
    responses((status = 200, description = "OK", body = Wrapped, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such job, another tenant's, or no checkpoint (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn get_checkpoint(State(st): State<AppState>, tenant: ActingTenant, JobPath(id): JobPath) -> ApiResult<Response> {
    let (_, cp) = read(&st, &tenant, &id).await?;
    let cp = cp.ok_or_else(|| no_checkpoint(id.as_str()))?;
    Ok(ok(json!({ "checkpoint": cp.view(Some(id.as_str())) })))
}

/// `DELETE /checkpoints/{job_id}`: the SDKs' `complete()`.
#[utoipa::path(
    delete,
    path = "/ojs/v1/checkpoints/{id}",
    tag = "checkpoints",
    summary = "Delete a job's checkpoint (idempotent)",
    params(("id" = String, Path), DeleteClaim),
    responses((status = 200, description = "Deleted, or there was none", body = Deleted, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such job, or another tenant's (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 409, description = "The named claim was lost (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn delete_checkpoint(
    State(st): State<AppState>,
    tenant: ActingTenant,
    JobPath(id): JobPath,
    OjsQuery(q): OjsQuery<DeleteClaim>,
) -> ApiResult<Response> {
    delete(&st, &tenant, &id, q).await
}

/// `GET /checkpoints/{job_id}/resume`: what a durable context reads before it runs (`has_checkpoint`
/// false when there is none: not an error).
#[utoipa::path(
    get,
    path = "/ojs/v1/checkpoints/{id}/resume",
    tag = "checkpoints",
    summary = "Whether a job has a checkpoint to resume from: `{job_id, has_checkpoint, attempt, checkpoint?}`",
    params(("id" = String, Path)),
    responses((status = 200, description = "OK", body = Resume, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such job, or another tenant's (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn resume_checkpoint(
    State(st): State<AppState>,
    tenant: ActingTenant,
    JobPath(id): JobPath,
) -> ApiResult<Response> {
    let (attempt, cp) = read(&st, &tenant, &id).await?;
    let mut body = json!({ "job_id": id.as_str(), "has_checkpoint": cp.is_some(), "attempt": attempt });
    if let Some(cp) = cp {
        body["checkpoint"] = serde_json::to_value(cp.view(Some(id.as_str()))).unwrap_or(Value::Null);
    }
    Ok(ok(body))
}
