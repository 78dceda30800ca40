//! A small OJS HTTP client: producer calls ([`Client`]), a worker loop ([`Worker`]: fetch, run, ack or
//! nack, heartbeats, graceful stop), used by the `ojs` CLI and the tests.
//!
//! The values that cross the wire are `ojs-core`'s types ([`JobId`], [`QueueName`], [`JobState`],
//! [`Priority`], a job as [`JobInfo`], why it waits as [`JobExplanation`]), re-exported here; [`Client::request`], [`Client::get`] and
//! [`Client::post`] stay for any call without a typed method, answering the decoded JSON.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

pub use ojs_core::explain::{Gate, GateKind, JobExplanation};
pub use ojs_core::{JobId, JobInfo, JobState, Priority, QueueName};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::watch;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach the server: {0}")]
    Transport(#[from] reqwest::Error),
    /// The server answered with an OJS error.
    #[error("{status} {code}: {message}")]
    Api {
        status: u16,
        code: String,
        message: String,
        body: Value,
    },
    /// A 2xx answer that is not the shape the typed method expects (`body` is the text).
    #[error("unexpected answer ({error}): {body}")]
    Decode {
        #[source]
        error: serde_json::Error,
        body: String,
    },
}

pub type Result<T> = std::result::Result<T, ClientError>;

#[derive(Clone)]
pub struct Client {
    base: String,
    http: reqwest::Client,
    api_key: Option<String>,
}

impl Client {
    /// `base` is the server's root URL, e.g. `http://127.0.0.1:8080`.
    pub fn new(base: &str, api_key: Option<String>) -> Self {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(256)
            .build()
            .unwrap_or_default();
        Self {
            base: base.trim_end_matches('/').to_string(),
            http,
            api_key,
        }
    }

    /// Sends a request; answers the text of a 2xx, or the OJS error.
    async fn send(&self, method: reqwest::Method, path: &str, body: Option<String>) -> Result<String> {
        let mut r = self.http.request(method, format!("{}{path}", self.base));
        if let Some(k) = &self.api_key {
            r = r.bearer_auth(k);
        }
        if let Some(b) = body {
            r = r.header("content-type", "application/openjobspec+json").body(b);
        }
        let resp = r.send().await?;
        let status = resp.status().as_u16();
        let text = resp.text().await?;
        if (200..300).contains(&status) {
            return Ok(text);
        }
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Err(ClientError::Api {
            status,
            code: v["error"]["code"].as_str().unwrap_or("unknown").to_string(),
            message: v["error"]["message"].as_str().unwrap_or("").to_string(),
            body: v,
        })
    }

    /// A POST whose 2xx answer is read straight into `T` (no `Value` tree on the way).
    async fn post_as<T: DeserializeOwned>(&self, path: &str, body: &Value) -> Result<T> {
        let text = self.send(reqwest::Method::POST, path, Some(body.to_string())).await?;
        decode(text)
    }

    /// Any request; answers the decoded body of a 2xx (a string when it is not JSON), or the OJS error.
    pub async fn request(&self, method: reqwest::Method, path: &str, body: Option<&Value>) -> Result<Value> {
        let text = self.send(method, path, body.map(Value::to_string)).await?;
        Ok(serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    pub async fn get(&self, path: &str) -> Result<Value> {
        self.request(reqwest::Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Result<Value> {
        self.request(reqwest::Method::POST, path, Some(body)).await
    }

    /// Enqueues one job envelope; returns the created job (`post("/ojs/v1/jobs", job)` answers it
    /// whole, as JSON).
    pub async fn enqueue(&self, job: &Value) -> Result<JobInfo> {
        Ok(self.post_as::<OneJob>("/ojs/v1/jobs", job).await?.job)
    }

    pub async fn enqueue_batch(&self, jobs: &[Value]) -> Result<Vec<JobInfo>> {
        Ok(self
            .post_as::<Jobs>("/ojs/v1/jobs/batch", &json!({ "jobs": jobs }))
            .await?
            .jobs)
    }

    /// One job, typed; [`Client::job_json`] answers all of it (its error history, result…).
    pub async fn job(&self, id: &JobId) -> Result<JobInfo> {
        let text = self
            .send(reqwest::Method::GET, &format!("/ojs/v1/jobs/{id}"), None)
            .await?;
        Ok(decode::<OneJob>(text)?.job)
    }

    /// One job as the server shows it, every member.
    pub async fn job_json(&self, id: &JobId) -> Result<Value> {
        Ok(self.get(&format!("/ojs/v1/jobs/{id}")).await?["job"].take())
    }

    /// Why job `id` is not running yet (`GET /ojs/v1/jobs/{id}/explain`): its state, whether it
    /// waits, and each gate that holds it.
    pub async fn explain(&self, id: &JobId) -> Result<JobExplanation> {
        let text = self
            .send(reqwest::Method::GET, &format!("/ojs/v1/jobs/{id}/explain"), None)
            .await?;
        decode(text)
    }

    pub async fn fetch(&self, queues: &[QueueName], count: u32, worker_id: &str, wait_ms: u64) -> Result<Vec<JobInfo>> {
        Ok(self
            .post_as::<Jobs>(
                "/ojs/v1/workers/fetch",
                &json!({"queues": queues, "count": count, "worker_id": worker_id, "wait_ms": wait_ms}),
            )
            .await?
            .jobs)
    }

    /// Acks job `id` for the claim `lease_id` (the `lease_id` FETCH returned on the job): if the lease
    /// was lost meanwhile (it lapsed and the job went to another worker), the server answers 409
    /// `lease_lost` and changes nothing. `None` acts on whoever holds the job now.
    pub async fn ack(&self, id: &JobId, lease_id: Option<&str>, result: Option<Value>) -> Result<Value> {
        self.post(
            "/ojs/v1/workers/ack",
            &json!({"job_id": id, "lease_id": lease_id, "result": result}),
        )
        .await
    }

    /// Ack-and-fetch-next: acks `id` and claims up to `count` jobs in the same request (and the same
    /// Redis script); returns the claimed jobs. When the ack is refused, nothing is claimed.
    #[allow(clippy::too_many_arguments)]
    pub async fn ack_and_fetch(
        &self,
        id: &JobId,
        lease_id: Option<&str>,
        result: Option<Value>,
        queues: &[QueueName],
        count: u32,
        worker_id: &str,
        wait_ms: u64,
    ) -> Result<Vec<JobInfo>> {
        Ok(self
            .post_as::<Jobs>(
                "/ojs/v1/workers/ack",
                &json!({"job_id": id, "lease_id": lease_id, "result": result,
                    "fetch": {"queues": queues, "count": count, "worker_id": worker_id, "wait_ms": wait_ms}}),
            )
            .await?
            .jobs)
    }

    /// Reports a failure of job `id` for the claim `lease_id` (see [`Client::ack`]).
    pub async fn nack(&self, id: &JobId, lease_id: Option<&str>, error: Value) -> Result<Value> {
        self.post(
            "/ojs/v1/workers/nack",
            &json!({"job_id": id, "lease_id": lease_id, "error": error}),
        )
        .await
    }

    /// Extends the leases of `active` (job id, lease id). Returns the worker state the server asks for
    /// (`running`, `quiet` or `terminate`) and the jobs whose lease is lost: stop working on those.
    pub async fn heartbeat(&self, worker_id: &str, active: &[(JobId, Option<String>)]) -> Result<(String, Vec<JobId>)> {
        let jobs: Vec<Value> = active
            .iter()
            .map(|(id, lease)| json!({"job_id": id, "lease_id": lease}))
            .collect();
        let v: Heartbeat = self
            .post_as(
                "/ojs/v1/workers/heartbeat",
                &json!({"worker_id": worker_id, "active_jobs": jobs}),
            )
            .await?;
        // An id that is not a job id names no job this worker holds.
        let lost = v.lost_jobs.iter().filter_map(|j| JobId::parse(j).ok()).collect();
        Ok((v.state.unwrap_or_else(|| "running".to_string()), lost))
    }
}

/// Reads a 2xx answer's text as `T`.
fn decode<T: DeserializeOwned>(text: String) -> Result<T> {
    serde_json::from_str(&text).map_err(|error| ClientError::Decode { error, body: text })
}

/// `{"job": …}`: enqueue's and `GET /jobs/{id}`'s answer.
#[derive(Deserialize)]
struct OneJob {
    job: JobInfo,
}

/// `{"jobs": […]}`: fetch's, ack-and-fetch's and batch enqueue's answer (none when absent).
#[derive(Deserialize)]
struct Jobs {
    #[serde(default)]
    jobs: Vec<JobInfo>,
}

#[derive(Deserialize)]
struct Heartbeat {
    state: Option<String>,
    #[serde(default)]
    lost_jobs: Vec<String>,
}

/// What a handler reports when a job fails: the OJS error object (`type`, `message`, `retryable`…).
pub type JobError = Value;

/// A job this worker runs: its lease (sent with every ACK, NACK and heartbeat) and the signal that
/// tells its loop the lease was lost.
struct Held {
    id: JobId,
    lease_id: Option<String>,
    lost: Arc<tokio::sync::Notify>,
}

/// A worker: `concurrency` loops that fetch from `queues`, run the handler, then ack or nack; one
/// heartbeat loop; stops fetching when [`Worker::stop`] is called (or the server says quiet/terminate)
/// and returns once in-flight jobs are finished. Every ACK, NACK and heartbeat names the job's lease,
/// so a worker whose lease lapsed can never complete or fail a job another worker now runs; when a
/// heartbeat reports a lease lost, the handler's future is dropped and nothing is reported.
pub struct Worker {
    client: Client,
    pub id: String,
    queues: Vec<QueueName>,
    concurrency: usize,
    heartbeat_every: Duration,
    stop_tx: watch::Sender<bool>,
}

impl Worker {
    pub fn new(client: Client, id: &str, queues: &[QueueName], concurrency: usize) -> Self {
        Self {
            client,
            id: id.to_string(),
            queues: queues.to_vec(),
            concurrency: concurrency.max(1),
            heartbeat_every: Duration::from_secs(5),
            stop_tx: watch::channel(false).0,
        }
    }

    /// How often the worker heartbeats its jobs (default 5 s); keep it well under the lease length.
    pub fn heartbeat_every(mut self, every: Duration) -> Self {
        self.heartbeat_every = every.max(Duration::from_millis(10));
        self
    }

    /// Asks the worker to stop: no new fetches; in-flight jobs finish and are acked or nacked.
    pub fn stop(&self) {
        let _ = self.stop_tx.send(true);
    }

    /// A handle that stops this worker from another task.
    pub fn stopper(&self) -> watch::Sender<bool> {
        self.stop_tx.clone()
    }

    /// Runs until stopped, handing the handler each job as a [`JobInfo`] (its id, type, queue, args,
    /// attempt, lease). Returns how many jobs were acked and nacked.
    pub async fn run<F, Fut>(&self, handler: F) -> (u64, u64)
    where
        F: Fn(JobInfo) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<Option<Value>, JobError>> + Send,
    {
        let handler = Arc::new(handler);
        let active: Arc<tokio::sync::Mutex<Vec<Held>>> = Arc::default();
        let stop = self.stop_tx.subscribe();
        let hb = {
            let every = self.heartbeat_every;
            let (client, id, active, mut stop, stop_tx) = (
                self.client.clone(),
                self.id.clone(),
                active.clone(),
                stop.clone(),
                self.stop_tx.clone(),
            );
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep(every) => {}
                        _ = stop.changed() => return,
                    }
                    let held: Vec<(JobId, Option<String>)> = active
                        .lock()
                        .await
                        .iter()
                        .map(|h| (h.id.clone(), h.lease_id.clone()))
                        .collect();
                    if let Ok((state, lost)) = client.heartbeat(&id, &held).await {
                        if state == "quiet" || state == "terminate" {
                            let _ = stop_tx.send(true);
                        }
                        for h in active.lock().await.iter().filter(|h| lost.contains(&h.id)) {
                            h.lost.notify_one();
                        }
                    }
                }
            })
        };
        let mut loops = Vec::new();
        for _ in 0..self.concurrency {
            let (client, id, queues, handler, active, stop) = (
                self.client.clone(),
                self.id.clone(),
                self.queues.clone(),
                handler.clone(),
                active.clone(),
                stop.clone(),
            );
            loops.push(tokio::spawn(async move {
                let (mut acked, mut nacked) = (0u64, 0u64);
                // Jobs claimed by the last ack-and-fetch-next, run before fetching again.
                let mut next: Vec<JobInfo> = Vec::new();
                while !*stop.borrow() || !next.is_empty() {
                    let jobs = if next.is_empty() {
                        match client.fetch(&queues, 1, &id, 1_000).await {
                            Ok(j) => j,
                            Err(_) => {
                                tokio::time::sleep(Duration::from_millis(200)).await;
                                continue;
                            }
                        }
                    } else {
                        std::mem::take(&mut next)
                    };
                    for job in jobs {
                        let jid = job.id.clone();
                        let lease = job.lease_id.clone();
                        let lost = Arc::new(tokio::sync::Notify::new());
                        active.lock().await.push(Held {
                            id: jid.clone(),
                            lease_id: lease.clone(),
                            lost: lost.clone(),
                        });
                        let outcome = tokio::select! {
                            o = handler(job) => Some(o),
                            _ = lost.notified() => None,
                        };
                        let lease = lease.as_deref();
                        let sent = match outcome {
                            None => {
                                tracing::warn!(job = %jid, "lease lost (the job went back to the queue): stopped it");
                                Ok(())
                            }
                            // A successful job is acked together with the claim of the next one:
                            // one request per job while there is work.
                            Some(Ok(result)) if !*stop.borrow() => client
                                .ack_and_fetch(&jid, lease, result, &queues, 1, &id, 1_000)
                                .await
                                .map(|more| {
                                    acked += 1;
                                    next.extend(more);
                                }),
                            Some(Ok(result)) => client.ack(&jid, lease, result).await.map(|_| acked += 1),
                            Some(Err(e)) => client.nack(&jid, lease, e).await.map(|_| nacked += 1),
                        };
                        if let Err(e) = sent {
                            tracing::warn!(job = %jid, error = %e, "could not report the job's outcome");
                        }
                        active.lock().await.retain(|a| a.id != jid);
                    }
                }
                (acked, nacked)
            }));
        }
        let mut totals = (0, 0);
        for l in loops {
            if let Ok((a, n)) = l.await {
                totals.0 += a;
                totals.1 += n;
            }
        }
        hb.abort();
        totals
    }
}
