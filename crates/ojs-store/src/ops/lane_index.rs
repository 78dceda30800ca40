//! The typed twin of `lua/lane-index-2.lua`: a lane an older build parked is indexed in its key's parked
//! lanes while it is still parked. See the script's header.

use super::args::LaneIndexArgs;

use crate::reply::val_i64;
use crate::store::{Result, Store};

impl Store {
    /// The script's arguments, in the order of its header.
    fn lane_index_args(&self, queue: &str, key: &str) -> Vec<String> {
        LaneIndexArgs {
            prefix: self.keys().prefix().into(),
            queue: queue.into(),
            key: key.into(),
        }
        .into_vec()
    }

    /// Indexes the lane of `key` in `queue` in the key's parked lanes if it is parked now; whether it
    /// was added.
    pub(crate) async fn lane_index(&self, queue: &str, key: &str) -> Result<bool> {
        let args = self.lane_index_args(queue, key);
        let keys = [self.keys().queue_parked(queue), self.keys().rl_parked(key)];
        let v = self.run(&self.scripts.lane_index, &keys, args).await?;
        Ok(v.get(1).map(val_i64) == Some(1))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_arguments_are_written_in_the_order_the_header_declares() {
        let args = super::super::test_store().lane_index_args("q", "k");
        assert_eq!(args, ["ojs:{t}:", "q", "k"]);
    }
}
