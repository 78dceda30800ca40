//! The typed twin of `lua/cron-delete-1.lua`: a cron entry is removed. See the script's header.

use super::args::CronDeleteArgs;

use crate::reply::Reply;
use crate::store::{Fields, Result, Store};

impl Store {
    /// The script's arguments, in the order of its header.
    fn cron_delete_args(&self, name: &str, tenant: Option<&str>) -> Vec<String> {
        CronDeleteArgs {
            prefix: self.keys().prefix().into(),
            name: name.into(),
            tenant: tenant.unwrap_or("").into(),
        }
        .into_vec()
    }

    /// Removes a cron entry; returns it as it was, or None when there was none. A request acting as
    /// `tenant` removes only an entry of its own (another is None, and stays).
    pub async fn cron_delete(&self, name: &str, tenant: Option<&str>) -> Result<Option<Fields>> {
        let args = self.cron_delete_args(name, tenant);
        let items = self
            .run(&self.scripts.cron_delete, &[self.keys().cron(name)], args)
            .await?;
        super::removed(&Reply::new(self.scripts.cron_delete.name, &items))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_cron_removal_is_written_in_the_order_the_header_declares() {
        let args = super::super::test_store().cron_delete_args("c", Some("acme"));
        assert_eq!(args, ["ojs:{t}:", "c", "acme"]);
    }
}
