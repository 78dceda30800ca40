//! Live events: one task per node and shard tails that shard's Redis event stream (XREAD BLOCK on its
//! own connection) and fans entries out to this node's SSE clients. Every node tails every stream, so a
//! client connected to any pod sees every event, whichever pod's request caused it. The same tails wake
//! this node's waiting long-polls (see `wake`). A tail reads only while a request on its node listens
//! (see [`crate::wake::Listeners`]).
//!
//! Event ids: an event of shard 0 keeps its stream id (`<ms>-<seq>[.<k>]`, see
//! `ojs_store::event_position`); an event of shard `i > 0` is `<ms>-<seq>[.<k>]@<i>`. Reading "after"
//! an id reads its own shard exactly from there, and the other shards from [`RESUME_MARGIN_MS`] before
//! its time: their streams have their own sequences, and their nodes their own clocks. So on a
//! deployment of several shards a resume may repeat a few events of other shards (ids are unique:
//! a client drops what it has seen) and misses none unless the nodes' clocks are further apart than
//! the margin. A deployment of one shard reads exactly as before.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ojs_store::StoreError;
use tokio::sync::{broadcast, watch};

use crate::state::AppState;
pub use crate::state::Entry;

/// How far before a cursor's time the other shards' streams are read again on a resume.
pub const RESUME_MARGIN_MS: u64 = 1_000;

pub fn channel() -> broadcast::Sender<Entry> {
    broadcast::channel(4096).0
}

/// The API's id of an event of shard `shard` whose stream id is `id`.
pub fn event_id(id: &str, shard: usize) -> String {
    match shard {
        0 => id.to_string(),
        s => format!("{id}@{s}"),
    }
}

/// An API event id's shard and stream id (`None` for anything that is not one).
pub fn parse_event_id(id: &str) -> Option<(usize, &str)> {
    let (inner, shard) = match id.split_once('@') {
        Some((inner, s)) => (
            inner,
            s.parse().ok().filter(|s| *s > 0 && *s < crate::config::MAX_SHARDS)?,
        ),
        None => (id, 0),
    };
    ojs_store::event_position(inner).map(|_| (shard, inner))
}

/// Where an event stands for ordering and "seen" checks: its stream position, then its shard.
pub fn position(id: &str) -> (u64, u64, u64, usize) {
    match parse_event_id(id) {
        Some((shard, inner)) => {
            let (ms, seq, k) = ojs_store::event_position(inner).unwrap_or_default();
            (ms, seq, k, shard)
        }
        None => (0, 0, 0, 0),
    }
}

/// What a client has seen of each shard's stream after reading up to `cursor` (see the module's
/// documentation): the cursor's own shard exactly, the others up to the margin before its time.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    per_shard: HashMap<usize, (u64, u64, u64)>,
    others: (u64, u64, u64),
}

impl Seen {
    pub fn after(cursor: &str) -> Self {
        let (ms, seq, k, shard) = position(cursor);
        Self {
            per_shard: HashMap::from([(shard, (ms, seq, k))]),
            others: (ms.saturating_sub(RESUME_MARGIN_MS), 0, 0),
        }
    }

    /// Everything up to each shard's newest entry now, for a client that asked for no past events.
    pub async fn at_heads(st: &AppState) -> Result<Self, StoreError> {
        let mut per_shard = HashMap::new();
        for store in st.shards.all() {
            let s = store.shard_index();
            let (ms, seq, _, _) = position(&event_id(&store.events_last_id().await?, s));
            per_shard.insert(s, (ms, seq, u64::MAX));
        }
        Ok(Self {
            per_shard,
            others: (0, 0, 0),
        })
    }

    fn of(&self, shard: usize) -> (u64, u64, u64) {
        self.per_shard.get(&shard).copied().unwrap_or(self.others)
    }

    /// The stream id to read shard `shard` after.
    fn cursor(&self, shard: usize) -> String {
        let (ms, seq, k) = self.of(shard);
        if k > 0 {
            format!("{ms}-{seq}.{k}")
        } else {
            format!("{ms}-{seq}")
        }
    }

    /// Whether the event `id` is new to the client; records it as seen.
    pub fn take(&mut self, id: &str) -> bool {
        let (ms, seq, k, shard) = position(id);
        if (ms, seq, k) <= self.of(shard) {
            return false;
        }
        self.per_shard.insert(shard, (ms, seq, k));
        true
    }
}

/// Up to `count` events after `cursor` (an API event id; `0-0` for the beginning) from every shard,
/// oldest first (by time, then shard).
pub async fn events_after(
    st: &AppState,
    cursor: &str,
    count: usize,
) -> Result<Vec<(String, ojs_core::event::Event)>, StoreError> {
    let seen = Seen::after(cursor);
    let mut out = Vec::new();
    for store in st.shards.all() {
        let s = store.shard_index();
        for (id, f) in store.events_after(&seen.cursor(s), count).await? {
            out.push((event_id(&id, s), f));
        }
    }
    if st.shards.count() > 1 {
        out.sort_by_key(|(id, _)| position(id));
        out.truncate(count);
    }
    Ok(out)
}

/// The newest `count` events of every shard, newest first; `since_ms` (Redis time) bounds how old.
pub async fn events_latest(
    st: &AppState,
    count: usize,
    since_ms: Option<i64>,
) -> Result<Vec<(String, ojs_core::event::Event)>, StoreError> {
    let mut out = Vec::new();
    for store in st.shards.all() {
        let s = store.shard_index();
        let events = match since_ms {
            Some(ms) => store.events_since(ms, count).await?,
            None => store.events_latest(count).await?,
        };
        out.extend(events.into_iter().map(|(id, f)| (event_id(&id, s), f)));
    }
    if st.shards.count() > 1 {
        out.sort_by_key(|(id, _)| std::cmp::Reverse(position(id)));
        out.truncate(count);
    }
    Ok(out)
}

/// Waits until a request on this node listens, keeping `last` at most about a second behind Redis'
/// clock (`TIME`, which no entry written later is below: a stream's ids are its time or above), as read
/// before that request came: the tail then reads from there, and so every entry written after the
/// request arrived. `TIME`, not the newest entry, which is a whole call's events (up to 500: megabytes
/// a second when an idle pod read a page of them, helper-16). Returns false when the node shuts down.
async fn idle(
    st: &AppState,
    store: &ojs_store::Store,
    last: &mut String,
    shutdown: &mut watch::Receiver<bool>,
) -> bool {
    loop {
        let arrived = st.listeners.arrived();
        tokio::pin!(arrived);
        arrived.as_mut().enable();
        if st.listeners.any() {
            return true;
        }
        let head = store.now_ms().await.map(|t| format!("{}-0", t.saturating_sub(1)));
        if st.listeners.any() {
            // It came while the clock was read: that time may be past its first entries.
            return true;
        }
        if let Ok(head) = head {
            *last = head;
        }
        tokio::select! {
            _ = arrived => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = shutdown.changed() => {}
        }
        if *shutdown.borrow() {
            return false;
        }
    }
}

/// Tails every shard's stream; starts a tail for a shard another pod adds later.
pub async fn run(st: AppState, mut shutdown: watch::Receiver<bool>) {
    let mut tails = Vec::new();
    loop {
        while tails.len() < st.shards.count() {
            tails.push(tokio::spawn(tail(st.clone(), tails.len(), shutdown.clone())));
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = shutdown.changed() => {}
        }
        if *shutdown.borrow() {
            for t in tails {
                let _ = t.await;
            }
            return;
        }
    }
}

/// Tails one shard's stream.
async fn tail(st: AppState, shard: usize, mut shutdown: watch::Receiver<bool>) {
    let store = Arc::clone(st.shards.get(shard));
    let mut last = "$".to_string();
    loop {
        if *shutdown.borrow() {
            return;
        }
        let mut conn = match store.blocking_connection().await {
            Ok(c) => c,
            Err(_) => {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    _ = shutdown.changed() => return,
                }
            }
        };
        if last == "$" {
            // Start from the newest entry so a reconnect does not skip what arrived meanwhile.
            last = store.events_last_id().await.unwrap_or_else(|_| "$".into());
        }
        loop {
            if !st.listeners.any() && !idle(&st, &store, &mut last, &mut shutdown).await {
                return;
            }
            let read = tokio::select! {
                r = store.events_block(&mut conn, &last, ojs_store::EVENTS_BLOCK_MS) => r,
                _ = shutdown.changed() => return,
            };
            match read {
                Ok(read) => {
                    // XREAD goes on from the last entry (one entry holds one call's events).
                    if let Some(id) = read.last_entry() {
                        last = ojs_store::event_entry(&id).to_string();
                    }
                    read.each_type_and_queue(|etype, queue| {
                        if crate::wake::makes_ready(etype) && !queue.is_empty() {
                            st.wake.wake(queue);
                        }
                    });
                    // Whole events only for this node's SSE clients.
                    if st.events.receiver_count() > 0 {
                        for (id, fields) in read.events() {
                            let _ = st.events.send(Arc::new((event_id(&id, shard), fields)));
                        }
                    }
                }
                Err(_) => break,
            }
        }
    }
}
