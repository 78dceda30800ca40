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
use ojs_store::{CronFired, Fields, StoreError};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use utoipa::ToSchema;

use crate::schemas::{enum_names, variant, variant_name};
use crate::state::AppState;
use crate::tenant::ActingTenant;

/// What a registration says, validated.
pub struct Registration {
    pub name: String,
    /// The tenant the registering request acts as: the entry's owner (its template stamped with it, its
    /// ticks' jobs pinned to it, as `POST /jobs` stamps and pins a job).
    pub tenant: Option<String>,
    pub schedule: Schedule,
    /// The stored definition.
    pub def: CronDef,
    pub enabled: bool,
    /// The queue of the template's jobs: the entry lives on its shard.
    pub queue: String,
}

/// An entry's definition as stored (JSON in `P cron:<name>`).
#[derive(Serialize, Deserialize, Default)]
pub struct CronDef {
    expression: String,
    timezone: String,
    overlap_policy: OverlapPolicy,
    enabled: bool,
    description: Option<String>,
    job_template: Value,
}

/// What a tick does while the previous run of the entry is still active.
#[derive(Serialize, Deserialize, ToSchema, Clone, Copy, PartialEq, Eq, Default, Debug)]
#[serde(rename_all = "snake_case")]
pub enum OverlapPolicy {
    #[default]
    Skip,
    Allow,
    CancelPrevious,
    Enqueue,
}

/// `POST /cron`: the conformance suite's shape (`expression`, `job_template`) or the spec's (`cron`,
/// with `type`, `args`, `options` at the top level).
#[derive(Deserialize, ToSchema)]
pub struct CronRequest {
    /// Lowercase, dotted (such as `reports.daily`).
    name: String,
    /// A cron expression (5 or 6 fields, or `@hourly`…).
    #[schema(nullable = false)]
    expression: Option<String>,
    /// The same as `expression`.
    #[schema(nullable = false)]
    cron: Option<String>,
    /// An IANA time zone (default `UTC`).
    #[schema(nullable = false)]
    timezone: Option<String>,
    /// Default `skip`.
    #[schema(value_type = Option<OverlapPolicy>, nullable = false)]
    overlap_policy: Option<String>,
    /// Default true.
    #[schema(nullable = false)]
    enabled: Option<bool>,
    description: Option<String>,
    /// The job each tick creates (`type`, `args`, `options`…; `args` default to `[]`).
    #[schema(value_type = Option<Object>, nullable = false)]
    job_template: Option<Map<String, Value>>,
    /// Instead of `job_template`: the job's fields at the top level.
    #[serde(rename = "type")]
    #[schema(value_type = Option<String>, nullable = false)]
    job_type: Option<Value>,
    #[schema(value_type = Option<Vec<Object>>, nullable = false)]
    args: Option<Value>,
    #[schema(value_type = Option<Object>, nullable = false)]
    options: Option<Value>,
    #[schema(value_type = Option<i64>, nullable = false)]
    priority: Option<Value>,
    #[schema(value_type = Option<Object>, nullable = false)]
    rate_limit: Option<Value>,
    #[schema(value_type = Option<Object>, nullable = false)]
    meta: Option<Value>,
}

/// A cron entry as the API shows it.
#[derive(Serialize, ToSchema)]
pub struct CronEntry {
    name: String,
    expression: String,
    /// The same as `expression`.
    cron: String,
    timezone: String,
    overlap_policy: OverlapPolicy,
    enabled: bool,
    description: Option<String>,
    /// The job each tick creates.
    #[schema(value_type = Object)]
    job_template: Value,
    /// The next tick (`null` while disabled).
    #[schema(format = DateTime)]
    next_run_at: Option<String>,
    #[schema(format = DateTime)]
    last_run_at: Option<String>,
    /// Ticks that created a job.
    run_count: i64,
    #[schema(format = DateTime)]
    created_at: Option<String>,
    #[schema(format = DateTime)]
    updated_at: Option<String>,
}

/// Entry names go into Redis keys and URLs.
pub fn check_name(name: &str) -> Result<(), OjsError> {
    ojs_core::names::check_cron_name(name).map_err(OjsError::invalid)
}

/// Stores a registration on the shard of its template's queue: (created, the entry as stored). On a
/// deployment of several shards a name has one home, and an entry found on another shard is a 422. A
/// request acting as a tenant replaces only an entry of its own (409 otherwise, nothing written).
pub async fn save(st: &AppState, reg: &Registration) -> Result<(bool, Fields), crate::error::ApiError> {
    // The template's args against its type's schema (the registry), as an enqueue's are: every tick
    // creates that job.
    let job = job_for_tick(&reg.def.job_template, &reg.name, reg.def.overlap_policy, 0, &st.rules)?;
    st.shards.first().check_args_now(&[job]).await.map_err(|e| {
        let e = crate::error::ApiError::from(e).0;
        crate::error::ApiError(OjsError {
            message: format!("job_template: {}", e.message),
            ..e
        })
    })?;
    let def = serde_json::to_string(&reg.def).map_err(|e| OjsError::invalid(e.to_string()))?;
    // The entry lives on the shard of its template's queue, so a tick's job and the entry's advance are
    // one script call.
    let store = st.shards.for_queue(&reg.queue).await?;
    let shard = store.shard_index();
    // On a deployment of several shards a name has one home: racing registrations for two shards are
    // decided by the claim on shard 0, and an entry never moves (its run history and overlap check stay
    // with it). `held` keeps the claim until the entry is written.
    let held = st
        .shards
        .claim(vec![(format!("cron:{}", reg.name), shard)], |_, s| {
            OjsError::new(
                ojs_core::ErrorCode::Conflict,
                format!(
                    "cron entry {:?} is being registered for a queue on shard {s} by another request; try again",
                    reg.name
                ),
            )
        })
        .await?;
    for other in st.shards.all().iter().filter(|o| o.shard_index() != shard) {
        if other.cron_exists(&reg.name).await? {
            return Err(OjsError::unprocessable(format!(
                "cron entry {:?} lives on shard {}, with the queue of its template; queue {:?} lives on shard {shard}. \
                 An entry does not move between shards (its run count, last job and overlap check live there): \
                 DELETE /ojs/v1/cron/{} and register it again (its history starts over), or pin the queue to \
                 shard {} (--queue-shard {}={}) before its first job",
                reg.name,
                other.shard_index(),
                reg.queue,
                reg.name,
                other.shard_index(),
                reg.queue,
                other.shard_index(),
            ))
            .with_details(json!({"cron": reg.name, "home_shard": other.shard_index(), "queue_shard": shard}))
            .into());
        }
    }
    let next = if reg.enabled {
        // Computed on Redis' clock, like every time the server acts on.
        let now = store.now_ms().await?;
        reg.schedule.next_after_ms(now)
    } else {
        None
    };
    let saved = store.cron_set(&reg.name, &def, next, reg.tenant.as_deref()).await?;
    held.release().await;
    let Some(saved) = saved else {
        return Err(OjsError::new(
            ojs_core::ErrorCode::Conflict,
            format!(
                "cron entry {:?} exists and is not this tenant's: a tenant replaces only its own entries; choose another name",
                reg.name
            ),
        )
        .with_details(json!({"cron": reg.name}))
        .into());
    };
    let entry = store.cron_get(&reg.name).await?.unwrap_or_default();
    Ok((saved.created, entry))
}

/// An entry's owner (the hash's `tenant`, lua/cron-set-1.lua).
fn owner(f: &Fields) -> Option<&str> {
    f.get("tenant").map(String::as_str)
}

/// The entry named `name`, when the request sees it (another tenant's is answered as absent: None).
pub async fn entry(st: &AppState, tenant: &ActingTenant, name: &str) -> Result<Option<Fields>, StoreError> {
    let found = st.shards.on_any(|s| async move { s.cron_get(name).await }).await?;
    Ok(found.filter(|f| tenant.sees_owner(owner(f))))
}

/// Removes the entry named `name` when the request sees it: the entry as it was, or None (a request
/// acting as a tenant removes only its own: lua/cron-delete-1.lua checks the owner in the same step).
pub async fn remove(st: &AppState, tenant: &ActingTenant, name: &str) -> Result<Option<Fields>, StoreError> {
    st.shards
        .on_any(|s| async move { s.cron_delete(name, tenant.name()).await })
        .await
}

/// A page of the entries the request sees, in name order: (total, page). A request acting as a tenant
/// reads every entry and keeps its own (O(entries), one pipeline per shard and 1,000 entries); one
/// acting as none reads just the page.
pub async fn page(
    st: &AppState,
    tenant: &ActingTenant,
    offset: u64,
    count: u64,
) -> Result<(u64, Vec<(String, Fields)>), StoreError> {
    if tenant.name().is_none() {
        return st.shards.cron_page(offset, count).await;
    }
    const CHUNK: u64 = 1_000;
    let mut own = Vec::new();
    for s in st.shards.all() {
        let mut at = 0;
        loop {
            let (total, part) = s.cron_list(at, CHUNK).await?;
            own.extend(part.into_iter().filter(|(_, f)| tenant.sees_owner(owner(f))));
            at += CHUNK;
            if at >= total {
                break;
            }
        }
    }
    own.sort_by(|a, b| a.0.cmp(&b.0));
    let total = own.len() as u64;
    Ok((
        total,
        own.into_iter().skip(offset as usize).take(count as usize).collect(),
    ))
}

/// Validates a `POST /cron` body, for a request acting as `tenant`: the template is stamped with the
/// tenant by the rule `POST /jobs` applies to its body (`ActingTenant::stamp`: a template naming another
/// tenant is refused the same way).
pub fn parse_registration(
    req: CronRequest,
    rules: &EnvelopeRules,
    tenant: &ActingTenant,
) -> Result<Registration, OjsError> {
    let name = req.name;
    check_name(&name)?;
    let expression = match (req.expression, req.cron) {
        (Some(e), None) | (None, Some(e)) => e,
        (Some(a), Some(b)) if a == b => a,
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
    let timezone = req.timezone.unwrap_or_else(|| "UTC".to_string());
    let schedule = Schedule::parse(&expression, &timezone).map_err(OjsError::invalid)?;
    let overlap = match req.overlap_policy {
        None => OverlapPolicy::default(),
        Some(p) => variant(&p).ok_or_else(|| {
            OjsError::invalid(format!(
                "overlap_policy must be one of {}; got {p:?}",
                enum_names::<OverlapPolicy>().join(", ")
            ))
        })?,
    };
    let enabled = req.enabled.unwrap_or(true);
    let template = match req.job_template {
        Some(t) => {
            if req.job_type.is_some() {
                return Err(OjsError::invalid(
                    "give the job once: job_template, or type/args/options, not both",
                ));
            }
            Value::Object(t)
        }
        None => {
            let mut t = Map::new();
            for (k, v) in [
                ("type", req.job_type),
                ("args", req.args),
                ("options", req.options),
                ("priority", req.priority),
                ("rate_limit", req.rate_limit),
                ("meta", req.meta),
            ] {
                if let Some(v) = v {
                    t.insert(k.into(), v);
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
    tenant.stamp(&mut template)?;
    // Fail fast: the template must be a job this server accepts, as every tick will create it.
    let queue = job_for_tick(&template, &name, overlap, 0, rules)
        .map_err(|e| OjsError {
            message: format!("job_template: {}", e.message),
            ..e
        })?
        .queue;
    let def = CronDef {
        expression,
        timezone,
        overlap_policy: overlap,
        enabled,
        description: req.description,
        job_template: template,
    };
    Ok(Registration {
        name,
        tenant: tenant.name().map(str::to_owned),
        schedule,
        def,
        enabled,
        queue,
    })
}

/// The job a tick creates: the template, with `meta.cron_name` and `meta.cron_triggered_at` (spec
/// §6.3) and, for overlap_policy `enqueue`, a concurrency-1 rate limit on key `cron.<name>` so queued
/// runs never execute at once.
fn job_for_tick(
    template: &Value,
    name: &str,
    overlap: OverlapPolicy,
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
    if overlap == OverlapPolicy::Enqueue {
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

fn ms(f: &Fields, k: &str) -> Option<i64> {
    f.get(k).and_then(|v| v.parse().ok())
}

/// An entry's stored definition.
fn stored_def(f: &Fields) -> CronDef {
    f.get("def")
        .and_then(|d| serde_json::from_str(d).ok())
        .unwrap_or_default()
}

/// The API view of an entry as stored.
pub fn entry_view(name: &str, f: &Fields) -> CronEntry {
    let def = stored_def(f);
    let time = |k: &str| ms(f, k).map(clock::format_ms);
    CronEntry {
        name: name.to_string(),
        cron: def.expression.clone(),
        expression: def.expression,
        timezone: def.timezone,
        overlap_policy: def.overlap_policy,
        enabled: def.enabled,
        description: def.description,
        job_template: def.job_template,
        next_run_at: time("next_run_at"),
        last_run_at: time("last_run_at"),
        run_count: ms(f, "run_count").unwrap_or(0),
        created_at: time("created_at"),
        updated_at: time("updated_at"),
    }
}

/// Entries fired per timer round at most; more wait for the next round.
const FIRE_BATCH: usize = 100;

/// Fires every due tick of the entries on shard `store` (one per entry: a catch-up after an outage is
/// one occurrence). An entry lives on the shard of its template's queue, so its job is written by the
/// same script that advances it. Returns how long until the next tick is due, by Redis' clock.
pub async fn fire_due(st: &AppState, store: &ojs_store::Store) -> Result<Option<i64>, ojs_store::StoreError> {
    let (now, due, next_due) = store.cron_due(FIRE_BATCH).await?;
    for (name, f) in due {
        let Some(expected) = f.get("next_run_at").cloned() else {
            continue;
        };
        let tick = expected.parse::<i64>().unwrap_or(now);
        let def = stored_def(&f);
        let next = Schedule::parse(&def.expression, &def.timezone)
            .ok()
            .and_then(|s| s.next_after_ms(now.max(tick)));
        let overlap = def.overlap_policy;
        let owner = f.get("tenant").map(String::as_str);
        let job = match job_for_tick(&def.job_template, &name, overlap, tick, &st.rules) {
            Ok(mut j) => match st.shards.place_jobs(std::slice::from_mut(&mut j)).await {
                Ok(at) if at[0] == store.shard_index() => {
                    // An entry of a tenant makes that tenant's jobs, whatever the queue's tenancy
                    // setting derives (as the header pins a POST /jobs).
                    j.tenant_pinned = owner.is_some();
                    Ok(j)
                }
                Ok(at) => Err(OjsError::unprocessable(format!(
                    "the entry is on shard {} but its queue {} lives on shard {}; register it again",
                    store.shard_index(),
                    j.queue,
                    at[0]
                ))),
                Err(crate::error::ApiError(e)) if e.code == ojs_core::ErrorCode::BackendUnavailable => {
                    return Err(ojs_store::StoreError::Unavailable(e.message))
                }
                Err(crate::error::ApiError(e)) => Err(e),
            },
            Err(e) => Err(e),
        };
        let job = match job {
            Ok(j) => j,
            Err(e) => {
                // A template that stopped being valid (e.g. the priority model changed): advance the
                // entry without a job rather than retry the same tick forever.
                tracing::warn!(cron = %name, error = %e.message, "cron template no longer valid; tick skipped");
                let _ = store
                    .cron_set(&name, f.get("def").map(String::as_str).unwrap_or("{}"), next, owner)
                    .await;
                continue;
            }
        };
        let fired = store
            .cron_fire(
                &job,
                ojs_store::CronTick {
                    name: &name,
                    expected: &expected,
                    next,
                    overlap: &variant_name(&overlap),
                },
            )
            .await;
        let fired = match fired {
            Ok(f) => f,
            Err(e @ ojs_store::StoreError::Unavailable(_)) => return Err(e),
            // The script refused this tick (it wrote nothing): this entry's tick is skipped and the
            // round goes on, so one entry no script can fire never holds back the others (entries are
            // read in order of their next tick, and each round would meet it first again).
            Err(e) => {
                tracing::error!(cron = %name, error = %e, "cron tick refused by Redis; tick skipped");
                let _ = store
                    .cron_set(&name, f.get("def").map(String::as_str).unwrap_or("{}"), next, owner)
                    .await;
                continue;
            }
        };
        match fired {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_policies_are_stored_and_read_by_their_names() {
        let names = enum_names::<OverlapPolicy>();
        assert_eq!(names, ["skip", "allow", "cancel_previous", "enqueue"]);
        for n in names {
            let p: OverlapPolicy = variant(&n).expect("a policy");
            assert_eq!(variant_name(&p), n);
        }
        assert_eq!(variant::<OverlapPolicy>("never"), None);
    }
}
