//! Cron entries: registration, validation, firing once per tick across pods, overlap policies, missed
//! ticks, and a year of firings across both daylight-saving transitions (the instants are also unit-tested in
//! ojs-core cron.rs).

use std::time::{Duration, Instant};

use ojs_testkit::TestServer;
use serde_json::{json, Value};

fn entry(name: &str, expression: &str, queue: &str) -> Value {
    json!({"name": name, "expression": expression,
        "job_template": {"type": "cron.tick", "args": [{"n": 1}], "options": {"queue": queue}}})
}

/// Every job currently available in `queue`, claimed by one fetch of up to 1,000.
async fn drain(s: &TestServer, queue: &str) -> Vec<Value> {
    let (st, b) = s
        .post(
            "/ojs/v1/workers/fetch",
            json!({"queues": [queue], "count": 1000, "worker_id": "drain"}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    b["jobs"].as_array().cloned().unwrap_or_default()
}

async fn wait_for_jobs(s: &TestServer, queue: &str, within: Duration) -> Vec<Value> {
    let deadline = Instant::now() + within;
    loop {
        let got = drain(s, queue).await;
        if !got.is_empty() {
            return got;
        }
        assert!(Instant::now() < deadline, "no job in {queue} within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn register_list_update_and_delete() {
    let s = TestServer::start().await;
    let (st, b) = s
        .post(
            "/ojs/v1/cron",
            json!({"name": "tokyo.report", "expression": "0 9 * * *", "timezone": "Asia/Tokyo",
                "job_template": {"type": "report.generate", "args": [], "priority": 1}}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let c = &b["cron"];
    assert_eq!(
        (
            c["enabled"].as_bool(),
            c["overlap_policy"].as_str(),
            c["run_count"].as_i64()
        ),
        (Some(true), Some("skip"), Some(0))
    );
    // 09:00 in Tokyo is 00:00 UTC.
    let next = ojs_core::clock::parse_ms(c["next_run_at"].as_str().unwrap_or("")).unwrap_or(1);
    assert_eq!(next % 86_400_000, 0, "{c}");
    // Upsert: same name, 200, the new schedule; disabled entries have no next run.
    let (st, b) = s
        .post(
            "/ojs/v1/cron",
            json!({"name": "tokyo.report", "cron": "@hourly", "enabled": false, "type": "report.generate"}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(
        (b["cron"]["expression"].as_str(), b["cron"]["next_run_at"].is_null()),
        (Some("@hourly"), true)
    );
    assert_eq!(b["cron"]["created_at"], c["created_at"], "an update keeps created_at");
    s.post("/ojs/v1/cron", entry("alpha", "*/5 * * * *", "cq")).await;
    let (_, l) = s.get("/ojs/v1/cron").await;
    let names: Vec<&str> = l["crons"]
        .as_array()
        .map(|a| a.iter().filter_map(|c| c["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names, vec!["alpha", "tokyo.report"]);
    let (st, _) = s.get("/ojs/v1/cron/alpha").await;
    assert_eq!(st, 200);
    let (st, b) = s.delete("/ojs/v1/cron/alpha").await;
    assert_eq!((st, b["cron"]["name"].as_str()), (200, Some("alpha")));
    assert_eq!(s.get("/ojs/v1/cron/alpha").await.0, 404);
    assert_eq!(s.delete("/ojs/v1/cron/alpha").await.0, 404);
}

#[tokio::test]
async fn a_hash_left_at_the_due_index_by_an_older_build_is_removed_at_start() {
    // What registering a cron entry named `due` left behind before the name was reserved.
    let ns = ojs_testkit::unique_namespace();
    let keys = ojs_store::Keys::new(&ns);
    let mut r = redis::Client::open(ojs_testkit::redis_url_for(&ns))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(keys.cron_due())
        .arg("created_at")
        .arg(1)
        .query_async(&mut r)
        .await
        .unwrap();
    let s = TestServer::start_with(|c| c.namespace = ns.clone()).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (st, b) = s.post("/ojs/v1/cron", entry("alpha", "*/5 * * * *", "cq")).await;
        // 200 after a failed try: the failing script had already written the entry's own hash.
        if st == 201 || st == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "registration still fails: {st} {b}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let t: String = redis::cmd("TYPE")
        .arg(keys.cron_due())
        .query_async(&mut r)
        .await
        .unwrap();
    assert_eq!(t, "zset");
    s.assert_invariants().await;
}

#[tokio::test]
async fn invalid_entries_are_refused_with_the_reason() {
    let s = TestServer::start().await;
    for (body, needle) in [
        (
            json!({"name": "x", "expression": "not a valid cron", "job_template": {"type": "t"}}),
            "cron expression",
        ),
        (
            json!({"name": "x", "expression": "99 25 32 13 8", "job_template": {"type": "t"}}),
            "cron expression",
        ),
        (
            json!({"name": "x", "expression": "0 0 0 0 0 0 0", "job_template": {"type": "t"}}),
            "5 fields",
        ),
        (
            json!({"name": "x", "expression": "* * * * *", "timezone": "EST", "job_template": {"type": "t"}}),
            "IANA",
        ),
        (
            json!({"name": "x", "expression": "* * * * *", "timezone": "+05:00", "job_template": {"type": "t"}}),
            "IANA",
        ),
        (
            json!({"name": "Bad Name", "expression": "* * * * *", "job_template": {"type": "t"}}),
            "name",
        ),
        (
            json!({"name": "x", "expression": "* * * * *", "overlap_policy": "sometimes", "job_template": {"type": "t"}}),
            "overlap_policy",
        ),
        (
            json!({"name": "x", "expression": "* * * * *", "job_template": {"type": "t", "priority": -1}}),
            "job_template",
        ),
        (json!({"name": "x", "expression": "* * * * *"}), "job_template"),
        // `P cron:<name>` holds an entry and `P cron:due` the due index: the name `due` is reserved.
        (
            json!({"name": "due", "expression": "* * * * *", "job_template": {"type": "t"}}),
            "reserved",
        ),
    ] {
        let (st, b) = s.post("/ojs/v1/cron", body.clone()).await;
        let msg = b["error"]["message"].as_str().unwrap_or("");
        assert!(st == 400 || st == 422, "{body} -> {st} {b}");
        assert!(
            msg.contains(needle),
            "{body}: message {msg:?} should mention {needle:?}"
        );
    }
    let (_, l) = s.get("/ojs/v1/cron").await;
    assert_eq!(l["crons"], json!([]), "nothing was registered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tick_fires_once_however_many_pods_run() {
    let bin = env!("CARGO_BIN_EXE_ojs-server");
    let ns = ojs_testkit::unique_namespace();
    let first = TestServer::spawn_pod(bin, &ns, &[]).await;
    let second = TestServer::spawn_pod(bin, &ns, &[]).await;
    let third = TestServer::spawn_pod(bin, &ns, &[]).await;
    // Every second (6 fields), overlap allow so no tick is skipped for a previous run.
    let mut e = entry("every.second", "* * * * * *", "ticks");
    e["overlap_policy"] = json!("allow");
    let (st, b) = first.post("/ojs/v1/cron", e).await;
    assert_eq!(st, 201, "{b}");
    tokio::time::sleep(Duration::from_millis(4_500)).await;
    let (st, b) = second.delete("/ojs/v1/cron/every.second").await;
    assert_eq!(st, 200);
    let run_count = b["cron"]["run_count"].as_u64().unwrap_or(0);
    let jobs = drain(&third, "ticks").await;
    let mut ticks: Vec<&str> = jobs
        .iter()
        .filter_map(|j| j["meta"]["cron_triggered_at"].as_str())
        .collect();
    let n = ticks.len();
    ticks.sort();
    ticks.dedup();
    assert_eq!(ticks.len(), n, "a tick fired twice: {jobs:?}");
    assert!(n >= 3, "three pods, 4.5 s of a per-second schedule: {n} jobs");
    assert_eq!(run_count as usize, n, "run_count counts the jobs created");
    assert!(jobs.iter().all(|j| j["meta"]["cron_name"] == "every.second"));
    first.assert_invariants().await;
}

#[tokio::test]
async fn overlap_policies_skip_cancel_and_enqueue() {
    let s = TestServer::start().await;
    let register = |name: &str, queue: &str, policy: &str| {
        let mut e = entry(name, "* * * * * *", queue);
        e["overlap_policy"] = json!(policy);
        e
    };
    for (name, queue, policy) in [
        ("o.skip", "o-skip", "skip"),
        ("o.cancel", "o-cancel", "cancel_previous"),
        ("o.enq", "o-enq", "enqueue"),
    ] {
        let (st, b) = s.post("/ojs/v1/cron", register(name, queue, policy)).await;
        assert_eq!(st, 201, "{b}");
    }
    // Claim the first run of each (it stays active), then let two more ticks pass.
    let mut first = std::collections::HashMap::new();
    for queue in ["o-skip", "o-cancel", "o-enq"] {
        let (_, b) = s
            .post("/ojs/v1/workers/fetch", json!({"queues": [queue], "wait_ms": 3000}))
            .await;
        first.insert(queue, b["jobs"][0]["id"].as_str().unwrap_or_default().to_string());
    }
    tokio::time::sleep(Duration::from_millis(2_300)).await;
    for name in ["o.skip", "o.cancel", "o.enq"] {
        s.delete(&format!("/ojs/v1/cron/{name}")).await;
    }
    // skip: no new job while the first runs; the skipped ticks are events.
    assert!(drain(&s, "o-skip").await.is_empty());
    let (_, ev) = s.get("/ojs/v1/events?types=cron.skipped").await;
    assert!(ev["events"].as_array().is_some_and(|e| !e.is_empty()), "{ev}");
    assert_eq!(
        s.wait_state(&first["o-skip"], "active", Duration::from_secs(1)).await["id"],
        first["o-skip"].as_str()
    );
    // cancel_previous: the running job was cancelled by the next tick.
    s.wait_state(&first["o-cancel"], "cancelled", Duration::from_secs(1))
        .await;
    // enqueue: later runs wait, one at a time, until the first finishes.
    assert!(
        drain(&s, "o-enq").await.is_empty(),
        "queued runs never run alongside the first"
    );
    let (st, _) = s.post("/ojs/v1/workers/ack", json!({"job_id": first["o-enq"]})).await;
    assert_eq!(st, 200);
    assert_eq!(
        wait_for_jobs(&s, "o-enq", Duration::from_secs(3)).await.len(),
        1,
        "the next queued run, alone"
    );
    s.assert_invariants().await;
}

/// `skip` also holds while the previous run still waits for a worker: ticks then do not pile up runs
/// behind it (and the conformance suite's overlap test, whose worker claims the first run only after a
/// minute, cannot find a second run queued by a tick that came before that claim).
#[tokio::test]
async fn skip_holds_while_the_previous_run_still_waits() {
    let s = TestServer::start().await;
    let mut e = entry("w.skip", "* * * * * *", "w-skip");
    e["overlap_policy"] = json!("skip");
    let (st, b) = s.post("/ojs/v1/cron", e).await;
    assert_eq!(st, 201, "{b}");
    // Several ticks pass with nobody fetching: one run waits, the later ticks were skipped.
    tokio::time::sleep(Duration::from_millis(3_300)).await;
    let (_, l) = s.get("/ojs/v1/admin/jobs?queue=w-skip&state=available").await;
    assert_eq!(
        l["pagination"]["total"], 1,
        "one run waits, the ticks after it were skipped: {l}"
    );
    let first = drain(&s, "w-skip").await;
    assert_eq!(first.len(), 1);
    // Once it has ended, the next tick fires again.
    let (st, _) = s.post("/ojs/v1/workers/ack", json!({"job_id": first[0]["id"]})).await;
    assert_eq!(st, 200);
    assert_eq!(wait_for_jobs(&s, "w-skip", Duration::from_secs(3)).await.len(), 1);
    s.delete("/ojs/v1/cron/w.skip").await;
    s.assert_invariants().await;
}

#[tokio::test]
async fn ticks_missed_while_every_pod_was_down_fire_once() {
    let s = TestServer::start().await;
    let (st, _) = s.post("/ojs/v1/cron", entry("yearly", "@yearly", "missed")).await;
    assert_eq!(st, 201);
    // As if every pod had been down since long before the entry's next tick: next_run_at in the past.
    let mut conn = s.redis().await;
    let past: i64 = 1_000_000_000_000;
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg(s.keys().cron("yearly"))
        .arg("next_run_at")
        .arg(past)
        .ignore()
        .cmd("ZADD")
        .arg(s.keys().cron_due())
        .arg(past)
        .arg("yearly")
        .ignore()
        .query_async(&mut conn)
        .await
        .expect("redis");
    let jobs = wait_for_jobs(&s, "missed", Duration::from_secs(3)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        jobs.len() + drain(&s, "missed").await.len(),
        1,
        "one catch-up occurrence, not one per missed year"
    );
    let (_, b) = s.get("/ojs/v1/cron/yearly").await;
    let next = ojs_core::clock::parse_ms(b["cron"]["next_run_at"].as_str().unwrap_or("")).unwrap_or(0);
    assert!(
        next > ojs_core::clock::local_now_ms(),
        "next_run_at moved to the next future tick: {b}"
    );
    assert_eq!(b["cron"]["run_count"], 1);
    s.assert_invariants().await;
}

/// A year of daily firings in New York across both 2026 transitions, through the schedule the server
/// fires by (`ojs_core::cron`): 02:30 does not exist on March 8 (no firing that day), 01:30 happens twice
/// on November 1 (one firing, the first), and every firing is at 02:30 or 01:30 local, EST or EDT as
/// the date calls for.
#[test]
fn a_year_of_new_york_firings_across_daylight_saving() {
    use ojs_core::cron::Schedule;
    let ms = |s: &str| ojs_core::clock::parse_ms(s).expect("time");
    for (expr, wall_hour, skipped_day, repeated_day) in [
        ("30 2 * * *", 2, Some("2026-03-08"), None),
        ("30 1 * * *", 1, None, Some("2026-11-01")),
    ] {
        let s = Schedule::parse(expr, "America/New_York").expect("schedule");
        let (mut at, end) = (ms("2026-01-01T00:00:00Z"), ms("2027-01-01T00:00:00Z"));
        let mut days = Vec::new();
        while let Some(next) = s.next_after_ms(at).filter(|n| *n < end) {
            let utc = ojs_core::clock::format_ms(next);
            // EDT (UTC-4) from March 8 to November 1, else EST (UTC-5).
            let dst = ("2026-03-08T07".."2026-11-01T06").contains(&utc.as_str());
            let utc_hour: i64 = utc[11..13].parse().expect("hour");
            assert_eq!(utc_hour, wall_hour + if dst { 4 } else { 5 }, "{expr}: {utc}");
            days.push(utc[..10].to_string());
            at = next;
        }
        let unique: std::collections::BTreeSet<_> = days.iter().collect();
        assert_eq!(unique.len(), days.len(), "{expr}: a day fired twice");
        match (skipped_day, repeated_day) {
            (Some(d), _) => {
                assert_eq!(days.len(), 364, "{expr}");
                assert!(!days.iter().any(|x| x == d), "{expr} fired on {d}");
            }
            (_, Some(d)) => {
                assert_eq!(days.len(), 365, "{expr}");
                assert!(days.iter().any(|x| x == d), "{expr} did not fire on {d}");
            }
            _ => unreachable!(),
        }
    }
}

/// The runs so far of the entry `name`.
async fn runs(s: &TestServer, name: &str) -> i64 {
    let (st, b) = s.get(&format!("/ojs/v1/cron/{name}")).await;
    assert_eq!(st, 200, "{b}");
    b["cron"]["run_count"].as_i64().unwrap_or(-1)
}

/// A template holding a time the scripts cannot take (scheduled_at in the year 9999) was registered
/// (201), then every firing failed in Redis, and each timer round met that entry first: no entry of
/// any tenant fired while it existed. Such a time is now a 400 naming the field, at registration as at
/// enqueue; an entry stored before (its template written here straight into Redis) or one a script
/// refuses for any reason has its tick skipped, and the round goes on.
#[tokio::test]
async fn an_entry_that_cannot_fire_holds_back_no_other() {
    let s = TestServer::start().await;
    let mut poison = entry("poison.far", "* * * * * *", "far");
    poison["job_template"]["scheduled_at"] = json!("9999-12-31T23:59:59Z");
    let (st, b) = s.post("/ojs/v1/cron", poison.clone()).await;
    assert_eq!((st, &b["error"]["code"]), (400, &json!("invalid_request")), "{b}");
    assert!(
        b["error"]["message"].as_str().unwrap_or("").contains("scheduled_at"),
        "{b}"
    );
    for name in ["good.every", "poison.far", "poison.tick"] {
        let (st, b) = s.post("/ojs/v1/cron", entry(name, "* * * * * *", "cronq")).await;
        assert_eq!(st, 201, "{b}");
    }
    let mut c = s.redis().await;
    // As an older build stored it: the far-future template.
    let def: String = redis::cmd("HGET")
        .arg(s.keys().cron("poison.far"))
        .arg("def")
        .query_async(&mut c)
        .await
        .expect("HGET def");
    let mut def: Value = serde_json::from_str(&def).expect("def is JSON");
    def["job_template"]["scheduled_at"] = json!("9999-12-31T23:59:59Z");
    let _: () = redis::cmd("HSET")
        .arg(s.keys().cron("poison.far"))
        .arg("def")
        .arg(def.to_string())
        .query_async(&mut c)
        .await
        .expect("HSET def");
    // And a tick the script refuses (its next run no time).
    let _: () = redis::cmd("HSET")
        .arg(s.keys().cron("poison.tick"))
        .arg("next_run_at")
        .arg("soon")
        .query_async(&mut c)
        .await
        .expect("HSET next_run_at");
    let before = runs(&s, "good.every").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while runs(&s, "good.every").await < before + 2 {
        assert!(
            Instant::now() < deadline,
            "good.every did not fire while the broken entries were there"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    s.assert_invariants().await;
}

/// Every absolute time a request carries is checked against the range the scripts take: outside it, a
/// 400 naming the field (it was a 500 "bug in the server" from the script's argument check).
#[tokio::test]
async fn a_time_outside_the_stored_range_is_a_400_naming_the_field() {
    let s = TestServer::start().await;
    let far = "9999-12-31T23:59:59Z";
    let before_epoch = "1969-12-31T23:59:59Z";
    for (path, body, field) in [
        (
            "/ojs/v1/jobs",
            json!({"type": "t", "args": [], "scheduled_at": far}),
            "scheduled_at",
        ),
        (
            "/ojs/v1/jobs",
            json!({"type": "t", "args": [], "scheduled_at": before_epoch}),
            "scheduled_at",
        ),
        (
            "/ojs/v1/jobs",
            json!({"type": "t", "args": [], "options": {"expires_at": far}}),
            "expires_at",
        ),
        (
            "/ojs/v1/jobs/batch",
            json!({"jobs": [{"type": "t", "args": [], "scheduled_at": far}]}),
            "scheduled_at",
        ),
        (
            "/ojs/v1/workflows",
            json!({"type": "group", "jobs": [{"type": "t", "args": [], "scheduled_at": far}]}),
            "scheduled_at",
        ),
    ] {
        let (st, b) = s.post(path, body).await;
        assert_eq!(
            (st, &b["error"]["code"]),
            (400, &json!("invalid_request")),
            "{path}: {b}"
        );
        assert!(
            b["error"]["message"].as_str().unwrap_or("").contains(field),
            "{path}: {b}"
        );
    }
    let (st, b) = s
        .put("/ojs/v1/rate-limits/far", json!({"concurrency": 1, "expires_at": far}))
        .await;
    assert_eq!((st, &b["error"]["code"]), (400, &json!("invalid_request")), "{b}");
    s.enqueue(json!({"type": "t", "args": [], "options": {"queue": "farq"}}))
        .await;
    let got = s.fetch(&["farq"], 1).await;
    let (st, b) = s
        .post(
            "/ojs/v1/workers/nack",
            json!({"job_id": got[0]["id"], "error": {"message": "429", "rate_limit_until": far}}),
        )
        .await;
    assert_eq!((st, &b["error"]["code"]), (400, &json!("invalid_request")), "{b}");
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("rate_limit_until"),
        "{b}"
    );
    s.assert_invariants().await;
}
