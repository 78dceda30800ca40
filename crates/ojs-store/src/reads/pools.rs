//! Worker pools (written by pool-set-1.lua and pool-delete-1.lua), on shard 0.

use crate::store::{Fields, Result, Store};

impl Store {
    /// One pool's hash (`def`, `created_at`, `updated_at`), None when there is none: one HGETALL.
    pub async fn pool_get(&self, name: &str) -> Result<Option<Fields>> {
        self.hash(self.keys().pool(name)).await
    }

    /// The first `limit` pools in name order with the number of pools: (total, (name, hash)…), in two
    /// round trips.
    pub async fn pool_list(&self, limit: u64) -> Result<(u64, Vec<(String, Fields)>)> {
        let (total, names) = self.page(&self.keys().pools(), 0, limit, false).await?;
        let maps = self.hashes(names.iter().map(|n| self.keys().pool(n))).await?;
        // A pool deleted between the two reads is left out.
        let pools = names.into_iter().zip(maps).filter(|(_, m)| !m.is_empty()).collect();
        Ok((total, pools))
    }
}
