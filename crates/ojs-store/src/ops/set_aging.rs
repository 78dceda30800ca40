//! The typed twin of `lua/set-aging-2.lua`: a queue's priority aging is set or turned off, and its
//! waiting jobs re-scored. See the script's header.

use super::ArgWriter;

use crate::reply::{at, val_i64};
use crate::store::{Result, Store};

/// The script's arguments, as its header names them (checked by build.rs).
const ARGV: &[&str] = &["P", "queue", "aging_s"];

impl Store {
    /// The script's arguments, in the order of its header.
    fn set_aging_args(&self, queue: &str, interval_s: Option<u64>) -> Vec<String> {
        let mut args = Vec::with_capacity(ARGV.len());
        ArgWriter::new(ARGV, &mut args)
            .arg("P", self.keys.prefix())
            .arg("queue", queue)
            .arg("aging_s", interval_s.map(|s| s.to_string()).unwrap_or_default())
            .done();
        args
    }

    /// Priority aging for a queue: `Some(interval_s)` turns it on, `None` off. Every waiting job of the
    /// queue is re-scored under the new setting in the same script; returns how many were.
    pub async fn set_aging(&self, queue: &str, interval_s: Option<u64>) -> Result<u64> {
        let args = self.set_aging_args(queue, interval_s);
        let items = self
            .run(
                &self.scripts.set_aging,
                &[self.keys.queue_conf(queue), self.keys.queue_ready(queue)],
                args,
            )
            .await?;
        Ok(val_i64(at(&items, 1)).max(0) as u64)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_aging_setting_is_written_in_the_order_the_header_declares() {
        let s = super::super::test_store();
        // The ArgWriter's checks run here (debug build): a value written under the wrong name panics.
        assert_eq!(s.set_aging_args("q", Some(60)), ["ojs:{t}:", "q", "60"]);
        assert_eq!(s.set_aging_args("q", None), ["ojs:{t}:", "q", ""]);
    }
}
