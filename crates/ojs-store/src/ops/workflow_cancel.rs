//! The typed twin of `lua/workflow-cancel-1.lua`: a running workflow and its unfinished jobs are
//! cancelled. See the script's header.

use super::ArgWriter;

use super::{transition, Transition};
use crate::reply::{at, val_i64};
use crate::store::{Result, Store};

/// The script's arguments, as its header names them (checked by build.rs).
const ARGV: &[&str] = &["P", "W", "retention_ms"];

impl Store {
    /// The script's arguments, in the order of its header.
    fn workflow_cancel_args(&self, id: &str) -> Vec<String> {
        let mut args = Vec::with_capacity(ARGV.len());
        ArgWriter::new(ARGV, &mut args)
            .arg("P", self.keys.prefix())
            .arg("W", id)
            .arg("retention_ms", self.cfg.retention_ms.to_string())
            .done();
        args
    }

    /// Cancels a running workflow and its unfinished jobs (lua/workflow-cancel-1.lua): Redis time and
    /// how many jobs were cancelled; `WrongState` when the workflow already ended.
    pub async fn cancel_workflow(&self, id: &str) -> Result<Transition<(i64, u64)>> {
        let args = self.workflow_cancel_args(id);
        let items = self
            .run(&self.scripts.workflow_cancel, &[self.keys.workflow(id)], args)
            .await?;
        Ok(transition(&items, |i| {
            (val_i64(at(i, 1)), val_i64(at(i, 2)).max(0) as u64)
        }))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_workflow_cancel_is_written_in_the_order_the_header_declares() {
        // The ArgWriter's checks run here (debug build): a value written under the wrong name panics.
        let args = super::super::test_store().workflow_cancel_args("w");
        assert_eq!(args, ["ojs:{t}:", "w", "86400000"]);
    }
}
