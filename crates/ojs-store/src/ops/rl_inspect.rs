//! The typed twin of `lua/rl-inspect-1.lua`: a rate-limit key as FETCH sees it now, read with the same
//! Lua functions as FETCH. See the script's header.

use ojs_core::ratelimit::Window;

use super::args::RlInspectArgs;

use crate::reply::{flat_pairs, Reply};
use crate::store::{Fields, Result, Store};

/// A rate-limit key as FETCH sees it now (`lua/rl-inspect-1.lua`, which computes the limits with the
/// same Lua functions as FETCH).
#[derive(Debug, Default, Clone)]
pub struct RateLimitState {
    pub now_ms: i64,
    /// The key has been seen (a job used it, or an override was set).
    pub known: bool,
    /// The limits FETCH applies: the key's policy (its newest job's) with the override on top.
    pub concurrency: Option<u64>,
    /// The policy's floor in its queue's pool (burstable concurrency, ours).
    pub floor: Option<u64>,
    pub rate: Option<Window>,
    pub throttle: Option<Window>,
    /// The newest job's on_limit (each job keeps its own).
    pub on_limit: String,
    /// Units held by unexpired slot holders (their number when every job costs 1).
    pub active: u64,
    /// Units started in the current sliding window (starts when every job costs 1), and the oldest
    /// start in it.
    pub window_count: u64,
    pub window_oldest_ms: Option<i64>,
    /// When the throttle next allows a start (never before now).
    pub throttle_next_ms: Option<i64>,
    /// A dynamic block (`rate_limit_until`) still in force.
    pub dynamic_until_ms: Option<i64>,
    pub waiting: u64,
    pub override_fields: Fields,
    pub override_ttl_ms: i64,
    /// The current blocking episode: `blocked_since`, `strategy`, `until`.
    pub episode: Fields,
    /// `exceeded_<strategy>` counters.
    pub stats: Fields,
    /// For an adaptive key (ours): its policy's own limits and where adaptation has them now.
    pub adaptive: Option<AdaptiveState>,
}

/// An adaptive key's state (`lua/includes/rl_adaptive.lua`).
#[derive(Debug, Default, Clone)]
pub struct AdaptiveState {
    pub policy_concurrency: Option<u64>,
    pub policy_rate_limit: Option<u64>,
    pub increase_after: u64,
    /// The effective limits while below the policy's (absent at the policy).
    pub concurrency: Option<u64>,
    pub rate_limit: Option<u64>,
    /// Successes since the last move, and when the limits last went down.
    pub successes: u64,
    pub down_at_ms: Option<i64>,
}

/// The script's `adaptive` item: `{}`, or `{policy_concurrency, policy_rate_limit, increase_after, adapt}`.
fn adaptive_state(items: &[redis::Value]) -> Result<Option<AdaptiveState>> {
    if items.is_empty() {
        return Ok(None);
    }
    let a = Reply::new("rl-inspect (adaptive)", items);
    let num = |i: usize| a.str(i).map(|s| s.parse::<u64>().ok());
    let h = flat_pairs(a.array(3)?);
    let field = |k: &str| h.get(k).and_then(|v| v.parse::<u64>().ok());
    Ok(Some(AdaptiveState {
        policy_concurrency: num(0)?,
        policy_rate_limit: num(1)?,
        increase_after: num(2)?.unwrap_or(10),
        concurrency: field("concurrency"),
        rate_limit: field("rate_limit"),
        successes: field("ok").unwrap_or(0),
        down_at_ms: h.get("down_at").and_then(|v| v.parse::<i64>().ok()),
    }))
}

impl Store {
    /// The script's arguments, in the order of its header.
    fn rl_inspect_args(&self, key: &str) -> Vec<String> {
        RlInspectArgs {
            prefix: self.keys().prefix().into(),
            key: key.into(),
        }
        .into_vec()
    }

    /// A rate-limit key as FETCH sees it now, in one read-only script.
    pub async fn rate_limit_state(&self, key: &str) -> Result<RateLimitState> {
        let args = self.rl_inspect_args(key);
        let items = self
            .run(&self.scripts.rl_inspect, &[self.keys().rl_policy(key)], args)
            .await?;
        let r = Reply::new(self.scripts.rl_inspect.name, &items);
        let limits = Reply::new("rl-inspect (limits)", r.array(3)?);
        let state = Reply::new("rl-inspect (state)", r.array(4)?);
        // A limit is '' where absent; a state number -1 where there is nothing.
        let num = |i: usize| limits.str(i).map(|s| s.parse::<u64>().ok());
        let opt = |i: usize| state.i64(i).map(|n| Some(n).filter(|n| *n >= 0));
        let window = |l: usize, p: usize| -> Result<Option<Window>> {
            Ok(num(l)?
                .zip(num(p)?)
                .map(|(limit, period_ms)| Window { limit, period_ms }))
        };
        Ok(RateLimitState {
            now_ms: r.i64(1)?,
            known: r.flag(2)?,
            concurrency: num(0)?,
            floor: num(6)?,
            rate: window(1, 2)?,
            throttle: window(3, 4)?,
            on_limit: limits.str(5)?,
            active: state.i64(0)?.max(0) as u64,
            window_count: state.i64(1)?.max(0) as u64,
            window_oldest_ms: opt(2)?,
            throttle_next_ms: opt(3)?,
            dynamic_until_ms: opt(4)?,
            waiting: state.i64(5)?.max(0) as u64,
            override_ttl_ms: state.i64(6)?,
            override_fields: flat_pairs(r.array(5)?),
            episode: flat_pairs(r.array(6)?),
            stats: flat_pairs(r.array(7)?),
            adaptive: adaptive_state(r.array(8)?)?,
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_inspection_is_written_in_the_order_the_header_declares() {
        let args = super::super::test_store().rl_inspect_args("k");
        assert_eq!(args, ["ojs:{t}:", "k"]);
    }
}
