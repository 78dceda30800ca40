//! Typed twins of the Lua scripts: one module per `lua/<op>-<n>.lua`, holding the operation's arguments,
//! its reply, and the `Store` methods that call it.
//!
//! A twin declares the names of its script's arguments as the header writes them (`const ARGV`, and
//! `const RECORD` for a script that takes repeated records); `build.rs` fails the build when they differ
//! from the header, and the twin writes its arguments through an [`ArgWriter`] over those names, which
//! checks (in debug builds, so in every test) that each value is written under the name due next.

pub mod cancel;
pub mod cron_delete;
pub mod cron_set;
pub mod dead_delete;
pub mod dead_retry;
pub mod enqueue;
pub mod fetch;
pub mod heartbeat;
pub mod job_migrate;
pub mod job_read;
pub mod nack;
pub mod progress;
pub mod promote;
pub mod queue_conf;
pub mod requeue;
pub mod rl_gauges;
pub mod rl_inspect;
pub mod rl_override;
pub mod set_aging;
pub mod set_priority;
pub mod workflow_cancel;
pub mod workflow_get;

/// Writes a script's arguments in the order a list of names declares.
pub(crate) struct ArgWriter<'a> {
    names: &'static [&'static str],
    at: usize,
    out: &'a mut Vec<String>,
}

impl<'a> ArgWriter<'a> {
    pub(crate) fn new(names: &'static [&'static str], out: &'a mut Vec<String>) -> Self {
        Self { names, at: 0, out }
    }

    /// Appends `value` as the argument `name`, which must be the next one declared.
    pub(crate) fn arg(mut self, name: &str, value: impl Into<String>) -> Self {
        debug_assert_eq!(
            self.names.get(self.at).copied(),
            Some(name),
            "argument {} is declared as {:?}",
            self.at,
            self.names.get(self.at)
        );
        self.at += 1;
        self.out.push(value.into());
        self
    }

    /// Ends the list: every declared argument was written.
    pub(crate) fn done(self) {
        debug_assert_eq!(
            self.at,
            self.names.len(),
            "arguments missing after {:?}",
            self.names.get(self.at)
        );
    }
}

/// A store for the twins' unit tests: building arguments needs its keys and settings, never Redis
/// (`Store::new` connects on first use only).
#[cfg(test)]
pub(crate) fn test_store() -> crate::Store {
    crate::Store::new(crate::StoreConfig {
        redis_url: "redis://127.0.0.1:1".into(),
        namespace: "t".into(),
        default_visibility_ms: 30_000,
        retention_ms: 86_400_000,
        pool_size: 1,
    })
    .expect("test store")
}
