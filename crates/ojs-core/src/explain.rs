//! "Why is this job waiting?": the answer of `GET /ojs/v1/jobs/{id}/explain` (ours, beyond the OJS
//! spec), one definition for the server that writes it, the OpenAPI document that describes it and
//! `ojs-client`, which reads it. The server fills it from `lua/job-explain-1.lua`'s answer (the Lua
//! FETCH decides with); nothing here restates the rules.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::{JobId, JobState};

/// What a job waits for and until when (`GET /jobs/{id}/explain`), computed by the Lua functions FETCH
/// decides with, at one instant of Redis' clock.
#[derive(Serialize, Deserialize, ToSchema, Clone, Debug, PartialEq)]
pub struct JobExplanation {
    #[schema(value_type = String)]
    pub job_id: JobId,
    pub state: JobState,
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
    /// Its tenant's jobs of the queue fill the tenant's concurrency there (ours: the queue's tenancy
    /// setting).
    TenantConcurrency,
    /// Other tenants of the queue have their turn first.
    FairShare,
    /// Its rate-limit key is blocked by a worker's `rate_limit_until`.
    Dynamic,
    /// Its key's concurrency slots are all held.
    Concurrency,
    /// Its key is past its floor and its pool's free slots (the queue's, or its tenant's concurrency
    /// there) are owed to keys below theirs (burstable concurrency).
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
#[derive(Serialize, Deserialize, ToSchema, Clone, Debug, PartialEq)]
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
    /// For a request acting as a tenant: how many of the holders are other tenants' jobs (or gone),
    /// whose ids it is not shown (`holders` lists its own).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub other_holders: Option<u64>,
    /// `fair_share`, `tenant_concurrency`: the job's tenant (`""` for the jobs without one); `pool`: the
    /// tenant whose concurrency in the queue is the pool (absent: the queue's).
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
    /// A key gate of a job whose `on_limit` does not wait: what FETCH does with it when it meets the
    /// limit, `drop` (discards it: it never runs) or `reschedule` (schedules it for `until`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub on_limit: Option<String>,
}

impl Gate {
    /// Whether its end is known, or it does not bar the job (jobs before it may be taken at once).
    pub fn timed(&self) -> bool {
        (self.until_ms.is_some() && self.on_limit.as_deref() != Some("drop")) || self.gate == GateKind::Order
    }
}

impl JobExplanation {
    /// The states of a job that waits: it has not started and has not ended.
    pub fn waits_in(state: JobState) -> bool {
        matches!(
            state,
            JobState::Scheduled | JobState::Retryable | JobState::Available | JobState::Pending
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_explanation_reads_back_as_it_was_written() {
        let e = JobExplanation {
            job_id: JobId::parse("019a0000-0000-7000-8000-000000000001").expect("id"),
            state: JobState::Available,
            waiting: true,
            detail: "d".into(),
            gates: vec![Gate {
                gate: GateKind::Concurrency,
                detail: "g".into(),
                until: None,
                until_ms: None,
                ahead: Some(0),
                key: Some("k".into()),
                limit: Some(1),
                current: Some(1),
                holders: Some(vec!["h".into()]),
                other_holders: Some(2),
                tenant: None,
                pass: None,
                lowest_pass: None,
                tenants: None,
                weight: None,
                workflow_id: None,
                floor: None,
                owed: None,
                override_fields: None,
                reason: None,
                on_limit: Some("drop".into()),
            }],
            runnable_at: None,
            runnable_at_ms: None,
            running_since: None,
            computed_at: "2026-11-28T00:00:00.000Z".into(),
        };
        let json = serde_json::to_value(&e).expect("json");
        assert_eq!(json["state"], "available");
        assert_eq!(json["gates"][0]["gate"], "concurrency");
        assert_eq!(json["gates"][0]["other_holders"], 2);
        assert!(
            json["gates"][0].get("tenant").is_none(),
            "absent members are left out: {json}"
        );
        assert_eq!(serde_json::from_value::<JobExplanation>(json).expect("reads back"), e);
        assert!(!e.gates[0].timed());
    }
}
