//! The typed twin of `lua/nack-1.lua`: an active job failed; its retry policy is applied, or it is
//! released untouched (requeue). See the script's header.

use super::args::NackArgs;

use super::rand_unit;
use super::{transition, ClaimRef, Transition};
use crate::reply::Reply;
use crate::store::{Result, Store};

#[derive(Debug)]
pub struct NackResult {
    pub now_ms: i64,
    pub state: String,
    pub attempt: i64,
    /// Delay before the retry, when `state` is `retryable`.
    pub delay_ms: Option<i64>,
    pub max_attempts: i64,
    pub queue: String,
    pub job_type: String,
}

impl Store {
    /// The script's arguments, in the order of its header.
    #[allow(clippy::too_many_arguments)]
    fn nack_args(
        &self,
        id: &str,
        claim: &ClaimRef,
        error_json: &str,
        match_key: &str,
        retryable: bool,
        requeue: bool,
        rate_limit_until_ms: i64,
        jitter_u: f64,
    ) -> Vec<String> {
        let [lease, attempt, worker] = claim.args();
        NackArgs {
            prefix: self.keys().prefix().into(),
            id: id.into(),
            error: error_json.into(),
            match_key: match_key.into(),
            retryable: if retryable { "1" } else { "0" }.into(),
            requeue: if requeue { "1" } else { "0" }.into(),
            jitter_u: format!("{jitter_u:.6}"),
            retention_ms: self.cfg.retention_ms.to_string(),
            rate_limit_until: rate_limit_until_ms.to_string(),
            lease_id: lease,
            attempt,
            worker_id: worker,
            tenant: claim.tenant_arg(),
        }
        .into_vec()
    }

    /// `error_json` must be a non-empty JSON object. `rate_limit_until_ms` > now means the worker saw
    /// the downstream's rate limit (seed §9): the job's key is blocked until then and no attempt is spent.
    #[allow(clippy::too_many_arguments)]
    pub async fn nack(
        &self,
        id: &str,
        claim: &ClaimRef,
        error_json: &str,
        match_key: &str,
        retryable: bool,
        requeue: bool,
        rate_limit_until_ms: i64,
    ) -> Result<Transition<NackResult>> {
        let args = self.nack_args(
            id,
            claim,
            error_json,
            match_key,
            retryable,
            requeue,
            rate_limit_until_ms,
            rand_unit(),
        );
        let items = self.run(&self.scripts.nack, &[self.keys().job(id)], args).await?;
        transition(&Reply::new(self.scripts.nack.name, &items), |r| {
            let delay = r.i64(4)?;
            Ok(NackResult {
                now_ms: r.i64(1)?,
                state: r.str(2)?,
                attempt: r.i64(3)?,
                delay_ms: (delay >= 0).then_some(delay),
                max_attempts: r.i64(5)?,
                queue: r.str(6)?,
                job_type: r.str(7)?,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nack_is_written_in_the_order_the_header_declares() {
        let s = super::super::test_store();
        let claim = ClaimRef {
            lease_id: Some("7".into()),
            attempt: None,
            worker_id: Some("w".into()),
            tenant: Some("acme".into()),
        };
        let args = s.nack_args("j", &claim, "{\"k\":1}", "E", true, false, 5, 0.25);
        assert_eq!(args.len(), NackArgs::LEN);
        assert_eq!(&args[..4], ["ojs:{t}:", "j", "{\"k\":1}", "E"]);
        assert_eq!(&args[4..9], ["1", "0", "0.250000", "86400000", "5"]);
        assert_eq!(&args[9..], ["7", "", "w", "acme"]);
    }
}
