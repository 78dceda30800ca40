//! What does one release of a rate-limit key cost when many tenants share it? Each tenant's jobs wait in
//! its own sub-queue of the queue, so each has its own lane for the key; with the key at its limit, every
//! lane but the running job's is parked. An ACK, a NACK or a cancel of the running job gives the slot
//! back and re-opens parked lanes (lua/includes/rl_lanes.lua Lane.wake): issue 37 item 10 asks that the
//! longest Redis call of each be within 2x with 10,000 tenants of the same with 10 (it re-opened every
//! lane: 250-360 ms with 10,000). Measured as Redis sees it: SLOWLOG with every call logged, the longest
//! FCALL of the operation (median of `rounds`).
//!
//!   cargo run --release -p ojs-bench --bin shared_key
//!   cargo run --release -p ojs-bench --bin shared_key -- --smoke

use clap::Parser;
use ojs_bench::{fresh, median};
use ojs_core::envelope::{parse, EnvelopeRules};
use ojs_core::job::NewJob;
use ojs_store::{ClaimRef, Store, Strategy, Transition};
use serde_json::json;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 10_000)]
    tenants: usize,
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    #[arg(long)]
    smoke: bool,
}

/// The id of a claimed job (in its stored envelope).
fn claimed_id(c: &ojs_store::Claimed) -> anyhow::Result<String> {
    let doc: serde_json::Value = serde_json::from_str(c.job.doc.as_deref().unwrap_or("{}"))?;
    Ok(doc["id"].as_str().unwrap_or_default().to_string())
}

/// Claims the queue's next job that may start, parking every lane met on the way (100 per call).
async fn claim(store: &Store, queue: &str) -> anyhow::Result<String> {
    let q = vec![(queue.to_string(), 1)];
    for _ in 0..10_000 {
        let (_, got) = store.fetch(&q, Strategy::Strict, "bench", 1, None).await?;
        if let Some(c) = got.first() {
            return claimed_id(c);
        }
    }
    anyhow::bail!("nothing to claim in {queue}")
}

/// Parks every lane of the key but the running job's (FETCH meets each at the key's limit: at most 100
/// per call), until the key's index of parked lanes holds `lanes`.
async fn park_all(store: &Store, queue: &str, key: &str, lanes: u64) -> anyhow::Result<()> {
    let q = vec![(queue.to_string(), 1)];
    let mut conn = store.connection().await?;
    for _ in 0..10_000 {
        let parked: u64 = conn
            .on_tag(
                redis::cmd("ZCARD").arg(store.keys().rl_parked(key)),
                &store.keys().schema(),
            )
            .await?;
        if parked >= lanes {
            return Ok(());
        }
        let (_, got) = store.fetch(&q, Strategy::Strict, "bench", 1, None).await?;
        anyhow::ensure!(got.is_empty(), "a job started past the key's limit");
    }
    anyhow::bail!("the lanes of {key} did not all park")
}

/// The longest FCALL Redis logged since the last reset, in µs.
async fn longest_call(conn: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<f64> {
    let log: Vec<redis::Value> = redis::cmd("SLOWLOG").arg("GET").arg(1000).query_async(conn).await?;
    let mut longest = 0i64;
    for entry in log {
        let redis::Value::Array(fields) = entry else { continue };
        let micros: i64 = fields
            .get(2)
            .map(|v| redis::from_redis_value(v.clone()))
            .transpose()?
            .unwrap_or(0);
        let is_fcall = matches!(fields.get(3), Some(redis::Value::Array(a))
            if matches!(a.first(), Some(redis::Value::BulkString(b)) if b.eq_ignore_ascii_case(b"FCALL")));
        if is_fcall {
            longest = longest.max(micros);
        }
    }
    Ok(longest as f64)
}

async fn reset(conn: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<()> {
    let _: () = redis::cmd("SLOWLOG").arg("RESET").query_async(conn).await?;
    Ok(())
}

/// `per` jobs per tenant, all with the same key at concurrency 1.
async fn setup(store: &Store, template: &NewJob, queue: &str, tenants: usize, per: usize) -> anyhow::Result<()> {
    let mut batch = Vec::new();
    for t in 0..tenants {
        for _ in 0..per {
            let mut j = fresh(template);
            j.queue = queue.to_string();
            j.tenant = Some(format!("tenant-{t}"));
            batch.push(j);
        }
        if batch.len() >= 1000 {
            store.enqueue(&batch).await?;
            batch.clear();
        }
    }
    if !batch.is_empty() {
        store.enqueue(&batch).await?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut a = Args::parse();
    if a.smoke {
        (a.tenants, a.rounds) = (200, 2);
    }
    let (store, mut conn, url) = ojs_bench::private_store(3_600_000).await?;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(0)
        .query_async(&mut conn)
        .await?;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-max-len")
        .arg(1000)
        .query_async(&mut conn)
        .await?;
    let rules = EnvelopeRules::default();
    let mut rows = Vec::new();
    for tenants in [10, a.tenants] {
        let queue = format!("sk-{tenants}");
        let key = format!("shared-{tenants}");
        let template = parse(
            json!({"type": "bench.shared", "args": [], "queue": "x",
                "rate_limit": {"key": key, "concurrency": 1}}),
            &rules,
        )
        .map_err(|e| anyhow::anyhow!(e.message))?;
        // Every tenant keeps a job waiting through the rounds (each round ends two jobs).
        let per = if tenants <= 100 { 2 * a.rounds + 2 } else { 2 };
        setup(&store, &template, &queue, tenants, per).await?;
        let (mut ack, mut nack, mut cancel) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..a.rounds {
            // ACK the running job.
            let id = claim(&store, &queue).await?;
            park_all(&store, &queue, &key, tenants as u64 - 1).await?;
            reset(&mut conn).await?;
            match store.ack(&id, &ClaimRef::default(), None).await? {
                Transition::Done(_) => {}
                other => anyhow::bail!("ACK: {other:?}"),
            }
            ack.push(longest_call(&mut conn).await?);
            // NACK it (requeue: the job waits again).
            let id = claim(&store, &queue).await?;
            park_all(&store, &queue, &key, tenants as u64 - 1).await?;
            reset(&mut conn).await?;
            store
                .nack(&id, &ClaimRef::default(), "{\"message\":\"x\"}", "", true, true, 0)
                .await?;
            nack.push(longest_call(&mut conn).await?);
            // Cancel it.
            let id = claim(&store, &queue).await?;
            park_all(&store, &queue, &key, tenants as u64 - 1).await?;
            reset(&mut conn).await?;
            store.cancel(&id).await?;
            cancel.push(longest_call(&mut conn).await?);
        }
        rows.push((tenants, median(ack), median(nack), median(cancel)));
    }
    println!("shared_key: the longest Redis call of one release, many tenants on one rate-limit key");
    println!("redis: {url}   rounds: {} (medians)", a.rounds);
    println!();
    println!("| tenants on the key | ACK µs | NACK µs | cancel µs |");
    println!("|---:|---:|---:|---:|");
    for (t, ack, nack, cancel) in &rows {
        println!("| {t} | {ack:.0} | {nack:.0} | {cancel:.0} |");
    }
    let (_, a10, n10, c10) = rows[0];
    let (_, an, nn, cn) = rows[1];
    println!();
    println!(
        "ratio {} tenants / 10: ACK {:.2}x, NACK {:.2}x, cancel {:.2}x (goal <= 2)",
        a.tenants,
        an / a10,
        nn / n10,
        cn / c10
    );
    Ok(())
}
