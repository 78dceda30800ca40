//! The typed twin of `lua/enqueue-1.lua`: one or more jobs are created and made ready or scheduled, in
//! one of the script's modes (`all`, `each`, `cron`, `workflow`). See the script's header.
//!
//! The arguments: the header's `ARGV[1..3]` (`P`, `n`, `mode`, declared in `ARGV` and written through
//! an `ArgWriter`), then [`ENQUEUE_STRIDE`] fields per job (`push_job`, in the order of the header's
//! `(+k)` list: the script reads field `k` of job `i` as `ARGV[4 + i * STRIDE + k]`), then
//! `retention_ms`, then the mode's own trailing arguments (`cron`: name, expected next_run_at, new
//! next_run_at, overlap_policy; `workflow`: id, type, name, m, one callback name per remaining job).
//! The per-job fields are not a `RECORD` (the script has no `REQ_FIELDS`), so build.rs does not check
//! their names: the unit test below pins their positions.

use ojs_core::job::{NewJob, RetryPolicy};
use ojs_core::ratelimit::RateLimitPolicy;
use ojs_core::workflow::NewWorkflow;
use redis::Value;

use super::ArgWriter;

use crate::reply::{at, decode_job, strings, tag, val_i64, val_str};
use crate::store::{JobFields, Result, Store, StoreError};

/// What one enqueue script call did, job by job (`lua/enqueue-1.lua`).
#[derive(Debug, Clone)]
pub struct Enqueued {
    /// Redis time of the call: every job written has it as `created_at`.
    pub now_ms: i64,
    /// Per job: `available` or `scheduled` (written); `ignored` (not written: a unique `ignore` or
    /// `raise_priority` duplicate); and, for `each` calls only, `conflict` (unique `reject`),
    /// `duplicate` (the id exists) or `full` (its queue is at its depth bound).
    pub states: Vec<String>,
    /// Each bounded queue the call touched, as it left it.
    pub pressure: Vec<Pressure>,
    /// Per job: for a `conflict` or `ignored` one, the existing job it met: (id, its fields after the
    /// call).
    pub existing: Vec<Option<(String, JobFields)>>,
}

impl Enqueued {
    fn from_reply(items: &[Value]) -> Self {
        let existing = match at(items, 4) {
            Value::Array(a) => a
                .iter()
                .map(|v| match v {
                    Value::Array(pair) if pair.len() == 2 => Some((val_str(&pair[0]), decode_job(&pair[1]))),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        Self {
            now_ms: val_i64(at(items, 1)),
            states: strings(at(items, 2)),
            pressure: pressures(at(items, 3)),
            existing,
        }
    }
}

#[derive(Debug)]
pub enum EnqueueOutcome {
    Created(Enqueued),
    Duplicate(String),
    /// Job `index` of the batch has a unique policy with `on_conflict: reject` and met a job holding
    /// its uniqueness key in one of the policy's states: a stored one, or the batch's job
    /// `existing_index`. Nothing was written.
    Conflict {
        index: usize,
        existing_id: String,
        existing_state: String,
        existing_index: Option<usize>,
    },
    /// The batch would take this queue past its depth bound; nothing was written.
    Full(Pressure),
}

/// Fields per job in the enqueue script's ARGV (`lua/enqueue-1.lua`, its `STRIDE`).
pub const ENQUEUE_STRIDE: usize = 22;

/// A queue with a depth bound (backpressure), as an enqueue left it.
#[derive(Debug, Clone, PartialEq)]
pub struct Pressure {
    pub queue: String,
    /// Available + scheduled + retryable jobs of the queue.
    pub depth: u64,
    pub bound: u64,
    /// Above depth / bound = this, successful enqueues carry warning headers.
    pub warning_threshold: f64,
    /// `reject` or `block` (the server waits for room up to the request's OJS-Block-Timeout).
    pub strategy: String,
}

impl Pressure {
    pub fn ratio(&self) -> f64 {
        if self.bound == 0 {
            1.0
        } else {
            self.depth as f64 / self.bound as f64
        }
    }
}

fn pressures(v: &Value) -> Vec<Pressure> {
    match v {
        Value::Array(a) => a
            .chunks(5)
            .filter(|c| c.len() == 5)
            .map(|c| Pressure {
                queue: val_str(&c[0]),
                depth: val_i64(&c[1]).max(0) as u64,
                bound: val_i64(&c[2]).max(0) as u64,
                warning_threshold: val_str(&c[3]).parse().unwrap_or(0.8),
                strategy: val_str(&c[4]),
            })
            .collect(),
        _ => Vec::new(),
    }
}

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

/// Encodes a rate-limit policy for the job's `rl` field (see lua/includes/ratelimit.lua).
pub fn policy_spec(p: &RateLimitPolicy) -> String {
    let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_else(|| "-".into());
    format!(
        "{} {} {} {} {} {}",
        opt(p.concurrency),
        opt(p.rate.map(|w| w.limit)),
        opt(p.rate.map(|w| w.period_ms)),
        opt(p.throttle.map(|w| w.limit)),
        opt(p.throttle.map(|w| w.period_ms)),
        p.on_limit.as_str()
    )
}

/// Encodes a retry policy for the `backoff` field the Lua `fail` include parses.
fn backoff_spec(r: &RetryPolicy) -> String {
    format!(
        "{} {} {} {} {}",
        r.strategy.as_str(),
        r.initial_interval_ms,
        r.backoff_coefficient,
        r.max_interval_ms,
        u8::from(r.jitter)
    )
}

/// The script's leading arguments, as its header names them (checked by build.rs). The per-job
/// fields, `retention_ms` and the mode's arguments follow them (see the module's documentation).
const ARGV: &[&str] = &["P", "n", "mode"];

/// The reply of enqueue-1.lua in the all-or-nothing modes (`all`, `workflow`).
fn enqueue_outcome(items: &[Value]) -> Result<EnqueueOutcome> {
    match tag(items).as_str() {
        "ok" => Ok(EnqueueOutcome::Created(Enqueued::from_reply(items))),
        "duplicate" => Ok(EnqueueOutcome::Duplicate(items.get(1).map(val_str).unwrap_or_default())),
        "conflict" => Ok(EnqueueOutcome::Conflict {
            index: val_i64(at(items, 1)).max(0) as usize,
            existing_id: val_str(at(items, 2)),
            existing_state: val_str(at(items, 3)),
            existing_index: val_str(at(items, 4)).parse().ok(),
        }),
        "full" => Ok(EnqueueOutcome::Full(Pressure {
            queue: val_str(at(items, 1)),
            depth: val_i64(at(items, 2)).max(0) as u64,
            bound: val_i64(at(items, 3)).max(0) as u64,
            warning_threshold: 1.0,
            strategy: val_str(at(items, 4)),
        })),
        t => Err(StoreError::Reply(format!("enqueue: unknown tag {t}"))),
    }
}

impl Store {
    /// Enqueues a batch, all or nothing: any duplicate id and nothing is written.
    pub async fn enqueue(&self, jobs: &[NewJob]) -> Result<EnqueueOutcome> {
        let items = self.enqueue_script(jobs, "all").await?;
        enqueue_outcome(&items)
    }

    /// Creates a workflow and all of its jobs, all or nothing (enqueue-1.lua's `workflow` mode): the
    /// first step (chain) or every job (group, batch) is made ready; later steps and callbacks wait
    /// `pending`. A duplicate is a job id or the workflow id.
    pub async fn create_workflow(&self, wf: &NewWorkflow) -> Result<EnqueueOutcome> {
        let mut extra = vec![
            wf.id.clone(),
            wf.kind.as_str().to_string(),
            wf.name.clone(),
            wf.members.to_string(),
        ];
        extra.extend(wf.callbacks.iter().map(|c| c.to_string()));
        let items = self.enqueue_script_with(&wf.jobs, "workflow", extra).await?;
        enqueue_outcome(&items)
    }

    /// Enqueues independent jobs in one script call (the server's coalesced single enqueues): each job
    /// stands alone (see [`Enqueued::states`]); a unique duplicate meets the jobs before it in the call
    /// exactly as stored ones.
    pub async fn enqueue_each(&self, jobs: &[NewJob]) -> Result<Enqueued> {
        let items = self.enqueue_script(jobs, "each").await?;
        match tag(&items).as_str() {
            "ok" => Ok(Enqueued::from_reply(&items)),
            t => Err(StoreError::Reply(format!("enqueue: unknown tag {t}"))),
        }
    }

    /// Fires one tick of cron entry `name`: the tick `expected` (its next_run_at as read) is claimed and
    /// the entry advanced to `next` in the same script that creates `job` (enqueue-1.lua's cron mode).
    pub async fn cron_fire(
        &self,
        job: &NewJob,
        name: &str,
        expected: &str,
        next: Option<i64>,
        overlap: &str,
    ) -> Result<CronFired> {
        let extra = vec![
            name.to_string(),
            expected.to_string(),
            next.map(|n| n.to_string()).unwrap_or_default(),
            overlap.to_string(),
        ];
        let items = self
            .enqueue_script_with(std::slice::from_ref(job), "cron", extra)
            .await?;
        Ok(match tag(&items).as_str() {
            "ok" => {
                let e = Enqueued::from_reply(&items);
                match e.existing.into_iter().next().flatten() {
                    Some((id, _)) => CronFired::Deduplicated(id),
                    None => CronFired::Created,
                }
            }
            "cron_taken" => CronFired::Taken,
            "cron_skipped" => CronFired::Skipped(val_str(at(&items, 1))),
            "full" => CronFired::QueueFull,
            t => return Err(StoreError::Reply(format!("cron fire: unknown tag {t}"))),
        })
    }

    async fn enqueue_script(&self, jobs: &[NewJob], mode: &str) -> Result<Vec<Value>> {
        self.enqueue_script_with(jobs, mode, Vec::new()).await
    }

    /// The enqueue script with `extra` arguments after the jobs' fields and the retention (the `cron`
    /// and `workflow` modes').
    async fn enqueue_script_with(&self, jobs: &[NewJob], mode: &str, extra: Vec<String>) -> Result<Vec<Value>> {
        let args = self.enqueue_args(jobs, mode, extra);
        self.run(&self.scripts.enqueue, &[self.keys.queues()], args).await
    }

    /// The script's arguments, in the order of its header: bytes, since a job's cold fields are a
    /// MessagePack map ([`ColdFields`]).
    fn enqueue_args(&self, jobs: &[NewJob], mode: &str, extra: Vec<String>) -> Vec<Vec<u8>> {
        let mut head = Vec::with_capacity(ARGV.len());
        ArgWriter::new(ARGV, &mut head)
            .arg("P", self.keys.prefix())
            .arg("n", jobs.len().to_string())
            .arg("mode", mode)
            .done();
        let mut args = Vec::with_capacity(ARGV.len() + jobs.len() * ENQUEUE_STRIDE + 1 + extra.len());
        args.extend(head.into_iter().map(String::into_bytes));
        for j in jobs {
            push_job(j, &mut args);
        }
        args.push(self.cfg.retention_ms.to_string().into_bytes());
        args.extend(extra.into_iter().map(String::into_bytes));
        args
    }
}

/// The cold fields of a new job's record (key schema v3: `REC_COLD` in lua/includes/record.lua, which
/// a test below holds this to), packed here as the MessagePack map the record keeps in its `cold` field;
/// the enqueue stores the bytes as they are, and FETCH hands them back inside the record.
#[derive(serde::Serialize)]
struct ColdFields<'a> {
    /// The client's envelope as JSON, without the system fields.
    doc: &'a str,
    max_attempts: String,
    backoff: String,
    on_exhaustion: &'a str,
    /// A JSON array of error types; left out when there are none.
    #[serde(skip_serializing_if = "String::is_empty")]
    non_retryable: String,
}

impl<'a> ColdFields<'a> {
    fn of(j: &'a NewJob) -> Self {
        Self {
            doc: &j.doc,
            max_attempts: j.retry.max_attempts.to_string(),
            backoff: backoff_spec(&j.retry),
            on_exhaustion: j.retry.on_exhaustion.as_str(),
            non_retryable: j.retry.non_retryable_json(),
        }
    }

    /// The map's bytes. Packing strings into a Vec cannot fail; were it to, the job would be stored
    /// without them and read with the defaults.
    fn packed(&self) -> Vec<u8> {
        rmp_serde::to_vec_named(self).unwrap_or_else(|e| {
            tracing::error!(error = %e, "packing a job's cold fields failed");
            vec![0x80]
        })
    }
}

/// Appends one job's [`ENQUEUE_STRIDE`] fields, in the order of the header's `(+k)` list.
fn push_job(j: &NewJob, args: &mut Vec<Vec<u8>>) {
    let unique = j.unique.as_ref();
    let root = j.root_job.as_ref();
    // +0 id, +1 queue, +2 type, +3 rank, +4 cold
    args.extend([
        j.id.clone().into_bytes(),
        j.queue.clone().into_bytes(),
        j.job_type.clone().into_bytes(),
        j.rank.to_string().into_bytes(),
        ColdFields::of(j).packed(),
    ]);
    let fields: [String; ENQUEUE_STRIDE - 5] = [
        // +5 timeout_ms, +6 visibility_ms, +7 expires_at, +8 scheduled_at, +9 delay_ms, +10 priority
        j.timeout_ms.to_string(),
        j.visibility_ms.to_string(),
        j.expires_at_ms.to_string(),
        j.scheduled_at_ms.to_string(),
        j.delay_ms.to_string(),
        j.priority.to_string(),
        // +11 rate-limit key, +12 rate-limit policy, +13 expires_in_ms
        j.rate_limit.as_ref().map(|r| r.key.clone()).unwrap_or_default(),
        j.rate_limit.as_ref().map(policy_spec).unwrap_or_default(),
        j.expires_in_ms.to_string(),
        // +14 unique key, +15 unique states, +16 unique period_ms, +17 on_conflict
        unique.map(|u| u.key.clone()).unwrap_or_default(),
        unique.map(|u| u.states.join(",")).unwrap_or_default(),
        unique.map_or(0, |u| u.period_ms).to_string(),
        unique.map(|u| u.on_conflict.as_str()).unwrap_or_default().to_string(),
        // +18 dedup fingerprint, +19 root-job signature, +20 root timestamp, +21 is the root
        j.dedup.as_ref().map(|d| d.key.clone()).unwrap_or_default(),
        root.map(|r| r.key.clone()).unwrap_or_default(),
        root.map_or(0, |r| r.timestamp_ms).to_string(),
        if root.is_some_and(|r| r.is_root) { "1" } else { "0" }.to_string(),
    ];
    args.extend(fields.map(String::into_bytes));
}

#[cfg(test)]
mod tests {
    use ojs_core::ratelimit::{OnLimit, Window};
    use ojs_core::unique::{OnConflict, RootJob, UniquePolicy};

    use super::*;

    fn job(id: &str) -> NewJob {
        NewJob {
            id_generated: false,
            id: id.into(),
            job_type: "email".into(),
            queue: "q".into(),
            priority: 5,
            rank: -5,
            doc: "{}".into(),
            retry: RetryPolicy::default(),
            timeout_ms: 1_000,
            visibility_ms: 0,
            expires_at_ms: 0,
            expires_in_ms: 0,
            scheduled_at_ms: 0,
            delay_ms: 250,
            rate_limit: None,
            unique: None,
            dedup: None,
            root_job: None,
        }
    }

    #[test]
    fn an_enqueue_is_written_in_the_order_the_header_declares() {
        let s = super::super::test_store();
        let mut b = job("b");
        b.rate_limit = Some(RateLimitPolicy {
            key: "k".into(),
            concurrency: Some(2),
            rate: Some(Window {
                limit: 10,
                period_ms: 1_000,
            }),
            throttle: None,
            on_limit: OnLimit::Wait,
        });
        b.unique = Some(UniquePolicy {
            key: "u".into(),
            states: vec!["available".into(), "active".into()],
            period_ms: 60_000,
            on_conflict: OnConflict::Reject,
            spans_queues: false,
        });
        b.dedup = Some(ojs_core::unique::Dedup {
            key: "d".into(),
            spans_queues: true,
        });
        b.root_job = Some(RootJob {
            key: "r".into(),
            signature: "r".into(),
            timestamp_ms: 7,
            is_root: true,
        });
        let extra = vec!["c".to_string(), "100".to_string(), "".to_string(), "skip".to_string()];
        // The ArgWriter's checks run here (debug build): a value written under the wrong name panics.
        let args = s.enqueue_args(&[job("a"), b], "cron", extra);
        assert_eq!(args.len(), ARGV.len() + 2 * ENQUEUE_STRIDE + 1 + 4);
        assert_eq!(
            args[..3].iter().map(|a| String::from_utf8_lossy(a)).collect::<Vec<_>>(),
            ["ojs:{t}:", "2", "cron"]
        );
        // Job i's field +k is ARGV[4 + i * STRIDE + k] (1-based), args[3 + i * STRIDE + k] here.
        let field = |i: usize, k: usize| String::from_utf8_lossy(&args[3 + i * ENQUEUE_STRIDE + k]).into_owned();
        assert_eq!(
            [field(0, 0), field(0, 1), field(0, 2), field(0, 3)],
            ["a", "q", "email", "-5"]
        );
        // +4: the cold fields, a MessagePack map, as a record's `cold` field reads.
        let cold = crate::reply::decode_record(&args[3 + 4]);
        let mut cold: Vec<(String, String)> = cold.into_iter().collect();
        cold.sort();
        assert_eq!(
            cold,
            [
                ("backoff", "exponential 1000 2 300000 1"),
                ("doc", "{}"),
                ("max_attempts", "3"),
                ("on_exhaustion", "discard"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string()))
        );
        assert_eq!(
            [field(0, 9), field(0, 10), field(0, 11), field(0, 21)],
            ["250", "5", "", "0"]
        );
        assert_eq!(
            [field(1, 0), field(1, 11), field(1, 12)],
            ["b", "k", "2 10 1000 - - wait"]
        );
        assert_eq!(
            [field(1, 14), field(1, 15), field(1, 16), field(1, 17)],
            ["u", "available,active", "60000", "reject"]
        );
        assert_eq!(
            [field(1, 18), field(1, 19), field(1, 20), field(1, 21)],
            ["d", "r", "7", "1"]
        );
        // Then retention_ms and the cron mode's four arguments.
        let tail: Vec<&[u8]> = args[3 + 2 * ENQUEUE_STRIDE..].iter().map(Vec::as_slice).collect();
        assert_eq!(tail, [&b"86400000"[..], b"c", b"100", b"", b"skip"]);
    }

    #[test]
    fn the_cold_fields_packed_here_are_the_ones_record_lua_keeps_in_cold() {
        let mut lua = crate::reply::cold_fields();
        lua.sort_unstable();
        assert!(lua.contains(&"doc"), "REC_COLD as read from record.lua: {lua:?}");
        let mut j = job("a");
        j.retry.non_retryable_errors = vec!["Fatal".into()];
        let packed = crate::reply::decode_record(&ColdFields::of(&j).packed());
        let mut rust: Vec<&str> = packed.keys().map(String::as_str).collect();
        rust.sort_unstable();
        assert_eq!(rust, lua);
    }
}
