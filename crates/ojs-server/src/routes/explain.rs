//! "Why is this job waiting?": `GET /jobs/{id}/explain` (ours, beyond the OJS spec) says what holds a
//! job back and until when. The rules are not restated here: `lua/job-explain-1.lua` answers with the
//! Lua functions FETCH decides with (`lua/includes/gates.lua`, `ratelimit.lua`, `tenant.lua`), in one
//! read-only call; this module only puts the answer into words and times.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use ojs_core::{clock, OjsError};
use ojs_store::{ExplainGate, Explained};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ApiResult;
use crate::respond::{ok, JobPath};
use crate::schemas::{OjsErrorBody, OJS_MEDIA_TYPE};
use crate::state::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(explain))
}

/// What a job waits for and until when (`GET /jobs/{id}/explain`), computed by the Lua functions FETCH
/// decides with, at one instant of Redis' clock.
#[derive(Serialize, ToSchema)]
pub struct JobExplanation {
    pub job_id: String,
    #[schema(value_type = crate::schemas::JobState)]
    pub state: String,
    /// The job has not started and has not ended: scheduled, retryable, available or pending.
    pub waiting: bool,
    /// The answer in one sentence.
    pub detail: String,
    /// Every rule that stands between the job and a worker now, in the order FETCH applies them
    /// (empty when nothing holds it back, and for a job that is not waiting). A key's limits are
    /// checked in turn and the first one reached is shown, as FETCH stops there: a limit behind it
    /// shows once that one lifts.
    pub gates: Vec<Gate>,
    /// The earliest time the gates allow it to start (RFC 3339): the latest `until` of its gates, or
    /// now when none holds it back; null when a gate's end is not known (a pause, a workflow's
    /// parents, the fair share's turn, a concurrency slot nobody holds) or the job is not waiting.
    /// Jobs before it (`order`) are not counted: any FETCH may take them at once.
    #[schema(format = DateTime)]
    pub runnable_at: Option<String>,
    pub runnable_at_ms: Option<i64>,
    /// An active job: when its current attempt started (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    pub running_since: Option<String>,
    /// Redis' time when the answer was computed (RFC 3339).
    #[schema(format = DateTime)]
    pub computed_at: String,
}

/// The rules that can hold a job back (ours; `lua/job-explain-1.lua` names them).
#[derive(Serialize, Deserialize, ToSchema, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "snake_case")]
pub enum GateKind {
    /// Scheduled or retryable: it becomes available at its run time.
    Scheduled,
    /// A workflow member waiting for its parents (a chain's earlier steps, a batch's jobs).
    Pending,
    /// Its queue is paused.
    Paused,
    /// Its queue's waiting jobs are being re-scored for a new aging setting.
    Rescoring,
    /// The queue-level concurrency limit is reached.
    QueueConcurrency,
    /// The queue-level rate window is full.
    QueueRate,
    /// Other tenants of the queue have their turn first.
    FairShare,
    /// Its rate-limit key is blocked by a worker's `rate_limit_until`.
    Dynamic,
    /// Its key's concurrency slots are all held.
    Concurrency,
    /// Its key is past its floor and the queue's free slots are owed to keys below theirs (burstable
    /// concurrency).
    Pool,
    /// Its key's sliding window is full.
    Rate,
    /// Its key's throttle allows the next start later.
    Throttle,
    /// The limit reached is an operator's override of the key.
    Override,
    /// Jobs before it in its ready set (priority, then FIFO) or rate-limit lane.
    Order,
    /// Its `expires_at` passed: FETCH discards it instead of running it.
    Expired,
    /// Its workflow was cancelled: FETCH cancels it instead of running it.
    WorkflowCancelled,
    /// A newer run made it pointless (`options.dedup`, `options.root_job`): FETCH completes it unrun.
    Superseded,
}

/// One rule holding the job back.
#[derive(Serialize, ToSchema)]
pub struct Gate {
    pub gate: GateKind,
    /// What holds it and what lifts it, in one sentence.
    pub detail: String,
    /// When the gate may open (RFC 3339), where that is known: a concurrency slot's holder's lease
    /// deadline (an ACK frees it sooner), the window's next opening, the throttle's next start, a
    /// dynamic block's or an override's end, a scheduled run time.
    #[schema(format = DateTime)]
    pub until: Option<String>,
    /// `until` in ms since the epoch.
    pub until_ms: Option<i64>,
    /// Eligible jobs before this one at the gate: its rank in its ready set (queue gates, `order`) or
    /// in its rate-limit lane (key gates); tenants before its tenant (`fair_share`); steps or jobs still
    /// to end (`pending`).
    pub ahead: Option<i64>,
    /// The rate-limit key (key gates).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub key: Option<String>,
    /// The limit reached (a batch callback: the batch's jobs).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub limit: Option<i64>,
    /// Its use now: active slots, starts in the window (a batch callback: jobs that ended).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub current: Option<i64>,
    /// The jobs holding the slots, earliest lease deadline first (at most 100), or the chain step it
    /// waits for.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub holders: Option<Vec<String>>,
    /// `fair_share`: the job's tenant (`""` for the jobs without one).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub tenant: Option<String>,
    /// `fair_share`: the tenant's pass (stride scheduling: 1/weight per claim).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub pass: Option<f64>,
    /// `fair_share`: the lowest pass of the queue's tenants, whose turn it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub lowest_pass: Option<f64>,
    /// `fair_share`: how many tenants share the queue now.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub tenants: Option<i64>,
    /// `fair_share`: the tenant's weight.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub weight: Option<f64>,
    /// `pending`: its workflow.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub workflow_id: Option<String>,
    /// `pool`: the key's floor, which it already holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub floor: Option<i64>,
    /// `pool`: the queue's slots owed to keys below their floors (`current` counts them with the
    /// active jobs).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub owed: Option<i64>,
    /// `override`: the override's fields as stored (`concurrency`, `rate_limit`, `rate_period`,
    /// `throttle_limit`, `throttle_period`; periods in ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub override_fields: Option<BTreeMap<String, String>>,
    /// `superseded`: `dedup` or `root_job`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub reason: Option<String>,
}

impl Gate {
    fn of(g: &ExplainGate, queue: &str) -> Result<Self, OjsError> {
        let kind: GateKind = serde_json::from_value(serde_json::Value::String(g.name.clone())).map_err(|_| {
            OjsError::new(
                ojs_core::ErrorCode::Internal,
                format!("job-explain named an unknown gate {:?}", g.name),
            )
        })?;
        let x = |k: &str| g.extra.get(k).cloned();
        let num = |k: &str| g.extra.get(k).and_then(|v| v.parse::<f64>().ok());
        let until = g.until_ms.map(clock::format_ms);
        let when = until.clone().unwrap_or_default();
        let key = g.key.clone().unwrap_or_default();
        let (limit, current, ahead) = (g.limit.unwrap_or(0), g.current.unwrap_or(0), g.ahead.unwrap_or(0));
        let detail = match kind {
            GateKind::Scheduled if x("state").as_deref() == Some("retryable") => {
                format!("it waits for its retry at {when}; the promote timer makes it available then")
            }
            GateKind::Scheduled => format!("it is scheduled for {when}; the promote timer makes it available then"),
            GateKind::Pending => match x("step") {
                Some(step) => format!(
                    "step {step} of chain {}: it is released when the {ahead} step(s) before it complete, \
                     the next being job {}",
                    x("workflow_id").unwrap_or_default(),
                    g.holders.first().map(String::as_str).unwrap_or("?")
                ),
                None => format!(
                    "callback {} of batch {}: it fires when all {limit} jobs of the batch have ended \
                     ({current} so far)",
                    x("callback").unwrap_or_default(),
                    x("workflow_id").unwrap_or_default()
                ),
            },
            GateKind::Paused => {
                format!("queue {queue} is paused: FETCH skips it until POST /ojs/v1/queues/{queue}/resume")
            }
            GateKind::Rescoring => format!(
                "queue {queue}'s waiting jobs are being re-scored for a new aging setting; it is served \
                 again when the last one is"
            ),
            GateKind::QueueConcurrency => format!(
                "queue {queue} runs at most {limit} job(s) at once and {current} are active; a slot frees \
                 when one ends{}",
                at_latest(&until)
            ),
            GateKind::QueueRate => format!(
                "queue {queue} starts at most {limit} job(s) per window and {current} started in it; the \
                 next start is allowed at {when}"
            ),
            GateKind::FairShare => format!(
                "tenant {:?} waits for its turn in queue {queue}'s fair share: {ahead} tenant(s) come first \
                 (pass {} against the lowest, {})",
                x("tenant").unwrap_or_default(),
                x("pass").unwrap_or_default(),
                x("lowest_pass").unwrap_or_default()
            ),
            GateKind::Dynamic => format!("key {key} is blocked by a worker's rate_limit_until until {when}"),
            GateKind::Concurrency if current == 0 => format!(
                "key {key} allows {limit} active job(s) and nobody holds a slot: it waits for an override \
                 or a newer policy of the key"
            ),
            GateKind::Concurrency => format!(
                "key {key} allows {limit} active job(s) and {current} hold a slot; one frees when a holder \
                 ends{}",
                at_latest(&until)
            ),
            GateKind::Pool => format!(
                "key {key} holds its floor of {} slot(s) and may only borrow idle ones of queue {queue}'s \
                 {limit}; {current} are held or owed to keys below their floors ({} owed); it looks again \
                 when a slot comes back, at the latest at {when}",
                x("floor").unwrap_or_default(),
                x("owed").unwrap_or_default()
            ),
            GateKind::Rate => format!(
                "key {key} allows {limit} start(s) per window and {current} are in it; the next start is \
                 allowed at {when}"
            ),
            GateKind::Throttle => format!("key {key} spaces its starts evenly; the next is allowed at {when}"),
            GateKind::Override => format!(
                "the limit reached is an operator's override of key {key}, {}; DELETE /ojs/v1/rate-limits/{key} \
                 lifts it",
                if until.is_some() {
                    format!("which expires at {when}")
                } else {
                    "with no expiry".into()
                }
            ),
            GateKind::Order if g.key.is_some() => {
                format!("{ahead} job(s) of key {key} come before it in its rate-limit lane")
            }
            GateKind::Order => format!("{ahead} job(s) come before it in queue {queue} (priority, then FIFO)"),
            GateKind::Expired => "its expires_at passed: FETCH discards it instead of running it".into(),
            GateKind::WorkflowCancelled => "its workflow was cancelled: FETCH cancels it instead of running it".into(),
            GateKind::Superseded => format!(
                "a newer run made it pointless ({}): FETCH completes it unrun",
                x("reason").unwrap_or_default()
            ),
        };
        let fair = kind == GateKind::FairShare;
        Ok(Self {
            gate: kind,
            detail,
            until,
            until_ms: g.until_ms,
            ahead: g.ahead,
            key: g.key.clone(),
            limit: g.limit,
            current: g.current,
            holders: (!g.holders.is_empty()).then(|| g.holders.clone()),
            tenant: x("tenant"),
            pass: num("pass"),
            lowest_pass: num("lowest_pass"),
            tenants: num("tenants").filter(|_| fair).map(|n| n as i64),
            weight: num("weight"),
            workflow_id: x("workflow_id").filter(|w| !w.is_empty()),
            floor: num("floor").map(|n| n as i64),
            owed: num("owed").map(|n| n as i64),
            override_fields: (kind == GateKind::Override).then(|| g.extra.clone().into_iter().collect()),
            reason: x("reason"),
        })
    }

    /// Whether its end is known, or it does not bar the job (jobs before it may be taken at once).
    fn timed(&self) -> bool {
        self.until_ms.is_some() || self.gate == GateKind::Order
    }
}

/// ", at the latest at <t>" when a holder's lease deadline is known.
fn at_latest(until: &Option<String>) -> String {
    until
        .as_ref()
        .map(|t| format!(", at the latest at {t} (its lease deadline)"))
        .unwrap_or_default()
}

impl JobExplanation {
    fn of(id: &str, e: &Explained) -> Result<Self, OjsError> {
        let field = |k: &str| e.job.get(k).cloned().unwrap_or_default();
        let ms = |k: &str| e.job.get(k).and_then(|v| v.parse::<i64>().ok());
        let state = field("state");
        let queue = field("queue");
        let gates = e
            .gates
            .iter()
            .map(|g| Gate::of(g, &queue))
            .collect::<Result<Vec<_>, _>>()?;
        let waiting = matches!(state.as_str(), "scheduled" | "retryable" | "available" | "pending");
        let runnable_at_ms = (waiting && gates.iter().all(Gate::timed))
            .then(|| gates.iter().filter_map(|g| g.until_ms).fold(e.now_ms, i64::max));
        let running_since = (state == "active")
            .then(|| ms("started_at").map(clock::format_ms))
            .flatten();
        let detail = match state.as_str() {
            "active" => format!(
                "not waiting: running since {} on worker {}, its lease until {}",
                running_since.clone().unwrap_or_default(),
                Some(field("worker_id"))
                    .filter(|w| !w.is_empty())
                    .unwrap_or_else(|| "(unnamed)".into()),
                ms("lease_until").map(clock::format_ms).unwrap_or_default()
            ),
            s if !waiting => {
                let at = ms(&format!("{s}_at")).map(clock::format_ms);
                format!(
                    "not waiting: it ended {s}{}",
                    at.map(|t| format!(" at {t}")).unwrap_or_default()
                )
            }
            _ if gates.is_empty() => format!("nothing holds it back: the next FETCH of queue {queue} claims it"),
            _ => gates.iter().map(|g| g.detail.as_str()).collect::<Vec<_>>().join("; "),
        };
        Ok(Self {
            job_id: id.to_string(),
            state,
            waiting,
            detail,
            gates,
            runnable_at: runnable_at_ms.map(clock::format_ms),
            runnable_at_ms,
            running_since,
            computed_at: clock::format_ms(e.now_ms),
        })
    }
}

#[utoipa::path(
    get,
    path = "/ojs/v1/jobs/{id}/explain",
    tag = "jobs",
    summary = "Why a job is waiting: what holds it back and until when (ours, beyond the OJS spec)",
    params(("id" = String, Path)),
    responses((status = 200, description = "OK", body = JobExplanation, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such job (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn explain(State(st): State<AppState>, headers: HeaderMap, JobPath(id): JobPath) -> ApiResult<Response> {
    let id = id.as_str();
    let tenant = crate::tenant::header_tenant(&headers)?;
    match st.shards.on_id(id, |s| async move { s.explain_job(id).await }).await? {
        Some(e) if crate::tenant::visible(&e.job, tenant.as_deref()) => Ok(ok(JobExplanation::of(id, &e)?)),
        _ => Err(OjsError::not_found("job", id).into()),
    }
}
