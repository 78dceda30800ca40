//! The typed twin of `lua/rl-override-1.lua`: the operator override of a rate-limit key is set or
//! cleared. See the script's header.

use super::args::RlOverrideArgs;

use crate::reply::Reply;
use crate::store::{Result, Store};

impl Store {
    /// The script's arguments, in the order of its header.
    fn rl_override_args(&self, key: &str, set: Option<(&[(String, String)], i64)>) -> Vec<String> {
        let mut args = Vec::new();
        let expires_at = match set {
            Some((_, expires)) => expires.to_string(),
            None => "-1".to_string(),
        };
        RlOverrideArgs {
            prefix: self.keys().prefix().into(),
            key: key.into(),
            expires_at,
        }
        .push(&mut args);
        for (f, v) in set.map(|(fields, _)| fields).unwrap_or_default() {
            args.push(f.clone());
            args.push(v.clone());
        }
        args
    }

    /// Sets (`Some(fields)`) or clears (`None`) the operator override of a key; `expires_at_ms` 0 = never.
    /// Returns false (and changes nothing) when the expiry is not after Redis' clock.
    pub async fn rate_limit_override(&self, key: &str, set: Option<(&[(String, String)], i64)>) -> Result<bool> {
        let args = self.rl_override_args(key, set);
        let items = self
            .run(&self.scripts.rl_override, &[self.keys().rl_ovr(key)], args)
            .await?;
        let r = Reply::new(self.scripts.rl_override.name, &items);
        match r.tag()? {
            "ok" => Ok(true),
            "past" => Ok(false),
            _ => Err(r.unknown_tag()),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_override_is_written_in_the_order_the_header_declares() {
        let s = super::super::test_store();
        let fields = [("concurrency".to_string(), "2".to_string())];
        let args = s.rl_override_args("k", Some((&fields, 0)));
        assert_eq!(args, ["ojs:{t}:", "k", "0", "concurrency", "2"]);
        assert_eq!(s.rl_override_args("k", None), ["ojs:{t}:", "k", "-1"]);
    }
}
