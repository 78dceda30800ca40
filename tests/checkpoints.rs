//! Checkpoints (the durable-execution extension): saved, read, deleted in the three shapes the
//! extension, its conformance suite and the official SDKs use; handed to the next attempt at FETCH;
//! fenced against a worker whose lease lapsed; bounded; gone with their job.

use std::time::Duration;

use ojs_testkit::TestServer;
use redis::AsyncCommands;
use serde_json::{json, Value};

fn job(queue: &str) -> Value {
    json!({"type": "durable.work", "args": [1], "options": {"queue": queue,
        "retry": {"max_attempts": 3, "initial_interval": "PT0.05S", "jitter": false}}})
}

async fn fetch_one(s: &TestServer, queue: &str, worker: &str) -> Value {
    let (st, b) = s
        .post(
            "/ojs/v1/workers/fetch",
            json!({"queues": [queue], "worker_id": worker, "visibility_timeout_ms": 60000}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    b["jobs"][0].clone()
}

#[tokio::test]
async fn a_checkpoint_is_saved_read_replaced_and_deleted_and_its_sequence_counts_the_saves() {
    let s = TestServer::start().await;
    let id = s.enqueue(job("cp-basic")).await;
    let path = format!("/ojs/v1/jobs/{id}/checkpoint");
    assert_eq!(s.get(&path).await.0, 404, "no checkpoint yet");

    let (st, b) = s
        .put(&path, json!({"state": {"n": 1, "big": 9007199254740993_u64}}))
        .await;
    assert_eq!((st, &b["checkpoint"]["sequence"]), (200, &json!(1)), "{b}");
    assert_eq!(b["checkpoint"]["job_id"], id.as_str());
    let (st, b) = s.post(&path, json!({"state": {"only": "this"}})).await;
    assert_eq!((st, &b["checkpoint"]["sequence"]), (200, &json!(2)), "{b}");
    let (st, b) = s.get(&path).await;
    assert_eq!(st, 200, "{b}");
    // Replaced, not merged; and the state comes back as sent.
    assert_eq!(
        (&b["job_id"], &b["state"], &b["sequence"]),
        (&json!(id), &json!({"only": "this"}), &json!(2)),
        "{b}"
    );
    assert!(b["created_at"].as_str().is_some_and(|t| t.ends_with('Z')), "{b}");
    // The extension's wrapped shape, on the SDKs' path.
    let (st, w) = s.get(&format!("/ojs/v1/checkpoints/{id}")).await;
    assert_eq!((st, &w["checkpoint"]["state"]), (200, &json!({"only": "this"})), "{w}");

    // null and an empty object are states too; a missing state is not.
    assert_eq!(s.put(&path, json!({"state": null})).await.0, 200);
    assert_eq!(s.get(&path).await.1["state"], Value::Null);
    let (st, b) = s.put(&path, json!({"progress": 1})).await;
    assert_eq!((st, &b["error"]["code"]), (400, &json!("invalid_request")), "{b}");

    let (st, b) = s.delete(&path).await;
    assert_eq!((st, &b["deleted"]), (200, &json!(true)), "{b}");
    let (st, b) = s.delete(&path).await;
    assert_eq!((st, &b["deleted"]), (200, &json!(false)), "idempotent: {b}");
    assert_eq!(s.get(&path).await.0, 404);
    // After a delete the sequence starts again (the suite's checkpoint-rapid-save-delete-save).
    assert_eq!(s.put(&path, json!({"state": {}})).await.1["checkpoint"]["sequence"], 1);
    s.assert_invariants().await;
}

#[tokio::test]
async fn the_next_attempt_gets_the_checkpoint_at_fetch_and_a_fresh_job_gets_none() {
    let s = TestServer::start().await;
    let id = s.enqueue(job("cp-resume")).await;
    let first = fetch_one(&s, "cp-resume", "w1").await;
    assert_eq!(first["id"], id.as_str());
    assert!(first.get("checkpoint").is_none(), "a first attempt has none: {first}");
    let path = format!("/ojs/v1/jobs/{id}/checkpoint");
    let (st, b) = s
        .put(
            &path,
            json!({"state": {"cursor": "abc-750"}, "attempt": 1, "worker_id": "w1"}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    let (st, b) = s
        .post(
            "/ojs/v1/workers/nack",
            json!({"job_id": id, "worker_id": "w1", "error": {"code": "x", "message": "lost", "retryable": true}}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    s.wait_state(&id, "available", Duration::from_secs(10)).await;
    let second = fetch_one(&s, "cp-resume", "w2").await;
    assert_eq!((&second["id"], &second["attempt"]), (&json!(id), &json!(2)), "{second}");
    assert_eq!(
        (&second["checkpoint"]["state"], &second["checkpoint"]["sequence"]),
        (&json!({"cursor": "abc-750"}), &json!(1)),
        "{second}"
    );
    // GET /jobs/{id} does not carry it (a listing of 1,000 jobs would carry 1,000 checkpoints).
    assert!(s.get(&format!("/ojs/v1/jobs/{id}")).await.1["job"]
        .get("checkpoint")
        .is_none());
    // A job that never saved one gets none.
    s.enqueue(job("cp-resume")).await;
    assert!(fetch_one(&s, "cp-resume", "w3").await.get("checkpoint").is_none());
    s.assert_invariants().await;
}

#[tokio::test]
async fn a_worker_whose_lease_lapsed_cannot_overwrite_the_next_holders_checkpoint() {
    let s = TestServer::start().await;
    let id = s.enqueue(job("cp-fence")).await;
    let (_, f) = s
        .post(
            "/ojs/v1/workers/fetch",
            json!({"queues": ["cp-fence"], "worker_id": "slow", "visibility_timeout_ms": 200}),
        )
        .await;
    let slow = f["jobs"][0].clone();
    assert_eq!(slow["id"], id.as_str(), "{f}");
    // Its lease lapses; the job is claimed again by another worker, who saves.
    s.wait_state(&id, "available", Duration::from_secs(10)).await;
    let fast = fetch_one(&s, "cp-fence", "fast").await;
    assert_eq!(fast["attempt"], 2, "{fast}");
    let path = format!("/ojs/v1/jobs/{id}/checkpoint");
    let mine = json!({"state": {"by": "fast"}, "lease_id": fast["lease_id"], "worker_id": "fast"});
    assert_eq!(s.put(&path, mine).await.0, 200);
    // The slow worker comes back: by lease id, by attempt, by worker id, and as the SDKs fence it
    // (metadata.attempt): each refused, nothing changed.
    for stale in [
        json!({"state": {"by": "slow"}, "lease_id": slow["lease_id"]}),
        json!({"state": {"by": "slow"}, "attempt": 1}),
        json!({"state": {"by": "slow"}, "worker_id": "slow"}),
        json!({"state": {"by": "slow"}, "metadata": {"attempt": "1", "_replay_log": "[]"}}),
    ] {
        let (st, b) = s.post(&format!("/ojs/v1/checkpoints/{id}"), stale.clone()).await;
        assert_eq!((st, &b["error"]["code"]), (409, &json!("lease_lost")), "{stale}: {b}");
    }
    let (_, b) = s.get(&path).await;
    assert_eq!(
        (&b["state"], &b["sequence"]),
        (&json!({"by": "fast"}), &json!(1)),
        "{b}"
    );
    // The holder's own SDK-shaped save goes through.
    let (st, b) = s
        .put(
            &format!("/ojs/v1/checkpoints/{id}"),
            json!({"state": {"by": "fast", "step": 2}, "step_index": 2, "metadata": {"attempt": "2", "_replay_log": "[]"}}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    s.assert_invariants().await;
}

#[tokio::test]
async fn an_ended_job_takes_no_checkpoint_and_a_missing_one_is_a_404() {
    let s = TestServer::start().await;
    let done = s.enqueue(job("cp-ended")).await;
    fetch_one(&s, "cp-ended", "w").await;
    let path = format!("/ojs/v1/jobs/{done}/checkpoint");
    assert_eq!(s.put(&path, json!({"state": {"step": 1}})).await.0, 200);
    assert_eq!(s.ack(&done).await.0, 200);
    let (st, b) = s.put(&path, json!({"state": {"late": true}})).await;
    assert_eq!((st, &b["error"]["code"]), (409, &json!("conflict")), "{b}");
    // The last checkpoint is still there to read, for the job's retention.
    assert_eq!(s.get(&path).await.1["state"], json!({"step": 1}));
    let cancelled = s.enqueue(job("cp-ended")).await;
    assert_eq!(s.delete(&format!("/ojs/v1/jobs/{cancelled}")).await.0, 200);
    let (st, _) = s
        .put(&format!("/ojs/v1/jobs/{cancelled}/checkpoint"), json!({"state": 1}))
        .await;
    assert_eq!(st, 409);
    let nobody = "01965000-0000-7000-8000-000000000000";
    for (st, b) in [
        s.put(&format!("/ojs/v1/jobs/{nobody}/checkpoint"), json!({"state": 1}))
            .await,
        s.get(&format!("/ojs/v1/jobs/{nobody}/checkpoint")).await,
        s.delete(&format!("/ojs/v1/jobs/{nobody}/checkpoint")).await,
        s.get(&format!("/ojs/v1/checkpoints/{nobody}/resume")).await,
        s.get("/ojs/v1/jobs/not-a-job-id/checkpoint").await,
    ] {
        assert_eq!((st, &b["error"]["code"]), (404, &json!("not_found")), "{b}");
    }
    s.assert_invariants().await;
}

#[tokio::test]
async fn state_or_metadata_over_one_mib_is_a_413_and_bad_fields_are_400s() {
    let s = TestServer::start().await;
    let id = s.enqueue(job("cp-big")).await;
    let path = format!("/ojs/v1/jobs/{id}/checkpoint");
    let big = "x".repeat(ojs_core::checkpoint::MAX_STATE_BYTES);
    let (st, b) = s.put(&path, json!({"state": big})).await;
    assert_eq!(
        (st, &b["error"]["code"]),
        (413, &json!("payload_too_large")),
        "{}",
        &b["error"]
    );
    let (st, b) = s
        .put(&path, json!({"state": 1, "metadata": {"_replay_log": big}}))
        .await;
    assert_eq!(st, 413, "{}", &b["error"]);
    assert_eq!(s.get(&path).await.0, 404, "nothing saved");
    // Just under the bound is kept whole.
    let fits = "y".repeat(ojs_core::checkpoint::MAX_STATE_BYTES - 2);
    assert_eq!(s.put(&path, json!({"state": fits})).await.0, 200);
    assert_eq!(s.get(&path).await.1["state"].as_str().map(str::len), Some(fits.len()));
    for bad in [
        json!({"state": 1, "metadata": "text"}),
        json!({"state": 1, "step_index": -1}),
        json!({"state": 1, "step_index": "two"}),
        json!({"state": 1, "attempt": 0}),
        json!([1, 2]),
    ] {
        let (st, b) = s.put(&path, bad.clone()).await;
        assert_eq!(st, 400, "{bad}: {b}");
    }
}

#[tokio::test]
async fn a_checkpoint_leaves_with_its_job() {
    let s = TestServer::start_with(|c| c.retention_secs = 60).await;
    let mut r = s.redis().await;
    let keys = s.keys();
    // Acked: the checkpoint keeps the job's retention.
    let acked = s.enqueue(job("cp-life")).await;
    fetch_one(&s, "cp-life", "w").await;
    s.put(&format!("/ojs/v1/jobs/{acked}/checkpoint"), json!({"state": 1}))
        .await;
    let ttl: i64 = r.pttl(keys.checkpoint(&acked)).await.expect("pttl");
    assert_eq!(ttl, -1, "no expiry while the job runs");
    assert_eq!(s.ack(&acked).await.0, 200);
    let job_ttl: i64 = r.pttl(keys.job(&acked)).await.expect("pttl");
    let cp_ttl: i64 = r.pttl(keys.checkpoint(&acked)).await.expect("pttl");
    assert!(
        job_ttl > 0 && cp_ttl > 0 && (job_ttl - cp_ttl).abs() < 1000,
        "{job_ttl} {cp_ttl}"
    );
    // Dead-lettered, then deleted: the checkpoint goes in the same script.
    let dead = s
        .enqueue(
            json!({"type": "durable.work", "args": [1], "options": {"queue": "cp-life",
            "retry": {"max_attempts": 1, "on_exhaustion": "dead_letter"}}}),
        )
        .await;
    fetch_one(&s, "cp-life", "w").await;
    s.put(&format!("/ojs/v1/jobs/{dead}/checkpoint"), json!({"state": 2}))
        .await;
    let (st, b) = s
        .post(
            "/ojs/v1/workers/nack",
            json!({"job_id": dead, "error": {"message": "boom"}}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    let (st, b) = s.delete(&format!("/ojs/v1/dead-letter/{dead}")).await;
    assert_eq!(st, 200, "{b}");
    let left: bool = r.exists(keys.checkpoint(&dead)).await.expect("exists");
    assert!(!left, "the checkpoint of a deleted job was left behind");
    s.assert_invariants().await;
}

#[tokio::test]
async fn the_sdks_durable_context_saves_resumes_and_completes_on_the_wire() {
    // The bodies of ojs-js-sdk src/durable.ts and ojs-go-sdk durable.go (DurableContext.create,
    // checkpoint, complete), replayed.
    let s = TestServer::start().await;
    let id = s.enqueue(job("cp-sdk")).await;
    let j = fetch_one(&s, "cp-sdk", "w-js").await;
    let resume = format!("/ojs/v1/checkpoints/{id}/resume");
    let (st, b) = s.get(&resume).await;
    assert_eq!((st, &b["has_checkpoint"]), (200, &json!(false)), "{b}");
    let log = r#"[{"seq":0,"type":"call","key":"fetch-data","result":{"rows":3}}]"#;
    let (st, b) = s
        .post(
            &format!("/ojs/v1/checkpoints/{id}"),
            json!({"state": {"fetched": true}, "step_index": 1,
                "metadata": {"_replay_log": log, "attempt": j["attempt"].to_string()}}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    let (_, b) = s.get(&resume).await;
    assert_eq!(
        (
            &b["has_checkpoint"],
            &b["checkpoint"]["metadata"]["_replay_log"],
            &b["checkpoint"]["step_index"]
        ),
        (&json!(true), &json!(log), &json!(1)),
        "{b}"
    );
    // complete(): DELETE, then the ACK.
    assert_eq!(s.delete(&format!("/ojs/v1/checkpoints/{id}")).await.0, 200);
    assert_eq!(s.get(&resume).await.1["has_checkpoint"], false);
    assert_eq!(s.ack(&id).await.0, 200);
    s.assert_invariants().await;
}

#[tokio::test]
async fn a_checkpoint_save_emits_job_checkpointed() {
    let s = TestServer::start().await;
    let id = s.enqueue(job("cp-ev")).await;
    s.put(&format!("/ojs/v1/jobs/{id}/checkpoint"), json!({"state": 1}))
        .await;
    let (_, b) = s.get(&format!("/ojs/v1/events?job_id={id}")).await;
    let ev = b["events"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["type"] == "job.checkpointed").cloned())
        .unwrap_or_default();
    assert_eq!(ev["data"]["sequence"], 1, "{b}");
}

// ---- what the black-box review of checkpoints found (each failed before its fix) ----

#[tokio::test]
async fn the_js_sdks_doubled_prefix_reaches_the_same_checkpoint() {
    // ojs-js-sdk src/durable.ts builds `/ojs/v1/checkpoints/…` and its transport prefixes `/ojs/v1`
    // again: unchanged, the SDK calls these paths (they were 404s, and its durable worker never resumed).
    let s = TestServer::start().await;
    let id = s.enqueue(job("cp-js")).await;
    let j = fetch_one(&s, "cp-js", "w-js").await;
    let base = format!("/ojs/v1/ojs/v1/checkpoints/{id}");
    let (st, b) = s.get(&format!("{base}/resume")).await;
    assert_eq!((st, &b["has_checkpoint"]), (200, &json!(false)), "{b}");
    let (st, b) = s
        .post(
            &base,
            json!({"state": {"n": 1}, "step_index": 1, "metadata": {"_replay_log": "[]", "attempt": j["attempt"].to_string()}}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(
        s.get(&format!("/ojs/v1/jobs/{id}/checkpoint")).await.1["state"],
        json!({"n": 1})
    );
    assert_eq!(s.get(&format!("{base}/resume")).await.1["has_checkpoint"], true);
    assert_eq!(s.delete(&base).await.0, 200);
    assert_eq!(s.get(&format!("/ojs/v1/jobs/{id}/checkpoint")).await.0, 404);
}

#[tokio::test]
async fn a_metadata_attempt_that_names_no_attempt_is_a_400_not_an_unfenced_save() {
    let s = TestServer::start().await;
    let id = s.enqueue(job("cp-meta")).await;
    fetch_one(&s, "cp-meta", "w").await;
    let path = format!("/ojs/v1/checkpoints/{id}");
    for bad in [
        json!(1.0),
        json!("1.0"),
        json!("0"),
        json!("-1"),
        json!("abc"),
        json!(" 1"),
        json!("+1"),
        json!(true),
        json!(""),
        json!(null),
        json!("99999999999999999999"),
    ] {
        let (st, b) = s.post(&path, json!({"state": 1, "metadata": {"attempt": bad}})).await;
        assert_eq!(st, 400, "metadata.attempt {bad}: {b}");
    }
    assert_eq!(s.get(&path).await.0, 404, "nothing saved");
    // The attempt it names is the job's: saved; another: refused.
    assert_eq!(
        s.post(&path, json!({"state": 1, "metadata": {"attempt": "1"}})).await.0,
        200
    );
    assert_eq!(
        s.post(&path, json!({"state": 2, "metadata": {"attempt": "2"}})).await.0,
        409
    );
}

#[tokio::test]
async fn a_delete_naming_a_lost_claim_is_refused_and_deletes_nothing() {
    let s = TestServer::start().await;
    let id = s.enqueue(job("cp-del")).await;
    let j = fetch_one(&s, "cp-del", "holder").await;
    let lease = j["lease_id"].as_str().unwrap_or_default().to_string();
    let path = format!("/ojs/v1/jobs/{id}/checkpoint");
    assert_eq!(s.put(&path, json!({"state": {"mine": true}})).await.0, 200);
    for q in ["lease_id=999", "attempt=7", "worker_id=zombie"] {
        let (st, b) = s.delete(&format!("{path}?{q}")).await;
        assert_eq!((st, &b["error"]["code"]), (409, &json!("lease_lost")), "{q}: {b}");
        let (st, b) = s.delete(&format!("/ojs/v1/checkpoints/{id}?{q}")).await;
        assert_eq!(st, 409, "{q}: {b}");
    }
    assert_eq!(s.get(&path).await.1["state"], json!({"mine": true}));
    assert_eq!(s.delete(&format!("{path}?attempt=x")).await.0, 400);
    let (st, b) = s.delete(&format!("{path}?lease_id={lease}&worker_id=holder")).await;
    assert_eq!((st, &b["deleted"]), (200, &json!(true)), "{b}");
}

#[tokio::test]
async fn a_checkpoint_keeps_its_state_as_written_digit_for_digit() {
    let s = TestServer::start().await;
    let id = s.enqueue(job("cp-exact")).await;
    let state = r#"{"a":18446744073709551616,"b":123456789012345678901234567890,"c":1E2,"d":-0,"e":0.1e-400}"#;
    let r = s
        .http
        .put(s.url(&format!("/ojs/v1/jobs/{id}/checkpoint")))
        .header("Content-Type", "application/json")
        .body(format!(r#"{{"state":{state}}}"#))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 200);
    let text = s
        .http
        .get(s.url(&format!("/ojs/v1/jobs/{id}/checkpoint")))
        .send()
        .await
        .expect("request")
        .text()
        .await
        .expect("body");
    assert!(text.contains(state), "{text}");
    // And so does the job FETCH hands the next attempt.
    let text = s
        .http
        .post(s.url("/ojs/v1/workers/fetch"))
        .json(&json!({"queues": ["cp-exact"]}))
        .send()
        .await
        .expect("request")
        .text()
        .await
        .expect("body");
    assert!(text.contains(state), "{text}");
}

#[tokio::test]
async fn an_ended_jobs_refusal_says_what_was_refused() {
    let s = TestServer::start().await;
    let id = s.enqueue(job("cp-msg")).await;
    assert_eq!(s.delete(&format!("/ojs/v1/jobs/{id}")).await.0, 200);
    let (_, b) = s
        .put(&format!("/ojs/v1/jobs/{id}/checkpoint"), json!({"state": 1}))
        .await;
    assert_eq!(
        b["error"]["message"],
        format!("job {id} is cancelled; a checkpoint save is not allowed in that state"),
        "{b}"
    );
}
