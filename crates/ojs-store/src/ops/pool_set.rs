//! The typed twin of `lua/pool-set-1.lua`: a worker pool is created or its definition replaced. See
//! the script's header.

use super::args::PoolSetArgs;

use crate::reply::Reply;
use crate::store::{Result, Store};

/// What writing a pool did.
#[derive(Debug, Clone)]
pub enum PoolSaved {
    /// Written: `created` for a new pool; times in ms of Redis' clock.
    Written {
        created: bool,
        created_at: i64,
        updated_at: i64,
    },
    /// A new pool refused: the deployment already holds this many (nothing was written).
    Full(u64),
}

impl Store {
    /// The script's arguments, in the order of its header.
    fn pool_set_args(&self, name: &str, def: &str, max_pools: u64) -> Vec<String> {
        PoolSetArgs {
            prefix: self.keys().prefix().into(),
            name: name.into(),
            def: def.into(),
            max_pools: max_pools.to_string(),
        }
        .into_vec()
    }

    /// Creates a pool, or replaces the definition of the one with that name (keeping its created_at).
    /// Call it on shard 0, where pools live.
    pub async fn pool_set(&self, name: &str, def: &str, max_pools: u64) -> Result<PoolSaved> {
        let args = self.pool_set_args(name, def, max_pools);
        let items = self
            .run(&self.scripts.pool_set, &[self.keys().pool(name)], args)
            .await?;
        let r = Reply::new(self.scripts.pool_set.name, &items);
        match r.tag()? {
            "ok" => Ok(PoolSaved::Written {
                created: r.flag(1)?,
                created_at: r.i64(2)?,
                updated_at: r.i64(3)?,
            }),
            "full" => Ok(PoolSaved::Full(r.i64(1)?.max(0) as u64)),
            _ => Err(r.unknown_tag()),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_pool_is_written_in_the_order_the_header_declares() {
        let s = super::super::test_store();
        assert_eq!(s.pool_set_args("p", "{}", 7), ["ojs:{t}:", "p", "{}", "7"]);
    }
}
