//! Group commit: concurrent requests of one kind arriving at one node share one script call. A request
//! hands its validated input to its shard's coalescer for its kind and waits for its own outcome. A node
//! keeps at most `IN_FLIGHT` (four) script calls of a kind running: on a deployment of one shard all
//! four may be that shard's, on two shards two each, on three or more one each (and four in all). While
//! a shard's calls run, its new requests queue up and go together in its next call (up to the batch
//! limit). An idle node adds no delay: a lone request is sent at once, as a batch of one. The wait is
//! bounded by the calls already in flight, never by a timer.
//!
//! Why fewer calls per shard on more shards (issue 39): each call wakes its primary, and a primary that
//! sleeps between calls pays for the wake-up. With four calls per shard on three shards, a call carried
//! 3.1 single enqueues where one shard's carried 8.7, and the three primaries together spent 1.5x of one
//! primary's Redis CPU per job (benches/RESULTS.md). With one call per shard in flight a call carries
//! about as many requests as on one shard. It also bounds what one shard whose calls hang (its slot
//! moving to another primary, its primary failing over: up to the store's 10 s of retries) can hold of
//! the node's calls: on several shards, the others keep theirs.
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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use ojs_core::job::NewJob;
use ojs_store::{Pressure, Store, StoreError, WorkerReply, WorkerRequest};
use tokio::sync::{mpsc, oneshot, Semaphore};

/// Script calls of one kind in flight per node (and at most per shard); more requests wait and are batched.
const IN_FLIGHT: usize = 4;

type Reply<O> = oneshot::Sender<Result<O, StoreError>>;

/// A coalescer for requests `R` answered with `O` (see the module's documentation).
pub struct Coalescer<R, O> {
    tx: mpsc::UnboundedSender<(R, Reply<O>)>,
    kind: &'static str,
}

impl<R: Send + 'static, O: Send + 'static> Coalescer<R, O> {
    /// Starts the coalescing task (it ends when the coalescer is dropped). Must run inside a runtime.
    /// `run` serves one batch and returns one outcome per request, in order; each call holds its share
    /// of the shard's calls and one of the node's (`calls`, shared with the other shards' coalescers).
    pub fn start<F, Fut>(kind: &'static str, max_batch: usize, calls: Calls, run: F) -> Self
    where
        F: Fn(Vec<R>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<O>, StoreError>> + Send + 'static,
    {
        let (tx, mut rx) = mpsc::unbounded_channel::<(R, Reply<O>)>();
        let max_batch = max_batch.max(1);
        let run = Arc::new(run);
        tokio::spawn(async move {
            let own = Arc::new(Semaphore::new(IN_FLIGHT));
            loop {
                // A request first, then the slots: an idle shard holds none of the node's.
                let Some(first) = rx.recv().await else { return };
                let Ok(own_slot) = own.clone().acquire_many_owned(calls.weight()).await else {
                    return;
                };
                let Ok(node_slot) = calls.node.clone().acquire_owned().await else {
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

/// The node's script calls of one kind, shared by its shards' coalescers.
#[derive(Clone)]
pub struct Calls {
    node: Arc<Semaphore>,
    /// The deployment's shards, as last seen by a request.
    shards: Arc<AtomicUsize>,
}

impl Calls {
    /// How many of its shard's `IN_FLIGHT` permits one call takes: on one shard, a shard runs all four
    /// of the node's calls; on two, two each; on three or more, one each.
    fn weight(&self) -> u32 {
        self.shards.load(Ordering::Relaxed).clamp(1, IN_FLIGHT) as u32
    }
}

/// One kind's coalescers, one per shard, each started on first use (inside the runtime), sharing the
/// node's calls of the kind.
pub struct PerShard<R, O> {
    calls: Calls,
    each: Vec<OnceLock<Coalescer<R, O>>>,
}

impl<R, O> PerShard<R, O> {
    pub fn new(shards: usize) -> Self {
        Self {
            calls: Calls {
                node: Arc::new(Semaphore::new(IN_FLIGHT)),
                shards: Arc::new(AtomicUsize::new(1)),
            },
            each: (0..shards).map(|_| OnceLock::new()).collect(),
        }
    }

    /// Shard `shard`'s coalescer (of a deployment of `shards` shards), started by `start` on first use.
    pub fn get(&self, shard: usize, shards: usize, start: impl FnOnce(Calls) -> Coalescer<R, O>) -> &Coalescer<R, O> {
        if self.calls.shards.load(Ordering::Relaxed) != shards {
            self.calls.shards.store(shards, Ordering::Relaxed);
        }
        self.each[shard].get_or_init(|| start(self.calls.clone()))
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

pub fn enqueues(store: Arc<Store>, max_batch: usize, calls: Calls) -> Enqueues {
    Coalescer::start("enqueue", max_batch, calls, move |jobs: Vec<NewJob>| {
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

pub fn worker_calls(store: Arc<Store>, max_batch: usize, calls: Calls) -> WorkerCalls {
    Coalescer::start("worker", max_batch, calls, move |requests: Vec<WorkerRequest>| {
        let store = store.clone();
        async move {
            let (now, replies) = store.worker_requests(&requests).await?;
            Ok(replies.into_iter().map(|r| (now, r)).collect())
        }
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Calls running at once: now and the most ever, of one shard or of all.
    #[derive(Clone, Default)]
    struct Running(Arc<(AtomicUsize, AtomicUsize)>);

    impl Running {
        fn enter(&self) {
            let now = self.0 .0.fetch_add(1, Ordering::SeqCst) + 1;
            self.0 .1.fetch_max(now, Ordering::SeqCst);
        }
        fn leave(&self) {
            self.0 .0.fetch_sub(1, Ordering::SeqCst);
        }
        fn now(&self) -> usize {
            self.0 .0.load(Ordering::SeqCst)
        }
        fn most(&self) -> usize {
            self.0 .1.load(Ordering::SeqCst)
        }
    }

    /// A coalescer of 5 requests a call whose calls take `pause` (or never end when `None`), counted in
    /// `all` and `own`.
    fn counted(calls: Calls, pause: Option<Duration>, all: Running, own: Running) -> Coalescer<u32, u32> {
        Coalescer::start("test", 5, calls, move |batch: Vec<u32>| {
            let (all, own) = (all.clone(), own.clone());
            async move {
                all.enter();
                own.enter();
                match pause {
                    Some(p) => tokio::time::sleep(p).await,
                    None => std::future::pending::<()>().await,
                }
                all.leave();
                own.leave();
                Ok(batch)
            }
        })
    }

    /// Sends 60 requests to each of the first `used` shards of a deployment of `shards` at once; returns
    /// the most calls that ran at once in all and in each shard.
    async fn load(shards: usize, used: usize) -> (usize, Vec<usize>) {
        let per = PerShard::<u32, u32>::new(shards);
        let all = Running::default();
        let own: Vec<Running> = (0..used).map(|_| Running::default()).collect();
        let mut waits = Vec::new();
        for (shard, own) in own.iter().enumerate() {
            let c = per.get(shard, shards, |calls| {
                counted(calls, Some(Duration::from_millis(20)), all.clone(), own.clone())
            });
            for i in 0..60u32 {
                waits.push(c.call(i));
            }
        }
        let answers = futures::future::join_all(waits).await;
        assert!(answers
            .iter()
            .enumerate()
            .all(|(k, a)| a.as_ref().ok() == Some(&((k % 60) as u32))));
        (all.most(), own.iter().map(Running::most).collect())
    }

    #[tokio::test]
    async fn one_shard_runs_the_nodes_four_calls() {
        assert_eq!(load(1, 1).await, (4, vec![4]));
    }

    #[tokio::test]
    async fn two_shards_run_two_calls_each() {
        assert_eq!(load(2, 2).await, (4, vec![2, 2]));
    }

    #[tokio::test]
    async fn three_shards_or_more_run_one_call_each_and_four_in_all() {
        assert_eq!(load(3, 3).await, (3, vec![1, 1, 1]));
        let (all, each) = load(6, 6).await;
        assert_eq!(all, 4, "calls running at once over six shards");
        assert!(each.iter().all(|&n| n == 1), "{each:?}");
    }

    #[tokio::test]
    async fn a_shard_whose_calls_hang_leaves_the_others_theirs() {
        let per: &'static PerShard<u32, u32> = Box::leak(Box::new(PerShard::new(2)));
        let (all, hung) = (Running::default(), Running::default());
        let stuck = per.get(0, 2, |calls| counted(calls, None, all.clone(), hung.clone()));
        for i in 0..20u32 {
            // One request at a time, each its own call while shard 0 has calls to start.
            tokio::spawn(stuck.call(i));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(hung.now(), 2, "shard 0's hanging calls");
        let other = per.get(1, 2, |calls| {
            counted(calls, Some(Duration::ZERO), all.clone(), Running::default())
        });
        let answers = futures::future::join_all((0..20).map(|i| other.call(i)));
        let answers = tokio::time::timeout(Duration::from_secs(2), answers).await;
        assert_eq!(answers.expect("shard 1 waited on shard 0's calls").len(), 20);
    }
}
