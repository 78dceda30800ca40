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
pub mod dead;
pub mod enqueue;
pub mod fetch;
pub mod heartbeat;
pub mod job_migrate;
pub mod job_read;
pub mod nack;
pub mod pick;
pub mod place;
pub mod progress;
pub mod promote;
pub mod queue_conf;
pub mod queue_pause;
pub mod requeue;
pub mod rl_gauges;
pub mod rl_inspect;
pub mod rl_override;
pub mod set_aging;
pub mod set_priority;
pub mod workflow_cancel;
pub mod workflow_get;

use redis::Value;

use crate::reply::{at, tag, val_i64, val_str};

#[derive(Debug)]
pub enum Transition<T> {
    Done(T),
    NotFound,
    /// The job exists but is in this state, which does not allow the operation.
    WrongState(String),
    /// The request named a claim (lease id, attempt or worker) that the job no longer holds; the job
    /// is in this state now and nothing changed (lua/includes/lease.lua).
    LeaseLost(String),
}

/// The claim a worker says it acts for in ACK, NACK and heartbeat (lua/includes/lease.lua). All `None`
/// acts on whoever holds the job now, which is what the official SDKs send.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimRef {
    pub lease_id: Option<String>,
    pub attempt: Option<i64>,
    pub worker_id: Option<String>,
}

impl ClaimRef {
    /// The three script arguments: lease id, attempt, worker id ('' = not named).
    pub(crate) fn args(&self) -> [String; 3] {
        [
            self.lease_id.clone().unwrap_or_default(),
            self.attempt.map(|a| a.to_string()).unwrap_or_default(),
            self.worker_id.clone().unwrap_or_default(),
        ]
    }
}

/// A script reply for a job transition: `ok` → `done(items)`, else the shared refusal tags.
pub(crate) fn transition<T>(items: &[Value], done: impl FnOnce(&[Value]) -> T) -> Transition<T> {
    match tag(items).as_str() {
        "ok" => Transition::Done(done(items)),
        "not_found" => Transition::NotFound,
        "lease_lost" => Transition::LeaseLost(items.get(1).map(val_str).unwrap_or_default()),
        _ => Transition::WrongState(items.get(1).map(val_str).unwrap_or_default()),
    }
}

#[derive(Debug)]
pub struct Acked {
    pub now_ms: i64,
    pub attempt: i64,
    pub queue: String,
    pub job_type: String,
}

/// An ack reply (includes/ack.lua), as fetch-1.lua returns it per request.
pub(crate) fn acked(items: &[redis::Value]) -> Transition<Acked> {
    transition(items, |i| Acked {
        now_ms: val_i64(at(i, 1)),
        attempt: val_i64(at(i, 2)),
        queue: val_str(at(i, 3)),
        job_type: val_str(at(i, 4)),
    })
}

/// A uniform number in [0, 1) for backoff jitter, passed to the scripts so they stay deterministic.
pub fn rand_unit() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

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
pub(crate) fn test_store() -> crate::store::Store {
    crate::store::Store::new(crate::store::StoreConfig {
        redis_url: "redis://127.0.0.1:1".into(),
        redis_cluster: Vec::new(),
        namespace: "t".into(),
        default_visibility_ms: 30_000,
        retention_ms: 86_400_000,
        pool_size: 1,
        wait_replicas: 0,
        wait_timeout_ms: 0,
    })
    .expect("test store")
}
