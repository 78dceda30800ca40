//! The typed twin of `lua/pick-1.lua`: the weighted round-robin of a FETCH whose queues live on several
//! shards, kept on shard 0 so that it is exact across shards. See the script's header.

use super::args::{PickArgs, PickQueueRecord};

use crate::keys::Keys;
use crate::reply::Reply;
use crate::store::{Result, Store};

/// One queue of a cross-shard weighted pick.
#[derive(Debug, Clone)]
pub struct PickQueue {
    pub name: String,
    pub weight: u32,
    /// Eligible for the picks being refunded.
    pub was_live: bool,
    /// Eligible for the new picks.
    pub live: bool,
}

impl Store {
    fn pick_args(&self, want: u32, queues: &[PickQueue], refunds: &[usize]) -> Vec<String> {
        let mut args = Vec::with_capacity(PickArgs::LEN + PickQueueRecord::LEN * queues.len() + refunds.len());
        PickArgs {
            prefix: Keys::new(&self.cfg.namespace).prefix().into(),
            want: want.to_string(),
            nqueues: queues.len().to_string(),
        }
        .push(&mut args);
        for q in queues {
            PickQueueRecord {
                name: q.name.clone(),
                weight: q.weight.to_string(),
                was_live: if q.was_live { "1" } else { "0" }.into(),
                live: if q.live { "1" } else { "0" }.into(),
            }
            .push(&mut args);
        }
        args.extend(refunds.iter().map(|r| (r + 1).to_string()));
        args
    }

    /// Picks the queue of each of the next `want` claims (0-based indexes into `queues`, in claim order)
    /// from the round-robin state of this list of queues and weights on shard 0, after undoing the
    /// rounds of `refunds` (indexes of earlier picks' queues that claimed nothing, under `was_live`).
    pub async fn pick_weighted(&self, want: u32, queues: &[PickQueue], refunds: &[usize]) -> Result<Vec<usize>> {
        let pairs: Vec<(String, u32)> = queues.iter().map(|q| (q.name.clone(), q.weight)).collect();
        let state = Keys::new(&self.cfg.namespace).wrr(&super::fetch::wrr_key(&pairs));
        let args = self.pick_args(want, queues, refunds);
        let items = self.run(&self.scripts.pick, &[state], args).await?;
        let r = Reply::new(self.scripts.pick.name, &items);
        // 1-based indexes into `queues`.
        (1..items.len())
            .map(|i| match usize::try_from(r.i64(i)? - 1) {
                Ok(q) if q < queues.len() => Ok(q),
                _ => Err(r.error(i, "a queue's 1-based index")),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::PickQueue;

    #[test]
    fn a_pick_is_written_in_the_order_the_header_declares_and_always_on_shard_0() {
        let store = super::super::test_store().shard(1);
        let q = |n: &str, live| PickQueue {
            name: n.into(),
            weight: 2,
            was_live: true,
            live,
        };
        let args = store.pick_args(3, &[q("a", true), q("b", false)], &[1]);
        assert_eq!(
            args,
            ["ojs:{t}:", "3", "2", "a", "2", "1", "1", "b", "2", "1", "0", "2"]
        );
    }
}
