//! Does a deep queue make enqueue and fetch slower? Measures one enqueue + fetch + ack cycle (random
//! priorities 0..9, one client, through the store's Lua scripts) on an empty queue, then again with a
//! million jobs queued, and prints the ratio. Both wall time and Redis CPU per cycle (from INFO cpu),
//! each the median of several rounds, in one run on one private redis-server.
//!
//!   cargo run --release -p ojs-bench --bin priority_depth            # 1,000,000 queued
//!   cargo run --release -p ojs-bench --bin priority_depth -- --smoke # tiny, for CI

use std::time::Instant;

use clap::Parser;
use ojs_bench::{fresh, measure, redis_memory};
use ojs_core::envelope::{parse, EnvelopeRules};
use ojs_core::job::NewJob;
use ojs_store::{Store, Strategy, Transition};
use rand::Rng;
use serde_json::json;

#[derive(Parser)]
struct Args {
    /// Jobs queued for the deep measurement.
    #[arg(long, default_value_t = 1_000_000)]
    depth: usize,
    /// Cycles per measured round.
    #[arg(long, default_value_t = 5_000)]
    cycles: usize,
    /// Rounds per measurement (the median is reported).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// A tiny configuration that only proves the benchmark runs.
    #[arg(long)]
    smoke: bool,
    /// Also print, for the empty and the deep measurement, what each Redis command (inside the scripts
    /// too) cost per call (`INFO commandstats`): where a deep queue's extra time goes.
    #[arg(long)]
    commandstats: bool,
}

/// `INFO commandstats` as (command, calls, µs per call), the costliest first.
async fn commandstats(conn: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<Vec<(String, u64, f64)>> {
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(conn).await?;
    let mut out = Vec::new();
    for line in info.lines() {
        let Some((name, rest)) = line.trim().strip_prefix("cmdstat_").and_then(|l| l.split_once(':')) else {
            continue;
        };
        let field = |k: &str| {
            rest.split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        out.push((name.to_string(), field("calls") as u64, field("usec_per_call")));
    }
    out.sort_by(|a, b| (b.1 as f64 * b.2).total_cmp(&(a.1 as f64 * a.2)));
    Ok(out)
}

/// A new job from the template with this (seed-model) priority.
fn job(template: &NewJob, priority: i64) -> NewJob {
    let mut j = fresh(template);
    j.priority = priority;
    j.rank = priority;
    j
}

async fn cycles(store: &Store, template: &NewJob, queue: &[(String, u32)], n: usize) -> anyhow::Result<()> {
    let mut rng = rand::rng();
    for _ in 0..n {
        store.enqueue(&[job(template, rng.random_range(0..10))]).await?;
        let (_, claimed) = store.fetch(queue, Strategy::Strict, "bench", 1, None).await?;
        for c in &claimed {
            let id = c
                .job
                .doc
                .as_deref()
                .and_then(|d| serde_json::from_str::<serde_json::Value>(d).ok());
            let id = id.and_then(|d| d["id"].as_str().map(str::to_owned)).unwrap_or_default();
            match store.ack(&id, &ojs_store::ClaimRef::default(), None).await? {
                Transition::Done(_) => {}
                other => anyhow::bail!("ack failed: {other:?}"),
            }
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = Args::parse();
    if args.smoke {
        (args.depth, args.cycles, args.rounds) = (2_000, 200, 3);
    }
    let (store, mut conn, url) = ojs_bench::private_store(30_000).await?;
    let template = parse(
        json!({"type": "bench.noop", "args": [1], "queue": "bench"}),
        &EnvelopeRules::default(),
    )
    .map_err(|e| anyhow::anyhow!(e.message))?;
    let queue = vec![("bench".to_string(), 1)];

    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut conn).await?;
    let (empty_wall, empty_cpu) = measure(&mut conn, args.rounds, args.cycles, |n| {
        cycles(&store, &template, &queue, n)
    })
    .await?;
    let empty_stats = commandstats(&mut conn).await?;

    let mem0 = redis_memory(&mut conn).await?;
    let t0 = Instant::now();
    let mut rng = rand::rng();
    let mut left = args.depth;
    while left > 0 {
        let n = left.min(1000);
        let batch: Vec<NewJob> = (0..n).map(|_| job(&template, rng.random_range(0..10))).collect();
        store.enqueue(&batch).await?;
        left -= n;
    }
    let fill = t0.elapsed();
    let per_job_mem = (redis_memory(&mut conn).await?.saturating_sub(mem0)) as f64 / args.depth as f64;

    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut conn).await?;
    let (deep_wall, deep_cpu) = measure(&mut conn, args.rounds, args.cycles, |n| {
        cycles(&store, &template, &queue, n)
    })
    .await?;
    let deep_stats = commandstats(&mut conn).await?;

    println!("priority_depth: enqueue + fetch + ack, one client, random priorities 0..9");
    println!(
        "redis: {url}   cycles/round: {}   rounds: {} (medians)",
        args.cycles, args.rounds
    );
    println!(
        "filled {} jobs in {:.1} s ({:.0} jobs/s in batches of 1000); ~{:.0} bytes of Redis memory per queued job",
        args.depth,
        fill.as_secs_f64(),
        args.depth as f64 / fill.as_secs_f64(),
        per_job_mem
    );
    println!();
    println!("| queue depth | wall µs/cycle | Redis CPU µs/cycle |");
    println!("|---:|---:|---:|");
    println!("| 0 | {empty_wall:.1} | {empty_cpu:.1} |");
    println!("| {} | {deep_wall:.1} | {deep_cpu:.1} |", args.depth);
    println!();
    println!(
        "ratio deep/empty: wall {:.2}x, Redis CPU {:.2}x (goal <= 1.20)",
        deep_wall / empty_wall,
        deep_cpu / empty_cpu
    );
    if args.commandstats {
        println!();
        println!("| command | calls (empty) | µs/call empty | µs/call deep | ratio |");
        println!("|---|---:|---:|---:|---:|");
        for (name, calls, us) in empty_stats.iter().take(15) {
            let deep = deep_stats.iter().find(|(n, _, _)| n == name).map_or(0.0, |d| d.2);
            println!(
                "| {name} | {calls} | {us:.2} | {deep:.2} | {:.2}x |",
                deep / us.max(0.001)
            );
        }
    }
    Ok(())
}
