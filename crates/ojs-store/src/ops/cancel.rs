//! The typed twin of `lua/cancel-1.lua`: a job that has not ended is cancelled. See the script's
//! header.

use super::ArgWriter;

use super::{transition, Transition};
use crate::reply::{at, val_i64, val_str};
use crate::store::{Result, Store};

/// The script's arguments, as its header names them (checked by build.rs).
const ARGV: &[&str] = &["P", "id", "retention_ms"];

impl Store {
    /// The script's arguments, in the order of its header.
    fn cancel_args(&self, id: &str) -> Vec<String> {
        let mut args = Vec::with_capacity(ARGV.len());
        ArgWriter::new(ARGV, &mut args)
            .arg("P", self.keys.prefix())
            .arg("id", id)
            .arg("retention_ms", self.cfg.retention_ms.to_string())
            .done();
        args
    }

    pub async fn cancel(&self, id: &str) -> Result<Transition<(i64, String)>> {
        let args = self.cancel_args(id);
        let items = self.run(&self.scripts.cancel, &[self.keys.job(id)], args).await?;
        Ok(transition(&items, |i| (val_i64(at(i, 1)), val_str(at(i, 2)))))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_cancel_is_written_in_the_order_the_header_declares() {
        // The ArgWriter's checks run here (debug build): a value written under the wrong name panics.
        let args = super::super::test_store().cancel_args("j");
        assert_eq!(args, ["ojs:{t}:", "j", "86400000"]);
    }
}
