//! A queue's tenancy setting (ours, beyond the OJS multi-tenancy extension): where a job of the queue
//! takes its tenant from, the queue's own fair-share weights, and its tenants' concurrency in it. `PUT /admin/queues/{q}/tenancy`
//! writes it into the queue's conf hash (field `tenancy`, in the stored form [`Tenancy::stored`]); the
//! store resolves each job's tenant with it at the enqueue ([`Tenancy::tenant_of`]) and FETCH reads
//! the weights and caps from the same field (lua/includes/tenant.lua `tenant_queue_weight`,
//! `tenant_cap`).
//!
//! A queue without the setting works exactly as before: a job's tenant is its `meta.tenant_id`.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::names;

/// The most a fair-share weight may be (a tenant of weight w gets w shares to another's 1), for the
/// tenants' global weights and a queue's own alike.
pub const MAX_TENANT_WEIGHT: u64 = 1_000_000;

/// At most this many tenants may have a weight of their own in one queue's setting, and as many a
/// concurrency of their own.
pub const MAX_QUEUE_WEIGHTS: usize = 1_000;

/// The most a tenant's concurrency in a queue may be (the least is 1: a cap of 0 would park a tenant
/// that holds no slot, with nothing to wake it; pause the queue instead).
pub const MAX_TENANT_CONCURRENCY: u64 = 1_000_000;

/// The meta field a `meta` source reads when the setting names none (the extension's own).
pub const DEFAULT_FIELD: &str = "tenant_id";

/// The separator a `rate_limit_key` source cuts the key at when the setting names none.
pub const DEFAULT_SEPARATOR: &str = ":";

/// Where a job's tenant comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `meta.<field>`.
    Meta { field: String },
    /// The job's `rate_limit.key` up to the first `separator` (a key without it is its own tenant).
    RateLimitKey { separator: String },
}

/// A queue's tenancy setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenancy {
    pub source: Source,
    /// Tenant → weight in this queue (over the tenant's global weight).
    pub weights: BTreeMap<String, u64>,
    /// The weight of the queue's jobs without a tenant (over the global `_default`).
    pub default_weight: Option<u64>,
    /// Tenant → the most of its jobs of this queue active at once.
    pub concurrency: BTreeMap<String, u64>,
    /// The concurrency of the tenants `concurrency` does not name (none: not capped). The queue's
    /// jobs without a tenant are never capped.
    pub default_concurrency: Option<u64>,
}

fn bounded(v: &Value, what: &str, max: u64) -> Result<u64, String> {
    match v.as_u64() {
        Some(w) if (1..=max).contains(&w) => Ok(w),
        _ => Err(format!("{what} must be an integer from 1 to {max}; got {v}")),
    }
}

fn weight(v: &Value, what: &str) -> Result<u64, String> {
    bounded(v, what, MAX_TENANT_WEIGHT)
}

fn cap(v: &Value, what: &str) -> Result<u64, String> {
    bounded(v, what, MAX_TENANT_CONCURRENCY)
}

/// A per-tenant map of the setting (`weights`, `concurrency`): tenant id → a value `check` accepts.
fn per_tenant(
    v: Option<&Value>,
    what: &str,
    check: fn(&Value, &str) -> Result<u64, String>,
) -> Result<BTreeMap<String, u64>, String> {
    let mut out = BTreeMap::new();
    match v {
        None => {}
        Some(Value::Object(w)) => {
            if w.len() > MAX_QUEUE_WEIGHTS {
                return Err(format!(
                    "{what} names at most {MAX_QUEUE_WEIGHTS} tenants; got {}",
                    w.len()
                ));
            }
            for (t, v) in w {
                names::check_tenant(t, &format!("a tenant of {what}"))?;
                out.insert(t.clone(), check(v, &format!("{what}.{t}"))?);
            }
        }
        Some(v) => return Err(format!("{what} must be an object of tenant id → integer; got {v}")),
    }
    Ok(out)
}

/// A map of the setting as JSON.
fn map_json(m: &BTreeMap<String, u64>) -> Value {
    Value::Object(m.iter().map(|(t, w)| (t.clone(), (*w).into())).collect())
}

fn string<'a>(v: &'a Value, what: &str) -> Result<&'a str, String> {
    v.as_str().ok_or_else(|| format!("{what} must be a string; got {v}"))
}

impl Tenancy {
    /// The setting a `PUT …/tenancy` body asks for; the error names the field at fault.
    pub fn parse(body: &Value) -> Result<Self, String> {
        let o = body
            .as_object()
            .ok_or_else(|| format!("the body must be a JSON object; got {body}"))?;
        if let Some(k) = o.keys().find(|k| {
            !matches!(
                k.as_str(),
                "source" | "field" | "separator" | "weights" | "default_weight" | "concurrency" | "default_concurrency"
            )
        }) {
            return Err(format!(
                "{k} is not a tenancy setting (source, field, separator, weights, default_weight, \
                 concurrency, default_concurrency)"
            ));
        }
        let got = |k: &str| o.get(k).filter(|v| !v.is_null());
        let source = match got("source") {
            None => return Err("source is required: \"meta\" or \"rate_limit_key\"".into()),
            Some(v) => string(v, "source")?,
        };
        let source = match source {
            "meta" => {
                if got("separator").is_some() {
                    return Err("separator belongs to source \"rate_limit_key\"".into());
                }
                let field = match got("field") {
                    None => DEFAULT_FIELD,
                    Some(v) => string(v, "field")?,
                };
                names::check_tenant(field, "field").map_err(|e| format!("{e} (a top-level key of meta)"))?;
                Source::Meta { field: field.into() }
            }
            "rate_limit_key" => {
                if got("field").is_some() {
                    return Err("field belongs to source \"meta\"".into());
                }
                let separator = match got("separator") {
                    None => DEFAULT_SEPARATOR,
                    Some(v) => string(v, "separator")?,
                };
                let ok = (1..=8).contains(&separator.len()) && separator.bytes().all(names::is_key_byte);
                if !ok {
                    return Err(format!(
                        "separator must be 1 to 8 characters of a rate-limit key ([a-zA-Z0-9._:-]); got {separator:?}"
                    ));
                }
                Source::RateLimitKey {
                    separator: separator.into(),
                }
            }
            other => return Err(format!("source must be \"meta\" or \"rate_limit_key\"; got {other:?}")),
        };
        let weights = per_tenant(got("weights"), "weights", weight)?;
        let default_weight = got("default_weight").map(|v| weight(v, "default_weight")).transpose()?;
        let concurrency = per_tenant(got("concurrency"), "concurrency", cap)?;
        let default_concurrency = got("default_concurrency")
            .map(|v| cap(v, "default_concurrency"))
            .transpose()?;
        Ok(Self {
            source,
            weights,
            default_weight,
            concurrency,
            default_concurrency,
        })
    }

    /// The setting as the API shows it (defaults filled in).
    pub fn to_json(&self) -> Value {
        let mut o = Map::new();
        match &self.source {
            Source::Meta { field } => {
                o.insert("source".into(), "meta".into());
                o.insert("field".into(), field.as_str().into());
            }
            Source::RateLimitKey { separator } => {
                o.insert("source".into(), "rate_limit_key".into());
                o.insert("separator".into(), separator.as_str().into());
            }
        }
        o.insert("weights".into(), map_json(&self.weights));
        o.insert(
            "default_weight".into(),
            self.default_weight.map_or(Value::Null, Value::from),
        );
        o.insert("concurrency".into(), map_json(&self.concurrency));
        o.insert(
            "default_concurrency".into(),
            self.default_concurrency.map_or(Value::Null, Value::from),
        );
        Value::Object(o)
    }

    /// The form kept in the queue's conf hash (field `tenancy`): the API's JSON without its nulls and
    /// without an empty `concurrency` (FETCH reads `weights`, `default_weight`, `concurrency` and
    /// `default_concurrency` from it, includes/tenant.lua). A setting without caps is stored exactly
    /// as servers before the caps stored it: the enqueue compares this text with the conf's
    /// (crates/ojs-store tenancy.rs), so pods of both builds agree on it.
    pub fn stored(&self) -> String {
        let mut v = self.to_json();
        if let Some(o) = v.as_object_mut() {
            o.retain(|k, v| !v.is_null() && !(k == "concurrency" && v.as_object().is_some_and(Map::is_empty)));
        }
        v.to_string()
    }

    /// The setting a conf hash holds (`None` for none, or a form this server cannot read).
    pub fn from_stored(s: &str) -> Option<Self> {
        serde_json::from_str::<Value>(s).ok().and_then(|v| Self::parse(&v).ok())
    }

    /// The tenant of a job of the queue: from its envelope `doc` (JSON text; its `meta`) or its
    /// rate-limit key. `None` when the source is absent (the job shares as the queue's jobs without a
    /// tenant); an error, naming the field, when the value is not a tenant id.
    pub fn tenant_of(&self, doc: &str, rl_key: Option<&str>) -> Result<Option<String>, String> {
        match &self.source {
            Source::Meta { field } => {
                let v: Value = serde_json::from_str(doc).map_err(|e| e.to_string())?;
                let what = format!("meta.{field} (the queue's tenancy field)");
                match v.get("meta").and_then(|m| m.get(field.as_str())) {
                    None | Some(Value::Null) => Ok(None),
                    Some(Value::String(t)) => {
                        names::check_tenant(t, &what)?;
                        Ok(Some(t.clone()))
                    }
                    Some(other) => Err(format!("{what} must be a string; got {other}")),
                }
            }
            Source::RateLimitKey { separator } => Ok(rl_key.map(|k| {
                match k.find(separator.as_str()) {
                    Some(i) if i > 0 => &k[..i],
                    _ => k,
                }
                .to_string()
            })),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_setting_is_read_with_its_defaults_and_kept_as_it_reads_back() {
        let t = Tenancy::parse(&json!({"source": "meta"})).expect("meta");
        assert_eq!(
            t.source,
            Source::Meta {
                field: "tenant_id".into()
            }
        );
        assert_eq!(Tenancy::from_stored(&t.stored()), Some(t.clone()));
        let t = Tenancy::parse(&json!({"source": "rate_limit_key", "weights": {"acme": 3}, "default_weight": 2}))
            .expect("rlk");
        assert_eq!(t.source, Source::RateLimitKey { separator: ":".into() });
        assert_eq!(
            t.to_json(),
            json!({"source": "rate_limit_key", "separator": ":", "weights": {"acme": 3}, "default_weight": 2,
                "concurrency": {}, "default_concurrency": null})
        );
        assert_eq!(Tenancy::from_stored(&t.stored()), Some(t.clone()));
        // Without caps, stored as a server before them stored it (pods of both builds compare it).
        assert_eq!(
            t.stored(),
            r#"{"source":"rate_limit_key","separator":":","weights":{"acme":3},"default_weight":2}"#
        );
        let t = Tenancy::parse(&json!({"source": "meta", "concurrency": {"acme": 5}, "default_concurrency": 2}))
            .expect("caps");
        assert_eq!(t.concurrency.get("acme"), Some(&5));
        assert_eq!(t.default_concurrency, Some(2));
        assert_eq!(Tenancy::from_stored(&t.stored()), Some(t));
    }

    #[test]
    fn a_bad_setting_is_refused_naming_its_field() {
        for (body, field) in [
            (json!({}), "source"),
            (json!({"source": "header"}), "source"),
            (json!({"source": "meta", "field": "a b"}), "field"),
            (json!({"source": "meta", "field": 3}), "field"),
            (json!({"source": "meta", "separator": "/"}), "separator"),
            (json!({"source": "rate_limit_key", "separator": "/"}), "separator"),
            (json!({"source": "rate_limit_key", "separator": ""}), "separator"),
            (json!({"source": "rate_limit_key", "field": "x"}), "field"),
            (json!({"source": "meta", "weights": {"acme": 0}}), "weights.acme"),
            (json!({"source": "meta", "weights": {"bad id": 1}}), "weights"),
            (json!({"source": "meta", "weights": [1]}), "weights"),
            (json!({"source": "meta", "default_weight": 1.5}), "default_weight"),
            (json!({"source": "meta", "weight": 2}), "weight"),
            (
                json!({"source": "meta", "concurrency": {"acme": 0}}),
                "concurrency.acme",
            ),
            (json!({"source": "meta", "concurrency": {"bad id": 1}}), "concurrency"),
            (json!({"source": "meta", "concurrency": 3}), "concurrency"),
            (
                json!({"source": "meta", "default_concurrency": 0}),
                "default_concurrency",
            ),
            (
                json!({"source": "meta", "default_concurrency": 1000001}),
                "default_concurrency",
            ),
            (json!([]), "body"),
        ] {
            let e = Tenancy::parse(&body).expect_err(&body.to_string());
            assert!(e.contains(field), "{body}: {e}");
        }
    }

    #[test]
    fn a_jobs_tenant_comes_from_the_configured_source() {
        let meta = Tenancy::parse(&json!({"source": "meta", "field": "customer"})).expect("meta");
        let doc = r#"{"type":"t","meta":{"customer":"acme","tenant_id":"other"}}"#;
        assert_eq!(meta.tenant_of(doc, None), Ok(Some("acme".into())));
        assert_eq!(meta.tenant_of(r#"{"type":"t"}"#, None), Ok(None));
        assert_eq!(meta.tenant_of(r#"{"meta":{"customer":null}}"#, None), Ok(None));
        let e = meta
            .tenant_of(r#"{"meta":{"customer":"a b"}}"#, None)
            .expect_err("bad id");
        assert!(e.contains("meta.customer"), "{e}");
        let e = meta
            .tenant_of(r#"{"meta":{"customer":7}}"#, None)
            .expect_err("not a string");
        assert!(e.contains("meta.customer"), "{e}");
        let rlk = Tenancy::parse(&json!({"source": "rate_limit_key"})).expect("rlk");
        assert_eq!(rlk.tenant_of("{}", Some("acme:stripe")), Ok(Some("acme".into())));
        assert_eq!(rlk.tenant_of("{}", Some("acme:slack:eu")), Ok(Some("acme".into())));
        assert_eq!(rlk.tenant_of("{}", Some("solo")), Ok(Some("solo".into())));
        assert_eq!(rlk.tenant_of("{}", None), Ok(None));
        let dash = Tenancy::parse(&json!({"source": "rate_limit_key", "separator": "--"})).expect("rlk");
        assert_eq!(dash.tenant_of("{}", Some("acme--x:y")), Ok(Some("acme".into())));
    }
}
