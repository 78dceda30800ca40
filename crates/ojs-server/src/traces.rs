//! Traces of a job's life over OpenTelemetry (ojs-observability §5–§7), exported over OTLP/HTTP when
//! `--otlp-endpoint` (or the standard `OTEL_EXPORTER_OTLP_ENDPOINT`) is set; without one there is no
//! tracer, and a request pays for one header lookup on enqueue.
//!
//! - **Context.** A job's W3C trace context travels in its `meta.traceparent` (and `meta.tracestate`),
//!   which FETCH hands to the worker. An enqueue whose envelope has none takes the request's
//!   `traceparent` header; a `meta.traceparent` the client gave is never changed.
//! - **Enqueue span** (`{queue} enqueue`, PRODUCER): a child of the job's context. When the client gave
//!   no context in meta, meta carries the enqueue span's own, so a worker's process span links to it.
//! - **Claim span** (`{queue} claim`, CONSUMER), one per job a FETCH claims, and **completion span**
//!   (`{queue} complete` on ACK, `{queue} fail` on NACK), its child: they live in the job's own trace,
//!   whose id is the job id (`019b…` without dashes, searchable in a tracing backend), and the claim
//!   span links to the job's context. The spec links processing to enqueue instead of nesting it, as
//!   a job may run hours after it was enqueued. The claim span's id is derived from the job id and the
//!   attempt, so the completion finds its parent with no state kept between the two requests.
//!
//! Spans are batched and sent by the SDK's own thread; a full batch queue drops spans, never blocks a
//! request. Attributes follow §7: `messaging.system` `ojs`, `messaging.operation.type`,
//! `messaging.destination.name`, `ojs.job.id`, `ojs.job.type`, and the recommended ones.

use std::collections::HashMap;
use std::time::SystemTime;

use axum::http::HeaderMap;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{
    Link, Span as _, SpanBuilder, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, Span};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The deployment's tracer, when tracing is on.
pub struct Traces {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

/// Where spans go: `--otlp-endpoint` (a collector's base URL: `/v1/traces` is appended unless the path
/// already ends with it), else `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the full URL) or
/// `OTEL_EXPORTER_OTLP_ENDPOINT` (a base URL), as the OpenTelemetry specification reads them; `None`:
/// tracing is off. A value that is not an http(s) URL of a host is refused, naming where it came from.
pub fn endpoint(flag: Option<&str>) -> Result<Option<String>, String> {
    let env = |v: &str| std::env::var(v).ok().filter(|s| !s.is_empty());
    let (given, from, full) = if let Some(u) = flag.filter(|u| !u.is_empty()) {
        (u.to_string(), "--otlp-endpoint", false)
    } else if let Some(u) = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        (u, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", true)
    } else if let Some(u) = env("OTEL_EXPORTER_OTLP_ENDPOINT") {
        (u, "OTEL_EXPORTER_OTLP_ENDPOINT", false)
    } else {
        return Ok(None);
    };
    let refuse = |why: &str| {
        format!("{from} must be the http:// or https:// URL of an OTLP/HTTP collector (e.g. http://localhost:4318): {why}; got {given:?}")
    };
    // (The URL standard reads `http:///v1` as the host `v1`: the host must follow the slashes.)
    let rest = given.strip_prefix("http://").or_else(|| given.strip_prefix("https://"));
    if rest.is_none_or(|r| r.is_empty() || r.starts_with('/')) {
        return Err(refuse("not an http(s) URL of a host"));
    }
    let mut url = reqwest::Url::parse(&given).map_err(|e| refuse(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none_or(str::is_empty) {
        return Err(refuse("not an http(s) URL of a host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(refuse("a query or fragment has no place in it"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(refuse("credentials go in OTEL_EXPORTER_OTLP_HEADERS, not in the URL"));
    }
    if !full && !url.path().ends_with("/v1/traces") {
        let path = format!("{}/v1/traces", url.path().trim_end_matches('/'));
        url.set_path(&path);
    }
    Ok(Some(url.to_string()))
}

/// The most of a collector's answer an export reads: it needs the status, and a collector (or whatever
/// answers at that address) must not make the server hold an unbounded body.
const MAX_ANSWER_BYTES: u64 = 64 * 1024;

/// How long one export may take: `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT` or `OTEL_EXPORTER_OTLP_TIMEOUT` in
/// ms (default 10 s), held to 100 ms..=60 s.
fn export_timeout() -> std::time::Duration {
    let ms = ["OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.trim().parse::<u64>().ok())
        .unwrap_or(10_000);
    std::time::Duration::from_millis(ms.clamp(100, 60_000))
}

/// The exporter's HTTP client: reqwest's blocking client (the SDK's batch thread calls it), reading at
/// most [`MAX_ANSWER_BYTES`] of an answer, counting failed exports in
/// `ojs_trace_export_failures_total` and logging them (at most once a minute).
#[derive(Debug)]
struct Collector {
    client: reqwest::blocking::Client,
    last_warned: std::sync::Mutex<Option<std::time::Instant>>,
}

impl Collector {
    fn failed(&self, why: &str) {
        ::metrics::counter!("ojs_trace_export_failures_total").increment(1);
        let mut last = self.last_warned.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(60)) {
            *last = Some(std::time::Instant::now());
            tracing::warn!(error = %why, "traces: an export to the collector failed; its spans are lost (ojs_trace_export_failures_total counts them)");
        }
    }
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Collector {
    async fn send_bytes(
        &self,
        request: axum::http::Request<axum::body::Bytes>,
    ) -> Result<axum::http::Response<axum::body::Bytes>, opentelemetry_http::HttpError> {
        use std::io::Read;
        let request: reqwest::blocking::Request = request.try_into()?;
        let answer = match self.client.execute(request) {
            Ok(a) => a,
            Err(e) => {
                self.failed(&e.to_string());
                return Err(e.into());
            }
        };
        let status = answer.status();
        let headers = answer.headers().clone();
        let mut body = Vec::new();
        // A body past the cap is not read (the connection is dropped with the answer).
        let _ = answer.take(MAX_ANSWER_BYTES).read_to_end(&mut body);
        if !status.is_success() {
            self.failed(&format!("the collector answered {status}"));
        }
        let mut out = axum::http::Response::builder()
            .status(status)
            .body(axum::body::Bytes::from(body))?;
        *out.headers_mut() = headers;
        Ok(out)
    }
}

impl Traces {
    /// Starts the exporter when an endpoint is configured (see [`endpoint`]).
    pub fn start(flag: Option<&str>) -> anyhow::Result<Option<Traces>> {
        let Some(url) = endpoint(flag).map_err(anyhow::Error::msg)? else {
            return Ok(None);
        };
        // The blocking HTTP client may be neither built nor dropped on a runtime thread.
        let exporter = std::thread::spawn(move || -> anyhow::Result<_> {
            use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
            let client = reqwest::blocking::Client::builder()
                .timeout(export_timeout())
                .redirect(reqwest::redirect::Policy::none())
                .build()?;
            let collector = Collector {
                client,
                last_warned: std::sync::Mutex::new(None),
            };
            Ok(opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_http_client(collector)
                .with_endpoint(url)
                .with_timeout(export_timeout())
                .build()?)
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the OTLP exporter panicked while starting"))??;
        // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES apply; the service is ojs-server unless named.
        let mut resource = opentelemetry_sdk::Resource::builder();
        if !std::env::var("OTEL_SERVICE_NAME").is_ok_and(|s| !s.is_empty()) {
            resource = resource.with_service_name("ojs-server");
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build();
        let scope = opentelemetry::InstrumentationScope::builder("ojs-server")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        let tracer = opentelemetry::trace::TracerProvider::tracer_with_scope(&provider, scope);
        Ok(Some(Traces { provider, tracer }))
    }

    /// Sends the spans still queued and stops the exporter (at shutdown; blocks about 5 s at most when
    /// the collector does not answer, so not on a runtime thread).
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown_with_timeout(std::time::Duration::from_secs(5)) {
            tracing::warn!(error = %e, "traces: the last spans may not have been sent");
        }
    }

    fn span(&self, b: SpanBuilder, parent: &Context) -> Span {
        self.tracer.build_with_context(b, parent)
    }
}

/// A W3C trace context from its `traceparent` (and `tracestate`) text; `None` when it is not one.
pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Option<SpanContext> {
    if !well_formed(traceparent) {
        return None;
    }
    let mut carrier = HashMap::with_capacity(2);
    carrier.insert("traceparent".to_string(), traceparent.to_string());
    if let Some(s) = tracestate {
        carrier.insert("tracestate".to_string(), s.to_string());
    }
    let cx = TraceContextPropagator::new().extract(&carrier);
    let sc = cx.span().span_context().clone();
    sc.is_valid().then_some(sc)
}

/// The W3C shape the propagator does not check itself (it takes `00-4bf9-00f0-01`): lowercase hex
/// fields of 2, 32, 16 and 2 digits; version `ff` is invalid, and only a later version may add fields.
fn well_formed(tp: &str) -> bool {
    let b = tp.as_bytes();
    let hex = |r: std::ops::Range<usize>| b[r].iter().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c));
    b.len() >= 55
        && (b.len() == 55 || (b[55] == b'-' && &b[..2] != b"00"))
        && (b[2], b[35], b[52]) == (b'-', b'-', b'-')
        && hex(0..2)
        && hex(3..35)
        && hex(36..52)
        && hex(53..55)
        && &b[..2] != b"ff"
}

/// `traceparent` text of a span context.
fn traceparent(sc: &SpanContext) -> String {
    format!("00-{}-{}-{:02x}", sc.trace_id(), sc.span_id(), sc.trace_flags().to_u8())
}

/// A job's context as its envelope carries it (`meta.traceparent`, `meta.tracestate`).
fn meta_context(meta: Option<&Value>) -> Option<SpanContext> {
    let meta = meta?;
    let tp = meta.get("traceparent")?.as_str()?;
    parse(tp, meta.get("tracestate").and_then(Value::as_str))
}

/// An enqueue's span, ended by [`EnqueueSpan::stored`]; dropped unended (the envelope was refused,
/// the store failed), it ends as an error.
pub struct EnqueueSpan(Option<Span>);

/// Before an enqueue's envelope (`body`) is parsed: keeps the job's trace context in its meta (see
/// the module doc) and, with tracing on, starts its enqueue span. Costs one header lookup when
/// tracing is off and the request has no `traceparent` header. A meta in which the client wrote
/// `traceparent` or `tracestate`, whatever it holds, is left exactly as written.
pub fn enqueue(traces: Option<&Traces>, headers: &HeaderMap, body: &mut Value) -> Option<EnqueueSpan> {
    let header = || {
        let tp = headers.get("traceparent")?.to_str().ok()?;
        parse(tp, headers.get("tracestate").and_then(|v| v.to_str().ok()))
    };
    let meta = body.get("meta");
    let client_wrote = meta.is_some_and(|m| m.get("traceparent").is_some() || m.get("tracestate").is_some());
    let Some(traces) = traces else {
        if !client_wrote && headers.contains_key("traceparent") {
            if let Some(sc) = header() {
                carry(body, &sc);
            }
        }
        return None;
    };
    let parent = meta_context(meta).or_else(header);
    let cx = parent
        .clone()
        .map_or_else(Context::new, |sc| Context::new().with_remote_span_context(sc));
    let b = SpanBuilder::from_name("enqueue").with_kind(SpanKind::Producer);
    let span = traces.span(b, &cx);
    if !client_wrote {
        // A span the sampler dropped is never exported: meta then carries its parent, as with tracing off.
        match (span.span_context().is_sampled(), &parent) {
            (true, _) => carry(body, span.span_context()),
            (false, Some(p)) => carry(body, p),
            (false, None) => {}
        }
    }
    Some(EnqueueSpan(Some(span)))
}

/// Writes `sc` into the envelope's meta (made an object when absent; a meta of another type is left
/// for validation to refuse).
fn carry(body: &mut Value, sc: &SpanContext) {
    let Some(doc) = body.as_object_mut() else {
        return;
    };
    let meta = doc.entry("meta").or_insert_with(|| Value::Object(Default::default()));
    if let Some(m) = meta.as_object_mut() {
        m.insert("traceparent".into(), Value::String(traceparent(sc)));
        let state = sc.trace_state().header();
        if !state.is_empty() {
            m.insert("tracestate".into(), Value::String(state));
        }
    }
}

/// What a span says about one job.
pub struct JobAttrs<'a> {
    pub id: &'a str,
    pub job_type: &'a str,
    pub queue: &'a str,
    /// The job's state after the operation.
    pub state: &'a str,
    pub priority: Option<i64>,
    pub attempt: Option<i64>,
    pub worker: Option<&'a str>,
}

impl JobAttrs<'_> {
    fn attributes(&self, operation: &'static str) -> Vec<KeyValue> {
        let mut a = vec![
            KeyValue::new("messaging.system", "ojs"),
            KeyValue::new("messaging.operation.type", operation),
            KeyValue::new("messaging.destination.name", self.queue.to_string()),
            KeyValue::new("messaging.message.id", self.id.to_string()),
            KeyValue::new("ojs.job.id", self.id.to_string()),
            KeyValue::new("ojs.job.type", self.job_type.to_string()),
            KeyValue::new("ojs.job.queue", self.queue.to_string()),
            KeyValue::new("ojs.job.state", self.state.to_string()),
        ];
        if let Some(p) = self.priority {
            a.push(KeyValue::new("ojs.job.priority", p));
        }
        if let Some(n) = self.attempt {
            a.push(KeyValue::new("ojs.job.attempt", n));
        }
        if let Some(w) = self.worker.filter(|w| !w.is_empty()) {
            a.push(KeyValue::new("ojs.worker.id", w.to_string()));
        }
        a
    }
}

impl EnqueueSpan {
    /// The job was stored (or met a unique duplicate, whose id `job` names): names the span after its
    /// queue and ends it.
    pub fn stored(self, job: &JobAttrs<'_>) {
        self.end(job, Status::Ok);
    }

    /// The job was refused (a duplicate id, a unique conflict): as [`EnqueueSpan::stored`], an error.
    pub fn refused(self, job: &JobAttrs<'_>) {
        self.end(job, Status::error(format!("refused: {}", job.state)));
    }

    fn end(mut self, job: &JobAttrs<'_>, status: Status) {
        if let Some(mut span) = self.0.take() {
            span.update_name(format!("{} enqueue", job.queue));
            span.set_attributes(job.attributes("publish"));
            span.set_status(status);
            span.end();
        }
    }
}

impl Drop for EnqueueSpan {
    /// Dropped unended: the envelope was refused before it named its queue, or the store failed.
    fn drop(&mut self) {
        if let Some(mut span) = self.0.take() {
            span.set_attributes([
                KeyValue::new("messaging.system", "ojs"),
                KeyValue::new("messaging.operation.type", "publish"),
            ]);
            span.set_status(Status::error("the enqueue was refused or failed"));
            span.end();
        }
    }
}

/// The job's own trace: its id's 128 bits (`None` for an id that is not a UUID).
fn job_trace(id: &str) -> Option<TraceId> {
    let u = uuid::Uuid::parse_str(id).ok()?;
    Some(TraceId::from_bytes(*u.as_bytes()))
}

/// The claim span of attempt `attempt` of job `id`: the same on every pod, so the completion span can
/// name it as its parent.
fn claim_span_id(id: &str, attempt: i64) -> SpanId {
    let mut h = Sha256::new();
    h.update(b"ojs claim\0");
    h.update(id.as_bytes());
    h.update(attempt.to_be_bytes());
    let d = h.finalize();
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    if b == [0; 8] {
        b[7] = 1;
    }
    SpanId::from_bytes(b)
}

/// A job a FETCH claimed for `worker` (`began`: when the FETCH started claiming): its claim span,
/// linked to the job's context read from its stored envelope.
pub fn claimed(traces: &Traces, job: &ojs_core::StoredJob, worker: &str, began: SystemTime) {
    let Some(env) = job
        .doc
        .as_deref()
        .and_then(|d| serde_json::from_str::<Envelope>(d).ok())
    else {
        return;
    };
    let attrs = JobAttrs {
        id: &env.id,
        job_type: job.job_type.as_deref().unwrap_or(""),
        queue: job.queue.as_deref().unwrap_or(""),
        state: "active",
        priority: job.priority,
        attempt: job.attempt,
        worker: Some(worker),
    };
    let (Some(trace), Some(attempt)) = (job_trace(attrs.id), attrs.attempt) else {
        return;
    };
    let links = meta_context(env.meta.as_ref())
        .map(|sc| vec![Link::with_context(sc)])
        .unwrap_or_default();
    let b = SpanBuilder::from_name(format!("{} claim", attrs.queue))
        .with_kind(SpanKind::Consumer)
        .with_trace_id(trace)
        .with_span_id(claim_span_id(attrs.id, attempt))
        .with_start_time(began)
        .with_attributes(attrs.attributes("receive"))
        .with_links(links);
    let mut span = traces.span(b, &Context::new());
    span.set_status(Status::Ok);
    span.end();
}

/// The part of a stored envelope a claim span reads.
#[derive(serde::Deserialize)]
struct Envelope {
    id: String,
    meta: Option<Value>,
}

/// How an attempt ended, for its completion span.
pub enum Outcome<'a> {
    /// ACK.
    Completed,
    /// NACK, with the error's type (or code) and message.
    Failed {
        kind: Option<&'a str>,
        message: Option<&'a str>,
    },
}

/// An ACK or NACK (`began`: when its request started) of an attempt: the completion span, a child of
/// the attempt's claim span in the job's trace.
pub fn settled(traces: &Traces, job: &JobAttrs<'_>, outcome: Outcome<'_>, began: SystemTime) {
    let (Some(trace), Some(attempt)) = (job_trace(job.id), job.attempt) else {
        return;
    };
    let claim = SpanContext::new(
        trace,
        claim_span_id(job.id, attempt),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    let cx = Context::new().with_remote_span_context(claim);
    let (verb, mut attrs, status) = match outcome {
        Outcome::Completed => ("complete", job.attributes("settle"), Status::Ok),
        Outcome::Failed { kind, message } => {
            // A worker's error may be megabytes: a span keeps its head (spans are batched by count).
            let kind = kind.map(|k| head(k, 256));
            let message = message.map(|m| head(m, 1024));
            let mut a = job.attributes("settle");
            if let Some(k) = kind {
                a.push(KeyValue::new("error.type", k.to_string()));
            }
            if let Some(m) = message {
                a.push(KeyValue::new("error.message", m.to_string()));
            }
            a.push(KeyValue::new("ojs.job.error.attempt", attempt));
            ("fail", a, Status::error(message.unwrap_or("failed").to_string()))
        }
    };
    attrs.push(KeyValue::new(
        "messaging.operation.name",
        if verb == "complete" { "ack" } else { "nack" },
    ));
    let b = SpanBuilder::from_name(format!("{} {verb}", job.queue))
        .with_kind(SpanKind::Consumer)
        .with_start_time(began)
        .with_attributes(attrs);
    let mut span = traces.span(b, &cx);
    span.set_status(status);
    span.end();
}

/// The first `max` bytes of `s`, cut at a character boundary.
fn head(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_round_trips_and_a_malformed_one_is_none() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let sc = parse(tp, None).expect("valid");
        assert_eq!(traceparent(&sc), tp);
        for bad in [
            "",
            "garbage",
            "00-4bf9-00f0-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x",
        ] {
            assert!(parse(bad, None).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn a_collectors_answer_is_read_only_up_to_the_cap() {
        use opentelemetry_http::HttpClient;
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        std::thread::spawn(move || {
            let (mut c, _) = listener.accept().expect("accept");
            let mut buf = [0u8; 4096];
            let _ = c.read(&mut buf);
            let _ = c.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 20000000\r\n\r\n");
            let chunk = vec![b'x'; 1 << 20];
            for _ in 0..20 {
                if c.write_all(&chunk).is_err() {
                    return;
                }
            }
        });
        let collector = Collector {
            client: reqwest::blocking::Client::new(),
            last_warned: std::sync::Mutex::new(None),
        };
        let req = axum::http::Request::post(format!("http://{addr}/v1/traces"))
            .body(axum::body::Bytes::from_static(b"spans"))
            .expect("request");
        let answer = futures::executor::block_on(collector.send_bytes(req)).expect("answer");
        assert_eq!(answer.status(), 200);
        assert_eq!(answer.body().len() as u64, MAX_ANSWER_BYTES, "20 MB sent, the cap read");
    }

    #[test]
    fn an_endpoint_is_an_http_url_of_a_host_and_gets_v1_traces_once() {
        for (given, url) in [
            ("http://c:4318", "http://c:4318/v1/traces"),
            ("http://c:4318/", "http://c:4318/v1/traces"),
            ("https://c/base/v1/traces", "https://c/base/v1/traces"),
            ("https://c/base/", "https://c/base/v1/traces"),
        ] {
            assert_eq!(endpoint(Some(given)), Ok(Some(url.to_string())), "{given}");
        }
        for bad in [
            "localhost:4318",
            "grpc://c:4317",
            "http://",
            "http:///v1",
            "http://127.0.0.1:99999",
            "http://c:4318?x=1",
            "http://c:4318#f",
            "http://user:pw@c:4318",
            "http://exa mple.com",
            "http://[::1",
        ] {
            let e = endpoint(Some(bad)).expect_err(bad);
            assert!(e.contains("--otlp-endpoint") && e.contains(bad), "{e}");
        }
    }

    #[test]
    fn the_head_of_a_long_string_ends_at_a_character() {
        assert_eq!(head("abc", 5), "abc");
        assert_eq!(head("ééé", 3), "é");
        assert_eq!(head("ééé", 4), "éé");
    }

    #[test]
    fn the_claim_span_id_depends_on_job_and_attempt() {
        let id = "019b0000-0000-7000-8000-000000000001";
        assert_eq!(claim_span_id(id, 1), claim_span_id(id, 1));
        assert_ne!(claim_span_id(id, 1), claim_span_id(id, 2));
        assert_ne!(
            claim_span_id(id, 1),
            claim_span_id("019b0000-0000-7000-8000-000000000002", 1)
        );
        assert_eq!(
            job_trace(id).map(|t| t.to_string()),
            Some("019b0000000070008000000000000001".into())
        );
    }

    #[test]
    fn a_header_context_is_carried_into_meta_only_when_meta_has_none() {
        let mut h = HeaderMap::new();
        h.insert(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
                .parse()
                .expect("header"),
        );
        let mut body = serde_json::json!({"type": "t", "args": []});
        assert!(enqueue(None, &h, &mut body).is_none());
        assert_eq!(
            body["meta"]["traceparent"],
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        let mine = "00-11111111111111111111111111111111-2222222222222222-01";
        let mut body = serde_json::json!({"type": "t", "args": [], "meta": {"traceparent": mine}});
        enqueue(None, &h, &mut body);
        assert_eq!(body["meta"]["traceparent"], mine);
        // A header that is not a trace context is not carried.
        h.insert("traceparent", "nonsense".parse().expect("header"));
        let mut body = serde_json::json!({"type": "t", "args": []});
        enqueue(None, &h, &mut body);
        assert!(body.get("meta").is_none());
    }
}
