//! A small OTLP/HTTP receiver (protobuf, `POST /v1/traces`) on a free port: it keeps every span a
//! server exports, decoded with the OpenTelemetry protocol's own generated messages, for the tests
//! of traces. It answers every export 200, as a collector does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;

/// One span as received, ids in lowercase hex (`parent_span_id` empty for a root).
#[derive(Clone, Debug)]
pub struct ReceivedSpan {
    pub name: String,
    /// OTLP's `SpanKind`: 1 internal, 2 server, 3 client, 4 producer, 5 consumer.
    pub kind: i32,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    /// (trace id, span id) of each link.
    pub links: Vec<(String, String)>,
    /// String, integer and boolean attributes, as text.
    pub attributes: HashMap<String, String>,
    /// OTLP's status code: 0 unset, 1 ok, 2 error.
    pub status: i32,
    pub service: String,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
}

impl ReceivedSpan {
    pub fn attr(&self, name: &str) -> Option<&str> {
        self.attributes.get(name).map(String::as_str)
    }
}

/// The receiver; stops when dropped.
pub struct OtlpReceiver {
    /// Its base URL (`http://127.0.0.1:<port>`), what `--otlp-endpoint` takes.
    pub url: String,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    task: tokio::task::JoinHandle<()>,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

async fn export(State(spans): State<Arc<Mutex<Vec<ReceivedSpan>>>>, body: Bytes) -> StatusCode {
    let Ok(req) = ExportTraceServiceRequest::decode(body) else {
        return StatusCode::BAD_REQUEST;
    };
    let mut got = Vec::new();
    for rs in req.resource_spans {
        let service = rs
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                AnyValue::StringValue(s) => Some(s.clone()),
                _ => None,
            })
            .unwrap_or_default();
        for ss in rs.scope_spans {
            for s in ss.spans {
                let attributes = s
                    .attributes
                    .iter()
                    .filter_map(|kv| {
                        let v = match kv.value.as_ref()?.value.as_ref()? {
                            AnyValue::StringValue(s) => s.clone(),
                            AnyValue::IntValue(i) => i.to_string(),
                            AnyValue::BoolValue(b) => b.to_string(),
                            AnyValue::DoubleValue(d) => d.to_string(),
                            _ => return None,
                        };
                        Some((kv.key.clone(), v))
                    })
                    .collect();
                got.push(ReceivedSpan {
                    name: s.name,
                    kind: s.kind,
                    trace_id: hex(&s.trace_id),
                    span_id: hex(&s.span_id),
                    parent_span_id: hex(&s.parent_span_id),
                    links: s.links.iter().map(|l| (hex(&l.trace_id), hex(&l.span_id))).collect(),
                    attributes,
                    status: s.status.map(|st| st.code).unwrap_or(0),
                    service: service.clone(),
                    start_unix_nano: s.start_time_unix_nano,
                    end_unix_nano: s.end_time_unix_nano,
                });
            }
        }
    }
    spans.lock().expect("spans").extend(got);
    StatusCode::OK
}

impl OtlpReceiver {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let spans = Arc::new(Mutex::new(Vec::new()));
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(export))
            .with_state(Arc::clone(&spans));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { url, spans, task }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().expect("spans").clone()
    }

    /// Waits until `want` holds of the spans received, up to `within`; answers them either way.
    pub async fn wait_for(&self, within: Duration, want: impl Fn(&[ReceivedSpan]) -> bool) -> Vec<ReceivedSpan> {
        let end = tokio::time::Instant::now() + within;
        loop {
            let s = self.spans();
            if want(&s) || tokio::time::Instant::now() >= end {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}
