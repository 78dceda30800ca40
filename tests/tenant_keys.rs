//! Tenant-bound API keys (`OJS_API_KEYS` entries `worker@<tenant>:<key>`): a request with such a key
//! acts as that tenant on every path, with or without `X-OJS-Tenant`. Naming another tenant is a 403
//! that writes nothing; what it creates is its tenant's; FETCH claims only its tenant's jobs; another
//! tenant's job, workflow, cron entry, progress, explain and events are absent to it, and its ACK, NACK,
//! heartbeat and cancel change nothing there; operator endpoints and listings that span tenants answer
//! 403. Unbound keys see every tenant, as before. Each on one shard and on three.

use ojs_testkit::TestServer;
use reqwest::Method;
use serde_json::{json, Value};

const ADMIN: &str = "admin-key-0123456789";
const WORKER: &str = "worker-key-0123456789";
const ACME: &str = "acme-key-0123456789ab";
const GLOBEX: &str = "globex-key-0123456789";

/// A server of `shards` shards with an admin key, an unbound worker key, and keys bound to acme and
/// to globex.
async fn server(shards: u16) -> TestServer {
    TestServer::start_with(|c| {
        c.shards = shards;
        c.api_keys = ojs_server::api_keys::parse_keys(&format!(
            "admin:{ADMIN},worker:{WORKER},worker@acme:{ACME},worker@globex:{GLOBEX}"
        ))
        .expect("keys");
    })
    .await
}

/// A request with `key`, naming `tenant` in `X-OJS-Tenant` when given.
async fn call(
    s: &TestServer,
    key: &str,
    tenant: Option<&str>,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let auth = format!("Bearer {key}");
    let mut headers = vec![("Authorization", auth.as_str())];
    if let Some(t) = tenant {
        headers.push(("X-OJS-Tenant", t));
    }
    s.send_with(method, path, &headers, body).await
}

async fn get(s: &TestServer, key: &str, path: &str) -> (u16, Value) {
    call(s, key, None, Method::GET, path, None).await
}

async fn post(s: &TestServer, key: &str, path: &str, body: Value) -> (u16, Value) {
    call(s, key, None, Method::POST, path, Some(body)).await
}

fn job(queue: &str, n: usize) -> Value {
    json!({"type": "keyed.work", "args": [n], "options": {"queue": queue}})
}

fn with_tenant(mut body: Value, tenant: &str) -> Value {
    body["meta"] = json!({"tenant_id": tenant});
    body
}

/// Enqueues `body` with `key` (201 asserted); the job's id.
async fn enqueue(s: &TestServer, key: &str, body: Value) -> String {
    let (st, b) = post(s, key, "/ojs/v1/jobs", body).await;
    assert_eq!(st, 201, "{b}");
    b["job"]["id"].as_str().expect("id").to_string()
}

/// The ids of the jobs a FETCH answered.
fn claimed(f: &Value) -> Vec<&str> {
    f["jobs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|j| j["id"].as_str())
        .collect()
}

/// The status is a 403 `forbidden`.
fn assert_forbidden(st: u16, b: &Value, what: &str) {
    assert_eq!((st, &b["error"]["code"]), (403, &json!("forbidden")), "{what}: {b}");
}

/// How many jobs `queue` holds in any state (the admin's view).
async fn jobs_in(s: &TestServer, queue: &str) -> u64 {
    let (st, b) = get(s, ADMIN, &format!("/ojs/v1/queues/{queue}")).await;
    assert_eq!(st, 200, "{b}");
    [
        "available",
        "active",
        "scheduled",
        "completed",
        "discarded",
        "cancelled",
    ]
    .iter()
    .map(|k| b["queue"][k].as_u64().unwrap_or(0))
    .sum()
}

#[tokio::test]
async fn what_a_tenant_key_creates_belongs_to_its_tenant() {
    for shards in [1, 3] {
        let s = server(shards).await;
        let (st, b) = post(&s, ACME, "/ojs/v1/jobs", job("kc", 0)).await;
        assert_eq!((st, &b["job"]["meta"]["tenant_id"]), (201, &json!("acme")), "{b}");
        // Naming its own tenant, in the header or the body, is fine.
        let (st, b) = call(
            &s,
            ACME,
            Some("acme"),
            Method::POST,
            "/ojs/v1/jobs",
            Some(with_tenant(job("kc", 1), "acme")),
        )
        .await;
        assert_eq!(st, 201, "{b}");
        let (st, b) = post(
            &s,
            ACME,
            "/ojs/v1/jobs/batch",
            json!({"jobs": [job("kc", 2), job("kc", 3)]}),
        )
        .await;
        assert_eq!(st, 201, "{b}");
        assert!(
            b["jobs"]
                .as_array()
                .is_some_and(|j| j.iter().all(|j| j["meta"]["tenant_id"] == "acme")),
            "{b}"
        );
        let (st, b) = post(
            &s,
            ACME,
            "/ojs/v1/workflows",
            json!({"type": "group", "jobs": [job("kc", 4), job("kc", 5)]}),
        )
        .await;
        assert_eq!(st, 201, "{b}");
        let wf = b["workflow"]["id"].as_str().expect("id").to_string();
        let member = b["workflow"]["jobs"][0]["id"].as_str().expect("id").to_string();
        let (_, m) = get(&s, ACME, &format!("/ojs/v1/jobs/{member}")).await;
        assert_eq!(m["job"]["meta"]["tenant_id"], "acme", "{m}");
        let entry = json!({"name": "kc.nightly", "expression": "0 3 * * *", "job_template": job("kc", 6)});
        let (st, b) = post(&s, ACME, "/ojs/v1/cron", entry).await;
        assert_eq!(
            (st, &b["cron"]["job_template"]["meta"]["tenant_id"]),
            (201, &json!("acme")),
            "{b}"
        );
        // Its tenant's, so the other tenant's key does not see them.
        assert_eq!(get(&s, GLOBEX, &format!("/ojs/v1/workflows/{wf}")).await.0, 404);
        assert_eq!(get(&s, GLOBEX, "/ojs/v1/cron/kc.nightly").await.0, 404);
        assert_eq!(get(&s, ACME, &format!("/ojs/v1/workflows/{wf}")).await.0, 200);
        s.assert_invariants().await;
    }
}

#[tokio::test]
async fn naming_another_tenant_with_a_tenant_key_is_a_403_that_writes_nothing() {
    for shards in [1, 3] {
        let s = server(shards).await;
        let own = enqueue(&s, ACME, job("kf", 0)).await;
        // The header, on any path: a write, a read of its own job, a count, a claim.
        for (method, path, body) in [
            (Method::POST, "/ojs/v1/jobs".to_string(), Some(job("kf", 1))),
            (Method::GET, format!("/ojs/v1/jobs/{own}"), None),
            (Method::GET, "/ojs/v1/queues/kf".to_string(), None),
            (
                Method::POST,
                "/ojs/v1/workers/fetch".to_string(),
                Some(json!({"queues": ["kf"]})),
            ),
        ] {
            let (st, b) = call(&s, ACME, Some("globex"), method.clone(), &path, body).await;
            assert_forbidden(st, &b, &format!("{method} {path} with X-OJS-Tenant: globex"));
        }
        // The body, a batch's job, a workflow's member (either form), a cron template.
        let chain = json!({"type": "kf.first", "args": [], "options": {"queue": "kf"},
            "workflow": {"chain": [with_tenant(job("kf", 7), "globex")]}});
        for (path, body) in [
            ("/ojs/v1/jobs", with_tenant(job("kf", 2), "globex")),
            (
                "/ojs/v1/jobs/batch",
                json!({"jobs": [job("kf", 3), with_tenant(job("kf", 4), "globex")]}),
            ),
            (
                "/ojs/v1/workflows",
                json!({"type": "chain", "steps": [job("kf", 5), with_tenant(job("kf", 6), "globex")]}),
            ),
            ("/ojs/v1/jobs", chain),
            (
                "/ojs/v1/cron",
                json!({"name": "kf.foreign", "expression": "* * * * * *", "job_template": with_tenant(job("kf", 8), "globex")}),
            ),
        ] {
            let (st, b) = post(&s, ACME, path, body).await;
            assert_forbidden(st, &b, path);
        }
        assert_eq!(jobs_in(&s, "kf").await, 1, "nothing but the first job was written");
        assert_eq!(get(&s, ADMIN, "/ojs/v1/cron/kf.foreign").await.0, 404);
        let (_, w) = get(&s, ADMIN, "/ojs/v1/workflows").await;
        assert_eq!(w["pagination"]["total"], 0, "{w}");
        // A header alone (no key bound to a tenant) naming another tenant than the body is a 400, as before.
        let (st, b) = call(
            &s,
            WORKER,
            Some("acme"),
            Method::POST,
            "/ojs/v1/jobs",
            Some(with_tenant(job("kf", 9), "globex")),
        )
        .await;
        assert_eq!((st, &b["error"]["code"]), (400, &json!("invalid_request")), "{b}");
        s.assert_invariants().await;
    }
}

#[tokio::test]
async fn a_tenant_key_claims_only_its_tenants_jobs_a_pool_fetch_too() {
    for shards in [1, 3] {
        let s = server(shards).await;
        // Others' jobs come first: FIFO alone would hand them out.
        enqueue(&s, WORKER, job("kq", 0)).await;
        enqueue(&s, GLOBEX, job("kq", 1)).await;
        let mine = enqueue(&s, ACME, job("kq", 2)).await;
        let (st, f) = post(
            &s,
            ACME,
            "/ojs/v1/workers/fetch",
            json!({"queues": ["kq"], "count": 10}),
        )
        .await;
        assert_eq!(st, 200, "{f}");
        assert_eq!(claimed(&f), [mine.as_str()], "{f}");
        let (st, b) = call(
            &s,
            ADMIN,
            None,
            Method::PUT,
            "/ojs/v1/admin/pools/kp",
            Some(json!({"queues": ["kq", "kq2"]})),
        )
        .await;
        assert_eq!(st, 201, "{b}");
        enqueue(&s, GLOBEX, job("kq2", 3)).await;
        let mine = enqueue(&s, ACME, job("kq2", 4)).await;
        let (st, f) = post(&s, ACME, "/ojs/v1/workers/fetch", json!({"pool": "kp", "count": 10})).await;
        assert_eq!(st, 200, "{f}");
        assert_eq!(claimed(&f), [mine.as_str()], "{f}");
        // The unbound worker key sees every tenant's.
        let (_, f) = post(&s, WORKER, "/ojs/v1/workers/fetch", json!({"pool": "kp", "count": 10})).await;
        assert_eq!(f["jobs"].as_array().map(Vec::len), Some(3), "{f}");
        s.assert_invariants().await;
    }
}

#[tokio::test]
async fn another_tenants_things_are_absent_to_a_tenant_key_and_its_acts_change_nothing() {
    for shards in [1, 3] {
        let s = server(shards).await;
        let theirs = enqueue(&s, GLOBEX, job("kx", 0)).await;
        let (_, f) = post(
            &s,
            GLOBEX,
            "/ojs/v1/workers/fetch",
            json!({"queues": ["kx"], "worker_id": "w-g", "visibility_timeout_ms": 60000}),
        )
        .await;
        let held = f["jobs"][0].clone();
        assert_eq!(held["id"], theirs.as_str(), "{f}");
        let (_, wf) = post(
            &s,
            GLOBEX,
            "/ojs/v1/workflows",
            json!({"type": "chain", "steps": [job("kx", 1)]}),
        )
        .await;
        let wf = wf["workflow"]["id"].as_str().expect("id").to_string();
        let entry = json!({"name": "kx.hourly", "expression": "0 * * * *", "job_template": job("kx", 2)});
        assert_eq!(post(&s, GLOBEX, "/ojs/v1/cron", entry).await.0, 201);

        let job_path = format!("/ojs/v1/jobs/{theirs}");
        // Their worker's checkpoint (the durable-execution extension).
        let (st, b) = call(
            &s,
            GLOBEX,
            None,
            Method::PUT,
            &format!("{job_path}/checkpoint"),
            Some(json!({"state": {"theirs": true}})),
        )
        .await;
        assert_eq!(st, 200, "{b}");
        let cp_path = format!("/ojs/v1/checkpoints/{theirs}");
        for (method, path, body) in [
            (Method::GET, format!("{job_path}/checkpoint"), None),
            (Method::PUT, format!("{job_path}/checkpoint"), Some(json!({"state": 1}))),
            (
                Method::POST,
                format!("{job_path}/checkpoint"),
                Some(json!({"state": 1})),
            ),
            (Method::DELETE, format!("{job_path}/checkpoint"), None),
            (Method::GET, cp_path.clone(), None),
            (Method::POST, cp_path.clone(), Some(json!({"state": 1}))),
            (Method::PUT, cp_path.clone(), Some(json!({"state": 1}))),
            (Method::DELETE, cp_path.clone(), None),
            (Method::GET, format!("{cp_path}/resume"), None),
            (Method::GET, job_path.clone(), None),
            (Method::PATCH, job_path.clone(), Some(json!({"priority": 0}))),
            (Method::DELETE, job_path.clone(), None),
            (Method::GET, format!("{job_path}/explain"), None),
            (Method::GET, format!("{job_path}/progress"), None),
            (
                Method::PUT,
                format!("{job_path}/progress"),
                Some(json!({"progress": 0.5})),
            ),
            (
                Method::POST,
                "/ojs/v1/workers/progress".into(),
                Some(json!({"job_id": theirs, "progress": 0.5})),
            ),
            (Method::GET, format!("/ojs/v1/events?job_id={theirs}"), None),
            (
                Method::POST,
                "/ojs/v1/workers/ack".into(),
                Some(json!({"job_id": theirs})),
            ),
            (
                Method::POST,
                "/ojs/v1/workers/nack".into(),
                Some(json!({"job_id": theirs, "error": {"message": "x"}})),
            ),
            (Method::GET, format!("/ojs/v1/workflows/{wf}"), None),
            (Method::DELETE, format!("/ojs/v1/workflows/{wf}"), None),
            (Method::GET, "/ojs/v1/cron/kx.hourly".into(), None),
            (Method::DELETE, "/ojs/v1/cron/kx.hourly".into(), None),
        ] {
            let (st, b) = call(&s, ACME, None, method.clone(), &path, body).await;
            assert_eq!(
                (st, &b["error"]["code"]),
                (404, &json!("not_found")),
                "{method} {path}: {b}"
            );
        }
        let stream = s
            .http
            .get(s.url(&format!("{job_path}/events/stream")))
            .header("Authorization", format!("Bearer {ACME}"))
            .send()
            .await
            .expect("request");
        assert_eq!(stream.status(), 404);
        let (st, hb) = post(
            &s,
            ACME,
            "/ojs/v1/workers/heartbeat",
            json!({"active_job_ids": [theirs], "visibility_timeout_ms": 3_600_000}),
        )
        .await;
        assert_eq!(
            (st, &hb["jobs"][0]["state"], &hb["jobs"][0]["extended"]),
            (200, &json!("missing"), &json!(false)),
            "{hb}"
        );
        let (_, l) = get(&s, ACME, "/ojs/v1/cron").await;
        assert_eq!(l["pagination"]["total"], 0, "{l}");
        // Nothing changed for globex.
        let (_, got) = get(&s, GLOBEX, &job_path).await;
        let j = &got["job"];
        assert_eq!(
            (&j["state"], &j["priority"], &j["visibility_deadline"], &j["progress"]),
            (
                &json!("active"),
                &held["priority"],
                &held["visibility_deadline"],
                &Value::Null
            ),
            "{got}"
        );
        assert_eq!(
            get(&s, GLOBEX, &format!("/ojs/v1/workflows/{wf}")).await.1["workflow"]["state"],
            "running"
        );
        assert_eq!(get(&s, GLOBEX, "/ojs/v1/cron/kx.hourly").await.0, 200);
        let (_, cp) = get(&s, GLOBEX, &format!("{job_path}/checkpoint")).await;
        assert_eq!(
            (&cp["state"], &cp["sequence"]),
            (&json!({"theirs": true}), &json!(1)),
            "{cp}"
        );
        let (st, b) = post(
            &s,
            GLOBEX,
            "/ojs/v1/workers/ack",
            json!({"job_id": theirs, "lease_id": held["lease_id"]}),
        )
        .await;
        assert_eq!(st, 200, "{b}");
        s.assert_invariants().await;
    }
}

#[tokio::test]
async fn operator_endpoints_and_listings_that_span_tenants_refuse_a_tenant_key() {
    let s = server(1).await;
    let keyed = |n: usize| json!({"type": "keyed.work", "args": [n], "options": {"queue": "ko"}, "rate_limit": {"key": "ko-key", "concurrency": 5}});
    let mine = enqueue(&s, ACME, keyed(0)).await;
    let theirs = enqueue(&s, GLOBEX, keyed(1)).await;
    for (method, path, body) in [
        // Operator endpoints (auth::required_scope: admin).
        (Method::GET, "/ojs/v1/admin/stats", None),
        (Method::GET, "/ojs/v1/admin/jobs?queue=ko&state=available", None),
        (
            Method::PUT,
            "/ojs/v1/admin/tenants/acme",
            Some(json!({"fairness_weight": 9})),
        ),
        (Method::POST, "/ojs/v1/queues/ko/pause", Some(json!({}))),
        (Method::GET, "/ojs/v1/dead-letter", None),
        (Method::PUT, "/ojs/v1/rate-limits/k", Some(json!({"concurrency": 1}))),
        (
            Method::POST,
            "/ojs/v1/workers/w/signal",
            Some(json!({"signal": "quiet"})),
        ),
        // Listings and streams of every tenant's jobs.
        (Method::GET, "/ojs/v1/events", None),
        (Method::GET, "/ojs/v1/events?queues=ko", None),
        (Method::GET, "/ojs/v1/events/stream", None),
        (Method::GET, "/ojs/v1/queues/ko/events/stream", None),
        (Method::GET, "/ojs/v1/rate-limits", None),
        (Method::GET, "/ojs/v1/workflows", None),
        (Method::GET, "/metrics", None),
    ] {
        let (st, b) = call(&s, ACME, None, method.clone(), path, body).await;
        assert_forbidden(st, &b, &format!("{method} {path}"));
    }
    // What a tenant key may read of what spans tenants: counts, never another tenant's job ids.
    for path in [
        "/ojs/v1/queues",
        "/ojs/v1/queues/ko",
        "/ojs/v1/queues/ko/stats",
        "/ojs/v1/rate-limits/ko-key",
        "/ojs/v1/openapi.json",
    ] {
        let (st, b) = get(&s, ACME, path).await;
        assert_eq!(st, 200, "{path}: {b}");
        assert!(!b.to_string().contains(&theirs), "{path} shows globex's job: {b}");
    }
    let (st, b) = get(&s, ACME, &format!("/ojs/v1/events?job_id={mine}")).await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["events"][0]["subject"], mine.as_str(), "{b}");
    // A shared worker holds both tenants' jobs: the acme key sees only acme's of them.
    let (_, f) = post(
        &s,
        WORKER,
        "/ojs/v1/workers/fetch",
        json!({"queues": ["ko"], "count": 2, "worker_id": "w-shared"}),
    )
    .await;
    assert_eq!(f["jobs"].as_array().map(Vec::len), Some(2), "{f}");
    let (st, hb) = post(
        &s,
        WORKER,
        "/ojs/v1/workers/heartbeat",
        json!({"worker_id": "w-shared", "active_job_ids": [mine, theirs]}),
    )
    .await;
    assert_eq!(st, 200, "{hb}");
    let (_, h) = get(&s, ACME, "/ojs/v1/workers/w-shared/health").await;
    assert_eq!(
        (&h["current_jobs"], &h["active_jobs"]),
        (&json!([mine]), &json!(1)),
        "{h}"
    );
    let (_, h) = get(&s, WORKER, "/ojs/v1/workers/w-shared/health").await;
    assert_eq!(h["active_jobs"], 2, "{h}");
    // The unbound worker key reads every tenant's events, as before.
    assert_eq!(get(&s, WORKER, "/ojs/v1/events").await.0, 200);
}

/// Two `X-OJS-Tenant` headers name no single tenant: the first one won ("globex, acme" with globex's key
/// was accepted, "acme, globex" refused). Either order is a 400 that writes nothing, with a bound key, an
/// unbound one, or none.
#[tokio::test]
async fn a_tenant_header_sent_twice_is_a_400() {
    let s = server(1).await;
    for key in [GLOBEX, WORKER] {
        for pair in [["globex", "acme"], ["acme", "globex"], ["globex", "globex"]] {
            let auth = format!("Bearer {key}");
            let (st, b) = s
                .send_with(
                    Method::POST,
                    "/ojs/v1/jobs",
                    &[
                        ("Authorization", auth.as_str()),
                        ("X-OJS-Tenant", pair[0]),
                        ("X-OJS-Tenant", pair[1]),
                    ],
                    Some(job("twice", 0)),
                )
                .await;
            assert_eq!(
                (st, &b["error"]["code"]),
                (400, &json!("invalid_request")),
                "{pair:?} with {key}: {b}"
            );
        }
    }
    assert_eq!(jobs_in(&s, "twice").await, 0, "nothing was written");
}

/// A worker's record belongs to the tenant whose request first wrote it. Globex's key heartbeating
/// acme's worker id with `terminate` and no jobs turned acme's health page into 503 terminate and erased
/// the jobs the operator saw it hold; it could as well keep a dead acme worker looking alive. Such a
/// heartbeat now leaves the record alone (and reads no signal of it), another tenant's health request
/// is a 404, and the shared fleet's records (written by unbound keys) are no tenant's to change.
#[tokio::test]
async fn a_worker_record_is_its_tenants() {
    for shards in [1, 3] {
        let s = server(shards).await;
        let id = enqueue(&s, ACME, job("kw", 0)).await;
        let (_, f) = post(
            &s,
            ACME,
            "/ojs/v1/workers/fetch",
            json!({"queues": ["kw"], "worker_id": "w-acme", "visibility_timeout_ms": 60000}),
        )
        .await;
        let lease = f["jobs"][0]["lease_id"].clone();
        let beat = json!({"worker_id": "w-acme", "state": "running",
            "active_jobs": [{"job_id": id, "lease_id": lease}]});
        assert_eq!(post(&s, ACME, "/ojs/v1/workers/heartbeat", beat.clone()).await.0, 200);
        let (st, b) = post(&s, ADMIN, "/ojs/v1/workers/w-acme/signal", json!({"signal": "quiet"})).await;
        assert_eq!(st, 200, "{b}");
        for key in [GLOBEX] {
            let (st, hb) = post(
                &s,
                key,
                "/ojs/v1/workers/heartbeat",
                json!({"worker_id": "w-acme", "state": "terminate", "active_jobs": []}),
            )
            .await;
            assert_eq!(st, 200, "{hb}");
            assert!(
                !hb.to_string().contains("quiet"),
                "globex read acme's worker's signal: {hb}"
            );
            assert_eq!(get(&s, key, "/ojs/v1/workers/w-acme/health").await.0, 404);
        }
        let (st, h) = get(&s, ACME, "/ojs/v1/workers/w-acme/health").await;
        // Quiet (the operator's signal), not terminate, and still holding its job.
        assert_eq!(st, 503, "{h}");
        assert!(!h.to_string().contains("terminate"), "{h}");
        assert!(h.to_string().contains(&id), "{h}");
        let (_, a) = get(&s, ADMIN, "/ojs/v1/admin/workers/w-acme").await;
        assert!(a.to_string().contains(&id), "the operator sees the job it holds: {a}");
        // The shared fleet's worker (an unbound key) is not acme's to change either.
        let shared = json!({"worker_id": "w-fleet", "state": "running", "active_jobs": []});
        assert_eq!(post(&s, WORKER, "/ojs/v1/workers/heartbeat", shared).await.0, 200);
        let stop = json!({"worker_id": "w-fleet", "state": "terminate", "active_jobs": []});
        assert_eq!(post(&s, ACME, "/ojs/v1/workers/heartbeat", stop).await.0, 200);
        assert_eq!(get(&s, WORKER, "/ojs/v1/workers/w-fleet/health").await.0, 200);
        // (Its health is shown to a tenant, with only the tenant's jobs of it.)
        assert_eq!(get(&s, ACME, "/ojs/v1/workers/w-fleet/health").await.0, 200);
        s.assert_invariants().await;
    }
}
