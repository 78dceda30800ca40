//! The typed twin of `lua/heartbeat-1.lua`: a worker is alive; the leases of the jobs it holds are
//! extended and its signal read. See the script's header.

use super::args::{HeartbeatArgs, HeartbeatJobRecord};

use crate::reads::workers::WORKER_TTL_MS;
use crate::reply::Reply;
use crate::store::{Result, Store};

#[derive(Debug)]
pub struct Heartbeat {
    pub now_ms: i64,
    pub signal: Option<String>,
    /// (job id, state, new lease deadline when extended)
    pub jobs: Vec<(String, String, Option<i64>)>,
}

impl Store {
    /// The script's arguments, in the order of its header.
    fn heartbeat_args(
        &self,
        worker_id: &str,
        jobs: &[(String, Option<String>)],
        extend_ms: Option<u64>,
        worker_state: Option<&str>,
        tenant: Option<&str>,
    ) -> Vec<String> {
        let mut args = Vec::with_capacity(HeartbeatArgs::LEN + HeartbeatJobRecord::LEN * jobs.len());
        HeartbeatArgs {
            prefix: self.keys().prefix().into(),
            worker_id: worker_id.into(),
            extend_ms: extend_ms.unwrap_or(0).to_string(),
            default_ms: self.cfg.default_visibility_ms.to_string(),
            worker_ttl_ms: WORKER_TTL_MS.to_string(),
            worker_state: worker_state.unwrap_or("").into(),
            tenant: tenant.unwrap_or("").into(),
        }
        .push(&mut args);
        for (id, lease) in jobs {
            HeartbeatJobRecord {
                id: id.clone(),
                lease_id: lease.clone().unwrap_or_default(),
            }
            .push(&mut args);
        }
        args
    }

    /// Extends the leases of `jobs` (id, lease id if the worker named one) held by this worker, by
    /// `extend_ms` or else by the lease length chosen when each was claimed. A lapsed lease is never
    /// revived: such a job comes back with no new deadline (the worker lost it). `reported` is the state
    /// the worker reports of itself (`running`, `quiet`, `drain`, `terminate`), kept in its record for
    /// the operator (`None` leaves it as it was). A request acting as `tenant` extends none of another
    /// tenant's jobs: each comes back `missing`.
    pub async fn heartbeat(
        &self,
        worker_id: &str,
        jobs: &[(String, Option<String>)],
        extend_ms: Option<u64>,
        worker_state: Option<&str>,
        tenant: Option<&str>,
    ) -> Result<Heartbeat> {
        let args = self.heartbeat_args(worker_id, jobs, extend_ms, worker_state, tenant);
        let items = self.run(&self.scripts.heartbeat, &[self.keys().active()], args).await?;
        let r = Reply::new(self.scripts.heartbeat.name, &items);
        let signal = r.str(2)?;
        // (id, state, lease) per job, from item 3 on.
        let jobs = (0..jobs.len())
            .map(|k| {
                let i = 3 + 3 * k;
                let lease = r.i64(i + 2)?;
                Ok((r.str(i)?, r.str(i + 1)?, (lease >= 0).then_some(lease)))
            })
            .collect::<Result<_>>()?;
        Ok(Heartbeat {
            now_ms: r.i64(1)?,
            signal: (!signal.is_empty()).then_some(signal),
            jobs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_heartbeat_is_written_in_the_order_the_header_declares() {
        let s = super::super::test_store();
        let jobs = [("a".to_string(), Some("7".to_string())), ("b".to_string(), None)];
        let args = s.heartbeat_args("w", &jobs, None, Some("quiet"), Some("acme"));
        assert_eq!(args.len(), HeartbeatArgs::LEN + 4);
        assert_eq!(&args[..4], ["ojs:{t}:", "w", "0", "30000"]);
        assert_eq!(args[4], WORKER_TTL_MS.to_string());
        assert_eq!(&args[5..7], ["quiet", "acme"]);
        assert_eq!(&args[7..], ["a", "7", "b", ""]);
    }
}
