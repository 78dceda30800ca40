//! The typed twin of `lua/queue-pause-1.lua`: a queue is paused or resumed. See the script's header.

use super::args::QueuePauseArgs;

use crate::store::{Result, Store};

impl Store {
    /// The script's arguments, in the order of its header.
    fn queue_pause_args(&self, queue: &str, paused: bool) -> Vec<String> {
        QueuePauseArgs {
            prefix: self.keys().prefix().into(),
            queue: queue.into(),
            paused: if paused { "1" } else { "0" }.into(),
        }
        .into_vec()
    }

    /// Pauses (or resumes) a queue: FETCH checks P..'paused' inside its script, so a paused queue is
    /// skipped atomically with every claim.
    pub async fn set_paused(&self, queue: &str, paused: bool) -> Result<()> {
        let args = self.queue_pause_args(queue, paused);
        self.run(&self.scripts.queue_pause, &[self.keys().paused()], args)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_arguments_are_written_in_the_order_the_header_declares() {
        let args = super::super::test_store().queue_pause_args("q", true);
        assert_eq!(args, ["ojs:{t}:", "q", "1"]);
    }
}
