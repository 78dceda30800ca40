//! Where things live in a deployment of several shards (`--shards`, issue 13; see README "Running on a
//! Redis Cluster"). Each shard is the whole key schema under its own hash tag (`ojs_store::Keys`), so
//! each is one Redis Cluster slot and every script still runs on one shard. This module routes:
//!
//! - a **queue** to the shard the directory on shard 0 placed it on (`lua/place-1.lua`: on first use, by
//!   its `--queue-shard` pin or the hash of its name; never moved). Placements never change, so a pod
//!   keeps them; it asks shard 0 once per queue it has not seen;
//! - a **job or workflow id** to the shard its last byte names (server-made ids carry it:
//!   `ojs_core::names::id_on_shard`); a client's own id may name the wrong one, so callers try the other
//!   shards when the job is not on the first ([`Shards::for_id`] gives the order);
//! - a **rate-limit key** to the shard it is bound to (the first queue whose job carried it), and a job
//!   type whose unique policies span queues likewise; a job whose queue lives elsewhere is refused, so a
//!   key's counters and a uniqueness check are never split ([`Bound`]);
//! - timers, the event tail and listings to **every** shard (`all`).
//!
//! Each shard's hash tag: on one Redis its legacy one; on a Redis Cluster the one shard 0 records
//! (`ojs_store::shard_tags`: chosen for the primary with the fewest of the deployment's shards when the
//! shard is first used). A pod resolves the tags of its `--shards` before it first raises the
//! directory's count, and counts a shard in use only once its tag is known ([`Shards::ensure_tags`]).
//!
//! A deployment of one shard does what it did before shards existed, plus one directory call per queue
//! (and per type with a queue-spanning unique policy) per pod, so that raising `--shards` later never
//! splits what pods already use, and one read of the shard count a second (`refresh`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use ojs_core::job::NewJob;
use ojs_core::OjsError;
use ojs_store::{Store, StoreError};

use crate::config::{Config, Pins, MAX_SHARDS};
use crate::error::{ApiError, ApiResult};

pub struct Shards {
    /// The store of every possible shard (cheap: they share the connections); `count` of them are used.
    stores: Vec<Arc<Store>>,
    /// The deployment's number of shards as last read from shard 0 (never below `configured` once the
    /// tags are known; on a cluster, 1 until then).
    count: AtomicUsize,
    configured: usize,
    /// How many shards' stores have their tags (all on one Redis; on a cluster, shard 0's until
    /// [`Shards::ensure_tags`] reads the others'); `count` never exceeds it.
    tagged: AtomicUsize,
    /// One tag resolution at a time per pod (racing pods agree through HSETNX anyway).
    tagging: tokio::sync::Mutex<()>,
    pins: Pins,
    /// Queue → shard, as the directory answered (placements never change).
    queues: RwLock<HashMap<String, usize>>,
    /// Rate-limit key → shard, as the directory answered (bindings never change).
    keys: RwLock<HashMap<String, usize>>,
    /// Job type → the shard its queue-spanning unique jobs are checked on (never changes).
    types: RwLock<HashMap<String, usize>>,
}

impl Shards {
    pub fn new(store: Store, config: &Config) -> Self {
        let configured = usize::from(config.shards).clamp(1, MAX_SHARDS);
        let first = Arc::new(store);
        let mut stores = vec![Arc::clone(&first)];
        stores.extend((1..MAX_SHARDS).map(|i| Arc::new(first.shard(i))));
        // One Redis: every shard keeps its legacy tag, known now. A cluster: read at the first refresh.
        let cluster = !first.config().redis_cluster.is_empty();
        let tagged = if cluster { 1 } else { MAX_SHARDS };
        Self {
            stores,
            count: AtomicUsize::new(configured.min(tagged)),
            configured,
            tagged: AtomicUsize::new(tagged),
            tagging: tokio::sync::Mutex::new(()),
            pins: config.queue_shards.clone(),
            queues: RwLock::default(),
            keys: RwLock::default(),
            types: RwLock::default(),
        }
    }

    /// Shard 0: the directory, and the whole deployment when it has one shard.
    pub fn first(&self) -> &Arc<Store> {
        &self.stores[0]
    }

    /// Redis' clock (shard 0's TIME), in ms: the time every node acts on.
    pub async fn now_ms(&self) -> Result<i64, StoreError> {
        self.first().now_ms().await
    }

    /// Whether every shard answers: shard 0 a PING, the others a TIME (an error names the shard).
    pub async fn ping_all(&self) -> Result<(), String> {
        self.first().ping().await.map_err(|e| e.to_string())?;
        for s in self.all().iter().skip(1) {
            s.now_ms()
                .await
                .map_err(|e| format!("shard {}: {e}", s.shard_index()))?;
        }
        Ok(())
    }

    pub fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// The store of shard `i`.
    pub fn get(&self, i: usize) -> &Arc<Store> {
        &self.stores[i.min(MAX_SHARDS - 1)]
    }

    /// Every shard in use, in order.
    pub fn all(&self) -> &[Arc<Store>] {
        &self.stores[..self.count()]
    }

    /// Raises the count of shards in use to `count`, once their tags are known.
    async fn learn(&self, count: usize) -> Result<(), StoreError> {
        let count = count.clamp(1, MAX_SHARDS);
        self.ensure_tags(count).await?;
        self.count.fetch_max(count, Ordering::Relaxed);
        Ok(())
    }

    /// Gives the stores of shards `0..n` their tags (on a cluster: as recorded on shard 0, recording the
    /// ones never used; `ojs_store::shard_tags`). Called before any directory call that may raise the
    /// deployment's count to this pod's `--shards`, so a shard is never counted before its tag is recorded.
    pub async fn ensure_tags(&self, n: usize) -> Result<(), StoreError> {
        let n = n.clamp(1, MAX_SHARDS);
        if self.tagged.load(Ordering::Acquire) >= n {
            return Ok(());
        }
        let _one = self.tagging.lock().await;
        if self.tagged.load(Ordering::Acquire) >= n {
            return Ok(());
        }
        let tags = self.first().shard_tags(n).await?;
        for (i, tag) in tags.iter().enumerate().skip(1) {
            if !self.stores[i].use_tag(tag) {
                return Err(StoreError::Reply(format!(
                    "shard {i} is recorded under tag {tag:?}, not the one this pod serves it under ({:?})",
                    self.stores[i].keys().tag()
                )));
            }
        }
        self.tagged.fetch_max(n, Ordering::Release);
        Ok(())
    }

    /// Whether this pod knows the tags of its `--shards` (on one Redis: always).
    pub fn tags_known(&self) -> bool {
        self.tagged.load(Ordering::Acquire) >= self.configured
    }

    /// Reads (and raises to this pod's `--shards`) the deployment's number of shards; the timers call
    /// it about once a second, so a pod learns of shards another pod added.
    pub async fn refresh(&self) -> Result<usize, StoreError> {
        self.ensure_tags(self.configured).await?;
        let placed = self.first().place_queues(self.configured, &[]).await?;
        self.learn(placed.shards).await?;
        Ok(self.count())
    }

    /// The shard of each queue, in order, placing the ones never used (for what writes to a queue).
    pub async fn of_queues(&self, queues: &[&str]) -> Result<Vec<usize>, StoreError> {
        self.locate(queues, "queue").await
    }

    /// The shard of each queue, in order, placing none: a queue never used has no data anywhere and
    /// reads as shard 0's (for what only reads a queue, so a read never writes the directory).
    pub async fn find_queues(&self, queues: &[&str]) -> Result<Vec<usize>, StoreError> {
        self.locate(queues, "find").await
    }

    async fn locate(&self, queues: &[&str], kind: &str) -> Result<Vec<usize>, StoreError> {
        let mut out = vec![None; queues.len()];
        let mut missing: Vec<(&str, Option<usize>)> = Vec::new();
        {
            let known = self.queues.read().unwrap_or_else(|e| e.into_inner());
            for (i, q) in queues.iter().enumerate() {
                match known.get(*q) {
                    Some(s) => out[i] = Some(*s),
                    None if !missing.iter().any(|(m, _)| m == q) => missing.push((q, self.pins.get(q))),
                    None => {}
                }
            }
        }
        if !missing.is_empty() {
            self.ensure_tags(self.configured).await?;
            let placed = self.first().place(self.configured, kind, &missing).await?;
            self.learn(placed.shards).await?;
            let mut known = self.queues.write().unwrap_or_else(|e| e.into_inner());
            for ((q, _), s) in missing.iter().zip(&placed.at) {
                // A placement never changes: keep it. A queue `find` left unplaced is not kept.
                if let Some(s) = s {
                    known.insert(q.to_string(), (*s).min(MAX_SHARDS - 1));
                }
            }
            for (i, q) in queues.iter().enumerate() {
                if out[i].is_none() {
                    out[i] = known.get(*q).copied();
                }
            }
        }
        Ok(out.into_iter().map(|s| s.unwrap_or(0)).collect())
    }

    /// The store of one queue's shard, placing the queue if it was never used (for writes).
    pub async fn for_queue(&self, queue: &str) -> Result<&Arc<Store>, StoreError> {
        let s = self.of_queues(&[queue]).await?[0];
        Ok(self.get(s))
    }

    /// The store of one queue's shard, for a read (see [`Shards::find_queues`]).
    pub async fn find_queue(&self, queue: &str) -> Result<&Arc<Store>, StoreError> {
        let s = self.find_queues(&[queue]).await?[0];
        Ok(self.get(s))
    }

    /// Answers one item per queue by asking each queue's shard about its own queues: `op` gets a shard
    /// and its queues (in the given order) and returns one item per queue; the result is in `queues`'
    /// order. One shard: one call.
    pub async fn per_queue<T, F, Fut>(&self, queues: &[String], op: F) -> Result<Vec<T>, StoreError>
    where
        F: Fn(Arc<Store>, Vec<String>) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<T>, StoreError>>,
    {
        if self.count() == 1 || queues.is_empty() {
            return op(Arc::clone(self.first()), queues.to_vec()).await;
        }
        let names: Vec<&str> = queues.iter().map(String::as_str).collect();
        let at = self.find_queues(&names).await?;
        let mut out: Vec<Option<T>> = (0..queues.len()).map(|_| None).collect();
        let mut shards = at.clone();
        shards.sort_unstable();
        shards.dedup();
        for s in shards {
            let idx: Vec<usize> = (0..queues.len()).filter(|i| at[*i] == s).collect();
            let part = idx.iter().map(|i| queues[*i].clone()).collect();
            for (i, item) in idx.into_iter().zip(op(Arc::clone(self.get(s)), part).await?) {
                out[i] = Some(item);
            }
        }
        out.into_iter()
            .map(|o| o.ok_or_else(|| StoreError::Reply("a shard answered fewer items than queues".into())))
            .collect()
    }

    /// The names of every queue of every shard, sorted.
    pub async fn queue_names(&self) -> Result<Vec<String>, StoreError> {
        let mut names = Vec::new();
        for s in self.all() {
            names.extend(s.queue_names().await?);
        }
        if self.count() > 1 {
            names.sort();
            names.dedup();
        }
        Ok(names)
    }

    /// Each queue's counts, from its shard, in the given order.
    pub async fn queue_counts(&self, names: &[String]) -> Result<Vec<ojs_store::QueueCounts>, StoreError> {
        self.per_queue(names, |s, qs| async move { s.queue_counts(&qs).await })
            .await
    }

    /// The dead letter sets of every shard: their total size and the oldest and newest death times.
    pub async fn dead_summary(&self) -> Result<(u64, Option<i64>, Option<i64>), StoreError> {
        let (mut total, mut oldest, mut newest) = (0, None::<i64>, None::<i64>);
        for s in self.all() {
            let (n, o, w) = s.dead_summary().await?;
            total += n;
            oldest = match (oldest, o) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            newest = newest.max(w);
        }
        Ok((total, oldest, newest))
    }

    /// A page of the worker registry (shard 0 keeps it: every heartbeat visits shard 0), each record
    /// completed with what the worker's heartbeats left on the other shards (the jobs it holds there).
    pub async fn workers_page(
        &self,
        offset: u64,
        limit: u64,
    ) -> Result<(u64, Vec<(String, ojs_core::Fields)>), StoreError> {
        let (total, mut page) = self.first().workers_page(offset, limit).await?;
        for s in self.all().iter().skip(1) {
            let others = s.hashes(page.iter().map(|(id, _)| s.keys().worker(id))).await?;
            for ((_, rec), other) in page.iter_mut().zip(others) {
                merge_worker(rec, &other);
            }
        }
        Ok((total, page))
    }

    /// A page of entries in name order over every shard: (total, entries).
    pub async fn cron_page(
        &self,
        offset: u64,
        count: u64,
    ) -> Result<(u64, Vec<(String, ojs_core::Fields)>), ojs_store::StoreError> {
        let shards = self.all();
        if shards.len() == 1 {
            return shards[0].cron_list(offset, count).await;
        }
        let (mut total, mut all) = (0, Vec::new());
        for s in shards {
            let (n, entries) = s.cron_list(0, offset.saturating_add(count)).await?;
            total += n;
            all.extend(entries);
        }
        all.sort_by(|a, b| a.0.cmp(&b.0));
        Ok((
            total,
            all.into_iter().skip(offset as usize).take(count as usize).collect(),
        ))
    }

    /// A page of the workflows of every shard, newest first (ids are UUIDv7, so by id): (total, page of
    /// (id, hash)). One shard reads its page; more read their first `offset + limit` each and merge.
    pub async fn workflows_page(
        &self,
        offset: u64,
        limit: u64,
    ) -> Result<(u64, Vec<(String, ojs_core::Fields)>), StoreError> {
        if self.count() == 1 {
            return self.first().workflows_page(offset, limit).await;
        }
        let (mut total, mut found) = (0, Vec::new());
        for s in self.all() {
            let (n, page) = s.workflows_page(0, offset.saturating_add(limit)).await?;
            total += n;
            found.extend(page);
        }
        found.sort_by(|a, b| b.0.cmp(&a.0));
        let page = found.into_iter().skip(offset as usize).take(limit as usize).collect();
        Ok((total, page))
    }

    /// One worker's record (see [`Shards::workers_page`]).
    pub async fn worker_record(&self, worker: &str) -> Result<Option<ojs_core::Fields>, StoreError> {
        let Some(mut rec) = self.first().worker_record(worker).await? else {
            return Ok(None);
        };
        for s in self.all().iter().skip(1) {
            if let Some(other) = s.worker_record(worker).await? {
                merge_worker(&mut rec, &other);
            }
        }
        Ok(Some(rec))
    }

    /// A page of the rate-limit keys of every shard in lexicographic order, each with the store of the
    /// shard that knows it: (total, page).
    pub async fn rate_limit_keys(
        &self,
        offset: u64,
        limit: u64,
    ) -> Result<(u64, Vec<(Arc<Store>, String)>), StoreError> {
        if self.count() == 1 {
            let (total, keys) = self.first().rate_limit_keys(offset, limit).await?;
            return Ok((total, keys.into_iter().map(|k| (Arc::clone(self.first()), k)).collect()));
        }
        let (mut total, mut all) = (0, Vec::new());
        for s in self.all() {
            let (n, keys) = s.rate_limit_keys(0, offset.saturating_add(limit)).await?;
            total += n;
            all.extend(keys.into_iter().map(|k| (Arc::clone(s), k)));
        }
        all.sort_by(|a, b| a.1.cmp(&b.1));
        Ok((
            total,
            all.into_iter().skip(offset as usize).take(limit as usize).collect(),
        ))
    }

    /// The shards to look for a job or workflow id in, most likely first: the one its last byte names,
    /// then the others. One shard: just it.
    pub fn for_id(&self, id: &str) -> Vec<&Arc<Store>> {
        let all = self.all();
        let first = ojs_core::names::id_shard_hint(id)
            .filter(|s| *s < all.len())
            .unwrap_or(0);
        std::iter::once(&all[first])
            .chain(all.iter().enumerate().filter(|(i, _)| *i != first).map(|(_, s)| s))
            .collect()
    }

    /// Where each job goes: its queue's shard. On a deployment of several shards, also writes the shard
    /// into each server-made id, takes the claim of each client-chosen id for its shard and refuses one
    /// another shard holds or is writing (409, as on one shard), binds the jobs' rate-limit keys, the
    /// types of their queue-spanning unique and dedup policies and their root signatures to their shard,
    /// and refuses what one shard could not keep exact: a name bound elsewhere (422). Keep the answer
    /// until the jobs are written: dropping it gives the claims back.
    pub async fn place_jobs(&self, jobs: &mut [NewJob]) -> ApiResult<Held> {
        let at = {
            let queues: Vec<&str> = jobs.iter().map(|j| j.queue.as_str()).collect();
            self.of_queues(&queues).await?
        };
        let sharded = self.count() > 1;
        let held = if sharded {
            for (j, s) in jobs.iter_mut().zip(&at) {
                j.place_on(*s);
            }
            let ids: Vec<(String, usize)> = jobs
                .iter()
                .zip(&at)
                .filter(|(j, _)| !j.id_generated)
                .map(|(j, s)| (format!("job:{}", j.id), *s))
                .collect();
            let mut held = self
                .claim(ids, |name, _| {
                    OjsError::duplicate_id(name.strip_prefix("job:").unwrap_or(name))
                })
                .await?;
            // Holding the claims, no other request can write these ids elsewhere: what is there now stays.
            self.refuse_ids_elsewhere(jobs, &at).await?;
            held.at = at;
            held
        } else {
            Held::bare(at)
        };
        let mut shards: Vec<usize> = held.at.clone();
        shards.sort_unstable();
        shards.dedup();
        for s in shards {
            let on_s = || {
                jobs.iter()
                    .zip(&held.at)
                    .filter(move |(_, js)| **js == s)
                    .map(|(j, _)| j)
            };
            let keys: Vec<&str> = on_s()
                .filter_map(|j| j.rate_limit.as_ref().map(|r| r.key.as_str()))
                .collect();
            self.bind(Bound::RateLimitKey, s, &keys).await?;
            // A uniqueness or deduplication key without `queue` can meet jobs of its type in any
            // queue: the type's such jobs must all be checked on one shard.
            let types: Vec<&str> = on_s()
                .filter(|j| {
                    j.unique.as_ref().is_some_and(|u| u.spans_queues)
                        || j.dedup.as_ref().is_some_and(|d| d.spans_queues)
                })
                .map(|j| j.job_type.as_str())
                .collect();
            self.bind(Bound::DuplicateType, s, &types).await?;
            // A root signature is its own identity, whatever the type and queue (one shard: nothing to bind;
            // place-1.lua keeps a signature shard 0 has a record of on shard 0 when shards are added).
            if sharded {
                let roots: Vec<&ojs_core::unique::RootJob> = on_s().filter_map(|j| j.root_job.as_ref()).collect();
                let keys: Vec<&str> = roots.iter().map(|r| r.key.as_str()).collect();
                if let Err(ApiError(mut e)) = self.bind(Bound::RootSignature, s, &keys).await {
                    // Name the signature the client gave, not its hash.
                    for r in &roots {
                        e.message = e
                            .message
                            .replace(&format!("{:?}", r.key), &format!("{:?}", r.signature));
                    }
                    return Err(e.into());
                }
            }
        }
        Ok(held)
    }

    /// Takes the claim of each client-chosen name (`job:<id>`, `wf:<id>`, `cron:<name>`) for the shard
    /// that will write it (`lua/place-1.lua` 'claim'). A name another shard holds is refused with
    /// `taken(name, shard)`, and nothing is kept. Only a deployment of several shards claims.
    pub async fn claim(&self, names: Vec<(String, usize)>, taken: impl Fn(&str, usize) -> OjsError) -> ApiResult<Held> {
        if self.count() == 1 || names.is_empty() {
            return Ok(Held::bare(Vec::new()));
        }
        let pairs: Vec<(&str, Option<usize>)> = names.iter().map(|(n, s)| (n.as_str(), Some(*s))).collect();
        self.ensure_tags(self.configured).await?;
        let got = self.first().place(self.configured, "claim", &pairs).await?;
        let (mut mine, mut refused) = (Vec::new(), None);
        for ((name, want), held) in names.into_iter().zip(&got.at) {
            match held {
                Some(h) if *h == want => mine.push((name, want)),
                Some(h) => refused = refused.or(Some((name, *h))),
                None => refused = refused.or(Some((name, 0))),
            }
        }
        let held = Held {
            at: Vec::new(),
            claims: Some((Arc::clone(self.first()), self.configured, mine)),
        };
        match refused {
            // Dropping `held` gives back the claims this request did get.
            Some((name, shard)) => Err(taken(&name, shard).into()),
            None => Ok(held),
        }
    }

    /// The shard of a workflow: the one shard all its jobs' queues live on (a workflow's steps release
    /// each other inside one script call, so they cannot span shards; 422 otherwise). Places its jobs as
    /// [`Shards::place_jobs`] does, and a client-chosen workflow id as a job's: claimed for the shard, and
    /// refused when another shard holds a workflow with it (409). Keep the answer until the workflow is
    /// written.
    pub async fn place_workflow(&self, wf: &mut ojs_core::workflow::NewWorkflow) -> ApiResult<(usize, Held)> {
        let held = self.place_jobs(&mut wf.jobs).await?;
        let first = held.first().copied().unwrap_or(0);
        if held.iter().any(|s| *s != first) {
            let mut spread: Vec<String> = wf
                .jobs
                .iter()
                .zip(held.iter())
                .map(|(j, s)| format!("{} (shard {s})", j.queue))
                .collect();
            spread.sort();
            spread.dedup();
            return Err(OjsError::unprocessable(format!(
                "a workflow's jobs must live on one shard, and its queues live on several: {}; pin them to one \
                 shard (--queue-shard <queue>=<shard>) before their first job",
                spread.join(", ")
            ))
            .into());
        }
        if self.count() == 1 {
            return Ok((first, held));
        }
        if wf.id_generated {
            wf.id = ojs_core::names::id_on_shard(&wf.id, first);
            return Ok((first, held));
        }
        let wf_held = self
            .claim(vec![(format!("wf:{}", wf.id), first)], |_, s| workflow_taken(&wf.id, s))
            .await?;
        for other in self.all().iter().filter(|o| o.shard_index() != first) {
            if other.workflow_exists(&wf.id).await? {
                return Err(workflow_taken(&wf.id, other.shard_index()).into());
            }
        }
        Ok((first, held.with(wf_held)))
    }

    /// A client's own id must name one job in the whole deployment, but each shard's enqueue script sees
    /// only its own shard: refuse an id another shard already holds (409, as on one shard).
    async fn refuse_ids_elsewhere(&self, jobs: &[NewJob], at: &[usize]) -> ApiResult<()> {
        for (i, other) in self.all().iter().enumerate() {
            let ids: Vec<&str> = jobs
                .iter()
                .zip(at)
                .filter(|(j, s)| !j.id_generated && **s != i)
                .map(|(j, _)| j.id.as_str())
                .collect();
            let held = other.jobs_exist(&ids).await?;
            if let Some((id, _)) = ids.iter().zip(held).find(|(_, h)| *h) {
                return Err(OjsError::duplicate_id(id).into());
            }
        }
        Ok(())
    }

    /// Runs `op` on the shards [`Shards::for_id`] names, most likely first, until one finds the job or
    /// workflow (on a deployment of one shard: once). Only a client's own id ever needs a second try.
    pub async fn on_id<T, F, Fut>(&self, id: &str, op: F) -> Result<T, StoreError>
    where
        T: Found,
        F: Fn(Arc<Store>) -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        first_found(self.for_id(id), op).await
    }

    /// Runs `op` on every shard in order until one finds what it looks for (things found by a name that
    /// says nothing of their shard, such as a cron entry).
    pub async fn on_any<T, F, Fut>(&self, op: F) -> Result<T, StoreError>
    where
        T: Found,
        F: Fn(Arc<Store>) -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        first_found(self.all().iter().collect(), op).await
    }

    /// A job, from whichever shard holds it.
    pub async fn get_job(&self, id: &str) -> Result<Option<ojs_core::StoredJob>, StoreError> {
        self.on_id(id, |s| async move { s.get_job(id).await }).await
    }

    /// A few fields of each job, from whichever shard holds it (see `Store::jobs_partial`; None where
    /// a job is missing).
    pub async fn jobs_partial(
        &self,
        ids: &[String],
        fields: &[&str],
    ) -> Result<Vec<Option<ojs_core::StoredJob>>, StoreError> {
        // A job has its queue, state…: none of them means not on this shard.
        self.by_ids(
            ids,
            |s, part| async move { s.jobs_partial(&part, fields).await },
            Option::is_some,
            Default::default,
        )
        .await
    }

    /// The jobs, from whichever shard holds each (None for a job that is gone).
    pub async fn jobs(&self, ids: &[String]) -> Result<Vec<Option<ojs_core::StoredJob>>, StoreError> {
        self.by_ids(
            ids,
            |s, part| async move { s.jobs(&part).await },
            Option::is_some,
            Default::default,
        )
        .await
    }

    /// One item per id, read in one call per shard: each id on the shard it names first, then (for what
    /// `found` says is not there) on the others.
    pub async fn by_ids<T, F, Fut>(
        &self,
        ids: &[String],
        read: F,
        found: impl Fn(&T) -> bool,
        missing: impl Fn() -> T,
    ) -> Result<Vec<T>, StoreError>
    where
        F: Fn(Arc<Store>, Vec<String>) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<T>, StoreError>>,
    {
        if self.count() == 1 {
            return read(Arc::clone(self.first()), ids.to_vec()).await;
        }
        let mut out: Vec<Option<T>> = (0..ids.len()).map(|_| None).collect();
        let mut tries: Vec<Vec<usize>> = ids
            .iter()
            .map(|id| self.for_id(id).iter().map(|s| s.shard_index()).collect())
            .collect();
        loop {
            let mut by_shard: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
            for (i, t) in tries.iter_mut().enumerate() {
                if out[i].is_none() && !t.is_empty() {
                    by_shard.entry(t.remove(0)).or_default().push(i);
                }
            }
            if by_shard.is_empty() {
                break;
            }
            for (s, idx) in by_shard {
                let part: Vec<String> = idx.iter().map(|i| ids[*i].clone()).collect();
                for (i, item) in idx.iter().zip(read(Arc::clone(self.get(s)), part).await?) {
                    if found(&item) || tries[*i].is_empty() {
                        out[*i] = Some(item);
                    }
                }
            }
        }
        Ok(out.into_iter().map(|o| o.unwrap_or_else(&missing)).collect())
    }

    /// Checks that each name of kind `what` that jobs on `shard` carry lives on that shard, binding the
    /// names never used to it (one `place-1.lua` call for all of them; pods keep the answers for keys and
    /// types, which never change). A name bound elsewhere is a 422 that says where and how to co-locate
    /// queues.
    pub async fn bind(&self, what: Bound, shard: usize, names: &[&str]) -> ApiResult<()> {
        // Rate-limit keys of jobs on shard 0 of a deployment of one shard need no binding:
        // place-1.lua binds the keys shard 0 knows to it if a second shard is ever added.
        if names.is_empty() || (what == Bound::RateLimitKey && shard == 0 && self.count() == 1) {
            return Ok(());
        }
        // A root signature's binding lapses with its root record: asked every time, never kept.
        let no_cache = RwLock::default();
        let cache = match what {
            Bound::RateLimitKey => &self.keys,
            Bound::DuplicateType => &self.types,
            Bound::RootSignature => &no_cache,
        };
        let mut missing: Vec<(&str, Option<usize>)> = Vec::new();
        {
            let known = cache.read().unwrap_or_else(|e| e.into_inner());
            for n in names {
                match known.get(*n) {
                    Some(s) if *s == shard => {}
                    Some(s) => return Err(what.elsewhere(n, *s, shard).into()),
                    None if !missing.iter().any(|(m, _)| m == n) => missing.push((n, Some(shard))),
                    None => {}
                }
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        self.ensure_tags(self.configured).await?;
        let bound = self.first().place(self.configured, what.kind(), &missing).await?;
        self.learn(bound.shards).await?;
        let mut known = cache.write().unwrap_or_else(|e| e.into_inner());
        let at: Vec<usize> = bound.at.iter().map(|s| s.unwrap_or(shard)).collect();
        for ((n, _), s) in missing.iter().zip(&at) {
            known.insert(n.to_string(), *s);
        }
        for ((n, _), s) in missing.iter().zip(&at) {
            if *s != shard {
                return Err(what.elsewhere(n, *s, shard).into());
            }
        }
        Ok(())
    }

    /// The store of the shard a rate-limit key is bound to (shard 0 when it is bound nowhere yet).
    pub async fn for_key(&self, key: &str) -> Result<&Arc<Store>, StoreError> {
        if self.count() == 1 {
            return Ok(self.first());
        }
        if let Some(s) = self.keys.read().unwrap_or_else(|e| e.into_inner()).get(key) {
            return Ok(self.get(*s));
        }
        Ok(self.get(self.first().rate_limit_key_home(key).await?.unwrap_or(0)))
    }
}

async fn first_found<T, F, Fut>(order: Vec<&Arc<Store>>, op: F) -> Result<T, StoreError>
where
    T: Found,
    F: Fn(Arc<Store>) -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    let last = order.len().saturating_sub(1);
    for (i, s) in order.into_iter().enumerate() {
        let out = op(Arc::clone(s)).await?;
        if i == last || out.found() {
            return Ok(out);
        }
    }
    unreachable!("a deployment has at least one shard")
}

/// Adds what a worker's heartbeat recorded on another shard to its record from shard 0: the jobs it
/// holds there (lua/heartbeat-1.lua writes `jobs`, `active_jobs` and `last_seen` on each shard it visits).
fn merge_worker(rec: &mut ojs_core::Fields, other: &ojs_core::Fields) {
    let jobs = other.get("jobs").map(String::as_str).unwrap_or("");
    if !jobs.is_empty() {
        let mine = rec.entry("jobs".into()).or_default();
        if !mine.is_empty() {
            mine.push(' ');
        }
        mine.push_str(jobs);
    }
    let n = |r: &ojs_core::Fields| r.get("active_jobs").and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let active = n(rec) + n(other);
    rec.insert("active_jobs".into(), active.to_string());
}

/// Whether an outcome found what it looked for (see [`Shards::on_id`]).
pub trait Found {
    fn found(&self) -> bool;
}

impl<T> Found for Option<T> {
    fn found(&self) -> bool {
        self.is_some()
    }
}

impl<T> Found for ojs_store::Transition<T> {
    fn found(&self) -> bool {
        !matches!(self, ojs_store::Transition::NotFound)
    }
}

impl Found for ojs_store::DeadRetry {
    fn found(&self) -> bool {
        !matches!(self, ojs_store::DeadRetry::NotFound)
    }
}

impl Found for bool {
    fn found(&self) -> bool {
        *self
    }
}

/// What lives on one shard besides queues (see `lua/place-1.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// A rate-limit key: its counters.
    RateLimitKey,
    /// A job type whose unique or dedup policies leave `queue` out of their key.
    DuplicateType,
    /// A root-job signature (its hash): MediaWiki's root-job deduplication compares root and leaves.
    RootSignature,
}

impl Bound {
    fn kind(self) -> &'static str {
        match self {
            Bound::RateLimitKey => "key",
            Bound::DuplicateType => "type",
            Bound::RootSignature => "root",
        }
    }

    /// The 422 for a job whose queue lives on `shard` while `name` lives on `home`.
    fn elsewhere(self, name: &str, home: usize, shard: usize) -> OjsError {
        let (what, detail) = match self {
            Bound::RateLimitKey => (
                format!("rate-limit key {name:?} lives on shard {home}, with the queues whose jobs first carried it"),
                "rate_limit_key",
            ),
            Bound::DuplicateType => (
                format!(
                    "unique or deduplicated jobs of type {name:?} whose options.unique.keys or options.dedup.keys \
                     leave out \"queue\" are checked on shard {home}, where the first such job's queue lives"
                ),
                "job_type",
            ),
            Bound::RootSignature => (
                format!(
                    "root-job signature {name:?} (options.root_job) is decided on shard {home}, where the first job \
                     that carried it lives"
                ),
                "root_job_signature",
            ),
        };
        OjsError::unprocessable(format!(
            "{what}; this job's queue lives on shard {shard}. It is kept exact on one shard only: pin the \
             queues that share it to one shard (--queue-shard <queue>={home}) before their first job{}",
            match self {
                Bound::DuplicateType => ", or add \"queue\" to options.unique.keys or options.dedup.keys",
                Bound::RateLimitKey | Bound::RootSignature => "",
            }
        ))
        .with_details(serde_json::json!({ detail: name, "home_shard": home, "queue_shard": shard }))
    }
}

/// What a placement holds until the write it prepared is done: the shard of each job, and the claims
/// on shard 0 of the client-chosen names it will write ([`Shards::claim`]). Dropping it gives the claims
/// back (in a task of its own: a claim a pod never gives back lapses after 10 minutes).
#[must_use = "keep it until the write is done: dropping it gives the claims back"]
#[derive(Default)]
pub struct Held {
    at: Vec<usize>,
    claims: Option<(Arc<Store>, usize, Vec<(String, usize)>)>,
}

impl Held {
    fn bare(at: Vec<usize>) -> Self {
        Self { at, claims: None }
    }

    /// Both placements' claims, this one's shards.
    fn with(mut self, mut other: Held) -> Self {
        match (&mut self.claims, other.claims.take()) {
            (Some((_, _, mine)), Some((_, _, more))) => mine.extend(more),
            (mine @ None, more) => *mine = more,
            (Some(_), None) => {}
        }
        self
    }
}

impl Held {
    /// Gives the claims back now (before answering, so the client's next request finds them free).
    /// Dropping a `Held` gives them back too, in a task of its own (error paths).
    pub async fn release(mut self) {
        if let Some((store, shards, names)) = self.claims.take() {
            give_back(store, shards, names).await;
        }
    }
}

async fn give_back(store: Arc<Store>, shards: usize, names: Vec<(String, usize)>) {
    if names.is_empty() {
        return;
    }
    let pairs: Vec<(&str, Option<usize>)> = names.iter().map(|(n, s)| (n.as_str(), Some(*s))).collect();
    if let Err(e) = store.place(shards, "release", &pairs).await {
        tracing::warn!(error = %e, "claims not given back; they lapse on their own");
    }
}

impl std::ops::Deref for Held {
    type Target = [usize];
    fn deref(&self) -> &[usize] {
        &self.at
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let Some((store, shards, names)) = self.claims.take() else {
            return;
        };
        if names.is_empty() {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(give_back(store, shards, names));
        }
    }
}

/// The 409 for a client-chosen workflow id another shard holds or is writing.
fn workflow_taken(id: &str, shard: usize) -> OjsError {
    OjsError::new(
        ojs_core::error::ErrorCode::Duplicate,
        format!("a job or workflow with id {id} already exists (or is being created) on shard {shard}"),
    )
    .with_details(serde_json::json!({ "id": id }))
}
