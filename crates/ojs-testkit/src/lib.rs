//! Test support: a real `redis-server` per test binary (or `OJS_TEST_REDIS_URL`; or, with
//! `OJS_TEST_CLUSTER=1`, a local 3-primary Redis Cluster per test binary: [`on_cluster`]), servers under
//! test on port 0, each in its own namespace so tests never share keys and never flush anything, and the
//! invariant checker that walks a namespace's keyspace.

pub mod invariants;
pub mod otlp;

use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use ojs_server::Config;
use serde_json::Value;
use tokio::sync::oneshot;

pub use invariants::{check_invariants, job_fields};

/// Every event of the stream at `key`, oldest first, as the server reads them (one entry holds one
/// script call's events: `ojs_store::stream_entries`), read in pages so no one reply is large.
pub async fn stream_events(
    conn: &mut redis::aio::MultiplexedConnection,
    key: &str,
) -> Vec<(String, ojs_core::event::Event)> {
    let mut out = Vec::new();
    let mut from = "-".to_string();
    loop {
        let page: redis::Value = redis::cmd("XRANGE")
            .arg(key)
            .arg(&from)
            .arg("+")
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await
            .expect("XRANGE");
        let events = ojs_store::stream_entries(&page);
        let Some((last, _)) = events.last() else {
            return out;
        };
        from = format!("({}", ojs_store::event_entry(last));
        out.extend(events);
    }
}

pub mod cluster;
mod process;

pub use process::redis_server_bin;
use process::{free_port, kill_with_this_process};

/// Reads a server-sent-events response until its text contains `needle` (or 5 s pass); returns it.
pub async fn read_sse_until(resp: &mut reqwest::Response, needle: &str) -> String {
    let mut text = String::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !text.contains(needle) && Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_millis(500), resp.chunk()).await {
            Ok(Ok(Some(bytes))) => text.push_str(&String::from_utf8_lossy(&bytes)),
            Ok(_) => break,
            Err(_) => {}
        }
    }
    text
}

static REDIS: OnceLock<String> = OnceLock::new();

/// Whether this test binary runs its servers on a local Redis Cluster (`OJS_TEST_CLUSTER=1`, which
/// `OJS_TEST_ENGINE=cluster scripts/test` sets): [`TestServer::start`], [`TestServer::start_with`] and
/// [`TestServer::spawn_pod`] then use one 3-primary [`cluster::LocalCluster`] shared by the binary.
pub fn on_cluster() -> bool {
    std::env::var("OJS_TEST_CLUSTER").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// On a cluster ([`on_cluster`]), says on stderr that the running test is skipped and why, and returns
/// true: the one way a test opts out of the cluster run (`if ojs_testkit::skip_on_cluster("…") {
/// return; }`). Written past the test harness's output capture, so the run's log shows it.
pub fn skip_on_cluster(why: &str) -> bool {
    if !on_cluster() {
        return false;
    }
    use std::io::Write;
    let thread = std::thread::current();
    let _ = writeln!(
        std::io::stderr(),
        "skipped on the Redis Cluster: {} ({why})",
        thread.name().unwrap_or("this test")
    );
    true
}

static CLUSTER: OnceLock<cluster::LocalCluster> = OnceLock::new();

/// The seed nodes of the 3-primary cluster every server of this binary uses on a cluster, started on
/// first use. Its nodes are killed by watchdog shells when the test process exits, however it exits.
/// Nothing there fails over, so a node counts as failing only after 15 s without an answer (Redis'
/// default), not the 1 s failover tests use: a stall of a loaded machine must not take the cluster down.
pub fn cluster_seeds() -> Vec<String> {
    CLUSTER
        .get_or_init(|| {
            let c = cluster::LocalCluster::start_with_node_timeout(3, 0, 15_000);
            c.remove_dir_with_this_process();
            c
        })
        .seeds()
}

/// The configuration a test server starts from: [`Config::for_redis`] on [`redis_url`], or on a cluster
/// ([`on_cluster`]) [`Config::for_cluster`] on [`cluster_seeds`].
pub fn base_config() -> Config {
    if on_cluster() {
        Config::for_cluster(&cluster_seeds())
    } else {
        Config::for_redis(&redis_url())
    }
}

/// The URL of the Redis that holds `namespace`'s keys: [`redis_url`], or on a cluster the primary that
/// owns the namespace's hash tag (for tests that read or write keys directly).
pub fn redis_url_for(namespace: &str) -> String {
    redis_url_of(&ojs_store::Keys::new(namespace).schema())
}

/// The keys of shard `shard` of the deployment on `namespace` (this binary's Redis or cluster): its
/// recorded tag on a cluster, its legacy one on one Redis ([`cluster::shard_keys_at`]). Tests use it, not
/// `Keys::for_shard`, for every shard's keys: on a cluster a shard first used by this code may have a
/// placed tag.
pub fn shard_keys(namespace: &str, shard: usize) -> ojs_store::Keys {
    if !on_cluster() {
        // One Redis: every shard keeps its legacy tag (nothing is recorded), no round trip to ask.
        return ojs_store::Keys::for_shard(namespace, shard);
    }
    cluster::shard_keys_at(&redis_url_for(namespace), namespace, shard)
}

/// The URL of the Redis that holds `key` (e.g. a key of another shard, [`shard_keys`]).
pub fn redis_url_of(key: &str) -> String {
    if on_cluster() {
        cluster::owner_url(&cluster_seeds(), key)
    } else {
        redis_url()
    }
}

/// The single Redis every test in this binary uses: `OJS_TEST_REDIS_URL`, or a server (see
/// [`redis_server_bin`]) started on a free port. A watchdog shell stops that server when the test
/// process exits, however it exits. Not on a cluster ([`on_cluster`]): use [`base_config`] or
/// [`redis_url_for`] there.
pub fn redis_url() -> String {
    assert!(
        !on_cluster(),
        "redis_url() names the single redis-server, which a cluster run (OJS_TEST_CLUSTER) does not start: \
         use base_config() / redis_url_for(namespace) / TestServer::spawn_pod, or skip_on_cluster(why)"
    );
    REDIS
        .get_or_init(|| {
            if let Ok(url) = std::env::var("OJS_TEST_REDIS_URL") {
                return url;
            }
            let bin = redis_server_bin();
            if Command::new(&bin).arg("--version").output().is_err() {
                panic!(
                    "{bin} is not installed. Install it (Debian/Ubuntu: sudo apt-get install -y redis-server) \
                     or point OJS_TEST_REDIS_URL at a Redis you can use for tests."
                );
            }
            let port = free_port();
            let dir = std::env::temp_dir().join(format!("ojs-test-redis-{port}"));
            let _ = std::fs::create_dir_all(&dir);
            let script = format!(
                "'{bin}' --port {port} --bind 127.0.0.1 --save '' --appendonly no --dir '{dir}' --loglevel warning & \
                 r=$!; while kill -0 {parent} 2>/dev/null && kill -0 $r 2>/dev/null; do sleep 1; done; kill $r 2>/dev/null",
                dir = dir.display(),
                parent = std::process::id()
            );
            Command::new("sh")
                .arg("-c")
                .arg(script)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("start redis-server");
            let url = format!("redis://127.0.0.1:{port}");
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let up = redis::Client::open(url.as_str())
                    .and_then(|c| c.get_connection())
                    .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
                    .is_ok();
                if up {
                    break;
                }
                assert!(Instant::now() < deadline, "redis-server did not start on port {port}");
                std::thread::sleep(Duration::from_millis(20));
            }
            url
        })
        .clone()
}

/// A `redis-server` of one test's own (a test that crashes Redis, flushes it, or counts its commands
/// must not share the binary's). [`OwnRedis::aof`]: append-only file on with `appendfsync always` (an
/// acknowledged write survives a SIGKILL); [`OwnRedis::scratch`]: nothing kept on disk. No RDB
/// snapshots either way; data in `dir`. [`OwnRedis::kill`] sends SIGKILL; [`OwnRedis::restart`] starts
/// it again on the same port and dir, so the AOF replays and clients reconnect to the same URL. Killed on
/// drop, and by a watchdog shell if the test process dies first.
pub struct OwnRedis {
    pub port: u16,
    pub dir: std::path::PathBuf,
    aof: bool,
    child: Option<std::process::Child>,
}

impl OwnRedis {
    /// Starts one with an append-only file on a free port with its data in `dir` (created if missing);
    /// waits until it answers.
    pub async fn aof(dir: &std::path::Path) -> Self {
        Self::start(dir, true).await
    }

    /// Starts one that keeps nothing on disk, on a free port; waits until it answers.
    pub async fn scratch() -> Self {
        let dir = std::env::temp_dir().join(format!("ojs-own-redis-{}", unique_namespace()));
        Self::start(&dir, false).await
    }

    async fn start(dir: &std::path::Path, aof: bool) -> Self {
        std::fs::create_dir_all(dir).expect("create the redis dir");
        let mut r = Self {
            port: free_port(),
            dir: dir.to_path_buf(),
            aof,
            child: None,
        };
        r.restart().await;
        r
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// SIGKILL, as a crash or an OOM kill would: no shutdown save, no goodbye to clients.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Kills it if it runs, starts it on the same port and dir, and waits until it answers PING (which
    /// it does only once the AOF is loaded).
    pub async fn restart(&mut self) {
        self.kill();
        let child = Command::new(redis_server_bin())
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(if self.aof {
                ["--appendonly", "yes", "--appendfsync", "always"]
            } else {
                ["--appendonly", "no", "--appendfsync", "no"]
            })
            .args(["--save", ""])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--loglevel", "warning"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start redis-server");
        kill_with_this_process(child.id());
        self.child = Some(child);
        let client = redis::Client::open(self.url()).expect("redis url");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut c) = client.get_multiplexed_async_connection().await {
                if redis::cmd("PING").query_async::<String>(&mut c).await.is_ok() {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "redis-server did not come back on port {}",
                self.port
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One strict FETCH request of up to `count` jobs from `queue` by worker `w`, as the server's coalescer
/// sends it (for tests that call the store's `worker_request(s)` directly).
pub fn claim_request(queue: &str, count: u32) -> ojs_store::WorkerRequest {
    ojs_store::WorkerRequest {
        ack: None,
        queues: vec![(queue.to_string(), 1)],
        strategy: ojs_store::Strategy::Strict,
        worker_id: "w".into(),
        count,
        visibility_ms: None,
        tenant: None,
    }
}

/// A fresh namespace name, so each test has a keyspace of its own on the shared Redis.
pub fn unique_namespace() -> String {
    format!("t{}", uuid::Uuid::now_v7().simple())
}

/// An `ojs-server` running inside the test process on a free port.
pub struct TestServer {
    pub base: String,
    pub namespace: String,
    pub redis_url: String,
    pub http: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    handle: Option<tokio::task::JoinHandle<()>>,
    child: Option<std::process::Child>,
}

impl TestServer {
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    /// Starts a server on the shared Redis (or the shared cluster: [`on_cluster`]); `tune` adjusts the
    /// configuration (priority model, timeouts…).
    pub async fn start_with(tune: impl FnOnce(&mut Config)) -> Self {
        let mut cfg = base_config();
        cfg.namespace = unique_namespace();
        cfg.tick_ms = 20;
        tune(&mut cfg);
        Self::start_config(cfg).await
    }

    /// Starts a server with exactly this configuration (e.g. a second node on the same namespace).
    /// On a cluster (`cfg.redis_cluster`), [`TestServer::redis`] and the invariant check talk to the
    /// primary that holds the namespace's slot (the first seed if no seed answers).
    pub async fn start_config(cfg: Config) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let (tx, rx) = oneshot::channel();
        let namespace = cfg.namespace.clone();
        let redis_url = match cfg.cluster_nodes() {
            nodes if nodes.is_empty() => cfg.redis_url.clone(),
            // A cluster nobody answers for (a test of the server with its backend down): the first seed.
            nodes => cluster::try_owner_url(&nodes, &ojs_store::Keys::new(&namespace).schema())
                .unwrap_or_else(|| format!("redis://{}", nodes[0])),
        };
        let handle = tokio::spawn(async move {
            let _ = ojs_server::run(listener, cfg, async move {
                let _ = rx.await;
            })
            .await;
        });
        let s = Self {
            base,
            namespace,
            redis_url,
            http: reqwest::Client::new(),
            stop: Some(tx),
            handle: Some(handle),
            child: None,
        };
        // The server answers once it has started (on a cluster: once it knows its shards' tags, which
        // `shard_keys` reads), whatever the answer.
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(15),
            s.http.get(format!("{}/ojs/v1/health", s.base)).send(),
        )
        .await;
        s
    }

    /// [`TestServer::spawn_process`] on the Redis the test servers use: the single one, or on a cluster
    /// ([`on_cluster`]) the shared cluster (`OJS_REDIS_CLUSTER`), with `redis_url` at the namespace's
    /// primary.
    pub async fn spawn_pod(bin: &str, namespace: &str, extra_env: &[(&str, &str)]) -> Self {
        if !on_cluster() {
            return Self::spawn_process(bin, &redis_url(), namespace, extra_env).await;
        }
        let seeds = cluster_seeds().join(",");
        let mut env = vec![("OJS_REDIS_CLUSTER", seeds.as_str())];
        env.extend_from_slice(extra_env);
        let mut s = Self::spawn_process(bin, "redis://127.0.0.1:1", namespace, &env).await;
        s.redis_url = redis_url_for(namespace);
        s
    }

    /// Starts the `ojs-server` binary at `bin` as a separate process (a real second pod) on a free port,
    /// serving `namespace` on `redis_url`; waits until it answers. Integration tests of the server crate
    /// get the path from `env!("CARGO_BIN_EXE_ojs-server")`. The process is killed on drop.
    pub async fn spawn_process(bin: &str, redis_url: &str, namespace: &str, extra_env: &[(&str, &str)]) -> Self {
        let port = free_port();
        let mut cmd = Command::new(bin);
        cmd.env("OJS_REDIS_URL", redis_url)
            .env("OJS_LISTEN", format!("127.0.0.1:{port}"))
            .env("OJS_NAMESPACE", namespace)
            .env("OJS_TICK_MS", "20")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn ojs-server");
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if http
                .get(format!("{base}/ojs/v1/health"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "ojs-server process did not come up on port {port}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Self {
            base,
            namespace: namespace.to_string(),
            redis_url: redis_url.to_string(),
            http,
            stop: None,
            handle: None,
            child: Some(child),
        }
    }

    /// Kills a process-backed server with SIGKILL (no graceful shutdown), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .http
            .post(self.url(path))
            .json(&body)
            .send()
            .await
            .expect("request");
        decode(r).await
    }

    /// A request that names a tenant (`X-OJS-Tenant`), with an optional JSON body.
    pub async fn send_as(
        &self,
        method: reqwest::Method,
        path: &str,
        tenant: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        self.send_with(method, path, &[("X-OJS-Tenant", tenant)], body).await
    }

    /// A request with these headers (an API key's `Authorization`, a tenant…) and an optional JSON
    /// body.
    pub async fn send_with(
        &self,
        method: reqwest::Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut r = self.http.request(method, self.url(path));
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        if let Some(b) = body {
            r = r.json(&b);
        }
        decode(r.send().await.expect("request")).await
    }

    pub async fn patch(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .http
            .patch(self.url(path))
            .json(&body)
            .send()
            .await
            .expect("request");
        decode(r).await
    }

    pub async fn put(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self.http.put(self.url(path)).json(&body).send().await.expect("request");
        decode(r).await
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let r = self.http.get(self.url(path)).send().await.expect("request");
        decode(r).await
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        let r = self.http.delete(self.url(path)).send().await.expect("request");
        decode(r).await
    }

    /// The node's Prometheus text (`GET /metrics`).
    pub async fn metrics(&self) -> String {
        let r = self.http.get(self.url("/metrics")).send().await.expect("metrics");
        r.text().await.expect("metrics text")
    }

    /// Enqueues and returns the job id, asserting success.
    pub async fn enqueue(&self, body: Value) -> String {
        let (s, b) = self.post("/ojs/v1/jobs", body).await;
        assert_eq!(s, 201, "enqueue failed: {b}");
        b["job"]["id"].as_str().expect("job id").to_string()
    }

    /// Fetches up to `count` jobs from `queues` and returns them.
    pub async fn fetch(&self, queues: &[&str], count: u32) -> Vec<Value> {
        let (s, b) = self
            .post(
                "/ojs/v1/workers/fetch",
                serde_json::json!({"queues": queues, "count": count}),
            )
            .await;
        assert_eq!(s, 200, "fetch failed: {b}");
        b["jobs"].as_array().cloned().unwrap_or_default()
    }

    /// Polls `GET /jobs/{id}` until the job is in `state`, or panics after `within`. Tests wait
    /// for background transitions (promotion, lease expiry) this way instead of sleeping a fixed
    /// time, so a loaded machine slows them down without failing them.
    pub async fn wait_state(&self, id: &str, state: &str, within: std::time::Duration) -> Value {
        let deadline = std::time::Instant::now() + within;
        loop {
            let (_, b) = self.get(&format!("/ojs/v1/jobs/{id}")).await;
            if b["job"]["state"] == state {
                return b["job"].clone();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "job {id} not {state} within {within:?}: {b}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    pub async fn ack(&self, id: &str) -> (u16, Value) {
        self.post("/ojs/v1/workers/ack", serde_json::json!({"job_id": id}))
            .await
    }

    /// The invariant checker over this server's namespace; panics with every problem found. The checker
    /// reads one atomic snapshot of the namespace (one script call), so the server's timers running
    /// meanwhile cannot make a job look misplaced.
    pub async fn assert_invariants(&self) {
        let problems = check_invariants(&self.redis_url, &self.namespace).await;
        assert!(
            problems.is_empty(),
            "keyspace invariants broken:\n  {}",
            problems.join("\n  ")
        );
    }

    /// A plain Redis connection, for tests that look at keys directly.
    pub async fn redis(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.redis_url.as_str())
            .expect("redis url")
            .get_multiplexed_async_connection()
            .await
            .expect("redis connection")
    }

    /// A store over this server's namespace (shard 0; `.shard(i)` for another), for tests that call one
    /// script directly, e.g. to see what a single call does.
    pub fn store(&self) -> ojs_store::Store {
        ojs_store::Store::new(ojs_store::StoreConfig {
            redis_url: self.redis_url.clone(),
            redis_cluster: if on_cluster() { cluster_seeds() } else { Vec::new() },
            namespace: self.namespace.clone(),
            default_visibility_ms: 30_000,
            retention_ms: 0,
            pool_size: 1,
            wait_replicas: 0,
            wait_timeout_ms: 0,
        })
        .expect("store")
    }

    /// The server's key schema (`ojs_store::Keys`): `s.keys().job(&id)`, `s.keys().queue_ready("q")`.
    pub fn keys(&self) -> ojs_store::Keys {
        ojs_store::Keys::new(&self.namespace)
    }

    /// The keys of the server's shard `shard` ([`shard_keys`]; shard 0's are [`TestServer::keys`]).
    pub fn shard_keys(&self, shard: usize) -> ojs_store::Keys {
        cluster::shard_keys_at(&self.redis_url, &self.namespace, shard)
    }

    /// Stops the server and waits for it (graceful shutdown).
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(h) = self.handle.take() {
            let _ = h.await;
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        self.kill();
    }
}

async fn decode(r: reqwest::Response) -> (u16, Value) {
    let status = r.status().as_u16();
    let text = r.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}
