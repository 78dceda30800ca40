//! Every core operation through HTTP against a real Redis, each test in its own namespace, each ending
//! with the keyspace invariant checker.

use ojs_testkit::TestServer;
use serde_json::{json, Value};

#[tokio::test]
async fn enqueue_get_and_system_fields() {
    let s = TestServer::start().await;
    let r = s
        .http
        .post(s.url("/ojs/v1/jobs"))
        .header("content-type", "application/openjobspec+json")
        .header("x-request-id", "req-123")
        .body(r#"{"type":"email.send","args":["a@example.com"],"meta":{"trace_id":"t1"},"x_ext":{"n":1}}"#)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 201);
    assert_eq!(r.headers()["ojs-version"], "1.0");
    assert_eq!(r.headers()["x-request-id"], "req-123");
    assert_eq!(r.headers()["content-type"], "application/openjobspec+json");
    let b: serde_json::Value = r.json().await.expect("json");
    let id = b["job"]["id"].as_str().expect("id").to_string();
    assert!(ojs_core::names::check_job_id(&id).is_ok());
    assert_eq!(b["job"]["state"], "available");
    assert_eq!(b["job"]["priority"], 2, "seed default priority");
    assert_eq!(b["job"]["queue"], "default");
    assert_eq!(b["job"]["attempt"], 0);
    assert!(b["job"].get("started_at").is_none());

    let (st, got) = s.get(&format!("/ojs/v1/jobs/{id}")).await;
    assert_eq!(st, 200);
    assert_eq!(got["job"]["meta"]["trace_id"], "t1");
    assert_eq!(got["job"]["x_ext"]["n"], 1, "unknown fields are echoed");
    assert_eq!(got["job"]["created_at"], b["job"]["created_at"]);
    s.assert_invariants().await;
}

#[tokio::test]
async fn validation_errors_name_the_field() {
    let s = TestServer::start().await;
    let cases = [
        (json!({"args": []}), "type"),
        (json!({"type": "Email.Send", "args": []}), "type"),
        (json!({"type": "a", "args": {}}), "args"),
        (json!({"type": "a", "args": [], "queue": "Bad Queue"}), "queue"),
        (
            json!({"type": "a", "args": [], "id": "550e8400-e29b-41d4-a716-446655440000"}),
            "id",
        ),
        (json!({"type": "a", "args": [], "priority": -1}), "0 to 4294967295"),
        (json!({"type": "a", "args": [], "priority": 1.5}), "priority"),
        (
            json!({"type": "a", "args": [], "options": {"priority": 3}}),
            "seed priority model",
        ),
        (
            json!({"type": "a", "args": [], "options": {"timeout_ms": -5}}),
            "options.timeout_ms",
        ),
        (
            json!({"type": "a", "args": [], "options": {"scheduled_at": "tomorrow"}}),
            "options.scheduled_at",
        ),
    ];
    for (body, needle) in cases {
        let (st, b) = s.post("/ojs/v1/jobs", body.clone()).await;
        assert_eq!(st, 400, "{body} -> {b}");
        assert_eq!(b["error"]["code"], "invalid_request");
        assert_eq!(b["error"]["retryable"], false);
        let msg = b["error"]["message"].as_str().unwrap_or("");
        assert!(msg.contains(needle), "message {msg:?} should mention {needle:?}");
    }
    let (st, b) = s
        .post(
            "/ojs/v1/jobs",
            json!({"type": "a", "args": [], "options": {"retry": {"max_attempts": 0}}}),
        )
        .await;
    assert_eq!(st, 422, "{b}");
    assert!(b["error"]["message"].as_str().unwrap_or("").contains("max_attempts"));

    let r = s
        .http
        .post(s.url("/ojs/v1/jobs"))
        .header("content-type", "application/json")
        .body("{nope")
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 400);
    let b: serde_json::Value = r.json().await.expect("json");
    assert_eq!(b["error"]["code"], "invalid_payload");

    let r = s
        .http
        .post(s.url("/ojs/v1/jobs"))
        .header("content-type", "text/plain")
        .body("{}")
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 415);

    let (st, b) = s.get("/ojs/v1/jobs/not-an-id").await;
    assert_eq!(st, 404);
    assert_eq!(b["error"]["code"], "not_found");
    let (st, _) = s.get("/ojs/v1/nothing-here").await;
    assert_eq!(st, 404);
    s.assert_invariants().await;
}

/// Every route with a job id or a queue name in its path reads it as ojs-core's type: a string that is
/// not a job id names no job (404), a name that breaks the queue-name rules is a 400 that says them.
#[tokio::test]
async fn job_and_queue_paths_are_typed_on_every_route() {
    let s = TestServer::start().await;
    let routes = [
        ("GET", "/ojs/v1/jobs/{id}"),
        ("PATCH", "/ojs/v1/jobs/{id}"),
        ("DELETE", "/ojs/v1/jobs/{id}"),
        ("GET", "/ojs/v1/admin/jobs/{id}"),
        ("GET", "/ojs/v1/jobs/{id}/explain"),
        ("GET", "/ojs/v1/jobs/{id}/progress"),
        ("PUT", "/ojs/v1/jobs/{id}/progress"),
        ("GET", "/ojs/v1/jobs/{id}/events/stream"),
        ("GET", "/ojs/v1/dead-letter/{id}"),
        ("POST", "/ojs/v1/dead-letter/{id}/retry"),
        ("DELETE", "/ojs/v1/dead-letter/{id}"),
        ("GET", "/ojs/v1/admin/dead-letter/{id}"),
        ("POST", "/ojs/v1/admin/dead-letter/{id}/retry"),
        ("DELETE", "/ojs/v1/admin/dead-letter/{id}"),
        ("GET", "/ojs/v1/queues/{queue}"),
        ("GET", "/ojs/v1/queues/{queue}/stats"),
        ("GET", "/ojs/v1/queues/{queue}/priority-stats"),
        ("GET", "/ojs/v1/queues/{queue}/events/stream"),
        ("POST", "/ojs/v1/queues/{queue}/pause"),
        ("POST", "/ojs/v1/queues/{queue}/resume"),
        ("GET", "/ojs/v1/admin/queues/{queue}"),
        ("POST", "/ojs/v1/admin/queues/{queue}/pause"),
        ("POST", "/ojs/v1/admin/queues/{queue}/resume"),
        ("GET", "/ojs/v1/admin/queues/{queue}/config"),
        ("PUT", "/ojs/v1/admin/queues/{queue}/config"),
        ("GET", "/ojs/v1/admin/queues/{queue}/priority-aging"),
        ("PUT", "/ojs/v1/admin/queues/{queue}/priority-aging"),
        ("DELETE", "/ojs/v1/admin/queues/{queue}/priority-aging"),
        ("GET", "/ojs/v1/admin/queues/{queue}/rate-limit"),
        ("PUT", "/ojs/v1/admin/queues/{queue}/rate-limit"),
        ("DELETE", "/ojs/v1/admin/queues/{queue}/rate-limit"),
        ("GET", "/ojs/v1/admin/queues/{queue}/tenancy"),
        ("PUT", "/ojs/v1/admin/queues/{queue}/tenancy"),
        ("DELETE", "/ojs/v1/admin/queues/{queue}/tenancy"),
    ];
    for (method, route) in routes {
        let job = route.contains("{id}");
        let path = route.replace("{id}", "not-an-id").replace("{queue}", "Not_A_Queue");
        let r = s
            .http
            .request(method.parse().expect("method"), s.url(&path))
            .header("content-type", "application/json")
            .body("{}")
            .send()
            .await
            .expect("send");
        let status = r.status().as_u16();
        let b: Value = r.json().await.unwrap_or(Value::Null);
        if job {
            assert_eq!(
                (status, &b["error"]["code"]),
                (404, &json!("not_found")),
                "{method} {path}: {b}"
            );
        } else {
            assert_eq!(status, 400, "{method} {path}: {b}");
            let message = b["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains("^[a-z0-9][a-z0-9.-]*$"), "{method} {path}: {b}");
        }
    }
}

#[tokio::test]
async fn duplicate_id_is_409_and_batch_is_all_or_nothing() {
    let s = TestServer::start().await;
    let id = ojs_core::names::new_job_id();
    s.enqueue(json!({"id": id, "type": "a", "args": []})).await;
    let (st, b) = s.post("/ojs/v1/jobs", json!({"id": id, "type": "a", "args": []})).await;
    assert_eq!((st, b["error"]["code"].as_str()), (409, Some("duplicate")));

    // The second job of this batch reuses the existing id: nothing of the batch may be written.
    let fresh = ojs_core::names::new_job_id();
    let (st, _) = s
        .post(
            "/ojs/v1/jobs/batch",
            json!({"jobs": [{"id": fresh, "type": "a", "args": []}, {"id": id, "type": "a", "args": []}]}),
        )
        .await;
    assert_eq!(st, 409);
    assert_eq!(s.get(&format!("/ojs/v1/jobs/{fresh}")).await.0, 404, "no partial batch");

    // An invalid job anywhere rejects the batch and says which one.
    let (st, b) = s
        .post(
            "/ojs/v1/jobs/batch",
            json!({"jobs": [{"type": "a", "args": []}, {"type": "a"}]}),
        )
        .await;
    assert_eq!(st, 400);
    assert!(
        b["error"]["message"].as_str().unwrap_or("").starts_with("jobs[1]"),
        "{b}"
    );

    let (st, b) = s
        .post(
            "/ojs/v1/jobs/batch",
            json!({"jobs": [{"type": "a", "args": [1], "priority": 5}, {"type": "a", "args": [2], "priority": 0}]}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    assert_eq!(b["count"], 2);
    let jobs = s.fetch(&["default"], 10).await;
    let order: Vec<_> = jobs.iter().map(|j| j["args"][0].as_i64().unwrap_or(-1)).collect();
    // The first job (priority 2 by default) sits between the batch's priority 0 and priority 5.
    assert_eq!(order, vec![2, -1, 1]);
    s.assert_invariants().await;
}

#[tokio::test]
async fn fetch_ack_nack_lifecycle() {
    let s = TestServer::start().await;
    let q = "life";
    let id = s
        .enqueue(json!({"type": "a", "args": [], "options": {"queue": q,
            "retry": {"max_attempts": 2, "initial_interval": "PT0.1S", "jitter": false, "on_exhaustion": "dead_letter"}}}))
        .await;
    assert!(s.fetch(&["other"], 1).await.is_empty(), "other queues are untouched");
    let jobs = s.fetch(&[q], 1).await;
    assert_eq!(jobs[0]["id"], id.as_str());
    assert_eq!(jobs[0]["state"], "active");
    assert_eq!(jobs[0]["attempt"], 1);
    assert!(s.fetch(&[q], 1).await.is_empty(), "an active job is not fetched twice");

    let (st, b) = s
        .post(
            "/ojs/v1/workers/nack",
            json!({"job_id": id, "error": {"code": "io", "message": "boom", "retryable": true}}),
        )
        .await;
    assert_eq!(st, 200);
    assert_eq!(b["state"], "retryable");
    assert_eq!(b["retry_delay_ms"], 100);
    // Not ready before the backoff; ready after it (the promoter runs every 20 ms in tests).
    assert!(s.fetch(&[q], 1).await.is_empty());
    s.wait_state(&id, "available", std::time::Duration::from_secs(5)).await;
    let jobs = s.fetch(&[q], 1).await;
    assert_eq!(jobs[0]["attempt"], 2);
    let (st, b) = s
        .post(
            "/ojs/v1/workers/nack",
            json!({"job_id": id, "error": {"message": "again"}}),
        )
        .await;
    assert_eq!((st, b["state"].as_str()), (200, Some("discarded")));
    let (_, dl) = s.get("/ojs/v1/dead-letter").await;
    assert_eq!(dl["jobs"][0]["id"], id.as_str());
    assert_eq!(dl["jobs"][0]["errors"].as_array().map(Vec::len), Some(2));

    let (st, b) = s.post(&format!("/ojs/v1/dead-letter/{id}/retry"), json!({})).await;
    assert_eq!(
        (st, b["job"]["state"].as_str(), b["job"]["attempt"].as_i64()),
        (200, Some("available"), Some(0))
    );
    let jobs = s.fetch(&[q], 1).await;
    let (st, b) = s
        .post(
            "/ojs/v1/workers/ack",
            json!({"job_id": jobs[0]["id"], "result": {"ok": true}}),
        )
        .await;
    assert_eq!((st, b["state"].as_str()), (200, Some("completed")));
    let (st, b) = s.ack(&id).await;
    assert_eq!(
        (st, b["error"]["code"].as_str()),
        (409, Some("conflict")),
        "a second ACK is refused"
    );
    let (_, job) = s.get(&format!("/ojs/v1/jobs/{id}")).await;
    assert_eq!(job["job"]["result"]["ok"], true);
    assert!(job["job"].get("error").is_none(), "ACK clears the current error");
    s.assert_invariants().await;
}

/// The error history and the events keep the JSON the API always showed, although no script writes
/// JSON (errors are stored as entries, events as parts: lua/includes/errors.lua, ojs-core event.rs):
/// the worker's error object as sent (an empty array stays an array, a big integer exact), with its
/// attempt and time first; each event's data with its members typed.
#[tokio::test]
async fn errors_and_event_data_keep_their_json() {
    let s = TestServer::start().await;
    let q = "shapes";
    let id = s
        .enqueue(json!({"type": "a", "args": [], "options": {"queue": q,
            "retry": {"max_attempts": 2, "initial_interval": "PT0.1S", "jitter": false}}}))
        .await;
    let fetch = json!({"queues": [q], "worker_id": "w-1"});
    let (st, _) = s.post("/ojs/v1/workers/fetch", fetch.clone()).await;
    assert_eq!(st, 200);
    let details = json!({"list": [], "empty": {}, "big": 12345678901234567890u64, "text": "a \u{1f} b"});
    let error = json!({"code": "io", "message": "boom", "details": details, "retryable": true});
    let (st, _) = s
        .post("/ojs/v1/workers/nack", json!({"job_id": id, "error": error}))
        .await;
    assert_eq!(st, 200);
    let (_, job) = s.get(&format!("/ojs/v1/jobs/{id}")).await;
    let error = &job["job"]["error"];
    assert_eq!(
        (error["attempt"].as_i64(), error["code"].as_str()),
        (Some(1), Some("io"))
    );
    assert!(
        error["occurred_at"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{error}"
    );
    assert_eq!(error["details"], details, "the worker's error object is kept as sent");
    s.wait_state(&id, "available", std::time::Duration::from_secs(5)).await;
    s.post("/ojs/v1/workers/fetch", fetch).await;
    let (_, b) = s
        .post(
            "/ojs/v1/workers/nack",
            json!({"job_id": id, "error": {"code": "again", "message": "x"}}),
        )
        .await;
    assert_eq!(b["state"], "discarded");
    let (_, job) = s.get(&format!("/ojs/v1/jobs/{id}")).await;
    let errors = job["job"]["errors"].as_array().cloned().unwrap_or_default();
    let attempts: Vec<_> = errors
        .iter()
        .map(|e| (e["attempt"].as_i64(), e["code"].as_str()))
        .collect();
    assert_eq!(attempts, [(Some(1), Some("io")), (Some(2), Some("again"))]);
    assert_eq!(errors[0]["details"], details);
    assert_eq!(job["job"]["error"]["code"], "again");

    let (_, all) = s.get(&format!("/ojs/v1/events?job_id={id}")).await;
    let data = |t: &str| {
        all["events"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["type"] == t)
            .map(|e| e["data"].clone())
            .unwrap_or_else(|| panic!("no {t} event in {all}"))
    };
    let started = data("job.started");
    assert_eq!(
        (started["attempt"].as_i64(), started["worker_id"].as_str()),
        (Some(1), Some("w-1"))
    );
    assert_eq!(
        (started["job_id"].as_str(), started["queue"].as_str()),
        (Some(id.as_str()), Some(q))
    );
    let retrying = data("job.retrying");
    assert_eq!(
        (retrying["attempt"].as_i64(), retrying["delay_ms"].as_i64()),
        (Some(1), Some(100))
    );
    assert_eq!(
        (retrying["error"]["code"].as_str(), &retrying["error"]["details"]),
        (Some("io"), &details)
    );
    assert!(retrying.get("rate_limited").is_none(), "{retrying}");
    let failed = data("job.failed");
    assert_eq!(
        (failed["attempt"].as_i64(), failed["error"]["code"].as_str()),
        (Some(2), Some("again"))
    );

    // A pause is written by a script, with Redis' time, like every other event.
    s.post(&format!("/ojs/v1/queues/{q}/pause"), json!({})).await;
    let (_, paused) = s.get(&format!("/ojs/v1/events?types=queue.paused&queues={q}")).await;
    let e = &paused["events"][0];
    assert_eq!(
        (e["type"].as_str(), e["data"]["queue"].as_str()),
        (Some("queue.paused"), Some(q))
    );
    s.assert_invariants().await;
}

#[tokio::test]
async fn non_retryable_errors_and_dead_letter_delete() {
    let s = TestServer::start().await;
    let q = "nre";
    let id = s
        .enqueue(json!({"type": "a", "args": [], "options": {"queue": q,
            "retry": {"max_attempts": 5, "non_retryable_errors": ["Auth.*"], "on_exhaustion": "dead_letter"}}}))
        .await;
    s.fetch(&[q], 1).await;
    let (_, b) = s
        .post(
            "/ojs/v1/workers/nack",
            json!({"job_id": id, "error": {"type": "Auth.Expired", "message": "x"}}),
        )
        .await;
    assert_eq!(b["state"], "discarded", "a prefix pattern makes the error final");
    let (st, b) = s.delete(&format!("/ojs/v1/dead-letter/{id}")).await;
    assert_eq!((st, b["deleted"].as_bool()), (200, Some(true)));
    assert_eq!(s.get(&format!("/ojs/v1/jobs/{id}")).await.0, 404);
    assert_eq!(s.delete(&format!("/ojs/v1/dead-letter/{id}")).await.0, 404);
    s.assert_invariants().await;
}

#[tokio::test]
async fn cancel_in_each_state() {
    let s = TestServer::start().await;
    let q = "cancel";
    let avail = s
        .enqueue(json!({"type": "a", "args": [], "options": {"queue": q}}))
        .await;
    let sched = s
        .enqueue(json!({"type": "a", "args": [], "options": {"queue": q, "delay_ms": 60000}}))
        .await;
    let (st, b) = s.delete(&format!("/ojs/v1/jobs/{avail}")).await;
    assert_eq!((st, b["job"]["state"].as_str()), (200, Some("cancelled")));
    assert!(b["job"]["cancelled_at"].is_string());
    let (st, _) = s.delete(&format!("/ojs/v1/jobs/{sched}")).await;
    assert_eq!(st, 200);
    let active = s
        .enqueue(json!({"type": "a", "args": [], "options": {"queue": q}}))
        .await;
    assert_eq!(
        s.fetch(&[q], 1).await[0]["id"],
        active.as_str(),
        "the cancelled job is skipped"
    );
    let (st, _) = s.delete(&format!("/ojs/v1/jobs/{active}")).await;
    assert_eq!(st, 200);
    let (_, hb) = s
        .post(
            "/ojs/v1/workers/heartbeat",
            json!({"worker_id": "w1", "active_jobs": [active]}),
        )
        .await;
    assert_eq!(
        hb["directives"][0]["type"], "cancel",
        "the worker learns of the cancel: {hb}"
    );
    assert_eq!(s.ack(&active).await.0, 409, "its ACK is refused");
    let (st, b) = s.delete(&format!("/ojs/v1/jobs/{avail}")).await;
    assert_eq!((st, b["error"]["code"].as_str()), (409, Some("conflict")));
    assert_eq!(b["error"]["details"]["state"], "cancelled");
    s.assert_invariants().await;
}

#[tokio::test]
async fn heartbeat_extends_and_signals() {
    let s = TestServer::start().await;
    let q = "hb";
    let id = s
        .enqueue(json!({"type": "a", "args": [], "options": {"queue": q, "visibility_timeout_ms": 1000}}))
        .await;
    let (_, b) = s
        .post("/ojs/v1/workers/fetch", json!({"queues": [q], "worker_id": "w-1"}))
        .await;
    assert_eq!(b["jobs"][0]["worker_id"], "w-1");
    for _ in 0..4 {
        tokio::time::sleep(std::time::Duration::from_millis(350)).await;
        let (st, hb) = s
            .post(
                "/ojs/v1/workers/heartbeat",
                json!({"worker_id": "w-1", "active_jobs": [id]}),
            )
            .await;
        assert_eq!((st, hb["state"].as_str()), (200, Some("running")));
        assert_eq!(hb["jobs"][0]["extended"], true);
    }
    let (_, job) = s.get(&format!("/ojs/v1/jobs/{id}")).await;
    assert_eq!(
        job["job"]["state"], "active",
        "1.4 s past a 1 s lease, kept alive by heartbeats"
    );
    let (st, _) = s.post("/ojs/v1/workers/w-1/signal", json!({"signal": "quiet"})).await;
    assert_eq!(st, 200);
    let (_, hb) = s
        .post(
            "/ojs/v1/workers/heartbeat",
            json!({"worker_id": "w-1", "active_jobs": [id]}),
        )
        .await;
    assert_eq!(hb["state"], "quiet");
    let (st, _) = s.post("/ojs/v1/workers/w-1/signal", json!({"signal": "explode"})).await;
    assert_eq!(st, 400);
    assert_eq!(s.ack(&id).await.0, 200);
    s.assert_invariants().await;
}

#[tokio::test]
async fn queues_pause_resume_and_events() {
    let s = TestServer::start().await;
    let id = s
        .enqueue(json!({"type": "a", "args": [], "options": {"queue": "ev"}}))
        .await;
    let (st, _) = s.post("/ojs/v1/queues/ev/pause", json!({})).await;
    assert_eq!(st, 200);
    assert!(s.fetch(&["ev"], 1).await.is_empty(), "a paused queue is skipped");
    let (_, qs) = s.get("/ojs/v1/queues").await;
    let ev = qs["queues"]
        .as_array()
        .and_then(|a| a.iter().find(|q| q["name"] == "ev"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (ev["status"].as_str(), ev["available"].as_u64()),
        (Some("paused"), Some(1))
    );
    s.post("/ojs/v1/queues/ev/resume", json!({})).await;
    s.fetch(&["ev"], 1).await;
    s.ack(&id).await;
    let (_, e) = s.get("/ojs/v1/events?types=job.completed&queues=ev").await;
    assert_eq!(e["events"][0]["type"], "job.completed");
    assert_eq!(e["events"][0]["data"]["job_id"], id.as_str());
    assert!(e["events"][0]["data"]["duration_ms"].is_number());
    let (_, all) = s.get(&format!("/ojs/v1/events?job_id={id}")).await;
    let types: Vec<_> = all["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["type"].as_str())
        .collect();
    assert_eq!(types, ["job.enqueued", "job.started", "job.completed"]);
    let cursor = all["next_cursor"].as_str().unwrap_or_default().to_string();
    let (_, after) = s.get(&format!("/ojs/v1/events?after={cursor}")).await;
    assert!(
        after["events"].as_array().is_some_and(Vec::is_empty),
        "nothing after the newest event"
    );
    s.assert_invariants().await;
}

#[tokio::test]
async fn health_and_manifest() {
    let s = TestServer::start().await;
    let (st, h) = s.get("/ojs/v1/health").await;
    assert_eq!((st, h["status"].as_str()), (200, Some("ok")));
    let (st, m) = s.get("/ojs/manifest").await;
    assert_eq!(st, 200);
    assert_eq!(m["specversion"], "1.0");
    assert_eq!(m["priority_model"], "seed");
}

#[tokio::test]
async fn api_keys_and_scopes() {
    let admin = "admin-key-0123456789";
    let worker = "worker-key-0123456789";
    let s = TestServer::start_with(|c| {
        c.api_keys = ojs_server::auth::parse_keys(&format!("admin:{admin},worker:{worker}")).expect("keys")
    })
    .await;
    let call = |method: reqwest::Method, path: &str, key: Option<&str>| {
        let mut r = s
            .http
            .request(method, s.url(path))
            .header("content-type", "application/json")
            .body("{}");
        if let Some(k) = key {
            r = r.bearer_auth(k);
        }
        r.send()
    };
    assert_eq!(
        call(reqwest::Method::GET, "/ojs/v1/health", None)
            .await
            .expect("send")
            .status(),
        200,
        "health stays open"
    );
    let r = call(reqwest::Method::POST, "/ojs/v1/workers/fetch", None)
        .await
        .expect("send");
    assert_eq!(r.status(), 401);
    assert_eq!(
        r.json::<serde_json::Value>().await.expect("json")["error"]["code"],
        "unauthorized"
    );
    assert_eq!(
        call(
            reqwest::Method::POST,
            "/ojs/v1/workers/fetch",
            Some("wrong-key-0123456789")
        )
        .await
        .expect("send")
        .status(),
        401
    );
    assert_eq!(
        call(reqwest::Method::POST, "/ojs/v1/workers/fetch", Some(worker))
            .await
            .expect("send")
            .status(),
        200
    );
    for path in [
        "/ojs/v1/queues/q/pause",
        "/ojs/v1/dead-letter/019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f/retry",
    ] {
        let r = call(reqwest::Method::POST, path, Some(worker)).await.expect("send");
        assert_eq!(r.status(), 403, "{path} with a worker key");
        assert_eq!(
            r.json::<serde_json::Value>().await.expect("json")["error"]["code"],
            "forbidden"
        );
    }
    assert_eq!(
        call(reqwest::Method::PUT, "/ojs/v1/rate-limits/k", Some(worker))
            .await
            .expect("send")
            .status(),
        403
    );
    assert_eq!(
        call(reqwest::Method::POST, "/ojs/v1/queues/q/pause", Some(admin))
            .await
            .expect("send")
            .status(),
        200
    );

    // Without keys, a non-loopback listen address is refused unless explicitly allowed.
    let mut open = ojs_server::Config::for_redis("redis://127.0.0.1:1");
    open.listen = "0.0.0.0:8080".parse().expect("addr");
    let msg = open.validate().unwrap_err();
    assert!(msg.contains("OJS_API_KEYS"), "{msg}");
    open.insecure_no_auth = true;
    assert!(open.validate().is_ok());
    open.insecure_no_auth = false;
    open.listen = "127.0.0.1:8080".parse().expect("addr");
    assert!(open.validate().is_ok());
}

/// Reads an SSE response until `needle` appears (or the deadline passes); returns what was read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_delivers_events_from_the_other_pod_and_resumes() {
    let bin = env!("CARGO_BIN_EXE_ojs-server");
    let ns = ojs_testkit::unique_namespace();
    let a = TestServer::spawn_pod(bin, &ns, &[]).await;
    let b = TestServer::spawn_pod(bin, &ns, &[]).await;
    let mut resp = b
        .http
        .get(b.url("/ojs/v1/queues/sse/events/stream"))
        .send()
        .await
        .expect("connect");
    assert_eq!(resp.status(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap_or("")
        .starts_with("text/event-stream"));
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let other = a
        .enqueue(json!({"type": "a", "args": [], "options": {"queue": "elsewhere"}}))
        .await;
    let id = a
        .enqueue(json!({"type": "a", "args": [], "options": {"queue": "sse"}}))
        .await;
    let text = ojs_testkit::read_sse_until(&mut resp, &id).await;
    assert!(text.contains("event: job.enqueued"), "{text}");
    assert!(
        text.contains(&id),
        "the event enqueued on pod A reached the client of pod B: {text}"
    );
    assert!(!text.contains(&other), "the queue filter holds");
    // Resume: reconnect with Last-Event-ID and get what happened since.
    let last = text
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .last()
        .unwrap_or("0-0")
        .to_string();
    drop(resp);
    a.fetch(&["sse"], 1).await;
    let mut again = b
        .http
        .get(b.url(&format!("/ojs/v1/jobs/{id}/events/stream")))
        .header("last-event-id", &last)
        .send()
        .await
        .expect("reconnect");
    let text = ojs_testkit::read_sse_until(&mut again, "job.started").await;
    assert!(
        text.contains("event: job.started"),
        "missed events are replayed: {text}"
    );
    assert!(
        !text.contains("event: job.enqueued"),
        "nothing before Last-Event-ID: {text}"
    );
}

/// Calls of `command` a Redis served since its statistics were last reset (`INFO commandstats`).
async fn command_calls(r: &mut redis::aio::MultiplexedConnection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(r)
        .await
        .expect("INFO");
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The events hub reads the streams only while a request on its node listens (a long-poll, an SSE
/// client): each call that wrote events woke its blocked XREAD before, for nobody. A listener then
/// gets what it would have: the long-poll its wake-up, the SSE client the events after it connected,
/// and none from before, which the hub, reading from where it stood while idle, reads again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_events_hub_reads_the_streams_only_while_a_request_listens() {
    if ojs_testkit::skip_on_cluster("counts the commands of a redis-server of its own") {
        return;
    }
    let redis = ojs_testkit::OwnRedis::scratch().await;
    let mut cfg = ojs_server::Config::for_redis(&redis.url());
    cfg.namespace = ojs_testkit::unique_namespace();
    let s = TestServer::start_config(cfg).await;
    let mut r = s.redis().await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut r)
        .await
        .expect("RESETSTAT");
    for i in 0..20 {
        s.enqueue(json!({"type": "a", "args": [i], "options": {"queue": "quiet"}}))
            .await;
    }
    assert_eq!(
        command_calls(&mut r, "xread").await,
        0,
        "the hub read the stream for nobody"
    );
    // Idle, it keeps its place by Redis' clock, not by reading the newest entry (a batch's 500 events
    // are one entry: an idle pod read 256 of them a second, megabytes).
    let jobs: Vec<Value> = (0..500)
        .map(|i| json!({"type": "a", "args": [i], "options": {"queue": "big"}}))
        .collect();
    assert_eq!(s.post("/ojs/v1/jobs/batch", json!({ "jobs": jobs })).await.0, 201);
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut r)
        .await
        .expect("RESETSTAT");
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let stats: String = redis::cmd("INFO").arg("stats").query_async(&mut r).await.expect("INFO");
    let sent: u64 = stats
        .lines()
        .find_map(|l| l.strip_prefix("total_net_output_bytes:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("total_net_output_bytes");
    assert!(sent < 30_000, "an idle pod made Redis send {sent} bytes in 2.5 s");

    // A long-poll listens: the hub reads, and the job enqueued meanwhile reaches it.
    let http = s.http.clone();
    let url = s.url("/ojs/v1/workers/fetch");
    let waiting = tokio::spawn(async move {
        let r = http
            .post(url)
            .json(&json!({"queues": ["woken"], "wait_ms": 5000}))
            .send()
            .await
            .expect("fetch");
        r.json::<Value>().await.expect("json")
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let id = s
        .enqueue(json!({"type": "a", "args": [], "options": {"queue": "woken"}}))
        .await;
    let got = waiting.await.expect("long-poll");
    assert_eq!(got["jobs"][0]["id"], id.as_str(), "{got}");
    assert!(
        command_calls(&mut r, "xread").await > 0,
        "the hub read while a long-poll waited"
    );

    // Idle again; an SSE client connects after job `before`, and gets `after`'s events, not `before`'s.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let before = s
        .enqueue(json!({"type": "a", "args": [], "options": {"queue": "sse-idle"}}))
        .await;
    let mut resp = s
        .http
        .get(s.url("/ojs/v1/queues/sse-idle/events/stream"))
        .send()
        .await
        .expect("connect");
    assert_eq!(resp.status(), 200);
    let after = s
        .enqueue(json!({"type": "a", "args": [], "options": {"queue": "sse-idle"}}))
        .await;
    let text = ojs_testkit::read_sse_until(&mut resp, &after).await;
    assert!(text.contains(&after), "the event after connecting: {text}");
    assert!(!text.contains(&before), "an event from before connecting: {text}");
}

#[tokio::test]
async fn openapi_document_matches_the_router() {
    let s = TestServer::start().await;
    let (st, doc) = s.get("/ojs/v1/openapi.json").await;
    assert_eq!(st, 200);
    assert!(
        doc["openapi"].as_str().unwrap_or("").starts_with("3.1"),
        "OpenAPI 3.1: {}",
        doc["openapi"]
    );
    let paths = doc["paths"].as_object().cloned().unwrap_or_default();
    // The document is generated from the handlers that the router serves (utoipa-axum), so it cannot
    // list a route that does not exist; check it from the outside anyway, and that it covers the API.
    let mut operations = 0;
    for (path, item) in &paths {
        for (method, _) in item.as_object().into_iter().flatten() {
            operations += 1;
            let concrete = path
                .replace("{id}", "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f")
                .replace("{queue}", "openapi-probe")
                .replace("{key}", "openapi-probe")
                .replace("{worker_id}", "openapi-probe");
            let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).expect("method");
            let mut req = s.http.request(m.clone(), s.url(&concrete));
            if concrete.ends_with("/stream") {
                // SSE never ends; only the status matters.
                let r = req.send().await.expect("send");
                assert_eq!(r.status(), 200, "{method} {path}");
                continue;
            }
            if m != reqwest::Method::GET && m != reqwest::Method::DELETE {
                req = req.header("content-type", "application/json").body("{}");
            }
            let r = req.send().await.expect("send");
            let status = r.status().as_u16();
            let body = r.text().await.unwrap_or_default();
            assert_ne!(status, 405, "{method} {path} is documented but not routed");
            assert!(
                !body.contains("no route for"),
                "{method} {path} is documented but not routed"
            );
        }
    }
    assert!(operations >= 37, "only {operations} operations documented");
    for must in [
        "/ojs/v1/jobs",
        "/ojs/v1/workers/fetch",
        "/ojs/v1/rate-limits/{key}",
        "/ojs/v1/queues/{queue}/priority-stats",
    ] {
        assert!(paths.contains_key(must), "{must} missing from the OpenAPI document");
    }
}

#[tokio::test]
async fn ack_and_fetch_next_claims_in_the_same_call_and_claims_nothing_when_refused() {
    let s = TestServer::start().await;
    let q = "afn";
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(
            s.enqueue(json!({"type": "a", "args": [i], "options": {"queue": q}}))
                .await,
        );
    }
    let first = s.fetch(&[q], 1).await;
    assert_eq!(first[0]["id"], ids[0].as_str());
    let (st, b) = s
        .post(
            "/ojs/v1/workers/ack",
            json!({"job_id": ids[0], "result": {"ok": 1}, "fetch": {"queues": [q], "count": 1, "worker_id": "w-9"}}),
        )
        .await;
    assert_eq!((st, b["state"].as_str()), (200, Some("completed")), "{b}");
    assert_eq!(b["jobs"].as_array().map(Vec::len), Some(1), "{b}");
    assert_eq!(b["jobs"][0]["id"], ids[1].as_str(), "FIFO: the next job comes back");
    assert_eq!(b["jobs"][0]["state"], "active");
    assert_eq!(b["jobs"][0]["worker_id"], "w-9");
    let (_, done) = s.get(&format!("/ojs/v1/jobs/{}", ids[0])).await;
    assert_eq!(done["job"]["result"]["ok"], 1);
    // Acking a job twice is refused, and the refused call claims nothing: the third job stays available.
    let (st, b) = s
        .post(
            "/ojs/v1/workers/ack",
            json!({"job_id": ids[0], "fetch": {"queues": [q]}}),
        )
        .await;
    assert_eq!((st, b["error"]["code"].as_str()), (409, Some("conflict")), "{b}");
    let (_, third) = s.get(&format!("/ojs/v1/jobs/{}", ids[2])).await;
    assert_eq!(third["job"]["state"], "available");
    // A bad fetch part is a 400 and acks nothing.
    let (st, _) = s
        .post(
            "/ojs/v1/workers/ack",
            json!({"job_id": ids[1], "fetch": {"queues": [q], "count": 0}}),
        )
        .await;
    assert_eq!(st, 400);
    let (_, second) = s.get(&format!("/ojs/v1/jobs/{}", ids[1])).await;
    assert_eq!(second["job"]["state"], "active");
    // Nothing left to claim: the ack succeeds with an empty `jobs`.
    assert_eq!(s.fetch(&[q], 1).await[0]["id"], ids[2].as_str());
    let (st, b) = s
        .post(
            "/ojs/v1/workers/ack",
            json!({"job_id": ids[1], "fetch": {"queues": [q]}}),
        )
        .await;
    assert_eq!((st, b["jobs"].as_array().map(Vec::len)), (200, Some(0)), "{b}");
    assert_eq!(s.ack(&ids[2]).await.0, 200);
    s.assert_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_worker_requests_share_script_calls_yet_each_stands_alone() {
    let s = std::sync::Arc::new(TestServer::start().await);
    let q = "group";
    for i in 0..200 {
        s.enqueue(json!({"type": "a", "args": [i], "options": {"queue": q}}))
            .await;
    }
    let held = s.fetch(&[q], 100).await;
    assert_eq!(held.len(), 100);
    let done_id = held[0]["id"].as_str().unwrap_or_default().to_string();
    assert_eq!(s.ack(&done_id).await.0, 200);
    // 149 requests at once: 98 good ACKs, one with a lease id the job never had, one ACK of an already
    // completed job, one of a job that does not exist, and 48 FETCHes of two jobs each.
    let mut tasks = Vec::new();
    for (i, job) in held.iter().enumerate().skip(1) {
        let s = s.clone();
        let id = job["id"].as_str().unwrap_or_default().to_string();
        let body = if i == 1 {
            json!({"job_id": id, "lease_id": "999999"})
        } else {
            json!({"job_id": id, "result": {"i": i}})
        };
        tasks.push(tokio::spawn(async move {
            ("ack", id, s.post("/ojs/v1/workers/ack", body).await)
        }));
    }
    for (label, id) in [("done", done_id.clone()), ("missing", ojs_core::names::new_job_id())] {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            (
                label,
                id.clone(),
                s.post("/ojs/v1/workers/ack", json!({"job_id": id})).await,
            )
        }));
    }
    for w in 0..48 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let body = json!({"queues": [q], "count": 2, "worker_id": format!("w{w}")});
            ("fetch", String::new(), s.post("/ojs/v1/workers/fetch", body).await)
        }));
    }
    let (mut acked, mut fetched) = (0, std::collections::HashSet::new());
    let mut lost_lease = String::new();
    for t in tasks {
        let (label, id, (st, b)) = t.await.expect("task");
        match (label, st) {
            ("ack", 200) => {
                assert_eq!(
                    (b["job_id"].as_str(), b["state"].as_str()),
                    (Some(id.as_str()), Some("completed"))
                );
                acked += 1;
            }
            ("ack", 409) => {
                assert_eq!(b["error"]["code"], "lease_lost", "{b}");
                lost_lease = id;
            }
            ("done", 409) => assert_eq!(b["error"]["code"], "conflict", "{b}"),
            ("missing", 404) => assert_eq!(b["error"]["code"], "not_found", "{b}"),
            ("fetch", 200) => {
                let jobs = b["jobs"].as_array().cloned().unwrap_or_default();
                assert_eq!(jobs.len(), 2, "{b}");
                for j in jobs {
                    assert!(
                        fetched.insert(j["id"].as_str().unwrap_or_default().to_string()),
                        "a job claimed twice"
                    );
                }
            }
            other => panic!("{label} {id} answered {other:?}: {b}"),
        }
    }
    assert_eq!((acked, fetched.len()), (98, 96), "each request got its own outcome");
    // The refused ACK changed nothing: its job is still active, its lease intact.
    let (_, j) = s.get(&format!("/ojs/v1/jobs/{lost_lease}")).await;
    assert_eq!(j["job"]["state"], "active", "{j}");
    // The requests really shared script calls.
    let m = s.metrics().await;
    let metric = |name: &str| -> f64 {
        m.lines()
            .find(|l| l.starts_with(name) && l.contains("kind=\"worker\""))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    let (calls, requests) = (
        metric("ojs_coalesced_batch_size_count"),
        metric("ojs_coalesced_batch_size_sum"),
    );
    assert!(requests >= 151.0, "{requests} worker requests counted");
    assert!(
        calls < requests,
        "{calls} script calls for {requests} requests: no request shared a call"
    );
    s.assert_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_single_enqueues_are_coalesced_yet_each_stands_alone() {
    let s = std::sync::Arc::new(TestServer::start().await);
    let q = "coal";
    let existing = s
        .enqueue(json!({"type": "a", "args": [], "options": {"queue": q}}))
        .await;
    let twice = ojs_core::names::new_job_id();
    // 64 requests at once: 61 new jobs, one id sent twice, one id that already exists.
    let mut tasks = Vec::new();
    for i in 0..64 {
        let s = s.clone();
        let id = match i {
            0 | 1 => twice.clone(),
            2 => existing.clone(),
            _ => ojs_core::names::new_job_id(),
        };
        tasks.push(tokio::spawn(async move {
            let (st, b) = s
                .post(
                    "/ojs/v1/jobs",
                    json!({"id": id, "type": "a", "args": [i], "priority": i % 5, "options": {"queue": q}}),
                )
                .await;
            (id, st, b)
        }));
    }
    let mut created = std::collections::HashSet::new();
    let mut conflicts = 0;
    for t in tasks {
        let (id, st, b) = t.await.expect("task");
        match st {
            201 => {
                assert_eq!(b["job"]["id"], id.as_str());
                assert_eq!(b["job"]["state"], "available");
                assert!(created.insert(id), "one id created twice");
            }
            409 => {
                assert_eq!(b["error"]["code"], "duplicate", "{b}");
                conflicts += 1;
            }
            other => panic!("enqueue answered {other}: {b}"),
        }
    }
    assert_eq!(
        (created.len(), conflicts),
        (62, 2),
        "a duplicate fails only its own request"
    );
    created.insert(existing);
    // Every created job is there once, in priority order, FIFO within a priority.
    let got = s.fetch(&[q], 100).await;
    let ids: std::collections::HashSet<String> = got
        .iter()
        .map(|j| j["id"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!((got.len(), ids), (63, created));
    let pris: Vec<i64> = got.iter().map(|j| j["priority"].as_i64().unwrap_or(-1)).collect();
    assert!(pris.windows(2).all(|w| w[0] <= w[1]), "{pris:?}");
    s.assert_invariants().await;
}

/// Enqueues `n` jobs into `queue` in one batch (one script call); returns their ids in order.
async fn batch_into(s: &TestServer, queue: &str, n: usize) -> Vec<String> {
    let jobs: Vec<_> = (0..n)
        .map(|i| json!({"type": "a", "args": [i], "options": {"queue": queue}}))
        .collect();
    let (st, b) = s.post("/ojs/v1/jobs/batch", json!({ "jobs": jobs })).await;
    assert_eq!(st, 201, "{b}");
    b["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["id"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// How many entries the namespace's event stream holds.
async fn stream_len(s: &TestServer) -> i64 {
    let mut r = s.redis().await;
    redis::cmd("XLEN")
        .arg(s.keys().events())
        .query_async(&mut r)
        .await
        .expect("XLEN")
}

/// The jobs (`subject`) of a `GET /events` answer's events, in order.
fn subjects(b: &serde_json::Value) -> Vec<String> {
    b["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["subject"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn one_call_writes_one_stream_entry_and_cursors_resume_inside_it() {
    let s = TestServer::start().await;
    let ids = batch_into(&s, "evb", 5).await;
    // The batch is one script call: its five events are one stream entry (one XADD).
    assert_eq!(stream_len(&s).await, 1, "one entry for the batch's events");
    // The API still shows one event per job, each with its own id, in order.
    let (st, b) = s.get("/ojs/v1/events?queue=evb").await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(subjects(&b), ids);
    let eids: Vec<String> = b["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["id"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        eids[1..]
            .iter()
            .enumerate()
            .all(|(k, id)| *id == format!("{}.{}", eids[0], k + 1)),
        "event ids: {eids:?}"
    );
    // A cursor inside the entry resumes after it, not after the whole entry.
    let (st, b) = s.get(&format!("/ojs/v1/events?queue=evb&after={}", eids[1])).await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(subjects(&b), ids[2..]);
    assert_eq!(b["next_cursor"], eids[4].as_str());
    // And a malformed cursor is a 400 naming the form.
    let (st, b) = s.get("/ojs/v1/events?after=1-2.x").await;
    assert_eq!(st, 400, "{b}");
}

#[tokio::test]
async fn the_events_of_a_big_batch_page_through_the_api_in_order_without_repeats() {
    let s = TestServer::start().await;
    // 1,200 jobs in one call: three stream entries (500 events each at most, lua/includes/emit.lua).
    let want = batch_into(&s, "evbig", 1200).await;
    assert_eq!(stream_len(&s).await, 3);
    let mut got = Vec::new();
    let mut cursor = "0-0".to_string();
    for _ in 0..10 {
        let (st, b) = s
            .get(&format!("/ojs/v1/events?queue=evbig&limit=333&after={cursor}"))
            .await;
        assert_eq!(st, 200, "{b}");
        let page = subjects(&b);
        if page.is_empty() {
            break;
        }
        got.extend(page);
        cursor = b["next_cursor"].as_str().expect("cursor").to_string();
    }
    assert_eq!(
        got, want,
        "every event once, in order, across pages that end inside entries"
    );
    // The newest events, newest first, cross entries too.
    let (_, b) = s.get("/ojs/v1/events?queue=evbig&limit=600").await;
    assert_eq!(
        subjects(&b),
        want[600..],
        "the newest 600, oldest first as the list answers"
    );
}
