//! A real Redis Cluster for tests: `redis-server --cluster-enabled yes` processes on free ports, joined
//! with `redis-cli --cluster create`. Killed on drop, and by a watchdog shell if the test process dies.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::process::{kill_with_this_process, redis_server_bin, watchdog};

pub struct LocalCluster {
    pub ports: Vec<u16>,
    pub dir: std::path::PathBuf,
    children: Vec<Child>,
    node_timeout_ms: u64,
}

impl LocalCluster {
    /// Starts `primaries` primaries with `replicas` replicas each, and waits until the cluster is ok.
    /// A node that does not answer for 1 s counts as failing (`cluster-node-timeout`), so a failover
    /// test sees its replica promoted quickly.
    pub fn start(primaries: usize, replicas: usize) -> Self {
        Self::start_with_node_timeout(primaries, replicas, 1000)
    }

    /// [`LocalCluster::start`] with this `cluster-node-timeout`: a long one keeps a cluster that must not
    /// fail over (the suite's shared one) ok through a loaded machine's stalls.
    pub fn start_with_node_timeout(primaries: usize, replicas: usize, node_timeout_ms: u64) -> Self {
        let n = primaries * (1 + replicas);
        let ports: Vec<u16> = (0..n).map(|_| free_cluster_port()).collect();
        let dir = std::env::temp_dir().join(format!("ojs-test-cluster-{}", ports[0]));
        std::fs::create_dir_all(&dir).expect("create the cluster dir");
        let mut c = Self {
            ports: ports.clone(),
            dir,
            children: Vec::new(),
            node_timeout_ms,
        };
        for &port in &ports {
            let child = c.spawn(port);
            c.children.push(child);
        }
        for &port in &ports {
            wait_ping(port);
        }
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for p in &ports {
            create.arg(format!("127.0.0.1:{p}"));
        }
        let out = create
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("run redis-cli --cluster create (is redis-tools installed?)");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ports.iter().all(|&p| cluster_ok(p)) {
            assert!(Instant::now() < deadline, "the cluster did not reach cluster_state:ok");
            std::thread::sleep(Duration::from_millis(100));
        }
        // Replicas: wait until each one's link to its primary is up (WAIT counts only those).
        while replicas > 0 && !ports.iter().all(|&p| replica_ready(p)) {
            assert!(Instant::now() < deadline, "the replicas did not sync");
            std::thread::sleep(Duration::from_millis(100));
        }
        c
    }

    /// SIGKILLs the node on `port`, as a crash would.
    pub fn kill(&mut self, port: u16) {
        if let Some(i) = self.ports.iter().position(|&p| p == port) {
            let _ = self.children[i].kill();
            let _ = self.children[i].wait();
        }
    }

    /// The seeds of the nodes still running.
    pub fn live_seeds(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        for (p, c) in self.ports.iter().zip(self.children.iter_mut()) {
            if matches!(c.try_wait(), Ok(None)) {
                out.push(format!("127.0.0.1:{p}"));
            }
        }
        out
    }

    fn spawn(&self, port: u16) -> Child {
        let child = Command::new(redis_server_bin())
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-node-timeout", &self.node_timeout_ms.to_string()])
            .args(["--cluster-config-file", &format!("nodes-{port}.conf")])
            .args(["--save", "", "--appendonly", "no", "--loglevel", "warning"])
            .arg("--dir")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start redis-server in cluster mode");
        kill_with_this_process(child.id());
        child
    }

    /// Starts the node on `port` again (after [`LocalCluster::kill`]) with its cluster state, so it
    /// rejoins; waits until it answers and, if it comes back as a replica, until its link is up.
    pub fn restart(&mut self, port: u16) {
        let Some(i) = self.ports.iter().position(|&p| p == port) else {
            return;
        };
        self.children[i] = self.spawn(port);
        wait_ping(port);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !(cluster_ok(port) && replica_ready(port)) {
            assert!(Instant::now() < deadline, "node {port} did not rejoin");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// For a cluster that lives as long as the test process (never dropped): a watchdog shell removes
    /// its directory once the process and its nodes are gone.
    pub(crate) fn remove_dir_with_this_process(&self) {
        watchdog(&format!(
            "while kill -0 {parent} 2>/dev/null; do sleep 1; done; sleep 3; rm -rf '{dir}'",
            parent = std::process::id(),
            dir = self.dir.display()
        ));
    }

    /// The seed nodes, `127.0.0.1:<port>`, as `--redis-cluster` takes them.
    pub fn seeds(&self) -> Vec<String> {
        self.ports.iter().map(|p| format!("127.0.0.1:{p}")).collect()
    }

    /// The URL of the primary that holds `key`'s slot now.
    pub fn owner_url(&self, key: &str) -> String {
        owner_url(&self.seeds(), key)
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A port for a cluster node whose bus port (+10000) is free too. Both are taken below the kernel's
/// ephemeral range (`ip_local_port_range`), so no `bind(0)` elsewhere in the tests (a server's listener,
/// a client's socket) can take one between this check and the node's start; and tests of one binary that
/// start clusters at the same time never get the same port (or one's bus port), which a free-port check
/// alone could not promise.
fn free_cluster_port() -> u16 {
    static TAKEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut taken = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
    let ephemeral_low: u32 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(32_768);
    // Node ports in [10000, low - 10000): their bus ports stay below `low` too.
    let span = ephemeral_low.saturating_sub(20_000);
    let seed = std::process::id() as u64
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos() as u64)
            .unwrap_or(0);
    for i in 0..u64::from(span.max(1)) * 2 {
        let port = if span >= 100 {
            10_000 + ((seed.wrapping_add(i.wrapping_mul(7_919))) % u64::from(span)) as u16
        } else {
            // An unusual ephemeral range: fall back to asking the kernel.
            std::net::TcpListener::bind("127.0.0.1:0")
                .expect("a free port")
                .local_addr()
                .expect("addr")
                .port()
        };
        let Some(bus) = port.checked_add(10_000) else { continue };
        if taken.iter().any(|t| *t == port || *t == bus) {
            continue;
        }
        let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && free(bus) {
            taken.extend([port, bus]);
            return port;
        }
    }
    panic!("no free port pair (port, port + 10000) for a cluster node");
}

fn conn(port: u16) -> redis::RedisResult<redis::Connection> {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))?.get_connection()
}

fn wait_ping(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !conn(port)
        .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
        .is_ok()
    {
        assert!(Instant::now() < deadline, "redis-server did not start on port {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn cluster_ok(port: u16) -> bool {
    conn(port)
        .and_then(|mut c| redis::cmd("CLUSTER").arg("INFO").query::<String>(&mut c))
        .is_ok_and(|info| info.contains("cluster_state:ok"))
}

/// A replica whose link to its primary is up, or a primary (nothing to wait for).
fn replica_ready(port: u16) -> bool {
    conn(port)
        .and_then(|mut c| redis::cmd("INFO").arg("replication").query::<String>(&mut c))
        .is_ok_and(|info| info.contains("role:master") || info.contains("master_link_status:up"))
}

/// The keys of shard `shard` of namespace `ns`, for the deployment whose Redis `node_url` is (one node,
/// or any node of a cluster): on a cluster, under the tag shard 0 records for it (`P tags`,
/// `ojs_store::shard_tags`; a server records it before it answers its first request, and
/// `TestServer::start_config` waits for that); under its legacy tag on one Redis, or when nothing is
/// recorded (a shard the deployment never used). It does not wait: it runs on the test's runtime, which
/// may be the server's too.
pub fn shard_keys_at(node_url: &str, ns: &str, shard: usize) -> ojs_store::Keys {
    // A recorded tag never changes, and namespaces are unique per test: remember what was found.
    static KNOWN: std::sync::Mutex<Vec<(String, usize, String)>> = std::sync::Mutex::new(Vec::new());
    let legacy = ojs_store::Keys::for_shard(ns, shard);
    if shard == 0 {
        return legacy;
    }
    if let Some((_, _, tag)) = KNOWN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|(n, i, _)| n == ns && *i == shard)
    {
        return ojs_store::Keys::for_tag(tag);
    }
    let remember = |tag: &str| {
        KNOWN
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((ns.to_string(), shard, tag.to_string()));
        ojs_store::Keys::for_tag(tag)
    };
    let rest = node_url.split_once("://").map_or(node_url, |(_, r)| r);
    let seed = rest
        .split('/')
        .next()
        .unwrap_or(rest)
        .rsplit('@')
        .next()
        .unwrap_or(rest);
    let directory = ojs_store::Keys::new(ns).shard_tags();
    // Not a cluster (CLUSTER KEYSLOT is refused): legacy tags, nothing recorded.
    let Some(owner) = try_owner_url(&[seed.to_string()], &directory) else {
        return legacy;
    };
    let tag: Option<String> = redis::Client::open(owner.as_str())
        .and_then(|c| c.get_connection())
        .and_then(|mut c| redis::cmd("HGET").arg(&directory).arg(shard).query(&mut c))
        .unwrap_or(None);
    match tag {
        Some(tag) => remember(&tag),
        None => legacy,
    }
}

/// The URL of the primary that holds `key`'s slot, asked of the first seed that answers (`CLUSTER
/// KEYSLOT`, `CLUSTER SLOTS`).
pub fn owner_url(seeds: &[String], key: &str) -> String {
    try_owner_url(seeds, key).unwrap_or_else(|| panic!("no seed of {seeds:?} knows who holds {key:?}"))
}

/// [`owner_url`], or None when no seed answers (a cluster that is down, or was never there).
pub fn try_owner_url(seeds: &[String], key: &str) -> Option<String> {
    for seed in seeds {
        let Ok(mut c) = redis::Client::open(format!("redis://{seed}")).and_then(|c| c.get_connection()) else {
            continue;
        };
        let Ok(slot) = redis::cmd("CLUSTER").arg("KEYSLOT").arg(key).query::<i64>(&mut c) else {
            continue;
        };
        let Ok(ranges) = redis::cmd("CLUSTER").arg("SLOTS").query::<redis::Value>(&mut c) else {
            continue;
        };
        let redis::Value::Array(ranges) = ranges else { continue };
        for r in ranges {
            let redis::Value::Array(r) = r else { continue };
            let (Some(redis::Value::Int(lo)), Some(redis::Value::Int(hi)), Some(redis::Value::Array(node))) =
                (r.first(), r.get(1), r.get(2))
            else {
                continue;
            };
            if (*lo..=*hi).contains(&slot) {
                let host = match node.first() {
                    Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                    _ => "127.0.0.1".into(),
                };
                let port = match node.get(1) {
                    Some(redis::Value::Int(p)) => *p,
                    _ => continue,
                };
                let host = if host.is_empty() { "127.0.0.1".into() } else { host };
                return Some(format!("redis://{host}:{port}"));
            }
        }
    }
    None
}
