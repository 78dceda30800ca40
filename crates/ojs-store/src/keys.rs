//! The key schema. Every key of a deployment starts with `ojs:{<namespace>}:`; the braces are a Redis
//! Cluster hash tag, so all keys of one deployment live in one slot and every script is single-slot.

#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// `namespace` must already be validated (see [`Keys::check_namespace`]).
    pub fn new(namespace: &str) -> Self {
        Self {
            prefix: format!("ojs:{{{namespace}}}:"),
        }
    }

    /// Namespaces: 1–64 of `[a-z0-9_-]`, so no namespace can contain another's hash tag.
    pub fn check_namespace(ns: &str) -> Result<(), String> {
        if !ns.is_empty()
            && ns.len() <= 64
            && ns
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        {
            Ok(())
        } else {
            Err(format!("namespace must be 1-64 characters of [a-z0-9_-]; got {ns:?}"))
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }
    pub fn job(&self, id: &str) -> String {
        format!("{}job:{id}", self.prefix)
    }
    pub fn ready(&self, queue: &str) -> String {
        format!("{}q:{queue}:ready", self.prefix)
    }
    pub fn queue_stats(&self, queue: &str) -> String {
        format!("{}q:{queue}:stats", self.prefix)
    }
    pub fn queue_conf(&self, queue: &str) -> String {
        format!("{}q:{queue}:conf", self.prefix)
    }
    pub fn queue_priorities(&self, queue: &str) -> String {
        format!("{}q:{queue}:pri", self.prefix)
    }
    /// `P rl:<key>:<part>`: the per-key rate-limit state (see lua/includes/ratelimit.lua).
    pub fn rl(&self, key: &str, part: &str) -> String {
        format!("{}rl:{key}:{part}", self.prefix)
    }
    pub fn rl_keys(&self) -> String {
        format!("{}rl:keys", self.prefix)
    }
    pub fn queues(&self) -> String {
        format!("{}queues", self.prefix)
    }
    pub fn ready_index(&self) -> String {
        format!("{}ready", self.prefix)
    }
    pub fn paused(&self) -> String {
        format!("{}paused", self.prefix)
    }
    pub fn scheduled(&self) -> String {
        format!("{}scheduled", self.prefix)
    }
    pub fn active(&self) -> String {
        format!("{}active", self.prefix)
    }
    pub fn dead(&self) -> String {
        format!("{}dead", self.prefix)
    }
    pub fn events(&self) -> String {
        format!("{}events", self.prefix)
    }
    pub fn seq(&self) -> String {
        format!("{}seq", self.prefix)
    }
    pub fn worker(&self, id: &str) -> String {
        format!("{}worker:{id}", self.prefix)
    }
    /// `P cron:<name>`: one cron entry (see lua/cron-set-1.lua).
    pub fn cron(&self, name: &str) -> String {
        format!("{}cron:{name}", self.prefix)
    }
    /// `P crons`: every cron entry's name (zset, lexicographic).
    pub fn crons(&self) -> String {
        format!("{}crons", self.prefix)
    }
    /// `P cron:due`: enabled cron entries by next_run_at (ms).
    pub fn cron_due(&self) -> String {
        format!("{}cron:due", self.prefix)
    }
    /// `P workers`: every worker heard from within a day, by last heartbeat (zset).
    pub fn workers(&self) -> String {
        format!("{}workers", self.prefix)
    }
    /// `P wf:<id>`: one workflow (see lua/includes/workflow.lua; `:jobs` and `:results` beside it).
    pub fn workflow(&self, id: &str) -> String {
        format!("{}wf:{id}", self.prefix)
    }
    /// `P workflows`: every workflow id by created_at (zset).
    pub fn workflows(&self) -> String {
        format!("{}workflows", self.prefix)
    }
    /// `P unique:<key>`: the job holding a uniqueness key (lua/includes/unique.lua).
    pub fn unique(&self, key: &str) -> String {
        format!("{}unique:{key}", self.prefix)
    }
    /// `P dedup:<fingerprint>`: the latest start of a job with that deduplication info
    /// (lua/includes/supersede.lua).
    pub fn dedup(&self, fingerprint: &str) -> String {
        format!("{}dedup:{fingerprint}", self.prefix)
    }
    /// `P root:<signature hash>`: the newest started root job's timestamp (lua/includes/supersede.lua).
    pub fn root(&self, signature_key: &str) -> String {
        format!("{}root:{signature_key}", self.prefix)
    }
    pub fn schema(&self) -> String {
        format!("{}schema", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_carries_the_hash_tag() {
        let k = Keys::new("main");
        for key in [k.job("x"), k.ready("default"), k.active(), k.events(), k.seq()] {
            assert!(key.starts_with("ojs:{main}:"), "{key}");
        }
        assert!(Keys::check_namespace("main").is_ok());
        assert!(Keys::check_namespace("a}b").is_err());
    }
}
