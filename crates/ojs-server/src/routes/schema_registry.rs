//! The schema registry (ojs-job-versioning §6, the ext-schema-registry suite): JSON Schemas of a job
//! type's `args`, per version, against which enqueues are checked (ojs-store `ops/schema.rs`,
//! `schema_cache.rs`). Admin keys only (`/ojs/v1/admin/…`, auth.rs): the registry applies to every
//! tenant's jobs, so a key bound to a tenant may not change it.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use ojs_core::job_version::{parse_version_text, MAX_SCHEMA_BYTES, MAX_SCHEMA_VERSIONS};
use ojs_core::{clock, names, ErrorCode, OjsError};
use ojs_store::{SchemaEntry, SchemaPut};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::ApiResult;
use crate::media::{ojs_json, ok};
use crate::respond::{OjsJson, OjsPath};
use crate::schemas::{OjsErrorBody, OJS_MEDIA_TYPE};
use crate::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(put_schema, get_schema, delete_schema))
        .routes(routes!(latest_schema))
        .routes(routes!(list_versions))
}

/// A registration: the JSON Schema of the type's `args` at the path's version.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct SchemaReq {
    /// A JSON Schema (an object with at least one keyword; Draft 7 unless its `$schema` names another
    /// draft), at most 64 KiB serialised.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    schema: Option<Value>,
    /// The same as `schema` (the name the spec's example uses); give one of them.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    args_schema: Option<Value>,
    /// When given, the path's type.
    #[serde(default, rename = "type")]
    #[schema(nullable = false)]
    job_type: Option<String>,
    /// When given, the path's version.
    #[serde(default)]
    #[schema(value_type = Option<u32>, nullable = false)]
    version: Option<Value>,
}

/// One registered version.
#[derive(Serialize, ToSchema)]
struct SchemaView {
    #[serde(rename = "type")]
    job_type: String,
    version: u32,
    /// The JSON Schema, as registered.
    #[schema(value_type = Object)]
    schema: Box<RawValue>,
    #[schema(format = DateTime)]
    registered_at: String,
}

impl SchemaView {
    fn of(e: SchemaEntry) -> ApiResult<Self> {
        let schema = RawValue::from_string(e.schema)
            .map_err(|err| OjsError::new(ErrorCode::Internal, format!("a stored schema is not JSON: {err}")))?;
        Ok(Self {
            job_type: e.job_type,
            version: e.version,
            schema,
            registered_at: clock::format_ms(e.registered_at_ms),
        })
    }
}

#[derive(Serialize, ToSchema)]
struct VersionItem {
    version: u32,
    #[schema(format = DateTime)]
    registered_at: String,
}

/// A type's registered versions, ascending.
#[derive(Serialize, ToSchema)]
struct VersionList {
    #[serde(rename = "type")]
    job_type: String,
    versions: Vec<VersionItem>,
    /// The highest version (what an enqueue without `version` is checked against); absent when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    latest: Option<u32>,
}

#[derive(Serialize, ToSchema)]
struct SchemaDeleted {
    #[serde(rename = "type")]
    job_type: String,
    version: u32,
    deleted: bool,
}

/// The path's type and version, checked: a 400 naming the rule.
fn type_of(t: &str) -> Result<String, OjsError> {
    names::check_type(t).map_err(OjsError::invalid)?;
    Ok(t.to_string())
}

/// The `{type}/{version}` of a route, typed: a bad type or version is a 400 naming the rule.
struct SchemaPath(String, u32);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for SchemaPath {
    type Rejection = crate::error::ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, Self::Rejection> {
        let OjsPath((t, v)) = OjsPath::<(String, String)>::from_request_parts(parts, state).await?;
        Ok(Self(
            type_of(&t)?,
            parse_version_text(&v, "version").map_err(OjsError::invalid)?,
        ))
    }
}

/// The 404 of a version the type does not have.
fn missing(job_type: &str, version: u32) -> crate::error::ApiError {
    OjsError::not_found("schema", &format!("{job_type} version {version}")).into()
}

/// The schema of a registration, checked: present, one field, agreeing with the path, within the size
/// bound (413), a valid JSON Schema (400 naming what is wrong). Returns its text.
fn checked_schema(req: SchemaReq, job_type: &str, version: u32) -> Result<String, OjsError> {
    if req.job_type.as_deref().is_some_and(|t| t != job_type) {
        return Err(OjsError::invalid(format!(
            "type {:?} in the body is not the path's {job_type:?}",
            req.job_type.unwrap_or_default()
        )));
    }
    if let Some(v) = &req.version {
        if ojs_core::job_version::parse_version(v, "version") != Ok(version) {
            return Err(OjsError::invalid(format!(
                "version {v} in the body is not the path's {version}"
            )));
        }
    }
    let schema = match (req.schema, req.args_schema) {
        (Some(_), Some(_)) => return Err(OjsError::invalid("give schema or args_schema, not both")),
        (Some(s), None) | (None, Some(s)) if !s.is_null() => s,
        _ => {
            return Err(OjsError::invalid(
                "schema is required: the JSON Schema of the type's args, e.g. {\"schema\": {\"type\": \"array\"}}",
            ))
        }
    };
    let text = serde_json::to_string(&schema).map_err(|e| OjsError::invalid(e.to_string()))?;
    if text.len() > MAX_SCHEMA_BYTES {
        return Err(OjsError::new(
            ErrorCode::PayloadTooLarge,
            format!(
                "schema is {} bytes serialised; the registry holds at most {MAX_SCHEMA_BYTES}",
                text.len()
            ),
        ));
    }
    ojs_store::compile_schema(&schema).map_err(OjsError::invalid)?;
    Ok(text)
}

/// Gives the registry's new stamp to every shard but 0 (which the script set): once this returns, every
/// enqueue on any shard checks its args with the registry as written.
async fn spread_stamp(st: &AppState, stamp: &str) -> ApiResult<()> {
    for s in st.shards.all().iter().skip(1) {
        s.set_schemas_stamp(stamp).await?;
    }
    Ok(())
}

/// `PUT /admin/schemas/{type}/{version}`: registers the JSON Schema of the type's args at that version.
/// A registered version is never replaced (409: delete it first).
#[utoipa::path(
    put,
    path = "/ojs/v1/admin/schemas/{type}/{version}",
    tag = "admin",
    summary = "Register the JSON Schema of a job type's args at a version: `{schema: {...}}`; enqueues of the type are checked against it",
    params(("type" = String, Path, description = "The job type"), ("version" = u32, Path, description = "1 to 2147483647")),
    request_body = SchemaReq,
    responses((status = 201, description = "Registered", body = SchemaView, content_type = OJS_MEDIA_TYPE), (status = 400, description = "A bad type or version, no schema, a schema that is not a valid JSON Schema, or a type that holds 100 versions already (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 409, description = "That version is registered already (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 413, description = "The schema is larger than 64 KiB (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn put_schema(
    State(st): State<AppState>,
    SchemaPath(job_type, version): SchemaPath,
    OjsJson(req): OjsJson<SchemaReq>,
) -> ApiResult<Response> {
    let text = checked_schema(req, &job_type, version)?;
    let stamp = uuid::Uuid::now_v7().to_string();
    match st.shards.first().schema_put(&job_type, version, &text, &stamp).await? {
        SchemaPut::Registered(at) => {
            spread_stamp(&st, &stamp).await?;
            let entry = SchemaEntry {
                job_type,
                version,
                schema: text,
                registered_at_ms: at,
            };
            Ok(ojs_json(StatusCode::CREATED, SchemaView::of(entry)?))
        }
        SchemaPut::Exists => Err(OjsError::new(
            ErrorCode::Duplicate,
            format!("{job_type} version {version} is registered already; a version is never replaced (delete it first, or register a new version)"),
        )
        .with_details(serde_json::json!({ "type": job_type, "version": version }))
        .into()),
        SchemaPut::Full(n) => Err(OjsError::invalid(format!(
            "{job_type} holds {n} schema versions, the most a type may ({MAX_SCHEMA_VERSIONS}); delete one first"
        ))
        .into()),
    }
}

/// `GET /admin/schemas/{type}/{version}`.
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/schemas/{type}/{version}",
    tag = "admin",
    summary = "One registered version of a job type's args schema",
    params(("type" = String, Path, description = "The job type"), ("version" = u32, Path, description = "1 to 2147483647")),
    responses((status = 200, description = "OK", body = SchemaView, content_type = OJS_MEDIA_TYPE), (status = 400, description = "A bad type or version (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such version (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn get_schema(State(st): State<AppState>, SchemaPath(job_type, version): SchemaPath) -> ApiResult<Response> {
    match st.shards.first().schema_get(&job_type, Some(version)).await? {
        Some(e) => Ok(ok(SchemaView::of(e)?)),
        None => Err(missing(&job_type, version)),
    }
}

/// `DELETE /admin/schemas/{type}/{version}`: later enqueues naming that version are refused; jobs
/// already enqueued are not touched.
#[utoipa::path(
    delete,
    path = "/ojs/v1/admin/schemas/{type}/{version}",
    tag = "admin",
    summary = "Remove one version of a job type's args schema",
    params(("type" = String, Path, description = "The job type"), ("version" = u32, Path, description = "1 to 2147483647")),
    responses((status = 200, description = "Removed", body = SchemaDeleted, content_type = OJS_MEDIA_TYPE), (status = 400, description = "A bad type or version (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such version (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn delete_schema(State(st): State<AppState>, SchemaPath(job_type, version): SchemaPath) -> ApiResult<Response> {
    let stamp = uuid::Uuid::now_v7().to_string();
    if !st.shards.first().schema_delete(&job_type, version, &stamp).await? {
        return Err(missing(&job_type, version));
    }
    spread_stamp(&st, &stamp).await?;
    Ok(ok(SchemaDeleted {
        job_type,
        version,
        deleted: true,
    }))
}

/// `GET /admin/schemas/{type}`: the latest (highest) registered version.
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/schemas/{type}",
    tag = "admin",
    summary = "The latest registered version of a job type's args schema",
    params(("type" = String, Path, description = "The job type")),
    responses((status = 200, description = "OK", body = SchemaView, content_type = OJS_MEDIA_TYPE), (status = 400, description = "A bad type (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 404, description = "The type has no schema (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn latest_schema(State(st): State<AppState>, OjsPath(job_type): OjsPath<String>) -> ApiResult<Response> {
    let job_type = type_of(&job_type)?;
    match st.shards.first().schema_get(&job_type, None).await? {
        Some(e) => Ok(ok(SchemaView::of(e)?)),
        None => Err(OjsError::not_found("schema of job type", &job_type).into()),
    }
}

/// `GET /admin/schemas/{type}/versions`: every registered version, ascending (empty when none).
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/schemas/{type}/versions",
    tag = "admin",
    summary = "A job type's registered schema versions, ascending (empty when none)",
    params(("type" = String, Path, description = "The job type")),
    responses((status = 200, description = "OK", body = VersionList, content_type = OJS_MEDIA_TYPE), (status = 400, description = "A bad type (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn list_versions(State(st): State<AppState>, OjsPath(job_type): OjsPath<String>) -> ApiResult<Response> {
    let job_type = type_of(&job_type)?;
    let versions = st.shards.first().schema_versions(&job_type).await?;
    Ok(ok(VersionList {
        latest: versions.last().map(|(v, _)| *v),
        versions: versions
            .into_iter()
            .map(|(version, at)| VersionItem {
                version,
                registered_at: clock::format_ms(at),
            })
            .collect(),
        job_type,
    }))
}
