//! Group commit: concurrent requests of one kind arriving at one node share one script call. A request
//! hands its validated input to this node's coalescer for its kind and waits for its own outcome. The
//! coalescer keeps at most `IN_FLIGHT` script calls running; while they run, new requests queue up and
//! go together in the next call (up to the batch limit). An idle node adds no delay: a lone request is
//! sent at once, as a batch of one. The wait is bounded by the calls already in flight, never by a timer.
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
use std::sync::Arc;

use ojs_core::job::NewJob;
use ojs_store::{Pressure, Store, StoreError, WorkerReply, WorkerRequest};
use tokio::sync::{mpsc, oneshot, Semaphore};

/// Script calls in flight per node and kind; more requests than this wait and are batched.
const IN_FLIGHT: usize = 4;

type Reply<O> = oneshot::Sender<Result<O, StoreError>>;

/// A coalescer for requests `R` answered with `O` (see the module's documentation).
pub struct Coalescer<R, O> {
    tx: mpsc::UnboundedSender<(R, Reply<O>)>,
    kind: &'static str,
}

impl<R: Send + 'static, O: Send + 'static> Coalescer<R, O> {
    /// Starts the coalescing task (it ends when the coalescer is dropped). Must run inside a runtime.
    /// `run` serves one batch and returns one outcome per request, in order.
    pub fn start<F, Fut>(kind: &'static str, max_batch: usize, run: F) -> Self
    where
        F: Fn(Vec<R>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<O>, StoreError>> + Send + 'static,
    {
        let (tx, mut rx) = mpsc::unbounded_channel::<(R, Reply<O>)>();
        let max_batch = max_batch.max(1);
        let run = Arc::new(run);
        tokio::spawn(async move {
            let slots = Arc::new(Semaphore::new(IN_FLIGHT));
            loop {
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    return;
                };
                let Some(first) = rx.recv().await else { return };
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

pub fn enqueues(store: Arc<Store>, max_batch: usize) -> Enqueues {
    Coalescer::start("enqueue", max_batch, move |jobs: Vec<NewJob>| {
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

pub fn worker_calls(store: Arc<Store>, max_batch: usize) -> WorkerCalls {
    Coalescer::start("worker", max_batch, move |requests: Vec<WorkerRequest>| {
        let store = store.clone();
        async move {
            let (now, replies) = store.worker_requests(&requests).await?;
            Ok(replies.into_iter().map(|r| (now, r)).collect())
        }
    })
}
