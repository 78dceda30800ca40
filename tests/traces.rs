//! Traces (ojs-observability §5–§7): the job's W3C trace context reaches the worker at FETCH, from its
//! meta or the enqueue request's `traceparent` header; with `--otlp-endpoint`, the server exports spans
//! for enqueue, claim and completion, checked here against a small OTLP/HTTP receiver.

use ojs_testkit::otlp::{OtlpReceiver, ReceivedSpan};
use ojs_testkit::TestServer;
use reqwest::Method;
use serde_json::{json, Value};

const PARENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN: &str = "00f067aa0ba902b7";
const PRODUCER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const IN_META: &str = "00-11111111111111111111111111111111-2222222222222222-01";

async fn fetch(s: &TestServer, queue: &str, worker: &str) -> Value {
    let (st, b) = s
        .post("/ojs/v1/workers/fetch", json!({"queues": [queue], "worker_id": worker}))
        .await;
    assert_eq!(st, 200, "{b}");
    b["jobs"][0].clone()
}

fn one<'a>(spans: &'a [ReceivedSpan], what: &str, f: impl Fn(&ReceivedSpan) -> bool) -> &'a ReceivedSpan {
    let found: Vec<_> = spans.iter().filter(|s| f(s)).collect();
    assert_eq!(
        found.len(),
        1,
        "{what}: expected one span, got {found:#?}\nall: {spans:#?}"
    );
    found[0]
}

#[tokio::test]
async fn spans_follow_a_job_from_enqueue_through_claim_to_completion_and_failure() {
    let otlp = OtlpReceiver::start().await;
    let url = otlp.url.clone();
    let s = TestServer::start_with(|c| c.otlp_endpoint = Some(url)).await;

    // A job with no context in meta, enqueued by a traced producer (the header).
    let (st, b) = s
        .send_with(
            Method::POST,
            "/ojs/v1/jobs",
            &[("traceparent", PRODUCER)],
            Some(json!({"type": "mail.send", "args": [1], "queue": "tr-q", "priority": 1})),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let a = b["job"]["id"].as_str().expect("id").to_string();
    // Its meta carries the server's enqueue span, in the producer's trace.
    let carried = b["job"]["meta"]["traceparent"]
        .as_str()
        .expect("meta.traceparent")
        .to_string();
    assert!(
        carried.starts_with(&format!("00-{PARENT_TRACE}-")) && carried.ends_with("-01"),
        "{carried}"
    );
    assert_ne!(
        carried, PRODUCER,
        "meta names the enqueue span, a child of the producer's"
    );
    let got = fetch(&s, "tr-q", "w-1").await;
    assert_eq!(
        (got["id"].as_str(), got["meta"]["traceparent"].as_str()),
        (Some(a.as_str()), Some(carried.as_str()))
    );
    assert_eq!(s.ack(&a).await.0, 200);

    // A job whose meta has its own context (kept as given), failed once by its worker.
    let b_id = s
        .enqueue(
            json!({"type": "pdf.render", "args": [], "queue": "tr-q", "meta": {"traceparent": IN_META},
            "retry": {"max_attempts": 2, "initial_interval": "PT60S"}}),
        )
        .await;
    let got = fetch(&s, "tr-q", "w-2").await;
    assert_eq!(
        got["meta"]["traceparent"], IN_META,
        "a context in meta is never changed"
    );
    let (st, r) = s
        .post(
            "/ojs/v1/workers/nack",
            json!({"job_id": b_id, "error": {"type": "FontMissing", "message": "no fonts"}}),
        )
        .await;
    assert_eq!(st, 200, "{r}");

    // A batch: one span per job. A refused enqueue (the same id again) ends its span as an error.
    let (st, r) = s
        .post(
            "/ojs/v1/jobs/batch",
            json!({"jobs": [{"type": "x", "args": [], "queue": "tr-b"}, {"type": "y", "args": [], "queue": "tr-b"}]}),
        )
        .await;
    assert_eq!(st, 201, "{r}");
    let (st, _) = s
        .post(
            "/ojs/v1/jobs",
            json!({"id": a, "type": "mail.send", "args": [1], "queue": "tr-q"}),
        )
        .await;
    assert_eq!(st, 409);

    // Graceful shutdown sends what is still queued.
    s.stop().await;
    let spans = otlp.spans();
    let a_hex = a.replace('-', "");
    let b_hex = b_id.replace('-', "");

    let enq_a = one(&spans, "enqueue of a", |s| {
        s.attr("ojs.job.id") == Some(&a) && s.name == "tr-q enqueue" && s.status == 1
    });
    assert_eq!(
        (enq_a.kind, enq_a.trace_id.as_str(), enq_a.parent_span_id.as_str()),
        (4, PARENT_TRACE, PARENT_SPAN)
    );
    assert_eq!(
        carried,
        format!("00-{PARENT_TRACE}-{}-01", enq_a.span_id),
        "meta carries the enqueue span"
    );
    for (k, v) in [
        ("messaging.system", "ojs"),
        ("messaging.operation.type", "publish"),
        ("messaging.destination.name", "tr-q"),
        ("ojs.job.type", "mail.send"),
        ("ojs.job.priority", "1"),
        ("ojs.job.state", "available"),
    ] {
        assert_eq!(enq_a.attr(k), Some(v), "{k}");
    }
    assert_eq!((enq_a.status, enq_a.service.as_str()), (1, "ojs-server"));

    // Claim: in the job's own trace (its id), linked to the enqueue span.
    let claim_a = one(&spans, "claim of a", |s| {
        s.name == "tr-q claim" && s.attr("ojs.job.id") == Some(&a)
    });
    assert_eq!(
        (claim_a.kind, claim_a.trace_id.as_str(), claim_a.parent_span_id.as_str()),
        (5, a_hex.as_str(), "")
    );
    assert_eq!(claim_a.links, vec![(PARENT_TRACE.to_string(), enq_a.span_id.clone())]);
    for (k, v) in [
        ("messaging.operation.type", "receive"),
        ("ojs.worker.id", "w-1"),
        ("ojs.job.attempt", "1"),
        ("ojs.job.state", "active"),
    ] {
        assert_eq!(claim_a.attr(k), Some(v), "{k}");
    }
    // Completion: the claim's child.
    let done_a = one(&spans, "completion of a", |s| s.name == "tr-q complete");
    assert_eq!(
        (done_a.trace_id.as_str(), done_a.parent_span_id.as_str(), done_a.status),
        (a_hex.as_str(), claim_a.span_id.as_str(), 1)
    );
    assert_eq!(
        (done_a.attr("ojs.job.state"), done_a.attr("messaging.operation.name")),
        (Some("completed"), Some("ack"))
    );
    assert!(done_a.end_unix_nano >= done_a.start_unix_nano && claim_a.end_unix_nano >= claim_a.start_unix_nano);

    // The job with its own context: the enqueue span is its child; the claim links to that context.
    let enq_b = one(&spans, "enqueue of b", |s| {
        s.name == "tr-q enqueue" && s.attr("ojs.job.id") == Some(&b_id)
    });
    assert_eq!(
        (enq_b.trace_id.as_str(), enq_b.parent_span_id.as_str()),
        ("11111111111111111111111111111111", "2222222222222222")
    );
    let claim_b = one(&spans, "claim of b", |s| {
        s.name == "tr-q claim" && s.attr("ojs.job.id") == Some(&b_id)
    });
    assert_eq!(claim_b.trace_id, b_hex);
    assert_eq!(
        claim_b.links,
        vec![(
            "11111111111111111111111111111111".to_string(),
            "2222222222222222".to_string()
        )]
    );
    let fail_b = one(&spans, "failure of b", |s| s.name == "tr-q fail");
    assert_eq!(
        (fail_b.parent_span_id.as_str(), fail_b.status),
        (claim_b.span_id.as_str(), 2)
    );
    for (k, v) in [
        ("error.type", "FontMissing"),
        ("error.message", "no fonts"),
        ("ojs.job.error.attempt", "1"),
        ("ojs.job.state", "retryable"),
        ("messaging.operation.name", "nack"),
    ] {
        assert_eq!(fail_b.attr(k), Some(v), "{k}");
    }

    assert_eq!(
        spans.iter().filter(|s| s.name == "tr-b enqueue").count(),
        2,
        "one span per job of a batch"
    );
    // The refused enqueue (409: the id exists) is named and described like the others, an error.
    let refused = one(&spans, "the refused enqueue", |s| {
        s.status == 2 && s.name == "tr-q enqueue"
    });
    assert_eq!(
        (refused.attr("ojs.job.id"), refused.attr("ojs.job.state")),
        (Some(a.as_str()), Some("duplicate"))
    );
    assert_eq!(refused.parent_span_id, "", "no context given: a root span");
}

/// What the black-box review of traces found (each failed before its fix).
#[tokio::test]
async fn what_the_review_found_meta_as_written_requeue_parent_error_size_and_deduplicated_ids() {
    let otlp = OtlpReceiver::start().await;
    let url = otlp.url.clone();
    let s = TestServer::start_with(|c| c.otlp_endpoint = Some(url)).await;
    let hdr = [("traceparent", PRODUCER)];
    let post = |body: Value| s.send_with(Method::POST, "/ojs/v1/jobs", &hdr, Some(body));

    // A meta in which the client wrote traceparent or tracestate is kept exactly, valid or not.
    for meta in [
        json!({"traceparent": 12345}),
        json!({"traceparent": "garbage"}),
        json!({"tracestate": "k=v"}),
        json!({"traceparent": null}),
    ] {
        let (st, b) = post(json!({"type": "t", "args": [], "queue": "tr-r", "meta": meta})).await;
        assert_eq!((st, &b["job"]["meta"]), (201, &meta), "{b}");
    }
    let (st, b) = s
        .post(
            "/ojs/v1/jobs/batch",
            json!({"jobs": [{"type": "t", "args": [], "queue": "tr-r",
        "meta": {"traceparent": {"nested": true}, "tracestate": "keep=me"}}]}),
        )
        .await;
    assert_eq!(
        (st, &b["jobs"][0]["meta"]),
        (201, &json!({"traceparent": {"nested": true}, "tracestate": "keep=me"})),
        "{b}"
    );

    // A NACK with requeue gives the attempt back; its span's parent is still the claim it ended.
    let id = s.enqueue(json!({"type": "t", "args": [], "queue": "tr-rq"})).await;
    fetch(&s, "tr-rq", "w").await;
    let (st, r) = s
        .post(
            "/ojs/v1/workers/nack",
            json!({"job_id": id, "requeue": true, "error": {"type": "Shutdown", "message": "bye"}}),
        )
        .await;
    assert_eq!(st, 200, "{r}");

    // A worker's huge error is cut in the span (the job keeps it whole).
    let id2 = s.enqueue(json!({"type": "t", "args": [], "queue": "tr-big"})).await;
    fetch(&s, "tr-big", "w").await;
    let huge = "é".repeat(300_000);
    let (st, _) = s
        .post(
            "/ojs/v1/workers/nack",
            json!({"job_id": id2, "error": {"type": huge, "message": huge}}),
        )
        .await;
    assert_eq!(st, 200);

    // A unique duplicate answered with the job it met is traced under that job's id.
    let uniq = json!({"type": "u", "args": [1], "queue": "tr-u", "unique": {"keys": ["type", "args"], "on_conflict": "ignore"}});
    let first = s.enqueue(uniq.clone()).await;
    let (st, b) = s.post("/ojs/v1/jobs", uniq).await;
    assert_eq!((st, b["job"]["id"].as_str()), (200, Some(first.as_str())), "{b}");

    s.stop().await;
    let spans = otlp.spans();
    let claim = one(&spans, "claim", |x| x.name == "tr-rq claim");
    let fail = one(&spans, "requeue", |x| x.name == "tr-rq fail");
    assert_eq!(fail.parent_span_id, claim.span_id, "the requeued attempt's claim");
    let big = one(&spans, "big error", |x| x.name == "tr-big fail");
    let (t, m) = (
        big.attr("error.type").unwrap_or(""),
        big.attr("error.message").unwrap_or(""),
    );
    assert!(
        !t.is_empty() && t.len() <= 256 && !m.is_empty() && m.len() <= 1024,
        "{} {}",
        t.len(),
        m.len()
    );
    let dup: Vec<_> = spans.iter().filter(|x| x.name == "tr-u enqueue").collect();
    assert_eq!(dup.len(), 2);
    assert!(
        dup.iter().all(|x| x.attr("ojs.job.id") == Some(first.as_str())),
        "{dup:#?}"
    );
    assert!(dup.iter().any(|x| x.attr("ojs.job.state") == Some("ignored")));
}

#[tokio::test]
async fn with_tracing_off_the_request_context_still_reaches_the_worker() {
    let s = TestServer::start().await;
    let (st, b) = s
        .send_with(
            Method::POST,
            "/ojs/v1/jobs",
            &[("traceparent", PRODUCER), ("tracestate", "vendor=1")],
            Some(json!({"type": "t", "args": [], "queue": "tr-off"})),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let got = fetch(&s, "tr-off", "w").await;
    assert_eq!(got["meta"]["traceparent"], PRODUCER);
    assert_eq!(got["meta"]["tracestate"], "vendor=1");

    // Meta's own context wins over the header; a header that is no trace context is not carried.
    s.send_with(
        Method::POST,
        "/ojs/v1/jobs",
        &[("traceparent", PRODUCER)],
        Some(json!({"type": "t", "args": [], "queue": "tr-off", "meta": {"traceparent": IN_META}})),
    )
    .await;
    assert_eq!(fetch(&s, "tr-off", "w").await["meta"]["traceparent"], IN_META);
    // Even one that is no trace context: the client wrote it, the header does not replace it.
    s.send_with(
        Method::POST,
        "/ojs/v1/jobs",
        &[("traceparent", PRODUCER)],
        Some(json!({"type": "t", "args": [], "queue": "tr-off", "meta": {"traceparent": 7}})),
    )
    .await;
    assert_eq!(fetch(&s, "tr-off", "w").await["meta"]["traceparent"], 7);
    s.send_with(
        Method::POST,
        "/ojs/v1/jobs/batch",
        &[("traceparent", "00-zz-zz-01")],
        Some(json!({"jobs": [{"type": "t", "args": [], "queue": "tr-off"}]})),
    )
    .await;
    assert!(fetch(&s, "tr-off", "w").await["meta"].get("traceparent").is_none());
    s.assert_invariants().await;
}
