//! Tenants at the HTTP edge (the OJS multi-tenancy extension): [`ActingTenant`], the one notion of the
//! tenant a request acts as (its API key's tenant, else its `X-OJS-Tenant` header), which every handler
//! that serves jobs takes: it stamps what the request creates (a job's or a workflow's envelopes, a cron
//! template), and narrows what it sees and acts on to that tenant's jobs; and the tenants of every shard
//! merged (for the listing and the metrics). A job's tenant is its `meta.tenant_id` (checked by
//! `ojs_core::envelope`); the store keeps each tenant's waiting jobs apart and shares FETCH fairly among
//! tenants (lua/includes/tenant.lua).

use std::collections::HashSet;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue};
use ojs_core::names::{self, TENANT_HEADER};
use ojs_core::StoredJob;
use ojs_core::{ErrorCode, OjsError};
use serde_json::Value;

use crate::api_keys::KeyTenant;
use crate::error::ApiError;
use crate::state::AppState;

/// The tenant a request acts as. With an API key bound to a tenant (`worker@<tenant>:<key>`), that
/// tenant on every request, with or without `X-OJS-Tenant` (a header, body, batch job, workflow member
/// or cron template naming another tenant is a 403, and writes nothing): the key authenticates it.
/// Otherwise the tenant its `X-OJS-Tenant` header names (checked: 400 when it is no tenant id), which
/// narrows what the request sees but authenticates nothing; else none, and the request sees every
/// tenant. An axum extractor: a handler that creates, reads or acts on jobs, workflows or cron entries
/// takes it, and asks it rather than the header.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActingTenant {
    name: Option<String>,
    /// The tenant is the API key's.
    bound: bool,
}

impl<S: Send + Sync> FromRequestParts<S> for ActingTenant {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        match parts.extensions.get::<ActingTenant>() {
            // A key bound to a tenant: `auth::admit` resolved it already.
            Some(t) => Ok(t.clone()),
            None => Ok(Self::resolve(None, &parts.headers)?),
        }
    }
}

/// The request's one `X-OJS-Tenant` header; a request that sends it twice names no single tenant (a 400,
/// before any key's binding is compared: the first or the last one winning would be a guess).
fn tenant_header(headers: &HeaderMap) -> Result<Option<&HeaderValue>, OjsError> {
    let mut all = headers.get_all(TENANT_HEADER).iter();
    match (all.next(), all.next()) {
        (v, None) => Ok(v),
        _ => Err(OjsError::invalid("the X-OJS-Tenant header must be sent once")),
    }
}

/// The tenant a request's `X-OJS-Tenant` header names, checked; `None` without the header.
fn header_tenant(headers: &HeaderMap) -> Result<Option<String>, OjsError> {
    let Some(v) = tenant_header(headers)? else {
        return Ok(None);
    };
    let t = v
        .to_str()
        .map_err(|_| OjsError::invalid("the X-OJS-Tenant header must be visible ASCII"))?;
    names::check_tenant(t, "the X-OJS-Tenant header").map_err(OjsError::invalid)?;
    Ok(Some(t.to_string()))
}

impl ActingTenant {
    /// The tenant a request acts as, from its API key's binding (`key`) and its headers: the rule, in
    /// one place. A key's tenant wins, and a header naming another is a 403; without a binding, the
    /// header's (400 when it is no tenant id). `auth::admit` calls it for every request with a bound
    /// key (so the 403 holds on every path), the extractor for the others.
    pub fn resolve(key: Option<&KeyTenant>, headers: &HeaderMap) -> Result<Self, OjsError> {
        let Some(KeyTenant(bound)) = key else {
            return Ok(Self {
                name: header_tenant(headers)?,
                bound: false,
            });
        };
        let me = Self {
            name: Some(bound.clone()),
            bound: true,
        };
        match tenant_header(headers)? {
            Some(h) if h.as_bytes() != bound.as_bytes() => Err(me.forbidden(&format!(
                "the X-OJS-Tenant header ({:?})",
                String::from_utf8_lossy(h.as_bytes())
            ))),
            _ => Ok(me),
        }
    }

    /// The tenant, when the request acts as one.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// Whether the jobs the request creates keep its tenant whatever their queue's tenancy setting
    /// derives (the key's or the header's tenant wins over it).
    pub fn pins(&self) -> bool {
        self.name.is_some()
    }

    /// The 403 of a request whose key is bound to a tenant and that names another in `what`.
    fn forbidden(&self, what: &str) -> OjsError {
        OjsError::new(
            ErrorCode::Forbidden,
            format!(
                "{what} names another tenant than this API key's ({:?}): a key bound to a tenant acts as that tenant only",
                self.name().unwrap_or_default()
            ),
        )
    }

    /// A request whose key is bound to a tenant may not name another in a job envelope (403); a
    /// header's conflict is left to the envelope's own rule (400, [`ActingTenant::stamp`]).
    fn own_envelope(&self, doc: &Value) -> Result<(), OjsError> {
        match (self.bound, self.name(), named_tenant(doc)) {
            (true, Some(t), Some(n)) if n != t => Err(self.forbidden(&format!("meta.tenant_id ({n:?})"))),
            _ => Ok(()),
        }
    }

    /// Puts the tenant into a job envelope's `meta.tenant_id` (a body naming another: 403 for a key
    /// bound to a tenant, else 400). `POST /jobs`, each job of a batch and a cron template go through it.
    pub fn stamp(&self, doc: &mut Value) -> Result<(), OjsError> {
        self.own_envelope(doc)?;
        match self.name() {
            Some(t) => names::apply_tenant_header(doc, t).map_err(OjsError::invalid),
            None => Ok(()),
        }
    }

    /// A request whose key is bound to a tenant may not read what spans tenants (`what`, such as every
    /// job's events): 403. Others may (a header alone narrows nothing there).
    pub fn spanning(&self, what: &str) -> Result<(), OjsError> {
        match self.bound {
            true => Err(OjsError::new(
                ErrorCode::Forbidden,
                format!(
                    "{what} spans tenants: a key bound to tenant {:?} may read only its own jobs' (name one)",
                    self.name().unwrap_or_default()
                ),
            )),
            false => Ok(()),
        }
    }

    /// Whether the request sees a thing of `owner` (a job's, a workflow's or a cron entry's tenant):
    /// always when it acts as no tenant, else only its own tenant's.
    pub fn sees_owner(&self, owner: Option<&str>) -> bool {
        self.name().is_none_or(|t| owner == Some(t))
    }

    /// Whether the request sees a job: any other is answered as not found (it is not revealed that it
    /// exists). `job` is the stored job (its record's `tenant` field).
    pub fn sees(&self, job: &StoredJob) -> bool {
        self.sees_owner(job.tenant.as_deref())
    }

    /// The job as stored, when the request sees it; else a 404, as for a job that does not exist.
    pub async fn job(&self, st: &AppState, id: &str) -> Result<StoredJob, ApiError> {
        match st.shards.get_job(id).await? {
            Some(f) if self.sees(&f) => Ok(f),
            _ => Err(OjsError::not_found("job", id).into()),
        }
    }

    /// For a request acting as a tenant, reads the job first and answers 404 when it is another
    /// tenant's (or missing); a job's tenant never changes, so the check holds for the operation that
    /// follows. Costs nothing for a request acting as no tenant.
    pub async fn check_job(&self, st: &AppState, id: &str) -> Result<(), ApiError> {
        match self.name {
            Some(_) => self.job(st, id).await.map(drop),
            None => Ok(()),
        }
    }

    /// Which of these job ids the request sees (all, for a request acting as no tenant): one read of
    /// their tenants over the shards (for lists of ids that span tenants: a gate's slot holders, a
    /// worker's jobs).
    pub async fn seen_ids(&self, st: &AppState, ids: &[String]) -> Result<HashSet<String>, ApiError> {
        if self.name.is_none() || ids.is_empty() {
            return Ok(ids.iter().cloned().collect());
        }
        let read = st.shards.jobs_partial(ids, &["state", "tenant"]).await?;
        Ok(ids
            .iter()
            .zip(read)
            .filter(|(_, j)| j.as_ref().is_some_and(|j| self.sees(j)))
            .map(|(id, _)| id.clone())
            .collect())
    }

    /// One tenant per workflow (multi-tenancy §15.2): every job of a workflow body takes the request's
    /// tenant, or else the one tenant its jobs name; jobs naming two tenants are refused (400), and a
    /// job naming another tenant than a bound key's is a 403.
    pub fn stamp_workflow(&self, body: &mut Value) -> Result<(), OjsError> {
        if body.get("workflow").is_some_and(Value::is_object) {
            self.own_envelope(body)?;
        }
        for m in workflow_members(body) {
            self.own_envelope(m)?;
        }
        stamp_workflow(body, self.name())
    }
}

/// The job envelopes of a workflow body: a `POST /workflows` body's `steps`, `jobs` and `callbacks`,
/// or the chain of the seed's job form (`POST /jobs` with `workflow.chain`; the job itself is the body).
fn workflow_members(body: &mut Value) -> Vec<&mut Value> {
    let Some(o) = body.as_object_mut() else {
        return Vec::new();
    };
    let mut out: Vec<&mut Value> = Vec::new();
    for (k, v) in o.iter_mut() {
        match (k.as_str(), v) {
            ("steps" | "jobs", Value::Array(a)) => out.extend(a.iter_mut()),
            ("callbacks", Value::Object(c)) => out.extend(c.values_mut()),
            ("workflow", Value::Object(w)) => {
                if let Some(Value::Array(a)) = w.get_mut("chain") {
                    out.extend(a.iter_mut());
                }
            }
            _ => {}
        }
    }
    out
}

fn named_tenant(doc: &Value) -> Option<&str> {
    doc.get("meta").and_then(|m| m.get("tenant_id")).and_then(Value::as_str)
}

/// [`ActingTenant::stamp_workflow`], for the tenant `tenant`.
fn stamp_workflow(body: &mut Value, tenant: Option<&str>) -> Result<(), OjsError> {
    let job_form = body.get("workflow").is_some_and(Value::is_object);
    let mut named: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    if job_form {
        named.extend(named_tenant(body).map(str::to_owned));
    }
    named.extend(
        workflow_members(body)
            .into_iter()
            .filter_map(|m| named_tenant(m).map(str::to_owned)),
    );
    let one = match (tenant, named.len()) {
        (Some(t), _) => t.to_string(),
        (None, 0) => return Ok(()),
        (None, 1) => named.into_iter().next().unwrap_or_default(),
        (None, _) => {
            return Err(OjsError::invalid(format!(
                "a workflow's jobs belong to one tenant; these name {}",
                named.into_iter().collect::<Vec<_>>().join(", ")
            )))
        }
    };
    if job_form {
        names::apply_tenant_header(body, &one).map_err(OjsError::invalid)?;
    }
    for m in workflow_members(body) {
        names::apply_tenant_header(m, &one).map_err(OjsError::invalid)?;
    }
    Ok(())
}

/// The tenants active in the last 30 days over every shard, most recent first (at most `limit`), with
/// their counters summed: for the listing and the metrics.
pub async fn recent(st: &AppState, limit: usize) -> Result<Vec<ojs_store::TenantSeen>, ApiError> {
    let mut by: std::collections::HashMap<String, ojs_store::TenantSeen> = Default::default();
    for s in st.shards.all() {
        for t in s.tenants_seen(limit).await? {
            let e = by.entry(t.tenant.clone()).or_insert(ojs_store::TenantSeen {
                tenant: t.tenant.clone(),
                last_active_ms: 0,
                counts: Default::default(),
            });
            e.last_active_ms = e.last_active_ms.max(t.last_active_ms);
            e.counts.enqueued += t.counts.enqueued;
            e.counts.dispatched += t.counts.dispatched;
        }
    }
    let mut all: Vec<_> = by.into_values().collect();
    all.sort_by(|a, b| {
        b.last_active_ms
            .cmp(&a.last_active_ms)
            .then_with(|| a.tenant.cmp(&b.tenant))
    });
    all.truncate(limit);
    Ok(all)
}

/// A tenant's fair-share weight as set (None: never set, the default 1 applies): shard 0's copy, which
/// [`set_weight`] writes first.
pub async fn weight(st: &AppState, tenant: &str) -> Result<Option<u32>, ApiError> {
    Ok(st.shards.first().tenant_weight(tenant).await?)
}

/// Sets (or, with None, clears) a tenant's fair-share weight on every shard: each shard's FETCH reads
/// its own copy.
pub async fn set_weight(st: &AppState, tenant: &str, weight: Option<u32>) -> Result<(), ApiError> {
    for s in st.shards.all() {
        s.set_tenant_weight(tenant, weight).await?;
    }
    Ok(())
}

/// A tenant's counters summed over every shard.
pub async fn counts(st: &AppState, tenant: &str) -> Result<ojs_store::TenantCounts, ApiError> {
    let mut sum = ojs_store::TenantCounts::default();
    for s in st.shards.all() {
        let c = s.tenant_counts(tenant).await?;
        sum.enqueued += c.enqueued;
        sum.dispatched += c.dispatched;
    }
    Ok(sum)
}

/// One tenant's claims over the last hour, over every shard, and its share of all tenants' claims.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LastHour {
    pub dispatched: u64,
    /// `dispatched` / every tenant's claims in the hour (0 when there were none), rounded to 4 places.
    pub share: f64,
}

/// The last hour's claims of each tenant named, in order (FETCH's per-minute counts,
/// lua/includes/tenant.lua): one TIME and one pipeline per shard.
pub async fn last_hour<'a>(st: &AppState, tenants: impl Iterator<Item = &'a str>) -> Result<Vec<LastHour>, ApiError> {
    let names: Vec<&str> = tenants.collect();
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let mut per = vec![0u64; names.len()];
    let mut all = 0u64;
    for s in st.shards.all() {
        let (p, a) = s.tenants_last_hour(&names).await?;
        for (x, y) in per.iter_mut().zip(p) {
            *x += y;
        }
        all += a;
    }
    Ok(per
        .into_iter()
        .map(|d| LastHour {
            dispatched: d,
            share: if all == 0 {
                0.0
            } else {
                (d as f64 / all as f64 * 10_000.0).round() / 10_000.0
            },
        })
        .collect())
}
