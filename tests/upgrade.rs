//! Key-schema upgrades (migrations-notes/README.md): a keyspace written by an older server (v1: job
//! hashes; v2: records with every field in one map) is upgraded by this server at start to v3 (records
//! whose cold fields are packed apart), and every job survives with its state, order and history.
//!
//! The old keyspaces are `tests/fixtures/v1-keyspace.json` and `tests/fixtures/v2-keyspace.json`, made
//! by `make_fixture` below from a real server of that version, in the same scenario:
//! `OJS_V1_SERVER=<a v1 ojs-server binary (9ef230a)> cargo test --test upgrade -- --ignored make_v1_fixture`,
//! and `OJS_V2_SERVER=<a v2 binary (3d268f2)> ... make_v2_fixture`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ojs_testkit::TestServer;
use serde_json::{json, Value};

const FIXTURE_V1: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/v1-keyspace.json");
const FIXTURE_V2: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/v2-keyspace.json");
/// The fixture writes the namespace's key prefix as this placeholder.
const PREFIX: &str = "ojs:{NS}:";
/// Writes KEYS[1] as a record of the field/value pairs in ARGV (every field in one map, as v2 wrote it).
const PACK_RECORD: &str =
    "local f = {} for i = 1, #ARGV, 2 do f[ARGV[i]] = ARGV[i + 1] end redis.call('SET', KEYS[1], cmsgpack.pack(f))";
/// Leases and retry delays in the fixture: 3,600 days.
const LONG_MS: u64 = 3_600 * 86_400_000;

/// Every key of a namespace (streams left out): key (prefix replaced by PREFIX), type, PTTL, content. A
/// job record (v2) is written as its field/value pairs under the type `record`.
const DUMP: &str = r#"
local out = {}
local jobs = ARGV[1] .. 'job:'
for _, k in ipairs(redis.call('KEYS', ARGV[1] .. '*')) do
  local t = redis.call('TYPE', k)['ok']
  local v = nil
  if t == 'string' and string.sub(k, 1, #jobs) == jobs then
    t = 'record'
    v = {}
    for f, x in pairs(cmsgpack.unpack(redis.call('GET', k))) do
      v[#v + 1] = f
      v[#v + 1] = x
    end
  elseif t == 'hash' then v = redis.call('HGETALL', k)
  elseif t == 'zset' then v = redis.call('ZRANGE', k, 0, -1, 'WITHSCORES')
  elseif t == 'set' then v = redis.call('SMEMBERS', k)
  elseif t == 'list' then v = redis.call('LRANGE', k, 0, -1)
  elseif t == 'string' then v = {redis.call('GET', k)}
  end
  if v then out[#out + 1] = {k, t, redis.call('PTTL', k), v} end
end
return out
"#;

#[tokio::test]
#[ignore = "makes tests/fixtures/v1-keyspace.json from a v1 server named by OJS_V1_SERVER"]
async fn make_v1_fixture() {
    let bin = std::env::var("OJS_V1_SERVER").expect("OJS_V1_SERVER: a v1 ojs-server binary");
    make_fixture(
        &bin,
        FIXTURE_V1,
        "v1 ojs-server (9ef230a), tests/upgrade.rs make_v1_fixture",
    )
    .await;
}

#[tokio::test]
#[ignore = "makes tests/fixtures/v2-keyspace.json from a v2 server named by OJS_V2_SERVER"]
async fn make_v2_fixture() {
    let bin = std::env::var("OJS_V2_SERVER").expect("OJS_V2_SERVER: a v2 ojs-server binary");
    make_fixture(
        &bin,
        FIXTURE_V2,
        "v2 ojs-server (3d268f2), tests/upgrade.rs make_v2_fixture",
    )
    .await;
}

/// Runs the fixture's scenario on the server `bin` and writes its keyspace to `path`.
async fn make_fixture(bin: &str, path: &str, made_by: &str) {
    let url = ojs_testkit::redis_url();
    let ns = ojs_testkit::unique_namespace();
    let s = TestServer::spawn_process(bin, &url, &ns, &[]).await;
    let payload = "user=48213;order=ord_7f3c2a91e4b5;action=send_receipt;locale=en-US;channel=email";
    // Waiting jobs of three priorities, FIFO within each; one with a rate-limit key.
    for (i, p) in [5, 2, 0, 2, 5, 0].iter().enumerate() {
        s.enqueue(json!({"type": "mail.send", "args": [payload, i], "priority": p, "options": {"queue": "mail"}}))
            .await;
    }
    s.enqueue(json!({"type": "api.call", "args": [1], "options": {"queue": "api"},
        "rate_limit": {"key": "partner-a", "concurrency": 1}}))
        .await;
    s.enqueue(json!({"type": "api.call", "args": [2], "options": {"queue": "api"},
        "rate_limit": {"key": "partner-a", "concurrency": 1}}))
        .await;
    // Scheduled in ten years. (Every time in the fixture lies years ahead, so that no timer moves a job
    // while the test compares it with the fixture, however old the fixture is.)
    s.enqueue(json!({"type": "report", "args": [], "options": {"queue": "later", "scheduled_at": "+P3600D"}}))
        .await;
    // Active (claimed, never acked), completed (with a result), retryable, dead-lettered, cancelled.
    let work = |t: &str, extra: Value| {
        let mut options = json!({"queue": "work"});
        for (k, v) in extra.as_object().cloned().unwrap_or_default() {
            options[k] = v;
        }
        json!({"type": t, "args": [payload], "options": options})
    };
    for (t, extra) in [
        ("w.active", json!({"visibility_timeout_ms": LONG_MS})),
        ("w.completed", json!({})),
        (
            "w.retryable",
            json!({"retry": {"max_attempts": 3, "initial_interval": "P3600D", "max_interval": "P3600D"}}),
        ),
        (
            "w.dead",
            json!({"retry": {"max_attempts": 1, "on_exhaustion": "dead_letter"}}),
        ),
    ] {
        let id = s.enqueue(work(t, extra)).await;
        let got = s.fetch(&["work"], 1).await;
        assert_eq!(got[0]["id"], id.as_str());
        match t {
            "w.completed" => assert_eq!(
                s.post("/ojs/v1/workers/ack", json!({"job_id": id, "result": {"sent": 3}}))
                    .await
                    .0,
                200
            ),
            "w.retryable" | "w.dead" => {
                let (st, b) = s
                    .post(
                        "/ojs/v1/workers/nack",
                        json!({"job_id": id, "error": {"message": "smtp down"}}),
                    )
                    .await;
                assert_eq!(st, 200, "{b}");
            }
            _ => {}
        }
    }
    let c = s.enqueue(work("w.cancelled", json!({"queue": "idle"}))).await;
    assert_eq!(s.delete(&format!("/ojs/v1/jobs/{c}")).await.0, 200);
    // A chain whose first step waits and whose second is pending.
    let (st, b) = s
        .post(
            "/ojs/v1/workflows",
            json!({"type": "chain", "name": "etl", "steps": [
                {"type": "etl.extract", "args": [], "queue": "etl"},
                {"type": "etl.load", "args": [], "queue": "etl"}]}),
        )
        .await;
    assert_eq!(st, 201, "{b}");

    let mut conn = s.redis().await;
    let prefix = s.keys().prefix().to_string();
    let keys: Vec<(String, String, i64, Vec<String>)> = redis::Script::new(DUMP)
        .arg(&prefix)
        .invoke_async(&mut conn)
        .await
        .expect("dump");
    let keys: Vec<Value> = keys
        .into_iter()
        .map(|(k, t, ttl, v)| json!({"key": k.replacen(&prefix, PREFIX, 1), "type": t, "pttl": ttl, "value": v}))
        .collect();
    let text = serde_json::to_string_pretty(&json!({"made_by": made_by, "keys": keys})).expect("json");
    std::fs::write(path, text + "\n").expect("write fixture");
}

/// Loads the fixture at `path` under `prefix`; returns its jobs' fields by id.
async fn load_fixture(
    conn: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
    path: &str,
) -> HashMap<String, HashMap<String, String>> {
    let fixture: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("json");
    let mut jobs = HashMap::new();
    for k in fixture["keys"].as_array().expect("keys") {
        let key = k["key"].as_str().expect("key").replacen(PREFIX, prefix, 1);
        let v: Vec<String> = serde_json::from_value(k["value"].clone()).expect("value");
        let mut cmd = match k["type"].as_str().expect("type") {
            "hash" => redis::cmd("HSET"),
            "zset" => redis::cmd("ZADD"),
            "set" => redis::cmd("SADD"),
            "list" => redis::cmd("RPUSH"),
            "string" => redis::cmd("SET"),
            // A v2 record, packed again by Redis' own cmsgpack as a v2 server packed it.
            "record" => {
                let mut c = redis::cmd("EVAL");
                c.arg(PACK_RECORD).arg(1);
                c
            }
            other => panic!("fixture type {other}"),
        };
        cmd.arg(&key);
        if k["type"] == "zset" {
            for pair in v.chunks(2) {
                cmd.arg(&pair[1]).arg(&pair[0]);
            }
        } else {
            cmd.arg(&v);
        }
        let _: () = cmd.query_async(conn).await.expect("load");
        let ttl = k["pttl"].as_i64().unwrap_or(-1);
        if ttl > 0 {
            let _: () = redis::cmd("PEXPIRE")
                .arg(&key)
                .arg(ttl)
                .query_async(conn)
                .await
                .expect("ttl");
        }
        if let Some(id) = key.strip_prefix(&format!("{prefix}job:")) {
            jobs.insert(
                id.to_string(),
                v.chunks(2).map(|c| (c[0].clone(), c[1].clone())).collect(),
            );
        }
    }
    jobs
}

#[tokio::test]
async fn a_v1_keyspace_is_upgraded_and_every_job_survives() {
    upgrade_from(FIXTURE_V1, "1").await;
}

#[tokio::test]
async fn a_v2_keyspace_is_upgraded_and_every_job_survives() {
    upgrade_from(FIXTURE_V2, "2").await;
}

/// Whether each job key holds a v3 record: its cold fields packed apart (a `cold` field), none of them
/// (the envelope `doc` for one) left in the outer map.
const IS_V3: &str = "local out = {} for i, k in ipairs(KEYS) do local f = cmsgpack.unpack(redis.call('GET', k)) \
    out[i] = (f.cold ~= nil and f.doc == nil) and 1 or 0 end return out";

/// Loads the fixture at `path` (a keyspace of schema `version`), starts this server on it and checks
/// that every job survived the upgrade, as stored and as the API serves it.
async fn upgrade_from(path: &str, version: &str) {
    let ns = ojs_testkit::unique_namespace();
    let url = ojs_testkit::redis_url_for(&ns);
    let mut conn = redis::Client::open(url.as_str())
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("redis");
    let prefix = format!("ojs:{{{ns}}}:");
    let old = load_fixture(&mut conn, &prefix, path).await;
    assert!(old.len() >= 15, "the fixture holds jobs in every state: {}", old.len());
    let schema: String = redis::cmd("GET")
        .arg(format!("{prefix}schema"))
        .query_async(&mut conn)
        .await
        .expect("schema");
    assert_eq!(schema, version);

    let s = TestServer::start_with(|c| c.namespace = ns.clone()).await;
    // The upgrade runs in the background at start; the schema version says when it is done.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v: Option<String> = redis::cmd("GET")
            .arg(s.keys().schema())
            .query_async(&mut conn)
            .await
            .expect("schema");
        if v.as_deref() == Some(ojs_store::SCHEMA_VERSION.to_string().as_str()) {
            break;
        }
        assert!(Instant::now() < deadline, "the keyspace was not upgraded: schema {v:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Every job is a v3 record now, with every field it had (the invariant checker also checks the type).
    let mut names: Vec<&str> = old.values().flat_map(|f| f.keys().map(String::as_str)).collect();
    names.sort_unstable();
    names.dedup();
    let ids: Vec<String> = old.keys().cloned().collect();
    let keys: Vec<String> = ids.iter().map(|id| s.keys().job(id)).collect();
    let is_v3_script = redis::Script::new(IS_V3);
    let mut is_v3 = is_v3_script.prepare_invoke();
    for k in &keys {
        is_v3.key(k);
    }
    let v3: Vec<i64> = is_v3.invoke_async(&mut conn).await.expect("v3 check");
    assert_eq!(v3, vec![1; keys.len()], "every job record has its cold fields apart");
    let rows = ojs_testkit::job_fields(&mut conn, &keys, &names).await;
    for (id, row) in ids.iter().zip(rows) {
        for (name, got) in names.iter().zip(row) {
            assert_eq!(got.as_ref(), old[id].get(*name), "job {id} field {name}");
        }
        let ttl: i64 = redis::cmd("PTTL")
            .arg(s.keys().job(id))
            .query_async(&mut conn)
            .await
            .expect("pttl");
        if old[id]["state"] == "completed" {
            assert!(ttl > 0, "a completed job keeps its retention TTL: {ttl}");
        }
    }
    s.assert_invariants().await;

    let by_type = |t: &str| -> String {
        old.iter()
            .filter(|(_, f)| f["type"] == t)
            .map(|(id, _)| id.clone())
            .next()
            .unwrap_or_else(|| panic!("fixture job {t}"))
    };
    // GET shows each job as before.
    let (st, b) = s.get(&format!("/ojs/v1/jobs/{}", by_type("w.completed"))).await;
    assert_eq!(
        (st, b["job"]["state"].as_str(), &b["job"]["result"]),
        (200, Some("completed"), &json!({"sent": 3})),
        "{b}"
    );
    // The waiting jobs come out by priority, FIFO within one, as they were enqueued under old.
    let got: Vec<(i64, i64)> = s
        .fetch(&["mail"], 10)
        .await
        .iter()
        .map(|j| {
            (
                j["priority"].as_i64().unwrap_or(-1),
                j["args"][1].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    assert_eq!(got, [(0, 2), (0, 5), (2, 1), (2, 3), (5, 0), (5, 4)]);
    // The key's concurrency of 1 still holds across the upgrade.
    assert_eq!(
        s.fetch(&["api"], 10).await.len(),
        1,
        "rate-limit key partner-a: one at a time"
    );
    // The job claimed under old is acknowledged under v2; the dead-lettered one is retried.
    assert_eq!(s.ack(&by_type("w.active")).await.0, 200);
    let (st, b) = s.get("/ojs/v1/dead-letter").await;
    assert_eq!(
        (st, b["jobs"][0]["id"].as_str()),
        (200, Some(by_type("w.dead").as_str())),
        "{b}"
    );
    // The chain goes on: its first step, acked, releases the second.
    let first = s.fetch(&["etl"], 1).await;
    assert_eq!(first[0]["type"], "etl.extract");
    assert_eq!(s.ack(first[0]["id"].as_str().unwrap_or_default()).await.0, 200);
    let second = s.fetch(&["etl"], 1).await;
    assert_eq!(second.first().map(|j| j["type"].clone()), Some(json!("etl.load")));
    s.assert_invariants().await;
}
