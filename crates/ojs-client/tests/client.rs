//! The worker loop and the `ojs` CLI against a real server and Redis.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ojs_client::{Client, GateKind, JobId, JobState, QueueName, Worker};
use ojs_testkit::TestServer;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_processes_everything_and_stops_gracefully() {
    let s = TestServer::start().await;
    let c = Client::new(&s.base, None);
    for i in 0..40 {
        c.enqueue(&json!({"type": "w.job", "args": [i], "queue": "cw"}))
            .await
            .expect("enqueue");
    }
    let bad = c
        .enqueue(&json!({"type": "w.bad", "args": [], "queue": "cw", "options": {"retry": {"max_attempts": 1}}}))
        .await
        .expect("enqueue");
    let queue = QueueName::parse("cw").expect("a queue name");
    let worker = Arc::new(Worker::new(c.clone(), "w-test", &[queue], 4));
    let seen = Arc::new(AtomicUsize::new(0));
    let (w, s2) = (worker.clone(), seen.clone());
    let run = tokio::spawn(async move {
        w.run(move |job| {
            let seen = s2.clone();
            async move {
                seen.fetch_add(1, Ordering::SeqCst);
                assert_eq!((job.queue.as_str(), job.attempt), ("cw", 1));
                if job.job_type == "w.bad" {
                    Err(json!({"type": "Boom", "message": "always fails"}))
                } else {
                    Ok(Some(json!({"ok": true})))
                }
            }
        })
        .await
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while seen.load(Ordering::SeqCst) < 41 {
        assert!(std::time::Instant::now() < deadline, "worker too slow");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worker.stop();
    let (acked, nacked) = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("stops")
        .expect("join");
    assert_eq!((acked, nacked), (40, 1));
    assert_eq!(c.job(&bad.id).await.expect("job").state, JobState::Discarded);
    s.assert_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_enqueues_shows_and_lists() {
    let s = TestServer::start().await;
    let bin = env!("CARGO_BIN_EXE_ojs");
    let base = s.base.clone();
    let out = tokio::task::spawn_blocking(move || {
        let run = |args: &[&str]| {
            let o = std::process::Command::new(bin)
                .arg("--url")
                .arg(&base)
                .args(args)
                .output()
                .expect("run ojs");
            assert!(
                o.status.success(),
                "ojs {args:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            String::from_utf8_lossy(&o.stdout).to_string()
        };
        let created = run(&[
            "enqueue",
            "report.build",
            "--args",
            "[1,2]",
            "--queue",
            "cli",
            "--priority",
            "1",
        ]);
        let job: serde_json::Value = serde_json::from_str(&created).expect("json");
        let id = job["id"].as_str().unwrap_or_default().to_string();
        let shown = run(&["job", &id]);
        let stats = run(&["stats"]);
        (job, shown, stats, id)
    })
    .await
    .expect("cli");
    // `ojs job explain` names what holds the job back: here its queue, paused.
    let (st, b) = s.post("/ojs/v1/queues/cli/pause", json!({})).await;
    assert_eq!(st, 200, "{b}");
    let (base, id) = (s.base.clone(), out.3.clone());
    let explained = tokio::task::spawn_blocking(move || {
        let o = std::process::Command::new(bin)
            .args(["--url", &base, "job", "explain", &id])
            .output()
            .expect("run ojs");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).to_string()
    })
    .await
    .expect("cli");
    assert!(
        explained.lines().any(|l| l.contains("paused")),
        "ojs job explain should name the paused queue:\n{explained}"
    );
    // The library reads the same answer typed (ojs-core's JobExplanation, the server's own type).
    let e = Client::new(&s.base, None)
        .explain(&JobId::parse(&out.3).expect("id"))
        .await
        .expect("explain");
    assert_eq!((e.state, e.waiting), (JobState::Available, true));
    assert_eq!(
        e.gates.iter().map(|g| g.gate).collect::<Vec<_>>(),
        [GateKind::Paused],
        "{e:?}"
    );
    assert_eq!(e.runnable_at_ms, None, "a pause has no known end");
    assert_eq!(out.0["priority"], 1);
    assert!(out.1.contains("report.build"), "{}", out.1);
    assert!(
        out.2.lines().any(|l| l.starts_with("cli ") && l.contains(" 1 ")),
        "{}",
        out.2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_lost_its_lease_stops_the_job_and_reports_nothing() {
    // Leases of 400 ms and heartbeats every 1.5 s: the lease lapses between two heartbeats, the
    // reaper takes the job back, and another worker claims it.
    let s = TestServer::start_with(|c| c.visibility_timeout_ms = 400).await;
    let c = Client::new(&s.base, None);
    let job = c
        .enqueue(&json!({"type": "slow", "args": [], "queue": "lost"}))
        .await
        .expect("enqueue");
    assert_eq!((job.state, job.queue.as_str()), (JobState::Available, "lost"));
    let id: JobId = job.id;
    let queue = QueueName::parse("lost").expect("a queue name");
    let worker = Arc::new(Worker::new(c.clone(), "w-slow", &[queue], 1).heartbeat_every(Duration::from_millis(1500)));
    let started = Arc::new(AtomicUsize::new(0));
    let (w, st) = (worker.clone(), started.clone());
    let run = tokio::spawn(async move {
        w.run(move |_| {
            let st = st.clone();
            async move {
                st.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(30)).await;
                Ok(Some(json!({"by": "w-slow"})))
            }
        })
        .await
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while started.load(Ordering::SeqCst) == 0 {
        assert!(std::time::Instant::now() < deadline, "the worker never started the job");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let other = loop {
        // A long lease for this claim, so the job stays with w-other.
        let got = c
            .post(
                "/ojs/v1/workers/fetch",
                &json!({"queues": ["lost"], "worker_id": "w-other", "visibility_timeout_ms": 30_000}),
            )
            .await
            .expect("fetch");
        if let Some(j) = got["jobs"].as_array().and_then(|a| a.first()).cloned() {
            break j;
        }
        assert!(std::time::Instant::now() < deadline, "the lapsed job never came back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(other["id"], id.as_str());
    assert_eq!(other["attempt"], 2);
    // w-slow's next heartbeat learns the lease is lost and drops the job; stopping it then returns
    // at once (it is not waiting 30 s for the handler) and it acked and nacked nothing.
    tokio::time::sleep(Duration::from_millis(1800)).await;
    worker.stop();
    let (acked, nacked) = tokio::time::timeout(Duration::from_secs(3), run)
        .await
        .expect("the lost job was stopped")
        .expect("join");
    assert_eq!((acked, nacked, started.load(Ordering::SeqCst)), (0, 0, 1));
    let held = c.job_json(&id).await.expect("job");
    assert_eq!(
        (held["state"].as_str(), held["worker_id"].as_str()),
        (Some("active"), Some("w-other"))
    );
    assert_eq!(c.job(&id).await.expect("job").state, JobState::Active);
    c.ack(&id, other["lease_id"].as_str(), None)
        .await
        .expect("the current holder acks");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_calls_enqueue_fetch_and_ack_with_core_types() {
    let s = TestServer::start().await;
    let c = Client::new(&s.base, None);
    let made = c
        .enqueue_batch(&[
            json!({"type": "t.one", "args": [1], "queue": "typed", "priority": 0}),
            json!({"type": "t.two", "args": ["x"], "queue": "typed", "priority": 5}),
        ])
        .await
        .expect("batch");
    assert_eq!(made.len(), 2);
    assert!(made
        .iter()
        .all(|j| j.state == JobState::Available && j.queue == "typed"));
    let queue = QueueName::parse("typed").expect("a queue name");
    let got = c.fetch(&[queue], 2, "w-typed", 0).await.expect("fetch");
    // Lower priority runs first (seed model).
    let kinds: Vec<&str> = got.iter().map(|j| j.job_type.as_str()).collect();
    assert_eq!(kinds, ["t.one", "t.two"]);
    let first = &got[0];
    assert_eq!(
        (&first.id, &first.args, first.attempt, first.state),
        (&made[0].id, &json!([1]), 1, JobState::Active)
    );
    assert!(first.lease_id.is_some(), "a fetched job carries its lease");
    c.ack(&first.id, first.lease_id.as_deref(), None).await.expect("ack");
    c.nack(
        &got[1].id,
        got[1].lease_id.as_deref(),
        json!({"type": "Boom", "message": "no", "retryable": false}),
    )
    .await
    .expect("nack");
    assert_eq!(c.job(&first.id).await.expect("job").state, JobState::Completed);
    assert_ne!(c.job(&got[1].id).await.expect("job").state, JobState::Active);
    // An id that is no job's: the server's 404, typed as an API error.
    match c.job(&JobId::generate()).await {
        Err(ojs_client::ClientError::Api { status, .. }) => assert_eq!(status, 404),
        other => panic!("expected a 404, got {other:?}"),
    }
    s.assert_invariants().await;
}
