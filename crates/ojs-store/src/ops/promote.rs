//! The typed twin of `lua/promote-1.lua`: due scheduled and retryable jobs move to ready. See the
//! script's header.

use super::args::PromoteArgs;

use crate::reply::Reply;
use crate::store::{Result, Store};

impl Store {
    /// The script's arguments, in the order of its header.
    fn promote_args(&self, limit: u32) -> Vec<String> {
        PromoteArgs {
            prefix: self.keys().prefix().into(),
            limit: limit.to_string(),
            retention_ms: self.cfg.retention_ms.to_string(),
        }
        .into_vec()
    }

    /// Moves due scheduled/retryable jobs to ready. Returns (moved, how many ms until the next due job
    /// or lane wake, by Redis' clock).
    pub async fn promote(&self, limit: u32) -> Result<(u64, Option<i64>)> {
        let args = self.promote_args(limit);
        let items = self
            .run(&self.scripts.promote, &[self.keys().scheduled()], args)
            .await?;
        let r = Reply::new(self.scripts.promote.name, &items);
        let (next, now) = (r.i64(2)?, r.i64(3)?);
        Ok((r.i64(1)?.max(0) as u64, (next >= 0).then_some(next - now)))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_promote_is_written_in_the_order_the_header_declares() {
        let args = super::super::test_store().promote_args(100);
        assert_eq!(args, ["ojs:{t}:", "100", "86400000"]);
    }
}
