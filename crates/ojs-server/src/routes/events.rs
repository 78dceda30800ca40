//! Lifecycle events, read back from the capped Redis stream the scripts write to.
//! `GET /ojs/v1/events?types=a,b&queues=q&job_id=…&after=<cursor>&limit=N`.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use ojs_core::event::Event;
use ojs_core::OjsError;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::{IntoParams, ToSchema};

use crate::error::ApiResult;
use crate::respond::{ok, OjsQuery};
use crate::schemas::{LifecycleEvent, OjsErrorBody, OJS_MEDIA_TYPE};
use crate::state::AppState;
use crate::tenant::ActingTenant;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct Filter {
    /// Event types, comma-separated (such as `job.completed,job.failed`).
    types: Option<String>,
    /// The same as `types`.
    #[serde(rename = "type")]
    #[param(rename = "type")]
    type_: Option<String>,
    /// Queue names, comma-separated.
    queues: Option<String>,
    /// The same as `queues`.
    queue: Option<String>,
    job_id: Option<String>,
    /// The official SDKs' subscription channel (`subscribeJob` / `subscribe_queue`…): `job:<id>` or
    /// `queue:<name>`, the same filters as `job_id` and `queues`.
    channel: Option<String>,
    /// A cursor (`next_cursor`, or an event id such as `1700000000000-0` or `1700000000000-0.3`): only
    /// later events.
    after: Option<String>,
    /// 1 to 1000 (default 100).
    #[param(minimum = 0)]
    limit: Option<usize>,
}

impl Filter {
    /// The filter as a request acting as `tenant` may read it: `channel` folded in
    /// ([`Filter::resolve_channel`]), and a job it names the request's to see (another tenant's job is
    /// a 404, as if absent; its events are not shown). Without a job, a key bound to a tenant is refused
    /// (403: the stream's events carry no tenant, so every job's cannot be narrowed to one tenant's).
    async fn resolve(self, st: &AppState, tenant: &ActingTenant) -> ApiResult<Self> {
        let f = self.resolve_channel()?;
        match &f.job_id {
            Some(id) => tenant.check_job(st, id).await?,
            None => tenant.spanning("the events of every job")?,
        }
        Ok(f)
    }

    /// Folds `channel` into the `job_id` / `queues` filters; a malformed channel, or one that
    /// contradicts the other filters, is a 400 naming the fields.
    fn resolve_channel(mut self) -> Result<Self, OjsError> {
        let Some(ch) = self.channel.take() else {
            return Ok(self);
        };
        match ch.split_once(':') {
            Some(("job", id)) => {
                ojs_core::names::check_job_id(id).map_err(|e| OjsError::invalid(format!("channel job:<id>: {e}")))?;
                if self.job_id.as_deref().is_some_and(|j| j != id) {
                    return Err(OjsError::invalid(format!(
                        "channel {ch:?} and job_id {:?} name different jobs; give one of them",
                        self.job_id.unwrap_or_default()
                    )));
                }
                self.job_id = Some(id.to_string());
            }
            Some(("queue", name)) => {
                ojs_core::names::check_queue(name)
                    .map_err(|e| OjsError::invalid(format!("channel queue:<name>: {e}")))?;
                if self.queues.is_some() || self.queue.is_some() {
                    return Err(OjsError::invalid(format!(
                        "channel {ch:?} and queues both filter by queue; give one of them"
                    )));
                }
                self.queues = Some(name.to_string());
            }
            _ => {
                return Err(OjsError::invalid(format!(
                    "channel must be job:<job id> or queue:<queue name>; got {ch:?}"
                )))
            }
        }
        Ok(self)
    }
}

fn csv(a: &Option<String>, b: &Option<String>) -> Vec<String> {
    a.iter()
        .chain(b.iter())
        .flat_map(|s| s.split(','))
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

#[derive(Serialize, ToSchema)]
struct EventList {
    /// Oldest first.
    events: Vec<LifecycleEvent>,
    /// Pass as `after` to read on.
    next_cursor: String,
}

/// Whether an event passes a reader's filter: its type among `types`, its queue among `queues` (each
/// empty: any), and its job `job` when one is named.
fn kept(e: &Event, types: &[String], queues: &[String], job: Option<&str>) -> bool {
    (types.is_empty() || types.contains(&e.event_type))
        && (queues.is_empty() || queues.contains(&e.queue))
        && job.is_none_or(|j| e.job_id == j)
}

#[utoipa::path(
    get,
    path = "/ojs/v1/events",
    tag = "events",
    summary = "Lifecycle events (types, queues, job_id, channel=job:<id>|queue:<name>, after cursor, limit)",
    params(Filter),
    responses((status = 200, description = "OK", body = EventList, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 403, description = "A key bound to a tenant, without a job filter: every job's events span tenants (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 404, description = "The job the filter names does not exist or is another tenant's (a request acting as a tenant) (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn list(State(st): State<AppState>, tenant: ActingTenant, OjsQuery(q): OjsQuery<Filter>) -> ApiResult<Response> {
    let q = q.resolve(&st, &tenant).await?;
    let types = csv(&q.types, &q.type_);
    let queues = csv(&q.queues, &q.queue);
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    if let Some(a) = &q.after {
        if crate::events_hub::parse_event_id(a).is_none() {
            return Err(OjsError::invalid(format!(
                "after must be an event id such as 1700000000000-0, 1700000000000-0.3 or 1700000000000-0@2; got {a:?}"
            ))
            .into());
        }
    }
    let keep = |e: &Event| kept(e, &types, &queues, q.job_id.as_deref());
    // Scan a bounded window of the stream and filter here: the stream is capped, so this is bounded too.
    const SCAN: usize = 10_000;
    let (events, cursor) = match &q.after {
        Some(after) => {
            let entries = crate::events_hub::events_after(&st, after, SCAN).await?;
            let mut out = Vec::new();
            let mut last = after.clone();
            for (id, f) in &entries {
                last = id.clone();
                if keep(f) {
                    out.push(LifecycleEvent::of(id, f));
                    if out.len() >= limit {
                        break;
                    }
                }
            }
            (out, last)
        }
        None => {
            let entries = crate::events_hub::events_latest(&st, SCAN, None).await?;
            let mut out: Vec<LifecycleEvent> = entries
                .iter()
                .filter(|(_, f)| keep(f))
                .take(limit)
                .map(|(id, f)| LifecycleEvent::of(id, f))
                .collect();
            out.reverse();
            let last = entries
                .first()
                .map(|(id, _)| id.clone())
                .unwrap_or_else(|| "0-0".into());
            (out, last)
        }
    };
    Ok(ok(json!(EventList {
        events,
        next_cursor: cursor,
    })))
}

/// Server-Sent Events: `GET /ojs/v1/events/stream` (filters as above), and the per-queue and per-job
/// variants `GET /ojs/v1/queues/{queue}/events/stream`, `GET /ojs/v1/jobs/{id}/events/stream`. A client
/// that reconnects with `Last-Event-ID` (or `?after=`) first gets what it missed from the stream, then
/// live events; a comment line every 15 s keeps proxies from closing the connection.
pub fn stream_router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(stream_all))
        .routes(routes!(stream_queue))
        .routes(routes!(stream_job))
}

#[utoipa::path(
    get,
    path = "/ojs/v1/events/stream",
    tag = "events",
    summary = "Live events (Server-Sent Events; Last-Event-ID resumes; the filters of /events, channel included)",
    params(Filter),
    responses((status = 200, description = "Server-Sent Events: each `data` is an Event (JSON), `id` its cursor, `event` its type", body = String, content_type = "text/event-stream"), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 403, description = "A key bound to a tenant, without a job filter: every job's events span tenants (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 404, description = "The job the filter names does not exist or is another tenant's (a request acting as a tenant) (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn stream_all(
    State(st): State<AppState>,
    tenant: ActingTenant,
    headers: HeaderMap,
    OjsQuery(q): OjsQuery<Filter>,
) -> ApiResult<Response> {
    sse(st, &tenant, headers, q).await
}

#[utoipa::path(
    get,
    path = "/ojs/v1/queues/{queue}/events/stream",
    tag = "events",
    summary = "Live events of one queue (SSE)",
    params(("queue" = String, Path), Filter),
    responses((status = 200, description = "Server-Sent Events: each `data` is an Event (JSON), `id` its cursor, `event` its type", body = String, content_type = "text/event-stream"), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 404, description = "The job the filter names does not exist or is another tenant's (a request acting as a tenant) (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn stream_queue(
    State(st): State<AppState>,
    tenant: ActingTenant,
    crate::respond::QueuePath(queue): crate::respond::QueuePath,
    headers: HeaderMap,
    OjsQuery(mut q): OjsQuery<Filter>,
) -> ApiResult<Response> {
    q.queues = Some(queue.into_string());
    sse(st, &tenant, headers, q).await
}

#[utoipa::path(
    get,
    path = "/ojs/v1/jobs/{id}/events/stream",
    tag = "events",
    summary = "Live events of one job (SSE)",
    params(("id" = String, Path), Filter),
    responses((status = 200, description = "Server-Sent Events: each `data` is an Event (JSON), `id` its cursor, `event` its type", body = String, content_type = "text/event-stream"), (status = 400, description = "Invalid request (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 404, description = "Not a job id, or (for a request acting as a tenant) no job of its own (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn stream_job(
    State(st): State<AppState>,
    tenant: ActingTenant,
    crate::respond::JobPath(id): crate::respond::JobPath,
    headers: HeaderMap,
    OjsQuery(mut q): OjsQuery<Filter>,
) -> ApiResult<Response> {
    q.job_id = Some(id.into_string());
    sse(st, &tenant, headers, q).await
}

async fn sse(st: AppState, tenant: &ActingTenant, headers: HeaderMap, q: Filter) -> ApiResult<Response> {
    use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
    use futures::StreamExt;

    let q = q.resolve(&st, tenant).await?;

    let types = csv(&q.types, &q.type_);
    let queues = csv(&q.queues, &q.queue);
    let job = q.job_id.clone();
    let keep = move |e: &Event| kept(e, &types, &queues, job.as_deref());
    let resume = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or(q.after.clone());
    // Listen, then subscribe before catching up, so nothing falls between the two. A client that asked
    // for no past events gets those after each shard's newest entry now (the hub's tails, idle while
    // nobody on this node listened, read from before that).
    let listening = crate::wake::Listening::new(&st.listeners);
    let live = tokio_stream::wrappers::BroadcastStream::new(st.events.subscribe());
    let mut backlog = Vec::new();
    let resume = resume.filter(|a| crate::events_hub::parse_event_id(a).is_some());
    let mut seen = match &resume {
        Some(after) => crate::events_hub::Seen::after(after),
        None => crate::events_hub::Seen::at_heads(&st).await?,
    };
    if let Some(after) = resume {
        for (id, f) in crate::events_hub::events_after(&st, &after, 10_000).await? {
            if seen.take(&id) && keep(&f) {
                backlog.push((id, f));
            }
        }
    }
    let to_event = |id: &str, e: &Event| {
        let body = serde_json::to_string(&LifecycleEvent::of(id, e)).unwrap_or_default();
        SseEvent::default().id(id).event(e.event_type.clone()).data(body)
    };
    let first = futures::stream::iter(
        backlog
            .iter()
            .map(|(id, f)| Ok::<_, std::convert::Infallible>(to_event(id, f)))
            .collect::<Vec<_>>(),
    );
    let rest = live.filter_map(move |e| {
        let _ = &listening;
        let out = match e {
            Ok(entry) if seen.take(&entry.0) && keep(&entry.1) => Some(Ok(to_event(&entry.0, &entry.1))),
            // A slow client that fell more than the channel's capacity behind: it resumes with
            // Last-Event-ID after reconnecting; here we just carry on.
            _ => None,
        };
        async move { out }
    });
    Ok(axum::response::IntoResponse::into_response(
        Sse::new(first.chain(rest)).keep_alive(KeepAlive::new().interval(std::time::Duration::from_secs(15))),
    ))
}
