//! Live events: one task per node tails the Redis event stream (XREAD BLOCK on its own connection) and
//! fans entries out to this node's SSE clients. Every node tails the same stream, so a client connected
//! to any pod sees every event, whichever pod's request caused it. The same tail wakes this node's
//! waiting long-polls (see `wake`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, watch};

use crate::state::AppState;

pub type Entry = Arc<(String, HashMap<String, String>)>;

pub fn channel() -> broadcast::Sender<Entry> {
    broadcast::channel(4096).0
}

pub async fn run(st: AppState, mut shutdown: watch::Receiver<bool>) {
    let mut last = "$".to_string();
    loop {
        if *shutdown.borrow() {
            return;
        }
        let mut conn = match st.store.blocking_connection().await {
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
            last = st.store.events_last_id().await.unwrap_or_else(|_| "$".into());
        }
        loop {
            let read = tokio::select! {
                r = st.store.events_block(&mut conn, &last, ojs_store::EVENTS_BLOCK_MS) => r,
                _ = shutdown.changed() => return,
            };
            match read {
                Ok(entries) => {
                    for (id, fields) in entries {
                        // XREAD goes on from the entry (one entry holds one call's events).
                        last = ojs_store::event_entry(&id).to_string();
                        if fields.get("type").is_some_and(|t| crate::wake::makes_ready(t)) {
                            if let Some(q) = fields.get("queue") {
                                st.wake.wake(q);
                            }
                        }
                        // No receiver is fine: nobody is listening on this node.
                        let _ = st.events.send(Arc::new((id, fields)));
                    }
                }
                Err(_) => break,
            }
        }
    }
}
