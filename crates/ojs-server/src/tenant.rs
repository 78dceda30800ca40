//! Tenants at the HTTP edge (the OJS multi-tenancy extension): the `X-OJS-Tenant` header, and the
//! check that a request naming a tenant only sees that tenant's jobs. A job's tenant is its
//! `meta.tenant_id` (checked by `ojs_core::envelope`); the store keeps each tenant's waiting jobs apart
//! and shares FETCH fairly among tenants (lua/includes/tenant.lua).

use axum::http::HeaderMap;
use ojs_core::job::Fields;
use ojs_core::names::{self, TENANT_HEADER};
use ojs_core::OjsError;
use serde_json::Value;

use crate::error::ApiError;
use crate::state::AppState;

/// The tenant a request's `X-OJS-Tenant` header names, checked; `None` without the header.
pub fn header_tenant(headers: &HeaderMap) -> Result<Option<String>, OjsError> {
    let Some(v) = headers.get(TENANT_HEADER) else {
        return Ok(None);
    };
    let t = v
        .to_str()
        .map_err(|_| OjsError::invalid("the X-OJS-Tenant header must be visible ASCII"))?;
    names::check_tenant(t, "the X-OJS-Tenant header").map_err(OjsError::invalid)?;
    Ok(Some(t.to_string()))
}

/// Puts the header's tenant into a job envelope's `meta.tenant_id` (400 when the body names another).
pub fn stamp(doc: &mut Value, tenant: Option<&str>) -> Result<(), OjsError> {
    match tenant {
        Some(t) => names::apply_tenant_header(doc, t).map_err(OjsError::invalid),
        None => Ok(()),
    }
}

/// A request that names a tenant sees only that tenant's jobs: any other job is answered as not found
/// (it is not revealed that it exists). A request without the header sees every job. `job` is the
/// stored job (its record's `tenant` field).
pub fn visible(job: &Fields, tenant: Option<&str>) -> bool {
    tenant.is_none_or(|t| job.get("tenant").map(String::as_str) == Some(t))
}

/// For a request that names a tenant, reads the job first and answers 404 when it is another tenant's
/// (or missing); a job's tenant never changes, so the check holds for the operation that follows.
/// Costs nothing without the header.
pub async fn check_owner(st: &AppState, id: &str, tenant: Option<&str>) -> Result<(), ApiError> {
    if tenant.is_none() {
        return Ok(());
    }
    match st.shards.get_job(id).await? {
        Some(f) if visible(&f, tenant) => Ok(()),
        _ => Err(OjsError::not_found("job", id).into()),
    }
}
