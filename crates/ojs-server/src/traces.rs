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

/// Where spans go: `--otlp-endpoint` (a base URL, `/v1/traces` appended as for
/// `OTEL_EXPORTER_OTLP_ENDPOINT`), else the standard environment variables; `None`: tracing is off.
pub fn endpoint(flag: Option<&str>) -> Option<Option<String>> {
    if let Some(url) = flag.filter(|u| !u.is_empty()) {
        let base = url.trim_end_matches('/');
        return Some(Some(format!("{base}/v1/traces")));
    }
    let set = |v: &str| std::env::var(v).is_ok_and(|s| !s.is_empty());
    (set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") || set("OTEL_EXPORTER_OTLP_ENDPOINT")).then_some(None)
}

impl Traces {
    /// Starts the exporter when an endpoint is configured (see [`endpoint`]).
    pub fn start(flag: Option<&str>) -> anyhow::Result<Option<Traces>> {
        let Some(url) = endpoint(flag) else {
            return Ok(None);
        };
        // The blocking HTTP client may be neither built nor dropped on a runtime thread.
        let exporter = std::thread::spawn(move || {
            use opentelemetry_otlp::WithExportConfig;
            let b = opentelemetry_otlp::SpanExporter::builder().with_http();
            match url {
                Some(u) => b.with_endpoint(u).build(),
                None => b.build(),
            }
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the OTLP exporter panicked while starting"))??;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(
                opentelemetry_sdk::Resource::builder()
                    .with_service_name("ojs-server")
                    .build(),
            )
            .build();
        let scope = opentelemetry::InstrumentationScope::builder("ojs-server")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        let tracer = opentelemetry::trace::TracerProvider::tracer_with_scope(&provider, scope);
        Ok(Some(Traces { provider, tracer }))
    }

    /// Sends the spans still queued and stops the exporter (at shutdown; blocks up to 5 s when the
    /// collector does not answer, so not on a runtime thread).
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
/// tracing is off and the request has no `traceparent` header.
pub fn enqueue(traces: Option<&Traces>, headers: &HeaderMap, body: &mut Value) -> Option<EnqueueSpan> {
    let header = || {
        let tp = headers.get("traceparent")?.to_str().ok()?;
        parse(tp, headers.get("tracestate").and_then(|v| v.to_str().ok()))
    };
    let Some(traces) = traces else {
        if headers.contains_key("traceparent") && meta_context(body.get("meta")).is_none() {
            if let Some(sc) = header() {
                carry(body, &sc);
            }
        }
        return None;
    };
    let given = meta_context(body.get("meta"));
    let parent = given.clone().or_else(header);
    let cx = parent.map_or_else(Context::new, |sc| Context::new().with_remote_span_context(sc));
    let b = SpanBuilder::from_name("enqueue").with_kind(SpanKind::Producer);
    let span = traces.span(b, &cx);
    if given.is_none() && span.span_context().is_valid() {
        carry(body, span.span_context());
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
    /// The job was stored (or met a unique duplicate): names the span after its queue and ends it.
    pub fn stored(mut self, job: &JobAttrs<'_>) {
        if let Some(mut span) = self.0.take() {
            span.update_name(format!("{} enqueue", job.queue));
            span.set_attributes(job.attributes("publish"));
            span.set_status(Status::Ok);
            span.end();
        }
    }
}

impl Drop for EnqueueSpan {
    fn drop(&mut self) {
        if let Some(mut span) = self.0.take() {
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
