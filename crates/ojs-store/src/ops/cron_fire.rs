//! The typed twin of `lua/cron-fire-1.lua`: one tick of a cron entry is claimed and its job created,
//! in one script. See the script's header.

use ojs_core::job::NewJob;

use super::args::{CronFireArgs, JobRecord};
use super::enqueue::push_jobs;

use super::enqueue::Enqueued;
use crate::reply::Reply;
use crate::store::{Result, Store};

/// What firing a cron tick did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CronFired {
    /// The tick's job was created.
    Created,
    /// Another pod fired this tick first (or the entry changed meanwhile): nothing done.
    Taken,
    /// overlap_policy skip: the previous run (this job id) is still active; the tick was used up.
    Skipped(String),
    /// The target queue is at its backpressure bound; the tick was used up.
    QueueFull,
    /// The job template's unique policy met a job holding its key (`reject` or `ignore`): no job was
    /// written; the tick was used up.
    Deduplicated(String),
}

/// The tick a firing claims: entry `name`'s tick `expected` (its next_run_at as read), after which the
/// entry is due at `next` (None: never again), with its overlap policy.
#[derive(Debug, Clone, Copy)]
pub struct CronTick<'a> {
    pub name: &'a str,
    pub expected: &'a str,
    pub next: Option<i64>,
    pub overlap: &'a str,
}

impl Store {
    /// The script's arguments, in the order of its header.
    fn cron_fire_args(&self, job: &NewJob, tick: CronTick<'_>) -> Vec<Vec<u8>> {
        let mut args = Vec::with_capacity(CronFireArgs::LEN + JobRecord::LEN);
        CronFireArgs {
            prefix: self.keys().prefix().into(),
            retention_ms: self.cfg.retention_ms.to_string(),
            name: tick.name.into(),
            expected: tick.expected.into(),
            next_run_at: tick.next.map(|n| n.to_string()).unwrap_or_default(),
            overlap: tick.overlap.into(),
        }
        .push(&mut args);
        push_jobs(std::slice::from_ref(job), &mut args);
        args
    }

    /// Fires one tick of a cron entry: the tick is claimed and the entry advanced in the same script
    /// that creates `job`.
    pub async fn cron_fire(&self, job: &NewJob, tick: CronTick<'_>) -> Result<CronFired> {
        let script = &self.scripts.cron_fire;
        let items = self
            .create_call(script, std::slice::from_ref(job), |jobs| {
                self.cron_fire_args(&jobs[0], tick)
            })
            .await?;
        let r = Reply::new(script.name, &items);
        Ok(match r.tag()? {
            "ok" => {
                let e = Enqueued::from_reply(&r)?;
                match e.existing.into_iter().next().flatten() {
                    Some((id, _)) => CronFired::Deduplicated(id),
                    None => CronFired::Created,
                }
            }
            "cron_taken" => CronFired::Taken,
            "cron_skipped" => CronFired::Skipped(r.str(1)?),
            "full" => CronFired::QueueFull,
            _ => return Err(r.unknown_tag()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tick_is_written_in_the_order_the_header_declares() {
        let s = super::super::test_store();
        let job = super::super::enqueue::tests::job("a");
        let tick = CronTick {
            name: "c",
            expected: "100",
            next: None,
            overlap: "skip",
        };
        let args: Vec<String> = s
            .cron_fire_args(&job, tick)
            .iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        assert_eq!(args.len(), CronFireArgs::LEN + JobRecord::LEN);
        assert_eq!(
            args[..CronFireArgs::LEN],
            ["ojs:{t}:", "86400000", "c", "100", "", "skip"]
        );
        // Then the job's JOB record, id first.
        assert_eq!(args[CronFireArgs::LEN], "a");
    }
}
