//! The server on a real Redis Cluster (`--redis-cluster`): three primaries started by the test kit.
//! Two deployments (namespaces) whose hash tags live on different primaries each run jobs, limits,
//! events, cron and a workflow through the API, and every key of each stays on its own primary.

use std::time::Duration;

use ojs_testkit::cluster::LocalCluster;
use ojs_testkit::TestServer;
use serde_json::{json, Value};

/// A namespace whose keys live on a primary other than those in `taken`, and that primary's URL.
fn namespace_on_another_primary(cluster: &LocalCluster, taken: &[String]) -> (String, String) {
    loop {
        let ns = ojs_testkit::unique_namespace();
        let owner = cluster.owner_url(&ojs_store::Keys::new(&ns).schema());
        if !taken.contains(&owner) {
            return (ns, owner);
        }
    }
}

async fn start_on(cluster: &LocalCluster, ns: &str) -> TestServer {
    let mut cfg = ojs_server::Config::for_cluster(&cluster.seeds());
    cfg.namespace = ns.to_string();
    cfg.tick_ms = 20;
    TestServer::start_config(cfg).await
}

/// A plain connection to one node of the cluster.
async fn node(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

async fn dbsize(url: &str) -> i64 {
    redis::cmd("DBSIZE").query_async(&mut node(url).await).await.unwrap()
}

/// Every key on the node at `url` (a test cluster is small).
async fn keys_on(url: &str) -> Vec<String> {
    redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut node(url).await)
        .await
        .unwrap()
}

async fn exercise(s: &TestServer, queue: &str) {
    // Priority order and FIFO within a priority, through separate fetch and ack requests.
    let low = s
        .enqueue(json!({"type": "c.job", "args": [1], "priority": 5, "options": {"queue": queue}}))
        .await;
    let (st, b) = s
        .post(
            "/ojs/v1/jobs/batch",
            json!({"jobs": [
                {"type": "c.job", "args": [2], "priority": 0, "options": {"queue": queue}},
                {"type": "c.job", "args": [3], "priority": 0, "options": {"queue": queue}}
            ]}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let mut order = Vec::new();
    for _ in 0..3 {
        let got = s.fetch(&[queue], 1).await;
        let id = got[0]["id"].as_str().expect("id").to_string();
        order.push(got[0]["args"][0].as_i64().expect("arg"));
        assert_eq!(s.ack(&id).await.0, 200);
    }
    assert_eq!(order, [2, 3, 1], "priority first, then FIFO");
    assert_eq!(
        s.get(&format!("/ojs/v1/jobs/{low}")).await.1["job"]["state"],
        "completed"
    );

    // A concurrency limit holds across fetches.
    let limited = json!({"type": "c.lim", "args": [], "options": {"queue": queue},
        "rate_limit": {"key": "tenant-1", "concurrency": 1}});
    s.enqueue(limited.clone()).await;
    s.enqueue(limited).await;
    let first = s.fetch(&[queue], 5).await;
    assert_eq!(first.len(), 1, "one slot: {first:?}");
    assert!(s.fetch(&[queue], 5).await.is_empty(), "the key is saturated");
    s.ack(first[0]["id"].as_str().expect("id")).await;
    let second = s.fetch(&[queue], 5).await;
    assert_eq!(second.len(), 1, "the released slot lets the next one start");
    s.ack(second[0]["id"].as_str().expect("id")).await;

    // Events of the jobs, in order.
    let (_, e) = s.get(&format!("/ojs/v1/events?job_id={low}")).await;
    let types: Vec<&str> = e["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["type"].as_str())
        .collect();
    assert_eq!(types, ["job.enqueued", "job.started", "job.completed"]);

    // A chain: the second step runs after the first completed.
    let (st, b) = s
        .post(
            "/ojs/v1/workflows",
            json!({"type": "chain", "name": "c", "steps": [
                {"type": "c.a", "args": [], "options": {"queue": queue}},
                {"type": "c.b", "args": [], "options": {"queue": queue}}
            ]}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    for want in ["c.a", "c.b"] {
        let got = s.fetch(&[queue], 1).await;
        assert_eq!(got.first().map(|j| j["type"].clone()), Some(Value::from(want)));
        s.ack(got[0]["id"].as_str().expect("id")).await;
    }

    // A cron entry (the due index) and the admin reads.
    let (st, b) = s
        .post(
            "/ojs/v1/cron",
            json!({"name": "nightly", "expression": "0 3 * * *", "job_template": {"type": "c.cron", "options": {"queue": queue}}}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let (st, q) = s.get("/ojs/v1/admin/queues").await;
    assert_eq!(st, 200, "{q}");
    let (st, _) = s.get("/ojs/v1/admin/stats").await;
    assert_eq!(st, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployments_on_different_primaries_work_as_on_one_node_and_keep_their_keys_home() {
    let cluster = LocalCluster::start(3, 0);
    let (ns_a, owner_a) = namespace_on_another_primary(&cluster, &[]);
    let (ns_b, owner_b) = namespace_on_another_primary(&cluster, &[owner_a.clone()]);
    let a = start_on(&cluster, &ns_a).await;
    let b = start_on(&cluster, &ns_b).await;
    let (st, h) = a.get("/ojs/v1/health").await;
    assert_eq!(st, 200, "{h}");

    exercise(&a, "qa").await;
    exercise(&b, "qb").await;

    // Each deployment's keys are all on its own primary, and nowhere else.
    for (ns, owner) in [(&ns_a, &owner_a), (&ns_b, &owner_b)] {
        let tag = format!("{{{ns}}}");
        for port in &cluster.ports {
            let url = format!("redis://127.0.0.1:{port}");
            let here = keys_on(&url).await.into_iter().filter(|k| k.contains(&tag)).count();
            if &url == owner {
                assert!(here > 10, "{ns}: only {here} keys on its primary {owner}");
            } else {
                assert_eq!(here, 0, "{ns}: {here} keys on {url}, which does not hold its slot");
            }
        }
    }
    assert!(dbsize(&owner_a).await > 0 && dbsize(&owner_b).await > 0);
    a.assert_invariants().await;
    b.assert_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_library_is_loaded_on_every_primary_and_reloaded_after_a_flush() {
    let cluster = LocalCluster::start(3, 0);
    let (ns, owner) = namespace_on_another_primary(&cluster, &[]);
    let s = start_on(&cluster, &ns).await;
    s.enqueue(json!({"type": "c.job", "args": [], "options": {"queue": "f"}}))
        .await;
    for port in &cluster.ports {
        let mut c = node(&format!("redis://127.0.0.1:{port}")).await;
        let libs: redis::Value = redis::cmd("FUNCTION").arg("LIST").query_async(&mut c).await.unwrap();
        assert!(format!("{libs:?}").contains("ojs_"), "no library on 127.0.0.1:{port}");
    }
    // FUNCTION FLUSH on the deployment's primary: the next call loads the library again.
    let mut c = node(&owner).await;
    let _: () = redis::cmd("FUNCTION").arg("FLUSH").query_async(&mut c).await.unwrap();
    let got = s.fetch(&["f"], 1).await;
    assert_eq!(got.len(), 1);
    assert_eq!(s.ack(got[0]["id"].as_str().unwrap()).await.0, 200);
    let done = s
        .wait_state(got[0]["id"].as_str().unwrap(), "completed", Duration::from_secs(5))
        .await;
    assert_eq!(done["state"], "completed");
    s.assert_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pods_sse_stream_carries_events_written_through_another_pod() {
    let cluster = LocalCluster::start(3, 0);
    let (ns, _) = namespace_on_another_primary(&cluster, &[]);
    let a = start_on(&cluster, &ns).await;
    let b = start_on(&cluster, &ns).await;
    let mut resp = b
        .http
        .get(b.url("/ojs/v1/queues/sse/events/stream"))
        .send()
        .await
        .expect("connect");
    assert_eq!(resp.status(), 200);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let id = a
        .enqueue(json!({"type": "a", "args": [], "options": {"queue": "sse"}}))
        .await;
    let text = ojs_testkit::read_sse_until(&mut resp, &id).await;
    assert!(text.contains("event: job.enqueued") && text.contains(&id), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn told_to_wait_for_a_replica_no_acknowledged_change_is_lost_when_its_primary_dies() {
    let mut cluster = LocalCluster::start(3, 1);
    let (ns, owner) = namespace_on_another_primary(&cluster, &[]);
    let mut cfg = ojs_server::Config::for_cluster(&cluster.seeds());
    cfg.namespace = ns.clone();
    cfg.tick_ms = 20;
    cfg.redis_wait_replicas = 1;
    cfg.redis_wait_timeout_ms = 2_000;
    let s = TestServer::start_config(cfg).await;
    let mut ids = Vec::new();
    for i in 0..100 {
        ids.push(
            s.enqueue(json!({"type": "c.w", "args": [i], "options": {"queue": "w"}}))
                .await,
        );
    }
    let mut acked = Vec::new();
    for _ in 0..30 {
        let got = s.fetch(&["w"], 1).await;
        let id = got[0]["id"].as_str().expect("id").to_string();
        assert_eq!(s.ack(&id).await.0, 200);
        acked.push(id);
    }

    // The primary dies at once; its replica takes over (cluster-node-timeout 1 s).
    let port: u16 = owner.rsplit(':').next().and_then(|p| p.parse().ok()).expect("port");
    cluster.kill(port);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let seeds = cluster.live_seeds();
        if ojs_testkit::cluster::owner_url(&seeds, &ojs_store::Keys::new(&ns).schema()) != owner {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no replica took over");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Every job the server acknowledged is on the new primary, in the state it acknowledged.
    for (i, id) in ids.iter().enumerate() {
        let want = if acked.contains(id) { "completed" } else { "available" };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let (st, b) = s.get(&format!("/ojs/v1/jobs/{id}")).await;
            if st == 200 {
                assert_eq!(b["job"]["state"], want, "job {i} {id}");
                break;
            }
            assert!(
                st == 503 && std::time::Instant::now() < deadline,
                "job {i} {id}: {st} {b}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // The new primary has no replica yet: a change cannot be confirmed, so it is answered 503 (it may
    // or may not have been applied), never 2xx.
    let (st, b) = s
        .post(
            "/ojs/v1/jobs",
            json!({"type": "c.w", "args": [], "options": {"queue": "w2"}}),
        )
        .await;
    assert_eq!(st, 503, "{b}");
    // The dead node comes back as the new primary's replica: the server goes on as before.
    cluster.restart(port);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let id = loop {
        let (st, b) = s
            .post(
                "/ojs/v1/jobs",
                json!({"type": "c.w", "args": [], "options": {"queue": "w3"}}),
            )
            .await;
        if st == 201 {
            break b["job"]["id"].as_str().expect("id").to_string();
        }
        assert!(st == 503 && std::time::Instant::now() < deadline, "{st} {b}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let got = s.fetch(&["w3"], 1).await;
    assert_eq!(got[0]["id"], id.as_str());
    assert_eq!(s.ack(&id).await.0, 200);
    let now_owner = ojs_testkit::cluster::owner_url(&cluster.live_seeds(), &ojs_store::Keys::new(&ns).schema());
    let problems = ojs_testkit::check_invariants(&now_owner, &ns).await;
    assert!(problems.is_empty(), "{problems:#?}");
}
