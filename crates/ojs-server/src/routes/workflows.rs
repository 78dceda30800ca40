//! Workflows (ojs-workflows): `POST /workflows` (chain, group, batch), `GET /workflows`,
//! `GET|DELETE /workflows/{id}`. Creating one is one script call (workflow-create-1.lua);
//! the script that ends each of its jobs advances it (lua/includes/workflow.lua).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use ojs_core::workflow;
use ojs_core::{ErrorCode, OjsError};
use ojs_store::{Transition, WorkflowRecord};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::ApiResult;
use crate::listing::{PageQuery, Pagination, Params};
use crate::respond::{ojs_json, ok, OjsJson, OjsPath, OjsQuery};
use crate::schemas::{OjsErrorBody, WorkflowView, OJS_MEDIA_TYPE};
use crate::state::AppState;
use crate::tenant::ActingTenant;
use crate::workflow_ops::{store_workflow, view, VIEW_JOBS};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create, list))
        .routes(routes!(get_workflow, cancel))
}

/// A workflow definition (ojs-workflows §3–6), as `ojs_core::workflow::parse` reads it.
#[derive(Deserialize, ToSchema)]
pub struct WorkflowRequest {
    /// `chain` (ordered `steps`), `group` (parallel `jobs`) or `batch` (parallel `jobs` and `callbacks`).
    #[serde(rename = "type")]
    #[schema(pattern = "^(chain|group|batch)$")]
    pub kind: String,
    #[schema(nullable = false, max_length = 255)]
    pub name: Option<String>,
    /// The workflow's id (a UUIDv7); the server mints one when absent.
    #[schema(nullable = false)]
    pub id: Option<String>,
    /// A chain's steps, run in order (1 to 10,000 job envelopes).
    #[schema(nullable = false)]
    pub steps: Option<Vec<crate::schemas::JobRequest>>,
    /// A group's or batch's jobs, run in parallel (1 to 10,000 job envelopes).
    #[schema(nullable = false)]
    pub jobs: Option<Vec<crate::schemas::JobRequest>>,
    /// A batch's callbacks: at least one of them.
    #[schema(nullable = false)]
    pub callbacks: Option<WorkflowCallbacks>,
    /// Seed priority model: the priority members inherit unless they set their own (core model:
    /// `options.priority`).
    #[schema(nullable = false)]
    pub priority: Option<i64>,
    #[schema(value_type = Option<Object>)]
    pub options: Option<Value>,
}

/// Jobs a batch enqueues when all of its jobs have ended.
#[derive(Deserialize, ToSchema)]
pub struct WorkflowCallbacks {
    /// Always.
    #[schema(nullable = false)]
    pub on_complete: Option<crate::schemas::JobRequest>,
    /// When no job failed.
    #[schema(nullable = false)]
    pub on_success: Option<crate::schemas::JobRequest>,
    /// When a job failed.
    #[schema(nullable = false)]
    pub on_failure: Option<crate::schemas::JobRequest>,
}

#[derive(Serialize, ToSchema)]
pub struct WorkflowResponse {
    pub workflow: WorkflowView,
}

#[derive(Serialize, ToSchema)]
struct WorkflowList {
    workflows: Vec<WorkflowView>,
    pagination: Pagination,
}

#[utoipa::path(
    post,
    path = "/ojs/v1/workflows",
    tag = "workflows",
    summary = "Create a chain (`steps`), group (`jobs`) or batch (`jobs` + `callbacks`); members without a priority inherit the workflow's",
    request_body = WorkflowRequest,
    responses((status = 201, description = "Created", body = WorkflowResponse, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 403, description = "A key bound to a tenant, and a header or body naming another tenant (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 409, description = "A job or workflow with this id exists (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 413, description = "Too many jobs (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 422, description = "A definition that cannot work (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 429, description = "A queue is full (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn create(
    State(st): State<AppState>,
    tenant: ActingTenant,
    OjsJson(mut body): OjsJson<Value>,
) -> ApiResult<Response> {
    tenant.stamp_workflow(&mut body)?;
    let mut wf = workflow::parse(body, &st.rules)?;
    for j in &mut wf.jobs {
        j.tenant_pinned = tenant.pins();
    }
    let (_, _, v) = store_workflow(&st, &mut wf).await?;
    let mut res = ojs_json(StatusCode::CREATED, json!(WorkflowResponse { workflow: v }));
    if let Ok(loc) = format!("/ojs/v1/workflows/{}", wf.id).parse() {
        res.headers_mut().insert("location", loc);
    }
    Ok(res)
}

fn path_id(id: &str) -> Result<&str, OjsError> {
    ojs_core::names::check_job_id(id)
        .map(|_| id)
        .map_err(|_| OjsError::not_found("workflow", id))
}

/// A workflow with its first `limit` jobs, when the request sees it: another tenant's is answered as
/// not found (lua/workflow-get-1.lua gives the workflow's tenant).
async fn read(st: &AppState, tenant: &ActingTenant, id: &str, limit: u64) -> ApiResult<WorkflowRecord> {
    st.shards
        .on_id(id, |s| async move { s.workflow(id, limit).await })
        .await?
        .filter(|w| tenant.sees_owner(w.fields.get("tenant").map(String::as_str)))
        .ok_or_else(|| OjsError::not_found("workflow", id).into())
}

fn view_of(id: &str, w: WorkflowRecord) -> WorkflowView {
    let WorkflowRecord {
        fields,
        jobs,
        callbacks,
        ..
    } = w;
    view(id, &fields, jobs, callbacks)
}

#[utoipa::path(
    get,
    path = "/ojs/v1/workflows/{id}",
    tag = "workflows",
    summary = "A workflow: state, counters, its jobs' states",
    params(("id" = String, Path)),
    responses((status = 200, description = "OK", body = WorkflowResponse, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such workflow, or (for a request acting as a tenant) another tenant's (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn get_workflow(
    State(st): State<AppState>,
    tenant: ActingTenant,
    OjsPath(id): OjsPath<String>,
) -> ApiResult<Response> {
    let id = path_id(&id)?;
    Ok(ok(json!(WorkflowResponse {
        workflow: view_of(id, read(&st, &tenant, id, VIEW_JOBS).await?)
    })))
}

#[utoipa::path(
    delete,
    path = "/ojs/v1/workflows/{id}",
    tag = "workflows",
    summary = "Cancel a running workflow and every job of it that has not ended",
    params(("id" = String, Path)),
    responses((status = 200, description = "OK", body = WorkflowResponse, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such workflow, or (for a request acting as a tenant) another tenant's (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 409, description = "The workflow already ended (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn cancel(State(st): State<AppState>, tenant: ActingTenant, OjsPath(id): OjsPath<String>) -> ApiResult<Response> {
    let id = path_id(&id)?;
    // A workflow's tenant never changes: a request acting as a tenant reads it first (one member), and
    // another tenant's is answered as absent, untouched.
    if tenant.name().is_some() {
        read(&st, &tenant, id, 1).await?;
    }
    match st
        .shards
        .on_id(id, |s| async move { s.cancel_workflow(id).await })
        .await?
    {
        Transition::Done(_) => Ok(ok(json!(WorkflowResponse {
            workflow: view_of(id, read(&st, &tenant, id, VIEW_JOBS).await?)
        }))),
        Transition::NotFound => Err(OjsError::not_found("workflow", id).into()),
        Transition::WrongState(s) | Transition::LeaseLost(s) => Err(OjsError::new(
            ErrorCode::Conflict,
            format!("workflow {id} is {s}: only a running workflow can be cancelled"),
        )
        .with_details(json!({ "workflow_id": id, "state": s }))
        .into()),
    }
}

#[utoipa::path(
    get,
    path = "/ojs/v1/workflows",
    tag = "workflows",
    summary = "Workflows, newest first (paginated: page, per_page); each without its job list",
    params(PageQuery),
    responses((status = 200, description = "OK", body = WorkflowList, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn list(State(st): State<AppState>, OjsQuery(q): OjsQuery<Params>) -> ApiResult<Response> {
    let p = PageQuery::from_params(&q)?.resolve(50, 500)?;
    let (total, found) = st.shards.workflows_page(p.offset, p.count).await?;
    let workflows: Vec<WorkflowView> = found
        .iter()
        .map(|(id, f)| view(id, f, Vec::new(), Vec::new()))
        .collect();
    Ok(ok(json!(WorkflowList {
        workflows,
        pagination: p.of(total),
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schemas::JobRequest;

    /// Every workflow the parser accepts reads as the documented [`WorkflowRequest`], which finds in
    /// it the kind, members and callbacks the parser found.
    #[test]
    fn workflows_read_as_workflow_requests() {
        let rules = ojs_core::envelope::EnvelopeRules::default();
        let job = |t: &str| json!({"type": t, "args": []});
        for body in [
            json!({"type": "chain", "name": "etl", "steps": [job("a.x"), job("a.y")], "priority": 1}),
            json!({"type": "group", "id": "019a0000-0000-7000-8000-000000000002", "jobs": [job("a.x"), job("a.y"), job("a.z")]}),
            json!({"type": "batch", "jobs": [job("a.x")], "callbacks": {"on_complete": job("cb.all"), "on_success": job("cb.ok"), "on_failure": job("cb.ko")}}),
        ] {
            let parsed = workflow::parse(body.clone(), &rules).expect("a valid workflow");
            let req: WorkflowRequest = serde_json::from_value(body).expect("a WorkflowRequest");
            assert_eq!(workflow::WorkflowKind::parse(&req.kind), Some(parsed.kind));
            assert_eq!(req.name.unwrap_or_default(), parsed.name);
            if let Some(id) = req.id {
                assert_eq!(id, parsed.id);
            }
            let members: Vec<JobRequest> = req.steps.or(req.jobs).expect("members");
            assert_eq!(members.len(), parsed.members);
            let callbacks = req.callbacks.map_or_else(Vec::new, |c| {
                [
                    ("on_complete", c.on_complete),
                    ("on_success", c.on_success),
                    ("on_failure", c.on_failure),
                ]
                .into_iter()
                .filter_map(|(name, j)| j.map(|_| name))
                .collect()
            });
            assert_eq!(callbacks, parsed.callbacks);
            // Members inherit the workflow's priority unless they set their own.
            if let Some(p) = req.priority {
                assert!(parsed.jobs.iter().all(|j| j.priority == p));
            }
        }
    }
}
