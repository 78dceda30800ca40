//! The typed twins of `lua/checkpoint-save-2.lua`, `lua/checkpoint-delete-2.lua` and
//! `lua/checkpoint-read-2.lua` (ojs-durable-execution): a job's checkpoint saved, deleted, read. See
//! the scripts' headers and `lua/includes/checkpoint.lua`.

use ojs_core::checkpoint::Checkpoint;

use super::args::{CheckpointDeleteArgs, CheckpointReadArgs, CheckpointSaveArgs};
use super::{transition, ClaimRef, Transition};
use crate::reply::{decode_checkpoint, Reply};
use crate::store::{Result, Store};

/// A checkpoint to save: the state (JSON text, already checked and bounded by the caller) and what the
/// SDKs send beside it.
#[derive(Debug, Clone, Default)]
pub struct NewCheckpoint<'a> {
    pub state: &'a str,
    /// A JSON object as text.
    pub metadata: Option<&'a str>,
    pub step_index: Option<u64>,
}

/// A saved checkpoint: its sequence, when (ms), and the job's attempt then (0 before its first claim).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointSaved {
    pub sequence: i64,
    pub saved_at_ms: i64,
    pub attempt: i64,
}

/// A job's checkpoint as read: the job's state and attempt, and its checkpoint if it has one.
#[derive(Debug, Clone)]
pub struct CheckpointRead {
    pub job_state: String,
    pub attempt: i64,
    pub checkpoint: Option<Checkpoint>,
}

impl Store {
    fn checkpoint_keys(&self, id: &str) -> [String; 2] {
        [self.keys().job(id), self.keys().checkpoint(id)]
    }

    /// The save's arguments, in the order of its header.
    fn checkpoint_save_args(&self, id: &str, cp: &NewCheckpoint<'_>, claim: &ClaimRef) -> Vec<String> {
        let [lease, attempt, worker] = claim.args();
        CheckpointSaveArgs {
            prefix: self.keys().prefix().into(),
            id: id.into(),
            state: cp.state.into(),
            meta: cp.metadata.unwrap_or("").into(),
            step: cp.step_index.map(|s| s.to_string()).unwrap_or_default(),
            lease_id: lease,
            attempt,
            worker_id: worker,
            tenant: claim.tenant_arg(),
        }
        .into_vec()
    }

    /// Saves the checkpoint of job `id` (`lua/checkpoint-save-2.lua`). `WrongState` when the job has
    /// ended; `LeaseLost` for a claim the job no longer holds; `NotFound` for a job that does not exist
    /// or is another tenant's than the claim's.
    pub async fn save_checkpoint(
        &self,
        id: &str,
        cp: &NewCheckpoint<'_>,
        claim: &ClaimRef,
    ) -> Result<Transition<CheckpointSaved>> {
        let args = self.checkpoint_save_args(id, cp, claim);
        let items = self
            .run(&self.scripts.checkpoint_save, &self.checkpoint_keys(id), args)
            .await?;
        let r = Reply::new(self.scripts.checkpoint_save.name, &items);
        transition(&r, |r| {
            Ok(CheckpointSaved {
                sequence: r.i64(1)?,
                saved_at_ms: r.i64(2)?,
                attempt: r.i64(3)?,
            })
        })
    }

    /// Deletes the checkpoint of job `id` (`lua/checkpoint-delete-2.lua`): Done(whether there was one).
    pub async fn delete_checkpoint(&self, id: &str, claim: &ClaimRef) -> Result<Transition<bool>> {
        let [lease_id, attempt, worker_id] = claim.args();
        let args = CheckpointDeleteArgs {
            prefix: self.keys().prefix().into(),
            id: id.into(),
            lease_id,
            attempt,
            worker_id,
            tenant: claim.tenant_arg(),
        }
        .into_vec();
        let items = self
            .run(&self.scripts.checkpoint_delete, &self.checkpoint_keys(id), args)
            .await?;
        let r = Reply::new(self.scripts.checkpoint_delete.name, &items);
        transition(&r, |r| Ok(r.i64(1)? == 1))
    }

    /// The checkpoint of job `id` (`lua/checkpoint-read-2.lua`), for a request acting as `tenant`: None
    /// when the job does not exist or is another tenant's.
    pub async fn read_checkpoint(&self, id: &str, tenant: Option<&str>) -> Result<Option<CheckpointRead>> {
        let args = CheckpointReadArgs {
            prefix: self.keys().prefix().into(),
            id: id.into(),
            tenant: tenant.unwrap_or("").into(),
        }
        .into_vec();
        let items = self
            .run(&self.scripts.checkpoint_read, &self.checkpoint_keys(id), args)
            .await?;
        let r = Reply::new(self.scripts.checkpoint_read.name, &items);
        match r.tag()? {
            "not_found" => Ok(None),
            "ok" => Ok(Some(CheckpointRead {
                job_state: r.str(1)?,
                attempt: r.i64(2)?,
                checkpoint: items.get(3).and_then(decode_checkpoint),
            })),
            _ => Err(r.unknown_tag()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_save_is_written_in_the_order_the_header_declares() {
        let s = super::super::test_store();
        let claim = ClaimRef {
            attempt: Some(2),
            tenant: Some("acme".into()),
            ..ClaimRef::default()
        };
        let cp = NewCheckpoint {
            state: "{\"n\":1}",
            metadata: None,
            step_index: Some(3),
        };
        let args = s.checkpoint_save_args("j", &cp, &claim);
        assert_eq!(args.len(), CheckpointSaveArgs::LEN);
        assert_eq!(args, ["ojs:{t}:", "j", "{\"n\":1}", "", "3", "", "2", "", "acme"]);
    }
}
