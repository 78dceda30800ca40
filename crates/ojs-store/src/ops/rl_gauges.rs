//! The typed twin of `lua/rl-gauges-1.lua`: the rate-limit keys' gauges for a metrics scrape. See the
//! script's header.

use super::args::RlGaugesArgs;

use crate::reply::{flat_pairs, Reply};
use crate::store::{Fields, Result, Store};

/// A rate-limit key's gauges for a metrics scrape (`lua/rl-gauges-1.lua`).
#[derive(Debug, Default, Clone)]
pub struct RateLimitGauges {
    pub key: String,
    pub active: u64,
    pub waiting: u64,
    /// `exceeded_<strategy>` counters.
    pub stats: Fields,
    /// The concurrency and window limits FETCH applies now (the policy's under adaptation and any
    /// override), and the policy's own.
    pub concurrency: Option<u64>,
    pub rate_limit: Option<u64>,
    pub policy_concurrency: Option<u64>,
    pub policy_rate_limit: Option<u64>,
}

impl Store {
    /// The script's arguments, in the order of its header.
    fn rl_gauges_args(&self, limit: usize) -> Vec<String> {
        RlGaugesArgs {
            prefix: self.keys().prefix().into(),
            limit: limit.max(1).to_string(),
        }
        .into_vec()
    }

    /// The first `limit` rate-limit keys (lexicographic) with their active and waiting jobs and
    /// exceeded counters, in one script call.
    pub async fn rate_limit_gauges(&self, limit: usize) -> Result<Vec<RateLimitGauges>> {
        let args = self.rl_gauges_args(limit);
        let items = self
            .run(&self.scripts.rl_gauges, &[self.keys().rl_keys()], args)
            .await?;
        let r = Reply::new(self.scripts.rl_gauges.name, &items);
        // (key, active, waiting, stats, limits) per key, from item 2 on.
        (2..items.len())
            .step_by(5)
            .map(|i| {
                let limits = Reply::new("rl-gauges (limits)", r.array(i + 4)?);
                let num = |j: usize| limits.str(j).map(|s| s.parse::<u64>().ok());
                Ok(RateLimitGauges {
                    key: r.str(i)?,
                    active: r.i64(i + 1)?.max(0) as u64,
                    waiting: r.i64(i + 2)?.max(0) as u64,
                    stats: flat_pairs(r.array(i + 3)?),
                    concurrency: num(0)?,
                    rate_limit: num(1)?,
                    policy_concurrency: num(2)?,
                    policy_rate_limit: num(3)?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_gauges_read_is_written_in_the_order_the_header_declares() {
        let s = super::super::test_store();
        assert_eq!(s.rl_gauges_args(100), ["ojs:{t}:", "100"]);
        assert_eq!(s.rl_gauges_args(0), ["ojs:{t}:", "1"]);
    }
}
