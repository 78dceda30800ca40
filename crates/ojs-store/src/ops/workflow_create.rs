//! The typed twin of `lua/workflow-create-1.lua`: a workflow and all of its jobs are created, all or
//! nothing. See the script's header.

use ojs_core::job::NewJob;
use ojs_core::workflow::NewWorkflow;

use super::args::{JobRecord, WorkflowCreateArgs};
use super::enqueue::{enqueue_outcome, push_jobs};

use super::enqueue::EnqueueOutcome;
use crate::reply::Reply;
use crate::store::{Result, Store};

impl Store {
    /// The script's arguments, in the order of its header: the fixed ones, the jobs' JOB records, then
    /// one callback name per job after the workflow's first m.
    fn workflow_create_args(&self, wf: &NewWorkflow, jobs: &[NewJob]) -> Vec<Vec<u8>> {
        let mut args = Vec::with_capacity(WorkflowCreateArgs::LEN + jobs.len() * JobRecord::LEN + wf.callbacks.len());
        WorkflowCreateArgs {
            prefix: self.keys().prefix().into(),
            n: jobs.len().to_string(),
            id: wf.id.clone(),
            kind: wf.kind.as_str().into(),
            name: wf.name.clone(),
            m: wf.members.to_string(),
        }
        .push(&mut args);
        push_jobs(jobs, &mut args);
        args.extend(wf.callbacks.iter().map(|c| c.as_bytes().to_vec()));
        args
    }

    /// Creates a workflow and all of its jobs, all or nothing: the first step (chain) or every job
    /// (group, batch) is made ready; later steps and callbacks wait `pending`. A duplicate is a job id
    /// or the workflow id.
    pub async fn create_workflow(&self, wf: &NewWorkflow) -> Result<EnqueueOutcome> {
        let script = &self.scripts.workflow_create;
        let items = self
            .create_call(script, &wf.jobs, |jobs| self.workflow_create_args(wf, jobs))
            .await?;
        enqueue_outcome(&Reply::new(script.name, &items))
    }
}

#[cfg(test)]
mod tests {
    use ojs_core::workflow::{NewWorkflow, WorkflowKind};

    #[test]
    fn a_workflow_is_written_in_the_order_the_header_declares() {
        let s = super::super::test_store();
        let wf = NewWorkflow {
            id: "w".into(),
            id_generated: false,
            kind: WorkflowKind::Batch,
            name: "n".into(),
            members: 0,
            jobs: Vec::new(),
            callbacks: vec!["on_complete"],
        };
        let args: Vec<String> = s
            .workflow_create_args(&wf, &[])
            .iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        // No jobs here: the callback names follow the fixed arguments (and the JOB records, enqueue.rs).
        assert_eq!(args, ["ojs:{t}:", "0", "w", "batch", "n", "0", "on_complete"]);
    }
}
