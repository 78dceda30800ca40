//! Issue 39, item 3: a shard moved live. On a 3-primary Redis Cluster the test kit starts, two pods of one
//! deployment run `--shards 3` while producers enqueue (plain jobs, jobs that fail once and are retried,
//! jobs under a rate-limit key with a concurrency limit, chain workflows) and workers fetch, heartbeat,
//! ack and nack; meanwhile the slot of the shard holding the limited key and the workflows is moved to
//! another primary by hand, as the README tells an operator (`CLUSTER SETSLOT … IMPORTING/MIGRATING`,
//! `MIGRATE` in small batches with pauses, `CLUSTER SETSLOT … NODE` on every primary). Afterwards every
//! job ran exactly as expected, the limit was never exceeded, every workflow completed and every shard
//! passes the invariant checker. Then a move that stalls: requests to that shard answer 503 `retryable`
//! at their deadline and change nothing.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ojs_server::config::PerQueue;
use ojs_testkit::cluster::LocalCluster;
use ojs_testkit::invariants::check_shard_invariants;
use ojs_testkit::TestServer;
use serde_json::{json, Value};

/// The queues: `mv` on shard 1 (the shard that moves: its jobs, the limited key, the workflows),
/// `st` on shard 2, `z0` on shard 0. Every FETCH names all three.
const MOVES: &str = "mv";
const QUEUES: [&str; 3] = ["mv", "st", "z0"];
const MOVED_SHARD: usize = 1;
/// The rate-limit key's concurrency.
const LIMIT: i64 = 2;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// Acked at its first attempt.
    Plain,
    /// Nacked (retryable) at its first attempt, acked at its second.
    Flaky,
    /// Under the rate-limit key (concurrency `LIMIT`): held a while, with a heartbeat, then acked.
    Limited,
}

/// What the producers and workers saw.
#[derive(Default)]
struct Log {
    /// Every job a producer was answered 201 (or 409: its earlier attempt landed) for.
    enqueued: Mutex<HashMap<String, Kind>>,
    workflows: Mutex<Vec<String>>,
    /// Every attempt a worker was handed, by job id.
    runs: Mutex<HashMap<String, Vec<u64>>>,
    /// Jobs acked (200), with how many times.
    acked: Mutex<HashMap<String, u32>>,
    /// Jobs whose ACK, NACK or heartbeat was refused as `lease_lost` (their lease lapsed).
    lapsed: Mutex<HashSet<String>>,
    /// Answers other than the expected one, by route and status, with one body of each.
    odd: Mutex<HashMap<(String, u16), (usize, String)>>,
    /// Worker-side count of limited jobs held now (incremented when a FETCH hands one over, decremented
    /// before its ACK is sent: never above what the server counts), and its highest value.
    limited_now: AtomicI64,
    limited_max: AtomicI64,
    requests: AtomicUsize,
}

impl Log {
    fn odd(&self, route: &str, status: u16, body: &Value) {
        let mut m = self.odd.lock().unwrap();
        let e = m
            .entry((route.to_string(), status))
            .or_insert_with(|| (0, body.to_string()));
        e.0 += 1;
    }
}

fn config(cluster: &LocalCluster, ns: &str) -> ojs_server::Config {
    let mut cfg = ojs_server::Config::for_cluster(&cluster.seeds());
    cfg.namespace = ns.to_string();
    cfg.tick_ms = 20;
    cfg.shards = 3;
    cfg.queue_shards = PerQueue(vec![("z0".into(), 0), ("mv".into(), 1), ("st".into(), 2)]);
    cfg
}

async fn node(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("redis url")
        .get_multiplexed_async_connection()
        .await
        .expect("redis connection")
}

fn job_body(kind: Kind, queue: &str) -> Value {
    let id = uuid::Uuid::now_v7().to_string();
    let retry = json!({"max_attempts": 3, "initial_interval": "PT0.05S", "jitter": false});
    match kind {
        Kind::Plain => json!({"id": id, "type": "mv.plain", "args": [], "options": {"queue": queue, "retry": retry}}),
        Kind::Flaky => json!({"id": id, "type": "mv.flaky", "args": [], "options": {"queue": queue, "retry": retry}}),
        Kind::Limited => {
            json!({"id": id, "type": "mv.limited", "args": [], "options": {"queue": queue, "retry": retry},
            "rate_limit": {"key": "mv-key", "concurrency": LIMIT}})
        }
    }
}

/// POSTs until the answer is not a 5xx (a producer or worker retries what the server says is
/// retryable), recording every other answer than `want`.
async fn post_until_done(s: &TestServer, log: &Log, path: &str, body: Value, want: u16) -> (u16, Value) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        log.requests.fetch_add(1, Ordering::Relaxed);
        let (st, b) = s.post(path, body.clone()).await;
        if st != want {
            log.odd(path, st, &b);
        }
        if st < 500 || Instant::now() > deadline {
            return (st, b);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn producer(s: Arc<TestServer>, log: Arc<Log>, stop: Arc<AtomicBool>, n: usize) {
    let mut i = n;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        if i % 25 == 0 {
            let body = json!({"type": "chain", "name": "mv", "steps": [
                {"type": "mv.step", "args": [1], "options": {"queue": MOVES}},
                {"type": "mv.step", "args": [2], "options": {"queue": MOVES}},
                {"type": "mv.step", "args": [3], "options": {"queue": MOVES}}
            ]});
            let (st, b) = post_until_done(&s, &log, "/ojs/v1/workflows", body, 201).await;
            if st == 201 {
                log.workflows
                    .lock()
                    .unwrap()
                    .push(b["workflow"]["id"].as_str().expect("workflow id").to_string());
            }
            continue;
        }
        let (kind, queue) = match i % 5 {
            0 => (Kind::Plain, MOVES),
            1 => (Kind::Flaky, MOVES),
            2 => (Kind::Limited, MOVES),
            3 => (Kind::Plain, "st"),
            _ => (Kind::Flaky, "z0"),
        };
        let body = job_body(kind, queue);
        let id = body["id"].as_str().unwrap().to_string();
        // An enqueue answered 5xx may have landed: sent again with its id, it is 201 or 409.
        let (st, _) = post_until_done(&s, &log, "/ojs/v1/jobs", body, 201).await;
        if st == 201 || st == 409 {
            log.enqueued.lock().unwrap().insert(id, kind);
        }
        tokio::time::sleep(Duration::from_millis(8)).await;
    }
}

fn lapsed(b: &Value) -> bool {
    b["error"]["code"] == "lease_lost"
}

async fn worker(s: Arc<TestServer>, log: Arc<Log>, stop: Arc<AtomicBool>, name: String) {
    while !stop.load(Ordering::Relaxed) {
        let body = json!({"queues": QUEUES, "worker_id": name, "count": 3, "visibility_timeout_ms": 8000});
        log.requests.fetch_add(1, Ordering::Relaxed);
        let (st, b) = s.post("/ojs/v1/workers/fetch", body).await;
        if st != 200 {
            log.odd("/ojs/v1/workers/fetch", st, &b);
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        let jobs = b["jobs"].as_array().cloned().unwrap_or_default();
        if jobs.is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        }
        let mut limited = 0;
        for j in &jobs {
            let id = j["id"].as_str().expect("id").to_string();
            let attempt = j["attempt"].as_u64().expect("attempt");
            log.runs.lock().unwrap().entry(id).or_default().push(attempt);
            if j["type"] == "mv.limited" {
                limited += 1;
            }
        }
        if limited > 0 {
            let now = log.limited_now.fetch_add(limited, Ordering::SeqCst) + limited;
            log.limited_max.fetch_max(now, Ordering::SeqCst);
        }
        // Work a while, with a heartbeat for the batch.
        tokio::time::sleep(Duration::from_millis(15)).await;
        let leases: Vec<Value> = jobs
            .iter()
            .map(|j| json!({"job_id": j["id"], "lease_id": j["lease_id"]}))
            .collect();
        let (_, b) = post_until_done(
            &s,
            &log,
            "/ojs/v1/workers/heartbeat",
            json!({"worker_id": name, "active_jobs": leases}),
            200,
        )
        .await;
        for l in b["jobs"].as_array().into_iter().flatten() {
            if l["lease_lost"] == true {
                log.lapsed
                    .lock()
                    .unwrap()
                    .insert(l["job_id"].as_str().unwrap_or_default().to_string());
            }
        }
        tokio::time::sleep(Duration::from_millis(15)).await;
        for j in &jobs {
            let id = j["id"].as_str().unwrap().to_string();
            if j["type"] == "mv.limited" {
                log.limited_now.fetch_sub(1, Ordering::SeqCst);
            }
            let claim = json!({"job_id": id, "lease_id": j["lease_id"]});
            let fail = j["type"] == "mv.flaky" && j["attempt"] == 1;
            let (path, mut body) = if fail {
                ("/ojs/v1/workers/nack", claim)
            } else {
                ("/ojs/v1/workers/ack", claim)
            };
            if fail {
                body["error"] = json!({"type": "Flaky", "message": "first attempt", "retryable": true});
            }
            let (st, b) = post_until_done(&s, &log, path, body, 200).await;
            if st == 200 && !fail {
                *log.acked.lock().unwrap().entry(id.clone()).or_default() += 1;
            }
            if lapsed(&b) {
                log.lapsed.lock().unwrap().insert(id);
            }
        }
    }
}

/// A node's id and address.
struct Node {
    url: String,
    host: String,
    port: u16,
    id: String,
}

async fn node_info(url: &str) -> Node {
    let id: String = redis::cmd("CLUSTER")
        .arg("MYID")
        .query_async(&mut node(url).await)
        .await
        .expect("CLUSTER MYID");
    let addr = url.trim_start_matches("redis://");
    let (host, port) = addr.rsplit_once(':').expect("host:port");
    Node {
        url: url.to_string(),
        host: host.to_string(),
        port: port.parse().expect("port"),
        id,
    }
}

/// `CLUSTER SETSLOT <slot> <state> [<node id>]` on the node at `url`.
async fn setslot(url: &str, slot: u16, state: &str, id: Option<&str>) {
    let mut c = redis::cmd("CLUSTER");
    c.arg("SETSLOT").arg(slot).arg(state).arg(id);
    let _: () = c
        .query_async(&mut node(url).await)
        .await
        .unwrap_or_else(|e| panic!("CLUSTER SETSLOT {slot} {state} on {url}: {e}"));
}

/// What a move did.
#[derive(Debug)]
struct Moved {
    keys: usize,
    batches: usize,
    /// From the first SETSLOT to the last.
    window: Duration,
}

/// Moves `slot` from `from` to `to` by hand, as the README tells: IMPORTING on the target, MIGRATING
/// on the source, `MIGRATE` `batch` keys at a time with `pause` between batches, then `NODE` on the
/// target, the source and every other primary.
async fn move_slot(slot: u16, from: &Node, to: &Node, others: &[Node], batch: usize, pause: Duration) -> Moved {
    let started = Instant::now();
    setslot(&to.url, slot, "IMPORTING", Some(&from.id)).await;
    setslot(&from.url, slot, "MIGRATING", Some(&to.id)).await;
    let mut src = node(&from.url).await;
    let (mut keys, mut batches) = (0, 0);
    loop {
        let got: Vec<String> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(batch)
            .query_async(&mut src)
            .await
            .expect("GETKEYSINSLOT");
        if got.is_empty() {
            break;
        }
        let _: redis::Value = redis::cmd("MIGRATE")
            .arg(&to.host)
            .arg(to.port)
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(&got)
            .query_async(&mut src)
            .await
            .unwrap_or_else(|e| panic!("MIGRATE {got:?}: {e}"));
        keys += got.len();
        batches += 1;
        tokio::time::sleep(pause).await;
    }
    for n in std::iter::once(to).chain(std::iter::once(from)).chain(others) {
        setslot(&n.url, slot, "NODE", Some(&to.id)).await;
    }
    Moved {
        keys,
        batches,
        window: started.elapsed(),
    }
}

/// `errorstat_<code>` counts of a node's `INFO errorstats`.
async fn error_stats(url: &str) -> HashMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("errorstats")
        .query_async(&mut node(url).await)
        .await
        .expect("INFO errorstats");
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("errorstat_")?.split_once(":count=")?;
            Some((name.to_string(), rest.trim().parse().ok()?))
        })
        .collect()
}

async fn reset_stats(url: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut node(url).await)
        .await
        .expect("CONFIG RESETSTAT");
}

async fn assert_all_invariants(cluster: &LocalCluster, s: &TestServer) {
    for i in 0..3 {
        let keys = s.shard_keys(i);
        let owner = cluster.owner_url(&keys.schema());
        let problems = check_shard_invariants(&owner, &s.namespace, i).await;
        assert!(problems.is_empty(), "shard {i} on {owner}: {problems:#?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_moved_to_another_primary_while_jobs_flow_loses_and_repeats_nothing() {
    let started = Instant::now();
    // Nothing fails over here: a long node timeout keeps a loaded machine's stalls from failing a node.
    let cluster = LocalCluster::start_with_node_timeout(3, 0, 15_000);
    let ns = ojs_testkit::unique_namespace();
    let a = Arc::new(TestServer::start_config(config(&cluster, &ns)).await);
    let b = Arc::new(TestServer::start_config(config(&cluster, &ns)).await);
    let moved_keys = a.shard_keys(MOVED_SHARD);
    let from = node_info(&cluster.owner_url(&moved_keys.schema())).await;
    let slot = ojs_store::keys::slot_of(&moved_keys.schema());
    let mut others = Vec::new();
    for p in &cluster.ports {
        let url = format!("redis://127.0.0.1:{p}");
        if url != from.url {
            others.push(node_info(&url).await);
        }
    }
    let to = others.remove(0);

    let log = Arc::new(Log::default());
    // Jobs of the limited key first, more than its limit: the workers meet the limit from the start.
    for _ in 0..6 {
        let body = job_body(Kind::Limited, MOVES);
        let id = a.enqueue(body).await;
        log.enqueued.lock().unwrap().insert(id, Kind::Limited);
    }
    let stop_producers = Arc::new(AtomicBool::new(false));
    let stop_workers = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for (n, s) in [&a, &b].into_iter().enumerate() {
        tasks.push(tokio::spawn(producer(
            s.clone(),
            log.clone(),
            stop_producers.clone(),
            n * 7,
        )));
    }
    for (n, s) in [&a, &b, &a, &b].into_iter().enumerate() {
        tasks.push(tokio::spawn(worker(
            s.clone(),
            log.clone(),
            stop_workers.clone(),
            format!("w{n}"),
        )));
    }

    // Traffic first, so the shard holds keys of every kind; then the move, in batches of 8 keys 15 ms
    // apart; then traffic on the moved shard.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    reset_stats(&from.url).await;
    reset_stats(&to.url).await;
    let before = log.requests.load(Ordering::Relaxed);
    // Meanwhile a producer of another shard's queue only (ids of the server's: a client's id is looked
    // up on every shard) is served: counts the enqueues answered while the slot moves.
    let moving = Arc::new(AtomicBool::new(true));
    let beside = tokio::spawn({
        let (s, log, moving) = (b.clone(), log.clone(), moving.clone());
        async move {
            let mut served = 0;
            while moving.load(Ordering::SeqCst) {
                let (st, body) = s
                    .post(
                        "/ojs/v1/jobs",
                        json!({"type": "mv.plain", "args": [], "options": {"queue": "st"}}),
                    )
                    .await;
                assert_eq!(st, 201, "{body}");
                let id = body["job"]["id"].as_str().expect("id").to_string();
                log.enqueued.lock().unwrap().insert(id, Kind::Plain);
                served += usize::from(moving.load(Ordering::SeqCst));
            }
            served
        }
    });
    let moved = move_slot(slot, &from, &to, &others, 8, Duration::from_millis(15)).await;
    moving.store(false, Ordering::SeqCst);
    let during = log.requests.load(Ordering::Relaxed) - before;
    let beside = beside.await.expect("the other shard's producer");
    let (src_errors, dst_errors) = (error_stats(&from.url).await, error_stats(&to.url).await);
    assert_eq!(
        cluster.owner_url(&moved_keys.schema()),
        to.url,
        "the shard's slot is on the target"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop_producers.store(true, Ordering::Relaxed);
    for t in tasks.drain(..2) {
        t.await.expect("producer");
    }

    // Every job and workflow runs to its end.
    let enqueued = log.enqueued.lock().unwrap().clone();
    let workflows = log.workflows.lock().unwrap().clone();
    let drain = Instant::now();
    let steps = loop {
        let mut steps = Vec::new();
        let mut done = enqueued.keys().all(|id| log.acked.lock().unwrap().contains_key(id));
        for w in &workflows {
            let (st, b) = a.get(&format!("/ojs/v1/workflows/{w}")).await;
            done &= st == 200 && b["workflow"]["state"] == "completed";
            steps.extend(
                b["workflow"]["jobs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|j| j["id"].as_str().map(str::to_string)),
            );
        }
        if done {
            break steps;
        }
        assert!(
            drain.elapsed() < Duration::from_secs(30),
            "not everything ran within 30 s: {} of {} jobs acked; odd answers {:#?}",
            enqueued
                .keys()
                .filter(|id| log.acked.lock().unwrap().contains_key(*id))
                .count(),
            enqueued.len(),
            log.odd.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    stop_workers.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("worker");
    }
    eprintln!(
        "shard_move: {} jobs and {} workflows ({} steps); {} requests; move of slot {slot} from {} to {}: \
         {moved:?}, {during} requests meanwhile and {beside} enqueues to another shard; source errorstats {src_errors:?}, target {dst_errors:?}; \
         odd answers {:?}; lapsed {:?}; limited at most {} at once; {:?} so far",
        enqueued.len(),
        workflows.len(),
        steps.len(),
        log.requests.load(Ordering::Relaxed),
        from.url,
        to.url,
        log.odd.lock().unwrap(),
        log.lapsed.lock().unwrap(),
        log.limited_max.load(Ordering::SeqCst),
        started.elapsed()
    );

    // The move happened while scripts ran: they were told to wait (TRYAGAIN) or redirected (ASK).
    assert!(
        moved.keys > 40 && moved.batches > 5 && moved.window > Duration::from_millis(100),
        "{moved:?}"
    );
    assert!(
        src_errors.get("TRYAGAIN").copied().unwrap_or(0) + dst_errors.get("TRYAGAIN").copied().unwrap_or(0) > 0,
        "no script met the move: source {src_errors:?}, target {dst_errors:?}"
    );
    // The other shards did not wait for the move.
    assert!(
        beside >= 3,
        "{beside} enqueues to another shard answered during the move ({moved:?})"
    );
    // No job lost, none run twice beyond a lapsed lease.
    let lapsed = log.lapsed.lock().unwrap().clone();
    let runs = log.runs.lock().unwrap().clone();
    let acked = log.acked.lock().unwrap().clone();
    for (id, kind) in &enqueued {
        if lapsed.contains(id) {
            continue;
        }
        let want: &[u64] = if *kind == Kind::Flaky { &[1, 2] } else { &[1] };
        assert_eq!(runs.get(id).map(Vec::as_slice), Some(want), "job {id} ({kind:?})");
        assert_eq!(acked.get(id), Some(&1), "job {id} ({kind:?}) acked once");
    }
    for id in &steps {
        if !lapsed.contains(id) {
            assert_eq!(runs.get(id).map(Vec::as_slice), Some(&[1][..]), "workflow step {id}");
            assert_eq!(acked.get(id), Some(&1), "workflow step {id} acked once");
        }
    }
    // Nothing ran that nobody enqueued.
    for id in runs.keys() {
        assert!(
            enqueued.contains_key(id) || steps.contains(id),
            "job {id} ran, but no producer was told it was enqueued"
        );
    }
    for id in enqueued.keys().take(50) {
        let (st, b) = a.get(&format!("/ojs/v1/jobs/{id}")).await;
        assert_eq!((st, &b["job"]["state"]), (200, &json!("completed")), "{b}");
    }
    // The limit was never exceeded, and was reached (the check could fail).
    assert_eq!(
        log.limited_max.load(Ordering::SeqCst),
        LIMIT,
        "limited jobs held at once"
    );
    // Every request the server answered during the move was answered in time: no 5xx reached a client.
    let odd = log.odd.lock().unwrap().clone();
    assert!(
        odd.keys().all(|(_, st)| *st < 500),
        "answers a client had to retry: {odd:#?}"
    );
    assert_all_invariants(&cluster, &a).await;
    assert!(
        enqueued.len() > 50 && workflows.len() >= 2,
        "{} jobs, {} workflows",
        enqueued.len(),
        workflows.len()
    );

    // A move that stalls (IMPORTING/MIGRATING set, nothing migrated): the shard's scripts are told to
    // wait until the request's deadline, then answered 503 retryable; nothing of them was applied.
    let held = {
        let id = a.enqueue(job_body(Kind::Plain, MOVES)).await;
        let got = a.fetch(&[MOVES], 1).await;
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0]["id"], id.as_str());
        got[0].clone()
    };
    setslot(&from.url, slot, "IMPORTING", Some(&to.id)).await;
    setslot(&to.url, slot, "MIGRATING", Some(&from.id)).await;
    let stalled = Instant::now();
    let fresh = job_body(Kind::Plain, MOVES);
    let fresh_id = fresh["id"].as_str().unwrap().to_string();
    let (enq, ack) = tokio::join!(
        a.post("/ojs/v1/jobs", fresh.clone()),
        b.post(
            "/ojs/v1/workers/ack",
            json!({"job_id": held["id"], "lease_id": held["lease_id"]})
        )
    );
    let waited = stalled.elapsed();
    for (what, (st, body)) in [("enqueue", &enq), ("ack", &ack)] {
        assert_eq!(*st, 503, "{what} during a stalled move: {body}");
        assert_eq!(body["error"]["retryable"], true, "{what}: {body}");
        let says = body["error"]["message"].as_str().unwrap_or("");
        assert!(
            says.contains("moving to another primary") && says.contains("nothing was applied"),
            "{what}: {body}"
        );
    }
    // The shard's deadline is 10 s (the cluster client's response timeout); two requests waited it out.
    assert!(
        waited >= Duration::from_secs(9) && waited < Duration::from_secs(20),
        "answered after {waited:?}"
    );
    // The operator gives up: the slot stays where it is. The enqueue did not land, the ack was not
    // applied: sent again, both succeed.
    setslot(&to.url, slot, "STABLE", None).await;
    setslot(&from.url, slot, "STABLE", None).await;
    assert_eq!(a.get(&format!("/ojs/v1/jobs/{fresh_id}")).await.0, 404);
    let (st, body) = a.get(&format!("/ojs/v1/jobs/{}", held["id"].as_str().unwrap())).await;
    assert_eq!((st, &body["job"]["state"]), (200, &json!("active")), "{body}");
    assert_eq!(a.post("/ojs/v1/jobs", fresh).await.0, 201);
    let (st, body) = b
        .post(
            "/ojs/v1/workers/ack",
            json!({"job_id": held["id"], "lease_id": held["lease_id"]}),
        )
        .await;
    assert_eq!(st, 200, "{body}");
    assert_all_invariants(&cluster, &a).await;
    eprintln!(
        "shard_move: stalled move answered 503 after {waited:?}; the test took {:?}",
        started.elapsed()
    );
}
