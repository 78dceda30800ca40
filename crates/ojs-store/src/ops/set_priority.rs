//! The typed twin of `lua/set-priority-1.lua`: the priority of an available or scheduled job changes.
//! See the script's header.

use super::args::SetPriorityArgs;

use super::{transition, Transition};
use crate::reply::Reply;
use crate::store::{Result, Store};

impl Store {
    /// The script's arguments, in the order of its header.
    fn set_priority_args(&self, id: &str, priority: i64, rank: i64) -> Vec<String> {
        SetPriorityArgs {
            prefix: self.keys().prefix().into(),
            id: id.into(),
            priority: priority.to_string(),
            rank: rank.to_string(),
        }
        .into_vec()
    }

    /// Changes the priority of an available or scheduled job: (previous priority, queue).
    pub async fn set_priority(&self, id: &str, priority: i64, rank: i64) -> Result<Transition<(i64, String)>> {
        let args = self.set_priority_args(id, priority, rank);
        let items = self
            .run(&self.scripts.set_priority, &[self.keys().job(id)], args)
            .await?;
        transition(&Reply::new(self.scripts.set_priority.name, &items), |r| {
            Ok((r.i64(2)?, r.str(4)?))
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_priority_change_is_written_in_the_order_the_header_declares() {
        let args = super::super::test_store().set_priority_args("j", -3, 7);
        assert_eq!(args, ["ojs:{t}:", "j", "-3", "7"]);
    }
}
