//! A deployment spread over shards (`--shards`, `--queue-shard`; issue 13): each shard is the whole key
//! schema under its own hash tag. On one Redis node the shards are just prefixes, which is enough to
//! check the routing (these tests); `shards_land_on_different_primaries` runs the same on a real
//! 3-primary cluster and checks where the keys are.

use std::time::Duration;

use ojs_server::config::PerQueue;
use ojs_testkit::invariants::check_shard_invariants;
use ojs_testkit::TestServer;
use serde_json::{json, Value};

/// Queues `s0`, `s1`, `s2` pinned to shards 0, 1, 2 of three.
fn three_shards(c: &mut ojs_server::Config) {
    c.shards = 3;
    c.queue_shards = PerQueue(vec![("s0".into(), 0), ("s1".into(), 1), ("s2".into(), 2)]);
}

/// Whether `key` exists (on the node that holds it, when the suite runs on a cluster).
async fn exists(key: &str) -> bool {
    let mut conn = redis::Client::open(ojs_testkit::redis_url_of(key))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let n: i64 = redis::cmd("EXISTS").arg(key).query_async(&mut conn).await.unwrap();
    n == 1
}

async fn all_invariants(s: &TestServer, shards: usize) {
    for i in 0..shards {
        let url = ojs_testkit::redis_url_of(&ojs_testkit::shard_keys(&s.namespace, i).schema());
        let problems = check_shard_invariants(&url, &s.namespace, i).await;
        assert!(problems.is_empty(), "shard {i}: {problems:?}");
    }
}

fn job(queue: &str, priority: u32) -> Value {
    json!({"type": "t.job", "args": [priority], "queue": queue, "priority": priority})
}

#[tokio::test]
async fn jobs_live_on_their_queues_shard_and_every_request_finds_them() {
    let s = TestServer::start_with(three_shards).await;
    let mut ids = Vec::new();
    for (i, q) in ["s0", "s1", "s2"].iter().enumerate() {
        let id = s.enqueue(job(q, 1)).await;
        // The server-made id names its shard in its last byte, and the job is under that shard's tag.
        assert!(id.ends_with(&format!("0{i}")), "{id} on shard {i}");
        let key = ojs_testkit::shard_keys(&s.namespace, i).job(&id);
        assert!(exists(&key).await, "{key}");
        ids.push(id);
    }
    if !ojs_testkit::on_cluster() {
        // One Redis: the legacy tags, and nothing recorded (the keyspace's names are as before issue 39).
        assert!(!exists(&s.keys().shard_tags()).await);
        for i in 0..3 {
            assert_eq!(
                s.shard_keys(i).prefix(),
                ojs_store::Keys::for_shard(&s.namespace, i).prefix()
            );
        }
    }
    // GET, PATCH and DELETE by id reach each shard.
    for id in &ids {
        let (st, b) = s.get(&format!("/ojs/v1/jobs/{id}")).await;
        assert_eq!((st, b["job"]["state"].clone()), (200, json!("available")), "{b}");
    }
    let (st, b) = s
        .patch(&format!("/ojs/v1/jobs/{}", ids[2]), json!({"priority": 0}))
        .await;
    assert_eq!(st, 200, "{b}");
    let (st, b) = s.delete(&format!("/ojs/v1/jobs/{}", ids[1])).await;
    assert_eq!((st, b["job"]["state"].clone()), (200, json!("cancelled")), "{b}");

    // One FETCH over queues of several shards claims in the order of the queues (strict).
    let got = s.fetch(&["s2", "s0"], 5).await;
    let got_ids: Vec<&str> = got.iter().filter_map(|j| j["id"].as_str()).collect();
    assert_eq!(got_ids, [ids[2].as_str(), ids[0].as_str()]);
    assert_eq!(s.ack(&ids[2]).await.0, 200);
    let (st, b) = s
        .post(
            "/ojs/v1/workers/nack",
            json!({"job_id": ids[0], "error": {"message": "no"}}),
        )
        .await;
    assert_eq!(st, 200, "{b}");

    // Ack-and-fetch-next whose job and queue live on different shards.
    let next = s.enqueue(job("s1", 3)).await;
    let again = s.enqueue(job("s2", 3)).await;
    let got = s.fetch(&["s2"], 1).await;
    assert_eq!(got[0]["id"], json!(again));
    let (st, b) = s
        .post(
            "/ojs/v1/workers/ack",
            json!({"job_id": again, "fetch": {"queues": ["s1"], "count": 1}}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["jobs"][0]["id"], json!(next), "{b}");
    // A heartbeat names jobs of several shards at once.
    let other = s.enqueue(job("s0", 3)).await;
    assert_eq!(s.fetch(&["s0"], 1).await[0]["id"], json!(other));
    let (st, b) = s
        .post(
            "/ojs/v1/workers/heartbeat",
            json!({"worker_id": "w-1", "active_jobs": [next, other, ids[2]]}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    let states: Vec<&str> = b["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["active", "active", "completed"], "{b}");

    // Listings see every shard.
    let (_, b) = s.get("/ojs/v1/admin/queues").await;
    let names: Vec<&str> = b["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["s0", "s1", "s2"], "{b}");
    let (_, b) = s.get("/ojs/v1/admin/jobs?state=active").await;
    assert_eq!(b["pagination"]["total"], json!(2), "{b}");
    let (_, b) = s.get("/ojs/v1/admin/workers/w-1").await;
    let mut held: Vec<String> = b["current_jobs"]
        .as_array()
        .map(|a| a.iter().map(|v| v.as_str().unwrap().to_string()).collect())
        .unwrap_or_default();
    held.sort();
    let mut want = vec![next.clone(), other.clone()];
    want.sort();
    assert_eq!(held, want, "the worker holds jobs on two shards: {b}");

    // Events of every shard, in one listing and on one SSE stream; a shard's events say which.
    let (_, b) = s.get(&format!("/ojs/v1/events?job_id={}", ids[2])).await;
    let types: Vec<&str> = b["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["type"].as_str())
        .collect();
    assert_eq!(
        types,
        ["job.enqueued", "priority.changed", "job.started", "job.completed"],
        "{b}"
    );
    assert!(b["events"][0]["id"].as_str().unwrap().ends_with("@2"), "{b}");
    let mut resp = s
        .http
        .get(s.url("/ojs/v1/events/stream"))
        .send()
        .await
        .expect("connect");
    assert_eq!(resp.status(), 200);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let late = s.enqueue(job("s1", 1)).await;
    let text = ojs_testkit::read_sse_until(&mut resp, &late).await;
    assert!(text.contains("@1\n"), "the event id names shard 1: {text}");

    all_invariants(&s, 3).await;
}

#[tokio::test]
async fn a_client_id_is_found_on_any_shard_and_is_unique_across_shards() {
    let s = TestServer::start_with(three_shards).await;
    // A client's own id whose last byte names shard 2, on a queue of shard 1.
    let id = "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e02";
    let (st, b) = s
        .post(
            "/ojs/v1/jobs",
            json!({"id": id, "type": "t", "args": [], "queue": "s1"}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    assert_eq!(s.get(&format!("/ojs/v1/jobs/{id}")).await.0, 200);
    // The same id on a queue of another shard is the same duplicate as on one shard.
    let (st, b) = s
        .post(
            "/ojs/v1/jobs",
            json!({"id": id, "type": "t", "args": [], "queue": "s2"}),
        )
        .await;
    assert_eq!(st, 409, "{b}");
    assert_eq!(s.fetch(&["s1"], 1).await[0]["id"], json!(id));
    assert_eq!(s.ack(id).await.0, 200);
    assert_eq!(
        s.get(&format!("/ojs/v1/jobs/{id}")).await.1["job"]["state"],
        "completed"
    );
}

#[tokio::test]
async fn what_one_shard_cannot_keep_exact_is_refused_with_the_way_out() {
    let s = TestServer::start_with(three_shards).await;
    // A rate-limit key belongs to the shard of the first queue whose job carried it.
    let limited =
        |q: &str| json!({"type": "t", "args": [], "queue": q, "rate_limit": {"key": "tenant-9", "concurrency": 1}});
    s.enqueue(limited("s1")).await;
    let (st, b) = s.post("/ojs/v1/jobs", limited("s2")).await;
    assert_eq!(st, 422, "{b}");
    let msg = b["error"]["message"].as_str().unwrap();
    assert!(msg.contains("tenant-9") && msg.contains("--queue-shard"), "{msg}");
    // The limit on its shard stays exact.
    s.enqueue(limited("s1")).await;
    assert_eq!(s.fetch(&["s1"], 5).await.len(), 1);
    assert_eq!(
        s.get("/ojs/v1/rate-limits/tenant-9").await.1["concurrency"]["active"],
        json!(1)
    );

    // A workflow over queues of two shards.
    let (st, b) = s
        .post(
            "/ojs/v1/workflows",
            json!({"type": "chain", "name": "c", "steps": [
                {"type": "a", "args": [], "queue": "s0"}, {"type": "b", "args": [], "queue": "s2"}]}),
        )
        .await;
    assert_eq!(st, 422, "{b}");
    assert!(b["error"]["message"].as_str().unwrap().contains("s2 (shard 2)"), "{b}");
    // On one shard it runs, and is found by its id.
    let (st, b) = s
        .post(
            "/ojs/v1/workflows",
            json!({"type": "chain", "name": "c", "steps": [
                {"type": "a", "args": [], "queue": "s2"}, {"type": "b", "args": [], "queue": "s2"}]}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let wf = b["workflow"]["id"].as_str().unwrap().to_string();
    assert!(wf.ends_with("02"), "a server-made workflow id names its shard: {wf}");
    assert_eq!(s.get(&format!("/ojs/v1/workflows/{wf}")).await.0, 200);
    assert_eq!(s.get("/ojs/v1/workflows").await.1["workflows"][0]["id"], json!(wf));

    // Unique jobs of a type whose uniqueness key spans queues are checked on one shard: the first one's.
    let unique =
        |q: &str, keys: Value| json!({"type": "u", "args": [1], "queue": q, "options": {"unique": {"keys": keys}}});
    let (st, b) = s.post("/ojs/v1/jobs", unique("s0", json!(["type", "args"]))).await;
    assert_eq!(st, 201, "{b}");
    let (st, b) = s.post("/ojs/v1/jobs", unique("s2", json!(["type", "args"]))).await;
    assert_eq!(st, 422, "{b}");
    assert!(b["error"]["message"].as_str().unwrap().contains("\"u\""), "{b}");
    let (st, b) = s.post("/ojs/v1/jobs", unique("s0", json!(["type", "args"]))).await;
    assert_eq!(st, 409, "still a duplicate on its shard: {b}");
    // With `queue` in the key, each queue's shard checks its own.
    let (st, b) = s.post("/ojs/v1/jobs", unique("s2", json!(["type", "queue"]))).await;
    assert_eq!(st, 201, "{b}");

    // A batch over several shards lands on each; a cron entry lives on its queue's shard and fires there.
    let (st, b) = s
        .post("/ojs/v1/jobs/batch", json!({"jobs": [job("s0", 1), job("s2", 1)]}))
        .await;
    assert_eq!((st, b["count"].clone()), (201, json!(2)), "{b}");
    let (st, b) = s
        .post(
            "/ojs/v1/cron",
            json!({"name": "tick", "expression": "* * * * * *", "job_template": {"type": "cron.t", "queue": "s2"}}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    assert!(exists(&ojs_testkit::shard_keys(&s.namespace, 2).cron("tick")).await);
    assert_eq!(s.get("/ojs/v1/cron/tick").await.0, 200);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (_, b) = s.get("/ojs/v1/cron/tick").await;
        if b["cron"]["run_count"].as_i64().unwrap_or(0) > 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "cron never fired: {b}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(s.delete("/ojs/v1/cron/tick").await.0, 200);
    all_invariants(&s, 3).await;
}

#[tokio::test]
async fn adding_shards_moves_no_queue_and_keeps_known_keys_where_they_are() {
    let one = TestServer::start().await;
    let q0 = one.enqueue(job("old", 1)).await;
    one.enqueue(json!({"type": "t", "args": [], "queue": "old", "rate_limit": {"key": "k-old", "concurrency": 1}}))
        .await;
    // A deployment from before placements were recorded: its queues are in shard 0's `P queues` only.
    let _: () = redis::cmd("DEL")
        .arg(one.keys().placement())
        .query_async(&mut one.redis().await)
        .await
        .unwrap();
    // A second pod with three shards: the count grows, the queue stays on shard 0 (its name alone
    // would hash to shard 2 of 3).
    let mut cfg = ojs_testkit::base_config();
    cfg.namespace = one.namespace.clone();
    cfg.tick_ms = 20;
    cfg.shards = 3;
    let three = TestServer::start_config(cfg).await;
    let q1 = three.enqueue(job("old", 1)).await;
    assert!(exists(&three.keys().job(&q1)).await, "the queue stays on shard 0");
    // A read of a queue never used places nothing.
    assert_eq!(three.get("/ojs/v1/queues/never-used/stats").await.0, 200);
    let placed: bool = redis::cmd("HEXISTS")
        .arg(three.keys().placement())
        .arg("never-used")
        .query_async(&mut three.redis().await)
        .await
        .unwrap();
    assert!(!placed, "a read wrote the directory");
    let count: i64 = redis::cmd("GET")
        .arg(three.keys().shard_count())
        .query_async(&mut three.redis().await)
        .await
        .unwrap();
    assert_eq!(count, 3);
    // The old pod learns of the new shards and serves jobs enqueued on them: a new queue the hash puts
    // on shard 2 (its job's id names the shard).
    let mut on_shard2 = None;
    for i in 0..60 {
        let q = format!("n{i}");
        let id = three.enqueue(job(&q, 1)).await;
        if id.ends_with("02") {
            on_shard2 = Some((q, id));
            break;
        }
    }
    let (q2, id2) = on_shard2.expect("some new queue lands on shard 2");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let got = one.fetch(&[q2.as_str()], 1).await;
        if let Some(j) = got.first() {
            assert_eq!(j["id"], json!(id2));
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the one-shard pod never saw shard 2"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(one.ack(&id2).await.0, 200);
    // A key shard 0 knew before there were shards stays on shard 0.
    let (st, b) = three
        .post(
            "/ojs/v1/jobs",
            json!({"type": "t", "args": [], "queue": q2, "rate_limit": {"key": "k-old", "concurrency": 1}}),
        )
        .await;
    assert_eq!(st, 422, "{b}");
    assert_eq!(one.fetch(&["old"], 5).await.len(), 3, "{q0}");
    all_invariants(&three, 3).await;
}

#[tokio::test]
async fn a_pin_to_a_shard_that_does_not_exist_is_refused_at_start() {
    let mut cfg = ojs_server::Config::for_redis("redis://127.0.0.1:1");
    cfg.shards = 2;
    cfg.queue_shards = PerQueue(vec![("q".into(), 2)]);
    let err = cfg.validate().unwrap_err();
    assert!(
        err.contains("--queue-shard q=2") && err.contains("--shards is 2"),
        "{err}"
    );
}

#[tokio::test]
async fn shards_land_on_different_primaries() {
    let cluster = ojs_testkit::cluster::LocalCluster::start(3, 0);
    // Any namespace: the shards' tags are placed one per primary (issue 39).
    let ns = ojs_testkit::unique_namespace();
    let mut cfg = ojs_server::Config::for_cluster(&cluster.seeds());
    cfg.namespace = ns.clone();
    cfg.tick_ms = 20;
    three_shards(&mut cfg);
    let s = TestServer::start_config(cfg).await;
    let mut ids = Vec::new();
    for q in ["s0", "s1", "s2"] {
        ids.push(s.enqueue(job(q, 1)).await);
    }
    let got = s.fetch(&["s0", "s1", "s2"], 3).await;
    assert_eq!(got.len(), 3, "{got:?}");
    for id in &ids {
        assert_eq!(s.ack(id).await.0, 200);
    }
    for (i, id) in ids.iter().enumerate() {
        let keys = ojs_testkit::cluster::shard_keys_at(&cluster.owner_url(&ojs_store::Keys::new(&ns).schema()), &ns, i);
        let owner = cluster.owner_url(&keys.schema());
        let n: i64 = redis::cmd("EXISTS")
            .arg(keys.job(id))
            .query_async(&mut node_conn(owner.as_str()).await)
            .await
            .unwrap();
        assert_eq!(n, 1, "job {id} of shard {i} on {owner}");
        let problems = check_shard_invariants(&owner, &ns, i).await;
        assert!(problems.is_empty(), "shard {i}: {problems:?}");
    }
    // Events of all three primaries in one listing.
    let (_, b) = s.get("/ojs/v1/events?types=job.completed").await;
    assert_eq!(b["events"].as_array().unwrap().len(), 3, "{b}");
}

// ---- issue 39: shards placed by the cluster's topology ------------------------------------------------

/// A plain connection to one node (one Redis, or one primary of a cluster).
async fn node_conn(url: impl AsRef<str>) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url.as_ref())
        .expect("redis url")
        .get_multiplexed_async_connection()
        .await
        .expect("redis connection")
}

/// A namespace whose legacy tags for shards `0..n` (`<ns>`, `<ns>.1`, …) are not spread evenly over the
/// 3 primaries of `seeds` (as `main`'s three are not): placement has something to fix.
fn crowded_namespace(seeds: &[String], n: usize) -> String {
    let even = vec![n / 3; 3];
    loop {
        let ns = ojs_testkit::unique_namespace();
        let legacy: Vec<ojs_store::Keys> = (0..n).map(|i| ojs_store::Keys::for_shard(&ns, i)).collect();
        let spread: Vec<usize> = primaries_of(seeds, &legacy).into_iter().map(|(_, n)| n).collect();
        if spread != even {
            return ns;
        }
    }
}

/// Each distinct primary (URL) holding one of `keys`' tags, with how many it holds, sorted.
fn primaries_of(seeds: &[String], keys: &[ojs_store::Keys]) -> Vec<(String, usize)> {
    let mut out: Vec<(String, usize)> = Vec::new();
    for k in keys {
        let owner = ojs_testkit::cluster::owner_url(seeds, &k.schema());
        match out.iter_mut().find(|(o, _)| *o == owner) {
            Some((_, n)) => *n += 1,
            None => out.push((owner, 1)),
        }
    }
    out.sort();
    out
}

fn cluster_server_config(seeds: &[String], ns: &str, shards: u16) -> ojs_server::Config {
    let mut cfg = ojs_server::Config::for_cluster(seeds);
    cfg.namespace = ns.to_string();
    cfg.tick_ms = 20;
    cfg.shards = shards;
    cfg.queue_shards = PerQueue((0..usize::from(shards)).map(|i| (format!("s{i}"), i)).collect());
    cfg
}

/// The tags shard 0 records (`P tags`), by shard index.
async fn recorded(seeds: &[String], ns: &str) -> std::collections::HashMap<usize, String> {
    let directory = ojs_store::Keys::new(ns).shard_tags();
    let url = ojs_testkit::cluster::owner_url(seeds, &directory);
    let mut conn = node_conn(url).await;
    redis::cmd("HGETALL")
        .arg(&directory)
        .query_async(&mut conn)
        .await
        .expect("redis")
}

/// Enqueues one job on each pinned queue `s<i>` and checks it is a key of shard `i`'s recorded tag on
/// the primary that holds that tag (and that no key of the namespace is left under a legacy tag that
/// is not the recorded one).
async fn jobs_under_recorded_tags(s: &TestServer, seeds: &[String], shards: usize) -> Vec<ojs_store::Keys> {
    let keys: Vec<ojs_store::Keys> = (0..shards).map(|i| s.shard_keys(i)).collect();
    for (i, k) in keys.iter().enumerate() {
        let id = s.enqueue(job(&format!("s{i}"), 1)).await;
        let owner = ojs_testkit::cluster::owner_url(seeds, &k.schema());
        let mut conn = node_conn(owner.as_str()).await;
        let n: i64 = redis::cmd("EXISTS")
            .arg(k.job(&id))
            .query_async(&mut conn)
            .await
            .expect("redis");
        if n != 1 {
            let mut found = Vec::new();
            for seed in seeds {
                let mut c = node_conn(format!("redis://{seed}")).await;
                let ks: Vec<String> = redis::cmd("KEYS")
                    .arg(format!("*{id}*"))
                    .query_async(&mut c)
                    .await
                    .expect("redis");
                found.push((seed.clone(), ks));
            }
            panic!(
                "job {id} of shard {i} is not {} on {owner}; found {found:?}; recorded {:?}",
                k.job(&id),
                recorded(seeds, &s.namespace).await
            );
        }
        let problems = check_shard_invariants(&owner, &s.namespace, i).await;
        assert!(problems.is_empty(), "shard {i}: {problems:?}");
    }
    keys
}

#[tokio::test]
async fn shards_are_placed_one_per_primary_and_two_each_at_twice_as_many() {
    let seeds = ojs_testkit::cluster_seeds();
    // --shards 3 on a namespace whose legacy tags crowd a primary: one shard per primary.
    let ns = crowded_namespace(&seeds, 3);
    let s = TestServer::start_config(cluster_server_config(&seeds, &ns, 3)).await;
    let keys = jobs_under_recorded_tags(&s, &seeds, 3).await;
    let spread: Vec<usize> = primaries_of(&seeds, &keys).into_iter().map(|(_, n)| n).collect();
    assert_eq!(
        spread,
        [1, 1, 1],
        "{:?}",
        keys.iter().map(|k| k.tag().to_string()).collect::<Vec<_>>()
    );
    let tags = recorded(&seeds, &ns).await;
    assert_eq!(tags.len(), 2, "{tags:?}");
    for (i, k) in keys.iter().enumerate().skip(1) {
        assert_eq!(tags.get(&i).map(String::as_str), Some(k.tag()), "{tags:?}");
    }

    // A second pod on the namespace uses the recorded tags: its jobs land under them.
    let pod = TestServer::start_config(cluster_server_config(&seeds, &ns, 3)).await;
    let again = jobs_under_recorded_tags(&pod, &seeds, 3).await;
    assert_eq!(
        again.iter().map(|k| k.prefix().to_string()).collect::<Vec<_>>(),
        keys.iter().map(|k| k.prefix().to_string()).collect::<Vec<_>>()
    );
    assert_eq!(recorded(&seeds, &ns).await, tags, "a recorded tag never changes");

    // Raising it to --shards 6 places the new three one per primary too: two each, the first three kept.
    let six = TestServer::start_config(cluster_server_config(&seeds, &ns, 6)).await;
    let grown = jobs_under_recorded_tags(&six, &seeds, 6).await;
    let spread: Vec<usize> = primaries_of(&seeds, &grown).into_iter().map(|(_, n)| n).collect();
    assert_eq!(spread, [2, 2, 2]);
    assert_eq!(
        grown[..3].iter().map(|k| k.prefix()).collect::<Vec<_>>(),
        keys.iter().map(|k| k.prefix()).collect::<Vec<_>>()
    );
    // Every pod serves all six shards (the first two learn of the new ones): 3 + 3 + 6 jobs enqueued.
    let queues: Vec<String> = (0..6).map(|i| format!("s{i}")).collect();
    let queues: Vec<&str> = queues.iter().map(String::as_str).collect();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let got = pod.fetch(&queues, 20).await;
    assert_eq!(got.len(), 12, "{got:?}");

    // --shards 6 from the start: two per primary.
    let fresh = crowded_namespace(&seeds, 6);
    let s6 = TestServer::start_config(cluster_server_config(&seeds, &fresh, 6)).await;
    let keys6 = jobs_under_recorded_tags(&s6, &seeds, 6).await;
    let spread: Vec<usize> = primaries_of(&seeds, &keys6).into_iter().map(|(_, n)| n).collect();
    assert_eq!(spread, [2, 2, 2]);
}

#[tokio::test]
async fn a_deployment_from_before_placement_keeps_its_legacy_tags() {
    let seeds = ojs_testkit::cluster_seeds();
    let node = |key: String| {
        let url = ojs_testkit::cluster::owner_url(&seeds, &key);
        async move {
            let mut c = node_conn(url).await;
            let _: () = redis::cmd("SET")
                .arg(&key)
                .arg(3)
                .query_async(&mut c)
                .await
                .expect("redis");
        }
    };
    // What older code left of a --shards 3 deployment: the directory's count on shard 0.
    let old = crowded_namespace(&seeds, 3);
    node(ojs_store::Keys::new(&old).shard_count()).await;
    // And one whose shard 2 has keys under its legacy tag (the count lost: e.g. restored from a backup).
    // (Shards 0 and 2 on two primaries, so only the third is free for shard 1.)
    let partial = loop {
        let ns = crowded_namespace(&seeds, 3);
        let legacy = [0, 2].map(|i| ojs_store::Keys::for_shard(&ns, i));
        if primaries_of(&seeds, &legacy).len() == 2 {
            break ns;
        }
    };
    node(ojs_store::Keys::for_shard(&partial, 2).schema()).await;
    for (ns, legacy) in [(&old, vec![1, 2]), (&partial, vec![2])] {
        let s = TestServer::start_config(cluster_server_config(&seeds, ns, 3)).await;
        let keys = jobs_under_recorded_tags(&s, &seeds, 3).await;
        let tags = recorded(&seeds, ns).await;
        for i in legacy {
            assert_eq!(
                keys[i].prefix(),
                ojs_store::Keys::for_shard(ns, i).prefix(),
                "{ns} shard {i}"
            );
            assert_eq!(tags.get(&i), Some(&ojs_store::Keys::legacy_tag(ns, i)), "{tags:?}");
        }
    }
    // The partial one's shard 1 was never used: placed on a primary that holds neither shard 0 nor 2.
    let pod = TestServer::start_config(cluster_server_config(&seeds, &partial, 3)).await;
    let keys: Vec<ojs_store::Keys> = (0..3).map(|i| pod.shard_keys(i)).collect();
    let owner = |k: &ojs_store::Keys| ojs_testkit::cluster::owner_url(&seeds, &k.schema());
    assert_ne!(owner(&keys[1]), owner(&keys[0]));
    assert_ne!(owner(&keys[1]), owner(&keys[2]));
}

// ---- issue 22: every one-shard guarantee across shards ------------------------------------------------

/// Sends both requests at once; returns their statuses.
async fn race(s: &TestServer, path: &str, a: Value, b: Value) -> (u16, u16) {
    let (x, y) = tokio::join!(s.post(path, a), s.post(path, b));
    (x.0, y.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_client_id_is_one_job_even_when_two_requests_race_to_two_shards() {
    let s = TestServer::start_with(three_shards).await;
    for _ in 0..60 {
        let id = ojs_core::names::new_job_id();
        let on = |q: &str| json!({"id": id, "type": "t", "args": [], "queue": q});
        let got = race(&s, "/ojs/v1/jobs", on("s1"), on("s2")).await;
        let mut codes = [got.0, got.1];
        codes.sort_unstable();
        assert_eq!(codes, [201, 409], "one of two racing writes of {id} wins");
        // The one job is the one every by-id request finds, and it can be acked.
        let (st, b) = s.get(&format!("/ojs/v1/jobs/{id}")).await;
        assert_eq!(st, 200, "{b}");
    }
    let mut ids = 0;
    while !s.fetch(&["s1", "s2"], 100).await.is_empty() {
        ids += 1;
    }
    assert!(ids > 0);
    all_invariants(&s, 3).await;
}

#[tokio::test]
async fn a_workflow_id_names_one_workflow_across_shards() {
    let s = TestServer::start_with(three_shards).await;
    let id = ojs_core::names::new_job_id();
    let wf = |q: &str| json!({"id": id, "type": "group", "jobs": [{"type": "a", "args": [], "queue": q}]});
    let (st, b) = s.post("/ojs/v1/workflows", wf("s1")).await;
    assert_eq!(st, 201, "{b}");
    let (st, b) = s.post("/ojs/v1/workflows", wf("s2")).await;
    assert_eq!(st, 409, "the id is taken on another shard: {b}");
    // Racing creations of a new id on two shards: one wins.
    for _ in 0..30 {
        let id = ojs_core::names::new_job_id();
        let wf = |q: &str| json!({"id": id, "type": "group", "jobs": [{"type": "a", "args": [], "queue": q}]});
        let got = race(&s, "/ojs/v1/workflows", wf("s1"), wf("s2")).await;
        let mut codes = [got.0, got.1];
        codes.sort_unstable();
        assert_eq!(codes, [201, 409], "one of two racing creations of {id} wins");
    }
    all_invariants(&s, 3).await;
}

#[tokio::test]
async fn deduplication_and_root_jobs_are_decided_on_one_shard() {
    let s = TestServer::start_with(three_shards).await;
    // options.dedup without `queue` in its keys spans queues: its type lives on the first job's shard.
    let dd = |q: &str| json!({"type": "dd", "args": [1], "queue": q, "options": {"dedup": true}});
    assert_eq!(s.post("/ojs/v1/jobs", dd("s1")).await.0, 201);
    let (st, b) = s.post("/ojs/v1/jobs", dd("s2")).await;
    assert_eq!(st, 422, "{b}");
    assert!(b["error"]["message"].as_str().unwrap().contains("--queue-shard"), "{b}");
    // A root signature lives on the shard of the first job that carried it.
    let leaf = json!({"type": "leaf", "args": [1], "queue": "s1", "options": {"root_job": {"signature": "page-42"}}});
    let root = json!({"type": "root", "args": [], "queue": "s2", "priority": 0,
        "options": {"root_job": {"signature": "page-42", "is_root": true}}});
    assert_eq!(s.post("/ojs/v1/jobs", leaf).await.0, 201);
    let (st, b) = s.post("/ojs/v1/jobs", root.clone()).await;
    assert_eq!(st, 422, "{b}");
    assert!(b["error"]["message"].as_str().unwrap().contains("page-42"), "{b}");
    // On its shard, a newer root (claimed first: priority 0) supersedes the leaf as on one shard.
    let mut root = root;
    root["queue"] = json!("s1");
    assert_eq!(s.post("/ojs/v1/jobs", root).await.0, 201);
    let got = s.fetch(&["s1"], 10).await;
    let types: Vec<&str> = got.iter().filter_map(|j| j["type"].as_str()).collect();
    assert!(
        types.contains(&"root") && !types.contains(&"leaf"),
        "the leaf is superseded: {types:?}"
    );
    all_invariants(&s, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cron_name_lives_on_one_shard_and_racing_registrations_never_lose_it() {
    let s = TestServer::start_with(three_shards).await;
    for i in 0..20 {
        let name = format!("race-{i}");
        let entry =
            |q: &str| json!({"name": name, "expression": "0 0 1 1 *", "job_template": {"type": "c", "queue": q}});
        let got = race(&s, "/ojs/v1/cron", entry("s1"), entry("s2")).await;
        assert!([got.0, got.1].contains(&201), "one registration wins: {got:?}");
        let (st, b) = s.get(&format!("/ojs/v1/cron/{name}")).await;
        assert_eq!(st, 200, "the entry is there after the race: {b}");
    }
    // An entry does not silently move to another shard (its run history and overlap check live there).
    let entry =
        |q: &str| json!({"name": "stay", "expression": "* * * * * *", "job_template": {"type": "c", "queue": q}});
    assert_eq!(s.post("/ojs/v1/cron", entry("s1")).await.0, 201);
    let (st, b) = s.post("/ojs/v1/cron", entry("s2")).await;
    assert_eq!(st, 422, "{b}");
    assert!(b["error"]["message"].as_str().unwrap().contains("DELETE"), "{b}");
    assert_eq!(
        s.post("/ojs/v1/cron", entry("s1")).await.0,
        200,
        "an update on its shard is fine"
    );
    all_invariants(&s, 3).await;
}

#[tokio::test]
async fn weighted_consumption_over_queues_of_three_shards_is_exact() {
    // Priority seed §7.2 with weights 5:2:1 over queues on three shards: every run of 8 consecutive
    // claims while all three have work takes exactly 5, 2 and 1, as on one shard.
    let s = TestServer::start_with(three_shards).await;
    for q in ["s0", "s1", "s2"] {
        let jobs: Vec<Value> = (0..120).map(|_| job(q, 2)).collect();
        assert_eq!(s.post("/ojs/v1/jobs/batch", json!({ "jobs": jobs })).await.0, 201);
    }
    let mut seq = Vec::new();
    for _ in 0..160 {
        let (st, b) = s
            .post(
                "/ojs/v1/workers/fetch",
                json!({"queues": [{"name": "s0", "weight": 5}, {"name": "s1", "weight": 2}, {"name": "s2", "weight": 1}],
                       "strategy": "weighted"}),
            )
            .await;
        assert_eq!(st, 200, "{b}");
        seq.push(b["jobs"][0]["queue"].as_str().expect("a job").to_string());
    }
    for w in seq.windows(8) {
        let n = |q: &str| w.iter().filter(|x| *x == q).count();
        assert_eq!((n("s0"), n("s1"), n("s2")), (5, 2, 1), "window {w:?}");
    }
}
