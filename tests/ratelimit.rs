//! Rate limits per the seed, checked from the event stream (its order is the order the scripts ran
//! in, its times are Redis TIME): limits are never exceeded by 64 racing fetchers on two nodes, slots
//! come back after worker deaths, limited jobs never block free ones, and every on_limit behaves.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ojs_testkit::TestServer;
use serde_json::{json, Value};

/// Two `ojs-server` processes on one namespace: two pods.
async fn two_nodes() -> (Arc<TestServer>, Arc<TestServer>) {
    let bin = env!("CARGO_BIN_EXE_ojs-server");
    let ns = ojs_testkit::unique_namespace();
    let a = TestServer::spawn_pod(bin, &ns, &[]).await;
    let b = TestServer::spawn_pod(bin, &ns, &[]).await;
    (Arc::new(a), Arc::new(b))
}

/// Every event of the namespace, in stream order: (type, job_id, time ms).
async fn events(s: &TestServer) -> Vec<(String, String, i64)> {
    let mut r = s.redis().await;
    let v = ojs_testkit::stream_events(&mut r, &s.keys().events()).await;
    v.into_iter()
        .map(|(_, e)| (e.event_type, e.job_id, e.time_ms.unwrap_or(0)))
        .collect()
}

async fn enqueue_many(s: &TestServer, n: usize, job: Value) -> Vec<String> {
    let mut ids = Vec::new();
    let jobs: Vec<Value> = (0..n).map(|_| job.clone()).collect();
    for chunk in jobs.chunks(500) {
        let (st, b) = s.post("/ojs/v1/jobs/batch", json!({ "jobs": chunk })).await;
        assert_eq!(st, 201, "{b}");
        ids.extend(
            b["jobs"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|j| j["id"].as_str().map(str::to_owned)),
        );
    }
    ids
}

/// 64 workers over two nodes fetch from `queue` and ack after `hold`, until `total` jobs are done.
async fn run_workers(
    nodes: [Arc<TestServer>; 2],
    queue: &'static str,
    total: usize,
    hold: Duration,
    deadline: Duration,
) {
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..64 {
        let s = nodes[w % 2].clone();
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            while done.load(std::sync::atomic::Ordering::SeqCst) < total && started.elapsed() < deadline {
                let (_, b) = s
                    .post(
                        "/ojs/v1/workers/fetch",
                        json!({"queues": [queue], "worker_id": format!("w{w}")}),
                    )
                    .await;
                let Some(id) = b["jobs"][0]["id"].as_str().map(str::to_owned) else {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                };
                tokio::time::sleep(hold).await;
                assert_eq!(s.ack(&id).await.0, 200);
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }));
    }
    for t in tasks {
        t.await.expect("worker");
    }
    assert_eq!(
        done.load(std::sync::atomic::Ordering::SeqCst),
        total,
        "not every job ran before the deadline"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrency_is_never_exceeded_across_two_nodes() {
    let (a, b) = two_nodes().await;
    let ids = enqueue_many(
        &a,
        120,
        json!({"type": "a", "args": [], "options": {"queue": "rlc"},
        "rate_limit": {"key": "conc-key", "concurrency": 3}}),
    )
    .await;
    run_workers(
        [a.clone(), b.clone()],
        "rlc",
        120,
        Duration::from_millis(5),
        Duration::from_secs(30),
    )
    .await;
    let mine: std::collections::HashSet<_> = ids.iter().collect();
    let (mut active, mut max) = (0i64, 0i64);
    for (t, id, _) in events(&a).await {
        if !mine.contains(&id) {
            continue;
        }
        match t.as_str() {
            "job.started" => active += 1,
            "job.completed" => active -= 1,
            _ => {}
        }
        max = max.max(active);
    }
    assert_eq!(
        max, 3,
        "at most 3 active at any point of the script order, and the limit was reached"
    );
    let (_, state) = a.get("/ojs/v1/rate-limits/conc-key").await;
    assert_eq!(state["concurrency"], json!({"limit": 3, "active": 0, "available": 3}));
    a.assert_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sliding_window_and_throttle_hold_under_racing_fetchers() {
    let (a, b) = two_nodes().await;
    let win = enqueue_many(
        &a,
        20,
        json!({"type": "a", "args": [], "options": {"queue": "rlw"},
        "rate_limit": {"key": "win-key", "rate": {"limit": 5, "period": "PT0.5S"}}}),
    )
    .await;
    run_workers(
        [a.clone(), b.clone()],
        "rlw",
        20,
        Duration::ZERO,
        Duration::from_secs(10),
    )
    .await;
    let win: std::collections::HashSet<_> = win.iter().collect();
    let starts: Vec<i64> = events(&a)
        .await
        .into_iter()
        .filter(|(t, id, _)| t == "job.started" && win.contains(id))
        .map(|(_, _, ms)| ms)
        .collect();
    assert_eq!(starts.len(), 20);
    for (i, t) in starts.iter().enumerate() {
        let in_window = starts[..=i].iter().filter(|s| **s > t - 500).count();
        assert!(in_window <= 5, "{in_window} starts in the 500 ms before {t}");
    }

    let thr = enqueue_many(
        &a,
        12,
        json!({"type": "a", "args": [], "options": {"queue": "rlt"},
        "rate_limit": {"key": "thr-key", "throttle": {"limit": 4, "period": "PT1S"}}}),
    )
    .await;
    run_workers(
        [a.clone(), b.clone()],
        "rlt",
        12,
        Duration::ZERO,
        Duration::from_secs(10),
    )
    .await;
    let thr: std::collections::HashSet<_> = thr.iter().collect();
    let starts: Vec<i64> = events(&a)
        .await
        .into_iter()
        .filter(|(t, id, _)| t == "job.started" && thr.contains(id))
        .map(|(_, _, ms)| ms)
        .collect();
    let gaps: Vec<i64> = starts.windows(2).map(|w| w[1] - w[0]).collect();
    // period/limit = 250 ms: no two starts closer than 225 ms (the limit), and the typical gap within 20%
    // of 250 (liveness: a start that comes late, waiting for the wake timer and a FETCH on a loaded
    // machine, is followed by one at least 225 ms later, so lateness is won back only 25 ms a start; the
    // CI rehearsal on a 3-primary cluster with a build beside it saw a median of 283).
    assert!(
        gaps.iter().all(|g| *g >= 225),
        "throttle gaps {gaps:?} closer than 90% of 250 ms"
    );
    let mut sorted = gaps.clone();
    sorted.sort();
    let median = sorted[sorted.len() / 2];
    assert!(
        (225..=300).contains(&median),
        "throttle gaps {gaps:?}: median {median} not within 20% of 250 ms"
    );
    a.assert_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slots_come_back_after_200_worker_deaths() {
    let s = TestServer::start().await;
    let ids = enqueue_many(
        &s,
        200,
        json!({"type": "a", "args": [], "options": {"queue": "rld", "visibility_timeout_ms": 100,
        "retry": {"max_attempts": 10}}, "rate_limit": {"key": "death-key", "concurrency": 5}}),
    )
    .await;
    // 200 claims by workers that die (never ack, never heartbeat).
    let mut deaths = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while deaths < 200 {
        assert!(Instant::now() < deadline, "only {deaths} claims: slots leaked");
        let got = s.fetch(&["rld"], 5).await;
        deaths += got.len();
        if got.is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    // Then healthy workers finish every job.
    let mut done = std::collections::HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while done.len() < ids.len() {
        assert!(Instant::now() < deadline, "{} of 200 done: slots leaked", done.len());
        let got = s.fetch(&["rld"], 5).await;
        if got.is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for j in got {
            let id = j["id"].as_str().unwrap_or_default().to_string();
            assert_eq!(s.ack(&id).await.0, 200);
            done.insert(id);
        }
    }
    let (_, state) = s.get("/ojs/v1/rate-limits/death-key").await;
    assert_eq!(state["concurrency"]["active"], 0, "no slot drifted: {state}");
    let mut r = s.redis().await;
    let left: i64 = redis::cmd("ZCARD")
        .arg(s.keys().rl_active("death-key"))
        .query_async(&mut r)
        .await
        .expect("ZCARD");
    assert_eq!(left, 0, "no slot entry left behind");
    s.assert_invariants().await;
}

#[tokio::test]
async fn a_limited_job_never_blocks_a_free_lower_priority_one() {
    let s = TestServer::start().await;
    let limited: Vec<String> = {
        let mut v = Vec::new();
        for _ in 0..50 {
            v.push(
                s.enqueue(
                    json!({"type": "a", "args": [], "priority": 0, "options": {"queue": "skip"},
                "rate_limit": {"key": "busy-key", "concurrency": 1}}),
                )
                .await,
            );
        }
        v
    };
    let free = s
        .enqueue(json!({"type": "a", "args": [], "priority": 5, "options": {"queue": "skip"}}))
        .await;
    let first = s.fetch(&["skip"], 1).await;
    assert_eq!(first[0]["id"], limited[0].as_str(), "priority first");
    let second = s.fetch(&["skip"], 1).await;
    assert_eq!(
        second[0]["id"],
        free.as_str(),
        "the free job runs while busy-key is at its limit"
    );
    assert!(s.fetch(&["skip"], 1).await.is_empty());
    let (_, state) = s.get("/ojs/v1/rate-limits/busy-key").await;
    assert_eq!(state["waiting_count"], 49);
    assert_eq!(state["blocked"]["reason"], "concurrency");
    // Releasing the slot re-admits the next limited job at once.
    assert_eq!(s.ack(&limited[0]).await.0, 200);
    assert_eq!(s.fetch(&["skip"], 1).await[0]["id"], limited[1].as_str());
    // Several blocked fetches make one rate_limit.exceeded per episode, not one per skip.
    for _ in 0..5 {
        s.fetch(&["skip"], 1).await;
    }
    let exceeded = events(&s)
        .await
        .iter()
        .filter(|(t, _, _)| t == "rate_limit.exceeded")
        .count();
    assert_eq!(exceeded, 2, "two blocking episodes");
    let metrics = s.metrics().await;
    for line in [
        "ojs_rate_limit_active{key=\"busy-key\"} 1",
        "ojs_rate_limit_waiting{key=\"busy-key\"} 48",
        "ojs_rate_limit_exceeded_total{key=\"busy-key\",strategy=\"concurrency\"} 2",
    ] {
        assert!(metrics.contains(line), "{line} missing from /metrics:\n{metrics}");
    }
    assert!(metrics.contains("ojs_rate_limit_wait_duration_seconds_bucket{key=\"busy-key\""));
    s.assert_invariants().await;
}

#[tokio::test]
async fn reschedule_and_drop() {
    let s = TestServer::start().await;
    let a = s
        .enqueue(json!({"type": "a", "args": [], "options": {"queue": "rs"},
        "rate_limit": {"key": "rs-key", "rate": {"limit": 1, "period": "PT2S"}, "on_limit": "reschedule"}}))
        .await;
    let b = s
        .enqueue(json!({"type": "a", "args": [], "options": {"queue": "rs"},
        "rate_limit": {"key": "rs-key", "rate": {"limit": 1, "period": "PT2S"}, "on_limit": "reschedule"}}))
        .await;
    assert_eq!(s.fetch(&["rs"], 1).await[0]["id"], a.as_str());
    assert!(s.fetch(&["rs"], 1).await.is_empty());
    let (_, job) = s.get(&format!("/ojs/v1/jobs/{b}")).await;
    assert_eq!(
        job["job"]["state"], "scheduled",
        "rescheduled to when the window allows: {job}"
    );
    let (_, started) = s.get(&format!("/ojs/v1/jobs/{a}")).await;
    let due = ojs_core::clock::parse_ms(job["job"]["scheduled_at"].as_str().unwrap_or("")).unwrap_or(0);
    let began = ojs_core::clock::parse_ms(started["job"]["started_at"].as_str().unwrap_or("")).unwrap_or(0);
    assert_eq!(
        due - began,
        2000,
        "scheduled exactly when the first start leaves the window"
    );

    let d1 = s
        .enqueue(json!({"type": "a", "args": [], "options": {"queue": "dr"},
        "rate_limit": {"key": "dr-key", "rate": {"limit": 1, "period": "PT10S"}, "on_limit": "drop"}}))
        .await;
    let d2 = s
        .enqueue(json!({"type": "a", "args": [], "options": {"queue": "dr"},
        "rate_limit": {"key": "dr-key", "rate": {"limit": 1, "period": "PT10S"}, "on_limit": "drop"}}))
        .await;
    assert_eq!(s.fetch(&["dr"], 1).await[0]["id"], d1.as_str());
    assert!(s.fetch(&["dr"], 1).await.is_empty());
    let (_, job) = s.get(&format!("/ojs/v1/jobs/{d2}")).await;
    assert_eq!(job["job"]["state"], "discarded");
    assert_eq!(job["job"]["error"]["code"], "rate_limited");
    let (_, ev) = s
        .get(&format!("/ojs/v1/events?types=rate_limit.dropped&job_id={d2}"))
        .await;
    assert_eq!(ev["events"][0]["data"]["key"], "dr-key");
    s.assert_invariants().await;
}

#[tokio::test]
async fn rate_limit_until_blocks_the_key_and_spends_no_attempt() {
    let s = TestServer::start().await;
    let id = s
        .enqueue(json!({"type": "a", "args": [], "options": {"queue": "dyn"},
        "rate_limit": {"key": "stripe", "concurrency": 10}}))
        .await;
    let other = s
        .enqueue(json!({"type": "a", "args": [], "options": {"queue": "dyn"},
        "rate_limit": {"key": "stripe", "concurrency": 10}}))
        .await;
    assert_eq!(s.fetch(&["dyn"], 1).await[0]["attempt"], 1);
    let until = ojs_core::clock::format_ms(ojs_core::clock::local_now_ms() + 400);
    let (st, b) = s
        .post(
            "/ojs/v1/workers/nack",
            json!({"job_id": id, "error": {"type": "RateLimitExceeded",
        "message": "429 from Stripe", "rate_limit_until": until}}),
        )
        .await;
    assert_eq!(
        (st, b["state"].as_str(), b["attempt"].as_i64()),
        (200, Some("available"), Some(0)),
        "{b}"
    );
    assert!(
        s.fetch(&["dyn"], 5).await.is_empty(),
        "the key is blocked until rate_limit_until"
    );
    let (_, state) = s.get("/ojs/v1/rate-limits/stripe").await;
    assert!(state["dynamic_until"].is_string(), "{state}");
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.len() < 2 {
        assert!(Instant::now() < deadline, "the key never reopened: {got:?}");
        got.extend(s.fetch(&["dyn"], 5).await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ids: Vec<_> = got.iter().filter_map(|j| j["id"].as_str()).collect();
    assert!(ids.contains(&id.as_str()) && ids.contains(&other.as_str()), "{ids:?}");
    let again = got.iter().find(|j| j["id"] == id.as_str()).cloned().unwrap_or_default();
    assert_eq!(again["attempt"], 1, "the 429 did not spend an attempt");
    let (_, ev) = s.get("/ojs/v1/events?types=rate_limit.dynamic_adjusted").await;
    assert_eq!(ev["events"][0]["data"]["key"], "stripe");
    s.assert_invariants().await;
}

#[tokio::test]
async fn overrides_queue_limits_inspection_and_validation() {
    let s = TestServer::start().await;
    s.enqueue(
        json!({"type": "a", "args": [], "options": {"queue": "ov"}, "rate_limit": {"key": "ov-key", "concurrency": 5}}),
    )
    .await;
    let (st, b) = s.put("/ojs/v1/rate-limits/ov-key", json!({"concurrency": 0})).await;
    assert_eq!(st, 200, "{b}");
    assert!(s.fetch(&["ov"], 1).await.is_empty(), "concurrency 0 pauses the key");
    let (_, b) = s.get("/ojs/v1/rate-limits/ov-key").await;
    assert_eq!(b["concurrency"]["limit"], 0);
    s.delete("/ojs/v1/rate-limits/ov-key").await;
    assert_eq!(
        s.fetch(&["ov"], 1).await.len(),
        1,
        "clearing the override re-admits at once"
    );
    let (_, list) = s.get("/ojs/v1/rate-limits?per_page=10").await;
    assert_eq!(list["pagination"]["total"], 1);
    assert_eq!(list["items"][0]["key"], "ov-key");
    assert_eq!(s.get("/ojs/v1/rate-limits/never-seen").await.0, 404);

    let (st, _) = s
        .put("/ojs/v1/admin/queues/ql/rate-limit", json!({"concurrency": 1}))
        .await;
    assert_eq!(st, 200);
    let j1 = s
        .enqueue(json!({"type": "a", "args": [], "options": {"queue": "ql"}}))
        .await;
    s.enqueue(json!({"type": "a", "args": [], "options": {"queue": "ql"}}))
        .await;
    assert_eq!(
        s.fetch(&["ql"], 5).await.len(),
        1,
        "the queue limit holds for jobs without their own limits"
    );
    assert!(s.fetch(&["ql"], 5).await.is_empty());
    s.ack(&j1).await;
    assert_eq!(s.fetch(&["ql"], 5).await.len(), 1);
    let (_, q) = s.get("/ojs/v1/admin/queues/ql/rate-limit").await;
    assert_eq!(q["concurrency"]["limit"], 1);

    for (body, needle) in [
        (json!({"rate_limit": {"concurrency": 1}}), "rate_limit.key"),
        (
            json!({"rate_limit": {"key": "k", "rate": {"limit": 0, "period": "PT1S"}}}),
            "rate_limit.rate.limit",
        ),
        (
            json!({"options": {"rate_limit": {"key": "k", "on_limit": "nope", "concurrency": 1}}}),
            "options.rate_limit.on_limit",
        ),
    ] {
        let mut job = json!({"type": "a", "args": []});
        for (k, v) in body.as_object().into_iter().flatten() {
            job[k] = v.clone();
        }
        let (st, b) = s.post("/ojs/v1/jobs", job).await;
        assert_eq!(st, 400);
        assert!(b["error"]["message"].as_str().unwrap_or("").contains(needle), "{b}");
    }
    s.assert_invariants().await;
}

/// Every `rate_limit.released` event's data, in stream order.
async fn released(s: &TestServer) -> Vec<Value> {
    let mut r = s.redis().await;
    ojs_testkit::stream_events(&mut r, &s.keys().events())
        .await
        .into_iter()
        .filter(|(_, e)| e.event_type == "rate_limit.released")
        .map(|(_, e)| serde_json::from_str(&e.data).unwrap_or(Value::Null))
        .collect()
}

#[tokio::test]
async fn rate_limit_released_names_the_strategy_that_held_the_lane() {
    // Seed §11.1: rate_limit.released carries key, strategy and job_id.
    let s = TestServer::start().await;
    // A slot release (concurrency), then a wake on the timer (throttle).
    enqueue_many(
        &s,
        2,
        json!({"type": "t", "args": [], "queue": "rel-c", "rate_limit": {"key": "rel-c", "concurrency": 1}}),
    )
    .await;
    let first = s.fetch(&["rel-c"], 1).await;
    assert_eq!(first.len(), 1);
    assert!(s.fetch(&["rel-c"], 1).await.is_empty(), "the second waits for the slot");
    let (st, _) = s.ack(first[0]["id"].as_str().expect("id")).await;
    assert_eq!(st, 200);
    enqueue_many(
        &s,
        2,
        json!({"type": "t", "args": [], "queue": "rel-t",
        "rate_limit": {"key": "rel-t", "throttle": {"limit": 1, "period": "PT0.3S"}}}),
    )
    .await;
    assert_eq!(s.fetch(&["rel-t"], 1).await.len(), 1);
    assert!(
        s.fetch(&["rel-t"], 1).await.is_empty(),
        "the second waits for the throttle"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    let got = loop {
        let got = released(&s).await;
        if got.len() >= 2 || Instant::now() > deadline {
            break got;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let by_key: Vec<(&str, &str)> = got
        .iter()
        .map(|d| (d["key"].as_str().unwrap_or(""), d["strategy"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(by_key, [("rel-c", "concurrency"), ("rel-t", "throttle")], "{got:?}");
}

/// Costs (ours): a window of 1,000 units with jobs of cost 100 starts 10; an ACK that reports 50
/// units used frees the other 50 in the same window, at once.
#[tokio::test]
async fn a_window_of_units_counts_costs_and_an_ack_gives_back_what_was_not_used() {
    let s = TestServer::start().await;
    let job = json!({"type": "llm.call", "args": [], "options": {"queue": "llm"},
        "rate_limit": {"key": "tokens", "rate": {"limit": 1000, "period": "PT1M"}, "cost": 100}});
    let ids = enqueue_many(&s, 15, job).await;
    let mut started = Vec::new();
    for _ in 0..15 {
        started.extend(s.fetch(&["llm"], 1).await);
    }
    assert_eq!(started.len(), 10, "1,000 units at 100 each start 10 in the window");
    let (_, state) = s.get("/ojs/v1/rate-limits/tokens").await;
    assert_eq!(
        (&state["rate"]["current_count"], &state["rate"]["remaining"]),
        (&json!(1000), &json!(0)),
        "{state}"
    );
    let first = started[0]["id"].as_str().unwrap_or_default().to_string();
    let (st, b) = s
        .post("/ojs/v1/workers/ack", json!({"job_id": first, "cost_used": 50}))
        .await;
    assert_eq!(st, 200, "{b}");
    let (_, state) = s.get("/ojs/v1/rate-limits/tokens").await;
    assert_eq!(state["rate"]["remaining"], 50, "the unused 50 are free again: {state}");
    assert!(
        s.fetch(&["llm"], 1).await.is_empty(),
        "50 units are not enough for a job of 100"
    );
    let second = started[1]["id"].as_str().unwrap_or_default().to_string();
    s.post("/ojs/v1/workers/ack", json!({"job_id": second, "cost_used": 50}))
        .await;
    let next = s.fetch(&["llm"], 1).await;
    assert_eq!(
        next[0]["id"],
        ids[10].as_str(),
        "two ACKs of 50 free a whole job's units in the same window"
    );
    // An ACK without cost_used leaves the window as it was; one that reports more takes more.
    let third = started[2]["id"].as_str().unwrap_or_default().to_string();
    assert_eq!(s.ack(&third).await.0, 200);
    let fourth = started[3]["id"].as_str().unwrap_or_default().to_string();
    s.post("/ojs/v1/workers/ack", json!({"job_id": fourth, "cost_used": 130}))
        .await;
    let (_, state) = s.get("/ojs/v1/rate-limits/tokens").await;
    assert_eq!(state["rate"]["current_count"], 1030, "{state}");
    s.assert_invariants().await;
}

/// Concurrency in units: a job holds its cost (at most the limit) while active, gives exactly that
/// back, and a holder whose lease lapsed holds nothing.
#[tokio::test]
async fn concurrency_counts_units_and_gives_back_exactly_what_it_held() {
    let s = TestServer::start().await;
    let lim = |cost: u64| {
        json!({"type": "a", "args": [], "options": {"queue": "cu"},
            "rate_limit": {"key": "gpu", "concurrency": 10, "cost": cost}})
    };
    let a = s.enqueue(lim(4)).await;
    let b = s.enqueue(lim(4)).await;
    let c = s.enqueue(lim(4)).await;
    let got: Vec<_> = s.fetch(&["cu"], 5).await;
    assert_eq!(got.len(), 2, "two jobs of 4 fit in 10 units, a third does not");
    let (_, state) = s.get("/ojs/v1/rate-limits/gpu").await;
    assert_eq!(
        (&state["concurrency"]["active"], &state["concurrency"]["available"]),
        (&json!(8), &json!(2)),
        "{state}"
    );
    assert_eq!(s.ack(&a).await.0, 200);
    assert_eq!(
        s.fetch(&["cu"], 5).await[0]["id"],
        c.as_str(),
        "the ACK gave 4 units back"
    );
    assert_eq!(s.ack(&b).await.0, 200);
    assert_eq!(s.ack(&c).await.0, 200);
    // A job that costs more than the whole limit runs alone, not never.
    let big = s.enqueue(lim(50)).await;
    let small = s.enqueue(lim(1)).await;
    assert_eq!(s.fetch(&["cu"], 5).await.len(), 1);
    let (_, state) = s.get("/ojs/v1/rate-limits/gpu").await;
    assert_eq!(state["concurrency"]["active"], 10, "{state}");
    assert_eq!(s.ack(&big).await.0, 200);
    assert_eq!(s.fetch(&["cu"], 5).await[0]["id"], small.as_str());
    assert_eq!(s.ack(&small).await.0, 200);
    // Nothing of the units is left once no job holds a slot.
    let mut r = s.redis().await;
    let keys = s.keys();
    let left: i64 = redis::cmd("EXISTS")
        .arg(keys.rl_active_units("gpu"))
        .arg(keys.rl_active_cost("gpu"))
        .query_async(&mut r)
        .await
        .unwrap_or(-1);
    assert_eq!(left, 0, "the units counters leave with their last holder");

    // A holder whose lease lapsed no longer counts its units, before the reaper takes it back.
    let held = s.enqueue(lim(8)).await;
    let (st, b) = s
        .post(
            "/ojs/v1/workers/fetch",
            json!({"queues": ["cu"], "visibility_timeout_ms": 200}),
        )
        .await;
    assert_eq!((st, b["jobs"][0]["id"].as_str()), (200, Some(held.as_str())), "{b}");
    let after = s.enqueue(lim(8)).await;
    assert!(s.fetch(&["cu"], 1).await.is_empty(), "8 + 8 > 10");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, state) = s.get("/ojs/v1/rate-limits/gpu").await;
    assert_eq!(
        state["concurrency"]["active"], 0,
        "a lapsed lease holds nothing: {state}"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got = s.fetch(&["cu"], 1).await;
        if got.iter().any(|j| j["id"] == after.as_str()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the job behind the lapsed lease never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    s.assert_invariants().await;
}

/// A throttle spaces a job of cost u as u starts; bad costs are refused naming the range.
#[tokio::test]
async fn a_throttle_spaces_costly_jobs_and_bad_costs_are_refused() {
    let s = TestServer::start().await;
    let job = json!({"type": "a", "args": [], "options": {"queue": "th"},
        "rate_limit": {"key": "spaced", "throttle": {"limit": 10, "period": "PT1S"}, "cost": 5}});
    s.enqueue(job.clone()).await;
    s.enqueue(job).await;
    let first = s.fetch(&["th"], 1).await;
    let began = ojs_core::clock::parse_ms(first[0]["started_at"].as_str().unwrap_or("")).unwrap_or(0);
    assert!(s.fetch(&["th"], 1).await.is_empty());
    let (_, state) = s.get("/ojs/v1/rate-limits/spaced").await;
    let next = ojs_core::clock::parse_ms(state["throttle"]["next_allowed_at"].as_str().unwrap_or("")).unwrap_or(0);
    assert!(
        (450..=500).contains(&(next - began)),
        "5 units at 100 ms each: the next start {} ms after the first: {state}",
        next - began
    );
    // An expired start of u units leaves the window with all of them.
    let short = json!({"type": "a", "args": [], "options": {"queue": "sw"},
        "rate_limit": {"key": "short", "rate": {"limit": 4, "period": "PT0.2S"}, "cost": 3}});
    s.enqueue(short.clone()).await;
    let later = s.enqueue(short).await;
    assert_eq!(s.fetch(&["sw"], 5).await.len(), 1, "3 + 3 > 4");
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.fetch(&["sw"], 1).await.iter().all(|j| j["id"] != later.as_str()) {
        assert!(Instant::now() < deadline, "the window never let the second job in");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (_, state) = s.get("/ojs/v1/rate-limits/short").await;
    assert_eq!(
        state["rate"]["current_count"], 3,
        "only the second start is in the window: {state}"
    );
    let mut r = s.redis().await;
    let extra: Option<i64> = redis::cmd("GET")
        .arg(s.keys().rl_win_units("short"))
        .query_async(&mut r)
        .await
        .unwrap_or(None);
    assert_eq!(extra, Some(2), "the pruned start took its units with it");
    for (body, needle) in [
        (
            json!({"type": "a", "args": [], "rate_limit": {"key": "k", "concurrency": 1, "cost": 0}}),
            "rate_limit.cost must be an integer from 1 to 1000000000",
        ),
        (
            json!({"type": "a", "args": [], "rate_limit": {"key": "k", "concurrency": 1, "cost": "lots"}}),
            "rate_limit.cost",
        ),
    ] {
        let (st, b) = s.post("/ojs/v1/jobs", body).await;
        assert_eq!(st, 400, "{b}");
        assert!(b["error"]["message"].as_str().unwrap_or("").contains(needle), "{b}");
    }
    // A window that holds only the corrected start keeps it, its count and its expiry.
    s.enqueue(json!({"type": "a", "args": [], "options": {"queue": "one"},
        "rate_limit": {"key": "lone", "rate": {"limit": 1000, "period": "PT1M"}, "cost": 100}}))
        .await;
    let lone = s.fetch(&["one"], 1).await;
    let (st, b) = s
        .post("/ojs/v1/workers/ack", json!({"job_id": lone[0]["id"], "cost_used": 42}))
        .await;
    assert_eq!(st, 200, "{b}");
    let (_, state) = s.get("/ojs/v1/rate-limits/lone").await;
    assert_eq!(state["rate"]["current_count"], 42, "{state}");
    let ttl: i64 = redis::cmd("PTTL")
        .arg(s.keys().rl_win("lone"))
        .query_async(&mut r)
        .await
        .unwrap_or(-3);
    assert!(ttl > 0, "the window keeps its expiry: PTTL {ttl}");
    let id = first[0]["id"].as_str().unwrap_or_default();
    let (st, b) = s
        .post("/ojs/v1/workers/ack", json!({"job_id": id, "cost_used": -1}))
        .await;
    assert_eq!(st, 400, "{b}");
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("cost_used must be an integer from 0"),
        "{b}"
    );
    s.assert_invariants().await;
}

/// Adaptive limits (ours): a fake upstream answers 429 to any call above 5 at once. The key's effective
/// concurrency, from a policy of 20, settles near 5 (never below 3, higher only while probing for the
/// edge), every job completes on its first attempt, and an operator override wins over adaptation.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_adaptive_key_settles_under_an_upstream_that_refuses_more_than_five() {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let s = Arc::new(TestServer::start().await);
    let total = 250;
    enqueue_many(
        &s,
        total,
        json!({"type": "call", "args": [], "options": {"queue": "ad"},
            "rate_limit": {"key": "upstream", "concurrency": 20,
                "adaptive": {"increase_after": 5, "errors": ["TooManyRequests"]}}}),
    )
    .await;
    let inflight = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..20 {
        let (s, inflight, done, refused) = (s.clone(), inflight.clone(), done.clone(), refused.clone());
        tasks.push(tokio::spawn(async move {
            while done.load(SeqCst) < total && started.elapsed() < Duration::from_secs(60) {
                // Long-polled, so a slot freed by an ACK is taken again at once, as by busy workers.
                let (_, got) = s
                    .post(
                        "/ojs/v1/workers/fetch",
                        json!({"queues": ["ad"], "worker_id": format!("w{w}"), "wait_ms": 200}),
                    )
                    .await;
                let Some(id) = got["jobs"][0]["id"].as_str().map(str::to_owned) else {
                    continue;
                };
                // The upstream: a call that finds 5 in flight is refused at once.
                if inflight.fetch_add(1, SeqCst) >= 5 {
                    inflight.fetch_sub(1, SeqCst);
                    refused.fetch_add(1, SeqCst);
                    let (st, b) = s
                        .post(
                            "/ojs/v1/workers/nack",
                            json!({"job_id": id, "worker_id": format!("w{w}"),
                                "error": {"type": "TooManyRequests", "message": "429 from upstream"}}),
                        )
                        .await;
                    assert_eq!(
                        (st, b["state"].as_str(), b["attempt"].as_i64()),
                        (200, Some("available"), Some(0)),
                        "{b}"
                    );
                    continue;
                }
                // A call long enough that HTTP round trips on a busy machine are small beside it.
                tokio::time::sleep(Duration::from_millis(50)).await;
                inflight.fetch_sub(1, SeqCst);
                let (st, b) = s.ack(&id).await;
                assert_eq!(
                    (st, b["attempt"].as_i64()),
                    (200, Some(1)),
                    "no attempt was spent on a 429: {b}"
                );
                done.fetch_add(1, SeqCst);
            }
        }));
    }
    // The effective concurrency, sampled once the first 80 jobs are done.
    let mut samples = Vec::new();
    while done.load(SeqCst) < total && started.elapsed() < Duration::from_secs(60) {
        if done.load(SeqCst) >= 80 {
            let (_, st) = s.get("/ojs/v1/rate-limits/upstream").await;
            samples.push(st["adaptive"]["concurrency"]["effective"].as_u64().unwrap_or(0));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for t in tasks {
        t.await.expect("worker");
    }
    assert_eq!(done.load(SeqCst), total, "every job completed");
    assert!(refused.load(SeqCst) > 0, "the upstream refused some calls");
    assert!(!samples.is_empty());
    eprintln!("effective concurrency samples: {samples:?}");
    // Never below 3: a call is refused only when 5 others are in it, each holding a slot, so the key
    // held at least 6 and halves to at least 3 (and a job that started before a decrease does not
    // halve it again). Above 5 only while probing: the upstream sees a call end before its ACK frees
    // the slot, so on a loaded machine (slow ACKs) a probe may pass the edge several times before one
    // meets it (seen up to 9 under CI's load), but it never climbs near the policy's 20, and it spends
    // most of its time near the edge.
    let mut sorted = samples.clone();
    sorted.sort_unstable();
    let median = sorted[sorted.len() / 2];
    assert!(
        samples.iter().all(|c| (3..=12).contains(c)) && median <= 7,
        "the effective concurrency should settle near 5 (above only as the probe): {samples:?}"
    );
    let (_, ev) = s.get("/ojs/v1/events?types=rate_limit.adjusted&limit=1000").await;
    let reasons: std::collections::HashSet<_> = ev["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["data"]["reason"].as_str())
        .collect();
    assert!(
        reasons.contains("rate_limited") && reasons.contains("recovered"),
        "{ev}"
    );
    // The override wins over adaptation while it lasts; adaptation's own state is kept.
    let (st, _) = s.put("/ojs/v1/rate-limits/upstream", json!({"concurrency": 2})).await;
    assert_eq!(st, 200);
    let (_, state) = s.get("/ojs/v1/rate-limits/upstream").await;
    assert_eq!(state["concurrency"]["limit"], 2, "{state}");
    assert_eq!(state["adaptive"]["concurrency"]["policy"], 20, "{state}");
    let metrics = s.metrics().await;
    for line in [
        "ojs_rate_limit_limit{key=\"upstream\",strategy=\"concurrency\"} 2",
        "ojs_rate_limit_policy_limit{key=\"upstream\",strategy=\"concurrency\"} 20",
    ] {
        assert!(metrics.contains(line), "{line} missing from /metrics:\n{metrics}");
    }
    s.assert_invariants().await;
}

/// Burstable concurrency: keys with a floor draw from their queue's pool (its concurrency). A key alone
/// borrows every idle slot up to its ceiling; a key below its floor gets the next slot a borrower
/// gives back, ahead of the borrower's own older jobs; once each key has its floor, idle slots are
/// lent again. Explain names the pool gate, and nothing owed is left when the queue drains.
#[tokio::test]
async fn burstable_keys_keep_their_floor_and_borrow_idle_slots() {
    let s = TestServer::start().await;
    let (st, b) = s
        .put("/ojs/v1/admin/queues/bq/rate-limit", json!({"concurrency": 6}))
        .await;
    assert_eq!(st, 200, "{b}");
    let job = |key: &str, ceiling: u64| {
        json!({"type": "burst", "args": [], "options": {"queue": "bq"},
            "rate_limit": {"key": key, "concurrency": ceiling, "floor": 2}})
    };
    let a = enqueue_many(&s, 10, job("tenant-a", 6)).await;
    let held: Vec<String> = s
        .fetch(&["bq"], 10)
        .await
        .iter()
        .filter_map(|j| j["id"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(held, a[..6], "alone, a key borrows every idle slot up to its ceiling");

    // B arrives below its floor: the pool is full, so it waits for a slot to come back.
    let bs = enqueue_many(&s, 5, job("tenant-b", 6)).await;
    assert!(s.fetch(&["bq"], 1).await.is_empty(), "the pool's 6 slots are held");
    let (_, q) = s.get("/ojs/v1/admin/queues/bq/rate-limit").await;
    assert_eq!(
        q["concurrency"],
        json!({"limit": 6, "active": 6, "floors_owed": 2}),
        "B's floor is owed: {q}"
    );
    let (_, k) = s.get("/ojs/v1/rate-limits/tenant-a").await;
    assert_eq!(
        k["concurrency"],
        json!({"limit": 6, "active": 6, "available": 0, "floor": 2}),
        "{k}"
    );
    assert_eq!(s.ack(&held[0]).await.0, 200);
    let got = s.fetch(&["bq"], 1).await;
    assert_eq!(
        got[0]["id"],
        bs[0].as_str(),
        "the slot A gave back goes to B, below its floor, though A's jobs are older"
    );
    // A's lane waits for the pool: explain says so, with the floor and what is owed.
    let (st, why) = s.get(&format!("/ojs/v1/jobs/{}/explain", a[6])).await;
    assert_eq!(st, 200, "{why}");
    let pool = why["gates"]
        .as_array()
        .and_then(|g| g.iter().find(|g| g["gate"] == "pool"))
        .unwrap_or_else(|| panic!("no pool gate: {why}"));
    assert_eq!((&pool["limit"], &pool["key"]), (&json!(6), &json!("tenant-a")), "{why}");
    assert_eq!(
        (&pool["floor"], &pool["owed"], &pool["current"]),
        (&json!(2), &json!(1), &json!(7)),
        "A holds its floor; B is owed one more: 6 active + 1 owed: {why}"
    );
    assert_eq!(s.ack(&held[1]).await.0, 200);
    let got = s.fetch(&["bq"], 1).await;
    assert_eq!(got[0]["id"], bs[1].as_str(), "B gets its second floor slot");
    // Both hold their floor: the next slot given back is lent to whoever comes first (A's older job).
    assert_eq!(s.ack(&held[2]).await.0, 200);
    let got = s.fetch(&["bq"], 1).await;
    assert_eq!(
        got[0]["id"],
        a[6].as_str(),
        "with every floor met, an idle slot is lent again"
    );
    s.assert_invariants().await;

    // Drain everything: nothing is owed once no lane waits.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut active: Vec<String> = held[3..].to_vec();
    active.extend([bs[0].clone(), bs[1].clone(), a[6].clone()]);
    while !active.is_empty() {
        for id in active.drain(..) {
            assert_eq!(s.ack(&id).await.0, 200);
        }
        active = s
            .fetch(&["bq"], 10)
            .await
            .iter()
            .filter_map(|j| j["id"].as_str().map(str::to_owned))
            .collect();
        assert!(Instant::now() < deadline, "the queue never drained");
    }
    let mut r = s.redis().await;
    let keys = s.keys();
    let want: Option<i64> = redis::cmd("HGET")
        .arg(keys.queue_conf("bq"))
        .arg("want")
        .query_async(&mut r)
        .await
        .unwrap_or(None);
    assert_eq!(want.unwrap_or(0), 0, "nothing is owed once the queue drained");
    s.assert_invariants().await;

    // A ceiling holds even with the pool idle; a floor above the ceiling is refused, naming the range.
    let c = enqueue_many(&s, 5, job("tenant-c", 3)).await;
    assert_eq!(s.fetch(&["bq"], 5).await.len(), 3, "tenant-c's ceiling is 3");
    drop(c);
    let (st, b) = s
        .post(
            "/ojs/v1/jobs",
            json!({"type": "burst", "args": [], "rate_limit": {"key": "k", "concurrency": 2, "floor": 3}}),
        )
        .await;
    assert_eq!(st, 400, "{b}");
    assert!(b.to_string().contains("rate_limit.floor"), "{b}");

    // The largest concurrency a queue's PUT accepts reads back (schemathesis found a 500 here once
    // the read took the queue's counters as signed).
    let (st, b) = s
        .put(
            "/ojs/v1/admin/queues/bq-huge/rate-limit",
            json!({"concurrency": 9_223_372_036_854_775_808u64}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    let (st, b) = s.get("/ojs/v1/admin/queues/bq-huge/rate-limit").await;
    assert_eq!(
        (st, &b["concurrency"]["limit"]),
        (200, &json!(9_223_372_036_854_775_808u64)),
        "{b}"
    );
}

/// Burstable concurrency under 64 racing fetchers on two nodes. Three keys with floors 2, 2 and 2 share
/// a pool of 6 (the queue's concurrency), each with a ceiling of 6: while all three have work, the
/// floors take the whole pool, so no key ever holds more than its floor and none borrows. Once the
/// smallest key (c) has started its last job, its slots are lent: a and b burst past their floors,
/// and the pool never holds more than 6.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn floors_hold_and_idle_slots_are_lent_under_racing_fetchers() {
    let (a, b) = two_nodes().await;
    let (st, body) = a
        .put("/ojs/v1/admin/queues/bursty/rate-limit", json!({"concurrency": 6}))
        .await;
    assert_eq!(st, 200, "{body}");
    let job = |key: &str| {
        json!({"type": "burst", "args": [], "options": {"queue": "bursty"},
            "rate_limit": {"key": key, "concurrency": 6, "floor": 2}})
    };
    // Interleaved, so that all three keys wait before any worker runs.
    let mut jobs = Vec::new();
    for i in 0..100 {
        jobs.push(job("ka"));
        jobs.push(job("kb"));
        if i < 30 {
            jobs.push(job("kc"));
        }
    }
    let (st, body) = a.post("/ojs/v1/jobs/batch", json!({ "jobs": jobs })).await;
    assert_eq!(st, 201, "{body}");
    let key_of: std::collections::HashMap<String, String> = body["jobs"]
        .as_array()
        .into_iter()
        .flatten()
        .zip(jobs.iter())
        .filter_map(|(j, src)| {
            Some((
                j["id"].as_str()?.to_owned(),
                src["rate_limit"]["key"].as_str()?.to_owned(),
            ))
        })
        .collect();
    assert_eq!(key_of.len(), 230);
    run_workers(
        [a.clone(), b.clone()],
        "bursty",
        230,
        Duration::from_millis(10),
        Duration::from_secs(60),
    )
    .await;
    let mut held: std::collections::HashMap<&str, i64> = std::collections::HashMap::new();
    let (mut c_started, mut total, mut max_total, mut burst) = (0, 0i64, 0i64, 0i64);
    for (t, id, _) in events(&a).await {
        let Some(k) = key_of.get(&id) else { continue };
        match t.as_str() {
            "job.started" => {
                *held.entry(k).or_default() += 1;
                total += 1;
                if k == "kc" {
                    c_started += 1;
                }
            }
            "job.completed" => {
                *held.entry(k).or_default() -= 1;
                total -= 1;
            }
            _ => continue,
        }
        max_total = max_total.max(total);
        let most = held.values().copied().max().unwrap_or(0);
        if c_started < 30 {
            assert!(most <= 2, "a key borrowed while every key still had work: {held:?}");
        } else {
            burst = burst.max(most);
        }
    }
    assert_eq!(max_total, 6, "the pool of 6 was used in full and never exceeded");
    assert!(
        burst > 2,
        "once kc ran out of work, its slots were lent (most held {burst})"
    );
    let mut r = a.redis().await;
    let want: Option<i64> = redis::cmd("HGET")
        .arg(a.keys().queue_conf("bursty"))
        .arg("want")
        .query_async(&mut r)
        .await
        .unwrap_or(None);
    assert_eq!(want.unwrap_or(0), 0, "nothing is owed once the queue drained");
    a.assert_invariants().await;
}
