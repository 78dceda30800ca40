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

/// A pool that comes while a key's lane waits owes the key's floor at once (README: "a changed setting
/// takes effect at once"). queue-conf-1.lua dropped every floor owed when the queue's pool came or
/// went (pool_gen, item 8) and left each lane's part to its next sync: until then the pool owed
/// nothing, and a borrower (floor 0, ahead by priority) took the slot the waiting key's floor keeps.
/// Found by tests/model.rs (OJS_MODEL_SEED=1).
async fn a_pool_that_comes_owes_the_floors_of_the_lanes_waiting(shards: u16) {
    let s = server(shards).await;
    let q = "pool-comes";
    let limit = format!("/ojs/v1/admin/queues/{q}/rate-limit");
    let floored = s
        .enqueue(json!({"type": "t", "args": [], "queue": q,
            "rate_limit": {"key": "keeps-one", "concurrency": 2, "floor": 1}}))
        .await;
    let (st, b) = s.put(&limit, json!({"concurrency": 1})).await;
    assert_eq!(st, 200, "{b}");
    let (_, l) = s.get(&limit).await;
    assert_eq!(
        l["concurrency"]["floors_owed"], 1,
        "the new pool owes the waiting key its floor: {l}"
    );
    s.enqueue(json!({"type": "t", "args": [], "queue": q, "priority": 0,
        "rate_limit": {"key": "borrows", "concurrency": 2, "floor": 0}}))
        .await;
    let got = s.fetch(&[q], 1).await;
    assert_eq!(got.len(), 1);
    assert_eq!(id(&got[0]), floored, "the only slot is the floor's: {got:?}");
    s.assert_invariants().await;
}

#[tokio::test]
async fn a_pool_that_comes_owes_the_floors_of_the_lanes_waiting_one_shard() {
    a_pool_that_comes_owes_the_floors_of_the_lanes_waiting(1).await;
}

#[tokio::test]
async fn a_pool_that_comes_owes_the_floors_of_the_lanes_waiting_three_shards() {
    a_pool_that_comes_owes_the_floors_of_the_lanes_waiting(3).await;
}

/// The same inside a tenant: its cap in the queue moved (2 to 1) while its floored key waited; the
/// tenant's pool still owes the floor, and a borrower of the tenant does not take its one slot.
async fn a_tenants_cap_that_moves_keeps_the_floors_owed(shards: u16) {
    let s = server(shards).await;
    let q = "cap-moves";
    let tenancy = format!("/ojs/v1/admin/queues/{q}/tenancy");
    let cap = |c: u32| json!({"source": "meta", "field": "customer", "concurrency": {"acme": c}});
    let (st, b) = s.put(&tenancy, cap(2)).await;
    assert_eq!(st, 200, "{b}");
    let floored = s
        .enqueue(
            json!({"type": "t", "args": [], "queue": q, "meta": {"customer": "acme"},
            "rate_limit": {"key": "acme-keeps-one", "concurrency": 2, "floor": 1}}),
        )
        .await;
    let (st, b) = s.put(&tenancy, cap(1)).await;
    assert_eq!(st, 200, "{b}");
    s.enqueue(
        json!({"type": "t", "args": [], "queue": q, "priority": 0, "meta": {"customer": "acme"},
        "rate_limit": {"key": "acme-borrows", "concurrency": 2, "floor": 0}}),
    )
    .await;
    let got = s.fetch(&[q], 1).await;
    assert_eq!(got.len(), 1);
    assert_eq!(id(&got[0]), floored, "acme's only slot is the floor's: {got:?}");
    s.assert_invariants().await;
}

#[tokio::test]
async fn a_tenants_cap_that_moves_keeps_the_floors_owed_one_shard() {
    a_tenants_cap_that_moves_keeps_the_floors_owed(1).await;
}

#[tokio::test]
async fn a_tenants_cap_that_moves_keeps_the_floors_owed_three_shards() {
    a_tenants_cap_that_moves_keeps_the_floors_owed(3).await;
}

/// The keys of every shard of `s` whose name contains `needle` and that have no TTL.
async fn lasting_keys(s: &TestServer, needle: &str, shards: u16) -> Vec<String> {
    let mut out = Vec::new();
    for i in 0..shards {
        let prefix = ojs_store::Keys::for_shard(&s.namespace, usize::from(i)).schema();
        let mut r = redis::Client::open(ojs_testkit::redis_url_of(&prefix))
            .expect("redis url")
            .get_multiplexed_async_connection()
            .await
            .expect("redis connection");
        let tag = prefix.split('}').next().expect("a hash tag");
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{tag}}}:*{needle}*"))
            .query_async(&mut r)
            .await
            .expect("KEYS");
        for k in keys {
            let ttl: i64 = redis::cmd("PTTL").arg(&k).query_async(&mut r).await.expect("PTTL");
            if ttl == -1 {
                out.push(k);
            }
        }
    }
    out
}

/// A paused key (concurrency 0) whose waiting jobs are all cancelled is idle like any key whose last
/// job left: its lane is no longer parked, and its state expires (lua/includes/rl_lanes.lua "Idle
/// keys"). Cancelling a job out of a parked lane left the empty lane parked for ever (nothing wakes a
/// lane parked "until a release" of a key that holds no slot), so the key, its queue's parked entry
/// and its tenant's place in the queue never left. Found by tests/model.rs (OJS_MODEL_SEED=1, the
/// keyspace check after every job ended).
async fn a_paused_keys_cancelled_jobs_leave_nothing_behind(shards: u16) {
    let s = server(shards).await;
    let q = "paused-cancel";
    let job = json!({"type": "t", "args": [], "queue": q, "meta": {"tenant_id": "acme"},
        "rate_limit": {"key": "paused-key", "concurrency": 0}});
    let ids = [s.enqueue(job.clone()).await, s.enqueue(job).await];
    assert!(s.fetch(&[q], 1).await.is_empty(), "the key is paused: its lane parks");
    assert_eq!(parked_lanes(&s, "paused-key", shards).await, 1);
    for id in &ids {
        let (st, b) = s.delete(&format!("/ojs/v1/jobs/{id}")).await;
        assert_eq!(st, 200, "{b}");
    }
    assert!(s.fetch(&[q], 1).await.is_empty());
    assert_eq!(
        parked_lanes(&s, "paused-key", shards).await,
        0,
        "no job is left to park"
    );
    let lasting = lasting_keys(&s, "paused-key", shards).await;
    assert!(lasting.is_empty(), "the idle key's state must expire: {lasting:?}");
    let lasting = lasting_keys(&s, &format!("{q}@acme"), shards).await;
    assert!(lasting.is_empty(), "acme's sub-queue keeps nothing: {lasting:?}");
    s.assert_invariants().await;
}

#[tokio::test]
async fn a_paused_keys_cancelled_jobs_leave_nothing_behind_one_shard() {
    a_paused_keys_cancelled_jobs_leave_nothing_behind(1).await;
}

#[tokio::test]
async fn a_paused_keys_cancelled_jobs_leave_nothing_behind_three_shards() {
    a_paused_keys_cancelled_jobs_leave_nothing_behind(3).await;
}

/// A key whose only jobs were scheduled (a delay, or a retry's wait) and cancelled before they ever
/// waited in a lane is idle too: its policy, state and counters expire (lua/includes/rl_lanes.lua "Idle
/// keys"). Cancelling a scheduled job never asked whether its key had gone idle, so the key's state
/// stayed for ever and the key stayed listed. Found by tests/model.rs (OJS_MODEL_SEED=1 with 16
/// cases, the keyspace check after every job ended).
async fn a_keys_cancelled_scheduled_jobs_leave_it_idle(shards: u16) {
    let s = server(shards).await;
    let q = "scheduled-cancel";
    let id = s
        .enqueue(
            json!({"type": "t", "args": [], "queue": q, "options": {"delay_ms": 3_600_000},
            "rate_limit": {"key": "scheduled-key", "concurrency": 2}}),
        )
        .await;
    let (st, b) = s.delete(&format!("/ojs/v1/jobs/{id}")).await;
    assert_eq!(st, 200, "{b}");
    let lasting = lasting_keys(&s, "scheduled-key", shards).await;
    assert!(lasting.is_empty(), "the idle key's state must expire: {lasting:?}");
    s.assert_invariants().await;
}

#[tokio::test]
async fn a_keys_cancelled_scheduled_jobs_leave_it_idle_one_shard() {
    a_keys_cancelled_scheduled_jobs_leave_it_idle(1).await;
}

#[tokio::test]
async fn a_keys_cancelled_scheduled_jobs_leave_it_idle_three_shards() {
    a_keys_cancelled_scheduled_jobs_leave_it_idle(3).await;
}

/// A FETCH acting as a tenant (`X-OJS-Tenant`) that finds the tenant at its cap parks it out of the
/// fair share; when it was the queue's last tenant there, the queue leaves the ready index too, as a
/// FETCH of the whole queue makes it. The tenant's own FETCH left the queue indexed with no ready set
/// and no tenant (a broken keyspace invariant until the next FETCH of the queue). Found by
/// tests/model.rs (OJS_MODEL_SEED=3).
async fn a_tenants_fetch_at_its_cap_keeps_the_ready_index_exact(shards: u16) {
    let s = server(shards).await;
    let q = "cap-fetch";
    let (st, b) = s
        .put(
            &format!("/ojs/v1/admin/queues/{q}/tenancy"),
            json!({"source": "meta", "concurrency": {"acme": 1}}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    s.enqueue(json!({"type": "t", "args": [], "queue": q, "meta": {"tenant_id": "acme"}}))
        .await;
    assert_eq!(s.fetch(&[q], 1).await.len(), 1);
    let (st, b) = s
        .send_as(
            reqwest::Method::POST,
            "/ojs/v1/workers/fetch",
            "acme",
            Some(json!({"queues": [q], "worker_id": "w"})),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["jobs"], json!([]), "acme is at its cap");
    invariants_on_every_shard(&s, shards).await;
}

/// The keyspace invariants of every shard of `s` (`assert_invariants` reads shard 0's).
async fn invariants_on_every_shard(s: &TestServer, shards: u16) {
    let mut problems = Vec::new();
    for i in 0..usize::from(shards) {
        let url = ojs_testkit::redis_url_of(&ojs_store::Keys::for_shard(&s.namespace, i).schema());
        problems.extend(ojs_testkit::invariants::check_shard_invariants(&url, &s.namespace, i).await);
    }
    assert!(
        problems.is_empty(),
        "keyspace invariants broken:\n  {}",
        problems.join("\n  ")
    );
}

#[tokio::test]
async fn a_tenants_fetch_at_its_cap_keeps_the_ready_index_exact_one_shard() {
    a_tenants_fetch_at_its_cap_keeps_the_ready_index_exact(1).await;
}

#[tokio::test]
async fn a_tenants_fetch_at_its_cap_keeps_the_ready_index_exact_three_shards() {
    a_tenants_fetch_at_its_cap_keeps_the_ready_index_exact(3).await;
}

/// A tenant parked at its cap whose waiting jobs then all left (cancelled) leaves the queue's tenants
/// with a sub-queue (`q:Q:subs`) when its slot comes back: nothing else would take it out, as FETCH
/// only looks at the tenants of the fair share, which a parked tenant with nothing ready does not
/// re-join. It stayed for ever. Found by tests/model.rs (OJS_MODEL_SEED=2, the keyspace check after
/// every job ended).
async fn a_parked_tenant_with_nothing_left_leaves_the_queues_tenants(shards: u16) {
    let s = server(shards).await;
    let q = "cap-subs";
    let (st, b) = s
        .put(
            &format!("/ojs/v1/admin/queues/{q}/tenancy"),
            json!({"source": "meta", "concurrency": {"acme": 1}}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    let job = json!({"type": "t", "args": [], "queue": q, "meta": {"tenant_id": "acme"}});
    s.enqueue(job.clone()).await;
    let waiting = s.enqueue(job).await;
    let running = s.fetch(&[q], 1).await;
    assert_eq!(running.len(), 1);
    assert!(s.fetch(&[q], 1).await.is_empty(), "acme is at its cap: parked");
    let (st, b) = s.delete(&format!("/ojs/v1/jobs/{waiting}")).await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(s.ack(&id(&running[0])).await.0, 200);
    assert!(s.fetch(&[q], 1).await.is_empty());
    let lasting = lasting_keys(&s, &format!("q:{q}:subs"), shards).await;
    assert!(lasting.is_empty(), "acme has nothing waiting in {q}: {lasting:?}");
    invariants_on_every_shard(&s, shards).await;
}

#[tokio::test]
async fn a_parked_tenant_with_nothing_left_leaves_the_queues_tenants_one_shard() {
    a_parked_tenant_with_nothing_left_leaves_the_queues_tenants(1).await;
}

#[tokio::test]
async fn a_parked_tenant_with_nothing_left_leaves_the_queues_tenants_three_shards() {
    a_parked_tenant_with_nothing_left_leaves_the_queues_tenants(3).await;
}

/// A tenant whose only waiting job sits in a parked lane (its key paused) is out of the fair share; when
/// that job is cancelled, the tenant has nothing waiting and leaves the queue's tenants with a
/// sub-queue (`q:Q:subs`). Only a FETCH that met the tenant in the share took it out, so it stayed for
/// ever. Found by tests/model.rs (OJS_MODEL_SEED=4, the keyspace check after every job ended).
async fn a_tenant_whose_parked_jobs_are_cancelled_leaves_the_queues_tenants(shards: u16) {
    let s = server(shards).await;
    let q = "parked-subs";
    let id = s
        .enqueue(
            json!({"type": "t", "args": [], "queue": q, "meta": {"tenant_id": "acme"},
            "rate_limit": {"key": "parked-subs-key", "concurrency": 0}}),
        )
        .await;
    assert!(s.fetch(&[q], 1).await.is_empty(), "the key is paused: its lane parks");
    let (st, b) = s.delete(&format!("/ojs/v1/jobs/{id}")).await;
    assert_eq!(st, 200, "{b}");
    assert!(s.fetch(&[q], 1).await.is_empty());
    let lasting = lasting_keys(&s, &format!("q:{q}:subs"), shards).await;
    assert!(lasting.is_empty(), "acme has nothing waiting in {q}: {lasting:?}");
    invariants_on_every_shard(&s, shards).await;
}

#[tokio::test]
async fn a_tenant_whose_parked_jobs_are_cancelled_leaves_the_queues_tenants_one_shard() {
    a_tenant_whose_parked_jobs_are_cancelled_leaves_the_queues_tenants(1).await;
}

#[tokio::test]
async fn a_tenant_whose_parked_jobs_are_cancelled_leaves_the_queues_tenants_three_shards() {
    a_tenant_whose_parked_jobs_are_cancelled_leaves_the_queues_tenants(3).await;
}

/// A queue's concurrency set while its jobs run counts them, as a tenant's cap does (item 7): with 2
/// running, a concurrency of 2 starts nothing more. It does not: FETCH takes a queue slot only while
/// the queue has a concurrency (lua/fetch-1.lua `if ql.conc`), so jobs claimed before hold none and
/// the queue runs 2 more (4 at once under a concurrency of 2). Found while modelling the pools in
/// tests/model.rs (which models the server as it is: a queue slot is held by the jobs claimed while
/// the queue had a concurrency). Not fixed: counting every claim in the queue's slots costs a ZADD per
/// claim and heartbeat for every queue, a choice for the maintainers.
async fn a_queue_concurrency_set_while_jobs_run_counts_them(shards: u16) {
    let s = server(shards).await;
    let q = "late-pool";
    for i in 0..4 {
        s.enqueue(json!({"type": "t", "args": [i], "queue": q})).await;
    }
    assert_eq!(s.fetch(&[q], 2).await.len(), 2, "no concurrency yet");
    let limit = format!("/ojs/v1/admin/queues/{q}/rate-limit");
    let (st, b) = s.put(&limit, json!({"concurrency": 2})).await;
    assert_eq!(st, 200, "{b}");
    assert!(s.fetch(&[q], 1).await.is_empty(), "2 run under a concurrency of 2");
}

#[tokio::test]
#[ignore = "a known defect, not fixed yet: a queue's concurrency set later does not count the jobs running"]
async fn a_queue_concurrency_set_while_jobs_run_counts_them_one_shard() {
    a_queue_concurrency_set_while_jobs_run_counts_them(1).await;
}

#[tokio::test]
#[ignore = "a known defect, not fixed yet: a queue's concurrency set later does not count the jobs running"]
async fn a_queue_concurrency_set_while_jobs_run_counts_them_three_shards() {
    a_queue_concurrency_set_while_jobs_run_counts_them(3).await;
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
