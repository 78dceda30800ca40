//! Flow control holds through every change of its settings (issue 37, items 6 to 11): what an operator
//! changes while jobs run, and what a tenant does at scale, keeps every limit and every invariant. Each
//! case runs on one shard and on three (`--shards 3`, on one Redis).

use ojs_testkit::TestServer;
use serde_json::{json, Value};

async fn server(shards: u16) -> TestServer {
    TestServer::start_with(|c| c.shards = shards).await
}

fn id(j: &Value) -> String {
    j["id"].as_str().unwrap_or_default().to_string()
}

/// Item 9: an adaptive key whose jobs cost 2 never stepped back up after a halving: `rl_adapt_up` took
/// a success "at the limit" by comparing the key's holders (jobs) with its limit (units), so two jobs
/// of cost 2 at a limit of 4 looked like half of it. After a halving to 4 units, a success with the key
/// full must raise the limit one step.
async fn an_adaptive_key_of_costly_jobs_steps_back_up(shards: u16) {
    let s = server(shards).await;
    let q = "adapt-cost";
    let job = json!({"type": "call", "args": [], "queue": q,
        "rate_limit": {"key": "costly", "concurrency": 8, "cost": 2,
            "adaptive": {"increase_after": 1, "errors": ["TooManyRequests"]}}});
    for _ in 0..6 {
        s.enqueue(job.clone()).await;
    }
    // Four jobs hold all 8 units; one meets a 429: the limit halves to 4.
    let held: Vec<Value> = s.fetch(&[q], 4).await;
    assert_eq!(held.len(), 4);
    let (st, b) = s
        .post(
            "/ojs/v1/workers/nack",
            json!({"job_id": id(&held[0]), "error": {"type": "TooManyRequests", "message": "429"}}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    let (_, state) = s.get("/ojs/v1/rate-limits/costly").await;
    assert_eq!(state["adaptive"]["concurrency"]["effective"], 4, "{state}");
    // Three still run: 6 units over a limit of 4. Each success while no further job of cost 2 fits is
    // one at the limit: 6 + 2 > 4 steps to 5, then 4 + 2 > 5 steps to 6, then 2 + 2 <= 6 does not.
    for j in &held[1..] {
        assert_eq!(s.ack(&id(j)).await.0, 200);
    }
    let (_, state) = s.get("/ojs/v1/rate-limits/costly").await;
    assert_eq!(state["adaptive"]["concurrency"]["effective"], 6, "{state}");
    s.assert_invariants().await;
}

#[tokio::test]
async fn an_adaptive_key_of_costly_jobs_steps_back_up_one_shard() {
    an_adaptive_key_of_costly_jobs_steps_back_up(1).await;
}

#[tokio::test]
async fn an_adaptive_key_of_costly_jobs_steps_back_up_three_shards() {
    an_adaptive_key_of_costly_jobs_steps_back_up(3).await;
}

/// Item 11: each minute's hash of tenants' claims (`P tenants:m:<minute>`) expires 62 minutes after its
/// minute began, set once per call. "Once" was a variable on the library's top level, which outlives
/// calls: a second namespace (or shard) on the same Redis claiming in the same minute skipped its own
/// key's expiry, and that key never expired. Both namespaces' keys must now expire.
#[tokio::test]
async fn a_tenants_minute_expires_in_every_namespace_sharing_the_redis() {
    let a = TestServer::start().await;
    let b = TestServer::start().await;
    for s in [&a, &b] {
        let (st, body) = s
            .send_as(
                reqwest::Method::POST,
                "/ojs/v1/jobs",
                "acme",
                Some(json!({"type": "t", "args": [], "queue": "minute"})),
            )
            .await;
        assert_eq!(st, 201, "{body}");
    }
    for s in [&a, &b] {
        assert_eq!(s.fetch(&["minute"], 1).await.len(), 1);
    }
    for s in [&a, &b] {
        let mut r = s.redis().await;
        let pattern = format!("{}tenants:m:*", s.keys().prefix());
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(&pattern)
            .query_async(&mut r)
            .await
            .expect("KEYS");
        assert!(!keys.is_empty(), "{pattern}");
        for k in keys {
            let ttl: i64 = redis::cmd("PTTL").arg(&k).query_async(&mut r).await.expect("PTTL");
            assert!(ttl > 0, "{k} has no expiry ({ttl})");
        }
    }
}

/// Item 6: explain said "fair share, 1 tenant ahead" counting a tenant with nothing ready (its only job
/// cancelled), and the next FETCH claimed the job at once. Explain and FETCH must agree: no tenant with
/// nothing ready is ahead.
async fn explain_counts_no_tenant_with_nothing_ready_as_ahead(shards: u16) {
    let s = server(shards).await;
    let q = "turns";
    let enqueue_as = |tenant: &'static str| {
        let s = &s;
        async move {
            let (st, b) = s
                .send_as(
                    reqwest::Method::POST,
                    "/ojs/v1/jobs",
                    tenant,
                    Some(json!({"type": "t", "args": [], "queue": q})),
                )
                .await;
            assert_eq!(st, 201, "{b}");
            b["job"]["id"].as_str().unwrap_or_default().to_string()
        }
    };
    // Both join the share at pass 0; "a-first" sorts first, so its turn comes first.
    let first = enqueue_as("a-first").await;
    let second = enqueue_as("b-second").await;
    let (st, b) = s.delete(&format!("/ojs/v1/jobs/{first}")).await;
    assert_eq!(st, 200, "{b}");
    let (st, why) = s.get(&format!("/ojs/v1/jobs/{second}/explain")).await;
    assert_eq!(st, 200, "{why}");
    let gates: Vec<&str> = why["gates"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g["gate"].as_str())
        .collect();
    assert!(!gates.contains(&"fair_share"), "nothing ready is ahead of it: {why}");
    let got = s.fetch(&[q], 1).await;
    assert_eq!(got[0]["id"], second.as_str(), "and FETCH claims it at once");
}

#[tokio::test]
async fn explain_counts_no_tenant_with_nothing_ready_as_ahead_one_shard() {
    explain_counts_no_tenant_with_nothing_ready_as_ahead(1).await;
}

#[tokio::test]
async fn explain_counts_no_tenant_with_nothing_ready_as_ahead_three_shards() {
    explain_counts_no_tenant_with_nothing_ready_as_ahead(3).await;
}

/// Item 7: a cap set while a tenant runs 3 jobs still let a 4th start: jobs claimed before the cap held
/// no slot. The README says a changed setting takes effect at once: the cap counts them.
async fn a_cap_set_while_a_tenant_runs_counts_its_running_jobs(shards: u16) {
    let s = server(shards).await;
    let q = "late-cap";
    let tenancy = format!("/ojs/v1/admin/queues/{q}/tenancy");
    let (st, b) = s.put(&tenancy, json!({"source": "meta", "field": "customer"})).await;
    assert_eq!(st, 200, "{b}");
    for i in 0..5 {
        s.enqueue(json!({"type": "t", "args": [i], "queue": q, "meta": {"customer": "acme"}}))
            .await;
    }
    assert_eq!(s.fetch(&[q], 3).await.len(), 3, "no cap yet");
    let (st, b) = s
        .put(
            &tenancy,
            json!({"source": "meta", "field": "customer", "concurrency": {"acme": 3}}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    assert!(s.fetch(&[q], 1).await.is_empty(), "acme runs 3 of its cap of 3");
    s.assert_invariants().await;
}

#[tokio::test]
async fn a_cap_set_while_a_tenant_runs_counts_its_running_jobs_one_shard() {
    a_cap_set_while_a_tenant_runs_counts_its_running_jobs(1).await;
}

#[tokio::test]
async fn a_cap_set_while_a_tenant_runs_counts_its_running_jobs_three_shards() {
    a_cap_set_while_a_tenant_runs_counts_its_running_jobs(3).await;
}

/// Item 8: a queue's concurrency (the pool floors are owed in) removed while a floor was owed, then set
/// again: the old floor owed stayed, and a floor-0 job with every slot free was never claimed. The
/// floors owed leave with their pool.
async fn floors_owed_leave_with_their_pool(shards: u16) {
    let s = server(shards).await;
    let q = "pool-again";
    let limit = format!("/ojs/v1/admin/queues/{q}/rate-limit");
    let (st, b) = s.put(&limit, json!({"concurrency": 1})).await;
    assert_eq!(st, 200, "{b}");
    s.enqueue(json!({"type": "t", "args": [], "queue": q,
        "rate_limit": {"key": "floored", "concurrency": 1, "floor": 1}}))
        .await;
    let (_, l) = s.get(&limit).await;
    assert_eq!(
        l["concurrency"]["floors_owed"], 1,
        "its floor is owed while it waits: {l}"
    );
    // The pool goes; the floored job runs and ends without it; the pool comes back.
    let (st, _) = s.delete(&limit).await;
    assert_eq!(st, 200);
    let got = s.fetch(&[q], 1).await;
    assert_eq!(got.len(), 1);
    assert_eq!(s.ack(got[0]["id"].as_str().unwrap_or_default()).await.0, 200);
    let (st, b) = s.put(&limit, json!({"concurrency": 1})).await;
    assert_eq!(st, 200, "{b}");
    let (_, l) = s.get(&limit).await;
    assert_eq!(
        l["concurrency"]["floors_owed"].as_u64().unwrap_or(0),
        0,
        "nothing is owed in the new pool: {l}"
    );
    // A key of floor 0 borrows the free slot.
    s.enqueue(json!({"type": "t", "args": [], "queue": q,
        "rate_limit": {"key": "borrower", "concurrency": 1, "floor": 0}}))
        .await;
    assert_eq!(s.fetch(&[q], 1).await.len(), 1, "every slot is free");
    s.assert_invariants().await;
}

/// Item 8, inside a tenant: the pool is the tenant's concurrency in the queue; its cap removed while a
/// floor was owed there, then set again.
async fn floors_owed_leave_with_a_tenants_pool(shards: u16) {
    let s = server(shards).await;
    let q = "tenant-pool-again";
    let tenancy = format!("/ojs/v1/admin/queues/{q}/tenancy");
    let capped = json!({"source": "meta", "field": "customer", "concurrency": {"acme": 1}});
    let (st, b) = s.put(&tenancy, capped.clone()).await;
    assert_eq!(st, 200, "{b}");
    let job = |key: &str, floor: u32| {
        json!({"type": "t", "args": [], "queue": q, "meta": {"customer": "acme"},
            "rate_limit": {"key": key, "concurrency": 1, "floor": floor}})
    };
    s.enqueue(job("acme-floored", 1)).await;
    let (st, b) = s.put(&tenancy, json!({"source": "meta", "field": "customer"})).await;
    assert_eq!(st, 200, "{b}");
    let got = s.fetch(&[q], 1).await;
    assert_eq!(got.len(), 1);
    assert_eq!(s.ack(got[0]["id"].as_str().unwrap_or_default()).await.0, 200);
    let (st, b) = s.put(&tenancy, capped).await;
    assert_eq!(st, 200, "{b}");
    s.enqueue(job("acme-borrower", 0)).await;
    assert_eq!(s.fetch(&[q], 1).await.len(), 1, "acme's only slot is free");
    s.assert_invariants().await;
}

#[tokio::test]
async fn floors_owed_leave_with_a_tenants_pool_one_shard() {
    floors_owed_leave_with_a_tenants_pool(1).await;
}

#[tokio::test]
async fn floors_owed_leave_with_a_tenants_pool_three_shards() {
    floors_owed_leave_with_a_tenants_pool(3).await;
}

#[tokio::test]
async fn floors_owed_leave_with_their_pool_one_shard() {
    floors_owed_leave_with_their_pool(1).await;
}

#[tokio::test]
async fn floors_owed_leave_with_their_pool_three_shards() {
    floors_owed_leave_with_their_pool(3).await;
}

/// The lanes of `key` parked now, in every queue and tenant's sub-queue (read through the keyspace, so
/// the same whatever index the scripts keep). Each shard's keys are read on the Redis that holds them (on
/// a cluster, the shards' hash tags live on different primaries).
async fn parked_lanes(s: &TestServer, key: &str, shards: u16) -> usize {
    let mut n = 0;
    for i in 0..shards {
        let prefix = ojs_testkit::shard_keys(&s.namespace, usize::from(i)).schema();
        let mut r = redis::Client::open(ojs_testkit::redis_url_of(&prefix))
            .expect("redis url")
            .get_multiplexed_async_connection()
            .await
            .expect("redis connection");
        // Shard i's prefix is ojs:{<namespace>.<i>}: (shard 0's ojs:{<namespace>}:).
        let tag = prefix.split('}').next().expect("a hash tag");
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{tag}}}:q:*:parked"))
            .query_async(&mut r)
            .await
            .expect("KEYS");
        for k in keys {
            let has: bool = redis::cmd("HEXISTS")
                .arg(&k)
                .arg(key)
                .query_async(&mut r)
                .await
                .unwrap_or(false);
            n += usize::from(has);
        }
    }
    n
}

/// Item 10: with many tenants sharing one rate-limit key, one ACK re-opened every tenant's parked lane
/// (`lane_wake_all`): O(tenants) work in one call, 250-360 ms with 10,000 tenants, for every release of
/// the key. A release now re-opens a bounded number of lanes (those that parked first), and the others
/// follow at the next releases: every job still runs.
async fn a_release_wakes_a_bounded_number_of_lanes(shards: u16) {
    let s = server(shards).await;
    let q = "shared-key";
    let tenants = 120;
    for t in 0..tenants {
        let (st, b) = s
            .send_as(
                reqwest::Method::POST,
                "/ojs/v1/jobs",
                &format!("t{t:03}"),
                Some(json!({"type": "t", "args": [], "queue": q,
                    "rate_limit": {"key": "shared", "concurrency": 1}})),
            )
            .await;
        assert_eq!(st, 201, "{b}");
    }
    let first = s.fetch(&[q], 1).await;
    assert_eq!(first.len(), 1);
    // FETCH meets every other tenant's lane at the key's limit and parks it (100 per call at most).
    for _ in 0..5 {
        assert!(s.fetch(&[q], 1).await.is_empty());
    }
    assert_eq!(parked_lanes(&s, "shared", shards).await, tenants - 1);
    assert_eq!(s.ack(&id(&first[0])).await.0, 200);
    let still = parked_lanes(&s, "shared", shards).await;
    assert!(
        still >= tenants - 1 - 10,
        "one release re-opened {} lanes (at most 10)",
        tenants - 1 - still
    );
    // And every job runs, one at a time.
    let mut done = 1;
    for _ in 0..(tenants * 4) {
        for j in s.fetch(&[q], 1).await {
            assert_eq!(s.ack(&id(&j)).await.0, 200);
            done += 1;
        }
        if done == tenants {
            break;
        }
    }
    assert_eq!(done, tenants, "every tenant's job ran");
    s.assert_invariants().await;
}

#[tokio::test]
async fn a_release_wakes_a_bounded_number_of_lanes_one_shard() {
    a_release_wakes_a_bounded_number_of_lanes(1).await;
}

#[tokio::test]
async fn a_release_wakes_a_bounded_number_of_lanes_three_shards() {
    a_release_wakes_a_bounded_number_of_lanes(3).await;
}

/// A lane parked by a build before the index of parked lanes (which a release now reads) would never be
/// re-opened by a release. A pod indexes such lanes when it starts.
#[tokio::test]
async fn a_lane_parked_by_an_older_build_is_woken_after_the_upgrade() {
    let s = server(1).await;
    let q = "older-park";
    for i in 0..2 {
        s.enqueue(json!({"type": "t", "args": [i], "queue": q,
            "rate_limit": {"key": "older", "concurrency": 1}}))
            .await;
    }
    let first = s.fetch(&[q], 1).await;
    assert_eq!(first.len(), 1);
    assert!(s.fetch(&[q], 1).await.is_empty(), "the second parks its lane");
    // As an older build left it: parked, but in no index.
    let mut r = s.redis().await;
    let _: i64 = redis::cmd("DEL")
        .arg(s.keys().rl_parked("older"))
        .query_async(&mut r)
        .await
        .expect("DEL");
    // A pod of this build starts on the deployment.
    let mut cfg = ojs_testkit::base_config();
    cfg.namespace = s.namespace.clone();
    cfg.tick_ms = 20;
    let pod = TestServer::start_config(cfg).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let n: i64 = redis::cmd("ZCARD")
            .arg(s.keys().rl_parked("older"))
            .query_async(&mut r)
            .await
            .expect("ZCARD");
        if n == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the new pod indexed no parked lane"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(pod.ack(&id(&first[0])).await.0, 200);
    assert_eq!(pod.fetch(&[q], 1).await.len(), 1, "the release re-opened the lane");
    s.assert_invariants().await;
}
