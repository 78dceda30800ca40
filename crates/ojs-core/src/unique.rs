//! Duplicates: the unique-jobs policy (`options.unique`, the public ojs-unique-jobs shape, checked at
//! enqueue) and MediaWiki's run-time deduplication (`options.dedup`, `options.root_job`, checked at
//! FETCH). All three reduce a job to a *fingerprint*, the lowercase hex SHA-256 of a canonical JSON
//! text ([`fingerprint`]); the store turns a fingerprint into a Redis key, so any content is key-safe.
//!
//! The dimensions of a fingerprint (`keys`, `args_keys`, `meta_keys`) mean the same in `unique` and in
//! `dedup`: [`Dimensions`] parses them for both. A job of a tenant stores each of its fingerprints
//! scoped to its tenant ([`tenant_scoped`]): one tenant's jobs never meet another's.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::clock;
use crate::duration::duration_field;
use crate::error::OjsError;
use crate::state::STATES;

/// The states a duplicate is looked for in when the policy names none (ojs-unique-jobs §6.1).
pub const DEFAULT_STATES: [&str; 5] = ["available", "active", "scheduled", "retryable", "pending"];
/// The dimensions a fingerprint may use (`type` is always part of it).
pub const DIMENSIONS: [&str; 4] = ["type", "queue", "args", "meta"];
/// Longest root-job signature accepted (MediaWiki's are 40-character SHA-1 hex strings).
pub const MAX_SIGNATURE_LEN: usize = 1024;

/// What an enqueue does when it meets a duplicate in one of the policy's states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnConflict {
    /// 409 `duplicate` naming the existing job; nothing is written (spec default).
    Reject,
    /// 200 with the existing job; nothing is written.
    Ignore,
    /// The existing job is cancelled (`job.cancelled`) and the new one enqueued, with its own priority.
    Replace,
    /// As `Replace`, but a scheduled existing job's run time is kept for the new job.
    ReplaceExceptSchedule,
    /// As `Ignore`, and the existing job takes the newcomer's priority when that runs sooner and the
    /// existing job still waits (available or scheduled): the priority seed's opt-in (§9.3).
    RaisePriority,
}

impl OnConflict {
    pub const ALL: [OnConflict; 5] = [
        Self::Reject,
        Self::Ignore,
        Self::Replace,
        Self::ReplaceExceptSchedule,
        Self::RaisePriority,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Reject => "reject",
            Self::Ignore => "ignore",
            Self::Replace => "replace",
            Self::ReplaceExceptSchedule => "replace_except_schedule",
            Self::RaisePriority => "raise_priority",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

/// A validated `options.unique`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UniquePolicy {
    /// The uniqueness key ([`fingerprint`] of the selected dimensions).
    pub key: String,
    /// States an existing job must be in to count as a duplicate.
    pub states: Vec<String>,
    /// How long the constraint lasts from the holder's creation; 0 = as long as the holder is in `states`.
    pub period_ms: u64,
    pub on_conflict: OnConflict,
    /// Whether `queue` is not one of the key's dimensions, so jobs of different queues can collide (on a
    /// deployment of several shards, only queues of one shard can be checked together).
    pub spans_queues: bool,
}

/// A validated `options.root_job` (MediaWiki's `rootJobSignature` / `rootJobTimestamp`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootJob {
    /// [`fingerprint`] of the signature.
    pub key: String,
    /// The signature as given (for messages; only `key` is stored).
    pub signature: String,
    /// The root run this job belongs to (epoch ms); 0 = the job's own creation time (Redis' clock).
    pub timestamp_ms: i64,
    /// This job is the root: when it starts, it records its timestamp for its signature
    /// (MediaWiki's `deduplicateRootJob`).
    pub is_root: bool,
}

/// What a fingerprint is computed from.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    pub job_type: &'a str,
    pub queue: &'a str,
    pub args: &'a Value,
    pub meta: Option<&'a Value>,
}

fn invalid(msg: impl Into<String>) -> OjsError {
    OjsError::invalid(msg)
}

fn object<'a>(v: &'a Value, field: &str, allowed: &[&str]) -> Result<&'a Map<String, Value>, OjsError> {
    let o = v
        .as_object()
        .ok_or_else(|| invalid(format!("{field} must be an object; got {v}")))?;
    if let Some(k) = o.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(invalid(format!(
            "{field}.{k} is not a field of {field}; its fields are {}",
            allowed.join(", ")
        )));
    }
    Ok(o)
}

/// A list of distinct strings, each from `allowed` when given.
fn string_list(
    o: &Map<String, Value>,
    key: &str,
    field: &str,
    allowed: Option<&[&str]>,
) -> Result<Option<Vec<String>>, OjsError> {
    let Some(v) = o.get(key).filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let rule = match allowed {
        Some(a) => format!("an array of distinct values from {}", a.join(", ")),
        None => "an array of distinct strings".to_string(),
    };
    let bad = || invalid(format!("{field}.{key} must be {rule}; got {v}"));
    let items = v.as_array().ok_or_else(bad)?;
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let s = item.as_str().ok_or_else(bad)?;
        if allowed.is_some_and(|a| !a.contains(&s)) || out.iter().any(|o| o == s) {
            return Err(bad());
        }
        out.push(s.to_string());
    }
    Ok(Some(out))
}

/// The dimension fields shared by `unique` and `dedup`: `keys`, `args_keys`, `meta_keys`.
struct Dimensions {
    keys: Vec<String>,
    args_keys: Option<Vec<String>>,
    meta_keys: Option<Vec<String>>,
}

impl Dimensions {
    fn parse(o: &Map<String, Value>, field: &str, default_keys: &[&str]) -> Result<Self, OjsError> {
        let keys = string_list(o, "keys", field, Some(&DIMENSIONS))?
            .unwrap_or_else(|| default_keys.iter().map(|k| k.to_string()).collect());
        let args_keys = string_list(o, "args_keys", field, None)?;
        let meta_keys = string_list(o, "meta_keys", field, None)?;
        let has = |d: &str| keys.iter().any(|k| k == d);
        if has("meta") && meta_keys.as_ref().is_none_or(Vec::is_empty) {
            return Err(invalid(format!(
                "{field}.meta_keys must name at least one key of meta when {field}.keys contains \"meta\""
            )));
        }
        if args_keys.is_some() && !has("args") {
            return Err(invalid(format!("{field}.args_keys needs \"args\" in {field}.keys")));
        }
        if meta_keys.is_some() && !has("meta") {
            return Err(invalid(format!("{field}.meta_keys needs \"meta\" in {field}.keys")));
        }
        Ok(Self {
            keys,
            args_keys,
            meta_keys,
        })
    }

    /// The fingerprint of `s` under these dimensions (ojs-unique-jobs §4: `type` always included).
    fn fingerprint(&self, s: &Subject, field: &str) -> Result<String, OjsError> {
        let mut dims = Map::new();
        dims.insert("type".into(), Value::String(s.job_type.to_string()));
        if self.keys.iter().any(|k| k == "queue") {
            dims.insert("queue".into(), Value::String(s.queue.to_string()));
        }
        if self.keys.iter().any(|k| k == "args") {
            let args = match &self.args_keys {
                None => s.args.clone(),
                // args is positional (an array): the named keys are taken from its object elements,
                // the first element that has a key giving its value.
                Some(names) => {
                    let mut picked = Map::new();
                    for name in names {
                        let v = s
                            .args
                            .as_array()
                            .into_iter()
                            .flatten()
                            .find_map(|a| a.as_object().and_then(|o| o.get(name)))
                            .ok_or_else(|| {
                                invalid(format!("{field}.args_keys names {name:?}, which no object in args has"))
                            })?;
                        picked.insert(name.clone(), v.clone());
                    }
                    Value::Object(picked)
                }
            };
            dims.insert("args".into(), args);
        }
        if let Some(names) = &self.meta_keys {
            let meta = s.meta.and_then(Value::as_object);
            let picked: Map<String, Value> = names
                .iter()
                .filter_map(|n| Some((n.clone(), meta?.get(n)?.clone())))
                .collect();
            dims.insert("meta".into(), Value::Object(picked));
        }
        Ok(fingerprint(&Value::Object(dims)))
    }
}

/// Parses `options.unique` (or top-level `unique`).
pub fn parse_unique(v: &Value, field: &str, s: &Subject) -> Result<UniquePolicy, OjsError> {
    let o = object(
        v,
        field,
        &["keys", "args_keys", "meta_keys", "period", "states", "on_conflict"],
    )?;
    let dims = Dimensions::parse(o, field, &["type"])?;
    let states = string_list(o, "states", field, Some(&STATES))?
        .unwrap_or_else(|| DEFAULT_STATES.iter().map(|s| s.to_string()).collect());
    if states.is_empty() {
        return Err(invalid(format!(
            "{field}.states must name at least one of {}",
            STATES.join(", ")
        )));
    }
    let period_ms = duration_field(o, "period", &format!("{field}.period"))?.unwrap_or(0);
    if o.get("period").is_some_and(|p| !p.is_null()) && period_ms == 0 {
        return Err(invalid(format!(
            "{field}.period must be longer than 0 ms; got {}",
            o["period"]
        )));
    }
    let on_conflict = match o.get("on_conflict").filter(|c| !c.is_null()) {
        None => OnConflict::Reject,
        Some(c) => c.as_str().and_then(OnConflict::parse).ok_or_else(|| {
            let names: Vec<&str> = OnConflict::ALL.iter().map(|c| c.as_str()).collect();
            invalid(format!(
                "{field}.on_conflict must be one of {}; got {c}",
                names.join(", ")
            ))
        })?,
    };
    Ok(UniquePolicy {
        key: dims.fingerprint(s, field)?,
        states,
        period_ms,
        on_conflict,
        spans_queues: !dims.keys.iter().any(|k| k == "queue"),
    })
}

/// A validated `options.dedup`: MediaWiki's deduplication info, checked at FETCH.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dedup {
    /// The deduplication fingerprint ([`fingerprint`] of the selected dimensions).
    pub key: String,
    /// `queue` is not among the dimensions, so twins may wait in any queue: on a deployment of several
    /// shards, the job type is then checked on one shard only (as for [`UniquePolicy::spans_queues`]).
    pub spans_queues: bool,
}

/// Parses `options.dedup`: `true` (the job's type and args, MediaWiki's default deduplication info),
/// `false` (none), or `{keys, args_keys, meta_keys}` (`keys` defaults to `["type", "args"]`).
pub fn parse_dedup(v: &Value, field: &str, s: &Subject) -> Result<Option<Dedup>, OjsError> {
    const DEFAULT_KEYS: [&str; 2] = ["type", "args"];
    let dims = match v {
        Value::Bool(false) => return Ok(None),
        Value::Bool(true) => Dimensions::parse(&Map::new(), field, &DEFAULT_KEYS)?,
        Value::Object(_) => Dimensions::parse(
            object(v, field, &["keys", "args_keys", "meta_keys"])?,
            field,
            &DEFAULT_KEYS,
        )?,
        _ => {
            return Err(invalid(format!(
                "{field} must be true, false or an object {{keys, args_keys, meta_keys}}; got {v}"
            )))
        }
    };
    Ok(Some(Dedup {
        key: dims.fingerprint(s, field)?,
        spans_queues: !dims.keys.iter().any(|k| k == "queue"),
    }))
}

/// Parses `options.root_job`: `{signature, timestamp?, is_root?}`.
pub fn parse_root_job(v: &Value, field: &str) -> Result<RootJob, OjsError> {
    let o = object(v, field, &["signature", "timestamp", "is_root"])?;
    let signature = match o.get("signature") {
        Some(Value::String(s)) if !s.is_empty() && s.len() <= MAX_SIGNATURE_LEN => s,
        other => {
            return Err(invalid(format!(
                "{field}.signature is required: a string of 1 to {MAX_SIGNATURE_LEN} bytes naming the root job; got {}",
                other.unwrap_or(&Value::Null)
            )))
        }
    };
    let timestamp_ms = match o.get("timestamp") {
        None | Some(Value::Null) => 0,
        Some(t) => t
            .as_str()
            .and_then(clock::parse_ms)
            .filter(|ms| *ms > 0)
            .ok_or_else(|| {
                invalid(format!(
                    "{field}.timestamp must be an RFC 3339 timestamp after 1970 such as 2026-02-13T12:00:00Z; got {t}"
                ))
            })?,
    };
    let is_root = match o.get("is_root") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(b) => return Err(invalid(format!("{field}.is_root must be true or false; got {b}"))),
    };
    Ok(RootJob {
        key: fingerprint(&Value::String(signature.clone())),
        signature: signature.clone(),
        timestamp_ms,
        is_root,
    })
}

/// The fingerprint a job of `tenant` stores for `fp` (its uniqueness key, dedup fingerprint or root
/// signature): `fp` itself for a job without a tenant (so theirs, and the locks Redis holds for them,
/// never change), else the [`fingerprint`] of `{"fingerprint": fp, "tenant": tenant}`: two tenants'
/// identical jobs never share a key, so neither can see, answer with, replace or supersede the other's.
pub fn tenant_scoped(fp: &str, tenant: Option<&str>) -> String {
    match tenant {
        None => fp.to_string(),
        Some(t) => {
            let mut scope = Map::new();
            scope.insert("fingerprint".into(), Value::String(fp.to_string()));
            scope.insert("tenant".into(), Value::String(t.to_string()));
            fingerprint(&Value::Object(scope))
        }
    }
}

/// The lowercase hex SHA-256 of `v`'s canonical JSON text ([`canonical_json`]).
pub fn fingerprint(v: &Value) -> String {
    let digest = Sha256::digest(canonical_json(v).as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Canonical JSON (ojs-unique-jobs §4.1, after RFC 8785): no whitespace, object keys sorted at every
/// level (by UTF-8 bytes), strings and keys in Unicode NFC, integral numbers below 2^53 written as
/// integers (`1.0` and `1` are the same value).
pub fn canonical_json(v: &Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

fn write_string(s: &str, out: &mut String) {
    let nfc = icu_normalizer::ComposingNormalizerBorrowed::new_nfc().normalize(s);
    out.push_str(&serde_json::to_string(nfc.as_ref()).unwrap_or_default());
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Null | Value::Bool(_) => out.push_str(&v.to_string()),
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 => {
                out.push_str(&(f as i64).to_string())
            }
            _ => out.push_str(&n.to_string()),
        },
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(m) => {
            let nfc = icu_normalizer::ComposingNormalizerBorrowed::new_nfc();
            let mut entries: Vec<(String, &Value)> =
                m.iter().map(|(k, v)| (nfc.normalize(k).into_owned(), v)).collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            out.push('{');
            for (i, (k, v)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(k, out);
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn subject<'a>(args: &'a Value, meta: Option<&'a Value>) -> Subject<'a> {
        Subject {
            job_type: "email.send",
            queue: "mail",
            args,
            meta,
        }
    }

    #[test]
    fn canonical_form_sorts_keys_normalises_strings_and_numbers() {
        assert_eq!(
            canonical_json(&json!({"b": [1.0, 2.5, {"y": null, "x": true}], "a": "x"})),
            r#"{"a":"x","b":[1,2.5,{"x":true,"y":null}]}"#
        );
        // "é" precomposed (U+00E9) and decomposed (e + U+0301) are one string after NFC.
        assert_eq!(fingerprint(&json!("\u{e9}")), fingerprint(&json!("e\u{301}")));
        assert_ne!(fingerprint(&json!("a")), fingerprint(&json!("b")));
        assert_eq!(fingerprint(&json!("x")).len(), 64);
    }

    #[test]
    fn key_order_and_unselected_dimensions_do_not_matter() {
        let a = json!([{"user_id": 42, "template": "welcome"}]);
        let b = json!([{"template": "other", "user_id": 42}]);
        let p = json!({"keys": ["type", "args"], "args_keys": ["user_id"]});
        let ka = parse_unique(&p, "options.unique", &subject(&a, None))
            .expect("valid")
            .key;
        let kb = parse_unique(&p, "options.unique", &subject(&b, None))
            .expect("valid")
            .key;
        assert_eq!(ka, kb, "only user_id counts");
        let all = json!({"keys": ["args"]});
        let ka = parse_unique(&all, "u", &subject(&a, None)).expect("valid").key;
        let kb = parse_unique(&all, "u", &subject(&b, None)).expect("valid").key;
        assert_ne!(ka, kb, "all of args counts");
        // queue only counts when named
        let t = json!({});
        let mut other_queue = subject(&a, None);
        other_queue.queue = "elsewhere";
        assert_eq!(
            parse_unique(&t, "u", &subject(&a, None)).expect("valid").key,
            parse_unique(&t, "u", &other_queue).expect("valid").key
        );
        let q = json!({"keys": ["queue"]});
        assert_ne!(
            parse_unique(&q, "u", &subject(&a, None)).expect("valid").key,
            parse_unique(&q, "u", &other_queue).expect("valid").key
        );
    }

    #[test]
    fn meta_keys_pick_from_meta() {
        let args = json!([]);
        let (m1, m2) = (
            json!({"tenant": "acme", "trace": 1}),
            json!({"tenant": "acme", "trace": 2}),
        );
        let p = json!({"keys": ["meta"], "meta_keys": ["tenant"]});
        assert_eq!(
            parse_unique(&p, "u", &subject(&args, Some(&m1))).expect("valid").key,
            parse_unique(&p, "u", &subject(&args, Some(&m2))).expect("valid").key
        );
    }

    #[test]
    fn defaults() {
        let args = json!([]);
        let u = parse_unique(&json!({}), "u", &subject(&args, None)).expect("valid");
        assert_eq!(u.on_conflict, OnConflict::Reject);
        assert_eq!(u.states, DEFAULT_STATES.map(String::from).to_vec());
        assert_eq!(u.period_ms, 0);
        let p = parse_unique(&json!({"period": "PT2S"}), "u", &subject(&args, None)).expect("valid");
        assert_eq!(p.period_ms, 2_000);
    }

    #[test]
    fn invalid_policies_name_the_field_and_the_allowed_values() {
        let args = json!([{"user_id": 1}]);
        for (policy, needle) in [
            (json!("yes"), "options.unique must be an object"),
            (json!({"keys": ["argz"]}), "options.unique.keys must be an array of distinct values from type, queue, args, meta"),
            (json!({"keys": ["type", "type"]}), "options.unique.keys"),
            (json!({"keys": ["meta"]}), "options.unique.meta_keys"),
            (json!({"keys": ["args"], "args_keys": ["nope"]}), "options.unique.args_keys names \"nope\""),
            (json!({"states": ["done"]}), "options.unique.states must be an array of distinct values from scheduled, available"),
            (json!({"states": []}), "options.unique.states must name at least one"),
            (json!({"on_conflict": "merge"}), "options.unique.on_conflict must be one of reject, ignore, replace, replace_except_schedule, raise_priority"),
            (json!({"period": "soon"}), "options.unique.period"),
            (json!({"period": "PT0S"}), "options.unique.period must be longer than 0"),
            (json!({"ttl": 5}), "options.unique.ttl is not a field"),
        ] {
            let e = parse_unique(&policy, "options.unique", &subject(&args, None)).unwrap_err();
            assert_eq!(e.code, crate::ErrorCode::InvalidRequest);
            assert!(e.message.contains(needle), "{policy}: {}", e.message);
        }
    }

    #[test]
    fn dedup_and_root_job_shapes() {
        let (a, b) = (json!([1, {"page": 7}]), json!([2, {"page": 7}]));
        let fa = parse_dedup(&json!(true), "d", &subject(&a, None)).expect("valid");
        assert!(fa.is_some());
        assert_ne!(fa, parse_dedup(&json!(true), "d", &subject(&b, None)).expect("valid"));
        let only_page = json!({"args_keys": ["page"]});
        assert_eq!(
            parse_dedup(&only_page, "d", &subject(&a, None)).expect("valid"),
            parse_dedup(&only_page, "d", &subject(&b, None)).expect("valid")
        );
        assert_eq!(
            parse_dedup(&json!(false), "d", &subject(&a, None)).expect("valid"),
            None
        );
        assert!(parse_dedup(&json!(3), "d", &subject(&a, None)).is_err());

        let r = parse_root_job(
            &json!({"signature": "links:Main_Page", "timestamp": "2026-02-13T12:00:00Z", "is_root": true}),
            "r",
        )
        .expect("valid");
        assert!(r.is_root);
        assert_eq!(r.timestamp_ms, 1_770_984_000_000);
        assert_eq!(r.key, fingerprint(&json!("links:Main_Page")));
        let leaf = parse_root_job(&json!({"signature": "s"}), "r").expect("valid");
        assert_eq!((leaf.timestamp_ms, leaf.is_root), (0, false));
        for bad in [
            json!({}),
            json!({"signature": ""}),
            json!({"signature": "s", "timestamp": "yesterday"}),
            json!({"signature": "s", "is_root": 1}),
            json!({"signature": "s", "x": 1}),
        ] {
            assert!(parse_root_job(&bad, "r").is_err(), "{bad}");
        }
    }

    #[test]
    fn a_tenants_fingerprints_are_its_own_and_those_without_a_tenant_unchanged() {
        let fp = fingerprint(&json!({"type": "email.send", "args": [1]}));
        assert_eq!(
            tenant_scoped(&fp, None),
            fp,
            "a job without a tenant keeps its fingerprint"
        );
        let (a, b) = (tenant_scoped(&fp, Some("acme")), tenant_scoped(&fp, Some("globex")));
        assert_ne!(a, fp);
        assert_ne!(a, b);
        assert_eq!(a, tenant_scoped(&fp, Some("acme")));
        // A stored key: the scoped form must not change between versions (SHA-256 of
        // {"fingerprint":"<fp>","tenant":"acme"}).
        assert_eq!(
            tenant_scoped(
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                Some("acme")
            ),
            "10462a841b0fe1c21bb472575fd372815c6a69c1b5b028f72f13fb159fc5d9fd"
        );
    }
}
