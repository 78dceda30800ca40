//! The official OJS SDKs against this server, on the wire: each test replays the request bodies an SDK
//! sends (written here from reading its source; the file is cited at each body, SDK versions as of
//! the 0.4 releases, April 2026) and asserts the fields that SDK parses from our answers.
//! No SDK code is copied; these are the bodies as they appear on the wire.

use std::time::Duration;

use ojs_testkit::TestServer;
use serde_json::{json, Value};

async fn enqueue_in(s: &TestServer, queue: &str) -> String {
    s.enqueue(json!({"type": "sdk.test", "args": [{"n": 1}], "options": {"queue": queue}}))
        .await
}

/// The message of an OJS error answer, for asserting that it names the fields.
fn message(b: &Value) -> String {
    b["error"]["message"].as_str().unwrap_or_default().to_string()
}

// ---- FETCH ------------------------------------------------------------------------------------------

#[tokio::test]
async fn every_sdk_fetch_body_claims_and_returns_what_the_sdk_reads() {
    let s = TestServer::start().await;
    let bodies: Vec<(&str, Value)> = vec![
        // JavaScript: src/worker.ts poll() (visibility_timeout_ms is left out when unset).
        (
            "js",
            json!({"queues": ["f-js"], "count": 2, "worker_id": "w-js", "visibility_timeout_ms": 30000}),
        ),
        // Python: src/ojs/transport/http.py fetch().
        (
            "py",
            json!({"queues": ["f-py"], "count": 2, "visibility_timeout_ms": 30000, "worker_id": "w-py"}),
        ),
        // Go: worker.go fetchJobs (queues, count, worker_id).
        ("go", json!({"queues": ["f-go"], "count": 2, "worker_id": "w-go"})),
        // Rust: src/job.rs FetchRequest (None fields are skipped).
        ("rust", json!({"queues": ["f-rust"], "count": 2, "worker_id": "w-rust"})),
        // Java: OJSWorker.java fetch (worker_id, queues, count).
        ("java", json!({"worker_id": "w-java", "queues": ["f-java"], "count": 2})),
        // Ruby: lib/ojs/worker.rb fetch_jobs sends batch_size, not count, and no worker_id.
        ("ruby", json!({"queues": ["f-ruby"], "batch_size": 2})),
    ];
    for (sdk, body) in bodies {
        let queue = body["queues"][0].as_str().unwrap_or_default().to_string();
        let ids = [
            enqueue_in(&s, &queue).await,
            enqueue_in(&s, &queue).await,
            enqueue_in(&s, &queue).await,
        ];
        let (st, b) = s.post("/ojs/v1/workers/fetch", body).await;
        assert_eq!(st, 200, "{sdk}: {b}");
        let jobs = b["jobs"].as_array().cloned().unwrap_or_default();
        assert_eq!(jobs.len(), 2, "{sdk}: count (or batch_size) 2 claims two: {b}");
        for j in &jobs {
            // What the SDKs' Job types read from a fetched job.
            assert!(
                ids.contains(&j["id"].as_str().unwrap_or_default().to_string()),
                "{sdk}: {j}"
            );
            assert_eq!(j["type"], "sdk.test", "{sdk}: {j}");
            assert_eq!(j["queue"], queue.as_str(), "{sdk}: {j}");
            assert_eq!(j["args"], json!([{"n": 1}]), "{sdk}: {j}");
            assert_eq!(j["state"], "active", "{sdk}: {j}");
            assert_eq!(j["attempt"], 1, "{sdk}: {j}");
            assert!(j["lease_id"].is_string(), "{sdk}: {j}");
        }
    }
    s.assert_invariants().await;
}

#[tokio::test]
async fn batch_size_is_an_alias_of_count_and_a_disagreement_is_refused() {
    let s = TestServer::start().await;
    for _ in 0..3 {
        enqueue_in(&s, "alias").await;
    }
    let (st, b) = s
        .post(
            "/ojs/v1/workers/fetch",
            json!({"queues": ["alias"], "count": 2, "batch_size": 2}),
        )
        .await;
    assert_eq!((st, b["jobs"].as_array().map(Vec::len)), (200, Some(2)), "{b}");
    let (st, b) = s
        .post(
            "/ojs/v1/workers/fetch",
            json!({"queues": ["alias"], "count": 1, "batch_size": 3}),
        )
        .await;
    assert_eq!((st, b["error"]["code"].as_str()), (400, Some("invalid_request")), "{b}");
    assert!(
        message(&b).contains("count") && message(&b).contains("batch_size"),
        "{b}"
    );
    let (st, b) = s
        .post("/ojs/v1/workers/fetch", json!({"queues": ["alias"], "batch_size": 0}))
        .await;
    assert_eq!(st, 400, "{b}");
    assert!(message(&b).contains("batch_size"), "{b}");
    // The refused fetches claimed nothing: the third job is still there.
    assert_eq!(s.fetch(&["alias"], 5).await.len(), 1);
}

// ---- ACK and NACK -----------------------------------------------------------------------------------

#[tokio::test]
async fn every_sdk_ack_body_completes_the_job_with_its_result() {
    let s = TestServer::start().await;
    // JS src/worker.ts ack, Python http.py ack, Go worker.go ackJob, Rust job.rs AckRequest, Java
    // OJSWorker.java ack, Ruby worker.rb ack_job: all `{job_id, result?}`.
    for (sdk, result) in [
        ("js", Some(json!({"sent": true}))),
        ("py", Some(json!([1, 2]))),
        ("go", None),
        ("ruby", Some(json!("done"))),
    ] {
        let id = enqueue_in(&s, "ack").await;
        assert_eq!(s.fetch(&["ack"], 1).await.len(), 1);
        let mut body = json!({"job_id": id});
        if let Some(r) = &result {
            body["result"] = r.clone();
        }
        let (st, b) = s.post("/ojs/v1/workers/ack", body).await;
        assert_eq!(st, 200, "{sdk}: {b}");
        assert_eq!(b["state"], "completed", "{sdk}: {b}");
        let job = s.wait_state(&id, "completed", Duration::from_secs(1)).await;
        assert_eq!(job.get("result"), result.as_ref(), "{sdk}: {job}");
    }
}

#[tokio::test]
async fn every_sdk_nack_error_shape_is_accepted_and_stored() {
    let s = TestServer::start().await;
    let shapes: Vec<(&str, Value)> = vec![
        // JavaScript: src/worker.ts processJob's catch (code, message, retryable, details.stack).
        (
            "js",
            json!({"code": "handler_error", "message": "boom", "retryable": true,
                   "details": {"stack": "Error: boom\n    at handler (worker.js:1:1)"}}),
        ),
        // Ruby 0.4: lib/ojs/worker.rb error_to_hash (details.error_class, details.backtrace).
        (
            "ruby",
            json!({"code": "handler_error", "message": "boom", "retryable": true,
                   "details": {"error_class": "RuntimeError", "backtrace": ["app.rb:3:in `perform'"]}}),
        ),
        // Ruby before 0.4 (lib/ojs/worker.rb error_to_hash until commit e05f628): type, message,
        // backtrace; no code, no retryable.
        (
            "ruby-0.3",
            json!({"type": "RuntimeError", "message": "boom", "backtrace": ["app.rb:3:in `perform'"]}),
        ),
        // Python: src/ojs/worker.py (details.traceback).
        (
            "py",
            json!({"code": "handler_error", "message": "boom", "retryable": true,
                   "details": {"traceback": "Traceback (most recent call last):\n..."}}),
        ),
        // Go: worker.go nackJob (code, message, retryable).
        (
            "go",
            json!({"code": "handler_error", "message": "boom", "retryable": true}),
        ),
        // Rust: src/job.rs NackError (details skipped when None).
        (
            "rust",
            json!({"code": "handler_error", "message": "boom", "retryable": true}),
        ),
        // Java: OJSWorker.java nack (details.error_class).
        (
            "java",
            json!({"code": "handler_error", "message": "boom", "retryable": true,
                   "details": {"error_class": "IllegalStateException"}}),
        ),
    ];
    for (sdk, error) in shapes {
        let queue = format!("nack-{sdk}");
        let id = enqueue_in(&s, &queue).await;
        s.fetch(&[queue.as_str()], 1).await;
        let (st, b) = s
            .post("/ojs/v1/workers/nack", json!({"job_id": id, "error": error}))
            .await;
        assert_eq!(st, 200, "{sdk}: {b}");
        // The SDKs read nothing but the status; the job goes through the retry policy.
        assert_eq!(b["state"], "retryable", "{sdk}: {b}");
        let (_, got) = s.get(&format!("/ojs/v1/jobs/{id}")).await;
        let stored = &got["job"]["error"];
        assert_eq!(stored["message"], "boom", "{sdk}: {got}");
        for field in ["code", "type", "details", "backtrace"] {
            if let Some(v) = error.get(field) {
                assert_eq!(&stored[field], v, "{sdk}: {field} is stored as sent: {got}");
            }
        }
        let expected_type = error.get("type").or_else(|| error.get("code")).cloned();
        assert_eq!(stored.get("type").cloned(), expected_type, "{sdk}: {got}");
        assert_eq!(got["job"]["errors"].as_array().map(Vec::len), Some(1), "{sdk}: {got}");
    }
    s.assert_invariants().await;
}

#[tokio::test]
async fn a_handler_not_found_nack_is_not_retried() {
    let s = TestServer::start().await;
    // JS src/worker.ts, Ruby worker.rb process_job, Python worker.py: no handler for the type.
    let id = enqueue_in(&s, "nohandler").await;
    s.fetch(&["nohandler"], 1).await;
    let (st, b) = s
        .post(
            "/ojs/v1/workers/nack",
            json!({"job_id": id, "error": {"code": "handler_not_found",
                   "message": "No handler registered for job type 'sdk.test'.", "retryable": false}}),
        )
        .await;
    assert_eq!((st, b["state"].as_str()), (200, Some("discarded")), "{b}");
    let job = s.wait_state(&id, "discarded", Duration::from_secs(1)).await;
    assert_eq!(job["error"]["code"], "handler_not_found", "{job}");
}

// ---- the client path: enqueue, get, cancel ----------------------------------------------------------

#[tokio::test]
async fn every_sdk_client_reads_the_job_it_enqueued_fetched_and_cancelled() {
    let s = TestServer::start().await;
    // JavaScript src/client.ts enqueue (type, args, meta, options from src/job.ts toWireOptions), reading
    // `job` from POST /jobs, GET /jobs/{id} and DELETE /jobs/{id}; Python http.py push/info/cancel
    // (`data["job"]`), Go client.go (`json:"job"`), Java OJSClient.java (`job` when present).
    let (st, b) = s
        .post(
            "/ojs/v1/jobs",
            json!({"type": "email.send", "args": ["ada@example.com"], "meta": {"trace": "t1"},
                   "options": {"queue": "client", "tags": ["a"], "timeout_ms": 5000,
                               "retry": {"max_attempts": 5}}}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let id = b["job"]["id"].as_str().expect("job.id").to_string();
    assert_eq!(
        (
            b["job"]["type"].as_str(),
            b["job"]["queue"].as_str(),
            b["job"]["state"].as_str()
        ),
        (Some("email.send"), Some("client"), Some("available")),
        "{b}"
    );
    let (st, b) = s.get(&format!("/ojs/v1/jobs/{id}")).await;
    assert_eq!((st, b["job"]["id"].as_str()), (200, Some(id.as_str())), "{b}");
    assert_eq!(b["job"]["args"], json!(["ada@example.com"]), "{b}");
    assert_eq!(b["job"]["meta"], json!({"trace": "t1"}), "{b}");
    let (st, b) = s.delete(&format!("/ojs/v1/jobs/{id}")).await;
    assert_eq!((st, b["job"]["state"].as_str()), (200, Some("cancelled")), "{b}");
    // Batch: JS src/client.ts enqueueBatch reads `jobs`.
    let (st, b) = s
        .post(
            "/ojs/v1/jobs/batch",
            json!({"jobs": [{"type": "a", "args": [], "options": {"queue": "client"}},
                            {"type": "b", "args": [1]}]}),
        )
        .await;
    assert_eq!((st, b["jobs"].as_array().map(Vec::len)), (201, Some(2)), "{b}");
}

// ---- queue stats ------------------------------------------------------------------------------------

async fn stats_fixture(s: &TestServer) -> Value {
    for _ in 0..3 {
        enqueue_in(s, "qs").await;
    }
    let j = s.fetch(&["qs"], 1).await.remove(0);
    assert_eq!(s.ack(j["id"].as_str().unwrap_or_default()).await.0, 200);
    s.fetch(&["qs"], 1).await;
    let (st, b) = s.get("/ojs/v1/queues/qs/stats").await;
    assert_eq!(st, 200, "{b}");
    b
}

#[tokio::test]
async fn queue_stats_read_as_the_conformance_suite_and_every_sdk_reads_them() {
    let s = TestServer::start().await;
    let b = stats_fixture(&s).await;
    // The conformance suite (level-4-advanced/queue-ops/queue-stats.json) and the OpenAPI document's
    // QueueStatsResponse: `queue` is an object.
    assert_eq!(b["queue"]["name"], "qs", "{b}");
    assert_eq!(
        (
            &b["queue"]["available"],
            &b["queue"]["active"],
            &b["queue"]["completed"]
        ),
        (&json!(1), &json!(1), &json!(1)),
        "{b}"
    );
    // JavaScript src/queue.ts stats(): the body itself is a QueueStats.
    assert_eq!(b["name"], "qs", "{b}");
    assert_eq!(
        (&b["available"], &b["active"], &b["completed"]),
        (&json!(1), &json!(1), &json!(1)),
        "{b}"
    );
    assert_eq!(
        (&b["paused"], &b["scheduled"], &b["discarded"]),
        (&json!(false), &json!(0), &json!(0)),
        "{b}"
    );
    // Ruby lib/ojs/queue.rb QueueStats.from_hash: depth, active, paused.
    assert_eq!((&b["depth"], &b["paused"]), (&json!(1), &json!(false)), "{b}");
    // Python src/ojs/queue.py QueueStats.from_dict, Go queue.go GetQueueStats, Rust src/queue.rs
    // QueueStats: status, stats.{available, active, scheduled, discarded}, computed_at.
    assert_eq!(b["status"], "active", "{b}");
    assert_eq!(
        (&b["stats"]["available"], &b["stats"]["active"]),
        (&json!(1), &json!(1)),
        "{b}"
    );
    assert!(
        ojs_core::clock::parse_ms(b["computed_at"].as_str().unwrap_or_default()).is_some(),
        "{b}"
    );
    // Paused shows in every reading.
    let (st, _) = s.post("/ojs/v1/queues/qs/pause", json!({})).await;
    assert_eq!(st, 200);
    let (_, b) = s.get("/ojs/v1/queues/qs/stats").await;
    assert_eq!(
        (&b["paused"], &b["queue"]["paused"], &b["status"]),
        (&json!(true), &json!(true), &json!("paused")),
        "{b}"
    );
}

#[tokio::test]
async fn queue_stats_with_the_queue_as_a_name_decode_as_go_and_rust_do() {
    let s = TestServer::start_with(|c| c.queue_stats_queue = ojs_server::config::QueueStatsQueue::Name).await;
    let b = stats_fixture(&s).await;
    // Go queue.go and Rust src/queue.rs decode `queue` into a string (an object fails the whole call);
    // Rust also requires status, stats and computed_at.
    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct RustSdkStats {
        queue: String,
        status: String,
        stats: RustSdkMetrics,
        computed_at: String,
    }
    #[derive(serde::Deserialize)]
    struct RustSdkMetrics {
        available: u64,
        active: u64,
    }
    let decoded: RustSdkStats = serde_json::from_value(b.clone()).expect("decodes as the Rust SDK's QueueStats");
    assert_eq!(
        (decoded.queue.as_str(), decoded.stats.available, decoded.stats.active),
        ("qs", 1, 1),
        "{b}"
    );
    // The flat fields stay for JavaScript and Ruby.
    assert_eq!(
        (&b["name"], &b["available"], &b["depth"]),
        (&json!("qs"), &json!(1), &json!(1)),
        "{b}"
    );
}

// ---- live events: the SDKs' `channel` -----------------------------------------------------------------

async fn read_sse_until(resp: &mut reqwest::Response, needle: &str) -> String {
    let mut text = String::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !text.contains(needle) && std::time::Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_millis(500), resp.chunk()).await {
            Ok(Ok(Some(bytes))) => text.push_str(&String::from_utf8_lossy(&bytes)),
            Ok(_) => break,
            Err(_) => {}
        }
    }
    text
}

#[tokio::test]
async fn subscribe_job_and_subscribe_queue_channels_filter_the_stream() {
    let s = TestServer::start().await;
    let id = enqueue_in(&s, "ch").await;
    let other = enqueue_in(&s, "ch").await;
    // JavaScript src/subscribe.ts subscribeJob: `?channel=` + encodeURIComponent("job:<id>").
    let mut job_stream = s
        .http
        .get(s.url(&format!("/ojs/v1/events/stream?channel=job%3A{id}")))
        .header("accept", "text/event-stream")
        .send()
        .await
        .expect("connect");
    assert_eq!(job_stream.status(), 200);
    // Python src/ojs/subscribe.py subscribe_queue: the channel is not encoded.
    let mut queue_stream = s
        .http
        .get(s.url("/ojs/v1/events/stream?channel=queue:ch"))
        .send()
        .await
        .expect("connect");
    assert_eq!(queue_stream.status(), 200);
    let elsewhere = enqueue_in(&s, "not-ch").await;
    // Claim both jobs of ch, then complete ours (and the other one, later).
    let claimed = s.fetch(&["ch"], 2).await;
    assert_eq!(claimed.len(), 2);
    assert_eq!(s.ack(&other).await.0, 200);
    assert_eq!(s.ack(&id).await.0, 200);

    let text = read_sse_until(&mut job_stream, "event: job.completed").await;
    assert!(
        text.contains("event: job.started") && text.contains("event: job.completed"),
        "{text}"
    );
    let datas: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect();
    assert!(!datas.is_empty(), "{text}");
    for d in &datas {
        // What JavaScript's handler gets as `event.data`: the event, with the job in data.job_id.
        assert_eq!(d["data"]["job_id"], id.as_str(), "only the subscribed job: {d}");
    }
    let text = read_sse_until(&mut queue_stream, &id).await;
    let text = format!(
        "{text}{}",
        read_sse_until(&mut queue_stream, "event: job.completed").await
    );
    assert!(text.contains(&other) && text.contains(&id), "{text}");
    assert!(!text.contains(&elsewhere), "only the subscribed queue: {text}");

    // The same filter on the polled list.
    let (st, b) = s.get(&format!("/ojs/v1/events?channel=job:{id}")).await;
    assert_eq!(st, 200, "{b}");
    let events = b["events"].as_array().cloned().unwrap_or_default();
    assert!(events.len() >= 3, "enqueued, started, completed: {b}");
    assert!(events.iter().all(|e| e["data"]["job_id"] == id.as_str()), "{b}");
}

#[tokio::test]
async fn a_malformed_channel_is_refused_naming_the_field() {
    let s = TestServer::start().await;
    let id = enqueue_in(&s, "ch2").await;
    for path in [
        "/ojs/v1/events/stream?channel=job",
        "/ojs/v1/events/stream?channel=job:",
        "/ojs/v1/events/stream?channel=job:not-a-job-id",
        "/ojs/v1/events/stream?channel=queue:",
        "/ojs/v1/events/stream?channel=queue:a%7Bb%7D",
        "/ojs/v1/events/stream?channel=worker:w1",
        "/ojs/v1/events?channel=tenant:x",
        "/ojs/v1/events/stream?channel=queue:ch2&queues=ch2",
    ] {
        let (st, b) = s.get(path).await;
        assert_eq!(
            (st, b["error"]["code"].as_str()),
            (400, Some("invalid_request")),
            "{path}: {b}"
        );
        assert!(message(&b).contains("channel"), "{path}: {b}");
    }
    let other = uuid_like_other(&id);
    let (st, b) = s.get(&format!("/ojs/v1/events?channel=job:{id}&job_id={other}")).await;
    assert_eq!(st, 400, "{b}");
    assert!(message(&b).contains("job_id"), "{b}");
}

/// Another well-formed job id than `id` (its last hex digit changed).
fn uuid_like_other(id: &str) -> String {
    let mut s = id.to_string();
    let last = if s.ends_with('0') { '1' } else { '0' };
    s.pop();
    s.push(last);
    s
}

// ---- Content-Type -------------------------------------------------------------------------------------

#[tokio::test]
async fn the_response_content_type_is_the_ojs_one_unless_configured_for_python() {
    let content_type = |r: &reqwest::Response| {
        r.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let s = TestServer::start().await;
    let r = s.http.get(s.url("/ojs/v1/queues")).send().await.expect("request");
    assert_eq!(content_type(&r), "application/openjobspec+json");

    let s = TestServer::start_with(|c| c.response_content_type = ojs_server::config::ResponseContentType::Json).await;
    // Python src/ojs/transport/http.py _do_request: a 2xx reply is parsed only when its Content-Type
    // contains application/json.
    let r = s
        .http
        .post(s.url("/ojs/v1/jobs"))
        .header("content-type", "application/openjobspec+json")
        .body(r#"{"type":"py.job","args":[1]}"#)
        .send()
        .await
        .expect("request");
    assert_eq!(
        (r.status().as_u16(), content_type(&r)),
        (201, "application/json".to_string())
    );
    let body: Value = r.json().await.expect("json");
    assert!(body["job"]["id"].is_string(), "{body}");
    // Errors too (the SDK parses error bodies whatever their type, but one media type is simpler).
    let r = s.http.get(s.url("/ojs/v1/jobs/nope")).send().await.expect("request");
    assert_eq!(content_type(&r), "application/json");
    // The event stream keeps its own type.
    let r = s
        .http
        .get(s.url("/ojs/v1/events/stream"))
        .send()
        .await
        .expect("request");
    assert!(
        content_type(&r).starts_with("text/event-stream"),
        "{}",
        content_type(&r)
    );
}

#[test]
fn the_content_type_setting_parses_from_flags_and_names() {
    use clap::Parser;
    use ojs_server::config::{Config, ResponseContentType};
    for (arg, want) in [
        ("application/json", ResponseContentType::Json),
        ("json", ResponseContentType::Json),
        ("application/openjobspec+json", ResponseContentType::Ojs),
        ("ojs", ResponseContentType::Ojs),
    ] {
        let c = Config::try_parse_from(["ojs-server", "--response-content-type", arg]).expect(arg);
        assert_eq!(c.response_content_type, want, "{arg}");
    }
    assert!(Config::try_parse_from(["ojs-server", "--response-content-type", "text/plain"]).is_err());
    let c = Config::try_parse_from(["ojs-server"]).expect("defaults");
    assert_eq!(c.response_content_type, ResponseContentType::Ojs);
}
