//! `GET /jobs/{id}/explain` ("why is this job waiting?"): one test per gate. Each sets the gate up
//! through the API, asks, and checks that the answer names the gate, its holders or counters, and for
//! a timed gate an earliest time within 100 ms of the one the setup implies (read from the job or the
//! answer that set it up, both on Redis' clock). The rules themselves are FETCH's (lua/includes/gates.lua,
//! tenant.lua, and the verdict on a popped job, verdict.lua), so each test also checks that FETCH agrees:
//! nothing is claimed while a gate says so (and `explain_and_the_next_fetch_agree_at_every_gate` checks
//! every gate at once).

use ojs_core::clock::parse_ms;
use ojs_testkit::TestServer;
use reqwest::Method;
use serde_json::{json, Value};

async fn explain(s: &TestServer, id: &str) -> Value {
    let (st, b) = s.get(&format!("/ojs/v1/jobs/{id}/explain")).await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["job_id"], id, "{b}");
    b
}

/// The gate named `name` in an answer (panics, showing the answer, when it has none).
fn gate<'a>(b: &'a Value, name: &str) -> &'a Value {
    b["gates"]
        .as_array()
        .and_then(|g| g.iter().find(|g| g["gate"] == name))
        .unwrap_or_else(|| panic!("no {name} gate in {b}"))
}

fn gate_names(b: &Value) -> Vec<String> {
    b["gates"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g["gate"].as_str().map(str::to_owned))
        .collect()
}

/// A time of the API (RFC 3339) in ms.
fn ms(v: &Value) -> i64 {
    parse_ms(v.as_str().unwrap_or_else(|| panic!("not a time: {v}"))).expect("RFC 3339")
}

/// `until_ms` is within 100 ms of `expected`, and `until` says the same time.
fn assert_until(g: &Value, expected: i64) {
    let until = g["until_ms"].as_i64().unwrap_or_else(|| panic!("no until_ms: {g}"));
    assert!(
        (until - expected).abs() <= 100,
        "until_ms {until} is not within 100 ms of {expected}: {g}"
    );
    assert_eq!(ms(&g["until"]), until, "{g}");
}

async fn fetch_one(s: &TestServer, queue: &str) -> Value {
    let (st, b) = s
        .post(
            "/ojs/v1/workers/fetch",
            json!({"queues": [queue], "worker_id": "w-explain", "visibility_timeout_ms": 60000}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    b["jobs"][0].clone()
}

async fn hlen(s: &TestServer, key: &str) -> i64 {
    let mut r = s.redis().await;
    redis::cmd("HLEN").arg(key).query_async(&mut r).await.expect("HLEN")
}

#[tokio::test]
async fn an_unknown_job_and_another_tenants_job_are_not_found() {
    let s = TestServer::start().await;
    let (st, b) = s.get("/ojs/v1/jobs/019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f/explain").await;
    assert_eq!(st, 404, "{b}");
    assert_eq!(b["error"]["code"], "not_found", "{b}");
    let (st, b) = s
        .send_as(
            Method::POST,
            "/ojs/v1/jobs",
            "acme",
            Some(json!({"type": "t", "args": [], "queue": "ex-tenant"})),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let id = b["job"]["id"].as_str().expect("id").to_string();
    let path = format!("/ojs/v1/jobs/{id}/explain");
    let (st, b) = s.send_as(Method::GET, &path, "other", None).await;
    assert_eq!(st, 404, "another tenant's job is not revealed: {b}");
    assert_eq!(b["error"]["code"], "not_found", "{b}");
    let (st, b) = s.send_as(Method::GET, &path, "acme", None).await;
    assert_eq!((st, b["state"].as_str()), (200, Some("available")), "{b}");
}

#[tokio::test]
async fn a_ready_job_at_the_head_is_held_by_nothing_and_one_behind_it_by_its_order() {
    let s = TestServer::start().await;
    let q = "ex-order";
    let ids: Vec<String> = enqueue_n(&s, q, 3).await;
    let first = explain(&s, &ids[0]).await;
    assert_eq!(first["waiting"], true, "{first}");
    assert_eq!(first["gates"], json!([]), "{first}");
    assert_eq!(first["runnable_at"], first["computed_at"], "{first}");
    let third = explain(&s, &ids[2]).await;
    let g = gate(&third, "order");
    assert_eq!(g["ahead"], 2, "{third}");
    assert_eq!(g["until"], Value::Null, "{third}");
    // FETCH agrees: the head is claimed first.
    assert_eq!(fetch_one(&s, q).await["id"], ids[0].as_str());
    assert_eq!(gate(&explain(&s, &ids[2]).await, "order")["ahead"], 1);
}

async fn enqueue_n(s: &TestServer, queue: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(s.enqueue(json!({"type": "t", "args": [i], "queue": queue})).await);
    }
    ids
}

#[tokio::test]
async fn an_active_or_ended_job_is_not_waiting() {
    let s = TestServer::start().await;
    let id = s.enqueue(json!({"type": "t", "args": [], "queue": "ex-active"})).await;
    let claimed = fetch_one(&s, "ex-active").await;
    assert_eq!(claimed["id"], id.as_str());
    let b = explain(&s, &id).await;
    assert_eq!(
        (b["state"].as_str(), b["waiting"].as_bool()),
        (Some("active"), Some(false)),
        "{b}"
    );
    assert_eq!(b["gates"], json!([]), "{b}");
    assert_eq!(b["running_since"], claimed["started_at"], "{b}");
    assert_eq!(b["runnable_at"], Value::Null, "{b}");
    assert!(b["detail"].as_str().unwrap_or("").contains("w-explain"), "{b}");
    assert_eq!(s.ack(&id).await.0, 200);
    let b = explain(&s, &id).await;
    assert_eq!(
        (b["state"].as_str(), b["waiting"].as_bool()),
        (Some("completed"), Some(false)),
        "{b}"
    );
    assert!(b.get("running_since").is_none(), "{b}");
}

#[tokio::test]
async fn a_scheduled_job_waits_for_its_time() {
    let s = TestServer::start().await;
    let (st, b) = s
        .post(
            "/ojs/v1/jobs",
            json!({"type": "t", "args": [], "queue": "ex-sched", "scheduled_at": "+PT60S"}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let id = b["job"]["id"].as_str().expect("id");
    let at = ms(&b["job"]["scheduled_at"]);
    let e = explain(&s, id).await;
    assert_eq!(
        (e["state"].as_str(), e["waiting"].as_bool()),
        (Some("scheduled"), Some(true)),
        "{e}"
    );
    assert_until(gate(&e, "scheduled"), at);
    assert_eq!(e["runnable_at_ms"], gate(&e, "scheduled")["until_ms"], "{e}");
    assert!(s.fetch(&["ex-sched"], 1).await.is_empty());
}

#[tokio::test]
async fn a_retryable_job_waits_for_its_retry() {
    let s = TestServer::start().await;
    let id = s
        .enqueue(json!({"type": "t", "args": [], "queue": "ex-retry",
            "options": {"retry": {"max_attempts": 3, "initial_interval": "PT30S", "jitter": false}}}))
        .await;
    fetch_one(&s, "ex-retry").await;
    let (st, b) = s
        .post(
            "/ojs/v1/workers/nack",
            json!({"job_id": id, "error": {"type": "Boom", "message": "x", "retryable": true}}),
        )
        .await;
    assert_eq!((st, b["state"].as_str()), (200, Some("retryable")), "{b}");
    let job = s.get(&format!("/ojs/v1/jobs/{id}")).await.1;
    let e = explain(&s, &id).await;
    let g = gate(&e, "scheduled");
    assert_until(g, ms(&job["job"]["scheduled_at"]));
    assert!(g["detail"].as_str().unwrap_or("").contains("retry"), "{g}");
}

#[tokio::test]
async fn a_paused_queue_holds_its_jobs_with_the_jobs_ahead_counted() {
    let s = TestServer::start().await;
    let q = "ex-paused";
    let ids = enqueue_n(&s, q, 2).await;
    let (st, b) = s.post(&format!("/ojs/v1/queues/{q}/pause"), json!({})).await;
    assert_eq!(st, 200, "{b}");
    let e = explain(&s, &ids[1]).await;
    let g = gate(&e, "paused");
    assert_eq!((g["ahead"].as_i64(), &g["until"]), (Some(1), &Value::Null), "{e}");
    assert_eq!(e["runnable_at"], Value::Null, "a pause has no known end: {e}");
    assert!(s.fetch(&[q], 1).await.is_empty(), "FETCH agrees");
    s.post(&format!("/ojs/v1/queues/{q}/resume"), json!({})).await;
    assert!(!gate_names(&explain(&s, &ids[1]).await).contains(&"paused".to_string()));
}

#[tokio::test]
async fn a_key_at_its_concurrency_names_the_holders_and_the_earliest_lease_deadline() {
    let s = TestServer::start().await;
    let q = "ex-conc";
    let job = json!({"type": "t", "args": [], "queue": q, "rate_limit": {"key": "ex-conc-key", "concurrency": 1}});
    let first = s.enqueue(job.clone()).await;
    let second = s.enqueue(job).await;
    let held = fetch_one(&s, q).await;
    assert_eq!(held["id"], first.as_str());
    let e = explain(&s, &second).await;
    let g = gate(&e, "concurrency");
    assert_eq!(g["key"], "ex-conc-key", "{e}");
    assert_eq!((g["limit"].as_i64(), g["current"].as_i64()), (Some(1), Some(1)), "{e}");
    assert_eq!(g["holders"], json!([first]), "{e}");
    assert_eq!(g["ahead"], 0, "{e}");
    assert_until(g, ms(&held["visibility_deadline"]));
    // Asking changes nothing: the lane is not parked (FETCH parks it when it meets the limit).
    let parked = s.keys().queue_parked(q);
    assert_eq!(hlen(&s, &parked).await, 0, "explain parks no lane");
    assert!(fetch_one(&s, q).await.is_null(), "FETCH agrees");
    assert_eq!(hlen(&s, &parked).await, 1, "FETCH parked the lane");
    assert_eq!(
        gate(&explain(&s, &second).await, "concurrency")["holders"],
        json!([first])
    );
    assert_eq!(s.ack(&first).await.0, 200);
    assert!(!gate_names(&explain(&s, &second).await).contains(&"concurrency".to_string()));
    s.assert_invariants().await;
}

#[tokio::test]
async fn a_full_window_says_when_the_next_start_is_allowed() {
    let s = TestServer::start().await;
    let q = "ex-rate";
    let job = json!({"type": "t", "args": [], "queue": q,
        "rate_limit": {"key": "ex-rate-key", "rate": {"limit": 1, "period": "PT10S"}}});
    s.enqueue(job.clone()).await;
    let second = s.enqueue(job.clone()).await;
    let third = s.enqueue(job).await;
    let started = ms(&fetch_one(&s, q).await["started_at"]);
    let e = explain(&s, &second).await;
    let g = gate(&e, "rate");
    assert_eq!((g["limit"].as_i64(), g["current"].as_i64()), (Some(1), Some(1)), "{e}");
    assert_until(g, started + 10_000);
    assert_eq!(e["runnable_at_ms"], g["until_ms"], "{e}");
    assert!(fetch_one(&s, q).await.is_null(), "FETCH agrees");
    // The third waits behind the second in the key's lane.
    assert_eq!(gate(&explain(&s, &third).await, "rate")["ahead"], 1);
}

/// Costs: the window gate counts units, and an ACK's `cost_used` that frees enough lets the job run.
#[tokio::test]
async fn a_window_of_units_names_the_units_used_and_frees_with_cost_used() {
    let s = TestServer::start().await;
    let q = "ex-units";
    let job = json!({"type": "t", "args": [], "queue": q,
        "rate_limit": {"key": "ex-units-key", "rate": {"limit": 1000, "period": "PT10S"}, "cost": 600}});
    s.enqueue(job.clone()).await;
    let second = s.enqueue(job).await;
    let first = fetch_one(&s, q).await;
    let started = ms(&first["started_at"]);
    let e = explain(&s, &second).await;
    let g = gate(&e, "rate");
    assert_eq!(
        (g["limit"].as_i64(), g["current"].as_i64()),
        (Some(1000), Some(600)),
        "{e}"
    );
    assert_until(g, started + 10_000);
    let id = first["id"].as_str().unwrap_or_default();
    let (st, b) = s
        .post("/ojs/v1/workers/ack", json!({"job_id": id, "cost_used": 300}))
        .await;
    assert_eq!(st, 200, "{b}");
    let e = explain(&s, &second).await;
    assert!(
        e["gates"].as_array().into_iter().flatten().all(|g| g["gate"] != "rate"),
        "{e}"
    );
    assert_eq!(fetch_one(&s, q).await["id"], second.as_str(), "FETCH agrees");
}

#[tokio::test]
async fn a_throttle_says_when_its_next_start_is_allowed() {
    let s = TestServer::start().await;
    let q = "ex-throttle";
    let job = json!({"type": "t", "args": [], "queue": q,
        "rate_limit": {"key": "ex-throttle-key", "throttle": {"limit": 1, "period": "PT10S"}}});
    s.enqueue(job.clone()).await;
    let second = s.enqueue(job).await;
    let started = ms(&fetch_one(&s, q).await["started_at"]);
    let e = explain(&s, &second).await;
    // The first start sets the next one 90% of the interval on (rl_throttle.lua Throttle.take).
    assert_until(gate(&e, "throttle"), started + 9_000);
    assert!(fetch_one(&s, q).await.is_null(), "FETCH agrees");
}

#[tokio::test]
async fn an_override_that_limits_is_named_with_its_expiry() {
    let s = TestServer::start().await;
    let q = "ex-ovr";
    let id = s
        .enqueue(json!({"type": "t", "args": [], "queue": q, "rate_limit": {"key": "ex-ovr-key", "concurrency": 5}}))
        .await;
    let expires = "2099-11-22T13:00:00Z";
    let (st, b) = s
        .put(
            "/ojs/v1/rate-limits/ex-ovr-key",
            json!({"concurrency": 0, "expires_at": expires}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    let e = explain(&s, &id).await;
    let c = gate(&e, "concurrency");
    assert_eq!((c["limit"].as_i64(), c["current"].as_i64()), (Some(0), Some(0)), "{e}");
    let o = gate(&e, "override");
    assert_eq!(o["override_fields"]["concurrency"], "0", "{e}");
    assert_until(o, parse_ms(expires).expect("time"));
    // The override's expiry is when the key's limits change: the concurrency gate wakes then too.
    assert_until(c, parse_ms(expires).expect("time"));
    assert!(fetch_one(&s, q).await.is_null(), "FETCH agrees");
    // Without the override the policy's 5 slots are free: nothing holds the job.
    s.delete("/ojs/v1/rate-limits/ex-ovr-key").await;
    assert_eq!(explain(&s, &id).await["gates"], json!([]));
}

#[tokio::test]
async fn a_dynamic_block_waits_for_rate_limit_until() {
    let s = TestServer::start().await;
    let q = "ex-dyn";
    let id = s
        .enqueue(json!({"type": "t", "args": [], "queue": q, "rate_limit": {"key": "ex-dyn-key", "concurrency": 5}}))
        .await;
    fetch_one(&s, q).await;
    let until = "2099-11-22T12:05:00Z";
    let (st, b) = s
        .post(
            "/ojs/v1/workers/nack",
            json!({"job_id": id, "error": {"type": "RateLimitExceeded", "message": "429", "rate_limit_until": until}}),
        )
        .await;
    assert_eq!((st, b["state"].as_str()), (200, Some("available")), "{b}");
    let e = explain(&s, &id).await;
    let g = gate(&e, "dynamic");
    assert_eq!(g["key"], "ex-dyn-key", "{e}");
    assert_until(g, parse_ms(until).expect("time"));
    assert!(fetch_one(&s, q).await.is_null(), "FETCH agrees");
}

#[tokio::test]
async fn queue_level_limits_hold_the_queue_with_holders_and_times() {
    let s = TestServer::start().await;
    let q = "ex-qconc";
    let (st, b) = s
        .put(
            &format!("/ojs/v1/admin/queues/{q}/rate-limit"),
            json!({"concurrency": 1}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    let ids = enqueue_n(&s, q, 2).await;
    let held = fetch_one(&s, q).await;
    let e = explain(&s, &ids[1]).await;
    let g = gate(&e, "queue_concurrency");
    assert_eq!((g["limit"].as_i64(), g["current"].as_i64()), (Some(1), Some(1)), "{e}");
    assert_eq!(g["holders"], json!([ids[0]]), "{e}");
    assert_eq!(g["ahead"], 0, "{e}");
    assert_until(g, ms(&held["visibility_deadline"]));
    assert!(fetch_one(&s, q).await.is_null(), "FETCH agrees");

    let q = "ex-qrate";
    let (st, b) = s
        .put(
            &format!("/ojs/v1/admin/queues/{q}/rate-limit"),
            json!({"rate": {"limit": 1, "period": "PT20S"}}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    let ids = enqueue_n(&s, q, 2).await;
    let started = ms(&fetch_one(&s, q).await["started_at"]);
    let e = explain(&s, &ids[1]).await;
    let g = gate(&e, "queue_rate");
    assert_eq!((g["limit"].as_i64(), g["current"].as_i64()), (Some(1), Some(1)), "{e}");
    assert_until(g, started + 20_000);
    assert!(fetch_one(&s, q).await.is_null(), "FETCH agrees");
}

#[tokio::test]
async fn a_tenant_behind_in_the_fair_share_is_told_its_pass_and_the_tenants_ahead() {
    let s = TestServer::start().await;
    let q = "ex-fair";
    let mut by = std::collections::HashMap::new();
    for tenant in ["alpha", "beta"] {
        for i in 0..2 {
            let (st, b) = s
                .send_as(
                    Method::POST,
                    "/ojs/v1/jobs",
                    tenant,
                    Some(json!({"type": "t", "args": [i], "queue": q})),
                )
                .await;
            assert_eq!(st, 201, "{b}");
            by.entry(tenant)
                .or_insert_with(Vec::new)
                .push(b["job"]["id"].as_str().expect("id").to_string());
        }
    }
    // Equal passes: alpha goes first (ties by name), and its pass moves on by 1/weight.
    assert_eq!(fetch_one(&s, q).await["meta"]["tenant_id"], "alpha");
    let e = explain(&s, &by["alpha"][1]).await;
    let g = gate(&e, "fair_share");
    assert_eq!(
        (g["tenant"].as_str(), g["ahead"].as_i64()),
        (Some("alpha"), Some(1)),
        "{e}"
    );
    assert_eq!(
        (g["pass"].as_f64(), g["lowest_pass"].as_f64()),
        (Some(1.0), Some(0.0)),
        "{e}"
    );
    assert_eq!(
        (g["tenants"].as_i64(), g["weight"].as_f64()),
        (Some(2), Some(1.0)),
        "{e}"
    );
    assert_eq!(e["runnable_at"], Value::Null, "{e}");
    // beta's job is at the head of the share: nothing holds it.
    assert_eq!(explain(&s, &by["beta"][0]).await["gates"], json!([]));
    assert_eq!(fetch_one(&s, q).await["meta"]["tenant_id"], "beta", "FETCH agrees");
    s.assert_invariants().await;
}

#[tokio::test]
async fn a_pending_workflow_step_waits_for_its_parents() {
    let s = TestServer::start().await;
    let step = |t: &str| json!({"type": t, "args": [], "options": {"queue": "ex-wf"}});
    let (st, b) = s
        .post(
            "/ojs/v1/workflows",
            json!({"type": "chain", "steps": [step("a"), step("b"), step("c")]}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let w = &b["workflow"];
    let job = |i: usize| w["jobs"][i]["id"].as_str().expect("id").to_string();
    let e = explain(&s, &job(2)).await;
    assert_eq!(
        (e["state"].as_str(), e["waiting"].as_bool()),
        (Some("pending"), Some(true)),
        "{e}"
    );
    let g = gate(&e, "pending");
    assert_eq!(g["ahead"], 2, "two steps must complete first: {e}");
    assert_eq!(g["holders"], json!([job(0)]), "{e}");
    assert_eq!(g["workflow_id"], w["id"], "{e}");
    assert_eq!(e["runnable_at"], Value::Null, "{e}");
    // Step 0 completes: step 1 is released, step 2 now waits for it alone.
    let got = fetch_one(&s, "ex-wf").await;
    assert_eq!(got["id"], job(0).as_str());
    assert_eq!(s.ack(&job(0)).await.0, 200);
    let g = gate(&explain(&s, &job(2)).await, "pending").clone();
    assert_eq!((g["ahead"].as_i64(), &g["holders"]), (Some(1), &json!([job(1)])), "{g}");
}

#[tokio::test]
async fn a_batch_callback_waits_for_the_batchs_jobs() {
    let s = TestServer::start().await;
    let job = |t: &str| json!({"type": t, "args": [], "options": {"queue": "ex-batch"}});
    let (st, b) = s
        .post(
            "/ojs/v1/workflows",
            json!({"type": "batch", "jobs": [job("a"), job("b")], "callbacks": {"on_complete": job("done")}}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let wid = b["workflow"]["id"].as_str().expect("id").to_string();
    let first = fetch_one(&s, "ex-batch").await;
    assert_eq!(s.ack(first["id"].as_str().expect("id")).await.0, 200);
    // The callback's id: the workflow's view lists it.
    let w = s.get(&format!("/ojs/v1/workflows/{wid}")).await.1;
    let cb = find_pending(&w["workflow"]).unwrap_or_else(|| panic!("no pending callback in {w}"));
    let e = explain(&s, &cb).await;
    let g = gate(&e, "pending");
    assert_eq!(
        (g["ahead"].as_i64(), g["limit"].as_i64(), g["current"].as_i64()),
        (Some(1), Some(2), Some(1)),
        "{e}"
    );
}

/// The id of a pending member anywhere in a workflow's view.
fn find_pending(v: &Value) -> Option<String> {
    match v {
        Value::Object(o) => {
            if o.get("state") == Some(&json!("pending")) {
                if let Some(id) = o.get("id").and_then(Value::as_str) {
                    return Some(id.to_string());
                }
            }
            o.values().find_map(find_pending)
        }
        Value::Array(a) => a.iter().find_map(find_pending),
        _ => None,
    }
}

/// Enqueues a job to `queue` that expires 50 ms later, and waits until it has.
async fn enqueue_expired(s: &TestServer, queue: &str) -> String {
    let (st, b) = s
        .post(
            "/ojs/v1/jobs",
            json!({"type": "t", "args": [], "queue": queue, "options": {"expires_at": "+PT0.05S"}}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    tokio::time::sleep(std::time::Duration::from_millis(120)).await;
    b["job"]["id"].as_str().expect("id").to_string()
}

#[tokio::test]
async fn a_job_fetch_would_end_unrun_says_so() {
    let s = TestServer::start().await;
    // An expired job is discarded by FETCH instead of run.
    let id = enqueue_expired(&s, "ex-exp").await;
    let e = explain(&s, &id).await;
    gate(&e, "expired");
    assert_eq!(e["runnable_at"], Value::Null, "{e}");
    // A twin (same type and args: another queue) that started after it was created supersedes it.
    let body = json!({"type": "page.render", "args": [7], "queue": "ex-dedup", "options": {"dedup": true}});
    let older = s.enqueue(body).await;
    let newer = s
        .enqueue(json!({"type": "page.render", "args": [7], "queue": "ex-dedup-run", "options": {"dedup": true}}))
        .await;
    assert_eq!(fetch_one(&s, "ex-dedup-run").await["id"], newer.as_str());
    let e = explain(&s, &older).await;
    assert_eq!(gate(&e, "superseded")["reason"], "dedup", "{e}");
}

#[tokio::test]
async fn a_queue_being_rescored_for_aging_holds_its_jobs() {
    let s = TestServer::start().await;
    let q = "ex-rescore";
    let ids = enqueue_n(&s, q, 1).await;
    // A re-scoring caught half-way (includes/rescore.lua marks the queue's conf with rs_phase while it
    // runs; a pod that died there leaves it for the promote timer): set the mark as it would stand.
    let mut r = s.redis().await;
    let conf = s.keys().queue_conf(q);
    let _: () = redis::cmd("HSET")
        .arg(&conf)
        .arg("rs_phase")
        .arg("ready")
        .query_async(&mut r)
        .await
        .expect("hset");
    let e = explain(&s, &ids[0]).await;
    assert_eq!(gate(&e, "rescoring")["ahead"], 0, "{e}");
    assert_eq!(e["runnable_at"], Value::Null, "{e}");
    assert!(fetch_one(&s, q).await.is_null(), "FETCH agrees");
    let _: () = redis::cmd("HDEL")
        .arg(&conf)
        .arg("rs_phase")
        .query_async(&mut r)
        .await
        .expect("hdel");
    assert_eq!(explain(&s, &ids[0]).await["gates"], json!([]));
}

/// Tenant a's only waiting job is held by its key's concurrency, but no FETCH has met it since: explain
/// said b's job waits its fair share behind a, and the next FETCH (which parks a's lane and serves b in
/// the same call) handed b's job out at once (the black-box review's finding 04). A tenant ahead counts
/// only when FETCH would start one of its jobs.
#[tokio::test]
async fn a_tenant_ahead_whose_jobs_wait_at_their_keys_limit_is_not_ahead() {
    for shards in [1, 3] {
        let s = TestServer::start_with(|c| c.shards = shards).await;
        let q = "fair.keyed";
        let job = |tenant: &str, key: Option<&str>| {
            let mut j = json!({"type": "t", "args": [], "queue": q, "meta": {"tenant_id": tenant}});
            if let Some(k) = key {
                j["rate_limit"] = json!({"key": k, "concurrency": 1});
            }
            j
        };
        s.enqueue(job("a", Some("ka"))).await;
        s.enqueue(job("a", Some("ka"))).await;
        assert_eq!(fetch_one(&s, q).await["meta"]["tenant_id"], "a");
        let b = s.enqueue(job("b", None)).await;
        let e = explain(&s, &b).await;
        assert!(
            !gate_names(&e).contains(&"fair_share".to_string()),
            "b's job waits its fair share behind a tenant FETCH would not serve: {e}"
        );
        assert_eq!(fetch_one(&s, q).await["id"], b.as_str(), "FETCH serves b at once");
        s.assert_invariants().await;
    }
}

/// The job's state as `GET /jobs/{id}` shows it.
async fn state_of(s: &TestServer, id: &str) -> String {
    let (st, b) = s.get(&format!("/ojs/v1/jobs/{id}")).await;
    assert_eq!(st, 200, "{b}");
    b["job"]["state"].as_str().unwrap_or_default().to_string()
}

/// Explains job `id` (at the head of its queue: no `order` gate) and asks FETCH for one job of queue `q`
/// right after: they must agree. No gate: FETCH hands out `id`. A gate that ends it unrun: FETCH does
/// not hand it out and it ends as the gate says (expired: discarded; workflow_cancelled: cancelled;
/// superseded: completed). Any other gate: FETCH does not hand it out and it still waits. Returns the
/// gates' names, which the caller checks name the gate it set up.
async fn explain_then_fetch(s: &TestServer, q: &str, id: &str) -> Vec<String> {
    let e = explain(s, id).await;
    let names = gate_names(&e);
    assert!(
        !names.contains(&"order".to_string()),
        "{id} is not at its queue's head: {e}"
    );
    let got = fetch_one(s, q).await;
    let state = state_of(s, id).await;
    match names.first().map(String::as_str) {
        None => assert_eq!(got["id"], id, "explain held {id} by nothing, FETCH gave {got}"),
        Some(first) => {
            assert_ne!(got["id"], id, "explain held {id} by {names:?}, FETCH handed it out");
            let expected = match first {
                "expired" => "discarded",
                "workflow_cancelled" => "cancelled",
                "superseded" => "completed",
                _ => "available",
            };
            assert_eq!(state, expected, "explain said {names:?}: {e}");
        }
    }
    names
}

/// Issue 38: FETCH and explain share one verdict (lua/includes/verdict.lua) and the same gates, so for
/// every gate, explain's answer and the next FETCH agree (one server, each gate in a queue of its own).
#[tokio::test]
async fn explain_and_the_next_fetch_agree_at_every_gate() {
    let s = TestServer::start().await;
    let plain = |q: &str| json!({"type": "t", "args": [], "queue": q});
    let keyed = |q: &str, limit: Value| json!({"type": "t", "args": [], "queue": q, "rate_limit": limit});
    let mut r = s.redis().await;
    let mut seen = Vec::new();

    // Nothing holds it.
    let id = s.enqueue(plain("v-none")).await;
    assert!(explain_then_fetch(&s, "v-none", &id).await.is_empty());

    // The queue: paused, being re-scored, its concurrency, its window.
    let id = s.enqueue(plain("v-paused")).await;
    s.post("/ojs/v1/queues/v-paused/pause", json!({})).await;
    seen.extend(explain_then_fetch(&s, "v-paused", &id).await);
    let id = s.enqueue(plain("v-rescore")).await;
    let _: () = redis::cmd("HSET")
        .arg(s.keys().queue_conf("v-rescore"))
        .arg("rs_phase")
        .arg("ready")
        .query_async(&mut r)
        .await
        .expect("hset");
    seen.extend(explain_then_fetch(&s, "v-rescore", &id).await);
    for (q, limit) in [
        ("v-qconc", json!({"concurrency": 1})),
        ("v-qrate", json!({"rate": {"limit": 1, "period": "PT30S"}})),
    ] {
        let (st, b) = s.put(&format!("/ojs/v1/admin/queues/{q}/rate-limit"), limit).await;
        assert_eq!(st, 200, "{b}");
        s.enqueue(plain(q)).await;
        let id = s.enqueue(plain(q)).await;
        assert!(!fetch_one(&s, q).await.is_null());
        seen.extend(explain_then_fetch(&s, q, &id).await);
    }

    // The tenant: its concurrency in the queue, its turn in the fair share.
    let (st, b) = s
        .put(
            "/ojs/v1/admin/queues/v-tcap/tenancy",
            json!({"source": "meta", "concurrency": {"acme": 1}}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    let acme = |q: &str| json!({"type": "t", "args": [], "queue": q, "meta": {"tenant_id": "acme"}});
    s.enqueue(acme("v-tcap")).await;
    let id = s.enqueue(acme("v-tcap")).await;
    assert!(!fetch_one(&s, "v-tcap").await.is_null());
    seen.extend(explain_then_fetch(&s, "v-tcap", &id).await);
    let tenant = |t: &str| json!({"type": "t", "args": [], "queue": "v-fair", "meta": {"tenant_id": t}});
    s.enqueue(tenant("alpha")).await;
    let alpha = s.enqueue(tenant("alpha")).await;
    s.enqueue(tenant("beta")).await;
    assert_eq!(fetch_one(&s, "v-fair").await["meta"]["tenant_id"], "alpha");
    seen.extend(explain_then_fetch(&s, "v-fair", &alpha).await);

    // The job's key: a dynamic block, its concurrency, its pool, its window, its throttle, an override.
    let id = s
        .enqueue(keyed("v-dyn", json!({"key": "v-dyn", "concurrency": 5})))
        .await;
    fetch_one(&s, "v-dyn").await;
    let (st, b) = s
        .post(
            "/ojs/v1/workers/nack",
            json!({"job_id": id, "error": {"type": "RateLimitExceeded", "message": "429",
                "rate_limit_until": "2099-01-01T00:00:00Z"}}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    seen.extend(explain_then_fetch(&s, "v-dyn", &id).await);
    for (q, limit) in [
        ("v-conc", json!({"key": "v-conc", "concurrency": 1})),
        (
            "v-rate",
            json!({"key": "v-rate", "rate": {"limit": 1, "period": "PT30S"}}),
        ),
        (
            "v-thr",
            json!({"key": "v-thr", "throttle": {"limit": 1, "period": "PT30S"}}),
        ),
    ] {
        s.enqueue(keyed(q, limit.clone())).await;
        let id = s.enqueue(keyed(q, limit)).await;
        assert!(!fetch_one(&s, q).await.is_null());
        seen.extend(explain_then_fetch(&s, q, &id).await);
    }
    let id = s
        .enqueue(keyed("v-ovr", json!({"key": "v-ovr", "concurrency": 5})))
        .await;
    let (st, b) = s
        .put(
            "/ojs/v1/rate-limits/v-ovr",
            json!({"concurrency": 0, "expires_at": "2099-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    seen.extend(explain_then_fetch(&s, "v-ovr", &id).await);
    // The pool: the queue's one slot is owed to a waiting key's floor, so a borrower ahead of it waits.
    s.enqueue(keyed("v-pool", json!({"key": "v-keeps", "concurrency": 2, "floor": 1})))
        .await;
    let (st, b) = s
        .put("/ojs/v1/admin/queues/v-pool/rate-limit", json!({"concurrency": 1}))
        .await;
    assert_eq!(st, 200, "{b}");
    let mut borrower = keyed("v-pool", json!({"key": "v-borrows", "concurrency": 2, "floor": 0}));
    borrower["priority"] = json!(0);
    let id = s.enqueue(borrower).await;
    seen.extend(explain_then_fetch(&s, "v-pool", &id).await);

    // What FETCH does instead of running it: expired, its workflow cancelled, superseded.
    let id = enqueue_expired(&s, "v-exp").await;
    seen.extend(explain_then_fetch(&s, "v-exp", &id).await);
    let (st, b) = s
        .post(
            "/ojs/v1/workflows",
            json!({"type": "group", "jobs": [{"type": "t", "args": [], "queue": "v-wf"}]}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let id = b["workflow"]["jobs"][0]["id"].as_str().expect("id").to_string();
    // A cancel whose sweep has not reached the member yet (workflow-cancel-1.lua marks the workflow
    // first): the mark as it would stand.
    let _: () = redis::cmd("HSET")
        .arg(s.keys().workflow(b["workflow"]["id"].as_str().expect("id")))
        .arg("state")
        .arg("cancelled")
        .query_async(&mut r)
        .await
        .expect("hset");
    seen.extend(explain_then_fetch(&s, "v-wf", &id).await);
    let older = s
        .enqueue(json!({"type": "v.render", "args": [7], "queue": "v-dedup", "options": {"dedup": true}}))
        .await;
    s.enqueue(json!({"type": "v.render", "args": [7], "queue": "v-dedup-run", "options": {"dedup": true}}))
        .await;
    assert!(!fetch_one(&s, "v-dedup-run").await.is_null());
    seen.extend(explain_then_fetch(&s, "v-dedup", &older).await);

    seen.sort();
    seen.dedup();
    assert_eq!(
        seen,
        [
            "concurrency",
            "dynamic",
            "expired",
            "fair_share",
            "override",
            "paused",
            "pool",
            "queue_concurrency",
            "queue_rate",
            "rate",
            "rescoring",
            "superseded",
            "tenant_concurrency",
            "throttle",
            "workflow_cancelled"
        ],
        "every gate was set up and met"
    );
}

/// The black-box review of the shared verdict (issue 38) found explain and the next FETCH disagreeing
/// where FETCH learns something during its call that explain did not look for; each case below failed
/// before. (1) A queue's jobs without a tenant join its fair share at FETCH's first look (as tenant "",
/// at the lowest pass, first by name): a named tenant's job was told nothing held it.
#[tokio::test]
async fn the_jobs_without_a_tenant_come_first_in_a_fresh_fair_share() {
    let s = TestServer::start().await;
    let q = "bb-mixed";
    s.enqueue(json!({"type": "t", "args": [], "queue": q})).await;
    let aa = s
        .enqueue(json!({"type": "t", "args": [], "queue": q, "meta": {"tenant_id": "aa"}}))
        .await;
    assert_eq!(explain_then_fetch(&s, q, &aa).await, ["fair_share"]);
}

/// (2) A tenant at its concurrency in the queue leaves the fair share when FETCH meets it: it is not
/// ahead of another tenant (its pass was the lowest).
#[tokio::test]
async fn a_tenant_at_its_cap_is_not_ahead_in_the_fair_share() {
    let s = TestServer::start().await;
    let q = "bb-cap";
    let (st, b) = s
        .put(
            &format!("/ojs/v1/admin/queues/{q}/tenancy"),
            json!({"source": "meta", "concurrency": {"tb": 1}, "weights": {"tb": 10}}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    let job = |t: &str| json!({"type": "t", "args": [], "queue": q, "meta": {"tenant_id": t}});
    s.enqueue(job("tb")).await;
    s.enqueue(job("tb")).await;
    s.enqueue(job("ta")).await;
    let ta = s.enqueue(job("ta")).await;
    // ta first (equal passes, by name), then tb, which is then at its cap with the lowest pass.
    assert_eq!(fetch_one(&s, q).await["meta"]["tenant_id"], "ta");
    assert_eq!(fetch_one(&s, q).await["meta"]["tenant_id"], "tb");
    assert!(explain_then_fetch(&s, q, &ta).await.is_empty());
}

/// (3) Jobs ahead in the ready set that FETCH would not start (held by their key, expired) are not
/// before it: the README's own example, a free priority-5 job runs while a limited priority-0 one waits.
#[tokio::test]
async fn jobs_ahead_that_fetch_would_not_start_are_not_counted_before_it() {
    let s = TestServer::start().await;
    let key = json!({"key": "bb-order-key", "concurrency": 1});
    s.enqueue(json!({"type": "t", "args": [], "queue": "bb-order-run", "rate_limit": key}))
        .await;
    assert!(!fetch_one(&s, "bb-order-run").await.is_null());
    let q = "bb-order";
    s.enqueue(json!({"type": "t", "args": [], "queue": q, "priority": 0, "rate_limit": key}))
        .await;
    let expired = enqueue_expired(&s, q).await;
    let free = s
        .enqueue(json!({"type": "t", "args": [], "queue": q, "priority": 5}))
        .await;
    assert!(explain_then_fetch(&s, q, &free).await.is_empty());
    assert_eq!(
        state_of(&s, &expired).await,
        "discarded",
        "FETCH met the expired job on its way"
    );
}

/// (4) A floor owed by a key whose next job cannot start now (a dynamic block; its window or throttle;
/// an expired or superseded head) reserves nothing: FETCH meets that job in the same call, its lane
/// parks or its job ends, and the borrower starts.
#[tokio::test]
async fn a_floor_owed_by_a_key_that_cannot_start_now_holds_no_borrower() {
    let s = TestServer::start().await;
    for (q, blocked) in [
        ("bb-pool-dyn", "dynamic"),
        ("bb-pool-exp", "expired"),
        ("bb-pool-thr", "throttle"),
    ] {
        let (st, b) = s
            .put(
                &format!("/ojs/v1/admin/queues/{q}/rate-limit"),
                json!({"concurrency": 4}),
            )
            .await;
        assert_eq!(st, 200, "{b}");
        let ka = json!({"key": format!("{q}-a"), "concurrency": 4, "floor": 2});
        let mut a = Vec::new();
        for _ in 0..4 {
            a.push(
                s.enqueue(json!({"type": "t", "args": [], "queue": q, "rate_limit": ka}))
                    .await,
            );
        }
        assert_eq!(s.fetch(&[q], 2).await.len(), 2, "the first key holds its floor");
        let mut kb = json!({"key": format!("{q}-b"), "concurrency": 4, "floor": 2});
        let elsewhere = format!("{q}-elsewhere");
        match blocked {
            "dynamic" => {
                let id = s
                    .enqueue(json!({"type": "t", "args": [], "queue": elsewhere, "rate_limit": kb}))
                    .await;
                assert!(!fetch_one(&s, &elsewhere).await.is_null());
                let (st, b) = s
                    .post(
                        "/ojs/v1/workers/nack",
                        json!({"job_id": id, "error": {"type": "E", "message": "429",
                            "rate_limit_until": "2099-01-01T00:00:00Z"}}),
                    )
                    .await;
                assert_eq!(st, 200, "{b}");
                s.enqueue(json!({"type": "t", "args": [], "queue": q, "rate_limit": kb}))
                    .await;
            }
            "expired" => {
                let (st, b) = s
                    .post(
                        "/ojs/v1/jobs",
                        json!({"type": "t", "args": [], "queue": q, "rate_limit": kb,
                            "options": {"expires_at": "+PT0.05S"}}),
                    )
                    .await;
                assert_eq!(st, 201, "{b}");
                tokio::time::sleep(std::time::Duration::from_millis(120)).await;
            }
            _ => {
                kb["throttle"] = json!({"limit": 1, "period": "PT60S"});
                s.enqueue(json!({"type": "t", "args": [], "queue": elsewhere, "rate_limit": kb}))
                    .await;
                assert!(!fetch_one(&s, &elsewhere).await.is_null());
                s.enqueue(json!({"type": "t", "args": [], "queue": q, "rate_limit": kb}))
                    .await;
            }
        }
        assert!(explain_then_fetch(&s, q, &a[2]).await.is_empty(), "{blocked}");
    }
    s.assert_invariants().await;
}

/// (5) Asked as the job's tenant (X-OJS-Tenant), explain speaks of that tenant's FETCH, which claims from
/// the tenant's own jobs only: no fair share holds it.
#[tokio::test]
async fn explained_to_its_tenant_a_job_waits_for_no_fair_share() {
    let s = TestServer::start().await;
    let q = "bb-as-tenant";
    s.enqueue(json!({"type": "t", "args": [], "queue": q, "meta": {"tenant_id": "ta"}}))
        .await;
    let tb = s
        .enqueue(json!({"type": "t", "args": [], "queue": q, "meta": {"tenant_id": "tb"}}))
        .await;
    assert_eq!(
        gate_names(&explain(&s, &tb).await),
        ["fair_share"],
        "to an operator, ta comes first"
    );
    let (st, e) = s
        .send_as(Method::GET, &format!("/ojs/v1/jobs/{tb}/explain"), "tb", None)
        .await;
    assert_eq!(st, 200, "{e}");
    assert_eq!(e["gates"], json!([]), "{e}");
    let (st, b) = s
        .send_as(
            Method::POST,
            "/ojs/v1/workers/fetch",
            "tb",
            Some(json!({"queues": [q], "worker_id": "w-tb"})),
        )
        .await;
    assert_eq!((st, &b["jobs"][0]["id"]), (200, &json!(tb)), "FETCH as tb agrees: {b}");
}

/// (6) A job whose on_limit is drop or reschedule is not left waiting at its key's limit: explain says
/// what FETCH does with it instead, and gives no time it would run at.
#[tokio::test]
async fn a_job_that_drops_or_reschedules_at_its_limit_says_so() {
    let s = TestServer::start().await;
    let q = "bb-onlimit";
    let key = |on: &str| json!({"key": "bb-onlimit", "concurrency": 1, "on_limit": on});
    s.enqueue(json!({"type": "t", "args": [], "queue": q, "rate_limit": key("wait")}))
        .await;
    assert!(!fetch_one(&s, q).await.is_null());
    for on in ["drop", "reschedule"] {
        let id = s
            .enqueue(json!({"type": "t", "args": [], "queue": q, "rate_limit": key(on)}))
            .await;
        let e = explain(&s, &id).await;
        let g = gate(&e, "concurrency");
        assert_eq!(g["on_limit"], on, "{e}");
        if on == "drop" {
            assert_eq!(e["runnable_at"], Value::Null, "a dropped job never runs: {e}");
        }
        assert!(g["detail"].as_str().unwrap_or("").contains(on), "{e}");
        assert!(fetch_one(&s, q).await.is_null());
        let expected = if on == "drop" { "discarded" } else { "scheduled" };
        assert_eq!(state_of(&s, &id).await, expected);
    }
}
