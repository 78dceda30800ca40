//! A worker as the API names it: its id (which goes into events and key names), the claim a request
//! acts for (ACK, NACK, progress), and its record as the operator sees it (the admin API, worker health).

use ojs_core::{clock, OjsError};
use ojs_store::ClaimRef;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// Worker ids go into events and key names: printable ASCII without quotes, backslashes or braces.
pub(crate) fn check_worker_id(w: &str) -> Result<(), OjsError> {
    let ok = w.len() <= 255
        && w.bytes()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b'\\' | b'{' | b'}'));
    if ok {
        Ok(())
    } else {
        Err(OjsError::invalid(
            "worker_id must be at most 255 printable ASCII characters without quotes, backslashes or braces",
        ))
    }
}

/// The claim an ACK or NACK acts for (lua/includes/lease.lua): the `lease_id` FETCH returned, or the
/// `attempt` (and `worker_id`) it was given, or `worker_id` alone. Naming none acts on whoever holds
/// the job now, which cannot tell a stale worker from the current one (the official SDKs send none).
#[derive(Deserialize, Default, ToSchema)]
pub(crate) struct ClaimFields {
    /// The `lease_id` FETCH returned (digits; a JSON integer is accepted too).
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

impl ClaimFields {
    /// The claim fields of a request that names them elsewhere than in a flattened body (a raw body,
    /// a query).
    pub(crate) fn new(lease_id: Option<Value>, attempt: Option<Value>, worker_id: Option<String>) -> Self {
        Self {
            lease_id,
            attempt,
            worker_id,
        }
    }

    /// The claim, for a request acting as `tenant` (`tenant::ActingTenant::name`): a job of another
    /// tenant is not its to act on.
    pub(crate) fn into_ref(self, tenant: Option<&str>) -> Result<ClaimRef, OjsError> {
        if let Some(w) = &self.worker_id {
            check_worker_id(w)?;
        }
        let attempt = match self.attempt {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                // An attempt is at most a job's max_attempts (a u32): a larger one names no attempt, and
                // past 2^53 the scripts could not even take it (it was a 500 from their argument check).
                v.as_i64()
                    .filter(|a| (1..=i64::from(u32::MAX)).contains(a))
                    .ok_or_else(|| {
                        OjsError::invalid(format!("attempt must be an integer from 1 to {}; got {v}", u32::MAX))
                    })?,
            ),
        };
        Ok(ClaimRef {
            lease_id: lease_id(self.lease_id, "lease_id")?,
            attempt,
            worker_id: self.worker_id.filter(|w| !w.is_empty()),
            tenant: tenant.map(str::to_owned),
        })
    }
}

/// A lease id as FETCH gave it (a string of digits), also accepted as a JSON integer.
pub(crate) fn lease_id(v: Option<Value>, field: &str) -> Result<Option<String>, OjsError> {
    let s = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) => s,
        Some(Value::Number(n)) if n.as_u64().is_some() => n.to_string(),
        Some(v) => {
            return Err(OjsError::invalid(format!(
                "{field} must be the lease_id string FETCH returned; got {v}"
            )))
        }
    };
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(OjsError::invalid(format!(
            "{field} must be the lease_id string FETCH returned (digits); got {s:?}"
        )));
    }
    Ok(Some(s))
}

/// A worker's state as the operator sees it.
#[derive(Serialize, ToSchema, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum WorkerState {
    Running,
    Quiet,
    Drain,
    Terminate,
    /// Silent for longer than a lease.
    Stale,
}

impl WorkerState {
    /// A state as stored (`reported_state` normalised it; the operator's signal is quiet or terminate).
    fn parse(s: &str) -> Self {
        match s {
            "quiet" => Self::Quiet,
            "drain" => Self::Drain,
            "terminate" => Self::Terminate,
            _ => Self::Running,
        }
    }
}

/// A worker record as the API shows it.
#[derive(Serialize, ToSchema)]
pub(crate) struct WorkerView {
    id: String,
    /// The same as `id`.
    worker_id: String,
    /// The operator's signal when one is set, else what the worker last reported, else `running`;
    /// `stale` when silent for longer than a lease.
    pub(crate) state: WorkerState,
    /// What the worker last reported of itself.
    #[schema(value_type = WorkerState)]
    reported_state: String,
    /// The operator's signal (`quiet` or `terminate`), if any.
    signal: Option<String>,
    stale: bool,
    /// How many jobs it held at its last heartbeat.
    active_jobs: usize,
    /// Their ids.
    pub(crate) current_jobs: Vec<String>,
    #[schema(format = DateTime)]
    last_heartbeat_at: Option<String>,
}

impl WorkerView {
    /// Keeps only the jobs `keep` says (a request acting as a tenant sees only its own tenant's).
    pub(crate) fn keep_jobs(&mut self, keep: impl Fn(&str) -> bool) {
        self.current_jobs.retain(|j| keep(j));
        self.active_jobs = self.current_jobs.len();
    }
}

/// A worker record as the API shows it. `state` is the operator's signal when one is set, else what the
/// worker last reported, else `running`; `stale` when the worker has been silent for longer than
/// `stale_after_ms` (the default lease: its jobs' leases have lapsed by then).
pub(crate) fn worker_view(id: &str, rec: &ojs_core::Fields, now_ms: i64, stale_after_ms: u64) -> WorkerView {
    let last_seen = rec.get("last_seen").and_then(|v| v.parse::<i64>().ok());
    let stale = last_seen.is_none_or(|t| now_ms - t > stale_after_ms as i64);
    let reported = rec.get("state").map(String::as_str).unwrap_or("running");
    let signal = rec.get("signal").map(String::as_str).filter(|s| !s.is_empty());
    let state = if stale {
        WorkerState::Stale
    } else {
        WorkerState::parse(signal.unwrap_or(reported))
    };
    let jobs: Vec<String> = rec
        .get("jobs")
        .map(|j| j.split(' ').filter(|s| !s.is_empty()).map(str::to_owned).collect())
        .unwrap_or_default();
    WorkerView {
        id: id.to_string(),
        worker_id: id.to_string(),
        state,
        reported_state: reported.to_string(),
        signal: signal.map(str::to_owned),
        stale,
        active_jobs: jobs.len(),
        current_jobs: jobs,
        last_heartbeat_at: last_seen.map(clock::format_ms),
    }
}
