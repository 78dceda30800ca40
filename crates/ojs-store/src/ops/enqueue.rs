//! The typed twin of `lua/enqueue-1.lua`: one or more jobs are created and made ready or scheduled, all
//! or nothing (`all`) or each by itself (`each`). See the script's header.
//!
//! The arguments, as the script's header declares them (build.rs makes their structs from it): the
//! fixed ones ([`EnqueueArgs`]), then one JOB record per job ([`JobRecord`], `job_record`). The JOB
//! record is `lua/includes/create.lua`'s, which every script that creates jobs passes
//! (cron_fire.rs, workflow_create.rs): `job_record` and [`Store::create_call`] serve them all.
use ojs_core::job::{NewJob, RetryPolicy};
use ojs_core::ratelimit::RateLimitPolicy;
use redis::Value;

use super::args::{EnqueueArgs, JobRecord};

use crate::reply::{decode_job, Reply};
use crate::store::{Result, Store, StoredJob};

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
    pub existing: Vec<Option<(String, StoredJob)>>,
}

impl Enqueued {
    /// An `ok` reply: `{'ok', now_ms, states, pressure, found}`. Every part is checked against the
    /// header: a reply that does not match it is a protocol error, never a zero or an empty string.
    pub(super) fn from_reply(r: &Reply) -> Result<Self> {
        let states = r.part(r.array(2)?);
        let found = r.part(r.array(4)?);
        let existing = (0..r.array(4)?.len())
            .map(|i| match found.array(i)? {
                [] => Ok(None),
                pair @ [_, record] => {
                    let job = decode_job(record).ok_or_else(|| r.part(pair).error(1, "the existing job's record"))?;
                    Ok(Some((r.part(pair).str(0)?, job)))
                }
                _ => Err(found.error(i, "{} or {existing id, its record}")),
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            now_ms: r.i64(1)?,
            states: (0..r.array(2)?.len()).map(|i| states.str(i)).collect::<Result<_>>()?,
            pressure: pressures(&r.part(r.array(3)?))?,
            existing,
        })
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

/// The `pressure` part of an enqueue's reply: {queue, depth, bound, warning_threshold, strategy, ...}.
fn pressures(p: &Reply) -> Result<Vec<Pressure>> {
    let n = p.rest(0).len();
    if n % 5 != 0 {
        return Err(p.error(
            n,
            "a multiple of 5 items (queue, depth, bound, warning_threshold, strategy)",
        ));
    }
    (0..n)
        .step_by(5)
        .map(|i| {
            let warn = p.str(i + 3)?;
            Ok(Pressure {
                queue: p.str(i)?,
                depth: p.i64(i + 1)?.max(0) as u64,
                bound: p.i64(i + 2)?.max(0) as u64,
                warning_threshold: warn.parse().map_err(|_| p.error(i + 3, "a number"))?,
                strategy: p.str(i + 4)?,
            })
        })
        .collect()
}

/// Encodes a rate-limit policy for the job's `rl` field (see lua/includes/ratelimit.lua).
pub fn policy_spec(p: &RateLimitPolicy) -> String {
    let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_else(|| "-".into());
    let mut spec = format!(
        "{} {} {} {} {} {}",
        opt(p.concurrency),
        opt(p.rate.map(|w| w.limit)),
        opt(p.rate.map(|w| w.period_ms)),
        opt(p.throttle.map(|w| w.limit)),
        opt(p.throttle.map(|w| w.period_ms)),
        p.on_limit.as_str()
    );
    // The job's cost, only when it is not the default: a job without one keeps the six-field spec.
    if p.cost != 1 {
        spec.push_str(&format!(" {}", p.cost));
    }
    // An adaptive policy's token, `~N[:types]` (ours).
    if let Some(a) = &p.adaptive {
        spec.push(' ');
        spec.push_str(&a.spec_token());
    }
    // A floor's token, `f<floor>` (ours: burstable concurrency).
    if let Some(f) = p.floor {
        spec.push_str(&format!(" f{f}"));
    }
    spec
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

/// How many times an enqueue is sent when the script finds a newer tenancy setting each time.
const TENANCY_TRIES: usize = 3;
/// How many times an enqueue is checked again after the schema registry changed under it (each a read
/// of the registry and a script call): an operator's burst of changes, not a steady state.
const SCHEMA_TRIES: usize = 10;

/// The reply of an all-or-nothing creation (enqueue-1.lua's `all`, workflow-create-1.lua).
pub(super) fn enqueue_outcome(r: &Reply) -> Result<EnqueueOutcome> {
    Ok(match r.tag()? {
        "ok" => EnqueueOutcome::Created(Enqueued::from_reply(r)?),
        "duplicate" => EnqueueOutcome::Duplicate(r.str(1)?),
        "conflict" => EnqueueOutcome::Conflict {
            index: r.i64(1)?.max(0) as usize,
            existing_id: r.str(2)?,
            existing_state: r.str(3)?,
            // '' when the job it met is stored, not earlier in the batch.
            existing_index: r.str(4)?.parse().ok(),
        },
        "full" => EnqueueOutcome::Full(Pressure {
            queue: r.str(1)?,
            depth: r.i64(2)?.max(0) as u64,
            bound: r.i64(3)?.max(0) as u64,
            warning_threshold: 1.0,
            strategy: r.str(4)?,
        }),
        _ => return Err(r.unknown_tag()),
    })
}

impl Store {
    /// Enqueues a batch, all or nothing: any duplicate id and nothing is written.
    pub async fn enqueue(&self, jobs: &[NewJob]) -> Result<EnqueueOutcome> {
        let items = self.enqueue_script(jobs, "all").await?;
        enqueue_outcome(&Reply::new(self.scripts.enqueue.name, &items))
    }

    /// Enqueues independent jobs in one script call (the server's coalesced single enqueues): each job
    /// stands alone (see [`Enqueued::states`]); a unique duplicate meets the jobs before it in the call
    /// exactly as stored ones.
    pub async fn enqueue_each(&self, jobs: &[NewJob]) -> Result<Enqueued> {
        let items = self.enqueue_script(jobs, "each").await?;
        let r = Reply::new(self.scripts.enqueue.name, &items);
        match r.tag()? {
            "ok" => Enqueued::from_reply(&r),
            _ => Err(r.unknown_tag()),
        }
    }

    /// One enqueue call, its jobs' args checked with this pod's copy of the schema registry
    /// (schema_cache.rs); the script refuses a stale copy (`{'schemas', stamp}`), which is then
    /// reloaded and the args checked again, as a stale tenancy setting is (`create_call`).
    async fn enqueue_script(&self, jobs: &[NewJob], mode: &str) -> Result<Vec<Value>> {
        for _ in 0..SCHEMA_TRIES {
            let stamp = self.check_args(jobs).await?;
            let items = self
                .create_call(&self.scripts.enqueue, jobs, |jobs| {
                    self.enqueue_args(jobs, mode, &stamp)
                })
                .await?;
            let r = Reply::new(self.scripts.enqueue.name, &items);
            if r.tag()? != "schemas" {
                return Ok(items);
            }
            self.schemas_seen(&r.str(1)?, &stamp).await?;
        }
        Err(crate::store::StoreError::Contended(format!(
            "the schema registry changed {SCHEMA_TRIES} times while this enqueue was checked against it; nothing was written: retry"
        )))
    }

    /// The script's arguments, in the order of its header: bytes, since a job's cold fields are a
    /// MessagePack map ([`ColdFields`]).
    fn enqueue_args(&self, jobs: &[NewJob], mode: &str, schemas: &str) -> Vec<Vec<u8>> {
        let mut args = Vec::with_capacity(EnqueueArgs::LEN + jobs.len() * JobRecord::LEN);
        EnqueueArgs {
            prefix: self.keys().prefix().into(),
            n: jobs.len().to_string(),
            mode: mode.into(),
            retention_ms: self.cfg.retention_ms.to_string(),
            schemas: schemas.into(),
        }
        .push(&mut args);
        push_jobs(jobs, &mut args);
        args
    }

    /// Calls `script`, a script that creates `jobs` (includes/create.lua), with the arguments `args`
    /// makes of them. Each job's tenant is resolved with its queue's tenancy setting first
    /// (tenancy.rs); when the script finds a setting other than the one used (another pod changed it),
    /// it writes nothing and answers `{'tenancy', queue, setting}`: the jobs are resolved again with it
    /// and sent once more.
    pub(super) async fn create_call(
        &self,
        script: &crate::store::Named,
        jobs: &[NewJob],
        args: impl Fn(&[NewJob]) -> Vec<Vec<u8>>,
    ) -> Result<Vec<Value>> {
        for _ in 0..TENANCY_TRIES {
            let resolved = self.resolve_tenants(jobs).await?;
            let items = self.run(script, &[self.keys().queues()], args(&resolved)).await?;
            let r = Reply::new(script.name, &items);
            if r.tag()? != "tenancy" {
                return Ok(items);
            }
            self.tenancy_seen(&r.str(1)?, &r.str(2)?);
        }
        Err(crate::store::StoreError::Unavailable(
            "a queue's tenancy setting kept changing during the enqueue; retry".into(),
        ))
    }
}

/// Appends each job's JOB record (includes/create.lua) to a creating script's arguments.
pub(super) fn push_jobs(jobs: &[NewJob], args: &mut Vec<Vec<u8>>) {
    for j in jobs {
        job_record(j).push(args);
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

/// One job's JOB record.
fn job_record(j: &NewJob) -> JobRecord {
    let unique = j.unique.as_ref();
    let root = j.root_job.as_ref();
    JobRecord {
        id: j.id.clone(),
        queue: j.queue.clone(),
        job_type: j.job_type.clone(),
        rank: j.rank.to_string(),
        cold: ColdFields::of(j).packed(),
        timeout_ms: j.timeout_ms.to_string(),
        visibility_ms: j.visibility_ms.to_string(),
        expires_at: j.expires_at_ms.to_string(),
        scheduled_at: j.scheduled_at_ms.to_string(),
        delay_ms: j.delay_ms.to_string(),
        priority: j.priority.to_string(),
        rl_key: j.rate_limit.as_ref().map(|r| r.key.clone()).unwrap_or_default(),
        rl_policy: j.rate_limit.as_ref().map(policy_spec).unwrap_or_default(),
        expires_in_ms: j.expires_in_ms.to_string(),
        // Scoped to the tenant the job was resolved with: one tenant's jobs never meet another's.
        unique_key: unique.map(|u| j.scoped(&u.key)).unwrap_or_default(),
        unique_states: unique.map(|u| u.states.join(",")).unwrap_or_default(),
        unique_period_ms: unique.map_or(0, |u| u.period_ms).to_string(),
        on_conflict: unique.map(|u| u.on_conflict.as_str()).unwrap_or_default().into(),
        dedup: j.dedup.as_ref().map(|d| j.scoped(&d.key)).unwrap_or_default(),
        root: root.map(|r| j.scoped(&r.key)).unwrap_or_default(),
        root_ts: root.map_or(0, |r| r.timestamp_ms).to_string(),
        root_self: if root.is_some_and(|r| r.is_root) { "1" } else { "0" }.into(),
        tenant: j.tenant.clone().unwrap_or_default(),
        tenancy: j.tenancy.clone(),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use ojs_core::ratelimit::{OnLimit, Window};
    use ojs_core::unique::{OnConflict, RootJob, UniquePolicy};

    use super::*;

    /// A plain job of type `email` on queue `q` (the other twins' tests use it too).
    pub(crate) fn job(id: &str) -> NewJob {
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
            tenant: None,
            tenant_pinned: false,
            tenancy: String::new(),
            version: None,
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
            cost: 1,
            adaptive: None,
            floor: None,
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
        let args = s.enqueue_args(&[job("a"), b], "all", "st");
        let text = |a: &[u8]| String::from_utf8_lossy(a).into_owned();
        assert_eq!(args.len(), EnqueueArgs::LEN + 2 * JobRecord::LEN);
        assert_eq!(
            args[..EnqueueArgs::LEN].iter().map(|a| text(a)).collect::<Vec<_>>(),
            ["ojs:{t}:", "2", "all", "86400000", "st"]
        );
        // Job i's field `name` is at its offset in the header's record, after the fixed arguments and
        // the i records before it.
        let at = |i: usize, name: &str| {
            let k = JobRecord::NAMES.iter().position(|n| *n == name).expect(name);
            &args[EnqueueArgs::LEN + i * JobRecord::LEN + k]
        };
        let field = |i: usize, name: &str| text(at(i, name));
        assert_eq!(
            ["id", "queue", "job_type", "rank"].map(|n| field(0, n)),
            ["a", "q", "email", "-5"]
        );
        // The cold fields, a MessagePack map, as a record's `cold` field reads.
        let cold: crate::store::Fields = crate::reply::decode_record(at(0, "cold")).expect("a record");
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
            ["delay_ms", "priority", "rl_key", "root_self"].map(|n| field(0, n)),
            ["250", "5", "", "0"]
        );
        assert_eq!(
            ["id", "rl_key", "rl_policy"].map(|n| field(1, n)),
            ["b", "k", "2 10 1000 - - wait"]
        );
        assert_eq!(
            ["unique_key", "unique_states", "unique_period_ms", "on_conflict"].map(|n| field(1, n)),
            ["u", "available,active", "60000", "reject"]
        );
        assert_eq!(
            ["dedup", "root", "root_ts", "root_self"].map(|n| field(1, n)),
            ["d", "r", "7", "1"]
        );
    }

    #[test]
    fn an_enqueue_reply_that_breaks_its_header_is_a_protocol_error() {
        let s = |t: &str| Value::BulkString(t.as_bytes().to_vec());
        let reply = |pressure: Vec<Value>, found: Vec<Value>| {
            vec![
                s("ok"),
                Value::Int(7),
                Value::Array(vec![s("available")]),
                Value::Array(pressure),
                Value::Array(found),
            ]
        };
        let read = |items: &[Value]| Enqueued::from_reply(&Reply::new("enqueue", items));
        let good = read(&reply(
            vec![s("q"), Value::Int(3), Value::Int(10), s("0.8"), s("reject")],
            vec![Value::Array(vec![])],
        ))
        .expect("a reply as the header says");
        assert_eq!(
            (good.now_ms, good.states.as_slice()),
            (7, ["available".to_string()].as_slice())
        );
        assert_eq!((good.pressure[0].depth, good.pressure[0].bound), (3, 10));
        for (what, bad) in [
            (
                "a short pressure",
                reply(vec![s("q"), Value::Int(3)], vec![Value::Array(vec![])]),
            ),
            (
                "a depth that is no number",
                reply(vec![s("q"), s("x"), Value::Int(10), s("0.8"), s("reject")], vec![]),
            ),
            (
                "a threshold that is no number",
                reply(
                    vec![s("q"), Value::Int(3), Value::Int(10), s("high"), s("reject")],
                    vec![],
                ),
            ),
            (
                "a found entry of one item",
                reply(vec![], vec![Value::Array(vec![s("id")])]),
            ),
            ("a state that is an array", {
                let mut r = reply(vec![], vec![]);
                r[2] = Value::Array(vec![Value::Array(vec![])]);
                r
            }),
        ] {
            assert!(
                matches!(read(&bad), Err(crate::store::StoreError::Protocol(_))),
                "{what}: {:?}",
                read(&bad)
            );
        }
    }

    /// The default policy's spec as a job carries it is the one the library falls back on for a record
    /// without one (both from ojs-core's retry_defaults.rs; this holds the formatting to it).
    #[test]
    fn the_default_backoff_is_the_librarys() {
        assert_eq!(backoff_spec(&RetryPolicy::default()), crate::scripts::RETRY_BACKOFF);
        // Named constants are inlined (build.rs inline_constants): fail.lua's fallback reads 3.
        assert!(crate::scripts::LIBRARY.contains("num(f.max_attempts, 3)"));
        assert!(!crate::scripts::LIBRARY.contains("RETRY_MAX_ATTEMPTS"));
    }

    #[test]
    fn the_cold_fields_packed_here_are_the_ones_record_lua_keeps_in_cold() {
        let mut lua = crate::reply::cold_fields();
        lua.sort_unstable();
        assert!(lua.contains(&"doc"), "REC_COLD as read from record.lua: {lua:?}");
        let mut j = job("a");
        j.retry.non_retryable_errors = vec!["Fatal".into()];
        let packed: crate::store::Fields = crate::reply::decode_record(&ColdFields::of(&j).packed()).expect("a record");
        let mut rust: Vec<&str> = packed.keys().map(String::as_str).collect();
        rust.sort_unstable();
        assert_eq!(rust, lua);
    }
}
