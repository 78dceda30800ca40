//! The typed twin of `lua/dead-retry-1.lua`: a dead-lettered job gets a new life (back to available
//! with fresh attempts). See the script's header.

use super::ArgWriter;

use crate::reply::tag;
use crate::store::{Result, Store};

/// The script's arguments, as its header names them (checked by build.rs).
const ARGV: &[&str] = &["P", "id"];

impl Store {
    /// The script's arguments, in the order of its header.
    fn dead_retry_args(&self, id: &str) -> Vec<String> {
        let mut args = Vec::with_capacity(ARGV.len());
        ArgWriter::new(ARGV, &mut args)
            .arg("P", self.keys.prefix())
            .arg("id", id)
            .done();
        args
    }

    pub async fn dead_retry(&self, id: &str) -> Result<bool> {
        let args = self.dead_retry_args(id);
        let items = self.run(&self.scripts.dead_retry, &[self.keys.dead()], args).await?;
        Ok(tag(&items) == "ok")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_arguments_are_written_in_the_order_the_header_declares() {
        // The ArgWriter's checks run here (debug build): a value written under the wrong name panics.
        let args = super::super::test_store().dead_retry_args("j");
        assert_eq!(args, ["ojs:{t}:", "j"]);
    }
}
