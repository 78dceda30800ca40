//! The processes tests start: which Redis binary, free ports, and watchdog shells that outlive nothing
//! of ours (used by the single test server, the crash tests' Redis and the local cluster).

use std::net::TcpListener as StdListener;
use std::process::{Command, Stdio};

/// A free TCP port on 127.0.0.1.
pub(crate) fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The server binary tests start: `OJS_TEST_REDIS_SERVER` (e.g. a `valkey-server`, see `scripts/test`),
/// else `redis-server`.
pub fn redis_server_bin() -> String {
    std::env::var("OJS_TEST_REDIS_SERVER")
        .ok()
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| "redis-server".into())
}

/// A watchdog shell SIGKILLs process `pid` when this test process exits, however it exits.
pub(crate) fn kill_with_this_process(pid: u32) {
    watchdog(&format!(
        "while kill -0 {parent} 2>/dev/null && kill -0 {pid} 2>/dev/null; do sleep 1; done; kill -9 {pid} 2>/dev/null",
        parent = std::process::id()
    ));
}

/// Starts `script` in a shell of its own, detached from the test's output (a watchdog that outlives us).
pub(crate) fn watchdog(script: &str) {
    let _ = Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn();
}
