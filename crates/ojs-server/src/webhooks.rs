//! Webhooks (the ojs-webhooks extension): subscriptions, and the delivery of matching lifecycle events
//! to their URLs, signed, retried, at least once.
//!
//! **Subscriptions** live on shard 0 (`P wh:subs`, id → [`StoredSubscription`] as JSON; at most
//! [`MAX_SUBSCRIPTIONS`]); every pod reads them again each second ([`SUBS_REFRESH`]).
//!
//! **From events to deliveries.** Every script writes its events as one entry of its shard's capped
//! stream `P events` (lua/includes/emit.lua). The pods read each shard's stream through one Redis
//! consumer group ([`GROUP`]): an entry is given to one pod (XREADGROUP), which matches its events
//! against the subscriptions and writes one delivery per (event, subscription) into the shard's due
//! set, acknowledging the entry in the same script (lua/webhook-fanout-1.lua). A pod that stops between
//! the read and the acknowledgement leaves the entry pending; another pod takes it over once it was
//! pending for a delivery's lease (XAUTOCLAIM) and writes the same deliveries (their ids are a hash of the event and
//! the subscription, so none is written twice). Nothing of this touches a job's script: enqueue, fetch
//! and ack write the same single XADD as before, with or without subscriptions, and a deployment with
//! no subscription reads nothing but one HLEN a second.
//!
//! **Delivery.** A pod claims due deliveries with a lease (lua/webhook-claim-1.lua moves the delivery's
//! due time to the lease's end and counts the attempt), POSTs the event (the OJS event envelope, as
//! `GET /events` shows it) with `X-OJS-Signature: sha256=<HMAC-SHA256(secret, "<timestamp>.<body>")>`
//! and `X-OJS-Timestamp` (§8.1), and records the outcome (lua/webhook-complete-1.lua,
//! lua/webhook-fail-1.lua), which only the claim holding the newest attempt may do. A pod that stops
//! mid-delivery leaves the delivery due when its lease lapses, and any pod's next claim takes it
//! over: at least once. Failed attempts are retried after the spec's delays (scaled by
//! `--webhook-retry-base-ms`) up to `--webhook-max-attempts`; a 4xx other than 429 is not retried.
//!
//! **Lag.** The stream keeps about 100,000 entries. Entries trimmed before the group read them are
//! lost to webhooks (their jobs are not affected): `Loop::fanout_shard` measures them each second
//! and counts them in `ojs_webhook_events_lost_total`, with a warning in the log.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use ojs_core::event::{Event, EVENT_KINDS};
use ojs_core::{clock, OjsError};
use ojs_store::{AfterFailure, ClaimedDelivery, GroupEntry, NewDelivery, Store};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use tokio::sync::{watch, Semaphore};
use tracing::warn;
use utoipa::ToSchema;

use crate::schemas::LifecycleEvent;
use crate::state::AppState;

/// Most subscriptions a deployment holds (every pod matches each event against all of them).
pub const MAX_SUBSCRIPTIONS: u64 = 100;
/// Most event types (or patterns) one subscription names.
pub const MAX_EVENT_TYPES: usize = 64;
/// Most queues or job types in a subscription's filter.
pub const MAX_FILTER_NAMES: usize = 100;
/// Longest URL.
pub const MAX_URL_LEN: usize = 2048;
/// A secret's length, in characters.
pub const SECRET_LEN: std::ops::RangeInclusive<usize> = 16..=256;
/// Largest `metadata`, as JSON.
pub const MAX_METADATA_BYTES: usize = 16 * 1024;
/// How long a delivery stays readable after it ended (and its subscription's log after its newest).
pub const KEEP_MS: u64 = 7 * 24 * 3600 * 1000;
/// The newest deliveries a subscription's log keeps per shard.
pub const LOG_MAX: u64 = 1_000;
/// Most deliveries `GET …/deliveries` answers with.
pub const MAX_LISTED: usize = 100;
/// The consumer group of the webhook pods on each shard's event stream.
pub const GROUP: &str = "ojs-webhooks";
/// How often a pod reads the subscriptions again.
pub const SUBS_REFRESH: Duration = Duration::from_secs(1);
/// How long a claim outlasts the request's timeout.
pub const LEASE_MARGIN_MS: u64 = 1_000;
/// The spec's delays before attempts 2, 3, … (§7.2), in seconds; `--webhook-retry-base-ms` scales them.
pub const RETRY_SCHEDULE_S: [u64; 7] = [30, 120, 600, 3_600, 14_400, 43_200, 86_400];

/// Entries read per XREADGROUP.
const READ_COUNT: usize = 100;
/// Deliveries written per fan-out script call.
const DELIVERIES_PER_CALL: usize = 1_000;
/// Deliveries one pod sends at once.
const MAX_IN_FLIGHT: usize = 32;
/// How often a pod looks for entries other pods left pending (an entry a pod read stays its own for a
/// delivery's lease, `--webhook-timeout-ms` and [`LEASE_MARGIN_MS`], then another takes it over with
/// XAUTOCLAIM), and for entries trimmed unread.
const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// How long the loop sleeps when there was nothing to do.
const POLL: Duration = Duration::from_millis(100);

/// A subscription's filter beyond the event type (§5.2): an event must be of one of the queues and one
/// of the job types named (an empty or missing list: any).
#[derive(Serialize, Deserialize, ToSchema, Clone, Debug, Default, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionFilter {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queues: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub job_types: Vec<String>,
}

/// A subscription as stored (`P wh:subs`), secret included.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct StoredSubscription {
    pub id: String,
    pub url: String,
    pub events: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<SubscriptionFilter>,
    pub active: bool,
    pub secret: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// ms, Redis' clock.
    pub created_at: i64,
    pub updated_at: i64,
}

/// A subscription as the API shows it: its secret only in the answer that created it (§6.1).
#[derive(Serialize, ToSchema, Clone, Debug)]
pub struct SubscriptionView {
    /// A UUID.
    pub id: String,
    pub url: String,
    /// Event types, `prefix.*` or `*`.
    pub events: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter: Option<SubscriptionFilter>,
    pub active: bool,
    /// The signing secret: only when the subscription is created.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Map<String, Value>>,
    /// RFC 3339.
    pub created_at: String,
    pub updated_at: String,
}

impl StoredSubscription {
    /// The API's view; `with_secret` only for the answer that created it.
    pub fn view(&self, with_secret: bool) -> SubscriptionView {
        SubscriptionView {
            id: self.id.clone(),
            url: self.url.clone(),
            events: self.events.clone(),
            filter: self.filter.clone(),
            active: self.active,
            secret: with_secret.then(|| self.secret.clone()),
            metadata: self.metadata.clone(),
            created_at: clock::format_ms(self.created_at),
            updated_at: clock::format_ms(self.updated_at),
        }
    }

    /// Whether an event goes to this subscription: active, its type named, its queue and job type in the
    /// filter.
    pub fn matches(&self, e: &Event) -> bool {
        self.active
            && self.events.iter().any(|p| type_matches(p, &e.event_type))
            && self.filter.as_ref().is_none_or(|f| {
                (f.queues.is_empty() || f.queues.contains(&e.queue))
                    && (f.job_types.is_empty() || f.job_types.contains(&e.job_type))
            })
    }
}

/// Whether event type `t` matches pattern `p`: `*`, `prefix.*`, or the type itself (§5.2).
fn type_matches(p: &str, t: &str) -> bool {
    p == "*"
        || p == t
        || p.strip_suffix(".*")
            .is_some_and(|prefix| t.split('.').next() == Some(prefix))
}

/// The body of `POST /webhooks/subscriptions` (`url` and `events` required) and of `PATCH
/// /webhooks/subscriptions/{id}` (the members given replace the subscription's). Unknown members are
/// refused.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionRequest {
    /// `http` or `https`; deliveries go only to the hosts `--webhook-hosts` allows. Required to create.
    #[serde(default)]
    #[schema(nullable = false)]
    pub url: Option<String>,
    /// 1 to 64 event types (`job.completed`), `prefix.*` (`job.*`) or `*`. Required to create.
    #[serde(default)]
    #[schema(nullable = false)]
    pub events: Option<Vec<String>>,
    /// The signing secret, 16 to 256 characters: made by the server when a create gives none, and
    /// shown only in the answer to the create.
    #[serde(default)]
    #[schema(nullable = false)]
    pub secret: Option<String>,
    /// Default true: an inactive subscription gets no new deliveries.
    #[serde(default)]
    #[schema(nullable = false)]
    pub active: Option<bool>,
    #[serde(default)]
    #[schema(value_type = Option<Object>, nullable = false)]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default)]
    #[schema(nullable = false)]
    pub filter: Option<SubscriptionFilter>,
}

/// A checked target URL: http or https, with a host, at most [`MAX_URL_LEN`] long.
pub fn check_url(url: &str) -> Result<String, OjsError> {
    if url.len() > MAX_URL_LEN {
        return Err(OjsError::invalid(format!(
            "url is longer than {MAX_URL_LEN} characters"
        )));
    }
    let parsed = reqwest::Url::parse(url).map_err(|e| OjsError::invalid(format!("url {url:?} is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(OjsError::invalid(format!(
            "url must be http or https; got {:?}",
            parsed.scheme()
        )));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(OjsError::invalid(format!("url {url:?} has no host")));
    }
    Ok(parsed.to_string())
}

/// Checked event patterns: 1 to [`MAX_EVENT_TYPES`], each once, each `*`, a `prefix.*` some event type
/// has, or an event type this server writes (`ojs_core::event_kinds`).
pub fn check_events(events: &[String]) -> Result<(), OjsError> {
    if events.is_empty() || events.len() > MAX_EVENT_TYPES {
        return Err(OjsError::invalid(format!(
            "events must name 1 to {MAX_EVENT_TYPES} event types; got {}",
            events.len()
        )));
    }
    for (i, p) in events.iter().enumerate() {
        if events[..i].contains(p) {
            return Err(OjsError::invalid(format!("events names {p:?} twice")));
        }
        let known = p == "*"
            || EVENT_KINDS.iter().any(|k| k.name == p)
            || p.strip_suffix(".*")
                .is_some_and(|prefix| EVENT_KINDS.iter().any(|k| k.name.split('.').next() == Some(prefix)));
        if !known {
            let names: Vec<&str> = EVENT_KINDS.iter().map(|k| k.name).collect();
            return Err(OjsError::invalid(format!(
                "events: {p:?} is not an event type this server writes, a `prefix.*` of one, or `*`; the types are {}",
                names.join(", ")
            )));
        }
    }
    Ok(())
}

fn check_secret(secret: &str) -> Result<(), OjsError> {
    let n = secret.chars().count();
    if !SECRET_LEN.contains(&n) || secret.chars().any(char::is_control) {
        return Err(OjsError::invalid(format!(
            "secret must be {} to {} characters, none a control character; got {n}",
            SECRET_LEN.start(),
            SECRET_LEN.end()
        )));
    }
    Ok(())
}

fn check_filter(f: &SubscriptionFilter) -> Result<(), OjsError> {
    for (what, names) in [("filter.queues", &f.queues), ("filter.job_types", &f.job_types)] {
        if names.len() > MAX_FILTER_NAMES || names.iter().any(|n| n.is_empty() || n.len() > 1024) {
            return Err(OjsError::invalid(format!(
                "{what} must hold at most {MAX_FILTER_NAMES} names of 1 to 1024 bytes"
            )));
        }
    }
    Ok(())
}

fn check_metadata(m: &Map<String, Value>) -> Result<(), OjsError> {
    if serde_json::to_vec(m).map_or(usize::MAX, |v| v.len()) > MAX_METADATA_BYTES {
        return Err(OjsError::invalid(format!(
            "metadata is larger than {MAX_METADATA_BYTES} bytes as JSON"
        )));
    }
    Ok(())
}

/// A new secret: `whsec_` and 32 random bytes in hex.
fn new_secret() -> String {
    let bytes: [u8; 32] = rand::random();
    format!("whsec_{}", hex(&bytes))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// A new subscription from a create request, stamped `now` (Redis' clock).
pub fn new_subscription(req: SubscriptionRequest, now: i64) -> Result<StoredSubscription, OjsError> {
    let (Some(url), Some(events)) = (&req.url, &req.events) else {
        return Err(OjsError::invalid("a subscription needs a url and events"));
    };
    let blank = StoredSubscription {
        id: uuid::Uuid::now_v7().to_string(),
        url: url.clone(),
        events: events.clone(),
        filter: None,
        active: true,
        secret: String::new(),
        metadata: None,
        created_at: now,
        updated_at: now,
    };
    let mut sub = updated(blank, req, now)?;
    if sub.secret.is_empty() {
        sub.secret = new_secret();
    }
    Ok(sub)
}

/// `sub` with the members a request gives, each checked, stamped `now`.
pub fn updated(
    mut sub: StoredSubscription,
    req: SubscriptionRequest,
    now: i64,
) -> Result<StoredSubscription, OjsError> {
    if let Some(url) = req.url {
        sub.url = check_url(&url)?;
    }
    if let Some(events) = req.events {
        check_events(&events)?;
        sub.events = events;
    }
    if let Some(secret) = req.secret {
        check_secret(&secret)?;
        sub.secret = secret;
    }
    if let Some(active) = req.active {
        sub.active = active;
    }
    if let Some(m) = req.metadata {
        check_metadata(&m)?;
        sub.metadata = Some(m);
    }
    if let Some(f) = req.filter {
        check_filter(&f)?;
        sub.filter = Some(f).filter(|f| *f != SubscriptionFilter::default());
    }
    sub.updated_at = now;
    Ok(sub)
}

/// A subscription id from a path: a UUID as the server writes them, else it names none (404).
pub fn check_id(id: &str) -> Result<(), OjsError> {
    match uuid::Uuid::parse_str(id) {
        Ok(u) if u.hyphenated().to_string() == id => Ok(()),
        _ => Err(OjsError::not_found("webhook subscription", id)),
    }
}

/// A stored subscription read back.
pub fn parse_stored(json: &str) -> Result<StoredSubscription, OjsError> {
    serde_json::from_str(json).map_err(|e| {
        OjsError::new(
            ojs_core::ErrorCode::Internal,
            format!("a stored webhook subscription does not read: {e}"),
        )
    })
}

/// `X-OJS-Signature`'s value: `sha256=` and the hex HMAC-SHA256 of `<timestamp>.<body>` under `secret`.
pub fn signature(secret: &str, timestamp: i64, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes a key of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body.as_bytes());
    format!("sha256={}", hex(&mac.finalize().into_bytes()))
}

/// A delivery's id: the same for the same subscription and event (shard and event id), so writing it
/// again (another pod taking over an entry) writes nothing new.
fn delivery_id(sub: &str, shard_tag: &str, event_id: &str) -> String {
    let digest = Sha256::digest(format!("{sub}\n{shard_tag}\n{event_id}").as_bytes());
    hex(&digest[..16])
}

/// The delay before attempt `attempt + 1` after attempt `attempt` failed (None: no attempt is left).
pub fn retry_delay_ms(attempt: i64, max_attempts: u32, base_ms: u64) -> Option<u64> {
    if attempt >= i64::from(max_attempts) {
        return None;
    }
    let i = usize::try_from(attempt.max(1) - 1)
        .unwrap_or(0)
        .min(RETRY_SCHEDULE_S.len() - 1);
    Some(RETRY_SCHEDULE_S[i] * base_ms / 30)
}

/// One attempt's outcome, as a delivery's record keeps it and the API shows it.
#[derive(Serialize, Deserialize, ToSchema, Clone, Debug, PartialEq)]
pub struct DeliveryAttempt {
    /// 1 for the first.
    pub attempt: i64,
    /// When it started (RFC 3339, Redis' clock at its claim).
    pub at: String,
    /// The endpoint's HTTP status, when it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_code: Option<u16>,
    /// Why it failed, when it did (a timeout, a refused connection, a host not allowed; an attempt whose
    /// pod stopped before it recorded anything shows `lease lapsed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
}

/// A delivery as `GET /webhooks/subscriptions/{id}/deliveries` shows it.
#[derive(Serialize, ToSchema, Clone, Debug)]
pub struct DeliveryView {
    /// The `X-OJS-Delivery-ID` of every attempt.
    pub id: String,
    pub subscription_id: String,
    pub event_id: String,
    pub event_type: String,
    /// `pending`, `delivering`, `retrying`, `delivered`, `dead` or `cancelled` (its subscription deleted).
    pub state: String,
    /// Attempts so far (claims: one whose pod stopped counts too).
    pub attempt_count: i64,
    pub created_at: String,
    /// When it is due next (a delivering one: when its lease lapses).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    /// Oldest first (the newest 50).
    pub attempts: Vec<DeliveryAttempt>,
}

/// A logged delivery read back: attempts that recorded nothing (their pod stopped) show as lapsed.
pub fn delivery_view(d: &ojs_store::LoggedDelivery) -> DeliveryView {
    let f = |k: &str| d.fields.get(k).cloned().unwrap_or_default();
    let ms = |k: &str| d.fields.get(k).and_then(|v| v.parse::<i64>().ok()).filter(|v| *v > 0);
    let count = ms("attempts").unwrap_or(0);
    let state = f("state");
    let mut attempts: Vec<DeliveryAttempt> = d.attempts.iter().filter_map(|a| serde_json::from_str(a).ok()).collect();
    // An attempt counted by a claim that recorded nothing, and not the one in flight now.
    let in_flight = if state == "delivering" { count } else { 0 };
    for n in 1..=count {
        if n != in_flight && !attempts.iter().any(|a| a.attempt == n) {
            attempts.push(DeliveryAttempt {
                attempt: n,
                at: String::new(),
                status_code: None,
                error: Some("lease lapsed: the pod that held the attempt stopped before it recorded an outcome".into()),
                duration_ms: None,
            });
        }
    }
    attempts.sort_by_key(|a| a.attempt);
    DeliveryView {
        id: d.id.clone(),
        subscription_id: f("sub"),
        event_id: f("event_id"),
        event_type: f("event_type"),
        state,
        attempt_count: count,
        created_at: ms("created_at").map(clock::format_ms).unwrap_or_default(),
        next_attempt_at: ms("next_at").map(clock::format_ms),
        ended_at: ms("ended_at").map(clock::format_ms),
        attempts,
    }
}

/// The subscriptions a pod delivers for, read from shard 0.
pub async fn load_subscriptions(st: &AppState) -> Result<Vec<StoredSubscription>, crate::error::ApiError> {
    let mut subs = st
        .shards
        .first()
        .webhook_subs()
        .await?
        .iter()
        .map(|(_, json)| parse_stored(json))
        .collect::<Result<Vec<_>, _>>()?;
    subs.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
    Ok(subs)
}

/// What one pod's delivery loop keeps between rounds.
struct Loop {
    st: AppState,
    /// This pod's consumer name in the group.
    consumer: String,
    client: reqwest::Client,
    subs: Arc<Vec<StoredSubscription>>,
    subs_read: Option<Instant>,
    swept: HashMap<usize, Instant>,
    in_flight: Arc<Semaphore>,
    failing: bool,
    /// The subscriptions went from some to none on this pod's watch: it still claims (and so cancels)
    /// the deliveries left due, until no shard has any.
    draining: bool,
}

/// How a delivery follows redirects (§7.1: up to 3): only to hosts `--webhook-hosts` allows, so an
/// allowed endpoint cannot send the server on to one that is not.
fn redirects(hosts: crate::config::WebhookHosts) -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(move |attempt| {
        let host = attempt.url().host_str().unwrap_or("").to_string();
        if attempt.previous().len() > 3 {
            attempt.error("more than 3 redirects")
        } else if hosts.allows(&host) {
            attempt.follow()
        } else {
            attempt.error(format!(
                "a redirect to host {host:?}, which --webhook-hosts does not allow"
            ))
        }
    })
}

/// The webhook loop of a pod: fan-out and delivery on every shard, until shutdown.
pub async fn run(st: AppState, mut shutdown: watch::Receiver<bool>) {
    let client = match reqwest::Client::builder()
        .timeout(Duration::from_millis(st.config.webhook_timeout_ms))
        .redirect(redirects(st.config.webhook_hosts.clone()))
        .user_agent(concat!("OJS-Webhook/1.0 ojs-redis-rs/", env!("CARGO_PKG_VERSION")))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            warn!(error = %e, "webhooks: no HTTP client; deliveries are off on this pod");
            return;
        }
    };
    let mut lp = Loop {
        st,
        consumer: format!("pod-{}", uuid::Uuid::now_v7()),
        client,
        subs: Arc::new(Vec::new()),
        subs_read: None,
        swept: HashMap::new(),
        in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
        failing: false,
        draining: false,
    };
    loop {
        let busy = match lp.round().await {
            Ok(busy) => {
                lp.failing = false;
                busy
            }
            Err(e) => {
                if !lp.failing {
                    warn!(error = %e, "webhooks: a round failed; will keep retrying");
                }
                lp.failing = true;
                false
            }
        };
        let pause = if busy { Duration::from_millis(5) } else { POLL };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = shutdown.changed() => {}
        }
        if *shutdown.borrow() {
            return;
        }
    }
}

impl Loop {
    /// One round: read the subscriptions when due, then fan out and claim on each shard. True when a
    /// shard had more to do than one round took.
    async fn round(&mut self) -> Result<bool, ojs_store::StoreError> {
        if self.subs_read.is_none_or(|t| t.elapsed() >= SUBS_REFRESH) {
            self.read_subs().await?;
        }
        let st = self.st.clone();
        if self.subs.is_empty() {
            if self.draining {
                let mut left = false;
                for store in st.shards.all() {
                    left |= self.claim_shard(store).await? || self.in_flight.available_permits() == 0;
                }
                self.draining = left;
            }
            return Ok(false);
        }
        self.draining = false;
        let mut busy = false;
        // Every shard's new entries first, then the subscriptions again when any came: an event written
        // after a subscription's 201 is matched against a list that has it (read with the 1 s refresh
        // alone, a new or changed subscription missed up to a second of events).
        let mut read = Vec::new();
        for store in st.shards.all() {
            let (entries, full) = self.read_shard(store).await?;
            busy |= full;
            read.push(entries);
        }
        if read.iter().any(|e| !e.is_empty()) {
            self.read_subs().await?;
        }
        for (store, entries) in st.shards.all().iter().zip(&read) {
            self.fanout(store, entries).await?;
            busy |= self.claim_shard(store).await?;
        }
        Ok(busy)
    }

    /// Reads the subscriptions from shard 0: one HLEN when there is none (a deployment without
    /// webhooks reads nothing else), else all of them.
    async fn read_subs(&mut self) -> Result<(), ojs_store::StoreError> {
        let subs = if self.st.shards.first().webhook_sub_count().await? == 0 {
            Vec::new()
        } else {
            load_subscriptions(&self.st)
                .await
                .map_err(|e| ojs_store::StoreError::Reply(e.0.message))?
        };
        self.draining |= subs.is_empty() && !self.subs.is_empty();
        self.subs = Arc::new(subs);
        self.subs_read = Some(Instant::now());
        Ok(())
    }

    /// The shard's unread entries, and (every few seconds) the entries other pods left pending, to
    /// turn into deliveries; counts entries trimmed unread. `full`: a full read came back.
    async fn read_shard(&mut self, store: &Arc<Store>) -> Result<(Vec<GroupEntry>, bool), ojs_store::StoreError> {
        let shard = store.shard_index();
        let mut pending = Vec::new();
        if self.swept.get(&shard).is_none_or(|t| t.elapsed() >= SWEEP_EVERY) {
            self.swept.insert(shard, Instant::now());
            let lag = store.webhook_group_lag(GROUP).await?;
            if lag.trimmed_unread > 0 {
                metrics::counter!("ojs_webhook_events_lost_total").increment(lag.trimmed_unread);
                warn!(
                    shard,
                    entries = lag.trimmed_unread,
                    "webhooks: the event stream's cap trimmed entries before any pod read them; their events are not delivered"
                );
            }
            let idle_ms = self.st.config.webhook_timeout_ms + LEASE_MARGIN_MS;
            let (taken, trimmed) = store
                .webhook_group_autoclaim(GROUP, &self.consumer, idle_ms, READ_COUNT)
                .await?;
            if trimmed > 0 {
                metrics::counter!("ojs_webhook_events_lost_total").increment(trimmed);
                warn!(
                    shard,
                    entries = trimmed,
                    "webhooks: pending entries were trimmed before they were turned into deliveries"
                );
            }
            pending = taken;
        }
        let mut entries = match store.webhook_group_read(GROUP, &self.consumer, READ_COUNT).await? {
            Some(e) => e,
            None => {
                // A shard added since the subscriptions were created, or a group lost with its stream.
                store.webhook_group_create(GROUP, false).await?;
                return Ok((pending, false));
            }
        };
        let full = entries.len() == READ_COUNT;
        pending.append(&mut entries);
        Ok((pending, full))
    }

    /// Writes the deliveries of `entries` and acknowledges them (the acknowledgement travels with the
    /// last call, so an entry is acknowledged only with all its deliveries written).
    async fn fanout(&self, store: &Arc<Store>, entries: &[GroupEntry]) -> Result<(), ojs_store::StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        let tag = store.keys().tag().to_string();
        let mut deliveries = Vec::new();
        for entry in entries {
            for (event_id, event) in &entry.events {
                let mut body: Option<String> = None;
                for sub in self.subs.iter().filter(|s| s.matches(event)) {
                    let body = body
                        .get_or_insert_with(|| {
                            serde_json::to_string(&LifecycleEvent::of(event_id, event)).unwrap_or_default()
                        })
                        .clone();
                    deliveries.push(NewDelivery {
                        id: delivery_id(&sub.id, &tag, event_id),
                        sub: sub.id.clone(),
                        event_type: event.event_type.clone(),
                        event_id: event_id.clone(),
                        body,
                    });
                }
            }
        }
        let ids: Vec<String> = entries.iter().map(|e| e.id.clone()).collect();
        let chunks: Vec<&[NewDelivery]> = deliveries.chunks(DELIVERIES_PER_CALL).collect();
        let last = chunks.len().saturating_sub(1);
        for (i, chunk) in chunks.iter().enumerate() {
            let acks: &[String] = if i == last { &ids } else { &[] };
            let (created, _) = store.webhook_fanout(GROUP, acks, KEEP_MS, LOG_MAX, chunk).await?;
            metrics::counter!("ojs_webhook_deliveries_created_total").increment(created);
        }
        if chunks.is_empty() {
            store.webhook_fanout(GROUP, &ids, KEEP_MS, LOG_MAX, &[]).await?;
        }
        Ok(())
    }

    /// Claims as many due deliveries of the shard as this pod has room for and sends each in its own
    /// task. True when it filled its room, or claimed any while draining. A pod with no room (slow
    /// endpoints hold all its requests) claims nothing and is not busy: the next poll looks again.
    async fn claim_shard(&self, store: &Arc<Store>) -> Result<bool, ojs_store::StoreError> {
        let room = self.in_flight.available_permits();
        if room == 0 {
            return Ok(false);
        }
        let lease_ms = self.st.config.webhook_timeout_ms + LEASE_MARGIN_MS;
        let (now, claimed) = store.webhook_claim(room as u32, lease_ms).await?;
        let full = claimed.len() == room || (self.draining && !claimed.is_empty());
        for d in claimed {
            let Ok(permit) = Arc::clone(&self.in_flight).try_acquire_owned() else {
                // Cannot happen (room was free); the claim lapses and is taken again.
                break;
            };
            let job = Delivery {
                st: self.st.clone(),
                store: Arc::clone(store),
                client: self.client.clone(),
                subs: Arc::clone(&self.subs),
                claim: d,
                started_at: now,
            };
            tokio::spawn(async move {
                if let Err(e) = job.send().await {
                    warn!(error = %e, "webhooks: recording a delivery's outcome failed; its lease will lapse and it will be tried again");
                }
                drop(permit);
            });
        }
        Ok(full)
    }
}

/// One claimed delivery being sent.
struct Delivery {
    st: AppState,
    store: Arc<Store>,
    client: reqwest::Client,
    subs: Arc<Vec<StoredSubscription>>,
    claim: ClaimedDelivery,
    /// The claim's time (ms, Redis' clock): the attempt's time and its `X-OJS-Timestamp`.
    started_at: i64,
}

impl Delivery {
    async fn send(self) -> Result<(), ojs_store::StoreError> {
        let c = &self.claim;
        let cfg = &self.st.config;
        let sub = match self.subs.iter().find(|s| s.id == c.sub) {
            Some(s) => Some(s.clone()),
            // Created since this pod last read them, or deleted: ask shard 0.
            None => match self.st.shards.first().webhook_sub(&c.sub).await? {
                Some(json) => parse_stored(&json).ok(),
                None => None,
            },
        };
        let mut attempt = DeliveryAttempt {
            attempt: c.attempt,
            at: clock::format_ms(self.started_at),
            status_code: None,
            error: None,
            duration_ms: None,
        };
        let Some(sub) = sub else {
            attempt.error = Some("the subscription was deleted".into());
            return self.fail(&attempt, AfterFailure::Cancelled, "cancelled").await;
        };
        let host = reqwest::Url::parse(&sub.url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_string))
            .unwrap_or_default();
        if !cfg.webhook_hosts.allows(&host) {
            attempt.error = Some(format!(
                "host {host:?} is not one --webhook-hosts (OJS_WEBHOOK_HOSTS) allows"
            ));
            return self.fail(&attempt, AfterFailure::Dead, "dead").await;
        }
        let timestamp = self.started_at.div_euclid(1000);
        let started = Instant::now();
        let sent = self
            .client
            .post(&sub.url)
            .header("content-type", "application/json")
            .header("x-ojs-event-type", &c.event_type)
            .header("x-ojs-delivery-id", &c.id)
            .header("x-ojs-subscription-id", &sub.id)
            .header("x-ojs-timestamp", timestamp.to_string())
            .header("x-ojs-signature", signature(&sub.secret, timestamp, &c.body))
            .body(c.body.clone())
            .send()
            .await;
        let took = started.elapsed();
        attempt.duration_ms = Some(took.as_millis() as u64);
        metrics::histogram!("ojs_webhook_delivery_duration_seconds").record(took.as_secs_f64());
        let retry = retry_delay_ms(c.attempt, cfg.webhook_max_attempts, cfg.webhook_retry_base_ms);
        let retry_or_dead = |delay: Option<u64>| delay.map_or(AfterFailure::Dead, AfterFailure::RetryIn);
        match sent {
            Ok(resp) => {
                let status = resp.status();
                attempt.status_code = Some(status.as_u16());
                if status.is_success() {
                    let outcome = serde_json::to_string(&attempt).unwrap_or_default();
                    self.store.webhook_complete(&c.id, c.attempt, &outcome, KEEP_MS).await?;
                    metrics::counter!("ojs_webhook_deliveries_total", "outcome" => "delivered").increment(1);
                    return Ok(());
                }
                attempt.error = Some(format!("the endpoint answered {status}"));
                let after = if status.as_u16() == 429 {
                    // Retry-After (seconds) when given, within the schedule's longest delay.
                    let asked = resp
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .map(|s| (s * 1000).min(RETRY_SCHEDULE_S[6] * 1000));
                    retry_or_dead(retry.map(|d| asked.unwrap_or(d)))
                } else if status.is_client_error() {
                    // §7.1: a client error is not retried.
                    AfterFailure::Dead
                } else {
                    retry_or_dead(retry)
                };
                let label = if matches!(after, AfterFailure::Dead) {
                    "dead"
                } else {
                    "failed"
                };
                self.fail(&attempt, after, label).await
            }
            Err(e) => {
                attempt.error = Some(if e.is_timeout() {
                    format!("no answer within {} ms", cfg.webhook_timeout_ms)
                } else {
                    // reqwest's own text names the URL only; the causes (a refused connection, a
                    // redirect not followed) are its sources.
                    let mut why = format!("request failed: {e}");
                    let mut source = std::error::Error::source(&e);
                    while let Some(s) = source {
                        why.push_str(&format!(": {s}"));
                        source = s.source();
                    }
                    why
                });
                let after = retry_or_dead(retry);
                let label = if matches!(after, AfterFailure::Dead) {
                    "dead"
                } else {
                    "failed"
                };
                self.fail(&attempt, after, label).await
            }
        }
    }

    async fn fail(
        &self,
        attempt: &DeliveryAttempt,
        after: AfterFailure,
        label: &'static str,
    ) -> Result<(), ojs_store::StoreError> {
        let outcome = serde_json::to_string(attempt).unwrap_or_default();
        self.store
            .webhook_fail(&self.claim.id, self.claim.attempt, &outcome, after, KEEP_MS)
            .await?;
        metrics::counter!("ojs_webhook_deliveries_total", "outcome" => label).increment(1);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_the_specs_hmac_of_timestamp_dot_body() {
        // RFC 4231's test case 2 key and message, split as "<timestamp>.<body>" would be.
        let sig = signature("Jefe", 1, "what do ya want for nothing?");
        assert!(sig.starts_with("sha256=") && sig.len() == 7 + 64, "{sig}");
        let mut mac = Hmac::<Sha256>::new_from_slice(b"Jefe").expect("key");
        mac.update(b"1.what do ya want for nothing?");
        assert_eq!(sig, format!("sha256={}", hex(&mac.finalize().into_bytes())));
        assert_ne!(sig, signature("Jefe", 2, "what do ya want for nothing?"));
    }

    #[test]
    fn patterns_match_types_by_name_prefix_or_all() {
        assert!(type_matches("*", "workflow.completed"));
        assert!(type_matches("job.*", "job.completed"));
        assert!(!type_matches("job.*", "jobs.completed"));
        assert!(type_matches("job.failed", "job.failed"));
        assert!(!type_matches("job.failed", "job.failed.x"));
        assert!(check_events(&["job.*".into(), "workflow.completed".into(), "*".into()]).is_ok());
        for bad in [
            vec![],
            vec!["job.nope".into()],
            vec!["nope.*".into()],
            vec!["job.completed".into(); 2],
        ] {
            assert!(check_events(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn urls_are_http_or_https_with_a_host() {
        assert!(check_url("https://example.com/hook").is_ok());
        assert!(check_url("http://127.0.0.1:9/x").is_ok());
        for bad in [
            "ftp://example.com/",
            "example.com",
            "https://",
            "file:///etc/passwd",
            "javascript:alert(1)",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn retries_follow_the_specs_table_scaled_and_stop_at_the_bound() {
        assert_eq!(retry_delay_ms(1, 8, 30_000), Some(30_000));
        assert_eq!(retry_delay_ms(2, 8, 30_000), Some(120_000));
        assert_eq!(retry_delay_ms(7, 8, 30_000), Some(86_400_000));
        assert_eq!(retry_delay_ms(8, 8, 30_000), None);
        assert_eq!(retry_delay_ms(1, 8, 30), Some(30));
        assert_eq!(retry_delay_ms(3, 20, 30), Some(600));
        assert_eq!(retry_delay_ms(15, 20, 30), Some(86_400));
    }

    #[test]
    fn a_delivery_id_is_stable_for_its_event_and_subscription() {
        let a = delivery_id("s", "main", "1-0.1");
        assert_eq!(a, delivery_id("s", "main", "1-0.1"));
        assert_ne!(a, delivery_id("s", "main.1", "1-0.1"));
        assert_ne!(a, delivery_id("t", "main", "1-0.1"));
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    }
}
