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
    fn cron_set_args(&self, name: &str, def: &str, next_run_at: Option<i64>) -> Vec<String> {
        CronSetArgs {
            prefix: self.keys.prefix().into(),
            name: name.into(),
            def: def.into(),
            next_run_at: next_run_at.map(|n| n.to_string()).unwrap_or_default(),
        }
        .into_vec()
    }

    /// Registers or updates a cron entry; `next_run_at` None keeps it registered but idle (disabled).
    pub async fn cron_set(&self, name: &str, def: &str, next_run_at: Option<i64>) -> Result<CronSaved> {
        let args = self.cron_set_args(name, def, next_run_at);
        let items = self.run(&self.scripts.cron_set, &[self.keys.cron(name)], args).await?;
        let r = Reply::new(self.scripts.cron_set.name, &items);
        if r.tag()? != "ok" {
            return Err(r.unknown_tag());
        }
        Ok(CronSaved {
            created: r.flag(1)?,
            created_at: r.i64(2)?,
            // '' when the entry never fired.
            last_run_at: r.str(3)?.parse().ok(),
            run_count: r.i64(4)?.max(0) as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_cron_entry_is_written_in_the_order_the_header_declares() {
        let s = super::super::test_store();
        assert_eq!(s.cron_set_args("c", "{}", Some(1_000)), ["ojs:{t}:", "c", "{}", "1000"]);
        assert_eq!(s.cron_set_args("c", "{}", None)[3], "");
    }
}
