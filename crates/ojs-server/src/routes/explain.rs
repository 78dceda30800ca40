//! "Why is this job waiting?": `GET /jobs/{id}/explain` (ours, beyond the OJS spec) says what holds a
//! job back and until when. The rules are not restated here: `lua/job-explain-1.lua` answers with the
//! Lua functions FETCH decides with (`lua/includes/gates.lua`, `tenant.lua`, and the verdict on a popped job, `verdict.lua`), in one
//! read-only call; this module only puts the answer into words and times.

use axum::extract::State;
use axum::response::Response;
use ojs_core::explain::{Gate, GateKind, JobExplanation};
use ojs_core::{clock, OjsError};
use ojs_core::{JobId, JobState};
use ojs_store::{ExplainGate, Explained};

use crate::error::ApiResult;
use crate::respond::{ok, JobPath};
use crate::schemas::{OjsErrorBody, OJS_MEDIA_TYPE};
use crate::state::AppState;
use crate::tenant::ActingTenant;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(explain))
}

/// One gate of job-explain's answer, in words and times; `others`: how many holders were left out of
/// `g.holders` as other tenants' (`seen_holders`).
fn gate(g: &ExplainGate, queue: &str, others: Option<u64>) -> Result<Gate, OjsError> {
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
        GateKind::TenantConcurrency => format!(
            "tenant {:?} runs at most {limit} job(s) of queue {queue} at once and {current} are active; \
                 it leaves the fair share until a slot frees, when one ends{}",
            x("tenant").unwrap_or_default(),
            at_latest(&until)
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
            "key {key} holds its floor of {} slot(s) and may only borrow idle ones of {}'s \
                 {limit}; {current} are held or owed to keys below their floors ({} owed); it looks again \
                 when a slot comes back, at the latest at {when}",
            x("floor").unwrap_or_default(),
            match x("tenant") {
                Some(t) => format!("tenant {t:?}'s concurrency in queue {queue}"),
                None => format!("queue {queue}"),
            },
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
    let on_limit = x("on_limit");
    let detail = match on_limit.as_deref() {
        Some("drop") => format!("{detail}; its on_limit is drop: FETCH discards it when it meets the limit"),
        Some(_) => {
            format!("{detail}; its on_limit is reschedule: FETCH schedules it for {when} when it meets the limit")
        }
        None => detail,
    };
    let fair = kind == GateKind::FairShare;
    Ok(Gate {
        gate: kind,
        detail,
        until,
        until_ms: g.until_ms,
        ahead: g.ahead,
        key: g.key.clone(),
        limit: g.limit,
        current: g.current,
        holders: (!g.holders.is_empty()).then(|| g.holders.clone()),
        other_holders: others,
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
        on_limit,
    })
}

/// ", at the latest at <t>" when a holder's lease deadline is known.
fn at_latest(until: &Option<String>) -> String {
    until
        .as_ref()
        .map(|t| format!(", at the latest at {t} (its lease deadline)"))
        .unwrap_or_default()
}

/// job-explain's answer, in words and times; `others` as [`gate`]'s, per gate (empty: none left out).
fn explanation(id: JobId, e: &Explained, others: &[u64]) -> Result<JobExplanation, OjsError> {
    let job = &e.job;
    let state: JobState = job.state.ok_or_else(|| {
        OjsError::new(
            ojs_core::ErrorCode::Internal,
            format!("job {id}: its record has no known state"),
        )
    })?;
    let queue = job.queue.clone().unwrap_or_default();
    let gates = e
        .gates
        .iter()
        .enumerate()
        .map(|(i, g)| gate(g, &queue, others.get(i).copied()))
        .collect::<Result<Vec<_>, _>>()?;
    let waiting = JobExplanation::waits_in(state);
    let runnable_at_ms = (waiting && gates.iter().all(Gate::timed))
        .then(|| gates.iter().filter_map(|g| g.until_ms).fold(e.now_ms, i64::max));
    let running_since = (state == JobState::Active)
        .then(|| job.started_at.map(clock::format_ms))
        .flatten();
    let detail = match state.as_str() {
        "active" => format!(
            "not waiting: running since {} on worker {}, its lease until {}",
            running_since.clone().unwrap_or_default(),
            job.worker_id
                .clone()
                .filter(|w| !w.is_empty())
                .unwrap_or_else(|| "(unnamed)".into()),
            job.lease_until.map(clock::format_ms).unwrap_or_default()
        ),
        s if !waiting => {
            let at = job.ended_at(state).map(clock::format_ms);
            format!(
                "not waiting: it ended {s}{}",
                at.map(|t| format!(" at {t}")).unwrap_or_default()
            )
        }
        _ if gates.is_empty() => format!("nothing holds it back: the next FETCH of queue {queue} claims it"),
        _ => gates.iter().map(|g| g.detail.as_str()).collect::<Vec<_>>().join("; "),
    };
    Ok(JobExplanation {
        job_id: id,
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

#[utoipa::path(
    get,
    path = "/ojs/v1/jobs/{id}/explain",
    tag = "jobs",
    summary = "Why a job is waiting: what holds it back and until when (ours, beyond the OJS spec)",
    params(("id" = String, Path)),
    responses((status = 200, description = "OK", body = JobExplanation, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such job, or (for a request acting as a tenant) another tenant's (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn explain(State(st): State<AppState>, tenant: ActingTenant, JobPath(job): JobPath) -> ApiResult<Response> {
    let id = job.as_str();
    match st.shards.on_id(id, |s| async move { s.explain_job(id).await }).await? {
        Some(mut e) if tenant.sees(&e.job) => {
            // A request acting as the job's tenant is told of that tenant's FETCH, which claims from the
            // tenant's own jobs only: no fair share holds them (the black-box review of issue 38).
            if tenant.name().is_some() {
                e.gates.retain(|g| g.name != "fair_share");
            }
            let others = seen_holders(&st, &tenant, &mut e).await?;
            Ok(ok(explanation(job.clone(), &e, &others)?))
        }
        _ => Err(OjsError::not_found("job", id).into()),
    }
}

/// For a request acting as a tenant, keeps in each gate's holders only the tenant's own jobs and
/// answers, per gate, how many were left out (other tenants' jobs are counted, never named). One read
/// of the holders' tenants (at most 100 a gate); nothing for a request acting as no tenant.
async fn seen_holders(st: &AppState, tenant: &ActingTenant, e: &mut Explained) -> ApiResult<Vec<u64>> {
    if tenant.name().is_none() {
        return Ok(Vec::new());
    }
    let ids: Vec<String> = e.gates.iter().flat_map(|g| g.holders.iter().cloned()).collect();
    let own = tenant.seen_ids(st, &ids).await?;
    Ok(e.gates
        .iter_mut()
        .map(|g| {
            let all = g.holders.len();
            g.holders.retain(|h| own.contains(h));
            (all - g.holders.len()) as u64
        })
        .collect())
}
