//! `ojs-server`: parse the configuration, start logging, serve until SIGTERM or Ctrl-C (or, with
//! `--print-lua-library`, print the Lua library and exit).

use clap::Parser;
use ojs_server::Config;
use tracing_subscriber::EnvFilter;

/// mimalloc instead of glibc's malloc: see benches/RESULTS.md.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")))
        .init();
    let config = Config::parse();
    if config.print_lua_library {
        return print_lua_library();
    }
    ojs_store::Keys::check_namespace(&config.namespace).map_err(anyhow::Error::msg)?;
    config.validate().map_err(anyhow::Error::msg)?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.listen))?;
    tracing::info!(listen = %config.listen, redis = %config.redis_target(), namespace = %config.namespace,
        priority_model = config.priority_model.as_str(), "ojs-server started");
    ojs_server::run(listener, config, shutdown_signal()).await
}

/// `--print-lua-library`: the library as Redis gets it (`FUNCTION LOAD`), byte for byte. A reader that
/// stops early (`| head`) is no error.
fn print_lua_library() -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out
        .write_all(ojs_store::scripts::LIBRARY.as_bytes())
        .and_then(|()| out.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
