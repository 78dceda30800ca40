//! The typed twin of `lua/set-aging-2.lua`: a queue's priority aging is set or turned off, and its
//! waiting jobs re-scored in bounded steps. See the script's header.

use super::args::SetAgingArgs;

use crate::reply::Reply;
use crate::store::{Result, Store};

impl Store {
    /// The script's arguments, in the order of its header.
    fn set_aging_args(&self, queue: &str, mode: &str, interval_s: Option<u64>) -> Vec<String> {
        SetAgingArgs {
            prefix: self.keys().prefix().into(),
            queue: queue.into(),
            mode: mode.into(),
            aging_s: interval_s.map(|s| s.to_string()).unwrap_or_default(),
        }
        .into_vec()
    }

    /// One script call: `set` (with the interval) or `step`; returns (jobs re-scored, done). A caller
    /// that stops before done leaves the rest to the promote timer.
    pub async fn set_aging_call(&self, queue: &str, mode: &str, interval_s: Option<u64>) -> Result<(u64, bool)> {
        let args = self.set_aging_args(queue, mode, interval_s);
        let items = self
            .run(
                &self.scripts.set_aging,
                &[self.keys().queue_conf(queue), self.keys().queue_ready(queue)],
                args,
            )
            .await?;
        let r = Reply::new(self.scripts.set_aging.name, &items);
        Ok((r.i64(1)?.max(0) as u64, r.flag(2)?))
    }

    /// Priority aging for a queue: `Some(interval_s)` turns it on, `None` off. Every waiting job of the
    /// queue is re-scored under the new setting, at most 1,000 per script call (FETCH does not serve the
    /// queue meanwhile); returns once all are, with how many were.
    pub async fn set_aging(&self, queue: &str, interval_s: Option<u64>) -> Result<u64> {
        let (mut total, mut done) = self.set_aging_call(queue, "set", interval_s).await?;
        let mut calls = 1u64;
        while !done {
            let (n, d) = self.set_aging_call(queue, "step", None).await?;
            total += n;
            done = d;
            calls += 1;
            if calls % 100 == 0 {
                tracing::info!(
                    queue,
                    rescored = total,
                    "priority aging change: re-scoring the queue's waiting jobs"
                );
            }
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_aging_setting_is_written_in_the_order_the_header_declares() {
        let s = super::super::test_store();
        assert_eq!(s.set_aging_args("q", "set", Some(60)), ["ojs:{t}:", "q", "set", "60"]);
        assert_eq!(s.set_aging_args("q", "step", None), ["ojs:{t}:", "q", "step", ""]);
    }
}
