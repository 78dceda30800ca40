//! Names that end up inside Redis keys or ordering: queue names, job types, rate-limit keys, job ids.
//! Each pattern is checked by hand (no regex engine) and excludes `{`, `}` and `:` where they could let
//! input reach another deployment's hash tag or another key family.

use uuid::Uuid;

pub const MAX_NAME_LEN: usize = 255;

/// `^[a-z0-9][a-z0-9\-\.]*$`, at most 255 bytes: queue names (OJS core) and cron entry names (OJS cron).
fn lower_dotted(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

/// Cron entry names the key schema reserves: `P cron:<name>` holds an entry, and `P cron:due` is the
/// index of due entries (ojs-store's layout.rs; its collision test checks this list).
pub const RESERVED_CRON_NAMES: &[&str] = &["due"];

/// Cron entry names (OJS cron §2.2): they become key parts and URL segments.
pub fn check_cron_name(name: &str) -> Result<(), String> {
    if RESERVED_CRON_NAMES.contains(&name) {
        return Err(format!("name {name:?} is reserved by the server; choose another"));
    }
    if lower_dotted(name) {
        Ok(())
    } else {
        Err(format!(
            "name must match ^[a-z0-9][a-z0-9.-]*$ (lowercase letters, digits, '.' and '-', at most {MAX_NAME_LEN} characters); got {name:?}"
        ))
    }
}

/// Queue names: `^[a-z0-9][a-z0-9\-\.]*$`, at most 255 bytes (OJS core).
pub fn check_queue(name: &str) -> Result<(), String> {
    if lower_dotted(name) {
        Ok(())
    } else {
        Err(format!(
            "queue must match ^[a-z0-9][a-z0-9.-]*$ (lowercase letters, digits, '.' and '-', at most {MAX_NAME_LEN} characters); got {name:?}"
        ))
    }
}

/// Job types: dot-separated segments, each `[a-z][a-z0-9_-]*`.
pub fn check_type(t: &str) -> Result<(), String> {
    let seg_ok = |s: &str| {
        s.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    };
    if !t.is_empty() && t.len() <= MAX_NAME_LEN && t.split('.').all(seg_ok) {
        Ok(())
    } else {
        Err(format!(
            "type must be dot-separated lowercase segments matching ^[a-z][a-z0-9_-]*(\\.[a-z][a-z0-9_-]*)*$; got {t:?}"
        ))
    }
}

/// A key-like name: `^[a-zA-Z0-9][a-zA-Z0-9._:-]*$`, at most 255 bytes; `what` names the field or
/// header in the error.
/// A byte that may stand in a key-like name (a rate-limit key, a tenant id) after its first.
pub fn is_key_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-')
}

fn check_key_like(k: &str, what: &str) -> Result<(), String> {
    let ok = !k.is_empty()
        && k.len() <= MAX_NAME_LEN
        && k.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && k.bytes().all(is_key_byte);
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{what} must match ^[a-zA-Z0-9][a-zA-Z0-9._:-]*$ (at most {MAX_NAME_LEN} characters); got {k:?}"
        ))
    }
}

/// Rate-limit keys (rate-limiting seed §6.2): key-like names.
pub fn check_rate_limit_key(k: &str) -> Result<(), String> {
    check_key_like(k, "rate_limit.key")
}

/// Tenant ids (the OJS multi-tenancy extension, §5.2): key-like names; `where_` names the field or
/// header in the error.
pub fn check_tenant(t: &str, where_: &str) -> Result<(), String> {
    check_key_like(t, where_)
}

/// The request header that names a tenant (multi-tenancy extension §5.3).
pub const TENANT_HEADER: &str = "x-ojs-tenant";

/// Puts the tenant a request's `X-OJS-Tenant` header names into a job envelope's `meta.tenant_id`
/// (multi-tenancy §5.3): the header is checked; a body that names another tenant is refused; a body
/// that is not an object is left for the envelope's own checks.
pub fn apply_tenant_header(doc: &mut serde_json::Value, tenant: &str) -> Result<(), String> {
    check_tenant(tenant, "the X-OJS-Tenant header")?;
    let Some(o) = doc.as_object_mut() else { return Ok(()) };
    let meta = o
        .entry("meta")
        .or_insert_with(|| serde_json::Value::Object(Default::default()));
    if meta.is_null() {
        *meta = serde_json::Value::Object(Default::default());
    }
    let Some(m) = meta.as_object_mut() else { return Ok(()) };
    match m.get("tenant_id") {
        None | Some(serde_json::Value::Null) => {
            m.insert("tenant_id".into(), tenant.into());
            Ok(())
        }
        Some(serde_json::Value::String(s)) if s == tenant => Ok(()),
        Some(other) => Err(format!(
            "meta.tenant_id ({other}) and the X-OJS-Tenant header ({tenant:?}) name different tenants"
        )),
    }
}

/// Job ids: UUIDv7 in lowercase hyphenated form (36 bytes; the Redis member encoding relies on it).
pub fn check_job_id(id: &str) -> Result<(), String> {
    let err = || format!("id must be a lowercase UUIDv7 such as 019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f; got {id:?}");
    if id.len() != 36 || id.bytes().any(|b| b.is_ascii_uppercase()) {
        return Err(err());
    }
    match Uuid::parse_str(id) {
        Ok(u) if u.get_version_num() == 7 => Ok(()),
        _ => Err(err()),
    }
}

pub fn new_job_id() -> String {
    Uuid::now_v7().hyphenated().to_string()
}

/// A server-made job or workflow id rewritten to name shard `shard` in its last byte (on a deployment of
/// several shards, so that a request naming the id goes straight to the shard that holds it; the id
/// stays a UUIDv7 with 54 random bits). `shard` must be below 256.
pub fn id_on_shard(id: &str, shard: usize) -> String {
    debug_assert!(shard < 256 && id.len() == 36);
    format!("{}{:02x}", &id[..id.len() - 2], shard as u8)
}

/// The shard an id names in its last byte (see [`id_on_shard`]); a client's own id names one by chance,
/// so callers look elsewhere when the job is not there.
pub fn id_shard_hint(id: &str) -> Option<usize> {
    id.get(id.len().checked_sub(2)?..)
        .and_then(|h| u8::from_str_radix(h, 16).ok())
        .map(usize::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tenant_header_fills_meta_and_refuses_another_tenant_or_a_bad_id() {
        let mut doc = serde_json::json!({"type": "t", "args": []});
        apply_tenant_header(&mut doc, "acme:eu").expect("stamped");
        assert_eq!(doc["meta"]["tenant_id"], "acme:eu");
        let mut doc = serde_json::json!({"type": "t", "meta": {"tenant_id": "acme:eu", "x": 1}});
        apply_tenant_header(&mut doc, "acme:eu").expect("the same tenant");
        assert_eq!(doc["meta"]["x"], 1);
        let mut doc = serde_json::json!({"type": "t", "meta": {"tenant_id": "other"}});
        let e = apply_tenant_header(&mut doc, "acme").expect_err("two tenants");
        assert!(e.contains("different tenants"), "{e}");
        let mut doc = serde_json::json!({"type": "t", "meta": null});
        apply_tenant_header(&mut doc, "acme").expect("null meta");
        assert_eq!(doc["meta"]["tenant_id"], "acme");
        for bad in ["", "-lead", "has space", "a@b", "a%3Ab"] {
            assert!(check_tenant(bad, "t").is_err(), "{bad:?}");
        }
    }

    #[test]
    fn queues() {
        for ok in ["default", "email", "a.b-c", "0queue"] {
            assert!(check_queue(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "Default",
            "my_queue!",
            "-invalid",
            "my queue",
            "a{b}",
            "a:b",
            &"q".repeat(256),
        ] {
            assert!(check_queue(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn types() {
        for ok in [
            "email.send",
            "data.noop",
            "a",
            "report_v2.generate",
            "worker.test.graceful-shutdown",
        ] {
            assert!(check_type(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "Email.Send",
            "email send",
            "1email.send",
            "email@send!",
            "a..b",
            ".a",
            "a.",
        ] {
            assert!(check_type(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ids() {
        assert!(check_job_id("019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f").is_ok());
        assert!(check_job_id(&new_job_id()).is_ok());
        let on_5 = id_on_shard(&new_job_id(), 5);
        assert!(check_job_id(&on_5).is_ok(), "{on_5}");
        assert_eq!(id_shard_hint(&on_5), Some(5));
        assert_eq!(id_shard_hint("x"), None);
        for bad in [
            "",
            "not-a-uuid-at-all",
            "550e8400-e29b-41d4-a716-446655440000",
            "019461A8-1A2B-7C3D-8E4F-5A6B7C8D9E0F",
        ] {
            assert!(check_job_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rate_limit_keys() {
        assert!(check_rate_limit_key("tenant:acme-corp.reports_1").is_ok());
        for bad in ["", ":x", "a b", "a{b}", "é"] {
            assert!(check_rate_limit_key(bad).is_err(), "{bad}");
        }
    }
}
