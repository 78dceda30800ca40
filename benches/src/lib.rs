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

/// What `INFO commandstats` counts since the last `CONFIG RESETSTAT`: script calls (`FCALL`, `EVALSHA`,
/// `EVAL` and their read-only forms) with their µs, which include the commands they call; the blocking
/// reads, which no script can call (`XREAD`, `BZPOPMIN`, … : an events tail, a worker's wait); and
/// every other command (those the scripts call, and any other sent directly) with its own µs. The
/// probe's own `INFO` and `CONFIG` are left out. `script_us - command_us` is the time of Lua and of the
/// calls themselves, when every other command ran inside a script (ours: the server sends scripts and
/// its events tail's XREAD, and little else).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct CommandStats {
    pub script_calls: f64,
    pub script_us: f64,
    pub command_calls: f64,
    pub command_us: f64,
    pub blocking_calls: f64,
    pub blocking_us: f64,
}

impl CommandStats {
    /// Parses the text of `INFO commandstats`.
    pub fn parse(info: &str) -> Self {
        const SCRIPTS: [&str; 6] = ["fcall", "fcall_ro", "evalsha", "evalsha_ro", "eval", "eval_ro"];
        const BLOCKING: [&str; 10] = [
            "xread",
            "xreadgroup",
            "bzpopmin",
            "bzpopmax",
            "bzmpop",
            "blpop",
            "brpop",
            "brpoplpush",
            "blmove",
            "blmpop",
        ];
        let mut out = Self::default();
        for line in info.lines() {
            let Some((name, rest)) = line.trim().strip_prefix("cmdstat_").and_then(|l| l.split_once(':')) else {
                continue;
            };
            if name == "info" || name == "config" {
                continue;
            }
            let field = |k: &str| {
                rest.split(',')
                    .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('=')?.parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            let (calls, us) = (field("calls"), field("usec"));
            if SCRIPTS.contains(&name) {
                out.script_calls += calls;
                out.script_us += us;
            } else if BLOCKING.contains(&name) {
                out.blocking_calls += calls;
                out.blocking_us += us;
            } else {
                out.command_calls += calls;
                out.command_us += us;
            }
        }
        out
    }
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

    /// The start of a measured run: clears every node's command statistics (`CONFIG RESETSTAT`) and
    /// returns each node's CPU time so far (see [`Probe::cpu_us`]); runs `OJS_BENCH_AT_BEGIN` (a shell
    /// command) when it is set.
    pub async fn begin(&mut self) -> anyhow::Result<Vec<f64>> {
        for n in &mut self.nodes {
            let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(n).await?;
        }
        // benches/server_cpu.sh counts the server's instructions from here: `callgrind_control -z`.
        if let Ok(cmd) = std::env::var("OJS_BENCH_AT_BEGIN") {
            let status = std::process::Command::new("sh").arg("-c").arg(&cmd).status()?;
            anyhow::ensure!(status.success(), "OJS_BENCH_AT_BEGIN ({cmd}) failed: {status}");
        }
        self.cpu_us().await
    }

    /// The command statistics of all nodes together since [`Probe::begin`].
    pub async fn command_stats(&mut self) -> anyhow::Result<CommandStats> {
        let mut total = CommandStats::default();
        for n in &mut self.nodes {
            let info: String = redis::cmd("INFO").arg("commandstats").query_async(n).await?;
            let c = CommandStats::parse(&info);
            total.script_calls += c.script_calls;
            total.script_us += c.script_us;
            total.command_calls += c.command_calls;
            total.command_us += c.command_us;
            total.blocking_calls += c.blocking_calls;
            total.blocking_us += c.blocking_us;
        }
        Ok(total)
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

#[cfg(test)]
mod tests {
    use super::CommandStats;

    #[test]
    fn command_stats_split_scripts_from_the_commands_they_call() {
        let info = "# Commandstats\r\ncmdstat_fcall:calls=10,usec=500,usec_per_call=50.00,rejected_calls=0,failed_calls=0\r\n\
                    cmdstat_get:calls=20,usec=40,usec_per_call=2.00\r\ncmdstat_zadd:calls=10,usec=60,usec_per_call=6.00\r\n\
                    cmdstat_info:calls=3,usec=90,usec_per_call=30.00\r\ncmdstat_evalsha:calls=1,usec=7,usec_per_call=7.00\r\n\
                    cmdstat_xread:calls=4,usec=80,usec_per_call=20.00\r\n";
        let c = CommandStats::parse(info);
        assert_eq!(
            c,
            CommandStats {
                script_calls: 11.0,
                script_us: 507.0,
                command_calls: 30.0,
                command_us: 100.0,
                blocking_calls: 4.0,
                blocking_us: 80.0
            }
        );
    }
}
