//! Workflows (chain, group, batch) beyond the conformance suite: results passed down a chain, priority
//! inheritance and override (seed §9.2), the seed's form on POST /jobs, a 10,000-job group whose ACKs
//! cost the same whatever its size, cancellation, failure, and the keyspace invariants after each.

use std::collections::HashMap;

use ojs_testkit::TestServer;
use serde_json::{json, Value};

fn job(t: &str, queue: &str) -> Value {
    json!({"type": t, "args": [], "options": {"queue": queue}})
}

/// Claims one job of `queue` and acks it with `result`; returns the job as FETCH gave it.
async fn run_one(s: &TestServer, queue: &str, result: Value) -> Value {
    let got = s.fetch(&[queue], 1).await;
    assert_eq!(got.len(), 1, "expected a job in {queue}");
    let (st, b) = s
        .post("/ojs/v1/workers/ack", json!({"job_id": got[0]["id"], "result": result}))
        .await;
    assert_eq!(st, 200, "{b}");
    got[0].clone()
}

/// Creates a workflow (`POST /workflows` must answer 201) and returns it as the answer shows it.
async fn create(s: &TestServer, body: Value) -> Value {
    let (st, b) = s.post("/ojs/v1/workflows", body).await;
    assert_eq!(st, 201, "{b}");
    b["workflow"].clone()
}

async fn workflow(s: &TestServer, id: &str) -> Value {
    let (st, b) = s.get(&format!("/ojs/v1/workflows/{id}")).await;
    assert_eq!(st, 200, "{b}");
    b["workflow"].clone()
}

#[tokio::test]
async fn chain_passes_every_earlier_result_and_runs_in_order() {
    let s = TestServer::start().await;
    let (st, b) = s
        .post(
            "/ojs/v1/workflows",
            json!({"type": "chain", "name": "etl", "steps": [job("etl.extract", "w"), job("etl.transform", "w"), job("etl.load", "w")]}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let id = b["workflow"]["id"].as_str().expect("id").to_string();
    let states: Vec<&str> = b["workflow"]["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .filter_map(|j| j["state"].as_str())
        .collect();
    assert_eq!(
        states,
        ["available", "pending", "pending"],
        "only the first step is ready"
    );
    // A pending step is visible but never fetched.
    assert_eq!(s.fetch(&["w"], 10).await.len(), 1);
    let first = b["workflow"]["jobs"][0]["id"].as_str().expect("id");
    s.post("/ojs/v1/workers/ack", json!({"job_id": first, "result": {"rows": 3}}))
        .await;
    let second = run_one(&s, "w", json!("t-ok")).await;
    assert_eq!(second["type"], "etl.transform");
    assert_eq!(second["workflow_id"], id.as_str());
    assert_eq!(second["parent_results"], json!([{"rows": 3}]));
    let third = run_one(&s, "w", json!(null)).await;
    assert_eq!(third["parent_results"], json!([{"rows": 3}, "t-ok"]));
    let w = workflow(&s, &id).await;
    assert_eq!(
        (w["state"].as_str(), w["steps_completed"].as_u64()),
        (Some("completed"), Some(3))
    );
    assert!(
        w["metadata"]["started_at"].is_string() && w["metadata"]["completed_at"].is_string(),
        "{w}"
    );
    s.assert_invariants().await;
}

#[tokio::test]
async fn steps_inherit_the_workflow_priority_unless_they_override_it() {
    let s = TestServer::start().await;
    // Seed model: lower runs first. Two competing jobs at priority 2 and 3 wait in the same queue.
    let p2 = s
        .enqueue(json!({"type": "other.p2", "args": [], "queue": "q", "priority": 2}))
        .await;
    let p3 = s
        .enqueue(json!({"type": "other.p3", "args": [], "queue": "q", "priority": 3}))
        .await;
    let (st, b) = s
        .post(
            "/ojs/v1/workflows",
            json!({"type": "group", "priority": 1, "jobs": [
                {"type": "g.inherits", "args": [], "queue": "q"},
                {"type": "g.overrides", "args": [], "queue": "q", "priority": 9}]}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let order: Vec<String> = s
        .fetch(&["q"], 10)
        .await
        .iter()
        .map(|j| format!("{}:{}", j["type"].as_str().unwrap_or(""), j["priority"]))
        .collect();
    assert_eq!(order, ["g.inherits:1", "other.p2:2", "other.p3:3", "g.overrides:9"]);
    let _ = (p2, p3);

    // A chain: the inherited priority holds for steps released later too.
    let (_, b) = s
        .post(
            "/ojs/v1/workflows",
            json!({"type": "chain", "priority": 0, "steps": [
                {"type": "c.one", "args": [], "queue": "c"}, {"type": "c.two", "args": [], "queue": "c"},
                {"type": "c.three", "args": [], "queue": "c", "priority": 5}]}),
        )
        .await;
    let ids: Vec<String> = b["workflow"]["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["id"].as_str().unwrap_or("").to_string())
        .collect();
    let mut priorities = Vec::new();
    for id in &ids {
        let (_, j) = s.get(&format!("/ojs/v1/jobs/{id}")).await;
        priorities.push(j["job"]["priority"].as_i64());
    }
    assert_eq!(priorities, [Some(0), Some(0), Some(5)]);
    s.assert_invariants().await;
}

#[tokio::test]
async fn core_model_inherits_options_priority() {
    let s = TestServer::start_with(|c| c.priority_model = ojs_core::PriorityModel::Core).await;
    let (st, b) = s
        .post(
            "/ojs/v1/workflows",
            json!({"type": "chain", "options": {"priority": 50}, "steps": [job("a.b", "k"), job("a.c", "k")]}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let first = s.fetch(&["k"], 1).await;
    assert_eq!(
        first[0]["options"]["priority"]
            .as_i64()
            .or(first[0]["priority"].as_i64()),
        Some(50),
        "{}",
        first[0]
    );
}

#[tokio::test]
async fn the_seed_form_on_post_jobs_runs_the_envelope_then_its_chain() {
    let s = TestServer::start().await;
    let (st, b) = s
        .post(
            "/ojs/v1/jobs",
            json!({"type": "order.process", "queue": "orders", "args": [{"order_id": "ord_456"}], "priority": 1,
                "workflow": {"chain": [
                    {"type": "payment.charge", "args": [{"order_id": "ord_456"}]},
                    {"type": "inventory.reserve", "args": [{"order_id": "ord_456"}]},
                    {"type": "shipping.schedule", "args": [{"order_id": "ord_456"}], "priority": 4}]}}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    assert_eq!(
        (b["job"]["type"].as_str(), b["job"]["state"].as_str()),
        (Some("order.process"), Some("available"))
    );
    assert!(
        b["job"].get("workflow").is_none(),
        "the workflow object is not part of the job: {b}"
    );
    let wid = b["workflow"]["id"].as_str().expect("workflow id").to_string();
    assert_eq!(b["job"]["workflow_id"], wid.as_str());
    assert_eq!(b["workflow"]["steps_total"], 4);
    let mut ran = Vec::new();
    for _ in 0..4 {
        let j = run_one(&s, "orders", json!({"ok": true})).await;
        ran.push(format!("{}:{}", j["type"].as_str().unwrap_or(""), j["priority"]));
    }
    assert_eq!(
        ran,
        [
            "order.process:1",
            "payment.charge:1",
            "inventory.reserve:1",
            "shipping.schedule:4"
        ]
    );
    assert_eq!(workflow(&s, &wid).await["state"], "completed");
    // Bad forms are 400s that name the field.
    let (st, b) = s
        .post(
            "/ojs/v1/jobs",
            json!({"type": "a", "args": [], "workflow": {"group": []}}),
        )
        .await;
    assert_eq!(st, 400, "{b}");
    assert!(
        b["error"]["message"].as_str().unwrap_or("").contains("workflow.group"),
        "{b}"
    );
    s.assert_invariants().await;
}

/// Redis commands executed so far, by command (those run inside scripts included).
async fn commands(s: &TestServer) -> HashMap<String, u64> {
    let mut c = s.redis().await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await
        .expect("INFO");
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest.split("calls=").nth(1)?.split(',').next()?.parse().ok()?;
            Some((name.to_string(), calls))
        })
        .collect()
}

/// What one ACK of `id` cost: the commands it ran, by command, without the INFO calls that measure it.
async fn ack_cost(s: &TestServer, id: &str) -> Vec<(String, u64)> {
    let before = commands(s).await;
    s.ack(id).await;
    let mut d: Vec<(String, u64)> = commands(s)
        .await
        .into_iter()
        .filter(|(k, _)| k != "info")
        .map(|(k, v)| {
            let was = before.get(&k).copied().unwrap_or(0);
            (k, v - was)
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    d.sort();
    d
}

#[tokio::test]
async fn a_ten_thousand_job_group_advances_at_constant_cost_per_ack() {
    let s = TestServer::start().await;
    let jobs: Vec<Value> = (0..10_000)
        .map(|i| json!({"type": "g.part", "args": [i], "queue": "big"}))
        .collect();
    let (st, b) = s
        .post(
            "/ojs/v1/workflows",
            json!({"type": "batch", "jobs": jobs, "callbacks": {"on_complete": job("g.done", "big-cb")}}),
        )
        .await;
    assert_eq!(st, 201, "{}", b["error"]);
    let id = b["workflow"]["id"].as_str().expect("id").to_string();
    assert_eq!(b["workflow"]["jobs_total"], 10_000);
    // Four concurrent workers drain it: batches of 250 claimed, each job acked on its own.
    let mut workers = Vec::new();
    for w in 0..4 {
        let http = s.http.clone();
        let base = s.base.clone();
        workers.push(tokio::spawn(async move {
            let mut acked = 0;
            loop {
                let r: Value = http
                    .post(format!("{base}/ojs/v1/workers/fetch"))
                    .json(&json!({"queues": ["big"], "count": 250, "worker_id": format!("w{w}")}))
                    .send()
                    .await
                    .expect("fetch")
                    .json()
                    .await
                    .expect("json");
                let got = r["jobs"].as_array().cloned().unwrap_or_default();
                if got.is_empty() {
                    return acked;
                }
                for j in got {
                    let r = http
                        .post(format!("{base}/ojs/v1/workers/ack"))
                        .json(&json!({"job_id": j["id"], "result": j["args"][0]}))
                        .send()
                        .await
                        .expect("ack");
                    assert!(r.status().is_success());
                    acked += 1;
                }
            }
        }));
    }
    let mut total = 0;
    for w in workers {
        total += w.await.expect("worker");
    }
    assert_eq!(total, 10_000);
    // ...except that the last ACK fired the callback, with all 10,000 results in order.
    let w = workflow(&s, &id).await;
    assert_eq!(
        (w["state"].as_str(), w["jobs_completed"].as_u64()),
        (Some("running"), Some(10_000))
    );
    let cb = s.fetch(&["big-cb"], 1).await;
    let results = cb[0]["parent_results"].as_array().cloned().unwrap_or_default();
    assert_eq!(results.len(), 10_000);
    assert!(results.iter().enumerate().all(|(i, r)| r.as_u64() == Some(i as u64)));
    s.ack(cb[0]["id"].as_str().expect("id")).await;
    assert_eq!(workflow(&s, &id).await["state"], "completed");
    s.assert_invariants().await;
}

#[tokio::test]
async fn an_ack_costs_the_same_in_a_group_of_10_and_of_10_000() {
    if ojs_testkit::skip_on_cluster("counts commands on an idle single redis-server of its own") {
        return;
    }
    // A Redis of this test's own (the shared one serves concurrent tests) and timers that stay idle, so
    // the command counts are this server's ACKs alone; the least of five ACKs per size is compared.
    let dir = std::env::temp_dir().join(format!("ojs-wf-cost-{}", ojs_testkit::unique_namespace()));
    let redis = ojs_testkit::OwnRedis::aof(&dir).await;
    let mut cfg = ojs_server::Config::for_redis(&redis.url());
    cfg.namespace = ojs_testkit::unique_namespace();
    cfg.tick_ms = 3_600_000;
    let s = TestServer::start_config(cfg).await;
    let mut cost = HashMap::new();
    for n in [10usize, 10_000] {
        let q = format!("cost{n}");
        let jobs: Vec<Value> = (0..n).map(|_| job("g.part", &q)).collect();
        let (st, _) = s
            .post("/ojs/v1/workflows", json!({"type": "group", "jobs": jobs}))
            .await;
        assert_eq!(st, 201);
        let got = s.fetch(&[q.as_str()], 6).await;
        let mut least: Option<Vec<(String, u64)>> = None;
        for j in &got {
            let c = ack_cost(&s, j["id"].as_str().expect("id")).await;
            let total = |c: &Vec<(String, u64)>| c.iter().map(|(_, n)| n).sum::<u64>();
            if least.as_ref().is_none_or(|l| total(&c) < total(l)) {
                least = Some(c);
            }
        }
        cost.insert(n, least.unwrap_or_default());
    }
    // The same commands, and none of them reads a whole structure: each touches O(1) elements.
    assert_eq!(cost[&10], cost[&10_000], "Redis commands per ACK");
    for (cmd, _) in &cost[&10_000] {
        assert!(
            !["lrange", "hgetall", "hvals", "hkeys", "zrange", "smembers", "scan"].contains(&cmd.as_str()),
            "an ACK of a group member reads a whole structure with {cmd}: {:?}",
            cost[&10_000]
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_failed_step_stops_the_chain_and_cancelling_a_workflow_cancels_its_jobs() {
    let s = TestServer::start().await;
    let (_, b) = s
        .post(
            "/ojs/v1/workflows",
            json!({"type": "chain", "steps": [
                {"type": "s.fail", "args": [], "queue": "f", "options": {"retry": {"max_attempts": 1}}},
                job("s.never", "f"), job("s.never2", "f")]}),
        )
        .await;
    let id = b["workflow"]["id"].as_str().expect("id").to_string();
    let got = s.fetch(&["f"], 1).await;
    let (st, n) = s
        .post(
            "/ojs/v1/workers/nack",
            json!({"job_id": got[0]["id"], "error": {"code": "boom", "message": "no"}}),
        )
        .await;
    assert_eq!((st, n["state"].as_str()), (200, Some("discarded")), "{n}");
    let w = workflow(&s, &id).await;
    assert_eq!(
        (w["state"].as_str(), w["failed_step_index"].as_u64()),
        (Some("failed"), Some(0))
    );
    let later: Vec<&str> = w["jobs"].as_array().expect("jobs")[1..]
        .iter()
        .filter_map(|j| j["state"].as_str())
        .collect();
    assert_eq!(later, ["cancelled", "cancelled"]);
    assert!(s.fetch(&["f"], 10).await.is_empty());
    let (st, _) = s.delete(&format!("/ojs/v1/workflows/{id}")).await;
    assert_eq!(st, 409, "an ended workflow cannot be cancelled");

    // Cancel a running group: the active job's ACK is refused, nothing else is fetched.
    let (_, b) = s
        .post(
            "/ojs/v1/workflows",
            json!({"type": "group", "jobs": [job("x.a", "x"), job("x.b", "x"), job("x.c", "x")]}),
        )
        .await;
    let gid = b["workflow"]["id"].as_str().expect("id").to_string();
    let running = s.fetch(&["x"], 1).await;
    let (st, c) = s.delete(&format!("/ojs/v1/workflows/{gid}")).await;
    assert_eq!((st, c["workflow"]["state"].as_str()), (200, Some("cancelled")), "{c}");
    let states: Vec<&str> = c["workflow"]["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .filter_map(|j| j["state"].as_str())
        .collect();
    assert_eq!(states, ["cancelled"; 3]);
    let (st, _) = s.ack(running[0]["id"].as_str().expect("id")).await;
    assert_eq!(st, 409);
    assert!(s.fetch(&["x"], 10).await.is_empty());
    let (st, _) = s.get("/ojs/v1/workflows/0190b6d4-0000-7000-8000-000000000000").await;
    assert_eq!(st, 404);
    let (_, l) = s.get("/ojs/v1/workflows").await;
    assert_eq!(l["workflows"].as_array().map(Vec::len), Some(2), "{l}");
    // A page far past the end (found by schemathesis: an offset past i64 was a 500) is an empty page.
    let (st, l) = s.get("/ojs/v1/workflows?page=9223372036854775808").await;
    assert_eq!((st, l["workflows"].as_array().map(Vec::len)), (200, Some(0)), "{l}");
    s.assert_invariants().await;
}

#[tokio::test]
async fn batch_callbacks_fire_once_with_every_result() {
    let s = TestServer::start().await;
    let (_, b) = s
        .post(
            "/ojs/v1/workflows",
            json!({"type": "batch", "jobs": [job("b.a", "b"), {"type": "b.b", "args": [], "queue": "b",
                    "options": {"retry": {"max_attempts": 1}}}],
                "callbacks": {"on_success": job("b.success", "bcb"), "on_failure": job("b.failure", "bcb"),
                    "on_complete": job("b.complete", "bcb")}}),
        )
        .await;
    let id = b["workflow"]["id"].as_str().expect("id").to_string();
    assert!(s.fetch(&["bcb"], 10).await.is_empty(), "callbacks wait for the batch");
    let got = s.fetch(&["b"], 2).await;
    s.post(
        "/ojs/v1/workers/ack",
        json!({"job_id": got[0]["id"], "result": {"n": 1}}),
    )
    .await;
    s.post(
        "/ojs/v1/workers/nack",
        json!({"job_id": got[1]["id"], "error": {"code": "x", "message": "y"}}),
    )
    .await;
    let cbs = s.fetch(&["bcb"], 10).await;
    let types: Vec<&str> = cbs.iter().filter_map(|j| j["type"].as_str()).collect();
    assert_eq!(types, ["b.complete", "b.failure"]);
    assert_eq!(cbs[0]["parent_results"], json!([{"n": 1}, null]));
    let w = workflow(&s, &id).await;
    assert_eq!(w["callbacks"]["on_success"]["state"], "cancelled");
    for cb in &cbs {
        s.ack(cb["id"].as_str().expect("id")).await;
    }
    let w = workflow(&s, &id).await;
    assert_eq!(
        (w["state"].as_str(), w["jobs_failed"].as_u64()),
        (Some("completed"), Some(1))
    );
    s.assert_invariants().await;
}

/// How many keys of `family` (a layout.rs family name) the server's namespace holds.
async fn stored(s: &TestServer, family: &str) -> usize {
    let mut c = s.redis().await;
    let found: Vec<String> = redis::cmd("KEYS")
        .arg(s.keys().pattern(family))
        .query_async(&mut c)
        .await
        .expect("KEYS");
    found.len()
}

#[tokio::test]
async fn the_chain_form_is_refused_wherever_it_would_be_dropped() {
    let s = TestServer::start().await;
    let seeded = json!({"type": "order.process", "args": [], "queue": "orders",
        "workflow": {"chain": [{"type": "payment.charge", "args": []}]}});
    let refused = |st: u16, b: &Value, needle: &str| {
        let msg = b["error"]["message"].as_str().unwrap_or("");
        assert_eq!(st, 422, "{b}");
        assert!(msg.contains(needle), "{needle:?} not in {msg:?}");
    };
    // POST /jobs/batch: the chain form belongs to POST /jobs alone.
    let (st, b) = s
        .post(
            "/ojs/v1/jobs/batch",
            json!({"jobs": [job("plain.one", "orders"), seeded.clone()]}),
        )
        .await;
    refused(st, &b, "jobs[1]: ");
    refused(st, &b, "POST /ojs/v1/workflows");
    // A cron entry's template: every tick would create the first job alone.
    let (st, b) = s
        .post(
            "/ojs/v1/cron",
            json!({"name": "chained", "expression": "* * * * *", "job_template": seeded.clone()}),
        )
        .await;
    refused(st, &b, "job_template: ");
    // A member of POST /workflows carrying a chain of its own is a nested workflow.
    for (field, body) in [
        (
            "steps[1]",
            json!({"type": "chain", "steps": [job("a.one", "w"), seeded.clone()]}),
        ),
        ("jobs[0]", json!({"type": "group", "jobs": [seeded.clone()]})),
        (
            "callbacks.on_complete",
            json!({"type": "batch", "jobs": [job("a.one", "w")], "callbacks": {"on_complete": seeded.clone()}}),
        ),
    ] {
        let (st, b) = s.post("/ojs/v1/workflows", body).await;
        refused(st, &b, &format!("{field}: nested workflows"));
    }
    // ... and so is a step of the seed form that carries one.
    let (st, b) = s
        .post(
            "/ojs/v1/jobs",
            json!({"type": "a.root", "args": [], "workflow": {"chain": [seeded.clone()]}}),
        )
        .await;
    refused(st, &b, "workflow.chain[0]: nested workflows");
    for family in ["job", "cron", "crons", "workflow", "workflows"] {
        assert_eq!(stored(&s, family).await, 0, "a refused request stored {family} keys");
    }
    // `workflow: null` is no workflow: an ordinary job, on either route.
    let plain = json!({"type": "plain.null", "args": [], "workflow": null});
    let (st, b) = s.post("/ojs/v1/jobs/batch", json!({"jobs": [plain.clone()]})).await;
    assert_eq!(st, 201, "{b}");
    s.enqueue(plain).await;
    s.assert_invariants().await;
}

#[tokio::test]
async fn cancelling_a_pending_callback_removes_only_that_callback() {
    let s = TestServer::start().await;
    let w = create(
        &s,
        json!({"type": "batch", "jobs": [job("p.work", "p")],
            "callbacks": {"on_complete": job("p.complete", "pcb"), "on_success": job("p.success", "pcb")}}),
    )
    .await;
    let id = w["id"].as_str().expect("id").to_string();
    let success = w["callbacks"]["on_success"]["id"].as_str().expect("id").to_string();
    let (st, c) = s.delete(&format!("/ojs/v1/jobs/{success}")).await;
    assert_eq!((st, c["job"]["state"].as_str()), (200, Some("cancelled")), "{c}");
    // The batch goes on: its job has not run yet.
    assert_eq!(workflow(&s, &id).await["state"], "running");
    s.assert_invariants().await;
    run_one(&s, "p", json!({"n": 1})).await;
    // on_complete fires as usual (the cancelled on_success does not), and its end completes the batch.
    let cbs = s.fetch(&["pcb"], 10).await;
    let types: Vec<&str> = cbs.iter().filter_map(|j| j["type"].as_str()).collect();
    assert_eq!(types, ["p.complete"]);
    assert_eq!(cbs[0]["parent_results"], json!([{"n": 1}]));
    s.ack(cbs[0]["id"].as_str().expect("id")).await;
    let w = workflow(&s, &id).await;
    assert_eq!(
        (w["state"].as_str(), w["callbacks"]["on_success"]["state"].as_str()),
        (Some("completed"), Some("cancelled")),
        "{w}"
    );
    s.assert_invariants().await;
}

/// splitmix64: a seeded, reproducible sequence for the randomized test below.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// 0..n
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A random small workflow over queue `q`: a chain, group or batch of 1 to 4 members whose jobs are
/// discarded by their first NACK, a batch with a random non-empty set of callbacks.
fn random_workflow(r: &mut Rng, q: &str) -> Value {
    let member = |t: String| json!({"type": t, "args": [], "queue": q, "options": {"retry": {"max_attempts": 1}}});
    let n = 1 + r.below(4);
    let members: Vec<Value> = (0..n).map(|i| member(format!("r.m{i}"))).collect();
    match r.below(3) {
        0 => json!({"type": "chain", "steps": members}),
        1 => json!({"type": "group", "jobs": members}),
        _ => {
            let mut callbacks = serde_json::Map::new();
            let pick = 1 + r.below(7);
            for (bit, name) in ["on_complete", "on_success", "on_failure"].iter().enumerate() {
                if pick & (1 << bit) != 0 {
                    callbacks.insert(name.to_string(), member(format!("r.{name}")));
                }
            }
            json!({"type": "batch", "jobs": members, "callbacks": callbacks})
        }
    }
}

#[tokio::test]
async fn random_operations_leave_every_workflow_ended_and_nothing_pending() {
    let seed = std::env::var("OJS_WF_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed_0f0f_u64);
    println!("OJS_WF_SEED={seed}");
    let mut r = Rng(seed);
    let s = TestServer::start().await;
    let q = "rnd";
    let (mut workflows, mut members) = (Vec::new(), Vec::new());
    for _ in 0..20 {
        let w = create(&s, random_workflow(&mut r, q)).await;
        workflows.push(w["id"].as_str().expect("id").to_string());
        let cbs = w["callbacks"].as_object().cloned().unwrap_or_default();
        for m in w["jobs"].as_array().expect("jobs").iter().chain(cbs.values()) {
            members.push(m["id"].as_str().expect("id").to_string());
        }
    }
    let nack = |id: Value| json!({"job_id": id, "error": {"code": "random", "message": "failed on purpose"}});
    let mut held: Vec<Value> = Vec::new();
    for step in 0..400 {
        let op = r.below(100);
        let (st, b) = if op < 35 {
            held.extend(s.fetch(&[q], 1).await);
            (200, Value::Null)
        } else if op < 60 && !held.is_empty() {
            let j = held.swap_remove(r.below(held.len()));
            s.post(
                "/ojs/v1/workers/ack",
                json!({"job_id": j["id"], "result": {"step": step}}),
            )
            .await
        } else if op < 75 && !held.is_empty() {
            let j = held.swap_remove(r.below(held.len()));
            s.post("/ojs/v1/workers/nack", nack(j["id"].clone())).await
        } else if op < 95 {
            let id = &members[r.below(members.len())];
            s.delete(&format!("/ojs/v1/jobs/{id}")).await
        } else {
            let id = &workflows[r.below(workflows.len())];
            s.delete(&format!("/ojs/v1/workflows/{id}")).await
        };
        // 409: the job or workflow had ended (or the ACK's job was cancelled meanwhile).
        assert!(st == 200 || st == 409, "step {step} (seed {seed}): {st} {b}");
        if step % 50 == 49 {
            s.assert_invariants().await;
        }
    }
    // Drain: whatever is held or still comes is acked, until nothing is left to run.
    loop {
        for j in held.drain(..) {
            let (st, b) = s.ack(j["id"].as_str().expect("id")).await;
            assert!(st == 200 || st == 409, "{st} {b}");
        }
        held = s.fetch(&[q], 100).await;
        if held.is_empty() {
            break;
        }
    }
    for id in &workflows {
        let w = workflow(&s, id).await;
        assert_ne!(w["state"], "running", "seed {seed}: workflow left running: {w}");
    }
    for id in &members {
        let (_, j) = s.get(&format!("/ojs/v1/jobs/{id}")).await;
        let state = j["job"]["state"].as_str().unwrap_or("");
        assert!(
            ["completed", "cancelled", "discarded"].contains(&state),
            "seed {seed}: job {id} is {state} after the drain: {j}"
        );
    }
    s.assert_invariants().await;
}

/// The stored size (bytes) of each job's record.
async fn record_sizes(s: &TestServer, ids: &[String]) -> Vec<usize> {
    let mut c = s.redis().await;
    let mut sizes = Vec::new();
    for id in ids {
        let n: usize = redis::cmd("STRLEN")
            .arg(s.keys().job(id))
            .query_async(&mut c)
            .await
            .expect("STRLEN");
        sizes.push(n);
    }
    sizes
}

#[tokio::test]
async fn a_long_chain_stores_each_result_once_and_every_step_still_reads_them() {
    let s = TestServer::start().await;
    let steps: Vec<Value> = (0..50).map(|i| job(&format!("long.s{i}"), "long")).collect();
    let w = create(&s, json!({"type": "chain", "steps": steps})).await;
    let ids: Vec<String> = w["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["id"].as_str().expect("id").to_string())
        .collect();
    let result = |i: usize| json!({"step": i, "pad": "x".repeat(1000)});
    let mut last = Value::Null;
    for i in 0..50 {
        last = run_one(&s, "long", result(i)).await;
    }
    // The last step's FETCH showed every earlier result, in order; so does reading it now.
    let earlier: Vec<Value> = (0..49).map(result).collect();
    assert_eq!(last["parent_results"], json!(earlier));
    let (_, got) = s.get(&format!("/ojs/v1/jobs/{}", ids[49])).await;
    assert_eq!(got["job"]["parent_results"], json!(earlier));
    let (_, got) = s.get(&format!("/ojs/v1/jobs/{}", ids[1])).await;
    assert_eq!(got["job"]["parent_results"], json!([result(0)]));
    // Each record holds its own result, not the ones before it: sizes do not grow along the chain.
    let sizes = record_sizes(&s, &ids).await;
    let (first, most) = (sizes[0], sizes.iter().copied().max().unwrap_or(0));
    assert!(most <= first + 100, "records grow along the chain: {sizes:?}");
    s.assert_invariants().await;
}

#[tokio::test]
async fn a_step_released_by_an_older_server_keeps_the_parent_results_in_its_record() {
    let s = TestServer::start().await;
    let w = create(
        &s,
        json!({"type": "chain", "steps": [job("old.a", "old"), job("old.b", "old")]}),
    )
    .await;
    run_one(&s, "old", json!({"n": 1})).await;
    // An older server wrote the results into the released step's record.
    let second = w["jobs"][1]["id"].as_str().expect("id");
    let mut c = s.redis().await;
    let _: () = redis::Script::new(
        "local f = cmsgpack.unpack(redis.call('GET', KEYS[1])) f.parent_results = ARGV[1] f.wf_parents = nil \
         redis.call('SET', KEYS[1], cmsgpack.pack(f), 'KEEPTTL')",
    )
    .key(s.keys().job(second))
    .arg(r#"[{"n":"as stored"}]"#)
    .invoke_async(&mut c)
    .await
    .expect("rewrite the record");
    let (_, got) = s.get(&format!("/ojs/v1/jobs/{second}")).await;
    assert_eq!(got["job"]["parent_results"], json!([{"n": "as stored"}]));
    let fetched = run_one(&s, "old", json!(null)).await;
    assert_eq!(fetched["parent_results"], json!([{"n": "as stored"}]));
}

/// The workflow ids in the listing index (`P workflows`).
async fn listed_ids(s: &TestServer) -> Vec<String> {
    let mut c = s.redis().await;
    redis::cmd("ZRANGE")
        .arg(s.keys().workflows())
        .arg(0)
        .arg(-1)
        .query_async(&mut c)
        .await
        .expect("ZRANGE")
}

/// The workflow ids in the listing index, and how many of them have no hash any more.
async fn listed(s: &TestServer) -> (usize, usize) {
    let mut c = s.redis().await;
    let ids = listed_ids(s).await;
    let mut gone = 0;
    for id in &ids {
        let exists: bool = redis::cmd("EXISTS")
            .arg(s.keys().workflow(id))
            .query_async(&mut c)
            .await
            .expect("EXISTS");
        gone += usize::from(!exists);
    }
    (ids.len(), gone)
}

/// Creates a group of one job in `queue` and, with `run`, runs it (the workflow closes).
async fn one_job_group(s: &TestServer, queue: &str, run: bool) {
    create(s, json!({"type": "group", "jobs": [job("one.a", queue)]})).await;
    if run {
        run_one(s, queue, json!(null)).await;
    }
}

#[tokio::test]
async fn expired_workflows_leave_the_listing_index_behind_long_running_ones() {
    let s = TestServer::start_with(|c| c.retention_secs = 2).await;
    // The oldest entries of the index are workflows that keep running...
    let running = 12;
    for _ in 0..running {
        one_job_group(&s, "slow", false).await;
    }
    // ...then come many that complete (each close also trims) and expire.
    for _ in 0..110 {
        one_job_group(&s, "quick", true).await;
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let stale = loop {
        let (n, gone) = listed(&s).await;
        if n - gone == running {
            break gone;
        }
        assert!(std::time::Instant::now() < deadline, "workflows did not expire");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    // Each of them waits to be taken out (the checker flags a listed, expired workflow that does not).
    s.assert_invariants().await;
    // A later close removes up to 100 of them; the next one the rest.
    one_job_group(&s, "later", true).await;
    assert_eq!(
        listed(&s).await.1,
        stale.saturating_sub(100),
        "one close trims at most 100"
    );
    one_job_group(&s, "later", true).await;
    assert_eq!(listed(&s).await, (running + 2, 0), "expired workflows are still listed");
    s.assert_invariants().await;
}

/// A closed workflow waits in `P workflows:closed` scored by when its keys expire, and a later close
/// takes the due ones out of the listing once their keys are gone. Redis keeps a key until its expiry's
/// millisecond has passed, and the score comes from the script's clock: an entry can be due while its
/// key still lives (one millisecond early, seen under load). That entry was dropped from the waiting
/// set and left in the listing for good. It now waits again until its key's expiry.
#[tokio::test]
async fn a_workflow_due_before_its_keys_expire_waits_to_be_taken_out() {
    let s = TestServer::start_with(|c| c.retention_secs = 2).await;
    let w = create(&s, json!({"type": "group", "jobs": [job("one.a", "early")]})).await;
    let id = w["id"].as_str().expect("id").to_string();
    run_one(&s, "early", json!(null)).await;
    let mut c = s.redis().await;
    // Its entry comes due now, while its keys live on for two seconds.
    let _: () = redis::cmd("ZADD")
        .arg(s.keys().workflows_closed())
        .arg(0)
        .arg(&id)
        .query_async(&mut c)
        .await
        .expect("ZADD");
    // Another close trims the due entries.
    one_job_group(&s, "early.later", true).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while listed(&s).await.1 == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the workflow's keys did not expire"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    s.assert_invariants().await;
    // And a close after its expiry takes it out of the listing.
    one_job_group(&s, "early.last", true).await;
    let (st, b) = s.get(&format!("/ojs/v1/workflows/{id}")).await;
    assert_eq!(st, 404, "{b}");
    let ids = listed_ids(&s).await;
    assert!(!ids.contains(&id), "{id} is still listed: {ids:?}");
}
