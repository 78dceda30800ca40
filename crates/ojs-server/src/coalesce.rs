//! Group commit: concurrent requests of one kind arriving at one node share one script call. A request
//! hands its validated input to its shard's coalescer for its kind and waits for its own outcome. A node
//! keeps at most `IN_FLIGHT` script calls of a kind running, over all its shards, and at most
//! `IN_FLIGHT_PER_SHARD` of one shard; while they run, new requests queue up and go together in their
//! shard's next call (up to the batch limit). An idle node adds no delay: a lone request is sent at once,
//! as a batch of one. The wait is bounded by the calls already in flight, never by a timer.
//!
//! The calls in flight are the node's, not each shard's: on N shards a call then carries about as many
//! requests as on one, and each primary pays a call's fixed cost (the command's round trip, the script's
//! once-per-call reads and its events' `XADD`) for as many jobs (issue 39: with four calls per shard, a
//! call on three shards carried 3.1 single enqueues where one shard's carried 8.7, and the busiest of
//! three primaries did 0.51x of one primary's Redis CPU per job; with four per node, 7.1 and about
//! 0.45x: benches/RESULTS.md). The cap per shard keeps one shard whose calls hang (its slot moving to
//! another primary, its primary failing over: up to the store's 10 s of retries) from holding all of
//! the node's: the other shards keep a call.
//!
//! Two kinds use it:
//! - single enqueues (`POST /jobs`): each job in a coalesced call stands alone (the enqueue script's
//!   `each` mode): a duplicate id fails only its own request, and a job with a unique policy meets the
//!   jobs before it in the call as stored ones, so concurrent duplicates produce one job however they
//!   were grouped;
//! - worker requests (FETCH, ACK, ack-and-fetch-next): `lua/fetch-1.lua` serves them in order, each with
//!   its own reply (a refused ACK fails only its own request).
//!
//! Nothing is acknowledged to a client before the script that did its work has returned, so a crash
//! loses only requests that were never answered, exactly as without coalescing. A call that fails as a
//! whole (Redis unavailable) fails each of its requests with that error.

use std::future::Future;
use std::sync::{Arc, OnceLock};

use ojs_core::job::NewJob;
use ojs_store::{Pressure, Store, StoreError, WorkerReply, WorkerRequest};
use tokio::sync::{mpsc, oneshot, Semaphore};

/// Script calls of one kind in flight per node, over all its shards; more requests wait and are batched.
const IN_FLIGHT: usize = 4;
/// Script calls of one kind in flight per node and shard (below `IN_FLIGHT`: see the module's docs).
const IN_FLIGHT_PER_SHARD: usize = IN_FLIGHT - 1;

type Reply<O> = oneshot::Sender<Result<O, StoreError>>;

/// A coalescer for requests `R` answered with `O` (see the module's documentation).
pub struct Coalescer<R, O> {
    tx: mpsc::UnboundedSender<(R, Reply<O>)>,
    kind: &'static str,
}

impl<R: Send + 'static, O: Send + 'static> Coalescer<R, O> {
    /// Starts the coalescing task (it ends when the coalescer is dropped). Must run inside a runtime.
    /// `run` serves one batch and returns one outcome per request, in order; each call holds one of
    /// `node`'s permits (the node's calls of this kind, shared with the other shards' coalescers).
    pub fn start<F, Fut>(kind: &'static str, max_batch: usize, node: Arc<Semaphore>, run: F) -> Self
    where
        F: Fn(Vec<R>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<O>, StoreError>> + Send + 'static,
    {
        let (tx, mut rx) = mpsc::unbounded_channel::<(R, Reply<O>)>();
        let max_batch = max_batch.max(1);
        let run = Arc::new(run);
        tokio::spawn(async move {
            let own = Arc::new(Semaphore::new(IN_FLIGHT_PER_SHARD));
            loop {
                // A request first, then the slots: an idle shard holds none of the node's.
                let Some(first) = rx.recv().await else { return };
                let Ok(own_slot) = own.clone().acquire_owned().await else {
                    return;
                };
                let Ok(node_slot) = node.clone().acquire_owned().await else {
                    return;
                };
                let slot = (own_slot, node_slot);
                let mut batch = vec![first];
                while batch.len() < max_batch {
                    match rx.try_recv() {
                        Ok(p) => batch.push(p),
                        Err(_) => break,
                    }
                }
                let run = run.clone();
                tokio::spawn(async move {
                    let _slot = slot;
                    let (requests, replies): (Vec<R>, Vec<Reply<O>>) = batch.into_iter().unzip();
                    metrics::histogram!("ojs_coalesced_batch_size", "kind" => kind).record(requests.len() as f64);
                    let n = replies.len();
                    match run(requests).await {
                        Ok(outs) if outs.len() == n => {
                            for (reply, out) in replies.into_iter().zip(outs) {
                                let _ = reply.send(Ok(out));
                            }
                        }
                        Ok(outs) => {
                            let e = StoreError::Reply(format!("{kind}: {} replies for {n} requests", outs.len()));
                            for reply in replies {
                                let _ = reply.send(Err(e.clone()));
                            }
                        }
                        Err(e) => {
                            for reply in replies {
                                let _ = reply.send(Err(e.clone()));
                            }
                        }
                    }
                });
            }
        });
        Self { tx, kind }
    }

    /// Serves one request through the next coalesced script call.
    pub async fn call(&self, request: R) -> Result<O, StoreError> {
        let (reply, rx) = oneshot::channel();
        let gone = || StoreError::Unavailable(format!("the {} coalescer stopped", self.kind));
        self.tx.send((request, reply)).map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }
}

/// One kind's coalescers, one per shard, each started on first use (inside the runtime), sharing the
/// node's `IN_FLIGHT` calls of the kind.
pub struct PerShard<R, O> {
    node: Arc<Semaphore>,
    each: Vec<OnceLock<Coalescer<R, O>>>,
}

impl<R, O> PerShard<R, O> {
    pub fn new(shards: usize) -> Self {
        Self {
            node: Arc::new(Semaphore::new(IN_FLIGHT)),
            each: (0..shards).map(|_| OnceLock::new()).collect(),
        }
    }

    /// Shard `shard`'s coalescer, started by `start` (given the node's calls) on first use.
    pub fn get(&self, shard: usize, start: impl FnOnce(Arc<Semaphore>) -> Coalescer<R, O>) -> &Coalescer<R, O> {
        self.each[shard].get_or_init(|| start(self.node.clone()))
    }
}

/// What one coalesced job's request gets back (see [`ojs_store::Enqueued`]).
#[derive(Debug, Clone)]
pub struct Single {
    /// Redis time of the script call.
    pub now_ms: i64,
    /// `available`, `scheduled`, `ignored`, `conflict`, `duplicate` or `full`.
    pub state: String,
    /// The job's queue's pressure when the queue has a depth bound.
    pub pressure: Option<Pressure>,
    /// For `ignored` and `conflict`: the existing job with the same uniqueness key (id, hash).
    pub existing: Option<(String, ojs_core::StoredJob)>,
}

/// Single enqueues of this node.
pub type Enqueues = Coalescer<NewJob, Single>;

pub fn enqueues(store: Arc<Store>, max_batch: usize, node: Arc<Semaphore>) -> Enqueues {
    Coalescer::start("enqueue", max_batch, node, move |jobs: Vec<NewJob>| {
        let store = store.clone();
        async move {
            let mut e = store.enqueue_each(&jobs).await?;
            Ok(jobs
                .iter()
                .enumerate()
                .map(|(i, job)| Single {
                    now_ms: e.now_ms,
                    state: e.states.get(i).cloned().unwrap_or_default(),
                    pressure: e.pressure.iter().find(|p| p.queue == job.queue).cloned(),
                    existing: e.existing.get_mut(i).and_then(Option::take),
                })
                .collect())
        }
    })
}

/// Worker requests (FETCH, ACK, ack-and-fetch-next) of this node: each outcome comes with the Redis
/// time of its call.
pub type WorkerCalls = Coalescer<WorkerRequest, (i64, WorkerReply)>;

pub fn worker_calls(store: Arc<Store>, max_batch: usize, node: Arc<Semaphore>) -> WorkerCalls {
    Coalescer::start("worker", max_batch, node, move |requests: Vec<WorkerRequest>| {
        let store = store.clone();
        async move {
            let (now, replies) = store.worker_requests(&requests).await?;
            Ok(replies.into_iter().map(|r| (now, r)).collect())
        }
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    /// A coalescer of 5 requests a call whose calls take `pause` (or never end when `None`), counting the calls running at
    /// once in `running` and the most ever in `most`.
    fn counted(
        node: Arc<Semaphore>,
        pause: Option<Duration>,
        running: Arc<AtomicUsize>,
        most: Arc<AtomicUsize>,
    ) -> Coalescer<u32, u32> {
        Coalescer::start("test", 5, node, move |batch: Vec<u32>| {
            let (running, most) = (running.clone(), most.clone());
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                match pause {
                    Some(p) => tokio::time::sleep(p).await,
                    None => std::future::pending::<()>().await,
                }
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(batch)
            }
        })
    }

    #[tokio::test]
    async fn the_calls_in_flight_are_the_nodes_over_all_its_shards() {
        let shards = PerShard::<u32, u32>::new(3);
        let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let pause = Some(Duration::from_millis(20));
        let mut waits = Vec::new();
        for shard in 0..3 {
            let c = shards.get(shard, |node| counted(node, pause, running.clone(), most.clone()));
            for i in 0..60u32 {
                waits.push(c.call(i));
            }
        }
        let answers = futures::future::join_all(waits).await;
        assert!(answers
            .iter()
            .enumerate()
            .all(|(k, a)| a.as_ref().ok() == Some(&((k % 60) as u32))));
        assert_eq!(
            most.load(Ordering::SeqCst),
            IN_FLIGHT,
            "calls running at once over three shards"
        );
    }

    #[tokio::test]
    async fn a_shard_whose_calls_hang_leaves_the_others_a_call() {
        let shards: &'static PerShard<u32, u32> = Box::leak(Box::new(PerShard::new(2)));
        let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let stuck = shards.get(0, |node| counted(node, None, running.clone(), most.clone()));
        for i in 0..20u32 {
            // One request at a time, each its own call while shard 0 has calls to start.
            tokio::spawn(stuck.call(i));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(
            running.load(Ordering::SeqCst),
            IN_FLIGHT_PER_SHARD,
            "shard 0's hanging calls"
        );
        let other = shards.get(1, |node| {
            counted(node, Some(Duration::ZERO), running.clone(), most.clone())
        });
        let answer = tokio::time::timeout(Duration::from_secs(2), other.call(7)).await;
        assert_eq!(answer.expect("shard 1 waited on shard 0's calls").ok(), Some(7));
    }
}
