//! The typed twin of `lua/queue-conf-1.lua`: a group of a queue's settings (its rate limits, its
//! backpressure bound) is replaced in one script. See the script's header.

use ojs_core::ratelimit::Window;

use super::args::QueueConfArgs;

use crate::reads::queues::{Backpressure, BACKPRESSURE_FIELDS};
use crate::store::{Result, Store};

impl Store {
    /// The script's arguments, in the order of its header.
    fn queue_conf_args(&self, queue: &str, group: &[&str], values: &[(&str, String)]) -> Vec<String> {
        let mut args = Vec::with_capacity(QueueConfArgs::LEN + group.len() + 2 * values.len());
        QueueConfArgs {
            prefix: self.keys().prefix().into(),
            queue: queue.into(),
            n: group.len().to_string(),
        }
        .push(&mut args);
        args.extend(group.iter().map(|f| f.to_string()));
        for (f, v) in values {
            args.push(f.to_string());
            args.push(v.clone());
        }
        args
    }

    /// Replaces a group of a queue's settings in one script: every field of `group` is removed, then
    /// `values` are written (empty = the group is cleared).
    pub(crate) async fn set_queue_conf(&self, queue: &str, group: &[&str], values: &[(&str, String)]) -> Result<()> {
        let args = self.queue_conf_args(queue, group, values);
        self.run(&self.scripts.queue_conf, &[self.keys().queue_conf(queue)], args)
            .await?;
        Ok(())
    }

    /// Queue-level limits (`None` clears them), replaced in one script. Checked by FETCH before it
    /// takes from the queue.
    pub async fn set_queue_rate_limit(&self, queue: &str, limits: Option<(Option<u64>, Option<Window>)>) -> Result<()> {
        let (conc, rate) = limits.unwrap_or((None, None));
        let mut values = Vec::new();
        if let Some(c) = conc {
            values.push(("rl_concurrency", c.to_string()));
        }
        if let Some(w) = rate {
            values.push(("rl_rate_limit", w.limit.to_string()));
            values.push(("rl_rate_period", w.period_ms.to_string()));
        }
        self.set_queue_conf(queue, &["rl_concurrency", "rl_rate_limit", "rl_rate_period"], &values)
            .await
    }

    /// A queue's ended-job retention (`None`: the default), read by every ending (lua/includes/ended.lua).
    pub async fn set_ended_retention(
        &self,
        queue: &str,
        r: Option<&crate::reads::queues::EndedRetention>,
    ) -> Result<()> {
        let values = r
            .map(|r| {
                let mut v = vec![("ke_last", r.keep_last.to_string())];
                if let Some(ms) = r.keep_for_ms {
                    v.push(("ke_for", ms.to_string()));
                }
                v
            })
            .unwrap_or_default();
        self.set_queue_conf(queue, &crate::reads::queues::ENDED_FIELDS, &values)
            .await
    }

    /// A queue's depth bound (backpressure; `None` makes it unbounded), checked by the enqueue script.
    pub async fn set_backpressure(&self, queue: &str, bp: Option<&Backpressure>) -> Result<()> {
        let values = bp
            .map(|b| {
                vec![
                    ("bp_max_depth", b.max_depth.to_string()),
                    ("bp_strategy", b.strategy.clone()),
                    ("bp_warn", b.warning_threshold.to_string()),
                ]
            })
            .unwrap_or_default();
        self.set_queue_conf(queue, &BACKPRESSURE_FIELDS, &values).await
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_settings_group_is_written_in_the_order_the_header_declares() {
        let s = super::super::test_store();
        let args = s.queue_conf_args("q", &["a", "b"], &[("a", "1".to_string())]);
        assert_eq!(args, ["ojs:{t}:", "q", "2", "a", "b", "a", "1"]);
        assert_eq!(s.queue_conf_args("q", &["a"], &[]), ["ojs:{t}:", "q", "1", "a"]);
    }
}
