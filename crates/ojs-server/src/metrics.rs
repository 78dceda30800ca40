//! Prometheus metrics at `GET /metrics`.
//!
//! Two kinds: counters and histograms this node records as it serves (per node, as Prometheus expects:
//! sum them across pods), and gauges read from Redis at scrape time (the same on every node, since Redis
//! holds the truth). Label cardinality is bounded: `priority` is the exact value from -20 to 20 and
//! "other" beyond, and a scrape reports at most [`MAX_QUEUES`] queues and [`MAX_PRIORITIES`] priorities
//! per queue (the rest summed under priority="other"). A scrape costs Redis a fixed number of round
//! trips however many queues and keys there are: the queue names, one pipeline of queue counts, one
//! pipeline of per-priority counts, and one script call for the rate-limit keys (`rl-gauges-1.lua`).

use std::sync::OnceLock;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::formatting::{write_help_line, write_metric_line, write_type_line};
use metrics_exporter_prometheus::{LabelSet, PrometheusBuilder, PrometheusHandle};

use crate::error::ApiResult;
use crate::state::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub const MAX_QUEUES: usize = 200;
pub const MAX_PRIORITIES: usize = 20;
/// Rate-limit keys are user data: a scrape reports the first 100 keys (lexicographic), and a node labels
/// histogram samples with at most 100 distinct keys, "other" after that.
pub const MAX_KEYS: usize = 100;

static SEEN_KEYS: std::sync::Mutex<Option<std::collections::HashSet<String>>> = std::sync::Mutex::new(None);

static SEEN_JOBS: std::sync::Mutex<Option<std::collections::HashSet<(String, String)>>> = std::sync::Mutex::new(None);

/// Bounded (queue, type) labels: job types are user data, so a node labels at most 200 distinct
/// pairs and counts the rest under ("other", "other").
pub fn job_labels(queue: &str, job_type: &str) -> [(&'static str, String); 2] {
    let mut seen = SEEN_JOBS.lock().unwrap_or_else(|e| e.into_inner());
    let set = seen.get_or_insert_with(Default::default);
    let pair = (queue.to_string(), job_type.to_string());
    let (q, t) = if set.contains(&pair) || set.len() < 200 {
        set.insert(pair.clone());
        pair
    } else {
        ("other".to_string(), "other".to_string())
    };
    [("queue", q), ("type", t)]
}

/// Counts a job lifecycle step (`enqueued`, `started`, `completed`, `failed`, `discarded`).
pub fn job_event(step: &'static str, queue: &str, job_type: &str) {
    let name = match step {
        "enqueued" => "ojs_jobs_enqueued_total",
        "started" => "ojs_jobs_started_total",
        "completed" => "ojs_jobs_completed_total",
        "failed" => "ojs_jobs_failed_total",
        _ => "ojs_jobs_discarded_total",
    };
    metrics::counter!(name, &job_labels(queue, job_type)).increment(1);
}

/// The bounded `key` label for samples this node records.
pub fn key_label(key: &str) -> String {
    let mut seen = SEEN_KEYS.lock().unwrap_or_else(|e| e.into_inner());
    let set = seen.get_or_insert_with(Default::default);
    if set.contains(key) || set.len() < MAX_KEYS {
        set.insert(key.to_string());
        key.to_string()
    } else {
        "other".to_string()
    }
}

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process-wide recorder once (several servers in one test process share it).
pub fn install() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets(&[0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0, 300.0, 3600.0])
            .expect("static buckets")
            .build_recorder();
        let handle = recorder.handle();
        // Another recorder may already be installed by an embedding program; then ours only renders.
        let _ = metrics::set_global_recorder(recorder);
        handle
    })
}

/// The bounded `priority` label.
pub fn priority_label(p: i64) -> String {
    if (-20..=20).contains(&p) {
        p.to_string()
    } else {
        "other".to_string()
    }
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(scrape))
}

#[utoipa::path(
    get,
    path = "/metrics",
    tag = "system",
    summary = "Prometheus metrics",
    responses((status = 200, description = "The Prometheus text format (0.0.4)", body = String, content_type = "text/plain"))
)]
async fn scrape(State(st): State<AppState>, headers: axum::http::HeaderMap) -> ApiResult<Response> {
    let mut out = install().render();
    // Gauges read from Redis are built for this scrape, so a queue or key that is gone leaves no stale
    // series behind; the recorder's crate writes them in the same format.
    let mut depth = Family::new(
        "ojs_queue_depth",
        "Jobs in a queue by state (read from Redis at scrape time)",
        "gauge",
    );
    let mut by_priority = Family::new(
        "ojs_queue_available_by_priority",
        "Available jobs per priority level",
        "gauge",
    );
    let mut rl_active = Family::new(
        "ojs_rate_limit_active",
        "Jobs holding a concurrency slot of a rate-limit key",
        "gauge",
    );
    let mut rl_waiting = Family::new(
        "ojs_rate_limit_waiting",
        "Available jobs of a rate-limit key (waiting in its lanes)",
        "gauge",
    );
    let mut rl_limit = Family::new(
        "ojs_rate_limit_limit",
        "The limit FETCH applies to a rate-limit key now, by strategy (the policy's, under adaptation and any override)",
        "gauge",
    );
    let mut rl_policy = Family::new(
        "ojs_rate_limit_policy_limit",
        "The limit of a rate-limit key's policy (its newest job's), by strategy",
        "gauge",
    );
    let mut rl_exceeded = Family::new(
        "ojs_rate_limit_exceeded_total",
        "Blocking episodes of a rate-limit key, by strategy",
        "counter",
    );

    let mut names = st.shards.queue_names().await?;
    names.truncate(MAX_QUEUES);
    let counts = st
        .shards
        .per_queue(&names, |s, qs| async move { s.queue_counts(&qs).await })
        .await?;
    for c in counts {
        for (state, n) in [
            ("available", c.jobs.available),
            ("active", c.jobs.active),
            ("scheduled", c.jobs.scheduled),
        ] {
            depth.sample(&[("queue", c.name.as_str()), ("state", state)], n);
        }
    }
    let per_priority = st
        .shards
        .per_queue(&names, |s, qs| async move { s.priority_counts_of(&qs).await })
        .await?;
    for (q, per) in names.iter().zip(per_priority) {
        let mut other = 0u64;
        for (i, (p, n)) in per.iter().enumerate() {
            let label = priority_label(*p);
            if i < MAX_PRIORITIES && label != "other" {
                by_priority.sample(&[("queue", q.as_str()), ("priority", label.as_str())], *n);
            } else {
                other += n;
            }
        }
        if other > 0 {
            by_priority.sample(&[("queue", q.as_str()), ("priority", "other")], other);
        }
    }
    let mut gauges = Vec::new();
    for s in st.shards.all() {
        gauges.extend(s.rate_limit_gauges(MAX_KEYS).await?);
    }
    for s in gauges {
        let k = s.key.as_str();
        rl_active.sample(&[("key", k)], s.active);
        rl_waiting.sample(&[("key", k)], s.waiting);
        for (strategy, now, policy) in [
            ("concurrency", s.concurrency, s.policy_concurrency),
            ("rate", s.rate_limit, s.policy_rate_limit),
        ] {
            if let Some(n) = now {
                rl_limit.sample(&[("key", k), ("strategy", strategy)], n);
            }
            if let Some(n) = policy {
                rl_policy.sample(&[("key", k), ("strategy", strategy)], n);
            }
        }
        for (field, n) in &s.stats {
            if let Some(strategy) = field.strip_prefix("exceeded_") {
                rl_exceeded.sample(&[("key", k), ("strategy", strategy)], n.parse::<u64>().unwrap_or(0));
            }
        }
    }
    // Tenants are user data too: the 100 most recently active (multi-tenancy §11.2 asks for a bound).
    let mut t_enqueued = Family::new(
        "ojs_tenant_jobs_enqueued_total",
        "Jobs enqueued per tenant (the most recently active tenants, counted over their last 30 days)",
        "counter",
    );
    let mut t_dispatched = Family::new(
        "ojs_tenant_jobs_dispatched_total",
        "Claims of a tenant's jobs by FETCH (its fair share at work)",
        "counter",
    );
    let mut t_share = Family::new(
        "ojs_tenant_share_last_hour",
        "A tenant's share of the claims of tenants' jobs over the last hour (0 to 1; its fair share at work now)",
        "gauge",
    );
    let recent = crate::tenant::recent(&st, MAX_KEYS).await?;
    let hour = crate::tenant::last_hour(&st, recent.iter().map(|t| t.tenant.as_str())).await?;
    for (t, h) in recent.iter().zip(&hour) {
        t_enqueued.sample(&[("tenant_id", t.tenant.as_str())], t.counts.enqueued);
        t_dispatched.sample(&[("tenant_id", t.tenant.as_str())], t.counts.dispatched);
        t_share.sample(&[("tenant_id", t.tenant.as_str())], h.share);
    }
    for family in [
        depth,
        by_priority,
        rl_active,
        rl_waiting,
        rl_limit,
        rl_policy,
        rl_exceeded,
        t_enqueued,
        t_dispatched,
        t_share,
    ] {
        family.write(&mut out);
    }
    Ok(([(header::CONTENT_TYPE, content_type(&headers))], out).into_response())
}

/// One metric family read from Redis at scrape time: its samples, in the order they were read, written
/// after the recorded metrics in the Prometheus text format (0.0.4) by metrics-exporter-prometheus'
/// own formatting (labels escaped as the recorded metrics' are).
struct Family {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
    /// Each sample's labels and value, written as the value's `Display` (a count, or a share).
    samples: Vec<(LabelSet, String)>,
}

impl Family {
    fn new(name: &'static str, help: &'static str, kind: &'static str) -> Self {
        Self {
            name,
            help,
            kind,
            samples: Vec::new(),
        }
    }

    fn sample(&mut self, labels: &[(&'static str, &str)], value: impl std::fmt::Display) {
        let labels: Vec<metrics::Label> = labels
            .iter()
            .map(|(k, v)| metrics::Label::new(*k, v.to_string()))
            .collect();
        let key = metrics::Key::from_parts(self.name, labels);
        self.samples.push((
            LabelSet::from_key_and_global(&key, &Default::default()),
            value.to_string(),
        ));
    }

    /// HELP and TYPE, then each sample; nothing for a family without samples.
    fn write(self, out: &mut String) {
        if self.samples.is_empty() {
            return;
        }
        write_help_line(out, self.name, None, None, self.help);
        write_type_line(out, self.name, None, None, self.kind);
        for (labels, value) in &self.samples {
            write_metric_line::<&str, &str>(out, self.name, None, labels, None, value, None);
        }
    }
}

/// The Prometheus text format (0.0.4) is served as `text/plain`, which every Prometheus version parses
/// as that format; the `version=0.0.4` parameter is added when the scraper's Accept names it (as
/// Prometheus does), and left out otherwise (ext-observability expects exactly `text/plain`).
fn content_type(headers: &axum::http::HeaderMap) -> &'static str {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    if accept.contains("version=0.0.4") {
        "text/plain; version=0.0.4"
    } else {
        "text/plain"
    }
}
