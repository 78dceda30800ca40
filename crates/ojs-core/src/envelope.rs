//! Validation of an incoming job envelope into a [`NewJob`]. Every rejection names the field and the
//! rule. Unknown fields are kept and echoed back, as the OJS core spec requires.

use serde_json::{Map, Value};

use crate::clock;
use crate::duration::{duration_field, parse_iso8601_ms};
use crate::error::OjsError;
use crate::job::{Backoff, NewJob, OnExhaustion, RetryPolicy};
use crate::names;
use crate::priority::PriorityModel;
use crate::unique;

/// Limits for the envelope.
#[derive(Debug, Clone, Copy)]
pub struct EnvelopeRules {
    pub priority_model: PriorityModel,
    pub max_attempts_limit: u32,
}

impl Default for EnvelopeRules {
    fn default() -> Self {
        Self {
            priority_model: PriorityModel::Seed,
            max_attempts_limit: 1_000,
        }
    }
}

fn invalid(msg: impl Into<String>) -> OjsError {
    OjsError::invalid(msg)
}

/// The longest span a client may give in milliseconds (ten years): a lease, a delay, a relative schedule
/// or expiry, an execution timeout, a retry interval. Every time computed from one stays a time that
/// RFC 3339 can write (and an `i64` of milliseconds), whatever the clock says.
pub const MAX_SPAN_MS: u64 = 10 * 365 * 24 * 3600 * 1000;

/// The longest lease: [`MAX_SPAN_MS`].
pub const MAX_VISIBILITY_MS: u64 = MAX_SPAN_MS;

/// Refuses a span longer than [`MAX_SPAN_MS`], naming the field and the maximum.
pub fn check_span(ms: u64, field: &str) -> Result<u64, OjsError> {
    if ms > MAX_SPAN_MS {
        return Err(invalid(format!(
            "{field} must be at most {MAX_SPAN_MS} ms (ten years); got {ms} ms"
        )));
    }
    Ok(ms)
}

/// Refuses a visibility timeout longer than [`MAX_VISIBILITY_MS`].
pub fn check_visibility(ms: u64, field: &str) -> Result<(), OjsError> {
    check_span(ms, field).map(drop)
}

fn opt_u64(o: &Map<String, Value>, key: &str, field: &str, min: u64) -> Result<Option<u64>, OjsError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n >= min => Ok(Some(n)),
            _ => Err(invalid(format!("{field} must be an integer >= {min}; got {v}"))),
        },
    }
}

fn opt_time(o: &Map<String, Value>, key: &str, field: &str) -> Result<Option<i64>, OjsError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        // Relative times ("+PT2S", the conformance suite's form) never reach here: the callers turn
        // them into durations that the enqueue script adds to Redis' clock, never to this pod's.
        Some(Value::String(s)) if s.starts_with('+') => {
            Err(invalid(format!("{field} cannot be relative here; got {s:?}")))
        }
        Some(Value::String(s)) => clock::parse_time(s, field).map(Some).map_err(invalid),
        Some(v) => Err(invalid(format!(
            "{field} must be an RFC 3339 timestamp string; got {v}"
        ))),
    }
}

fn retry_duration(o: &Map<String, Value>, key: &str, field: &str) -> Result<Option<u64>, OjsError> {
    duration_field(o, key, field)
        .and_then(|ms| ms.map(|ms| check_span(ms, field)).transpose())
        .map_err(|e| OjsError::unprocessable(e.message))
}

/// Parses `options.retry` (also accepted as `retry_policy`).
pub fn parse_retry(v: Option<&Value>, rules: &EnvelopeRules) -> Result<RetryPolicy, OjsError> {
    let mut p = RetryPolicy::default();
    let Some(v) = v else { return Ok(p) };
    if v.is_null() {
        return Ok(p);
    }
    let o = v
        .as_object()
        .ok_or_else(|| OjsError::unprocessable(format!("options.retry must be an object; got {v}")))?;
    if let Some(m) = o.get("max_attempts").filter(|m| !m.is_null()) {
        match m.as_u64() {
            Some(n) if n >= 1 && n <= u64::from(rules.max_attempts_limit) => p.max_attempts = n as u32,
            _ => {
                return Err(OjsError::unprocessable(format!(
                    "options.retry.max_attempts must be an integer from 1 to {}; got {m}",
                    rules.max_attempts_limit
                )))
            }
        }
    }
    if let Some(ms) = retry_duration(o, "initial_interval", "options.retry.initial_interval")? {
        p.initial_interval_ms = ms;
    }
    if let Some(ms) = retry_duration(o, "max_interval", "options.retry.max_interval")? {
        p.max_interval_ms = ms;
    }
    if let Some(c) = o.get("backoff_coefficient").filter(|c| !c.is_null()) {
        match c.as_f64() {
            Some(f) if (1.0..=100.0).contains(&f) => p.backoff_coefficient = f,
            _ => {
                return Err(OjsError::unprocessable(format!(
                    "options.retry.backoff_coefficient must be a number from 1 to 100; got {c}"
                )))
            }
        }
    }
    if let Some(j) = o.get("jitter").filter(|j| !j.is_null()) {
        p.jitter = j
            .as_bool()
            .ok_or_else(|| OjsError::unprocessable(format!("options.retry.jitter must be true or false; got {j}")))?;
    }
    for key in ["backoff_strategy", "backoff"] {
        if let Some(s) = o.get(key).filter(|s| !s.is_null()) {
            p.strategy = s.as_str().and_then(Backoff::parse).ok_or_else(|| {
                OjsError::unprocessable(format!(
                    "options.retry.{key} must be one of exponential, linear, constant; got {s}"
                ))
            })?;
        }
    }
    if let Some(list) = o.get("non_retryable_errors").filter(|l| !l.is_null()) {
        let arr = list.as_array().ok_or_else(|| {
            OjsError::unprocessable(format!(
                "options.retry.non_retryable_errors must be an array of strings; got {list}"
            ))
        })?;
        p.non_retryable_errors = arr
            .iter()
            .map(|e| e.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| OjsError::unprocessable("options.retry.non_retryable_errors must be an array of strings"))?;
    }
    if let Some(e) = o.get("on_exhaustion").filter(|e| !e.is_null()) {
        p.on_exhaustion = match e.as_str() {
            Some("discard") => OnExhaustion::Discard,
            Some("dead_letter") => OnExhaustion::DeadLetter,
            _ => {
                return Err(OjsError::unprocessable(format!(
                    "options.retry.on_exhaustion must be \"discard\" or \"dead_letter\"; got {e}"
                )))
            }
        };
    }
    if p.max_interval_ms < p.initial_interval_ms {
        p.max_interval_ms = p.initial_interval_ms;
    }
    Ok(p)
}

/// Validates one envelope. `body` is the JSON the client sent for this job.
pub fn parse(body: Value, rules: &EnvelopeRules) -> Result<NewJob, OjsError> {
    let Value::Object(mut doc) = body else {
        return Err(OjsError::new(
            crate::error::ErrorCode::InvalidPayload,
            "a job must be a JSON object",
        ));
    };
    // The seed's chain form is one job's way to start a chain, read by workflow::parse_job_form on
    // POST /jobs before the envelope comes here; anywhere else it would be stored and never run.
    if doc.get("workflow").is_some_and(|w| !w.is_null()) {
        return Err(OjsError::unprocessable(
            "workflow: the chain form (workflow: {\"chain\": [...]}) is accepted only by POST /ojs/v1/jobs, \
             for one job; create chains, groups and batches with POST /ojs/v1/workflows",
        ));
    }
    let model = rules.priority_model;

    let job_type = match doc.get("type") {
        Some(Value::String(t)) => {
            names::check_type(t).map_err(invalid)?;
            t.clone()
        }
        None | Some(Value::Null) => {
            return Err(invalid(
                "type is required (a dot-separated name such as \"email.send\")",
            ))
        }
        Some(v) => return Err(invalid(format!("type must be a string; got {v}"))),
    };
    match doc.get("args") {
        Some(Value::Array(_)) => {}
        None => {
            return Err(invalid(
                "args is required: a JSON array of positional arguments (use [] for none)",
            ))
        }
        Some(v) => return Err(invalid(format!("args must be a JSON array; got {v}"))),
    }
    // The args' schema version (ojs-job-versioning): kept in the envelope as sent, checked here.
    let version = match doc.get("version") {
        None | Some(Value::Null) => None,
        Some(v) => Some(crate::job_version::parse_version(v, "version").map_err(invalid)?),
    };
    let id_generated = matches!(doc.get("id"), None | Some(Value::Null));
    let id = match doc.get("id") {
        None | Some(Value::Null) => crate::names::new_job_id(),
        Some(Value::String(s)) => {
            names::check_job_id(s).map_err(invalid)?;
            s.clone()
        }
        Some(v) => return Err(invalid(format!("id must be a UUIDv7 string; got {v}"))),
    };
    if let Some(m) = doc.get("meta") {
        if !m.is_object() && !m.is_null() {
            return Err(invalid(format!("meta must be a JSON object; got {m}")));
        }
    }
    // The job's tenant (multi-tenancy extension): meta.tenant_id, a tenant id or absent.
    let tenant = match doc.get("meta").and_then(|m| m.get("tenant_id")) {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) => {
            names::check_tenant(t, "meta.tenant_id").map_err(invalid)?;
            Some(t.clone())
        }
        Some(v) => return Err(invalid(format!("meta.tenant_id must be a string; got {v}"))),
    };

    let empty = Map::new();
    let options = match doc.get("options") {
        None | Some(Value::Null) => empty.clone(),
        Some(Value::Object(o)) => o.clone(),
        Some(v) => return Err(invalid(format!("options must be a JSON object; got {v}"))),
    };

    // queue: options.queue (OJS core) or top-level queue (the seed's examples); both must agree.
    let mut queue = None;
    for (v, field) in [(doc.get("queue"), "queue"), (options.get("queue"), "options.queue")] {
        match v {
            None | Some(Value::Null) => {}
            Some(Value::String(q)) => {
                names::check_queue(q).map_err(|e| invalid(format!("{field}: {e}")))?;
                if queue.as_ref().is_some_and(|prev: &String| prev != q) {
                    return Err(invalid("queue and options.queue disagree; give one of them"));
                }
                queue = Some(q.clone());
            }
            Some(v) => return Err(invalid(format!("{field} must be a string; got {v}"))),
        }
    }
    let queue = queue.unwrap_or_else(|| "default".to_string());

    // priority: one field per model; the other is refused, never silently inverted.
    let (own, other) = match model {
        PriorityModel::Seed => (doc.get("priority"), options.get("priority")),
        PriorityModel::Core => (options.get("priority"), doc.get("priority")),
    };
    if other.is_some_and(|v| !v.is_null()) {
        return Err(match model {
            PriorityModel::Seed => invalid(
                "options.priority is not accepted: this server uses the seed priority model, where priority is a \
                 top-level integer from 0 to 4294967295, lower runs first, default 2 (the OJS core convention of \
                 options.priority with higher-first is available with --priority-model core)",
            ),
            PriorityModel::Core => invalid(
                "top-level priority is not accepted: this server runs the core priority model, where priority is \
                 options.priority from -100 to 100, higher runs first, default 0",
            ),
        });
    }
    let priority = match own {
        None | Some(Value::Null) => model.default_priority(),
        Some(v) => model.check(v).map_err(invalid)?,
    };

    let span = |key: &str, min: u64| -> Result<u64, OjsError> {
        let field = format!("options.{key}");
        check_span(opt_u64(&options, key, &field, min)?.unwrap_or(0), &field)
    };
    let timeout_ms = span("timeout_ms", 1)?;
    let visibility_ms = span("visibility_timeout_ms", 1)?;
    let mut delay_ms = span("delay_ms", 0)?;
    // A relative schedule ("+PT5S") becomes a delay, so it is measured on Redis' clock like every schedule.
    let relative = |v: Option<&Value>| {
        v.and_then(Value::as_str)
            .filter(|s| s.starts_with('+'))
            .map(str::to_owned)
    };
    for (field, rel) in [
        ("options.scheduled_at", relative(options.get("scheduled_at"))),
        ("options.delay_until", relative(options.get("delay_until"))),
        ("scheduled_at", relative(doc.get("scheduled_at"))),
    ] {
        if let Some(rel) = rel {
            let ms = parse_iso8601_ms(&rel[1..]).map_err(|e| invalid(format!("{field}: {e}")))?;
            delay_ms = delay_ms.max(check_span(ms, field)?);
        }
    }
    let absolute = |k: &str| {
        options
            .get(k)
            .filter(|v| !v.as_str().is_some_and(|s| s.starts_with('+')))
    };
    let abs_opts: Map<String, Value> = ["scheduled_at", "delay_until"]
        .iter()
        .filter_map(|k| Some((k.to_string(), absolute(k)?.clone())))
        .collect();
    let scheduled_at_ms = [
        opt_time(&abs_opts, "scheduled_at", "options.scheduled_at")?,
        opt_time(&abs_opts, "delay_until", "options.delay_until")?,
        match relative(doc.get("scheduled_at")) {
            Some(_) => None,
            None => opt_time(&doc, "scheduled_at", "scheduled_at")?,
        },
    ]
    .into_iter()
    .flatten()
    .next()
    .unwrap_or(0);
    // A relative expiry ("+PT5S") is resolved by the enqueue script, on the clock that stamps the job. At
    // the top level too (the OJS envelope's place, as for scheduled_at), or in options.
    let (expires_at_ms, expires_in_ms) = match top_or_option(&doc, &options, "expires_at")? {
        Some((Value::String(rel), field)) if rel.starts_with('+') => (
            0,
            check_span(
                parse_iso8601_ms(&rel[1..]).map_err(|e| invalid(format!("{field}: {e}")))?,
                &field,
            )?,
        ),
        Some((v, field)) => {
            let one = Map::from_iter([("expires_at".to_string(), v.clone())]);
            (opt_time(&one, "expires_at", &field)?.unwrap_or(0), 0)
        }
        None => (0, 0),
    };
    if let Some(tags) = options.get("tags").filter(|t| !t.is_null()) {
        let ok = tags.as_array().is_some_and(|a| a.iter().all(Value::is_string));
        if !ok {
            return Err(invalid(format!("options.tags must be an array of strings; got {tags}")));
        }
    }
    // At the top level too, like the other policies (the OJS envelope's own place for it): it was kept
    // and shown in the job, but not applied.
    let top_retry = top_or_option(&doc, &options, "retry")?.map(|(v, _)| v);
    let retry = parse_retry(top_retry.or(options.get("retry_policy")), rules)?;
    let rate_limit = top_or_option(&doc, &options, "rate_limit")?
        .map(|(v, field)| crate::ratelimit::parse(v, &field, &queue))
        .transpose()?;
    let subject = unique::Subject {
        job_type: &job_type,
        queue: &queue,
        args: doc.get("args").unwrap_or(&Value::Null),
        meta: doc.get("meta"),
    };
    let unique = top_or_option(&doc, &options, "unique")?
        .map(|(v, field)| unique::parse_unique(v, &field, &subject))
        .transpose()?;
    let dedup = match top_or_option(&doc, &options, "dedup")? {
        Some((v, field)) => unique::parse_dedup(v, &field, &subject)?,
        None => None,
    };
    let root_job = top_or_option(&doc, &options, "root_job")?
        .map(|(v, field)| unique::parse_root_job(v, &field))
        .transpose()?;

    // What we store and echo: the client's envelope, normalised, without the priority fields (the
    // priority is a separate field that PATCH can change).
    doc.insert("id".into(), Value::String(id.clone()));
    doc.insert("queue".into(), Value::String(queue.clone()));
    doc.remove("priority");
    if let Some(Value::Object(o)) = doc.get_mut("options") {
        o.remove("priority");
    }
    let doc_text = serde_json::to_string(&Value::Object(doc)).map_err(|e| invalid(e.to_string()))?;

    Ok(NewJob {
        id,
        id_generated,
        job_type,
        queue,
        priority,
        rank: model.rank(priority),
        doc: doc_text,
        retry,
        timeout_ms,
        visibility_ms,
        expires_at_ms,
        expires_in_ms,
        scheduled_at_ms,
        delay_ms,
        rate_limit,
        unique,
        dedup,
        root_job,
        tenant,
        tenant_pinned: false,
        tenancy: String::new(),
        version,
    })
}

/// A policy the envelope may carry at the top level (the seeds' examples) or in `options` (OJS core):
/// the value and the field name to quote in errors; both at once is refused.
fn top_or_option<'a>(
    doc: &'a Map<String, Value>,
    options: &'a Map<String, Value>,
    name: &str,
) -> Result<Option<(&'a Value, String)>, OjsError> {
    match (
        doc.get(name).filter(|v| !v.is_null()),
        options.get(name).filter(|v| !v.is_null()),
    ) {
        (Some(_), Some(_)) => Err(invalid(format!("give {name} or options.{name}, not both"))),
        (Some(v), None) => Ok(Some((v, name.to_string()))),
        (None, Some(v)) => Ok(Some((v, format!("options.{name}")))),
        (None, None) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn seed() -> EnvelopeRules {
        EnvelopeRules::default()
    }

    #[test]
    fn a_retry_policy_at_the_top_level_is_applied() {
        let top = parse(json!({"type": "a", "args": [], "retry": {"max_attempts": 50}}), &seed()).expect("top");
        let opt = parse(
            json!({"type": "a", "args": [], "options": {"retry": {"max_attempts": 50}}}),
            &seed(),
        )
        .expect("options");
        assert_eq!(top.retry.max_attempts, 50);
        assert_eq!(opt.retry.max_attempts, 50);
        let both =
            json!({"type": "a", "args": [], "retry": {"max_attempts": 5}, "options": {"retry": {"max_attempts": 6}}});
        assert!(parse(both, &seed()).is_err());
    }

    /// The black-box review of issue 38: a top-level expires_at (the OJS envelope's own place, as for
    /// scheduled_at) was ignored, and the job ran after it.
    #[test]
    fn an_expiry_at_the_top_level_is_applied() {
        let abs = json!({"type": "a", "args": [], "expires_at": "2099-01-01T00:00:00Z"});
        assert_eq!(parse(abs, &seed()).expect("absolute").expires_at_ms, 4_070_908_800_000);
        let rel = json!({"type": "a", "args": [], "expires_at": "+PT5S"});
        assert_eq!(parse(rel, &seed()).expect("relative").expires_in_ms, 5_000);
        let both = json!({"type": "a", "args": [], "expires_at": "+PT5S", "options": {"expires_at": "+PT6S"}});
        assert!(parse(both, &seed()).is_err());
    }

    #[test]
    fn minimal_job_gets_defaults() {
        let j = parse(json!({"type": "email.send", "args": []}), &seed()).expect("valid");
        assert_eq!(j.queue, "default");
        assert_eq!(j.priority, 2);
        assert_eq!(j.rank, 2);
        assert_eq!(j.retry, RetryPolicy::default());
        assert!(names::check_job_id(&j.id).is_ok());
    }

    #[test]
    fn unknown_fields_are_kept() {
        let j = parse(json!({"type": "a", "args": [], "x_custom": {"n": 1}}), &seed()).expect("valid");
        let doc: Value = serde_json::from_str(&j.doc).expect("json");
        assert_eq!(doc["x_custom"]["n"], 1);
    }

    #[test]
    fn seed_model_rejects_negative_and_options_priority() {
        let e = parse(json!({"type": "a", "args": [], "priority": -1}), &seed()).unwrap_err();
        assert!(e.message.contains("0 to 4294967295"), "{}", e.message);
        let e = parse(json!({"type": "a", "args": [], "options": {"priority": 5}}), &seed()).unwrap_err();
        assert!(e.message.contains("seed priority model"), "{}", e.message);
    }

    #[test]
    fn core_model_inverts_rank_and_bounds_range() {
        let rules = EnvelopeRules {
            priority_model: PriorityModel::Core,
            ..Default::default()
        };
        let j = parse(json!({"type": "a", "args": [], "options": {"priority": 10}}), &rules).expect("valid");
        assert_eq!((j.priority, j.rank), (10, -10));
        assert!(parse(json!({"type": "a", "args": [], "options": {"priority": 101}}), &rules).is_err());
        assert!(parse(json!({"type": "a", "args": [], "priority": 1}), &rules).is_err());
    }

    #[test]
    fn retry_policy_rules() {
        let ok = json!({"type": "a", "args": [], "options": {"retry": {"max_attempts": 5, "initial_interval": "PT2S",
            "backoff_coefficient": 1.5, "max_interval": "PT1M", "jitter": false, "backoff_strategy": "linear",
            "non_retryable_errors": ["Auth.*"], "on_exhaustion": "dead_letter"}}});
        let j = parse(ok, &seed()).expect("valid");
        assert_eq!(j.retry.max_attempts, 5);
        assert_eq!(j.retry.initial_interval_ms, 2_000);
        assert_eq!(j.retry.strategy, Backoff::Linear);
        assert_eq!(j.retry.on_exhaustion, OnExhaustion::DeadLetter);
        for bad in [
            json!({"max_attempts": -1}),
            json!({"backoff_coefficient": 0.5}),
            json!({"initial_interval": "soon"}),
            json!({"on_exhaustion": "explode"}),
        ] {
            let e = parse(json!({"type": "a", "args": [], "options": {"retry": bad}}), &seed()).unwrap_err();
            assert!(e.message.starts_with("options.retry."), "{}", e.message);
        }
    }

    #[test]
    fn the_chain_form_is_refused_here() {
        let e = parse(json!({"type": "a", "args": [], "workflow": {"chain": []}}), &seed()).unwrap_err();
        assert_eq!(e.code, crate::error::ErrorCode::Unprocessable, "{}", e.message);
        assert!(e.message.contains("POST /ojs/v1/workflows"), "{}", e.message);
        assert!(parse(json!({"type": "a", "args": [], "workflow": null}), &seed()).is_ok());
    }

    #[test]
    fn required_fields_are_named() {
        assert!(parse(json!({"args": []}), &seed())
            .unwrap_err()
            .message
            .contains("type"));
        assert!(parse(json!({"type": "a"}), &seed())
            .unwrap_err()
            .message
            .contains("args"));
        assert!(parse(json!({"type": "a", "args": {}}), &seed())
            .unwrap_err()
            .message
            .contains("args"));
    }
}
