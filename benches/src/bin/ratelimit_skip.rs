//! Does a saturated rate-limit key slow FETCH for everyone else? Measures enqueue + fetch + ack of a
//! free job (priority 5, no limit) on a queue with nothing ahead of it, then with 100,000 jobs of a
//! saturated key (priority 0, concurrency 1, its one slot held) ahead of it, and prints the ratio. The
//! limited jobs are parked out of the ready order after one pop, so the goal is a ratio near 1.
//!
//!   cargo run --release -p ojs-bench --bin ratelimit_skip
//!   cargo run --release -p ojs-bench --bin ratelimit_skip -- --smoke

use clap::Parser;
use ojs_bench::{fresh, measure};
use ojs_core::envelope::{parse, EnvelopeRules};
use ojs_core::job::NewJob;
use ojs_store::{Store, Strategy, Transition};
use serde_json::json;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 100_000)]
    limited: usize,
    #[arg(long, default_value_t = 5_000)]
    cycles: usize,
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    #[arg(long)]
    smoke: bool,
}

async fn cycles(store: &Store, free: &NewJob, q: &[(String, u32)], n: usize) -> anyhow::Result<()> {
    for _ in 0..n {
        let j = fresh(free);
        store.enqueue(std::slice::from_ref(&j)).await?;
        let (_, claimed) = store.fetch(q, Strategy::Strict, "bench", 1, None).await?;
        anyhow::ensure!(claimed.len() == 1, "the free job was not fetched");
        match store.ack(&j.id, &ojs_store::ClaimRef::default(), None).await? {
            Transition::Done(_) => {}
            other => anyhow::bail!("fetched something else than the free job: {other:?}"),
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut a = Args::parse();
    if a.smoke {
        (a.limited, a.cycles, a.rounds) = (2_000, 200, 3);
    }
    let (store, mut conn, url) = ojs_bench::private_store(3_600_000).await?;
    let rules = EnvelopeRules::default();
    let free = parse(
        json!({"type": "bench.free", "args": [], "queue": "skip", "priority": 5}),
        &rules,
    )
    .map_err(|e| anyhow::anyhow!(e.message))?;
    let limited = parse(
        json!({"type": "bench.limited", "args": [], "queue": "skip", "priority": 0,
            "rate_limit": {"key": "saturated", "concurrency": 1}}),
        &rules,
    )
    .map_err(|e| anyhow::anyhow!(e.message))?;
    let q = vec![("skip".to_string(), 1)];

    let (none_wall, none_cpu) = measure(&mut conn, a.rounds, a.cycles, |n| cycles(&store, &free, &q, n)).await?;

    // Saturate the key: one limited job takes its only slot and is never acked.
    store.enqueue(&[fresh(&limited)]).await?;
    let (_, held) = store.fetch(&q, Strategy::Strict, "holder", 1, None).await?;
    anyhow::ensure!(held.len() == 1, "the slot holder was not fetched");
    let mut left = a.limited;
    while left > 0 {
        let n = left.min(1000);
        let batch: Vec<NewJob> = (0..n).map(|_| fresh(&limited)).collect();
        store.enqueue(&batch).await?;
        left -= n;
    }
    let (ahead_wall, ahead_cpu) = measure(&mut conn, a.rounds, a.cycles, |n| cycles(&store, &free, &q, n)).await?;

    println!("ratelimit_skip: enqueue + fetch + ack of a free job, one client");
    println!(
        "redis: {url}   cycles/round: {}   rounds: {} (medians)",
        a.cycles, a.rounds
    );
    println!();
    println!("| limited jobs ahead | wall µs/cycle | Redis CPU µs/cycle |");
    println!("|---:|---:|---:|");
    println!("| 0 | {none_wall:.1} | {none_cpu:.1} |");
    println!("| {} (key saturated) | {ahead_wall:.1} | {ahead_cpu:.1} |", a.limited);
    println!();
    println!(
        "ratio ahead/none: wall {:.2}x, Redis CPU {:.2}x (goal <= 1.20)",
        ahead_wall / none_wall,
        ahead_cpu / none_cpu
    );
    Ok(())
}
