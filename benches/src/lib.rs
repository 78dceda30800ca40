//! Shared pieces of the benchmarks: a private Redis, its CPU counters, and medians.

use std::time::Duration;

/// Redis CPU time used so far (user + sys), in microseconds, from `INFO cpu`.
pub async fn redis_cpu_us(conn: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<f64> {
    let info: String = redis::cmd("INFO").arg("cpu").query_async(conn).await?;
    let mut total = 0.0;
    for line in info.lines() {
        if let Some((k, v)) = line.trim().split_once(':') {
            if k == "used_cpu_sys" || k == "used_cpu_user" {
                total += v.parse::<f64>().unwrap_or(0.0);
            }
        }
    }
    Ok(total * 1e6)
}

/// Redis memory in use, in bytes, from `INFO memory`.
pub async fn redis_memory(conn: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<u64> {
    let info: String = redis::cmd("INFO").arg("memory").query_async(conn).await?;
    Ok(info
        .lines()
        .find_map(|l| l.trim().strip_prefix("used_memory:").and_then(|v| v.parse().ok()))
        .unwrap_or(0))
}

/// The Redis nodes a run measures: one, or every primary of a cluster (`url,url,…`).
pub struct Probe {
    nodes: Vec<redis::aio::MultiplexedConnection>,
}

impl Probe {
    pub async fn connect(urls: &str) -> anyhow::Result<Self> {
        let mut nodes = Vec::new();
        for url in urls.split(',').filter(|u| !u.is_empty()) {
            nodes.push(redis::Client::open(url)?.get_multiplexed_async_connection().await?);
        }
        anyhow::ensure!(!nodes.is_empty(), "no redis url to measure");
        Ok(Self { nodes })
    }

    /// CPU time of each node so far (µs), in the order given.
    pub async fn cpu_us(&mut self) -> anyhow::Result<Vec<f64>> {
        let mut out = Vec::with_capacity(self.nodes.len());
        for n in &mut self.nodes {
            out.push(redis_cpu_us(n).await?);
        }
        Ok(out)
    }

    /// Memory in use on all nodes together (bytes).
    pub async fn memory(&mut self) -> anyhow::Result<u64> {
        let mut total = 0;
        for n in &mut self.nodes {
            total += redis_memory(n).await?;
        }
        Ok(total)
    }
}

/// CPU time (user + system) a process has used so far, in microseconds, from `/proc/<pid>/stat`.
pub fn process_cpu_us(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the line; the state (field 3) is index 0 here.
    let tck = clock_ticks_per_second();
    Ok((ticks(11) + ticks(12)) * 1e6 / tck)
}

fn clock_ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// The payload the processing scenarios give every job (both peers): ~100 bytes, a realistic size for
/// the memory-per-queued-job measurement (Redis' compact encodings stop at 64-byte values by default).
pub const PAYLOAD: &str =
    "user=48213;order=ord_7f3c2a91e4b5;action=send_receipt;locale=en-US;channel=email;retry_hint=none";

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        0.0
    } else {
        v[v.len() / 2]
    }
}

pub fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// A copy of `template` with a new id (the envelope JSON carries the id too).
pub fn fresh(template: &ojs_core::job::NewJob) -> ojs_core::job::NewJob {
    let mut j = template.clone();
    j.id = ojs_core::names::new_job_id();
    j.doc = template.doc.replace(&template.id, &j.id);
    j
}

/// Runs `cycles(n)` once as a warm-up (n/5), then `rounds` times with n cycles, and returns the medians
/// of (wall µs per cycle, Redis CPU µs per cycle).
pub async fn measure<F, Fut>(
    conn: &mut redis::aio::MultiplexedConnection,
    rounds: usize,
    n: usize,
    mut cycles: F,
) -> anyhow::Result<(f64, f64)>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    cycles(n / 5).await?;
    let (mut wall, mut cpu) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let c0 = redis_cpu_us(conn).await?;
        let t0 = std::time::Instant::now();
        cycles(n).await?;
        wall.push(micros(t0.elapsed()) / n as f64);
        cpu.push((redis_cpu_us(conn).await? - c0) / n as f64);
    }
    Ok((median(wall), median(cpu)))
}

/// A store on the benchmark's private Redis (the test kit's `redis-server`, or `OJS_TEST_REDIS_URL`) in a
/// fresh namespace, plus a plain connection for `INFO`; returns the Redis URL too.
pub async fn private_store(
    default_visibility_ms: u64,
) -> anyhow::Result<(ojs_store::Store, redis::aio::MultiplexedConnection, String)> {
    let url = ojs_testkit::redis_url();
    let store = ojs_store::Store::new(ojs_store::StoreConfig {
        redis_url: url.clone(),
        redis_cluster: Vec::new(),
        namespace: ojs_testkit::unique_namespace(),
        default_visibility_ms,
        retention_ms: 0,
        pool_size: 4,
        wait_replicas: 0,
        wait_timeout_ms: 0,
    })?;
    let conn = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    Ok((store, conn, url))
}
