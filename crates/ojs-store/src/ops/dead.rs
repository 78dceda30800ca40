//! The typed twin of the dead letter's two scripts, which take the same arguments: `lua/dead-retry-1.lua`
//! gives a dead-lettered job a new life (back to available with fresh attempts), `lua/dead-delete-1.lua`
//! deletes it for good. See the scripts' headers.

use super::args::{DeadDeleteArgs, DeadRetryArgs};

use crate::reply::Reply;
use crate::store::{Named, Result, Store};

/// What a dead-letter retry did.
#[derive(Debug, PartialEq, Eq)]
pub enum DeadRetry {
    /// The job is available again.
    Retried,
    /// The job is not in the dead letter set.
    NotFound,
    /// Another job holds the job's uniqueness key in a state its policy counts: the job stays
    /// dead-lettered (the same refusal an enqueue of it would meet).
    Duplicate {
        existing_id: String,
        existing_state: String,
        uniqueness_key: String,
    },
}

impl DeadRetry {
    /// A retry the store did not do, as the API answers it (None: the job is available again). One
    /// answer for the single and the bulk retry.
    pub fn refusal(self, id: &str) -> Option<ojs_core::OjsError> {
        match self {
            DeadRetry::Retried => None,
            DeadRetry::NotFound => Some(ojs_core::OjsError::not_found("dead-letter job", id)),
            DeadRetry::Duplicate {
                existing_id,
                existing_state,
                uniqueness_key,
            } => Some(ojs_core::OjsError::unique_retry_conflict(
                id,
                &existing_id,
                &existing_state,
                &uniqueness_key,
            )),
        }
    }
}

impl Store {
    /// Runs one of the dead letter's scripts with its arguments.
    async fn dead_run(&self, script: &Named, args: Vec<String>) -> Result<Vec<redis::Value>> {
        self.run(script, &[self.keys().dead()], args).await
    }

    pub async fn dead_retry(&self, id: &str) -> Result<DeadRetry> {
        let args = DeadRetryArgs {
            prefix: self.keys().prefix().into(),
            id: id.into(),
        };
        let items = self.dead_run(&self.scripts.dead_retry, args.into_vec()).await?;
        let r = Reply::new(self.scripts.dead_retry.name, &items);
        Ok(match r.tag()? {
            "ok" => DeadRetry::Retried,
            "duplicate" => DeadRetry::Duplicate {
                existing_id: r.str(1)?,
                existing_state: r.str(2)?,
                uniqueness_key: r.str(3)?,
            },
            "not_found" => DeadRetry::NotFound,
            _ => return Err(r.unknown_tag()),
        })
    }

    /// Whether the job was in the dead letter set (and is now deleted).
    pub async fn dead_delete(&self, id: &str) -> Result<bool> {
        let args = DeadDeleteArgs {
            prefix: self.keys().prefix().into(),
            id: id.into(),
        };
        let items = self.dead_run(&self.scripts.dead_delete, args.into_vec()).await?;
        let r = Reply::new(self.scripts.dead_delete.name, &items);
        match r.tag()? {
            "ok" => Ok(true),
            "not_found" => Ok(false),
            _ => Err(r.unknown_tag()),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_scripts_default_unique_states_are_the_policys() {
        // A record stores no 'unique_states' when the enqueue sent these; a retry then reads them back.
        let lua = include_str!("../../../../lua/includes/unique.lua");
        let default = ojs_core::unique::DEFAULT_STATES.join(",");
        assert!(
            lua.contains(&format!("local UNIQUE_DEFAULT_STATES = '{default}'")),
            "lua/includes/unique.lua's UNIQUE_DEFAULT_STATES is not {default:?}"
        );
    }
}
