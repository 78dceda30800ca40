//! The typed twin of `lua/progress-1.lua` (ext-progress): a progress report of an active job, which
//! extends its lease as a heartbeat would. See the script's header.

use super::args::ProgressArgs;

use super::{transition, ClaimRef, Transition};
use crate::reply::Reply;
use crate::store::{Result, Store};

impl Store {
    /// The script's arguments, in the order of its header.
    fn progress_args(
        &self,
        id: &str,
        claim: &ClaimRef,
        progress: Option<f64>,
        message: Option<&str>,
        data: Option<&str>,
    ) -> Vec<String> {
        let [lease, attempt, worker] = claim.args();
        ProgressArgs {
            prefix: self.keys().prefix().into(),
            id: id.into(),
            progress: progress.map(|p| format!("{p}")).unwrap_or_default(),
            message: message.unwrap_or("").into(),
            data: data.unwrap_or("").into(),
            default_ms: self.cfg.default_visibility_ms.to_string(),
            lease_id: lease,
            attempt,
            worker_id: worker,
            tenant: claim.tenant_arg(),
        }
        .into_vec()
    }

    /// Records a progress report of an active job and extends its lease as a heartbeat would
    /// (`lua/progress-1.lua`). `progress` is already clamped to [0, 1]; `data` is JSON text.
    /// Done((now, stored progress, new lease deadline or None when it had lapsed)); `WrongState` when the
    /// job is not active (the report was dropped); `LeaseLost` for a fenced-off claim; `NotFound` for a job
    /// that does not exist or is another tenant's than the claim's.
    pub async fn report_progress(
        &self,
        id: &str,
        claim: &ClaimRef,
        progress: Option<f64>,
        message: Option<&str>,
        data: Option<&str>,
    ) -> Result<Transition<(i64, Option<f64>, Option<i64>)>> {
        let args = self.progress_args(id, claim, progress, message, data);
        let items = self.run(&self.scripts.progress, &[self.keys().job(id)], args).await?;
        let r = Reply::new(self.scripts.progress.name, &items);
        if r.tag()? == "ignored" {
            return Ok(Transition::WrongState(r.str(1)?));
        }
        transition(&r, |r| {
            let lease = r.i64(3)?;
            // '' when no progress was reported yet.
            Ok((r.i64(1)?, r.str(2)?.parse::<f64>().ok(), (lease >= 0).then_some(lease)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_progress_report_is_written_in_the_order_the_header_declares() {
        let s = super::super::test_store();
        let claim = ClaimRef {
            attempt: Some(3),
            ..ClaimRef::default()
        };
        let args = s.progress_args("j", &claim, Some(0.5), None, Some("{}"));
        assert_eq!(args.len(), ProgressArgs::LEN);
        assert_eq!(&args[..6], ["ojs:{t}:", "j", "0.5", "", "{}", "30000"]);
        assert_eq!(&args[6..], ["", "3", "", ""]);
        let args = s.progress_args("j", &ClaimRef::default(), None, Some("m"), None);
        assert_eq!(&args[2..5], ["", "m", ""]);
    }
}
