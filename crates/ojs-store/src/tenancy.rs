//! A queue's tenancy setting (`ojs_core::tenancy`) at the enqueue: the store resolves each job's tenant
//! with its queue's setting as this pod last read it (one HGET of the conf field per queue, the first
//! time), and the enqueue script checks that setting against the queue's own in the same call: when
//! another pod changed it meanwhile, nothing is written, the script answers with the setting it holds,
//! and the store resolves again and calls once more (ops/enqueue.rs).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use ojs_core::job::NewJob;
use ojs_core::tenancy::Tenancy;

use crate::store::{Result, Store, StoreError};

/// The conf hash field that holds a queue's setting (its stored form).
pub(crate) const TENANCY_FIELD: &str = "tenancy";

/// Resolves one job's tenant with its queue's setting `t` (`None`: `meta.tenant_id`, as the envelope
/// read it). The `X-OJS-Tenant` header, when sent, wins.
fn resolve(j: &mut NewJob, t: Option<&Tenancy>) -> std::result::Result<(), String> {
    let Some(t) = t else {
        j.tenancy.clear();
        return Ok(());
    };
    j.tenancy = t.stored();
    if !j.tenant_pinned {
        j.tenant = t.tenant_of(&j.doc, j.rate_limit.as_ref().map(|r| r.key.as_str()))?;
    }
    Ok(())
}

impl Store {
    /// A queue's tenancy setting, read from Redis (the admin routes; the enqueue uses the pod's copy).
    pub async fn tenancy(&self, queue: &str) -> Result<Option<Tenancy>> {
        let mut conn = self.conn().await?;
        let v: Option<String> = redis::cmd("HGET")
            .arg(self.keys().queue_conf(queue))
            .arg(TENANCY_FIELD)
            .query_async(&mut conn)
            .await?;
        let stored = v.unwrap_or_default();
        Ok(self.links_tenancy().put(queue, &stored).as_deref().cloned())
    }

    /// Sets (or, with `None`, removes) a queue's tenancy setting in one script (queue-conf-1.lua).
    pub async fn set_tenancy(&self, queue: &str, t: Option<&Tenancy>) -> Result<()> {
        let values: Vec<(&str, String)> = t.map(|t| vec![(TENANCY_FIELD, t.stored())]).unwrap_or_default();
        self.set_queue_conf(queue, &[TENANCY_FIELD], &values).await?;
        self.links_tenancy()
            .put(queue, &values.first().map(|v| v.1.clone()).unwrap_or_default());
        Ok(())
    }

    /// The jobs with their tenants resolved by their queues' settings (this pod's copy; a queue not
    /// seen yet is read once). Borrowed as they are when no queue of theirs has a setting and none
    /// was resolved with one. A derived tenant that is not a tenant id is a 400 naming the field.
    pub async fn resolve_tenants<'a>(&self, jobs: &'a [NewJob]) -> Result<Cow<'a, [NewJob]>> {
        self.resolve_tenants_checked(jobs)
            .await?
            .map_err(|(i, e)| StoreError::Invalid(if jobs.len() > 1 { format!("jobs[{i}]: {e}") } else { e }))
    }

    /// [`Store::resolve_tenants`], with the first job whose derived tenant is refused given as its
    /// index and the message (for a caller that numbers the jobs its own way).
    #[allow(clippy::type_complexity)]
    pub async fn resolve_tenants_checked<'a>(
        &self,
        jobs: &'a [NewJob],
    ) -> Result<std::result::Result<Cow<'a, [NewJob]>, (usize, String)>> {
        let mut settings: HashMap<&str, Option<Arc<Tenancy>>> = HashMap::new();
        for j in jobs {
            if settings.contains_key(j.queue.as_str()) {
                continue;
            }
            let t = match self.links_tenancy().get(&j.queue) {
                Some(t) => t,
                None => self.tenancy(&j.queue).await?.map(Arc::new),
            };
            settings.insert(j.queue.as_str(), t);
        }
        if jobs
            .iter()
            .all(|j| j.tenancy.is_empty() && settings.get(j.queue.as_str()).is_none_or(Option::is_none))
        {
            return Ok(Ok(Cow::Borrowed(jobs)));
        }
        let mut out = jobs.to_vec();
        for (i, j) in out.iter_mut().enumerate() {
            let t = settings.get(j.queue.as_str()).cloned().flatten();
            if let Err(e) = resolve(j, t.as_deref()) {
                return Ok(Err((i, e)));
            }
        }
        Ok(Ok(Cow::Owned(out)))
    }

    /// The enqueue script answered `{'tenancy', queue, setting}`: this pod's copy of the queue's
    /// setting is replaced by the one the script read.
    pub(crate) fn tenancy_seen(&self, queue: &str, stored: &str) {
        self.links_tenancy().put(queue, stored);
    }
}
