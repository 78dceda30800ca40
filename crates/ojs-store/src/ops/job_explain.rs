//! The typed twin of `lua/job-explain-1.lua`: what holds a job back and until when, decided by the
//! Lua functions FETCH decides with. See the script's header.

use redis::Value;

use super::args::JobExplainArgs;

use crate::reply::{decode_record, flat_pairs, val_str, Reply};
use crate::store::{Fields, Result, Store, StoredJob};

/// One rule standing between a job and a worker now (the script's `gate_i`).
#[derive(Debug, Clone, Default)]
pub struct ExplainGate {
    /// `scheduled`, `pending`, `paused`, `rescoring`, `queue_concurrency`, `queue_rate`,
    /// `tenant_concurrency`, `fair_share`, `dynamic`, `concurrency`, `pool`, `rate`, `throttle`,
    /// `override`, `order`, `expired`, `workflow_cancelled`, `superseded`.
    pub name: String,
    /// When it may open (ms), if known.
    pub until_ms: Option<i64>,
    /// Eligible jobs (tenants, for the fair share) before this one at the gate.
    pub ahead: Option<i64>,
    pub limit: Option<i64>,
    pub current: Option<i64>,
    /// The rate-limit key.
    pub key: Option<String>,
    /// Slot holders (concurrency), or the chain step waited for (pending).
    pub holders: Vec<String>,
    /// The gate's other fields (see the script's header).
    pub extra: Fields,
}

/// A job and what holds it back.
#[derive(Debug, Clone, Default)]
pub struct Explained {
    pub now_ms: i64,
    /// The job's record, as `get_job` reads it.
    pub job: StoredJob,
    /// In FETCH's order; empty for a job that is not waiting.
    pub gates: Vec<ExplainGate>,
}

impl Store {
    /// The script's arguments, in the order of its header.
    fn job_explain_args(&self, id: &str) -> Vec<String> {
        JobExplainArgs {
            prefix: self.keys().prefix().into(),
            id: id.into(),
        }
        .into_vec()
    }

    /// What holds job `id` back and until when, in one script that only reads (see its header); None
    /// when there is no such job.
    pub async fn explain_job(&self, id: &str) -> Result<Option<Explained>> {
        let args = self.job_explain_args(id);
        let items = self
            .run(&self.scripts.job_explain, &[self.keys().job(id)], args)
            .await?;
        let r = Reply::new(self.scripts.job_explain.name, &items);
        match r.tag()? {
            "not_found" => return Ok(None),
            "ok" => {}
            _ => return Err(r.unknown_tag()),
        }
        let job = match items.get(2) {
            Some(Value::BulkString(b)) => decode_record(b).ok_or_else(|| r.error(2, "the job's record"))?,
            _ => return Err(r.error(2, "the job's record")),
        };
        let mut gates = Vec::new();
        for i in 3..items.len() {
            let g = Reply::new("job-explain (gate)", r.array(i)?);
            // -1 where the gate has no such number, '' where it names no key.
            let opt = |k: usize| g.i64(k).map(|n| Some(n).filter(|n| *n >= 0));
            gates.push(ExplainGate {
                name: g.str(0)?,
                until_ms: opt(1)?,
                ahead: opt(2)?,
                limit: opt(3)?,
                current: opt(4)?,
                key: Some(g.str(5)?).filter(|k| !k.is_empty()),
                holders: g.array(6)?.iter().map(val_str).collect(),
                extra: flat_pairs(g.array(7)?),
            });
        }
        Ok(Some(Explained {
            now_ms: r.i64(1)?,
            job,
            gates,
        }))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_explanation_is_asked_in_the_order_the_header_declares() {
        let args = super::super::test_store().job_explain_args("j1");
        assert_eq!(args, ["ojs:{t}:", "j1"]);
    }
}
