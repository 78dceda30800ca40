//! The typed twin of `lua/pool-delete-1.lua`: a worker pool is removed. See the script's header.

use super::args::PoolDeleteArgs;

use crate::reply::Reply;
use crate::store::{Fields, Result, Store};

impl Store {
    /// The script's arguments, in the order of its header.
    fn pool_delete_args(&self, name: &str) -> Vec<String> {
        PoolDeleteArgs {
            prefix: self.keys().prefix().into(),
            name: name.into(),
        }
        .into_vec()
    }

    /// Removes a pool (call it on shard 0); returns its hash as it was, or None when there was none.
    pub async fn pool_delete(&self, name: &str) -> Result<Option<Fields>> {
        let args = self.pool_delete_args(name);
        let items = self
            .run(&self.scripts.pool_delete, &[self.keys().pool(name)], args)
            .await?;
        super::removed(&Reply::new(self.scripts.pool_delete.name, &items))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_pool_removal_is_written_in_the_order_the_header_declares() {
        let args = super::super::test_store().pool_delete_args("p");
        assert_eq!(args, ["ojs:{t}:", "p"]);
    }
}
