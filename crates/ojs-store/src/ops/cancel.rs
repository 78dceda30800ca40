//! The typed twin of `lua/cancel-1.lua`: a job that has not ended is cancelled. See the script's
//! header.

use super::args::CancelArgs;

use super::{transition, Transition};
use crate::reply::Reply;
use crate::store::{Result, Store};

impl Store {
    /// The script's arguments, in the order of its header.
    fn cancel_args(&self, id: &str) -> Vec<String> {
        CancelArgs {
            prefix: self.keys().prefix().into(),
            id: id.into(),
            retention_ms: self.cfg.retention_ms.to_string(),
        }
        .into_vec()
    }

    pub async fn cancel(&self, id: &str) -> Result<Transition<(i64, String)>> {
        let args = self.cancel_args(id);
        let items = self.run(&self.scripts.cancel, &[self.keys().job(id)], args).await?;
        transition(&Reply::new(self.scripts.cancel.name, &items), |r| {
            Ok((r.i64(1)?, r.str(2)?))
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_cancel_is_written_in_the_order_the_header_declares() {
        let args = super::super::test_store().cancel_args("j");
        assert_eq!(args, ["ojs:{t}:", "j", "86400000"]);
    }
}
