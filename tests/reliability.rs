//! What must hold when many workers race, workers vanish, Redis restarts or forgets its scripts, and
//! nodes stop: exactly one winner per job, nothing lost, nothing stranded, every index consistent.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ojs_testkit::TestServer;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_fetchers_never_share_a_job() {
    let s = Arc::new(TestServer::start().await);
    let q = "race";
    let jobs: Vec<_> = (0..1000)
        .map(|i| json!({"type": "a", "args": [i], "options": {"queue": q}}))
        .collect();
    for chunk in jobs.chunks(250) {
        let (st, _) = s.post("/ojs/v1/jobs/batch", json!({ "jobs": chunk })).await;
        assert_eq!(st, 201);
    }
    let mut tasks = Vec::new();
    for w in 0..32 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let (st, b) = s
                    .post(
                        "/ojs/v1/workers/fetch",
                        json!({"queues": [q], "worker_id": format!("w{w}"), "count": 3}),
                    )
                    .await;
                assert_eq!(st, 200);
                let got = b["jobs"].as_array().cloned().unwrap_or_default();
                if got.is_empty() {
                    return mine;
                }
                for j in got {
                    let id = j["id"].as_str().unwrap_or_default().to_string();
                    assert_eq!(s.ack(&id).await.0, 200, "the claimer can always ACK");
                    mine.push(id);
                }
            }
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("fetcher"));
    }
    let unique: HashSet<_> = all.iter().collect();
    assert_eq!(all.len(), 1000, "every job fetched exactly once");
    assert_eq!(unique.len(), 1000, "no job fetched twice");
    s.assert_invariants().await;
}

#[tokio::test]
async fn a_vanished_workers_job_comes_back_after_its_visibility_timeout() {
    let s = TestServer::start().await;
    let q = "vanish";
    let id = s
        .enqueue(json!({"type": "a", "args": [], "options": {"queue": q, "visibility_timeout_ms": 200}}))
        .await;
    assert_eq!(s.fetch(&[q], 1).await.len(), 1);
    // The worker never ACKs or heartbeats.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(s.fetch(&[q], 1).await.is_empty(), "still leased");
    tokio::time::sleep(Duration::from_millis(250)).await;
    let again = s.fetch(&[q], 1).await;
    assert_eq!(again[0]["id"], id.as_str(), "requeued after the lease lapsed");
    assert_eq!(again[0]["attempt"], 2, "the lost attempt counts");
    assert_eq!(s.ack(&id).await.0, 200);
    s.assert_invariants().await;
}

#[tokio::test]
async fn a_job_that_keeps_killing_workers_is_exhausted_not_looped() {
    let s = TestServer::start().await;
    let q = "poison";
    let id = s
        .enqueue(
            json!({"type": "a", "args": [], "options": {"queue": q, "visibility_timeout_ms": 50,
            "retry": {"max_attempts": 2, "on_exhaustion": "dead_letter"}}}),
        )
        .await;
    for _ in 0..2 {
        let deadline = Instant::now() + Duration::from_secs(2);
        while s.fetch(&[q], 1).await.is_empty() {
            assert!(Instant::now() < deadline, "job never came back");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let job = s.wait_state(&id, "discarded", Duration::from_secs(5)).await;
    assert_eq!(job["error"]["code"], "visibility_timeout");
    s.assert_invariants().await;
}

#[tokio::test]
async fn execution_timeout_fails_the_attempt() {
    let s = TestServer::start().await;
    let q = "slow";
    let id = s
        .enqueue(
            json!({"type": "a", "args": [], "options": {"queue": q, "timeout_ms": 100,
            "retry": {"max_attempts": 3, "initial_interval": "PT10S"}}}),
        )
        .await;
    s.fetch(&[q], 1).await;
    // Heartbeats cannot stretch a lease past the execution timeout.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        s.post("/ojs/v1/workers/heartbeat", json!({"active_jobs": [id]})).await;
    }
    let job = s.wait_state(&id, "retryable", Duration::from_secs(5)).await;
    assert_eq!(job["error"]["code"], "timeout");
    s.assert_invariants().await;
}

#[tokio::test]
async fn scheduled_jobs_become_fetchable_within_200ms_of_due() {
    let s = TestServer::start().await;
    let q = "sched";
    let (st, b) = s
        .post(
            "/ojs/v1/jobs",
            json!({"type": "a", "args": [], "options": {"queue": q, "delay_ms": 300}}),
        )
        .await;
    assert_eq!((st, b["job"]["state"].as_str()), (201, Some("scheduled")));
    let started = Instant::now();
    assert!(s.fetch(&[q], 1).await.is_empty(), "not before it is due");
    loop {
        if !s.fetch(&[q], 1).await.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_millis(300 + 200),
            "not fetchable 200 ms after due"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(started.elapsed() >= Duration::from_millis(250));
    // expires_at: a job that expires before it can run is discarded, never handed out.
    let past_soon = ojs_core::clock::format_ms(ojs_core::clock::local_now_ms() + 100);
    let id = s
        .enqueue(json!({"type": "a", "args": [], "options": {"queue": "exp", "expires_at": past_soon}}))
        .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(s.fetch(&["exp"], 1).await.is_empty());
    let (_, job) = s.get(&format!("/ojs/v1/jobs/{id}")).await;
    assert_eq!(job["job"]["state"], "discarded");
    s.assert_invariants().await;
}

#[tokio::test]
async fn function_flush_does_not_break_the_server() {
    let s = TestServer::start().await;
    s.enqueue(json!({"type": "a", "args": [], "options": {"queue": "flush"}}))
        .await;
    let mut r = s.redis().await;
    // What a Redis without persistence looks like after a restart: no functions, no scripts.
    for (cmd, arg) in [("FUNCTION", "FLUSH"), ("SCRIPT", "FLUSH")] {
        let _: () = redis::cmd(cmd).arg(arg).query_async(&mut r).await.expect("flush");
    }
    s.enqueue(json!({"type": "a", "args": [], "options": {"queue": "flush"}}))
        .await;
    assert_eq!(s.fetch(&["flush"], 5).await.len(), 2);
    let libs: redis::Value = redis::cmd("FUNCTION")
        .arg("LIST")
        .arg("LIBRARYNAME")
        .arg(format!("ojs_{}", ojs_store::scripts::LIBRARY_VERSION))
        .query_async(&mut r)
        .await
        .expect("FUNCTION LIST");
    assert!(
        matches!(&libs, redis::Value::Array(a) if a.len() == 1),
        "the library was loaded again: {libs:?}"
    );
    s.assert_invariants().await;
}

#[tokio::test]
async fn redis_down_answers_503_and_recovers() {
    if ojs_testkit::skip_on_cluster("stops a single redis-server of its own; tests/cluster.rs kills a cluster primary")
    {
        return;
    }
    // A Redis of this test's own, so stopping it harms no other test.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port");
    let start = || {
        std::process::Command::new(ojs_testkit::redis_server_bin())
            .args([
                "--port",
                &port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
                "--loglevel",
                "warning",
            ])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server")
    };
    let mut redis = start();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let s = TestServer::start_with(|c| c.redis_url = format!("redis://127.0.0.1:{port}")).await;
    s.enqueue(json!({"type": "a", "args": []})).await;
    redis.kill().expect("kill");
    let _ = redis.wait();
    let (st, b) = s.post("/ojs/v1/jobs", json!({"type": "a", "args": []})).await;
    assert_eq!(
        (st, b["error"]["code"].as_str()),
        (503, Some("backend_unavailable")),
        "{b}"
    );
    let (st, h) = s.get("/ojs/v1/health").await;
    assert_eq!((st, h["status"].as_str()), (503, Some("degraded")));
    let mut redis = start();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (st, _) = s.post("/ojs/v1/jobs", json!({"type": "a", "args": []})).await;
        if st == 201 {
            break;
        }
        assert!(Instant::now() < deadline, "server did not recover when Redis came back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(s.get("/ojs/v1/health").await.0, 200);
    let _ = redis.kill();
    let _ = redis.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_nodes_share_one_namespace_and_stopping_one_loses_nothing() {
    let a = TestServer::start().await;
    let node_config = || {
        let mut cfg = ojs_testkit::base_config();
        cfg.namespace = a.namespace.clone();
        cfg.tick_ms = 20;
        cfg
    };
    let b = TestServer::start_config(node_config()).await;
    let c_config = node_config();
    let mut ids = HashSet::new();
    for i in 0..50 {
        let id = a
            .enqueue(json!({"type": "a", "args": [i], "options": {"queue": "pods", "visibility_timeout_ms": 200}}))
            .await;
        ids.insert(id);
    }
    // Node B claims ten and dies without acking; node A stops gracefully.
    assert_eq!(b.fetch(&["pods"], 10).await.len(), 10);
    drop(b);
    a.stop().await;
    // A third node finishes everything, the ten included once their leases lapse.
    let c = TestServer::start_config(c_config).await;
    let mut done = HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    while done.len() < 50 {
        assert!(Instant::now() < deadline, "only {} of 50 finished", done.len());
        let got = c.fetch(&["pods"], 1).await;
        if got.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for j in got {
            let id = j["id"].as_str().unwrap_or_default().to_string();
            // Leases are 200 ms: on a loaded machine one can lapse before the ACK lands. That
            // ACK is refused (409) and the job comes back: at-least-once, never lost.
            let (status, body) = c.ack(&id).await;
            match status {
                200 => assert!(done.insert(id), "a job was handed out twice after completing"),
                409 => assert!(!done.contains(&id), "a completed job was handed out again: {body}"),
                other => panic!("ack answered {other}: {body}"),
            }
        }
    }
    assert_eq!(done, ids);
    c.assert_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_flow_across_two_server_processes_and_survive_a_kill() {
    let bin = env!("CARGO_BIN_EXE_ojs-server");
    let ns = ojs_testkit::unique_namespace();
    let mut a = TestServer::spawn_pod(bin, &ns, &[("OJS_VISIBILITY_TIMEOUT_MS", "300")]).await;
    let b = TestServer::spawn_pod(bin, &ns, &[("OJS_VISIBILITY_TIMEOUT_MS", "300")]).await;
    // Enqueued on A, fetched on B, acked on A.
    let id = a
        .enqueue(json!({"type": "a", "args": [], "options": {"queue": "pods"}}))
        .await;
    let got = b.fetch(&["pods"], 1).await;
    assert_eq!(got[0]["id"], id.as_str());
    assert_eq!(a.ack(&id).await.0, 200);
    // A claims a job and is killed with SIGKILL mid-job: B hands it out again after the lease.
    let lost = b
        .enqueue(json!({"type": "a", "args": [], "options": {"queue": "pods"}}))
        .await;
    assert_eq!(a.fetch(&["pods"], 1).await[0]["id"], lost.as_str());
    a.kill();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got = b.fetch(&["pods"], 1).await;
        if let Some(j) = got.first() {
            assert_eq!(j["id"], lost.as_str());
            assert_eq!(b.ack(&lost).await.0, 200);
            break;
        }
        assert!(Instant::now() < deadline, "the killed pod's job never came back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    b.assert_invariants().await;
}

#[tokio::test]
async fn oversized_bodies_and_batches_are_refused_in_the_ojs_shape() {
    let s = TestServer::start_with(|c| {
        c.max_body_bytes = 1024;
        c.max_batch = 3;
    })
    .await;
    let big = "x".repeat(2048);
    let (st, b) = s.post("/ojs/v1/jobs", json!({"type": "a", "args": [big]})).await;
    assert_eq!(
        (st, b["error"]["code"].as_str()),
        (413, Some("payload_too_large")),
        "{b}"
    );
    let jobs: Vec<_> = (0..4).map(|i| json!({"type": "a", "args": [i]})).collect();
    let (st, b) = s.post("/ojs/v1/jobs/batch", json!({ "jobs": jobs })).await;
    assert_eq!((st, b["error"]["code"].as_str()), (413, Some("payload_too_large")));
    assert!(b["error"]["message"].as_str().unwrap_or("").contains("at most 3"));
}

#[tokio::test]
async fn a_request_over_the_timeout_gets_a_504_in_the_ojs_shape() {
    let s = TestServer::start_with(|c| c.request_timeout_ms = 150).await;
    let (st, b) = s
        .post("/ojs/v1/workers/fetch", json!({"queues": ["empty"], "wait_ms": 2000}))
        .await;
    assert_eq!(
        (st, b["error"]["code"].as_str(), b["error"]["retryable"].as_bool()),
        (504, Some("timeout"), Some(true))
    );
    assert_eq!(
        s.post("/ojs/v1/workers/fetch", json!({"queues": ["empty"]})).await.0,
        200
    );
}

#[tokio::test]
async fn the_invariant_checker_sees_a_job_missing_from_its_index() {
    let s = TestServer::start().await;
    let id = s
        .enqueue(json!({"type": "a", "args": [], "options": {"queue": "chk"}}))
        .await;
    s.assert_invariants().await;
    // Break one invariant behind the server's back: the available job leaves its ready set.
    let mut r = s.redis().await;
    let member = ojs_testkit::job_fields(&mut r, &[s.keys().job(&id)], &["member"]).await[0][0]
        .clone()
        .expect("member");
    let _: i64 = redis::cmd("ZREM")
        .arg(s.keys().queue_ready("chk"))
        .arg(&member)
        .query_async(&mut r)
        .await
        .expect("ZREM");
    let problems = ojs_testkit::check_invariants(&s.redis_url, &s.namespace).await;
    assert!(
        problems.iter().any(|p| p.contains(&id)),
        "the checker missed it: {problems:?}"
    );
}
