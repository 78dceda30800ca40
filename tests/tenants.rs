//! Tenants (the OJS multi-tenancy extension) and the fair share among them: the X-OJS-Tenant header,
//! isolation of fetch, reads and cancel by tenant, and FETCH's weighted fair share
//! (lua/includes/tenant.lua): shares by weight while tenants stay backlogged, work-conserving when one
//! drains, and no larger share for a tenant that spreads its work over many rate-limit keys.

use ojs_testkit::TestServer;
use reqwest::Method;
use serde_json::{json, Value};

fn job(queue: &str, n: usize) -> Value {
    json!({"type": "tenant.work", "args": [n], "options": {"queue": queue}})
}

/// Enqueues `n` jobs for `tenant` (by its header) in one batch.
async fn batch_as(s: &TestServer, tenant: &str, queue: &str, n: usize) {
    let jobs: Vec<Value> = (0..n).map(|i| job(queue, i)).collect();
    let (st, b) = s
        .send_as(
            Method::POST,
            "/ojs/v1/jobs/batch",
            tenant,
            Some(json!({ "jobs": jobs })),
        )
        .await;
    assert_eq!(st, 201, "{b}");
}

/// An OJS error answer of `status` whose message says `says`.
fn assert_refused(st: u16, b: &Value, status: u16, says: &str) {
    assert_eq!(st, status, "{b}");
    assert!(
        b["error"]["message"].as_str().unwrap_or("").contains(says),
        "not {says:?}: {b}"
    );
}

async fn set_weight(s: &TestServer, tenant: &str, w: u32) {
    let (st, b) = s
        .put(
            &format!("/ojs/v1/admin/tenants/{tenant}"),
            json!({"fairness_weight": w}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["tenant"]["fairness_weight"], w);
}

/// The tenants of the jobs FETCH hands out, one claim at a time in `rounds` fetches of `count`.
async fn dispatch_order(s: &TestServer, queue: &str, rounds: usize, count: u32) -> Vec<String> {
    meta_dispatched(s, queue, "tenant_id", rounds, count).await
}

/// The `meta.<field>` of the jobs FETCH hands out, in `rounds` fetches of `count`.
async fn meta_dispatched(s: &TestServer, queue: &str, field: &str, rounds: usize, count: u32) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..rounds {
        for j in s.fetch(&[queue], count).await {
            out.push(j["meta"][field].as_str().unwrap_or("").to_string());
        }
    }
    out
}

#[tokio::test]
async fn the_header_names_the_jobs_tenant_and_a_conflicting_or_bad_one_is_refused() {
    let s = TestServer::start().await;
    let (st, b) = s
        .send_as(Method::POST, "/ojs/v1/jobs", "acme-corp", Some(job("t", 0)))
        .await;
    assert_eq!(st, 201, "{b}");
    assert_eq!(b["job"]["meta"]["tenant_id"], "acme-corp");
    // The same tenant in the body and the header is fine; another is a 400 naming both.
    let mut body = job("t", 1);
    body["meta"] = json!({"tenant_id": "other"});
    let (st, b) = s.send_as(Method::POST, "/ojs/v1/jobs", "acme-corp", Some(body)).await;
    assert_refused(st, &b, 400, "different tenants");
    let (st, b) = s
        .send_as(Method::POST, "/ojs/v1/jobs", "no spaces", Some(job("t", 2)))
        .await;
    assert_eq!(st, 400, "{b}");
    assert!(
        b["error"]["message"].as_str().unwrap_or("").contains("X-OJS-Tenant"),
        "{b}"
    );
    let mut body = job("t", 3);
    body["meta"] = json!({"tenant_id": 7});
    let (st, b) = s.post("/ojs/v1/jobs", body).await;
    assert_eq!(st, 400, "{b}");
    assert!(
        b["error"]["message"].as_str().unwrap_or("").contains("meta.tenant_id"),
        "{b}"
    );
    s.assert_invariants().await;
}

#[tokio::test]
async fn a_request_naming_a_tenant_sees_fetches_and_cancels_only_that_tenants_jobs() {
    let s = TestServer::start().await;
    // B's job comes first: FIFO alone would hand it to A's worker.
    let (_, b) = s
        .send_as(Method::POST, "/ojs/v1/jobs", "tenant-b", Some(job("iso", 0)))
        .await;
    let b_id = b["job"]["id"].as_str().unwrap_or_default().to_string();
    let (_, a) = s
        .send_as(Method::POST, "/ojs/v1/jobs", "tenant-a", Some(job("iso", 1)))
        .await;
    let a_id = a["job"]["id"].as_str().unwrap_or_default().to_string();
    let (st, l) = s.get("/ojs/v1/admin/jobs?queue=iso&state=available").await;
    assert_eq!(st, 200, "{l}");
    assert_eq!(
        l["pagination"]["total"], 2,
        "both tenants' available jobs are listed: {l}"
    );

    let (st, got) = s
        .send_as(Method::GET, &format!("/ojs/v1/jobs/{b_id}"), "tenant-a", None)
        .await;
    assert_eq!(st, 404, "another tenant's job is not found: {got}");
    let (st, _) = s
        .send_as(Method::DELETE, &format!("/ojs/v1/jobs/{b_id}"), "tenant-a", None)
        .await;
    assert_eq!(st, 404);
    let (_, got) = s.get(&format!("/ojs/v1/jobs/{b_id}")).await;
    assert_eq!(got["job"]["state"], "available", "not cancelled: {got}");

    let body = json!({"queues": ["iso"], "count": 5, "worker_id": "w-a"});
    let (st, f) = s
        .send_as(Method::POST, "/ojs/v1/workers/fetch", "tenant-a", Some(body.clone()))
        .await;
    assert_eq!(st, 200, "{f}");
    let jobs = f["jobs"].as_array().cloned().unwrap_or_default();
    assert_eq!(jobs.len(), 1, "only A's job: {f}");
    assert_eq!(jobs[0]["id"], a_id.as_str());
    // Nothing more for A, though B's job waits.
    let (_, f) = s
        .send_as(Method::POST, "/ojs/v1/workers/fetch", "tenant-a", Some(body))
        .await;
    assert_eq!(f["jobs"].as_array().map(Vec::len), Some(0), "{f}");
    let (_, got) = s
        .send_as(Method::GET, &format!("/ojs/v1/jobs/{a_id}"), "tenant-a", None)
        .await;
    assert_eq!(got["job"]["state"], "active");
    // A worker that names no tenant gets B's.
    let rest = s.fetch(&["iso"], 5).await;
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0]["id"], b_id.as_str());

    let (st, stats) = s.get("/ojs/v1/admin/tenants/tenant-a/stats").await;
    assert_eq!(st, 200, "{stats}");
    assert_eq!(stats["tenant_id"], "tenant-a");
    assert_eq!(stats["total_jobs"], 1);
    assert_eq!(stats["jobs"]["dispatched"], 1);
    let (st, l) = s.get("/ojs/v1/admin/tenants?limit=10").await;
    assert_eq!(st, 200, "{l}");
    let listed: Vec<&str> = l["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["tenant_id"].as_str())
        .collect();
    // B's job was claimed last.
    assert_eq!(listed, vec!["tenant-b", "tenant-a"], "most recently active first: {l}");
    let (st, _) = s.get("/ojs/v1/admin/tenants?limit=0").await;
    assert_eq!(st, 400);
    let m = s.metrics().await;
    assert!(
        m.contains("ojs_tenant_jobs_dispatched_total{tenant_id=\"tenant-a\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("ojs_tenant_jobs_enqueued_total{tenant_id=\"tenant-b\"} 1"),
        "{m}"
    );
    s.assert_invariants().await;
}

#[tokio::test]
async fn backlogged_tenants_share_fetch_by_weight_and_an_idle_share_goes_to_the_others() {
    let s = TestServer::start().await;
    set_weight(&s, "big", 3).await;
    set_weight(&s, "small", 1).await;
    // 10,000 jobs against 1,000 (the 100,000 against 1,000 is benches/src/bin/tenant_fetch.rs's
    // share check: a debug build takes half a minute to enqueue them). The big tenant's backlog is
    // enqueued first: FIFO alone would serve it all first.
    for _ in 0..10 {
        batch_as(&s, "big", "fair", 1000).await;
    }
    batch_as(&s, "small", "fair", 1000).await;
    let order = dispatch_order(&s, "fair", 100, 40).await;
    assert_eq!(order.len(), 4000);
    // Every window of 40 dispatches while both are backlogged holds 30 / 10, within one.
    for w in order.windows(40) {
        let small = w.iter().filter(|t| *t == "small").count();
        assert!(
            (9..=11).contains(&small),
            "a window of 40 held {small} of the small tenant's: {w:?}"
        );
    }
    // The small tenant had 1,000 and got 1,000 of the 4,000; now it is drained, the big one gets
    // everything.
    assert_eq!(order.iter().filter(|t| *t == "small").count(), 1000);
    let next = dispatch_order(&s, "fair", 1, 40).await;
    assert_eq!(next.len(), 40);
    assert!(next.iter().all(|t| t == "big"), "{next:?}");
    s.assert_invariants().await;
}

#[tokio::test]
async fn spreading_work_over_many_rate_limit_keys_buys_a_tenant_no_larger_share() {
    let s = TestServer::start().await;
    // Tenant "many" puts each job under a rate-limit key of its own (1,000 keys); "one" uses one key.
    let jobs: Vec<Value> = (0..1000)
        .map(|i| {
            let mut j = job("keys", i);
            j["rate_limit"] = json!({"key": format!("many-{i}"), "concurrency": 10});
            j
        })
        .collect();
    let (st, b) = s
        .send_as(
            Method::POST,
            "/ojs/v1/jobs/batch",
            "many",
            Some(json!({ "jobs": jobs })),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let jobs: Vec<Value> = (0..1000)
        .map(|i| {
            let mut j = job("keys", i);
            j["rate_limit"] = json!({"key": "one", "concurrency": 1000});
            j
        })
        .collect();
    let (st, b) = s
        .send_as(Method::POST, "/ojs/v1/jobs/batch", "one", Some(json!({ "jobs": jobs })))
        .await;
    assert_eq!(st, 201, "{b}");
    let order = dispatch_order(&s, "keys", 40, 10).await;
    assert_eq!(order.len(), 400);
    for w in order.windows(40) {
        let many = w.iter().filter(|t| *t == "many").count();
        assert!(
            (19..=21).contains(&many),
            "equal weights, equal shares: {many} of a window of 40 went to the tenant with 1,000 keys"
        );
    }
    s.assert_invariants().await;
}

#[tokio::test]
async fn jobs_without_a_tenant_share_as_one_more_tenant_and_priority_orders_inside_each() {
    let s = TestServer::start().await;
    for i in 0..10 {
        s.enqueue(job("mix", i)).await;
    }
    let mut urgent = job("mix", 99);
    urgent["priority"] = json!(0);
    let (st, b) = s.send_as(Method::POST, "/ojs/v1/jobs", "acme", Some(urgent)).await;
    assert_eq!(st, 201, "{b}");
    batch_as(&s, "acme", "mix", 9).await;
    let got = s.fetch(&["mix"], 20).await;
    assert_eq!(got.len(), 20);
    let tenants: Vec<&str> = got
        .iter()
        .map(|j| j["meta"]["tenant_id"].as_str().unwrap_or(""))
        .collect();
    // Alternating, one of each per two claims.
    for pair in tenants.chunks(2) {
        assert_ne!(pair[0], pair[1], "{tenants:?}");
    }
    // Inside acme, its priority-0 job comes first.
    let first_acme = got
        .iter()
        .find(|j| j["meta"]["tenant_id"] == "acme")
        .cloned()
        .unwrap_or_default();
    assert_eq!(first_acme["args"][0], 99, "{first_acme}");
    s.assert_invariants().await;
}

#[tokio::test]
async fn an_aging_change_rescores_every_tenants_waiting_jobs_in_lanes_too() {
    let s = TestServer::start().await;
    // 60 tenants of 30 jobs (1,800: more than one step of 1,000), every third job behind a rate-limit
    // key whose lane holds the rest, at mixed priorities.
    for t in 0..60 {
        let jobs: Vec<Value> = (0..30)
            .map(|i| {
                let mut j = job("aged", i);
                j["priority"] = json!(i % 4);
                if i % 3 == 0 {
                    j["rate_limit"] = json!({"key": format!("k-{t}"), "concurrency": 1});
                }
                j
            })
            .collect();
        let (st, b) = s
            .send_as(
                Method::POST,
                "/ojs/v1/jobs/batch",
                &format!("t:{t}"),
                Some(json!({ "jobs": jobs })),
            )
            .await;
        assert_eq!(st, 201, "{b}");
    }
    let (st, b) = s
        .put("/ojs/v1/admin/queues/aged/priority-aging", json!({"interval": "PT1M"}))
        .await;
    assert_eq!(st, 200, "{b}");
    // The PUT answers once every job is re-scored; the promote timer may take some of the steps, whose
    // jobs this count leaves out.
    assert!(b["rescored"].as_u64().is_some_and(|n| (1..=1800).contains(&n)), "{b}");
    // The checker recomputes every waiting job's score under the setting, in ready sets and lanes.
    s.assert_invariants().await;
    let (st, b) = s.put("/ojs/v1/admin/tenants/acme", json!({"fairness_weight": 0})).await;
    assert_eq!(st, 400, "{b}");
}

#[tokio::test]
async fn a_workflows_jobs_belong_to_one_tenant() {
    let s = TestServer::start().await;
    let body = json!({"type": "chain", "name": "etl", "steps": [job("wf-t", 0), job("wf-t", 1)]});
    let (st, b) = s.send_as(Method::POST, "/ojs/v1/workflows", "acme", Some(body)).await;
    assert_eq!(st, 201, "{b}");
    // The first step is the tenant's, and a worker of another tenant cannot take it.
    let other = json!({"queues": ["wf-t"], "worker_id": "w"});
    let (_, f) = s
        .send_as(Method::POST, "/ojs/v1/workers/fetch", "globex", Some(other.clone()))
        .await;
    assert_eq!(f["jobs"].as_array().map(Vec::len), Some(0), "{f}");
    let (_, f) = s
        .send_as(Method::POST, "/ojs/v1/workers/fetch", "acme", Some(other))
        .await;
    assert_eq!(f["jobs"][0]["meta"]["tenant_id"], "acme", "{f}");
    // Without the header, the one tenant the jobs name is every job's; two tenants are refused.
    let mut a = job("wf-t", 2);
    a["meta"] = json!({"tenant_id": "acme"});
    let body = json!({"type": "group", "jobs": [a.clone(), job("wf-t", 3)]});
    let (st, b) = s.post("/ojs/v1/workflows", body).await;
    assert_eq!(st, 201, "{b}");
    let mut g = job("wf-t", 4);
    g["meta"] = json!({"tenant_id": "globex"});
    let (st, b) = s
        .post("/ojs/v1/workflows", json!({"type": "group", "jobs": [a, g]}))
        .await;
    assert_eq!(st, 400, "{b}");
    assert!(
        b["error"]["message"].as_str().unwrap_or("").contains("one tenant"),
        "{b}"
    );
    s.assert_invariants().await;
}

/// Sets a queue's tenancy setting (`PUT /admin/queues/{queue}/tenancy`).
async fn set_tenancy(s: &TestServer, queue: &str, body: Value) -> Value {
    let (st, b) = s.put(&format!("/ojs/v1/admin/queues/{queue}/tenancy"), body).await;
    assert_eq!(st, 200, "{b}");
    b
}

/// `n` jobs of `queue` whose `meta.customer` is `customer`, in one batch, without the header.
async fn batch_for_customer(s: &TestServer, customer: &str, queue: &str, n: usize) {
    let jobs: Vec<Value> = (0..n)
        .map(|i| {
            let mut j = job(queue, i);
            j["meta"] = json!({ "customer": customer });
            j
        })
        .collect();
    let (st, b) = s.post("/ojs/v1/jobs/batch", json!({ "jobs": jobs })).await;
    assert_eq!(st, 201, "{b}");
}

#[tokio::test]
async fn a_queue_takes_its_tenants_from_a_meta_field_with_weights_of_its_own() {
    let s = TestServer::start().await;
    let b = set_tenancy(
        &s,
        "by-customer",
        json!({"source": "meta", "field": "customer", "weights": {"big": 3, "small": 1}}),
    )
    .await;
    assert_eq!(
        b["tenancy"],
        json!({"source": "meta", "field": "customer", "weights": {"big": 3, "small": 1}, "default_weight": null,
            "concurrency": {}, "default_concurrency": null}),
        "{b}"
    );
    let (st, g) = s.get("/ojs/v1/admin/queues/by-customer/tenancy").await;
    assert_eq!((st, &g["tenancy"]), (200, &b["tenancy"]), "{g}");
    // Globally "small" weighs 3 and "big" 1: the queue's own weights win in that queue.
    set_weight(&s, "small", 3).await;
    batch_for_customer(&s, "big", "by-customer", 400).await;
    batch_for_customer(&s, "small", "by-customer", 40).await;
    let order = meta_dispatched(&s, "by-customer", "customer", 4, 40).await;
    assert_eq!(order.len(), 160);
    for w in order.windows(40) {
        let small = w.iter().filter(|t| *t == "small").count();
        assert!(
            (9..=11).contains(&small),
            "a window of 40 held {small} of the small customer's: {w:?}"
        );
    }
    // The customers are tenants: counted, and shared 3:1 over the last hour.
    let (st, big) = s.get("/ojs/v1/admin/tenants/big/stats").await;
    assert_eq!(st, 200, "{big}");
    assert_eq!(big["jobs"]["enqueued"], 400, "{big}");
    assert_eq!(big["jobs"]["dispatched"], 120, "{big}");
    assert_eq!(big["jobs"]["dispatched_last_hour"], 120, "{big}");
    assert_eq!(big["jobs"]["share_last_hour"], 0.75, "{big}");
    let (_, small) = s.get("/ojs/v1/admin/tenants/small/stats").await;
    assert_eq!(small["jobs"]["share_last_hour"], 0.25, "{small}");
    let (_, l) = s.get("/ojs/v1/admin/tenants").await;
    let shares: Vec<(String, f64)> = l["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            (
                t["tenant_id"].as_str().unwrap_or("").to_string(),
                t["jobs"]["share_last_hour"].as_f64().unwrap_or(-1.0),
            )
        })
        .collect();
    assert!(shares.contains(&("big".to_string(), 0.75)), "{l}");
    assert!(shares.contains(&("small".to_string(), 0.25)), "{l}");
    let m = s.metrics().await;
    assert!(m.contains("ojs_tenant_share_last_hour{tenant_id=\"big\"} 0.75"), "{m}");
    assert!(
        m.contains("ojs_tenant_share_last_hour{tenant_id=\"small\"} 0.25"),
        "{m}"
    );

    // A second queue without the setting is unaffected: meta.customer names no tenant there, and its
    // jobs go in FIFO order.
    batch_for_customer(&s, "big", "plain", 20).await;
    batch_for_customer(&s, "small", "plain", 20).await;
    let plain = meta_dispatched(&s, "plain", "customer", 1, 20).await;
    assert!(plain.iter().all(|c| c == "big"), "{plain:?}");
    let (_, big) = s.get("/ojs/v1/admin/tenants/big/stats").await;
    assert_eq!(big["jobs"]["enqueued"], 400, "plain's jobs have no tenant: {big}");

    // The header still wins, and still writes meta.tenant_id.
    let mut j = job("by-customer", 1);
    j["meta"] = json!({"customer": "big"});
    let (st, b) = s.send_as(Method::POST, "/ojs/v1/jobs", "vip", Some(j)).await;
    assert_eq!(st, 201, "{b}");
    assert_eq!(b["job"]["meta"]["tenant_id"], "vip", "{b}");
    let (_, vip) = s.get("/ojs/v1/admin/tenants/vip/stats").await;
    assert_eq!(vip["jobs"]["enqueued"], 1, "{vip}");
    // A job without the field has no tenant; one whose field is not a tenant id is a 400 naming it.
    let (st, b) = s.post("/ojs/v1/jobs", job("by-customer", 2)).await;
    assert_eq!(st, 201, "{b}");
    for bad in [json!(7), json!("no spaces")] {
        let mut j = job("by-customer", 3);
        j["meta"] = json!({ "customer": bad });
        let (st, b) = s.post("/ojs/v1/jobs", j.clone()).await;
        assert_eq!(st, 400, "{b}");
        assert!(
            b["error"]["message"].as_str().unwrap_or("").contains("meta.customer"),
            "{b}"
        );
        let (st, b) = s
            .post("/ojs/v1/jobs/batch", json!({"jobs": [job("by-customer", 4), j]}))
            .await;
        assert_eq!(st, 400, "{b}");
        assert!(b["error"]["message"].as_str().unwrap_or("").contains("jobs[1]"), "{b}");
        assert_eq!(b["error"]["details"]["index"], 1, "{b}");
    }
    s.assert_invariants().await;
}

#[tokio::test]
async fn a_queue_takes_its_tenants_from_rate_limit_keys_so_many_keys_buy_no_larger_share() {
    let s = TestServer::start().await;
    let b = set_tenancy(&s, "by-key", json!({"source": "rate_limit_key"})).await;
    assert_eq!(b["tenancy"]["separator"], ":", "{b}");
    // acme spreads its jobs over 100 keys (acme:k0 … acme:k99); globex uses one.
    let keyed = |key: String, i: usize| {
        let mut j = job("by-key", i);
        j["rate_limit"] = json!({"key": key, "concurrency": 100});
        j
    };
    let jobs: Vec<Value> = (0..100).map(|i| keyed(format!("acme:k{i}"), i)).collect();
    let (st, b) = s.post("/ojs/v1/jobs/batch", json!({ "jobs": jobs })).await;
    assert_eq!(st, 201, "{b}");
    let jobs: Vec<Value> = (0..100).map(|i| keyed("globex".to_string(), i)).collect();
    let (st, b) = s.post("/ojs/v1/jobs/batch", json!({ "jobs": jobs })).await;
    assert_eq!(st, 201, "{b}");
    let (_, acme) = s.get("/ojs/v1/admin/tenants/acme/stats").await;
    assert_eq!(
        acme["jobs"]["enqueued"], 100,
        "acme:stripe and acme:slack are one tenant: {acme}"
    );
    let (_, globex) = s.get("/ojs/v1/admin/tenants/globex/stats").await;
    assert_eq!(
        globex["jobs"]["enqueued"], 100,
        "a key without the separator is its own tenant: {globex}"
    );
    let mut order = Vec::new();
    for _ in 0..4 {
        for j in s.fetch(&["by-key"], 10).await {
            order.push(j["rate_limit"]["key"].as_str().unwrap_or("").to_string());
        }
    }
    assert_eq!(order.len(), 40);
    let acme = order.iter().filter(|k| k.starts_with("acme:")).count();
    assert!(
        (19..=21).contains(&acme),
        "equal shares: {acme} of 40 went to acme's 100 keys"
    );
    s.assert_invariants().await;
}

#[tokio::test]
async fn a_pod_that_read_an_older_tenancy_setting_learns_the_new_one_at_its_next_enqueue() {
    let s = TestServer::start().await;
    let mut j = job("moving", 0);
    j["meta"] = json!({"customer": "acme"});
    // This pod reads the queue without a setting.
    let (st, b) = s.post("/ojs/v1/jobs", j.clone()).await;
    assert_eq!(st, 201, "{b}");
    // Another pod sets it.
    let other = s.store();
    let t = ojs_core::tenancy::Tenancy::parse(&json!({"source": "meta", "field": "customer"})).expect("setting");
    other.set_tenancy("moving", Some(&t)).await.expect("set");
    let (st, b) = s.post("/ojs/v1/jobs", j.clone()).await;
    assert_eq!(st, 201, "{b}");
    let (st, b) = s
        .post("/ojs/v1/jobs/batch", json!({"jobs": [j.clone(), j.clone()]}))
        .await;
    assert_eq!(st, 201, "{b}");
    let (_, acme) = s.get("/ojs/v1/admin/tenants/acme/stats").await;
    assert_eq!(
        acme["jobs"]["enqueued"], 3,
        "the jobs after the change are acme's: {acme}"
    );
    // And removes it: the jobs have no tenant again.
    other.set_tenancy("moving", None).await.expect("clear");
    let (st, b) = s.post("/ojs/v1/jobs", j).await;
    assert_eq!(st, 201, "{b}");
    let (_, acme) = s.get("/ojs/v1/admin/tenants/acme/stats").await;
    assert_eq!(acme["jobs"]["enqueued"], 3, "{acme}");
    s.assert_invariants().await;
}

#[tokio::test]
async fn a_bad_tenancy_setting_is_a_400_naming_its_field_and_a_delete_restores_the_default() {
    let s = TestServer::start().await;
    let (st, b) = s.get("/ojs/v1/admin/queues/q1/tenancy").await;
    assert_eq!((st, &b["tenancy"]), (200, &Value::Null), "{b}");
    for (body, field) in [
        (json!({}), "source"),
        (json!({"source": "header"}), "source"),
        (json!({"source": "meta", "field": "has space"}), "field"),
        (json!({"source": "rate_limit_key", "separator": "/"}), "separator"),
        (json!({"source": "rate_limit_key", "field": "customer"}), "field"),
        (json!({"source": "meta", "weights": {"acme": 0}}), "weights.acme"),
        (json!({"source": "meta", "weights": {"acme": 2000000}}), "weights.acme"),
        (json!({"source": "meta", "default_weight": "2"}), "default_weight"),
        (json!({"source": "meta", "tenant_weights": {}}), "tenant_weights"),
        (json!("meta"), "object"),
    ] {
        let (st, b) = s.put("/ojs/v1/admin/queues/q1/tenancy", body.clone()).await;
        assert_eq!(st, 400, "{body}: {b}");
        assert!(
            b["error"]["message"].as_str().unwrap_or("").contains(field),
            "{body}: {b}"
        );
    }
    let (st, b) = s
        .put("/ojs/v1/admin/queues/bad%20name/tenancy", json!({"source": "meta"}))
        .await;
    assert_eq!(st, 400, "{b}");
    set_tenancy(
        &s,
        "q1",
        json!({"source": "meta", "field": "customer", "default_weight": 2}),
    )
    .await;
    let (st, b) = s.delete("/ojs/v1/admin/queues/q1/tenancy").await;
    assert_eq!((st, &b["tenancy"]), (200, &Value::Null), "{b}");
    let (_, b) = s.get("/ojs/v1/admin/queues/q1/tenancy").await;
    assert_eq!(b["tenancy"], Value::Null, "{b}");
}

/// The ids of the jobs FETCH hands out in one fetch of `count`, with their `meta.customer`.
async fn fetched_customers(s: &TestServer, queue: &str, count: u32) -> Vec<(String, String)> {
    s.fetch(&[queue], count)
        .await
        .iter()
        .map(|j| {
            (
                j["id"].as_str().unwrap_or_default().to_string(),
                j["meta"]["customer"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn count_of(got: &[(String, String)], customer: &str) -> usize {
    got.iter().filter(|(_, c)| c == customer).count()
}

#[tokio::test]
async fn a_tenants_concurrency_in_a_queue_caps_its_active_jobs_and_its_turn_goes_to_the_others() {
    let s = TestServer::start().await;
    let q = "capped";
    let b = set_tenancy(
        &s,
        q,
        json!({"source": "meta", "field": "customer", "concurrency": {"big": 2}, "default_concurrency": 3}),
    )
    .await;
    assert_eq!(b["tenancy"]["concurrency"], json!({"big": 2}), "{b}");
    assert_eq!(b["tenancy"]["default_concurrency"], 3, "{b}");
    let (_, m) = s.get("/ojs/manifest").await;
    assert!(
        m["extensions"]
            .as_array()
            .is_some_and(|e| e.contains(&json!("x-queue-tenancy"))),
        "the setting is advertised as ours: {m}"
    );
    batch_for_customer(&s, "big", q, 20).await;
    batch_for_customer(&s, "small", q, 20).await;
    // Jobs without a tenant are never capped.
    for i in 0..5 {
        s.enqueue(job(q, i)).await;
    }
    let got = fetched_customers(&s, q, 50).await;
    assert_eq!(
        (count_of(&got, "big"), count_of(&got, "small"), count_of(&got, "")),
        (2, 3, 5),
        "each tenant up to its cap, the jobs without one all: {got:?}"
    );
    assert!(
        fetched_customers(&s, q, 50).await.is_empty(),
        "both tenants are at their caps"
    );
    // A worker of that tenant gets nothing either.
    let body = json!({"queues": [q], "count": 5});
    let (st, f) = s
        .send_as(Method::POST, "/ojs/v1/workers/fetch", "big", Some(body.clone()))
        .await;
    assert_eq!((st, f["jobs"].as_array().map(Vec::len)), (200, Some(0)), "{f}");
    s.assert_invariants().await;

    // Explain names the gate, the cap, the holders and their earliest lease deadline.
    let big: Vec<String> = got
        .iter()
        .filter(|(_, c)| c == "big")
        .map(|(id, _)| id.clone())
        .collect();
    let (_, l) = s
        .get(&format!("/ojs/v1/admin/jobs?queue={q}&state=available&limit=100"))
        .await;
    let waiting = l["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|j| j["meta"]["customer"] == "big")
        .and_then(|j| j["id"].as_str())
        .expect("a waiting job of big")
        .to_string();
    let (st, e) = s.get(&format!("/ojs/v1/jobs/{waiting}/explain")).await;
    assert_eq!(st, 200, "{e}");
    let g = &e["gates"][0];
    assert_eq!(g["gate"], "tenant_concurrency", "{e}");
    assert_eq!(
        (&g["limit"], &g["current"], &g["tenant"]),
        (&json!(2), &json!(2), &json!("big")),
        "{e}"
    );
    let mut holders: Vec<String> = serde_json::from_value(g["holders"].clone()).unwrap_or_default();
    holders.sort();
    let mut want = big.clone();
    want.sort();
    assert_eq!(holders, want, "{e}");
    assert!(g["until_ms"].as_i64().is_some(), "a holder's lease deadline: {e}");

    // A slot that comes back goes to that tenant at once.
    let (st, a) = s.ack(&big[0]).await;
    assert_eq!(st, 200, "{a}");
    let got = fetched_customers(&s, q, 50).await;
    assert_eq!((count_of(&got, "big"), got.len()), (1, 1), "{got:?}");
    // A higher cap takes effect at once: the queue's settings re-open its parked tenants.
    set_tenancy(
        &s,
        q,
        json!({"source": "meta", "field": "customer", "concurrency": {"big": 5}, "default_concurrency": 3}),
    )
    .await;
    let got = fetched_customers(&s, q, 50).await;
    assert_eq!((count_of(&got, "big"), got.len()), (3, 3), "{got:?}");
    s.assert_invariants().await;
    // Without the setting nothing is capped.
    let (st, _) = s.delete(&format!("/ojs/v1/admin/queues/{q}/tenancy")).await;
    assert_eq!(st, 200);
    let got = fetched_customers(&s, q, 100).await;
    assert_eq!((count_of(&got, "big"), count_of(&got, "small")), (14, 17), "{got:?}");
    s.assert_invariants().await;
}

#[tokio::test]
async fn a_tenants_slot_follows_its_jobs_lease_and_comes_back_when_the_lease_lapses() {
    let s = TestServer::start().await;
    let q = "capped-lease";
    set_tenancy(
        &s,
        q,
        json!({"source": "meta", "field": "customer", "default_concurrency": 1}),
    )
    .await;
    batch_for_customer(&s, "acme", q, 3).await;
    let (st, f) = s
        .post(
            "/ojs/v1/workers/fetch",
            json!({"queues": [q], "count": 5, "visibility_timeout_ms": 300}),
        )
        .await;
    assert_eq!(st, 200, "{f}");
    let jobs = f["jobs"].as_array().cloned().unwrap_or_default();
    assert_eq!(jobs.len(), 1, "{f}");
    let first = jobs[0]["id"].as_str().unwrap_or_default().to_string();
    // A heartbeat moves the slot with the lease: the invariant checker holds them equal.
    let (st, h) = s
        .post(
            "/ojs/v1/workers/heartbeat",
            json!({"active_jobs": [first], "visibility_timeout_ms": 300}),
        )
        .await;
    assert_eq!(st, 200, "{h}");
    s.assert_invariants().await;
    // The worker goes silent: its lease lapses, the reaper takes the job back, and the slot with it.
    s.wait_state(&first, "available", std::time::Duration::from_secs(10))
        .await;
    let got = fetched_customers(&s, q, 5).await;
    assert_eq!(got.len(), 1, "the slot came back with the lapsed lease: {got:?}");
    s.assert_invariants().await;
}

/// Burstable concurrency inside a tenant: keys with a floor draw from their tenant's concurrency in the
/// queue (not the queue's, which has none here), so a tenant's first key cannot take its whole cap while
/// another key of the tenant is owed its floor, and a slot the tenant gives back goes to the key below
/// its floor. Another tenant of the queue, without a cap, is untouched.
#[tokio::test]
async fn a_tenants_keys_with_floors_draw_from_the_tenants_concurrency() {
    let s = TestServer::start().await;
    let q = "tenant-pool";
    set_tenancy(&s, q, json!({"source": "rate_limit_key", "concurrency": {"acme": 4}})).await;
    let job = |key: &str| {
        json!({"type": "burst", "args": [], "options": {"queue": q},
            "rate_limit": {"key": key, "concurrency": 4, "floor": 2}})
    };
    let mut a = Vec::new();
    for _ in 0..6 {
        a.push(s.enqueue(job("acme:a")).await);
    }
    let mut b = Vec::new();
    for _ in 0..6 {
        b.push(s.enqueue(job("acme:b")).await);
    }
    let mut g = Vec::new();
    for _ in 0..6 {
        g.push(s.enqueue(job("globex:a")).await);
    }
    let got: Vec<String> = s
        .fetch(&[q], 20)
        .await
        .iter()
        .filter_map(|j| j["rate_limit"]["key"].as_str().map(str::to_owned))
        .collect();
    let n = |k: &str| got.iter().filter(|x| *x == k).count();
    assert_eq!(
        (n("acme:a"), n("acme:b"), n("globex:a")),
        (2, 2, 4),
        "acme:a keeps acme:b's floor free in acme's 4; globex is limited by its key alone: {got:?}"
    );
    s.assert_invariants().await;

    // A waiting job of acme:a: its tenant is at its cap, and past its floor it only borrows from
    // acme's pool.
    let (st, why) = s.get(&format!("/ojs/v1/jobs/{}/explain", a[2])).await;
    assert_eq!(st, 200, "{why}");
    let gates: Vec<&Value> = why["gates"].as_array().into_iter().flatten().collect();
    assert_eq!(gates[0]["gate"], "tenant_concurrency", "{why}");
    let pool = gates
        .iter()
        .find(|g| g["gate"] == "pool")
        .unwrap_or_else(|| panic!("no pool gate: {why}"));
    assert_eq!((&pool["limit"], &pool["tenant"]), (&json!(4), &json!("acme")), "{why}");
    assert!(
        pool["detail"].as_str().unwrap_or("").contains("tenant \"acme\""),
        "{why}"
    );

    // acme:b gives a slot back: it is below its floor again, so the slot is its own, though acme:a's
    // jobs are older.
    let (_, l) = s
        .get(&format!("/ojs/v1/admin/jobs?queue={q}&state=active&limit=100"))
        .await;
    let b_active = l["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|j| j["rate_limit"]["key"] == "acme:b")
        .and_then(|j| j["id"].as_str())
        .expect("an active job of acme:b")
        .to_string();
    assert_eq!(s.ack(&b_active).await.0, 200);
    let got = s.fetch(&[q], 5).await;
    let keys: Vec<&str> = got.iter().filter_map(|j| j["rate_limit"]["key"].as_str()).collect();
    assert_eq!(keys, ["acme:b"], "{got:?}");
    s.assert_invariants().await;

    // Lifting the cap moves the lanes to the queue's pool (none here): nothing is owed anywhere, and
    // the keys' own ceilings are all that is left.
    set_tenancy(&s, q, json!({"source": "rate_limit_key"})).await;
    let got = s.fetch(&[q], 20).await;
    let keys: Vec<&str> = got.iter().filter_map(|j| j["rate_limit"]["key"].as_str()).collect();
    assert_eq!(
        (
            keys.iter().filter(|k| **k == "acme:a").count(),
            keys.iter().filter(|k| **k == "acme:b").count()
        ),
        (2, 2),
        "each of acme's keys held 2 and goes up to its ceiling of 4: {got:?}"
    );
    s.assert_invariants().await;
    drop((b, g));
}

// The isolation a request naming a tenant gets (issue 37): each test below reproduces a leak the
// header let through, on one shard and on three.

/// A server of `shards` shards.
async fn server(shards: u16) -> TestServer {
    TestServer::start_with(|c| c.shards = shards).await
}

fn id_of(b: &Value, at: &str) -> String {
    b.pointer(at)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no {at} in {b}"))
        .to_string()
}

#[tokio::test]
async fn another_tenants_workflow_is_not_found_and_not_cancelled() {
    for shards in [1, 3] {
        let s = server(shards).await;
        let body = json!({"type": "chain", "steps": [job("wf-iso", 0), job("wf-iso", 1)]});
        let (st, b) = s
            .send_as(Method::POST, "/ojs/v1/workflows", "tenant-a", Some(body))
            .await;
        assert_eq!(st, 201, "{b}");
        let path = format!("/ojs/v1/workflows/{}", id_of(&b, "/workflow/id"));
        let (st, got) = s.send_as(Method::GET, &path, "tenant-b", None).await;
        assert_eq!(st, 404, "B does not see A's workflow: {got}");
        let (st, got) = s.send_as(Method::DELETE, &path, "tenant-b", None).await;
        assert_eq!(st, 404, "nor cancels it: {got}");
        let (st, got) = s.send_as(Method::GET, &path, "tenant-a", None).await;
        assert_eq!(st, 200, "{got}");
        assert_eq!(got["workflow"]["state"], "running", "{got}");
        assert_eq!(got["workflow"]["jobs"][0]["state"], "available", "{got}");
        if shards == 1 {
            // A workflow created before its hash kept its tenant is its first job's.
            let id = path.rsplit('/').next().unwrap_or_default();
            let _: i64 = redis::cmd("HDEL")
                .arg(s.keys().workflow(id))
                .arg("tenant")
                .query_async(&mut s.redis().await)
                .await
                .expect("HDEL");
            assert_eq!(s.send_as(Method::GET, &path, "tenant-b", None).await.0, 404);
            assert_eq!(s.send_as(Method::GET, &path, "tenant-a", None).await.0, 200);
        }
        // A request naming no tenant sees every workflow, and A cancels its own.
        assert_eq!(s.get(&path).await.0, 200);
        let (st, got) = s.send_as(Method::DELETE, &path, "tenant-a", None).await;
        assert_eq!((st, &got["workflow"]["state"]), (200, &json!("cancelled")), "{got}");
        s.assert_invariants().await;
    }
}

#[tokio::test]
async fn another_tenants_worker_cannot_ack_nack_extend_or_report_progress_on_an_active_job() {
    for shards in [1, 3] {
        let s = server(shards).await;
        let (st, b) = s
            .send_as(Method::POST, "/ojs/v1/jobs", "tenant-a", Some(job("act", 0)))
            .await;
        assert_eq!(st, 201, "{b}");
        let id = id_of(&b, "/job/id");
        let claim = json!({"queues": ["act"], "worker_id": "w-a", "visibility_timeout_ms": 60000});
        let (_, f) = s
            .send_as(Method::POST, "/ojs/v1/workers/fetch", "tenant-a", Some(claim))
            .await;
        let held = f["jobs"][0].clone();
        assert_eq!(held["id"], id.as_str(), "{f}");
        // B names no lease (as the SDKs do): each is answered as for a job that does not exist.
        for (path, body) in [
            ("/ojs/v1/workers/ack", json!({"job_id": id})),
            (
                "/ojs/v1/workers/ack",
                json!({"job_id": id, "fetch": {"queues": ["act"]}}),
            ),
            (
                "/ojs/v1/workers/nack",
                json!({"job_id": id, "error": {"message": "not mine"}}),
            ),
            ("/ojs/v1/workers/progress", json!({"job_id": id, "percentage": 50})),
        ] {
            let (st, got) = s.send_as(Method::POST, path, "tenant-b", Some(body)).await;
            assert_eq!(st, 404, "{path}: {got}");
        }
        let progress = format!("/ojs/v1/jobs/{id}/progress");
        let (st, got) = s
            .send_as(Method::PUT, &progress, "tenant-b", Some(json!({"progress": 0.5})))
            .await;
        assert_eq!(st, 404, "{got}");
        let (st, got) = s.send_as(Method::GET, &progress, "tenant-b", None).await;
        assert_eq!(st, 404, "{got}");
        // A heartbeat without a worker id, asking for an hour: the job is not B's to keep.
        let beat = json!({"active_job_ids": [id], "visibility_timeout_ms": 3_600_000});
        let (st, hb) = s
            .send_as(Method::POST, "/ojs/v1/workers/heartbeat", "tenant-b", Some(beat))
            .await;
        assert_eq!(st, 200, "{hb}");
        assert_eq!(
            (&hb["jobs"][0]["state"], &hb["jobs"][0]["extended"]),
            (&json!("missing"), &json!(false)),
            "{hb}"
        );
        // Nothing changed: still A's worker's, with its lease, its attempt, no progress.
        let (_, got) = s
            .send_as(Method::GET, &format!("/ojs/v1/jobs/{id}"), "tenant-a", None)
            .await;
        let j = &got["job"];
        assert_eq!(
            (&j["state"], &j["attempt"], &j["visibility_deadline"], &j["progress"]),
            (&json!("active"), &json!(1), &held["visibility_deadline"], &Value::Null),
            "{got}"
        );
        // A's worker finishes it: one delivery.
        let ack = json!({"job_id": id, "lease_id": held["lease_id"]});
        let (st, got) = s
            .send_as(Method::POST, "/ojs/v1/workers/ack", "tenant-a", Some(ack))
            .await;
        assert_eq!(st, 200, "{got}");
        s.assert_invariants().await;
    }
}

#[tokio::test]
async fn a_uniqueness_key_or_dedup_fingerprint_never_spans_tenants() {
    for shards in [1, 3] {
        let s = server(shards).await;
        for policy in ["ignore", "replace", "reject"] {
            let q = format!("uq-{policy}");
            let body = json!({"type": "report.build", "args": [1], "options": {"queue": q,
                "unique": {"keys": ["type", "queue", "args"], "on_conflict": policy}}});
            let (st, a) = s
                .send_as(Method::POST, "/ojs/v1/jobs", "tenant-a", Some(body.clone()))
                .await;
            assert_eq!(st, 201, "{a}");
            let a_id = id_of(&a, "/job/id");
            // B's identical job is B's own: neither answered with A's job, nor refused, nor replacing it.
            let (st, b) = s
                .send_as(Method::POST, "/ojs/v1/jobs", "tenant-b", Some(body.clone()))
                .await;
            assert_eq!(st, 201, "{policy}: {b}");
            assert_ne!(b["job"]["id"], a_id.as_str(), "{policy}: {b}");
            assert_eq!(b["job"]["meta"]["tenant_id"], "tenant-b", "{b}");
            let (_, got) = s
                .send_as(Method::GET, &format!("/ojs/v1/jobs/{a_id}"), "tenant-a", None)
                .await;
            assert_eq!(got["job"]["state"], "available", "{policy}: {got}");
            // Inside a tenant the key holds as before.
            let (st, again) = s.send_as(Method::POST, "/ojs/v1/jobs", "tenant-a", Some(body)).await;
            let expected = match policy {
                "ignore" => 200,
                "replace" => 201,
                _ => 409,
            };
            assert_eq!(st, expected, "{policy}: {again}");
            if policy == "reject" {
                assert_eq!(again["error"]["details"]["existing_job_id"], a_id.as_str(), "{again}");
            }
        }
        // dedup: A's twin starting does not make B's job pointless.
        let body = json!({"type": "page.render", "args": [7], "options": {"queue": "dq", "dedup": true}});
        for t in ["tenant-b", "tenant-a"] {
            let (st, b) = s.send_as(Method::POST, "/ojs/v1/jobs", t, Some(body.clone())).await;
            assert_eq!(st, 201, "{b}");
        }
        for t in ["tenant-a", "tenant-b"] {
            let (_, f) = s
                .send_as(
                    Method::POST,
                    "/ojs/v1/workers/fetch",
                    t,
                    Some(json!({"queues": ["dq"]})),
                )
                .await;
            assert_eq!(f["jobs"][0]["meta"]["tenant_id"], t, "{t}'s job runs: {f}");
        }
        // root_job: B's root of a newer run starting does not make A's leaf of the same signature old.
        let root_job = |t: &str, ts: &str, root: bool| {
            json!({"type": format!("links.{t}"), "args": [], "options": {"queue": "rq",
                "root_job": {"signature": "links:Main_Page", "timestamp": ts, "is_root": root}}})
        };
        for (t, body) in [
            ("tenant-a", root_job("leaf", "2026-02-13T12:00:00Z", false)),
            ("tenant-b", root_job("root", "2026-02-13T12:05:00Z", true)),
        ] {
            let (st, b) = s.send_as(Method::POST, "/ojs/v1/jobs", t, Some(body)).await;
            assert_eq!(st, 201, "{b}");
        }
        for (t, kind) in [("tenant-b", "links.root"), ("tenant-a", "links.leaf")] {
            let (_, f) = s
                .send_as(
                    Method::POST,
                    "/ojs/v1/workers/fetch",
                    t,
                    Some(json!({"queues": ["rq"]})),
                )
                .await;
            assert_eq!(f["jobs"][0]["type"], kind, "{t}'s job runs: {f}");
        }
        s.assert_invariants().await;
    }
}

#[tokio::test]
async fn a_cron_entry_belongs_to_the_tenant_that_registered_it() {
    for shards in [1, 3] {
        let s = server(shards).await;
        let q = "cron-t";
        let template = |meta: Value| json!({"type": "cron.t", "args": [], "options": {"queue": q}, "meta": meta});
        let entry = |name: &str, meta: Value| json!({"name": name, "expression": "* * * * * *", "job_template": template(meta)});
        // B's header with a template naming A: refused as POST /jobs refuses the same body.
        let (st, job) = s
            .send_as(
                Method::POST,
                "/ojs/v1/jobs",
                "tenant-b",
                Some(template(json!({"tenant_id": "tenant-a"}))),
            )
            .await;
        assert_eq!(st, 400, "{job}");
        let (st, b) = s
            .send_as(
                Method::POST,
                "/ojs/v1/cron",
                "tenant-b",
                Some(entry("t.foreign", json!({"tenant_id": "tenant-a"}))),
            )
            .await;
        assert_refused(st, &b, 400, "different tenants");
        assert_eq!(s.get("/ojs/v1/cron/t.foreign").await.0, 404, "nothing written");
        // With no tenant in the template, the entry is B's: stamped into its template, and its ticks
        // are B's jobs, though the queue would take their tenant from meta.customer_id (B's header wins
        // there too).
        set_tenancy(&s, q, json!({"source": "meta", "field": "customer_id"})).await;
        let own = entry("t.own", json!({"customer_id": "tenant-a"}));
        let (st, b) = s.send_as(Method::POST, "/ojs/v1/cron", "tenant-b", Some(own)).await;
        assert_eq!(st, 201, "{b}");
        assert_eq!(b["cron"]["job_template"]["meta"]["tenant_id"], "tenant-b", "{b}");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let ticked = loop {
            let (_, f) = s
                .send_as(
                    Method::POST,
                    "/ojs/v1/workers/fetch",
                    "tenant-b",
                    Some(json!({"queues": [q]})),
                )
                .await;
            let got = f["jobs"].as_array().cloned().unwrap_or_default();
            if let Some(j) = got.first() {
                break j.clone();
            }
            assert!(std::time::Instant::now() < deadline, "no tick within 5 s");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        };
        assert_eq!(ticked["meta"]["tenant_id"], "tenant-b", "{ticked}");
        // A neither sees nor removes it, nor lists it; B and a request naming no tenant do.
        let path = "/ojs/v1/cron/t.own";
        assert_eq!(s.send_as(Method::GET, path, "tenant-a", None).await.0, 404);
        assert_eq!(s.send_as(Method::DELETE, path, "tenant-a", None).await.0, 404);
        let names = |l: &Value| -> Vec<String> {
            l["crons"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["name"].as_str().map(str::to_owned))
                .collect()
        };
        let (_, l) = s.send_as(Method::GET, "/ojs/v1/cron", "tenant-a", None).await;
        assert_eq!((names(&l), &l["pagination"]["total"]), (vec![], &json!(0)), "{l}");
        let (_, l) = s.send_as(Method::GET, "/ojs/v1/cron", "tenant-b", None).await;
        assert_eq!(names(&l), ["t.own"], "{l}");
        assert_eq!(names(&s.get("/ojs/v1/cron").await.1), ["t.own"]);
        // Nor may A take its name over.
        let (st, b) = s
            .send_as(
                Method::POST,
                "/ojs/v1/cron",
                "tenant-a",
                Some(entry("t.own", json!({}))),
            )
            .await;
        assert_eq!(st, 409, "{b}");
        let (st, b) = s.send_as(Method::GET, path, "tenant-b", None).await;
        assert_eq!(
            (st, &b["cron"]["job_template"]["meta"]["tenant_id"]),
            (200, &json!("tenant-b")),
            "{b}"
        );
        assert_eq!(s.send_as(Method::DELETE, path, "tenant-b", None).await.0, 200);
        s.assert_invariants().await;
    }
}

/// `GET /jobs/{id}/explain` as `tenant`.
async fn explain_as(s: &TestServer, id: &str, tenant: &str) -> Value {
    let (st, e) = s
        .send_as(Method::GET, &format!("/ojs/v1/jobs/{id}/explain"), tenant, None)
        .await;
    assert_eq!(st, 200, "{e}");
    e
}

/// The gate `name` of an explain answer.
fn gate_of<'a>(e: &'a Value, name: &str) -> &'a Value {
    e["gates"]
        .as_array()
        .and_then(|g| g.iter().find(|g| g["gate"] == name))
        .unwrap_or_else(|| panic!("no {name} gate in {e}"))
}

#[tokio::test]
async fn explain_counts_other_tenants_slot_holders_and_their_jobs_events_are_not_found() {
    for shards in [1, 3] {
        let s = server(shards).await;
        // A key's slot, a queue's slot and a pool's slots held by A's job, with B's job waiting.
        let keyed =
            json!({"type": "t", "args": [], "queue": "ex-t", "rate_limit": {"key": "ex-t-key", "concurrency": 1}});
        let (st, b) = s
            .put("/ojs/v1/admin/queues/ex-tq/rate-limit", json!({"concurrency": 1}))
            .await;
        assert_eq!(st, 200, "{b}");
        let mut held = Vec::new();
        let mut waiting = Vec::new();
        for (q, body) in [("ex-t", keyed), ("ex-tq", job("ex-tq", 0))] {
            for t in ["tenant-a", "tenant-b"] {
                let (st, b) = s.send_as(Method::POST, "/ojs/v1/jobs", t, Some(body.clone())).await;
                assert_eq!(st, 201, "{b}");
                if t == "tenant-b" {
                    waiting.push(id_of(&b, "/job/id"));
                }
            }
            let got = s.fetch(&[q], 1).await;
            assert_eq!(got[0]["meta"]["tenant_id"], "tenant-a", "{got:?}");
            held.push(got[0]["id"].as_str().unwrap_or_default().to_string());
        }
        // The pool of queue ex-tp (3 slots): B's job of key kb holds one, A's of ka another, and key kc
        // is owed its floor: A's second job of ka, past its floor, waits for the pool.
        let (st, b) = s
            .put("/ojs/v1/admin/queues/ex-tp/rate-limit", json!({"concurrency": 3}))
            .await;
        assert_eq!(st, 200, "{b}");
        let floored = |key: &str| json!({"type": "t", "args": [], "queue": "ex-tp", "rate_limit": {"key": key, "concurrency": 3, "floor": 1}});
        let mut pool_ids = Vec::new();
        for (t, key, claim) in [
            ("tenant-b", "kb", true),
            ("tenant-a", "ka", true),
            ("tenant-a", "ka", false),
            ("tenant-a", "kc", false),
        ] {
            let (st, b) = s.send_as(Method::POST, "/ojs/v1/jobs", t, Some(floored(key))).await;
            assert_eq!(st, 201, "{b}");
            pool_ids.push(id_of(&b, "/job/id"));
            if claim {
                assert_eq!(s.fetch(&["ex-tp"], 1).await.len(), 1);
            }
        }
        let e = explain_as(&s, &waiting[0], "tenant-b").await;
        let g = gate_of(&e, "concurrency");
        assert_eq!((&g["holders"], &g["other_holders"]), (&Value::Null, &json!(1)), "{e}");
        let e = explain_as(&s, &waiting[1], "tenant-b").await;
        let g = gate_of(&e, "queue_concurrency");
        assert_eq!((&g["holders"], &g["other_holders"]), (&Value::Null, &json!(1)), "{e}");
        let e = explain_as(&s, &pool_ids[2], "tenant-a").await;
        let g = gate_of(&e, "pool");
        assert_eq!(
            (&g["holders"], &g["other_holders"]),
            (&json!([pool_ids[1]]), &json!(1)),
            "{e}"
        );
        // A request naming no tenant sees every holder.
        let (_, e) = s.get(&format!("/ojs/v1/jobs/{}/explain", waiting[0])).await;
        let g = gate_of(&e, "concurrency");
        assert_eq!(
            (&g["holders"], &g["other_holders"]),
            (&json!([held[0]]), &Value::Null),
            "{e}"
        );

        // A's job's events are not B's to read, live or past.
        let a_job = &held[0];
        for path in [
            format!("/ojs/v1/events?job_id={a_job}"),
            format!("/ojs/v1/events?channel=job:{a_job}"),
        ] {
            let (st, got) = s.send_as(Method::GET, &path, "tenant-b", None).await;
            assert_eq!(st, 404, "{path}: {got}");
            let (st, got) = s.send_as(Method::GET, &path, "tenant-a", None).await;
            assert_eq!(st, 200, "{path}: {got}");
            assert!(
                got["events"].as_array().is_some_and(|e| !e.is_empty()),
                "A reads its job's events: {got}"
            );
        }
        let stream = |t: &str| {
            s.http
                .get(s.url(&format!("/ojs/v1/jobs/{a_job}/events/stream")))
                .header("X-OJS-Tenant", t)
                .send()
        };
        assert_eq!(stream("tenant-b").await.expect("request").status(), 404);
        assert_eq!(stream("tenant-a").await.expect("request").status(), 200);
        s.assert_invariants().await;
    }
}
