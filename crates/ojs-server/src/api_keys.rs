//! The configured API keys and their scopes (`OJS_API_KEYS`: `admin:<key>,worker:<key>,
//! worker@<tenant>:<key>,…`), as the configuration reads them and `auth.rs` checks them: a presented key
//! is compared with every configured one in constant time.

use subtle::ConstantTimeEq;

/// What a key may call, lowest first: a route needs a scope (`auth::required_scope`) and a key passes
/// when its scope is at least that.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// A key bound to one tenant (`worker@<tenant>`): the routes that serve one tenant's jobs, each
    /// narrowed to that tenant (`tenant.rs`); not the listings that span tenants.
    Tenant,
    Worker,
    Admin,
}

/// One configured key.
#[derive(Debug, Clone)]
pub struct ApiKey {
    pub scope: Scope,
    /// The tenant a `worker@<tenant>` key acts as on every request.
    pub tenant: Option<KeyTenant>,
    key: String,
}

#[derive(Debug, Clone, Default)]
pub struct ApiKeys(pub Vec<ApiKey>);

/// The tenant an API key is bound to (`tenant::ActingTenant::resolve` combines it with the request's
/// header).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTenant(pub String);

impl ApiKeys {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The configured key a presented key is, comparing against every configured key in constant time;
    /// a key listed under several scopes has the highest (`parse_keys` refuses one bound to a tenant
    /// and listed again).
    pub fn find(&self, presented: &str) -> Option<&ApiKey> {
        let mut found: Option<&ApiKey> = None;
        for k in &self.0 {
            if bool::from(k.key.as_bytes().ct_eq(presented.as_bytes())) && found.is_none_or(|f| k.scope > f.scope) {
                found = Some(k);
            }
        }
        found
    }

    /// The scope of a presented key.
    pub fn scope_of(&self, presented: &str) -> Option<Scope> {
        self.find(presented).map(|k| k.scope)
    }
}

/// Reads `OJS_API_KEYS`: comma-separated `admin:<key>`, `worker:<key>` or `worker@<tenant>:<key>`, each
/// key at least 16 characters; a key bound to a tenant is listed once (under two bindings it would act
/// as which?). The tenant ends at the first `:` (a tenant id holding a
/// `:` cannot be bound), and the key is the rest, as for the other scopes.
pub fn parse_keys(s: &str) -> Result<ApiKeys, String> {
    let mut out: Vec<ApiKey> = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (scope, key) = part.split_once(':').ok_or_else(|| {
            "each API key must be written scope:key, scope being admin, worker or worker@<tenant>".to_string()
        })?;
        let (scope, tenant) = match scope.split_once('@') {
            None if scope == "admin" => (Scope::Admin, None),
            None if scope == "worker" => (Scope::Worker, None),
            Some(("worker", t)) => {
                ojs_core::names::check_tenant(t, "the tenant of a worker@<tenant> API key")?;
                (Scope::Tenant, Some(KeyTenant(t.to_string())))
            }
            _ => {
                return Err(format!(
                    "unknown API key scope {scope:?}: use admin, worker or worker@<tenant>"
                ))
            }
        };
        if key.len() < 16 {
            return Err("API keys must be at least 16 characters".into());
        }
        if out
            .iter()
            .any(|k| k.key == key && (k.tenant.is_some() || tenant.is_some()))
        {
            return Err("an API key bound to a tenant is listed again: give it one scope".into());
        }
        out.push(ApiKey {
            scope,
            tenant,
            key: key.to_string(),
        });
    }
    Ok(ApiKeys(out))
}
