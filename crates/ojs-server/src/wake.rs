//! Long-poll wake-ups. A FETCH with `wait_ms` that finds nothing waits on one `Notify` per queue it
//! asked for. Every node's events hub (`events_hub`) tails the shared event stream, and for each event
//! that made a job available (enqueued, promoted, requeued, released, a rate-limit lane re-opened) it
//! wakes one waiter of that job's queue on this node. So a job enqueued on any pod reaches a waiting
//! worker on any pod within one stream read, instead of at the next poll. A slow re-check stays as the
//! safety net for transitions that emit no such event (a queue resumed, a queue-level slot freed).
//!
//! A long-poll (and an SSE client) holds a [`Listening`] while it may wait: the hub reads the streams
//! only then ([`Listeners`]).
//!
//! Nothing here is job state: a lost wake-up only delays a fetch until the re-check.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ojs_core::event::EventType;
use tokio::sync::Notify;

/// How often a waiting FETCH re-checks Redis when no wake-up came.
pub const RECHECK: Duration = Duration::from_millis(200);

/// Event types after which a job of the event's queue may be claimable (`EventType::makes_ready`).
pub fn makes_ready(event_type: &str) -> bool {
    EventType::parse(event_type).is_some_and(EventType::makes_ready)
}

#[derive(Default)]
pub struct ReadyWake {
    queues: Mutex<HashMap<String, Arc<Notify>>>,
}

/// Entries nobody waits on are dropped once the map holds this many queues.
const PRUNE_ABOVE: usize = 4096;

impl ReadyWake {
    /// The notifier a waiter of `queue` waits on.
    pub fn notifier(&self, queue: &str) -> Arc<Notify> {
        let mut m = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() > PRUNE_ABOVE {
            m.retain(|_, n| Arc::strong_count(n) > 1);
        }
        m.entry(queue.to_string()).or_default().clone()
    }

    /// Wakes one waiter of `queue`, if this node has any (a permit is kept for the next one otherwise).
    pub fn wake(&self, queue: &str) {
        let m = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = m.get(queue) {
            n.notify_one();
        }
    }
}

/// The requests on a node that need the event streams read: long-polls waiting for a job (their
/// wake-ups) and SSE clients. While there are none, the events hub's tails read nothing: each script
/// call that writes events would otherwise wake every pod's blocked `XREAD` of its shard (about 29,000
/// Redis instructions and a command more per call and pod, callgrind; benches/RESULTS.md), for nobody.
#[derive(Default)]
pub struct Listeners {
    count: AtomicUsize,
    arrived: Notify,
}

impl Listeners {
    /// Whether a request on this node listens now.
    pub fn any(&self) -> bool {
        self.count.load(Ordering::SeqCst) > 0
    }

    /// Completes when a request starts listening after it was created (and `enable`d).
    pub fn arrived(&self) -> tokio::sync::futures::Notified<'_> {
        self.arrived.notified()
    }
}

/// Held while a request listens (see [`Listeners`]); taken before the request first reads Redis, so
/// the tails read every entry written after that.
pub struct Listening(Arc<Listeners>);

impl Listening {
    pub fn new(listeners: &Arc<Listeners>) -> Self {
        listeners.count.fetch_add(1, Ordering::SeqCst);
        listeners.arrived.notify_waiters();
        Self(Arc::clone(listeners))
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.0.count.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wake_reaches_a_waiter_of_that_queue_only() {
        let w = ReadyWake::default();
        let a = w.notifier("a");
        let b = w.notifier("b");
        w.wake("a");
        tokio::time::timeout(Duration::from_millis(100), a.notified())
            .await
            .expect("waiter of a woken");
        assert!(
            tokio::time::timeout(Duration::from_millis(50), b.notified())
                .await
                .is_err(),
            "waiter of b must not wake"
        );
        w.wake("nobody-waits-here");
    }
}
