//! No transition half-happens (issue 40). Redis does not roll back what a function wrote before it
//! raised an error, so every function of the library must decide before it writes: an error may only
//! come before its first write. This file is the fuzzer that holds the library to that rule.
//!
//! 1. **Record.** A server on a Redis of this test's own runs a workload over HTTP that reaches every
//!    library function (every feature: rate limits of each kind, tenants, pools, workflows, unique jobs,
//!    cron, aging, dead letters, lapsed leases…), while `MONITOR` records every command the server sent.
//! 2. **Replay.** The Redis is flushed and the recorded commands run again in order, so before each
//!    call the keyspace is the one the call met (its clock aside). Before a sampled subset of the
//!    function calls, the keyspace is saved (`DUMP` of every key, with its expiry) and the call is run
//!    mutated, many times, each from the saved keyspace: every argument replaced by empty, non-numeric,
//!    NaN, infinite, huge, negative, fractional or binary text; arguments missing or extra; a key
//!    replaced by one of another type; and a stored value the call meets changed: a job record's field
//!    (outer or cold) set to garbage or deleted, a record replaced by garbage, a hash field, a string,
//!    a sorted-set or set member without a job, a key deleted or of another type.
//! 3. **Judge.** A mutated call may succeed or fail, but a call that answers an error must leave the
//!    keyspace exactly as it was: the whole keyspace after it is compared with the saved one (keys that
//!    expired meanwhile aside). Every violation is reported with the function, the mutation, the error
//!    and the keys it changed, and fails the test; so does a library function the workload never called.
//!
//! The number of mutated calls per function is `OJS_FUZZ_RUNS` (default below); the sample is seeded
//! (`OJS_FUZZ_SEED`, default fixed), so a failure reproduces.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ojs_testkit::{OwnRedis, TestServer};
use rand::rngs::StdRng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::SeedableRng;
use redis::aio::MultiplexedConnection;
use reqwest::Method;
use serde_json::{json, Value};

/// Mutated calls per library function, by default (`OJS_FUZZ_RUNS` overrides it).
const RUNS_PER_FUNCTION: usize = 300;
/// Longest a mutated call may take: the library's loops are capped, whatever the input.
const CALL_LIMIT: Duration = Duration::from_secs(2);
/// At most this many recorded calls of one function are mutated (each from its own saved keyspace).
const POSITIONS_PER_FUNCTION: usize = 12;

// ---------------------------------------------------------------------------------------------------
// Recording: MONITOR on a raw connection.
// ---------------------------------------------------------------------------------------------------

/// Every command a Redis executes, as MONITOR shows it, collected by a thread until [`Monitor::stop`].
struct Monitor {
    stream: TcpStream,
    lines: Arc<Mutex<Vec<String>>>,
    reader: std::thread::JoinHandle<()>,
}

impl Monitor {
    fn start(port: u16) -> Self {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect for MONITOR");
        stream.write_all(b"MONITOR\r\n").expect("MONITOR");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        let read = stream.try_clone().expect("clone the MONITOR stream");
        let reader = std::thread::spawn(move || {
            let mut r = BufReader::new(read);
            let mut line = String::new();
            loop {
                line.clear();
                match r.read_line(&mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => sink.lock().expect("lines").push(line.trim_end().to_string()),
                }
            }
        });
        // MONITOR answers +OK before the first command it shows.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while lines.lock().expect("lines").is_empty() {
            assert!(std::time::Instant::now() < deadline, "MONITOR did not answer");
            std::thread::sleep(Duration::from_millis(5));
        }
        Self { stream, lines, reader }
    }

    fn stop(self) -> Vec<String> {
        let _ = self.stream.shutdown(Shutdown::Both);
        let _ = self.reader.join();
        let lines = self.lines.lock().expect("lines").clone();
        lines
    }
}

/// One MONITOR line's source (`127.0.0.1:port`, `lua`) and arguments, or None for `+OK` and the like.
fn parse_monitor(line: &str) -> Option<(String, Vec<Vec<u8>>)> {
    let line = line.strip_prefix('+')?;
    let open = line.find(" [")?;
    let close = open + line[open..].find("] ")?;
    let source = line[open + 2..close].split_once(' ')?.1.to_string();
    let mut args = Vec::new();
    let b = line[close + 2..].as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'"' {
            i += 1;
            continue;
        }
        i += 1;
        let mut arg = Vec::new();
        while i < b.len() && b[i] != b'"' {
            if b[i] == b'\\' && i + 1 < b.len() {
                i += 1;
                match b[i] {
                    b'n' => arg.push(b'\n'),
                    b'r' => arg.push(b'\r'),
                    b't' => arg.push(b'\t'),
                    b'a' => arg.push(7),
                    b'b' => arg.push(8),
                    b'x' if i + 2 < b.len() => {
                        let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok()?;
                        arg.push(u8::from_str_radix(hex, 16).ok()?);
                        i += 2;
                    }
                    c => arg.push(c),
                }
            } else {
                arg.push(b[i]);
            }
            i += 1;
        }
        i += 1;
        args.push(arg);
    }
    Some((source, args))
}

/// The commands a client sent that change or may change the keyspace: function calls and the few plain
/// writes the server makes outside them. Reads are not replayed (they change nothing), nor is anything
/// that would block (`XREAD BLOCK`) or reload the library.
fn replayable(args: &[Vec<u8>]) -> bool {
    let Some(name) = args.first() else { return false };
    let name = String::from_utf8_lossy(name).to_ascii_uppercase();
    matches!(
        name.as_str(),
        "FCALL"
            | "FCALL_RO"
            | "SET"
            | "DEL"
            | "UNLINK"
            | "HSET"
            | "HDEL"
            | "HINCRBY"
            | "ZADD"
            | "ZREM"
            | "SADD"
            | "SREM"
            | "PEXPIRE"
            | "EXPIRE"
            | "XADD"
            | "XTRIM"
    )
}

// ---------------------------------------------------------------------------------------------------
// The workload: every library function, over HTTP.
// ---------------------------------------------------------------------------------------------------

async fn ok(s: &TestServer, method: Method, path: &str, body: Option<Value>) -> Value {
    let (st, b) = send(s, method.clone(), path, None, body).await;
    assert!((200..300).contains(&st), "{method} {path}: {st} {b}");
    b
}

async fn send(s: &TestServer, method: Method, path: &str, tenant: Option<&str>, body: Option<Value>) -> (u16, Value) {
    let mut r = s.http.request(method, s.url(path));
    if let Some(t) = tenant {
        r = r.header("X-OJS-Tenant", t);
    }
    if let Some(b) = body {
        r = r.json(&b);
    }
    let r = r.send().await.expect("request");
    let st = r.status().as_u16();
    let text = r.text().await.unwrap_or_default();
    (st, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

async fn enqueue(s: &TestServer, body: Value) -> String {
    let b = ok(s, Method::POST, "/ojs/v1/jobs", Some(body)).await;
    b["job"]["id"].as_str().unwrap_or_default().to_string()
}

async fn fetch(s: &TestServer, body: Value) -> Vec<Value> {
    let b = ok(s, Method::POST, "/ojs/v1/workers/fetch", Some(body)).await;
    b["jobs"].as_array().cloned().unwrap_or_default()
}

fn id(j: &Value) -> String {
    j["id"].as_str().unwrap_or_default().to_string()
}

/// Drives the server through every feature the library serves; leaves jobs in every state. Returns the
/// ids of a few jobs (for the upgrade step, which no request reaches).
/// A webhook receiver on a free loopback port: it answers 200 and 500 in turn (so deliveries both
/// complete and fail), and lives as long as the test.
fn webhook_receiver() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for (n, conn) in listener.incoming().enumerate() {
            let Ok(mut conn) = conn else { continue };
            let mut buf = [0u8; 65536];
            let _ = std::io::Read::read(&mut conn, &mut buf);
            let status = if n % 2 == 0 {
                "200 OK"
            } else {
                "500 Internal Server Error"
            };
            let _ = conn
                .write_all(format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").as_bytes());
        }
    });
    port
}

async fn workload(s: &TestServer) -> Vec<String> {
    let soon = time_after_ms;
    // Webhooks first (a pod learns a new subscription within a second): every event goes to a receiver
    // that answers 200 and 500 in turn.
    let port = webhook_receiver();
    ok(
        s,
        Method::POST,
        "/ojs/v1/webhooks/subscriptions",
        Some(json!({"url": format!("http://127.0.0.1:{port}/hook"), "events": ["job.completed", "job.enqueued"]})),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // The schema registry: a version registered and removed.
    ok(
        s,
        Method::PUT,
        "/ojs/v1/admin/schemas/fz.schema/1",
        Some(json!({"schema": {"type": "array"}})),
    )
    .await;
    ok(s, Method::DELETE, "/ojs/v1/admin/schemas/fz.schema/1", None).await;
    // Settings.
    ok(
        s,
        Method::PUT,
        "/ojs/v1/admin/queues/fz-rl/rate-limit",
        Some(json!({"concurrency": 3, "rate": {"limit": 100, "period": "PT1M"}})),
    )
    .await;
    ok(
        s,
        Method::PUT,
        "/ojs/v1/admin/queues/fz-ten/tenancy",
        Some(json!({"source": "meta", "field": "customer", "weights": {"acme": 3},
                    "concurrency": {"acme": 1}, "default_concurrency": 2})),
    )
    .await;
    ok(
        s,
        Method::PUT,
        "/ojs/v1/admin/queues/fz-age/priority-aging",
        Some(json!({"interval": "PT1M"})),
    )
    .await;
    ok(
        s,
        Method::PUT,
        "/ojs/v1/admin/queues/fz-bp/config",
        Some(json!({"backpressure": {"max_depth": 100, "strategy": "reject"}})),
    )
    .await;
    ok(
        s,
        Method::PUT,
        "/ojs/v1/admin/pools/fz-pool",
        Some(json!({"queues": ["fz-a", "fz-b"], "strategy": "weighted", "weights": {"fz-a": 2}})),
    )
    .await;
    ok(
        s,
        Method::PUT,
        "/ojs/v1/admin/tenants/acme",
        Some(json!({"fairness_weight": 2})),
    )
    .await;
    ok(
        s,
        Method::POST,
        "/ojs/v1/cron",
        Some(
            json!({"name": "fz.tick", "expression": "* * * * * *", "overlap_policy": "allow",
                    "job_template": {"type": "fz.cron", "args": [], "options": {"queue": "fz-cron"}}}),
        ),
    )
    .await;

    // Plain jobs of every priority, scheduled ones, expiring ones, retry policies.
    for p in 0..5 {
        enqueue(
            s,
            json!({"type": "fz.plain", "args": [p], "queue": "fz", "priority": p}),
        )
        .await;
    }
    enqueue(
        s,
        json!({"type": "fz.later", "args": [], "queue": "fz", "scheduled_at": soon(300)}),
    )
    .await;
    enqueue(
        s,
        json!({"type": "fz.expiring", "args": [], "queue": "fz-exp", "expires_at": soon(200)}),
    )
    .await;
    let nan_retry = enqueue(
        s,
        json!({"type": "fz.nan", "args": [], "queue": "fz-nan",
               "options": {"retry": {"max_attempts": 1000, "initial_interval": "PT0S", "backoff_coefficient": 100}}}),
    )
    .await;
    enqueue(
        s,
        json!({"type": "fz.dead", "args": [], "queue": "fz-dead",
               "options": {"retry": {"max_attempts": 1, "on_exhaustion": "dead_letter"}}}),
    )
    .await;
    enqueue(
        s,
        json!({"type": "fz.dead", "args": [1], "queue": "fz-dead",
               "options": {"retry": {"max_attempts": 3, "non_retryable_errors": ["Fatal*"], "on_exhaustion": "dead_letter"}}}),
    )
    .await;
    ok(
        s,
        Method::POST,
        "/ojs/v1/jobs/batch",
        Some(json!({"jobs": [
            {"type": "fz.a", "args": [1], "queue": "fz-a"},
            {"type": "fz.a", "args": [2], "queue": "fz-a", "priority": 1},
            {"type": "fz.b", "args": [1], "queue": "fz-b"},
            {"type": "fz.b", "args": [2], "queue": "fz-b", "options": {"visibility_timeout_ms": 150}},
        ]})),
    )
    .await;
    // Rate limits of every kind.
    for i in 0..3 {
        enqueue(
            s,
            json!({"type": "fz.rl", "args": [i], "queue": "fz-keys", "rate_limit": {"key": "fz-conc", "concurrency": 1}}),
        )
        .await;
        enqueue(
            s,
            json!({"type": "fz.rl", "args": [i], "queue": "fz-keys",
                   "rate_limit": {"key": "fz-window", "rate": {"limit": 2, "period": "PT2S"}}}),
        )
        .await;
        enqueue(
            s,
            json!({"type": "fz.rl", "args": [i], "queue": "fz-keys",
                   "rate_limit": {"key": "fz-throttle", "throttle": {"limit": 2, "period": "PT1S"}}}),
        )
        .await;
        enqueue(
            s,
            json!({"type": "fz.rl", "args": [i], "queue": "fz-keys", "priority": 3,
                   "rate_limit": {"key": "fz-cost", "rate": {"limit": 10, "period": "PT1M"}, "cost": 3}}),
        )
        .await;
        enqueue(
            s,
            json!({"type": "fz.rl", "args": [i], "queue": "fz-keys",
                   "rate_limit": {"key": "fz-adapt", "concurrency": 4,
                                  "adaptive": {"increase_after": 1, "errors": ["TooManyRequests"]}}}),
        )
        .await;
        enqueue(
            s,
            json!({"type": "fz.floor", "args": [i], "queue": "fz-rl",
                   "rate_limit": {"key": format!("fz-floor-{}", i % 2), "concurrency": 3, "floor": 1}}),
        )
        .await;
    }
    enqueue(
        s,
        json!({"type": "fz.rl", "args": [], "queue": "fz-keys",
               "rate_limit": {"key": "fz-zero", "concurrency": 0, "on_limit": "reschedule"}}),
    )
    .await;
    enqueue(
        s,
        json!({"type": "fz.rl", "args": [], "queue": "fz-keys",
               "rate_limit": {"key": "fz-drop", "concurrency": 0, "on_limit": "drop"}}),
    )
    .await;
    // Tenants: by the queue's setting, and by header.
    for (i, who) in ["acme", "globex", "acme", "initech"].iter().enumerate() {
        enqueue(
            s,
            json!({"type": "fz.ten", "args": [i], "queue": "fz-ten", "meta": {"customer": who}}),
        )
        .await;
    }
    for t in ["t-one", "t-two"] {
        let (st, b) = send(
            s,
            Method::POST,
            "/ojs/v1/jobs",
            Some(t),
            Some(json!({"type": "fz.hdr", "args": [], "queue": "fz-hdr"})),
        )
        .await;
        assert_eq!(st, 201, "{b}");
    }
    // Unique jobs, each conflict policy; deduplication and root jobs.
    let unique = |copy: u32, on_conflict: &str, priority: u32| {
        json!({"type": "fz.unique", "args": [{"order": 1, "copy": copy}], "queue": "fz-unique", "priority": priority,
               "options": {"unique": {"keys": ["type", "args"], "args_keys": ["order"], "on_conflict": on_conflict}}})
    };
    enqueue(s, unique(1, "reject", 3)).await;
    send(s, Method::POST, "/ojs/v1/jobs", None, Some(unique(2, "reject", 3))).await;
    send(s, Method::POST, "/ojs/v1/jobs", None, Some(unique(3, "ignore", 3))).await;
    send(
        s,
        Method::POST,
        "/ojs/v1/jobs",
        None,
        Some(unique(4, "raise_priority", 0)),
    )
    .await;
    send(s, Method::POST, "/ojs/v1/jobs", None, Some(unique(5, "replace", 2))).await;
    for _ in 0..2 {
        enqueue(
            s,
            json!({"type": "fz.dedup", "args": [7], "options": {"queue": "fz-dedup", "dedup": true}}),
        )
        .await;
    }
    enqueue(
        s,
        json!({"type": "fz.leaf", "args": [1], "options": {"queue": "fz-dedup",
               "root_job": {"signature": "fz:root", "timestamp": "2026-02-13T12:00:00Z"}}}),
    )
    .await;
    enqueue(
        s,
        json!({"type": "fz.root", "args": [], "options": {"queue": "fz-roots",
               "root_job": {"signature": "fz:root", "timestamp": "2026-02-13T12:05:00Z", "is_root": true}}}),
    )
    .await;
    // Workflows: a chain, a batch with callbacks, a group to cancel, the seed's form.
    let chain = ok(
        s,
        Method::POST,
        "/ojs/v1/workflows",
        Some(json!({"type": "chain", "name": "fz-chain", "priority": 1, "steps": [
            {"type": "fz.s1", "args": [], "queue": "fz-wf"}, {"type": "fz.s2", "args": [], "queue": "fz-wf"},
            {"type": "fz.s3", "args": [], "queue": "fz-wf"}]})),
    )
    .await;
    ok(
        s,
        Method::POST,
        "/ojs/v1/workflows",
        Some(json!({"type": "batch", "jobs": [
            {"type": "fz.b1", "args": [], "queue": "fz-wf"}, {"type": "fz.b2", "args": [], "queue": "fz-wf",
             "options": {"retry": {"max_attempts": 1}}}],
            "callbacks": {"on_complete": {"type": "fz.done", "args": [], "queue": "fz-wf"},
                          "on_failure": {"type": "fz.failed", "args": [], "queue": "fz-wf"}}})),
    )
    .await;
    let group = ok(
        s,
        Method::POST,
        "/ojs/v1/workflows",
        Some(json!({"type": "group", "jobs": [
            {"type": "fz.g", "args": [1], "queue": "fz-wf2"}, {"type": "fz.g", "args": [2], "queue": "fz-wf2"}]})),
    )
    .await;
    enqueue(
        s,
        json!({"type": "fz.order", "queue": "fz-wf", "priority": 1, "args": [],
               "workflow": {"chain": [{"type": "fz.pay", "args": []}, {"type": "fz.ship", "args": []}]}}),
    )
    .await;
    for p in [4, 0, 2] {
        enqueue(
            s,
            json!({"type": "fz.aged", "args": [p], "queue": "fz-age", "priority": p}),
        )
        .await;
    }
    enqueue(s, json!({"type": "fz.bp", "args": [], "queue": "fz-bp"})).await;

    // Workers: claims, heartbeats, progress, ACKs (with a result, with the next fetch), NACKs of every
    // kind, a lapsed lease.
    let got = fetch(s, json!({"queues": ["fz"], "worker_id": "w1", "count": 3})).await;
    let leases: Vec<Value> = got
        .iter()
        .map(|j| json!({"job_id": id(j), "lease_id": j["lease_id"]}))
        .collect();
    ok(
        s,
        Method::POST,
        "/ojs/v1/workers/heartbeat",
        Some(json!({"worker_id": "w1", "active_jobs": leases})),
    )
    .await;
    if let Some(j) = got.first() {
        ok(
            s,
            Method::PUT,
            &format!("/ojs/v1/jobs/{}/progress", id(j)),
            Some(json!({"progress": 0.5, "message": "half", "worker_id": "w1"})),
        )
        .await;
        // Its checkpoint: saved, read, deleted, saved again (the ACK below gives it the job's retention).
        let cp = format!("/ojs/v1/jobs/{}/checkpoint", id(j));
        let save = json!({"state": {"row": 7}, "lease_id": j["lease_id"], "worker_id": "w1"});
        ok(s, Method::PUT, &cp, Some(save.clone())).await;
        ok(s, Method::GET, &cp, None).await;
        ok(s, Method::DELETE, &cp, None).await;
        ok(s, Method::PUT, &cp, Some(save)).await;
        ok(
            s,
            Method::POST,
            "/ojs/v1/workers/ack",
            Some(
                json!({"job_id": id(j), "lease_id": j["lease_id"], "result": {"ok": true},
                        "fetch": {"queues": ["fz"], "worker_id": "w1"}}),
            ),
        )
        .await;
    }
    if let Some(j) = got.get(1) {
        ok(
            s,
            Method::POST,
            "/ojs/v1/workers/nack",
            Some(json!({"job_id": id(j), "error": {"type": "Boom", "message": "x", "retryable": true}})),
        )
        .await;
    }
    if let Some(j) = got.get(2) {
        ok(
            s,
            Method::POST,
            "/ojs/v1/workers/nack",
            Some(json!({"job_id": id(j), "requeue": true, "error": {"message": "shutting down"}})),
        )
        .await;
    }
    for j in fetch(s, json!({"queues": ["fz-nan"], "worker_id": "w2"})).await {
        ok(
            s,
            Method::POST,
            "/ojs/v1/workers/nack",
            Some(json!({"job_id": id(&j), "error": {"type": "Boom", "message": "again"}})),
        )
        .await;
    }
    let dead = fetch(s, json!({"queues": ["fz-dead"], "worker_id": "w2", "count": 2})).await;
    for (i, j) in dead.iter().enumerate() {
        let kind = if i == 0 { "Boom" } else { "FatalError" };
        ok(
            s,
            Method::POST,
            "/ojs/v1/workers/nack",
            Some(json!({"job_id": id(j), "error": {"type": kind, "message": "dead"}})),
        )
        .await;
    }
    let keyed = fetch(s, json!({"queues": ["fz-keys"], "worker_id": "w3", "count": 8})).await;
    for j in &keyed {
        let key = j["rate_limit"]["key"].as_str().unwrap_or_default();
        let body = match key {
            "fz-adapt" => json!({"job_id": id(j), "error": {"type": "TooManyRequests", "message": "429"}}),
            "fz-window" => json!({"job_id": id(j), "error": {"type": "Slow", "message": "later",
                                  "rate_limit_until": soon(400)}}),
            _ => Value::Null,
        };
        if body.is_null() {
            let mut ack = json!({"job_id": id(j), "result": {"n": 1}});
            if key == "fz-cost" {
                ack["cost_used"] = json!(1);
            }
            ok(s, Method::POST, "/ojs/v1/workers/ack", Some(ack)).await;
        } else {
            ok(s, Method::POST, "/ojs/v1/workers/nack", Some(body)).await;
        }
    }
    // Explain what waits, read jobs, re-prioritize, cancel.
    let (_, listed) = send(
        s,
        Method::GET,
        "/ojs/v1/admin/jobs?state=available&limit=50",
        None,
        None,
    )
    .await;
    let waiting: Vec<String> = listed["items"]
        .as_array()
        .or_else(|| listed["jobs"].as_array())
        .map(|a| a.iter().map(id).collect())
        .unwrap_or_default();
    for w in waiting.iter().take(12) {
        send(s, Method::GET, &format!("/ojs/v1/jobs/{w}/explain"), None, None).await;
        send(s, Method::GET, &format!("/ojs/v1/jobs/{w}"), None, None).await;
    }
    if let Some(w) = waiting.first() {
        send(
            s,
            Method::PATCH,
            &format!("/ojs/v1/jobs/{w}"),
            None,
            Some(json!({"priority": 0})),
        )
        .await;
    }
    if let Some(w) = waiting.get(1) {
        send(s, Method::DELETE, &format!("/ojs/v1/jobs/{w}"), None, None).await;
    }
    send(s, Method::GET, &format!("/ojs/v1/jobs/{nan_retry}/explain"), None, None).await;
    // Rate-limit inspection and overrides, queue-level limits and floors.
    send(s, Method::GET, "/ojs/v1/rate-limits/fz-conc", None, None).await;
    send(s, Method::GET, "/ojs/v1/rate-limits?page=1&per_page=20", None, None).await;
    ok(
        s,
        Method::PUT,
        "/ojs/v1/rate-limits/fz-conc",
        Some(
            json!({"concurrency": 0, "throttle": {"limit": 1, "period": "PT1S"}, "expires_at": "2099-01-01T00:00:00Z"}),
        ),
    )
    .await;
    s.metrics().await;
    let floors = fetch(s, json!({"queues": ["fz-rl"], "worker_id": "w4", "count": 4})).await;
    send(s, Method::GET, "/ojs/v1/admin/queues/fz-rl/rate-limit", None, None).await;
    if let Some(j) = floors.first() {
        ok(s, Method::POST, "/ojs/v1/workers/ack", Some(json!({"job_id": id(j)}))).await;
    }
    // Tenants: fair share, a tenant's cap, a request naming a tenant.
    let tenants = fetch(s, json!({"queues": ["fz-ten"], "worker_id": "w5", "count": 3})).await;
    if let Some(j) = tenants.first() {
        ok(s, Method::POST, "/ojs/v1/workers/ack", Some(json!({"job_id": id(j)}))).await;
    }
    send(
        s,
        Method::POST,
        "/ojs/v1/workers/fetch",
        Some("t-one"),
        Some(json!({"queues": ["fz-hdr"], "worker_id": "w6"})),
    )
    .await;
    // Weighted, pools, dedup, roots, aging, backpressure, workflows.
    fetch(
        s,
        json!({"strategy": "weighted", "count": 2, "worker_id": "w7",
               "queues": [{"name": "fz-a", "weight": 2}, {"name": "fz-b", "weight": 1}]}),
    )
    .await;
    fetch(s, json!({"pool": "fz-pool", "worker_id": "w7", "count": 2})).await;
    fetch(
        s,
        json!({"queues": ["fz-roots", "fz-dedup"], "worker_id": "w8", "count": 5}),
    )
    .await;
    fetch(
        s,
        json!({"queues": ["fz-age", "fz-bp", "fz-exp", "fz-unique"], "worker_id": "w8", "count": 3}),
    )
    .await;
    let steps = fetch(s, json!({"queues": ["fz-wf"], "worker_id": "w9", "count": 4})).await;
    for (i, j) in steps.iter().enumerate() {
        if j["type"] == "fz.b2" {
            ok(
                s,
                Method::POST,
                "/ojs/v1/workers/nack",
                Some(json!({"job_id": id(j), "error": {"message": "no", "retryable": false}})),
            )
            .await;
        } else if i % 2 == 0 {
            ok(
                s,
                Method::POST,
                "/ojs/v1/workers/ack",
                Some(json!({"job_id": id(j), "result": {"i": i}})),
            )
            .await;
        }
    }
    let chain_id = chain["workflow"]["id"].as_str().unwrap_or_default();
    send(s, Method::GET, &format!("/ojs/v1/workflows/{chain_id}"), None, None).await;
    let group_id = group["workflow"]["id"].as_str().unwrap_or_default();
    send(s, Method::DELETE, &format!("/ojs/v1/workflows/{group_id}"), None, None).await;
    // Pause and resume; re-score an aged queue; the dead letters.
    ok(s, Method::POST, "/ojs/v1/queues/fz/pause", None).await;
    fetch(s, json!({"queues": ["fz"], "worker_id": "w1"})).await;
    ok(s, Method::POST, "/ojs/v1/queues/fz/resume", None).await;
    ok(
        s,
        Method::PUT,
        "/ojs/v1/admin/queues/fz-age/priority-aging",
        Some(json!({"interval": "PT2M"})),
    )
    .await;
    let (_, dl) = send(s, Method::GET, "/ojs/v1/dead-letter", None, None).await;
    let dead_ids: Vec<String> = dl["jobs"]
        .as_array()
        .or_else(|| dl["items"].as_array())
        .map(|a| a.iter().map(id).collect())
        .unwrap_or_default();
    assert!(dead_ids.len() >= 2, "two dead-lettered jobs: {dl}");
    if let Some(d) = dead_ids.first() {
        send(
            s,
            Method::POST,
            &format!("/ojs/v1/dead-letter/{d}/retry"),
            None,
            Some(json!({})),
        )
        .await;
    }
    if let Some(d) = dead_ids.get(1) {
        send(s, Method::DELETE, &format!("/ojs/v1/dead-letter/{d}"), None, None).await;
    }
    // Timers: due jobs promoted, leases lapsed and reclaimed, cron fired, the window reopened.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    fetch(
        s,
        json!({"queues": ["fz", "fz-keys", "fz-cron", "fz-b"], "worker_id": "w1", "count": 6}),
    )
    .await;
    // Settings removed while jobs wait and run.
    ok(s, Method::DELETE, "/ojs/v1/rate-limits/fz-conc", None).await;
    ok(s, Method::DELETE, "/ojs/v1/admin/queues/fz-rl/rate-limit", None).await;
    ok(s, Method::DELETE, "/ojs/v1/admin/queues/fz-ten/tenancy", None).await;
    ok(s, Method::DELETE, "/ojs/v1/admin/queues/fz-age/priority-aging", None).await;
    ok(s, Method::DELETE, "/ojs/v1/admin/pools/fz-pool", None).await;
    ok(s, Method::DELETE, "/ojs/v1/cron/fz.tick", None).await;
    fetch(
        s,
        json!({"queues": ["fz-rl", "fz-ten", "fz-age", "fz-keys"], "worker_id": "w1", "count": 6}),
    )
    .await;
    // The webhook deliveries of what the workload did: sent, failed and retried, completed.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let mut ids = vec![nan_retry];
    ids.extend(waiting.into_iter().take(4));
    ids.extend(dead_ids);
    ids
}

/// RFC 3339 for Redis-independent "now + ms" (the workload's only use of the local clock: a job's
/// schedule a moment away).
fn time_after_ms(ms: i64) -> String {
    let t = time::OffsetDateTime::now_utc() + time::Duration::milliseconds(ms);
    t.format(&time::format_description::well_known::Rfc3339)
        .expect("format a time")
}

// ---------------------------------------------------------------------------------------------------
// The keyspace: saved, restored, compared.
// ---------------------------------------------------------------------------------------------------

/// A key as saved: its type, `DUMP` and absolute expiry in ms (-1: none).
#[derive(Clone, PartialEq, Eq, Debug)]
struct Saved {
    kind: String,
    dump: Vec<u8>,
    expires_at: i64,
}

type Keyspace = BTreeMap<Vec<u8>, Saved>;

async fn keyspace(c: &mut MultiplexedConnection) -> Keyspace {
    let mut keys: Vec<Vec<u8>> = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, page): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(1000)
            .query_async(c)
            .await
            .expect("SCAN");
        keys.extend(page);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    let mut out = Keyspace::new();
    for chunk in keys.chunks(300) {
        let mut pipe = redis::pipe();
        for k in chunk {
            pipe.cmd("TYPE").arg(k).cmd("DUMP").arg(k).cmd("PEXPIRETIME").arg(k);
        }
        let values: Vec<redis::Value> = pipe.query_async(c).await.expect("DUMP the keyspace");
        for (k, v) in chunk.iter().zip(values.chunks(3)) {
            let kind: String = redis::from_redis_value(v[0].clone()).unwrap_or_default();
            let dump: Option<Vec<u8>> = redis::from_redis_value(v[1].clone()).unwrap_or_default();
            let expires_at: i64 = redis::from_redis_value(v[2].clone()).unwrap_or(-1);
            if let Some(dump) = dump {
                out.insert(k.clone(), Saved { kind, dump, expires_at });
            }
        }
    }
    out
}

async fn restore(c: &mut MultiplexedConnection, saved: &Keyspace) {
    let _: () = redis::cmd("FLUSHALL")
        .arg("SYNC")
        .query_async(c)
        .await
        .expect("FLUSHALL");
    let all: Vec<(&Vec<u8>, &Saved)> = saved.iter().collect();
    for chunk in all.chunks(300) {
        let mut pipe = redis::pipe();
        for (k, s) in chunk {
            let c = pipe.cmd("RESTORE").arg(*k);
            if s.expires_at > 0 {
                c.arg(s.expires_at).arg(&s.dump).arg("ABSTTL");
            } else {
                c.arg(0).arg(&s.dump);
            }
            c.ignore();
        }
        let _: () = pipe.query_async(c).await.expect("RESTORE the keyspace");
    }
}

/// Keys that differ between two keyspaces, leaving out those that expired (or are about to) meanwhile.
fn changed(before: &Keyspace, after: &Keyspace, now_ms: i64) -> Vec<String> {
    let gone = |s: &Saved| s.expires_at > 0 && s.expires_at <= now_ms + 50;
    let mut out = Vec::new();
    for (k, b) in before {
        match after.get(k) {
            None if gone(b) => {}
            None => out.push(format!("{} deleted", show(k))),
            Some(a) if a != b => out.push(format!("{} changed ({} -> {})", show(k), b.kind, a.kind)),
            _ => {}
        }
    }
    for k in after.keys().filter(|k| !before.contains_key(*k)) {
        out.push(format!("{} created", show(k)));
    }
    out
}

fn show(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The server's count of writes since the last save (none are saved): whether a call wrote anything.
async fn writes(c: &mut MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("persistence")
        .query_async(c)
        .await
        .expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("rdb_changes_since_last_save:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("rdb_changes_since_last_save")
}

async fn redis_now_ms(c: &mut MultiplexedConnection) -> i64 {
    let t: Vec<i64> = redis::cmd("TIME").query_async(c).await.expect("TIME");
    t[0] * 1000 + t[1] / 1000
}

// ---------------------------------------------------------------------------------------------------
// Mutations.
// ---------------------------------------------------------------------------------------------------

/// Text no argument or stored number should be trusted with.
const BAD: &[&str] = &[
    "",
    "x",
    "nan",
    "inf",
    "-inf",
    "-1",
    "0.5",
    "1e308",
    "-1e308",
    "9007199254740993",
    "99999999999999999999",
    "1e400",
    "0x10",
    " 7",
    "\u{ff}\u{fe}",
];

/// A function call as recorded: the function's name, its keys and its arguments.
#[derive(Clone, Debug)]
struct Call {
    function: String,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Call {
    fn of(args: &[Vec<u8>]) -> Option<Self> {
        let name = String::from_utf8_lossy(args.first()?).to_ascii_uppercase();
        if name != "FCALL" && name != "FCALL_RO" {
            return None;
        }
        let n: usize = std::str::from_utf8(args.get(2)?).ok()?.parse().ok()?;
        Some(Call {
            function: show(args.get(1)?),
            keys: args.get(3..3 + n)?.to_vec(),
            args: args.get(3 + n..)?.to_vec(),
        })
    }

    /// The library function's name without its version (`fetch_<version>` -> `fetch`).
    fn op(&self) -> String {
        self.function
            .rsplit_once('_')
            .map(|(op, _)| op.to_string())
            .unwrap_or_else(|| self.function.clone())
    }

    fn command(&self) -> redis::Cmd {
        let mut c = redis::cmd("FCALL");
        c.arg(&self.function)
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args);
        c
    }
}

/// A change to a stored value, made before a call runs.
#[derive(Clone, Debug)]
enum Stored {
    /// A job record's field (outer or cold) set to a value, or deleted (None).
    RecordField(Vec<u8>, String, Option<String>),
    /// A key's value replaced by a string (garbage, or a key of another type).
    Replace(Vec<u8>, Vec<u8>),
    HashField(Vec<u8>, Vec<u8>, Option<String>),
    /// A sorted set member (a new one: no job behind it) with this score.
    ZMember(Vec<u8>, Vec<u8>, String),
    SetMember(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
}

#[derive(Clone, Debug)]
enum Mutation {
    Arg(usize, Vec<u8>),
    Args(Vec<Vec<u8>>),
    Keys(Vec<Vec<u8>>),
    Stored(Stored),
}

impl Mutation {
    fn describe(&self) -> String {
        match self {
            Mutation::Arg(i, v) => format!("ARGV[{}] = {:?}", i + 1, show(v)),
            Mutation::Args(a) => format!("{} arguments", a.len()),
            Mutation::Keys(k) => format!("KEYS = {:?}", k.iter().map(|k| show(k)).collect::<Vec<_>>()),
            Mutation::Stored(s) => match s {
                Stored::RecordField(k, f, v) => format!("record {} field {f} = {v:?}", show(k)),
                Stored::Replace(k, v) => format!("{} replaced by {:?}", show(k), show(v)),
                Stored::HashField(k, f, v) => format!("hash {} field {} = {v:?}", show(k), show(f)),
                Stored::ZMember(k, m, score) => format!("zset {} member {} at {score}", show(k), show(m)),
                Stored::SetMember(k, m) => format!("set {} member {}", show(k), show(m)),
                Stored::Delete(k) => format!("{} deleted", show(k)),
            },
        }
    }
}

/// Sets a field of a job record, outer map or cold map, or deletes it (ARGV[2] = '' and ARGV[3] = '1').
const SET_RECORD_FIELD: &str = r#"
local v = redis.call('GET', KEYS[1])
local ok, f = pcall(cmsgpack.unpack, v)
if not ok or type(f) ~= 'table' then return 0 end
local name, value, del = ARGV[1], ARGV[2], ARGV[3] == '1'
if f[name] == nil and f.cold then
  local c = cmsgpack.unpack(f.cold)
  if c[name] ~= nil then
    if del then c[name] = nil else c[name] = value end
    f.cold = cmsgpack.pack(c)
    redis.call('SET', KEYS[1], cmsgpack.pack(f), 'KEEPTTL')
    return 1
  end
end
if del then f[name] = nil else f[name] = value end
redis.call('SET', KEYS[1], cmsgpack.pack(f), 'KEEPTTL')
return 1
"#;

/// A job record's field names, outer and cold; nothing for a value that is not a record.
const RECORD_FIELDS: &str = r#"
local ok, f = pcall(cmsgpack.unpack, redis.call('GET', KEYS[1]))
if not ok or type(f) ~= 'table' then return {} end
local out = {}
for k, _ in pairs(f) do if type(k) == 'string' and k ~= 'cold' then out[#out + 1] = k end end
if f.cold then
  local ok2, c = pcall(cmsgpack.unpack, f.cold)
  if ok2 and type(c) == 'table' then
    for k, _ in pairs(c) do out[#out + 1] = k end
  end
end
return out
"#;

async fn apply(c: &mut MultiplexedConnection, s: &Stored) {
    let r: redis::RedisResult<redis::Value> = match s {
        Stored::RecordField(k, f, v) => {
            redis::cmd("EVAL")
                .arg(SET_RECORD_FIELD)
                .arg(1)
                .arg(k)
                .arg(f)
                .arg(v.clone().unwrap_or_default())
                .arg(if v.is_none() { "1" } else { "0" })
                .query_async(c)
                .await
        }
        Stored::Replace(k, v) => {
            redis::pipe()
                .cmd("DEL")
                .arg(k)
                .cmd("SET")
                .arg(k)
                .arg(v)
                .query_async(c)
                .await
        }
        Stored::HashField(k, f, Some(v)) => redis::cmd("HSET").arg(k).arg(f).arg(v).query_async(c).await,
        Stored::HashField(k, f, None) => redis::cmd("HDEL").arg(k).arg(f).query_async(c).await,
        Stored::ZMember(k, m, score) => redis::cmd("ZADD").arg(k).arg(score).arg(m).query_async(c).await,
        Stored::SetMember(k, m) => redis::cmd("SADD").arg(k).arg(m).query_async(c).await,
        Stored::Delete(k) => redis::cmd("DEL").arg(k).query_async(c).await,
    };
    r.expect("apply a stored mutation");
}

/// A member like `m` but naming no job: its last four bytes replaced.
fn ghost(m: &[u8]) -> Vec<u8> {
    let mut g = m.to_vec();
    let n = g.len();
    if n >= 4 {
        g[n - 4..].copy_from_slice(b"dead");
    } else {
        g.extend_from_slice(b"-dead");
    }
    g
}

/// What a call's mutations may change in the stored keyspace: the keys it names, the keys whose name
/// holds one of its arguments (a job id, a queue, a rate-limit key, a tenant…), and the keys of the
/// prefix itself (`P active`, `P scheduled`, `P seq`…).
fn related_keys(call: &Call, saved: &Keyspace) -> Vec<Vec<u8>> {
    let prefix = call.args.first().cloned().unwrap_or_default();
    let needles: Vec<&[u8]> = call
        .args
        .iter()
        .chain(&call.keys)
        .filter(|a| a.len() >= 4 && **a != prefix && !a.iter().all(u8::is_ascii_digit))
        .map(Vec::as_slice)
        .collect();
    saved
        .keys()
        .filter(|k| {
            let own = k.starts_with(&prefix) && !k[prefix.len()..].contains(&b':');
            own || call.keys.contains(k) || needles.iter().any(|n| k.windows(n.len()).any(|w| w == *n))
        })
        .cloned()
        .collect()
}

/// The records of the first jobs the prefix's own sorted sets index (`P active`, `P scheduled`, `P dead`,
/// `P ready`…): the jobs a timer's call (promote, requeue), which names none, meets first.
async fn indexed_records(c: &mut MultiplexedConnection, call: &Call, saved: &Keyspace) -> Vec<Vec<u8>> {
    let prefix = call.args.first().cloned().unwrap_or_default();
    let mut out = Vec::new();
    for (k, sv) in saved {
        if sv.kind != "zset" || !k.starts_with(&prefix) || k[prefix.len()..].contains(&b':') {
            continue;
        }
        let members: Vec<Vec<u8>> = redis::cmd("ZRANGE")
            .arg(k)
            .arg(0)
            .arg(1)
            .query_async(c)
            .await
            .unwrap_or_default();
        for m in members {
            let id = &m[m.len().saturating_sub(36)..];
            let mut jk = prefix.clone();
            jk.extend_from_slice(b"job:");
            jk.extend_from_slice(id);
            if saved.contains_key(&jk) && !out.contains(&jk) {
                out.push(jk);
            }
        }
    }
    out
}

async fn stored_mutations(c: &mut MultiplexedConnection, call: &Call, saved: &Keyspace) -> Vec<Stored> {
    let mut out = Vec::new();
    let mut targets = related_keys(call, saved);
    for k in indexed_records(c, call, saved).await {
        if !targets.contains(&k) {
            targets.push(k);
        }
    }
    for k in targets {
        let kind = saved[&k].kind.as_str();
        out.push(Stored::Delete(k.clone()));
        match kind {
            "string" => {
                let fields: Vec<String> = redis::cmd("EVAL")
                    .arg(RECORD_FIELDS)
                    .arg(1)
                    .arg(&k)
                    .query_async(c)
                    .await
                    .unwrap_or_default();
                // A plain string (a counter, a policy, a lock) is given garbage of its own type; a job
                // record is replaced whole by garbage, and each of its fields too.
                let garbage: &[&str] = if fields.is_empty() {
                    &["", "nan", "-1", "1e400"]
                } else {
                    &["x", "\u{81}\u{a1}"]
                };
                for v in garbage {
                    out.push(Stored::Replace(k.clone(), v.as_bytes().to_vec()));
                }
                for f in fields {
                    out.push(Stored::RecordField(k.clone(), f.clone(), None));
                    for v in BAD.iter().take(12) {
                        out.push(Stored::RecordField(k.clone(), f.clone(), Some((*v).to_string())));
                    }
                }
            }
            "hash" => {
                let fields: Vec<Vec<u8>> = redis::cmd("HKEYS").arg(&k).query_async(c).await.unwrap_or_default();
                for f in fields.into_iter().take(40) {
                    out.push(Stored::HashField(k.clone(), f.clone(), None));
                    for v in BAD.iter().take(12) {
                        out.push(Stored::HashField(k.clone(), f.clone(), Some((*v).to_string())));
                    }
                }
            }
            "zset" => {
                let first: Vec<(Vec<u8>, f64)> = redis::cmd("ZRANGE")
                    .arg(&k)
                    .arg(0)
                    .arg(2)
                    .arg("WITHSCORES")
                    .query_async(c)
                    .await
                    .unwrap_or_default();
                for (m, score) in first {
                    out.push(Stored::ZMember(k.clone(), ghost(&m), format!("{}", score - 1.0)));
                    out.push(Stored::ZMember(k.clone(), ghost(&m), "-inf".into()));
                    out.push(Stored::ZMember(k.clone(), m.clone(), "inf".into()));
                    out.push(Stored::ZMember(k.clone(), m, "-inf".into()));
                }
                out.push(Stored::ZMember(k.clone(), b"x".to_vec(), "-inf".into()));
            }
            "set" => {
                let some: Vec<Vec<u8>> = redis::cmd("SRANDMEMBER")
                    .arg(&k)
                    .arg(2)
                    .query_async(c)
                    .await
                    .unwrap_or_default();
                for m in some {
                    out.push(Stored::SetMember(k.clone(), ghost(&m)));
                }
                out.push(Stored::SetMember(k.clone(), b"x".to_vec()));
            }
            _ => {}
        }
    }
    out
}

fn argument_mutations(call: &Call, other_keys: &[Vec<u8>]) -> Vec<Mutation> {
    let mut out = Vec::new();
    for i in 0..call.args.len() {
        for v in BAD {
            out.push(Mutation::Arg(i, v.as_bytes().to_vec()));
        }
    }
    let n = call.args.len();
    if n > 0 {
        out.push(Mutation::Args(call.args[..n - 1].to_vec()));
        out.push(Mutation::Args(call.args[..n / 2].to_vec()));
        out.push(Mutation::Args(Vec::new()));
    }
    let mut extra = call.args.clone();
    extra.push(b"x".to_vec());
    out.push(Mutation::Args(extra.clone()));
    extra.extend(std::iter::repeat_n(b"1".to_vec(), 13));
    out.push(Mutation::Args(extra));
    for k in other_keys {
        if !call.keys.is_empty() {
            let mut keys = call.keys.clone();
            keys[0] = k.clone();
            out.push(Mutation::Keys(keys));
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------------
// The fuzzer.
// ---------------------------------------------------------------------------------------------------

#[derive(Default)]
struct Tally {
    recorded: usize,
    mutated: usize,
    errors: usize,
    violations: usize,
}

struct Violation {
    function: String,
    mutation: String,
    error: String,
    changed: Vec<String>,
}

async fn connection(url: &str) -> MultiplexedConnection {
    let cfg = redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(60)));
    redis::Client::open(url)
        .expect("redis url")
        .get_multiplexed_async_connection_with_config(&cfg)
        .await
        .expect("redis connection")
}

async fn fuzz(shards: u16) {
    let redis = OwnRedis::scratch().await;
    let mut cfg = ojs_server::Config::for_redis(&redis.url());
    cfg.namespace = ojs_testkit::unique_namespace();
    cfg.tick_ms = 100;
    cfg.shards = shards;
    cfg.retention_secs = 3_600;
    // Root jobs and their leaves must share a shard.
    // (and a weighted FETCH over queues of two shards takes its picks from pick-1.lua).
    cfg.queue_shards = ojs_server::config::PerQueue(if shards > 1 {
        vec![
            ("fz-roots".into(), 0),
            ("fz-dedup".into(), 0),
            ("fz-a".into(), 1),
            ("fz-b".into(), 2),
        ]
    } else {
        Vec::new()
    });
    // Webhook deliveries retried within the workload (the receiver fails every other one).
    cfg.webhook_retry_base_ms = 10;
    let monitor = Monitor::start(redis.port);
    let namespace = cfg.namespace.clone();
    let s = TestServer::start_config(cfg).await;
    let ids = workload(&s).await;
    s.stop().await;
    let lines = monitor.stop();

    let mut c = connection(&redis.url()).await;
    // A call that runs past this is answered BUSY to others and may be killed (see CALL_LIMIT).
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("busy-reply-threshold")
        .arg(500)
        .query_async(&mut c)
        .await
        .expect("CONFIG SET");
    let library: Vec<redis::Value> = redis::cmd("FUNCTION")
        .arg("LIST")
        .query_async(&mut c)
        .await
        .expect("FUNCTION LIST");
    let functions = library_functions(&library);
    assert!(functions.len() >= 30, "the library's functions: {functions:?}");

    let commands: Vec<Vec<Vec<u8>>> = lines
        .iter()
        .filter_map(|l| parse_monitor(l))
        .filter(|(source, args)| source != "lua" && replayable(args))
        .map(|(_, args)| args)
        .collect();
    // The upgrade of an older keyspace (job-migrate-1.lua) runs at start on a v1 or v2 keyspace only: its
    // call is made here, on jobs the workload left.
    let version = commands
        .iter()
        .find_map(|c| Call::of(c))
        .and_then(|c| c.function.rsplit_once('_').map(|(_, v)| v.to_string()))
        .expect("a recorded call");
    let prefix = ojs_store::Keys::new(&namespace).prefix().to_string();
    let mut migrate = vec![
        b"FCALL".to_vec(),
        format!("job_migrate_{version}").into_bytes(),
        b"2".to_vec(),
        format!("{prefix}job:{}", ids[0]).into_bytes(),
        format!("{prefix}moving").into_bytes(),
        prefix.clone().into_bytes(),
    ];
    migrate.extend(ids.iter().map(|i| i.clone().into_bytes()));
    let mut commands = commands;
    commands.push(migrate);
    // So does the indexing of lanes an older build parked (lane-index-2.lua): on the workload's key of
    // concurrency 1, whose lane FETCH parked.
    let (queue, key) = ("fz-keys", "fz-conc");
    commands.push(
        [
            "FCALL".to_string(),
            format!("lane_index_{version}"),
            "3".into(),
            format!("{prefix}q:{queue}:parked"),
            format!("{prefix}rl:{key}:parked"),
            format!("{prefix}moving"),
            prefix.clone(),
            queue.into(),
            key.into(),
        ]
        .into_iter()
        .map(String::into_bytes)
        .collect(),
    );
    let mut tally: BTreeMap<String, Tally> = functions.iter().map(|f| (f.clone(), Tally::default())).collect();
    let mut positions: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, cmd) in commands.iter().enumerate() {
        if let Some(call) = Call::of(cmd) {
            tally.entry(call.op()).or_default().recorded += 1;
            positions.entry(call.op()).or_default().push(i);
        }
    }
    let seed: u64 = std::env::var("OJS_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let runs: usize = std::env::var("OJS_FUZZ_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(RUNS_PER_FUNCTION);
    let mut rng = StdRng::seed_from_u64(seed + u64::from(shards));
    // Which recorded calls of each function are mutated, and how many mutations each gets.
    let mut chosen: BTreeMap<usize, usize> = BTreeMap::new();
    for list in positions.values() {
        let mut picks: Vec<usize> = list.clone();
        picks.shuffle(&mut rng);
        picks.truncate(POSITIONS_PER_FUNCTION);
        let each = runs.div_ceil(picks.len().max(1));
        for p in picks {
            chosen.insert(p, each);
        }
    }
    // Only a weighted FETCH over queues of several shards picks with pick-1.lua.
    let never: Vec<String> = tally
        .iter()
        .filter(|(f, t)| t.recorded == 0 && (shards > 1 || f.as_str() != "pick"))
        .map(|(f, _)| f.clone())
        .collect();

    let _: () = redis::cmd("FLUSHALL")
        .arg("SYNC")
        .query_async(&mut c)
        .await
        .expect("FLUSHALL");
    let mut violations: Vec<Violation> = Vec::new();
    let started = std::time::Instant::now();
    let total = commands.len();
    for (i, cmd) in commands.iter().enumerate() {
        if let (Some(call), Some(&budget)) = (Call::of(cmd), chosen.get(&i)) {
            let saved = keyspace(&mut c).await;
            let other_keys: Vec<Vec<u8>> = saved
                .iter()
                .filter(|(k, s)| !call.keys.contains(k) && s.kind != "stream")
                .map(|(k, _)| k.clone())
                .collect::<Vec<_>>()
                .choose_multiple(&mut rng, 3)
                .cloned()
                .collect();
            let mut all: Vec<Mutation> = argument_mutations(&call, &other_keys);
            all.extend(
                stored_mutations(&mut c, &call, &saved)
                    .await
                    .into_iter()
                    .map(Mutation::Stored),
            );
            all.shuffle(&mut rng);
            all.truncate(budget);
            let t = tally.entry(call.op()).or_default();
            let mut dirty = false;
            for m in &all {
                if dirty {
                    restore(&mut c, &saved).await;
                }
                let mut run = call.clone();
                match m {
                    Mutation::Arg(i, v) => run.args[*i] = v.clone(),
                    Mutation::Args(a) => run.args = a.clone(),
                    Mutation::Keys(k) => run.keys = k.clone(),
                    Mutation::Stored(st) => apply(&mut c, st).await,
                }
                // A stored mutation is itself a write: the baseline is the keyspace it left.
                let base = if matches!(m, Mutation::Stored(_)) {
                    Some(keyspace(&mut c).await)
                } else {
                    None
                };
                let before = writes(&mut c).await;
                if std::env::var_os("OJS_FUZZ_TRACE").is_some() {
                    eprintln!("{} {}", call.op(), m.describe());
                }
                let result =
                    match tokio::time::timeout(CALL_LIMIT, run.command().query_async::<redis::Value>(&mut c)).await {
                        Ok(r) => r,
                        Err(_) => {
                            // A loop that bad input does not end: stop it (possible only if it wrote nothing).
                            let mut k = connection(&redis.url()).await;
                            let killed: redis::RedisResult<String> =
                                redis::cmd("FUNCTION").arg("KILL").query_async(&mut k).await;
                            if let Err(e) = killed {
                                panic!(
                                    "{} did not return within {CALL_LIMIT:?} with {}, and could not be killed ({e})",
                                    call.op(),
                                    m.describe()
                                );
                            }
                            c = connection(&redis.url()).await;
                            Err(redis::RedisError::from((
                                redis::ErrorKind::Io,
                                "did not return",
                                format!("ran past {CALL_LIMIT:?} (killed)"),
                            )))
                        }
                    };
                let wrote = writes(&mut c).await != before;
                dirty = wrote || matches!(m, Mutation::Stored(_));
                t.mutated += 1;
                if let Err(e) = result {
                    t.errors += 1;
                    if e.to_string().contains("did not return") {
                        t.violations += 1;
                        violations.push(Violation {
                            function: call.op(),
                            mutation: m.describe(),
                            error: e.to_string(),
                            changed: vec!["(a loop without an end)".into()],
                        });
                    } else if wrote {
                        let after = keyspace(&mut c).await;
                        let now = redis_now_ms(&mut c).await;
                        let diff = changed(base.as_ref().unwrap_or(&saved), &after, now);
                        if !diff.is_empty() {
                            t.violations += 1;
                            violations.push(Violation {
                                function: call.op(),
                                mutation: m.describe(),
                                error: e.to_string(),
                                changed: diff,
                            });
                        }
                    }
                }
            }
            if dirty {
                restore(&mut c, &saved).await;
            }
        }
        // The recorded command itself, to move on to the next one's keyspace.
        let mut replay = redis::cmd(&show(&cmd[0]));
        for a in &cmd[1..] {
            replay.arg(a);
        }
        if let Err(e) = replay.query_async::<redis::Value>(&mut c).await {
            // What the server sent must pass the library's argument checks.
            assert!(
                !e.to_string().contains("argument"),
                "a call the server made is refused for its arguments: {e}"
            );
        }
        if i % 500 == 499 {
            eprintln!(
                "atomicity ({shards} shard(s)): {}/{total} commands replayed, {:?}",
                i + 1,
                started.elapsed()
            );
        }
    }

    eprintln!("atomicity ({shards} shard(s)), seed {seed}: function, calls recorded, mutated calls, errors, errors after a write");
    for (f, t) in &tally {
        eprintln!(
            "  {f:<20} {:>6} {:>6} {:>6} {:>4}",
            t.recorded, t.mutated, t.errors, t.violations
        );
    }
    let mut seen = BTreeSet::new();
    let mut report = Vec::new();
    for v in &violations {
        // One example per function and error place (the message up to its first colon after the script).
        let place: String = v.error.chars().take(120).collect();
        if seen.insert((v.function.clone(), place.clone())) {
            report.push(format!(
                "{}: {}\n      error: {}\n      changed: {}",
                v.function,
                v.mutation,
                place,
                v.changed.iter().take(6).cloned().collect::<Vec<_>>().join("; ")
            ));
        }
    }
    assert!(
        never.is_empty(),
        "the workload never called these library functions: {never:?}"
    );
    assert!(
        violations.is_empty(),
        "{} mutated calls answered an error after writing ({} distinct places):\n  {}",
        violations.len(),
        report.len(),
        report.join("\n  ")
    );
}

/// The function names of the ojs library in a `FUNCTION LIST` reply, without their version.
fn library_functions(list: &[redis::Value]) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(v: &redis::Value, out: &mut Vec<String>) {
        match v {
            redis::Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    if let (redis::Value::BulkString(k), Some(redis::Value::BulkString(name))) =
                        (item, items.get(i + 1))
                    {
                        if k == b"name" {
                            let n = show(name);
                            if let Some((op, _)) = n.rsplit_once('_') {
                                if !n.starts_with("ojs_") {
                                    out.push(op.to_string());
                                }
                            }
                        }
                    }
                    walk(item, out);
                }
            }
            redis::Value::Map(pairs) => {
                for (k, val) in pairs {
                    if let (redis::Value::BulkString(k), redis::Value::BulkString(name)) = (k, val) {
                        if k == b"name" {
                            let n = show(name);
                            if let Some((op, _)) = n.rsplit_once('_') {
                                if !n.starts_with("ojs_") {
                                    out.push(op.to_string());
                                }
                            }
                        }
                    }
                    walk(val, out);
                }
            }
            _ => {}
        }
    }
    for v in list {
        walk(v, &mut out);
    }
    out.sort();
    out.dedup();
    out
}

#[tokio::test]
async fn no_function_that_answers_an_error_has_written_anything() {
    if ojs_testkit::skip_on_cluster("fuzzes on a redis-server of its own, as the single-Redis run does") {
        return;
    }
    fuzz(1).await;
}

#[tokio::test]
async fn no_function_that_answers_an_error_has_written_anything_on_three_shards() {
    if ojs_testkit::skip_on_cluster("fuzzes on a redis-server of its own, as the single-Redis run does") {
        return;
    }
    fuzz(3).await;
}

/// A valid retry policy lost its job (issue 40): exponential from 0 ms with a coefficient of 100. At
/// attempt 156 the delay `0 * 100^155` was NaN, ZADD refused it, and the NACK answered 500 after
/// `leave_active` had taken the job out of `P active`: no index held it, its queue's active count stayed
/// 1 forever. Every NACK must now be answered, the job must stay retryable with a finite delay (0: the
/// policy's own), and the keyspace must stay whole.
#[tokio::test]
async fn a_retry_policy_from_zero_ms_never_loses_its_job() {
    let s = TestServer::start().await;
    let q = "nan-backoff";
    let id = s
        .enqueue(json!({"type": "retry.forever", "args": [], "queue": q,
            "options": {"retry": {"max_attempts": 1000, "initial_interval": "PT0S", "backoff_coefficient": 100}}}))
        .await;
    for attempt in 1..=170u64 {
        let got = loop {
            let jobs = s.fetch(&[q], 1).await;
            if let Some(j) = jobs.into_iter().next() {
                break j;
            }
            // Retryable with a delay of 0 ms: the promote timer makes it available at its next tick.
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        assert_eq!(got["id"], id.as_str());
        assert_eq!(got["attempt"], attempt, "{got}");
        let (st, b) = s
            .post(
                "/ojs/v1/workers/nack",
                json!({"job_id": id, "error": {"type": "Boom", "message": "again"}}),
            )
            .await;
        assert_eq!(st, 200, "NACK of attempt {attempt}: {b}");
        assert_eq!(b["state"], "retryable", "{b}");
        assert_eq!(b["retry_delay_ms"], 0, "{b}");
    }
    s.assert_invariants().await;
}

/// A ready member without a record (issue 40) made the group commit that popped it fail: `count()` of a
/// nil priority, after the pop and any claim before it. It must leave its set, and every request of the
/// call be served.
#[tokio::test]
async fn a_ready_member_without_a_record_leaves_and_the_group_commit_goes_on() {
    let s = TestServer::start().await;
    let q = "ghost";
    let a = s.enqueue(json!({"type": "t", "args": [1], "queue": q})).await;
    let b = s.enqueue(json!({"type": "t", "args": [2], "queue": q})).await;
    let mut r = s.redis().await;
    let ghost = format!("{:0>16}0199aaaa-0000-7000-8000-00000000dead", 1);
    let _: () = redis::cmd("ZADD")
        .arg(s.keys().queue_ready(q))
        .arg(-1)
        .arg(&ghost)
        .query_async(&mut r)
        .await
        .expect("ZADD");
    let (_, replies) = s
        .store()
        .worker_requests(&[ojs_testkit::claim_request(q, 1), ojs_testkit::claim_request(q, 1)])
        .await
        .expect("the group commit is served");
    let claimed: Vec<usize> = replies.iter().map(|r| r.claimed.len()).collect();
    assert_eq!(claimed, vec![1, 1], "each request claims a real job");
    for id in [a, b] {
        let (_, job) = s.get(&format!("/ojs/v1/jobs/{id}")).await;
        assert_eq!(job["job"]["state"], "active", "{job}");
    }
    let left: Option<f64> = redis::cmd("ZSCORE")
        .arg(s.keys().queue_ready(q))
        .arg(&ghost)
        .query_async(&mut r)
        .await
        .expect("ZSCORE");
    assert_eq!(left, None, "the member without a job left its set");
    s.assert_invariants().await;
}

/// A bad later request of a group commit (issue 40) failed the call after the earlier requests had
/// claimed: their jobs were active, and their workers never heard of them. Every request is checked
/// before the first is served: the call is refused and nothing changes.
#[tokio::test]
async fn a_bad_later_request_of_a_group_commit_changes_nothing() {
    let s = TestServer::start().await;
    let q = "bad-later";
    let id = s.enqueue(json!({"type": "t", "args": [], "queue": q})).await;
    let k = s.keys();
    let request = |count: &str| -> Vec<String> {
        [
            "w", count, "30000", "strict", "", "", "", "", "", "", "1", "", "", q, "1",
        ]
        .map(String::from)
        .to_vec()
    };
    let mut args = vec![k.prefix().to_string(), "0".to_string()];
    args.extend(request("1"));
    args.extend(request("x"));
    let mut r = s.redis().await;
    let err = redis::cmd("FCALL")
        .arg(format!("fetch_{}", ojs_store::scripts::LIBRARY_VERSION))
        .arg(2)
        .arg(k.active())
        .arg(k.move_guard())
        .arg(&args)
        .query_async::<redis::Value>(&mut r)
        .await
        .expect_err("the call is refused");
    assert!(err.to_string().contains("count"), "{err}");
    let (_, job) = s.get(&format!("/ojs/v1/jobs/{id}")).await;
    assert_eq!(
        job["job"]["state"], "available",
        "the first request claimed nothing: {job}"
    );
    s.assert_invariants().await;
}

/// An aging interval that is not a number (issue 40) made every promote tick move due jobs and then
/// fail (a NaN score): the scheduled job was never promoted. It now counts as aging off.
#[tokio::test]
async fn an_aging_interval_that_is_no_number_does_not_stop_the_promoter() {
    let s = TestServer::start().await;
    let q = "nan-aging";
    let (st, b) = s
        .put(
            &format!("/ojs/v1/admin/queues/{q}/priority-aging"),
            json!({"interval": "PT1M"}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    let mut r = s.redis().await;
    let _: () = redis::cmd("HSET")
        .arg(s.keys().queue_conf(q))
        .arg("aging_s")
        .arg("nan")
        .query_async(&mut r)
        .await
        .expect("HSET");
    let id = s
        .enqueue(json!({"type": "t", "args": [], "queue": q, "options": {"delay_ms": 50}}))
        .await;
    s.wait_state(&id, "available", Duration::from_secs(10)).await;
    assert_eq!(s.fetch(&[q], 1).await.len(), 1);
}
