//! This pod's copy of each queue's tenancy setting (`ojs_core::tenancy`), as it last read it: the
//! enqueue resolves tenants with it (tenancy.rs), and the enqueue script checks it against the queue's
//! own setting, so a stale entry costs one retry, never a wrong tenant. The store holds one
//! (store.rs); it knows nothing of the store.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ojs_core::tenancy::Tenancy;

/// Queue → its setting as last read (`None`: the queue has none).
#[derive(Default)]
pub(crate) struct TenancyCache(Mutex<HashMap<String, Option<Arc<Tenancy>>>>);

impl TenancyCache {
    pub(crate) fn get(&self, queue: &str) -> Option<Option<Arc<Tenancy>>> {
        self.0.lock().ok().and_then(|m| m.get(queue).cloned())
    }

    pub(crate) fn put(&self, queue: &str, stored: &str) -> Option<Arc<Tenancy>> {
        let t = Tenancy::from_stored(stored).map(Arc::new);
        if let Ok(mut m) = self.0.lock() {
            m.insert(queue.to_string(), t.clone());
        }
        t
    }
}
