//! Duplicates: unique jobs (options.unique, checked inside the enqueue script for single, coalesced and
//! batch enqueues) and MediaWiki's run-time deduplication (options.dedup, options.root_job: a job made
//! pointless by a newer run is completed unrun at FETCH).

use std::time::Duration;

use ojs_testkit::TestServer;
use serde_json::{json, Value};

fn job(queue: &str, args: Value, unique: Value) -> Value {
    json!({"type": "report.build", "args": args, "options": {"queue": queue, "unique": unique}})
}

/// Every job the queue hands out now, in order.
async fn drain(s: &TestServer, queue: &str) -> Vec<Value> {
    s.fetch(&[queue], 1000).await
}

fn ids(jobs: &[Value]) -> Vec<String> {
    jobs.iter()
        .map(|j| j["id"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The events of `job_id` of type `etype`.
async fn events(s: &TestServer, etype: &str, job_id: &str) -> Vec<Value> {
    let (st, b) = s.get(&format!("/ojs/v1/events?types={etype}&job_id={job_id}")).await;
    assert_eq!(st, 200, "{b}");
    b["events"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn reject_answers_409_naming_the_existing_job_and_writes_nothing() {
    let s = TestServer::start().await;
    let body = job("uq", json!([{"order": 1}]), json!({"keys": ["type", "args"]}));
    let first = s.enqueue(body.clone()).await;
    let (st, b) = s.post("/ojs/v1/jobs", body).await;
    assert_eq!(st, 409, "{b}");
    let e = &b["error"];
    assert_eq!(e["code"], "duplicate");
    assert_eq!(e["details"]["existing_job_id"], first.as_str());
    assert_eq!(e["details"]["existing_job_state"], "available");
    assert_eq!(e["details"]["uniqueness_key"].as_str().map(str::len), Some(64));
    assert_eq!(ids(&drain(&s, "uq").await), vec![first]);
    s.assert_invariants().await;
}

#[tokio::test]
async fn ignore_answers_200_with_the_existing_job() {
    let s = TestServer::start().await;
    let body = job("uq", json!([1]), json!({"on_conflict": "ignore"}));
    let first = s.enqueue(body.clone()).await;
    let (st, b) = s.post("/ojs/v1/jobs", body).await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["deduplicated"], true);
    assert_eq!(b["job"]["id"], first.as_str());
    assert_eq!(b["job"]["state"], "available");
    assert_eq!(ids(&drain(&s, "uq").await), vec![first]);
    s.assert_invariants().await;
}

#[tokio::test]
async fn replace_cancels_the_holder_with_its_event_and_keeps_the_new_priority() {
    let s = TestServer::start().await;
    let unique = json!({"keys": ["type"], "on_conflict": "replace"});
    let mut old = job("uq", json!([{"v": 1}]), unique.clone());
    old["priority"] = json!(5);
    let old_id = s.enqueue(old).await;
    let other = s
        .enqueue(json!({"type": "other", "args": [], "priority": 2, "options": {"queue": "uq"}}))
        .await;
    let mut new = job("uq", json!([{"v": 2}]), unique);
    new["priority"] = json!(0);
    let (st, b) = s.post("/ojs/v1/jobs", new).await;
    assert_eq!(st, 201, "{b}");
    let new_id = b["job"]["id"].as_str().unwrap_or_default().to_string();
    assert_ne!(new_id, old_id);
    assert_eq!(b["job"]["priority"], 0);
    let (_, g) = s.get(&format!("/ojs/v1/jobs/{old_id}")).await;
    assert_eq!(g["job"]["state"], "cancelled");
    let cancelled = events(&s, "job.cancelled", &old_id).await;
    assert_eq!(cancelled.len(), 1, "{cancelled:?}");
    assert_eq!(cancelled[0]["data"]["previous_state"], "available");
    // The replacement runs with its own priority 0, ahead of the priority-2 job.
    assert_eq!(ids(&drain(&s, "uq").await), vec![new_id, other]);
    s.assert_invariants().await;
}

#[tokio::test]
async fn replace_except_schedule_keeps_the_holders_run_time() {
    let s = TestServer::start().await;
    let unique = json!({"on_conflict": "replace_except_schedule"});
    let mut old = job("uq", json!([1]), unique.clone());
    old["options"]["scheduled_at"] = json!("2099-01-01T00:00:00Z");
    let old_id = s.enqueue(old).await;
    let (st, b) = s.post("/ojs/v1/jobs", job("uq", json!([2]), unique)).await;
    assert_eq!(st, 201, "{b}");
    let new_id = b["job"]["id"].as_str().unwrap_or_default();
    let (_, g) = s.get(&format!("/ojs/v1/jobs/{new_id}")).await;
    assert_eq!(
        (g["job"]["state"].as_str(), g["job"]["scheduled_at"].as_str()),
        (Some("scheduled"), Some("2099-01-01T00:00:00Z"))
    );
    assert_eq!(g["job"]["args"], json!([2]));
    let (_, o) = s.get(&format!("/ojs/v1/jobs/{old_id}")).await;
    assert_eq!(o["job"]["state"], "cancelled");
    s.assert_invariants().await;
}

#[tokio::test]
async fn raise_priority_moves_the_existing_job_ahead_keeping_its_fifo_place() {
    let s = TestServer::start().await;
    let unique = json!({"on_conflict": "raise_priority"});
    let with = |p: i64| {
        let mut b = job("uq", json!([]), unique.clone());
        b["priority"] = json!(p);
        b
    };
    let a = s.enqueue(with(5)).await;
    let d = s
        .enqueue(json!({"type": "d", "args": [], "priority": 1, "options": {"queue": "uq"}}))
        .await;
    let e = s
        .enqueue(json!({"type": "e", "args": [], "priority": 3, "options": {"queue": "uq"}}))
        .await;
    // A duplicate that runs later changes nothing.
    let (st, b) = s.post("/ojs/v1/jobs", with(9)).await;
    assert_eq!(
        (st, b["job"]["id"].as_str(), b["job"]["priority"].as_i64()),
        (200, Some(a.as_str()), Some(5))
    );
    // One that runs sooner lends the holder its priority; the holder was ready before d, so it goes first
    // among priority 1, as PATCH would place it.
    let (st, b) = s.post("/ojs/v1/jobs", with(1)).await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(
        (b["job"]["id"].as_str(), b["job"]["priority"].as_i64()),
        (Some(a.as_str()), Some(1))
    );
    assert_eq!(b["deduplicated"], true);
    let changed = events(&s, "priority.changed", &a).await;
    assert_eq!(
        (
            changed.len(),
            changed[0]["data"]["previous_priority"].as_i64(),
            changed[0]["data"]["new_priority"].as_i64()
        ),
        (1, Some(5), Some(1))
    );
    assert_eq!(ids(&drain(&s, "uq").await), vec![a.clone(), d, e]);
    // An active holder keeps its priority (nothing to reorder).
    let (st, b) = s.post("/ojs/v1/jobs", with(0)).await;
    assert_eq!(
        (st, b["job"]["state"].as_str(), b["job"]["priority"].as_i64()),
        (200, Some("active"), Some(1))
    );
    s.assert_invariants().await;
}

#[tokio::test]
async fn raise_priority_under_the_core_model_follows_higher_first() {
    let s = TestServer::start_with(|c| c.priority_model = ojs_core::PriorityModel::Core).await;
    let with = |p: i64| {
        json!({"type": "t", "args": [], "options": {"queue": "cq", "priority": p,
        "unique": {"on_conflict": "raise_priority"}}})
    };
    let a = s.enqueue(with(-5)).await;
    let b_id = s
        .enqueue(json!({"type": "b", "args": [], "options": {"queue": "cq", "priority": 0}}))
        .await;
    let (st, b) = s.post("/ojs/v1/jobs", with(-10)).await;
    assert_eq!(
        (st, b["job"]["priority"].as_i64()),
        (200, Some(-5)),
        "lower is later under core: no raise"
    );
    let (st, b) = s.post("/ojs/v1/jobs", with(10)).await;
    assert_eq!((st, b["job"]["priority"].as_i64()), (200, Some(10)));
    assert_eq!(ids(&drain(&s, "cq").await), vec![a, b_id]);
    s.assert_invariants().await;
}

#[tokio::test]
async fn states_decide_which_holders_count() {
    let s = TestServer::start().await;
    // states [available]: an active holder does not count.
    let typed = |t: &str, unique: Value| json!({"type": t, "args": [], "options": {"queue": t, "unique": unique}});
    let only_available = typed("uq", json!({"states": ["available"]}));
    let first = s.enqueue(only_available.clone()).await;
    assert_eq!(ids(&s.fetch(&["uq"], 1).await), vec![first.clone()]);
    let second = s.enqueue(only_available).await;
    assert_ne!(second, first);
    // The default states count an active holder, not a completed one.
    let default = typed("uq2", json!({}));
    let holder = s.enqueue(default.clone()).await;
    s.fetch(&["uq2"], 1).await;
    let (st, b) = s.post("/ojs/v1/jobs", default.clone()).await;
    assert_eq!(
        (st, b["error"]["details"]["existing_job_state"].as_str()),
        (409, Some("active"))
    );
    assert_eq!(s.ack(&holder).await.0, 200);
    let after = s.enqueue(default).await;
    assert_ne!(after, holder);
    // states with completed: a finished holder still counts.
    let sticky = job(
        "uq3",
        json!(["c"]),
        json!({"states": ["available", "active", "completed"]}),
    );
    let done = s.enqueue(sticky.clone()).await;
    s.fetch(&["uq3"], 1).await;
    s.ack(&done).await;
    let (st, b) = s.post("/ojs/v1/jobs", sticky).await;
    assert_eq!(
        (st, b["error"]["details"]["existing_job_state"].as_str()),
        (409, Some("completed"))
    );
    s.assert_invariants().await;
}

#[tokio::test]
async fn period_ends_the_constraint_on_redis_time() {
    let s = TestServer::start().await;
    let body = job("uq", json!([]), json!({"period": "PT0.5S"}));
    let first = s.enqueue(body.clone()).await;
    assert_eq!(s.post("/ojs/v1/jobs", body.clone()).await.0, 409);
    let (_, b) = s.post("/ojs/v1/jobs", body.clone()).await;
    let key = b["error"]["details"]["uniqueness_key"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut r = s.redis().await;
    let ttl: i64 = redis::cmd("PTTL")
        .arg(ojs_store::Keys::new(&s.namespace).unique(&key))
        .query_async(&mut r)
        .await
        .expect("PTTL");
    assert!((1..=500).contains(&ttl), "the lock lives for the period: {ttl}");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let (st, b) = s.post("/ojs/v1/jobs", body).await;
    assert_eq!(st, 201, "the period is over, though the first job still waits: {b}");
    assert_eq!(drain(&s, "uq").await.len(), 2);
    let _ = first;
    s.assert_invariants().await;
}

/// The uniqueness key of `body` as a 409 names it (`body` must meet a holder), and its lock's key.
async fn lock_of(s: &TestServer, body: Value) -> (String, String) {
    let (st, b) = s.post("/ojs/v1/jobs", body).await;
    assert_eq!(st, 409, "a holder exists: {b}");
    let key = b["error"]["details"]["uniqueness_key"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let lock = s.keys().unique(&key);
    (key, lock)
}

/// `cmd key` on the server's Redis.
async fn on_key<T: redis::FromRedisValue>(s: &TestServer, cmd: &str, key: &str) -> T {
    redis::cmd(cmd)
        .arg(key)
        .query_async(&mut s.redis().await)
        .await
        .unwrap_or_else(|e| panic!("{cmd} {key}: {e}"))
}

async fn pttl(s: &TestServer, key: &str) -> i64 {
    on_key(s, "PTTL", key).await
}

/// When `key` expires (epoch ms; Redis 7.0+).
async fn expire_time(s: &TestServer, key: &str) -> i64 {
    on_key(s, "PEXPIRETIME", key).await
}

async fn get_str(s: &TestServer, key: &str) -> Option<String> {
    on_key(s, "GET", key).await
}

/// Enqueues `body` (its retry policy: one attempt, then the dead letter), runs and fails it.
async fn dead_letter(s: &TestServer, mut body: Value) -> String {
    body["options"]["retry"] = json!({"max_attempts": 1, "on_exhaustion": "dead_letter"});
    let queue = body["options"]["queue"].as_str().unwrap_or_default().to_string();
    let id = s.enqueue(body).await;
    assert_eq!(ids(&s.fetch(&[&queue], 1).await), vec![id.clone()]);
    let (st, b) = s
        .post(
            "/ojs/v1/workers/nack",
            json!({"job_id": id, "error": {"message": "boom"}}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    s.wait_state(&id, "discarded", Duration::from_secs(2)).await;
    id
}

#[tokio::test]
async fn a_dead_letter_retry_never_makes_two_live_jobs_under_one_key() {
    let s = TestServer::start().await;
    let body = |n: i64| job("uq-dead", json!([n]), json!({"keys": ["type"]}));
    let a = dead_letter(&s, body(1)).await;
    // A is discarded, so B is no duplicate: B is written and takes the lock.
    let b = s.enqueue(body(2)).await;
    let (key, lock) = lock_of(&s, body(3)).await;
    assert_eq!(get_str(&s, &lock).await.as_deref(), Some(b.as_str()));
    // Retrying A now would make two live jobs under one key: refused as the enqueue would be.
    for path in [
        format!("/ojs/v1/dead-letter/{a}/retry"),
        format!("/ojs/v1/admin/dead-letter/{a}/retry"),
    ] {
        let (st, e) = s.post(&path, json!({})).await;
        assert_eq!(st, 409, "{path}: {e}");
        assert_eq!(e["error"]["code"], "duplicate", "{e}");
        let d = &e["error"]["details"];
        assert_eq!(
            (
                d["existing_job_id"].as_str(),
                d["existing_job_state"].as_str(),
                d["uniqueness_key"].as_str()
            ),
            (Some(b.as_str()), Some("available"), Some(key.as_str())),
            "{e}"
        );
    }
    let (st, r) = s
        .post(
            "/ojs/v1/admin/jobs/bulk/retry",
            json!({"filter": {"queue": "uq-dead"}, "confirm": true}),
        )
        .await;
    assert_eq!(
        (st, r["succeeded"].as_u64(), r["failed"].as_u64()),
        (200, Some(0), Some(1)),
        "{r}"
    );
    assert!(
        r["errors"][0]["error"].as_str().unwrap_or_default().contains(&b),
        "the bulk error names the holder: {r}"
    );
    let (_, g) = s.get(&format!("/ojs/v1/jobs/{a}")).await;
    assert_eq!(g["job"]["state"], "discarded", "A stays dead: {g}");
    assert_eq!(get_str(&s, &lock).await.as_deref(), Some(b.as_str()));
    // Once B has run, A may come back, and it holds the key again: a newcomer meets A.
    assert_eq!(ids(&s.fetch(&["uq-dead"], 1).await), vec![b.clone()]);
    assert_eq!(s.ack(&b).await.0, 200);
    let (st, e) = s.post(&format!("/ojs/v1/dead-letter/{a}/retry"), json!({})).await;
    assert_eq!(st, 200, "{e}");
    assert_eq!(get_str(&s, &lock).await.as_deref(), Some(a.as_str()));
    assert_eq!(
        pttl(&s, &lock).await,
        -1,
        "no period: the revived holder's lock has no expiry"
    );
    let (st, e) = s.post("/ojs/v1/jobs", body(4)).await;
    assert_eq!(
        (st, e["error"]["details"]["existing_job_id"].as_str()),
        (409, Some(a.as_str())),
        "{e}"
    );
    s.assert_invariants().await;
}

#[tokio::test]
async fn a_revived_holder_takes_its_lock_for_what_is_left_of_its_period() {
    let s = TestServer::start().await;
    let body = |n: i64| job("uq-dead-p", json!([n]), json!({"period": "PT10S"}));
    let a = dead_letter(&s, body(1)).await;
    // B took the key meanwhile (A is discarded, so no conflict), and ran.
    let b = s.enqueue(body(2)).await;
    let (_, lock) = lock_of(&s, body(3)).await;
    assert_eq!(ids(&s.fetch(&["uq-dead-p"], 1).await), vec![b.clone()]);
    assert_eq!(s.ack(&b).await.0, 200);
    tokio::time::sleep(Duration::from_secs(2)).await;
    // A comes back holding the key for the rest of its own period (from its creation), not a new one.
    let (st, e) = s.post(&format!("/ojs/v1/dead-letter/{a}/retry"), json!({})).await;
    assert_eq!(st, 200, "{e}");
    assert_eq!(get_str(&s, &lock).await.as_deref(), Some(a.as_str()));
    let ttl = pttl(&s, &lock).await;
    assert!((1..=8_000).contains(&ttl), "what is left of A's 10 s: {ttl}");
    s.assert_invariants().await;
}

#[tokio::test]
async fn a_lock_without_a_period_expires_with_its_holders_record() {
    let retention_ms = 600_000;
    let s = TestServer::start_with(|c| c.retention_secs = retention_ms / 1000).await;
    // No period: the lock lives while its holder does, then expires with the holder's record.
    let body = job("uq-ttl", json!([1]), json!({}));
    let id = s.enqueue(body.clone()).await;
    let (_, lock) = lock_of(&s, body).await;
    assert_eq!(pttl(&s, &lock).await, -1, "the holder is live: no expiry");
    s.fetch(&["uq-ttl"], 1).await;
    assert_eq!(s.ack(&id).await.0, 200);
    let ttl = pttl(&s, &lock).await;
    assert!(
        (retention_ms as i64 - 5_000..=retention_ms as i64).contains(&ttl),
        "the lock expires after the retention: {ttl} ms"
    );
    let (lock_at, record_at) = (expire_time(&s, &lock).await, expire_time(&s, &s.keys().job(&id)).await);
    assert!(
        lock_at <= record_at,
        "no later than the record: lock at {lock_at}, record at {record_at}"
    );
    // A period shorter than the retention is never lengthened.
    let body = job("uq-ttl", json!([2]), json!({"period": "PT30S"}));
    let id = s.enqueue(body.clone()).await;
    let (_, lock) = lock_of(&s, body).await;
    s.fetch(&["uq-ttl"], 1).await;
    assert_eq!(s.ack(&id).await.0, 200);
    let ttl = pttl(&s, &lock).await;
    assert!((1..=30_000).contains(&ttl), "still the period: {ttl}");
    // Cancelled: the same.
    let body = job("uq-ttl", json!([3]), json!({}));
    let id = s.enqueue(body.clone()).await;
    let (_, lock) = lock_of(&s, body).await;
    assert_eq!(s.delete(&format!("/ojs/v1/jobs/{id}")).await.0, 200);
    let ttl = pttl(&s, &lock).await;
    assert!(
        (retention_ms as i64 - 5_000..=retention_ms as i64).contains(&ttl),
        "cancelled: {ttl}"
    );
    s.assert_invariants().await;
}

#[tokio::test]
async fn a_lock_stays_with_a_holder_kept_forever_and_leaves_with_a_deleted_one() {
    // Retention 0 keeps finished records forever: their locks stay too.
    let s = TestServer::start_with(|c| c.retention_secs = 0).await;
    let body = job("uq-keep", json!([1]), json!({}));
    let id = s.enqueue(body.clone()).await;
    let (_, lock) = lock_of(&s, body).await;
    s.fetch(&["uq-keep"], 1).await;
    assert_eq!(s.ack(&id).await.0, 200);
    assert_eq!(pttl(&s, &lock).await, -1);
    // A dead-lettered holder deleted for good takes its lock with it.
    let body = job("uq-keep", json!([2]), json!({}));
    let a = dead_letter(&s, body.clone()).await;
    assert_eq!(get_str(&s, &lock).await.as_deref(), Some(a.as_str()));
    assert_eq!(s.delete(&format!("/ojs/v1/dead-letter/{a}")).await.0, 200);
    assert_eq!(get_str(&s, &lock).await, None, "deleted with its holder");
    // A lock another job took since is left alone.
    let c = dead_letter(&s, job("uq-keep", json!([3]), json!({}))).await;
    let d = s.enqueue(job("uq-keep", json!([4]), json!({}))).await;
    assert_eq!(s.delete(&format!("/ojs/v1/dead-letter/{c}")).await.0, 200);
    assert_eq!(get_str(&s, &lock).await.as_deref(), Some(d.as_str()));
    s.assert_invariants().await;
}

#[tokio::test]
async fn keys_select_args_meta_and_queue() {
    let s = TestServer::start().await;
    let by_user = |user: i64, template: &str| {
        job(
            "uq",
            json!([{"user_id": user, "template": template}]),
            json!({"keys": ["type", "args"], "args_keys": ["user_id"]}),
        )
    };
    s.enqueue(by_user(42, "welcome")).await;
    assert_eq!(
        s.post("/ojs/v1/jobs", by_user(42, "other")).await.0,
        409,
        "only user_id counts"
    );
    assert_eq!(s.post("/ojs/v1/jobs", by_user(7, "welcome")).await.0, 201);

    let by_tenant = |tenant: &str, trace: i64| {
        json!({"type": "cache.warm", "args": [], "meta": {"tenant": tenant, "trace": trace},
            "options": {"queue": "uq", "unique": {"keys": ["meta"], "meta_keys": ["tenant"]}}})
    };
    s.enqueue(by_tenant("acme", 1)).await;
    assert_eq!(s.post("/ojs/v1/jobs", by_tenant("acme", 2)).await.0, 409);
    assert_eq!(s.post("/ojs/v1/jobs", by_tenant("globex", 3)).await.0, 201);

    // Without "queue" in keys, uniqueness spans queues; with it, each queue has its own.
    let in_queue =
        |q: &str, keys: Value| json!({"type": "q.job", "args": [], "options": {"queue": q, "unique": {"keys": keys}}});
    s.enqueue(in_queue("qa", json!(["type"]))).await;
    assert_eq!(s.post("/ojs/v1/jobs", in_queue("qb", json!(["type"]))).await.0, 409);
    s.enqueue(in_queue("qa", json!(["type", "queue"]))).await;
    assert_eq!(
        s.post("/ojs/v1/jobs", in_queue("qb", json!(["type", "queue"]))).await.0,
        201
    );
    s.assert_invariants().await;
}

#[tokio::test]
async fn a_duplicate_inside_one_batch_follows_the_same_rules() {
    let s = TestServer::start().await;
    let with = |on_conflict: &str, n: i64, p: i64| {
        let mut b = job("bq", json!([]), json!({"on_conflict": on_conflict}));
        b["args"] = json!([n]);
        b["priority"] = json!(p);
        b
    };
    // reject: the whole batch is refused, naming both envelopes; nothing is written.
    let (st, b) = s
        .post(
            "/ojs/v1/jobs/batch",
            json!({"jobs": [with("reject", 1, 2), with("reject", 2, 2)]}),
        )
        .await;
    assert_eq!(st, 409, "{b}");
    assert_eq!(
        (
            b["error"]["code"].as_str(),
            b["error"]["details"]["index"].as_u64(),
            b["error"]["details"]["existing_index"].as_u64()
        ),
        (Some("duplicate"), Some(1), Some(0))
    );
    assert!(drain(&s, "bq").await.is_empty(), "nothing written");
    // ignore: the second envelope is answered with the first job.
    let (st, b) = s
        .post(
            "/ojs/v1/jobs/batch",
            json!({"jobs": [with("ignore", 1, 2), with("ignore", 2, 2)]}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    assert_eq!(b["jobs"][1]["id"], b["jobs"][0]["id"]);
    assert_eq!(b["deduplicated"], json!([1]));
    let kept = b["jobs"][0]["id"].as_str().unwrap_or_default().to_string();
    // ... and a later batch meets the stored one the same way; a reject in it refuses it whole.
    let (st, b) = s
        .post(
            "/ojs/v1/jobs/batch",
            json!({"jobs": [with("ignore", 3, 2), with("reject", 4, 2)]}),
        )
        .await;
    assert_eq!(
        (st, b["error"]["details"]["existing_job_id"].as_str()),
        (409, Some(kept.as_str()))
    );
    assert!(b["error"]["details"].get("existing_index").is_none());
    assert_eq!(ids(&drain(&s, "bq").await), vec![kept]);
    s.post(
        "/ojs/v1/workers/ack",
        json!({"job_id": b["error"]["details"]["existing_job_id"]}),
    )
    .await;

    // replace: the first is written and cancelled, the second kept with its own priority.
    let (st, b) = s
        .post(
            "/ojs/v1/jobs/batch",
            json!({"jobs": [with("replace", 1, 5), with("replace", 2, 0)]}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let (first, second) = (
        b["jobs"][0]["id"].as_str().unwrap_or_default(),
        b["jobs"][1]["id"].as_str().unwrap_or_default(),
    );
    let (_, g) = s.get(&format!("/ojs/v1/jobs/{first}")).await;
    assert_eq!(g["job"]["state"], "cancelled");
    assert_eq!(events(&s, "job.cancelled", first).await.len(), 1);
    s.assert_invariants().await;
    let got = drain(&s, "bq").await;
    assert_eq!(
        (ids(&got), got[0]["priority"].as_i64()),
        (vec![second.to_string()], Some(0))
    );
    s.ack(second).await;

    // raise_priority: the first is written, the second lends it its priority.
    let other = s
        .enqueue(json!({"type": "o", "args": [], "priority": 1, "options": {"queue": "bq"}}))
        .await;
    let (st, b) = s
        .post(
            "/ojs/v1/jobs/batch",
            json!({"jobs": [with("raise_priority", 1, 5), with("raise_priority", 2, 0)]}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    assert_eq!(
        (b["jobs"][1]["id"].clone(), b["jobs"][1]["priority"].as_i64()),
        (b["jobs"][0]["id"].clone(), Some(0))
    );
    let raised = b["jobs"][0]["id"].as_str().unwrap_or_default().to_string();
    s.assert_invariants().await;
    assert_eq!(ids(&drain(&s, "bq").await), vec![raised, other]);
    s.assert_invariants().await;
}

#[tokio::test]
async fn concurrent_duplicates_on_two_nodes_make_exactly_one_job() {
    let a = TestServer::start().await;
    let mut cfg = ojs_testkit::base_config();
    cfg.namespace = a.namespace.clone();
    cfg.tick_ms = 20;
    let b = TestServer::start_config(cfg).await;
    for on_conflict in ["reject", "ignore"] {
        let body = job(
            on_conflict,
            json!([{"round": on_conflict}]),
            json!({"keys": ["args"], "on_conflict": on_conflict}),
        );
        let mut tasks = Vec::new();
        for i in 0..48 {
            let (http, base) = if i % 2 == 0 {
                (a.http.clone(), a.base.clone())
            } else {
                (b.http.clone(), b.base.clone())
            };
            let body = body.clone();
            tasks.push(tokio::spawn(async move {
                let r = http
                    .post(format!("{base}/ojs/v1/jobs"))
                    .json(&body)
                    .send()
                    .await
                    .expect("request");
                let st = r.status().as_u16();
                (st, r.json::<Value>().await.unwrap_or_default())
            }));
        }
        let mut created = Vec::new();
        let mut named = std::collections::HashSet::new();
        for t in tasks {
            let (st, v) = t.await.expect("task");
            match st {
                201 => created.push(v["job"]["id"].as_str().unwrap_or_default().to_string()),
                409 => {
                    named.insert(
                        v["error"]["details"]["existing_job_id"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                    );
                }
                200 => {
                    named.insert(v["job"]["id"].as_str().unwrap_or_default().to_string());
                }
                other => panic!("unexpected {other}: {v}"),
            }
        }
        assert_eq!(created.len(), 1, "{on_conflict}: exactly one job written");
        assert_eq!(
            named.into_iter().collect::<Vec<_>>(),
            created,
            "{on_conflict}: every duplicate names it"
        );
        assert_eq!(ids(&drain(&a, on_conflict).await), created);
    }
    a.assert_invariants().await;
}

#[tokio::test]
async fn invalid_policies_are_400s_naming_the_field() {
    let s = TestServer::start().await;
    for (options, needle) in [
        (
            json!({"unique": {"keys": ["argz"]}}),
            "options.unique.keys must be an array of distinct values from type, queue, args, meta",
        ),
        (json!({"unique": {"keys": ["meta"]}}), "options.unique.meta_keys"),
        (
            json!({"unique": {"on_conflict": "merge"}}),
            "reject, ignore, replace, replace_except_schedule, raise_priority",
        ),
        (json!({"unique": {"states": ["finished"]}}), "options.unique.states"),
        (json!({"unique": {"period": "P1M"}}), "options.unique.period"),
        (
            json!({"unique": {"args_keys": ["x"], "keys": ["args"]}}),
            "no object in args",
        ),
        (json!({"unique": 5}), "options.unique must be an object"),
        (
            json!({"dedup": "yes"}),
            "options.dedup must be true, false or an object",
        ),
        (
            json!({"root_job": {"timestamp": "2026-01-01T00:00:00Z"}}),
            "options.root_job.signature is required",
        ),
    ] {
        let (st, b) = s
            .post("/ojs/v1/jobs", json!({"type": "t", "args": [1], "options": options}))
            .await;
        assert_eq!(
            (st, b["error"]["code"].as_str()),
            (400, Some("invalid_request")),
            "{options}: {b}"
        );
        let msg = b["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(needle), "{options}: {msg}");
        let (st, b) = s
            .post(
                "/ojs/v1/jobs/batch",
                json!({"jobs": [{"type": "t", "args": [1], "options": options}]}),
            )
            .await;
        assert_eq!((st, b["error"]["details"]["index"].as_u64()), (400, Some(0)), "{b}");
    }
    let (st, b) = s
        .post(
            "/ojs/v1/jobs",
            json!({"type": "t", "args": [], "unique": {}, "options": {"unique": {}}}),
        )
        .await;
    assert_eq!(
        (st, b["error"]["message"].as_str()),
        (400, Some("give unique or options.unique, not both"))
    );
}

fn superseded_reason(job: &Value) -> Option<&str> {
    job["superseded"]["reason"].as_str()
}

#[tokio::test]
async fn a_newer_root_run_supersedes_older_leaves_at_fetch() {
    let s = TestServer::start().await;
    let (t0, t1, t2, t3) = (
        "2026-01-01T00:00:00Z",
        "2026-01-02T00:00:00Z",
        "2026-01-03T00:00:00Z",
        "2026-01-04T00:00:00Z",
    );
    let with_root = |t: &str, queue: &str, ts: &str, is_root: bool| {
        json!({"type": t, "args": [ts], "options": {"queue": queue,
            "root_job": {"signature": "links:Main_Page", "timestamp": ts, "is_root": is_root}}})
    };
    let l1 = s.enqueue(with_root("links.refresh", "leaves", t1, false)).await;
    let l2 = s.enqueue(with_root("links.refresh", "leaves", t1, false)).await;
    let r1 = s.enqueue(with_root("links.root", "roots", t1, true)).await;
    let r2 = s.enqueue(with_root("links.root", "roots", t2, true)).await;
    let r0 = s.enqueue(with_root("links.root", "roots", t0, true)).await;
    // No root ran yet: nothing is superseded. r1 starts (records t1), r2 starts (records t2); r0 is an
    // older root than one that ran: superseded too.
    assert_eq!(ids(&drain(&s, "roots").await), vec![r1, r2]);
    let keys = ojs_store::Keys::new(&s.namespace);
    let signature = ojs_core::unique::fingerprint(&json!("links:Main_Page"));
    let newest: Option<i64> = redis::cmd("GET")
        .arg(keys.root(&signature))
        .query_async(&mut s.redis().await)
        .await
        .expect("GET");
    assert_eq!(
        newest,
        ojs_core::clock::parse_ms(t2),
        "the newest started root's timestamp"
    );
    let l3 = s.enqueue(with_root("links.refresh", "leaves", t3, false)).await;
    let got = drain(&s, "leaves").await;
    assert_eq!(ids(&got), vec![l3], "leaves of the older root are never handed out");
    for id in [&l1, &l2, &r0] {
        let (_, g) = s.get(&format!("/ojs/v1/jobs/{id}")).await;
        assert_eq!(
            (
                g["job"]["state"].as_str(),
                superseded_reason(&g["job"]),
                g["job"]["attempt"].as_i64()
            ),
            (Some("completed"), Some("root_job"), Some(0)),
            "{g}"
        );
        assert!(g["job"]["started_at"].is_null() && g["job"]["completed_at"].is_string());
    }
    let ev = events(&s, "job.superseded", &l1).await;
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(
        (
            ev[0]["data"]["reason"].as_str(),
            ev[0]["data"]["root_timestamp"].as_i64(),
            ev[0]["data"]["newest_root_timestamp"].as_i64()
        ),
        (
            Some("root_job"),
            ojs_core::clock::parse_ms(t1),
            ojs_core::clock::parse_ms(t2)
        )
    );
    assert!(events(&s, "job.started", &l1).await.is_empty());
    s.assert_invariants().await;
}

#[tokio::test]
async fn superseded_jobs_are_bounded_per_fetch() {
    let s = TestServer::start().await;
    let root = json!({"type": "r", "args": [], "options": {"queue": "roots",
        "root_job": {"signature": "sig", "timestamp": "2026-01-02T00:00:00Z", "is_root": true}}});
    let leaf = json!({"type": "l", "args": [], "options": {"queue": "many",
        "root_job": {"signature": "sig", "timestamp": "2026-01-01T00:00:00Z"}}});
    s.enqueue(root).await;
    assert_eq!(drain(&s, "roots").await.len(), 1);
    let (st, _) = s.post("/ojs/v1/jobs/batch", json!({"jobs": vec![leaf; 150]})).await;
    assert_eq!(st, 201);
    let live = s
        .enqueue(json!({"type": "l", "args": [], "options": {"queue": "many"}}))
        .await;
    // One FETCH script call completes at most 100 superseded jobs (like expired ones) and then stops;
    // the request goes on in the next call.
    let (_, first_call) = s
        .store()
        .fetch(&[("many".into(), 1)], ojs_store::Strategy::Strict, "w", 1, None)
        .await
        .expect("fetch");
    assert!(first_call.is_empty());
    let (_, st1) = s.get("/ojs/v1/queues/many/stats").await;
    assert_eq!(ids(&s.fetch(&["many"], 1).await), vec![live]);
    let (_, st2) = s.get("/ojs/v1/queues/many/stats").await;
    let completed = |b: &Value| b["stats"]["completed"].as_u64();
    assert_eq!(
        (completed(&st1), completed(&st2)),
        (Some(100), Some(150)),
        "{st1} {st2}"
    );
    s.assert_invariants().await;
}

#[tokio::test]
async fn dedup_skips_a_job_whose_twin_started_after_it_was_created() {
    let s = TestServer::start().await;
    let render = |page: i64, n: i64| json!({"type": "page.render", "args": [{"page": page}], "meta": {"n": n}, "options": {"queue": "dq", "dedup": true}});
    let j1 = s.enqueue(render(7, 1)).await;
    let j2 = s.enqueue(render(7, 2)).await;
    let other = s.enqueue(render(8, 3)).await;
    assert_eq!(ids(&s.fetch(&["dq"], 1).await), vec![j1.clone()]);
    let fp = ojs_core::unique::fingerprint(&json!({"type": "page.render", "args": [{"page": 7}]}));
    let rec: String = redis::cmd("GET")
        .arg(ojs_store::Keys::new(&s.namespace).dedup(&fp))
        .query_async(&mut s.redis().await)
        .await
        .expect("GET");
    assert!(rec.ends_with(&format!(" {j1}")), "the start of j1 is recorded: {rec}");
    // j1 started after j2 was created, with the same type and args: j2 is not handed out.
    assert_eq!(ids(&drain(&s, "dq").await), vec![other]);
    let (_, g) = s.get(&format!("/ojs/v1/jobs/{j2}")).await;
    assert_eq!(
        (
            g["job"]["state"].as_str(),
            superseded_reason(&g["job"]),
            g["job"]["superseded"]["by"].as_str()
        ),
        (Some("completed"), Some("dedup"), Some(j1.as_str()))
    );
    assert_eq!(events(&s, "job.superseded", &j2).await.len(), 1);
    // A twin created after j1 started runs; so does a job after its own earlier start (a retry).
    let j3 = s.enqueue(render(7, 4)).await;
    assert_eq!(ids(&drain(&s, "dq").await), vec![j3.clone()]);
    let (st, b) = s
        .post(
            "/ojs/v1/workers/nack",
            json!({"job_id": j3, "requeue": true, "error": {"message": "draining"}}),
        )
        .await;
    assert_eq!((st, b["state"].as_str()), (200, Some("available")), "{b}");
    assert_eq!(ids(&drain(&s, "dq").await), vec![j3]);
    s.assert_invariants().await;
}
