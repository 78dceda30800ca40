//! The OpenAPI document is a contract: a realistic session against a real server (enqueue, batch,
//! fetch, heartbeat, ack, nack, get, cancel, priority, queues, rate limits, events, progress, worker
//! health, the admin API, dead letter, cron, history, health, readiness, manifest, metrics, and the
//! error cases), where every answer must be a status the document lists for its operation (or its
//! `default`), with a body that validates against the JSON Schema (2020-12) the document gives for
//! that status and media type, and with no property the schema does not name (unless the schema
//! allows others, as the job does for the client's own fields). Every operation of the document must
//! be called at least once (or be listed in [`NOT_CALLED`] with the reason).

use std::collections::BTreeSet;

use ojs_testkit::TestServer;
use reqwest::Method;
use serde_json::{json, Value};

/// The session's checker: the server, its document, and what went wrong so far.
struct Contract {
    s: TestServer,
    doc: Value,
    failures: Vec<String>,
    /// (method, path template, status) validated against a schema.
    covered: BTreeSet<(String, String, u16)>,
    /// (method, path template) answered with a documented status.
    called: BTreeSet<(String, String)>,
}

/// Operations the session does not call, each with its reason. Empty: every operation is called.
const NOT_CALLED: &[(&str, &str, &str)] = &[];

impl Contract {
    async fn start() -> Self {
        let s = TestServer::start().await;
        let (st, doc) = s.get("/ojs/v1/openapi.json").await;
        assert_eq!(st, 200);
        Self {
            s,
            doc,
            failures: Vec::new(),
            covered: BTreeSet::new(),
            called: BTreeSet::new(),
        }
    }

    /// Sends `method` to `template` with its `{…}` parameters replaced in order by `args`, checks the
    /// answer against the document, and returns it.
    async fn call(&mut self, method: Method, template: &str, args: &[&str], body: Option<Value>) -> (u16, Value) {
        let mut path = template.to_string();
        for a in args {
            let (Some(open), Some(close)) = (path.find('{'), path.find('}')) else {
                panic!("{template} has fewer parameters than {args:?}")
            };
            path.replace_range(open..=close, a);
        }
        let mut req = self.s.http.request(method.clone(), self.s.url(&path));
        if let Some(b) = body {
            req = req.json(&b);
        }
        self.answer(method, template, &path, req).await
    }

    /// [`expect`] for a request acting as `tenant` (`X-OJS-Tenant`).
    async fn expect_as(
        &mut self,
        tenant: &str,
        status: u16,
        method: Method,
        template: &str,
        body: Option<Value>,
    ) -> Value {
        let mut req = self
            .s
            .http
            .request(method.clone(), self.s.url(template))
            .header("X-OJS-Tenant", tenant);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let (st, b) = self.answer(method.clone(), template, template, req).await;
        assert_eq!(st, status, "{method} {template} as {tenant}: {b}");
        b
    }

    /// [`call`], asserting the status.
    async fn expect(
        &mut self,
        status: u16,
        method: Method,
        template: &str,
        args: &[&str],
        body: Option<Value>,
    ) -> Value {
        let (st, b) = self.call(method.clone(), template, args, body).await;
        assert_eq!(st, status, "{method} {template} {args:?}: {b}");
        b
    }

    /// Like [`call`] with a raw body and content type (malformed requests).
    async fn call_raw(&mut self, method: Method, template: &str, content_type: &str, body: &str) -> (u16, Value) {
        let req = self
            .s
            .http
            .request(method.clone(), self.s.url(template))
            .header("content-type", content_type)
            .body(body.to_string());
        self.answer(method, template, template, req).await
    }

    async fn answer(
        &mut self,
        method: Method,
        template: &str,
        path: &str,
        req: reqwest::RequestBuilder,
    ) -> (u16, Value) {
        let template = template.split('?').next().unwrap_or(template);
        let r = req.send().await.expect("send");
        let status = r.status().as_u16();
        let media = r
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_string();
        let text = r.text().await.unwrap_or_default();
        // A JSON answer is checked as the JSON it holds; any other (the Prometheus text) as a string.
        let body: Value = if media.ends_with("json") {
            serde_json::from_str(&text).unwrap_or(Value::Null)
        } else {
            Value::String(text.clone())
        };
        let what = format!("{method} {path} -> {status}");
        match self.check(&method, template, status, &media, &body) {
            Ok(validated) => {
                self.called.insert((method.to_string(), template.to_string()));
                if validated {
                    self.covered.insert((method.to_string(), template.to_string(), status));
                }
            }
            Err(e) => self.failures.push(format!("{what}: {e}\n  body: {text}")),
        }
        (status, body)
    }

    /// Ok(true) when the body was validated, Ok(false) when the document gives no schema for it.
    fn check(&self, method: &Method, template: &str, status: u16, media: &str, body: &Value) -> Result<bool, String> {
        let op = &self.doc["paths"][template][method.as_str().to_lowercase()];
        if !op.is_object() {
            return Err(format!("{method} {template} is not in the document"));
        }
        let responses = &op["responses"];
        let response = match responses.get(status.to_string()).or(responses.get("default")) {
            Some(r) => r,
            None => return Err(format!("status {status} is not documented (nor a default)")),
        };
        let Some(content) = response.get("content").and_then(Value::as_object) else {
            return Ok(false);
        };
        let Some(schema) = content.get(media).and_then(|c| c.get("schema")) else {
            return Err(format!(
                "answered {media:?}; the document lists {:?}",
                content.keys().collect::<Vec<_>>()
            ));
        };
        let mut root = schema.clone();
        let Some(obj) = root.as_object_mut() else {
            return Err(format!("schema is not an object: {schema}"));
        };
        // The document's `$ref`s point into #/components; give the schema the same components.
        obj.insert("components".into(), self.doc["components"].clone());
        let validator = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .should_validate_formats(true)
            .build(&root)
            .map_err(|e| format!("the document's schema does not compile: {e}"))?;
        let errors: Vec<String> = validator
            .iter_errors(body)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        if !errors.is_empty() {
            return Err(format!("does not match its schema: {}", errors.join("; ")));
        }
        let mut extra = Vec::new();
        undocumented(&self.doc, &[schema], body, "", &mut extra);
        if !extra.is_empty() {
            return Err(format!("fields the schema does not name: {}", extra.join(", ")));
        }
        Ok(true)
    }

    fn finish(mut self, expect_at_least: usize) {
        for (m, p, s) in &self.covered {
            eprintln!("validated: {m} {p} {s}");
        }
        let mut operations = BTreeSet::new();
        for (path, item) in self.doc["paths"].as_object().into_iter().flatten() {
            for (method, _) in item.as_object().into_iter().flatten() {
                if ["get", "put", "post", "delete", "patch"].contains(&method.as_str()) {
                    operations.insert((method.to_uppercase(), path.clone()));
                }
            }
        }
        for op in &operations {
            let skipped = NOT_CALLED
                .iter()
                .any(|(m, p, _)| (*m, *p) == (op.0.as_str(), op.1.as_str()));
            if !skipped && !self.called.contains(op) {
                self.failures.push(format!(
                    "{} {} is in the document but the session never calls it",
                    op.0, op.1
                ));
            }
        }
        for (m, p, why) in NOT_CALLED {
            let op = (m.to_string(), p.to_string());
            if !operations.contains(&op) || self.called.contains(&op) {
                self.failures.push(format!(
                    "NOT_CALLED lists {m} {p} ({why}), which is not in the document or is called"
                ));
            }
        }
        assert!(
            self.failures.is_empty(),
            "{} answers break the OpenAPI document:\n{}",
            self.failures.len(),
            self.failures.join("\n")
        );
        assert!(
            self.covered.len() >= expect_at_least,
            "only {} (operation, status) pairs validated",
            self.covered.len()
        );
    }
}

/// The schemas `schema` stands for once `$ref`s are followed and `allOf`/`oneOf`/`anyOf` opened.
fn leaves<'a>(doc: &'a Value, schema: &'a Value, out: &mut Vec<&'a Value>) {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let target = r
            .strip_prefix('#')
            .and_then(|p| doc.pointer(p))
            .unwrap_or_else(|| panic!("unresolved $ref {r}"));
        leaves(doc, target, out);
    }
    for k in ["allOf", "oneOf", "anyOf"] {
        for s in schema.get(k).and_then(Value::as_array).into_iter().flatten() {
            leaves(doc, s, out);
        }
    }
    out.push(schema);
}

/// Properties of `inst` that none of `schemas` names, where none of them allows others. Loose by
/// design (the union of every branch); the JSON Schema validation above is the strict part.
fn undocumented(doc: &Value, schemas: &[&Value], inst: &Value, at: &str, out: &mut Vec<String>) {
    let mut all = Vec::new();
    for s in schemas {
        leaves(doc, s, &mut all);
    }
    match inst {
        Value::Object(m) => {
            let open = all.iter().any(|s| {
                let extra = s.get("additionalProperties");
                let object_ish = s.get("properties").is_none()
                    && ["allOf", "oneOf", "anyOf", "$ref", "enum"]
                        .iter()
                        .all(|k| s.get(k).is_none())
                    && match s.get("type") {
                        None => true,
                        Some(Value::String(t)) => t == "object",
                        Some(Value::Array(ts)) => ts.iter().any(|t| t == "object"),
                        _ => false,
                    };
                object_ish || extra.is_some_and(|e| *e != Value::Bool(false))
            });
            for (k, v) in m {
                let children: Vec<&Value> = all.iter().filter_map(|s| s.get("properties")?.get(k)).collect();
                if children.is_empty() {
                    if !open {
                        out.push(format!("{at}/{k}"));
                    }
                } else {
                    undocumented(doc, &children, v, &format!("{at}/{k}"), out);
                }
            }
        }
        Value::Array(items) => {
            let children: Vec<&Value> = all.iter().filter_map(|s| s.get("items")).collect();
            if !children.is_empty() {
                for (i, v) in items.iter().enumerate() {
                    undocumented(doc, &children, v, &format!("{at}/{i}"), out);
                }
            }
        }
        _ => {}
    }
}

const JOBS: &str = "/ojs/v1/jobs";
const JOB: &str = "/ojs/v1/jobs/{id}";
const FETCH: &str = "/ojs/v1/workers/fetch";
const ACK: &str = "/ojs/v1/workers/ack";
const NACK: &str = "/ojs/v1/workers/nack";
const HEARTBEAT: &str = "/ojs/v1/workers/heartbeat";
const MISSING: &str = "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f";

#[tokio::test]
async fn every_answer_of_a_realistic_session_matches_the_openapi_document() {
    let mut c = Contract::start().await;
    let q = "contract";
    let future = "2099-01-01T00:00:00Z";

    // Producers: one job, the error cases, a batch.
    let (st, b) = c
        .call(
            Method::POST,
            JOBS,
            &[],
            Some(
                json!({"type": "email.send", "args": ["a@example.com"], "queue": q, "priority": 1,
                "meta": {"trace_id": "t1"}, "x_ext": {"n": 1},
                "options": {"retry": {"max_attempts": 2, "initial_interval": "PT1S"}}}),
            ),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let first = b["job"]["id"].as_str().expect("id").to_string();
    let (st, b) = c
        .call(
            Method::POST,
            JOBS,
            &[],
            Some(json!({"type": "report.build", "args": [], "queue": q, "scheduled_at": future})),
        )
        .await;
    assert_eq!(st, 201);
    let scheduled = b["job"]["id"].as_str().expect("id").to_string();
    let (st, b) = c
        .call(
            Method::POST,
            JOBS,
            &[],
            Some(json!({"type": "api.call", "args": [1], "queue": "contract-rl",
                "rate_limit": {"key": "contract-key", "concurrency": 1, "rate": {"limit": 5, "period": "PT1M"}}})),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let limited = b["job"]["id"].as_str().expect("id").to_string();
    // Found by scripts/schemathesis: a client's `"scheduled_at": null` is echoed as such.
    let b = c
        .expect(
            201,
            Method::POST,
            JOBS,
            &[],
            Some(json!({"type": "a", "args": [], "queue": "contract-null", "scheduled_at": null, "meta": null})),
        )
        .await;
    assert_eq!(b["job"]["scheduled_at"], Value::Null, "{b}");
    c.expect(400, Method::POST, JOBS, &[], Some(json!({"args": []}))).await;
    c.expect(
        409,
        Method::POST,
        JOBS,
        &[],
        Some(json!({"id": first, "type": "a", "args": []})),
    )
    .await;
    c.expect(
        422,
        Method::POST,
        JOBS,
        &[],
        Some(json!({"type": "a", "args": [], "options": {"retry": {"max_attempts": 0}}})),
    )
    .await;
    let (st, _) = c.call_raw(Method::POST, JOBS, "application/json", "{not json").await;
    assert_eq!(st, 400);
    let (st, _) = c.call_raw(Method::POST, JOBS, "text/plain", "{}").await;
    assert_eq!(st, 415, "documented by the default response");
    let batch = "/ojs/v1/jobs/batch";
    let jobs: Vec<Value> = (0..4)
        .map(|i| json!({"type": "batch.item", "args": [i], "queue": q}))
        .collect();
    let (st, b) = c.call(Method::POST, batch, &[], Some(json!({ "jobs": jobs }))).await;
    assert_eq!((st, b["count"].as_u64()), (201, Some(4)), "{b}");
    c.expect(400, Method::POST, batch, &[], Some(json!({"jobs": []}))).await;
    c.expect(
        400,
        Method::POST,
        batch,
        &[],
        Some(json!({"jobs": [{"type": "a", "args": []}, {"args": []}]})),
    )
    .await;

    // Reading and changing jobs.
    c.expect(200, Method::GET, JOB, &[&first], None).await;
    c.expect(404, Method::GET, JOB, &[MISSING], None).await;
    c.expect(404, Method::GET, JOB, &["not-an-id"], None).await;
    c.expect(200, Method::GET, "/ojs/v1/admin/jobs/{id}", &[&first], None)
        .await;
    // Why a job waits: a ready one (nothing holds it, or jobs before it), a scheduled one, a missing one.
    let explain = "/ojs/v1/jobs/{id}/explain";
    c.expect(200, Method::GET, explain, &[&first], None).await;
    let b = c.expect(200, Method::GET, explain, &[&scheduled], None).await;
    assert_eq!(b["gates"][0]["gate"], "scheduled", "{b}");
    c.expect(404, Method::GET, explain, &[MISSING], None).await;
    c.expect(404, Method::GET, "/ojs/v1/admin/jobs/{id}", &[MISSING], None)
        .await;
    let (st, b) = c
        .call(Method::PATCH, JOB, &[&first], Some(json!({"priority": 0})))
        .await;
    assert_eq!(st, 200, "{b}");
    c.expect(400, Method::PATCH, JOB, &[&first], Some(json!({}))).await;
    c.expect(404, Method::PATCH, JOB, &[MISSING], Some(json!({"priority": 1})))
        .await;

    // Workers: fetch, heartbeat, ack (with ack-and-fetch-next), nack.
    let (st, b) = c
        .call(
            Method::POST,
            FETCH,
            &[],
            Some(json!({"queues": [q], "count": 3, "worker_id": "w-1"})),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    let claimed = b["jobs"].as_array().cloned().unwrap_or_default();
    assert_eq!(claimed.len(), 3, "{b}");
    let id = |j: &Value| j["id"].as_str().unwrap_or_default().to_string();
    let lease = |j: &Value| j["lease_id"].as_str().unwrap_or_default().to_string();
    c.expect(
        200,
        Method::POST,
        FETCH,
        &[],
        Some(json!({"queues": [{"name": "contract-empty", "weight": 2}], "strategy": "weighted"})),
    )
    .await;
    c.expect(400, Method::POST, FETCH, &[], Some(json!({"count": 0}))).await;
    let (st, b) = c
        .call(
            Method::POST,
            HEARTBEAT,
            &[],
            Some(json!({"worker_id": "w-1", "active_jobs": [
                {"job_id": id(&claimed[0]), "lease_id": lease(&claimed[0])}, id(&claimed[1]), MISSING]})),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    c.expect(
        200,
        Method::POST,
        HEARTBEAT,
        &[],
        Some(json!({"active_jobs": 2, "active_job_ids": [id(&claimed[2])]})),
    )
    .await;
    c.expect(
        400,
        Method::POST,
        HEARTBEAT,
        &[],
        Some(json!({"visibility_timeout_ms": 0})),
    )
    .await;
    // Found by scripts/schemathesis: a lease this long ended past year 9999, answered as "".
    let forever = json!({"job_id": id(&claimed[0]), "visibility_timeout_ms": 92_233_720_368_547_759_u64});
    c.expect(400, Method::POST, HEARTBEAT, &[], Some(forever.clone())).await;
    c.expect(400, Method::POST, FETCH, &[], Some(forever)).await;
    let (st, b) = c
        .call(
            Method::POST,
            ACK,
            &[],
            Some(json!({"job_id": id(&claimed[0]), "lease_id": lease(&claimed[0]), "result": {"sent": true}})),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    c.expect(409, Method::POST, ACK, &[], Some(json!({"job_id": id(&claimed[0])})))
        .await;
    c.expect(404, Method::POST, ACK, &[], Some(json!({"job_id": MISSING})))
        .await;
    c.expect(400, Method::POST, ACK, &[], Some(json!({"job_id": 5}))).await;
    let (st, b) = c
        .call(
            Method::POST,
            ACK,
            &[],
            Some(json!({"job_id": id(&claimed[1]), "fetch": {"queues": [q], "count": 1, "worker_id": "w-1"}})),
        )
        .await;
    assert_eq!((st, b["jobs"].as_array().map(Vec::len)), (200, Some(1)), "{b}");
    let next = b["jobs"][0].clone();
    let (st, b) = c
        .call(
            Method::POST,
            NACK,
            &[],
            Some(
                json!({"job_id": id(&claimed[2]), "error": {"code": "smtp", "message": "timeout", "retryable": true}}),
            ),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    let (st, b) = c
        .call(
            Method::POST,
            NACK,
            &[],
            Some(json!({"job_id": id(&next), "error": {"type": "Auth.Denied", "message": "no", "retryable": false}})),
        )
        .await;
    assert_eq!((st, b["state"].as_str()), (200, Some("discarded")), "{b}");
    c.expect(
        409,
        Method::POST,
        NACK,
        &[],
        Some(json!({"job_id": id(&next), "error": "again"})),
    )
    .await;
    c.expect(
        404,
        Method::POST,
        NACK,
        &[],
        Some(json!({"job_id": MISSING, "error": "x"})),
    )
    .await;
    let (st, _) = c.call(Method::GET, JOB, &[&id(&claimed[2])], None).await;
    assert_eq!(st, 200, "a retryable job with its error history");
    c.expect(
        200,
        Method::POST,
        "/ojs/v1/workers/{worker_id}/signal",
        &["w-1"],
        Some(json!({"signal": "quiet"})),
    )
    .await;
    let (st, b) = c
        .call(Method::POST, HEARTBEAT, &[], Some(json!({"worker_id": "w-1"})))
        .await;
    assert_eq!((st, b["state"].as_str()), (200, Some("quiet")));
    c.expect(
        400,
        Method::POST,
        "/ojs/v1/workers/{worker_id}/signal",
        &["w-1"],
        Some(json!({"signal": "nap"})),
    )
    .await;

    // Cancel: a scheduled job, then again, then unknown; the priority of a cancelled job.
    let (st, b) = c.call(Method::DELETE, JOB, &[&scheduled], None).await;
    assert_eq!((st, b["job"]["state"].as_str()), (200, Some("cancelled")), "{b}");
    c.expect(409, Method::DELETE, JOB, &[&scheduled], None).await;
    c.expect(404, Method::DELETE, JOB, &[MISSING], None).await;
    c.expect(409, Method::PATCH, JOB, &[&scheduled], Some(json!({"priority": 3})))
        .await;

    // Queues.
    c.expect(200, Method::GET, "/ojs/v1/queues", &[], None).await;
    let stats = "/ojs/v1/queues/{queue}/stats";
    c.expect(200, Method::GET, stats, &[q], None).await;
    c.expect(400, Method::GET, stats, &["Bad Queue"], None).await;
    c.expect(200, Method::GET, "/ojs/v1/queues/{queue}/priority-stats", &[q], None)
        .await;
    c.expect(200, Method::GET, "/ojs/v1/queues/{queue}", &[q], None).await;
    c.expect(400, Method::GET, "/ojs/v1/queues/{queue}", &["Bad Queue"], None)
        .await;

    // Tenants.
    let tenant = "/ojs/v1/admin/tenants/{id}";
    c.expect(
        200,
        Method::PUT,
        tenant,
        &["contract-t"],
        Some(json!({"fairness_weight": 3})),
    )
    .await;
    c.expect(
        400,
        Method::PUT,
        tenant,
        &["contract-t"],
        Some(json!({"fairness_weight": 0})),
    )
    .await;
    c.expect(400, Method::PUT, tenant, &["bad tenant"], Some(json!({})))
        .await;
    c.expect(200, Method::GET, tenant, &["contract-t"], None).await;
    c.expect(200, Method::GET, "/ojs/v1/admin/tenants", &[], None).await;
    c.expect(400, Method::GET, "/ojs/v1/admin/tenants?limit=5000", &[], None)
        .await;
    c.expect(
        200,
        Method::GET,
        "/ojs/v1/admin/tenants/{id}/stats",
        &["contract-t"],
        None,
    )
    .await;
    let tenancy = "/ojs/v1/admin/queues/{queue}/tenancy";
    c.expect(200, Method::GET, tenancy, &["contract-tenancy"], None).await;
    c.expect(
        200,
        Method::PUT,
        tenancy,
        &["contract-tenancy"],
        Some(json!({"source": "meta", "field": "customer", "weights": {"acme": 3}, "default_weight": 2})),
    )
    .await;
    c.expect(200, Method::GET, tenancy, &["contract-tenancy"], None).await;
    c.expect(
        400,
        Method::PUT,
        tenancy,
        &["contract-tenancy"],
        Some(json!({"source": "rate_limit_key", "separator": "/"})),
    )
    .await;
    c.expect(400, Method::GET, tenancy, &["Bad Queue"], None).await;
    c.expect(200, Method::DELETE, tenancy, &["contract-tenancy"], None)
        .await;
    c.expect(200, Method::POST, "/ojs/v1/queues/{queue}/pause", &[q], None)
        .await;
    c.expect(200, Method::POST, "/ojs/v1/queues/{queue}/resume", &[q], None)
        .await;
    let config = "/ojs/v1/admin/queues/{queue}/config";
    let full = "contract-full";
    let (st, b) = c
        .call(
            Method::PUT,
            config,
            &[full],
            Some(json!({"backpressure": {"max_depth": 1, "strategy": "reject"}})),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    c.expect(200, Method::GET, config, &[full], None).await;
    for expect in [201, 429] {
        let (st, b) = c
            .call(
                Method::POST,
                JOBS,
                &[],
                Some(json!({"type": "a", "args": [], "queue": full})),
            )
            .await;
        assert_eq!(st, expect, "{b}");
    }
    let (st, _) = c.call(Method::GET, stats, &[full], None).await;
    assert_eq!(st, 200, "stats with the bound");
    c.expect(
        422,
        Method::PUT,
        config,
        &[full],
        Some(json!({"backpressure": {"max_depth": 1, "strategy": "drop_oldest"}})),
    )
    .await;
    c.expect(400, Method::PUT, config, &[full], Some(json!({"rate": 1})))
        .await;
    c.expect(
        400,
        Method::PUT,
        config,
        &[full],
        Some(json!({"backpressure": {"depth": 1}})),
    )
    .await;
    c.expect(
        422,
        Method::PUT,
        config,
        &[full],
        Some(json!({"backpressure": {"max_depth": 1, "max_size_bytes": 1024}})),
    )
    .await;
    c.expect(200, Method::PUT, config, &[full], Some(json!({"backpressure": null})))
        .await;
    let aging = "/ojs/v1/admin/queues/{queue}/priority-aging";
    c.expect(200, Method::PUT, aging, &[q], Some(json!({"interval": "PT1M"})))
        .await;
    c.expect(200, Method::GET, aging, &[q], None).await;
    c.expect(400, Method::PUT, aging, &[q], Some(json!({}))).await;
    c.expect(200, Method::DELETE, aging, &[q], None).await;

    // Rate limits.
    let key = "/ojs/v1/rate-limits/{key}";
    let (st, b) = c.call(Method::GET, key, &["contract-key"], None).await;
    assert_eq!(st, 200, "{b}");
    c.expect(404, Method::GET, key, &["contract-unknown"], None).await;
    let (st, b) = c
        .call(
            Method::PUT,
            key,
            &["contract-key"],
            Some(json!({"concurrency": 0, "throttle": {"limit": 1, "period": "PT1S"}, "expires_at": future})),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    // Held by the override: the explanation's gate-specific members are in its schema too.
    let b = c
        .expect(200, Method::GET, "/ojs/v1/jobs/{id}/explain", &[&limited], None)
        .await;
    assert_eq!(b["gates"][1]["gate"], "override", "{b}");
    c.expect(200, Method::GET, "/ojs/v1/rate-limits", &[], None).await;
    // Found by scripts/schemathesis: the offset of a page this far overflowed (500); the dead-letter
    // list had the same bug.
    let far = "/ojs/v1/rate-limits?page=9223372036854775808&per_page=100";
    c.expect(200, Method::GET, far, &[], None).await;
    let far = "/ojs/v1/dead-letter?offset=9223372036854775807&limit=1000";
    c.expect(200, Method::GET, far, &[], None).await;
    let (st, _) = c.call(Method::GET, "/ojs/v1/rate-limits?page=x", &[], None).await;
    assert_eq!(st, 400, "a query that does not parse");
    c.expect(400, Method::PUT, key, &["contract-key"], Some(json!({})))
        .await;
    c.expect(200, Method::DELETE, key, &["contract-key"], None).await;
    let qlimit = "/ojs/v1/admin/queues/{queue}/rate-limit";
    c.expect(
        200,
        Method::PUT,
        qlimit,
        &[q],
        Some(json!({"concurrency": 2, "rate": {"limit": 10, "period": "PT1M"}})),
    )
    .await;
    c.expect(200, Method::GET, qlimit, &[q], None).await;
    c.expect(400, Method::PUT, qlimit, &[q], Some(json!({}))).await;
    c.expect(200, Method::DELETE, qlimit, &[q], None).await;

    // Events.
    let events = "/ojs/v1/events";
    let (st, b) = c.call(Method::GET, events, &[], None).await;
    assert!(st == 200 && !b["events"].as_array().is_none_or(Vec::is_empty), "{b}");
    let cursor = b["next_cursor"].as_str().unwrap_or("0-0").to_string();
    c.expect(
        200,
        Method::GET,
        &format!("{events}?channel=job:{first}&after=0-0"),
        &[],
        None,
    )
    .await;
    c.expect(200, Method::GET, &format!("{events}?after={cursor}&limit=5"), &[], None)
        .await;
    c.expect(400, Method::GET, &format!("{events}?after=soon"), &[], None)
        .await;
    // Another tenant's job (here one without a tenant) is absent to a request acting as a tenant.
    c.expect_as(
        "contract-t",
        404,
        Method::GET,
        &format!("{events}?job_id={first}"),
        None,
    )
    .await;
    let (st, _) = c.call(Method::GET, &format!("{events}?limit=-1"), &[], None).await;
    assert_eq!(st, 400, "a query that does not parse");
    c.expect(
        400,
        Method::GET,
        "/ojs/v1/queues/{queue}/events/stream",
        &["Bad Queue"],
        None,
    )
    .await;

    // SSE streams: only their refusals (a stream that is accepted never ends).
    c.expect(400, Method::GET, &format!("{events}/stream?channel=nope"), &[], None)
        .await;
    c.expect(
        404,
        Method::GET,
        "/ojs/v1/jobs/{id}/events/stream",
        &["not-an-id"],
        None,
    )
    .await;

    // Progress: an active job's reports (both shapes), a report for a job no longer active, errors.
    let worker = "w-progress";
    let pq = "contract-progress";
    let running = c
        .expect(
            201,
            Method::POST,
            JOBS,
            &[],
            Some(json!({"type": "video.encode", "args": [], "queue": pq})),
        )
        .await["job"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let b = c
        .expect(
            200,
            Method::POST,
            FETCH,
            &[],
            Some(json!({"queues": [pq], "worker_id": worker})),
        )
        .await;
    assert_eq!(b["jobs"][0]["id"], running.as_str(), "{b}");
    let progress = "/ojs/v1/jobs/{id}/progress";
    c.expect(200, Method::GET, progress, &[&running], None).await;
    let b = c
        .expect(
            200,
            Method::PUT,
            progress,
            &[&running],
            Some(json!({"progress": 0.25, "message": "frames", "data": {"frame": 25}, "worker_id": worker})),
        )
        .await;
    assert_eq!(b["accepted"], true, "{b}");
    c.expect(
        200,
        Method::POST,
        "/ojs/v1/workers/progress",
        &[],
        Some(json!({"job_id": running, "percentage": 50})),
    )
    .await;
    c.expect(200, Method::GET, progress, &[&running], None).await;
    c.expect(
        400,
        Method::PUT,
        progress,
        &[&running],
        Some(json!({"progress": "half"})),
    )
    .await;
    c.expect(404, Method::PUT, progress, &[MISSING], Some(json!({"progress": 0.5})))
        .await;
    c.expect(
        409,
        Method::PUT,
        progress,
        &[&running],
        Some(json!({"progress": 0.5, "worker_id": "w-someone-else"})),
    )
    .await;
    c.expect(
        400,
        Method::POST,
        "/ojs/v1/workers/progress",
        &[],
        Some(json!({"job_id": running})),
    )
    .await;
    c.expect(404, Method::GET, progress, &[MISSING], None).await;
    let b = c
        .expect(200, Method::PUT, progress, &[&first], Some(json!({"progress": 0.5})))
        .await;
    assert_eq!(b["accepted"], false, "{b}");

    // The schema registry, and enqueues checked against it; ACK and NACK by the job's own route.
    let one = "/ojs/v1/admin/schemas/{type}/{version}";
    let schema = json!({"schema": {"type": "array", "items": [{"type": "string"}], "minItems": 1}});
    c.expect(
        201,
        Method::PUT,
        one,
        &["contract.versioned", "1"],
        Some(schema.clone()),
    )
    .await;
    c.expect(
        409,
        Method::PUT,
        one,
        &["contract.versioned", "1"],
        Some(schema.clone()),
    )
    .await;
    c.expect(400, Method::PUT, one, &["contract.versioned", "2"], Some(json!({})))
        .await;
    let big = json!({"schema": {"type": "array", "description": "x".repeat(70 * 1024)}});
    c.expect(413, Method::PUT, one, &["contract.versioned", "2"], Some(big))
        .await;
    c.expect(200, Method::GET, one, &["contract.versioned", "1"], None)
        .await;
    c.expect(404, Method::GET, one, &["contract.versioned", "9"], None)
        .await;
    c.expect(400, Method::GET, one, &["contract.versioned", "0"], None)
        .await;
    let latest = "/ojs/v1/admin/schemas/{type}";
    c.expect(200, Method::GET, latest, &["contract.versioned"], None).await;
    c.expect(404, Method::GET, latest, &["contract.unversioned"], None)
        .await;
    c.expect(400, Method::GET, latest, &["Not.A.Type"], None).await;
    c.expect(
        200,
        Method::GET,
        "/ojs/v1/admin/schemas/{type}/versions",
        &["contract.versioned"],
        None,
    )
    .await;
    let vq = "contract-versioned";
    let versioned = |args: Value| json!({"type": "contract.versioned", "version": 1, "args": args, "queue": vq});
    let refused = c
        .expect(400, Method::POST, JOBS, &[], Some(versioned(json!([7]))))
        .await;
    assert_eq!(refused["error"]["details"]["instance_path"], "/0", "{refused}");
    for _ in 0..2 {
        c.expect(201, Method::POST, JOBS, &[], Some(versioned(json!(["ok"]))))
            .await;
    }
    let b = c
        .expect(200, Method::POST, FETCH, &[], Some(json!({"queues": [vq], "count": 2})))
        .await;
    let ids: Vec<String> = b["jobs"]
        .as_array()
        .map(|j| j.iter().filter_map(|j| j["id"].as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    assert_eq!(ids.len(), 2, "{b}");
    let (ack, nack) = ("/ojs/v1/jobs/{id}/ack", "/ojs/v1/jobs/{id}/nack");
    c.expect(
        200,
        Method::POST,
        ack,
        &[&ids[0]],
        Some(json!({"result": {"done": true}})),
    )
    .await;
    c.expect(409, Method::POST, ack, &[&ids[0]], Some(json!({}))).await;
    c.expect(404, Method::POST, ack, &[MISSING], Some(json!({}))).await;
    c.expect(400, Method::POST, ack, &[&ids[1]], Some(json!({"cost_used": -1})))
        .await;
    c.expect(
        200,
        Method::POST,
        nack,
        &[&ids[1]],
        Some(json!({"error": {"message": "boom"}})),
    )
    .await;
    c.expect(409, Method::POST, nack, &[&ids[1]], Some(json!({"error": "again"})))
        .await;
    c.expect(404, Method::POST, nack, &[MISSING], Some(json!({"error": "x"})))
        .await;
    c.expect(400, Method::POST, nack, &[&ids[0]], Some(json!({"error": 5})))
        .await;
    c.expect(200, Method::DELETE, one, &["contract.versioned", "1"], None)
        .await;
    c.expect(404, Method::DELETE, one, &["contract.versioned", "1"], None)
        .await;

    // Checkpoints: the extension's and the SDKs' shapes, and their refusals.
    let cp = "/ojs/v1/jobs/{id}/checkpoint";
    let sdk = "/ojs/v1/checkpoints/{id}";
    c.expect(404, Method::GET, cp, &[&running], None).await;
    c.expect(200, Method::GET, "/ojs/v1/checkpoints/{id}/resume", &[&running], None)
        .await;
    c.expect(200, Method::PUT, cp, &[&running], Some(json!({"state": {"frame": 25}})))
        .await;
    c.expect(
        200,
        Method::POST,
        cp,
        &[&running],
        Some(json!({"state": {"frame": 26}, "worker_id": worker})),
    )
    .await;
    c.expect(200, Method::GET, cp, &[&running], None).await;
    c.expect(
        200,
        Method::POST,
        sdk,
        &[&running],
        Some(json!({"state": {}, "step_index": 1, "metadata": {"_replay_log": "[]"}})),
    )
    .await;
    c.expect(200, Method::PUT, sdk, &[&running], Some(json!({"state": 1})))
        .await;
    c.expect(200, Method::GET, sdk, &[&running], None).await;
    c.expect(200, Method::GET, "/ojs/v1/checkpoints/{id}/resume", &[&running], None)
        .await;
    c.expect(400, Method::PUT, cp, &[&running], Some(json!({"step_index": 1})))
        .await;
    c.expect(
        409,
        Method::POST,
        sdk,
        &[&running],
        Some(json!({"state": 1, "worker_id": "w-someone-else"})),
    )
    .await;
    c.expect(
        413,
        Method::PUT,
        cp,
        &[&running],
        Some(json!({"state": "x".repeat(ojs_core::checkpoint::MAX_STATE_BYTES)})),
    )
    .await;
    c.expect(404, Method::POST, cp, &[MISSING], Some(json!({"state": 1})))
        .await;
    c.expect(404, Method::PUT, sdk, &[MISSING], Some(json!({"state": 1})))
        .await;
    c.expect(404, Method::GET, sdk, &[MISSING], None).await;
    c.expect(404, Method::GET, "/ojs/v1/checkpoints/{id}/resume", &[MISSING], None)
        .await;
    c.expect(200, Method::DELETE, cp, &[&running], None).await;
    c.expect(200, Method::DELETE, sdk, &[&running], None).await;
    c.expect(404, Method::DELETE, cp, &[MISSING], None).await;
    c.expect(404, Method::DELETE, sdk, &[MISSING], None).await;
    c.expect(409, Method::PUT, cp, &[&first], Some(json!({"state": 1})))
        .await;

    // Graceful shutdown: the heartbeat's alias, a worker's health (running, then draining).
    let beat = "/ojs/v1/workers/beat";
    let health = "/ojs/v1/workers/{worker_id}/health";
    c.expect(
        200,
        Method::POST,
        beat,
        &[],
        Some(json!({"worker_id": worker, "state": "running", "active_jobs": [running]})),
    )
    .await;
    c.expect(200, Method::GET, health, &[worker], None).await;
    c.expect(
        400,
        Method::POST,
        beat,
        &[],
        Some(json!({"worker_id": worker, "state": "asleep"})),
    )
    .await;
    c.expect(
        200,
        Method::POST,
        beat,
        &[],
        Some(json!({"worker_id": worker, "state": "draining", "active_jobs": [running]})),
    )
    .await;
    c.expect(503, Method::GET, health, &[worker], None).await;
    c.expect(404, Method::GET, health, &["w-never-seen"], None).await;
    c.expect(400, Method::GET, health, &["w{x}"], None).await;

    // Dead letter: jobs that exhaust their single attempt, under both prefixes.
    let dq = "contract-dead";
    for i in 0..6 {
        c.expect(
            201,
            Method::POST,
            JOBS,
            &[],
            Some(json!({"type": "dead.end", "args": [i], "queue": dq,
                "options": {"retry": {"max_attempts": 1, "on_exhaustion": "dead_letter"}}})),
        )
        .await;
    }
    let b = c
        .expect(200, Method::POST, FETCH, &[], Some(json!({"queues": [dq], "count": 6})))
        .await;
    let dead: Vec<String> = b["jobs"].as_array().into_iter().flatten().map(id).collect();
    assert_eq!(dead.len(), 6, "{b}");
    for d in &dead {
        c.expect(
            200,
            Method::POST,
            NACK,
            &[],
            Some(json!({"job_id": d, "error": {"code": "gone", "message": "no", "retryable": false}})),
        )
        .await;
    }
    for prefix in ["/ojs/v1", "/ojs/v1/admin"] {
        let b = c
            .expect(
                200,
                Method::GET,
                &format!("{prefix}/dead-letter?queue={dq}&per_page=2"),
                &[],
                None,
            )
            .await;
        assert_eq!(b["pagination"]["total"], 6, "{b}");
        c.expect(400, Method::GET, &format!("{prefix}/dead-letter?per_page=0"), &[], None)
            .await;
        c.expect(200, Method::GET, &format!("{prefix}/dead-letter/stats"), &[], None)
            .await;
        let one = format!("{prefix}/dead-letter/{{id}}");
        c.expect(404, Method::GET, &one, &[MISSING], None).await;
        c.expect(404, Method::POST, &format!("{one}/retry"), &[MISSING], None)
            .await;
        c.expect(404, Method::DELETE, &one, &[MISSING], None).await;
    }
    c.expect(200, Method::GET, "/ojs/v1/dead-letter/{id}", &[&dead[0]], None)
        .await;
    c.expect(200, Method::GET, "/ojs/v1/admin/dead-letter/{id}", &[&dead[0]], None)
        .await;
    c.expect(200, Method::POST, "/ojs/v1/dead-letter/{id}/retry", &[&dead[0]], None)
        .await;
    c.expect(
        200,
        Method::POST,
        "/ojs/v1/admin/dead-letter/{id}/retry",
        &[&dead[1]],
        None,
    )
    .await;
    c.expect(200, Method::DELETE, "/ojs/v1/dead-letter/{id}", &[&dead[2]], None)
        .await;
    c.expect(204, Method::DELETE, "/ojs/v1/admin/dead-letter/{id}", &[&dead[3]], None)
        .await;

    // The admin API: stats, queues, workers, jobs, and bulk actions.
    c.expect(200, Method::GET, "/ojs/v1/admin/stats", &[], None).await;
    c.expect(200, Method::GET, "/ojs/v1/admin/queues?per_page=2&page=2", &[], None)
        .await;
    c.expect(400, Method::GET, "/ojs/v1/admin/queues?per_page=x", &[], None)
        .await;
    let aq = "/ojs/v1/admin/queues/{queue}";
    c.expect(200, Method::GET, aq, &[q], None).await;
    c.expect(404, Method::GET, aq, &["contract-never-used"], None).await;
    c.expect(400, Method::GET, aq, &["Bad Queue"], None).await;
    for action in ["pause", "resume"] {
        c.expect(200, Method::POST, &format!("{aq}/{action}"), &[q], None).await;
        c.expect(400, Method::POST, &format!("{aq}/{action}"), &["Bad Queue"], None)
            .await;
    }
    let b = c.expect(200, Method::GET, "/ojs/v1/admin/workers", &[], None).await;
    assert!(b["summary"]["total"].as_u64() >= Some(2), "{b}");
    c.expect(400, Method::GET, "/ojs/v1/admin/workers?page=0", &[], None)
        .await;
    let aw = "/ojs/v1/admin/workers/{worker_id}";
    let b = c.expect(200, Method::GET, aw, &[worker], None).await;
    assert_eq!(b["jobs"][0]["id"], running.as_str(), "{b}");
    c.expect(404, Method::GET, aw, &["w-never-seen"], None).await;
    c.expect(400, Method::GET, aw, &["w{x}"], None).await;
    let ajobs = "/ojs/v1/admin/jobs";
    c.expect(200, Method::GET, ajobs, &[], None).await;
    c.expect(
        200,
        Method::GET,
        &format!("{ajobs}?queue={dq}&state=discarded&type=dead.*"),
        &[],
        None,
    )
    .await;
    c.expect(
        200,
        Method::GET,
        &format!("{ajobs}?state=scheduled&per_page=1"),
        &[],
        None,
    )
    .await;
    c.expect(200, Method::GET, &format!("{ajobs}?state=completed"), &[], None)
        .await;
    let retention = "/ojs/v1/admin/queues/{queue}/retention";
    c.expect(200, Method::GET, retention, &[dq], None).await;
    c.expect(
        200,
        Method::PUT,
        retention,
        &[dq],
        Some(json!({"keep_last": 500, "keep_for": "PT1H"})),
    )
    .await;
    c.expect(400, Method::PUT, retention, &[dq], Some(json!({"keep_last": -1})))
        .await;
    c.expect(200, Method::DELETE, retention, &[dq], None).await;
    c.expect(400, Method::GET, &format!("{ajobs}?sort=id"), &[], None).await;
    let bulk = "/ojs/v1/admin/jobs/bulk";
    let b = c
        .expect(
            200,
            Method::POST,
            &format!("{bulk}/retry"),
            &[],
            Some(json!({"filter": {"queue": dq}, "confirm": true, "limit": 1})),
        )
        .await;
    assert_eq!(
        (b["processed"].as_u64(), b["remaining"].as_u64()),
        (Some(1), Some(1)),
        "{b}"
    );
    c.expect(
        200,
        Method::POST,
        &format!("{bulk}/delete"),
        &[],
        Some(json!({"filter": {"queue": dq, "type": "dead.end"}, "confirm": true})),
    )
    .await;
    c.expect(
        200,
        Method::POST,
        &format!("{bulk}/cancel"),
        &[],
        Some(json!({"filter": {"queue": dq, "state": "available"}, "confirm": true})),
    )
    .await;
    for action in ["retry", "cancel", "delete"] {
        c.expect(
            400,
            Method::POST,
            &format!("{bulk}/{action}"),
            &[],
            Some(json!({"filter": {"queue": dq}})),
        )
        .await;
    }
    c.expect(
        400,
        Method::POST,
        &format!("{bulk}/cancel"),
        &[],
        Some(json!({"filter": {"since": "yesterday"}, "confirm": true})),
    )
    .await;

    // Cron: register, update, list, read, remove, and the refusals.
    let cron = "/ojs/v1/cron";
    let entry = "/ojs/v1/cron/{name}";
    c.expect(
        201,
        Method::POST,
        cron,
        &[],
        Some(
            json!({"name": "contract.daily", "expression": "0 9 * * *", "timezone": "Europe/Paris",
            "description": "a report", "job_template": {"type": "report.build", "args": [], "queue": q}}),
        ),
    )
    .await;
    c.expect(
        200,
        Method::POST,
        cron,
        &[],
        Some(json!({"name": "contract.daily", "cron": "0 10 * * *", "type": "report.build", "enabled": false})),
    )
    .await;
    c.expect(
        400,
        Method::POST,
        cron,
        &[],
        Some(json!({"name": "contract.bad", "expression": "not cron", "job_template": {"type": "t"}})),
    )
    .await;
    c.expect(
        422,
        Method::POST,
        cron,
        &[],
        Some(
            json!({"name": "contract.bad", "expression": "* * * * *", "overlap_policy": "enqueue",
            "job_template": {"type": "t", "rate_limit": {"key": "k", "concurrency": 1}}}),
        ),
    )
    .await;
    let b = c.expect(200, Method::GET, cron, &[], None).await;
    assert_eq!(b["crons"][0]["name"], "contract.daily", "{b}");
    c.expect(400, Method::GET, &format!("{cron}?page=0"), &[], None).await;
    c.expect(200, Method::GET, entry, &["contract.daily"], None).await;
    // A tenant replaces only its own entry (this one has no owner).
    c.expect_as(
        "contract-t",
        409,
        Method::POST,
        cron,
        Some(json!({"name": "contract.daily", "expression": "0 9 * * *", "job_template": {"type": "t"}})),
    )
    .await;
    c.expect(404, Method::GET, entry, &["contract.none"], None).await;
    c.expect(200, Method::DELETE, entry, &["contract.daily"], None).await;
    c.expect(404, Method::DELETE, entry, &["contract.daily"], None).await;

    // Workflows: a chain (created, read, a step run with its result passed on), a batch cancelled, the
    // listing, the refusals; and the seed's form on POST /jobs (a job with a workflow.chain).
    let wfs = "/ojs/v1/workflows";
    let wf = "/ojs/v1/workflows/{id}";
    let b = c
        .expect(
            201,
            Method::POST,
            wfs,
            &[],
            Some(json!({"type": "chain", "name": "contract.chain", "steps": [
                {"type": "wf.one", "args": [], "queue": "contract-wf"}, {"type": "wf.two", "args": [], "queue": "contract-wf"}]})),
        )
        .await;
    let chain = b["workflow"]["id"].as_str().unwrap_or_default().to_string();
    let got = c
        .expect(
            200,
            Method::POST,
            "/ojs/v1/workers/fetch",
            &[],
            Some(json!({"queues": ["contract-wf"], "worker_id": "w-wf"})),
        )
        .await;
    let step = got["jobs"][0]["id"].as_str().unwrap_or_default().to_string();
    c.expect(
        200,
        Method::POST,
        "/ojs/v1/workers/ack",
        &[],
        Some(json!({"job_id": step, "result": {"n": 1}})),
    )
    .await;
    let got = c
        .expect(
            200,
            Method::POST,
            "/ojs/v1/workers/fetch",
            &[],
            Some(json!({"queues": ["contract-wf"], "worker_id": "w-wf"})),
        )
        .await;
    assert_eq!(got["jobs"][0]["parent_results"], json!([{"n": 1}]), "{got}");
    c.expect(200, Method::GET, wf, &[&chain], None).await;
    let b = c
        .expect(
            201,
            Method::POST,
            wfs,
            &[],
            Some(
                json!({"type": "batch", "jobs": [{"type": "wf.part", "args": [], "queue": "contract-wf2"}],
                "callbacks": {"on_success": {"type": "wf.done", "args": [], "queue": "contract-wf2"}}}),
            ),
        )
        .await;
    let batch = b["workflow"]["id"].as_str().unwrap_or_default().to_string();
    c.expect(200, Method::DELETE, wf, &[&batch], None).await;
    c.expect(409, Method::DELETE, wf, &[&batch], None).await;
    c.expect(404, Method::GET, wf, &["0190b6d4-0000-7000-8000-000000000000"], None)
        .await;
    c.expect(404, Method::DELETE, wf, &["not-an-id"], None).await;
    c.expect(400, Method::POST, wfs, &[], Some(json!({"type": "dag", "steps": []})))
        .await;
    c.expect(
        422,
        Method::POST,
        wfs,
        &[],
        Some(json!({"type": "chain", "steps": [{"type": "a", "args": [], "options": {"unique": {"keys": ["type"]}}}]})),
    )
    .await;
    let b = c.expect(200, Method::GET, wfs, &[], None).await;
    assert_eq!(b["workflows"].as_array().map(Vec::len), Some(2), "{b}");
    c.expect(400, Method::GET, &format!("{wfs}?per_page=0"), &[], None)
        .await;
    let b = c
        .expect(
            201,
            Method::POST,
            "/ojs/v1/jobs",
            &[],
            Some(
                json!({"type": "order.process", "args": [], "queue": "contract-wf3", "workflow": {"chain": [
                {"type": "payment.charge", "args": []}]}}),
            ),
        )
        .await;
    assert_eq!(b["workflow"]["steps_total"], 2, "{b}");

    // Worker pools and the scheduling statistics (ojs-fair-scheduling).
    let pools = "/ojs/v1/admin/pools";
    let pool = "/ojs/v1/admin/pools/{name}";
    let pq = "contract-pooled";
    let b = c
        .expect(
            201,
            Method::PUT,
            pool,
            &["contract-pool"],
            Some(
                json!({"queues": [pq, "contract-other"], "strategy": "weighted", "weights": {pq: 3}, "concurrency": 4}),
            ),
        )
        .await;
    assert_eq!(b["pool"]["weights"], json!({pq: 3, "contract-other": 1}), "{b}");
    c.expect(
        200,
        Method::PUT,
        pool,
        &["contract-pool"],
        Some(json!({"queues": [pq]})),
    )
    .await;
    c.expect(
        400,
        Method::PUT,
        pool,
        &["contract-pool"],
        Some(json!({"queues": [pq], "strategy": "least-loaded"})),
    )
    .await;
    let b = c.expect(200, Method::GET, pools, &[], None).await;
    assert_eq!(b["items"][0]["strategy"], "round-robin", "{b}");
    c.expect(200, Method::GET, pool, &["contract-pool"], None).await;
    c.s.enqueue(json!({"type": "contract.pooled", "args": [], "options": {"queue": pq}}))
        .await;
    let b = c
        .expect(
            200,
            Method::POST,
            "/ojs/v1/workers/fetch",
            &[],
            Some(json!({"pool": "contract-pool", "worker_id": "contract-w"})),
        )
        .await;
    assert_eq!(b["jobs"][0]["type"], "contract.pooled", "{b}");
    c.expect(
        404,
        Method::POST,
        "/ojs/v1/workers/fetch",
        &[],
        Some(json!({"pool": "contract-none"})),
    )
    .await;
    let b = c
        .expect(200, Method::GET, "/ojs/v1/admin/scheduling/stats", &[], None)
        .await;
    assert!(b["stats"]["dispatch_count_1m"].as_u64().is_some_and(|n| n >= 1), "{b}");
    c.expect(200, Method::DELETE, pool, &["contract-pool"], None).await;
    c.expect(404, Method::GET, pool, &["contract-pool"], None).await;
    c.expect(404, Method::DELETE, pool, &["contract-pool"], None).await;

    // Webhook subscriptions (ojs-webhooks): create (the only answer with the secret), read, list,
    // change, its deliveries, delete, and the refusals.
    let subs = "/ojs/v1/webhooks/subscriptions";
    let sub = "/ojs/v1/webhooks/subscriptions/{id}";
    let b = c
        .expect(
            201,
            Method::POST,
            subs,
            &[],
            Some(
                json!({"url": "http://127.0.0.1:9/contract", "events": ["job.completed", "workflow.*"],
                "filter": {"queues": ["contract-hooked"]}, "metadata": {"owner": "contract"}}),
            ),
        )
        .await;
    assert!(
        b["subscription"]["secret"]
            .as_str()
            .is_some_and(|s| s.starts_with("whsec_")),
        "{b}"
    );
    let sid = b["subscription"]["id"].as_str().expect("id").to_string();
    let b = c.expect(200, Method::GET, sub, &[&sid], None).await;
    assert!(b["subscription"].get("secret").is_none(), "{b}");
    c.expect(200, Method::GET, subs, &[], None).await;
    c.expect(
        200,
        Method::PATCH,
        sub,
        &[&sid],
        Some(json!({"events": ["*"], "active": false})),
    )
    .await;
    c.expect(400, Method::PATCH, sub, &[&sid], Some(json!({"url": "ftp://x"})))
        .await;
    c.expect(
        400,
        Method::POST,
        subs,
        &[],
        Some(json!({"url": "http://127.0.0.1:9/", "events": ["job.nope"]})),
    )
    .await;
    let b = c
        .expect(
            200,
            Method::GET,
            "/ojs/v1/webhooks/subscriptions/{id}/deliveries",
            &[&sid],
            None,
        )
        .await;
    assert_eq!(b["deliveries"], json!([]), "{b}");
    c.expect(200, Method::DELETE, sub, &[&sid], None).await;
    c.expect(404, Method::GET, sub, &[&sid], None).await;
    c.expect(404, Method::DELETE, sub, &[&sid], None).await;
    c.expect(404, Method::PATCH, sub, &[&sid], Some(json!({"active": true})))
        .await;
    c.expect(
        404,
        Method::GET,
        "/ojs/v1/webhooks/subscriptions/{id}/deliveries",
        &[&sid],
        None,
    )
    .await;
    c.expect(
        400,
        Method::GET,
        "/ojs/v1/webhooks/subscriptions/{id}/deliveries?limit=0",
        &[&sid],
        None,
    )
    .await;

    // History, health, readiness, manifest, metrics.
    let history = "/ojs/v1/admin/stats/history";
    let b = c.expect(200, Method::GET, history, &[], None).await;
    assert!(b["series"]["enqueued"].as_array().is_some_and(|s| s.len() == 60), "{b}");
    c.expect(200, Method::GET, &format!("{history}?minutes=5&queue={dq}"), &[], None)
        .await;
    c.expect(400, Method::GET, &format!("{history}?minutes=0"), &[], None)
        .await;
    for path in [
        "/ojs/v1/health",
        "/health",
        "/ojs/v1/ready",
        "/ready",
        "/ojs/manifest",
        "/metrics",
    ] {
        c.expect(200, Method::GET, path, &[], None).await;
    }

    c.s.assert_invariants().await;
    c.finish(130);
}
