//! The typed twin of `lua/workflow-cancel-1.lua`: a running workflow and its unfinished jobs are
//! cancelled. See the script's header.

use super::args::WorkflowCancelArgs;

use super::{transition, Transition};
use crate::reply::Reply;
use crate::store::{Result, Store};

impl Store {
    /// The script's arguments, in the order of its header.
    fn workflow_cancel_args(&self, id: &str, mode: &str) -> Vec<String> {
        WorkflowCancelArgs {
            prefix: self.keys().prefix().into(),
            workflow_id: id.into(),
            retention_ms: self.cfg.retention_ms.to_string(),
            mode: mode.into(),
        }
        .into_vec()
    }

    /// One script call: the (Redis time, jobs cancelled, done) of `cancel` or `step`. A caller that
    /// stops before done leaves the rest to the promote timer.
    pub async fn workflow_cancel_call(&self, id: &str, mode: &str) -> Result<Transition<(i64, u64, bool)>> {
        let args = self.workflow_cancel_args(id, mode);
        let items = self
            .run(&self.scripts.workflow_cancel, &[self.keys().workflow(id)], args)
            .await?;
        transition(&Reply::new(self.scripts.workflow_cancel.name, &items), |r| {
            Ok((r.i64(1)?, r.i64(2)?.max(0) as u64, r.flag(3)?))
        })
    }

    /// Cancels a running workflow and its unfinished jobs (lua/workflow-cancel-1.lua; at most 500 jobs
    /// per script call, called until all are): Redis time and how many jobs were cancelled;
    /// `WrongState` when the workflow already ended.
    pub async fn cancel_workflow(&self, id: &str) -> Result<Transition<(i64, u64)>> {
        let (now, mut cancelled, mut done) = match self.workflow_cancel_call(id, "cancel").await? {
            Transition::Done(d) => d,
            Transition::NotFound => return Ok(Transition::NotFound),
            Transition::WrongState(s) => return Ok(Transition::WrongState(s)),
            Transition::LeaseLost(s) => return Ok(Transition::LeaseLost(s)),
        };
        while !done {
            match self.workflow_cancel_call(id, "step").await? {
                Transition::Done((_, n, d)) => {
                    cancelled += n;
                    done = d;
                }
                _ => break,
            }
        }
        Ok(Transition::Done((now, cancelled)))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_workflow_cancel_is_written_in_the_order_the_header_declares() {
        let args = super::super::test_store().workflow_cancel_args("w", "cancel");
        assert_eq!(args, ["ojs:{t}:", "w", "86400000", "cancel"]);
    }
}
