//! Worker pools and scheduling statistics (ojs-fair-scheduling) through HTTP against a real Redis: pool
//! CRUD and its refusals, FETCH by pool (round-robin alternates, weighted gives its shares, the pool
//! wins over the worker's own queues), pools over queues of several shards, and the last minute's
//! dispatch counts. The conformance suite ext-fair-scheduling only checks the shapes.

use ojs_server::config::PerQueue;
use ojs_testkit::TestServer;
use serde_json::{json, Value};

/// Enqueues `n` jobs into each of `queues`, as one batch per queue.
async fn backlog(s: &TestServer, queues: &[&str], n: usize) {
    for q in queues {
        let jobs: Vec<Value> = (0..n)
            .map(|i| json!({"type": "t.pool", "args": [i], "options": {"queue": q}}))
            .collect();
        let (st, b) = s.post("/ojs/v1/jobs/batch", json!({"jobs": jobs})).await;
        assert_eq!(st, 201, "{b}");
    }
}

/// Claims one job at a time through the pool and returns the queue of each claim, in order.
async fn claim_by_pool(s: &TestServer, pool: &str, claims: usize) -> Vec<String> {
    let mut got = Vec::new();
    for _ in 0..claims {
        // The worker's own queues and strategy are overridden by the pool's.
        let (st, b) = s
            .post(
                "/ojs/v1/workers/fetch",
                json!({"pool": pool, "queues": ["not-in-the-pool"], "strategy": "strict", "worker_id": "w-pool"}),
            )
            .await;
        assert_eq!(st, 200, "{b}");
        let jobs = b["jobs"].as_array().expect("jobs");
        assert_eq!(jobs.len(), 1, "a backlogged pool gives a job per claim: {b}");
        got.push(jobs[0]["queue"].as_str().expect("queue").to_string());
    }
    got
}

async fn exists(key: &str) -> bool {
    let mut conn = redis::Client::open(ojs_testkit::redis_url_of(key))
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connection");
    let n: i64 = redis::cmd("EXISTS")
        .arg(key)
        .query_async(&mut conn)
        .await
        .expect("EXISTS");
    n == 1
}

#[tokio::test]
async fn pools_are_created_read_listed_replaced_and_deleted() {
    let s = TestServer::start().await;
    let (st, b) = s
        .put(
            "/ojs/v1/admin/pools/general",
            json!({"queues": ["default", "email"], "concurrency": 20}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    assert_eq!(b["pool"]["name"], "general");
    assert_eq!(b["pool"]["strategy"], "round-robin", "the default strategy");
    assert_eq!(b["pool"]["queues"], json!(["default", "email"]));
    assert_eq!(b["pool"]["concurrency"], 20);
    assert_eq!(b["pool"]["active_jobs"], 0);
    assert!(
        b["pool"].get("weights").is_none(),
        "only weighted pools show weights: {b}"
    );
    let created_at = b["pool"]["created_at"].clone();

    // The conformance suite's form: queues as an object of name → {weight}.
    let (st, b) = s
        .put(
            "/ojs/v1/admin/pools/general",
            json!({"name": "general", "strategy": "weighted",
                   "queues": {"email": {"weight": 70}, "default": {"weight": 30}}}),
        )
        .await;
    assert_eq!(st, 200, "an existing pool is replaced: {b}");
    assert_eq!(b["pool"]["strategy"], "weighted");
    assert_eq!(
        b["pool"]["queues"],
        json!(["email", "default"]),
        "the order given is kept"
    );
    assert_eq!(b["pool"]["weights"], json!({"email": 70, "default": 30}));
    assert!(
        b["pool"].get("concurrency").is_none(),
        "a PUT replaces the whole definition: {b}"
    );
    assert_eq!(b["pool"]["created_at"], created_at, "created_at survives an update");

    let (st, b) = s
        .put(
            "/ojs/v1/admin/pools/critical",
            json!({"queues": ["payments"], "strategy": "strict"}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let (st, b) = s.get("/ojs/v1/admin/pools").await;
    assert_eq!(st, 200, "{b}");
    let names: Vec<&str> = b["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|p| p["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["critical", "general"], "in name order");

    let (st, b) = s.get("/ojs/v1/admin/pools/general").await;
    assert_eq!((st, b["pool"]["weights"]["email"].as_u64()), (200, Some(70)), "{b}");

    // Pools are deployment-wide configuration on shard 0; DELETE takes the key with it.
    let key = s.keys().pool("general");
    assert!(exists(&key).await, "{key}");
    let (st, b) = s.delete("/ojs/v1/admin/pools/general").await;
    assert_eq!((st, b["pool"]["name"].as_str()), (200, Some("general")), "{b}");
    assert!(!exists(&key).await, "a deleted pool leaves no key");
    let (st, _) = s.get("/ojs/v1/admin/pools/general").await;
    assert_eq!(st, 404);
    let (st, _) = s.delete("/ojs/v1/admin/pools/general").await;
    assert_eq!(st, 404);
    let (_, b) = s.get("/ojs/v1/admin/pools").await;
    assert_eq!(b["items"].as_array().map(Vec::len), Some(1), "{b}");
    s.assert_invariants().await;
}

#[tokio::test]
async fn bad_pools_are_400s_that_say_why_and_unknown_pools_404s() {
    let s = TestServer::start().await;
    for (body, says) in [
        (json!({}), "queues"),
        (json!({"queues": []}), "from 1 to 100"),
        (json!({"queues": ["a", "a"]}), "listed twice"),
        (json!({"queues": ["Not A Queue"]}), "queues[0]"),
        (
            json!({"queues": ["a"], "strategy": "least-loaded"}),
            "\"strict\", \"round-robin\" or \"weighted\"",
        ),
        (json!({"queues": ["a"], "strategy": "random"}), "strategy must be"),
        (json!({"queues": ["a"], "weights": {"a": 2}}), "weighted"),
        (
            json!({"queues": ["a"], "strategy": "weighted", "weights": {"zz": 2}}),
            "not one of the pool's queues",
        ),
        (
            json!({"queues": ["a"], "strategy": "weighted", "weights": {"a": 0}}),
            "from 1 to 1000",
        ),
        (
            json!({"queues": ["a"], "strategy": "weighted", "weights": {"a": 1.5}}),
            "from 1 to 1000",
        ),
        (json!({"queues": ["a"], "concurrency": 0}), "concurrency"),
        (json!({"queues": ["a"], "concurrency": -1}), "wrong shape"),
        (json!({"queues": ["a"], "isolated": true}), "unknown field"),
        (json!({"queues": ["a"], "name": "other"}), "differs"),
        (json!({"queues": "a"}), "list of queue names"),
    ] {
        let (st, b) = s.put("/ojs/v1/admin/pools/p1", body.clone()).await;
        assert_eq!(st, 400, "{body}: {b}");
        let msg = b["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(says), "{body}: {msg}");
    }
    let (st, b) = s.put("/ojs/v1/admin/pools/Bad%20Name", json!({"queues": ["a"]})).await;
    assert_eq!(st, 400, "{b}");
    assert!(
        b["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("pool name must match")),
        "{b}"
    );
    let (st, b) = s.get("/ojs/v1/admin/pools/p1").await;
    assert_eq!(st, 404, "no refused PUT wrote a pool: {b}");

    // FETCH naming a pool that does not exist: 404 (nothing claimed); a name no pool can have: 400.
    s.enqueue(json!({"type": "t.pool", "args": [], "options": {"queue": "a"}}))
        .await;
    let (st, b) = s
        .post("/ojs/v1/workers/fetch", json!({"pool": "nope", "queues": ["a"]}))
        .await;
    assert_eq!((st, b["error"]["code"].as_str()), (404, Some("not_found")), "{b}");
    let (st, b) = s.post("/ojs/v1/workers/fetch", json!({"pool": "No Such"})).await;
    assert_eq!(st, 400, "{b}");
    assert!(
        b["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("pool name must match")),
        "{b}"
    );
    let (st, b) = s.get("/ojs/v1/admin/queues/a").await;
    assert_eq!((st, b["counts"]["available"].as_u64()), (200, Some(1)), "{b}");
}

#[tokio::test]
async fn a_round_robin_pool_alternates_its_queues() {
    let s = TestServer::start().await;
    backlog(&s, &["rr-a", "rr-b"], 6).await;
    let (st, b) = s
        .put("/ojs/v1/admin/pools/rr", json!({"queues": ["rr-a", "rr-b"]}))
        .await;
    assert_eq!(st, 201, "{b}");
    let got = claim_by_pool(&s, "rr", 8).await;
    for pair in got.windows(2) {
        assert_ne!(
            pair[0], pair[1],
            "round-robin never takes one queue twice in a row: {got:?}"
        );
    }
    // Ack-and-fetch-next names the pool too.
    let (_, b) = s
        .post("/ojs/v1/workers/fetch", json!({"pool": "rr", "worker_id": "w-pool"}))
        .await;
    let job = b["jobs"][0].clone();
    let (st, b) = s
        .post(
            "/ojs/v1/workers/ack",
            json!({"job_id": job["id"], "lease_id": job["lease_id"], "fetch": {"pool": "rr", "count": 2}}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    let queues: Vec<&str> = b["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["queue"].as_str().expect("queue"))
        .collect();
    assert_eq!(queues.len(), 2, "{b}");
    assert_ne!(queues[0], queues[1], "{b}");
    s.assert_invariants().await;
}

/// 40 claims by a pool weighing its queues 3:1 while both have work: exactly 3:1 in every run of 4.
async fn weighted_3_to_1(s: &TestServer, heavy: &str, light: &str) {
    backlog(s, &[heavy, light], 40).await;
    let (st, b) = s
        .put(
            "/ojs/v1/admin/pools/wfq",
            json!({"strategy": "weighted", "queues": [heavy, light], "weights": {heavy: 3}}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    assert_eq!(
        b["pool"]["weights"],
        json!({heavy: 3, light: 1}),
        "a queue given no weight weighs 1"
    );
    let got = claim_by_pool(s, "wfq", 40).await;
    let heavy_n = got.iter().filter(|q| *q == heavy).count();
    assert_eq!((heavy_n, got.len() - heavy_n), (30, 10), "{got:?}");
    for run in got.chunks(4) {
        assert_eq!(run.iter().filter(|q| *q == heavy).count(), 3, "{got:?}");
    }

    // The minute's dispatches, by queue and by pool (this test's namespace saw only these claims).
    let (st, b) = s.get("/ojs/v1/admin/scheduling/stats").await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["window"], "PT1M");
    assert_eq!(b["stats"]["dispatch_count_1m"], 40, "{b}");
    assert_eq!(b["stats"]["active_jobs"], 40, "{b}");
    assert_eq!(b["stats"]["complete"], true, "{b}");
    let q = |name: &str| {
        b["queues"]
            .as_array()
            .and_then(|qs| qs.iter().find(|x| x["name"] == name).cloned())
            .unwrap_or_else(|| panic!("{name} in {b}"))
    };
    assert_eq!(
        (
            q(heavy)["dispatch_count_1m"].as_u64(),
            q(heavy)["dispatch_ratio_1m"].as_f64()
        ),
        (Some(30), Some(0.75))
    );
    assert_eq!(
        (q(light)["dispatch_count_1m"].as_u64(), q(light)["active_jobs"].as_u64()),
        (Some(10), Some(10))
    );
    assert_eq!(b["pools"][0]["name"], "wfq", "{b}");
    assert_eq!(b["pools"][0]["dispatch_count_1m"], 40, "{b}");
    let (_, p) = s.get("/ojs/v1/admin/pools/wfq").await;
    assert_eq!(p["pool"]["active_jobs"], 40, "{p}");
}

#[tokio::test]
async fn a_weighted_pool_gives_each_queue_its_share() {
    let s = TestServer::start().await;
    weighted_3_to_1(&s, "wq-heavy", "wq-light").await;
    s.assert_invariants().await;
}

#[tokio::test]
async fn pools_serve_queues_on_several_shards() {
    // The pool lives on shard 0; its queues on shards 1 and 2 (the cross-shard weighted round-robin).
    let s = TestServer::start_with(|c| {
        c.shards = 3;
        c.queue_shards = PerQueue(vec![("s1".into(), 1), ("s2".into(), 2)]);
    })
    .await;
    weighted_3_to_1(&s, "s1", "s2").await;
    assert!(exists(&s.keys().pool("wfq")).await, "the pool is on shard 0");
    for i in 1..3 {
        let other = ojs_testkit::shard_keys(&s.namespace, i).pool("wfq");
        assert!(!exists(&other).await, "{other}");
    }
}
