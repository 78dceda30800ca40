//! Bounded work per script call and bounded memory (issue 22): every loop of a script stops at a cap
//! and the rest goes on in the next call or on the timer; every key named after a user value expires
//! or leaves with its last job.

use ojs_store::{Strategy, WorkerRequest};
use ojs_testkit::TestServer;
use redis::AsyncCommands;
use serde_json::{json, Value};

/// Enqueues `jobs` in batches of 1,000.
async fn enqueue_all(s: &TestServer, jobs: Vec<Value>) {
    for chunk in jobs.chunks(1_000) {
        let (st, b) = s.post("/ojs/v1/jobs/batch", json!({ "jobs": chunk })).await;
        assert_eq!(st, 201, "{b}");
    }
}

/// One FETCH script call, as the server's coalescer sends it.
fn fetch_request(queue: &str, count: u32) -> WorkerRequest {
    WorkerRequest {
        ack: None,
        queues: vec![(queue.to_string(), 1)],
        strategy: Strategy::Strict,
        worker_id: "w".into(),
        count,
        visibility_ms: None,
    }
}

#[tokio::test]
async fn one_fetch_call_parks_at_most_a_hundred_lanes_and_the_request_goes_on() {
    // 1,000 rate-limit keys at concurrency 0 (per-tenant keys, rate-limiting seed §7.1), each heading
    // its own lane at priority 0, and one free job behind them at priority 4. FETCH must park the
    // limited lanes to reach the free job; one script call may park at most 100 of them.
    let s = TestServer::start().await;
    let q = "bounded-park";
    let mut jobs: Vec<Value> = (0..1_000)
        .map(|i| {
            json!({"type": "t", "args": [i], "queue": q, "priority": 0,
                   "rate_limit": {"key": format!("tenant-{i}"), "concurrency": 0}})
        })
        .collect();
    jobs.push(json!({"type": "free", "args": [], "queue": q, "priority": 4}));
    enqueue_all(&s, jobs).await;

    let store = s.store();
    let (_, reply) = store.worker_request(fetch_request(q, 1)).await.expect("fetch");
    let mut r = s.redis().await;
    let parked: u64 = r.hlen(s.keys().queue_parked(q)).await.expect("hlen");
    assert!(reply.claimed.is_empty(), "the free job is still behind 900 limited lanes");
    assert!(reply.cut, "the call says it stopped on its budget");
    assert_eq!(parked, 100, "one call parks exactly its budget of lanes");

    // Through the API, one FETCH goes on call after call and gets the free job.
    let got = s.fetch(&[q], 1).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["type"], "free");
    let parked: u64 = r.hlen(s.keys().queue_parked(q)).await.expect("hlen");
    assert_eq!(parked, 1_000, "every limited lane is parked once");
    s.assert_invariants().await;
}
