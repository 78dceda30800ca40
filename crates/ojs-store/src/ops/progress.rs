//! The typed twin of `lua/progress-1.lua` (ext-progress): a progress report of an active job, which
//! extends its lease as a heartbeat would. See the script's header.

use super::ArgWriter;

use super::{transition, ClaimRef, Transition};
use crate::reply::{at, tag, val_i64, val_str};
use crate::store::{Result, Store};

/// `lua/progress-1.lua`, kept beside its method rather than in the store's `Scripts`.

/// The script's arguments, as its header names them (checked by build.rs).
const ARGV: &[&str] = &[
    "P",
    "id",
    "progress",
    "message",
    "data",
    "default_ms",
    "lease_id",
    "attempt",
    "worker_id",
];

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
        let mut args = Vec::with_capacity(ARGV.len());
        let [lease, attempt, worker] = claim.args();
        ArgWriter::new(ARGV, &mut args)
            .arg("P", self.keys.prefix())
            .arg("id", id)
            .arg("progress", progress.map(|p| format!("{p}")).unwrap_or_default())
            .arg("message", message.unwrap_or(""))
            .arg("data", data.unwrap_or(""))
            .arg("default_ms", self.cfg.default_visibility_ms.to_string())
            .arg("lease_id", lease)
            .arg("attempt", attempt)
            .arg("worker_id", worker)
            .done();
        args
    }

    /// Records a progress report of an active job and extends its lease as a heartbeat would
    /// (`lua/progress-1.lua`). `progress` is already clamped to [0, 1]; `data` is JSON text.
    /// Done((now, stored progress, new lease deadline or None when it had lapsed)); `WrongState` when the
    /// job is not active (the report was dropped); `LeaseLost` for a fenced-off claim.
    pub async fn report_progress(
        &self,
        id: &str,
        claim: &ClaimRef,
        progress: Option<f64>,
        message: Option<&str>,
        data: Option<&str>,
    ) -> Result<Transition<(i64, Option<f64>, Option<i64>)>> {
        let args = self.progress_args(id, claim, progress, message, data);
        let items = self.run(&self.scripts.progress, &[self.keys.job(id)], args).await?;
        if tag(&items) == "ignored" {
            return Ok(Transition::WrongState(val_str(at(&items, 1))));
        }
        Ok(transition(&items, |i| {
            let lease = val_i64(at(i, 3));
            (
                val_i64(at(i, 1)),
                val_str(at(i, 2)).parse::<f64>().ok(),
                (lease >= 0).then_some(lease),
            )
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_progress_report_is_written_in_the_order_the_header_declares() {
        let s = super::super::test_store();
        let claim = ClaimRef {
            lease_id: None,
            attempt: Some(3),
            worker_id: None,
        };
        // The ArgWriter's checks run here (debug build): a value written under the wrong name panics.
        let args = s.progress_args("j", &claim, Some(0.5), None, Some("{}"));
        assert_eq!(args.len(), ARGV.len());
        assert_eq!(&args[..6], ["ojs:{t}:", "j", "0.5", "", "{}", "30000"]);
        assert_eq!(&args[6..], ["", "3", ""]);
        let args = s.progress_args("j", &ClaimRef::default(), None, Some("m"), None);
        assert_eq!(&args[2..5], ["", "m", ""]);
    }
}
