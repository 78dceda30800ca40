//! A workflow's operations that more than one route needs: storing a new one over the shards (`POST
//! /workflows`, and a seed-form chain in `POST /jobs`) and its view (created, read or listed).

use ojs_core::workflow::NewWorkflow;
use ojs_core::{clock, ErrorCode, OjsError};
use ojs_store::{EnqueueOutcome, Fields, WorkflowMember};
use serde_json::json;

use crate::error::ApiResult;
use crate::schemas::{JobStateName, WorkflowJob, WorkflowMetadata, WorkflowView};
use crate::state::AppState;

/// Most member jobs a workflow view lists (the counters always cover all of them).
pub(crate) const VIEW_JOBS: u64 = 1_000;

fn member(m: WorkflowMember) -> WorkflowJob {
    WorkflowJob {
        id: m.id,
        job_type: m.job_type,
        state: m.state.map(JobStateName),
        queue: m.queue,
    }
}

/// THE workflow view, from the workflow hash (lua/includes/workflow.lua) and the members read with it.
pub fn view(id: &str, f: &Fields, jobs: Vec<WorkflowMember>, callbacks: Vec<(String, WorkflowMember)>) -> WorkflowView {
    let int = |k: &str| f.get(k).and_then(|v| v.parse::<i64>().ok());
    let count = |k: &str| int(k).unwrap_or(0).max(0) as u64;
    let time = |k: &str| int(k).map(clock::format_ms);
    let kind = f.get("type").cloned().unwrap_or_default();
    let (total, completed, failed) = (count("total"), count("completed"), count("failed"));
    let chain = kind == "chain";
    WorkflowView {
        id: id.to_string(),
        name: f.get("name").filter(|n| !n.is_empty()).cloned(),
        state: f.get("state").cloned().unwrap_or_default(),
        steps_total: chain.then_some(total),
        steps_completed: chain.then_some(completed),
        jobs_total: (!chain).then_some(total),
        jobs_completed: (!chain).then_some(completed),
        jobs_failed: (!chain).then_some(failed),
        failed_step_index: int("failed_step").map(|i| i.max(0) as u64),
        failed_callback: f.get("failed_callback").cloned(),
        metadata: WorkflowMetadata {
            created_at: time("created_at").unwrap_or_default(),
            started_at: time("started_at"),
            completed_at: time("completed_at"),
            job_count: total,
            completed_count: completed,
            failed_count: failed,
        },
        jobs: jobs.into_iter().map(member).collect(),
        callbacks: callbacks.into_iter().map(|(n, m)| (n, member(m))).collect(),
        kind,
    }
}

/// The view of a workflow just created, from what was sent and the states the script gave each job.
fn created_view(wf: &NewWorkflow, now_ms: i64, states: &[String]) -> WorkflowView {
    let mut f = Fields::default();
    for (k, v) in [
        ("type", wf.kind.as_str().to_string()),
        ("name", wf.name.clone()),
        ("state", "running".to_string()),
        ("total", wf.members.to_string()),
        ("created_at", now_ms.to_string()),
    ] {
        f.insert(k.to_string(), v);
    }
    let mut members = wf.jobs.iter().zip(states).map(|(j, s)| WorkflowMember {
        id: j.id.clone(),
        job_type: Some(j.job_type.clone()),
        state: Some(s.clone()),
        queue: Some(j.queue.clone()),
    });
    let jobs: Vec<_> = members.by_ref().take(wf.members).take(VIEW_JOBS as usize).collect();
    let callbacks = members
        .skip(wf.members.saturating_sub(jobs.len()))
        .zip(&wf.callbacks)
        .map(|(m, n)| (n.to_string(), m))
        .collect();
    view(&wf.id, &f, jobs, callbacks)
}

/// Stores a validated workflow; its view, or the OJS error (duplicate id, full queue).
pub async fn store_workflow(st: &AppState, wf: &mut NewWorkflow) -> ApiResult<(i64, Vec<String>, WorkflowView)> {
    // Every job's args against its type's schema (the registry), as an enqueue's are.
    st.shards.first().check_args_now(&wf.jobs).await?;
    // `held` keeps the claims on client-chosen ids until the workflow is written.
    let (shard, held) = st.shards.place_workflow(wf).await?;
    let wf = &*wf;
    let outcome = st.shards.get(shard).create_workflow(wf).await?;
    held.release().await;
    match outcome {
        EnqueueOutcome::Created(out) => {
            for j in &wf.jobs {
                crate::metrics::job_event("enqueued", &j.queue, &j.job_type);
            }
            let v = created_view(wf, out.now_ms, &out.states);
            Ok((out.now_ms, out.states, v))
        }
        // Workflow jobs carry no unique policy (ojs_core::workflow refuses one), so none can conflict.
        EnqueueOutcome::Conflict { existing_id, .. } => Err(OjsError::new(
            ErrorCode::Duplicate,
            format!("a job of the workflow conflicts with job {existing_id}"),
        )
        .into()),
        EnqueueOutcome::Duplicate(id) => Err(OjsError::new(
            ErrorCode::Duplicate,
            format!("a job or workflow with id {id} already exists"),
        )
        .with_details(json!({ "id": id }))
        .into()),
        EnqueueOutcome::Full(p) => Err(OjsError::queue_full(&p.queue, p.depth, p.bound).into()),
    }
}
