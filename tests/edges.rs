//! The protocol's edges: lease fencing, every official SDK's heartbeat shape, lanes that always have a
//! way out, and the corner cases of leases, overrides, windows, clocks and aging. Each test here was
//! written against a scenario that the server got wrong, and failed before its fix.

use std::time::{Duration, Instant};

use ojs_testkit::TestServer;
use serde_json::{json, Value};

fn ms(v: &Value) -> i64 {
    ojs_core::clock::parse_ms(v.as_str().unwrap_or("")).unwrap_or(0)
}

async fn fetch_as(s: &TestServer, queue: &str, worker: &str, lease_ms: u64) -> Vec<Value> {
    let (st, b) = s
        .post(
            "/ojs/v1/workers/fetch",
            json!({"queues": [queue], "worker_id": worker, "visibility_timeout_ms": lease_ms}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    b["jobs"].as_array().cloned().unwrap_or_default()
}

/// Fetches until a job comes back (the reaper or a timer has to act first), or panics.
async fn fetch_eventually(s: &TestServer, queue: &str, worker: &str, lease_ms: u64, within: Duration) -> Value {
    let deadline = Instant::now() + within;
    loop {
        if let Some(j) = fetch_as(s, queue, worker, lease_ms).await.into_iter().next() {
            return j;
        }
        assert!(
            Instant::now() < deadline,
            "no job of {queue} became fetchable within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---- 1. lease fencing -------------------------------------------------------------------------------

#[tokio::test]
async fn a_worker_whose_lease_lapsed_cannot_finish_or_fail_the_job() {
    let s = TestServer::start().await;
    let id = s.enqueue(json!({"type": "t", "args": [], "queue": "fence"})).await;
    let w1 = fetch_as(&s, "fence", "w1", 300).await.remove(0);
    let lease1 = w1["lease_id"].as_str().expect("FETCH returns a lease_id").to_string();
    // W1 stalls; the lease lapses and the reaper hands the job to W2 (attempt 2).
    let w2 = fetch_eventually(&s, "fence", "w2", 30_000, Duration::from_secs(5)).await;
    assert_eq!(
        (w2["id"].as_str(), w2["attempt"].as_i64()),
        (Some(id.as_str()), Some(2))
    );
    let lease2 = w2["lease_id"].as_str().expect("lease_id").to_string();
    assert_ne!(lease1, lease2, "every claim gets a new lease");

    // W1 comes back: with its lease, with attempt + worker_id, with worker_id alone: all refused.
    for body in [
        json!({"job_id": id, "lease_id": lease1, "result": {"by": "w1"}}),
        json!({"job_id": id, "attempt": 1, "worker_id": "w1", "result": {"by": "w1"}}),
        json!({"job_id": id, "worker_id": "w1", "result": {"by": "w1"}}),
    ] {
        let (st, b) = s.post("/ojs/v1/workers/ack", body.clone()).await;
        assert_eq!(
            (st, b["error"]["code"].as_str()),
            (409, Some("lease_lost")),
            "{body} -> {b}"
        );
    }
    let (st, b) = s
        .post(
            "/ojs/v1/workers/nack",
            json!({"job_id": id, "lease_id": lease1, "error": {"message": "w1 gave up"}}),
        )
        .await;
    assert_eq!((st, b["error"]["code"].as_str()), (409, Some("lease_lost")), "{b}");
    let (_, hb) = s
        .post(
            "/ojs/v1/workers/heartbeat",
            json!({"worker_id": "w1", "active_jobs": [{"job_id": id, "lease_id": lease1}]}),
        )
        .await;
    assert_eq!(hb["lost_jobs"], json!([id]), "the heartbeat tells W1 to stop: {hb}");

    // Nothing changed: W2 still holds the job and finishes it with its own result.
    let job = s.wait_state(&id, "active", Duration::from_secs(1)).await;
    assert_eq!(job["worker_id"], "w2");
    let (st, b) = s
        .post(
            "/ojs/v1/workers/ack",
            json!({"job_id": id, "lease_id": lease2, "result": {"by": "w2"}}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    let job = s.wait_state(&id, "completed", Duration::from_secs(1)).await;
    assert_eq!(job["result"], json!({"by": "w2"}));
    s.assert_invariants().await;
}

#[tokio::test]
async fn a_requeue_gives_the_attempt_back_but_never_the_lease() {
    let s = TestServer::start().await;
    let id = s.enqueue(json!({"type": "t", "args": [], "queue": "fence2"})).await;
    let first = fetch_as(&s, "fence2", "w1", 30_000).await.remove(0);
    let (st, _) = s
        .post(
            "/ojs/v1/workers/nack",
            json!({"job_id": id, "lease_id": first["lease_id"], "requeue": true, "error": {"message": "shutdown"}}),
        )
        .await;
    assert_eq!(st, 200);
    let second = fetch_as(&s, "fence2", "w2", 30_000).await.remove(0);
    assert_eq!(first["attempt"], second["attempt"], "requeue gives the attempt back");
    assert_ne!(first["lease_id"], second["lease_id"], "but never the lease");
    let (st, b) = s
        .post(
            "/ojs/v1/workers/ack",
            json!({"job_id": id, "lease_id": first["lease_id"]}),
        )
        .await;
    assert_eq!((st, b["error"]["code"].as_str()), (409, Some("lease_lost")), "{b}");
    // A request naming no lease at all (what the official SDKs send) acts on the current holder.
    let (st, b) = s.post("/ojs/v1/workers/ack", json!({"job_id": id})).await;
    assert_eq!(st, 200, "{b}");
    s.assert_invariants().await;
}

#[tokio::test]
async fn a_lapsed_lease_holder_cannot_release_a_limited_slot_twice() {
    // W1's late ACK used to complete the job under W2 and free W2's slot: a concurrency-1 key then
    // ran two jobs at once.
    let s = TestServer::start().await;
    let job = json!({"type": "t", "args": [], "queue": "fence3", "rate_limit": {"key": "fence-key", "concurrency": 1}});
    let a = s.enqueue(job.clone()).await;
    let w1 = fetch_as(&s, "fence3", "w1", 300).await.remove(0);
    assert_eq!(w1["id"], a.as_str());
    let w2 = fetch_eventually(&s, "fence3", "w2", 30_000, Duration::from_secs(5)).await;
    assert_eq!(w2["id"], a.as_str());
    let b = s.enqueue(job).await;
    let (st, _) = s
        .post("/ojs/v1/workers/ack", json!({"job_id": a, "lease_id": w1["lease_id"]}))
        .await;
    assert_eq!(st, 409);
    assert!(
        fetch_as(&s, "fence3", "w3", 30_000).await.is_empty(),
        "W2 still holds the only slot, so B must wait"
    );
    let (st, _) = s
        .post("/ojs/v1/workers/ack", json!({"job_id": a, "lease_id": w2["lease_id"]}))
        .await;
    assert_eq!(st, 200);
    assert_eq!(fetch_as(&s, "fence3", "w3", 30_000).await[0]["id"], b.as_str());
    s.assert_invariants().await;
}

// ---- 2. heartbeats of every official SDK ------------------------------------------------------------

#[tokio::test]
async fn every_official_sdk_heartbeat_shape_extends_the_lease() {
    let s = TestServer::start().await;
    let shapes: Vec<(&str, Box<dyn Fn(&str) -> Value>)> = vec![
        // JavaScript SDK 0.4 (src/worker.ts sendHeartbeat), and Go's count-plus-ids: its whole body.
        (
            "js",
            Box::new(|id: &str| {
                json!({"worker_id": "w-js", "state": "running", "active_jobs": 1, "active_job_ids": [id],
                    "hostname": "unknown", "pid": 4242, "queues": ["hb-js"], "concurrency": 10, "labels": []})
            }),
        ),
        // Ruby SDK (lib/ojs/worker.rb send_heartbeat): job_ids only, no worker_id.
        ("ruby", Box::new(|id: &str| json!({"job_ids": [id]}))),
        // Python and Rust SDKs: active_jobs as ids (Rust also sends visibility_timeout_ms: null).
        (
            "py",
            Box::new(|id: &str| json!({"worker_id": "w-py", "active_jobs": [id], "visibility_timeout_ms": null})),
        ),
    ];
    for (name, body) in shapes {
        let queue = format!("hb-{name}");
        let id = s.enqueue(json!({"type": "t", "args": [], "queue": queue})).await;
        let worker = if name == "ruby" {
            ""
        } else if name == "js" {
            "w-js"
        } else {
            "w-py"
        };
        let job = fetch_as(&s, &queue, worker, 800).await.remove(0);
        let first_deadline = ms(&job["visibility_deadline"]);
        // A 2.4 s job under a 0.8 s lease, kept alive by 0.2 s heartbeats: it must run once.
        let until = Instant::now() + Duration::from_millis(2400);
        while Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let (st, b) = s.post("/ojs/v1/workers/heartbeat", body(&id)).await;
            assert_eq!(st, 200, "{name}: {b}");
            assert_eq!(b["jobs"][0]["extended"], true, "{name}: {b}");
        }
        let (st, b) = s.post("/ojs/v1/workers/ack", json!({"job_id": id})).await;
        assert_eq!(st, 200, "{name}: the job kept its lease: {b}");
        let done = s.wait_state(&id, "completed", Duration::from_secs(1)).await;
        assert_eq!(done["attempt"], 1, "{name}: ran exactly once");
        assert!(first_deadline > 0);
    }
    // Bodies no SDK sends are still refused with a clear message.
    let (st, b) = s.post("/ojs/v1/workers/heartbeat", json!({"active_jobs": "x"})).await;
    assert_eq!(st, 400, "{b}");
    assert!(
        b["error"]["message"].as_str().unwrap_or("").contains("active_jobs"),
        "{b}"
    );
}

#[tokio::test]
async fn a_heartbeat_extends_by_the_lease_chosen_at_fetch() {
    let s = TestServer::start().await; // server default lease: 30 s
    let id = s.enqueue(json!({"type": "t", "args": [], "queue": "hb-len"})).await;
    fetch_as(&s, "hb-len", "w", 5_000).await;
    let (_, b) = s
        .post(
            "/ojs/v1/workers/heartbeat",
            json!({"worker_id": "w", "active_jobs": [id]}),
        )
        .await;
    let lease = ms(&b["jobs"][0]["visibility_deadline"]) - ms(&b["server_time"]);
    assert!(
        (4_000..=5_000).contains(&lease),
        "extended by the 5 s asked at FETCH, not 30 s: {b}"
    );
    let (_, b) = s
        .post(
            "/ojs/v1/workers/heartbeat",
            json!({"worker_id": "w", "active_jobs": [id], "visibility_timeout_ms": 20_000}),
        )
        .await;
    let lease = ms(&b["jobs"][0]["visibility_deadline"]) - ms(&b["server_time"]);
    assert!(
        (19_000..=20_000).contains(&lease),
        "unless the heartbeat asks for another: {b}"
    );
}

#[tokio::test]
async fn a_heartbeat_never_revives_a_lapsed_lease() {
    // A long tick keeps the reaper away, so the job is still `active` with a lapsed lease.
    let s = TestServer::start_with(|c| c.tick_ms = 60_000).await;
    let id = s
        .enqueue(
            json!({"type": "t", "args": [], "queue": "hb-late", "rate_limit": {"key": "late-key", "concurrency": 1}}),
        )
        .await;
    let other = s
        .enqueue(
            json!({"type": "t", "args": [], "queue": "hb-late", "rate_limit": {"key": "late-key", "concurrency": 1}}),
        )
        .await;
    fetch_as(&s, "hb-late", "w", 200).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (_, b) = s
        .post(
            "/ojs/v1/workers/heartbeat",
            json!({"worker_id": "w", "active_jobs": [id]}),
        )
        .await;
    assert_eq!(b["jobs"][0]["extended"], false, "{b}");
    assert_eq!(b["lost_jobs"], json!([id]), "{b}");
    // The slot lapsed with the lease, so the next job of the key may start.
    let next = fetch_as(&s, "hb-late", "w2", 30_000).await;
    assert_eq!(next[0]["id"], other.as_str());
}

#[tokio::test]
async fn a_progress_report_is_fenced_by_the_worker_as_a_heartbeat_is() {
    let s = TestServer::start().await;
    let id = s.enqueue(json!({"type": "t", "args": [], "queue": "prg-fence"})).await;
    let job = fetch_as(&s, "prg-fence", "w1", 30_000).await.remove(0);
    let deadline = ms(&job["visibility_deadline"]);
    // Another worker, naming itself but no lease: refused by both, and nothing moves.
    let (_, hb) = s
        .post(
            "/ojs/v1/workers/heartbeat",
            json!({"worker_id": "w2", "active_jobs": [id]}),
        )
        .await;
    assert_eq!(hb["jobs"][0]["extended"], false, "{hb}");
    let (st, b) = s
        .put(
            &format!("/ojs/v1/jobs/{id}/progress"),
            json!({"progress": 0.9, "worker_id": "w2"}),
        )
        .await;
    assert_eq!((st, b["error"]["code"].as_str()), (409, Some("lease_lost")), "{b}");
    let (st, b) = s
        .post(
            "/ojs/v1/workers/progress",
            json!({"job_id": id, "percentage": 90, "worker_id": "w2"}),
        )
        .await;
    assert_eq!((st, b["error"]["code"].as_str()), (409, Some("lease_lost")), "{b}");
    let (_, g) = s.get(&format!("/ojs/v1/jobs/{id}/progress")).await;
    assert_eq!(g["progress"], Value::Null, "{g}");
    let (_, j) = s.get(&format!("/ojs/v1/jobs/{id}")).await;
    assert!(ms(&j["job"]["visibility_deadline"]) <= deadline, "not extended: {j}");
    // The holder, by name, is heard; so is a report naming no one, as every official SDK sends it (and
    // the progress conformance suite: fetch as a worker, report with the job id alone).
    for body in [json!({"progress": 0.25, "worker_id": "w1"}), json!({"progress": 0.5})] {
        let (st, b) = s.put(&format!("/ojs/v1/jobs/{id}/progress"), body.clone()).await;
        assert_eq!((st, b["accepted"].as_bool()), (200, Some(true)), "{body} -> {b}");
    }
    s.assert_invariants().await;
}

// ---- 3. no lane without a way out ---------------------------------------------------------------------

#[tokio::test]
async fn a_key_paused_by_a_dropped_job_runs_a_later_job_of_the_key() {
    let s = TestServer::start().await;
    let dropped = s
        .enqueue(json!({"type": "t", "args": [], "queue": "lane1",
            "rate_limit": {"key": "lane1-key", "concurrency": 0, "on_limit": "drop"}}))
        .await;
    assert!(s.fetch(&["lane1"], 1).await.is_empty());
    s.wait_state(&dropped, "discarded", Duration::from_secs(1)).await;
    let later = s
        .enqueue(json!({"type": "t", "args": [], "queue": "lane1",
            "rate_limit": {"key": "lane1-key", "concurrency": 5}}))
        .await;
    let got = s.fetch(&["lane1"], 1).await;
    assert_eq!(got.first().map(|j| j["id"].clone()), Some(json!(later)));
    s.assert_invariants().await;
}

#[tokio::test]
async fn cancelling_a_pausing_job_does_not_strand_the_keys_later_jobs() {
    let s = TestServer::start().await;
    let pausing = s
        .enqueue(json!({"type": "t", "args": [], "queue": "lane2",
            "rate_limit": {"key": "lane2-key", "concurrency": 0}}))
        .await;
    assert!(s.fetch(&["lane2"], 1).await.is_empty(), "parked");
    let later = s
        .enqueue(json!({"type": "t", "args": [], "queue": "lane2",
            "rate_limit": {"key": "lane2-key", "concurrency": 5}}))
        .await;
    let (st, _) = s.delete(&format!("/ojs/v1/jobs/{pausing}")).await;
    assert_eq!(st, 200);
    let got = s.fetch(&["lane2"], 1).await;
    assert_eq!(got.first().map(|j| j["id"].clone()), Some(json!(later)));
    s.assert_invariants().await;
}

#[tokio::test]
async fn the_newest_policy_of_a_key_is_the_limit_fetch_applies_and_inspection_shows() {
    let s = TestServer::start().await;
    for conc in [3, 3, 1] {
        s.enqueue(json!({"type": "t", "args": [], "queue": "mixed",
            "rate_limit": {"key": "mixed-key", "concurrency": conc}}))
            .await;
    }
    let (_, shown) = s.get("/ojs/v1/rate-limits/mixed-key").await;
    assert_eq!(shown["concurrency"]["limit"], 1, "{shown}");
    let started = s.fetch(&["mixed"], 3).await.len();
    assert_eq!(started, 1, "FETCH applies the limit inspection shows");
    s.assert_invariants().await;
}

// ---- 4. overrides, windows, clocks, bounds, aging -------------------------------------------------------

#[tokio::test]
async fn an_expired_rate_override_does_not_keep_the_lane_parked() {
    let s = TestServer::start().await;
    let job = json!({"type": "t", "args": [], "queue": "ovr1",
        "rate_limit": {"key": "ovr1-key", "rate": {"limit": 100, "period": "PT1S"}}});
    s.enqueue(job.clone()).await;
    let second = s.enqueue(job).await;
    let expires = ojs_core::clock::format_ms(ojs_core::clock::local_now_ms() + 800);
    let (st, b) = s
        .put(
            "/ojs/v1/rate-limits/ovr1-key",
            json!({"rate": {"limit": 1, "period": "PT1H"}, "expires_at": expires}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(s.fetch(&["ovr1"], 1).await.len(), 1);
    assert!(s.fetch(&["ovr1"], 1).await.is_empty(), "the override's window is full");
    let got = fetch_eventually(&s, "ovr1", "w", 30_000, Duration::from_secs(5)).await;
    assert_eq!(
        got["id"],
        second.as_str(),
        "runs once the override expired, not an hour later"
    );
    s.assert_invariants().await;
}

#[tokio::test]
async fn lifting_a_throttle_override_forgets_its_spacing() {
    let s = TestServer::start().await;
    let job = json!({"type": "t", "args": [], "queue": "ovr2",
        "rate_limit": {"key": "ovr2-key", "throttle": {"limit": 100, "period": "PT1S"}}});
    s.enqueue(job.clone()).await;
    let second = s.enqueue(job).await;
    let (st, _) = s
        .put(
            "/ojs/v1/rate-limits/ovr2-key",
            json!({"throttle": {"limit": 1, "period": "PT1H"}}),
        )
        .await;
    assert_eq!(st, 200);
    assert_eq!(s.fetch(&["ovr2"], 1).await.len(), 1);
    assert!(
        s.fetch(&["ovr2"], 1).await.is_empty(),
        "spaced an hour apart while overridden"
    );
    let (st, _) = s.delete("/ojs/v1/rate-limits/ovr2-key").await;
    assert_eq!(st, 200);
    let got = fetch_eventually(&s, "ovr2", "w", 30_000, Duration::from_secs(3)).await;
    assert_eq!(got["id"], second.as_str(), "the jobs' own 10 ms spacing applies again");
}

#[tokio::test]
async fn a_requeued_start_still_counts_in_the_sliding_window() {
    let s = TestServer::start().await;
    let job = json!({"type": "t", "args": [], "queue": "win",
        "rate_limit": {"key": "win-key", "rate": {"limit": 2, "period": "PT1H"}}});
    let a = s.enqueue(job.clone()).await;
    let first = s.fetch(&["win"], 1).await.remove(0);
    assert_eq!(first["id"], a.as_str());
    let (st, _) = s
        .post(
            "/ojs/v1/workers/nack",
            json!({"job_id": a, "requeue": true, "error": {"message": "draining"}}),
        )
        .await;
    assert_eq!(st, 200);
    let again = s.fetch(&["win"], 1).await.remove(0);
    assert_eq!(
        (again["id"].as_str(), again["attempt"].as_i64()),
        (Some(a.as_str()), Some(1))
    );
    s.enqueue(job).await;
    assert!(
        s.fetch(&["win"], 1).await.is_empty(),
        "two starts in the window already (the same attempt number twice): a third must wait"
    );
    let (_, shown) = s.get("/ojs/v1/rate-limits/win-key").await;
    assert_eq!(shown["rate"]["current_count"], 2, "{shown}");
}

#[tokio::test]
async fn a_relative_expiry_is_measured_on_redis_time() {
    let s = TestServer::start().await;
    let id = s
        .enqueue(json!({"type": "t", "args": [], "queue": "rel", "options": {"expires_at": "+PT5S"}}))
        .await;
    let (_, b) = s.get(&format!("/ojs/v1/jobs/{id}")).await;
    assert_eq!(
        ms(&b["job"]["expires_at"]) - ms(&b["job"]["created_at"]),
        5_000,
        "resolved in the script, on the clock that also stamps created_at: {b}"
    );
}

#[tokio::test]
async fn a_delay_or_offset_past_ten_years_is_refused_naming_the_field() {
    // u64::MAX used to wrap in an `as i64`: 201 with a scheduled_at of now.
    let s = TestServer::start().await;
    let ten_years: u64 = 10 * 365 * 86_400_000; // the cap every client-given span has
    for (options, field, code) in [
        (json!({"delay_ms": u64::MAX}), "options.delay_ms", 400),
        (json!({"delay_ms": ten_years + 1}), "options.delay_ms", 400),
        (json!({"scheduled_at": "+P100000000D"}), "options.scheduled_at", 400),
        (json!({"delay_until": "+P100000000D"}), "options.delay_until", 400),
        (json!({"expires_at": "+P100000000D"}), "options.expires_at", 400),
        (json!({"timeout_ms": u64::MAX}), "options.timeout_ms", 400),
        (
            json!({"retry": {"initial_interval": u64::MAX}}),
            "options.retry.initial_interval",
            422,
        ),
        (
            json!({"retry": {"max_interval": "P100000000D"}}),
            "options.retry.max_interval",
            422,
        ),
    ] {
        let body = json!({"type": "t", "args": [], "queue": "far", "options": options});
        let (st, b) = s.post("/ojs/v1/jobs", body.clone()).await;
        let message = b["error"]["message"].as_str().unwrap_or_default();
        assert_eq!(st, code, "{body} -> {b}");
        assert!(
            message.contains(field) && message.contains(&ten_years.to_string()),
            "the message names the field and its maximum: {body} -> {b}"
        );
    }
    // The same refusal for a top-level relative schedule, and inside a batch.
    let (st, b) = s
        .post(
            "/ojs/v1/jobs",
            json!({"type": "t", "args": [], "queue": "far", "scheduled_at": "+P100000000D"}),
        )
        .await;
    assert_eq!(st, 400, "{b}");
    let (st, b) = s
        .post(
            "/ojs/v1/jobs/batch",
            json!({"jobs": [{"type": "t", "args": [], "queue": "far", "options": {"delay_ms": u64::MAX}}]}),
        )
        .await;
    assert_eq!(st, 400, "{b}");
    // Ten years exactly is accepted, and its run time is ten years out.
    let (st, b) = s
        .post(
            "/ojs/v1/jobs",
            json!({"type": "t", "args": [], "queue": "far", "options": {"delay_ms": ten_years}}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    assert_eq!(
        ms(&b["job"]["scheduled_at"]) - ms(&b["job"]["created_at"]),
        ten_years as i64,
        "{b}"
    );
    s.assert_invariants().await;
}

#[tokio::test]
async fn fetch_discards_a_bounded_number_of_expired_jobs_per_call() {
    let s = TestServer::start().await;
    let jobs: Vec<Value> = (0..300)
        .map(|_| json!({"type": "t", "args": [], "queue": "exp", "options": {"expires_at": "+PT0.2S"}}))
        .collect();
    let (st, _) = s.post("/ojs/v1/jobs/batch", json!({ "jobs": jobs })).await;
    assert_eq!(st, 201);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let discarded = || async {
        let (_, stats) = s.get("/ojs/v1/queues/exp/stats").await;
        stats["queue"]["stats"]["discarded"]
            .as_u64()
            .or_else(|| stats["queue"]["discarded"].as_u64())
            .or_else(|| stats["stats"]["discarded"].as_u64())
            .unwrap_or_else(|| panic!("no discarded count in {stats}"))
    };
    // One script call discards at most 100 (and says it stopped short)...
    let (_, reply) = s
        .store()
        .fetch(&[("exp".into(), 1)], ojs_store::Strategy::Strict, "w", 1, None)
        .await
        .expect("fetch");
    assert!(reply.is_empty());
    assert_eq!(
        discarded().await,
        100,
        "one FETCH call discards at most 100 expired jobs"
    );
    // ...and a FETCH request goes on call after call until it has looked at every one.
    assert!(s.fetch(&["exp"], 1).await.is_empty());
    assert_eq!(discarded().await, 300);
    s.assert_invariants().await;
}

#[tokio::test]
async fn turning_aging_off_keeps_fifo_for_jobs_enqueued_while_it_was_on() {
    let s = TestServer::start().await;
    let (st, _) = s
        .put(
            "/ojs/v1/admin/queues/aging-off/priority-aging",
            json!({"interval": "PT1S"}),
        )
        .await;
    assert_eq!(st, 200);
    let older = s
        .enqueue(json!({"type": "t", "args": [], "queue": "aging-off", "priority": 4}))
        .await;
    let (st, _) = s.delete("/ojs/v1/admin/queues/aging-off/priority-aging").await;
    assert_eq!(st, 200);
    let newer = s
        .enqueue(json!({"type": "t", "args": [], "queue": "aging-off", "priority": 4}))
        .await;
    let order: Vec<Value> = s
        .fetch(&["aging-off"], 2)
        .await
        .into_iter()
        .map(|j| j["id"].clone())
        .collect();
    assert_eq!(order, vec![json!(older), json!(newer)]);
    s.assert_invariants().await;
}

#[tokio::test]
async fn changing_the_aging_interval_rescores_waiting_jobs() {
    let s = TestServer::start().await;
    let q = "aging-change";
    let (st, _) = s
        .put(
            &format!("/ojs/v1/admin/queues/{q}/priority-aging"),
            json!({"interval": "PT1H"}),
        )
        .await;
    assert_eq!(st, 200);
    let low = s
        .enqueue(json!({"type": "t", "args": [], "queue": q, "priority": 3}))
        .await;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let high = s
        .enqueue(json!({"type": "t", "args": [], "queue": q, "priority": 2}))
        .await;
    // With a 1 s interval the 2 s older priority-3 job is effectively priority 1: it runs first.
    let (st, _) = s
        .put(
            &format!("/ojs/v1/admin/queues/{q}/priority-aging"),
            json!({"interval": "PT1S"}),
        )
        .await;
    assert_eq!(st, 200);
    let order: Vec<Value> = s.fetch(&[q], 2).await.into_iter().map(|j| j["id"].clone()).collect();
    assert_eq!(order, vec![json!(low), json!(high)]);
    s.assert_invariants().await;
}

#[tokio::test]
async fn an_idle_node_keeps_one_event_stream_connection() {
    let s = TestServer::start().await;
    let name = format!("ojs-events:{}", s.namespace);
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    let mut conn = s.redis().await;
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut conn)
        .await
        .expect("client list");
    let line = clients
        .lines()
        .find(|l| l.contains(&format!("name={name} ")))
        .unwrap_or_else(|| panic!("no client named {name}:\n{clients}"));
    let age: u64 = line
        .split(' ')
        .find_map(|f| f.strip_prefix("age="))
        .and_then(|a| a.parse().ok())
        .unwrap_or(0);
    assert!(age >= 2, "the tail reconnected within the last {age} s: {line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queue_limit_updates_are_atomic_with_fetch() {
    // Rewriting a queue's concurrency limit to the same value while fetchers race must never let a
    // FETCH see the queue without its limit.
    let s = std::sync::Arc::new(TestServer::start().await);
    let q = "qlimit-race";
    let (st, _) = s
        .put(
            &format!("/ojs/v1/admin/queues/{q}/rate-limit"),
            json!({"concurrency": 1}),
        )
        .await;
    assert_eq!(st, 200);
    let jobs: Vec<Value> = (0..400).map(|_| json!({"type": "t", "args": [], "queue": q})).collect();
    s.post("/ojs/v1/jobs/batch", json!({ "jobs": jobs })).await;
    let writer = {
        let s = s.clone();
        tokio::spawn(async move {
            for _ in 0..300 {
                s.put(
                    &format!("/ojs/v1/admin/queues/{q}/rate-limit"),
                    json!({"concurrency": 1}),
                )
                .await;
            }
        })
    };
    let mut fetchers = Vec::new();
    for w in 0..4 {
        let s = s.clone();
        fetchers.push(tokio::spawn(async move {
            let mut held = 0usize;
            for _ in 0..150 {
                let got = fetch_as(&s, q, &format!("w{w}"), 30_000).await;
                held += got.len();
            }
            held
        }));
    }
    writer.await.expect("writer");
    let mut total = 0;
    for f in fetchers {
        total += f.await.expect("fetcher");
    }
    assert_eq!(
        total, 1,
        "nobody acked, so exactly one job may be active under concurrency 1"
    );
}

#[tokio::test]
async fn the_timer_measures_the_next_due_job_on_redis_time() {
    // promote answers how far away the next due job is by Redis' clock, so a pod whose own clock is off
    // sleeps exactly as long as one whose clock is right (it used to subtract its own clock from
    // Redis' deadline).
    let s = TestServer::start_with(|c| c.tick_ms = 60_000).await;
    s.enqueue(json!({"type": "t", "args": [], "queue": "timer", "options": {"scheduled_at": "+PT5S"}}))
        .await;
    let store = s.store();
    let (moved, due_in) = store.promote(10).await.expect("promote");
    assert_eq!(moved, 0);
    let due_in = due_in.expect("a job is due");
    assert!((4_000..=5_000).contains(&due_in), "due in {due_in} ms by Redis' clock");
}

// ---- backpressure (rate-limiting seed §13.1, ojs-backpressure) -----------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bounded_queue_never_passes_its_depth_even_under_racing_producers() {
    let s = std::sync::Arc::new(TestServer::start().await);
    let q = "bp-race";
    let (st, b) = s
        .put(
            &format!("/ojs/v1/admin/queues/{q}/config"),
            json!({"backpressure": {"max_depth": 25, "strategy": "reject", "warning_threshold": 0.8}}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    // 8 producers race 10 single enqueues each (coalesced into shared script calls) plus a batch.
    let mut tasks = Vec::new();
    for p in 0..8 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let mut codes = Vec::new();
            for i in 0..10 {
                let r = s
                    .http
                    .post(s.url("/ojs/v1/jobs"))
                    .json(&json!({"type": "t", "args": [p, i], "queue": q}))
                    .send()
                    .await
                    .expect("request");
                let h = |n: &str| r.headers().get(n).and_then(|v| v.to_str().ok()).map(str::to_owned);
                let (depth, bound, pressure, retry) = (
                    h("x-ojs-queue-depth"),
                    h("x-ojs-queue-bound"),
                    h("x-ojs-queue-pressure"),
                    h("retry-after"),
                );
                let status = r.status().as_u16();
                let body: Value = r.json().await.unwrap_or_default();
                if status == 429 {
                    assert_eq!(body["error"]["code"], "QUEUE_FULL", "{body}");
                    assert!(retry.is_some() && depth.is_some() && bound.as_deref() == Some("25"));
                } else {
                    assert_eq!(status, 201, "{body}");
                    // Warning headers exactly when the queue is at least 80% full.
                    let d: u64 = depth.as_deref().and_then(|d| d.parse().ok()).unwrap_or(0);
                    assert_eq!(pressure.is_some(), d >= 20, "depth {d}: {pressure:?}");
                }
                codes.push(status);
            }
            codes
        }));
    }
    let mut accepted = 0;
    for t in tasks {
        accepted += t.await.expect("producer").iter().filter(|c| **c == 201).count();
    }
    assert_eq!(accepted, 25, "exactly the bound is accepted");
    // A batch is all or nothing: no room for even one job, so none is written.
    let (st, b) = s
        .post(
            "/ojs/v1/jobs/batch",
            json!({"jobs": [{"type": "t", "args": [], "queue": q}]}),
        )
        .await;
    assert_eq!((st, b["error"]["code"].as_str()), (429, Some("QUEUE_FULL")), "{b}");
    let (_, stats) = s.get(&format!("/ojs/v1/queues/{q}/stats")).await;
    assert_eq!(
        (stats["stats"]["depth"].as_u64(), stats["stats"]["max_depth"].as_u64()),
        (Some(25), Some(25)),
        "{stats}"
    );
    // Taking jobs out makes room again; scheduled jobs count as depth too.
    s.fetch(&[q], 2).await;
    let (st, _) = s
        .post(
            "/ojs/v1/jobs",
            json!({"type": "t", "args": [], "queue": q, "options": {"delay_ms": 60_000}}),
        )
        .await;
    assert_eq!(st, 201);
    let (st, _) = s
        .post("/ojs/v1/jobs", json!({"type": "t", "args": [], "queue": q}))
        .await;
    assert_eq!(st, 201);
    let (st, _) = s
        .post("/ojs/v1/jobs", json!({"type": "t", "args": [], "queue": q}))
        .await;
    assert_eq!(st, 429);
    let (_, ev) = s.get("/ojs/v1/events?types=backpressure.rejected").await;
    assert!(ev["events"].as_array().is_some_and(|e| !e.is_empty()), "{ev}");
    s.assert_invariants().await;
}

#[tokio::test]
async fn a_blocking_queue_holds_the_producer_until_there_is_room() {
    let s = TestServer::start().await;
    let q = "bp-block";
    let (st, _) = s
        .put(
            &format!("/ojs/v1/admin/queues/{q}/config"),
            json!({"backpressure": {"max_depth": 1, "strategy": "block"}}),
        )
        .await;
    assert_eq!(st, 200);
    s.enqueue(json!({"type": "t", "args": [], "queue": q})).await;
    // Without OJS-Block-Timeout a blocking queue still refuses at once.
    let (st, _) = s
        .post("/ojs/v1/jobs", json!({"type": "t", "args": [], "queue": q}))
        .await;
    assert_eq!(st, 429);
    let waiting = {
        let (http, url) = (s.http.clone(), s.url("/ojs/v1/jobs"));
        tokio::spawn(async move {
            let r = http
                .post(url)
                .header("ojs-block-timeout", "5")
                .json(&json!({"type": "t", "args": [], "queue": q}))
                .send()
                .await
                .expect("request");
            r.status().as_u16()
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "held while the queue is full");
    assert_eq!(s.fetch(&[q], 1).await.len(), 1);
    assert_eq!(
        waiting.await.expect("producer"),
        201,
        "accepted once a job left the queue"
    );
    // Settings the server does not have are refused, not ignored.
    for (body, code) in [
        (
            json!({"backpressure": {"max_depth": 5, "strategy": "drop_oldest"}}),
            422,
        ),
        (json!({"backpressure": {"max_depth": 5, "max_size_bytes": 1024}}), 422),
        (json!({"backpressure": {"max_depth": -1}}), 400),
        (json!({"backpressure": {"max_depth": 5, "warning_threshold": 2}}), 400),
        (json!({"rate_limit": {}}), 400),
    ] {
        let (st, b) = s.put(&format!("/ojs/v1/admin/queues/{q}/config"), body.clone()).await;
        assert_eq!(st, code, "{body} -> {b}");
    }
    let (st, b) = s
        .put(
            &format!("/ojs/v1/admin/queues/{q}/config"),
            json!({"backpressure": null}),
        )
        .await;
    assert_eq!((st, b["backpressure"].is_null()), (200, true), "{b}");
}

// ---- configuration bounds (issue 40, item 3) ----------------------------------------------------------

/// A retention of 10^14 s is 10^17 ms, which Lua writes as `1e+17` and PEXPIRE refuses after the index
/// writes: every ACK answered 500 and lost its job. The binary now refuses it before it connects (the
/// Redis named here does not exist), naming the flag.
#[tokio::test]
async fn an_out_of_range_retention_is_refused_at_start_naming_the_flag() {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ojs-server"))
        .env("OJS_RETENTION_SECS", "100000000000000")
        .env("OJS_REDIS_URL", "redis://127.0.0.1:1")
        .env_remove("OJS_REDIS_CLUSTER")
        .env("OJS_LISTEN", "127.0.0.1:0")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start ojs-server");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ojs-server started with OJS_RETENTION_SECS=100000000000000");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr).expect("stderr");
    assert!(!status.success(), "{status}: {stderr}");
    assert!(
        stderr.contains("--retention-secs") && stderr.contains("0..=3153600000"),
        "{stderr}"
    );
}

/// An embedder's `Config` skips clap: `run` refuses it the same way, before it touches Redis.
#[tokio::test]
async fn run_refuses_an_out_of_range_config_built_in_code() {
    let mut cfg = ojs_server::Config::for_redis("redis://127.0.0.1:1");
    cfg.retention_secs = 100_000_000_000_000;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let run = ojs_server::run(listener, cfg, std::future::pending());
    let err = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("refused at once")
        .expect_err("refused");
    assert!(err.to_string().contains("--retention-secs"), "{err}");
}

/// A refusal quotes the value it refused, in part: a 100 KB job type came back whole in the 400.
#[tokio::test]
async fn a_refused_huge_value_is_not_sent_back_whole() {
    let s = TestServer::start().await;
    let huge = "é".repeat(50_000);
    let (st, b) = s.post("/ojs/v1/jobs", json!({"type": huge, "args": []})).await;
    assert_eq!(st, 400, "{}", &b.to_string()[..200]);
    let m = b["error"]["message"].as_str().unwrap_or("");
    assert!(m.len() < 1100, "the message is {} bytes", m.len());
    assert!(m.ends_with("more bytes)"), "{m}");
}

/// An attempt past any job's max_attempts (a u32), and past 2^53, reached the scripts' argument check:
/// a 500 on NACK, ACK and progress (schemathesis found it). It is a 400 naming the field.
#[tokio::test]
async fn an_attempt_out_of_range_is_a_400() {
    let s = TestServer::start().await;
    let id = s.enqueue(json!({"type": "t", "args": [], "queue": "att"})).await;
    assert_eq!(s.fetch(&["att"], 1).await.len(), 1);
    for (path, body) in [
        (
            "/ojs/v1/workers/nack",
            json!({"job_id": id, "attempt": 922337203685477581_i64, "error": {"message": "x"}}),
        ),
        (
            "/ojs/v1/workers/ack",
            json!({"job_id": id, "attempt": 44256545070920864_i64}),
        ),
        (
            "/ojs/v1/workers/progress",
            json!({"job_id": id, "attempt": 4294967296_i64, "progress": 0.5}),
        ),
    ] {
        let (st, b) = s.post(path, body).await;
        assert_eq!(
            (st, &b["error"]["code"]),
            (400, &json!("invalid_request")),
            "{path}: {b}"
        );
        assert!(b["error"]["message"].as_str().unwrap_or("").contains("attempt"), "{b}");
    }
    s.assert_invariants().await;
}
