//! Model-based test: random sequences of operations against two `ojs-server` processes sharing one
//! namespace. Every answer and every job's state is compared with a small reference model after each
//! step, and the keyspace invariants are checked after each sequence.
//!
//! The model describes the lease contract: every claim gets a fresh `lease_id`; ACK/NACK naming a lease
//! (or an `attempt`, with or without `worker_id`) the job no longer holds is 409 `lease_lost` and changes
//! nothing; ACK/NACK naming nothing act on the current holder, else 409 `conflict`; a heartbeat without
//! `visibility_timeout_ms` extends by FETCH's lease length and lists what it did not extend in
//! `lost_jobs`; a key's limits are the policy of the newest job enqueued with it, with an operator
//! override on top; a job of `rate_limit.cost` c holds min(c, limit) (at least 1) units of its key's
//! concurrency while active, as many as it was given when claimed, and a key's jobs in a queue start in
//! order: one that does not fit holds back the key's others behind it; an adaptive key's concurrency
//! halves (at least 1) on a "Throttled" NACK of a job that started in the current round of decreases
//! (the job keeps its attempt), and rises by one every ADAPT_AFTER ACKs made while all its slots are
//! taken, back to its policy's.
//!
//! Pools (burstable concurrency, and a tenant's concurrency). Each queue starts with a queue-level
//! concurrency of POOL, and every job of `qb` belongs to tenant TENANT (t1), whose cap in `qb` (the
//! queue's tenancy setting, `default_concurrency`) starts at TENANT_CAP; operations set (1 to 4) or
//! remove a queue's concurrency (`PUT`/`DELETE /admin/queues/{q}/rate-limit`) and replace `qb`'s
//! tenancy with a cap (1 to 3) or without one, while jobs run. A queue starts a job only while each of
//! its pools has a free slot: its concurrency, held by the jobs claimed while it had one
//! (lua/fetch-1.lua takes a queue slot only then, and the job keeps it while active), and for `qb`
//! TENANT's cap, held by every active job of `qb` (a tenant's job always takes its slot, so a cap set
//! later counts it). Each key carries its floor FLOORS[k] (at most the job's concurrency) in every job;
//! a lane's floor draws from the pool rl_pool.lua `Pool.pick` names: in `qb` TENANT's cap when it
//! has one, else the queue's concurrency, else none (the floor means nothing). A key holding at least
//! its floor (at most its limit) borrows: it starts only while that pool's holders plus the floors
//! owed there leave a slot; a key owes its floor minus its active jobs (in any queue) in the pool of
//! each queue where it has available jobs. A changed setting takes effect at once: the floors owed
//! follow their pools in the very request (the model has no notion of a later sync).
//!
//! Actors. The pods run with `OJS_API_KEYS`: ADMIN_KEY, which the harness's clients send by default,
//! and keys bound to t1 and to t2 (`worker@t1:…`, `worker@t2:…`; t2 owns no job). Every worker
//! operation (FETCH, ACK with or without its fetch, NACK, heartbeat, cancel, PATCH, and an enqueue into
//! `qb`) goes plain (every tenant's jobs), with `X-OJS-Tenant: t1|t2` (and the admin key), or with t1's
//! or t2's key. A request acting as a tenant sees that tenant's jobs only (`qa`'s have none, `qb`'s are
//! t1's): another's ACK, NACK, cancel and PATCH answer 404 `not_found` and change nothing (the sweep
//! after each step reads every job's state, attempt and priority from Redis); a heartbeat reports it
//! `missing` (in `lost_jobs`), extends nothing, and its `lease_until` in Redis is the same before and
//! after; FETCH claims only the tenant's jobs; an enqueue into `qb` acting as t2 whose body names t1 is
//! 403 `forbidden` with t2's key, 400 `invalid_request` with the header, and writes no job record (they
//! are counted); acting as t1 the body may leave the tenant out (it is stamped).
//!
//! Invariants. After every step: each job's state, attempt and priority; each key's limit and active
//! units (GET /rate-limits/{key}); each queue's concurrency, active slots and `floors_owed` (GET
//! /admin/queues/{q}/rate-limit); and from Redis, each pool's slots held (the queue's and TENANT's
//! `rl:active` sets, each key's) equal the model's holders, and the floors owed in each pool (the
//! `want` of the queue's conf and of `qb@t1`'s, in the queue's current pool generation) equal what the
//! waiting lanes owe, computed by the model from scratch. After the sequence: the keyspace invariants
//! (crates/ojs-testkit/src/invariants.rs); then every job still waiting or running is cancelled, each
//! queue fetched once (a tenant with nothing left leaves the fair share at a FETCH), the invariants
//! checked again, and no key named after a user value (a queue, a sub-queue, a rate-limit key, a
//! tenant, a job, a worker) is left without a TTL but those meant to persist (`persistent`): a queue's
//! settings and counters (`q:qa:conf`, `q:qb:conf`, `q:Q:stats`) and a key's operator override.
//!
//! Where timing decides, the harness waits instead of guessing, so no assertion depends on how fast the
//! machine is: a retry that comes due in milliseconds is awaited until it is available again before the
//! next step; a clock advance sleeps past every short lease and polls until the reaper took them all.
//! So the window in which a lease lapsed but was not yet reaped (where the contract still accepts
//! ACK/NACK, and a heartbeat must not revive it) is not exercised here. Only `on_limit: wait` is
//! generated: with `drop` or `reschedule`, which job meets a full key depends on when the timer re-opens
//! a parked lane.
//!
//! `OJS_MODEL_LEGACY=1` runs the same sequences against a server from before that contract, to check the
//! harness itself: leases and lease identities are ignored, each key keeps the policy of its first job,
//! and heartbeats name their lease length; every request is plain (no keys, no tenants, no tenancy),
//! the settings operations are skipped, and the keyspace is not checked after the drain.
//!
//! `two_nodes_on_two_shards_agree_with_the_model` runs the same with `--shards 2`, `qa` on shard 0 and
//! `qb` on shard 1 (issue 22): FETCH, ACK, heartbeats and by-id requests then cross shards. A key there
//! belongs to one queue (k1 to qa, k2 to qb) and overrides name k1, as a sharded deployment requires
//! (a key or an override over two shards is refused by design, tested in tests/shards.rs).
//!
//! `PROPTEST_CASES` overrides the number of cases, `OJS_MODEL_SEED` fixes the random seed (printed at
//! the start, so a failure can be replayed), `OJS_MODEL_TRACE=1` prints every case's steps.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ojs_core::clock::{local_now_ms, parse_ms};
use ojs_testkit::TestServer;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestError, TestRunner};
use reqwest::Method;
use serde_json::{json, Value};

/// FETCH's lease. Long enough that a slow step never lets one lapse unplanned (the harness also
/// re-heartbeats leases older than KEEPALIVE_AFTER), short enough that a clock advance is cheap.
const LEASE_MS: i64 = 1000;
const KEEPALIVE_AFTER: Duration = Duration::from_millis(400);
/// A heartbeat lease that outlives any case: such jobs must survive clock advances.
const LONG_MS: i64 = 60_000;
/// Clock advances cost real time; more than two per sequence add little.
const MAX_ADVANCES: usize = 2;
const SETTLE: Duration = Duration::from_secs(10);

const QUEUES: [&str; 2] = ["qa", "qb"];
/// Each queue's concurrency: the pool its keys' floors share.
const POOL: u32 = 3;
/// Each key's floor (every job of the key carries it, clamped to the job's concurrency, so that every
/// release knows the key has one: lua/includes/ratelimit.lua reads it from the releasing job).
const FLOORS: [u32; 2] = [1, 2];
const KEYS: [&str; 2] = ["k1", "k2"];
/// The tenant of every job of `qb` (QUEUES[1]), and its concurrency there.
const TENANT: &str = "t1";
const TENANT_CAP: u32 = 2;
/// The tenants a request may act as: TENANT (t1) and a foreign one that owns no job.
const TENANTS: [&str; 2] = [TENANT, "t2"];
const WORKERS: [&str; 3] = ["w1", "w2", "w3"];
/// The pods' API keys (`OJS_API_KEYS`): the harness's clients send ADMIN_KEY by default; a request
/// acting by key sends the key bound to its tenant instead.
const ADMIN_KEY: &str = "model-admin-key-0123456789";
const TENANT_KEYS: [&str; 2] = ["model-t1-key-0123456789", "model-t2-key-0123456789"];

// ---------------------------------------------------------------------------------------------------
// Operations

/// Which job an operation names. Resolved against the model when the step runs, so that ACKs and NACKs
/// mostly hit jobs that are (or were) active instead of missing them at random.
#[derive(Clone, Debug)]
enum JobRef {
    Unknown,
    Any(usize),
    Active(usize),
    Claimed(usize),
}

/// How a worker request names its tenant: not at all (the admin key, every tenant's jobs), by
/// `X-OJS-Tenant` (with the admin key), or by the key bound to the tenant (TENANTS[t]).
#[derive(Clone, Copy, Debug)]
enum Via {
    Plain,
    Header(usize),
    Key(usize),
}

impl Via {
    /// The tenant the request acts as.
    fn acting(self) -> Option<usize> {
        match self {
            Via::Plain => None,
            Via::Header(t) | Via::Key(t) => Some(t),
        }
    }
}

#[derive(Clone, Debug)]
enum WorkerSel {
    Omit,
    OfClaim,
    Other(usize),
}

/// How an ACK/NACK identifies the claim it answers for. `back` counts claims of the job from the
/// newest (0) to older ones (stale).
#[derive(Clone, Debug)]
enum Ident {
    None,
    Lease { back: usize },
    Attempt { back: usize, worker: WorkerSel },
}

/// A job to enqueue: `limit` is (key, concurrency, cost); a `slow_retry` job waits an hour before a
/// retry; a `delayed` one is scheduled an hour ahead.
#[derive(Clone, Debug)]
struct NewJob {
    queue: usize,
    priority: Option<u32>,
    limit: Option<(usize, u32, u32)>,
    /// Its policy is adaptive (`increase_after` ADAPT_AFTER, error type "Throttled").
    adaptive: bool,
    max_attempts: Option<u32>,
    slow_retry: bool,
    delayed: bool,
    /// How an enqueue into `qb` acts (an enqueue into `qa` is always plain), and whether a request
    /// acting as t1 still names t1 in `meta.tenant_id` (acting as t2 it always does: refused).
    via: Via,
    named: bool,
}

/// A worker's heartbeat: it names the jobs the model says it holds, plus maybe one more (`extra`);
/// `objects` sends `{job_id, lease_id}` entries (with an older lease for `extra` when `stale`); `long`
/// asks for a lease that outlives the case.
#[derive(Clone, Debug)]
struct Beat {
    worker: usize,
    extra: Option<JobRef>,
    objects: bool,
    stale: bool,
    long: bool,
}

#[derive(Clone, Debug)]
enum Op {
    Enqueue {
        node: usize,
        job: NewJob,
    },
    Fetch {
        node: usize,
        worker: usize,
        queues: Vec<usize>,
        via: Via,
    },
    Ack {
        node: usize,
        job: JobRef,
        ident: Ident,
        fetch_next: Option<(usize, Vec<usize>)>,
        via: Via,
    },
    Nack {
        node: usize,
        job: JobRef,
        ident: Ident,
        requeue: bool,
        /// The error's type is the adaptive policies' "Throttled".
        throttled: bool,
        via: Via,
    },
    Heartbeat {
        node: usize,
        beat: Beat,
        via: Via,
    },
    Cancel {
        node: usize,
        job: JobRef,
        via: Via,
    },
    Patch {
        node: usize,
        job: JobRef,
        priority: u32,
        via: Via,
    },
    /// The queue's concurrency (the pool its keys' floors share) set, or removed (None).
    SetPool {
        node: usize,
        queue: usize,
        concurrency: Option<u32>,
    },
    /// `qb`'s tenancy setting replaced, with a `default_concurrency` (TENANT's cap there) or without.
    SetTenantCap {
        node: usize,
        cap: Option<u32>,
    },
    SetOverride {
        node: usize,
        key: usize,
        concurrency: u32,
    },
    LiftOverride {
        node: usize,
        key: usize,
    },
    Advance,
}

fn via() -> impl Strategy<Value = Via> {
    prop_oneof![
        4 => Just(Via::Plain),
        1 => (0..2usize).prop_map(Via::Header),
        1 => (0..2usize).prop_map(Via::Key),
    ]
}

fn job_ref() -> impl Strategy<Value = JobRef> {
    prop_oneof![
        1 => Just(JobRef::Unknown),
        4 => any::<u8>().prop_map(|n| JobRef::Any(n as usize)),
        6 => any::<u8>().prop_map(|n| JobRef::Active(n as usize)),
        3 => any::<u8>().prop_map(|n| JobRef::Claimed(n as usize)),
    ]
}

fn ident() -> impl Strategy<Value = Ident> {
    prop_oneof![
        3 => Just(Ident::None),
        4 => Just(Ident::Lease { back: 0 }),
        3 => Just(Ident::Lease { back: 1 }),
        1 => (0..2usize).prop_map(|back| Ident::Attempt { back, worker: WorkerSel::Omit }),
        2 => (0..2usize).prop_map(|back| Ident::Attempt { back, worker: WorkerSel::OfClaim }),
        1 => (0..3usize).prop_map(|w| Ident::Attempt { back: 0, worker: WorkerSel::Other(w) }),
    ]
}

fn queues() -> impl Strategy<Value = Vec<usize>> {
    prop_oneof![
        2 => (0..2usize).prop_map(|q| vec![q]),
        1 => Just(vec![0, 1]),
        1 => Just(vec![1, 0]),
    ]
}

fn enqueue() -> impl Strategy<Value = Op> {
    (
        0..2usize,
        0..2usize,
        proptest::option::of(0..5u32),
        proptest::option::weighted(0.5, (0..2usize, 0..4u32, prop_oneof![3 => Just(1u32), 1 => 2..5u32])),
        proptest::option::of(1..4u32),
        proptest::bool::weighted(0.3),
        proptest::bool::weighted(0.1),
        proptest::bool::weighted(0.4),
        (via(), any::<bool>()),
    )
        .prop_map(
            |(node, queue, priority, limit, max_attempts, slow_retry, delayed, adaptive, (via, named))| Op::Enqueue {
                node,
                job: NewJob {
                    queue,
                    priority,
                    limit,
                    adaptive: adaptive && limit.is_some(),
                    max_attempts,
                    slow_retry,
                    delayed,
                    via,
                    named,
                },
            },
        )
}

/// A few enqueues first, so that most of a sequence has work to claim.
fn sequence() -> impl Strategy<Value = Vec<Op>> {
    (
        proptest::collection::vec(enqueue(), 3..=6),
        proptest::collection::vec(op(), 20..=34),
    )
        .prop_map(|(mut a, b)| {
            a.extend(b);
            a
        })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => enqueue(),
        7 => (0..2usize, 0..3usize, queues(), via())
            .prop_map(|(node, worker, queues, via)| Op::Fetch { node, worker, queues, via }),
        3 => (0..2usize, job_ref(), ident(), proptest::option::weighted(0.2, (0..3usize, queues())), via())
            .prop_map(|(node, job, ident, fetch_next, via)| Op::Ack { node, job, ident, fetch_next, via }),
        3 => (
            0..2usize,
            job_ref(),
            ident(),
            proptest::bool::weighted(0.3),
            proptest::bool::weighted(0.4),
            via()
        )
            .prop_map(|(node, job, ident, requeue, throttled, via)| Op::Nack {
                node,
                job,
                ident,
                requeue,
                throttled,
                via
            }),
        2 => (
            0..2usize,
            0..3usize,
            proptest::option::of(job_ref()),
            any::<bool>(),
            any::<bool>(),
            proptest::bool::weighted(0.3),
            via(),
        )
            .prop_map(|(node, worker, extra, objects, stale, long, via)| Op::Heartbeat {
                node,
                beat: Beat { worker, extra, objects, stale, long },
                via,
            }),
        1 => (0..2usize, job_ref(), via()).prop_map(|(node, job, via)| Op::Cancel { node, job, via }),
        1 => (0..2usize, job_ref(), 0..5u32, via())
            .prop_map(|(node, job, priority, via)| Op::Patch { node, job, priority, via }),
        1 => (0..2usize, 0..2usize, proptest::option::weighted(0.7, 1..5u32))
            .prop_map(|(node, queue, concurrency)| Op::SetPool { node, queue, concurrency }),
        1 => (0..2usize, proptest::option::weighted(0.6, 1..4u32)).prop_map(|(node, cap)| Op::SetTenantCap { node, cap }),
        1 => (0..2usize, 0..2usize, 0..3u32)
            .prop_map(|(node, key, concurrency)| Op::SetOverride { node, key, concurrency }),
        1 => (0..2usize, 0..2usize).prop_map(|(node, key)| Op::LiftOverride { node, key }),
        1 => Just(Op::Advance),
    ]
}

// ---------------------------------------------------------------------------------------------------
// The reference model

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum St {
    Available,
    Scheduled,
    Active,
    Retryable,
    Completed,
    Cancelled,
    Discarded,
}

impl St {
    fn as_str(self) -> &'static str {
        match self {
            St::Available => "available",
            St::Scheduled => "scheduled",
            St::Active => "active",
            St::Retryable => "retryable",
            St::Completed => "completed",
            St::Cancelled => "cancelled",
            St::Discarded => "discarded",
        }
    }
}

struct Claim {
    lease_id: Option<String>,
    attempt: u32,
    worker: usize,
}

#[derive(Clone, Copy)]
struct Lease {
    long: bool,
    /// When the request that granted or last extended the lease was sent: the server's deadline is at
    /// least this plus the lease length, which is what the keep-alive needs.
    sent: Instant,
}

struct MJob {
    id: String,
    queue: usize,
    priority: u32,
    key: Option<usize>,
    /// Its `rate_limit.cost`, and the units of its key's concurrency it holds while active (its cost,
    /// at most the limit when it was claimed, at least 1).
    cost: u32,
    held: u32,
    /// It holds one of its queue's concurrency slots: it was claimed while the queue had a
    /// concurrency (lua/fetch-1.lua takes a queue slot only then; the slot stays the job's while it is
    /// active, whatever the setting does meanwhile).
    qslot: bool,
    /// Its own policy is adaptive, and the round of its key's decreases its last claim started in
    /// (None when the key's policy was not adaptive then).
    adaptive: bool,
    round: Option<u32>,
    max_attempts: u32,
    slow_retry: bool,
    state: St,
    attempt: u32,
    /// FIFO position within a priority: every time a job becomes available it goes to the back.
    seq: u64,
    holder: Option<usize>,
    lease: Option<Lease>,
    claims: Vec<Claim>,
}

/// The identity an ACK/NACK carried.
#[derive(Default, Debug)]
struct Sent {
    lease: Option<String>,
    attempt: Option<u32>,
    worker: Option<usize>,
}

impl Sent {
    fn is_empty(&self) -> bool {
        self.lease.is_none() && self.attempt.is_none() && self.worker.is_none()
    }
}

struct Model {
    legacy: bool,
    jobs: Vec<MJob>,
    next_seq: u64,
    /// The policy (concurrency) of the newest job enqueued with each key, and its floor.
    policy: [Option<u32>; 2],
    floor: [Option<u32>; 2],
    overrides: [Option<u32>; 2],
    /// Whether the newest job of each key had an adaptive policy, and each key's adaptation.
    adaptive: [bool; 2],
    adapt: [Adapt; 2],
    /// Each queue's concurrency (None: removed), and TENANT's cap in `qb` (None: the tenancy setting
    /// has no `default_concurrency`).
    qconc: [Option<u32>; 2],
    tcap: Option<u32>,
}

/// A pool floors are owed in (rl_pool.lua Pool.pick): a queue's concurrency, or TENANT's cap in `qb`
/// (its sub-queue `qb@t1`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Pool {
    Queue(usize),
    Tenant,
}

/// Successes per step up in the generated adaptive policies.
const ADAPT_AFTER: u32 = 2;

/// A key's adaptation (lua/includes/rl_adaptive.lua): its effective concurrency while below
/// the policy's, successes toward the next step, and how many decreases it has had.
#[derive(Clone, Copy, Debug, Default)]
struct Adapt {
    conc: Option<u32>,
    ok: u32,
    round: u32,
}

impl Model {
    /// The key's limit in force: the override, else its policy under adaptation (when adaptive).
    fn limit(&self, k: usize) -> Option<u32> {
        self.overrides[k].or(self.policy[k].map(|p| match (self.adaptive[k], self.adapt[k].conc) {
            (true, Some(a)) => p.min(a),
            _ => p,
        }))
    }

    /// The NACK of job i reported "Throttled" and both its own and its key's policies are adaptive:
    /// halve the key's concurrency (never below 1) unless the job started before the last decrease.
    fn adapt_down(&mut self, k: usize, i: usize) {
        let policy = self.policy[k].unwrap_or(0);
        let a = &mut self.adapt[k];
        if self.jobs[i].round.unwrap_or(0) != a.round {
            return;
        }
        if policy >= 1 {
            let cur = a.conc.unwrap_or(policy);
            let to = (cur / 2).max(1);
            if to != cur {
                a.conc = Some(to);
            }
        }
        a.ok = 0;
        a.round += 1;
    }

    /// The ACK of an active job of an adaptive key while its slots are all taken counts toward a step
    /// up; ADAPT_AFTER of them raise the concurrency by one, back to the policy's at most.
    fn adapt_up(&mut self, k: usize) {
        let Some(cur) = self.adapt[k].conc else {
            return;
        };
        let holders = self
            .jobs
            .iter()
            .filter(|j| j.state == St::Active && j.key == Some(k))
            .count() as u32;
        if holders < cur {
            return;
        }
        let policy = self.policy[k].unwrap_or(0);
        let a = &mut self.adapt[k];
        a.ok += 1;
        if a.ok < ADAPT_AFTER {
            return;
        }
        a.conc = (cur + 1 < policy).then_some(cur + 1);
        a.ok = 0;
    }

    /// The units of a limit a job of `cost` takes: its cost, at most the limit, at least 1.
    fn units(cost: u32, limit: u32) -> u32 {
        cost.min(limit).max(1)
    }

    /// The units of key k's concurrency that its active jobs hold.
    fn active_of(&self, k: usize) -> u32 {
        self.jobs
            .iter()
            .filter(|j| j.state == St::Active && j.key == Some(k))
            .map(|j| j.held)
            .sum()
    }

    fn make_available(&mut self, i: usize) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let j = &mut self.jobs[i];
        j.state = St::Available;
        j.seq = seq;
        j.holder = None;
        j.lease = None;
    }

    fn finish(&mut self, i: usize, st: St) {
        let j = &mut self.jobs[i];
        j.state = st;
        j.holder = None;
        j.lease = None;
    }

    /// Jobs of key k holding a slot (in any queue): what a floor counts.
    fn holders_of(&self, k: usize) -> u32 {
        self.jobs
            .iter()
            .filter(|j| j.state == St::Active && j.key == Some(k))
            .count() as u32
    }

    /// Key k's floor in force: its policy's, at most its limit (an override or adaptation lowers it).
    fn floor_of(&self, k: usize) -> Option<u32> {
        Some(self.floor[k]?.min(self.limit(k)?))
    }

    /// The tenant of job i (an index of TENANTS): every job of `qb` is TENANT's, `qa`'s have none.
    fn tenant_of(&self, i: usize) -> Option<usize> {
        (self.jobs[i].queue == 1 && !self.legacy).then_some(0)
    }

    /// Job i exists for a request acting as `acting`: one acting as a tenant sees that tenant's jobs
    /// only.
    fn visible(&self, i: usize, acting: Option<usize>) -> bool {
        acting.is_none() || self.tenant_of(i) == acting
    }

    /// The pool a lane of queue q draws its floor from, and its size (rl_pool.lua Pool.pick): in `qb`
    /// (TENANT's sub-queue) the tenant's cap when it has one, else the queue's concurrency, else none.
    fn lane_pool(&self, q: usize) -> Option<(Pool, u32)> {
        if q == 1 {
            if let Some(c) = self.tcap {
                return Some((Pool::Tenant, c));
            }
        }
        self.qconc[q].map(|c| (Pool::Queue(q), c))
    }

    /// Jobs of queue q holding one of its concurrency slots.
    fn qslot_held(&self, q: usize) -> u32 {
        self.jobs
            .iter()
            .filter(|j| j.state == St::Active && j.queue == q && j.qslot)
            .count() as u32
    }

    /// TENANT's jobs holding one of its slots in `qb`: every active one (a claimed tenant's job holds
    /// one whether or not the tenant has a cap: lua/fetch-1.lua, so a cap set later counts it).
    fn tenant_held(&self) -> u32 {
        if self.legacy {
            return 0;
        }
        self.jobs
            .iter()
            .filter(|j| j.state == St::Active && j.queue == 1)
            .count() as u32
    }

    fn pool_holders(&self, p: Pool) -> u32 {
        match p {
            Pool::Queue(q) => self.qslot_held(q),
            Pool::Tenant => self.tenant_held(),
        }
    }

    /// The floors pool p owes, computed from scratch: over the lanes that draw from it (a key's jobs
    /// waiting in a queue whose lanes' pool is p), the key's floor less its holders (in any queue).
    fn pool_owed(&self, p: Pool) -> u32 {
        (0..QUEUES.len())
            .filter(|&q| self.lane_pool(q).map(|(lp, _)| lp) == Some(p))
            .flat_map(|q| {
                (0..KEYS.len()).filter(move |&k| {
                    self.jobs
                        .iter()
                        .any(|j| j.state == St::Available && j.queue == q && j.key == Some(k))
                })
            })
            .filter_map(|k| Some(self.floor_of(k)?.saturating_sub(self.holders_of(k))))
            .sum()
    }

    /// Queues in the order given, skipping one with none of the jobs the request may see (acting as a
    /// tenant: that tenant's), or a pool of which (its concurrency, TENANT's cap) is full; within a
    /// queue priority then FIFO, skipping jobs whose key is at its concurrency limit (a limited job
    /// never blocks a free one of another key behind it) or at its floor while the free slots of its
    /// lane's pool are owed.
    fn predict_fetch(&self, queues: &[usize], acting: Option<usize>) -> Option<usize> {
        for &q in queues {
            if acting.is_some_and(|t| q != 1 || t != 0) {
                continue;
            }
            if self.qconc[q].is_some_and(|c| self.qslot_held(q) >= c) {
                continue;
            }
            if q == 1 && self.tcap.is_some_and(|c| self.tenant_held() >= c) {
                continue;
            }
            let pool = self
                .lane_pool(q)
                .map(|(p, size)| (self.pool_holders(p), self.pool_owed(p), size));
            let mut ready: Vec<usize> = (0..self.jobs.len())
                .filter(|&i| self.jobs[i].state == St::Available && self.jobs[i].queue == q)
                .collect();
            ready.sort_by_key(|&i| (self.jobs[i].priority, self.jobs[i].seq));
            // A key's jobs in a queue wait in line (its lane): when the best of them does not fit, the
            // others wait behind it, so a cheaper job never overtakes a costlier one of its key.
            let mut blocked = [false; 2];
            let free = ready.into_iter().find(|&i| match self.jobs[i].key {
                None => true,
                Some(k) if blocked[k] => false,
                Some(k) => {
                    let fits = self
                        .limit(k)
                        .is_none_or(|l| self.active_of(k) + Model::units(self.jobs[i].cost, l) <= l);
                    let borrows = self.floor_of(k).is_some_and(|f| self.holders_of(k) >= f);
                    let full = pool.is_some_and(|(held, owed, size)| held + owed >= size);
                    let fits = fits && !(borrows && full);
                    blocked[k] = !fits;
                    fits
                }
            });
            if free.is_some() {
                return free;
            }
        }
        None
    }

    fn resolve(&self, r: &JobRef) -> Option<usize> {
        let n = self.jobs.len();
        if n == 0 {
            return None;
        }
        let among = |pred: &dyn Fn(&MJob) -> bool, k: usize| {
            let v: Vec<usize> = (0..n).filter(|&i| pred(&self.jobs[i])).collect();
            if v.is_empty() {
                k % n
            } else {
                v[k % v.len()]
            }
        };
        match r {
            JobRef::Unknown => None,
            JobRef::Any(k) => Some(k % n),
            JobRef::Active(k) => Some(among(&|j| j.state == St::Active, *k)),
            JobRef::Claimed(k) => Some(among(&|j| !j.claims.is_empty(), *k)),
        }
    }

    fn identity(&self, i: usize, ident: &Ident) -> Sent {
        let claims = &self.jobs[i].claims;
        let claim = |back: usize| claims.len().checked_sub(back + 1).map(|c| &claims[c]);
        match ident {
            Ident::None => Sent::default(),
            Ident::Lease { back } => Sent {
                lease: claim(*back).and_then(|c| c.lease_id.clone()),
                ..Sent::default()
            },
            Ident::Attempt { back, worker } => match claim(*back) {
                None => Sent::default(),
                Some(c) => Sent {
                    lease: None,
                    attempt: Some(c.attempt),
                    worker: match worker {
                        WorkerSel::Omit => None,
                        WorkerSel::OfClaim => Some(c.worker),
                        WorkerSel::Other(w) => Some(*w),
                    },
                },
            },
        }
    }

    /// May an ACK/NACK carrying `sent` act on job i? Err is the 409's error code.
    fn admit(&self, i: usize, sent: &Sent) -> Result<(), &'static str> {
        let j = &self.jobs[i];
        let active = j.state == St::Active;
        // The server before the contract ignores the identity fields.
        if self.legacy || sent.is_empty() {
            return if active { Ok(()) } else { Err("conflict") };
        }
        if !active {
            return Err("lease_lost");
        }
        let current = j.claims.last().and_then(|c| c.lease_id.as_ref());
        let lost = sent.lease.as_ref().is_some_and(|l| Some(l) != current)
            || sent.attempt.is_some_and(|a| a != j.attempt)
            || sent.worker.is_some_and(|w| Some(w) != j.holder);
        if lost {
            Err("lease_lost")
        } else {
            Ok(())
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// The harness

macro_rules! check {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

struct Harness {
    nodes: [TestServer; 2],
    /// The deployment's shards (1, or 2 with qa on shard 0 and qb on shard 1).
    shards: usize,
    /// A connection to each shard's node.
    redis: Vec<redis::aio::MultiplexedConnection>,
    m: Model,
    advances: usize,
    trace: Vec<String>,
}

fn code(b: &Value) -> &str {
    b["error"]["code"].as_str().unwrap_or("")
}

fn unknown_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

impl Harness {
    async fn start(legacy: bool, shards: usize) -> Self {
        let bin = env!("CARGO_BIN_EXE_ojs-server");
        // A fresh namespace per case keeps cases (and shrinking runs) independent.
        let ns = ojs_testkit::unique_namespace();
        let n = shards.to_string();
        let mut env: Vec<(&str, &str)> = if shards > 1 {
            vec![("OJS_SHARDS", n.as_str()), ("OJS_QUEUE_SHARDS", "qa=0,qb=1")]
        } else {
            Vec::new()
        };
        let keys = format!(
            "admin:{ADMIN_KEY},worker@{}:{},worker@{}:{}",
            TENANTS[0], TENANT_KEYS[0], TENANTS[1], TENANT_KEYS[1]
        );
        if !legacy {
            env.push(("OJS_API_KEYS", keys.as_str()));
        }
        let mut a = TestServer::spawn_pod(bin, &ns, &env).await;
        let mut b = TestServer::spawn_pod(bin, &ns, &env).await;
        if !legacy {
            // Every request of the harness is the operator's unless a step acts by a tenant's key (an
            // explicit Authorization header replaces the default one).
            let mut h = reqwest::header::HeaderMap::new();
            let auth = format!("Bearer {ADMIN_KEY}");
            h.insert(
                reqwest::header::AUTHORIZATION,
                reqwest::header::HeaderValue::from_str(&auth).expect("header"),
            );
            for s in [&mut a, &mut b] {
                s.http = reqwest::Client::builder()
                    .default_headers(h.clone())
                    .build()
                    .expect("client");
            }
        }
        for q in QUEUES {
            let (s, body) = a
                .put(
                    &format!("/ojs/v1/admin/queues/{q}/rate-limit"),
                    json!({ "concurrency": POOL }),
                )
                .await;
            assert_eq!(s, 200, "the pool of {q}: {body}");
        }
        if !legacy {
            let (s, body) = a
                .put(
                    &format!("/ojs/v1/admin/queues/{}/tenancy", QUEUES[1]),
                    json!({"source": "meta", "default_concurrency": TENANT_CAP}),
                )
                .await;
            assert_eq!(s, 200, "the tenancy of {}: {body}", QUEUES[1]);
        }
        let mut redis = Vec::new();
        for i in 0..shards {
            let url = ojs_testkit::redis_url_of(&ojs_testkit::shard_keys(&ns, i).schema());
            let client = redis::Client::open(url).expect("redis url");
            redis.push(client.get_multiplexed_async_connection().await.expect("redis"));
        }
        Self {
            nodes: [a, b],
            shards,
            redis,
            m: Model {
                legacy,
                jobs: Vec::new(),
                next_seq: 0,
                policy: [None; 2],
                floor: [None; 2],
                overrides: [None; 2],
                adaptive: [false; 2],
                adapt: [Adapt::default(); 2],
                qconc: [Some(POOL); 2],
                tcap: (!legacy).then_some(TENANT_CAP),
            },
            advances: 0,
            trace: Vec::new(),
        }
    }

    fn label(&self, i: usize) -> String {
        format!("#{i}")
    }

    fn id_of(&self, target: Option<usize>) -> String {
        target.map_or_else(unknown_id, |i| self.m.jobs[i].id.clone())
    }

    async fn run(&mut self, ops: &[Op]) -> Result<(), String> {
        for (n, op) in ops.iter().enumerate() {
            if !matches!(op, Op::Advance) {
                self.keepalive(false)
                    .await
                    .map_err(|e| self.fail(n, "keep-alive heartbeat", &e))?;
            }
            let what = self.step(op).await.map_err(|e| self.fail(n, &format!("{op:?}"), &e))?;
            self.trace.push(format!("{n:>2} {op:?} => {what}"));
            // The sweep reads a good deal: no lease may lapse meanwhile on a slow machine.
            if !matches!(op, Op::Advance) {
                self.keepalive(false)
                    .await
                    .map_err(|e| self.fail(n, "keep-alive heartbeat", &e))?;
            }
            self.sweep()
                .await
                .map_err(|e| self.fail(n, &format!("{op:?} (state sweep)"), &e))?;
        }
        let end = ops.len();
        self.keepalive(true)
            .await
            .map_err(|e| self.fail(end, "final keep-alive", &e))?;
        self.final_sweep()
            .await
            .map_err(|e| self.fail(end, "final API sweep", &e))?;
        self.quiesce().await;
        let ns = self.nodes[0].namespace.clone();
        let mut problems = Vec::new();
        for i in 0..self.shards {
            let url = ojs_testkit::redis_url_of(&ojs_testkit::shard_keys(&ns, i).schema());
            problems.extend(ojs_testkit::invariants::check_shard_invariants(&url, &ns, i).await);
        }
        check!(
            problems.is_empty(),
            "{}",
            self.fail(
                end,
                "invariants",
                &format!("keyspace invariants broken:\n  {}", problems.join("\n  "))
            )
        );
        if !self.m.legacy {
            self.drain().await.map_err(|e| self.fail(end, "drain", &e))?;
        }
        Ok(())
    }

    /// Every job still waiting or running is cancelled; then the keyspace invariants hold again, and
    /// every key named after a user value (a queue, a tenant's sub-queue, a rate-limit key, a tenant,
    /// a job, a worker) either expires or is gone with its last member, but for the few meant to
    /// persist (PERSISTENT).
    async fn drain(&mut self) -> Result<(), String> {
        for i in 0..self.m.jobs.len() {
            if matches!(self.m.jobs[i].state, St::Completed | St::Cancelled | St::Discarded) {
                continue;
            }
            let id = self.m.jobs[i].id.clone();
            let (s, b) = self.nodes[i % 2].delete(&format!("/ojs/v1/jobs/{id}")).await;
            check!(
                s == 200 && b["job"]["state"] == "cancelled",
                "draining: cancel of {} ({}): {s} {b}",
                self.label(i),
                self.m.jobs[i].state.as_str()
            );
            self.m.finish(i, St::Cancelled);
        }
        self.sweep().await?;
        // A tenant whose last job was cancelled leaves its queue's fair share when FETCH next finds
        // nothing of it there (lua/includes/tenant.lua): one FETCH of each queue, which claims nothing.
        for (q, name) in QUEUES.iter().enumerate() {
            let (s, b) = self.nodes[q]
                .post("/ojs/v1/workers/fetch", self.fetch_body(0, &[q]))
                .await;
            check!(
                s == 200 && b["jobs"].as_array().is_some_and(Vec::is_empty),
                "draining: a FETCH of {name} with every job ended: {s} {b}"
            );
        }
        self.quiesce().await;
        let ns = self.nodes[0].namespace.clone();
        let mut problems = Vec::new();
        for shard in 0..self.shards {
            let url = ojs_testkit::redis_url_of(&ojs_testkit::shard_keys(&ns, shard).schema());
            problems.extend(ojs_testkit::invariants::check_shard_invariants(&url, &ns, shard).await);
            let keys = ojs_testkit::shard_keys(&ns, shard);
            let all: Vec<String> = redis::cmd("KEYS")
                .arg(format!("{}*", keys.prefix()))
                .query_async(&mut self.redis[shard])
                .await
                .map_err(|e| e.to_string())?;
            for key in all {
                let ttl: i64 = redis::cmd("PTTL")
                    .arg(&key)
                    .query_async(&mut self.redis[shard])
                    .await
                    .map_err(|e| e.to_string())?;
                if ttl != -1 {
                    continue;
                }
                let families: Vec<(&str, Vec<&str>)> = ojs_store::layout::KEY_FAMILIES
                    .iter()
                    .filter_map(|f| Some((f.name, keys.parts(f.name, &key)?)))
                    .filter(|(_, parts)| !parts.is_empty())
                    .collect();
                let meant = families.iter().any(|(f, parts)| persistent(f, parts));
                if !families.is_empty() && !meant {
                    let names: Vec<&str> = families.iter().map(|(f, _)| *f).collect();
                    problems.push(format!("{key} ({names:?}) has no TTL once every job ended"));
                }
            }
        }
        check!(
            problems.is_empty(),
            "after every job ended:\n  {}",
            problems.join("\n  ")
        );
        Ok(())
    }

    fn fail(&self, n: usize, what: &str, e: &str) -> String {
        let jobs: Vec<String> = self
            .m
            .jobs
            .iter()
            .enumerate()
            .map(|(i, j)| {
                format!(
                    "#{i} {} q={} p={} key={:?} state={} attempt={}/{} holder={:?}",
                    j.id,
                    QUEUES[j.queue],
                    j.priority,
                    j.key.map(|k| KEYS[k]),
                    j.state.as_str(),
                    j.attempt,
                    j.max_attempts,
                    j.holder.map(|w| WORKERS[w])
                )
            })
            .collect();
        format!(
            "step {n} ({what}): {e}\n-- steps so far:\n{}\n-- model before the step:\n{}",
            self.trace.join("\n"),
            jobs.join("\n")
        )
    }

    async fn step(&mut self, op: &Op) -> Result<String, String> {
        let mut op = op.clone();
        if self.shards > 1 {
            // A key belongs to one queue's shard: k1 to qa (shard 0), k2 to qb (shard 1); an override on
            // a key no job used yet binds it to shard 0, so overrides name k1.
            match &mut op {
                Op::Enqueue { job, .. } => {
                    if let Some((k, _, _)) = &mut job.limit {
                        *k = job.queue;
                    }
                }
                Op::SetOverride { key, .. } | Op::LiftOverride { key, .. } => *key = 0,
                _ => {}
            }
        }
        if self.m.legacy {
            // A server from before tenants: every request is plain.
            match &mut op {
                Op::Enqueue {
                    job: NewJob { via, .. },
                    ..
                }
                | Op::Fetch { via, .. }
                | Op::Ack { via, .. }
                | Op::Nack { via, .. }
                | Op::Heartbeat { via, .. }
                | Op::Cancel { via, .. }
                | Op::Patch { via, .. } => *via = Via::Plain,
                Op::SetPool { .. } | Op::SetTenantCap { .. } => return Ok("skipped (legacy)".into()),
                _ => {}
            }
        }
        match op {
            Op::Enqueue { node, job } => self.enqueue(node, job).await,
            Op::Fetch {
                node,
                worker,
                queues,
                via,
            } => {
                let body = self.fetch_body(worker, &queues);
                let predicted = self.m.predict_fetch(&queues, via.acting());
                let sent = Instant::now();
                let (s, b) = self
                    .call(node, Method::POST, "/ojs/v1/workers/fetch", Some(body), via)
                    .await;
                check!(s == 200, "FETCH answered {s}: {b}");
                self.expect_claim(predicted, &b["jobs"], worker, sent)
            }
            Op::Ack {
                node,
                job,
                ident,
                fetch_next,
                via,
            } => self.ack(node, &job, &ident, fetch_next, via).await,
            Op::Nack {
                node,
                job,
                ident,
                requeue,
                throttled,
                via,
            } => self.nack(node, &job, &ident, requeue, throttled, via).await,
            Op::Heartbeat { node, beat, via } => {
                let (worker, objects) = (beat.worker, beat.objects);
                let mut entries: Vec<(usize, Option<String>)> = Vec::new();
                let lease_of = |j: &MJob, back: usize| {
                    j.claims
                        .len()
                        .checked_sub(back + 1)
                        .and_then(|c| j.claims[c].lease_id.clone())
                };
                for (i, j) in self.m.jobs.iter().enumerate() {
                    if j.state == St::Active && j.holder == Some(worker) {
                        entries.push((i, if objects { lease_of(j, 0) } else { None }));
                    }
                }
                if let Some(i) = beat.extra.and_then(|r| self.m.resolve(&r)) {
                    if !entries.iter().any(|(e, _)| *e == i) {
                        let j = &self.m.jobs[i];
                        let lease = if !objects {
                            None
                        } else if beat.stale && j.claims.len() >= 2 {
                            lease_of(j, 1)
                        } else {
                            lease_of(j, 0)
                        };
                        entries.push((i, lease));
                    }
                }
                self.heartbeat(node, worker, entries, beat.long, via).await
            }
            Op::Cancel { node, job, via } => {
                let target = self.m.resolve(&job);
                let id = self.id_of(target);
                let (s, b) = self
                    .call(node, Method::DELETE, &format!("/ojs/v1/jobs/{id}"), None, via)
                    .await;
                let Some(i) = target.filter(|&i| self.m.visible(i, via.acting())) else {
                    check!(
                        s == 404 && code(&b) == "not_found",
                        "cancel of an unknown or another tenant's job ({via:?}): {s} {b}"
                    );
                    return Ok("404".into());
                };
                let st = self.m.jobs[i].state;
                if matches!(st, St::Available | St::Scheduled | St::Retryable | St::Active) {
                    check!(
                        s == 200 && b["job"]["state"] == "cancelled",
                        "cancel of {} ({}) should be 200 cancelled: {s} {b}",
                        self.label(i),
                        st.as_str()
                    );
                    self.m.finish(i, St::Cancelled);
                    Ok(format!("{} cancelled", self.label(i)))
                } else {
                    check!(
                        s == 409 && code(&b) == "conflict",
                        "cancel of {} ({}) should be 409 conflict: {s} {b}",
                        self.label(i),
                        st.as_str()
                    );
                    Ok(format!("{} 409", self.label(i)))
                }
            }
            Op::Patch {
                node,
                job,
                priority,
                via,
            } => {
                let target = self.m.resolve(&job);
                let id = self.id_of(target);
                let (s, b) = self
                    .call(
                        node,
                        Method::PATCH,
                        &format!("/ojs/v1/jobs/{id}"),
                        Some(json!({ "priority": priority })),
                        via,
                    )
                    .await;
                let Some(i) = target.filter(|&i| self.m.visible(i, via.acting())) else {
                    check!(
                        s == 404 && code(&b) == "not_found",
                        "PATCH of an unknown or another tenant's job ({via:?}): {s} {b}"
                    );
                    return Ok("404".into());
                };
                let j = &self.m.jobs[i];
                if matches!(j.state, St::Available | St::Scheduled) {
                    check!(
                        s == 200 && b["priority"] == priority && b["previous_priority"] == j.priority,
                        "PATCH of {} ({}, priority {}) to {priority}: {s} {b}",
                        self.label(i),
                        j.state.as_str(),
                        j.priority
                    );
                    // The job keeps its FIFO position: only the score changes.
                    self.m.jobs[i].priority = priority;
                    Ok(format!("{} priority {priority}", self.label(i)))
                } else {
                    check!(
                        s == 409 && code(&b) == "conflict",
                        "PATCH of {} ({}) should be 409 conflict: {s} {b}",
                        self.label(i),
                        j.state.as_str()
                    );
                    Ok(format!("{} 409", self.label(i)))
                }
            }
            Op::SetOverride { node, key, concurrency } => {
                let (s, b) = self.nodes[node]
                    .put(
                        &format!("/ojs/v1/rate-limits/{}", KEYS[key]),
                        json!({ "concurrency": concurrency }),
                    )
                    .await;
                check!(
                    s == 200 && b["concurrency"]["limit"] == concurrency,
                    "override {}={concurrency}: {s} {b}",
                    KEYS[key]
                );
                self.m.overrides[key] = Some(concurrency);
                Ok(format!("{} override {concurrency}", KEYS[key]))
            }
            Op::LiftOverride { node, key } => {
                let (s, b) = self.nodes[node]
                    .delete(&format!("/ojs/v1/rate-limits/{}", KEYS[key]))
                    .await;
                check!(s == 200, "lifting the override of {}: {s} {b}", KEYS[key]);
                self.m.overrides[key] = None;
                if let Some(p) = self.m.policy[key].and(self.m.limit(key)) {
                    check!(
                        b["concurrency"]["limit"] == p,
                        "after lifting the override {} should show its policy's concurrency (under adaptation) {p}: {b}",
                        KEYS[key]
                    );
                }
                Ok(format!("{} override lifted", KEYS[key]))
            }
            Op::SetPool {
                node,
                queue,
                concurrency,
            } => {
                let path = format!("/ojs/v1/admin/queues/{}/rate-limit", QUEUES[queue]);
                let (s, b) = match concurrency {
                    Some(c) => self.nodes[node].put(&path, json!({ "concurrency": c })).await,
                    None => self.nodes[node].delete(&path).await,
                };
                check!(
                    s == 200 && b["concurrency"]["limit"] == json!(concurrency),
                    "{} concurrency {concurrency:?}: {s} {b}",
                    QUEUES[queue]
                );
                self.m.qconc[queue] = concurrency;
                Ok(format!("{} concurrency {concurrency:?}", QUEUES[queue]))
            }
            Op::SetTenantCap { node, cap } => {
                let mut body = json!({"source": "meta"});
                if let Some(c) = cap {
                    body["default_concurrency"] = json!(c);
                }
                let (s, b) = self.nodes[node]
                    .put(&format!("/ojs/v1/admin/queues/{}/tenancy", QUEUES[1]), body)
                    .await;
                check!(
                    s == 200 && b["tenancy"]["default_concurrency"] == json!(cap),
                    "{}'s tenancy with default_concurrency {cap:?}: {s} {b}",
                    QUEUES[1]
                );
                self.m.tcap = cap;
                Ok(format!("{} tenant cap {cap:?}", QUEUES[1]))
            }
            Op::Advance => self.advance().await,
        }
    }

    /// A request as `via` says: the default (admin) key, the admin key with `X-OJS-Tenant`, or the
    /// key bound to the tenant.
    async fn call(&self, node: usize, method: Method, path: &str, body: Option<Value>, via: Via) -> (u16, Value) {
        let auth;
        let headers: Vec<(&str, &str)> = match via {
            Via::Plain => Vec::new(),
            Via::Header(t) => vec![("X-OJS-Tenant", TENANTS[t])],
            Via::Key(t) => {
                auth = format!("Bearer {}", TENANT_KEYS[t]);
                vec![("Authorization", auth.as_str())]
            }
        };
        self.nodes[node].send_with(method, path, &headers, body).await
    }

    async fn enqueue(&mut self, node: usize, job: NewJob) -> Result<String, String> {
        let mut body = json!({"type": "t", "args": [], "queue": QUEUES[job.queue]});
        // Into `qa` plainly; into `qb` as `via` says, naming TENANT in the body unless acting as it
        // (then the tenant is stamped).
        let via = if job.queue == 1 && !self.m.legacy {
            job.via
        } else {
            Via::Plain
        };
        if job.queue == 1 && !self.m.legacy && (job.named || via.acting() != Some(0)) {
            body["meta"] = json!({ "tenant_id": TENANT });
        }
        if let Some(p) = job.priority {
            body["priority"] = json!(p);
        }
        // A fast retry comes back within milliseconds (the harness waits for it); a slow one stays
        // retryable for the whole case. Either way no retry timing is left to chance.
        let mut retry = json!({"initial_interval": if job.slow_retry { "PT1H" } else { "PT0.01S" }, "jitter": false});
        if let Some(m) = job.max_attempts {
            retry["max_attempts"] = json!(m);
        }
        let mut options = json!({ "retry": retry });
        if job.delayed {
            options["delay_ms"] = json!(3_600_000);
        }
        body["options"] = options;
        let key = match job.limit {
            None => None,
            Some((k, c, cost)) => {
                // Before the contract each job enforced its own policy; keeping one policy per key makes
                // the two agree, so the harness can still be checked against such a server (which had
                // no costs).
                let (c, cost) = if self.m.legacy {
                    (*self.m.policy[k].get_or_insert(c), 1)
                } else {
                    (c, cost)
                };
                body["rate_limit"] = json!({"key": KEYS[k], "concurrency": c});
                if !self.m.legacy {
                    body["rate_limit"]["floor"] = json!(FLOORS[k].min(c));
                }
                if cost != 1 {
                    body["rate_limit"]["cost"] = json!(cost);
                }
                if job.adaptive && !self.m.legacy {
                    body["rate_limit"]["adaptive"] = json!({"increase_after": ADAPT_AFTER, "errors": ["Throttled"]});
                }
                Some((k, c, cost))
            }
        };
        let (s, b) = self.call(node, Method::POST, "/ojs/v1/jobs", Some(body), via).await;
        if let Some(t) = via.acting().filter(|&t| t != 0) {
            // Acting as another tenant while the body names TENANT: refused, and nothing is written.
            let want = match via {
                Via::Key(_) => (403, "forbidden"),
                _ => (400, "invalid_request"),
            };
            check!(
                (s, code(&b)) == want,
                "enqueue acting as {} ({via:?}) naming {TENANT}: want {want:?}: {s} {b}",
                TENANTS[t]
            );
            let stored = self.stored_jobs().await?;
            check!(
                stored == self.m.jobs.len(),
                "a refused enqueue wrote a job: {stored} job records, the model has {}",
                self.m.jobs.len()
            );
            return Ok(format!("{s} (acting as {})", TENANTS[t]));
        }
        let want_state = if job.delayed { St::Scheduled } else { St::Available };
        let want_priority = job.priority.unwrap_or(2);
        check!(
            s == 201 && b["job"]["state"] == want_state.as_str() && b["job"]["priority"] == want_priority,
            "enqueue: want 201 {} priority {want_priority}: {s} {b}",
            want_state.as_str()
        );
        let id = b["job"]["id"].as_str().unwrap_or_default().to_string();
        check!(!id.is_empty(), "enqueue answered no id: {b}");
        if job.queue == 1 && !self.m.legacy {
            check!(
                b["job"]["meta"]["tenant_id"] == TENANT,
                "a job of {} ({via:?}) should be {TENANT}'s: {b}",
                QUEUES[1]
            );
        }
        let i = self.m.jobs.len();
        self.m.jobs.push(MJob {
            id,
            queue: job.queue,
            priority: want_priority,
            key: key.map(|(k, _, _)| k),
            cost: key.map_or(1, |(_, _, cost)| cost),
            held: 0,
            qslot: false,
            adaptive: job.adaptive && !self.m.legacy,
            round: None,
            max_attempts: job.max_attempts.unwrap_or(3),
            slow_retry: job.slow_retry,
            state: want_state,
            attempt: 0,
            seq: 0,
            holder: None,
            lease: None,
            claims: Vec::new(),
        });
        if let Some((k, c, _)) = key {
            self.m.policy[k] = Some(c);
            self.m.floor[k] = (!self.m.legacy).then(|| FLOORS[k].min(c));
            self.m.adaptive[k] = job.adaptive && !self.m.legacy;
        }
        if !job.delayed {
            self.m.make_available(i);
        }
        Ok(format!("{} {}", self.label(i), want_state.as_str()))
    }

    fn fetch_body(&self, worker: usize, queues: &[usize]) -> Value {
        let names: Vec<&str> = queues.iter().map(|&q| QUEUES[q]).collect();
        json!({"queues": names, "worker_id": WORKERS[worker], "count": 1, "visibility_timeout_ms": LEASE_MS})
    }

    fn expect_claim(
        &mut self,
        predicted: Option<usize>,
        jobs: &Value,
        worker: usize,
        sent: Instant,
    ) -> Result<String, String> {
        let got = jobs.as_array().cloned().unwrap_or_default();
        let ids: Vec<&str> = got.iter().map(|j| j["id"].as_str().unwrap_or("?")).collect();
        let Some(i) = predicted else {
            check!(
                got.is_empty(),
                "FETCH: the model expects no job; the server gave {ids:?}"
            );
            return Ok("no job".into());
        };
        let label = self.label(i);
        let j = &self.m.jobs[i];
        check!(
            got.len() == 1 && ids[0] == j.id,
            "FETCH: the model expects {label} ({}); the server gave {ids:?}",
            j.id
        );
        let job = &got[0];
        check!(
            job["state"] == "active" && job["attempt"] == j.attempt + 1,
            "FETCH of {label}: want active, attempt {}: {job}",
            j.attempt + 1
        );
        let lease_id = job["lease_id"].as_str().map(str::to_owned);
        if !self.m.legacy {
            let Some(l) = lease_id.as_deref().filter(|l| !l.is_empty()) else {
                return Err(format!("FETCH of {label}: the claim carries no lease_id: {job}"));
            };
            // Opaque: only unique among the claims of one job.
            check!(
                !j.claims.iter().any(|c| c.lease_id.as_deref() == Some(l)),
                "FETCH of {label}: lease_id {l} was already used by an earlier claim of the job"
            );
        }
        let held = match self.m.jobs[i].key.and_then(|k| self.m.limit(k)) {
            Some(l) => Model::units(self.m.jobs[i].cost, l),
            None => 1,
        };
        let round = self.m.jobs[i]
            .key
            .filter(|k| self.m.adaptive[*k])
            .map(|k| self.m.adapt[k].round);
        let qslot = self.m.qconc[self.m.jobs[i].queue].is_some();
        let j = &mut self.m.jobs[i];
        j.state = St::Active;
        j.held = held;
        j.qslot = qslot;
        j.round = round;
        j.attempt += 1;
        j.holder = Some(worker);
        j.lease = Some(Lease { long: false, sent });
        j.claims.push(Claim {
            lease_id,
            attempt: j.attempt,
            worker,
        });
        Ok(format!(
            "{label} claimed by {} (attempt {})",
            WORKERS[worker], j.attempt
        ))
    }

    fn identity_body(body: &mut Value, sent: &Sent) {
        if let Some(l) = &sent.lease {
            body["lease_id"] = json!(l);
        }
        if let Some(a) = sent.attempt {
            body["attempt"] = json!(a);
        }
        if let Some(w) = sent.worker {
            body["worker_id"] = json!(WORKERS[w]);
        }
    }

    async fn ack(
        &mut self,
        node: usize,
        job: &JobRef,
        ident: &Ident,
        fetch_next: Option<(usize, Vec<usize>)>,
        via: Via,
    ) -> Result<String, String> {
        let target = self.m.resolve(job);
        let id = self.id_of(target);
        let mut body = json!({"job_id": id, "result": {"ok": true}});
        let sent = target.map(|i| self.m.identity(i, ident)).unwrap_or_default();
        Self::identity_body(&mut body, &sent);
        if let Some((w, qs)) = &fetch_next {
            body["fetch"] = self.fetch_body(*w, qs);
        }
        let at = Instant::now();
        let (s, b) = self
            .call(node, Method::POST, "/ojs/v1/workers/ack", Some(body), via)
            .await;
        let Some(i) = target.filter(|&i| self.m.visible(i, via.acting())) else {
            check!(
                s == 404 && code(&b) == "not_found" && b.get("jobs").is_none(),
                "ACK of an unknown or another tenant's job ({via:?}): {s} {b}"
            );
            return Ok("404".into());
        };
        let label = self.label(i);
        match self.m.admit(i, &sent) {
            Err(c) => {
                check!(
                    s == 409 && code(&b) == c,
                    "ACK of {label} ({}) with {sent:?}: want 409 {c}: {s} {b}",
                    self.m.jobs[i].state.as_str()
                );
                // A refused ACK claims nothing, even with a fetch part.
                check!(b.get("jobs").is_none(), "a refused ACK claimed jobs: {b}");
                Ok(format!("{label} 409 {c}"))
            }
            Ok(()) => {
                let attempt = self.m.jobs[i].attempt;
                check!(
                    s == 200 && b["state"] == "completed" && b["attempt"] == attempt,
                    "ACK of {label} with {sent:?}: want 200 completed, attempt {attempt}: {s} {b}"
                );
                if let Some(k) = self.m.jobs[i]
                    .key
                    .filter(|k| self.m.jobs[i].adaptive && self.m.adaptive[*k])
                {
                    self.m.adapt_up(k);
                }
                self.m.finish(i, St::Completed);
                let mut what = format!("{label} completed");
                if let Some((w, qs)) = fetch_next {
                    let predicted = self.m.predict_fetch(&qs, via.acting());
                    what += &format!("; next: {}", self.expect_claim(predicted, &b["jobs"], w, at)?);
                }
                Ok(what)
            }
        }
    }

    async fn nack(
        &mut self,
        node: usize,
        job: &JobRef,
        ident: &Ident,
        requeue: bool,
        throttled: bool,
        via: Via,
    ) -> Result<String, String> {
        let target = self.m.resolve(job);
        let id = self.id_of(target);
        let mut body = json!({"job_id": id, "error": {"message": "x"}});
        if throttled {
            body["error"]["type"] = json!("Throttled");
        }
        if requeue {
            body["requeue"] = json!(true);
        }
        let sent = target.map(|i| self.m.identity(i, ident)).unwrap_or_default();
        Self::identity_body(&mut body, &sent);
        let (s, b) = self
            .call(node, Method::POST, "/ojs/v1/workers/nack", Some(body), via)
            .await;
        let Some(i) = target.filter(|&i| self.m.visible(i, via.acting())) else {
            check!(
                s == 404 && code(&b) == "not_found",
                "NACK of an unknown or another tenant's job ({via:?}): {s} {b}"
            );
            return Ok("404".into());
        };
        let label = self.label(i);
        if let Err(c) = self.m.admit(i, &sent) {
            check!(
                s == 409 && code(&b) == c,
                "NACK of {label} ({}) with {sent:?}: want 409 {c}: {s} {b}",
                self.m.jobs[i].state.as_str()
            );
            return Ok(format!("{label} 409 {c}"));
        }
        let j = &self.m.jobs[i];
        // A "Throttled" NACK of a job whose own and key's policies are adaptive: the key's limit halves
        // (once per round) and the job waits again without spending its attempt.
        let adapted = j.key.filter(|k| throttled && j.adaptive && self.m.adaptive[*k]);
        let (want, attempt) = if requeue || adapted.is_some() {
            (St::Available, j.attempt - 1)
        } else if j.attempt >= j.max_attempts {
            (St::Discarded, j.attempt)
        } else {
            (St::Retryable, j.attempt)
        };
        check!(
            s == 200 && b["state"] == want.as_str() && b["attempt"] == attempt,
            "NACK of {label} (requeue {requeue}, attempt {}/{}) with {sent:?}: want 200 {} attempt {attempt}: {s} {b}",
            j.attempt,
            j.max_attempts,
            want.as_str()
        );
        let slow = j.slow_retry;
        if let Some(k) = adapted {
            self.m.adapt_down(k, i);
        }
        match want {
            St::Available => {
                self.m.jobs[i].attempt = attempt;
                self.m.make_available(i);
            }
            St::Retryable if !slow => {
                // When the retry comes due is the server's timer, so the harness waits for it here,
                // before anything else can be ordered against it. The job holds no lease meanwhile: the
                // keep-alive of the wait must not heartbeat it (a retry due after KEEPALIVE_AFTER did).
                self.m.finish(i, St::Retryable);
                let id = self.m.jobs[i].id.clone();
                let st = self.wait_not(&[id], "retryable", true).await?;
                check!(
                    st[0] == "available",
                    "{label} left retryable for {} instead of available",
                    st[0]
                );
                self.m.make_available(i);
            }
            st => self.m.finish(i, st),
        }
        Ok(format!("{label} {}", want.as_str()))
    }

    async fn heartbeat(
        &mut self,
        node: usize,
        worker: usize,
        entries: Vec<(usize, Option<String>)>,
        long: bool,
        via: Via,
    ) -> Result<String, String> {
        let legacy = self.m.legacy;
        let acting = via.acting();
        // Another tenant's active jobs named: their leases must not move.
        let foreign: Vec<String> = entries
            .iter()
            .filter(|(i, _)| !self.m.visible(*i, acting) && self.m.jobs[*i].state == St::Active)
            .map(|(i, _)| self.m.jobs[*i].id.clone())
            .collect();
        let leases_before = self.fields(&foreign, &["lease_until"]).await?;
        let active_jobs: Vec<Value> = entries
            .iter()
            .map(|(i, lease)| {
                let id = &self.m.jobs[*i].id;
                match lease.as_ref().filter(|_| !legacy) {
                    Some(l) => json!({"job_id": id, "lease_id": l}),
                    None => json!(id),
                }
            })
            .collect();
        let mut body = json!({"worker_id": WORKERS[worker], "active_jobs": active_jobs});
        if long {
            body["visibility_timeout_ms"] = json!(LONG_MS);
        } else if legacy {
            // Before the contract a heartbeat without a length extended by the server default (30 s).
            body["visibility_timeout_ms"] = json!(LEASE_MS);
        }
        let sent = Instant::now();
        let (s, b) = self
            .call(node, Method::POST, "/ojs/v1/workers/heartbeat", Some(body), via)
            .await;
        check!(s == 200, "heartbeat answered {s}: {b}");
        let reply: HashMap<&str, &Value> = b["jobs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|j| Some((j["job_id"].as_str()?, j)))
            .collect();
        check!(
            reply.len() == entries.len(),
            "heartbeat: {} jobs sent, reply {b}",
            entries.len()
        );
        let mut extended = Vec::new();
        let mut lost = Vec::new();
        let mut cancelled = Vec::new();
        for (i, lease) in &entries {
            let j = &self.m.jobs[*i];
            if !self.m.visible(*i, acting) {
                let r = reply.get(j.id.as_str()).copied().unwrap_or(&Value::Null);
                check!(
                    r["state"] == "missing" && r["extended"] == false,
                    "heartbeat by {} ({via:?}) naming another tenant's {}: want missing, not extended: {r}",
                    WORKERS[worker],
                    self.label(*i)
                );
                lost.push(j.id.clone());
                continue;
            }
            let current = j.claims.last().and_then(|c| c.lease_id.as_ref());
            let ext = j.state == St::Active
                && j.holder == Some(worker)
                && (legacy || lease.is_none() || lease.as_ref() == current);
            let r = reply.get(j.id.as_str()).copied().unwrap_or(&Value::Null);
            check!(
                r["state"] == j.state.as_str() && r["extended"] == ext,
                "heartbeat by {} naming {} (lease {lease:?}): want state {}, extended {ext}: {r}",
                WORKERS[worker],
                self.label(*i),
                j.state.as_str()
            );
            if ext {
                extended.push(*i);
            } else {
                lost.push(j.id.clone());
            }
            if j.state == St::Cancelled {
                cancelled.push(j.id.clone());
            }
        }
        if !legacy {
            let mut got: Vec<String> = b["lost_jobs"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect();
            got.sort();
            lost.sort();
            check!(got == lost, "heartbeat lost_jobs: want {lost:?}: {b}");
        }
        let mut directives: Vec<String> = b["directives"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| d["type"] == "cancel")
            .filter_map(|d| d["job_id"].as_str().map(str::to_owned))
            .collect();
        directives.sort();
        cancelled.sort();
        check!(
            directives == cancelled,
            "heartbeat cancel directives: want {cancelled:?}: {b}"
        );
        let leases_after = self.fields(&foreign, &["lease_until"]).await?;
        check!(
            leases_before == leases_after,
            "a heartbeat acting as {acting:?} moved the leases of another tenant's jobs {foreign:?}: {leases_before:?} -> {leases_after:?}"
        );
        for &i in &extended {
            self.m.jobs[i].lease = Some(Lease { long, sent });
        }
        let labels: Vec<String> = extended.iter().map(|&i| self.label(i)).collect();
        Ok(format!("extended {labels:?}"))
    }

    /// Re-heartbeats short leases older than KEEPALIVE_AFTER (all of them when `all`), so that a slow
    /// machine never lets a lease lapse outside a planned clock advance.
    async fn keepalive(&mut self, all: bool) -> Result<(), String> {
        for (w, name) in WORKERS.iter().enumerate() {
            let entries: Vec<(usize, Option<String>)> = (0..self.m.jobs.len())
                .filter(|&i| {
                    let j = &self.m.jobs[i];
                    j.state == St::Active
                        && j.holder == Some(w)
                        && j.lease
                            .is_some_and(|l| !l.long && (all || l.sent.elapsed() > KEEPALIVE_AFTER))
                })
                .map(|i| (i, self.m.jobs[i].claims.last().and_then(|c| c.lease_id.clone())))
                .collect();
            if !entries.is_empty() {
                let what = self.heartbeat(0, w, entries, false, Via::Plain).await?;
                self.trace.push(format!("   keep-alive {name} => {what}"));
            }
        }
        Ok(())
    }

    /// Lets every short lease lapse, waits for the reaper, and applies what it must have done.
    async fn advance(&mut self) -> Result<String, String> {
        let active: Vec<usize> = (0..self.m.jobs.len())
            .filter(|&i| self.m.jobs[i].state == St::Active)
            .collect();
        let short: Vec<usize> = active
            .iter()
            .copied()
            .filter(|&i| self.m.jobs[i].lease.is_some_and(|l| !l.long))
            .collect();
        if self.advances >= MAX_ADVANCES || short.is_empty() {
            return Ok("skipped".into());
        }
        self.advances += 1;
        // The reaper takes lapsed leases in deadline order (ties by id), and each goes to the back of
        // its priority: the deadlines fix the FIFO order of the requeued jobs.
        let now = local_now_ms();
        let mut deadline = HashMap::new();
        for &i in &active {
            let id = self.m.jobs[i].id.clone();
            let (_, b) = self.nodes[i % 2].get(&format!("/ojs/v1/jobs/{id}")).await;
            let d = b["job"]["visibility_deadline"].as_str().and_then(parse_ms);
            let Some(d) = d else {
                return Err(format!("active {} shows no visibility_deadline: {b}", self.label(i)));
            };
            if short.contains(&i) {
                check!(
                    d <= now + LEASE_MS + 250,
                    "{} holds its lease until {} ms from now: more than FETCH's lease of {LEASE_MS} ms",
                    self.label(i),
                    d - now
                );
            } else {
                check!(
                    d > now + LONG_MS / 2,
                    "{} was extended by {LONG_MS} ms but its lease ends {} ms from now",
                    self.label(i),
                    d - now
                );
            }
            deadline.insert(i, d);
        }
        let until = short.iter().map(|i| deadline[i]).max().unwrap_or(now) + 150;
        let wait = (until - local_now_ms()).max(0) as u64;
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let ids: Vec<String> = short.iter().map(|&i| self.m.jobs[i].id.clone()).collect();
        self.wait_not(&ids, "active", false).await?;
        let mut order = short.clone();
        order.sort_by(|a, b| (deadline[a], &self.m.jobs[*a].id).cmp(&(deadline[b], &self.m.jobs[*b].id)));
        for &i in &order {
            if self.m.jobs[i].attempt >= self.m.jobs[i].max_attempts {
                self.m.finish(i, St::Discarded);
            } else {
                self.m.make_available(i);
            }
        }
        let labels: Vec<String> = order.iter().map(|&i| self.label(i)).collect();
        Ok(format!("leases lapsed: {labels:?}"))
    }

    async fn states(
        &mut self,
        ids: &[String],
    ) -> Result<Vec<(Option<String>, Option<String>, Option<String>)>, String> {
        Ok(self
            .fields(ids, &["state", "attempt", "priority"])
            .await?
            .into_iter()
            .map(|mut r| (r[0].take(), r[1].take(), r[2].take()))
            .collect())
    }

    /// The named fields of each job's record, straight from Redis.
    async fn fields(&mut self, ids: &[String], fields: &[&str]) -> Result<Vec<Vec<Option<String>>>, String> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        // A server-made id names its shard in its last byte.
        let ns = self.nodes[0].namespace.clone();
        let shard_of = |id: &str| {
            ojs_core::names::id_shard_hint(id)
                .filter(|s| *s < self.shards)
                .unwrap_or(0)
        };
        let mut out = vec![vec![None; fields.len()]; ids.len()];
        for shard in 0..self.shards {
            let idx: Vec<usize> = (0..ids.len()).filter(|i| shard_of(&ids[*i]) == shard).collect();
            if idx.is_empty() {
                continue;
            }
            let shard_keys = ojs_testkit::shard_keys(&ns, shard);
            let keys: Vec<String> = idx.iter().map(|i| shard_keys.job(&ids[*i])).collect();
            let rows = ojs_testkit::job_fields(&mut self.redis[shard], &keys, fields).await;
            for (i, r) in idx.into_iter().zip(rows) {
                out[i] = r;
            }
        }
        Ok(out)
    }

    /// Waits until none of `ids` is in `state` (background timers move them), returns their states.
    /// With `keep`, other leases are kept alive meanwhile: a slow timer must not let them lapse.
    async fn wait_not(&mut self, ids: &[String], state: &str, keep: bool) -> Result<Vec<String>, String> {
        let deadline = Instant::now() + SETTLE;
        loop {
            if keep {
                self.keepalive(false).await?;
            }
            let now: Vec<String> = self
                .states(ids)
                .await?
                .into_iter()
                .map(|(s, _, _)| s.unwrap_or_else(|| "missing".into()))
                .collect();
            if now.iter().all(|s| s != state) {
                return Ok(now);
            }
            check!(
                Instant::now() < deadline,
                "jobs {ids:?} still {state} after {SETTLE:?}: {now:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// How many job records the namespace holds (on every shard).
    async fn stored_jobs(&mut self) -> Result<usize, String> {
        let ns = self.nodes[0].namespace.clone();
        let mut n = 0;
        for shard in 0..self.shards {
            let pattern = ojs_testkit::shard_keys(&ns, shard).pattern("job");
            let mut cursor: u64 = 0;
            loop {
                let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000)
                    .query_async(&mut self.redis[shard])
                    .await
                    .map_err(|e| e.to_string())?;
                n += batch.len();
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(n)
    }

    /// Every job's state, attempt and priority, straight from Redis in one round trip (cheap enough to
    /// run after every step), and each key's limit and active count as GET /rate-limits shows them;
    /// each pool's slots held and floors owed, against the model's count from scratch.
    async fn sweep(&mut self) -> Result<(), String> {
        let ids: Vec<String> = self.m.jobs.iter().map(|j| j.id.clone()).collect();
        let rows = self.states(&ids).await?;
        for (i, (st, attempt, priority)) in rows.into_iter().enumerate() {
            let j = &self.m.jobs[i];
            let got = (
                st.unwrap_or_default(),
                attempt.and_then(|a| a.parse::<u32>().ok()).unwrap_or(0),
                priority.and_then(|p| p.parse::<u32>().ok()).unwrap_or(u32::MAX),
            );
            check!(
                got == (j.state.as_str().to_string(), j.attempt, j.priority),
                "{} is (state, attempt, priority) {got:?}; the model says ({}, {}, {})",
                self.label(i),
                j.state.as_str(),
                j.attempt,
                j.priority
            );
        }
        let ns = self.nodes[0].namespace.clone();
        for (q, name) in QUEUES.iter().enumerate() {
            let (s, b) = self.nodes[q % 2]
                .get(&format!("/ojs/v1/admin/queues/{name}/rate-limit"))
                .await;
            let (held, owed) = (self.m.qslot_held(q), self.m.pool_owed(Pool::Queue(q)));
            match self.m.qconc[q] {
                Some(c) => {
                    let shown = (
                        &b["concurrency"]["limit"],
                        &b["concurrency"]["active"],
                        b["concurrency"]["floors_owed"].as_u64().unwrap_or(0),
                    );
                    check!(
                        s == 200 && shown == (&json!(c), &json!(held), u64::from(owed)),
                        "GET /admin/queues/{name}/rate-limit: the model says concurrency {c}, {held} active, {owed} owed: {s} {b}"
                    );
                }
                None => check!(
                    s == 200 && b["concurrency"].is_null(),
                    "GET /admin/queues/{name}/rate-limit: the model says no concurrency: {s} {b}"
                ),
            }
            // The same from Redis: the floors owed in the queue's pool (those of an earlier pool of the
            // queue count for nothing: rl_pool.lua Pool.owed), and in TENANT's pool (`qb@t1`'s conf),
            // and each pool's slots held by as many jobs as the model says hold them.
            let shard = if self.shards > 1 { q } else { 0 };
            let keys = ojs_testkit::shard_keys(&ns, shard);
            let sub = ojs_store::Keys::tenant_sub_queue(name, TENANT);
            let conf = |q: &str| (keys.queue_conf(q), keys.queue_rl_active(q));
            let (qc, qa) = conf(name);
            let (tc, ta) = conf(&sub);
            let (f, t, qn, tn): (Vec<Option<String>>, Vec<Option<String>>, u32, u32) = redis::pipe()
                .cmd("HMGET")
                .arg(&qc)
                .arg("want")
                .arg("want_gen")
                .arg("pool_gen")
                .cmd("HMGET")
                .arg(&tc)
                .arg("want")
                .arg("want_gen")
                .cmd("ZCARD")
                .arg(&qa)
                .cmd("ZCARD")
                .arg(&ta)
                .query_async(&mut self.redis[shard])
                .await
                .map_err(|e| e.to_string())?;
            let gen = f[2].clone().unwrap_or_default();
            let owed_in = |w: &[Option<String>]| -> u64 {
                if w[1].clone().unwrap_or_default() != gen {
                    return 0;
                }
                w[0].as_deref().and_then(|v| v.parse().ok()).unwrap_or(0)
            };
            let tenant_owed = if q == 1 { self.m.pool_owed(Pool::Tenant) } else { 0 };
            let tenant_held = if q == 1 { self.m.tenant_held() } else { 0 };
            let got = (owed_in(&f), owed_in(&t), qn, tn);
            let want = (u64::from(owed), u64::from(tenant_owed), held, tenant_held);
            check!(
                got == want,
                "{name}: (owed in its pool, owed in {TENANT}'s, its slots held, {TENANT}'s slots held) are {got:?} in Redis; the model says {want:?}"
            );
        }
        for (k, name) in KEYS.iter().enumerate() {
            let shard = if self.shards > 1 { k } else { 0 };
            let rk = ojs_testkit::shard_keys(&ns, shard).rl_active(name);
            let n: u32 = redis::cmd("ZCARD")
                .arg(rk)
                .query_async(&mut self.redis[shard])
                .await
                .map_err(|e| e.to_string())?;
            let want = self.m.holders_of(k);
            check!(n == want, "{name}'s slots are held by {n} jobs; the model says {want}");
        }
        for (k, name) in KEYS.iter().enumerate() {
            let Some(limit) = self.m.limit(k).filter(|_| self.m.policy[k].is_some()) else {
                continue;
            };
            let (s, b) = self.nodes[k % 2].get(&format!("/ojs/v1/rate-limits/{name}")).await;
            let active = self.m.active_of(k);
            check!(
                s == 200 && b["concurrency"]["limit"] == limit && b["concurrency"]["active"] == active,
                "GET /rate-limits/{name}: the model says limit {limit}, active {active}: {s} {b}"
            );
        }
        Ok(())
    }

    /// The same comparison through the API, on both nodes.
    async fn final_sweep(&mut self) -> Result<(), String> {
        for (i, j) in self.m.jobs.iter().enumerate() {
            let (s, b) = self.nodes[i % 2].get(&format!("/ojs/v1/jobs/{}", j.id)).await;
            check!(
                s == 200
                    && b["job"]["state"] == j.state.as_str()
                    && b["job"]["attempt"] == j.attempt
                    && b["job"]["priority"] == j.priority,
                "GET {}: the model says {}, attempt {}, priority {}: {s} {b}",
                self.label(i),
                j.state.as_str(),
                j.attempt,
                j.priority
            );
        }
        Ok(())
    }

    /// The invariant checker reads many keys one after another, so no timer may change the keyspace
    /// while it runs: waits until nothing (lease, due job, rate-limit wake-up) is due in the next
    /// 400 ms. Leases were just extended, so this only ever waits for stale wake-ups.
    async fn quiesce(&mut self) {
        let deadline = Instant::now() + SETTLE;
        while Instant::now() < deadline {
            let mut next = i64::MAX;
            for shard in 0..self.shards {
                let keys = ojs_testkit::shard_keys(&self.nodes[0].namespace, shard);
                for key in [keys.active(), keys.scheduled(), keys.rl_wake()] {
                    let first: Vec<(String, f64)> = redis::cmd("ZRANGE")
                        .arg(key)
                        .arg(0)
                        .arg(0)
                        .arg("WITHSCORES")
                        .query_async(&mut self.redis[shard])
                        .await
                        .unwrap_or_default();
                    if let Some((_, s)) = first.first() {
                        next = next.min(*s as i64);
                    }
                }
            }
            let now = local_now_ms();
            if next > now + 400 {
                return;
            }
            tokio::time::sleep(Duration::from_millis((next - now).max(0) as u64 + 80)).await;
        }
    }
}

/// The keys named after a user value that stay once every job ended, by design: a queue's settings
/// (`q:qa:conf`, `q:qb:conf`: the operator's concurrency and tenancy, and the pool generation) and its
/// counters (`q:Q:stats`, GET /queues), and a key's operator override (`rl:K:ovr`, set without an
/// expiry here). A tenant's sub-queue (`qb@t1`) keeps nothing, not even a conf: its `want` leaves with
/// its last part.
fn persistent(family: &str, parts: &[&str]) -> bool {
    match family {
        "queue_conf" | "queue_stats" => !parts[0].contains('@'),
        "rl_ovr" => true,
        _ => false,
    }
}

#[test]
fn two_nodes_agree_with_the_model() {
    run_model(1);
}

#[test]
fn two_nodes_on_two_shards_agree_with_the_model() {
    run_model(2);
}

fn run_model(shards: usize) {
    let legacy = std::env::var("OJS_MODEL_LEGACY").is_ok_and(|v| v == "1");
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16);
    let seed = std::env::var("OJS_MODEL_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| uuid::Uuid::now_v7().as_u128() as u64);
    eprintln!("model test: {cases} cases, {shards} shard(s), OJS_MODEL_SEED={seed}, legacy={legacy}");
    let config = Config {
        cases,
        // Each run of a sequence starts two processes and may sleep through clock advances: shrinking
        // is worth a few tries only.
        max_shrink_iters: 16,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(seed),
        ..Config::default()
    };
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let mut runner = TestRunner::new(config);
    let result = runner.run(&sequence(), |ops| {
        rt.block_on(async {
            let mut h = Harness::start(legacy, shards).await;
            let r = h.run(&ops).await;
            if std::env::var("OJS_MODEL_TRACE").is_ok() {
                eprintln!("-- case:\n{}", h.trace.join("\n"));
            }
            r
        })
        .map_err(TestCaseError::fail)
    });
    match result {
        Ok(()) => {}
        // The reason carries the shrunk sequence's steps up to the failure, with what each did.
        Err(TestError::Fail(why, _)) => {
            panic!("the servers disagree with the model (OJS_MODEL_SEED={seed}):\n{why}")
        }
        Err(e) => panic!("{e}"),
    }
}
