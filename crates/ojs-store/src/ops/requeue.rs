//! The typed twin of `lua/requeue-1.lua`: jobs whose lease expired are taken back. See the script's
//! header.

use super::args::RequeueArgs;

use super::rand_unit;
use crate::reply::Reply;
use crate::store::{Result, Store};

impl Store {
    /// The script's arguments, in the order of its header.
    fn requeue_args(&self, limit: u32, jitter_u: f64) -> Vec<String> {
        RequeueArgs {
            prefix: self.keys().prefix().into(),
            limit: limit.to_string(),
            jitter_u: format!("{jitter_u:.6}"),
            retention_ms: self.cfg.retention_ms.to_string(),
        }
        .into_vec()
    }

    /// Takes back jobs whose lease expired. Returns (requeued, failed by timeout or exhaustion).
    pub async fn requeue_expired(&self, limit: u32) -> Result<(u64, u64)> {
        let args = self.requeue_args(limit, rand_unit());
        let items = self.run(&self.scripts.requeue, &[self.keys().active()], args).await?;
        let r = Reply::new(self.scripts.requeue.name, &items);
        Ok((r.i64(1)?.max(0) as u64, r.i64(2)?.max(0) as u64))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_requeue_is_written_in_the_order_the_header_declares() {
        let args = super::super::test_store().requeue_args(50, 0.5);
        assert_eq!(args, ["ojs:{t}:", "50", "0.500000", "86400000"]);
    }
}
