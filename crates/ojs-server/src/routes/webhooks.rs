//! Webhook subscriptions (ojs-webhooks §6, §10): `POST|GET /webhooks/subscriptions`,
//! `GET|PATCH|DELETE /webhooks/subscriptions/{id}`, and a subscription's deliveries,
//! `GET /webhooks/subscriptions/{id}/deliveries`. Admin only: a subscription receives every tenant's
//! events (auth.rs). What a subscription is and how its deliveries go: `webhooks.rs`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use ojs_core::{ErrorCode, OjsError};
use ojs_store::SubSaved;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::error::ApiResult;
use crate::respond::{ojs_json, ok, OjsJson, OjsPath, OjsQuery};
use crate::schemas::{OjsErrorBody, OJS_MEDIA_TYPE};
use crate::state::AppState;
use crate::webhooks::{
    self, check_id, delivery_view, load_subscriptions, new_subscription, parse_stored, updated, DeliveryView,
    StoredSubscription, SubscriptionRequest, SubscriptionView, MAX_LISTED, MAX_SUBSCRIPTIONS,
};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create, list))
        .routes(routes!(get_sub, update, delete_sub))
        .routes(routes!(deliveries))
}

/// `{"subscription": Subscription}`.
#[derive(Serialize, ToSchema)]
struct SubscriptionResponse {
    subscription: SubscriptionView,
}

/// Every subscription, oldest first (a deployment holds at most 100).
#[derive(Serialize, ToSchema)]
struct SubscriptionList {
    subscriptions: Vec<SubscriptionView>,
}

/// A subscription's newest deliveries, newest first.
#[derive(Serialize, ToSchema)]
struct DeliveryList {
    deliveries: Vec<DeliveryView>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct DeliveryQuery {
    /// 1 to 100 (default 20).
    limit: Option<usize>,
}

fn answer(status: StatusCode, sub: &StoredSubscription, with_secret: bool) -> Response {
    ojs_json(
        status,
        serde_json::json!(SubscriptionResponse {
            subscription: sub.view(with_secret),
        }),
    )
}

/// The subscription `id` names, or a 404.
async fn read(st: &AppState, id: &str) -> ApiResult<StoredSubscription> {
    check_id(id)?;
    match st.shards.first().webhook_sub(id).await? {
        Some(json) => Ok(parse_stored(&json)?),
        None => Err(OjsError::not_found("webhook subscription", id).into()),
    }
}

#[utoipa::path(
    post,
    path = "/ojs/v1/webhooks/subscriptions",
    tag = "webhooks",
    summary = "Create a webhook subscription: `{url, events, secret?, active?, metadata?, filter?}`; the answer is the only one that shows the secret",
    request_body = SubscriptionRequest,
    responses((status = 201, description = "Created", body = SubscriptionResponse, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid subscription (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 409, description = "The deployment already holds 100 subscriptions (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn create(State(st): State<AppState>, OjsJson(req): OjsJson<SubscriptionRequest>) -> ApiResult<Response> {
    let first = st.shards.first();
    let sub = new_subscription(req, first.now_ms().await?)?;
    let json = serde_json::to_string(&sub).map_err(|e| OjsError::invalid(e.to_string()))?;
    // The consumer group reads each shard's events from here on: created before the subscription, so
    // every event after this answer reaches it. The first subscription of a deployment that had none
    // moves an older group to now (nobody wanted the events in between).
    let reset = first.webhook_sub_count().await? == 0;
    for store in st.shards.all() {
        store.webhook_group_create(webhooks::GROUP, reset).await?;
    }
    match first.webhook_sub_set(&sub.id, &json, true, MAX_SUBSCRIPTIONS).await? {
        SubSaved::Written { .. } => Ok(answer(StatusCode::CREATED, &sub, true)),
        SubSaved::Full(n) => Err(OjsError::new(
            ErrorCode::Conflict,
            format!("this deployment holds {n} webhook subscriptions, the most it may; delete one first"),
        )
        .into()),
        SubSaved::NotFound => Err(OjsError::new(ErrorCode::Internal, "a create answered not_found").into()),
    }
}

#[utoipa::path(
    get,
    path = "/ojs/v1/webhooks/subscriptions",
    tag = "webhooks",
    summary = "Every webhook subscription, oldest first (without secrets)",
    responses((status = 200, description = "OK", body = SubscriptionList, content_type = OJS_MEDIA_TYPE))
)]
async fn list(State(st): State<AppState>) -> ApiResult<Response> {
    let subs = load_subscriptions(&st).await?;
    Ok(ok(SubscriptionList {
        subscriptions: subs.iter().map(|s| s.view(false)).collect(),
    }))
}

#[utoipa::path(
    get,
    path = "/ojs/v1/webhooks/subscriptions/{id}",
    tag = "webhooks",
    summary = "One webhook subscription (without its secret)",
    params(("id" = String, Path, description = "The subscription's id")),
    responses((status = 200, description = "OK", body = SubscriptionResponse, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such subscription (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn get_sub(State(st): State<AppState>, OjsPath(id): OjsPath<String>) -> ApiResult<Response> {
    let sub = read(&st, &id).await?;
    Ok(answer(StatusCode::OK, &sub, false))
}

#[utoipa::path(
    patch,
    path = "/ojs/v1/webhooks/subscriptions/{id}",
    tag = "webhooks",
    summary = "Change a webhook subscription: the members given (`url`, `events`, `secret`, `active`, `metadata`, `filter`) replace its own",
    params(("id" = String, Path, description = "The subscription's id")),
    request_body = SubscriptionRequest,
    responses((status = 200, description = "Updated", body = SubscriptionResponse, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid change (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such subscription (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn update(
    State(st): State<AppState>,
    OjsPath(id): OjsPath<String>,
    OjsJson(req): OjsJson<SubscriptionRequest>,
) -> ApiResult<Response> {
    let sub = read(&st, &id).await?;
    let first = st.shards.first();
    let sub = updated(sub, req, first.now_ms().await?)?;
    let json = serde_json::to_string(&sub).map_err(|e| OjsError::invalid(e.to_string()))?;
    match first.webhook_sub_set(&id, &json, false, MAX_SUBSCRIPTIONS).await? {
        SubSaved::Written { .. } => Ok(answer(StatusCode::OK, &sub, false)),
        SubSaved::NotFound | SubSaved::Full(_) => Err(OjsError::not_found("webhook subscription", &id).into()),
    }
}

#[utoipa::path(
    delete,
    path = "/ojs/v1/webhooks/subscriptions/{id}",
    tag = "webhooks",
    summary = "Remove a webhook subscription; its pending deliveries end cancelled when next claimed",
    params(("id" = String, Path, description = "The subscription's id")),
    responses((status = 200, description = "The subscription as it was (without its secret)", body = SubscriptionResponse, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such subscription (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn delete_sub(State(st): State<AppState>, OjsPath(id): OjsPath<String>) -> ApiResult<Response> {
    let sub = read(&st, &id).await?;
    if !st.shards.first().webhook_sub_delete(&id).await? {
        return Err(OjsError::not_found("webhook subscription", &id).into());
    }
    Ok(answer(StatusCode::OK, &sub, false))
}

#[utoipa::path(
    get,
    path = "/ojs/v1/webhooks/subscriptions/{id}/deliveries",
    tag = "webhooks",
    summary = "A subscription's newest deliveries (kept 7 days, the newest 1,000 per shard), each with its attempts: status code, error, duration, time",
    params(("id" = String, Path, description = "The subscription's id"), DeliveryQuery),
    responses((status = 200, description = "OK", body = DeliveryList, content_type = OJS_MEDIA_TYPE), (status = 400, description = "Invalid limit (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE), (status = 404, description = "No such subscription (OJS error)", body = OjsErrorBody, content_type = OJS_MEDIA_TYPE))
)]
async fn deliveries(
    State(st): State<AppState>,
    OjsPath(id): OjsPath<String>,
    OjsQuery(q): OjsQuery<DeliveryQuery>,
) -> ApiResult<Response> {
    let limit = q.limit.unwrap_or(20);
    if !(1..=MAX_LISTED).contains(&limit) {
        return Err(OjsError::invalid(format!("limit must be 1 to {MAX_LISTED}; got {limit}")).into());
    }
    read(&st, &id).await?;
    let mut all = Vec::new();
    for store in st.shards.all() {
        all.extend(store.webhook_log(&id, limit).await?.iter().map(delivery_view));
    }
    // Newest first across shards (RFC 3339 of one clock sorts as text).
    all.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| b.id.cmp(&a.id)));
    all.truncate(limit);
    Ok(ok(DeliveryList { deliveries: all }))
}
