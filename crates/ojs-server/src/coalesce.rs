//! Coalesced single enqueues. Concurrent `POST /jobs` requests arriving at one node share one enqueue
//! script call: a request hands its validated job to this node's coalescer and waits for its own
//! outcome. The coalescer keeps at most `IN_FLIGHT` script calls running; while they run, new jobs
//! queue up and go together in the next call (up to the batch limit). An idle node adds no delay: a
//! lone request is sent at once, as a batch of one.
//!
//! Each job in a coalesced call stands alone (the script's `each` mode): a duplicate id fails only its
//! own request, and a job with a unique policy meets the jobs before it in the call as stored ones, so
//! concurrent duplicates produce one job however they were grouped. Nothing is acknowledged to a client before the script that wrote its job has returned,
//! so a crash loses only requests that were never answered, exactly as without coalescing.

use std::sync::Arc;

use ojs_core::job::NewJob;
use ojs_store::{JobFields, Pressure, Store, StoreError};
use tokio::sync::{mpsc, oneshot, Semaphore};

/// Script calls in flight per node; more requests than this wait and are batched.
const IN_FLIGHT: usize = 4;

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
    pub existing: Option<(String, JobFields)>,
}

pub type Outcome = Result<Single, StoreError>;

struct Pending {
    job: NewJob,
    reply: oneshot::Sender<Outcome>,
}

pub struct Coalescer {
    tx: mpsc::UnboundedSender<Pending>,
}

impl Coalescer {
    /// Starts the coalescing task (it ends when the coalescer is dropped). Must run inside a runtime.
    pub fn start(store: Arc<Store>, max_batch: usize) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<Pending>();
        let max_batch = max_batch.max(1);
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
                let store = store.clone();
                tokio::spawn(async move {
                    let _slot = slot;
                    let (jobs, replies): (Vec<NewJob>, Vec<_>) = batch.into_iter().map(|p| (p.job, p.reply)).unzip();
                    metrics::histogram!("ojs_enqueue_coalesced_batch_size").record(jobs.len() as f64);
                    match store.enqueue_each(&jobs).await {
                        Ok(mut e) => {
                            for (i, (reply, job)) in replies.into_iter().zip(&jobs).enumerate() {
                                let _ = reply.send(Ok(Single {
                                    now_ms: e.now_ms,
                                    state: e.states.get(i).cloned().unwrap_or_default(),
                                    pressure: e.pressure.iter().find(|p| p.queue == job.queue).cloned(),
                                    existing: e.existing.get_mut(i).and_then(Option::take),
                                }));
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
        Self { tx }
    }

    /// Enqueues one job through the next coalesced script call.
    pub async fn enqueue(&self, job: NewJob) -> Outcome {
        let (reply, rx) = oneshot::channel();
        let gone = || StoreError::Unavailable("the enqueue coalescer stopped".into());
        self.tx.send(Pending { job, reply }).map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }
}
