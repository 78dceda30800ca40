//! The typed twin of `lua/cron-set-1.lua`: a cron entry is registered or updated. See the script's
//! header.

use super::args::CronSetArgs;

use crate::reply::Reply;
use crate::store::{Result, Store};

/// A registered or updated cron entry's bookkeeping.
#[derive(Debug, Clone)]
pub struct CronSaved {
    pub created: bool,
    pub created_at: i64,
    pub last_run_at: Option<i64>,
    pub run_count: u64,
}

impl Store {
    /// The script's arguments, in the order of its header.
    fn cron_set_args(&self, name: &str, def: &str, next_run_at: Option<i64>, tenant: Option<&str>) -> Vec<String> {
        CronSetArgs {
            prefix: self.keys().prefix().into(),
            name: name.into(),
            def: def.into(),
            next_run_at: next_run_at.map(|n| n.to_string()).unwrap_or_default(),
            tenant: tenant.unwrap_or("").into(),
        }
        .into_vec()
    }

    /// Registers or updates a cron entry; `next_run_at` None keeps it registered but idle (disabled).
    /// `tenant` (the registering request's) owns it from now on; None when the entry exists and is not
    /// that tenant's (nothing is written: a tenant replaces only its own entries).
    pub async fn cron_set(
        &self,
        name: &str,
        def: &str,
        next_run_at: Option<i64>,
        tenant: Option<&str>,
    ) -> Result<Option<CronSaved>> {
        let args = self.cron_set_args(name, def, next_run_at, tenant);
        let items = self
            .run(&self.scripts.cron_set, &[self.keys().cron(name)], args)
            .await?;
        let r = Reply::new(self.scripts.cron_set.name, &items);
        match r.tag()? {
            "ok" => {}
            "taken" => return Ok(None),
            _ => return Err(r.unknown_tag()),
        }
        Ok(Some(CronSaved {
            created: r.flag(1)?,
            created_at: r.i64(2)?,
            // '' when the entry never fired.
            last_run_at: r.str(3)?.parse().ok(),
            run_count: r.i64(4)?.max(0) as u64,
        }))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_cron_entry_is_written_in_the_order_the_header_declares() {
        let s = super::super::test_store();
        assert_eq!(
            s.cron_set_args("c", "{}", Some(1_000), Some("acme")),
            ["ojs:{t}:", "c", "{}", "1000", "acme"]
        );
        assert_eq!(s.cron_set_args("c", "{}", None, None)[3..], ["", ""]);
    }
}
