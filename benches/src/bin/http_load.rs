//! Our side of benches/compare.sh: the BullMQ peer's scenarios, through an ojs-server's HTTP API with
//! keep-alive connections, measured against the Redis the server uses. One JSON line per run:
//!   http_load <server-url> <redis-url> <scenario> <jobs>
//! scenarios: add (one job per request, 64 in flight), bulk (batches of 1000), process (pre-load jobs
//! with priorities 0..9 and a ~100-byte payload, then 50 concurrent workers each fetch one job, then ack
//! it and claim the next in the same request, as the ojs-client Worker does), process_split (the same
//! jobs, but every worker fetches and acks in separate requests, as every official OJS SDK does),
//! latency (500 jobs/s; enqueue -> fetched and enqueue -> acked, p50/p99).
//! With `OJS_BENCH_SERVER_PID` set, the server's own CPU time over the run (from `/proc/<pid>/stat`) is
//! reported as `server_cpu_us`, with the number of HTTP requests sent as `requests`. `OJS_BENCH_PEER`
//! names the peer in the output line (default `ojs`; compare.sh's baseline runs say `ojs-baseline`).
//! Redis' command statistics are reset when the measured part begins (`CONFIG RESETSTAT`), and the line
//! reports `script_calls`, `script_us`, `command_calls`, `command_us`, `blocking_calls`, `blocking_us` from
//! `INFO commandstats` at its end
//! (`ojs_bench::CommandStats`).
//! `OJS_BENCH_RATE_LIMIT` (process and process_split) gives every pre-loaded job that `rate_limit`
//! (JSON; `KEY` in its key becomes one of 8 keys, `k0`..`k7`, round-robin), and `OJS_BENCH_QUEUE_LIMIT`
//! sets that body as each queue's own limit (`PUT /admin/queues/{q}/rate-limit`) before loading: what a
//! limited job, or one with a floor in its queue's pool, costs against a plain one. `OJS_BENCH_JOB` (a
//! JSON object; `KEY` in it becomes `k0`..`k7` as above) sets its fields on every pre-loaded job: e.g.
//! `{"meta": {"tenant_id": "KEY"}}` spreads them over 8 tenants, `{"options": {"dedup": true}}`.
//! `OJS_BENCH_QUEUE_RETENTION` (JSON) sets each queue's ended-job retention (`PUT
//! /admin/queues/{q}/retention`): `{"keep_last": 0}` lists none, what an ending costs without the index.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ojs_bench::{process_cpu_us, Probe, PAYLOAD};
use rand::Rng;
use serde_json::{json, Value};

/// HTTP requests sent since the measured part of a scenario began.
static REQUESTS: AtomicUsize = AtomicUsize::new(0);

async fn post(http: &reqwest::Client, url: &str, body: &Value) -> anyhow::Result<Value> {
    REQUESTS.fetch_add(1, Ordering::Relaxed);
    let r = http
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await?;
    let status = r.status();
    let v: Value = r.json().await?;
    anyhow::ensure!(status.is_success(), "{url}: {status} {v}");
    Ok(v)
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(((v.len() as f64 * p) as usize).min(v.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0.0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    anyhow::ensure!(
        args.len() == 5,
        "usage: http_load <server-url> <redis-url> <add|bulk|process|process_split|latency> <jobs>"
    );
    let server_pid: Option<u32> = std::env::var("OJS_BENCH_SERVER_PID").ok().and_then(|p| p.parse().ok());
    let (base, redis_url, scenario, jobs) = (
        args[1].clone(),
        args[2].clone(),
        args[3].clone(),
        args[4].parse::<usize>()?,
    );
    let http = reqwest::Client::builder().pool_max_idle_per_host(128).build()?;
    // `redis_url` may list every primary of a cluster (`url,url,…`): their CPU is added up, and the
    // busiest one reported too. OJS_BENCH_QUEUES spreads the jobs over several queues (round-robin;
    // each worker fetches from one), e.g. queues pinned to different shards.
    let mut probe = Probe::connect(&redis_url).await?;
    let queues: Vec<String> = std::env::var("OJS_BENCH_QUEUES")
        .unwrap_or_else(|_| "bench".into())
        .split(',')
        .filter(|q| !q.is_empty())
        .map(str::to_owned)
        .collect();
    let queues = Arc::new(queues);
    let queue_of = {
        let queues = queues.clone();
        move |i: usize| queues[i % queues.len()].clone()
    };
    let jobs_url = format!("{base}/ojs/v1/jobs");
    let mut extra = json!({});
    let c0;
    let t0;
    let s0;
    match scenario.as_str() {
        "add" => {
            c0 = probe.begin().await?;
            s0 = server_pid.map(process_cpu_us).transpose()?;
            REQUESTS.store(0, Ordering::Relaxed);
            t0 = Instant::now();
            let next = Arc::new(AtomicUsize::new(0));
            let mut tasks = Vec::new();
            for _ in 0..64 {
                let (http, url, next, queue_of) = (http.clone(), jobs_url.clone(), next.clone(), queue_of.clone());
                tasks.push(tokio::spawn(async move {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= jobs {
                            break;
                        }
                        post(&http, &url, &json!({"type": "noop", "args": [1], "queue": queue_of(i)})).await?;
                    }
                    anyhow::Ok(())
                }));
            }
            for t in tasks {
                t.await??;
            }
        }
        "bulk" => {
            c0 = probe.begin().await?;
            s0 = server_pid.map(process_cpu_us).transpose()?;
            REQUESTS.store(0, Ordering::Relaxed);
            t0 = Instant::now();
            let url = format!("{base}/ojs/v1/jobs/batch");
            let mut i = 0;
            while i < jobs {
                let n = (jobs - i).min(1000);
                let batch: Vec<Value> = (0..n)
                    .map(|k| json!({"type": "noop", "args": [i + k], "queue": queue_of(i + k)}))
                    .collect();
                post(&http, &url, &json!({ "jobs": batch })).await?;
                i += n;
            }
        }
        "process" | "process_split" => {
            let split = scenario == "process_split";
            let limit: Option<String> = std::env::var("OJS_BENCH_RATE_LIMIT").ok().filter(|l| !l.is_empty());
            let more: Option<String> = std::env::var("OJS_BENCH_JOB").ok().filter(|l| !l.is_empty());
            for (var, setting) in [
                ("OJS_BENCH_QUEUE_LIMIT", "rate-limit"),
                ("OJS_BENCH_QUEUE_RETENTION", "retention"),
            ] {
                let Ok(body) = std::env::var(var) else { continue };
                let body: Value = serde_json::from_str(&body)?;
                for q in queues.iter() {
                    let r = http
                        .put(format!("{base}/ojs/v1/admin/queues/{q}/{setting}"))
                        .json(&body)
                        .send()
                        .await?;
                    anyhow::ensure!(r.status().is_success(), "queue {setting} of {q}: {}", r.status());
                }
            }
            let m0 = probe.memory().await?;
            let url = format!("{base}/ojs/v1/jobs/batch");
            let mut i = 0;
            let mut rng = rand::rng();
            while i < jobs {
                let n = (jobs - i).min(1000);
                let batch: Vec<Value> = (0..n)
                    .map(|k| {
                        let mut job = json!({"type": "noop", "args": [i + k, PAYLOAD], "queue": queue_of(i + k), "priority": rng.random_range(0..10)});
                        if let Some(l) = &limit {
                            let l = l.replace("KEY", &format!("k{}", (i + k) % 8));
                            job["rate_limit"] = serde_json::from_str(&l).unwrap_or(Value::Null);
                        }
                        if let Some(m) = &more {
                            let m = m.replace("KEY", &format!("k{}", (i + k) % 8));
                            if let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(&m) {
                                for (name, v) in fields {
                                    job[name] = v;
                                }
                            }
                        }
                        job
                    })
                    .collect();
                post(&http, &url, &json!({ "jobs": batch })).await?;
                i += n;
            }
            extra["memory_per_queued_job"] = json!((probe.memory().await?.saturating_sub(m0)) as f64 / jobs as f64);
            c0 = probe.begin().await?;
            s0 = server_pid.map(process_cpu_us).transpose()?;
            REQUESTS.store(0, Ordering::Relaxed);
            t0 = Instant::now();
            let done = Arc::new(AtomicUsize::new(0));
            let mut tasks = Vec::new();
            for w in 0..50 {
                let (http, base, done) = (http.clone(), base.clone(), done.clone());
                let queue = queue_of(w);
                tasks.push(tokio::spawn(async move {
                    let fetch = format!("{base}/ojs/v1/workers/fetch");
                    let ack = format!("{base}/ojs/v1/workers/ack");
                    let next_req = json!({"queues": [queue], "worker_id": format!("w{w}")});
                    // process: as the ojs-client Worker does, fetch when idle, then ack each job together
                    // with the claim of the next one (ack-and-fetch-next), one request per job.
                    // process_split: as the official SDKs do, a FETCH and an ACK request per job.
                    let mut current: Option<String> = None;
                    while done.load(Ordering::Relaxed) < jobs {
                        let got = match current.take() {
                            None => post(&http, &fetch, &next_req).await?,
                            Some(id) if split => {
                                post(&http, &ack, &json!({"job_id": id})).await?;
                                done.fetch_add(1, Ordering::Relaxed);
                                post(&http, &fetch, &next_req).await?
                            }
                            Some(id) => {
                                let r = post(&http, &ack, &json!({"job_id": id, "fetch": next_req})).await?;
                                done.fetch_add(1, Ordering::Relaxed);
                                r
                            }
                        };
                        current = got["jobs"][0]["id"].as_str().map(str::to_owned);
                    }
                    anyhow::Ok(())
                }));
            }
            for t in tasks {
                t.await??;
            }
        }
        "latency" => {
            c0 = probe.begin().await?;
            s0 = server_pid.map(process_cpu_us).transpose()?;
            REQUESTS.store(0, Ordering::Relaxed);
            t0 = Instant::now();
            let sent: Arc<std::sync::Mutex<std::collections::HashMap<String, Instant>>> = Arc::default();
            let fetched: Arc<std::sync::Mutex<Vec<f64>>> = Arc::default();
            let acked: Arc<std::sync::Mutex<Vec<f64>>> = Arc::default();
            let mut workers = Vec::new();
            for w in 0..50 {
                let (http, base, sent, fetched, acked) =
                    (http.clone(), base.clone(), sent.clone(), fetched.clone(), acked.clone());
                workers.push(tokio::spawn(async move {
                    let fetch = format!("{base}/ojs/v1/workers/fetch");
                    let ack = format!("{base}/ojs/v1/workers/ack");
                    while acked.lock().map(|a| a.len()).unwrap_or(jobs) < jobs {
                        let got = post(
                            &http,
                            &fetch,
                            &json!({"queues": ["bench"], "worker_id": format!("w{w}"), "wait_ms": 200}),
                        )
                        .await?;
                        let Some(id) = got["jobs"][0]["id"].as_str().map(str::to_owned) else {
                            continue;
                        };
                        let start = sent.lock().ok().and_then(|s| s.get(&id).copied());
                        if let Some(s) = start {
                            if let Ok(mut f) = fetched.lock() {
                                f.push(s.elapsed().as_secs_f64() * 1000.0);
                            }
                        }
                        post(&http, &ack, &json!({"job_id": id})).await?;
                        if let (Some(s), Ok(mut a)) = (start, acked.lock()) {
                            a.push(s.elapsed().as_secs_f64() * 1000.0);
                        }
                    }
                    anyhow::Ok(())
                }));
            }
            let interval = Duration::from_millis(2);
            let start = Instant::now();
            for i in 0..jobs {
                let due = start + interval * i as u32;
                tokio::time::sleep_until(due.into()).await;
                let id = ojs_core::names::new_job_id();
                if let Ok(mut s) = sent.lock() {
                    s.insert(id.clone(), Instant::now());
                }
                post(
                    &http,
                    &jobs_url,
                    &json!({"id": id, "type": "noop", "args": [i], "queue": "bench"}),
                )
                .await?;
            }
            for w in workers {
                w.await??;
            }
            let mut f = fetched.lock().map(|v| v.clone()).unwrap_or_default();
            let mut a = acked.lock().map(|v| v.clone()).unwrap_or_default();
            extra = json!({"fetched_p50_ms": pct(&mut f, 0.5), "fetched_p99_ms": pct(&mut f, 0.99),
                "acked_p50_ms": pct(&mut a, 0.5), "acked_p99_ms": pct(&mut a, 0.99)});
        }
        other => anyhow::bail!("unknown scenario {other}"),
    }
    let seconds = t0.elapsed().as_secs_f64();
    let c1 = probe.cpu_us().await?;
    let cs = probe.command_stats().await?;
    let per_node: Vec<f64> = c1.iter().zip(&c0).map(|(a, b)| a - b).collect();
    let cpu: f64 = per_node.iter().sum();
    let peer = std::env::var("OJS_BENCH_PEER").unwrap_or_else(|_| "ojs".into());
    let mut out = json!({"peer": peer, "scenario": scenario, "jobs": jobs, "seconds": seconds,
        "redis_cpu_us": cpu, "redis_cpu_us_busiest_node": per_node.iter().copied().fold(0.0, f64::max),
        "redis_cpu_us_per_node": per_node,
        "jobs_per_s": jobs as f64 / seconds,
        "requests": REQUESTS.load(Ordering::Relaxed),
        "script_calls": cs.script_calls, "script_us": cs.script_us,
        "command_calls": cs.command_calls, "command_us": cs.command_us,
        "blocking_calls": cs.blocking_calls, "blocking_us": cs.blocking_us});
    if let (Some(pid), Some(s0)) = (server_pid, s0) {
        out["server_cpu_us"] = json!(process_cpu_us(pid)? - s0);
    }
    if let (Value::Object(o), Value::Object(e)) = (&mut out, extra) {
        o.extend(e);
    }
    println!("{out}");
    Ok(())
}
