//! `ojs-server`: parse the configuration, start logging, serve until SIGTERM or Ctrl-C.

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
    ojs_store::Keys::check_namespace(&config.namespace).map_err(anyhow::Error::msg)?;
    config.validate().map_err(anyhow::Error::msg)?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.listen))?;
    tracing::info!(listen = %config.listen, redis = %config.redis_target(), namespace = %config.namespace,
        priority_model = config.priority_model.as_str(), "ojs-server started");
    ojs_server::run(listener, config, shutdown_signal()).await
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
