//! Cron entries (OJS cron spec): registration, the API view, and the firing of due ticks.
//!
//! An entry lives in Redis (`P cron:<name>`, see lua/cron-set-1.lua) with its next_run_at computed
//! here from the expression and the time zone (`ojs_core::cron`, on Redis' clock). Every API pod's timer
//! reads the due entries and fires each due tick through the enqueue script's `cron` mode, which claims
//! the tick by compare-and-set on next_run_at in the same script that creates the job: however many
//! pods run, a tick fires once, and a crash cannot fire it twice or lose the job of a claimed tick.
//! Missed ticks (every pod down, Redis down): the first evaluation after the outage fires **one**
//! catch-up occurrence and moves next_run_at to the next future tick (spec §7.3).

use ojs_core::cron::Schedule;
use ojs_core::envelope::{self, EnvelopeRules};
use ojs_core::{clock, OjsError};
use ojs_store::{CronFired, JobFields};
use serde_json::{json, Map, Value};

use crate::state::AppState;

/// What a registration says, validated.
pub struct Registration {
    pub name: String,
    pub schedule: Schedule,
    /// The stored definition (JSON): expression, timezone, overlap_policy, enabled, description,
    /// job_template.
    pub def: Value,
    pub enabled: bool,
}

pub const OVERLAP_POLICIES: [&str; 4] = ["skip", "allow", "cancel_previous", "enqueue"];

/// Entry names go into Redis keys and URLs.
pub fn check_name(name: &str) -> Result<(), OjsError> {
    ojs_core::names::check_cron_name(name).map_err(OjsError::invalid)
}

fn string_field<'a>(o: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, OjsError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(OjsError::invalid(format!("{key} must be a string; got {v}"))),
    }
}

/// Parses `POST /cron`: the conformance suite's shape (`expression`, `job_template`) or the spec's
/// (`cron`, with `type`, `args`, `options` at the top level).
pub fn parse_registration(body: &Value, rules: &EnvelopeRules) -> Result<Registration, OjsError> {
    let o = body
        .as_object()
        .ok_or_else(|| OjsError::invalid("a cron entry must be a JSON object"))?;
    let name = string_field(o, "name")?
        .ok_or_else(|| OjsError::invalid("name is required"))?
        .to_string();
    check_name(&name)?;
    let expression = match (string_field(o, "expression")?, string_field(o, "cron")?) {
        (Some(e), None) | (None, Some(e)) => e.to_string(),
        (Some(a), Some(b)) if a == b => a.to_string(),
        (Some(_), Some(_)) => {
            return Err(OjsError::invalid(
                "give the schedule once: expression or cron, not both",
            ))
        }
        (None, None) => {
            return Err(OjsError::invalid(
                "expression is required (a cron expression such as \"0 9 * * *\")",
            ))
        }
    };
    let timezone = string_field(o, "timezone")?.unwrap_or("UTC").to_string();
    let schedule = Schedule::parse(&expression, &timezone).map_err(OjsError::invalid)?;
    let overlap = string_field(o, "overlap_policy")?.unwrap_or("skip").to_string();
    if !OVERLAP_POLICIES.contains(&overlap.as_str()) {
        return Err(OjsError::invalid(format!(
            "overlap_policy must be one of {}; got {overlap:?}",
            OVERLAP_POLICIES.join(", ")
        )));
    }
    let enabled = match o.get("enabled") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(v) => return Err(OjsError::invalid(format!("enabled must be true or false; got {v}"))),
    };
    let description = string_field(o, "description")?.map(str::to_owned);
    let template = match o.get("job_template") {
        Some(Value::Object(t)) => {
            if o.contains_key("type") {
                return Err(OjsError::invalid(
                    "give the job once: job_template, or type/args/options, not both",
                ));
            }
            Value::Object(t.clone())
        }
        Some(v) if !v.is_null() => return Err(OjsError::invalid(format!("job_template must be an object; got {v}"))),
        _ => {
            let mut t = Map::new();
            for k in ["type", "args", "options", "priority", "rate_limit", "meta"] {
                if let Some(v) = o.get(k) {
                    t.insert(k.into(), v.clone());
                }
            }
            if !t.contains_key("type") {
                return Err(OjsError::invalid(
                    "job_template (or type) is required: the job each tick creates",
                ));
            }
            Value::Object(t)
        }
    };
    // A cron entry's args default to [] (spec §2.2), where a job envelope must carry them.
    let mut template = template;
    if let Some(t) = template.as_object_mut() {
        t.entry("args").or_insert_with(|| json!([]));
    }
    // Fail fast: the template must be a job this server accepts, as every tick will create it.
    job_for_tick(&template, &name, &overlap, 0, rules).map_err(|e| OjsError {
        message: format!("job_template: {}", e.message),
        ..e
    })?;
    let def = json!({
        "expression": expression,
        "timezone": timezone,
        "overlap_policy": overlap,
        "enabled": enabled,
        "description": description,
        "job_template": template,
    });
    Ok(Registration {
        name,
        schedule,
        def,
        enabled,
    })
}

/// The job a tick creates: the template, with `meta.cron_name` and `meta.cron_triggered_at` (spec
/// §6.3) and, for overlap_policy `enqueue`, a concurrency-1 rate limit on key `cron.<name>` so queued
/// runs never execute at once.
fn job_for_tick(
    template: &Value,
    name: &str,
    overlap: &str,
    tick_ms: i64,
    rules: &EnvelopeRules,
) -> Result<ojs_core::job::NewJob, OjsError> {
    let mut job = template.clone();
    let Some(obj) = job.as_object_mut() else {
        return Err(OjsError::invalid("job_template must be an object"));
    };
    obj.remove("id");
    let meta = obj.entry("meta").or_insert_with(|| json!({}));
    if let Some(m) = meta.as_object_mut() {
        m.insert("cron_name".into(), json!(name));
        m.insert("cron_triggered_at".into(), json!(clock::format_ms(tick_ms)));
    }
    if overlap == "enqueue" {
        if obj.contains_key("rate_limit") || obj.get("options").is_some_and(|o| o.get("rate_limit").is_some()) {
            return Err(OjsError::unprocessable(
                "overlap_policy enqueue limits the entry's jobs to one at a time with a rate limit of its own; the template may not carry another",
            ));
        }
        obj.insert(
            "rate_limit".into(),
            json!({ "key": format!("cron.{name}"), "concurrency": 1 }),
        );
    }
    envelope::parse(job, rules)
}

fn ms(f: &JobFields, k: &str) -> Option<i64> {
    f.get(k).and_then(|v| v.parse().ok())
}

/// The API view of an entry as stored.
pub fn entry_json(name: &str, f: &JobFields) -> Value {
    let def: Value = f
        .get("def")
        .and_then(|d| serde_json::from_str(d).ok())
        .unwrap_or_else(|| json!({}));
    let time = |k: &str| ms(f, k).map(clock::format_ms);
    json!({
        "name": name,
        "expression": def["expression"],
        "cron": def["expression"],
        "timezone": def["timezone"],
        "overlap_policy": def["overlap_policy"],
        "enabled": def["enabled"],
        "description": def["description"],
        "job_template": def["job_template"],
        "next_run_at": time("next_run_at"),
        "last_run_at": time("last_run_at"),
        "run_count": ms(f, "run_count").unwrap_or(0),
        "created_at": time("created_at"),
        "updated_at": time("updated_at"),
    })
}

/// Entries fired per timer round at most; more wait for the next round.
const FIRE_BATCH: usize = 100;

/// Fires every due tick (one per entry: a catch-up after an outage is one occurrence). Returns how
/// long until the next tick is due, by Redis' clock.
pub async fn fire_due(st: &AppState) -> Result<Option<i64>, ojs_store::StoreError> {
    let (now, due, next_due) = st.store.cron_due(FIRE_BATCH).await?;
    for (name, f) in due {
        let Some(expected) = f.get("next_run_at").cloned() else {
            continue;
        };
        let tick = expected.parse::<i64>().unwrap_or(now);
        let def: Value = f
            .get("def")
            .and_then(|d| serde_json::from_str(d).ok())
            .unwrap_or_default();
        let expression = def["expression"].as_str().unwrap_or_default();
        let timezone = def["timezone"].as_str().unwrap_or("UTC");
        let overlap = def["overlap_policy"].as_str().unwrap_or("skip");
        let next = Schedule::parse(expression, timezone)
            .ok()
            .and_then(|s| s.next_after_ms(now.max(tick)));
        let job = match job_for_tick(&def["job_template"], &name, overlap, tick, &st.rules) {
            Ok(j) => j,
            Err(e) => {
                // A template that stopped being valid (e.g. the priority model changed): advance the
                // entry without a job rather than retry the same tick forever.
                tracing::warn!(cron = %name, error = %e.message, "cron template no longer valid; tick skipped");
                let _ = st
                    .store
                    .cron_set(&name, f.get("def").map(String::as_str).unwrap_or("{}"), next)
                    .await;
                continue;
            }
        };
        match st.store.cron_fire(&job, &name, &expected, next, overlap).await? {
            CronFired::Created => crate::metrics::job_event("enqueued", &job.queue, &job.job_type),
            CronFired::Skipped(prev) => {
                tracing::info!(cron = %name, previous = %prev, "cron tick skipped: previous run still active")
            }
            CronFired::QueueFull => {
                tracing::warn!(cron = %name, queue = %job.queue, "cron tick dropped: queue at its backpressure bound")
            }
            CronFired::Deduplicated(existing) => {
                tracing::info!(cron = %name, existing = %existing, "cron tick skipped: its unique policy met an existing job")
            }
            CronFired::Taken => {}
        }
    }
    // A tick fired above moved its entry's next_run_at later; the next round re-reads the set.
    Ok(next_due.map(|d| (d - now).max(0)))
}
