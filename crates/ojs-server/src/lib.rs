//! The OJS HTTP server.
//!
//! A request flows: the edge middleware and axum router ([`app`]) → a handler in [`routes`] (validates with `ojs-core`) →
//! [`shards`] (which shard it concerns) → one `ojs_store::Store` method of that shard → one Lua script
//! in `lua/` → that shard's Redis keys. Handlers
//! hold no job state, so any number of nodes can serve one Redis. [`run`] takes its listener and its
//! shutdown signal as arguments, so tests start real servers on port 0.

pub mod api_keys;
pub mod auth;
pub mod background;
pub mod coalesce;
pub mod config;
pub mod cron;
pub mod error;
pub mod events_hub;
pub mod job_ops;
pub mod listing;
pub mod media;
pub mod metrics;
pub mod pools;
pub mod queue;
pub mod respond;
pub mod routes;
pub mod schemas;
pub mod shards;
pub mod state;
pub mod tenant;
pub mod traces;
pub mod ui;
pub mod wake;
pub mod webhooks;
pub mod worker;
pub mod worker_ops;
pub mod workflow_ops;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;
use ojs_core::envelope::EnvelopeRules;
use ojs_core::{ErrorCode, OjsError};
use ojs_store::{Store, StoreConfig};
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use config::Config;
use error::ApiError;
pub use state::AppState;

/// Builds the shared state. Connects lazily: a Redis that is down now is retried on each request.
pub fn state(config: Config, shutting_down: watch::Receiver<bool>) -> anyhow::Result<AppState> {
    let store = Store::new(StoreConfig {
        redis_url: config.redis_url.clone(),
        redis_cluster: config.cluster_nodes(),
        namespace: config.namespace.clone(),
        default_visibility_ms: config.visibility_timeout_ms,
        retention_ms: config.retention_secs.saturating_mul(1000),
        pool_size: config.redis_pool,
        wait_replicas: config.redis_wait_replicas,
        wait_timeout_ms: config.redis_wait_timeout_ms,
    })?;
    metrics::install();
    let rules = EnvelopeRules {
        priority_model: config.priority_model,
        ..Default::default()
    };
    let shards = shards::Shards::new(store, &config);
    let traces = traces::Traces::start(config.otlp_endpoint.as_deref())?;
    Ok(AppState(Arc::new(state::Inner {
        shards,
        traces,
        config,
        rules,
        started: Instant::now(),
        shutting_down,
        events: events_hub::channel(),
        wake: wake::ReadyWake::default(),
        listeners: Default::default(),
        enqueues: coalesce::PerShard::new(config::MAX_SHARDS),
        worker_calls: coalesce::PerShard::new(config::MAX_SHARDS),
    })))
}

#[derive(utoipa::OpenApi)]
#[openapi(info(
    title = "OJS server on Redis",
    description = "Open Job Spec over HTTP. Priority follows the project's seed (top-level `priority`, lower runs first, default 2) unless the server runs `--priority-model core`."
))]
struct ApiDoc;

/// Every documented API route: each handler's `#[utoipa::path]` both routes it and documents it, so
/// the OpenAPI document (`GET /ojs/v1/openapi.json`) cannot drift from the router.
pub fn api_router() -> utoipa_axum::router::OpenApiRouter<AppState> {
    utoipa_axum::router::OpenApiRouter::with_openapi(<ApiDoc as utoipa::OpenApi>::openapi())
        .merge(routes::jobs::router())
        .merge(routes::explain::router())
        .merge(routes::cron::router())
        .merge(routes::workflows::router())
        .merge(routes::workers::router())
        .merge(routes::queues::router())
        .merge(routes::rate_limits::router())
        .merge(routes::tenants::router())
        .merge(routes::dead_letter::router())
        .merge(routes::events::router())
        .merge(routes::events::stream_router())
        .merge(routes::system::router())
        .merge(routes::lifecycle::router())
        .merge(routes::progress::router())
        .merge(routes::checkpoints::router())
        .merge(routes::admin::router())
        .merge(routes::schema_registry::router())
        .merge(routes::history::router())
        .merge(routes::pools::router())
        .merge(routes::scheduling::router())
        .merge(routes::webhooks::router())
        .merge(metrics::router())
}

/// The OpenAPI document of [`api_router`].
pub fn openapi() -> utoipa::openapi::OpenApi {
    with_default_errors(api_router().split_for_parts().1)
}

/// Every operation may also answer statuses it does not list (the API-key check's 401 and 403, a tenant
/// key's 403 for a header naming another tenant or a route that spans tenants, 413,
/// 415, the request timeout's 504, a panic's 500, 503 while Redis is unreachable): all in the OJS
/// error shape, which each operation's `default` response says.
fn with_default_errors(mut api: utoipa::openapi::OpenApi) -> utoipa::openapi::OpenApi {
    use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
    let error = ResponseBuilder::new()
        .description("Any other status: an OJS error (401/403 without a valid API key; 403 for a key bound to a tenant whose request names another tenant, or on a route that spans tenants; 413, 415, 500, 503 while Redis is unreachable, 504)")
        .content(
            respond::OJS_MEDIA_TYPE,
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("OjsError")))
                .build(),
        )
        .build();
    let components = api.components.get_or_insert_with(Default::default);
    components
        .schemas
        .entry("OjsError".into())
        .or_insert_with(<schemas::OjsErrorBody as utoipa::PartialSchema>::schema);
    for item in api.paths.paths.values_mut() {
        let ops = [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ];
        for op in ops.into_iter().flatten() {
            op.responses
                .responses
                .entry("default".into())
                .or_insert_with(|| error.clone().into());
        }
    }
    api
}

/// The router with every route, behind the edge: [`edge`], then the panic guard and the body limit, once
/// around the whole router. (Layers added with `Router::layer` wrap each route: every request then
/// cloned each layer's boxed service, a box per layer and per nesting level, which the server profile
/// showed as its largest allocator cost; RESULTS.md, eighth session.)
pub fn app(st: AppState) -> Router {
    let limit = st.config.max_body_bytes;
    let (api_routes, api) = api_router().split_for_parts();
    let openapi = Arc::new(with_default_errors(api));
    let routes = Router::new()
        .merge(api_routes)
        .route(
            "/ojs/v1/openapi.json",
            axum::routing::get(move || {
                let doc = openapi.clone();
                async move { axum::Json(doc.as_ref().clone()) }
            }),
        )
        .merge(ui::router())
        .merge(routes::checkpoints::js_sdk_alias_router())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(st.clone());
    let edged = tower::ServiceBuilder::new()
        .layer(middleware::from_fn_with_state(st, edge))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(panic_response))
        .layer(DefaultBodyLimit::max(limit))
        .service(routes);
    Router::new().fallback_service(edged)
}

/// A panic is a bug; the client still gets the OJS error shape, and the node keeps serving.
fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("handler panicked");
    axum::response::IntoResponse::into_response(ApiError(OjsError::new(ErrorCode::Internal, "internal error")))
}

/// What every request goes through, outermost first: `X-Request-Id` echoed (or minted) and
/// `OJS-Version` on the response, the request's duration recorded, the Content-Type the deployment
/// asked for (`respond::fix_content_type`); the API-key check (`auth::admit`, which also marks a request whose key is bound to a tenant); and the request
/// timeout (SSE streams are bounded only until their headers are sent).
async fn edge(axum::extract::State(st): axum::extract::State<AppState>, mut req: Request, next: Next) -> Response {
    let rid = req
        .headers()
        .get("x-request-id")
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.as_bytes().iter().all(|b| b.is_ascii_graphic()))
        .cloned();
    let route = route_label(req.method(), req.uri().path());
    let debug = tracing::enabled!(tracing::Level::DEBUG);
    let seen = debug.then(|| (req.method().clone(), req.uri().path().to_owned()));
    let started = Instant::now();
    let mut res = match auth::admit(&st, &mut req) {
        Some(refused) => refused,
        None => {
            let limit = Duration::from_millis(st.config.request_timeout_ms.max(1));
            match tokio::time::timeout(limit, next.run(req)).await {
                Ok(res) => res,
                Err(_) => axum::response::IntoResponse::into_response(ApiError(OjsError::new(
                    ErrorCode::Timeout,
                    format!("the request took longer than {} ms", limit.as_millis()),
                ))),
            }
        }
    };
    let elapsed = started.elapsed();
    request_duration(route).record(elapsed.as_secs_f64());
    respond::fix_content_type(&st.config, &mut res);
    let rid = rid.unwrap_or_else(|| {
        let mut buf = uuid::Uuid::encode_buffer();
        let s = uuid::Uuid::now_v7().hyphenated().encode_lower(&mut buf);
        HeaderValue::from_str(s).expect("a UUID is a header value")
    });
    if let Some((method, path)) = seen {
        tracing::debug!(%method, %path, status = res.status().as_u16(), request_id = ?rid,
            elapsed_us = elapsed.as_micros() as u64, "request");
    }
    let h = res.headers_mut();
    h.insert("ojs-version", HeaderValue::from_static("1.0"));
    h.insert("x-request-id", rid);
    res
}

/// The `route` label of `ojs_http_request_duration_seconds`: the hot routes by name, the rest `other`.
const ROUTES: [(&str, &str); 6] = [
    ("/ojs/v1/jobs", "enqueue"),
    ("/ojs/v1/jobs/batch", "enqueue_batch"),
    ("/ojs/v1/workers/fetch", "fetch"),
    ("/ojs/v1/workers/ack", "ack"),
    ("/ojs/v1/workers/nack", "nack"),
    ("/ojs/v1/workers/heartbeat", "heartbeat"),
];

/// A request's index in [`ROUTES`] (`ROUTES.len()`: other).
fn route_label(method: &axum::http::Method, path: &str) -> usize {
    if method != axum::http::Method::POST {
        return ROUTES.len();
    }
    ROUTES.iter().position(|(p, _)| *p == path).unwrap_or(ROUTES.len())
}

/// The histogram of one route label, registered once (a `histogram!` call hashes its labels each time).
fn request_duration(route: usize) -> &'static ::metrics::Histogram {
    static HANDLES: std::sync::OnceLock<Vec<::metrics::Histogram>> = std::sync::OnceLock::new();
    &HANDLES.get_or_init(|| {
        metrics::install();
        ROUTES
            .iter()
            .map(|(_, label)| *label)
            .chain(["other"])
            .map(|label| ::metrics::histogram!("ojs_http_request_duration_seconds", "route" => label))
            .collect()
    })[route]
}

async fn not_found(req: Request) -> ApiError {
    OjsError::new(
        ErrorCode::NotFound,
        format!("no route for {} {}", req.method(), req.uri().path()),
    )
    .into()
}

async fn method_not_allowed(req: Request) -> Response {
    let e = OjsError::new(
        ErrorCode::InvalidRequest,
        format!("{} is not allowed on {}", req.method(), req.uri().path()),
    );
    let mut res = axum::response::IntoResponse::into_response(ApiError(e));
    *res.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
    res
}

/// Serves until `shutdown` resolves, then stops the timers, stops long-polls, and lets in-flight
/// requests finish.
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    config.validate().map_err(anyhow::Error::msg)?;
    let (tx, rx) = watch::channel(false);
    let st = state(config, rx.clone())?;
    if let Err(e) = st.shards.first().ping().await {
        tracing::warn!(error = %e, "redis is not reachable yet; requests answer 503 until it is");
    }
    // On a Redis Cluster, learn (or place and record) the shards' hash tags before serving, so that the
    // first requests see every shard (the timers retry until Redis answers).
    if !st.shards.tags_known() {
        if let Err(e) = st.shards.refresh().await {
            tracing::warn!(error = %e, "the shards' hash tags are not known yet; will keep retrying");
        }
    }
    let timers = tokio::spawn(background::run(st.clone(), rx.clone()));
    let hooks = tokio::spawn(webhooks::run(st.clone(), rx.clone()));
    let hub = tokio::spawn(events_hub::run(st.clone(), rx));
    let app = app(st.clone());
    let tx2 = tx.clone();
    let signal = async move {
        shutdown.await;
        tracing::info!("shutting down: no new work, finishing in-flight requests");
        let _ = tx2.send(true);
    };
    axum::serve(listener, app).with_graceful_shutdown(signal).await?;
    let _ = tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(5), timers).await;
    let _ = tokio::time::timeout(Duration::from_secs(2), hub).await;
    let _ = tokio::time::timeout(Duration::from_secs(2), hooks).await;
    if st.traces.is_some() {
        // The spans still queued go out before the process ends (blocking, up to the exporter's timeout).
        let _ = tokio::task::spawn_blocking(move || st.traces.as_ref().map(traces::Traces::shutdown)).await;
    }
    Ok(())
}
