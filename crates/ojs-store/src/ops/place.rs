//! The typed twin of `lua/place-1.lua`: where queues and rate-limit keys live in a deployment of several
//! shards. See the script's header. Always runs on shard 0, whichever shard's store calls it.

use super::args::{PlaceArgs, PlaceNameRecord};

use crate::keys::Keys;
use crate::reply::Reply;
use crate::store::{Result, Store};

/// What the directory answered: the deployment's number of shards, and each name's shard in order
/// (None: a queue `find` did not place because it was never used).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    pub shards: usize,
    pub at: Vec<Option<usize>>,
}

impl Store {
    /// The script's arguments, in the order of its header.
    fn place_args(&self, shards: usize, kind: &str, names: &[(&str, Option<usize>)]) -> Vec<String> {
        let mut args = Vec::with_capacity(PlaceArgs::LEN + PlaceNameRecord::LEN * names.len());
        PlaceArgs {
            prefix: Keys::new(&self.cfg.namespace).prefix().into(),
            shards: shards.to_string(),
            kind: kind.into(),
        }
        .push(&mut args);
        for (name, shard) in names {
            PlaceNameRecord {
                name: name.to_string(),
                shard: shard.map_or_else(|| "-1".to_string(), |s| s.to_string()),
            }
            .push(&mut args);
        }
        args
    }

    /// Places or binds names of `kind` (`queue`, `key`, `type`, or `find`; see the script's header) for a pod
    /// configured with `shards` shards.
    pub async fn place(&self, shards: usize, kind: &str, names: &[(&str, Option<usize>)]) -> Result<Placed> {
        let args = self.place_args(shards, kind, names);
        let directory = Keys::new(&self.cfg.namespace).placement();
        let items = self.run(&self.scripts.place, &[directory], args).await?;
        let r = Reply::new(self.scripts.place.name, &items);
        Ok(Placed {
            shards: r.i64(1)?.max(1) as usize,
            // -1: a queue `find` did not place.
            at: (2..items.len())
                .map(|i| r.i64(i).map(|s| usize::try_from(s).ok()))
                .collect::<Result<_>>()?,
        })
    }

    /// Places queues (each with the operator's pin, if any) for a pod configured with `shards` shards;
    /// a queue already placed keeps its shard. With no queues, it only reads (and raises) the count.
    pub async fn place_queues(&self, shards: usize, queues: &[(&str, Option<usize>)]) -> Result<Placed> {
        self.place(shards, "queue", queues).await
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_placement_is_written_in_the_order_the_header_declares_and_always_on_shard_0() {
        let store = super::super::test_store().shard(2);
        let args = store.place_args(3, "queue", &[("email", None), ("sms", Some(1))]);
        assert_eq!(args, ["ojs:{t}:", "3", "queue", "email", "-1", "sms", "1"]);
    }
}
