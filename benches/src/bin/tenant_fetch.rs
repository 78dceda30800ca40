//! What does the fair share among tenants cost FETCH? Measures fetch + ack of one job (a FETCH that
//! names no tenant, so the queue's fair share picks the tenant) on a queue whose jobs have no tenant,
//! then on a queue with 10 backlogged tenants and one with 10,000, and prints the ratios. The pick is
//! one ZRANGE and one ZINCRBY on a sorted set of the backlogged tenants (lua/includes/tenant.lua), so
//! the goal (issue 25) is 10,000 tenants at most 1.2x the cost of 10.
//!
//! Then it checks the shares at the scale (no timing in it): tenants of weight 3 and 1 with
//! 100,000 and 1,000 jobs; every window of 40 claims until the small one drains must hold 10 of its,
//! within one, and the next 40 all the big one's; the run fails otherwise. (tests/tenants.rs checks
//! the same at 10,000 against 1,000: a debug build enqueues 100,000 jobs in half a minute.)
//!
//!   cargo run --release -p ojs-bench --bin tenant_fetch
//!   cargo run --release -p ojs-bench --bin tenant_fetch -- --smoke

use clap::Parser;
use ojs_bench::{fresh, measure};
use ojs_core::envelope::{parse, EnvelopeRules};
use ojs_core::job::NewJob;
use ojs_store::{Store, Strategy, Transition};
use serde_json::json;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 10_000)]
    tenants: usize,
    #[arg(long, default_value_t = 5_000)]
    cycles: usize,
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// The big tenant's backlog in the share check (the small one's is 1,000).
    #[arg(long, default_value_t = 100_000)]
    big: usize,
    #[arg(long)]
    smoke: bool,
}

/// The share check (see above): weights 3 and 1, `big` jobs against 1,000.
async fn shares(store: &Store, template: &NewJob, big: usize) -> anyhow::Result<()> {
    store.set_tenant_weight("share-big", Some(3)).await?;
    store.set_tenant_weight("share-small", Some(1)).await?;
    let queue = "tf-shares";
    enqueue_as(store, template, queue, (0..big).map(|_| Some("share-big".to_string()))).await?;
    enqueue_as(
        store,
        template,
        queue,
        (0..1000).map(|_| Some("share-small".to_string())),
    )
    .await?;
    let q = vec![(queue.to_string(), 1)];
    let mut order: Vec<bool> = Vec::new(); // true: the small tenant's
    while order.len() < 4040 {
        let (_, claimed) = store.fetch(&q, Strategy::Strict, "bench", 40, None).await?;
        anyhow::ensure!(!claimed.is_empty(), "the backlog ran dry");
        order.extend(claimed.iter().map(|j| j.job.tenant.as_deref() == Some("share-small")));
    }
    let (both, after) = order.split_at(4000);
    for (i, w) in both.windows(40).enumerate() {
        let small = w.iter().filter(|s| **s).count();
        anyhow::ensure!(
            (9..=11).contains(&small),
            "claims {i}..{}: {small} of 40 were the small tenant's",
            i + 40
        );
    }
    anyhow::ensure!(
        both.iter().filter(|s| **s).count() == 1000,
        "the small tenant did not drain in 4,000 claims"
    );
    anyhow::ensure!(
        after.iter().all(|s| !s),
        "once the small tenant drained, a claim went elsewhere"
    );
    println!(
        "shares, weights 3:1, {big} jobs against 1,000: every window of 40 of the first 4,000 claims held 10 \
         of the small tenant's (within one); the next 40 all went to the big one"
    );
    Ok(())
}

async fn cycles(store: &Store, q: &[(String, u32)], n: usize) -> anyhow::Result<()> {
    for _ in 0..n {
        let (_, claimed) = store.fetch(q, Strategy::Strict, "bench", 1, None).await?;
        anyhow::ensure!(claimed.len() == 1, "the backlog ran dry");
        // The job's id is in its stored envelope.
        let doc: serde_json::Value = serde_json::from_str(claimed[0].job.doc.as_deref().unwrap_or("{}"))?;
        let id = doc["id"].as_str().unwrap_or_default().to_string();
        match store.ack(&id, &ojs_store::ClaimRef::default(), None).await? {
            Transition::Done(_) => {}
            other => anyhow::bail!("the claimed job was not acknowledged: {other:?}"),
        }
    }
    Ok(())
}

/// Enqueues one job of `queue` per item of `tenants` (its tenant, or none), in batches of 1,000.
async fn enqueue_as(
    store: &Store,
    template: &NewJob,
    queue: &str,
    tenants: impl Iterator<Item = Option<String>>,
) -> anyhow::Result<()> {
    let mut batch = Vec::new();
    for tenant in tenants {
        let mut j = fresh(template);
        j.queue = queue.to_string();
        j.tenant = tenant;
        batch.push(j);
        if batch.len() == 1000 {
            store.enqueue(&batch).await?;
            batch.clear();
        }
    }
    if !batch.is_empty() {
        store.enqueue(&batch).await?;
    }
    Ok(())
}

/// Enqueues `per` jobs for each of `tenants` tenants (none when 0: `per` jobs without a tenant).
async fn backlog(store: &Store, template: &NewJob, queue: &str, tenants: usize, per: usize) -> anyhow::Result<()> {
    let each = (0..tenants.max(1)).flat_map(|t| (0..per).map(move |_| (tenants > 0).then(|| format!("tenant-{t}"))));
    enqueue_as(store, template, queue, each).await
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut a = Args::parse();
    if a.smoke {
        (a.tenants, a.cycles, a.rounds, a.big) = (200, 200, 3, 5_000);
    }
    let (store, mut conn, url) = ojs_bench::private_store(3_600_000).await?;
    let rules = EnvelopeRules::default();
    let template = parse(json!({"type": "bench.tenant", "args": [], "queue": "x"}), &rules)
        .map_err(|e| anyhow::anyhow!(e.message))?;
    // Every claim of the run (warm-up: n/5, then rounds × n) comes from the backlog.
    let claims = a.cycles / 5 + a.rounds * a.cycles;
    let mut rows = Vec::new();
    for (name, tenants) in [("no tenant", 0), ("10 tenants", 10), ("many tenants", a.tenants)] {
        let queue = format!("tf-{tenants}");
        let per = claims / tenants.max(1) + 1;
        backlog(&store, &template, &queue, tenants, per).await?;
        let q = vec![(queue, 1)];
        let (wall, cpu) = measure(&mut conn, a.rounds, a.cycles, |n| cycles(&store, &q, n)).await?;
        rows.push((name, tenants, wall, cpu));
    }

    println!("tenant_fetch: fetch + ack of one job by fair share, one client");
    println!(
        "redis: {url}   cycles/round: {}   rounds: {} (medians)",
        a.cycles, a.rounds
    );
    println!();
    println!("| queue | backlogged tenants | wall µs/cycle | Redis CPU µs/cycle |");
    println!("|---|---:|---:|---:|");
    for (name, t, wall, cpu) in &rows {
        println!("| {name} | {t} | {wall:.1} | {cpu:.1} |");
    }
    let (_, _, w0, c0) = rows[0];
    let (_, _, w10, c10) = rows[1];
    let (_, _, wn, cn) = rows[2];
    println!();
    println!(
        "ratio {} tenants / 10: wall {:.2}x, Redis CPU {:.2}x (goal <= 1.20)",
        a.tenants,
        wn / w10,
        cn / c10
    );
    println!(
        "ratio 10 tenants / no tenant: wall {:.2}x, Redis CPU {:.2}x (what the fair share costs a claim)",
        w10 / w0,
        c10 / c0
    );
    println!();
    shares(&store, &template, a.big).await
}
