//! The typed twin of `lua/workflow-get-1.lua`: one workflow with its first jobs and its callbacks. See
//! the script's header.

use super::args::WorkflowGetArgs;

use crate::reply::{flat_pairs, val_str, Reply};
use crate::store::{Fields, Result, Store};

/// A workflow as lua/workflow-get-1.lua read it.
#[derive(Debug)]
pub struct WorkflowRecord {
    /// Redis time of the read.
    pub now_ms: i64,
    /// The workflow hash (lua/includes/workflow.lua).
    pub fields: Fields,
    /// Its first steps or jobs, in order.
    pub jobs: Vec<WorkflowMember>,
    /// (callback name, job) for each callback a batch declared.
    pub callbacks: Vec<(String, WorkflowMember)>,
}

/// A workflow's job, as much as a workflow view shows of it (`None` where the job's hash is gone).
#[derive(Debug)]
pub struct WorkflowMember {
    pub id: String,
    pub job_type: Option<String>,
    pub state: Option<String>,
    pub queue: Option<String>,
}

impl Store {
    /// The script's arguments, in the order of its header.
    fn workflow_get_args(&self, id: &str, limit: u64) -> Vec<String> {
        WorkflowGetArgs {
            prefix: self.keys().prefix().into(),
            workflow_id: id.into(),
            limit: limit.max(1).to_string(),
        }
        .into_vec()
    }

    /// One workflow with the first `limit` of its jobs and its callbacks (lua/workflow-get-1.lua).
    pub async fn workflow(&self, id: &str, limit: u64) -> Result<Option<WorkflowRecord>> {
        let args = self.workflow_get_args(id, limit);
        let items = self
            .run(&self.scripts.workflow_get, &[self.keys().workflow(id)], args)
            .await?;
        let r = Reply::new(self.scripts.workflow_get.name, &items);
        match r.tag()? {
            "ok" => {}
            "not_found" => return Ok(None),
            _ => return Err(r.unknown_tag()),
        }
        let member = |c: &[String]| WorkflowMember {
            id: c[0].clone(),
            job_type: Some(c[1].clone()).filter(|s| !s.is_empty()),
            state: Some(c[2].clone()).filter(|s| !s.is_empty()),
            queue: Some(c[3].clone()).filter(|s| !s.is_empty()),
        };
        let strings = |i| r.array(i).map(|a| a.iter().map(val_str).collect::<Vec<_>>());
        let (jobs, callbacks) = (strings(3)?, strings(4)?);
        Ok(Some(WorkflowRecord {
            now_ms: r.i64(1)?,
            fields: flat_pairs(r.array(2)?),
            jobs: jobs.chunks_exact(4).map(member).collect(),
            callbacks: callbacks
                .chunks_exact(5)
                .map(|c| (c[0].clone(), member(&c[1..])))
                .collect(),
        }))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_workflow_read_is_written_in_the_order_the_header_declares() {
        let s = super::super::test_store();
        assert_eq!(s.workflow_get_args("w", 50), ["ojs:{t}:", "w", "50"]);
        assert_eq!(s.workflow_get_args("w", 0), ["ojs:{t}:", "w", "1"]);
    }
}
