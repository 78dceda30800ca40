//! The configured API keys and their scopes (`OJS_API_KEYS`: `admin:<key>,worker:<key>,…`), as the
//! configuration reads them and `auth.rs` checks them: a presented key is compared with every
//! configured one in constant time.

use subtle::ConstantTimeEq;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    Worker,
    Admin,
}

#[derive(Debug, Clone, Default)]
pub struct ApiKeys(pub Vec<(Scope, String)>);

impl ApiKeys {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The scope of a presented key, comparing against every configured key in constant time.
    pub fn scope_of(&self, presented: &str) -> Option<Scope> {
        let mut found = None;
        for (scope, key) in &self.0 {
            if bool::from(key.as_bytes().ct_eq(presented.as_bytes())) {
                found = found.max(Some(*scope));
            }
        }
        found
    }
}

pub fn parse_keys(s: &str) -> Result<ApiKeys, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (scope, key) = part
            .split_once(':')
            .ok_or_else(|| "each API key must be written scope:key, scope being admin or worker".to_string())?;
        let scope = match scope {
            "admin" => Scope::Admin,
            "worker" => Scope::Worker,
            other => return Err(format!("unknown API key scope {other:?}: use admin or worker")),
        };
        if key.len() < 16 {
            return Err("API keys must be at least 16 characters".into());
        }
        out.push((scope, key.to_string()));
    }
    Ok(ApiKeys(out))
}
