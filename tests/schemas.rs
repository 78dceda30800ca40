//! The schema registry (`/ojs/v1/admin/schemas/{type}/{version}`) and job versioning: registration,
//! reads and removal with their refusals; enqueues (single and batch) checked against the schema of the
//! job's `version` (default: the type's latest); a second pod that cached the registry sees a change at
//! once (the enqueue script checks the copy's stamp); only admin keys may change the registry; the
//! top-level `version` and the codec metadata in `meta` are kept through enqueue, batch, FETCH, ACK,
//! NACK (`POST /jobs/{id}/ack`, `/nack`) and GET.

use ojs_testkit::TestServer;
use reqwest::Method;
use serde_json::{json, Value};

const S: &str = "/ojs/v1/admin/schemas";

/// A schema of args `[email, {template?}]`: a string, then an optional object with a string template.
fn email_schema() -> Value {
    json!({
        "type": "array",
        "items": [
            {"type": "string", "pattern": "@"},
            {"type": "object", "properties": {"template": {"type": "string"}}, "required": ["template"]}
        ],
        "minItems": 1
    })
}

async fn register(s: &TestServer, job_type: &str, version: u32, schema: Value) -> (u16, Value) {
    s.put(&format!("{S}/{job_type}/{version}"), json!({ "schema": schema }))
        .await
}

fn message(b: &Value) -> String {
    b["error"]["message"].as_str().unwrap_or_default().to_string()
}

#[tokio::test]
async fn registry_registers_reads_and_removes_versions() {
    let s = TestServer::start().await;
    let (st, b) = register(&s, "email.send", 1, email_schema()).await;
    assert_eq!(st, 201, "{b}");
    assert_eq!(
        (b["type"].as_str(), b["version"].as_u64()),
        (Some("email.send"), Some(1))
    );
    assert_eq!(b["schema"], email_schema());
    assert!(b["registered_at"].as_str().is_some_and(|t| t.ends_with('Z')), "{b}");

    // A version is never replaced.
    let (st, b) = register(&s, "email.send", 1, json!({"type": "array"})).await;
    assert_eq!((st, b["error"]["code"].as_str()), (409, Some("duplicate")), "{b}");
    let (_, b) = s.get(&format!("{S}/email.send/1")).await;
    assert_eq!(b["schema"], email_schema(), "the first registration stands");

    let (st, _) = register(&s, "email.send", 3, json!({"type": "array", "maxItems": 3})).await;
    assert_eq!(st, 201);
    let (st, b) = s.get(&format!("{S}/email.send")).await;
    assert_eq!((st, b["version"].as_u64()), (200, Some(3)), "latest: {b}");
    let (st, b) = s.get(&format!("{S}/email.send/versions")).await;
    assert_eq!(st, 200);
    let versions: Vec<u64> = b["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .filter_map(|v| v["version"].as_u64())
        .collect();
    assert_eq!((versions, b["latest"].as_u64()), (vec![1, 3], Some(3)));

    // Removing the latest makes the one before it the latest; removing it again is a 404.
    let (st, b) = s.delete(&format!("{S}/email.send/3")).await;
    assert_eq!((st, b["deleted"].as_bool()), (200, Some(true)), "{b}");
    assert_eq!(s.delete(&format!("{S}/email.send/3")).await.0, 404);
    let (_, b) = s.get(&format!("{S}/email.send")).await;
    assert_eq!(b["version"], 1);
    assert_eq!(s.delete(&format!("{S}/email.send/1")).await.0, 200);
    assert_eq!(s.get(&format!("{S}/email.send")).await.0, 404);
    assert_eq!(s.get(&format!("{S}/email.send/1")).await.0, 404);
    let (st, b) = s.get(&format!("{S}/email.send/versions")).await;
    assert_eq!((st, b["versions"].as_array().map(Vec::len)), (200, Some(0)));
    s.assert_invariants().await;
}

#[tokio::test]
async fn registry_refuses_bad_input_with_what_is_wrong() {
    let s = TestServer::start().await;
    for (body, needle) in [
        (json!({}), "schema is required"),
        (json!({"schema": null}), "schema is required"),
        (json!({"schema": {}}), "must not be empty"),
        (json!({"schema": [1]}), "JSON object"),
        (json!({"schema": {"type": "nonsense"}}), "not a valid JSON Schema"),
        (
            json!({"schema": {"type": "array"}, "args_schema": {"type": "array"}}),
            "not both",
        ),
        (json!({"schema": {"type": "array"}, "version": 2}), "not the path's 1"),
        (json!({"schema": {"type": "array"}, "extra": 1}), "extra"),
        (
            json!({"schema": {"$schema": "https://json-schema.org/draft/2020-12/schema", "items": [{"type": "string"}]}}),
            "/items",
        ),
    ] {
        let (st, b) = s.put(&format!("{S}/a.type/1"), body.clone()).await;
        assert_eq!(st, 400, "{body} -> {b}");
        assert!(
            message(&b).contains(needle),
            "{body}: {:?} should name {needle:?}",
            message(&b)
        );
    }
    for path in ["a.type/0", "a.type/x", "a.type/2147483648", "Bad.Type/1"] {
        let (st, b) = s
            .put(&format!("{S}/{path}"), json!({"schema": {"type": "array"}}))
            .await;
        assert_eq!(st, 400, "{path}: {b}");
    }
    let (_, b) = s
        .put(&format!("{S}/a.type/0"), json!({"schema": {"type": "array"}}))
        .await;
    assert!(message(&b).contains("from 1 to 2147483647"), "{b}");

    // Bounds: the size of one schema (413), the versions of one type (400 naming the bound).
    let big = json!({"type": "array", "description": "x".repeat(70 * 1024)});
    let (st, b) = register(&s, "a.type", 1, big).await;
    assert_eq!(
        (st, b["error"]["code"].as_str()),
        (413, Some("payload_too_large")),
        "{b}"
    );
    for v in 1..=100 {
        assert_eq!(register(&s, "many.versions", v, json!({"type": "array"})).await.0, 201);
    }
    let (st, b) = register(&s, "many.versions", 101, json!({"type": "array"})).await;
    assert_eq!(st, 400, "{b}");
    assert!(message(&b).contains("100"), "{b}");
    assert_eq!(
        s.get(&format!("{S}/a.type")).await.0,
        404,
        "nothing refused was written"
    );
}

#[tokio::test]
async fn enqueues_are_checked_against_the_schema_of_their_version() {
    let s = TestServer::start().await;
    // Version 1: one email; version 2: an email and an object with a template.
    register(
        &s,
        "email.send",
        1,
        json!({"type": "array", "items": [{"type": "string"}], "maxItems": 1}),
    )
    .await;
    register(&s, "email.send", 2, email_schema()).await;

    // Without a version: the latest (2).
    let (st, b) = s
        .post(
            "/ojs/v1/jobs",
            json!({"type": "email.send", "args": ["a@x", {"template": "w"}]}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    assert!(b["job"].get("version").is_none(), "the job stays unversioned: {b}");
    let (st, b) = s
        .post("/ojs/v1/jobs", json!({"type": "email.send", "args": ["a@x", {}]}))
        .await;
    assert_eq!(st, 400, "{b}");
    assert!(
        message(&b).contains("args/1") && message(&b).contains("version 2"),
        "{b}"
    );
    assert_eq!(b["error"]["details"]["instance_path"], "/1");
    assert_eq!(b["error"]["details"]["version"], 2);

    // Version 1 named: its own schema.
    let (st, b) = s
        .post(
            "/ojs/v1/jobs",
            json!({"type": "email.send", "version": 1, "args": ["a@x"]}),
        )
        .await;
    assert_eq!((st, b["job"]["version"].as_u64()), (201, Some(1)), "{b}");
    let (st, b) = s
        .post(
            "/ojs/v1/jobs",
            json!({"type": "email.send", "version": 1, "args": ["a@x", {"template": "w"}]}),
        )
        .await;
    assert_eq!(st, 400, "two args are too many for version 1: {b}");
    assert!(message(&b).contains("version 1"), "{b}");
    let (st, b) = s
        .post("/ojs/v1/jobs", json!({"type": "email.send", "version": 1, "args": [5]}))
        .await;
    assert_eq!(
        (st, b["error"]["details"]["instance_path"].as_str()),
        (400, Some("/0")),
        "{b}"
    );

    // A version the type does not have, and versions out of range.
    let (st, b) = s
        .post(
            "/ojs/v1/jobs",
            json!({"type": "email.send", "version": 7, "args": ["a@x"]}),
        )
        .await;
    assert_eq!(st, 400, "{b}");
    assert!(message(&b).contains("registered: 1, 2"), "{b}");
    for bad in [json!(0), json!("2.0"), json!(1.5), json!(-3)] {
        let (st, b) = s
            .post(
                "/ojs/v1/jobs",
                json!({"type": "other.type", "version": bad, "args": []}),
            )
            .await;
        assert_eq!(st, 400, "{b}");
        assert!(message(&b).contains("from 1 to 2147483647"), "{b}");
    }

    // A type without schemas is not checked; any version is kept.
    let (st, b) = s
        .post(
            "/ojs/v1/jobs",
            json!({"type": "other.type", "version": 9, "args": [{"any": 1}]}),
        )
        .await;
    assert_eq!((st, b["job"]["version"].as_u64()), (201, Some(9)), "{b}");

    // A batch is all or nothing: one bad job refuses it, naming its index; nothing is written.
    let (st, b) = s
        .post(
            "/ojs/v1/jobs/batch",
            json!({"jobs": [
                {"type": "email.send", "args": ["b@x", {"template": "t"}], "options": {"queue": "batchq"}},
                {"type": "email.send", "version": 1, "args": [false], "options": {"queue": "batchq"}}
            ]}),
        )
        .await;
    assert_eq!(st, 400, "{b}");
    assert!(message(&b).starts_with("jobs[1]: args/0"), "{b}");
    assert_eq!(b["error"]["details"]["index"], 1);
    let (_, q) = s.get("/ojs/v1/queues/batchq/stats").await;
    assert_eq!(q["stats"]["available"].as_u64().unwrap_or(0), 0, "nothing written: {q}");
    let (st, b) = s
        .post(
            "/ojs/v1/jobs/batch",
            json!({"jobs": [
                {"type": "email.send", "args": ["b@x", {"template": "t"}], "options": {"queue": "batchq"}},
                {"type": "email.send", "version": 1, "args": ["c@x"], "options": {"queue": "batchq"}}
            ]}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    assert_eq!(b["jobs"][1]["version"], 1);
    s.assert_invariants().await;
}

#[tokio::test]
async fn a_pod_that_cached_the_registry_sees_a_change_at_once() {
    a_second_pod_sees_registry_changes(1).await;
}

#[tokio::test]
async fn a_pod_sees_registry_changes_on_every_shard() {
    a_second_pod_sees_registry_changes(3).await;
}

/// Pod b keeps a copy of the registry; pod a changes it; b's next enqueue, on any shard, is checked
/// against the registry as changed.
async fn a_second_pod_sees_registry_changes(shards: u16) {
    let a = TestServer::start_with(|c| c.shards = shards).await;
    let mut cfg = ojs_testkit::base_config();
    cfg.namespace = a.namespace.clone();
    cfg.tick_ms = 20;
    cfg.shards = shards;
    let b = TestServer::start_config(cfg).await;
    // Queues spread over the shards (placed by the hash of their names).
    let queues: Vec<String> = (0..8).map(|i| format!("q{i}")).collect();
    let bad = |q: &str| json!({"type": "email.send", "args": [42], "options": {"queue": q}});
    let each = |expect: u16| {
        let (b, queues) = (&b, &queues);
        async move {
            for q in queues {
                let (st, body) = b.post("/ojs/v1/jobs", bad(q)).await;
                assert_eq!(st, expect, "queue {q}: {body}");
            }
        }
    };

    // Pod b reads the (empty) registry and keeps it.
    each(201).await;
    // Pod a registers a schema: pod b's next enqueue is checked against it, with no wait.
    assert_eq!(register(&a, "email.send", 1, email_schema()).await.0, 201);
    each(400).await;
    let (st, body) = b
        .post("/ojs/v1/jobs/batch", json!({"jobs": [bad("q1"), bad("q2")]}))
        .await;
    assert_eq!(st, 400, "{body}");
    // And a removal likewise.
    assert_eq!(a.delete(&format!("{S}/email.send/1")).await.0, 200);
    each(201).await;
    // A registry wiped behind the pods' back (FLUSHDB, a restore) is seen too.
    assert_eq!(register(&a, "email.send", 1, email_schema()).await.0, 201);
    each(400).await;
    let mut conn = a.redis().await;
    let keys = a.keys();
    let _: () = redis::cmd("DEL")
        .arg(keys.arg_schemas())
        .arg(keys.arg_schema_versions())
        .arg(keys.arg_schemas_stamp())
        .query_async(&mut conn)
        .await
        .expect("del");
    each(201).await;
    a.assert_invariants().await;
}

#[tokio::test]
async fn only_admin_keys_change_the_registry() {
    const ADMIN: &str = "admin-key-0123456789";
    const WORKER: &str = "worker-key-0123456789";
    const ACME: &str = "acme-key-0123456789ab";
    let s = TestServer::start_with(|c| {
        c.api_keys = ojs_server::api_keys::parse_keys(&format!("admin:{ADMIN},worker:{WORKER},worker@acme:{ACME}"))
            .expect("keys");
    })
    .await;
    let call = |key: &'static str, method: Method, path: String, body: Option<Value>| {
        let auth = format!("Bearer {key}");
        let s = &s;
        async move {
            s.send_with(method, &path, &[("Authorization", auth.as_str())], body)
                .await
        }
    };
    let schema = Some(json!({"schema": email_schema()}));
    for key in [ACME, WORKER] {
        let (st, b) = call(key, Method::PUT, format!("{S}/email.send/1"), schema.clone()).await;
        assert_eq!((st, b["error"]["code"].as_str()), (403, Some("forbidden")), "{b}");
        assert_eq!(call(key, Method::GET, format!("{S}/email.send"), None).await.0, 403);
    }
    let (st, _) = call(ADMIN, Method::PUT, format!("{S}/email.send/1"), schema.clone()).await;
    assert_eq!(st, 201);
    for key in [ACME, WORKER] {
        assert_eq!(
            call(key, Method::DELETE, format!("{S}/email.send/1"), None).await.0,
            403
        );
    }
    assert_eq!(
        call(ADMIN, Method::GET, format!("{S}/email.send/1"), None).await.0,
        200,
        "still there"
    );
    // A tenant's enqueue is checked like any other.
    let (st, b) = call(
        ACME,
        Method::POST,
        "/ojs/v1/jobs".into(),
        Some(json!({"type": "email.send", "args": [1]})),
    )
    .await;
    assert_eq!(st, 400, "{b}");
    let ok = json!({"type": "email.send", "args": ["a@x"]});
    assert_eq!(call(ACME, Method::POST, "/ojs/v1/jobs".into(), Some(ok)).await.0, 201);
}

#[tokio::test]
async fn version_and_codec_metadata_are_kept_through_the_lifecycle() {
    let s = TestServer::start().await;
    let meta = json!({
        "ojs.codec.encodings": ["zstd", "binary/encrypted"],
        "ojs.codec.key_id": "key-2026-01",
        "ojs_encoded": true,
        "custom": {"n": 1}
    });
    let (st, b) = s
        .post(
            "/ojs/v1/jobs/batch",
            json!({"jobs": [
                {"type": "enc.job", "version": 3, "args": ["Y2lwaGVy"], "meta": meta, "options": {"queue": "life"}},
                {"type": "enc.job", "version": 4, "args": ["b3RoZXI="], "meta": meta,
                 "options": {"queue": "life", "retry": {"max_attempts": 3, "initial_interval": "PT0.05S"}}}
            ]}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    for (i, v) in [(0, 3), (1, 4)] {
        assert_eq!(
            (b["jobs"][i]["version"].clone(), b["jobs"][i]["meta"].clone()),
            (json!(v), meta.clone())
        );
    }
    let (a, n) = (
        b["jobs"][0]["id"].as_str().expect("id").to_string(),
        b["jobs"][1]["id"].as_str().expect("id").to_string(),
    );
    let jobs = s.fetch(&["life"], 2).await;
    assert_eq!(jobs.len(), 2);
    for j in &jobs {
        assert_eq!(j["meta"], meta, "FETCH: {j}");
        assert!(j["version"] == 3 || j["version"] == 4, "{j}");
    }
    // ACK and NACK by the job's own route.
    let (st, b) = s
        .post(&format!("/ojs/v1/jobs/{a}/ack"), json!({"result": {"ok": true}}))
        .await;
    assert_eq!(
        (st, b["job"]["state"].as_str(), b["state"].as_str()),
        (200, Some("completed"), Some("completed")),
        "{b}"
    );
    assert_eq!(
        (b["job"]["id"].as_str(), b["job"]["type"].as_str()),
        (Some(a.as_str()), Some("enc.job"))
    );
    let (st, b) = s
        .post(
            &format!("/ojs/v1/jobs/{n}/nack"),
            json!({"error": {"code": "boom", "message": "transient"}}),
        )
        .await;
    assert_eq!(
        (st, b["job"]["state"].as_str(), b["job"]["attempt"].as_i64()),
        (200, Some("retryable"), Some(1)),
        "{b}"
    );
    assert_eq!(
        s.post(&format!("/ojs/v1/jobs/{a}/ack"), json!({})).await.0,
        409,
        "acked already"
    );
    for (id, v, state) in [(&a, 3, "completed"), (&n, 4, "retryable")] {
        let (_, b) = s.get(&format!("/ojs/v1/jobs/{id}")).await;
        assert_eq!(
            (b["job"]["state"].as_str(), b["job"]["version"].clone()),
            (Some(state), json!(v)),
            "{b}"
        );
        assert_eq!(b["job"]["meta"], meta, "{b}");
    }
    // The retry keeps both too.
    let j = s.wait_state(&n, "available", std::time::Duration::from_secs(10)).await;
    assert_eq!((j["version"].clone(), j["meta"].clone()), (json!(4), meta.clone()));
    let jobs = s.fetch(&["life"], 1).await;
    assert_eq!((jobs[0]["version"].clone(), jobs[0]["meta"].clone()), (json!(4), meta));
    // The workers' ACK answers with the job too.
    let (st, b) = s.post("/ojs/v1/workers/ack", json!({"job_id": n})).await;
    assert_eq!(
        (st, b["job"]["state"].as_str(), b["job"]["attempt"].as_i64()),
        (200, Some("completed"), Some(2)),
        "{b}"
    );
    // A job without codec metadata gets none.
    let (_, b) = s
        .post("/ojs/v1/jobs", json!({"type": "plain.job", "args": ["p"]}))
        .await;
    assert!(b["job"].get("meta").is_none(), "{b}");
    s.assert_invariants().await;
}

// ---- what the black-box review of the registry found (each failed before its fix) ----

#[tokio::test]
async fn a_pattern_that_needs_backtracking_is_refused_when_registered() {
    // `\1` and lookarounds made an enqueue of a long string take seconds of a core, past the request
    // timeout; patterns now match in linear time (the regex engine), and these cannot compile.
    let s = TestServer::start().await;
    for pattern in [r"^(?:(a)|b)*\1(a+)+$", r"^(?=a)a+$", r"^(?!b)a+$"] {
        let (st, b) = register(
            &s,
            "rx.t",
            1,
            json!({"type": "array", "items": {"type": "string", "pattern": pattern}}),
        )
        .await;
        assert_eq!(st, 400, "{pattern}: {b}");
    }
    // A nested quantifier is fine: linear in the text.
    let (st, _) = register(
        &s,
        "rx.t",
        1,
        json!({"type": "array", "items": {"type": "string", "pattern": "^(a+)+$"}}),
    )
    .await;
    assert_eq!(st, 201);
    let long = format!("{}!", "a".repeat(100_000));
    let (st, b) = s.post("/ojs/v1/jobs", json!({"type": "rx.t", "args": [long]})).await;
    assert_eq!(st, 400, "{}", b["error"]);
}

#[tokio::test]
async fn workflows_and_cron_templates_are_checked_against_the_registry() {
    let s = TestServer::start().await;
    let (st, _) = register(&s, "sh.t", 1, json!({"type": "array", "items": {"type": "integer"}})).await;
    assert_eq!(st, 201);
    for body in [
        json!({"type": "chain", "steps": [{"type": "sh.t", "args": ["x"]}]}),
        json!({"type": "group", "jobs": [{"type": "sh.t", "args": ["x"]}]}),
        json!({"type": "group", "jobs": [{"type": "sh.t", "version": 99, "args": [1]}]}),
    ] {
        let (st, b) = s.post("/ojs/v1/workflows", body.clone()).await;
        assert_eq!(st, 400, "{body}: {b}");
    }
    let (st, b) = s
        .post(
            "/ojs/v1/cron",
            json!({"name": "cr.bad", "expression": "* * * * *", "job_template": {"type": "sh.t", "args": ["x"]}}),
        )
        .await;
    assert_eq!(st, 400, "{b}");
    assert!(message(&b).starts_with("job_template: "), "{b}");
    assert_eq!(s.get("/ojs/v1/cron/cr.bad").await.0, 404, "nothing registered");
    // Valid ones go through.
    let (st, b) = s
        .post(
            "/ojs/v1/workflows",
            json!({"type": "chain", "steps": [{"type": "sh.t", "args": [1]}]}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let (st, b) = s
        .post(
            "/ojs/v1/cron",
            json!({"name": "cr.ok", "expression": "* * * * *", "job_template": {"type": "sh.t", "args": [2]}}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
}
